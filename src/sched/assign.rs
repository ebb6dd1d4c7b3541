//! Pass 1–4: which backend computes each node.
//!
//! Guarantees: afterwards every node and every source of a node has a backend; a tensor
//! already allocated in a buffer runs on a backend that can use that buffer (or the program
//! stops with a message naming it); user assignments (`set_tensor_backend`) are kept.

use super::Sched;
use crate::abi::*;
use crate::log::{abort, ggml_assert, log_debug};

impl Sched {
    pub(super) fn backend_id(&self, t: Tensor) -> Option<usize> {
        self.backend_of.get(&t).copied()
    }

    fn supports_op(&self, b: usize, op: Tensor) -> bool {
        self.backends[b]
            .device_handle("ggml_backend_sched")
            .supports_op(op)
    }

    fn supports_buft(&self, b: usize, buft: ggml_backend_buffer_type_t) -> bool {
        // SAFETY: buffer types of live buffers / of the scheduler.
        match unsafe { Buft::from_ptr(buft) } {
            Some(buft) => self.backends[b]
                .device_handle("ggml_backend_sched")
                .supports_buft(buft),
            None => false,
        }
    }

    /// Highest-priority backend that can run `op` reading `tensor` where it is allocated.
    fn backend_from_buffer(&self, tensor: Tensor, op: Tensor) -> Option<usize> {
        let buffer = tensor.data_buffer()?;
        let found = (0..self.n_backends())
            .find(|&b| self.supports_buft(b, buffer.buft()) && self.supports_op(b, op));
        if found.is_none() {
            log_debug!(
                "ggml_backend_sched: no backend supports op {} with a weight in buffer type of tensor {}; the weight will be copied",
                op.op_desc(),
                tensor.name_string()
            );
        }
        found
    }

    /// The backend a node must or should use given where its data and inputs already are.
    fn backend_from_current(&self, tensor: Tensor) -> Option<usize> {
        if let Some(b) = self.backend_from_buffer(tensor, tensor) {
            return Some(b);
        }
        if let Some(view_src) = tensor.view_src() {
            if let Some(b) = self.backend_from_buffer(view_src, tensor) {
                return Some(b);
            }
        }
        if let Some(buffer) = tensor.data_buffer() {
            abort(
                file!(),
                line!(),
                &format!(
                    "pre-allocated tensor ({}) in a buffer ({}) that cannot run the operation ({})",
                    tensor.name_string(),
                    buffer.buft_handle().name_string(),
                    tensor.op_desc()
                ),
            );
        }
        // Graph inputs start on the CPU (the last backend), where the user writes them.
        if tensor.flags() & GGML_TENSOR_FLAG_INPUT != 0 {
            return Some(self.n_backends() - 1);
        }
        // Ops that read weights run next to the weights (ROPE's frequency table is too small
        // to decide anything).
        for src in tensor.srcs() {
            let Some(src_buffer) = src.own_buffer() else {
                continue;
            };
            if tensor.op() == GGML_OP_ROPE
                || src_buffer.usage()
                    != ggml_backend_buffer_usage::GGML_BACKEND_BUFFER_USAGE_WEIGHTS
            {
                continue;
            }
            let src_backend = self.backend_from_buffer(src, tensor);
            // Host weights are on the CPU backend; a higher-priority backend may still want
            // the op (e.g. a large matmul) if op offload is on.
            if self.op_offload
                && src_backend == Some(self.n_backends() - 1)
                && src_buffer.buft_handle().is_host()
            {
                let cpu = self.n_backends() - 1;
                if let Some(b) = (0..cpu).find(|&b| {
                    self.supports_op(b, tensor)
                        && self.backends[b]
                            .device_handle("ggml_backend_sched")
                            .offload_op(tensor)
                }) {
                    return Some(b);
                }
            }
            return src_backend;
        }
        None
    }

    /// Whether backend `b` can read `t` where it is (or will be) allocated.
    pub(super) fn buffer_supported(&self, t: Tensor, b: usize) -> bool {
        let buft = match t.data_buffer() {
            Some(buffer) => buffer.buft(),
            None => match self
                .backend_id(t)
                .or_else(|| t.view_src().and_then(|v| self.backend_id(v)))
            {
                Some(id) => self.bufts[id],
                None => return false,
            },
        };
        self.supports_buft(b, buft)
    }

    fn set_if_supported(&mut self, node: Tensor, b: usize) {
        if self.supports_op(b, node) {
            self.backend_of.insert(node, b);
        }
    }

    /// Runs passes 1–4 over `graph`.
    pub(super) fn assign_backends(&mut self, graph: Graph) {
        self.assign_from_current(graph);
        self.expand(graph);
        self.upgrade_and_fill(graph);
        self.assign_sources(graph);
    }

    /// Pass 1: tensors whose placement is already decided by their buffers or inputs.
    fn assign_from_current(&mut self, graph: Graph) {
        for leaf in graph.leafs().chain(graph.nodes()) {
            if self.backend_id(leaf).is_none() {
                if let Some(b) = self.backend_from_current(leaf) {
                    self.backend_of.insert(leaf, b);
                }
            }
        }
    }

    /// Pass 2: neighbours of assigned nodes join their backend where it supports them:
    /// first the non-CPU backends spread down and up (so the CPU is used only where it must
    /// be), then any backend spreads down and up.
    fn expand(&mut self, graph: Graph) {
        let cpu = self.n_backends() - 1;
        let order: Vec<Tensor> = graph.nodes().filter(|n| !n.is_view_op()).collect();
        for (skip_cpu, reverse) in [(true, false), (true, true), (false, false), (false, true)] {
            let mut current: Option<usize> = None;
            let mut visit = |sched: &mut Sched, node: Tensor| match sched.backend_id(node) {
                Some(b) => current = if skip_cpu && b == cpu { None } else { Some(b) },
                None => {
                    if let Some(b) = current {
                        sched.set_if_supported(node, b);
                    }
                }
            };
            if reverse {
                order.iter().rev().for_each(|&n| visit(self, n));
            } else {
                order.iter().for_each(|&n| visit(self, n));
            }
        }
    }

    /// Pass 3: move assigned nodes to a higher-priority backend that uses the same buffer
    /// type and can read all their sources; give each node still unassigned the backend that
    /// supports it and can read most of its sources.
    fn upgrade_and_fill(&mut self, graph: Graph) {
        for node in graph.nodes() {
            if node.is_view_op() {
                continue;
            }
            match self.backend_id(node) {
                None => {
                    let mut best: Option<(usize, usize)> = None;
                    for b in 0..self.n_backends() {
                        if !self.supports_op(b, node) {
                            continue;
                        }
                        let n_supported = node
                            .srcs()
                            .filter(|&s| {
                                let placed = self.backend_id(s).is_some()
                                    || s.view_src().is_some_and(|v| self.backend_id(v).is_some());
                                placed && self.buffer_supported(s, b)
                            })
                            .count();
                        if best.is_none_or(|(_, n)| n_supported > n) {
                            best = Some((b, n_supported));
                        }
                    }
                    if let Some((b, _)) = best {
                        self.backend_of.insert(node, b);
                    }
                }
                Some(current) => {
                    let upgrade = (0..current).find(|&b| {
                        self.bufts[b] == self.bufts[current]
                            && self.supports_op(b, node)
                            && node.srcs().all(|s| self.buffer_supported(s, b))
                    });
                    if let Some(b) = upgrade {
                        self.backend_of.insert(node, b);
                    }
                }
            }
        }
    }

    /// Pass 4: views follow their source, unassigned sources follow their consumer, and a node
    /// still unassigned goes to the first backend that supports it.
    fn assign_sources(&mut self, graph: Graph) {
        for node in graph.nodes() {
            if let Some(view_src) = node.view_src() {
                if self.backend_id(node).is_none() {
                    if let Some(b) = self.backend_id(view_src) {
                        self.backend_of.insert(node, b);
                    }
                }
            }
            let current = self.backend_id(node);
            for src in node.srcs() {
                if self.backend_id(src).is_some() {
                    continue;
                }
                let b = match src.view_src() {
                    Some(v) => self.backend_id(v),
                    None => current,
                };
                if let Some(b) = b {
                    self.backend_of.insert(src, b);
                }
            }
            if self.backend_id(node).is_none() {
                if let Some(b) = (0..self.n_backends()).find(|&b| self.supports_op(b, node)) {
                    self.backend_of.insert(node, b);
                }
            }
            ggml_assert!(
                self.backend_id(node).is_some(),
                "ggml_backend_sched: no backend supports node '{}' ({})",
                node.name_string(),
                node.op_desc()
            );
        }
    }
}
