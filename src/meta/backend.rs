//! The meta backend: one simple backend per simple device; graphs run on all of them, cut
//! into sub-graphs after every node whose devices hold partial sums, each cut followed by
//! an AllReduce that leaves the full sum on every device.
//!
//! A graph's plan (per-device sub-graphs, cut points, reductions: `graph_plan`) is cached and
//! reused while the graph has the same nodes, the memo generation of every meta device it
//! reads is unchanged (no split, graph structure or per-device tensor changed there; see
//! `graph_plan::Stamp`) and what else it read of the graph holds (`graph_plan::Assumed`);
//! several plans are kept (the scheduler hands the meta backend one graph per split, and
//! libllama alternates between prompt and decode graphs), as many as `core::plan_cache` says.
//!
//! A run of a plan queues work and returns: sub-graphs, copies and AllReduces are ordered on
//! the devices (stream order and ggml events), never by the host waiting for a device. Over
//! CUDA devices with our AllReduce a step repeated under one graph identity runs as one CUDA
//! graph (`run_step`, `step`).

use std::ffi::{c_void, CStr, CString};
use std::ptr;
use std::sync::{Arc, Mutex, MutexGuard};

use super::allreduce::Reducer;
use super::device::MetaDevice;
use super::facts;
use super::graph_plan::{self, build_plan, GraphPlan, PlanError};
use super::reduction::RunAll;
use super::step::{self, Next, Step};
use super::transfer::{self, Queue};
use crate::abi::log::{abort, log_error, log_info};
use crate::abi::object::{backend_iface, CObject};
use crate::abi::*;
use crate::tensor::{Host, Via};
use ggml_backend_rs_core::owned::lock;
use ggml_backend_rs_core::owned::Registry;
use ggml_backend_rs_core::plan_cache;

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
    /// Most recently used last; as many as `capacity` says (the oldest dropped first).
    plans: Vec<GraphPlan>,
    capacity: plan_cache::Capacity,
    warned_fallback: bool,
    /// Whether a step was captured as one CUDA graph yet (logged once).
    captured_any: bool,
    /// Whether a plan over CUDA devices that is never captured was logged (the first one).
    told_not_captured: bool,
    /// Why no graph may run any more: a capture the driver would not end leaves the streams
    /// recording, not running, what is queued on them (the next synchronize reports the
    /// driver's error).
    broken: Option<String>,
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
        if let Some(why) = &st.broken {
            log_error!("meta backend: graph not computed: {why}");
            return GGML_STATUS_FAILED;
        }
        let t0 = profile_enabled().then(std::time::Instant::now);
        drop_plans(m, &mut st.plans, |p| !p.stamp.current());
        let mut found = st.plans.iter().position(|p| p.is_for(g));
        if let Some(i) = found {
            // (a plan that no longer holds is replaced, not kept beside the new one)
            if !st.plans[i].fits() || !st.plans[i].still_for(g) {
                let stale: *const GraphPlan = &st.plans[i];
                drop_plans(m, &mut st.plans, |p| std::ptr::eq(p, stale));
                found = None;
            }
        }
        let mut plan = match found {
            Some(i) => st.plans.remove(i),
            None => {
                if st.plans.len() >= st.capacity.get() {
                    let oldest: *const GraphPlan = &st.plans[0];
                    let key = st.plans[0].key();
                    st.capacity.dropped(key);
                    drop_plans(m, &mut st.plans, |p| std::ptr::eq(p, oldest));
                }
                let nodes: Vec<usize> = g.nodes().map(|t| t.as_ptr() as usize).collect();
                if let Some(cap) = st.capacity.building(graph_plan::key(&nodes)) {
                    log_info!(
                        "meta backend: {}: a step computes more graphs than its plans kept; \
                         now keeping {cap}",
                        m.name.to_string_lossy()
                    );
                }
                let p = match build_plan(m.dev, &m.simple, &m.reducer, g, nodes) {
                    Ok(p) => p,
                    Err(PlanError::Graph(e)) => abort(file!(), line!(), &e),
                    Err(PlanError::Memory(e)) => {
                        log_error!("{}", e.0);
                        return GGML_STATUS_ALLOC_FAILED;
                    }
                };
                if let (Some(_), Step::Never(why)) = (m.reducer.cuda(), &p.step) {
                    if !std::mem::replace(&mut st.told_not_captured, true) {
                        log_info!(
                            "meta backend: {}: a step runs eagerly, not as one CUDA graph: {why} \
                             (GGML_META_DEBUG=1 logs each plan's reason)",
                            m.name.to_string_lossy()
                        );
                    }
                }
                if let Some(t0) = t0 {
                    let prof = st.profile.get_or_insert_with(Profile::default);
                    prof.plans_built += 1;
                    prof.planning += t0.elapsed();
                }
                p
            }
        };
        plan.follow(g.uid());
        let mut status = run_step(m, &mut st, &mut plan, g.uid());
        st.plans.push(plan);
        // (not where a capture could not be ended: the streams still record, and cannot wait)
        if let (None, Some(cuda)) = (&st.broken, m.reducer.cuda()) {
            if let Err(e) = cuda.end_step(&m.simple, status != GGML_STATUS_SUCCESS) {
                log_error!(
                    "meta backend: {}: graph failed: {e}",
                    m.name.to_string_lossy()
                );
                status = GGML_STATUS_FAILED;
            }
        }
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
                Err(e) => {
                    let why = format!("{e}; the capture of a step could not be ended");
                    st.broken = Some(why.clone());
                    failed(why)
                }
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
