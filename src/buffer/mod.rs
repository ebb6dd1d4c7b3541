//! Buffers: creation and destruction of the `ggml_backend_buffer` objects every backend
//! allocates through `ggml_backend_buffer_init`, and the buffer kinds this library owns.

pub mod cpu;
pub mod multi;

use std::ffi::c_void;

use crate::abi::*;
use crate::log::ggml_assert;

/// Creates a buffer object. Ownership passes to the caller, who releases it with [`free`].
pub fn init(
    buft: ggml_backend_buffer_type_t,
    iface: ggml_backend_buffer_i,
    context: *mut c_void,
    size: usize,
) -> Buffer {
    let raw = Box::into_raw(Box::new(ggml_backend_buffer {
        iface,
        buft,
        context,
        size,
        usage: ggml_backend_buffer_usage::GGML_BACKEND_BUFFER_USAGE_ANY,
    }));
    // SAFETY: freshly boxed, non-null, alive until `free`.
    unsafe { Buffer::from_ptr(raw) }.expect("Box::into_raw is never null")
}

/// Releases the backend's resources of the buffer, then the buffer object itself.
///
/// # Safety
/// `buffer` was returned by [`init`] (i.e. by `ggml_backend_buffer_init`) and is not used again.
pub unsafe fn free(buffer: Buffer) {
    if let Some(free_buffer) = buffer.free_buffer_fn() {
        free_buffer(buffer.as_ptr());
    }
    drop(Box::from_raw(buffer.as_ptr()));
}

/// Whether the meta backend owns this buffer (its base address is synthetic).
pub fn is_meta(buffer: Buffer) -> bool {
    crate::meta::is_meta_buffer(buffer.as_ptr())
}

/// Base address of the buffer's memory; NULL for zero-size buffers and for buffers that
/// have no address of their own (multi-buffers).
pub fn base(buffer: Buffer) -> *mut c_void {
    if buffer.size() == 0 && !is_meta(buffer) {
        return std::ptr::null_mut();
    }
    match buffer.call_get_base() {
        None => std::ptr::null_mut(),
        Some(base) => {
            ggml_assert!(
                !base.is_null(),
                "ggml_backend_buffer_get_base: backend buffer base cannot be NULL"
            );
            base
        }
    }
}

/// Fills the whole buffer with `value`. Zero-size buffers have nothing to clear.
pub fn clear(buffer: Buffer, value: u8) {
    if buffer.size() == 0 {
        return;
    }
    buffer.clear(value);
}

pub fn set_usage(buffer: Buffer, usage: ggml_backend_buffer_usage) {
    buffer.set_usage_field(usage);
    crate::meta::buffer::set_usage(buffer, usage);
    if let Some(parts) = multi::parts(buffer) {
        for part in parts {
            set_usage(part, usage);
        }
    }
}

/// Allocates a buffer of `buft`. A zero-size request gets an empty buffer of that type,
/// so callers never see NULL for an empty allocation.
pub fn alloc(buft: Buft, size: usize) -> ggml_backend_buffer_t {
    if size == 0 && !crate::meta::is_meta_buft(buft.as_ptr()) {
        return init(
            buft.as_ptr(),
            ggml_backend_buffer_i::EMPTY,
            std::ptr::null_mut(),
            0,
        )
        .as_ptr();
    }
    buft.alloc_buffer(size)
}
