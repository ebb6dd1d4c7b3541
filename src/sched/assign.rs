//! Pass 1–4: which backend computes each node — the passes are the core's
//! (`ggml_backend_rs_core::assign`); this module shows them the graph and the backends through
//! ggml's handles and turns their errors into ggml aborts.
//!
//! Guarantees: afterwards every node and every source of a node has a backend; a tensor
//! already allocated in a buffer runs on a backend that can use that buffer (or the program
//! stops with a message naming it); user assignments (`set_tensor_backend`) are kept.

use ggml_backend_rs_core::assign::{self, AssignError};
use ggml_backend_rs_core::partition;
use ggml_backend_rs_core::Op;

use super::{Sched, POLICY};
use crate::abi::log::{abort, log_debug};
use crate::abi::*;

/// A ggml graph as the passes see it.
pub(super) struct GraphView(pub(super) Graph);

impl partition::Nodes for GraphView {
    fn n_nodes(&self) -> usize {
        self.0.n_nodes()
    }
    fn node(&self, i: usize) -> Tensor {
        self.0.node(i)
    }
    fn srcs_indexed(&self, t: Tensor) -> impl Iterator<Item = (usize, Tensor)> + '_ {
        t.srcs_by_slot()
    }
}

impl assign::Graph for GraphView {
    fn leafs(&self) -> impl Iterator<Item = Tensor> + '_ {
        self.0.leafs()
    }
    fn nodes(&self) -> impl Iterator<Item = Tensor> + '_ {
        self.0.nodes()
    }
}

/// A graph's tensors are ggml's tensors.
impl assign::Tensors for GraphView {
    type Tensor = Tensor;
    type Buft = ggml_backend_buffer_type_t;

    fn srcs(&self, t: Tensor) -> impl Iterator<Item = Tensor> + '_ {
        t.srcs_by_slot().map(|(_, s)| s)
    }
    fn view_src(&self, t: Tensor) -> Option<Tensor> {
        t.view_src()
    }
    fn is_view_op(&self, t: Tensor) -> bool {
        t.is_view_op()
    }
    fn is_input(&self, t: Tensor) -> bool {
        t.flags() & GGML_TENSOR_FLAG_INPUT != 0
    }
    fn op(&self, t: Tensor) -> Option<Op> {
        t.op_kind()
    }
    fn data_buft(&self, t: Tensor) -> Option<ggml_backend_buffer_type_t> {
        t.data_buffer().map(|b| b.buft())
    }
    fn in_weight_buffer(&self, t: Tensor) -> bool {
        t.own_buffer().is_some_and(|b| b.usage() == USAGE_WEIGHTS)
    }
    fn in_host_buffer(&self, t: Tensor) -> bool {
        t.own_buffer().is_some_and(|b| b.buft_handle().is_host())
    }
}

/// The scheduler's backends as the passes see them.
pub(super) struct BackendsView<'a> {
    pub(super) backends: &'a [Backend],
    pub(super) bufts: &'a [ggml_backend_buffer_type_t],
    pub(super) op_offload: bool,
}

impl BackendsView<'_> {
    fn device(&self, b: usize) -> Device {
        self.backends[b].device_handle("ggml_backend_sched")
    }
}

impl assign::Backends<GraphView> for BackendsView<'_> {
    fn count(&self) -> usize {
        self.backends.len()
    }
    fn supports_op(&self, b: usize, op: Tensor) -> bool {
        self.device(b).supports_op(op)
    }
    fn supports_buft(&self, b: usize, buft: ggml_backend_buffer_type_t) -> bool {
        // SAFETY: buffer types of live buffers / of the scheduler's backends outlive the graph.
        match unsafe { Buft::from_ptr(buft) } {
            Some(buft) => self.device(b).supports_buft(buft),
            None => false,
        }
    }
    fn offload_op(&self, b: usize, op: Tensor) -> bool {
        self.device(b).offload_op(op)
    }
    fn buft(&self, b: usize) -> ggml_backend_buffer_type_t {
        self.bufts[b]
    }
    fn op_offload(&self) -> bool {
        self.op_offload
    }
    fn weight_copied(&self, weight: Tensor, op: Tensor) {
        log_debug!(
            "ggml_backend_sched: no backend supports op {} with a weight in buffer type of tensor {}; the weight will be copied",
            op.op_desc(),
            weight.name_string()
        );
    }
}

impl Sched {
    pub(super) fn backend_id(&self, t: Tensor) -> Option<usize> {
        self.backend_of.get(&t).copied()
    }

    /// Runs passes 1–4 over `graph`.
    pub(super) fn assign_backends(&mut self, graph: Graph) {
        let g = GraphView(graph);
        let backends = BackendsView {
            backends: &self.backends,
            bufts: &self.bufts,
            op_offload: self.op_offload,
        };
        match assign::assign(&g, &backends, POLICY.assign, &mut self.backend_of) {
            Ok(()) => {}
            Err(AssignError::Preallocated { tensor }) => abort(
                file!(),
                line!(),
                &format!(
                    "pre-allocated tensor ({}) in a buffer ({}) that cannot run the operation ({})",
                    tensor.name_string(),
                    tensor
                        .data_buffer()
                        .map_or_else(String::new, |b| b.buft_handle().name_string()),
                    tensor.op_desc()
                ),
            ),
            Err(AssignError::Unsupported { node }) => abort(
                file!(),
                line!(),
                &format!(
                    "ggml_backend_sched: no backend supports node '{}' ({})",
                    node.name_string(),
                    node.op_desc()
                ),
            ),
        }
    }
}
