//! Buffer types: `ggml_backend_buft_*`.

use std::ffi::c_char;

use super::handle_arg;
use crate::abi::*;

/// # Safety
/// `buft` is a live buffer type (NULL aborts).
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_buft_name(buft: ggml_backend_buffer_type_t) -> *const c_char {
    handle_arg!(buft, Buft, "ggml_backend_buft_name").name()
}

/// # Safety
/// `buft` is a live buffer type (NULL aborts).
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_buft_alloc_buffer(
    buft: ggml_backend_buffer_type_t,
    size: usize,
) -> ggml_backend_buffer_t {
    crate::buffer::alloc(
        handle_arg!(buft, Buft, "ggml_backend_buft_alloc_buffer"),
        size,
    )
}

/// # Safety
/// `buft` is a live buffer type (NULL aborts).
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_buft_get_alignment(
    buft: ggml_backend_buffer_type_t,
) -> usize {
    handle_arg!(buft, Buft, "ggml_backend_buft_get_alignment").alignment()
}

/// # Safety
/// `buft` is a live buffer type (NULL aborts).
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_buft_get_max_size(buft: ggml_backend_buffer_type_t) -> usize {
    handle_arg!(buft, Buft, "ggml_backend_buft_get_max_size").max_size()
}

/// # Safety
/// `buft` is a live buffer type and `tensor` a live tensor (NULL aborts).
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_buft_get_alloc_size(
    buft: ggml_backend_buffer_type_t,
    tensor: *const ggml_tensor,
) -> usize {
    let buft = handle_arg!(buft, Buft, "ggml_backend_buft_get_alloc_size");
    buft.alloc_size(handle_arg!(
        tensor,
        Tensor,
        "ggml_backend_buft_get_alloc_size"
    ))
}

/// # Safety
/// `buft` is a live buffer type (NULL aborts).
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_buft_is_host(buft: ggml_backend_buffer_type_t) -> bool {
    handle_arg!(buft, Buft, "ggml_backend_buft_is_host").is_host()
}

/// # Safety
/// `buft` is a live buffer type (NULL aborts).
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_buft_get_device(
    buft: ggml_backend_buffer_type_t,
) -> ggml_backend_dev_t {
    handle_arg!(buft, Buft, "ggml_backend_buft_get_device").device()
}

/// Ops whose result a buffer type may size above `ggml_nbytes` (scratch space of some
/// backends' kernels). Fact `alloc-size-may-expand`.
#[cfg(feature = "alloc-size-may-expand")]
#[no_mangle]
pub extern "C" fn ggml_op_alloc_size_may_expand(op: ggml_op) -> bool {
    crate::abi::facts::alloc_size_may_expand(op)
}
