//! Buffers: `ggml_backend_buffer_*`, the multi-buffer and the CPU buffers.

use std::ffi::{c_char, c_void};

use super::{handle_arg, optional_arg};
use crate::abi::*;
use crate::buffer;

/// # Safety
/// `buft` is NULL or a buffer type that outlives the buffer; `iface`'s entries accept `context`
/// and the new buffer as the ABI describes until the buffer is freed.
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_buffer_init(
    buft: ggml_backend_buffer_type_t,
    iface: ggml_backend_buffer_i,
    context: *mut c_void,
    size: usize,
) -> ggml_backend_buffer_t {
    buffer::init(buft, iface, context, size).as_ptr()
}

/// # Safety
/// `buffer` is a live buffer (NULL aborts).
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_buffer_name(buffer: ggml_backend_buffer_t) -> *const c_char {
    handle_arg!(buffer, Buffer, "ggml_backend_buffer_name")
        .buft_handle()
        .name()
}

/// # Safety
/// `buffer` is NULL or a buffer from `ggml_backend_buffer_init` that is not used again.
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_buffer_free(buffer: ggml_backend_buffer_t) {
    if let Some(b) = optional_arg!(buffer, Buffer) {
        // SAFETY: a non-NULL `buffer` came from ggml_backend_buffer_init and is not used
        // again (this function's contract), as `buffer::free` requires.
        unsafe { buffer::free(b) };
    }
}

/// # Safety
/// `buffer` is a live buffer (NULL aborts).
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_buffer_get_base(
    buffer: ggml_backend_buffer_t,
) -> *mut c_void {
    buffer::base(handle_arg!(buffer, Buffer, "ggml_backend_buffer_get_base"))
}

/// # Safety
/// `buffer` is a live buffer (NULL aborts).
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_buffer_get_size(buffer: ggml_backend_buffer_t) -> usize {
    handle_arg!(buffer, Buffer, "ggml_backend_buffer_get_size").size()
}

/// # Safety
/// `buffer` is a live buffer and `tensor` a live tensor (NULL aborts).
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_buffer_init_tensor(
    buffer: ggml_backend_buffer_t,
    tensor: *mut ggml_tensor,
) -> ggml_status {
    let b = handle_arg!(buffer, Buffer, "ggml_backend_buffer_init_tensor");
    b.init_tensor(handle_arg!(
        tensor,
        Tensor,
        "ggml_backend_buffer_init_tensor"
    ))
}

/// # Safety
/// `buffer` is a live buffer (NULL aborts).
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_buffer_get_alignment(buffer: ggml_backend_buffer_t) -> usize {
    handle_arg!(buffer, Buffer, "ggml_backend_buffer_get_alignment")
        .buft_handle()
        .alignment()
}

/// # Safety
/// `buffer` is a live buffer (NULL aborts).
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_buffer_get_max_size(buffer: ggml_backend_buffer_t) -> usize {
    handle_arg!(buffer, Buffer, "ggml_backend_buffer_get_max_size")
        .buft_handle()
        .max_size()
}

/// # Safety
/// `buffer` is a live buffer and `tensor` a live tensor (NULL aborts).
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_buffer_get_alloc_size(
    buffer: ggml_backend_buffer_t,
    tensor: *const ggml_tensor,
) -> usize {
    let b = handle_arg!(buffer, Buffer, "ggml_backend_buffer_get_alloc_size");
    b.buft_handle().alloc_size(handle_arg!(
        tensor,
        Tensor,
        "ggml_backend_buffer_get_alloc_size"
    ))
}

/// # Safety
/// `buffer` is a live buffer (NULL aborts).
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_buffer_clear(buffer: ggml_backend_buffer_t, value: u8) {
    buffer::clear(
        handle_arg!(buffer, Buffer, "ggml_backend_buffer_clear"),
        value,
    )
}

/// # Safety
/// `buffer` is a live buffer (NULL aborts).
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_buffer_is_host(buffer: ggml_backend_buffer_t) -> bool {
    handle_arg!(buffer, Buffer, "ggml_backend_buffer_is_host")
        .buft_handle()
        .is_host()
}

/// # Safety
/// `buffer` is a live buffer (NULL aborts).
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_buffer_set_usage(
    buffer: ggml_backend_buffer_t,
    usage: ggml_backend_buffer_usage_raw,
) {
    buffer::set_usage(
        handle_arg!(buffer, Buffer, "ggml_backend_buffer_set_usage"),
        usage,
    )
}

/// # Safety
/// `buffer` is a live buffer (NULL aborts).
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_buffer_get_usage(
    buffer: ggml_backend_buffer_t,
) -> ggml_backend_buffer_usage_raw {
    handle_arg!(buffer, Buffer, "ggml_backend_buffer_get_usage").usage()
}

/// # Safety
/// `buffer` is a live buffer (NULL aborts).
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_buffer_get_type(
    buffer: ggml_backend_buffer_t,
) -> ggml_backend_buffer_type_t {
    handle_arg!(buffer, Buffer, "ggml_backend_buffer_get_type").buft()
}

/// # Safety
/// `buffer` is a live buffer (NULL aborts).
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_buffer_reset(buffer: ggml_backend_buffer_t) {
    handle_arg!(buffer, Buffer, "ggml_backend_buffer_reset").reset()
}

/// # Safety
/// `src` and `dst` are live tensors (NULL aborts).
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_buffer_copy_tensor(
    src: *const ggml_tensor,
    dst: *mut ggml_tensor,
) -> bool {
    let src = handle_arg!(src, Tensor, "ggml_backend_buffer_copy_tensor");
    crate::tensor::buffer_copy(
        src,
        handle_arg!(dst, Tensor, "ggml_backend_buffer_copy_tensor"),
    )
}

/// # Safety
/// `buffers` points to `n_buffers` live buffers (a NULL entry aborts), whose ownership passes to
/// the new buffer.
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_multi_buffer_alloc_buffer(
    buffers: *mut ggml_backend_buffer_t,
    n_buffers: usize,
) -> ggml_backend_buffer_t {
    if buffers.is_null() {
        super::null_argument("ggml_backend_multi_buffer_alloc_buffer", "buffers");
    }
    // SAFETY: `buffers` is non-NULL (checked above) and points to `n_buffers` buffer
    // handles (this function's contract).
    let parts = unsafe { std::slice::from_raw_parts(buffers, n_buffers) }
        .iter()
        .map(|&b| handle_arg!(b, Buffer, "ggml_backend_multi_buffer_alloc_buffer"))
        .collect();
    buffer::multi::alloc(parts).as_ptr()
}

/// # Safety
/// `buffer` is a live buffer (NULL aborts).
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_buffer_is_multi_buffer(
    buffer: ggml_backend_buffer_t,
) -> bool {
    buffer::multi::is_multi(handle_arg!(
        buffer,
        Buffer,
        "ggml_backend_buffer_is_multi_buffer"
    ))
}

/// # Safety
/// `buffer` is a live buffer (NULL aborts).
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_multi_buffer_set_usage(
    buffer: ggml_backend_buffer_t,
    usage: ggml_backend_buffer_usage_raw,
) {
    let b = handle_arg!(buffer, Buffer, "ggml_backend_multi_buffer_set_usage");
    crate::abi::log::ggml_assert!(
        buffer::multi::is_multi(b),
        "ggml_backend_multi_buffer_set_usage: not a multi-buffer"
    );
    buffer::set_usage(b, usage)
}

#[no_mangle]
pub extern "C" fn ggml_backend_cpu_buffer_type() -> ggml_backend_buffer_type_t {
    buffer::cpu::buffer_type()
}

/// # Safety
/// `ptr` addresses `size` bytes of host memory (aligned to `TENSOR_ALIGNMENT`, checked) that
/// stay readable and writable, and used by nothing else, until the buffer is freed.
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_cpu_buffer_from_ptr(
    ptr: *mut c_void,
    size: usize,
) -> ggml_backend_buffer_t {
    // SAFETY: `ptr` addresses `size` bytes that stay usable until the buffer is freed (this
    // function's contract).
    unsafe { buffer::cpu::buffer_from_ptr(ptr, size) }
}
