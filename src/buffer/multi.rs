//! Multi-buffers: one buffer handle that owns several buffers (used when one allocation
//! had to be split into chunks below a buffer type's maximum size).

use std::collections::HashSet;
use std::ffi::c_void;
use std::sync::Mutex;

use crate::abi::*;
use crate::log::ggml_assert;

/// What a multi-buffer owns; freed with the buffer.
struct Parts(Vec<Buffer>);

/// Addresses of the live multi-buffers. Function addresses are not a reliable identity in
/// Rust (codegen units may duplicate a function), so membership is tracked explicitly.
static LIVE: Mutex<Option<HashSet<usize>>> = Mutex::new(None);

fn live() -> std::sync::MutexGuard<'static, Option<HashSet<usize>>> {
    LIVE.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

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
            crate::log::abort(
                file!(),
                line!(),
                "ggml_backend_multi_buffer_alloc_buffer: total size overflows",
            )
        });
    let buft = buffers[0].buft();
    let parts = Box::into_raw(Box::new(Parts(buffers)));
    let buffer = super::init(buft, IFACE, parts as *mut c_void, total);
    live()
        .get_or_insert_with(HashSet::new)
        .insert(buffer.as_ptr() as usize);
    buffer
}

pub fn is_multi(buffer: Buffer) -> bool {
    live()
        .as_ref()
        .is_some_and(|set| set.contains(&(buffer.as_ptr() as usize)))
}

/// The buffers a multi-buffer owns; `None` for any other buffer.
pub fn parts(buffer: Buffer) -> Option<Vec<Buffer>> {
    if !is_multi(buffer) {
        return None;
    }
    // SAFETY: a multi-buffer's context is always the `Parts` created in `alloc`.
    let parts = unsafe { &*(buffer.context() as *const Parts) };
    Some(parts.0.clone())
}

unsafe extern "C" fn free_buffer(buffer: ggml_backend_buffer_t) {
    if let Some(set) = live().as_mut() {
        set.remove(&(buffer as usize));
    }
    let parts = Box::from_raw((*buffer).context as *mut Parts);
    for part in parts.0 {
        super::free(part);
    }
}

unsafe extern "C" fn clear(buffer: ggml_backend_buffer_t, value: u8) {
    let parts = &*((*buffer).context as *const Parts);
    for &part in &parts.0 {
        super::clear(part, value);
    }
}
