//! A buffer on a server: tensor data in and out.

use std::ffi::c_void;
use std::sync::Arc;

use ggml_backend_rs_rpc::{Client, WireTensor};

use super::on_wire::{server_pads, wire};
use super::state::{buffer, lock, RpcDevice, BUFFERS, DEVICES};
use crate::abi::log::log_error;
use crate::abi::*;

pub(super) const BUFFER_IFACE: ggml_backend_buffer_i = ggml_backend_buffer_i {
    free_buffer: Some(buffer_free),
    get_base: Some(buffer_get_base),
    init_tensor: Some(buffer_init_tensor),
    memset_tensor: Some(buffer_memset_tensor),
    set_tensor: Some(buffer_set_tensor),
    get_tensor: Some(buffer_get_tensor),
    set_tensor_2d: None,
    get_tensor_2d: None,
    cpy_tensor: Some(buffer_cpy_tensor),
    clear: Some(buffer_clear),
    reset: None,
};

unsafe extern "C" fn buffer_free(buf: ggml_backend_buffer_t) {
    if let Some(b) = BUFFERS.remove(buf as usize) {
        // The server drops its stored graphs with any buffer: the next graph of each of its
        // devices goes in full. Their graph locks are held while the free is queued, so that no
        // graph queued in between is taken for stored.
        let same: Vec<&'static RpcDevice> = lock(&DEVICES)
            .iter()
            .copied()
            .filter(|d| Arc::ptr_eq(&d.remote, &b.dev.remote))
            .collect();
        let mut graphs: Vec<_> = same.iter().map(|d| lock(&d.last_graph)).collect();
        let handle = b.handle;
        b.dev.remote.post(move |c| {
            let _ = c.free_buffer(handle);
        });
        graphs.iter_mut().for_each(|g| **g = 0);
    }
}

unsafe extern "C" fn buffer_get_base(buf: ggml_backend_buffer_t) -> *mut c_void {
    buffer(buf).base as usize as *mut c_void
}

/// The tensor behind a vtable argument and its wire form for `d`'s server; None (logged) when it
/// cannot be sent.
pub(super) fn on_wire(d: &RpcDevice, tensor: *const ggml_tensor) -> Option<(Tensor, WireTensor)> {
    // SAFETY: ggml passes NULL or a live tensor to every buffer and backend entry.
    let t = unsafe { Tensor::from_ptr(tensor as *mut ggml_tensor) }?;
    match wire(t, &d.remote) {
        Ok(w) => Some((t, w)),
        Err(e) => {
            log_error!("{}: {e}", d.long_name.to_string_lossy());
            None
        }
    }
}

unsafe extern "C" fn buffer_init_tensor(
    buf: ggml_backend_buffer_t,
    tensor: *mut ggml_tensor,
) -> ggml_status {
    let b = buffer(buf);
    let Some((t, w)) = on_wire(b.dev, tensor) else {
        return GGML_STATUS_FAILED;
    };
    if server_pads(t) {
        // a failure ends the connection (logged); the next compute reports it
        let _ = b.dev.remote.call(move |c: &mut Client| c.init_tensor(&w));
    }
    GGML_STATUS_SUCCESS
}

unsafe extern "C" fn buffer_memset_tensor(
    buf: ggml_backend_buffer_t,
    tensor: *mut ggml_tensor,
    value: u8,
    offset: usize,
    size: usize,
) {
    let b = buffer(buf);
    if let Some((_, w)) = on_wire(b.dev, tensor) {
        let _ = b
            .dev
            .remote
            .call(move |c: &mut Client| c.memset_tensor(&w, offset as u64, size as u64, value));
    }
}

/// Sends `data` to `w` at `offset`: weights through the server's cache (by hash, when large),
/// anything else directly.
pub(super) fn upload(c: &mut Client, w: &WireTensor, weights: bool, offset: usize, data: &[u8]) {
    let _ = if weights {
        c.set_weights(w, offset as u64, data).map(|_| ())
    } else {
        c.set_tensor(w, offset as u64, data)
    };
}

unsafe extern "C" fn buffer_set_tensor(
    buf: ggml_backend_buffer_t,
    tensor: *mut ggml_tensor,
    data: *const c_void,
    offset: usize,
    size: usize,
) {
    let b = buffer(buf);
    let Some((_, w)) = on_wire(b.dev, tensor) else {
        return;
    };
    // SAFETY: a live buffer (checked above).
    let weights = unsafe { Buffer::from_ptr(buf) }.is_some_and(|h| h.usage() == USAGE_WEIGHTS);
    let at = data as usize;
    let _ = b.dev.remote.call(move |c: &mut Client| {
        // SAFETY: ggml_backend_tensor_set passes `size` readable bytes (checked against the
        // tensor), readable until it returns; `call` returns after this job.
        let bytes = unsafe { host_bytes(at, size) };
        upload(c, &w, weights, offset, bytes)
    });
}

unsafe extern "C" fn buffer_get_tensor(
    buf: ggml_backend_buffer_t,
    tensor: *const ggml_tensor,
    data: *mut c_void,
    offset: usize,
    size: usize,
) {
    let b = buffer(buf);
    let at = data as usize;
    let Some((_, w)) = on_wire(b.dev, tensor) else {
        // SAFETY: ggml_backend_tensor_get passes `size` writable bytes (checked against the
        // tensor).
        unsafe { read_failed(at, size) };
        return;
    };
    // SAFETY: as above, writable until ggml_backend_tensor_get returns; `call` returns after
    // this job.
    let _ = b
        .dev
        .remote
        .call(move |c: &mut Client| unsafe { read_into(c, &w, offset, at, size) });
}

/// Reads `size` bytes of `w` from `offset` into the caller's memory at `at`: zeros where the
/// server cannot give them.
///
/// # Safety
/// `at` is the address of `size` writable bytes that nothing else uses until this returns.
pub(super) unsafe fn read_into(
    c: &mut Client,
    w: &WireTensor,
    offset: usize,
    at: usize,
    size: usize,
) {
    // SAFETY: this function's contract.
    let out = unsafe { host_bytes_mut(at, size) };
    if !out.is_empty() && c.get_tensor(w, offset as u64, out).is_err() {
        out.fill(0);
    }
}

/// Zeros for a read that cannot be made.
///
/// # Safety
/// As [`read_into`].
pub(super) unsafe fn read_failed(at: usize, size: usize) {
    // SAFETY: this function's contract.
    unsafe { host_bytes_mut(at, size) }.fill(0);
}

/// The caller's `size` bytes at `at`; empty, without touching the pointer (which ggml may pass
/// as NULL or dangling), when `size` is 0.
///
/// # Safety
/// When `size` > 0, `at` is the address of `size` readable bytes that stay live and unwritten
/// for `'a`.
pub(super) unsafe fn host_bytes<'a>(at: usize, size: usize) -> &'a [u8] {
    if size == 0 {
        return &[];
    }
    // SAFETY: this function's contract, with a non-zero size.
    unsafe { std::slice::from_raw_parts(at as *const u8, size) }
}

/// As [`host_bytes`], writable.
///
/// # Safety
/// When `size` > 0, `at` is the address of `size` writable bytes that nothing else uses for
/// `'a`.
unsafe fn host_bytes_mut<'a>(at: usize, size: usize) -> &'a mut [u8] {
    if size == 0 {
        return &mut [];
    }
    // SAFETY: this function's contract, with a non-zero size.
    unsafe { std::slice::from_raw_parts_mut(at as *mut u8, size) }
}

unsafe extern "C" fn buffer_cpy_tensor(
    buf: ggml_backend_buffer_t,
    src: *const ggml_tensor,
    dst: *mut ggml_tensor,
) -> bool {
    let b = buffer(buf);
    // SAFETY: ggml_backend_buffer_copy_tensor passes live tensors.
    let Some(s) = (unsafe { Tensor::from_ptr(src as *mut ggml_tensor) }) else {
        return false;
    };
    // only between buffers of one server: the protocol has no copies between servers
    let same_server = BUFFERS
        .get(s.buffer() as usize)
        .is_some_and(|sb| Arc::ptr_eq(&sb.dev.remote, &b.dev.remote));
    if !same_server {
        return false;
    }
    let (Some((_, ws)), Some((_, wd))) = (on_wire(b.dev, src), on_wire(b.dev, dst)) else {
        return false;
    };
    matches!(
        b.dev
            .remote
            .call(move |c: &mut Client| c.copy_tensor(&ws, &wd)),
        Some(Ok(true))
    )
}

unsafe extern "C" fn buffer_clear(buf: ggml_backend_buffer_t, value: u8) {
    let b = buffer(buf);
    let handle = b.handle;
    let _ = b
        .dev
        .remote
        .call(move |c: &mut Client| c.clear_buffer(handle, value));
}
