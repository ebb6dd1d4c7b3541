//! Tensor data access: reads, writes, fills and copies of tensor bytes, synchronous and
//! queued on a backend, with the 2D (strided, repeated) forms and their fallbacks.
//!
//! Every entry point checks the tensor is allocated and the byte range lies inside it
//! (with overflow-checked arithmetic) before a backend sees the request.

use std::ffi::c_void;

use crate::abi::log::{abort, ggml_assert, log_debug};
use crate::abi::*;

pub use ggml_backend_rs_core::transfer::Strided;

/// Aborts when the host side of `s` (its last block's start) overflows the address space.
fn check_host_span(s: &Strided, func: &str) {
    ggml_assert!(
        s.host_span().is_some(),
        "{func}: n_copies * stride_data overflows"
    );
}

/// The buffer that holds `tensor`'s data, checked to exist.
fn data_buffer(tensor: Tensor, func: &str) -> Buffer {
    match tensor.data_buffer() {
        Some(b) => b,
        None => abort(
            file!(),
            line!(),
            &format!("{func}: tensor '{}' buffer not set", tensor.name_string()),
        ),
    }
}

/// Checks the tensor is allocated and `[offset, end)` lies inside it.
fn check_range(tensor: Tensor, end: Option<usize>, func: &str) {
    ggml_assert!(
        !tensor.data().is_null(),
        "{func}: tensor '{}' not allocated",
        tensor.name_string()
    );
    let nbytes = tensor.nbytes();
    match end {
        Some(end) if end <= nbytes => {}
        _ => abort(
            file!(),
            line!(),
            &format!(
                "{func}: access out of bounds of tensor '{}' ({nbytes} bytes)",
                tensor.name_string()
            ),
        ),
    }
}

fn check_host_ptr(data: *const c_void, func: &str) {
    ggml_assert!(!data.is_null(), "{func}: data pointer is NULL");
}

pub fn memset(tensor: Tensor, value: u8, offset: usize, size: usize) {
    if size == 0 {
        return;
    }
    let buf = data_buffer(tensor, "ggml_backend_tensor_memset");
    check_range(
        tensor,
        offset.checked_add(size),
        "ggml_backend_tensor_memset",
    );
    buf.memset_tensor(tensor, value, offset, size);
}

/// The host side of a transfer, which gives its direction: the bytes written into the tensor
/// (`ggml_backend_tensor_set*`) or the room the bytes read from it go to (`_get*`).
#[derive(Clone, Copy, Debug)]
pub enum Host {
    /// Host to tensor: readable bytes.
    Src(*const c_void),
    /// Tensor to host: writable bytes.
    Dst(*mut c_void),
}

impl Host {
    fn ptr(self) -> *const c_void {
        match self {
            Host::Src(p) => p,
            Host::Dst(p) => p,
        }
    }

    /// The same side `by` bytes further on (the address is not dereferenced here).
    pub fn offset(self, by: usize) -> Host {
        match self {
            Host::Src(p) => Host::Src((p as *const u8).wrapping_add(by) as *const c_void),
            Host::Dst(p) => Host::Dst((p as *mut u8).wrapping_add(by) as *mut c_void),
        }
    }
}

/// Who carries a transfer out: the tensor's buffer, which returns when it is done, or a
/// backend, which queues it (the host memory must stay valid until it is synchronized).
#[derive(Clone, Copy, Debug)]
pub enum Via {
    Buffer,
    Backend(Backend),
}

/// The entry point a transfer is, for messages.
fn entry_point(via: Via, host: Host, strided: bool) -> &'static str {
    match (via, host, strided) {
        (Via::Buffer, Host::Src(_), false) => "ggml_backend_tensor_set",
        (Via::Buffer, Host::Dst(_), false) => "ggml_backend_tensor_get",
        (Via::Buffer, Host::Src(_), true) => "ggml_backend_tensor_set_2d",
        (Via::Buffer, Host::Dst(_), true) => "ggml_backend_tensor_get_2d",
        (Via::Backend(_), Host::Src(_), false) => "ggml_backend_tensor_set_async",
        (Via::Backend(_), Host::Dst(_), false) => "ggml_backend_tensor_get_async",
        (Via::Backend(_), Host::Src(_), true) => "ggml_backend_tensor_set_2d_async",
        (Via::Backend(_), Host::Dst(_), true) => "ggml_backend_tensor_get_2d_async",
    }
}

/// Moves bytes `[offset, offset + size)` of `tensor` between it and `host`:
/// `ggml_backend_tensor_set`, `_get` and their `_async` forms. A backend without asynchronous
/// transfers is synchronized and the buffer does it.
///
/// # Safety
/// `host` holds `size` bytes, readable (`Src`) or writable and used by nothing else (`Dst`),
/// until the transfer is done: when this returns (`Via::Buffer`) or when the backend is
/// synchronized.
pub unsafe fn transfer(via: Via, tensor: Tensor, host: Host, offset: usize, size: usize) {
    let func = entry_point(via, host, false);
    let backend = match via {
        Via::Buffer => {
            let buf = data_buffer(tensor, func);
            if size == 0 {
                return;
            }
            check_host_ptr(host.ptr(), func);
            check_range(tensor, offset.checked_add(size), func);
            // SAFETY: `buf` holds the tensor's data and `offset + size` lies inside the tensor
            // (checked above); `host` holds `size` bytes (this function's contract).
            unsafe {
                match host {
                    Host::Src(data) => buf.set_tensor(tensor, data, offset, size),
                    Host::Dst(data) => buf.get_tensor(tensor, data, offset, size),
                }
            }
            return;
        }
        Via::Backend(b) => b,
    };
    check_range(tensor, offset.checked_add(size), func);
    let (b, t) = (backend.as_ptr(), tensor.as_ptr());
    let iface = backend.iface();
    let queued = match host {
        Host::Src(data) => iface.set_tensor_async.map(|f| {
            check_host_ptr_if_any(data, size, func);
            // SAFETY: vtable entry of a live backend with a live, allocated tensor;
            // `offset + size` lies inside it (checked above) and `data` holds `size` readable
            // bytes until the backend is synchronized (this function's contract).
            unsafe { f(b, t, data, offset, size) }
        }),
        Host::Dst(data) => iface.get_tensor_async.map(|f| {
            check_host_ptr_if_any(data, size, func);
            // SAFETY: as above, with `size` writable bytes.
            unsafe { f(b, t, data, offset, size) }
        }),
    };
    if queued.is_none() {
        backend.synchronize();
        // SAFETY: this function's contract.
        unsafe { transfer(Via::Buffer, tensor, host, offset, size) };
    }
}

fn check_host_ptr_if_any(data: *const c_void, size: usize, func: &str) {
    if size > 0 {
        check_host_ptr(data, func);
    }
}

/// Moves the blocks of `s` between `tensor` and `host`: `ggml_backend_tensor_set_2d`, `_get_2d`
/// and their `_async` forms. Where the buffer (or backend) has no 2D entry, or there is one
/// block, block by block with [`transfer`].
///
/// # Safety
/// Host memory `host + i*stride_data .. + size` is readable (`Src`) or writable and used by
/// nothing else (`Dst`) for every block `i`, until the transfer is done (as [`transfer`]).
pub unsafe fn transfer_2d(via: Via, tensor: Tensor, host: Host, s: Strided) {
    let func = entry_point(via, host, true);
    let to = match via {
        Via::Buffer => Target::Buffer(data_buffer(tensor, func)),
        Via::Backend(b) => {
            ggml_assert!(
                !tensor.data().is_null(),
                "{func}: tensor '{}' not allocated",
                tensor.name_string()
            );
            Target::Backend(b)
        }
    };
    check_host_span(&s, func);
    // Before the one call of the 2D entry: nothing to move, or the host and tensor sides
    // checked.
    let ready = || {
        s.size > 0 && {
            check_host_ptr(host.ptr(), func);
            check_range(tensor, s.tensor_end(), func);
            true
        }
    };
    let t = tensor.as_ptr();
    let (o, z, n, st, sd) = (s.offset, s.size, s.n_copies, s.stride_tensor, s.stride_data);
    // The entry that is called is the one tested (upstream tests the `set` entry for both
    // directions: a buffer or backend with only one of the pair would get a NULL call).
    // Each call below: the 2D entry of the live buffer holding the tensor's data, or of a
    // live backend; every block lies inside the tensor and the host span does not overflow
    // (checked by `ready` and `check_host_span`), and each host block is as this function's
    // contract says.
    let called = n > 1
        && match (to, host) {
            (Target::Buffer(b), Host::Src(d)) => b.iface().set_tensor_2d.map(|f| {
                // SAFETY: as stated above the match.
                ready().then(|| unsafe { f(b.as_ptr(), t, d, o, z, n, st, sd) })
            }),
            (Target::Buffer(b), Host::Dst(d)) => b.iface().get_tensor_2d.map(|f| {
                // SAFETY: as stated above the match.
                ready().then(|| unsafe { f(b.as_ptr(), t, d, o, z, n, st, sd) })
            }),
            (Target::Backend(b), Host::Src(d)) => b.iface().set_tensor_2d_async.map(|f| {
                // SAFETY: as stated above the match.
                ready().then(|| unsafe { f(b.as_ptr(), t, d, o, z, n, st, sd) })
            }),
            (Target::Backend(b), Host::Dst(d)) => b.iface().get_tensor_2d_async.map(|f| {
                // SAFETY: as stated above the match.
                ready().then(|| unsafe { f(b.as_ptr(), t, d, o, z, n, st, sd) })
            }),
        }
        .is_some();
    if called {
        return;
    }
    if s.n_copies > 0 && s.size > 0 {
        // The block loop would check each block; checking the whole span first also rejects
        // an overflowing stride before any block is written, so a bad call changes nothing.
        check_range(tensor, s.tensor_end(), func);
    }
    for i in 0..s.n_copies {
        let (t_off, h_off) = s.block(i);
        // SAFETY: host block `i` (`host + i*stride_data`, `size` bytes) is as this function's
        // contract says; `transfer` checks the tensor side.
        unsafe { transfer(via, tensor, host.offset(h_off), t_off, s.size) };
    }
}

/// What carries out a 2D transfer: the buffer holding the tensor, or the backend.
#[derive(Clone, Copy)]
enum Target {
    Buffer(Buffer),
    Backend(Backend),
}

/// `ggml_backend_buffer_copy_tensor`: the destination buffer's own copy, if it has one.
/// Backends copy all of `src`'s bytes, so a smaller `dst` stops the program here (upstream
/// lets the backend write past it).
pub fn buffer_copy(src: Tensor, dst: Tensor) -> bool {
    const F: &str = "ggml_backend_buffer_copy_tensor";
    ggml_assert!(
        src.nbytes() <= dst.nbytes(),
        "{F}: '{}' ({} bytes) does not fit in '{}' ({} bytes)",
        src.name_string(),
        src.nbytes(),
        dst.name_string(),
        dst.nbytes()
    );
    data_buffer(dst, F).cpy_tensor(src, dst)
}

pub(crate) fn is_host(t: Tensor) -> bool {
    t.data_buffer()
        .map(|b| b.buft_handle().is_host())
        .unwrap_or(false)
}

/// Copies all bytes of `src` into `dst` (same layout), whatever buffers they live in:
/// directly when either side is host memory, else by the destination buffer's copy, else
/// through a host staging buffer.
pub fn copy(src: Tensor, dst: Tensor) {
    ggml_assert!(
        src.same_layout(dst),
        "ggml_backend_tensor_copy: cannot copy tensors with different layouts ('{}' -> '{}')",
        src.name_string(),
        dst.name_string()
    );
    if src == dst {
        return;
    }
    let nbytes = src.nbytes();
    if is_host(src) {
        // SAFETY: a host tensor's data pointer addresses its nbytes of memory.
        unsafe { transfer(Via::Buffer, dst, Host::Src(src.data()), 0, nbytes) }
    } else if is_host(dst) {
        // SAFETY: as above, for `dst`.
        unsafe { transfer(Via::Buffer, src, Host::Dst(dst.data()), 0, nbytes) }
    } else if !buffer_copy(src, dst) {
        log_debug!(
            "ggml_backend_tensor_copy: slow copy of '{}' through host memory",
            src.name_string()
        );
        let mut staging = vec![0u8; nbytes];
        // SAFETY: `staging` holds nbytes bytes.
        unsafe {
            transfer(
                Via::Buffer,
                src,
                Host::Dst(staging.as_mut_ptr().cast()),
                0,
                nbytes,
            );
            transfer(
                Via::Buffer,
                dst,
                Host::Src(staging.as_ptr().cast()),
                0,
                nbytes,
            );
        }
    }
}

/// Whether `backend_dst` queued the copy of `src` into `dst` (same layout) after the work
/// already submitted to `backend_src`; `false` where it has no asynchronous copy or declines
/// this one (ggml-vulkan between two GPUs, ggml-cuda from memory it does not know), and nothing
/// was copied.
pub fn copy_queued(
    backend_src: Option<Backend>,
    backend_dst: Backend,
    src: Tensor,
    dst: Tensor,
) -> bool {
    let Some(f) = backend_dst.iface().cpy_tensor_async else {
        return false;
    };
    let src_ptr = backend_src.map_or(std::ptr::null_mut(), |b| b.as_ptr());
    // SAFETY: vtable entry of a live backend with live tensors; callers give same-layout ones.
    unsafe { f(src_ptr, backend_dst.as_ptr(), src.as_ptr(), dst.as_ptr()) }
}

/// Copy queued after the work already submitted to `backend_src`; falls back to a
/// synchronous copy after both backends have drained their queues.
pub fn copy_async(backend_src: Option<Backend>, backend_dst: Backend, src: Tensor, dst: Tensor) {
    ggml_assert!(
        src.same_layout(dst),
        "ggml_backend_tensor_copy_async: cannot copy tensors with different layouts ('{}' -> '{}')",
        src.name_string(),
        dst.name_string()
    );
    if src == dst || copy_queued(backend_src, backend_dst, src, dst) {
        return;
    }
    if let Some(b) = backend_src {
        b.synchronize();
    }
    backend_dst.synchronize();
    copy(src, dst);
}
