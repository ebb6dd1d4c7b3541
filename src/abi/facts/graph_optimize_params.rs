//! Fact `graph-optimize-params`: a backend's `graph_optimize` also receives
//! `ggml_backend_graph_optimize_params`, through which a backend that runs parts of the graph
//! out of order keeps a tensor allocated until a later node (`add_alloc_dep`). Without it the
//! entry takes the backend and the graph only.

#[cfg(feature = "graph-optimize-params")]
use std::ffi::c_void;

use crate::abi::backend::ggml_backend_t;
use crate::abi::ggml::ggml_cgraph;
#[cfg(feature = "graph-optimize-params")]
use crate::abi::ggml::ggml_tensor;
use crate::abi::handle::{AllocDep, Backend, Graph};

/// What `graph_optimize` receives: a backend that runs parts of the graph out of order keeps
/// a tensor allocated until a later node of the same graph with `add_alloc_dep`.
#[cfg(feature = "graph-optimize-params")]
#[repr(C)]
pub struct ggml_backend_graph_optimize_params {
    pub add_alloc_dep: Option<
        unsafe extern "C" fn(
            user_data: *mut c_void,
            tensor: *mut ggml_tensor,
            until: *mut ggml_tensor,
        ),
    >,
    pub user_data: *mut c_void,
}

#[cfg(feature = "graph-optimize-params")]
pub type ggml_backend_graph_optimize_t = Option<
    unsafe extern "C" fn(
        backend: ggml_backend_t,
        cgraph: *mut ggml_cgraph,
        params: *mut ggml_backend_graph_optimize_params,
    ),
>;

#[cfg(not(feature = "graph-optimize-params"))]
pub type ggml_backend_graph_optimize_t =
    Option<unsafe extern "C" fn(backend: ggml_backend_t, cgraph: *mut ggml_cgraph)>;

impl Backend {
    /// Lets the backend reorder `graph` (fusion, concurrent streams) and returns the
    /// allocation dependencies it asks for (none without the fact).
    pub fn graph_optimize(&self, graph: Graph) -> Vec<AllocDep> {
        let Some(f) = self.iface().graph_optimize else {
            return Vec::new();
        };
        #[cfg(feature = "graph-optimize-params")]
        {
            unsafe extern "C" fn add(
                user_data: *mut c_void,
                tensor: *mut ggml_tensor,
                until: *mut ggml_tensor,
            ) {
                // SAFETY: `user_data` is the Vec below, alive and not otherwise borrowed while
                // the backend runs; the tensors are nodes of the graph it was given.
                let deps = unsafe { &mut *(user_data as *mut Vec<AllocDep>) };
                // SAFETY: as above.
                let (tensor, until) = unsafe {
                    (
                        crate::abi::Tensor::from_ptr(tensor),
                        crate::abi::Tensor::from_ptr(until),
                    )
                };
                if let (Some(tensor), Some(until)) = (tensor, until) {
                    deps.push(AllocDep { tensor, until });
                }
            }
            let mut deps: Vec<AllocDep> = Vec::new();
            let mut params = ggml_backend_graph_optimize_params {
                add_alloc_dep: Some(add),
                user_data: &mut deps as *mut Vec<AllocDep> as *mut c_void,
            };
            // SAFETY: vtable entry of a live backend, called with it, a live graph and params
            // that outlive the call.
            unsafe { f(self.as_ptr(), graph.as_ptr(), &mut params) };
            deps
        }
        #[cfg(not(feature = "graph-optimize-params"))]
        {
            // SAFETY: vtable entry of a live backend, called with it and a live graph.
            unsafe { f(self.as_ptr(), graph.as_ptr()) };
            Vec::new()
        }
    }
}
