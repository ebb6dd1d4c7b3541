//! Graph metadata for the meta backend's own graphs (per-device sub-graphs, AllReduce chains):
//! a ggml context with room for graphs only, whose tensors live elsewhere.

use std::ptr;

use crate::abi::log::{abort, ggml_assert};
use crate::abi::*;

/// A ggml context holding only graph metadata (no tensor data), freed when dropped.
pub(super) struct GraphArena(*mut ggml_context);

impl GraphArena {
    /// Room for `count` graphs of up to `size` nodes each, and one [`marker`](Self::marker).
    pub(super) fn new(count: usize, size: usize) -> GraphArena {
        // SAFETY: ggml_graph_overhead_custom computes a size; ggml_init with no_alloc allocates
        // a metadata pool of that size (or returns NULL).
        let ctx = unsafe {
            let per = ggml_graph_overhead_custom(size.max(1), false);
            ggml_init(ggml_init_params {
                mem_size: per * count.max(1) + ggml_tensor_overhead() + 4096,
                mem_buffer: ptr::null_mut(),
                no_alloc: true,
            })
        };
        ggml_assert!(
            !ctx.is_null(),
            "meta backend: cannot allocate graph metadata"
        );
        GraphArena(ctx)
    }

    /// An empty graph of up to `size` nodes, with ggml's visited set and use counts.
    pub(super) fn graph(&self, size: usize) -> Graph {
        // SAFETY: the arena was sized by its creator for the graphs asked of it; ggml aborts
        // when the pool is exhausted.
        let gp = unsafe { ggml_new_graph_custom(self.0, size.max(1), false) };
        // SAFETY: a live graph in this arena, which outlives its users (the plan or the call).
        unsafe { Graph::from_ptr(gp) }
            .unwrap_or_else(|| abort(file!(), line!(), "meta backend: graph allocation failed"))
    }

    /// An empty tensor (no elements, no data, no op): a node every backend skips.
    pub(super) fn marker(&self) -> Tensor {
        // SAFETY: a no_alloc context with room for one more tensor header (see `new`).
        let t = unsafe { ggml_new_tensor_1d(self.0, GGML_TYPE_F32, 0) };
        // SAFETY: a live tensor header in this arena, which outlives its users.
        unsafe { Tensor::from_ptr(t) }
            .unwrap_or_else(|| abort(file!(), line!(), "meta backend: marker allocation failed"))
    }
}

impl Drop for GraphArena {
    fn drop(&mut self) {
        // SAFETY: created by ggml_init in `new`; its graphs are not used after this.
        unsafe { ggml_free(self.0) }
    }
}
