//! The memory of our CUDA AllReduce through host memory by the copy engines, for large
//! partials (prefill) where the GPUs cannot read each other's memory: pinned host slots, per
//! set a slot per member, and on every GPU a stream for the copies out, a scratch of a slot per
//! member, its events and the peer kernels.
//!
//! What each GPU queues, in which order, is `core::engines::schedule`'s (its module doc gives
//! the events' meaning and the proof); `cuda` carries it out op by op. No kernel waits for
//! another GPU: the copies and the events order everything, so a lost GPU fails the step
//! through the driver, never a spin. Between AllReduces every backend waits for every GPU's
//! `done`, so no GPU overwrites a host slot another still reads.

use std::ffi::{c_void, CString};
use std::ptr;

use cudarc::driver::sys;

use super::cuda::{check, CurrentCtx};
use ggml_backend_rs_core::engines::SETS;
use ggml_backend_rs_core::ptx::{self, Epilogue as Kernel, Param};

/// Bytes of one slot: a larger partial goes in chunks of whole rows. Small enough that an
/// 8 MiB prefill partial pipelines in 8 chunks, large enough that a copy's fixed cost (a few
/// µs) stays small against its 20 µs on a PCIe 5.0 x16 link.
pub(super) const SLOT_BYTES: usize = 1 << 20;

/// One GPU's side: its stream for the copies out, its scratch (a slot per member), its events
/// (one per set of slots) and the peer kernels.
pub struct Side {
    ctx: sys::CUcontext,
    pub out_stream: sys::CUstream,
    pub scratch: sys::CUdeviceptr,
    pub copied_out: [sys::CUevent; SETS],
    pub copied_in: [sys::CUevent; SETS],
    /// Recorded on the out stream after a cut, for the sum stream to wait on: the schedule
    /// joins the two streams itself, but a cut whose queueing failed part way must not leave
    /// copies out that the GPU's `done` does not cover (nor a capture with an unjoined stream).
    pub out_ended: sys::CUevent,
    module: sys::CUmodule,
    /// One entry per `Kernel::ALL` item, in that order.
    pub kernels: [sys::CUfunction; 3],
}

/// The host slots and every GPU's side of one meta backend's AllReduce by copy engines.
pub struct Engines {
    /// The first GPU's context, current when the host slots are freed.
    ctx: sys::CUcontext,
    /// `SETS` sets of `members` slots.
    host: *mut c_void,
    members: usize,
    /// Bytes a partial from which a cut goes this way (`GGML_META_ENGINES_MIN`).
    pub min: u64,
    /// One per distinct GPU, in the order of `cuda`'s launchers.
    pub sides: Vec<Side>,
    /// Per `Kernel::ALL` item: the peer kernel's parameters in order.
    pub params: [Vec<Param>; 3],
}

impl Engines {
    /// The exchange of `members` partials of at least `min` bytes over the GPUs whose retained
    /// primary contexts are `ctxs` (a GPU may appear more than once: a launch per device on one
    /// GPU).
    pub fn new(members: usize, ctxs: &[sys::CUcontext], min: u64) -> Result<Engines, String> {
        let mut this = Engines {
            ctx: ctxs[0],
            host: ptr::null_mut(),
            members,
            min,
            sides: Vec::with_capacity(ctxs.len()),
            params: Kernel::ALL.map(|k| ptx::params(members, k)),
        };
        let cur = CurrentCtx::enter(ctxs[0])?;
        check(
            // SAFETY: out-pointer to a field; freed in Drop. Portable: pinned for every context,
            // so every GPU's copy engines reach it.
            unsafe {
                sys::cuMemHostAlloc(
                    &mut this.host,
                    SLOT_BYTES * members * SETS,
                    sys::CU_MEMHOSTALLOC_PORTABLE,
                )
            },
            "cuMemHostAlloc",
        )?;
        let code = CString::new(ptx::ptx(members)).map_err(|e| e.to_string())?;
        let names = Kernel::ALL
            .iter()
            .map(|&k| CString::new(ptx::kernel_name(members, k)).map_err(|e| e.to_string()))
            .collect::<Result<Vec<_>, _>>()?;
        for &ctx in ctxs {
            cur.switch(ctx)?;
            let mut side = Side {
                ctx,
                out_stream: ptr::null_mut(),
                scratch: 0,
                copied_out: [ptr::null_mut(); SETS],
                copied_in: [ptr::null_mut(); SETS],
                out_ended: ptr::null_mut(),
                module: ptr::null_mut(),
                kernels: [ptr::null_mut(); 3],
            };
            // SAFETY: out-pointers to fields of `side`, which Drop releases when set; the PTX
            // image is NUL-terminated.
            let r = unsafe {
                check(
                    sys::cuMemAlloc_v2(&mut side.scratch, SLOT_BYTES * members),
                    "cuMemAlloc",
                )
                .and_then(|_| {
                    // (non-blocking: the CUDA backends' streams are too, and nothing of ours
                    // runs on the legacy stream)
                    let flags = sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32;
                    check(
                        sys::cuStreamCreate(&mut side.out_stream, flags),
                        "cuStreamCreate",
                    )
                })
                .and_then(|_| {
                    let flags = sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32;
                    side.copied_out
                        .iter_mut()
                        .chain(side.copied_in.iter_mut())
                        .chain([&mut side.out_ended])
                        .try_for_each(|e| check(sys::cuEventCreate(e, flags), "cuEventCreate"))
                })
                .and_then(|_| {
                    check(
                        sys::cuModuleLoadData(&mut side.module, code.as_ptr() as *const c_void),
                        "cuModuleLoadData",
                    )
                })
                .and_then(|_| {
                    side.kernels
                        .iter_mut()
                        .zip(&names)
                        .try_for_each(|(k, name)| {
                            check(
                                sys::cuModuleGetFunction(k, side.module, name.as_ptr()),
                                "cuModuleGetFunction",
                            )
                        })
                })
            };
            this.sides.push(side);
            r?;
        }
        Ok(this)
    }

    /// The host slot of member `k` in set `set`.
    pub fn host_slot(&self, set: usize, k: usize) -> *mut c_void {
        debug_assert!(k < self.members && set < SETS);
        // SAFETY: in bounds of the allocation (`SETS` sets of `members` slots).
        unsafe { (self.host as *mut u8).add((set * self.members + k) * SLOT_BYTES) as *mut c_void }
    }

    /// Member `k`'s slot in GPU `g`'s scratch.
    pub fn scratch_slot(&self, g: usize, k: usize) -> sys::CUdeviceptr {
        debug_assert!(k < self.members);
        self.sides[g].scratch + (k * SLOT_BYTES) as u64
    }
}

impl Drop for Engines {
    fn drop(&mut self) {
        // (the sum streams have ended: `cuda` synchronizes its streams first; the out streams
        // are synchronized here)
        let Ok(cur) = CurrentCtx::enter(self.ctx) else {
            return;
        };
        for s in self.sides.drain(..) {
            if cur.switch(s.ctx).is_err() {
                continue;
            }
            // SAFETY: objects created in `new` in this context; errors at teardown are ignored.
            unsafe {
                if !s.out_stream.is_null() {
                    sys::cuStreamSynchronize(s.out_stream);
                    sys::cuStreamDestroy_v2(s.out_stream);
                }
                if s.scratch != 0 {
                    sys::cuMemFree_v2(s.scratch);
                }
                for e in s
                    .copied_out
                    .into_iter()
                    .chain(s.copied_in)
                    .chain([s.out_ended])
                {
                    if !e.is_null() {
                        sys::cuEventDestroy_v2(e);
                    }
                }
                if !s.module.is_null() {
                    sys::cuModuleUnload(s.module);
                }
            }
        }
        if !self.host.is_null() && cur.switch(self.ctx).is_ok() {
            // SAFETY: allocated in `new` with cuMemHostAlloc.
            unsafe { sys::cuMemFreeHost(self.host) };
        }
    }
}
