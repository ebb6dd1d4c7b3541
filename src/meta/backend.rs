//! The meta backend: one simple backend per simple device; graphs run on all of them, cut
//! into sub-graphs after every node whose devices hold partial sums, each cut followed by
//! an AllReduce that leaves the full sum on every device.
//!
//! A graph's plan (per-device sub-graphs, cut points, reductions) is cached and reused while the
//! graph has the same nodes and the memo generation of every meta device it reads is unchanged
//! (no split, graph structure or per-device tensor changed there; see `Stamp`); several plans
//! are kept (the scheduler hands the meta backend one graph per split, and libllama alternates
//! between prompt and decode graphs).
//!
//! A run of a plan queues work and returns: sub-graphs, copies and AllReduces are ordered on
//! the devices (stream order and ggml events), never by the host waiting for a device.

use std::ffi::{c_void, CStr, CString};
use std::ptr;
use std::sync::{Arc, Mutex, MutexGuard};

use super::allreduce::{self, Planned, Reducer};
use super::arena::GraphArena;
use super::buffer;
use super::cuda::StepGraph;
use super::device::MetaDevice;
use super::epilogue::{Epilogue, NormEpilogue};
use super::facts;
use super::reduction::{OutOfMemory, RunAll};
use super::slices;
use super::split::Split;
use super::step::{self, Next, Step};
use super::transfer::{self, Queue};
use crate::abi::log::{abort, log_error, log_info};
use crate::abi::object::{backend_iface, CObject};
use crate::abi::*;
use crate::tensor::{Host, Via};
use ggml_backend_rs_core::owned::lock;
use ggml_backend_rs_core::owned::Registry;
use ggml_backend_rs_core::{plan, Op};

/// Graph plans kept per meta backend (least recently used dropped first): more than the
/// scheduler's splits of one step when some op runs outside the meta device in every layer.
const PLAN_CACHE: usize = 32;

pub struct MetaBackend {
    pub dev: &'static MetaDevice,
    pub simple: Vec<Backend>,
    name: CString,
    reducer: Reducer,
    /// CPU-like simple backends compute synchronously: run them on threads to overlap.
    threaded: bool,
    state: Mutex<State>,
}

// SAFETY: handles are addresses of objects shared with C by design; mutable state is behind
// the mutex.
unsafe impl Send for MetaBackend {}
// SAFETY: as for `Send` above: shared access goes through the same synchronisation.
unsafe impl Sync for MetaBackend {}

#[derive(Default)]
struct State {
    /// Most recently used last.
    plans: Vec<GraphPlan>,
    warned_fallback: bool,
    /// Whether a step was captured as one CUDA graph yet (logged once).
    captured_any: bool,
    /// Threads for synchronous simple backends (see `threaded`), started on first use.
    workers: Option<super::workers::Workers>,
    /// Host time spent queuing work (`GGML_META_PROFILE=1`).
    profile: Option<Profile>,
}

/// Where the host's time inside `graph_compute` goes, summed over the backend's life and
/// logged when it is freed (`GGML_META_PROFILE=1`). Device work is queued, not waited for, so
/// these are the costs of issuing it: when their sum per token approaches the token's wall
/// time, decoding is bound by the host.
#[derive(Default)]
struct Profile {
    computes: u64,
    plans_built: u64,
    /// Computes that launched a captured step (no sub-graph launches or AllReduces issued).
    replays: u64,
    subgraphs: u64,
    reductions: u64,
    total: std::time::Duration,
    planning: std::time::Duration,
    launching: std::time::Duration,
    reducing: std::time::Duration,
}

impl Profile {
    fn report(&self, name: &str) {
        if self.computes == 0 {
            return;
        }
        let per = |d: std::time::Duration| d.as_secs_f64() * 1e6 / self.computes as f64;
        log_info!(
            "meta profile {name}: {} graph computes ({} plans built, {} replayed as one CUDA \
             graph); host time per compute: \
             {:.1} us = planning {:.1} + sub-graph launches {:.1} ({:.1} per compute) + \
             AllReduce issue {:.1} ({:.1} per compute) + other {:.1}",
            self.computes,
            self.plans_built,
            self.replays,
            per(self.total),
            per(self.planning),
            per(self.launching),
            self.subgraphs as f64 / self.computes as f64,
            per(self.reducing),
            self.reductions as f64 / self.computes as f64,
            per(self
                .total
                .saturating_sub(self.planning + self.launching + self.reducing)),
        );
    }
}

fn profile_enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("GGML_META_PROFILE").is_ok_and(|v| v != "0"))
}

/// Every live meta backend's state, by the C backend's address.
pub(super) static BACKENDS: Registry<MetaBackend> = Registry::new();

static GUID: ggml_guid = [
    0x5e, 0x7a, 0x1b, 0x0e, 0x8c, 0x3d, 0x4f, 0x21, 0x9a, 0x6b, 0x2c, 0x7d, 0x31, 0x88, 0x4e, 0x90,
];

/// A meta backend on `dev`: a backend on each simple device, made with `params`.
pub fn init(dev: &'static MetaDevice, params: Option<&CStr>) -> ggml_backend_t {
    let mut simple = Vec::with_capacity(dev.n());
    for d in &dev.simple {
        // SAFETY: a backend returned by a device is live until freed.
        match unsafe { Backend::from_ptr(d.init_backend(params)) } {
            Some(b) => simple.push(b),
            None => {
                log_error!(
                    "meta backend: failed to initialise a backend on {}",
                    d.name_string()
                );
                simple.into_iter().for_each(Backend::free);
                return ptr::null_mut();
            }
        }
    }
    let names: Vec<String> = dev.simple.iter().map(|d| d.name_string()).collect();
    let reducer = Reducer::new(&dev.simple, &simple);
    let threaded = dev.n() > 1 && dev.simple.iter().all(|d| d.dev_type() == DEVICE_CPU);
    let mb = Arc::new(MetaBackend {
        dev,
        simple,
        name: CString::new(format!("Meta({})", names.join(","))).unwrap_or_default(),
        reducer,
        threaded,
        state: Mutex::new(State::default()),
    });
    let backend = Box::into_raw(Box::new(ggml_backend {
        guid: &GUID as *const ggml_guid as ggml_guid_t,
        iface: IFACE,
        device: dev.device,
        // the state's address, for identification only: it is found through the registry
        context: Arc::as_ptr(&mb) as *mut c_void,
    }));
    BACKENDS.insert(backend as usize, mb.clone());
    // SAFETY: made just above; live until `free`.
    if let Some(b) = unsafe { Backend::from_ptr(backend) } {
        crate::backend::extend(b, mb);
    }
    backend
}

impl crate::backend::Extension for MetaBackend {
    /// Every node can be split over the devices (see `facts::check_reserve`).
    fn check_reserve(&self, nodes: Vec<Tensor>) -> Result<(), String> {
        facts::check_reserve(self.dev, nodes)
    }

    /// The simple backends' work of the step, the last sub-graph's included.
    fn settle(&self) -> Result<(), String> {
        crate::backend::settle_all(&self.simple)
    }
}

/// The meta backend behind a C backend, if it is a live one.
pub fn of(backend: Backend) -> Option<Arc<MetaBackend>> {
    BACKENDS.get(backend.as_ptr() as usize)
}

impl MetaBackend {
    fn lock(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }
}

const IFACE: ggml_backend_i = backend_iface!(MetaBackend {
    get_name,
    free,
    set_tensor_async,
    get_tensor_async,
    synchronize,
    graph_compute,
});

impl CObject for MetaBackend {
    const KIND: &'static str = "meta backend";
    type Held = Arc<MetaBackend>;
    fn find(addr: usize) -> Option<Arc<MetaBackend>> {
        BACKENDS.get(addr)
    }
}

impl MetaBackend {
    fn get_name(&self, _: Backend) -> &CStr {
        &self.name
    }

    fn free(this: Arc<MetaBackend>, backend: Backend) {
        BACKENDS.remove(backend.as_ptr() as usize);
        crate::backend::unextend(backend);
        // plans own scratch memory that queued work may still use
        for b in &this.simple {
            b.synchronize();
        }
        let mut st = this.lock();
        if let Some(p) = st.profile.take() {
            p.report(&this.name.to_string_lossy());
        }
        st.plans.clear();
        st.workers = None;
        drop(st);
        this.reducer.release();
        for b in &this.simple {
            b.free();
        }
        drop(this);
        // SAFETY: made by `init` with Box; ggml frees a backend once, through this entry.
        drop(unsafe { Box::from_raw(backend.as_ptr()) });
    }

    fn synchronize(&self, _: Backend) {
        for b in &self.simple {
            b.synchronize();
        }
    }

    /// # Safety
    /// `data` addresses `size` bytes that stay readable until the backend is synchronized.
    unsafe fn set_tensor_async(
        &self,
        _: Backend,
        t: Tensor,
        data: *const c_void,
        offset: usize,
        size: usize,
    ) {
        let (to, queue) = (Host::Src(data), Queue::Backends(&self.simple));
        let what = "ggml_backend_tensor_set_async";
        // SAFETY: this function's contract; synchronizing the meta backend synchronizes every
        // simple backend.
        unsafe { transfer::execute(t, offset, size, to, queue, what) }
    }

    /// # Safety
    /// `data` addresses `size` bytes that stay writable, and nothing else's, until the backend
    /// is synchronized.
    unsafe fn get_tensor_async(
        &self,
        _: Backend,
        t: Tensor,
        data: *mut c_void,
        offset: usize,
        size: usize,
    ) {
        let (from, queue) = (Host::Dst(data), Queue::Backends(&self.simple));
        let what = "ggml_backend_tensor_get_async";
        // SAFETY: this function's contract; synchronizing the meta backend synchronizes every
        // simple backend.
        unsafe { transfer::execute(t, offset, size, from, queue, what) }
    }
}

/// # Safety
/// `backend` is NULL or a live backend (the C contract of the entry point).
///
/// `ggml_backend_set_n_threads` of the meta registry: CPU simple backends share the threads
/// (they run concurrently), other backends get the count as is.
pub unsafe extern "C" fn set_n_threads(backend: ggml_backend_t, n_threads: i32) {
    // SAFETY: NULL or a live backend (the contract above).
    let Some(b) = (unsafe { Backend::from_ptr(backend) }) else {
        return;
    };
    let Some(m) = of(b) else { return };
    let per = if m.threaded {
        (n_threads / m.simple.len() as i32).max(1)
    } else {
        n_threads
    };
    for s in &m.simple {
        if let Some(f) = simple_proc(*s, c"ggml_backend_set_n_threads") {
            // SAFETY: the registry documents this entry as `void (*)(ggml_backend_t, int)`,
            // and `s` is a live simple backend of this meta backend.
            unsafe {
                let f: unsafe extern "C" fn(ggml_backend_t, i32) = std::mem::transmute(f);
                f(s.as_ptr(), per)
            };
        }
    }
}

/// # Safety
/// `backend` is NULL or a live backend; `cb` is NULL or a `ggml_abort_callback`.
///
/// `ggml_backend_set_abort_callback` of the meta registry: forwarded to every simple backend.
pub unsafe extern "C" fn set_abort_callback(
    backend: ggml_backend_t,
    cb: *mut c_void,
    data: *mut c_void,
) {
    // SAFETY: NULL or a live backend (the contract above).
    let Some(b) = (unsafe { Backend::from_ptr(backend) }) else {
        return;
    };
    let Some(m) = of(b) else { return };
    for s in &m.simple {
        if let Some(f) = simple_proc(*s, c"ggml_backend_set_abort_callback") {
            // SAFETY: the registry documents this entry as `void (*)(ggml_backend_t,
            // ggml_abort_callback, void *)`; `s` is a live simple backend, `cb` and `data` are
            // passed through as the caller gave them.
            unsafe {
                let f: unsafe extern "C" fn(ggml_backend_t, *mut c_void, *mut c_void) =
                    std::mem::transmute(f);
                f(s.as_ptr(), cb, data)
            };
        }
    }
}

fn simple_proc(b: Backend, name: &CStr) -> Option<*mut c_void> {
    b.device_handle("meta backend").reg_proc(name)
}

// --- graph plans --------------------------------------------------------------------------

/// A run of nodes between two cuts: one ggml graph per device over its tensors.
struct SubGraph {
    /// Per device, tensors to zero before the sub-graph runs (see `empty_contraction`): where
    /// to write (the node, or its direct-path partial slot) and the node (whose size counts:
    /// the slot's header is brought up to date only when its cut is prepared).
    zero: Vec<(usize, Tensor, Tensor)>,
    graphs: Vec<Graph>,
    /// The same graphs behind the plan's marker, queued while the step is captured (see
    /// `step`); none where the plan is never captured.
    capture: Vec<Graph>,
    /// Index into `GraphPlan::reductions`: the AllReduce after this sub-graph.
    reduce: Option<usize>,
}

/// The generations of the meta devices whose splits and per-device tensors a plan was built
/// from: its own device, and any other whose buffers hold its nodes or their sources.
struct Stamp(Vec<(&'static MetaDevice, u64)>);

impl Stamp {
    fn new(dev: &'static MetaDevice) -> Stamp {
        Stamp(vec![(dev, dev.generation())])
    }

    /// Records `dev`'s generation when first seen (before the plan reads its tensors: a change
    /// made while planning must make the plan stale, not current).
    fn add(&mut self, dev: &'static MetaDevice) {
        if !self.0.iter().any(|(d, _)| ptr::eq(*d, dev)) {
            self.0.push((dev, dev.generation()));
        }
    }

    fn current(&self) -> bool {
        self.0.iter().all(|(d, g)| d.generation() == *g)
    }
}

/// A fresh identity for a sub-graph. Only the meta backend's own simple backends see its
/// sub-graphs, so their identities need only differ from each other: they are counted here,
/// from 2^63, apart from ggml's counter (`ggml_graph_next_uid`, which the scheduler's graphs take
/// theirs from, and which a plugin cannot rely on its host to export).
fn next_sub_graph_uid() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1 << 63);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

struct GraphPlan {
    nodes: Vec<usize>,
    /// The identity of the graph the sub-graphs' identities were issued for (see `follow`).
    uid: u64,
    stamp: Stamp,
    /// Holds the sub-graphs' ggml graphs; dropped with the plan (after them).
    subgraphs: Vec<SubGraph>,
    /// The AllReduces of the cuts, with the memory and operations their paths own.
    reductions: Planned,
    /// Host zeros for `SubGraph::zero` (uploaded asynchronously, so they live with the plan).
    zeros: Vec<u8>,
    /// Whether the step is captured as one CUDA graph, and the graph.
    step: Step<StepGraph>,
    /// The first node of the `capture` graphs (see `step::mark`).
    marker: Option<Tensor>,
    _arena: GraphArena,
}

impl GraphPlan {
    /// Whether this plan was built for exactly the nodes of `g`.
    fn is_for(&self, g: Graph) -> bool {
        self.nodes.len() == g.n_nodes()
            && g.nodes()
                .zip(&self.nodes)
                .all(|(t, &a)| t.as_ptr() as usize == a)
    }

    /// Gives the sub-graphs identities that say what the caller's graph says. ggml's scheduler
    /// renews a graph's identity whenever its nodes may have changed (shapes, addresses), and a
    /// backend that sees a graph's identity again reuses what it prepared for it (the CUDA
    /// backend skips comparing its nodes, which it does for a graph without identity on every
    /// launch; the RPC client asks its server to run the graph it holds again). While
    /// `uid` stays the same the sub-graphs keep theirs; a new one gives them new ones; a graph
    /// without identity leaves them without.
    fn follow(&mut self, uid: u64) {
        if uid != 0 && uid == self.uid {
            return;
        }
        self.uid = uid;
        for g in self.subgraphs.iter().flat_map(|sg| &sg.graphs) {
            g.set_uid(if uid == 0 { 0 } else { next_sub_graph_uid() });
        }
    }

    /// Whether the memory the plan owns still covers the tensors (the same graph structure
    /// can come back with larger shapes).
    fn fits(&self) -> bool {
        self.reductions.fits()
            && self
                .subgraphs
                .iter()
                .flat_map(|sg| &sg.zero)
                .all(|(_, _, like)| like.nbytes() <= self.zeros.len())
    }
}

impl MetaBackend {
    /// Runs `g`: with the plan built for its nodes when one is current, else with a new one.
    fn graph_compute(&self, _: Backend, g: Graph) -> ggml_status {
        let m = self;
        // a buffer whose memory could not be made: a graph that uses it cannot run
        if super::buffer::any_failed() {
            if let Some(why) = g.nodes().find_map(super::buffer::failed_for) {
                log_error!("meta backend: graph not computed: {why}");
                return GGML_STATUS_ALLOC_FAILED;
            }
        }
        let mut st = m.lock();
        let t0 = profile_enabled().then(std::time::Instant::now);
        drop_plans(m, &mut st.plans, |p| !p.stamp.current());
        let mut found = st.plans.iter().position(|p| p.is_for(g));
        if let Some(i) = found {
            if !st.plans[i].fits() {
                let stale: *const GraphPlan = &st.plans[i];
                drop_plans(m, &mut st.plans, |p| std::ptr::eq(p, stale));
                found = None;
            }
        }
        let mut plan = match found {
            Some(i) => st.plans.remove(i),
            None => {
                if st.plans.len() >= PLAN_CACHE {
                    let oldest: *const GraphPlan = &st.plans[0];
                    drop_plans(m, &mut st.plans, |p| std::ptr::eq(p, oldest));
                }
                let nodes = g.nodes().map(|t| t.as_ptr() as usize).collect();
                let p = match build_plan(m, g, nodes) {
                    Ok(p) => p,
                    Err(PlanError::Graph(e)) => abort(file!(), line!(), &e),
                    Err(PlanError::Memory(e)) => {
                        log_error!("{}", e.0);
                        return GGML_STATUS_ALLOC_FAILED;
                    }
                };
                if let Some(t0) = t0 {
                    let prof = st.profile.get_or_insert_with(Profile::default);
                    prof.plans_built += 1;
                    prof.planning += t0.elapsed();
                }
                p
            }
        };
        plan.follow(g.uid());
        let status = run_step(m, &mut st, &mut plan, g.uid());
        st.plans.push(plan);
        if let Some(t0) = t0 {
            let prof = st.profile.get_or_insert_with(Profile::default);
            prof.computes += 1;
            prof.total += t0.elapsed();
        }
        status
    }
}

/// Drops the plans `which` selects. Plans owning device memory (AllReduce scratch) that queued
/// work may still use are dropped after the backends finished: a host wait, but only when a plan
/// with scratch goes (buffers changed, or more distinct graphs than the cache holds).
fn drop_plans(m: &MetaBackend, plans: &mut Vec<GraphPlan>, which: impl Fn(&GraphPlan) -> bool) {
    if plans
        .iter()
        .any(|p| which(p) && p.reductions.owns_device_memory())
    {
        for b in &m.simple {
            b.synchronize();
        }
    }
    plans.retain(|p| !which(p));
}

/// The nodes of a graph that run on the devices.
struct DeviceNodes {
    /// Each node with its per-device tensors.
    kept: Vec<(Tensor, Vec<Tensor>)>,
    /// Per kept node: whether it is a cut point (its partial sums are reduced after it).
    reduce_at: Vec<bool>,
    stamp: Stamp,
}

/// Picks the nodes of `all` that run on the devices (views and graph inputs outside meta
/// buffers do not), with their per-device tensors, and where the graph is cut: after a node
/// whose devices hold partial sums, or after the linear tail behind it.
fn device_nodes(
    m: &MetaBackend,
    all: &[Tensor],
    uses: &std::collections::HashMap<usize, i32>,
) -> Result<DeviceNodes, String> {
    let mut stamp = Stamp::new(m.dev);
    let n = m.simple.len();
    let mut kept: Vec<(Tensor, Vec<Tensor>)> = Vec::with_capacity(all.len());
    let mut reduce_at: Vec<bool> = Vec::new();
    let mut i = 0;
    while i < all.len() {
        let t = all[i];
        i += 1;
        let Some(mb) = slices::placed(t) else {
            if t.is_view_op() || t.op_kind() == Some(Op::None) {
                continue;
            }
            return Err(format!(
                "meta backend: node '{}' ({}) is not in a meta buffer",
                t.name_string(),
                t.op_desc()
            ));
        };
        stamp.add(mb.dev);
        for s in t.srcs().filter_map(buffer::holding) {
            stamp.add(s.dev);
        }
        let d = facts::derived(t)?;
        let simple = slices::simple_tensors(&mb, t)
            .ok_or_else(|| format!("meta backend: node '{}' was not allocated", t.name_string()))?;
        kept.push((t, simple));
        reduce_at.push(false);
        // One device holds whole sums: no cut, the graph runs as one sub-graph.
        if !d.reduce || n == 1 {
            continue;
        }
        // Partial sums: reduce after the linear tail that MoE layers put behind the matmul
        // (bias per expert, router weights, sum over the selected experts), so the AllReduce
        // moves the smallest tensor.
        let tail = plan::moe_tail(&NodeView { uses }, all, i - 1);
        for &k in &tail {
            let tk = all[k];
            let mbk = slices::placed(tk).ok_or("meta backend: MoE tail outside meta buffers")?;
            stamp.add(mbk.dev);
            for s in tk.srcs().filter_map(buffer::holding) {
                stamp.add(s.dev);
            }
            facts::derived(tk)?;
            let sk = slices::simple_tensors(&mbk, tk).ok_or_else(|| {
                format!(
                    "meta backend: node '{}' was not allocated",
                    tk.name_string()
                )
            })?;
            kept.push((tk, sk));
            reduce_at.push(false);
        }
        i += tail.len();
        *reduce_at.last_mut().expect("non-empty") = true;
    }
    // A partial bias (e.g. ffn_down_exps.bias) must be absorbed before the reduction: check
    // that no node outside a tail consumes a partial source.
    let kept_nodes: Vec<Tensor> = kept.iter().map(|(t, _)| *t).collect();
    let view = NodeView { uses };
    if let Err(e) = plan::check_partial_consumers(&view, &kept_nodes, &reduce_at)? {
        return Err(format!(
            "meta backend: node '{}' ({}) combines the partial sum '{}' with full values",
            e.node.name_string(),
            e.node.op_desc(),
            e.partial.name_string()
        ));
    }
    Ok(DeviceNodes {
        kept,
        reduce_at,
        stamp,
    })
}

/// Why a graph has no plan.
enum PlanError {
    /// The graph is not one the meta backend can split (a defect or an unsupported model).
    Graph(String),
    /// A device could not allocate what the plan needs.
    Memory(OutOfMemory),
}

impl From<String> for PlanError {
    fn from(e: String) -> Self {
        PlanError::Graph(e)
    }
}

fn build_plan(m: &MetaBackend, g: Graph, nodes: Vec<usize>) -> Result<GraphPlan, PlanError> {
    let n = m.simple.len();
    let all: Vec<Tensor> = g.nodes().collect();
    let uses = use_counts(g, &all);
    let DeviceNodes {
        kept,
        reduce_at,
        stamp,
    } = device_nodes(m, &all, &uses)?;

    // Cut into sub-graphs and build one ggml graph per device for each.
    // A matmul whose contraction slice is empty on a device (that device holds none of the
    // weight's columns) has a zero partial sum there. It is not run (backends need not accept
    // empty operands); its output is zeroed instead, at its place in the graph: it starts a
    // sub-graph of its own, so the zeroing comes after whatever earlier nodes wrote there.
    let zeroed: Vec<Vec<usize>> = kept
        .iter()
        .map(|(_, simple)| (0..n).filter(|&j| empty_contraction(simple[j])).collect())
        .collect();
    if debug_enabled() {
        log_nodes(&kept, &reduce_at, &zeroed)?;
    }
    let zeroed_anywhere: Vec<bool> = zeroed.iter().map(|z| !z.is_empty()).collect();
    let bounds: Vec<(usize, usize, bool)> = plan::sub_graphs(&reduce_at, &zeroed_anywhere)
        .into_iter()
        .map(|b| (b.start, b.end, b.reduce))
        .collect();
    // The AllReduces first: the direct path moves each cut's partial sums out of the graph's
    // memory (`Planned::output`), which the sub-graphs must then write, and an AllReduce that
    // takes over the nodes behind its cut takes them out of the next sub-graph.
    // (over one device there are no cuts: see the loop above)
    let kept_nodes: Vec<Tensor> = kept.iter().map(|(t, _)| *t).collect();
    let view = NodeView { uses: &uses };
    let mut fusions = Vec::new();
    let mut cuts = Vec::new();
    for (i, &(_, b, r)) in bounds.iter().enumerate() {
        if !r {
            continue;
        }
        let next_end = bounds.get(i + 1).map_or(b, |nb| nb.1);
        let fused = plan::fusion(&view, &kept_nodes, b - 1, next_end)
            .and_then(|f| epilogue(&kept, b - 1, f));
        let (f, e) = fused.map_or((None, None), |(f, e)| (Some(f), Some(e)));
        fusions.push(f);
        cuts.push((kept[b - 1].1.clone(), e));
    }
    let planned = allreduce::plan(&m.reducer, &m.simple, cuts).map_err(PlanError::Memory)?;
    let blocker = step::blocker(&m.reducer, &kept, &zeroed_anywhere, &planned);
    // the kept nodes that an AllReduce computes instead of a sub-graph
    let mut taken = vec![false; kept.len()];
    for (c, f) in fusions.iter().enumerate() {
        if let Some(f) = f.filter(|_| planned.fused(c)) {
            taken[f.nodes()].iter_mut().for_each(|x| *x = true);
        }
    }
    let max_len = bounds.iter().map(|b| b.1 - b.0).max().unwrap_or(0);
    // where the step can be captured, room for the capture graphs too, one node longer (the
    // marker)
    let capturable = blocker.is_none();
    let arena = GraphArena::new(
        bounds.len() * n * (1 + usize::from(capturable)),
        max_len + usize::from(capturable),
    );
    let marker = capturable.then(|| arena.marker());
    let mut subgraphs = Vec::with_capacity(bounds.len());
    let mut n_cuts = 0;
    let mut zero_bytes = 0;
    for &(a, b, r) in &bounds {
        let reduce = r.then(|| {
            n_cuts += 1;
            n_cuts - 1
        });
        // where device j's node writes: its own tensor, or the direct path's partial slot
        let out = |k: usize, j: usize| match reduce {
            Some(c) if k + 1 == b => planned.output(c, j).unwrap_or(kept[k].1[j]),
            _ => kept[k].1[j],
        };
        let mut graphs = Vec::with_capacity(n);
        let mut capture = Vec::new();
        for j in 0..n {
            let fill = |graph: Graph| {
                for (k, (t, _)) in kept.iter().enumerate().take(b).skip(a) {
                    if !zeroed[k].contains(&j) && !taken[k] {
                        graph.push_node(out(k, j));
                        graph.note_use_count(out(k, j), uses_of(&uses, *t));
                    }
                }
                graph
            };
            let graph = fill(arena.graph(b - a));
            if let Some(mk) = marker {
                let behind = arena.graph(b - a + 1);
                if graph.n_nodes() > 0 {
                    behind.push_node(mk);
                }
                capture.push(fill(behind));
            }
            graphs.push(graph);
        }
        let zero: Vec<(usize, Tensor, Tensor)> = zeroed[a]
            .iter()
            .map(|&j| (j, out(a, j), kept[a].1[j]))
            .collect();
        zero_bytes = zero
            .iter()
            .map(|(_, _, like)| like.nbytes())
            .fold(zero_bytes, usize::max);
        subgraphs.push(SubGraph {
            graphs,
            capture,
            zero,
            reduce,
        });
    }
    if debug_enabled() {
        match (&blocker, m.reducer.cuda()) {
            (_, None) => {}
            (None, Some(_)) => log_info!(
                "meta plan: the step can be captured as one CUDA graph (from the second run of \
                 the graph's uid)"
            ),
            (Some(why), Some(_)) => log_info!("meta plan: the step runs eagerly: {why}"),
        }
        for (c, r) in planned.reductions.iter().enumerate() {
            let takes = match &r.epilogue {
                Some(e) if e.norm.is_some() => " + add, rms_norm, mul",
                Some(_) => " + add",
                None => "",
            };
            log_info!(
                "meta plan: AllReduce {c:3} of '{}' ({} bytes): {:?}{takes}",
                r.targets[0].name_string(),
                r.targets[0].nbytes(),
                r.path
            );
        }
    }
    Ok(GraphPlan {
        nodes,
        uid: 0,
        stamp,
        subgraphs,
        reductions: planned,
        zeros: vec![0; zero_bytes],
        step: Step::new(blocker),
        marker,
        _arena: arena,
    })
}

/// The per-device tensors of fusion `f` behind the cut after `kept[cut]`, when our kernel can
/// compute them (contiguous f32 everywhere); the norm is left to the graph when only it cannot.
fn epilogue(
    kept: &[(Tensor, Vec<Tensor>)],
    cut: usize,
    mut f: plan::Fusion,
) -> Option<(plan::Fusion, Epilogue)> {
    use super::cuda::CudaAllReduce;
    let per_device = |t: Tensor| {
        let held = slices::placed(t)?;
        slices::simple_tensors(&held, t)
    };
    let ok = |ts: &[Tensor]| ts.iter().all(|&t| CudaAllReduce::supports(t));
    let (add, add_out) = &kept[f.add];
    let residual = per_device(add.src(f.residual_slot)?)?;
    if !ok(&kept[cut].1) || !ok(add_out) || !ok(&residual) {
        return None;
    }
    let norm = f.norm.and_then(|k| {
        let (rms, _) = &kept[k];
        let (mul, out) = &kept[k + 1];
        let weight = per_device(mul.src(1)?)?;
        (ok(&weight) && ok(out)).then(|| NormEpilogue {
            weight,
            out: out.clone(),
            eps: f32::from_bits(rms.op_params()[0] as u32),
        })
    });
    if norm.is_none() {
        f.norm = None;
    }
    let e = Epilogue {
        residual,
        add_out: add_out.clone(),
        norm,
        keeps_sum: f.keeps_sum,
    };
    Some((f, e))
}

/// `GGML_META_DEBUG`: every kept node of a plan, its split and whether the graph is cut after it.
fn log_nodes(
    kept: &[(Tensor, Vec<Tensor>)],
    reduce_at: &[bool],
    zeroed: &[Vec<usize>],
) -> Result<(), String> {
    for (k, (t, _)) in kept.iter().enumerate() {
        let d = facts::derived(*t)?;
        log_info!(
            "meta plan: {:4} {:24} {:16} {}{}{}",
            k,
            t.name_string(),
            t.op_desc(),
            d.split.describe(),
            if reduce_at[k] {
                "  -> AllReduce"
            } else if d.reduce {
                "  (partial sums)"
            } else {
                ""
            },
            if zeroed[k].is_empty() {
                String::new()
            } else {
                format!("  (zero on devices {:?})", zeroed[k])
            }
        );
    }
    Ok(())
}

/// A matmul with a non-empty result whose weight slice on this device is empty.
fn empty_contraction(t: Tensor) -> bool {
    matches!(t.op_kind(), Some(Op::MulMat | Op::MulMatId))
        && t.nelements() > 0
        && t.src(0).is_some_and(|w| w.nelements() == 0)
}

/// `GGML_META_DEBUG=1` logs every graph plan: nodes, their splits and the AllReduce points.
fn debug_enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("GGML_META_DEBUG").is_ok_and(|v| v != "0"))
}

/// How often each node is used as a source: as ggml recorded it for the whole graph (the
/// scheduler hands over views of it, and consumers in other backends' splits count too), else
/// counted within this graph.
fn use_counts(g: Graph, nodes: &[Tensor]) -> std::collections::HashMap<usize, i32> {
    let mut uses = std::collections::HashMap::with_capacity(nodes.len() * 2);
    for t in nodes {
        for s in t.srcs() {
            *uses.entry(s.as_ptr() as usize).or_insert(0) += 1;
        }
    }
    for t in nodes {
        if let Some(c) = g.recorded_use_count(*t) {
            uses.insert(t.as_ptr() as usize, c);
        }
    }
    uses
}

fn uses_of(uses: &std::collections::HashMap<usize, i32>, t: Tensor) -> i32 {
    uses.get(&(t.as_ptr() as usize)).copied().unwrap_or(0)
}

/// The graph's nodes as the core's plan decisions see them.
struct NodeView<'a> {
    uses: &'a std::collections::HashMap<usize, i32>,
}

impl plan::Nodes for NodeView<'_> {
    type Node = Tensor;
    type Error = String;

    fn op(&self, n: Tensor) -> Option<Op> {
        n.op_kind()
    }
    fn src(&self, n: Tensor, slot: usize) -> Option<Tensor> {
        n.src(slot)
    }
    fn srcs(&self, n: Tensor) -> impl Iterator<Item = Tensor> + '_ {
        n.srcs_by_slot().map(|(_, s)| s)
    }
    fn uses(&self, n: Tensor) -> i32 {
        uses_of(self.uses, n)
    }
    fn split(&self, n: Tensor) -> Result<Option<Split>, String> {
        if buffer::holding(n).is_none() {
            return Ok(None);
        }
        facts::derived(n).map(|d| Some(d.split))
    }
    fn reduces(&self, n: Tensor) -> Result<bool, String> {
        facts::derived(n).map(|d| d.reduce)
    }
    fn ne(&self, n: Tensor, dim: usize) -> i64 {
        n.ne(dim)
    }
    fn nb(&self, n: Tensor, dim: usize) -> usize {
        n.nb(dim)
    }
    fn view_offs(&self, n: Tensor) -> usize {
        n.view_offs()
    }
}

// --- execution ----------------------------------------------------------------------------

/// Runs a plan's step: eagerly, captured as one CUDA graph (and launched), or by launching the
/// graph captured before (see `step`).
fn run_step(m: &MetaBackend, st: &mut State, plan: &mut GraphPlan, uid: u64) -> ggml_status {
    let Some(cuda) = m.reducer.cuda() else {
        return run_plan(m, st, plan, false);
    };
    let failed = |e: String| {
        log_error!("meta backend: CUDA graph of the step failed: {e}");
        GGML_STATUS_FAILED
    };
    match plan.step.next(uid) {
        Next::Eager => run_plan(m, st, plan, false),
        Next::Replay => {
            if profile_enabled() {
                st.profile.get_or_insert_with(Profile::default).replays += 1;
            }
            let graph = plan.step.graph().expect("a captured step");
            cuda.launch(graph, &m.simple)
                .map_or_else(failed, |()| GGML_STATUS_SUCCESS)
        }
        Next::Capture => {
            let captured = cuda.begin_capture(&m.simple).and_then(|()| {
                let status = run_plan(m, st, plan, true);
                let ended = cuda.end_capture(&m.simple);
                match status {
                    GGML_STATUS_SUCCESS => ended,
                    s => Err(format!("the step's work failed to queue ({s})")),
                }
            });
            match captured {
                Ok(graph) => {
                    if !std::mem::replace(&mut st.captured_any, true) {
                        log_info!(
                            "meta backend: {}: repeated steps run as one CUDA graph each",
                            m.name.to_string_lossy()
                        );
                    }
                    let s = cuda.launch(&graph, &m.simple);
                    plan.step.captured(uid, graph);
                    s.map_or_else(failed, |()| GGML_STATUS_SUCCESS)
                }
                Err(e) if cuda.not_capturing() => {
                    // nothing of the capture ran: the step runs eagerly, now and from now on
                    log_info!("meta backend: the step is not captured as a CUDA graph: {e}");
                    plan.step = Step::new(Some(e));
                    run_plan(m, st, plan, false)
                }
                // the driver would not end the capture: work queued now would be recorded
                Err(e) => failed(format!("{e}; the capture could not be ended")),
            }
        }
    }
}

/// Queues a plan's work: its sub-graphs and AllReduces in order (`capturing`: the sub-graphs
/// behind the plan's marker, see `step`).
fn run_plan(m: &MetaBackend, st: &mut State, plan: &mut GraphPlan, capturing: bool) -> ggml_status {
    let State {
        workers,
        warned_fallback,
        profile,
        ..
    } = st;
    let mut prof = profile_enabled().then(|| profile.get_or_insert_with(Profile::default));
    let mut runner = Runner { m, workers };
    let marker = plan.marker.filter(|_| capturing);
    for sg in &plan.subgraphs {
        // the cut's headers first: a zeroed node may write into its direct-path slot
        if let Some(c) = sg.reduce {
            plan.reductions.prepare(c);
        }
        for &(j, t, like) in &sg.zero {
            // SAFETY: the plan's zeros cover the tensor (`fits`) and outlive the queued upload
            // (plans are dropped only after a synchronize).
            unsafe {
                crate::tensor::transfer(
                    Via::Backend(m.simple[j]),
                    t,
                    Host::Src(plan.zeros.as_ptr() as *const c_void),
                    0,
                    like.nbytes(),
                )
            };
        }
        let t = prof.is_some().then(std::time::Instant::now);
        let status = match marker {
            Some(mk) => {
                step::mark(mk);
                runner.run_all(&sg.capture)
            }
            None => runner.run_all(&sg.graphs),
        };
        if let (Some(p), Some(t)) = (prof.as_deref_mut(), t) {
            p.launching += t.elapsed();
            p.subgraphs += 1;
        }
        if status != GGML_STATUS_SUCCESS {
            return status;
        }
        if let Some(c) = sg.reduce {
            let t = prof.is_some().then(std::time::Instant::now);
            let status =
                plan.reductions
                    .run(c, &m.reducer, &m.simple, &mut runner, warned_fallback);
            if let (Some(p), Some(t)) = (prof.as_deref_mut(), t) {
                p.reducing += t.elapsed();
                p.reductions += 1;
            }
            if status != GGML_STATUS_SUCCESS {
                return status;
            }
        }
    }
    GGML_STATUS_SUCCESS
}

/// Runs one graph per simple backend: queued on each in turn, or, for synchronous (CPU)
/// backends, on the meta backend's threads at the same time.
struct Runner<'a> {
    m: &'a MetaBackend,
    workers: &'a mut Option<super::workers::Workers>,
}

impl RunAll for Runner<'_> {
    fn run_all(&mut self, graphs: &[Graph]) -> ggml_status {
        let m = self.m;
        if m.threaded {
            let workers = self
                .workers
                .get_or_insert_with(|| super::workers::Workers::new(m.simple.len() - 1));
            return workers.run(&m.simple, graphs);
        }
        for (b, g) in m.simple.iter().zip(graphs) {
            let s = super::workers::compute(*b, *g);
            if s != GGML_STATUS_SUCCESS {
                return s;
            }
        }
        GGML_STATUS_SUCCESS
    }
}
