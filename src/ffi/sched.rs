//! The backend scheduler: `ggml_backend_sched_*`.

#![allow(non_camel_case_types)]

use std::cell::RefCell;
use std::ffi::c_void;

use super::handle_arg;
use crate::abi::log::ggml_assert;
use crate::abi::*;
use crate::sched::{EvalCallback, Sched, MAX_BACKENDS};

/// Opaque `struct ggml_backend_sched`; the pointer is a `Box<Sched>`.
#[repr(C)]
pub struct ggml_backend_sched {
    _private: [u8; 0],
}

pub type ggml_backend_sched_t = *mut ggml_backend_sched;

pub type ggml_backend_sched_eval_callback =
    Option<unsafe extern "C" fn(t: *mut ggml_tensor, ask: bool, user_data: *mut c_void) -> bool>;

thread_local! {
    /// The schedulers whose graphs this thread is computing (an eval callback may compute on
    /// another scheduler, whose callback may run in turn): innermost last.
    static COMPUTING: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
}

/// Marks a scheduler as computing on this thread until dropped.
struct Computing;

impl Computing {
    fn enter(sched: ggml_backend_sched_t) -> Computing {
        COMPUTING.with_borrow_mut(|v| v.push(sched as usize));
        Computing
    }
}

impl Drop for Computing {
    fn drop(&mut self) {
        COMPUTING.with_borrow_mut(|v| {
            v.pop();
        });
    }
}

/// Stops a call on a scheduler from inside its own eval callback: the computation holds the
/// scheduler exclusively until it returns, and a second reference to it would be undefined
/// behaviour (upstream allows the call; no pinned caller makes it).
fn refuse_reentry(sched: ggml_backend_sched_t, func: &str) {
    if COMPUTING.with_borrow(|v| v.contains(&(sched as usize))) {
        crate::abi::log::abort(
            file!(),
            line!(),
            &format!(
                "{func}: called from the scheduler's eval callback, which cannot use the \
                 scheduler until ggml_backend_sched_graph_compute returns"
            ),
        );
    }
}

/// The scheduler behind a handle, aborting on NULL and on a call from its own eval callback.
///
/// # Safety
/// A non-NULL `sched` was returned by `ggml_backend_sched_new` and not freed; the caller does
/// not use it from two threads at once (ggml's contract).
unsafe fn sched_mut<'a>(sched: ggml_backend_sched_t, func: &str) -> &'a mut Sched {
    if sched.is_null() {
        super::null_argument(func, "sched");
    }
    refuse_reentry(sched, func);
    // SAFETY: `sched` is non-NULL here, so the `Box<Sched>` leaked by ggml_backend_sched_new
    // and not yet freed; no other reference to it is live while one thread uses it (this
    // function's contract).
    unsafe { &mut *(sched as *mut Sched) }
}

/// # Safety
/// `backends` points to `n_backends` live backends; `bufts` is NULL or points to as many live
/// buffer types (NULL entries abort); all outlive the scheduler.
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_sched_new(
    backends: *mut ggml_backend_t,
    bufts: *mut ggml_backend_buffer_type_t,
    n_backends: i32,
    graph_size: usize,
    parallel: bool,
    op_offload: bool,
) -> ggml_backend_sched_t {
    const F: &str = "ggml_backend_sched_new";
    ggml_assert!(
        n_backends > 0 && n_backends as usize <= MAX_BACKENDS,
        "{F}: n_backends = {n_backends} must be in 1..={MAX_BACKENDS}"
    );
    if backends.is_null() {
        super::null_argument(F, "backends");
    }
    let n = n_backends as usize;
    // SAFETY: `backends` is non-NULL (checked above) and points to `n_backends` handles
    // (this function's contract); `n` is that count, checked positive.
    let list: Vec<Backend> = unsafe { std::slice::from_raw_parts(backends, n) }
        .iter()
        .map(|&b| handle_arg!(b, Backend, "ggml_backend_sched_new"))
        .collect();
    let types = if bufts.is_null() {
        None
    } else {
        Some(
            // SAFETY: `bufts` is non-NULL here and then points to `n_backends` types (this
            // function's contract).
            unsafe { std::slice::from_raw_parts(bufts, n) }
                .iter()
                .map(|&b| handle_arg!(b, Buft, "ggml_backend_sched_new"))
                .collect(),
        )
    };
    Box::into_raw(Sched::new(list, types, graph_size, parallel, op_offload)) as ggml_backend_sched_t
}

/// # Safety
/// `sched` is NULL or a live scheduler, not used again.
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_sched_free(sched: ggml_backend_sched_t) {
    if !sched.is_null() {
        refuse_reentry(sched, "ggml_backend_sched_free");
        // SAFETY: a non-NULL `sched` is the `Box<Sched>` leaked by ggml_backend_sched_new,
        // not used again (this function's contract).
        drop(unsafe { Box::from_raw(sched as *mut Sched) });
    }
}

/// # Safety
/// `sched` is a live scheduler and `measure_graph` a live graph (NULL aborts); `sizes` has room
/// for one size per backend.
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_sched_reserve_size(
    sched: ggml_backend_sched_t,
    measure_graph: *mut ggml_cgraph,
    sizes: *mut usize,
) {
    const F: &str = "ggml_backend_sched_reserve_size";
    // SAFETY: `sched` is a live scheduler (this function's contract), one thread at a time.
    let s = unsafe { sched_mut(sched, F) };
    let g = handle_arg!(measure_graph, Graph, "ggml_backend_sched_reserve_size");
    if sizes.is_null() {
        super::null_argument(F, "sizes");
    }
    // SAFETY: `sizes` is non-NULL (checked above) and has room for one size per backend
    // (this function's contract); it is caller memory, not part of the scheduler.
    let sizes = unsafe { std::slice::from_raw_parts_mut(sizes, s.n_backends()) };
    s.reserve_size(g, sizes)
}

/// # Safety
/// `sched` is a live scheduler and `measure_graph` a live graph (NULL aborts).
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_sched_reserve(
    sched: ggml_backend_sched_t,
    measure_graph: *mut ggml_cgraph,
) -> bool {
    // SAFETY: `sched` is a live scheduler (this function's contract), one thread at a time.
    let s = unsafe { sched_mut(sched, "ggml_backend_sched_reserve") };
    s.reserve(handle_arg!(
        measure_graph,
        Graph,
        "ggml_backend_sched_reserve"
    ))
}

/// # Safety
/// `sched` is a live scheduler.
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_sched_get_n_backends(sched: ggml_backend_sched_t) -> i32 {
    // SAFETY: `sched` is a live scheduler (this function's contract), one thread at a time.
    unsafe { sched_mut(sched, "ggml_backend_sched_get_n_backends") }.n_backends() as i32
}

/// # Safety
/// `sched` is a live scheduler.
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_sched_get_backend(
    sched: ggml_backend_sched_t,
    i: i32,
) -> ggml_backend_t {
    // SAFETY: `sched` is a live scheduler (this function's contract), one thread at a time.
    let s = unsafe { sched_mut(sched, "ggml_backend_sched_get_backend") };
    ggml_assert!(
        i >= 0 && (i as usize) < s.n_backends(),
        "ggml_backend_sched_get_backend: index {i} out of range"
    );
    s.backends[i as usize].as_ptr()
}

/// # Safety
/// `sched` is a live scheduler.
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_sched_get_n_splits(sched: ggml_backend_sched_t) -> i32 {
    // SAFETY: `sched` is a live scheduler (this function's contract), one thread at a time.
    unsafe { sched_mut(sched, "ggml_backend_sched_get_n_splits") }.n_splits() as i32
}

/// # Safety
/// `sched` is a live scheduler.
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_sched_get_n_copies(sched: ggml_backend_sched_t) -> i32 {
    // SAFETY: `sched` is a live scheduler (this function's contract), one thread at a time.
    unsafe { sched_mut(sched, "ggml_backend_sched_get_n_copies") }.n_copies as i32
}

/// # Safety
/// `sched` is a live scheduler.
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_sched_get_buffer_type(
    sched: ggml_backend_sched_t,
    backend: ggml_backend_t,
) -> ggml_backend_buffer_type_t {
    // SAFETY: `sched` is a live scheduler (this function's contract), one thread at a time.
    let s = unsafe { sched_mut(sched, "ggml_backend_sched_get_buffer_type") };
    // SAFETY: `backend` is NULL or a live backend (the C API's handle contract).
    s.buffer_type(unsafe { Backend::from_ptr(backend) })
}

/// # Safety
/// `sched` is a live scheduler.
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_sched_get_buffer_size(
    sched: ggml_backend_sched_t,
    backend: ggml_backend_t,
) -> usize {
    // SAFETY: `sched` is a live scheduler (this function's contract), one thread at a time.
    let s = unsafe { sched_mut(sched, "ggml_backend_sched_get_buffer_size") };
    // SAFETY: `backend` is NULL or a live backend (the C API's handle contract).
    s.buffer_size(unsafe { Backend::from_ptr(backend) })
}

/// # Safety
/// `sched` is a live scheduler and `node` a live tensor (NULL aborts).
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_sched_set_tensor_backend(
    sched: ggml_backend_sched_t,
    node: *mut ggml_tensor,
    backend: ggml_backend_t,
) {
    // SAFETY: `sched` is a live scheduler (this function's contract), one thread at a time.
    let s = unsafe { sched_mut(sched, "ggml_backend_sched_set_tensor_backend") };
    let t = handle_arg!(node, Tensor, "ggml_backend_sched_set_tensor_backend");
    // SAFETY: `backend` is NULL or a live backend (the C API's handle contract).
    s.set_tensor_backend(t, unsafe { Backend::from_ptr(backend) })
}

/// # Safety
/// `sched` is a live scheduler and `node` a live tensor (NULL aborts).
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_sched_get_tensor_backend(
    sched: ggml_backend_sched_t,
    node: *mut ggml_tensor,
) -> ggml_backend_t {
    // SAFETY: `sched` is a live scheduler (this function's contract), one thread at a time.
    let s = unsafe { sched_mut(sched, "ggml_backend_sched_get_tensor_backend") };
    let t = handle_arg!(node, Tensor, "ggml_backend_sched_get_tensor_backend");
    s.tensor_backend(t)
        .map_or(std::ptr::null_mut(), Backend::as_ptr)
}

/// # Safety
/// `sched` is a live scheduler and `graph` a live graph (NULL aborts).
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_sched_split_graph(
    sched: ggml_backend_sched_t,
    graph: *mut ggml_cgraph,
) {
    // SAFETY: `sched` is a live scheduler (this function's contract), one thread at a time.
    let s = unsafe { sched_mut(sched, "ggml_backend_sched_split_graph") };
    s.split_graph(handle_arg!(graph, Graph, "ggml_backend_sched_split_graph"))
}

/// # Safety
/// `sched` is a live scheduler and `graph` a live graph (NULL aborts).
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_sched_alloc_graph(
    sched: ggml_backend_sched_t,
    graph: *mut ggml_cgraph,
) -> bool {
    // SAFETY: `sched` is a live scheduler (this function's contract), one thread at a time.
    let s = unsafe { sched_mut(sched, "ggml_backend_sched_alloc_graph") };
    s.alloc_graph(handle_arg!(graph, Graph, "ggml_backend_sched_alloc_graph"))
}

/// # Safety
/// `sched` is a live scheduler and `graph` a live graph (NULL aborts).
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_sched_graph_compute(
    sched: ggml_backend_sched_t,
    graph: *mut ggml_cgraph,
) -> ggml_status {
    // SAFETY: `sched` is a live scheduler (this function's contract), one thread at a time.
    let s = unsafe { sched_mut(sched, "ggml_backend_sched_graph_compute") };
    let _computing = Computing::enter(sched);
    s.graph_compute(handle_arg!(
        graph,
        Graph,
        "ggml_backend_sched_graph_compute"
    ))
}

/// # Safety
/// `sched` is a live scheduler and `graph` a live graph (NULL aborts) until the scheduler is
/// synchronized.
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_sched_graph_compute_async(
    sched: ggml_backend_sched_t,
    graph: *mut ggml_cgraph,
) -> ggml_status {
    // SAFETY: `sched` is a live scheduler (this function's contract), one thread at a time.
    let s = unsafe { sched_mut(sched, "ggml_backend_sched_graph_compute_async") };
    let _computing = Computing::enter(sched);
    s.graph_compute_async(handle_arg!(
        graph,
        Graph,
        "ggml_backend_sched_graph_compute_async"
    ))
}

/// # Safety
/// `sched` is a live scheduler.
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_sched_synchronize(sched: ggml_backend_sched_t) {
    // SAFETY: `sched` is a live scheduler (this function's contract), one thread at a time.
    unsafe { sched_mut(sched, "ggml_backend_sched_synchronize") }.synchronize()
}

/// # Safety
/// `sched` is a live scheduler.
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_sched_reset(sched: ggml_backend_sched_t) {
    // SAFETY: `sched` is a live scheduler (this function's contract), one thread at a time.
    unsafe { sched_mut(sched, "ggml_backend_sched_reset") }.reset()
}

/// # Safety
/// `sched` is a live scheduler; the callback may be called with `user_data` during compute.
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_sched_set_eval_callback(
    sched: ggml_backend_sched_t,
    callback: ggml_backend_sched_eval_callback,
    user_data: *mut c_void,
) {
    // SAFETY: `sched` is a live scheduler (this function's contract), one thread at a time.
    let s = unsafe { sched_mut(sched, "ggml_backend_sched_set_eval_callback") };
    let cb: EvalCallback = callback;
    s.eval_callback = cb;
    s.eval_user_data = user_data;
}
