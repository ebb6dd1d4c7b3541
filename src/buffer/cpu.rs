//! The CPU buffer type ("CPU") and buffers over caller memory ("CPU_Mapped"). They live in
//! the backend layer, not in ggml-cpu, so every backend can use host memory.

use std::cell::UnsafeCell;
use std::ffi::{c_char, c_void};
use std::ptr;

use crate::abi::log::{ggml_assert, log_error};
use crate::abi::*;

/// A buffer type that C code addresses through a mutable pointer but never writes.
#[repr(transparent)]
struct StaticBuft(UnsafeCell<ggml_backend_buffer_type>);

// SAFETY: the struct is initialised at compile time and never mutated afterwards.
unsafe impl Sync for StaticBuft {}

impl StaticBuft {
    fn as_ptr(&'static self) -> ggml_backend_buffer_type_t {
        self.0.get()
    }
}

const fn cpu_buft_iface(
    get_name: unsafe extern "C" fn(ggml_backend_buffer_type_t) -> *const c_char,
) -> ggml_backend_buffer_type_i {
    ggml_backend_buffer_type_i {
        get_name: Some(get_name),
        alloc_buffer: Some(alloc_buffer),
        get_alignment: Some(get_alignment),
        is_host: Some(is_host),
        ..ggml_backend_buffer_type_i::EMPTY
    }
}

// The device stays NULL, as upstream: the CPU device belongs to ggml-cpu, which links to us.
static CPU_BUFT: StaticBuft = StaticBuft(UnsafeCell::new(ggml_backend_buffer_type {
    iface: cpu_buft_iface(name_cpu),
    device: ptr::null_mut(),
    context: ptr::null_mut(),
}));

static MAPPED_BUFT: StaticBuft = StaticBuft(UnsafeCell::new(ggml_backend_buffer_type {
    iface: cpu_buft_iface(name_mapped),
    device: ptr::null_mut(),
    context: ptr::null_mut(),
}));

/// `ggml_backend_cpu_buffer_type()`.
pub fn buffer_type() -> ggml_backend_buffer_type_t {
    CPU_BUFT.as_ptr()
}

/// A buffer over `size` bytes of caller memory at `data` (aligned to [`TENSOR_ALIGNMENT`],
/// checked); the memory stays the caller's and is not freed with the buffer.
///
/// # Safety
/// `data` addresses `size` bytes that stay readable and writable, and used by nothing else,
/// until the buffer is freed: the buffer's entries read and write them.
pub unsafe fn buffer_from_ptr(data: *mut c_void, size: usize) -> ggml_backend_buffer_t {
    ggml_assert!(
        (data as usize) % TENSOR_ALIGNMENT == 0,
        "ggml_backend_cpu_buffer_from_ptr: buffer pointer {data:p} must be aligned to {TENSOR_ALIGNMENT} bytes"
    );
    super::init(MAPPED_BUFT.as_ptr(), buffer_iface(false), data, size).as_ptr()
}

fn buffer_iface(owned: bool) -> ggml_backend_buffer_i {
    ggml_backend_buffer_i {
        free_buffer: if owned { Some(free_buffer) } else { None },
        get_base: Some(get_base),
        init_tensor: None,
        memset_tensor: Some(memset_tensor),
        set_tensor: Some(set_tensor),
        get_tensor: Some(get_tensor),
        set_tensor_2d: None,
        get_tensor_2d: None,
        cpy_tensor: Some(cpy_tensor),
        clear: Some(clear),
        reset: None,
    }
}

// The callbacks below are reached only through the vtables above, so their arguments are
// buffers of this module and tensors that the dispatching functions already bounds-checked.

unsafe extern "C" fn name_cpu(_: ggml_backend_buffer_type_t) -> *const c_char {
    c"CPU".as_ptr()
}

unsafe extern "C" fn name_mapped(_: ggml_backend_buffer_type_t) -> *const c_char {
    c"CPU_Mapped".as_ptr()
}

unsafe extern "C" fn get_alignment(_: ggml_backend_buffer_type_t) -> usize {
    TENSOR_ALIGNMENT
}

unsafe extern "C" fn is_host(_: ggml_backend_buffer_type_t) -> bool {
    true
}

unsafe extern "C" fn alloc_buffer(
    buft: ggml_backend_buffer_type_t,
    size: usize,
) -> ggml_backend_buffer_t {
    // ggml's aligned allocator, as upstream: it picks page alignment (and hugepages where
    // configured) that the CPU kernels and mmap-backed loading expect.
    // SAFETY: ggml_aligned_malloc takes any size and returns NULL on failure (checked below).
    let data = unsafe { ggml_aligned_malloc(size) };
    if data.is_null() {
        log_error!(
            "ggml_backend_cpu_buffer_type_alloc_buffer: failed to allocate buffer of size {size}"
        );
        return ptr::null_mut();
    }
    super::init(buft, buffer_iface(true), data, size).as_ptr()
}

unsafe extern "C" fn free_buffer(buffer: ggml_backend_buffer_t) {
    // SAFETY: `free_buffer` is only in the vtable of owned buffers (`buffer_iface(true)`),
    // made by `alloc_buffer`: `buffer` is that live buffer object, and its context is the
    // block from `ggml_aligned_malloc` of exactly `size` bytes, freed once (buffer::free).
    unsafe { ggml_aligned_free((*buffer).context, (*buffer).size) };
}

unsafe extern "C" fn get_base(buffer: ggml_backend_buffer_t) -> *mut c_void {
    // Caller memory may be less aligned than the allocator's; tensors start at the next boundary.
    // SAFETY: `buffer` is a live buffer of this module (reached through its vtable); reading
    // its context field does not dereference the context.
    let data = unsafe { (*buffer).context } as usize;
    data.next_multiple_of(TENSOR_ALIGNMENT) as *mut c_void
}

unsafe extern "C" fn memset_tensor(
    _: ggml_backend_buffer_t,
    tensor: *mut ggml_tensor,
    value: u8,
    offset: usize,
    size: usize,
) {
    // SAFETY: `tensor` is a live tensor placed in this host buffer, so `tensor->data`
    // addresses its bytes; `offset + size` lies inside the tensor (checked by
    // `tensor::memset` before dispatch).
    unsafe { ptr::write_bytes(((*tensor).data as *mut u8).add(offset), value, size) };
}

unsafe extern "C" fn set_tensor(
    _: ggml_backend_buffer_t,
    tensor: *mut ggml_tensor,
    data: *const c_void,
    offset: usize,
    size: usize,
) {
    // `copy` (memmove) rather than `copy_nonoverlapping`: a caller may pass tensor memory.
    // SAFETY: `tensor` is a live tensor placed in this host buffer, so `tensor->data`
    // addresses its bytes; `offset + size` lies inside the tensor (checked by `tensor::set`)
    // and `data` is readable for `size` bytes (ggml_backend_tensor_set's contract).
    unsafe {
        ptr::copy(
            data as *const u8,
            ((*tensor).data as *mut u8).add(offset),
            size,
        )
    };
}

unsafe extern "C" fn get_tensor(
    _: ggml_backend_buffer_t,
    tensor: *const ggml_tensor,
    data: *mut c_void,
    offset: usize,
    size: usize,
) {
    // SAFETY: `tensor` is a live tensor placed in this host buffer, so `tensor->data`
    // addresses its bytes; `offset + size` lies inside the tensor (checked by `tensor::get`)
    // and `data` is writable for `size` bytes (ggml_backend_tensor_get's contract).
    unsafe {
        ptr::copy(
            ((*tensor).data as *const u8).add(offset),
            data as *mut u8,
            size,
        )
    };
}

unsafe extern "C" fn cpy_tensor(
    _: ggml_backend_buffer_t,
    src: *const ggml_tensor,
    dst: *mut ggml_tensor,
) -> bool {
    // SAFETY: `src` is NULL or a live tensor (the cpy_tensor entry's ABI contract).
    let Some(src_t) = (unsafe { Tensor::from_ptr(src as *mut ggml_tensor) }) else {
        return false;
    };
    let host = src_t
        .data_buffer()
        .map(|b| b.buft_handle().is_host())
        .unwrap_or(false);
    if !host {
        return false;
    }
    // SAFETY: `src` is a live tensor in host memory (checked above) and `dst` a live tensor
    // placed in this host buffer, both with `ggml_nbytes(src)` bytes at their data pointers:
    // same layout, checked by `tensor::copy` (and the contract of
    // ggml_backend_buffer_copy_tensor, which does not check it).
    unsafe {
        ptr::copy(
            (*src).data as *const u8,
            (*dst).data as *mut u8,
            ggml_nbytes(src),
        )
    };
    true
}

unsafe extern "C" fn clear(buffer: ggml_backend_buffer_t, value: u8) {
    // SAFETY: `buffer` is a live buffer of this module; its context addresses `size` bytes
    // (our allocation, or caller memory per ggml_backend_cpu_buffer_from_ptr's contract).
    unsafe { ptr::write_bytes((*buffer).context as *mut u8, value, (*buffer).size) };
}
