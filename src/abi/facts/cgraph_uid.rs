//! Fact `cgraph-uid`: a graph carries an identity (`uid`). Two graphs with the same non-zero
//! uid are the same graph, so backends may replay what they prepared for it (CUDA skips its
//! graph checks). Without it a graph is known by its contents only.

use std::ffi::c_int;

use crate::abi::ggml::{ggml_hash_set, ggml_tensor};

/// `struct ggml_cgraph` (ggml-impl.h). Private to ggml, but its layout is part of the
/// contract between ggml-base and the backend layer; `ggml_graph_view` returns it by value.
#[cfg(feature = "cgraph-uid")]
#[repr(C)]
pub struct ggml_cgraph {
    pub size: c_int,
    pub n_nodes: c_int,
    pub n_leafs: c_int,
    pub nodes: *mut *mut ggml_tensor,
    pub grads: *mut *mut ggml_tensor,
    pub grad_accs: *mut *mut ggml_tensor,
    pub leafs: *mut *mut ggml_tensor,
    pub use_counts: *mut i32,
    pub visited_hash_set: ggml_hash_set,
    pub order: c_int,
    /// The graph's identity; 0: unknown.
    pub uid: u64,
}

/// `struct ggml_cgraph` (ggml-impl.h). Private to ggml, but its layout is part of the
/// contract between ggml-base and the backend layer; `ggml_graph_view` returns it by value.
#[cfg(not(feature = "cgraph-uid"))]
#[repr(C)]
pub struct ggml_cgraph {
    pub size: c_int,
    pub n_nodes: c_int,
    pub n_leafs: c_int,
    pub nodes: *mut *mut ggml_tensor,
    pub grads: *mut *mut ggml_tensor,
    pub grad_accs: *mut *mut ggml_tensor,
    pub leafs: *mut *mut ggml_tensor,
    pub use_counts: *mut i32,
    pub visited_hash_set: ggml_hash_set,
    pub order: c_int,
}

impl ggml_cgraph {
    /// The graph's identity (0: none).
    pub fn uid(&self) -> u64 {
        #[cfg(feature = "cgraph-uid")]
        return self.uid;
        #[cfg(not(feature = "cgraph-uid"))]
        0
    }
    /// Sets the identity; nothing without identities.
    pub fn set_uid(&mut self, uid: u64) {
        #[cfg(feature = "cgraph-uid")]
        {
            self.uid = uid;
        }
        #[cfg(not(feature = "cgraph-uid"))]
        let _ = uid;
    }
}

#[cfg(feature = "cgraph-uid")]
extern "C" {
    /// ggml.c: a process-wide counter, never 0.
    fn ggml_graph_next_uid() -> u64;
}

/// A fresh graph identity (0 without identities).
pub fn next_graph_uid() -> u64 {
    #[cfg(feature = "cgraph-uid")]
    // SAFETY: no arguments; ggml increments an atomic counter.
    return unsafe { ggml_graph_next_uid() };
    #[cfg(not(feature = "cgraph-uid"))]
    0
}
