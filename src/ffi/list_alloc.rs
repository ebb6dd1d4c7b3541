//! Tensor lists allocated by buffer types (fact `list-alloc`): `ggml_backend_buft_alloc_buffer_n`
//! and `_get_alloc_size_n`, through which ggml-alloc places a context's tensors; a buffer type
//! without its own list entries gets the default here (chunks of at most the type's maximum
//! size, tensors placed one after another).

use std::ffi::c_int;

use ggml_backend_rs_core::chunk;

use super::handle_arg;
use crate::abi::log::log_error;
use crate::abi::*;

/// Allocates `tensors` in buffers of `buft`: the type's own `alloc_buffer_n`, or one buffer
/// per chunk of the list that fits the type's maximum size (a multi-buffer when there are
/// several). NULL when nothing needs memory or an allocation fails (then nothing is kept).
///
/// # Safety
/// `buft` is a live buffer type (NULL aborts); `tensors` points to `n_tensors` tensor pointers.
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_buft_alloc_buffer_n(
    buft: ggml_backend_buffer_type_t,
    tensors: *mut *mut ggml_tensor,
    n_tensors: c_int,
) -> ggml_backend_buffer_t {
    const F: &str = "ggml_backend_buft_alloc_buffer_n";
    let b = handle_arg!(buft, Buft, "ggml_backend_buft_alloc_buffer_n");
    if let Some(f) = b.iface().alloc_buffer_n {
        // SAFETY: vtable entry of a live buffer type, with the caller's list.
        return unsafe { f(buft, tensors, n_tensors) };
    }
    // SAFETY: this function's contract.
    let list = unsafe { tensor_list(tensors, n_tensors, F) };
    alloc_tensors(b, &list)
}

/// Bytes `ggml_backend_buft_alloc_buffer_n` allocates for `tensors`.
///
/// # Safety
/// `buft` is a live buffer type (NULL aborts); `tensors` points to `n_tensors` tensor pointers.
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_buft_get_alloc_size_n(
    buft: ggml_backend_buffer_type_t,
    tensors: *mut *mut ggml_tensor,
    n_tensors: c_int,
) -> usize {
    const F: &str = "ggml_backend_buft_get_alloc_size_n";
    let b = handle_arg!(buft, Buft, "ggml_backend_buft_get_alloc_size_n");
    if let Some(f) = b.iface().get_alloc_size_n {
        // SAFETY: vtable entry of a live buffer type, with the caller's list.
        return unsafe { f(buft, tensors, n_tensors) };
    }
    // SAFETY: this function's contract.
    let list = unsafe { tensor_list(tensors, n_tensors, F) };
    chunk::total(&chunk::plan(&padded_sizes(b, &list), b.max_size()))
}

/// What each tensor of `list` needs in a buffer of `buft`, padded to its alignment; 0 for
/// views and tensors already placed.
fn padded_sizes(buft: Buft, list: &[Tensor]) -> Vec<usize> {
    let align = buft.alignment().max(1);
    list.iter()
        .map(|&t| {
            if t.data().is_null() && t.view_src().is_none() {
                buft.alloc_size(t).next_multiple_of(align)
            } else {
                0
            }
        })
        .collect()
}

/// The default `alloc_buffer_n`: one buffer per chunk of the list (`chunk::plan`), tensors
/// placed one after another, views initialised in their source's buffer.
fn alloc_tensors(buft: Buft, list: &[Tensor]) -> ggml_backend_buffer_t {
    const F: &str = "ggml_backend_buft_alloc_buffer_n";
    let chunks = chunk::plan(&padded_sizes(buft, list), buft.max_size());
    let mut buffers: Vec<Buffer> = Vec::with_capacity(chunks.len());
    let fail = |buffers: &[Buffer]| {
        for &b in buffers {
            // SAFETY: made above, referenced by no one but the tensors that fail with it.
            unsafe { crate::buffer::free(b) };
        }
        std::ptr::null_mut()
    };
    for c in &chunks {
        // SAFETY: a buffer just returned by the buffer type, or NULL.
        let Some(buffer) = (unsafe { Buffer::from_ptr(crate::buffer::alloc(buft, c.size)) }) else {
            log_error!(
                "{F}: failed to allocate {} buffer of size {}",
                buft.name_string(),
                c.size
            );
            return fail(&buffers);
        };
        buffers.push(buffer);
        // SAFETY: a live buffer; the allocator only reads its base, size and alignment.
        let mut talloc = unsafe { ggml_tallocr_new(buffer.as_ptr()) };
        for &t in &list[c.first..c.last] {
            let status = match (t.data().is_null(), t.view_src(), t.buffer().is_null()) {
                // SAFETY: the allocator and a tensor of the caller's list, both live.
                (true, None, _) => unsafe { ggml_tallocr_alloc(&mut talloc, t.as_ptr()) },
                (_, Some(_), true) => crate::backend::view_init(t),
                _ => GGML_STATUS_SUCCESS,
            };
            if status != GGML_STATUS_SUCCESS {
                log_error!("{F}: failed to initialize tensor {}", t.name_string());
                return fail(&buffers);
            }
        }
    }
    match buffers.len() {
        0 => std::ptr::null_mut(),
        1 => buffers[0].as_ptr(),
        _ => crate::buffer::multi::alloc(buffers).as_ptr(),
    }
}
