//! Multi-buffers: one buffer handle that owns several buffers (used when one allocation
//! had to be split into chunks below a buffer type's maximum size).

use std::sync::Arc;

use ggml_backend_rs_core::owned::Registry;

use crate::abi::log::{abort, ggml_assert};
use crate::abi::*;

/// What a multi-buffer owns; freed with the buffer.
struct Parts(Vec<Buffer>);

/// The live multi-buffers, by address. (Function addresses are not a reliable identity in
/// Rust, as codegen units may duplicate a function, so the vtable cannot tell them.)
static LIVE: Registry<Parts> = Registry::new();

const IFACE: ggml_backend_buffer_i = ggml_backend_buffer_i {
    free_buffer: Some(free_buffer),
    clear: Some(clear),
    ..ggml_backend_buffer_i::EMPTY
};

/// Takes ownership of `buffers` (at least one) and returns a buffer whose size is their sum.
pub fn alloc(buffers: Vec<Buffer>) -> Buffer {
    ggml_assert!(
        !buffers.is_empty(),
        "ggml_backend_multi_buffer_alloc_buffer: n_buffers must be at least 1"
    );
    let total = buffers
        .iter()
        .try_fold(0usize, |sum, b| sum.checked_add(b.size()))
        .unwrap_or_else(|| {
            crate::abi::log::abort(
                file!(),
                line!(),
                "ggml_backend_multi_buffer_alloc_buffer: total size overflows",
            )
        });
    let buft = buffers[0].buft();
    let parts = Arc::new(Parts(buffers));
    // The context is the parts' address for identification only; they are found by address.
    let context = Arc::as_ptr(&parts) as *mut std::ffi::c_void;
    let buffer = super::init(buft, IFACE, context, total);
    LIVE.insert(buffer.as_ptr() as usize, parts);
    buffer
}

pub fn is_multi(buffer: Buffer) -> bool {
    LIVE.contains(buffer.as_ptr() as usize)
}

/// The buffers a multi-buffer owns; `None` for any other buffer.
pub fn parts(buffer: Buffer) -> Option<Vec<Buffer>> {
    LIVE.get(buffer.as_ptr() as usize).map(|p| p.0.clone())
}

/// The parts behind a vtable entry's argument: only multi-buffers carry this vtable.
fn parts_of(buffer: ggml_backend_buffer_t) -> Arc<Parts> {
    LIVE.get(buffer as usize).unwrap_or_else(|| {
        abort(
            file!(),
            line!(),
            &format!(
                "multi-buffer vtable called with {buffer:p}, which is not a live multi-buffer"
            ),
        )
    })
}

unsafe extern "C" fn free_buffer(buffer: ggml_backend_buffer_t) {
    let parts = parts_of(buffer);
    LIVE.remove(buffer as usize);
    for &part in &parts.0 {
        // SAFETY: the parts belong to this multi-buffer alone and go with it.
        unsafe { super::free(part) };
    }
}

unsafe extern "C" fn clear(buffer: ggml_backend_buffer_t, value: u8) {
    for &part in &parts_of(buffer).0 {
        super::clear(part, value);
    }
}
