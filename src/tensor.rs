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

/// # Safety
/// `data` is readable for `size` bytes.
pub unsafe fn set(tensor: Tensor, data: *const c_void, offset: usize, size: usize) {
    let buf = data_buffer(tensor, "ggml_backend_tensor_set");
    if size == 0 {
        return;
    }
    check_host_ptr(data, "ggml_backend_tensor_set");
    check_range(tensor, offset.checked_add(size), "ggml_backend_tensor_set");
    // SAFETY: `buf` holds the tensor's data, `offset + size` lies inside the tensor (checked
    // above) and `data` is readable for `size` bytes (this function's contract).
    unsafe { buf.set_tensor(tensor, data, offset, size) };
}

/// # Safety
/// `data` is writable for `size` bytes.
pub unsafe fn get(tensor: Tensor, data: *mut c_void, offset: usize, size: usize) {
    let buf = data_buffer(tensor, "ggml_backend_tensor_get");
    if size == 0 {
        return;
    }
    check_host_ptr(data, "ggml_backend_tensor_get");
    check_range(tensor, offset.checked_add(size), "ggml_backend_tensor_get");
    // SAFETY: `buf` holds the tensor's data, `offset + size` lies inside the tensor (checked
    // above) and `data` is writable for `size` bytes (this function's contract).
    unsafe { buf.get_tensor(tensor, data, offset, size) };
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

/// # Safety
/// Host memory `data + i*stride_data .. + size` is readable for every block `i`.
pub unsafe fn set_2d(tensor: Tensor, data: *const c_void, s: Strided) {
    let buf = data_buffer(tensor, "ggml_backend_tensor_set_2d");
    check_host_span(&s, "ggml_backend_tensor_set_2d");
    match buf.iface().set_tensor_2d {
        Some(set_2d) if s.n_copies > 1 => {
            if s.size == 0 {
                return;
            }
            check_host_ptr(data, "ggml_backend_tensor_set_2d");
            check_range(tensor, s.tensor_end(), "ggml_backend_tensor_set_2d");
            // SAFETY: vtable entry of the live buffer holding the tensor's data; every block
            // lies inside the tensor (checked above), the host span does not overflow
            // (check_host_span) and each host block is readable (this function's contract).
            unsafe {
                set_2d(
                    buf.as_ptr(),
                    tensor.as_ptr(),
                    data,
                    s.offset,
                    s.size,
                    s.n_copies,
                    s.stride_tensor,
                    s.stride_data,
                )
            };
        }
        _ => {
            check_range_if_any(tensor, s, "ggml_backend_tensor_set_2d");
            for i in 0..s.n_copies {
                let (t_off, d_off) = s.block(i);
                // SAFETY: host block `i` (`data + i*stride_data`, `size` bytes) is readable
                // (this function's contract); `set` checks the tensor side.
                unsafe {
                    set(
                        tensor,
                        (data as *const u8).wrapping_add(d_off) as *const c_void,
                        t_off,
                        s.size,
                    )
                };
            }
        }
    }
}

/// # Safety
/// Host memory `data + i*stride_data .. + size` is writable for every block `i`.
pub unsafe fn get_2d(tensor: Tensor, data: *mut c_void, s: Strided) {
    let buf = data_buffer(tensor, "ggml_backend_tensor_get_2d");
    check_host_span(&s, "ggml_backend_tensor_get_2d");
    // Upstream tests `set_tensor_2d` here; a buffer with only one of the pair would then call
    // a NULL `get_tensor_2d`. We test the entry we are about to call.
    match buf.iface().get_tensor_2d {
        Some(get_2d) if s.n_copies > 1 => {
            if s.size == 0 {
                return;
            }
            check_host_ptr(data, "ggml_backend_tensor_get_2d");
            check_range(tensor, s.tensor_end(), "ggml_backend_tensor_get_2d");
            // SAFETY: vtable entry of the live buffer holding the tensor's data; every block
            // lies inside the tensor (checked above), the host span does not overflow
            // (check_host_span) and each host block is writable (this function's contract).
            unsafe {
                get_2d(
                    buf.as_ptr(),
                    tensor.as_ptr(),
                    data,
                    s.offset,
                    s.size,
                    s.n_copies,
                    s.stride_tensor,
                    s.stride_data,
                )
            };
        }
        _ => {
            check_range_if_any(tensor, s, "ggml_backend_tensor_get_2d");
            for i in 0..s.n_copies {
                let (t_off, d_off) = s.block(i);
                // SAFETY: host block `i` (`data + i*stride_data`, `size` bytes) is writable
                // (this function's contract); `get` checks the tensor side.
                unsafe {
                    get(
                        tensor,
                        (data as *mut u8).wrapping_add(d_off) as *mut c_void,
                        t_off,
                        s.size,
                    )
                };
            }
        }
    }
}

/// The block loop would check each block; checking the whole span first also rejects an
/// overflowing stride before any block is written, so a bad call changes nothing.
fn check_range_if_any(tensor: Tensor, s: Strided, func: &str) {
    if s.n_copies > 0 && s.size > 0 {
        check_range(tensor, s.tensor_end(), func);
    }
}

/// # Safety
/// `data` is readable for `size` bytes until the backend is synchronized.
pub unsafe fn set_async(
    backend: Backend,
    tensor: Tensor,
    data: *const c_void,
    offset: usize,
    size: usize,
) {
    check_range(
        tensor,
        offset.checked_add(size),
        "ggml_backend_tensor_set_async",
    );
    match backend.iface().set_tensor_async {
        Some(f) => {
            if size > 0 {
                check_host_ptr(data, "ggml_backend_tensor_set_async");
            }
            // SAFETY: vtable entry of a live backend with a live, allocated tensor;
            // `offset + size` lies inside it (checked above) and `data` stays readable for
            // `size` bytes until the backend is synchronized (this function's contract).
            unsafe { f(backend.as_ptr(), tensor.as_ptr(), data, offset, size) }
        }
        None => {
            backend.synchronize();
            // SAFETY: `data` is readable for `size` bytes (this function's contract).
            unsafe { set(tensor, data, offset, size) };
        }
    }
}

/// # Safety
/// `data` is writable for `size` bytes until the backend is synchronized.
pub unsafe fn get_async(
    backend: Backend,
    tensor: Tensor,
    data: *mut c_void,
    offset: usize,
    size: usize,
) {
    check_range(
        tensor,
        offset.checked_add(size),
        "ggml_backend_tensor_get_async",
    );
    match backend.iface().get_tensor_async {
        Some(f) => {
            if size > 0 {
                check_host_ptr(data, "ggml_backend_tensor_get_async");
            }
            // SAFETY: vtable entry of a live backend with a live, allocated tensor;
            // `offset + size` lies inside it (checked above) and `data` stays writable for
            // `size` bytes until the backend is synchronized (this function's contract).
            unsafe { f(backend.as_ptr(), tensor.as_ptr(), data, offset, size) }
        }
        None => {
            backend.synchronize();
            // SAFETY: `data` is writable for `size` bytes (this function's contract).
            unsafe { get(tensor, data, offset, size) };
        }
    }
}

/// # Safety
/// As [`set_2d`], until the backend is synchronized.
pub unsafe fn set_2d_async(backend: Backend, tensor: Tensor, data: *const c_void, s: Strided) {
    ggml_assert!(
        !tensor.data().is_null(),
        "ggml_backend_tensor_set_2d_async: tensor '{}' not allocated",
        tensor.name_string()
    );
    check_host_span(&s, "ggml_backend_tensor_set_2d_async");
    match backend.iface().set_tensor_2d_async {
        Some(f) if s.n_copies > 1 => {
            if s.size == 0 {
                return;
            }
            check_host_ptr(data, "ggml_backend_tensor_set_2d_async");
            check_range(tensor, s.tensor_end(), "ggml_backend_tensor_set_2d_async");
            // SAFETY: vtable entry of a live backend with a live, allocated tensor; every
            // block lies inside the tensor (checked above), the host span does not overflow
            // (check_host_span) and each host block stays readable until the backend is
            // synchronized (this function's contract).
            unsafe {
                f(
                    backend.as_ptr(),
                    tensor.as_ptr(),
                    data,
                    s.offset,
                    s.size,
                    s.n_copies,
                    s.stride_tensor,
                    s.stride_data,
                )
            };
        }
        _ => {
            check_range_if_any(tensor, s, "ggml_backend_tensor_set_2d_async");
            for i in 0..s.n_copies {
                let (t_off, d_off) = s.block(i);
                // SAFETY: host block `i` (`data + i*stride_data`, `size` bytes) stays readable
                // until the backend is synchronized (this function's contract).
                unsafe {
                    set_async(
                        backend,
                        tensor,
                        (data as *const u8).wrapping_add(d_off) as *const c_void,
                        t_off,
                        s.size,
                    )
                };
            }
        }
    }
}

/// # Safety
/// As [`get_2d`], until the backend is synchronized.
pub unsafe fn get_2d_async(backend: Backend, tensor: Tensor, data: *mut c_void, s: Strided) {
    ggml_assert!(
        !tensor.data().is_null(),
        "ggml_backend_tensor_get_2d_async: tensor '{}' not allocated",
        tensor.name_string()
    );
    check_host_span(&s, "ggml_backend_tensor_get_2d_async");
    // As in get_2d: test the entry that will be called (upstream tests the set entry).
    match backend.iface().get_tensor_2d_async {
        Some(f) if s.n_copies > 1 => {
            if s.size == 0 {
                return;
            }
            check_host_ptr(data, "ggml_backend_tensor_get_2d_async");
            check_range(tensor, s.tensor_end(), "ggml_backend_tensor_get_2d_async");
            // SAFETY: vtable entry of a live backend with a live, allocated tensor; every
            // block lies inside the tensor (checked above), the host span does not overflow
            // (check_host_span) and each host block stays writable until the backend is
            // synchronized (this function's contract).
            unsafe {
                f(
                    backend.as_ptr(),
                    tensor.as_ptr(),
                    data,
                    s.offset,
                    s.size,
                    s.n_copies,
                    s.stride_tensor,
                    s.stride_data,
                )
            };
        }
        _ => {
            check_range_if_any(tensor, s, "ggml_backend_tensor_get_2d_async");
            for i in 0..s.n_copies {
                let (t_off, d_off) = s.block(i);
                // SAFETY: host block `i` (`data + i*stride_data`, `size` bytes) stays writable
                // until the backend is synchronized (this function's contract).
                unsafe {
                    get_async(
                        backend,
                        tensor,
                        (data as *mut u8).wrapping_add(d_off) as *mut c_void,
                        t_off,
                        s.size,
                    )
                };
            }
        }
    }
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
        unsafe { set(dst, src.data(), 0, nbytes) }
    } else if is_host(dst) {
        // SAFETY: as above, for `dst`.
        unsafe { get(src, dst.data(), 0, nbytes) }
    } else if !buffer_copy(src, dst) {
        log_debug!(
            "ggml_backend_tensor_copy: slow copy of '{}' through host memory",
            src.name_string()
        );
        let mut staging = vec![0u8; nbytes];
        // SAFETY: `staging` holds nbytes bytes.
        unsafe {
            get(src, staging.as_mut_ptr() as *mut c_void, 0, nbytes);
            set(dst, staging.as_ptr() as *const c_void, 0, nbytes);
        }
    }
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
    if src == dst {
        return;
    }
    if let Some(f) = backend_dst.iface().cpy_tensor_async {
        let src_ptr = backend_src.map_or(std::ptr::null_mut(), |b| b.as_ptr());
        // SAFETY: vtable entry of a live backend with live, same-layout tensors.
        if unsafe { f(src_ptr, backend_dst.as_ptr(), src.as_ptr(), dst.as_ptr()) } {
            return;
        }
    }
    if let Some(b) = backend_src {
        b.synchronize();
    }
    backend_dst.synchronize();
    copy(src, dst);
}
