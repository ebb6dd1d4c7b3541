//! Devices: `ggml_backend_dev_*` of one device.

use std::ffi::{c_char, c_void};

use super::handle_arg;
use crate::abi::*;

/// # Safety
/// `device` is a live device (NULL aborts).
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_dev_name(device: ggml_backend_dev_t) -> *const c_char {
    handle_arg!(device, Device, "ggml_backend_dev_name").name()
}

/// # Safety
/// `device` is a live device (NULL aborts).
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_dev_description(device: ggml_backend_dev_t) -> *const c_char {
    handle_arg!(device, Device, "ggml_backend_dev_description").description()
}

/// # Safety
/// `device` is a live device (NULL aborts); `free` and `total` are writable.
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_dev_memory(
    device: ggml_backend_dev_t,
    free: *mut usize,
    total: *mut usize,
) {
    let d = handle_arg!(device, Device, "ggml_backend_dev_memory");
    if free.is_null() {
        super::null_argument("ggml_backend_dev_memory", "free");
    }
    if total.is_null() {
        super::null_argument("ggml_backend_dev_memory", "total");
    }
    // The backend writes into locals: C may pass the same pointer twice, which two `&mut`
    // would not allow.
    let (mut f, mut t) = (0, 0);
    d.memory(&mut f, &mut t);
    // SAFETY: `free` and `total` are non-NULL (checked above) and writable (this function's
    // contract); raw writes, so the same pointer twice is fine (the last write wins, as in C).
    unsafe {
        free.write(f);
        total.write(t);
    }
}

/// # Safety
/// `device` is a live device (NULL aborts).
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_dev_type(
    device: ggml_backend_dev_t,
) -> ggml_backend_dev_type_raw {
    handle_arg!(device, Device, "ggml_backend_dev_type").dev_type()
}

/// # Safety
/// `device` is a live device (NULL aborts); `props` is writable.
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_dev_get_props(
    device: ggml_backend_dev_t,
    props: *mut ggml_backend_dev_props,
) {
    let d = handle_arg!(device, Device, "ggml_backend_dev_get_props");
    if props.is_null() {
        super::null_argument("ggml_backend_dev_get_props", "props");
    }
    // Backends fill in only what they know; everything else reads as zero / NULL.
    // SAFETY: `props` is non-NULL (checked above) and writable (this function's contract);
    // `ggml_backend_dev_props` is a plain C struct for which all-zero bytes are valid.
    unsafe { std::ptr::write_bytes(props, 0, 1) };
    // SAFETY: as above; the struct is now initialised.
    d.props(unsafe { &mut *props })
}

/// # Safety
/// `device` is a live device (NULL aborts).
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_dev_backend_reg(
    device: ggml_backend_dev_t,
) -> ggml_backend_reg_t {
    handle_arg!(device, Device, "ggml_backend_dev_backend_reg").reg()
}

/// # Safety
/// `device` is a live device (NULL aborts); `params` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_dev_init(
    device: ggml_backend_dev_t,
    params: *const c_char,
) -> ggml_backend_t {
    // SAFETY: `params` is NULL or a NUL-terminated string (this function's contract).
    handle_arg!(device, Device, "ggml_backend_dev_init")
        .init_backend(unsafe { super::c_str_arg(params) })
}

/// # Safety
/// `device` is a live device (NULL aborts).
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_dev_buffer_type(
    device: ggml_backend_dev_t,
) -> ggml_backend_buffer_type_t {
    handle_arg!(device, Device, "ggml_backend_dev_buffer_type").buffer_type()
}

/// # Safety
/// `device` is a live device (NULL aborts).
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_dev_host_buffer_type(
    device: ggml_backend_dev_t,
) -> ggml_backend_buffer_type_t {
    handle_arg!(device, Device, "ggml_backend_dev_host_buffer_type").host_buffer_type()
}

/// NULL when the device cannot wrap host memory (upstream calls the missing entry).
///
/// # Safety
/// `device` is a live device (NULL aborts); `ptr` addresses `size` bytes of host memory that
/// outlive the returned buffer.
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_dev_buffer_from_host_ptr(
    device: ggml_backend_dev_t,
    ptr: *mut c_void,
    size: usize,
    max_tensor_size: usize,
) -> ggml_backend_buffer_t {
    let d = handle_arg!(device, Device, "ggml_backend_dev_buffer_from_host_ptr");
    // SAFETY: `ptr` addresses `size` bytes of host memory that outlive the returned buffer
    // (this function's contract, passed on unchanged).
    unsafe { d.buffer_from_host_ptr(ptr, size, max_tensor_size) }
}

/// # Safety
/// `device` is a live device and `op` a live tensor (NULL aborts).
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_dev_supports_op(
    device: ggml_backend_dev_t,
    op: *const ggml_tensor,
) -> bool {
    let d = handle_arg!(device, Device, "ggml_backend_dev_supports_op");
    d.supports_op(handle_arg!(op, Tensor, "ggml_backend_dev_supports_op"))
}

/// # Safety
/// `device` is a live device and `buft` a live buffer type (NULL aborts).
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_dev_supports_buft(
    device: ggml_backend_dev_t,
    buft: ggml_backend_buffer_type_t,
) -> bool {
    let d = handle_arg!(device, Device, "ggml_backend_dev_supports_buft");
    d.supports_buft(handle_arg!(buft, Buft, "ggml_backend_dev_supports_buft"))
}

/// # Safety
/// `device` is a live device and `op` a live tensor (NULL aborts).
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_dev_offload_op(
    device: ggml_backend_dev_t,
    op: *const ggml_tensor,
) -> bool {
    let d = handle_arg!(device, Device, "ggml_backend_dev_offload_op");
    d.offload_op(handle_arg!(op, Tensor, "ggml_backend_dev_offload_op"))
}
