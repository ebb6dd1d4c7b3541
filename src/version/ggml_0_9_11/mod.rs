//! ggml 0.9.11, the llama.cpp of `llama-cpp-sys-2 =0.1.146`: the version that introduced tensor
//! parallelism. Its meta API sits in `ggml-ext.h` with C++ linkage, a backend's own AllReduce is
//! a registry proc address, and segments of a split state do not repeat.

#![allow(non_camel_case_types)]

mod layout_check;

use std::ffi::{c_char, c_int, c_void};

use ggml_backend_rs_core::names;
use ggml_backend_rs_core::op::{all_without, Op, OpTable};
use ggml_backend_rs_core::split::{RawSplitState, Split};

use crate::abi::{
    ggml_backend_buffer_t, ggml_backend_buffer_type_t, ggml_backend_dev_t,
    ggml_backend_meta_get_split_state_t, ggml_backend_meta_split_axis_raw, ggml_backend_t,
    ggml_context, ggml_get_first_tensor, ggml_get_next_tensor, ggml_hash_set, ggml_tensor,
    per_device_arrays, AllocDep, Backend, Graph, Tensor,
};
use crate::ffi::null_argument;
use crate::log::abort;

/// The ggml release whose ABI this build implements.
pub const GGML_VERSION: &str = "0.9.11";

/// Version a backend registry must report in `ggml_backend_reg::api_version`.
pub const GGML_BACKEND_API_VERSION: c_int = 2;

/// `enum ggml_op` of this version: every op the newest version knows but those it added.
/// cbindgen:ignore
pub const OPS: OpTable = OpTable::new(&OPS_IN_VALUE_ORDER);
const OPS_IN_VALUE_ORDER: [Op; 96] = all_without([
    Op::Col2im1d,
    Op::LightningIndexer,
    Op::Dsv4HcComb,
    Op::Dsv4HcPre,
    Op::Dsv4HcPost,
]);

// ---------------------------------------------------------------------------------------
// layouts
// ---------------------------------------------------------------------------------------

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ggml_backend_buffer_type_i {
    pub get_name: Option<unsafe extern "C" fn(buft: ggml_backend_buffer_type_t) -> *const c_char>,
    pub alloc_buffer: Option<
        unsafe extern "C" fn(
            buft: ggml_backend_buffer_type_t,
            size: usize,
        ) -> ggml_backend_buffer_t,
    >,
    pub get_alignment: Option<unsafe extern "C" fn(buft: ggml_backend_buffer_type_t) -> usize>,
    pub get_max_size: Option<unsafe extern "C" fn(buft: ggml_backend_buffer_type_t) -> usize>,
    pub get_alloc_size: Option<
        unsafe extern "C" fn(buft: ggml_backend_buffer_type_t, tensor: *const ggml_tensor) -> usize,
    >,
    pub is_host: Option<unsafe extern "C" fn(buft: ggml_backend_buffer_type_t) -> bool>,
}

impl ggml_backend_buffer_type_i {
    /// No entries: the base that buffer types complete with struct-update syntax.
    pub const EMPTY: Self = Self {
        get_name: None,
        alloc_buffer: None,
        get_alignment: None,
        get_max_size: None,
        get_alloc_size: None,
        is_host: None,
    };
}

/// The entries only this version's meta buffer type fills: none (a context's tensors reach it
/// through the exported `ggml_backend_meta_alloc_ctx_tensors_from_buft`).
/// cbindgen:ignore
pub const META_BUFT_ENTRIES: ggml_backend_buffer_type_i = ggml_backend_buffer_type_i::EMPTY;

/// cbindgen:field-names=[async, host_buffer, buffer_from_host_ptr, events]
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ggml_backend_dev_caps {
    pub async_: bool,
    pub host_buffer: bool,
    pub buffer_from_host_ptr: bool,
    pub events: bool,
}

impl ggml_backend_dev_caps {
    /// This version has no such capability: libllama maps weights for every device.
    pub fn mmap_support(&self) -> bool {
        true
    }
    pub fn set_mmap_support(&mut self, _supported: bool) {}
}

pub type ggml_backend_graph_optimize_t =
    Option<unsafe extern "C" fn(backend: ggml_backend_t, cgraph: *mut ggml_cgraph)>;

/// A backend's own AllReduce, offered by its registry as `ggml_backend_allreduce_tensor`.
pub type ggml_backend_allreduce_tensor_t = Option<
    unsafe extern "C" fn(
        backends: *mut ggml_backend_t,
        tensors: *mut *mut ggml_tensor,
        n_backends: usize,
    ) -> bool,
>;

/// The split of one tensor. For a dimension axis, `ne` holds one extent per (segment,
/// device) pair, segments outer and devices inner; the extents of one segment over all
/// devices add up to that segment's size along the axis.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ggml_backend_meta_split_state {
    pub axis: ggml_backend_meta_split_axis_raw,
    // 16 * GGML_BACKEND_META_MAX_DEVICES, spelled as a literal because cbindgen cannot
    // evaluate the product; `split_from_c` copies it into the core's array of that size.
    pub ne: [i64; 256],
    pub n_segments: u32,
}

/// A state from C in the version-free form: every segment counted once.
pub fn split_from_c(c: &ggml_backend_meta_split_state) -> RawSplitState {
    RawSplitState {
        axis: c.axis,
        ne: c.ne,
        n_segments: c.n_segments,
        ..RawSplitState::mirrored()
    }
}

/// `split` as C reads it, repeated segments spelled out.
pub fn split_to_c(split: &Split) -> ggml_backend_meta_split_state {
    let n = split.as_dim().map_or(1, |d| d.n);
    let Some(raw) = split.to_raw().expanded(n) else {
        abort(
            file!(),
            line!(),
            &format!(
                "ggml_backend_meta_get_split_state: {} has more segments than ggml 0.9.11's split state holds",
                split.describe()
            ),
        )
    };
    ggml_backend_meta_split_state {
        axis: raw.axis,
        ne: raw.ne,
        n_segments: raw.n_segments,
    }
}

/// `struct ggml_cgraph` (ggml-impl.h). Private to ggml, but its layout is part of the
/// contract between ggml-base and the backend layer.
#[repr(C)]
pub struct ggml_cgraph {
    pub size: c_int,
    pub n_nodes: c_int,
    pub n_leafs: c_int,
    pub nodes: *mut *mut ggml_tensor,
    pub grads: *mut *mut ggml_tensor,
    pub grad_accs: *mut *mut ggml_tensor,
    pub leafs: *mut *mut ggml_tensor,
    pub use_counts: *mut i32,
    pub visited_hash_set: ggml_hash_set,
    pub order: c_int,
}

impl ggml_cgraph {
    /// This version's graphs carry no identity: a graph is known by its contents only.
    pub fn uid(&self) -> u64 {
        0
    }
    pub fn set_uid(&mut self, _uid: u64) {}
}

/// This version's buffer types size every result at `ggml_nbytes` (no op may take more).
pub fn alloc_size_may_expand(_op: crate::abi::ggml_op) -> bool {
    false
}

/// Graph identities do not exist in this version.
pub fn next_graph_uid() -> u64 {
    0
}

// ---------------------------------------------------------------------------------------
// behaviour
// ---------------------------------------------------------------------------------------

/// How libllama's split callback sizes and rotates slices, which the plugin's name policy
/// follows: whole quantization blocks, rotation by layer index.
/// cbindgen:ignore
pub const NAME_CONVENTIONS: names::Conventions = names::Conventions::BLOCKS;

/// Registering a backend or device again adds it again.
/// cbindgen:ignore
pub const REGISTRATION_IS_IDEMPOTENT: bool = false;

impl Backend {
    /// Lets the backend reorder `graph` (fusion, concurrency); this version's backends add no
    /// allocation dependencies.
    pub fn graph_optimize(&self, graph: Graph) -> Vec<AllocDep> {
        if let Some(f) = self.iface().graph_optimize {
            // SAFETY: vtable entry of a live backend, called with it and a live graph.
            unsafe { f(self.as_ptr(), graph.as_ptr()) }
        }
        Vec::new()
    }
}

/// Up to which size (bytes) a cut runs our own CUDA kernel rather than the backends' AllReduce
/// (NCCL, in f32), when both can: at decode sizes (8–32 KiB per token) NCCL's latency dominates,
/// above 1 MiB its bandwidth.
/// cbindgen:ignore
pub const OWN_KERNEL_BEFORE_BACKEND_UP_TO: Option<usize> = Some(1 << 20);

/// `bool (*)(ggml_backend_t * backends, struct ggml_tensor ** tensors, size_t n)`.
type AllReduceFn = unsafe extern "C" fn(*mut ggml_backend_t, *mut *mut ggml_tensor, usize) -> bool;

/// The AllReduce a simple backend's registry offers (`ggml_backend_allreduce_tensor`: CUDA,
/// which declines without NCCL), for one meta backend's simple backends.
/// cbindgen:ignore
pub struct BackendAllReduce {
    f: AllReduceFn,
}

impl BackendAllReduce {
    /// None when the first backend's registry offers none.
    pub fn new(backends: &[Backend]) -> Option<BackendAllReduce> {
        let dev = backends.first()?.device_handle("meta AllReduce");
        let p = dev.reg_proc(c"ggml_backend_allreduce_tensor")?;
        // SAFETY: the registry documents this entry with exactly this signature.
        let f = unsafe { std::mem::transmute::<*mut c_void, AllReduceFn>(p) };
        Some(BackendAllReduce { f })
    }

    /// Sums `tensors[j]` (on `backends[j]`, one layout) into all of them, queued on the
    /// backends; false when the backend declines (nothing was queued).
    pub fn all_reduce(&self, backends: &[Backend], tensors: &[Tensor]) -> bool {
        let (mut bs, mut ts) = per_device_arrays(backends, tensors);
        // SAFETY: n live backends and their n live tensors, in arrays of at least n entries.
        unsafe { (self.f)(bs.as_mut_ptr(), ts.as_mut_ptr(), backends.len()) }
    }
}

// ---------------------------------------------------------------------------------------
// exports of this version only
// ---------------------------------------------------------------------------------------

/// `ggml_backend_dev_t ggml_backend_meta_device(ggml_backend_dev_t * devs, size_t n_devs,
/// ggml_backend_meta_get_split_state_t get_split_state, void * get_split_state_ud)`, declared
/// with C++ linkage in this version's ggml-ext.h.
///
/// # Safety
/// `devs` points to `n_devs` live devices (a NULL entry aborts).
#[export_name = "_Z24ggml_backend_meta_devicePP19ggml_backend_devicemPF29ggml_backend_meta_split_statePK11ggml_tensorPvES6_"]
pub unsafe extern "C" fn ggml_backend_meta_device(
    devs: *mut ggml_backend_dev_t,
    n_devs: usize,
    get_split_state: ggml_backend_meta_get_split_state_t,
    get_split_state_ud: *mut c_void,
) -> ggml_backend_dev_t {
    // SAFETY: this function's contract.
    unsafe { crate::ffi::meta::new_meta_device(devs, n_devs, get_split_state, get_split_state_ud) }
}

/// `const char * ggml_backend_meta_split_axis_name(enum ggml_backend_meta_split_axis)`, C++
/// linkage.
#[export_name = "_Z33ggml_backend_meta_split_axis_name28ggml_backend_meta_split_axis"]
pub extern "C" fn ggml_backend_meta_split_axis_name(
    axis: ggml_backend_meta_split_axis_raw,
) -> *const c_char {
    crate::ffi::meta::split_axis_name(axis)
}

/// Allocates every unallocated tensor of `ctx` in a buffer of meta buffer type `buft`, each
/// device holding only its slices (later versions hand the list to the buffer type's
/// `alloc_buffer_n`).
///
/// # Safety
/// `ctx` is NULL (an error) or a live ggml context.
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_meta_alloc_ctx_tensors_from_buft(
    ctx: *mut ggml_context,
    buft: ggml_backend_buffer_type_t,
) -> ggml_backend_buffer_t {
    const F: &str = "ggml_backend_meta_alloc_ctx_tensors_from_buft";
    if ctx.is_null() {
        null_argument(F, "ctx");
    }
    let dev = crate::ffi::meta::meta_buft(buft, F);
    // SAFETY: a non-NULL context, live per this function's contract.
    let tensors = unsafe { context_tensors(ctx) };
    crate::meta::buffer_iface::alloc_tensors(tensors, dev)
}

/// The tensors of a context, in its order.
///
/// # Safety
/// `ctx` is a live ggml context.
unsafe fn context_tensors(ctx: *mut ggml_context) -> Vec<Tensor> {
    let mut tensors = Vec::new();
    // SAFETY: `ctx` is live (this function's contract); ggml's iteration returns its live
    // tensors, then NULL.
    unsafe {
        let mut p = ggml_get_first_tensor(ctx);
        while let Some(t) = Tensor::from_ptr(p) {
            tensors.push(t);
            p = ggml_get_next_tensor(ctx, p);
        }
    }
    tensors
}

// ---------------------------------------------------------------------------------------
// scheduler
// ---------------------------------------------------------------------------------------

/// `ggml_backend_sched` of this version: flash attention runs next to its sinks like any op
/// reading weights, a split takes at most 30 inputs, graph inputs get pipeline copies where a
/// node reads them, a failed re-plan is not checked, and only splits with inputs record events.
pub const SCHED_POLICY: crate::sched::Policy = crate::sched::Policy {
    assign: ggml_backend_rs_core::assign::Policy {
        flash_attn_follows_weights: true,
    },
    partition: ggml_backend_rs_core::partition::Policy {
        max_inputs: Some(ggml_backend_rs_core::partition::MAX_SPLIT_INPUTS),
        graph_inputs: ggml_backend_rs_core::partition::GraphInputs::Consumed,
    },
    alloc_graph_size: crate::sched::AllocGraphSize::PerSplit,
    failed_reserve_fails: false,
    wait_before_split_without_inputs: false,
    event_after_every_split: false,
    debug_op_desc: false,
};
