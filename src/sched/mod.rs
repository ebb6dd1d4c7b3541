//! `ggml_backend_sched`: runs one graph over several backends.
//!
//! Each evaluation goes through the same passes, in order:
//! 1. [`assign`] decides which backend computes every node (and where every leaf lives);
//! 2. [`split`] cuts the node list into runs on one backend ("splits"), creates copies of the
//!    tensors a split reads from another backend, and builds the graph that ggml-alloc places
//!    in memory (the original nodes plus those copies);
//! 3. [`compute`] allocates that graph and runs the splits, copying each split's inputs first.
//!
//! The state that flows between the passes lives in [`Sched`]; the per-graph part of it is
//! cleared by `reset`. What the ggml versions' schedulers do differently is a [`Policy`],
//! one per ABI class (`crate::version::SCHED_POLICY`).

mod assign;
mod compute;
mod partition;

use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

use crate::abi::log::{abort, ggml_assert, log_error};
use crate::abi::*;

/// Most backends one scheduler drives (`GGML_SCHED_MAX_BACKENDS`).
pub(crate) const MAX_BACKENDS: usize = 16;
/// Most inputs copied into one split (`GGML_SCHED_MAX_SPLIT_INPUTS`).
pub(crate) const MAX_SPLIT_INPUTS: usize = 30;
/// Copies of the inputs kept for pipeline parallelism (`GGML_SCHED_MAX_COPIES`).
pub(crate) const MAX_COPIES: usize = 4;

pub use ggml_backend_rs_core::sched_policy::{AllocGraphSize, SchedPolicy as Policy};

/// The policy of the ggml version being built.
pub(crate) const POLICY: Policy = crate::version::SCHED_POLICY;

/// `ggml_backend_sched_eval_callback`.
pub type EvalCallback =
    Option<unsafe extern "C" fn(t: *mut ggml_tensor, ask: bool, user_data: *mut c_void) -> bool>;

/// Hashes tensor addresses: they are unique and 16-byte aligned, so mixing the bits of the
/// address is all that is needed (the default SipHash would cost more than the passes).
#[derive(Default)]
pub struct AddressHasher(u64);

impl Hasher for AddressHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_usize(&mut self, n: usize) {
        self.0 = (self.0 ^ n as u64)
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
            .rotate_left(29);
    }
}

pub type AddressMap<K, V> = HashMap<K, V, BuildHasherDefault<AddressHasher>>;

/// A run of consecutive nodes computed on one backend: what ggml calls a split of the graph
/// (`ggml_backend_sched_get_n_splits`), not to be confused with the meta device's split of a
/// tensor (`meta::Split`).
pub struct GraphSplit {
    pub backend: usize,
    pub start: usize,
    pub end: usize,
    /// Tensors from other backends this split reads; each has a copy on `backend`.
    pub inputs: Vec<Tensor>,
    /// View of the original graph's nodes `start..end`.
    pub graph: ggml_cgraph,
}

/// The copies of one tensor on one backend, one per pipeline copy.
pub type Copies = [Option<Tensor>; MAX_COPIES];

pub struct Sched {
    pub backends: Vec<Backend>,
    pub bufts: Vec<ggml_backend_buffer_type_t>,
    galloc: ggml_gallocr_t,
    /// How many distinct tensors one graph may have (upstream's hash set size).
    capacity: usize,

    // --- per-graph state, cleared by `reset` --------------------------------------------
    /// The backend assigned to each tensor (by the user or by `assign`).
    pub backend_of: AddressMap<Tensor, usize>,
    /// Copies of tensors on backends other than their own, keyed by (tensor, backend).
    pub copies: AddressMap<(Tensor, usize), Copies>,

    // --- the graph handed to ggml-alloc and its placement ---------------------------------
    pub nodes: Vec<*mut ggml_tensor>,
    pub leafs: Vec<*mut ggml_tensor>,
    /// Backend (= ggml-alloc buffer) of each node / leaf of the graph above. These grow but
    /// never shrink, and swap with the previous graph's, so that a graph placed like the last
    /// one can reuse its allocation.
    pub node_backend_ids: Vec<c_int>,
    pub leaf_backend_ids: Vec<c_int>,
    pub prev_node_backend_ids: Vec<c_int>,
    pub prev_leaf_backend_ids: Vec<c_int>,

    pub splits: Vec<GraphSplit>,
    /// Inputs of the whole graph (GGML_TENSOR_FLAG_INPUT) that get one copy per pipeline copy.
    pub graph_inputs: Vec<Tensor>,

    // --- pipeline parallelism -----------------------------------------------------------------
    pub n_copies: usize,
    pub cur_copy: usize,
    next_copy: usize,
    /// `events[backend][copy]`; NULL where the device has no events.
    pub events: Vec<[ggml_backend_event_t; MAX_COPIES]>,

    /// Context for the tensors the scheduler creates (copies, dependencies), recreated per split.
    pub ctx: *mut ggml_context,
    pub(super) context_buffer: Vec<u8>,

    pub eval_callback: EvalCallback,
    pub eval_user_data: *mut c_void,
    pub op_offload: bool,
    /// `GGML_SCHED_DEBUG`: 1 prints the splits, 2 also every node.
    pub debug: i32,
    /// `GGML_SCHED_DEBUG_REALLOC`: 1 aborts on a reallocation of a same-size graph, 2 on any.
    pub debug_realloc: i32,
    pub debug_graph_size: usize,
    pub debug_prev_graph_size: usize,

    /// Whether the per-graph state is clear (`reset` since the last split or user assignment).
    pub(super) is_reset: bool,
    is_alloc: bool,
}

fn env_int(name: &str) -> Option<i32> {
    std::env::var(name)
        .ok()
        .map(|v| v.trim().parse().unwrap_or(0))
}

impl Sched {
    /// `ggml_backend_sched_new`. The last backend must be a CPU backend (it runs what no
    /// other backend can). With `parallel`, inputs get `MAX_COPIES` copies and events.
    pub fn new(
        backends: Vec<Backend>,
        bufts: Option<Vec<Buft>>,
        graph_size: usize,
        parallel: bool,
        op_offload: bool,
    ) -> Box<Sched> {
        const F: &str = "ggml_backend_sched_new";
        let n = backends.len();
        ggml_assert!(
            n > 0 && n <= MAX_BACKENDS,
            "{F}: n_backends = {n} must be in 1..={MAX_BACKENDS}"
        );
        let last = backends[n - 1].device_handle(F);
        ggml_assert!(
            last.dev_type() == DEVICE_CPU,
            "{F}: the last backend must be a CPU backend, got {}",
            last.name_string()
        );
        let bufts: Vec<Buft> = match bufts {
            Some(b) => b,
            None => backends
                .iter()
                .map(|&b| crate::backend::default_buffer_type(b, F))
                .collect(),
        };
        for (b, buft) in backends.iter().zip(&bufts) {
            ggml_assert!(
                b.device_handle(F).supports_buft(*buft),
                "{F}: backend {} does not support its buffer type",
                b.device_handle(F).name_string()
            );
        }
        let n_copies = if parallel { MAX_COPIES } else { 1 };
        let events = backends
            .iter()
            .map(|b| {
                let mut row = [std::ptr::null_mut(); MAX_COPIES];
                if n_copies > 1 {
                    for e in row.iter_mut().take(n_copies) {
                        *e = b.device_handle(F).event_new();
                    }
                }
                row
            })
            .collect();
        let mut raw_bufts: Vec<ggml_backend_buffer_type_t> =
            bufts.iter().map(|b| b.as_ptr()).collect();
        // SAFETY: one valid buffer type per backend.
        let galloc = unsafe { ggml_gallocr_new_n(raw_bufts.as_mut_ptr(), n as c_int) };
        ggml_assert!(
            !galloc.is_null(),
            "{F}: failed to create the graph allocator"
        );

        // Room for every tensor the split pass may create: at most one split per node, each
        // with MAX_SPLIT_INPUTS inputs, each input a copy and a dependency.
        // SAFETY: plain size computation.
        let context_size = graph_size
            .saturating_mul(MAX_SPLIT_INPUTS * 2 * std::mem::size_of::<ggml_tensor>())
            .saturating_add(unsafe { ggml_graph_overhead_custom(graph_size, false) });

        let debug = env_int("GGML_SCHED_DEBUG").unwrap_or(0);
        let debug_realloc = env_int("GGML_SCHED_DEBUG_REALLOC").unwrap_or(0);

        let mut sched = Box::new(Sched {
            backends,
            bufts: raw_bufts,
            galloc,
            // SAFETY: plain size computation of ggml.
            capacity: unsafe { ggml_hash_size(graph_size) },
            backend_of: AddressMap::default(),
            copies: AddressMap::default(),
            nodes: Vec::new(),
            leafs: Vec::new(),
            node_backend_ids: Vec::new(),
            leaf_backend_ids: Vec::new(),
            prev_node_backend_ids: Vec::new(),
            prev_leaf_backend_ids: Vec::new(),
            splits: Vec::new(),
            graph_inputs: Vec::new(),
            n_copies,
            cur_copy: 0,
            next_copy: 0,
            events,
            ctx: std::ptr::null_mut(),
            context_buffer: vec![0u8; context_size],
            eval_callback: None,
            eval_user_data: std::ptr::null_mut(),
            op_offload,
            debug,
            debug_realloc,
            debug_graph_size: 0,
            debug_prev_graph_size: 0,
            is_reset: false,
            is_alloc: false,
        });
        sched.reset();
        sched
    }

    /// Priority index of `backend` (lower is preferred).
    pub fn backend_index(&self, backend: Backend) -> Option<usize> {
        self.backends.iter().position(|&b| b == backend)
    }

    fn checked_backend_index(&self, backend: Option<Backend>, func: &str) -> usize {
        match backend.and_then(|b| self.backend_index(b)) {
            Some(i) => i,
            None => abort(
                file!(),
                line!(),
                &format!("{func}: backend is not one of the scheduler's"),
            ),
        }
    }

    pub fn n_backends(&self) -> usize {
        self.backends.len()
    }

    pub fn n_splits(&self) -> usize {
        self.splits.len()
    }

    /// Forgets the last graph's assignments and allocation.
    pub fn reset(&mut self) {
        if !self.is_reset {
            self.backend_of.clear();
            self.copies.clear();
            self.is_reset = true;
        }
        self.is_alloc = false;
    }

    fn check_capacity(&self, graph: Graph, func: &str) {
        let (n_nodes, n_leafs) = (graph.n_nodes(), graph.n_leafs());
        ggml_assert!(
            self.capacity >= n_nodes + n_leafs,
            "{func}: graph has {n_nodes} nodes and {n_leafs} leafs, more than the scheduler's graph size ({})",
            self.capacity
        );
    }

    pub fn reserve_size(&mut self, graph: Graph, sizes: &mut [usize]) {
        self.check_capacity(graph, "ggml_backend_sched_reserve_size");
        self.reset();
        self.synchronize();
        self.split_graph(graph);
        let mut g = self.alloc_graph_struct();
        // SAFETY: the graph struct points into our node/leaf vectors, one id per entry, and
        // `sizes` has room for one size per backend.
        unsafe {
            ggml_gallocr_reserve_n_size(
                self.galloc,
                &mut g,
                self.node_backend_ids.as_ptr(),
                self.leaf_backend_ids.as_ptr(),
                sizes.as_mut_ptr(),
            )
        }
    }

    pub fn reserve(&mut self, graph: Graph) -> bool {
        self.check_capacity(graph, "ggml_backend_sched_reserve");
        self.synchronize();
        self.split_graph(graph);
        if let Err(e) = self.check_reserve() {
            log_error!("ggml_backend_sched_reserve: {e}");
            return false;
        }
        let mut g = self.alloc_graph_struct();
        // SAFETY: as in reserve_size.
        let ok = unsafe {
            ggml_gallocr_reserve_n(
                self.galloc,
                &mut g,
                self.node_backend_ids.as_ptr(),
                self.leaf_backend_ids.as_ptr(),
            )
        };
        if !ok {
            return false;
        }
        self.reset();
        true
    }

    /// Whether every backend with a reserve check (the meta backends: can they split every
    /// node they are given?) accepts its nodes: a reserve is where libllama learns whether a
    /// context can run, and the place to say that one cannot.
    fn check_reserve(&mut self) -> Result<(), String> {
        // all of one backend's splits together: a split reads what earlier ones computed
        let mut graphs: Vec<(usize, Arc<dyn crate::backend::Extension>, Vec<Tensor>)> = Vec::new();
        for split in &mut self.splits {
            let Some(ext) = crate::backend::extension(self.backends[split.backend]) else {
                continue;
            };
            // SAFETY: the split's graph struct lives in `self.splits` during this call, and
            // its node array points into the graph being reserved, which the caller keeps
            // alive for the whole reserve.
            let Some(graph) = (unsafe { Graph::from_ptr(&mut split.graph) }) else {
                continue;
            };
            match graphs.iter_mut().find(|(b, _, _)| *b == split.backend) {
                Some((_, _, nodes)) => nodes.extend(graph.nodes()),
                None => graphs.push((split.backend, ext, graph.nodes().collect())),
            }
        }
        for (_, ext, nodes) in graphs {
            ext.check_reserve(nodes)?;
        }
        Ok(())
    }

    pub fn alloc_graph(&mut self, graph: Graph) -> bool {
        self.check_capacity(graph, "ggml_backend_sched_alloc_graph");
        ggml_assert!(!self.is_alloc, "ggml_backend_sched_alloc_graph: a graph is already allocated; call ggml_backend_sched_reset first");
        self.cur_copy = self.next_copy;
        self.next_copy = (self.next_copy + 1) % self.n_copies;
        self.split_graph(graph);
        if !self.alloc_splits() {
            return false;
        }
        self.is_alloc = true;
        true
    }

    pub fn graph_compute_async(&mut self, graph: Graph) -> ggml_status {
        if !self.is_reset && !self.is_alloc {
            self.reset();
        }
        if !self.is_alloc && !self.alloc_graph(graph) {
            return GGML_STATUS_ALLOC_FAILED;
        }
        self.compute_splits()
    }

    pub fn graph_compute(&mut self, graph: Graph) -> ggml_status {
        let status = self.graph_compute_async(graph);
        self.synchronize();
        status
    }

    pub fn synchronize(&mut self) {
        for b in &self.backends {
            b.synchronize();
        }
        if !self.is_alloc {
            // Between graphs, start again from copy 0 so that decoding one token after
            // another always uses the same copy (and backends can reuse captured graphs).
            self.next_copy = 0;
        }
    }

    pub fn set_tensor_backend(&mut self, node: Tensor, backend: Option<Backend>) {
        let index = self.checked_backend_index(backend, "ggml_backend_sched_set_tensor_backend");
        self.backend_of.insert(node, index);
        self.is_reset = false;
    }

    pub fn tensor_backend(&self, node: Tensor) -> Option<Backend> {
        self.backend_of.get(&node).map(|&i| self.backends[i])
    }

    pub fn buffer_type(&self, backend: Option<Backend>) -> ggml_backend_buffer_type_t {
        self.bufts[self.checked_backend_index(backend, "ggml_backend_sched_get_buffer_type")]
    }

    pub fn buffer_size(&self, backend: Option<Backend>) -> usize {
        let i = self.checked_backend_index(backend, "ggml_backend_sched_get_buffer_size");
        // SAFETY: the allocator has one buffer per backend.
        unsafe { ggml_gallocr_get_buffer_size(self.galloc, i as c_int) }
    }

    /// The graph struct ggml-alloc works on: our node and leaf lists.
    fn alloc_graph_struct(&mut self) -> ggml_cgraph {
        ggml_cgraph::over_lists(
            self.nodes.as_mut_ptr(),
            self.nodes.len(),
            self.leafs.as_mut_ptr(),
            self.leafs.len(),
        )
    }
}

impl Drop for Sched {
    fn drop(&mut self) {
        for row in &self.events {
            for &e in row {
                // SAFETY: events created in `new` by the backends' devices.
                if let Some(e) = unsafe { Event::from_ptr(e) } {
                    if let Some(d) = e.device() {
                        d.event_free(e);
                    }
                }
            }
        }
        // SAFETY: created in `new` / `split_graph`; freed once.
        unsafe {
            ggml_gallocr_free(self.galloc);
            if !self.ctx.is_null() {
                ggml_free(self.ctx);
            }
        }
    }
}
