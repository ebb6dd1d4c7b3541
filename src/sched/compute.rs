//! Allocation of the split graph and execution of the splits.
//!
//! Guarantees: before a split runs, each of its inputs has been copied to the split's
//! backend, after the producer finished and after the split's previous use of that copy
//! finished (by an event where the backend has them, else by synchronizing); user inputs are
//! copied at once so the user may overwrite them when the call returns. Where the version's
//! [`Policy`](super::Policy) says so, a split without inputs also waits for the previous
//! split on another backend, whose memory the allocator may have handed on to it.

use std::ffi::{c_int, c_void};

use super::{Sched, POLICY};
use crate::abi::log::{abort, log_debug, log_error};
use crate::abi::*;
use crate::tensor::{Host, Via};

impl Sched {
    /// Places the split graph in the backends' compute buffers, re-planning the buffers when
    /// the placement changed or the current buffers are too small.
    pub(super) fn alloc_splits(&mut self) -> bool {
        let n_nodes = self.nodes.len();
        let n_leafs = self.leafs.len();
        let buft_of = |ids: &[c_int], i: usize| {
            ids.get(i)
                .and_then(|&b| usize::try_from(b).ok())
                .map(|b| self.bufts[b])
        };
        let changed = (0..n_nodes).any(|i| {
            self.node_backend_ids[i] != self.prev_node_backend_ids.get(i).copied().unwrap_or(0)
                && buft_of(&self.node_backend_ids, i) != buft_of(&self.prev_node_backend_ids, i)
        }) || (0..n_leafs).any(|i| {
            self.leaf_backend_ids[i] != self.prev_leaf_backend_ids.get(i).copied().unwrap_or(0)
                && buft_of(&self.leaf_backend_ids, i) != buft_of(&self.prev_leaf_backend_ids, i)
        });

        let mut g = self.alloc_graph_struct();
        // SAFETY: the graph struct points into our node/leaf lists.
        if !changed && unsafe { ggml_gallocr_alloc_graph(self.galloc, &mut g) } {
            return true;
        }
        log_debug!("ggml_backend_sched_alloc_splits: failed to allocate graph, reserving (backend_ids_changed = {changed})");
        if self.debug_realloc > 0 {
            let unexpected = !changed && self.debug_prev_graph_size == self.debug_graph_size;
            if unexpected || self.debug_realloc > 1 {
                abort(
                    file!(),
                    line!(),
                    &format!(
                        "ggml_backend_sched_alloc_splits: unexpected graph reallocation (graph size = {}, nodes = {n_nodes}, leafs = {n_leafs}), debug_realloc = {}",
                        self.debug_graph_size, self.debug_realloc
                    ),
                );
            }
        }
        // Reallocation may move split inputs: let every backend finish with them first
        // (without `synchronize`, which would change the pipeline copy).
        for b in &self.backends {
            b.synchronize();
        }
        // SAFETY: as above, one backend id per node and leaf.
        let reserved = unsafe {
            ggml_gallocr_reserve_n(
                self.galloc,
                &mut g,
                self.node_backend_ids.as_ptr(),
                self.leaf_backend_ids.as_ptr(),
            )
        };
        if !reserved && POLICY.failed_reserve_fails {
            log_error!("ggml_backend_sched_alloc_splits: failed to reserve graph buffers");
            return false;
        }
        // SAFETY: as above.
        if !unsafe { ggml_gallocr_alloc_graph(self.galloc, &mut g) } {
            log_error!("ggml_backend_sched_alloc_splits: failed to allocate graph");
            return false;
        }
        true
    }

    fn event(&self, backend: usize) -> Option<Event> {
        // SAFETY: events created in `new` (or NULL).
        unsafe { Event::from_ptr(self.events[backend][self.cur_copy]) }
    }

    /// Waits on the host until `backend` has done what its event of the current copy records
    /// (its last split, or the last one with inputs), or all its work where it has no events.
    fn wait_host(&self, backend: usize) {
        match self.event(backend) {
            Some(e) => e.device().map_or_else(
                || self.backends[backend].synchronize(),
                |d| d.event_synchronize(e),
            ),
            None => self.backends[backend].synchronize(),
        }
    }

    pub(super) fn compute_splits(&mut self) -> ggml_status {
        let mut expert_cache = ExpertCache::default();
        let mut prev_backend: Option<usize> = None;
        for s in 0..self.splits.len() {
            let backend_id = self.splits[s].backend;
            let split_backend = self.backends[backend_id];

            if POLICY.wait_before_split_without_inputs && self.splits[s].inputs.is_empty() {
                if let Some(prev) = prev_backend.filter(|&p| p != backend_id) {
                    self.wait_host(prev);
                }
            }

            for k in 0..self.splits[s].inputs.len() {
                let input = self.splits[s].inputs[k];
                let input_cpy = self
                    .copy_of(input, backend_id, self.cur_copy)
                    .expect("split input without copy");
                let input_backend = self.backend_id(input).map(|b| self.backends[b]);

                if input.flags() & GGML_TENSOR_FLAG_INPUT != 0 {
                    // User data: copy now, the caller may overwrite it after we return.
                    self.wait_host(backend_id);
                    crate::tensor::copy(input, input_cpy);
                    continue;
                }
                // The split's backend must be done with the previous contents of the copy.
                match self.event(backend_id) {
                    Some(e) => split_backend.event_wait(e),
                    None => split_backend.synchronize(),
                }
                if self.copy_used_experts(s, k, input, input_cpy, input_backend, &mut expert_cache)
                {
                    continue;
                }
                let async_done = match split_backend.iface().cpy_tensor_async {
                    // SAFETY: vtable entry of a live backend with two live same-layout tensors.
                    Some(f) => unsafe {
                        f(
                            input_backend.map_or(std::ptr::null_mut(), |b| b.as_ptr()),
                            split_backend.as_ptr(),
                            input.as_ptr(),
                            input_cpy.as_ptr(),
                        )
                    },
                    None => false,
                };
                if !async_done {
                    if let Some(b) = input_backend {
                        b.synchronize();
                    }
                    self.wait_host(backend_id);
                    crate::tensor::copy(input, input_cpy);
                }
            }

            let status = self.run_split(s);
            if status != GGML_STATUS_SUCCESS {
                return status;
            }

            if POLICY.event_after_every_split || !self.splits[s].inputs.is_empty() {
                if let Some(e) = self.event(backend_id) {
                    split_backend.event_record(e);
                }
            }
            prev_backend = Some(backend_id);
        }
        // Backends that learn of a failure late (RPC servers) are asked now, each one the
        // splits used once (a bit per backend index: at most MAX_BACKENDS).
        let mut asked = 0u32;
        for s in &self.splits {
            if asked & (1 << s.backend) != 0 {
                continue;
            }
            asked |= 1 << s.backend;
            if let Err(e) = crate::backend::settle(self.backends[s.backend]) {
                log_error!("ggml_backend_sched_graph_compute: {e}");
                return GGML_STATUS_FAILED;
            }
        }
        GGML_STATUS_SUCCESS
    }

    /// Computes split `s`, in pieces when the eval callback wants to observe nodes.
    fn run_split(&mut self, s: usize) -> ggml_status {
        let backend = self.backends[self.splits[s].backend];
        let graph_ptr: *mut ggml_cgraph = &mut self.splits[s].graph;
        // SAFETY: the split's graph view lives in `self.splits` during this call.
        let Some(graph) = (unsafe { Graph::from_ptr(graph_ptr) }) else {
            return GGML_STATUS_FAILED;
        };
        let Some(callback) = self.eval_callback else {
            return backend.graph_compute(graph);
        };
        let ud = self.eval_user_data;
        let n = graph.n_nodes();
        let mut j0 = 0;
        while j0 < n {
            // SAFETY: the user's callback with live tensors of the graph.
            let ask = |t: Tensor, ask: bool| unsafe { callback(t.as_ptr(), ask, ud) };
            let mut j1 = j0;
            let mut t = graph.node(j0);
            let mut need = ask(t, true);
            while !need && j1 + 1 < n {
                j1 += 1;
                t = graph.node(j1);
                need = ask(t, true);
            }
            // SAFETY: j0..=j1 lies within the split's nodes.
            let mut view = unsafe { ggml_graph_view(graph_ptr, j0 as c_int, j1 as c_int + 1) };
            // SAFETY: the view lives on this frame during the call.
            let view = unsafe { Graph::from_ptr(&mut view) }.expect("stack address");
            let status = backend.graph_compute(view);
            if status != GGML_STATUS_SUCCESS {
                return status;
            }
            backend.synchronize();
            if need && !ask(t, false) {
                break;
            }
            j0 = j1 + 1;
        }
        GGML_STATUS_SUCCESS
    }

    /// For expert weights in host memory read by a MUL_MAT_ID, copies only the experts the
    /// ids select (grouped into runs) instead of the whole tensor. Returns false when the input
    /// is not such a weight, so the caller copies it whole.
    fn copy_used_experts(
        &self,
        s: usize,
        k: usize,
        input: Tensor,
        input_cpy: Tensor,
        input_backend: Option<Backend>,
        cache: &mut ExpertCache,
    ) -> bool {
        let split = &self.splits[s];
        if split.graph.n_nodes == 0 {
            return false;
        }
        // SAFETY: the split graph has at least one node.
        let Some(node) = (unsafe { Tensor::from_ptr(*split.graph.nodes) }) else {
            return false;
        };
        let Some(buffer) = input.own_buffer() else {
            return false;
        };
        let is_expert_weight = buffer.usage() == USAGE_WEIGHTS
            && buffer.buft_handle().is_host()
            && node.op() == GGML_OP_MUL_MAT_ID
            && node.src(0) == Some(input_cpy);
        if !is_expert_weight {
            return false;
        }
        let split_backend = self.backends[split.backend];
        let (n_expert, expert_size) = (input.ne(2), input.nb(2));
        if let Some(b) = input_backend {
            b.synchronize();
        }

        let Some(mut ids_tensor) = node.src(2) else {
            return false;
        };
        // No ids select no expert: nothing to copy.
        if ids_tensor.nelements() == 0 {
            return true;
        }
        // The ids may themselves be a later input of this split, not yet copied: read the original.
        let mut ids_backend = split_backend;
        for &later in &split.inputs[k + 1..] {
            if self.copy_of(later, split.backend, self.cur_copy) == Some(ids_tensor) {
                ids_tensor = later;
                ids_backend = self
                    .backend_id(later)
                    .map_or(split_backend, |b| self.backends[b]);
                break;
            }
        }

        if cache.ids_tensor != Some(ids_tensor) {
            let nbytes = ids_tensor.nbytes();
            let mut ids = vec![0i32; nbytes / 4];
            // SAFETY: `ids` has room for the tensor's bytes.
            unsafe {
                crate::tensor::transfer(
                    Via::Backend(ids_backend),
                    ids_tensor,
                    Host::Dst(ids.as_mut_ptr() as *mut c_void),
                    0,
                    nbytes,
                )
            };
            ids_backend.synchronize();
            let mut used = vec![false; usize::try_from(n_expert).unwrap_or(0)];
            let (s0, s1) = (ids_tensor.nb(0) / 4, ids_tensor.nb(1) / 4);
            for i1 in 0..ids_tensor.ne(1) as usize {
                for i0 in 0..ids_tensor.ne(0) as usize {
                    let id = ids[i1 * s1 + i0 * s0];
                    crate::abi::log::ggml_assert!(
                        id >= 0 && (id as i64) < n_expert,
                        "ggml_backend_sched: expert id {id} out of range (0..{n_expert})"
                    );
                    used[id as usize] = true;
                }
            }
            cache.ids_tensor = Some(ids_tensor);
            cache.used = used;
        }

        // Copies experts first..=last, plus a little of the next expert so that kernels reading
        // past the end of the last expert (padding) see initialised memory.
        let copy_run = |first: usize, last: usize| {
            let offset = first * expert_size;
            let size = (last - first + 1) * expert_size;
            let padding = if (last as i64) < n_expert - 1 {
                expert_size.min(512)
            } else {
                0
            };
            // SAFETY: host weights: the source bytes are the input's own data.
            unsafe {
                crate::tensor::transfer(
                    Via::Backend(split_backend),
                    input_cpy,
                    Host::Src((input.data() as *const u8).add(offset) as *const c_void),
                    offset,
                    size + padding,
                )
            }
        };
        let mut run: Option<(usize, usize)> = None;
        for (id, _) in cache.used.iter().enumerate().filter(|(_, &u)| u) {
            run = match run {
                Some((first, last)) if id == last + 1 => Some((first, id)),
                Some((first, last)) => {
                    copy_run(first, last);
                    Some((id, id))
                }
                None => Some((id, id)),
            };
        }
        if let Some((first, last)) = run {
            copy_run(first, last);
        }
        true
    }
}

/// The experts used by the last ids tensor read, reused while the ids tensor stays the same.
#[derive(Default)]
struct ExpertCache {
    ids_tensor: Option<Tensor>,
    used: Vec<bool>,
}
