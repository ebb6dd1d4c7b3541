//! The memory of our CUDA AllReduce through host memory (`core::mapped`), for GPUs that cannot
//! read each other's memory: the pinned region every GPU maps (slots, flags, error words, laid
//! out by [`Layout`]) and each GPU's epoch counters; after a step, the error words read and,
//! where a GPU gave up waiting, everything cleared for the next step.
//!
//! `cuda` launches the kernels over it (one per GPU and cut, for all the members the GPU holds)
//! and decides, with [`DriverTopology`] and `core::mapped::choose`, whether a meta device gets
//! it: where some pair of its GPUs has no peer access, or where `GGML_META_ALLREDUCE=mapped`
//! forces it (the measurement of `CUDA0,CUDA0`).

use std::ffi::c_void;
use std::ptr;

use cudarc::driver::sys;

use super::cuda::{check, CurrentCtx};
use ggml_backend_rs_core::mapped::{Layout, Topology};

/// Values of one slot: the most of a partial one launch exchanges (4 MiB); a larger partial
/// goes in chunks of this many values, or of whole rows as many as fit.
const SLOT_VALUES: usize = 1 << 20;

/// How long a block waits for another GPU before the step fails naming it, unless
/// `GGML_META_MAPPED_TIMEOUT_MS` says otherwise. Far above the skew between GPUs within a
/// step (their sub-graphs up to a cut take milliseconds), so a wait this long means a GPU that
/// stopped.
const TIMEOUT_MS: u64 = 10_000;

/// What the driver says of a meta device's distinct GPUs (`core::mapped::Topology`); a query
/// that fails answers no.
pub struct DriverTopology<'a> {
    /// Ordinal and driver device of each distinct GPU.
    pub gpus: &'a [(i32, sys::CUdevice)],
}

impl Topology for DriverTopology<'_> {
    fn gpus(&self) -> usize {
        self.gpus.len()
    }

    fn name(&self, gpu: usize) -> String {
        format!("CUDA{}", self.gpus[gpu].0)
    }

    fn peer(&self, a: usize, b: usize) -> bool {
        let mut can = 0;
        // SAFETY: out-pointer to a local; both devices come from cuDeviceGet.
        let r = unsafe { sys::cuDeviceCanAccessPeer(&mut can, self.gpus[a].1, self.gpus[b].1) };
        r == sys::CUresult::CUDA_SUCCESS && can != 0
    }

    fn maps_host(&self, gpu: usize) -> bool {
        let mut can = 0;
        // SAFETY: out-pointer to a local; the device comes from cuDeviceGet.
        let r = unsafe {
            sys::cuDeviceGetAttribute(
                &mut can,
                sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY,
                self.gpus[gpu].1,
            )
        };
        r == sys::CUresult::CUDA_SUCCESS && can != 0
    }
}

/// One GPU's view of the exchange.
pub struct View {
    ctx: sys::CUcontext,
    /// The region's address on this GPU.
    pub region: u64,
    /// Its epoch counters ([`Layout::words_per_gpu`] `u32`s, device memory).
    pub counters: sys::CUdeviceptr,
}

/// The pinned region and the counters of one meta backend's exchange.
pub struct Mapped {
    pub layout: Layout,
    /// The first GPU's context, current when the region is freed.
    ctx: sys::CUcontext,
    host: *mut c_void,
    /// One per distinct GPU, in the order of `cuda`'s launchers.
    pub views: Vec<View>,
    /// The wait's bound, in nanoseconds.
    pub timeout_ns: u64,
    /// The GPUs' names, for the error of a step that failed.
    names: Vec<String>,
}

impl Mapped {
    /// The exchange of `members` partials over the GPUs `gpus` (name and retained primary
    /// context each), whose launches have up to `blocks` blocks.
    pub fn new(
        members: usize,
        gpus: &[(String, sys::CUcontext)],
        blocks: usize,
    ) -> Result<Mapped, String> {
        let layout = Layout::new(members, gpus.len(), blocks, SLOT_VALUES)
            .ok_or("no layout for the exchange")?;
        let timeout_ms = std::env::var("GGML_META_MAPPED_TIMEOUT_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(TIMEOUT_MS);
        let mut this = Mapped {
            layout,
            ctx: gpus[0].1,
            host: ptr::null_mut(),
            views: Vec::with_capacity(gpus.len()),
            timeout_ns: timeout_ms.saturating_mul(1_000_000),
            names: gpus.iter().map(|(name, _)| name.clone()).collect(),
        };
        let cur = CurrentCtx::enter(gpus[0].1)?;
        check(
            // SAFETY: out-pointer to a field; freed in Drop. Portable: pinned for every
            // context; device-mapped: every GPU gets an address for it.
            unsafe {
                sys::cuMemHostAlloc(
                    &mut this.host,
                    this.layout.bytes,
                    sys::CU_MEMHOSTALLOC_PORTABLE | sys::CU_MEMHOSTALLOC_DEVICEMAP,
                )
            },
            "cuMemHostAlloc",
        )?;
        // SAFETY: the allocation just made, `layout.bytes` long.
        unsafe { ptr::write_bytes(this.host as *mut u8, 0, this.layout.bytes) };
        for &(_, ctx) in gpus {
            cur.switch(ctx)?;
            let mut view = View {
                ctx,
                region: 0,
                counters: 0,
            };
            check(
                // SAFETY: out-pointer to a local; our mapped allocation, in this context.
                unsafe { sys::cuMemHostGetDevicePointer_v2(&mut view.region, this.host, 0) },
                "cuMemHostGetDevicePointer",
            )?;
            let words = this.layout.words_per_gpu();
            // SAFETY: out-pointer to a local, freed in Drop (with its context).
            let r = unsafe { sys::cuMemAlloc_v2(&mut view.counters, words * 4) };
            check(r, "cuMemAlloc")?;
            this.views.push(view);
            zero(this.views.last().unwrap().counters, words)?;
        }
        Ok(this)
    }

    /// The word at byte `at` of the region.
    fn word(&self, at: usize) -> *mut u32 {
        debug_assert!(at + 4 <= self.layout.bytes && at % 4 == 0);
        // SAFETY: in bounds of the allocation (the layout's offsets).
        unsafe { (self.host as *mut u8).add(at) as *mut u32 }
    }

    /// Which GPU gave up waiting for which, after a step whose kernels all ended: `None` when
    /// every wait was met.
    pub fn lost(&self) -> Option<String> {
        (0..self.layout.gpus).find_map(|g| {
            // SAFETY: an error word of the region, written by the GPUs' kernels (which have
            // ended); volatile, as memory another agent wrote.
            let w = unsafe { ptr::read_volatile(self.word(self.layout.error(g))) };
            let lost = (w as usize).checked_sub(1)?;
            Some(format!(
                "{} waited {} ms for {} in the AllReduce through host memory, which did not \
                 come: the step's results are not valid",
                self.names[g],
                self.timeout_ns / 1_000_000,
                self.names.get(lost).map_or("another GPU", String::as_str)
            ))
        })
    }

    /// Clears the flags, error words and counters after a failed step, when no kernel of the
    /// exchange runs any more: the next step starts from epoch 1 on every GPU.
    pub fn clear(&self) -> Result<(), String> {
        for at in self.layout.words_to_clear().step_by(4) {
            // SAFETY: a word of the region; no kernel runs (the caller's condition).
            unsafe { ptr::write_volatile(self.word(at), 0) };
        }
        let cur = CurrentCtx::enter(self.views[0].ctx)?;
        for v in &self.views {
            cur.switch(v.ctx)?;
            zero(v.counters, self.layout.words_per_gpu())?;
        }
        Ok(())
    }
}

/// Zeroes `words` u32s of device memory at `at` (of the current context) before returning: a
/// memset is queued on the legacy default stream, which our non-blocking streams do not wait
/// for, so it is waited for here, before any kernel can read the memory.
fn zero(at: sys::CUdeviceptr, words: usize) -> Result<(), String> {
    // SAFETY: device memory of `words` u32s, allocated by the caller in this context.
    check(unsafe { sys::cuMemsetD32_v2(at, 0, words) }, "cuMemsetD32")?;
    check(
        // SAFETY: the legacy default stream of the current context.
        unsafe { sys::cuStreamSynchronize(ptr::null_mut()) },
        "cuStreamSynchronize",
    )
}

impl Drop for Mapped {
    fn drop(&mut self) {
        // (the kernels that use it have ended: `cuda` synchronizes its streams first)
        let Ok(cur) = CurrentCtx::enter(self.ctx) else {
            return;
        };
        for v in self.views.drain(..) {
            if cur.switch(v.ctx).is_ok() {
                // SAFETY: allocated in `new` in this context; errors at teardown ignored.
                unsafe { sys::cuMemFree_v2(v.counters) };
            }
        }
        if !self.host.is_null() && cur.switch(self.ctx).is_ok() {
            // SAFETY: allocated in `new` with cuMemHostAlloc.
            unsafe { sys::cuMemFreeHost(self.host) };
        }
    }
}
