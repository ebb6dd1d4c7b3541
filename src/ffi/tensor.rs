//! Tensor data access and placement: `ggml_backend_tensor_*`, `ggml_backend_view_init`.
//!
//! Host pointers cannot be validated beyond NULL; like memcpy, these functions trust the
//! caller for the extent of host memory and check everything on the tensor side.

use std::ffi::c_void;

use super::{handle_arg, optional_arg};
use crate::abi::*;
use crate::tensor::{self, Host, Strided, Via};

/// # Safety
/// `tensor` is a live tensor (NULL aborts); `data` is readable for `size` bytes.
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_tensor_set(
    tensor: *mut ggml_tensor,
    data: *const c_void,
    offset: usize,
    size: usize,
) {
    let t = handle_arg!(tensor, Tensor, "ggml_backend_tensor_set");
    // SAFETY: `data` is readable for `size` bytes (this function's contract).
    unsafe { tensor::transfer(Via::Buffer, t, Host::Src(data), offset, size) }
}

/// # Safety
/// `tensor` is a live tensor (NULL aborts); `data` is writable for `size` bytes.
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_tensor_get(
    tensor: *const ggml_tensor,
    data: *mut c_void,
    offset: usize,
    size: usize,
) {
    let t = handle_arg!(tensor, Tensor, "ggml_backend_tensor_get");
    // SAFETY: `data` is writable for `size` bytes (this function's contract).
    unsafe { tensor::transfer(Via::Buffer, t, Host::Dst(data), offset, size) }
}

/// # Safety
/// `tensor` is a live tensor (NULL aborts); each of the `n_copies` blocks
/// `data + i*stride_data .. + size` is readable.
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_tensor_set_2d(
    tensor: *mut ggml_tensor,
    data: *const c_void,
    offset: usize,
    size: usize,
    n_copies: usize,
    stride_tensor: usize,
    stride_data: usize,
) {
    let t = handle_arg!(tensor, Tensor, "ggml_backend_tensor_set_2d");
    let s = Strided {
        offset,
        size,
        n_copies,
        stride_tensor,
        stride_data,
    };
    // SAFETY: each host block `data + i*stride_data .. + size` is readable (this function's
    // contract), as `tensor::set_2d` requires.
    unsafe { tensor::transfer_2d(Via::Buffer, t, Host::Src(data), s) }
}

/// # Safety
/// `tensor` is a live tensor (NULL aborts); each of the `n_copies` blocks
/// `data + i*stride_data .. + size` is writable.
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_tensor_get_2d(
    tensor: *const ggml_tensor,
    data: *mut c_void,
    offset: usize,
    size: usize,
    n_copies: usize,
    stride_tensor: usize,
    stride_data: usize,
) {
    let t = handle_arg!(tensor, Tensor, "ggml_backend_tensor_get_2d");
    let s = Strided {
        offset,
        size,
        n_copies,
        stride_tensor,
        stride_data,
    };
    // SAFETY: each host block `data + i*stride_data .. + size` is writable (this function's
    // contract), as `tensor::get_2d` requires.
    unsafe { tensor::transfer_2d(Via::Buffer, t, Host::Dst(data), s) }
}

/// # Safety
/// `tensor` is a live tensor (NULL aborts).
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_tensor_memset(
    tensor: *mut ggml_tensor,
    value: u8,
    offset: usize,
    size: usize,
) {
    tensor::memset(
        handle_arg!(tensor, Tensor, "ggml_backend_tensor_memset"),
        value,
        offset,
        size,
    )
}

/// # Safety
/// `backend` is a live backend and `tensor` a live tensor (NULL aborts); `data` stays readable
/// for `size` bytes until the backend is synchronized.
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_tensor_set_async(
    backend: ggml_backend_t,
    tensor: *mut ggml_tensor,
    data: *const c_void,
    offset: usize,
    size: usize,
) {
    let b = handle_arg!(backend, Backend, "ggml_backend_tensor_set_async");
    let t = handle_arg!(tensor, Tensor, "ggml_backend_tensor_set_async");
    // SAFETY: `data` stays readable for `size` bytes until the backend is synchronized (this
    // function's contract).
    unsafe { tensor::transfer(Via::Backend(b), t, Host::Src(data), offset, size) }
}

/// # Safety
/// `backend` is a live backend and `tensor` a live tensor (NULL aborts); `data` stays writable
/// for `size` bytes until the backend is synchronized.
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_tensor_get_async(
    backend: ggml_backend_t,
    tensor: *const ggml_tensor,
    data: *mut c_void,
    offset: usize,
    size: usize,
) {
    let b = handle_arg!(backend, Backend, "ggml_backend_tensor_get_async");
    let t = handle_arg!(tensor, Tensor, "ggml_backend_tensor_get_async");
    // SAFETY: `data` stays writable for `size` bytes until the backend is synchronized (this
    // function's contract).
    unsafe { tensor::transfer(Via::Backend(b), t, Host::Dst(data), offset, size) }
}

/// # Safety
/// `backend` is a live backend (NULL aborts); the rest as `ggml_backend_tensor_set_2d`, until
/// the backend is synchronized.
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_tensor_set_2d_async(
    backend: ggml_backend_t,
    tensor: *mut ggml_tensor,
    data: *const c_void,
    offset: usize,
    size: usize,
    n_copies: usize,
    stride_tensor: usize,
    stride_data: usize,
) {
    let b = handle_arg!(backend, Backend, "ggml_backend_tensor_set_2d_async");
    let t = handle_arg!(tensor, Tensor, "ggml_backend_tensor_set_2d_async");
    let s = Strided {
        offset,
        size,
        n_copies,
        stride_tensor,
        stride_data,
    };
    // SAFETY: each host block `data + i*stride_data .. + size` stays readable until the
    // backend is synchronized (this function's contract).
    unsafe { tensor::transfer_2d(Via::Backend(b), t, Host::Src(data), s) }
}

/// # Safety
/// `backend` is a live backend (NULL aborts); the rest as `ggml_backend_tensor_get_2d`, until
/// the backend is synchronized.
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_tensor_get_2d_async(
    backend: ggml_backend_t,
    tensor: *const ggml_tensor,
    data: *mut c_void,
    offset: usize,
    size: usize,
    n_copies: usize,
    stride_tensor: usize,
    stride_data: usize,
) {
    let b = handle_arg!(backend, Backend, "ggml_backend_tensor_get_2d_async");
    let t = handle_arg!(tensor, Tensor, "ggml_backend_tensor_get_2d_async");
    let s = Strided {
        offset,
        size,
        n_copies,
        stride_tensor,
        stride_data,
    };
    // SAFETY: each host block `data + i*stride_data .. + size` stays writable until the
    // backend is synchronized (this function's contract).
    unsafe { tensor::transfer_2d(Via::Backend(b), t, Host::Dst(data), s) }
}

/// # Safety
/// `src` and `dst` are live tensors (NULL aborts).
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_tensor_copy(src: *const ggml_tensor, dst: *mut ggml_tensor) {
    let s = handle_arg!(src, Tensor, "ggml_backend_tensor_copy");
    tensor::copy(s, handle_arg!(dst, Tensor, "ggml_backend_tensor_copy"))
}

/// # Safety
/// `src` and `dst` are live tensors and `backend_dst` a live backend (NULL aborts); `backend_src`
/// is NULL or a live backend; the tensors stay live until the backends are synchronized.
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_tensor_copy_async(
    backend_src: ggml_backend_t,
    backend_dst: ggml_backend_t,
    src: *const ggml_tensor,
    dst: *mut ggml_tensor,
) {
    let s = handle_arg!(src, Tensor, "ggml_backend_tensor_copy_async");
    let d = handle_arg!(dst, Tensor, "ggml_backend_tensor_copy_async");
    let b_dst = handle_arg!(backend_dst, Backend, "ggml_backend_tensor_copy_async");
    tensor::copy_async(optional_arg!(backend_src, Backend), b_dst, s, d)
}

/// # Safety
/// `buffer` is a live buffer and `tensor` a live tensor (NULL aborts); `addr` must lie in the
/// buffer (checked).
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_tensor_alloc(
    buffer: ggml_backend_buffer_t,
    tensor: *mut ggml_tensor,
    addr: *mut c_void,
) -> ggml_status {
    let t = handle_arg!(tensor, Tensor, "ggml_backend_tensor_alloc");
    crate::backend::tensor_alloc(
        handle_arg!(buffer, Buffer, "ggml_backend_tensor_alloc"),
        t,
        addr,
    )
}

/// # Safety
/// `tensor` is a live tensor (NULL aborts).
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_view_init(tensor: *mut ggml_tensor) -> ggml_status {
    crate::backend::view_init(handle_arg!(tensor, Tensor, "ggml_backend_view_init"))
}
