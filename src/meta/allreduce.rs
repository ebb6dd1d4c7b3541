//! The meta backend's AllReduce: after a cut, every device holds a partial sum of the same
//! tensor; afterwards every device holds the total, with the same bits everywhere.
//!
//! Six paths, chosen per cut when a graph plan is built ([`Reducer::choose`]):
//! * **backend**: the simple backends' own AllReduce, as the ggml version offers it
//!   ([`BackendAllReduce`]: 0.9.11's `ggml_backend_allreduce_tensor`, 0.26's communicator,
//!   `ggml_backend_comm_*`; CUDA's use NCCL or, on 0.26, its internal kernel); where it declines
//!   a cut (a CUDA build without NCCL, a type it does not reduce), that cut runs our CUDA kernel
//!   where it can, else the copies path, and the plan does not ask again for it;
//! * **own**: our CUDA kernels ([`super::cuda`]), for contiguous f32 tensors on CUDA devices;
//!   preferred up to the version's `OWN_KERNEL_BEFORE_BACKEND_UP_TO` (0.9.11: decode sizes,
//!   where NCCL's latency dominates; 0.26: always, its communicator rounds through BF16). The
//!   kernels read the other GPUs' partials directly where every pair of GPUs has peer access,
//!   else they exchange them through pinned host memory (`super::mapped`, "mapped");
//! * **host**: devices whose memory the host reads and writes (CPU backends), up to
//!   [`host::HOST_MAX`] bytes per partial: the host sums after the sub-graphs ([`host`]);
//! * **staged**: devices whose copies between each other go through the host anyway (a backend
//!   without asynchronous copies, e.g. RPC servers, each its own machine; or backends that
//!   decline them between the devices, e.g. ggml-vulkan between two GPUs, found out by the first
//!   plan with copies: [`CopyPlan::declined_copy`]): the host fetches the partials with
//!   asynchronous reads, sums them as the host path does and writes the results back
//!   ([`host::reduce_staged`]), one wait per cut instead of a copy and an add per exchange;
//! * **copies**: any backend — asynchronous copies between devices and in-place adds, staged as
//!   `exchange::schedule` says (butterfly for powers of two, gather-and-add otherwise)
//!   (`copies`);
//! * **direct** (forced only, until measured on GPUs): sub-graphs write their partials into
//!   plan-owned slots and every device adds all of them, read in place, into its own target
//!   (`direct`); for devices that compute on each other's memory.
//!
//! One file per path around what they share: `reduction` (the paths, a cut's reduction, the
//! plan's error), `epilogue` (the nodes a path may compute behind a cut) and `scratch` (the
//! memory and headers the copies and direct paths own); this file chooses the path per cut,
//! builds a graph plan's reductions and runs them.
//!
//! `GGML_META_ALLREDUCE=backend|comm|own|mapped|host|staged|copies|direct` forces a path (for
//! measurement; `comm` is another name for `backend`, `mapped` is our kernel exchanging through
//! host memory even where the GPUs have peer access; an unavailable path falls back to copies).
//! `GGML_META_NO_BACKEND_ALLREDUCE=1` (older switch) means: not the backend's.
//!
//! The own, host and staged paths can also compute the nodes right behind a cut ([`Epilogue`]: the
//! residual add, then the RMS norm times its weight), which then leave the next sub-graph;
//! `GGML_META_FUSE=0` keeps them in the graph.
//!
//! Nothing is allocated per AllReduce: the copies path's scratch memory, tensor headers and
//! one-node add graphs belong to the graph plan and are reused by every run of it (stable
//! headers also keep the CUDA backend's graph cache, keyed by a graph's first node, hitting).
//! Nothing waits on the host either, where the devices have events and asynchronous copies
//! between each other: the copies of a stage are ordered before its adds, and reads of a partial
//! before its overwrite, by ggml events. Devices without events (the CPU, whose operations
//! complete synchronously anyway) get a `synchronize` between the copies and the adds of a
//! stage, and a backend whose `cpy_tensor_async` declines makes ggml's copy wait for both sides.
//!
//! Scratch reuse across runs: each stage has two slot sets used by alternate AllReduces of a
//! plan. An AllReduce's copy into a slot is queued on the sender after the sender waited for the
//! receiver's event of the previous AllReduce, which the receiver recorded after its adds of
//! the AllReduce before — the last reader of that slot set.

use std::ffi::c_void;
use std::sync::{Mutex, OnceLock};

use super::backend_allreduce::BackendAllReduce;
use super::copies::{plan_copies, CopyPlan, Declined};
use super::cuda::CudaAllReduce;
use super::direct::{plan_direct, DirectPlan};
use super::epilogue::Epilogue;
use super::host;
use super::reduction::{OutOfMemory, Path, Reduction, RunAll};
use crate::abi::log::{ggml_assert, log_info};
use crate::abi::*;
use ggml_backend_rs_core::owned::lock;

/// What a meta backend can reduce with, decided when it starts.
pub struct Reducer {
    /// The simple backends' own AllReduce; taken by [`release`](Self::release) before the
    /// backends are freed.
    backend: Mutex<Option<BackendAllReduce>>,
    has_backend: bool,
    cuda: Option<CudaAllReduce>,
    forced: Option<Path>,
    /// One event per simple device ("received"), when every device has events.
    events: Option<Vec<Event>>,
    devices: Vec<Device>,
    /// Whether a cut's AllReduce may take over the nodes behind it ([`Epilogue`];
    /// `GGML_META_FUSE=0` turns it off, for measurement).
    fuse: bool,
    /// Whether copies between the devices go through the host anyway (a backend has no
    /// asynchronous copy and its memory is not the host's, or declines a copy between two of
    /// the devices: [`CopyPlan::declined_copy`]): the staged path is then preferred to the
    /// copies path. Unset until the first plan with copies has asked the backends.
    through_host: OnceLock<bool>,
    /// Per simple backend, whether its memory is the host's.
    host_memory: Vec<bool>,
}

// SAFETY: function pointers and handles of objects shared with C; plans use them under the
// meta backend's state lock, the backend AllReduce under its own.
unsafe impl Send for Reducer {}
// SAFETY: as for `Send` above: shared access goes through the same synchronisation.
unsafe impl Sync for Reducer {}

impl Reducer {
    /// The reducer of a meta backend over `backends`, the simple backends of `devices`.
    pub fn new(devices: &[Device], backends: &[Backend]) -> Reducer {
        let n = devices.len();
        let env = std::env::var("GGML_META_ALLREDUCE").ok();
        // `mapped`: our CUDA kernel, exchanging the partials through host memory
        let force_mapped = env.as_deref() == Some("mapped");
        let mut forced = if force_mapped {
            Some(Path::Own)
        } else {
            env.as_deref().and_then(Path::parse)
        };
        if let (Some(v), None) = (&env, forced) {
            log_info!(
                "meta backend: GGML_META_ALLREDUCE={v} is not \
                 backend|own|mapped|host|staged|copies|direct; ignored"
            );
        }
        let no_backend = std::env::var("GGML_META_NO_BACKEND_ALLREDUCE").is_ok_and(|v| v != "0");
        // One collective over the same GPU twice (`CUDA0,CUDA0`) is not valid NCCL use: the
        // backend's AllReduce runs there only when forced (0.26's CUDA communicator then falls
        // back to its internal kernel).
        let repeats_gpu = devices.iter().enumerate().any(|(i, &d)| {
            super::cuda::cuda_ordinal(d).is_some_and(|o| {
                devices[..i]
                    .iter()
                    .any(|&e| super::cuda::cuda_ordinal(e) == Some(o))
            })
        });
        let wanted = match forced {
            Some(Path::Backend) => true,
            Some(_) => false,
            None => !no_backend && !repeats_gpu,
        };
        let backend = if n > 1 && wanted {
            BackendAllReduce::new(backends)
        } else {
            None
        };
        // (forced to the backend's AllReduce, our kernel is where a cut it declines goes)
        let cuda = if n > 1
            && matches!(
                forced,
                None | Some(Path::Own | Path::Direct | Path::Backend)
            ) {
            let any_cuda = devices
                .iter()
                .any(|&d| super::cuda::cuda_ordinal(d).is_some());
            match CudaAllReduce::new(devices, force_mapped) {
                Ok(c) => Some(c),
                Err(e) => {
                    if any_cuda || forced == Some(Path::Own) {
                        log_info!("meta backend: own CUDA AllReduce not used: {e}");
                    }
                    None
                }
            }
        } else {
            None
        };
        if forced == Some(Path::Backend) && backend.is_none() {
            let (instead, how) = if cuda.is_some() {
                (Path::Own, "our CUDA kernel")
            } else {
                (Path::Copies, "copies")
            };
            log_info!("meta backend: GGML_META_ALLREDUCE=backend, but the backend has none: {how}");
            forced = Some(instead);
        }
        if forced == Some(Path::Own) && cuda.is_none() {
            forced = Some(Path::Copies);
        }
        let peer = cuda.as_ref().is_some_and(CudaAllReduce::reads_peers);
        if forced == Some(Path::Direct) && !direct_reads_ok(devices, peer) {
            log_info!(
                "meta backend: GGML_META_ALLREDUCE=direct needs devices that compute on each \
                 other's memory (CUDA with peer access): not used"
            );
            forced = None;
        }
        let mut events = Vec::with_capacity(n);
        for d in devices {
            // SAFETY: an event made by the device, freed in Drop.
            match unsafe { Event::from_ptr(d.event_new()) } {
                Some(e) => events.push(e),
                None => break,
            }
        }
        let events = if events.len() == n {
            Some(events)
        } else {
            for (d, e) in devices.iter().zip(events) {
                d.event_free(e);
            }
            None
        };
        let fuse = std::env::var("GGML_META_FUSE").map_or(true, |v| v != "0");
        let host_memory: Vec<bool> = backends
            .iter()
            .map(|&b| crate::backend::default_buffer_type(b, "meta AllReduce").is_host())
            .collect();
        // A backend without asynchronous copies whose memory is not the host's: known now.
        // Others may still decline them between devices: the first plan with copies asks.
        let through_host = OnceLock::new();
        if n > 1
            && backends
                .iter()
                .zip(&host_memory)
                .any(|(b, &host)| b.iface().cpy_tensor_async.is_none() && !host)
        {
            let _ = through_host.set(true);
        }
        Reducer {
            through_host,
            fuse,
            has_backend: backend.is_some(),
            backend: Mutex::new(backend),
            cuda,
            forced,
            events,
            devices: devices.to_vec(),
            host_memory,
        }
    }

    /// The path for a cut with these per-device targets.
    pub fn choose(&self, targets: &[Tensor]) -> Path {
        // Direct: each device's sub-graph writes its partial to scratch and an add on each
        // device reads all partials into its target; the target must be the node's own memory.
        let direct_ok = self.events.is_some()
            && targets.iter().all(|t| t.view_src().is_none())
            && (self.forced == Some(Path::Direct));
        if direct_ok {
            return Path::Direct;
        }
        self.choose_besides_direct(targets)
    }

    /// The path for a cut with these targets when the direct path is not an option.
    pub fn choose_besides_direct(&self, targets: &[Tensor]) -> Path {
        let t = targets[0];
        let own_ok = self.cuda.is_some() && CudaAllReduce::supports(t);
        let host_ok = t.nbytes() <= host::HOST_MAX && targets.iter().all(|&t| host::supports(t));
        let staged_ok = targets.iter().all(|&t| host::stageable(t));
        let backend_ok = self.has_backend;
        match self.forced {
            Some(Path::Own | Path::Direct) if own_ok => Path::Own,
            Some(Path::Host) if host_ok => Path::Host,
            Some(Path::Staged) if staged_ok => Path::Staged,
            Some(Path::Backend) => Path::Backend,
            Some(_) => Path::Copies,
            None if own_ok
                && (!backend_ok
                    || crate::version::OWN_KERNEL_BEFORE_BACKEND_UP_TO
                        .is_none_or(|max| t.nbytes() <= max)) =>
            {
                Path::Own
            }
            None if host_ok => Path::Host,
            None if backend_ok => Path::Backend,
            None if self.through_host.get() == Some(&true) && staged_ok => Path::Staged,
            None => Path::Copies,
        }
    }
}

impl Reducer {
    /// Our CUDA AllReduce, when the devices have it (it also captures a plan's step).
    pub fn cuda(&self) -> Option<&CudaAllReduce> {
        self.cuda.as_ref()
    }

    /// Why a plan whose cuts are reduced as `planned` says cannot be captured as one CUDA
    /// graph by our AllReduce; `None` when it can.
    pub fn capture_blocker(&self, planned: &Planned) -> Option<String> {
        let r = planned.reductions.iter().find(|r| r.path != Path::Own)?;
        Some(format!(
            "the AllReduce of '{}' runs on the {:?} path, not our kernel",
            r.targets[0].name_string(),
            r.path
        ))
    }

    /// Frees the backend AllReduce, which may refer to the simple backends: called before they
    /// are freed, after they were synchronized.
    pub fn release(&self) {
        *self.lock_backend() = None;
    }

    fn lock_backend(&self) -> std::sync::MutexGuard<'_, Option<BackendAllReduce>> {
        lock(&self.backend)
    }
}

impl Drop for Reducer {
    fn drop(&mut self) {
        self.cuda = None;
        if let Some(events) = self.events.take() {
            for (d, e) in self.devices.iter().zip(events) {
                d.event_free(e);
            }
        }
    }
}

/// `bool (*)(ggml_backend_dev_t dev, ggml_backend_dev_t peer)`: whether `dev`'s backends can
/// compute on tensors in `peer`'s memory. A registry offers it through
/// `get_proc_address("ggml_backend_rs_dev_reads_peer")` (the ctests' test devices do); CUDA
/// devices are checked by our CUDA AllReduce (peer access) instead.
type ReadsPeerFn = unsafe extern "C" fn(ggml_backend_dev_t, ggml_backend_dev_t) -> bool;

/// Whether every simple backend can compute on every other device's memory.
fn direct_reads_ok(devices: &[Device], cuda_peer_access: bool) -> bool {
    if cuda_peer_access {
        return true;
    }
    devices.iter().all(|&a| {
        let Some(p) = a.reg_proc(c"ggml_backend_rs_dev_reads_peer") else {
            return false;
        };
        // SAFETY: the entry is documented with the ReadsPeerFn signature.
        let f = unsafe { std::mem::transmute::<*mut c_void, ReadsPeerFn>(p) };
        devices
            .iter()
            .filter(|&&b| b != a)
            // SAFETY: two live devices.
            .all(|&b| unsafe { f(a.as_ptr(), b.as_ptr()) })
    })
}

/// The AllReduces of one graph plan: per cut its path, and the memory and pre-built operations
/// the copies and direct paths own.
pub struct Planned {
    pub reductions: Vec<Reduction>,
    copies: Option<CopyPlan>,
    direct: Option<DirectPlan>,
    /// The staged path's host memory.
    staging: host::Staging,
}

/// Builds the reductions of a plan: `cuts[c]` are the per-device targets of cut `c` and what
/// its AllReduce could take over; [`Planned::fused`] says where it does.
///
/// The first plan with cuts on the copies path, where no path is forced and the backends have no
/// AllReduce of their own, asks the backends in its scratch whether they copy between the devices
/// asynchronously ([`CopyPlan::declined_copy`]); where they do not, it says so and is made
/// again, with the staged path for those cuts. Later plans know.
pub fn plan(
    r: &Reducer,
    backends: &[Backend],
    cuts: Vec<(Vec<Tensor>, Option<Epilogue>)>,
) -> Result<Planned, OutOfMemory> {
    let ask = r.forced.is_none() && !r.has_backend && r.through_host.get().is_none();
    let again = ask.then(|| cuts.clone());
    let planned = plan_paths(r, backends, cuts)?;
    let on_copies = planned.reductions.iter().any(|x| x.path == Path::Copies);
    let (Some(cuts), Some(copies), true) = (again, planned.copies.as_ref(), on_copies) else {
        return Ok(planned);
    };
    let declined = copies.declined_copy(backends, &r.host_memory);
    let _ = r.through_host.set(declined.is_some());
    let Some(Declined { from, to }) = declined else {
        return Ok(planned);
    };
    log_info!(
        "meta backend: device {to} ({}) copies from device {from} ({}) only through the host: \
         the AllReduces of f32 tensors that no other path takes are staged through the host",
        backends[to].name_string(),
        backends[from].name_string()
    );
    drop(planned);
    plan_paths(r, backends, cuts)
}

/// [`plan`] with what the reducer knows now.
fn plan_paths(
    r: &Reducer,
    backends: &[Backend],
    cuts: Vec<(Vec<Tensor>, Option<Epilogue>)>,
) -> Result<Planned, OutOfMemory> {
    let mut reductions: Vec<Reduction> = cuts
        .into_iter()
        .map(|(targets, epilogue)| {
            let t0 = targets[0];
            ggml_assert!(
                targets
                    .iter()
                    .all(|t| t.is_contiguous() && t.same_layout(t0)),
                "meta backend: AllReduce of '{}' needs contiguous tensors of one layout",
                t0.name_string()
            );
            let path = r.choose(&targets);
            let epilogue = epilogue.filter(|e| {
                r.fuse
                    && match path {
                        Path::Own => true,
                        Path::Host => e.tensors().all(host::supports),
                        Path::Staged => e.tensors().all(host::stageable),
                        _ => false,
                    }
            });
            Reduction {
                path,
                epilogue,
                declined: false,
                targets,
                copies: None,
                direct: None,
            }
        })
        .collect();
    // The direct path's partial slots are safe to reuse only with another direct cut in between
    // (see `plan_direct`): a plan with a single direct cut uses another path.
    let direct: Vec<usize> = (0..reductions.len())
        .filter(|&c| reductions[c].path == Path::Direct && reductions[c].targets[0].nbytes() > 0)
        .collect();
    for red in reductions.iter_mut().filter(|x| x.path == Path::Direct) {
        if direct.len() < 2 || red.targets[0].nbytes() == 0 {
            red.path = r.choose_besides_direct(&red.targets);
        }
    }
    let copies = plan_copies(backends, &mut reductions)?;
    let direct = plan_direct(backends, &mut reductions)?;
    Ok(Planned {
        reductions,
        copies,
        direct,
        staging: host::Staging::default(),
    })
}

impl Planned {
    /// Brings the cut's headers up to the targets' current shapes and memory; called before
    /// the sub-graph that computes the partials runs (it may write into a direct-path slot).
    pub fn prepare(&mut self, cut: usize) {
        let red = &self.reductions[cut];
        if let (Some(d), Some(dp)) = (red.direct, self.direct.as_mut()) {
            dp.prepare(d);
        }
        if let (Some(c), Some(cp)) = (red.copies, self.copies.as_mut()) {
            cp.prepare(c);
        }
    }

    /// Where device `dev`'s sub-graph writes the partial sums of cut `cut`: a scratch slot on
    /// the direct path, else (None) the target itself.
    pub fn output(&self, cut: usize, dev: usize) -> Option<Tensor> {
        let d = self.reductions[cut].direct?;
        Some(self.direct.as_ref()?.partial(d, dev))
    }

    /// Whether cut `cut`'s AllReduce computes the nodes behind it (they leave the sub-graph).
    pub fn fused(&self, cut: usize) -> bool {
        self.reductions[cut].epilogue.is_some()
    }

    /// Whether the plan owns device memory (scratch) that queued work may use.
    pub fn owns_device_memory(&self) -> bool {
        self.copies.is_some() || self.direct.is_some()
    }

    /// Whether the plan still serves every target (else it is rebuilt): the scratch holds them,
    /// a cut planned while empty is still empty, and no direct cut became empty (the direct
    /// path's slot reuse counts on every direct cut's exchange).
    pub fn fits(&self) -> bool {
        let still_planned = self.reductions.iter().all(|r| {
            let empty = r.targets[0].nbytes() == 0;
            match r.path {
                Path::Copies | Path::Backend => empty || r.copies.is_some(),
                Path::Direct => !empty && r.direct.is_some(),
                Path::Own | Path::Host | Path::Staged => {
                    r.epilogue.as_ref().is_none_or(|e| e.fits(r.targets[0]))
                }
            }
        });
        if !still_planned {
            return false;
        }
        let ok = |bytes: usize, which: fn(&Reduction) -> bool| {
            self.reductions
                .iter()
                .filter(|r| which(r))
                .all(|r| r.targets[0].nbytes() <= bytes)
        };
        self.copies
            .as_ref()
            .is_none_or(|cp| ok(cp.slot_bytes(), |r| r.copies.is_some()))
            && self
                .direct
                .as_ref()
                .is_none_or(|dp| ok(dp.slot_bytes(), |r| r.direct.is_some()))
    }

    /// Leaves the sum of cut `cut`'s targets on every device (after [`prepare`](Self::prepare)
    /// and the cut's sub-graph).
    pub fn run(
        &mut self,
        cut: usize,
        r: &Reducer,
        backends: &[Backend],
        runner: &mut dyn RunAll,
        warned: &mut bool,
    ) -> ggml_status {
        let red = &mut self.reductions[cut];
        // (a direct cut is never empty here: `fits` rebuilds the plan first; an empty cut
        // with an epilogue has empty results too)
        if red.targets[0].nbytes() == 0 || backends.len() < 2 {
            return GGML_STATUS_SUCCESS;
        }
        match red.path {
            Path::Own => {
                let cuda = r.cuda.as_ref().expect("chosen only with CUDA");
                return cuda.run(backends, &red.targets, red.epilogue.as_ref());
            }
            Path::Staged => {
                host::reduce_staged(
                    backends,
                    &red.targets,
                    red.epilogue.as_ref(),
                    &mut self.staging,
                );
                // the reads have no status: a backend lost during them (logged) fails the step
                if crate::backend::any_failed(backends) {
                    return GGML_STATUS_FAILED;
                }
                return GGML_STATUS_SUCCESS;
            }
            Path::Host => {
                host::reduce(backends, &red.targets, red.epilogue.as_ref());
                return GGML_STATUS_SUCCESS;
            }
            Path::Direct => {
                let dp = self.direct.as_ref().expect("planned with the direct cuts");
                let d = red.direct.expect("a direct cut");
                let ev = r.events.as_ref().expect("chosen only with events");
                return dp.run(d, backends, ev, runner);
            }
            Path::Backend => {
                if !red.declined {
                    let done = r
                        .lock_backend()
                        .as_ref()
                        .is_some_and(|b| b.all_reduce(backends, &red.targets));
                    if done {
                        return GGML_STATUS_SUCCESS;
                    }
                    red.declined = true;
                    if !*warned {
                        *warned = true;
                        log_info!(
                            "meta backend: the backend's AllReduce declined '{}' (a CUDA build \
                             without NCCL, or a type it does not reduce?); this cut is reduced \
                             another way from now on",
                            red.targets[0].name_string()
                        );
                    }
                }
                if let Some(cuda) = r
                    .cuda
                    .as_ref()
                    .filter(|_| CudaAllReduce::supports(red.targets[0]))
                {
                    return cuda.run(backends, &red.targets, None);
                }
            }
            Path::Copies => {}
        }
        let cp = self
            .copies
            .as_mut()
            .expect("a copy plan for every cut on the copies or backend path");
        let c = red.copies.expect("copies planned for this cut");
        // Devices that copy between each other only through the host may not wait for each
        // other's events either (ggml-vulkan's events stay on their device): ggml's copies
        // wait for both sides anyway, and the stages are ordered by synchronizing.
        let events = r
            .events
            .as_deref()
            .filter(|_| r.through_host.get() != Some(&true));
        cp.run(c, backends, events, runner)
    }
}
