//! The AllReduce a simple backend offers for tensor parallelism, as its registry exposes it:
//! a communicator (`ggml_backend_comm_init` / `_allreduce_tensor` / `_free`, fact `comm-api`;
//! CUDA, with NCCL or its internal kernel as `GGML_CUDA_ALLREDUCE` says) or one function
//! (`ggml_backend_allreduce_tensor`; CUDA with NCCL). Made for one meta backend's simple
//! backends and freed before them.

use std::ffi::c_void;
use std::ptr;

use crate::abi::log::log_error;
use crate::abi::*;

/// `bool (*)(ggml_backend_t * backends, struct ggml_tensor ** tensors, size_t n)`.
type AllReduceFn = unsafe extern "C" fn(*mut ggml_backend_t, *mut *mut ggml_tensor, usize) -> bool;
type CommInitFn = unsafe extern "C" fn(*mut ggml_backend_t, usize) -> *mut c_void;
type CommAllReduceFn = unsafe extern "C" fn(*mut c_void, *mut *mut ggml_tensor) -> bool;
type CommFreeFn = unsafe extern "C" fn(*mut c_void);

pub enum BackendAllReduce {
    /// A communicator made for these backends, freed on drop.
    Comm {
        ctx: ptr::NonNull<c_void>,
        all_reduce: CommAllReduceFn,
        free: CommFreeFn,
    },
    /// The registry's one function.
    Function(AllReduceFn),
}

impl BackendAllReduce {
    /// None when the first backend's registry offers none, or (communicators) makes none for
    /// these backends (CUDA makes none when one of them is not a CUDA backend).
    pub fn new(backends: &[Backend]) -> Option<BackendAllReduce> {
        let dev = backends.first()?.device_handle("meta AllReduce");
        if !facts::COMM_API {
            let p = dev.reg_proc(c"ggml_backend_allreduce_tensor")?;
            // SAFETY: ggml-backend.h documents this entry with exactly this signature
            // (ggml_backend_allreduce_tensor_t).
            let f = unsafe { std::mem::transmute::<*mut c_void, AllReduceFn>(p) };
            return Some(BackendAllReduce::Function(f));
        }
        let init = dev.reg_proc(c"ggml_backend_comm_init")?;
        let (Some(all_reduce), Some(free)) = (
            dev.reg_proc(c"ggml_backend_comm_allreduce_tensor"),
            dev.reg_proc(c"ggml_backend_comm_free"),
        ) else {
            log_error!(
                "meta backend: {}'s registry offers ggml_backend_comm_init without \
                 ggml_backend_comm_allreduce_tensor and ggml_backend_comm_free; not used",
                dev.name_string()
            );
            return None;
        };
        // SAFETY: ggml-backend.h documents the three entries with these signatures
        // (ggml_backend_comm_init_t, ggml_backend_comm_allreduce_tensor_t,
        // ggml_backend_comm_free_t).
        let (init, all_reduce, free) = unsafe {
            (
                std::mem::transmute::<*mut c_void, CommInitFn>(init),
                std::mem::transmute::<*mut c_void, CommAllReduceFn>(all_reduce),
                std::mem::transmute::<*mut c_void, CommFreeFn>(free),
            )
        };
        let mut bs: Vec<ggml_backend_t> = backends.iter().map(|b| b.as_ptr()).collect();
        // SAFETY: live backends; the communicator may keep them, and is freed before them
        // (the meta backend's `free`).
        let ctx = ptr::NonNull::new(unsafe { init(bs.as_mut_ptr(), bs.len()) })?;
        Some(BackendAllReduce::Comm {
            ctx,
            all_reduce,
            free,
        })
    }

    /// Sums `tensors[j]` (on `backends[j]`, one layout) into all of them, queued on the
    /// backends; false when the backend declines (nothing was queued; the caller reduces
    /// another way).
    pub fn all_reduce(&self, backends: &[Backend], tensors: &[Tensor]) -> bool {
        let (mut bs, mut ts) = per_device_arrays(backends, tensors);
        match self {
            BackendAllReduce::Comm {
                ctx, all_reduce, ..
            } => {
                // SAFETY: the communicator made for these n backends, with their n live
                // tensors.
                unsafe { all_reduce(ctx.as_ptr(), ts.as_mut_ptr()) }
            }
            // SAFETY: n live backends and their n live tensors, in arrays of at least n
            // entries.
            BackendAllReduce::Function(f) => unsafe {
                f(bs.as_mut_ptr(), ts.as_mut_ptr(), backends.len())
            },
        }
    }
}

impl Drop for BackendAllReduce {
    fn drop(&mut self) {
        if let BackendAllReduce::Comm { ctx, free, .. } = self {
            // SAFETY: made by the registry's comm_init, freed once.
            unsafe { free(ctx.as_ptr()) }
        }
    }
}
