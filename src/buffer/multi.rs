//! Multi-buffers: one buffer handle that owns several buffers (used when one allocation
//! had to be split into chunks below a buffer type's maximum size).

use std::sync::Arc;

use ggml_backend_rs_core::owned::Registry;

use crate::abi::log::ggml_assert;
use crate::abi::object::{buffer_iface, CObject};
use crate::abi::*;

/// What a multi-buffer owns; freed with the buffer.
struct Parts(Vec<Buffer>);

/// The live multi-buffers, by address. (Function addresses are not a reliable identity in
/// Rust, as codegen units may duplicate a function, so the vtable cannot tell them.)
static LIVE: Registry<Parts> = Registry::new();

const IFACE: ggml_backend_buffer_i = buffer_iface!(Parts { free_buffer, clear });

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

impl CObject for Parts {
    const KIND: &'static str = "multi-buffer";
    type Held = Arc<Parts>;
    fn find(addr: usize) -> Option<Arc<Parts>> {
        LIVE.get(addr)
    }
}

impl Parts {
    fn free_buffer(this: Arc<Parts>, buffer: Buffer) {
        LIVE.remove(buffer.as_ptr() as usize);
        for &part in &this.0 {
            // SAFETY: the parts belong to this multi-buffer alone and go with it.
            unsafe { super::free(part) };
        }
    }

    fn clear(&self, _: Buffer, value: u8) {
        for &part in &self.0 {
            super::clear(part, value);
        }
    }
}
