//! Backends (streams): `ggml_backend_*`.

use std::ffi::c_char;

use super::{handle_arg, optional_arg};
use crate::abi::log::abort;
use crate::abi::*;
use crate::backend::{self, default_buffer_type};

/// # Safety
/// `backend` is NULL or a live backend.
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_guid(backend: ggml_backend_t) -> ggml_guid_t {
    optional_arg!(backend, Backend).map_or(std::ptr::null_mut(), |b| b.guid())
}

/// # Safety
/// `backend` is NULL or a live backend.
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_name(backend: ggml_backend_t) -> *const c_char {
    match optional_arg!(backend, Backend) {
        Some(b) => b.name(),
        None => c"NULL".as_ptr(),
    }
}

/// # Safety
/// `backend` is NULL or a live backend, not used after the call.
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_free(backend: ggml_backend_t) {
    if let Some(b) = optional_arg!(backend, Backend) {
        b.free()
    }
}

/// # Safety
/// `backend` is a live backend (NULL aborts).
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_get_default_buffer_type(
    backend: ggml_backend_t,
) -> ggml_backend_buffer_type_t {
    let b = handle_arg!(backend, Backend, "ggml_backend_get_default_buffer_type");
    default_buffer_type(b, "ggml_backend_get_default_buffer_type").as_ptr()
}

/// # Safety
/// `backend` is a live backend (NULL aborts).
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_alloc_buffer(
    backend: ggml_backend_t,
    size: usize,
) -> ggml_backend_buffer_t {
    let b = handle_arg!(backend, Backend, "ggml_backend_alloc_buffer");
    crate::buffer::alloc(default_buffer_type(b, "ggml_backend_alloc_buffer"), size)
}

/// # Safety
/// `backend` is a live backend (NULL aborts).
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_get_alignment(backend: ggml_backend_t) -> usize {
    let b = handle_arg!(backend, Backend, "ggml_backend_get_alignment");
    default_buffer_type(b, "ggml_backend_get_alignment").alignment()
}

/// # Safety
/// `backend` is a live backend (NULL aborts).
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_get_max_size(backend: ggml_backend_t) -> usize {
    let b = handle_arg!(backend, Backend, "ggml_backend_get_max_size");
    default_buffer_type(b, "ggml_backend_get_max_size").max_size()
}

/// # Safety
/// `backend` is a live backend (NULL aborts).
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_synchronize(backend: ggml_backend_t) {
    handle_arg!(backend, Backend, "ggml_backend_synchronize").synchronize()
}

fn plan_entry<T>(entry: Option<T>, func: &str) -> T {
    entry.unwrap_or_else(|| {
        abort(
            file!(),
            line!(),
            &format!("{func}: the backend does not support graph plans"),
        )
    })
}

/// # Safety
/// `backend` is a live backend (NULL aborts); `cgraph` is what its `graph_plan_create` accepts (a
/// live graph).
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_graph_plan_create(
    backend: ggml_backend_t,
    cgraph: *mut ggml_cgraph,
) -> ggml_backend_graph_plan_t {
    let b = handle_arg!(backend, Backend, "ggml_backend_graph_plan_create");
    let f = plan_entry(
        b.iface().graph_plan_create,
        "ggml_backend_graph_plan_create",
    );
    // SAFETY: vtable entry of a live backend; the graph is the caller's.
    unsafe { f(b.as_ptr(), cgraph) }
}

/// # Safety
/// `backend` is a live backend (NULL aborts); `plan` was created by it and is not used after the
/// call.
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_graph_plan_free(
    backend: ggml_backend_t,
    plan: ggml_backend_graph_plan_t,
) {
    let b = handle_arg!(backend, Backend, "ggml_backend_graph_plan_free");
    let f = plan_entry(b.iface().graph_plan_free, "ggml_backend_graph_plan_free");
    // SAFETY: as above; the plan was created by this backend.
    unsafe { f(b.as_ptr(), plan) }
}

/// # Safety
/// `backend` is a live backend (NULL aborts); `plan` was created by it and not freed.
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_graph_plan_compute(
    backend: ggml_backend_t,
    plan: ggml_backend_graph_plan_t,
) -> ggml_status {
    let b = handle_arg!(backend, Backend, "ggml_backend_graph_plan_compute");
    let f = plan_entry(
        b.iface().graph_plan_compute,
        "ggml_backend_graph_plan_compute",
    );
    // SAFETY: as above.
    unsafe { f(b.as_ptr(), plan) }
}

/// # Safety
/// `backend` is a live backend and `cgraph` a live graph (NULL aborts).
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_graph_compute(
    backend: ggml_backend_t,
    cgraph: *mut ggml_cgraph,
) -> ggml_status {
    let b = handle_arg!(backend, Backend, "ggml_backend_graph_compute");
    backend::graph_compute(b, handle_arg!(cgraph, Graph, "ggml_backend_graph_compute"))
}

/// # Safety
/// `backend` is a live backend and `cgraph` a live graph (NULL aborts); the graph and its
/// tensors stay live until the backend is synchronized.
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_graph_compute_async(
    backend: ggml_backend_t,
    cgraph: *mut ggml_cgraph,
) -> ggml_status {
    let b = handle_arg!(backend, Backend, "ggml_backend_graph_compute_async");
    backend::graph_compute_async(
        b,
        handle_arg!(cgraph, Graph, "ggml_backend_graph_compute_async"),
    )
}

/// # Safety
/// `backend` is a live backend and `op` a live tensor (NULL aborts).
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_supports_op(
    backend: ggml_backend_t,
    op: *const ggml_tensor,
) -> bool {
    let b = handle_arg!(backend, Backend, "ggml_backend_supports_op");
    b.device_handle("ggml_backend_supports_op")
        .supports_op(handle_arg!(op, Tensor, "ggml_backend_supports_op"))
}

/// # Safety
/// `backend` is a live backend and `buft` a live buffer type (NULL aborts).
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_supports_buft(
    backend: ggml_backend_t,
    buft: ggml_backend_buffer_type_t,
) -> bool {
    let b = handle_arg!(backend, Backend, "ggml_backend_supports_buft");
    b.device_handle("ggml_backend_supports_buft")
        .supports_buft(handle_arg!(buft, Buft, "ggml_backend_supports_buft"))
}

/// # Safety
/// `backend` is a live backend and `op` a live tensor (NULL aborts).
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_offload_op(
    backend: ggml_backend_t,
    op: *const ggml_tensor,
) -> bool {
    let b = handle_arg!(backend, Backend, "ggml_backend_offload_op");
    b.device_handle("ggml_backend_offload_op")
        .offload_op(handle_arg!(op, Tensor, "ggml_backend_offload_op"))
}

/// # Safety
/// `backend` is a live backend (NULL aborts).
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_get_device(backend: ggml_backend_t) -> ggml_backend_dev_t {
    handle_arg!(backend, Backend, "ggml_backend_get_device").device()
}
