//! `ggml_backend_sched_*`: exported so that libllama links; the scheduler itself is the
//! next milestone. Until then every entry point stops the process with a clear message
//! instead of returning values a caller would mistake for a working scheduler.

#![allow(non_camel_case_types)]

use std::ffi::c_void;

use crate::abi::*;

/// Opaque `struct ggml_backend_sched`.
#[repr(C)]
pub struct ggml_backend_sched {
    _private: [u8; 0],
}

pub type ggml_backend_sched_t = *mut ggml_backend_sched;

pub type ggml_backend_sched_eval_callback =
    Option<unsafe extern "C" fn(t: *mut ggml_tensor, ask: bool, user_data: *mut c_void) -> bool>;

#[cold]
fn pending(func: &str) -> ! {
    crate::log::abort(
        file!(),
        line!(),
        &format!("{func}: the backend scheduler is not implemented in ggml-backend-rs yet"),
    )
}

macro_rules! pending_fns {
    ($( fn $name:ident($($arg:ident: $ty:ty),*) $(-> $ret:ty)?; )*) => {$(
        #[no_mangle]
        pub extern "C" fn $name($(_: $ty),*) $(-> $ret)? {
            $( let _ = stringify!($arg); )*
            pending(stringify!($name))
        }
    )*};
}

pending_fns! {
    fn ggml_backend_sched_new(backends: *mut ggml_backend_t, bufts: *mut ggml_backend_buffer_type_t, n_backends: i32, graph_size: usize, parallel: bool, op_offload: bool) -> ggml_backend_sched_t;
    fn ggml_backend_sched_free(sched: ggml_backend_sched_t);
    fn ggml_backend_sched_reserve_size(sched: ggml_backend_sched_t, measure_graph: *mut ggml_cgraph, sizes: *mut usize);
    fn ggml_backend_sched_reserve(sched: ggml_backend_sched_t, measure_graph: *mut ggml_cgraph) -> bool;
    fn ggml_backend_sched_get_n_backends(sched: ggml_backend_sched_t) -> i32;
    fn ggml_backend_sched_get_backend(sched: ggml_backend_sched_t, i: i32) -> ggml_backend_t;
    fn ggml_backend_sched_get_n_splits(sched: ggml_backend_sched_t) -> i32;
    fn ggml_backend_sched_get_n_copies(sched: ggml_backend_sched_t) -> i32;
    fn ggml_backend_sched_get_buffer_type(sched: ggml_backend_sched_t, backend: ggml_backend_t) -> ggml_backend_buffer_type_t;
    fn ggml_backend_sched_get_buffer_size(sched: ggml_backend_sched_t, backend: ggml_backend_t) -> usize;
    fn ggml_backend_sched_set_tensor_backend(sched: ggml_backend_sched_t, node: *mut ggml_tensor, backend: ggml_backend_t);
    fn ggml_backend_sched_get_tensor_backend(sched: ggml_backend_sched_t, node: *mut ggml_tensor) -> ggml_backend_t;
    fn ggml_backend_sched_split_graph(sched: ggml_backend_sched_t, graph: *mut ggml_cgraph);
    fn ggml_backend_sched_alloc_graph(sched: ggml_backend_sched_t, graph: *mut ggml_cgraph) -> bool;
    fn ggml_backend_sched_graph_compute(sched: ggml_backend_sched_t, graph: *mut ggml_cgraph) -> ggml_status;
    fn ggml_backend_sched_graph_compute_async(sched: ggml_backend_sched_t, graph: *mut ggml_cgraph) -> ggml_status;
    fn ggml_backend_sched_synchronize(sched: ggml_backend_sched_t);
    fn ggml_backend_sched_reset(sched: ggml_backend_sched_t);
    fn ggml_backend_sched_set_eval_callback(sched: ggml_backend_sched_t, callback: ggml_backend_sched_eval_callback, user_data: *mut c_void);
}
