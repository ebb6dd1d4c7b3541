//! Pass 5: cut the assigned graph into splits and build the graph ggml-alloc places.
//!
//! Guarantees: every node of a split runs on the split's backend and reads only tensors that
//! backend can use — sources from elsewhere are replaced by copies, which the split lists as
//! its inputs; the graph handed to ggml-alloc contains, before each split's nodes, its input
//! copies (so they are allocated when the split starts) and a dependency on each original (so
//! the original is not freed before it is copied).

use std::ffi::c_int;

use ggml_backend_rs_core::partition::{self, PartitionError};

use super::assign::GraphView;
use super::{AllocGraphSize, Copies, GraphSplit, Sched, MAX_COPIES, MAX_SPLIT_INPUTS, POLICY};
use crate::abi::log::{abort, ggml_assert, log};
use crate::abi::*;

extern "C" {
    fn ggml_format_name(
        tensor: *mut ggml_tensor,
        fmt: *const std::ffi::c_char,
        ...
    ) -> *mut ggml_tensor;
    fn ggml_set_input(tensor: *mut ggml_tensor);
    fn ggml_set_output(tensor: *mut ggml_tensor);
}

impl Sched {
    /// `ggml_backend_sched_split_graph`: all passes up to the allocation.
    pub fn split_graph(&mut self, graph: Graph) {
        self.splits.clear();
        self.graph_inputs.clear();
        // The split holds assignments: the next `reset` must clear them.
        self.is_reset = false;
        self.new_context();
        // The caller's graph is placed anew: backends must not take it for the last one.
        graph.renew_uid();
        self.assign_backends(graph);
        self.cut_splits(graph);
        if self.debug > 0 {
            self.print_assignments(graph);
        }
        self.build_alloc_graph(graph);
        for split in &mut self.splits {
            split.graph.set_uid(crate::abi::facts::next_graph_uid());
        }
    }

    fn new_context(&mut self) {
        // SAFETY: the previous context (if any) is ours; the new one lives in our buffer.
        unsafe {
            if !self.ctx.is_null() {
                ggml_free(self.ctx);
            }
            self.ctx = ggml_init(ggml_init_params {
                mem_size: self.context_buffer.len(),
                mem_buffer: self.context_buffer.as_mut_ptr() as *mut std::ffi::c_void,
                no_alloc: true,
            });
        }
        ggml_assert!(
            !self.ctx.is_null(),
            "ggml_backend_sched_split_graph: failed to initialize context"
        );
    }

    pub(super) fn copy_of(&self, t: Tensor, backend: usize, copy: usize) -> Option<Tensor> {
        self.copies.get(&(t, backend)).and_then(|c| c[copy])
    }

    /// Pass 5 proper (`ggml_backend_rs_core::partition`): splits, their inputs and the copies;
    /// rewrites node sources to copies.
    fn cut_splits(&mut self, graph: Graph) {
        let g = GraphView(graph);
        let backends = super::assign::BackendsView {
            backends: &self.backends,
            bufts: &self.bufts,
            op_offload: self.op_offload,
        };
        let mut maker = CopyMaker {
            copies: &mut self.copies,
            ctx: self.ctx,
            backends: &self.backends,
            n_copies: self.n_copies,
            cur_copy: self.cur_copy,
        };
        let pipeline = partition::Pipeline {
            n_copies: self.n_copies,
            cur_copy: self.cur_copy,
        };
        let policy = super::POLICY.partition;
        match partition::partition(
            &g,
            &backends,
            &self.backend_of,
            &mut maker,
            pipeline,
            policy,
        ) {
            Ok(p) => {
                self.splits = p
                    .splits
                    .into_iter()
                    .map(|s| GraphSplit {
                        backend: s.backend,
                        start: s.start,
                        end: s.end,
                        inputs: s.inputs,
                        graph: ggml_cgraph::empty(),
                    })
                    .collect();
                self.graph_inputs = p.graph_inputs;
            }
            Err(e) => {
                let message = match e {
                    PartitionError::NodeWithoutBackend(node) => format!(
                        "ggml_backend_sched: node '{}' has no backend (no CPU fallback?)",
                        node.name_string()
                    ),
                    PartitionError::SourceWithoutBackend(src) => format!(
                        "ggml_backend_sched: source '{}' has no backend",
                        src.name_string()
                    ),
                    PartitionError::LeafWithoutBackend(leaf) => format!(
                        "ggml_backend_sched: input leaf '{}' has no backend",
                        leaf.name_string()
                    ),
                    PartitionError::TooManyGraphInputs => {
                        "ggml_backend_sched: too many graph inputs".to_string()
                    }
                    PartitionError::TooManySplitInputs => {
                        "ggml_backend_sched: too many inputs in one split".to_string()
                    }
                };
                abort(file!(), line!(), &message)
            }
        }
    }

    /// The node and leaf lists ggml-alloc places, with the backend of each entry.
    fn build_alloc_graph(&mut self, graph: Graph) {
        std::mem::swap(&mut self.node_backend_ids, &mut self.prev_node_backend_ids);
        std::mem::swap(&mut self.leaf_backend_ids, &mut self.prev_leaf_backend_ids);

        let n_inputs: usize =
            self.graph_inputs.len() + self.splits.iter().map(|s| s.inputs.len()).sum::<usize>();
        self.nodes.clear();
        self.leafs.clear();
        let mut node_ids: Vec<c_int> = Vec::with_capacity(graph.n_nodes() + 2 * n_inputs);
        let mut leaf_ids: Vec<c_int> = Vec::new();
        let mut n_dep_nodes = 0;

        for s in 0..self.splits.len() {
            let (start, end, backend) = (
                self.splits[s].start,
                self.splits[s].end,
                self.splits[s].backend,
            );
            // SAFETY: start..end lies within the graph's nodes.
            let mut view = unsafe { ggml_graph_view(graph.as_ptr(), start as c_int, end as c_int) };
            // SAFETY: the view lives in the split for as long as the graph is in use.
            // Before the copy below, so both see the same order.
            let deps = match unsafe { Graph::from_ptr(&mut view) } {
                Some(g) => self.backends[backend].graph_optimize(g),
                None => Vec::new(),
            };
            self.splits[s].graph = view;

            for k in 0..self.splits[s].inputs.len() {
                let input = self.splits[s].inputs[k];
                let input_cpy = self
                    .copy_of(input, backend, self.cur_copy)
                    .expect("created in cut_splits");
                // SAFETY: our context has room; the view only adds a dependency on `input`.
                let dep = unsafe { ggml_view_tensor(self.ctx, input.as_ptr()) };
                ggml_assert!(!dep.is_null(), "ggml_backend_sched: context exhausted");
                // SAFETY: `dep` is a fresh tensor of our context.
                unsafe { (*dep).src[0] = input.as_ptr() };
                node_ids.push(self.backend_id(input).map_or(-1, |b| b as c_int));
                self.nodes.push(dep);
                node_ids.push(backend as c_int);
                self.nodes.push(input_cpy.as_ptr());
            }
            let mut kept = kept_until(&deps);
            for j in start..end {
                let node = graph.node(j);
                node_ids.push(self.backend_id(node).map_or(-1, |b| b as c_int));
                self.nodes.push(node.as_ptr());
                // Tensors the backend reads out of order stay allocated until `node` has run:
                // nodes that use them, right after it.
                let Some(at) = kept.iter().position(|(until, _)| *until == node) else {
                    continue;
                };
                let (_, keep) = kept.swap_remove(at);
                for group in keep.chunks(GGML_MAX_SRC) {
                    n_dep_nodes += 1;
                    // SAFETY: our context has room (sized for a graph's worth of tensors, as
                    // the input dependencies above); the view only carries the dependencies.
                    let dep = unsafe { ggml_view_tensor(self.ctx, group[0].as_ptr()) };
                    ggml_assert!(!dep.is_null(), "ggml_backend_sched: context exhausted");
                    for (k, t) in group.iter().enumerate() {
                        // SAFETY: `dep` is a fresh tensor of our context.
                        unsafe { (*dep).src[k] = t.as_ptr() };
                    }
                    node_ids.push(backend as c_int);
                    self.nodes.push(dep);
                }
            }
            ggml_assert!(
                kept.is_empty(),
                "ggml_backend_sched: {} asked to keep a tensor until a node not in its split",
                self.backends[backend].name_string()
            );
        }

        if self.n_copies > 1 {
            // Input copies as leafs, so they are allocated first and never overwritten: the
            // graph inputs' copies on their own backend, then each split's on the split's.
            let graph_inputs = self
                .graph_inputs
                .iter()
                .map(|&t| (t, self.backend_id(t).unwrap_or(0)));
            let split_inputs = self
                .splits
                .iter()
                .flat_map(|s| s.inputs.iter().map(move |&t| (t, s.backend)));
            let inputs: Vec<(Tensor, usize)> = graph_inputs.chain(split_inputs).collect();
            for (input, b) in inputs {
                for c in 0..self.n_copies {
                    let copy = self.copy_of(input, b, c).expect("created in cut_splits");
                    leaf_ids.push(b as c_int);
                    self.leafs.push(copy.as_ptr());
                }
            }
        }
        for leaf in graph.leafs() {
            leaf_ids.push(self.backend_id(leaf).map_or(-1, |b| b as c_int));
            self.leafs.push(leaf.as_ptr());
        }

        store_ids(&mut self.node_backend_ids, &node_ids);
        store_ids(&mut self.leaf_backend_ids, &leaf_ids);

        let room = match POLICY.alloc_graph_size {
            AllocGraphSize::PerSplit => self.splits.len() * MAX_SPLIT_INPUTS * 2 * self.n_copies,
            AllocGraphSize::Counted => n_inputs * 2 * self.n_copies + n_dep_nodes,
        };
        self.debug_prev_graph_size = self.debug_graph_size;
        self.debug_graph_size = graph.n_nodes().max(graph.n_leafs()) + room;
    }

    /// `GGML_SCHED_DEBUG`: each split with its inputs, and at level 2 each node with its
    /// backend, use count, compute flag and sources, in upstream's format.
    fn print_assignments(&self, graph: Graph) {
        let backend_name = |t: Tensor| {
            self.backend_id(t)
                .map_or(String::from("NULL"), |b| self.backends[b].name_string())
        };
        let mut text = String::new();
        for (i, split) in self.splits.iter().enumerate() {
            text += &format!(
                "\n## SPLIT #{i}: {} # {} inputs",
                self.backends[split.backend].name_string(),
                split.inputs.len()
            );
            if !split.inputs.is_empty() {
                text += ": ";
            }
            for input in &split.inputs {
                text += &format!(
                    "[{} ({:>5.5})] ",
                    input.name_string(),
                    fmt_size(input.nbytes())
                );
            }
            text.push('\n');
            if self.debug < 2 {
                continue;
            }
            for j in split.start..split.end {
                let node = graph.node(j);
                if node.is_view_op() {
                    continue;
                }
                let op = if POLICY.debug_op_desc {
                    node.op_desc()
                } else {
                    node.op_name()
                };
                // (upstream's cause column is empty unless built for debugging it)
                text += &format!(
                    "node #{j:3} ({op:>10.10}): {:>20.20} ({:>5.5}) [{:>5.5} {:>8.8}] use={},c={}:",
                    node.name_string(),
                    fmt_size(node.nbytes()),
                    backend_name(node),
                    "",
                    graph.recorded_use_count(node).unwrap_or(0),
                    i32::from(node.flags() & GGML_TENSOR_FLAG_COMPUTE != 0),
                );
                for (_, src) in node.srcs_by_slot() {
                    text += &format!(
                        " {:>20.20} ({:>5.5}) [{:>5.5} {:>8.8}]",
                        src.name_string(),
                        fmt_size(src.nbytes()),
                        backend_name(src),
                        ""
                    );
                }
                text.push('\n');
            }
        }
        log(GGML_LOG_LEVEL_DEBUG, &text);
    }
}

/// A size as the scheduler's debug output writes it: whole MiB from 1 MiB up, else whole KiB.
fn fmt_size(size: usize) -> String {
    if size >= 1024 * 1024 {
        format!("{}M", size / 1024 / 1024)
    } else {
        format!("{}K", size / 1024)
    }
}

/// The tensors a backend asked to keep allocated, by the node they must outlive: each node
/// once, each tensor once for it, in the order asked.
fn kept_until(deps: &[AllocDep]) -> Vec<(Tensor, Vec<Tensor>)> {
    let mut kept: Vec<(Tensor, Vec<Tensor>)> = Vec::new();
    for d in deps {
        let at = match kept.iter().position(|(until, _)| *until == d.until) {
            Some(at) => at,
            None => {
                kept.push((d.until, Vec::new()));
                kept.len() - 1
            }
        };
        let keep = &mut kept[at].1;
        if !keep.contains(&d.tensor) {
            keep.push(d.tensor);
        }
    }
    kept
}

/// Writes `ids` at the start of `dst`, growing it (zero-filled) but never shrinking it: the
/// entries past the end keep older graphs' values, as the comparison with the previous
/// graph expects.
fn store_ids(dst: &mut Vec<c_int>, ids: &[c_int]) {
    if dst.len() < ids.len() {
        dst.resize(ids.len(), 0);
    }
    dst[..ids.len()].copy_from_slice(ids);
}

/// Makes and records the scheduler's copies of tensors (in its context), for pass 5.
struct CopyMaker<'a> {
    copies: &'a mut super::AddressMap<(Tensor, usize), Copies>,
    ctx: *mut ggml_context,
    backends: &'a [Backend],
    n_copies: usize,
    cur_copy: usize,
}

impl CopyMaker<'_> {
    /// A tensor of the scheduler's context with `src`'s layout, named `<backend>#<name>#<copy>`.
    fn dup_named(&self, src: Tensor, backend: usize, copy: usize) -> Tensor {
        let backend_name = self.backends[backend].name();
        // SAFETY: the context has room (sized for the worst case in `Sched::new`); `src` is
        // live; the name arguments are NUL-terminated (a backend name, and a ggml tensor name,
        // which ggml always terminates).
        unsafe {
            let t = ggml_dup_tensor(self.ctx, src.as_ptr());
            ggml_assert!(!t.is_null(), "ggml_backend_sched: context exhausted");
            (*t).nb = (*src.as_ptr()).nb;
            ggml_format_name(
                t,
                c"%s#%s#%d".as_ptr(),
                backend_name,
                (*src.as_ptr()).name.as_ptr(),
                copy as c_int,
            );
            Tensor::from_ptr(t).expect("checked above")
        }
    }

    fn mark_input_output(t: Tensor) {
        // SAFETY: live tensor of our context; keeps ggml-alloc from reusing its memory.
        unsafe {
            ggml_set_input(t.as_ptr());
            ggml_set_output(t.as_ptr());
        }
    }
}

impl partition::Copies<Tensor> for CopyMaker<'_> {
    fn copy_of(&self, t: Tensor, backend: usize, copy: usize) -> Option<Tensor> {
        self.copies.get(&(t, backend)).and_then(|c| c[copy])
    }

    fn copy_graph_input(&mut self, t: Tensor, backend: usize) {
        let mut copies = [None; MAX_COPIES];
        for (c, slot) in copies.iter_mut().enumerate().take(self.n_copies) {
            let copy = if c == self.cur_copy {
                t
            } else {
                self.dup_named(t, backend, c)
            };
            Self::mark_input_output(copy);
            *slot = Some(copy);
        }
        self.copies.insert((t, backend), copies);
    }

    fn copy_split_input(&mut self, t: Tensor, backend: usize) {
        let mut copies = [None; MAX_COPIES];
        for (c, slot) in copies.iter_mut().enumerate().take(self.n_copies) {
            let copy = self.dup_named(t, backend, c);
            if self.n_copies > 1 {
                Self::mark_input_output(copy);
            }
            *slot = Some(copy);
        }
        self.copies.insert((t, backend), copies);
    }

    fn set_src(&mut self, node: Tensor, slot: usize, copy: Tensor) {
        node.set_src(slot, copy);
    }
}
