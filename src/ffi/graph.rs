//! Graph utilities: `ggml_backend_graph_copy`, `ggml_backend_graph_copy_free`,
//! `ggml_backend_compare_graph_backend`.

use std::ffi::c_void;

use super::handle_arg;
use crate::abi::*;
use crate::backend::graph_copy;

/// # Safety
/// `backend` is a live backend and `graph` a live graph (NULL aborts).
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_graph_copy(
    backend: ggml_backend_t,
    graph: *mut ggml_cgraph,
) -> ggml_backend_graph_copy {
    let b = handle_arg!(backend, Backend, "ggml_backend_graph_copy");
    let g = handle_arg!(graph, Graph, "ggml_backend_graph_copy");
    graph_copy::copy(b, g).map_or(graph_copy::EMPTY, graph_copy::GraphCopy::into_c)
}

/// # Safety
/// `copy` was returned by `ggml_backend_graph_copy` and is not freed again or used after the
/// call.
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_graph_copy_free(copy: ggml_backend_graph_copy) {
    graph_copy::free(&copy)
}

/// # Safety
/// `backend1` and `backend2` are live backends and `graph` a live graph (NULL aborts);
/// `test_nodes` points to `num_test_nodes` tensor pointers (or is NULL when that is 0).
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_compare_graph_backend(
    backend1: ggml_backend_t,
    backend2: ggml_backend_t,
    graph: *mut ggml_cgraph,
    callback: ggml_backend_eval_callback,
    user_data: *mut c_void,
    test_nodes: *const *const ggml_tensor,
    num_test_nodes: usize,
) -> bool {
    const F: &str = "ggml_backend_compare_graph_backend";
    let b1 = handle_arg!(backend1, Backend, "ggml_backend_compare_graph_backend");
    let b2 = handle_arg!(backend2, Backend, "ggml_backend_compare_graph_backend");
    let g = handle_arg!(graph, Graph, "ggml_backend_compare_graph_backend");
    let Some(callback) = callback else {
        super::null_argument(F, "callback")
    };
    let nodes = if num_test_nodes == 0 {
        &[][..]
    } else {
        if test_nodes.is_null() {
            super::null_argument(F, "test_nodes");
        }
        // SAFETY: `test_nodes` is non-NULL (checked above) and points to `num_test_nodes`
        // tensor pointers (this function's contract).
        unsafe { std::slice::from_raw_parts(test_nodes, num_test_nodes) }
    };
    // SAFETY: the caller's callback receives the two live result tensors and its user data.
    let compare_nodes = |i: usize, t1: Tensor, t2: Tensor| unsafe {
        callback(i as i32, t1.as_ptr(), t2.as_ptr(), user_data)
    };
    graph_copy::compare(b1, b2, g, compare_nodes, nodes)
}
