//! Buffers: creation and destruction of the `ggml_backend_buffer` objects every backend
//! allocates through `ggml_backend_buffer_init`, and the buffer kinds this library owns.

pub mod cpu;
pub mod multi;

use std::ffi::c_void;
use std::sync::{Arc, OnceLock};

use ggml_backend_rs_core::owned::Registry;

use crate::abi::log::ggml_assert;
use crate::abi::*;

/// What a buffer implemented in this crate adds to ggml's buffer vtable. The generic code
/// below asks it, by buffer, where upstream's generic code would name a buffer kind.
pub trait Extension: Send + Sync {
    /// The buffer's tensors have placeholder addresses with no memory behind them: its base
    /// exists even when its size is 0, and tensors are not checked against its size.
    fn placeholder_addresses(&self) -> bool {
        false
    }

    /// The buffer's usage was set to `usage` (after its own field changed).
    fn usage_changed(&self, _usage: ggml_backend_buffer_usage_raw) {}
}

static EXTENSIONS: Registry<dyn Extension> = Registry::new();

/// Buffer types whose zero-size allocations go to their own `alloc_buffer` (their buffers
/// carry state beyond memory), instead of the empty placeholder buffer.
static ALLOCATE_EMPTY: Registry<()> = Registry::new();

/// Attaches `ext` to `buffer` until [`unextend`].
pub fn extend(buffer: Buffer, ext: Arc<dyn Extension>) {
    EXTENSIONS.insert(buffer.as_ptr() as usize, ext);
}

/// Detaches the extension of `buffer` (when it is freed).
pub fn unextend(buffer: Buffer) {
    EXTENSIONS.remove(buffer.as_ptr() as usize);
}

/// The extension of `buffer`, if it has one.
pub fn extension(buffer: Buffer) -> Option<Arc<dyn Extension>> {
    EXTENSIONS.get(buffer.as_ptr() as usize)
}

/// Lets zero-size allocations of `buft` reach its `alloc_buffer` (for the life of the process).
pub fn allocate_empty(buft: Buft) {
    ALLOCATE_EMPTY.insert(buft.as_ptr() as usize, Arc::new(()));
}

/// The host program's buffer constructor and destructor (`ggml_backend_buffer_init` and
/// `ggml_backend_buffer_free` of the ggml that loaded the plugin build).
#[derive(Clone, Copy, Debug)]
pub struct HostBuffers {
    pub init: HostInit,
    pub free: HostFree,
}

/// `ggml_backend_buffer_init`'s type.
pub type HostInit = unsafe extern "C" fn(
    ggml_backend_buffer_type_t,
    ggml_backend_buffer_i,
    *mut c_void,
    usize,
) -> ggml_backend_buffer_t;
/// `ggml_backend_buffer_free`'s type.
pub type HostFree = unsafe extern "C" fn(ggml_backend_buffer_t);

/// Set once when the library runs as a plugin inside another ggml: every buffer object is then
/// made and released by the host, because the host's generic code releases buffers itself
/// (upstream's `ggml_backend_buffer_free` deletes the object with C++ `delete`), ours included.
static HOST: OnceLock<HostBuffers> = OnceLock::new();

/// Makes every later buffer object the host's (see [`HostBuffers`]). Returns false if a
/// different host was installed before.
pub fn use_host_buffers(host: HostBuffers) -> bool {
    let installed = *HOST.get_or_init(|| host);
    std::ptr::fn_addr_eq(installed.init, host.init)
        && std::ptr::fn_addr_eq(installed.free, host.free)
}

/// Creates a buffer object. Ownership passes to the caller, who releases it with [`free`].
pub fn init(
    buft: ggml_backend_buffer_type_t,
    iface: ggml_backend_buffer_i,
    context: *mut c_void,
    size: usize,
) -> Buffer {
    if let Some(host) = HOST.get() {
        return host_init(host, buft, iface, context, size);
    }
    let raw = Box::into_raw(Box::new(ggml_backend_buffer {
        iface,
        buft,
        context,
        size,
        usage: USAGE_ANY,
    }));
    // SAFETY: freshly boxed, non-null, alive until `free`.
    unsafe { Buffer::from_ptr(raw) }.expect("Box::into_raw is never null")
}

/// [`init`] through the host: its object, which its own `ggml_backend_buffer_free` can delete.
fn host_init(
    host: &HostBuffers,
    buft: ggml_backend_buffer_type_t,
    iface: ggml_backend_buffer_i,
    context: *mut c_void,
    size: usize,
) -> Buffer {
    // SAFETY: the host's ggml_backend_buffer_init takes exactly these values (the ABI's
    // prototype) and only stores them in the new object it returns.
    let raw = unsafe { (host.init)(buft, iface, context, size) };
    // SAFETY: the host's new object is live until it is freed through `free` below.
    unsafe { Buffer::from_ptr(raw) }.unwrap_or_else(|| {
        crate::abi::log::abort(
            file!(),
            line!(),
            "the host's ggml_backend_buffer_init returned NULL",
        )
    })
}

/// Releases the backend's resources of the buffer, then the buffer object itself.
///
/// # Safety
/// `buffer` was returned by [`init`] (i.e. by `ggml_backend_buffer_init`) and is not used again.
pub unsafe fn free(buffer: Buffer) {
    if let Some(host) = HOST.get() {
        // SAFETY: every buffer object is the host's once it is installed (it is installed
        // before the plugin makes or sees any buffer); the host runs the vtable's
        // `free_buffer`, then releases the object. `buffer` is not used again (contract).
        unsafe { (host.free)(buffer.as_ptr()) };
        return;
    }
    if let Some(free_buffer) = buffer.free_buffer_fn() {
        // SAFETY: vtable entry of `buffer`, which is live and not used after this call
        // (this function's contract).
        unsafe { free_buffer(buffer.as_ptr()) };
    }
    // SAFETY: `buffer` came from `Box::into_raw` in `init` and is freed only here, once.
    drop(unsafe { Box::from_raw(buffer.as_ptr()) });
}

/// Whether the buffer's tensor addresses are placeholders (see [`Extension`]).
pub fn has_placeholder_addresses(buffer: Buffer) -> bool {
    extension(buffer).is_some_and(|e| e.placeholder_addresses())
}

/// Base address of the buffer's memory; NULL for zero-size buffers and for buffers that
/// have no address of their own (multi-buffers).
pub fn base(buffer: Buffer) -> *mut c_void {
    if buffer.size() == 0 && !has_placeholder_addresses(buffer) {
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

pub fn set_usage(buffer: Buffer, usage: ggml_backend_buffer_usage_raw) {
    buffer.set_usage_field(usage);
    if let Some(ext) = extension(buffer) {
        ext.usage_changed(usage);
    }
    if let Some(parts) = multi::parts(buffer) {
        for part in parts {
            set_usage(part, usage);
        }
    }
}

/// Allocates a buffer of `buft`. A zero-size request gets an empty buffer of that type,
/// so callers never see NULL for an empty allocation.
pub fn alloc(buft: Buft, size: usize) -> ggml_backend_buffer_t {
    if size == 0 && !ALLOCATE_EMPTY.contains(buft.as_ptr() as usize) {
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
