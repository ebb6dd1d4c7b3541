//! The meta backend's own CUDA AllReduce: one small kernel per GPU that reads every device's
//! partial sum directly (peer access; trivially on one GPU) and writes the total to the
//! devices, ordered against the CUDA backends' streams with events — no host waits, no NCCL,
//! no scratch memory.
//!
//! The kernel can also compute the nodes right behind the cut (an [`Epilogue`], decided by
//! `core::plan::fusion`): the residual add (`x = r + sum`), and after it the RMS norm times its
//! weight (`z = rms_norm(x) * w`), which then leave the next sub-graph. That removes one or
//! two kernels per cut from every device's critical path, where the CUDA backend of a single
//! device fuses the residual add into the matmul before it.
//!
//! The CUDA driver is loaded at run time (cudarc's dynamic loading), so the crate builds and
//! runs where there is no CUDA; [`CudaAllReduce::new`] declines when the driver or the devices
//! are not there. The kernels are PTX generated here for the device count ([`ptx`]) and
//! compiled by the driver when the meta backend starts. How the GPUs share the work is
//! `core::launch`'s: two-shot (each GPU a share, written to every device), or one-shot (each GPU
//! everything, written to its own devices) for tensors up to `GGML_META_ONE_SHOT_MAX` bytes
//! (256 KiB) where no result overwrites a partial sum that other GPUs still read.
//!
//! Ordering, per AllReduce over backends `b_0 .. b_{n-1}` (one per simple device):
//! 1. on every `b_k`, a ggml event `ready_k` is recorded after its queued work (the sub-graph
//!    that produced the partial);
//! 2. on our stream of each launching GPU `j`: wait for every `ready_k`, launch the kernel for
//!    its units, record `done_j`;
//! 3. every `b_k` waits for every `done_j` before its next work.
//!
//! The kernel reads all partials of an element before writing its sum anywhere, and every
//! backend resumes only after all kernels are done, so no write can overtake a read. Events are
//! re-recorded by the next AllReduce only after all waits on them were issued (CUDA waits
//! capture the event's state when issued).
//!
//! The direct path of the meta backend (`allreduce.rs`) relies on the peer access checked here:
//! there the CUDA backend's own add kernel reads the other GPUs' partials (a debug build of the
//! CUDA backend asserts that sources are in its own device's buffers; release builds do not).
//!
//! What this relies on from the pinned CUDA backend (`ggml-cuda.cu`): its devices are named
//! `CUDA<ordinal>` under the registry `CUDA`; its events (`event_new`) carry a `cudaEvent_t` in
//! `context` and `event_wait` makes the backend's stream wait for `context` as a `cudaEvent_t`
//! (the runtime's and the driver's event handles are the same objects); it works in each
//! device's primary context and enables peer access between all devices that support it. For a
//! step captured as one CUDA graph ([`CudaAllReduce::begin_capture`]): its streams are
//! non-blocking, its `graph_compute` queues without waiting on the host for graphs without
//! `MUL_MAT_ID`, and it runs a graph directly, not capturing one of its own, when the graph
//! differs from the last one it ran with the same first node (`meta/step.rs`).

use std::ffi::{c_void, CStr, CString};
use std::ptr;
use std::sync::atomic::{AtomicBool, Ordering};

use cudarc::driver::sys;

use super::engines::{Engines, SLOT_BYTES};
use super::epilogue::Epilogue;
use super::mapped::{DriverTopology, Mapped};
use crate::abi::log::{log_error, log_info};
use crate::abi::*;
use ggml_backend_rs_core::engines;
use ggml_backend_rs_core::launch::{self, Launch, Shot};
use ggml_backend_rs_core::mapped as host_mapped;
use ggml_backend_rs_core::ptx::{self, Epilogue as Kernel, Param};

/// Elements per thread block.
const BLOCK: u32 = 256;
/// Most devices of a meta device.
const MAX_DEVICES: usize = GGML_BACKEND_META_MAX_DEVICES;
/// Most blocks per launch: enough to fill an H200 (132 SMs) several times over.
const MAX_BLOCKS: u32 = 1024;
/// Most kernel parameters: partials, three output sets, residual, weight, eps, ncols, range,
/// and the nine of the exchange through host memory.
const MAX_PARAMS: usize = 4 * MAX_DEVICES + 6 + 9;
/// Bytes per partial up to which every GPU sums everything and writes its own devices
/// (one-shot) rather than a share for all devices (two-shot); `GGML_META_ONE_SHOT_MAX`
/// overrides it. A first guess for NVLink, where small messages are latency-bound; with one
/// GPU there is a single launch either way.
const ONE_SHOT_MAX: usize = 256 << 10;
/// Bytes per partial from which a cut through host memory goes by the copy engines rather
/// than the mapped kernel (`GGML_META_ENGINES_MIN`: bytes, or `off`). Measured on the
/// one-GPU proxy with a launch per device (H100, `bench/engines-gpu.sh`): the kernel is ahead
/// at 32 KiB a partial (2 tokens), even at 64 KiB, the engines ahead from 256 KiB (+6-9%) to
/// 8 MiB (prefill, +29-34%).
const ENGINES_MIN: u64 = 128 << 10;

/// One GPU that launches kernels: its context, our stream, the kernels and the `done` event.
struct Launcher {
    ctx: sys::CUcontext,
    stream: sys::CUstream,
    module: sys::CUmodule,
    /// One entry per `Kernel::ALL` item, in that order.
    kernels: [sys::CUfunction; 3],
    /// A ggml event around our `done` CUevent, so the CUDA backends can wait for it through
    /// their own `event_wait`.
    done: Box<ggml_backend_event>,
    /// Launches on this launcher's physical GPU whose blocks wait for each other's: 1, or
    /// with `GGML_META_MAPPED_APART=1` one per device there; and that GPU's multiprocessors.
    together: u32,
    sms: u32,
}

impl Launcher {
    /// The CUevent inside `done`.
    fn done_event(&self) -> sys::CUevent {
        self.done.context as sys::CUevent
    }
}

/// One launch's kernel arguments, in the order of its kernel's parameters.
struct Args {
    /// Which kernel (an index into `Kernel::ALL`).
    kernel: usize,
    /// Every parameter's value as u64 (0 at `eps_at`).
    vals: [u64; MAX_PARAMS],
    /// The f32 parameter (`eps`) and where it is.
    eps: f32,
    eps_at: Option<usize>,
    /// Parameters of the kernel.
    len: usize,
}

impl Args {
    /// What `cuLaunchKernel` takes: a pointer to each parameter's value (at `eps_at`, to the
    /// f32), valid while `self` is neither moved nor dropped.
    fn pointers(&mut self) -> [*mut c_void; MAX_PARAMS] {
        let eps = &mut self.eps as *mut f32 as *mut c_void;
        let mut out = [ptr::null_mut(); MAX_PARAMS];
        for (i, (o, v)) in out
            .iter_mut()
            .zip(&mut self.vals)
            .enumerate()
            .take(self.len)
        {
            *o = match self.eps_at == Some(i) {
                true => eps,
                false => v as *mut u64 as *mut c_void,
            };
        }
        out
    }
}

pub struct CudaAllReduce {
    /// Per simple device: the ggml event recorded on its backend after its partial is ready.
    ready: Vec<Event>,
    ready_devices: Vec<Device>,
    /// The distinct GPUs: ordinal, driver device and primary context (retained).
    ctxs: Vec<(i32, sys::CUdevice, sys::CUcontext)>,
    /// One launcher per distinct GPU (one for `CUDA0,CUDA0`).
    launchers: Vec<Launcher>,
    /// Per simple device: the index of its GPU's launcher.
    gpu_of: Vec<usize>,
    /// See [`ONE_SHOT_MAX`].
    one_shot_max: usize,
    /// The exchange through host memory, where the GPUs do not read each other's memory
    /// (or `GGML_META_ALLREDUCE=mapped`); `None`: they read each other's partials directly.
    mapped: Option<Mapped>,
    /// Through host memory, for partials of at least `Engines::min` bytes ([`ENGINES_MIN`]):
    /// the exchange by the copy engines, where there is more than one launcher.
    engines: Option<Engines>,
    /// Per `Kernel::ALL` item: its parameters in order (`ptx::params`), made once.
    params: [Vec<Param>; 3],
    /// An injected `capture_end` fault (`fault`) ended a capture that the step is to take as
    /// never ended: the next [`not_capturing`](Self::not_capturing) answers no.
    capture_left_open: AtomicBool,
}

// SAFETY: the handles are driver objects usable from any thread; the meta backend calls
// `run` under its state lock, one AllReduce at a time.
unsafe impl Send for CudaAllReduce {}
// SAFETY: as for `Send` above: shared access goes through the same synchronisation.
unsafe impl Sync for CudaAllReduce {}

/// A driver call's result as a Rust error naming the call.
pub(super) fn check(r: sys::CUresult, what: &str) -> Result<(), String> {
    if r == sys::CUresult::CUDA_SUCCESS {
        return Ok(());
    }
    let mut s: *const std::ffi::c_char = ptr::null();
    // SAFETY: cuGetErrorString writes a pointer to a static string (or leaves NULL).
    unsafe { sys::cuGetErrorString(r, &mut s) };
    let msg = if s.is_null() {
        format!("{r:?}")
    } else {
        // SAFETY: a NUL-terminated static string from the driver.
        unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned()
    };
    Err(format!("{what}: {msg}"))
}

/// The CUDA ordinal of a ggml device of the CUDA backend (`CUDA<n>` in registry `CUDA`).
pub(super) fn cuda_ordinal(dev: Device) -> Option<i32> {
    // SAFETY: a device's registry lives as long as the device.
    let reg = unsafe { Reg::from_ptr(dev.reg()) }?;
    if reg.name_string() != "CUDA" {
        return None;
    }
    dev.name_string().strip_prefix("CUDA")?.parse().ok()
}

/// Makes `ctx` current for the scope, restoring the previous context afterwards.
pub(super) struct CurrentCtx {
    prev: sys::CUcontext,
}

impl CurrentCtx {
    pub(super) fn enter(ctx: sys::CUcontext) -> Result<CurrentCtx, String> {
        let mut prev = ptr::null_mut();
        check(
            // SAFETY: out-pointer to a local.
            unsafe { sys::cuCtxGetCurrent(&mut prev) },
            "cuCtxGetCurrent",
        )?;
        if prev != ctx {
            // SAFETY: `ctx` is a retained primary context.
            check(unsafe { sys::cuCtxSetCurrent(ctx) }, "cuCtxSetCurrent")?;
        }
        Ok(CurrentCtx { prev })
    }
    pub(super) fn switch(&self, ctx: sys::CUcontext) -> Result<(), String> {
        // SAFETY: as in `enter`.
        check(unsafe { sys::cuCtxSetCurrent(ctx) }, "cuCtxSetCurrent")
    }
}

impl Drop for CurrentCtx {
    fn drop(&mut self) {
        // With no context current before, ours (a primary context, the CUDA runtime's own)
        // stays current rather than leaving the thread without one.
        if !self.prev.is_null() {
            // SAFETY: restores the context that was current.
            unsafe { sys::cuCtxSetCurrent(self.prev) };
        }
    }
}

impl CudaAllReduce {
    /// Our AllReduce over `devices` (the meta device's simple devices, in order), or the reason
    /// it cannot run there: reading the other GPUs' partials directly where every pair has
    /// peer access, else exchanging them through host memory (`core::mapped::choose`; with
    /// `force_mapped`, always).
    pub fn new(devices: &[Device], force_mapped: bool) -> Result<CudaAllReduce, String> {
        let n = devices.len();
        if !(2..=MAX_DEVICES).contains(&n) {
            return Err(format!("{n} devices"));
        }
        let ordinals: Vec<i32> = devices
            .iter()
            .map(|&d| {
                cuda_ordinal(d).ok_or_else(|| format!("{} is not a CUDA device", d.name_string()))
            })
            .collect::<Result<_, _>>()?;
        // SAFETY: probes for the driver library without resolving any symbol.
        if !unsafe { sys::is_culib_present() } {
            return Err("the CUDA driver library is not loadable".into());
        }
        // SAFETY: cuInit may be called any number of times.
        check(unsafe { sys::cuInit(0) }, "cuInit")?;
        let one_shot_max = std::env::var("GGML_META_ONE_SHOT_MAX")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(ONE_SHOT_MAX);
        let mut this = CudaAllReduce {
            ready: Vec::with_capacity(n),
            ready_devices: devices.to_vec(),
            ctxs: Vec::new(),
            launchers: Vec::new(),
            gpu_of: Vec::with_capacity(n),
            one_shot_max,
            mapped: None,
            engines: None,
            params: Kernel::ALL.map(|k| ptx::params(n, k)),
            capture_left_open: AtomicBool::new(false),
        };
        // Through host memory, `GGML_META_MAPPED_APART=1` gives each device a launch of its
        // own, as if on a GPU of its own: how two GPUs exchange, measured and tested on one
        // (the launches on one GPU then share what it holds at once: `resident_blocks`).
        let apart = force_mapped && std::env::var("GGML_META_MAPPED_APART").is_ok_and(|v| v == "1");
        for &o in &ordinals {
            if !apart && this.ctxs.iter().any(|&(x, _, _)| x == o) {
                continue;
            }
            let mut dev = 0;
            // SAFETY: out-pointers to locals.
            check(unsafe { sys::cuDeviceGet(&mut dev, o) }, "cuDeviceGet")?;
            let mut ctx = ptr::null_mut();
            check(
                // SAFETY: out-pointer to a local; `dev` comes from cuDeviceGet.
                unsafe { sys::cuDevicePrimaryCtxRetain(&mut ctx, dev) },
                "cuDevicePrimaryCtxRetain",
            )?;
            this.ctxs.push((o, dev, ctx));
        }
        this.gpu_of = if apart {
            (0..n).collect()
        } else {
            ordinals
                .iter()
                .map(|&o| this.ctxs.iter().position(|&(x, _, _)| x == o).unwrap_or(0))
                .collect()
        };
        let gpus: Vec<(i32, sys::CUdevice)> = this.ctxs.iter().map(|&(o, d, _)| (o, d)).collect();
        let (kernel, why) = host_mapped::choose(&DriverTopology { gpus: &gpus }, force_mapped);
        match kernel {
            host_mapped::Kernel::Peer => this.enable_peer_access()?,
            host_mapped::Kernel::Mapped => {
                let gpus: Vec<_> = (this.ctxs.iter().enumerate())
                    .map(|(k, &(o, _, c))| {
                        let name = match apart {
                            true => format!("CUDA{o} [device {k}]"),
                            false => format!("CUDA{o}"),
                        };
                        (name, c)
                    })
                    .collect();
                this.mapped = Some(Mapped::new(n, &gpus, MAX_BLOCKS as usize)?);
                this.params = Kernel::ALL.map(|k| host_mapped::params(n, k));
            }
            host_mapped::Kernel::None => return Err(why),
        }
        for d in devices {
            // SAFETY: an event made by the device, freed in Drop with the same device.
            let e = unsafe { Event::from_ptr(d.event_new()) }
                .ok_or_else(|| format!("{} has no events", d.name_string()))?;
            this.ready.push(e);
        }
        let (code, name): (String, fn(usize, Kernel) -> String) = match this.mapped {
            None => (ptx::ptx(n), ptx::kernel_name),
            Some(_) => (host_mapped::ptx(n), host_mapped::kernel_name),
        };
        let code = CString::new(code).map_err(|e| e.to_string())?;
        let names = Kernel::ALL
            .iter()
            .map(|&k| CString::new(name(n, k)).map_err(|e| e.to_string()))
            .collect::<Result<Vec<_>, _>>()?;
        for (i, &(o, dev, ctx)) in this.ctxs.iter().enumerate() {
            let _cur = CurrentCtx::enter(ctx)?;
            let mut sms = 0;
            check(
                // SAFETY: out-pointer to a local; the device comes from cuDeviceGet.
                unsafe {
                    sys::cuDeviceGetAttribute(
                        &mut sms,
                        sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
                        dev,
                    )
                },
                "cuDeviceGetAttribute",
            )?;
            let together = this.ctxs.iter().filter(|&&(x, _, _)| x == o).count();
            // (apart: a launcher per device, in order)
            let device = match apart {
                true => i,
                false => ordinals.iter().position(|&x| x == o).unwrap_or(i),
            };
            let mut module = ptr::null_mut();
            check(
                // SAFETY: a NUL-terminated PTX image; the driver compiles it for this GPU.
                unsafe { sys::cuModuleLoadData(&mut module, code.as_ptr() as *const c_void) },
                "cuModuleLoadData",
            )?;
            let mut launcher = Launcher {
                ctx,
                stream: ptr::null_mut(),
                module,
                kernels: [ptr::null_mut(); 3],
                done: Box::new(ggml_backend_event {
                    device: devices[device].as_ptr(),
                    context: ptr::null_mut(),
                }),
                together: together as u32,
                sms: sms.max(1) as u32,
            };
            // SAFETY: out-pointers to fields of `launcher`, which Drop releases when set.
            let r = unsafe {
                launcher
                    .kernels
                    .iter_mut()
                    .zip(&names)
                    .try_for_each(|(k, name)| {
                        check(
                            sys::cuModuleGetFunction(k, module, name.as_ptr()),
                            "cuModuleGetFunction",
                        )
                    })
                    .and_then(|_| {
                        check(
                            sys::cuStreamCreate(
                                &mut launcher.stream,
                                sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32,
                            ),
                            "cuStreamCreate",
                        )
                    })
                    .and_then(|_| {
                        let mut ev = ptr::null_mut();
                        let r = check(
                            sys::cuEventCreate(
                                &mut ev,
                                sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32,
                            ),
                            "cuEventCreate",
                        );
                        launcher.done.context = ev as *mut c_void;
                        r
                    })
            };
            this.launchers.push(launcher);
            r?;
        }
        let setting = std::env::var("GGML_META_ENGINES_MIN").ok();
        let engines_min = engines::threshold(setting.as_deref(), ENGINES_MIN);
        let engines = match engines_min {
            Some(min) if this.mapped.is_some() && this.launchers.len() > 1 => {
                let ctxs: Vec<_> = this.launchers.iter().map(|l| l.ctx).collect();
                // (where it cannot be set up, the mapped kernel takes every cut rather than
                // the whole AllReduce being given up)
                match Engines::new(n, &ctxs, min) {
                    Ok(e) => {
                        this.engines = Some(e);
                        format!(", by the copy engines from {min} bytes a partial")
                    }
                    Err(e) => {
                        log_error!("meta backend: no copy-engine exchange ({e}): the kernel takes every cut");
                        String::new()
                    }
                }
            }
            _ => String::new(),
        };
        let how = match this.mapped {
            None => "reading each other's memory",
            Some(_) => "through host memory",
        };
        log_info!(
            "meta backend: own CUDA AllReduce over {} {how}{engines}: {why} ({} launch(es) per AllReduce)",
            devices
                .iter()
                .map(|d| d.name_string())
                .collect::<Vec<_>>()
                .join(","),
            this.launchers.len()
        );
        Ok(this)
    }

    /// Peer access between every pair of distinct GPUs (the CUDA backend enables it too).
    fn enable_peer_access(&self) -> Result<(), String> {
        for &(a, _, ctx_a) in &self.ctxs {
            let _cur = CurrentCtx::enter(ctx_a)?;
            for &(b, _, ctx_b) in &self.ctxs {
                if a == b {
                    continue;
                }
                // SAFETY: both contexts are retained; enabling twice reports ALREADY_ENABLED.
                let r = unsafe { sys::cuCtxEnablePeerAccess(ctx_b, 0) };
                if r != sys::CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED {
                    check(r, "cuCtxEnablePeerAccess")?;
                }
            }
        }
        Ok(())
    }

    /// Whether the GPUs read each other's partials directly (peer access, or one GPU), as the
    /// direct path needs; not where they exchange them through host memory.
    pub fn reads_peers(&self) -> bool {
        self.mapped.is_none()
    }

    /// How many distinct GPUs the devices are on (one launcher each).
    pub fn gpus(&self) -> usize {
        self.launchers.len()
    }

    /// Whether [`run`](Self::run) handles tensors like `t` (contiguous f32).
    pub fn supports(t: Tensor) -> bool {
        t.type_() == GGML_TYPE_F32 && t.is_contiguous()
    }

    /// Enqueues the AllReduce of `targets` (one per backend, same layout, supported type)
    /// after the work queued on `backends`, and makes their later work wait for it. With an
    /// epilogue the kernel also computes the nodes behind the cut (see [`Epilogue`]).
    /// A CUDA call that fails is logged and the step fails with `GGML_STATUS_FAILED` (what a
    /// backend's failed compute gives; libllama's decode returns -3).
    pub fn run(
        &self,
        backends: &[Backend],
        targets: &[Tensor],
        epilogue: Option<&Epilogue>,
    ) -> ggml_status {
        match self.enqueue(backends, targets, epilogue) {
            Ok(()) => GGML_STATUS_SUCCESS,
            Err(e) => {
                log_error!("meta backend: CUDA AllReduce failed: {e}");
                GGML_STATUS_FAILED
            }
        }
    }

    fn enqueue(
        &self,
        backends: &[Backend],
        targets: &[Tensor],
        epi: Option<&Epilogue>,
    ) -> Result<(), String> {
        if let Some(injected) = super::fault::fires("allreduce") {
            return Err(injected);
        }
        let shape = Shape::of(targets, epi);
        let Shape {
            k_index,
            ncols,
            units,
            ..
        } = shape;
        if let Some(e) = &self.engines {
            let gpus = self.launchers.len();
            let how = engines::transport(gpus, units, ncols * 4, e.min, SLOT_BYTES as u64);
            if let engines::Transport::Engines { rows } = how {
                return self.enqueue_engines(e, backends, targets, epi, shape, rows);
            }
        }
        // each launch, and the bytes its tensors' addresses move by (a chunk's first unit)
        let launches: Vec<(Launch, u64)> = match &self.mapped {
            None => {
                let shot = if self.launchers.len() > 1 && one_shot_safe(targets, epi) {
                    Shot::for_size(targets[0].nbytes(), self.one_shot_max)
                } else {
                    Shot::Two
                };
                launch::launches(&self.gpu_of, units, shot)
                    .into_iter()
                    .map(|l| (l, 0))
                    .collect()
            }
            Some(m) => {
                let chunk = (m.layout.capacity as u64 / ncols).max(1);
                if chunk * ncols > m.layout.capacity as u64 {
                    return Err(format!("rows of {ncols} values exceed a slot"));
                }
                chunks(&self.gpu_of, units, chunk)
                    .map(|(l, first)| (l, first * ncols * 4))
                    .collect()
            }
        };
        // (an injected fault: the last GPU's launches left out, outside a capture only, where
        // they would stay left out of every replay)
        let last = self.launchers.len() - 1;
        let lost = self.mapped.is_some()
            && last > 0
            && capture_status(self.launchers[last].stream)
                == sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE
            && super::fault::fires("mapped_lost").is_some();
        // (blocks per launch, threads per block): one grid for every launch of a chunk, as the
        // exchange needs (block b of every GPU takes the same units)
        let threads = shape.threads();
        let most = match &self.mapped {
            None => MAX_BLOCKS,
            Some(_) => self.resident_blocks(k_index, threads)?,
        };
        self.record_ready(backends);
        let cur = CurrentCtx::enter(self.launchers[0].ctx)?;
        let mut started = vec![false; self.launchers.len()];
        let source = match self.mapped {
            None => Source::Peers,
            Some(_) => Source::Own,
        };
        let queued = self.queue_launches(&cur, &launches, &mut started, lost, |run, shift| {
            let args = self.args(
                &self.params,
                k_index,
                targets,
                epi,
                run,
                shift,
                ncols,
                source,
            );
            (args, shape.grid(run.end - run.begin, most), threads)
        });
        // whatever failed, the launches queued so far are waited for: a kernel left running
        // would exchange with the next step's
        let recorded = self.record_done(&cur, &started);
        drop(cur);
        match &self.mapped {
            None => self.release(backends, self.launchers.len()),
            // a device's results come from its own GPU's launch only
            Some(_) => self.release_own(backends),
        }
        queued.and(recorded)
    }

    /// Records the `done` event of every launcher marked in `started` on its stream.
    fn record_done(&self, cur: &CurrentCtx, started: &[bool]) -> Result<(), String> {
        self.launchers
            .iter()
            .zip(started)
            .filter(|(_, &s)| s)
            .try_for_each(|(l, _)| {
                cur.switch(l.ctx)?;
                record(l.done_event(), l.stream)
            })
    }

    /// An AllReduce through host memory by the copy engines ([`Engines`]): the ops of
    /// `core::engines::schedule` over the launchers' GPUs, issued in its order, chunk `c` being
    /// rows `rows_per_chunk * c ..` of the partials; each op's `unsafe` is its driver call
    /// alone, the order and the events are the schedule's. Every backend then waits for every
    /// GPU, so the next AllReduce overwrites no host slot still being read.
    fn enqueue_engines(
        &self,
        e: &Engines,
        backends: &[Backend],
        targets: &[Tensor],
        epi: Option<&Epilogue>,
        shape: Shape,
        rows_per_chunk: u64,
    ) -> Result<(), String> {
        let row = shape.ncols * 4;
        let chunks: Vec<(u64, u64)> = engines::chunks(shape.units, rows_per_chunk).collect();
        let bytes_of = |c: usize| (chunks[c].0 * row, (chunks[c].1 * row) as usize);
        let members =
            |g: usize, own: bool| (0..targets.len()).filter(move |&k| (self.gpu_of[k] == g) == own);
        self.record_ready(backends);
        let cur = CurrentCtx::enter(self.launchers[0].ctx)?;
        let mut started = vec![false; self.launchers.len()];
        let mut queue = || -> Result<(), String> {
            let mut current = 0;
            for q in engines::schedule(self.launchers.len(), chunks.len()) {
                let (g, side) = (q.gpu, &e.sides[q.gpu]);
                if g != current {
                    cur.switch(self.launchers[g].ctx)?;
                    current = g;
                }
                started[g] = true;
                let stream = match q.stream {
                    engines::Stream::Out => side.out_stream,
                    engines::Stream::Sum => self.launchers[g].stream,
                };
                match q.op {
                    engines::Op::WaitReady => self.wait_ready(stream, Some(g))?,
                    engines::Op::WaitOut { gpu, set } => {
                        wait_for(stream, e.sides[gpu].copied_out[set])?
                    }
                    engines::Op::WaitIn { gpu, set } => {
                        wait_for(stream, e.sides[gpu].copied_in[set])?
                    }
                    engines::Op::RecordOut { set } => record(side.copied_out[set], stream)?,
                    engines::Op::RecordIn { set } => record(side.copied_in[set], stream)?,
                    engines::Op::CopyOut { chunk, set } => {
                        let (shift, bytes) = bytes_of(chunk);
                        for k in members(g, true) {
                            check(
                                // SAFETY: `bytes` of member k's partial from its chunk's start
                                // (whole rows within the tensor) into its host slot of `set`
                                // (SLOT_BYTES, at least `bytes`), on our stream.
                                unsafe {
                                    sys::cuMemcpyDtoHAsync_v2(
                                        e.host_slot(set, k),
                                        targets[k].data() as u64 + shift,
                                        bytes,
                                        stream,
                                    )
                                },
                                "cuMemcpyDtoHAsync",
                            )?;
                        }
                    }
                    engines::Op::CopyIn { chunk, set } => {
                        let (_, bytes) = bytes_of(chunk);
                        for k in members(g, false) {
                            check(
                                // SAFETY: `bytes` from member k's host slot of `set` into its
                                // slot of this GPU's scratch (both SLOT_BYTES), on our stream.
                                unsafe {
                                    sys::cuMemcpyHtoDAsync_v2(
                                        e.scratch_slot(g, k),
                                        e.host_slot(set, k),
                                        bytes,
                                        stream,
                                    )
                                },
                                "cuMemcpyHtoDAsync",
                            )?;
                        }
                    }
                    engines::Op::Sum { chunk } => {
                        let (shift, _) = bytes_of(chunk);
                        let source = Source::Scratch(e.scratch_slot(g, 0), SLOT_BYTES as u64);
                        let runs = launch::launches(&self.gpu_of, chunks[chunk].1, Shot::One);
                        for run in runs.iter().filter(|r| r.gpu == g && r.end > r.begin) {
                            let mut args = self.args(
                                &e.params,
                                shape.k_index,
                                targets,
                                epi,
                                run,
                                shift,
                                shape.ncols,
                                source,
                            );
                            let blocks = shape.grid(run.end - run.begin, MAX_BLOCKS);
                            // (the peer kernel: every partial is in this GPU's memory, its
                            // members' own and the others' in its scratch; the outputs are its
                            // members')
                            let kernel = side.kernels[shape.k_index];
                            launch_kernel(kernel, blocks, shape.threads(), stream, &mut args)?;
                        }
                    }
                }
            }
            Ok(())
        };
        let queued = queue();
        // (whatever failed: every GPU's `done` covers its out stream too)
        let joined = self
            .launchers
            .iter()
            .zip(&e.sides)
            .zip(&started)
            .filter(|(_, &s)| s)
            .try_for_each(|((l, side), _)| {
                cur.switch(l.ctx)?;
                record(side.out_ended, side.out_stream)?;
                wait_for(l.stream, side.out_ended)
            });
        let recorded = self.record_done(&cur, &started);
        drop(cur);
        self.release(backends, self.launchers.len());
        queued.and(joined).and(recorded)
    }

    /// The arguments of launch `run` of kernel `k_index` (parameters `params`, an AllReduce of
    /// `targets` with epilogue `epi`), its tensors' addresses moved by `shift` bytes (its
    /// chunk's start), the partials found as `source` says.
    #[allow(clippy::too_many_arguments)]
    fn args(
        &self,
        params: &[Vec<Param>; 3],
        k_index: usize,
        targets: &[Tensor],
        epi: Option<&Epilogue>,
        run: &Launch,
        shift: u64,
        ncols: u64,
        source: Source,
    ) -> Args {
        let norm = epi.and_then(|e| e.norm.as_ref());
        let data = |t: &Tensor| t.data() as u64;
        // output slot `s` of this launch is device `run.writes[s]` (a local one first: the
        // kernel reads its own results back from slot 0); inputs come from the first written
        // device's copies
        let at = |t: &Tensor| data(t) + shift;
        let out = |ts: &[Tensor], s: usize| run.writes.get(s).map_or(0, |&k| at(&ts[k]));
        let home = run.writes[0];
        let own = |k: usize| self.gpu_of[k] == run.gpu;
        let mapped = self.mapped.as_ref();
        let exchange = |f: fn(&Mapped, usize) -> u64| mapped.map_or(0, |m| f(m, run.gpu));
        let partial = |k: usize| match source {
            _ if own(k) => at(&targets[k]),
            Source::Peers => at(&targets[k]),
            // (the mapped kernel is given only its own GPU's partials)
            Source::Own => 0,
            Source::Scratch(base, slot) => base + k as u64 * slot,
        };
        let params = &params[k_index];
        let mut args = Args {
            kernel: k_index,
            vals: [0; MAX_PARAMS],
            eps: norm.map_or(0.0, |m| m.eps),
            eps_at: params.iter().position(|&p| p == Param::Eps),
            len: params.len(),
        };
        for (v, p) in args.vals.iter_mut().zip(params) {
            *v = match *p {
                Param::Partial(k) => partial(k),
                Param::SumOut(s) if epi.is_none_or(|e| e.keeps_sum) => out(targets, s),
                Param::SumOut(_) => 0,
                Param::Residual => epi.map_or(0, |e| at(&e.residual[home])),
                Param::AddOut(s) => epi.map_or(0, |e| out(&e.add_out, s)),
                Param::Weight => norm.map_or(0, |m| data(&m.weight[home])),
                Param::NormOut(s) => norm.map_or(0, |m| out(&m.out, s)),
                // (passed as `eps`, see `pointers`)
                Param::Eps => 0,
                Param::Ncols => ncols,
                Param::First => run.begin,
                Param::Limit => run.end,
                Param::Slots => exchange(|m, g| m.views[g].region),
                Param::SlotBytes => exchange(|m, _| m.layout.slot_bytes() as u64),
                Param::Flags => exchange(|m, g| m.views[g].region + m.layout.flag(0, 0) as u64),
                Param::FlagBytes => exchange(|m, _| m.layout.flag_bytes() as u64),
                Param::Errors => exchange(|m, g| m.views[g].region + m.layout.error(0) as u64),
                Param::Counters => exchange(|m, g| m.views[g].counters),
                Param::Gpu => run.gpu as u64,
                Param::Gpus => self.launchers.len() as u64,
                Param::Timeout => exchange(|m, _| m.timeout_ns),
            };
        }
        args
    }

    /// The most blocks a launch through host memory may have: what every GPU holds at once of
    /// this kernel, shared by the launches on it that wait for each other, so that every block
    /// of every launch runs at the same time and no wait depends on the order in which a GPU
    /// starts blocks.
    fn resident_blocks(&self, k_index: usize, threads: u32) -> Result<u32, String> {
        let mut most = MAX_BLOCKS;
        for l in &self.launchers {
            let mut per_sm = 0;
            check(
                // SAFETY: out-pointer to a local; a kernel of our module (the occupancy of a
                // function needs no current context).
                unsafe {
                    sys::cuOccupancyMaxActiveBlocksPerMultiprocessor(
                        &mut per_sm,
                        l.kernels[k_index],
                        threads as i32,
                        0,
                    )
                },
                "cuOccupancyMaxActiveBlocksPerMultiprocessor",
            )?;
            most = most.min((l.sms * per_sm.max(0) as u32 / l.together).max(1));
        }
        Ok(most)
    }

    /// Queues `launches` in order, each after its GPU's ready events (all of them, or through
    /// host memory its own devices'), marking in `started` the launchers used; `lost` leaves the
    /// last GPU's out (an injected fault). `make` gives a launch's arguments, blocks and threads.
    fn queue_launches(
        &self,
        cur: &CurrentCtx,
        launches: &[(Launch, u64)],
        started: &mut [bool],
        lost: bool,
        make: impl Fn(&Launch, u64) -> (Args, u32, u32),
    ) -> Result<(), String> {
        let last = self.launchers.len() - 1;
        let mut current = 0;
        for (run, shift) in launches {
            let l = &self.launchers[run.gpu];
            if run.gpu != current {
                cur.switch(l.ctx)?;
                current = run.gpu;
            }
            if !std::mem::replace(&mut started[run.gpu], true) {
                self.wait_ready(l.stream, self.mapped.as_ref().map(|_| run.gpu))?;
            }
            if run.end == run.begin || (lost && run.gpu == last) {
                continue;
            }
            let (mut args, blocks, threads) = make(run, *shift);
            launch_kernel(l.kernels[args.kernel], blocks, threads, l.stream, &mut args)?;
        }
        Ok(())
    }

    /// After a step has been queued (`failed`: not all of it): through host memory, waits for
    /// it to end and fails it, naming the GPU, where one of its GPUs gave up waiting for another;
    /// after a failure of either kind, makes the exchange whole again for the next step. The
    /// kernels can tell it only when they have run, and ggml's `synchronize` returns nothing,
    /// so the step's compute waits here. Peer access has nothing to wait for.
    pub fn end_step(&self, backends: &[Backend], failed: bool) -> Result<(), String> {
        let Some(m) = &self.mapped else {
            return Ok(());
        };
        for b in backends {
            b.synchronize();
        }
        let lost = m.lost();
        if failed || lost.is_some() {
            self.synchronize_streams();
            m.clear()?;
        }
        lost.map_or(Ok(()), Err)
    }

    /// Waits for everything queued on our streams (the copy engines' out streams too).
    fn synchronize_streams(&self) {
        if let Some(cur) = self
            .launchers
            .first()
            .and_then(|l| CurrentCtx::enter(l.ctx).ok())
        {
            for (g, l) in self.launchers.iter().enumerate() {
                if cur.switch(l.ctx).is_err() {
                    continue;
                }
                let side = self.engines.as_ref().and_then(|e| e.sides.get(g));
                let out = side.map(|s| s.out_stream);
                for stream in std::iter::once(l.stream).chain(out) {
                    // SAFETY: our stream, in its context.
                    unsafe { sys::cuStreamSynchronize(stream) };
                }
            }
        }
    }
}

/// What an AllReduce computes: its kernel, and the units (elements, or rows of `ncols` with
/// the norm) it sums.
#[derive(Clone, Copy)]
struct Shape {
    kind: Kernel,
    /// The kernel's index in `Kernel::ALL`.
    k_index: usize,
    ncols: u64,
    units: u64,
}

impl Shape {
    fn of(targets: &[Tensor], epi: Option<&Epilogue>) -> Shape {
        let norm = epi.and_then(|e| e.norm.as_ref());
        let kind = match (epi, norm) {
            (None, _) => Kernel::Sum,
            (Some(_), None) => Kernel::Add,
            (Some(_), Some(_)) => Kernel::AddRmsNormMul,
        };
        let ncols = norm.map_or(1, |m| m.weight[0].nelements() as u64).max(1);
        Shape {
            kind,
            k_index: Kernel::ALL.iter().position(|&k| k == kind).unwrap_or(0),
            ncols,
            units: targets[0].nelements() as u64 / ncols,
        }
    }

    /// Threads per block: with the norm a block per row, a multiple of 32 threads (whole
    /// warps) up to 1024; else [`BLOCK`].
    fn threads(&self) -> u32 {
        match self.kind {
            Kernel::AddRmsNormMul => self.ncols.next_multiple_of(32).clamp(32, 1024) as u32,
            _ => BLOCK,
        }
    }

    /// Blocks of a launch over `span` units, at most `most`.
    fn grid(&self, span: u64, most: u32) -> u32 {
        match self.kind {
            Kernel::AddRmsNormMul => span.min(most as u64) as u32,
            _ => span.div_ceil(BLOCK as u64).clamp(1, most as u64) as u32,
        }
    }
}

/// Where a launch finds the partials of the members on other GPUs.
#[derive(Clone, Copy)]
enum Source {
    /// In their own memory (peer access).
    Peers,
    /// Nowhere: the mapped kernel exchanges them itself through host memory.
    Own,
    /// In this GPU's scratch: its address and the bytes of a member's slot.
    Scratch(u64, u64),
}

/// The launches of an AllReduce through host memory: `units` in chunks of up to `chunk`
/// (what a slot holds), each chunk one launch per GPU over all of it (one-shot: a GPU sums
/// every unit for its own devices), chunks in order. Each comes with its chunk's first unit,
/// where the launch's tensors start; the launch itself counts from 0 (the slots' first unit).
fn chunks(gpu_of: &[usize], units: u64, chunk: u64) -> impl Iterator<Item = (Launch, u64)> + '_ {
    let starts = (0..units.max(1)).step_by(chunk as usize);
    starts.flat_map(move |first| {
        let n = chunk.min(units - first);
        launch::launches(gpu_of, n, Shot::One)
            .into_iter()
            .map(move |l| (l, first))
    })
}

/// A tensor-parallel step captured as one CUDA graph: every device's sub-graphs, our AllReduce
/// kernels and the dependencies between them (see [`CudaAllReduce::begin_capture`]). Dropping
/// it frees the graph; a launch still in flight completes first (the driver frees an executable
/// graph's resources when its launches are done).
pub struct StepGraph {
    ctx: sys::CUcontext,
    graph: sys::CUgraph,
    exec: sys::CUgraphExec,
}

// SAFETY: driver handles, usable from any thread; the meta backend uses a plan's step graph
// under its state lock.
unsafe impl Send for StepGraph {}

impl StepGraph {
    /// A captured graph of context `ctx`, not instantiated yet.
    fn new(ctx: sys::CUcontext, graph: sys::CUgraph) -> StepGraph {
        StepGraph {
            ctx,
            graph,
            exec: ptr::null_mut(),
        }
    }
}

impl Drop for StepGraph {
    fn drop(&mut self) {
        // (a graph object needs no current context; an executable graph is freed in its own)
        let _cur = (!self.ctx.is_null()).then(|| CurrentCtx::enter(self.ctx));
        // SAFETY: objects made by a capture of ours, not used after this; errors at teardown
        // are ignored.
        unsafe {
            if !self.exec.is_null() {
                sys::cuGraphExecDestroy(self.exec);
            }
            sys::cuGraphDestroy(self.graph);
        }
    }
}

impl CudaAllReduce {
    /// Starts capturing a step into a CUDA graph: our first stream begins a capture (relaxed:
    /// the CUDA backend may allocate from its pools meanwhile), and the backends' streams and
    /// our other streams join it by waiting for an event recorded in it. Until
    /// [`end_capture`](Self::end_capture), work queued on the backends and AllReduces run with
    /// [`run`](Self::run) are recorded, not executed, and their event waits become the graph's
    /// edges. The caller must not queue anything that waits on the host or synchronizes a
    /// stream, nor let the CUDA backend capture a graph of its own (`meta/step.rs`).
    pub fn begin_capture(&self, backends: &[Backend]) -> Result<(), String> {
        let l0 = &self.launchers[0];
        let cur = CurrentCtx::enter(l0.ctx)?;
        check(
            // SAFETY: our stream, in its context, not capturing (captures are begun and ended
            // in pairs under the meta backend's state lock).
            unsafe {
                sys::cuStreamBeginCapture_v2(
                    l0.stream,
                    sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED,
                )
            },
            "cuStreamBeginCapture",
        )?;
        let fork = || -> Result<(), String> {
            let start = l0.done_event();
            record(start, l0.stream)?;
            for l in &self.launchers[1..] {
                cur.switch(l.ctx)?;
                // (waiting for an event recorded in the capture joins it)
                wait_for(l.stream, start)?;
            }
            self.release(backends, 1);
            Ok(())
        };
        fork().inspect_err(|_| {
            let _ = cur.switch(l0.ctx);
            if let Ok(g) = end(l0.stream) {
                drop(StepGraph::new(l0.ctx, g));
            }
        })
    }

    /// Ends the capture begun by [`begin_capture`](Self::begin_capture): the backends' streams
    /// and ours join our first stream again, and the recorded step becomes an executable
    /// graph. Nothing of it has run; [`launch`](Self::launch) runs it. The capture ends whatever
    /// failed before; a capture the driver invalidated (a call inside it failed) is ended
    /// without asking the backends to join (their event calls would fail there), and nothing
    /// of it is kept.
    pub fn end_capture(&self, backends: &[Backend]) -> Result<StepGraph, String> {
        let l0 = &self.launchers[0];
        let cur = CurrentCtx::enter(l0.ctx);
        let joined = match (&cur, capture_status(l0.stream)) {
            (Err(e), _) => Err(e.clone()),
            (Ok(c), sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE) => {
                self.join(c, backends)
            }
            (Ok(_), status) => Err(format!("the capture is {status:?}")),
        };
        if let Ok(c) = &cur {
            let _ = c.switch(l0.ctx);
        }
        let ended = end(l0.stream);
        let step = ended.map(|g| StepGraph::new(l0.ctx, g));
        let mut step = joined.and(step)?;
        if let Some(injected) = super::fault::fires("capture_end") {
            // (the graph goes with `step`; the capture did end)
            self.capture_left_open.store(true, Ordering::Release);
            return Err(injected);
        }
        check(
            // SAFETY: a complete graph made by the capture; the executable is ours (Drop).
            unsafe { sys::cuGraphInstantiateWithFlags(&mut step.exec, step.graph, 0) },
            "cuGraphInstantiate",
        )?;
        Ok(step)
    }

    /// Makes every stream in the capture join our first one: the backends' (their `ready`
    /// events) and our other launchers' (their `done` events).
    fn join(&self, cur: &CurrentCtx, backends: &[Backend]) -> Result<(), String> {
        let l0 = &self.launchers[0];
        self.record_ready(backends);
        for l in &self.launchers[1..] {
            cur.switch(l.ctx)?;
            record(l.done_event(), l.stream)?;
        }
        cur.switch(l0.ctx)?;
        self.wait_ready(l0.stream, None)?;
        self.launchers[1..]
            .iter()
            .try_for_each(|l| wait_for(l0.stream, l.done_event()))
    }

    /// Whether our first stream is outside any capture (a failed [`end_capture`] may leave it
    /// in one only if the driver refused to end it).
    pub fn not_capturing(&self) -> bool {
        if self.capture_left_open.swap(false, Ordering::AcqRel) {
            return false;
        }
        matches!(
            capture_status(self.launchers[0].stream),
            sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE
        )
    }

    /// Runs a captured step after the work queued on `backends`, which then wait for it: one
    /// event hop in and one out for the whole step.
    pub fn launch(&self, step: &StepGraph, backends: &[Backend]) -> Result<(), String> {
        let l0 = &self.launchers[0];
        self.record_ready(backends);
        let _cur = CurrentCtx::enter(l0.ctx)?;
        self.wait_ready(l0.stream, None)?;
        check(
            // SAFETY: an executable graph of this context; our stream.
            unsafe { sys::cuGraphLaunch(step.exec, l0.stream) },
            "cuGraphLaunch",
        )?;
        record(l0.done_event(), l0.stream)?;
        self.release(backends, 1);
        Ok(())
    }

    /// Records every backend's `ready` event after its queued work.
    fn record_ready(&self, backends: &[Backend]) {
        for (b, &e) in backends.iter().zip(&self.ready) {
            b.event_record(e);
        }
    }

    /// Makes our `stream` (of the current context) wait for every `ready` event, or, with
    /// `gpu` (a launcher), for those of the devices on that launcher's physical GPU: its
    /// launch may wait for other GPUs' flags, and while it waits its blocks hold the GPU, so
    /// every device's work on the same GPU (another launcher's, `GGML_META_MAPPED_APART`) must
    /// be done before it starts.
    fn wait_ready(&self, stream: sys::CUstream, gpu: Option<usize>) -> Result<(), String> {
        let ordinal = |launcher: usize| self.ctxs[launcher].0;
        let mine = |k: &usize| gpu.is_none_or(|g| ordinal(self.gpu_of[*k]) == ordinal(g));
        // (`context` of a CUDA backend's event is its CUevent: module doc)
        (0..self.ready.len())
            .filter(mine)
            .try_for_each(|k| wait_for(stream, self.ready[k].context() as sys::CUevent))
    }

    /// The `done` event of launcher `l` as a ggml event.
    fn done(&self, l: usize) -> Event {
        // SAFETY: a ggml event struct we own, alive as long as `self`.
        unsafe { Event::from_ptr(&*self.launchers[l].done as *const _ as *mut _) }
            .expect("non-null")
    }

    /// Makes the backends' later work wait for the `done` events of the first `launchers`.
    fn release(&self, backends: &[Backend], launchers: usize) {
        for b in backends {
            for l in 0..launchers {
                b.event_wait(self.done(l));
            }
        }
    }

    /// Makes each backend's later work wait for the `done` event of its own GPU's launcher.
    fn release_own(&self, backends: &[Backend]) {
        for (b, &g) in backends.iter().zip(&self.gpu_of) {
            b.event_wait(self.done(g));
        }
    }
}

/// Records `event` on `stream`, both of the current context.
fn record(event: sys::CUevent, stream: sys::CUstream) -> Result<(), String> {
    check(
        // SAFETY: every caller passes a live event and stream of ours (created with this
        // backend, destroyed only in Drop), of the current context.
        unsafe { sys::cuEventRecord(event, stream) },
        "cuEventRecord",
    )
}

/// Makes `stream` (of the current context) wait for the last record of `event` issued so far
/// (an event of any of our GPUs: allowed across contexts).
fn wait_for(stream: sys::CUstream, event: sys::CUevent) -> Result<(), String> {
    check(
        // SAFETY: every caller passes a live stream of ours, of the current context, and a
        // live event: ours, or a CUDA backend's ready event (alive with this backend).
        unsafe { sys::cuStreamWaitEvent(stream, event, 0) },
        "cuStreamWaitEvent",
    )
}

/// Launches `kernel` of our modules on `stream` (of the current context), `blocks` blocks of
/// `threads` threads, with `args` (made by `args` for this kernel's parameters).
fn launch_kernel(
    kernel: sys::CUfunction,
    blocks: u32,
    threads: u32,
    stream: sys::CUstream,
    args: &mut Args,
) -> Result<(), String> {
    let mut ptrs = args.pointers();
    check(
        // SAFETY: `ptrs` holds one pointer per kernel parameter, in the order of the kernel's
        // `params` (u64 values, the f32 eps), into `args`, alive for the call; the addresses
        // in it are f32 data of the targets' size (rows of `ncols` for the weight) that the
        // kernel may read where it runs: on peer-accessible devices, in this GPU's memory (the
        // copy engines' scratch), or, through host memory, the region and counters of `mapped`
        // (up to MAX_BLOCKS blocks: one flag each).
        unsafe {
            sys::cuLaunchKernel(
                kernel,
                blocks,
                1,
                1,
                threads,
                1,
                1,
                0,
                stream,
                ptrs.as_mut_ptr(),
                ptr::null_mut(),
            )
        },
        "cuLaunchKernel",
    )
}

/// Where `stream` stands in a capture (INVALIDATED also when the driver cannot say).
fn capture_status(stream: sys::CUstream) -> sys::CUstreamCaptureStatus {
    let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_INVALIDATED;
    // SAFETY: our stream; out-pointer to a local.
    let r = unsafe { sys::cuStreamIsCapturing(stream, &mut status) };
    if r == sys::CUresult::CUDA_SUCCESS {
        status
    } else {
        sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_INVALIDATED
    }
}

/// Ends the capture on `stream` (its origin), giving the graph it made.
fn end(stream: sys::CUstream) -> Result<sys::CUgraph, String> {
    let mut graph = ptr::null_mut();
    // SAFETY: a capturing stream of ours; the graph, when made, is the caller's to destroy.
    let r = check(
        unsafe { sys::cuStreamEndCapture(stream, &mut graph) },
        "cuStreamEndCapture",
    );
    match r {
        Ok(()) if !graph.is_null() => Ok(graph),
        Ok(()) => Err("cuStreamEndCapture gave no graph".into()),
        Err(e) => {
            if !graph.is_null() {
                drop(StepGraph::new(ptr::null_mut(), graph));
            }
            Err(e)
        }
    }
}

/// Whether every GPU may sum everything (one-shot): only where no result is written over a
/// partial sum, which the other GPUs read until they are done. An in-place AllReduce, or an
/// epilogue whose outputs the allocator placed over the partials, runs two-shot: each element
/// is then read and written by one launch only.
fn one_shot_safe(targets: &[Tensor], epi: Option<&Epilogue>) -> bool {
    let Some(e) = epi.filter(|e| !e.keeps_sum) else {
        return false;
    };
    let span = |t: &Tensor| {
        let a = t.data() as usize;
        a..a + t.nbytes()
    };
    let apart = |a: &Tensor, b: &Tensor| {
        let (x, y) = (span(a), span(b));
        x.end <= y.start || y.end <= x.start
    };
    targets.iter().enumerate().all(|(k, p)| {
        apart(&e.add_out[k], p) && e.norm.as_ref().is_none_or(|m| apart(&m.out[k], p))
    })
}

impl Drop for CudaAllReduce {
    fn drop(&mut self) {
        // Our streams first (queued kernels may still wait for the ready events), then the
        // events and modules; the caller's current context is restored at the end.
        if let Some(cur) = self
            .launchers
            .first()
            .and_then(|l| CurrentCtx::enter(l.ctx).ok())
        {
            for l in self.launchers.drain(..) {
                // SAFETY: objects created in `new` in this context; errors at teardown are
                // ignored.
                unsafe {
                    if cur.switch(l.ctx).is_ok() {
                        if !l.stream.is_null() {
                            sys::cuStreamSynchronize(l.stream);
                            sys::cuStreamDestroy_v2(l.stream);
                        }
                        if !l.done.context.is_null() {
                            sys::cuEventDestroy_v2(l.done_event());
                        }
                        sys::cuModuleUnload(l.module);
                    }
                }
            }
        }
        for (d, e) in self.ready_devices.iter().zip(self.ready.drain(..)) {
            d.event_free(e);
        }
        // (its kernels have ended with our streams; the copy engines' out streams are
        // synchronized when they are dropped)
        self.mapped = None;
        self.engines = None;
        for &(_, dev, _) in &self.ctxs {
            // SAFETY: releases the retain of `new`.
            unsafe { sys::cuDevicePrimaryCtxRelease_v2(dev) };
        }
    }
}
