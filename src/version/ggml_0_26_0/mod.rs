//! ggml 0.26.0, the llama.cpp of `llama-cpp-sys-2 =0.1.161`. Against 0.9.11: the meta API moved
//! into `ggml-backend.h` with C linkage and its segments repeat (`nr`); buffer types allocate
//! whole tensor lists (`alloc_buffer_n`, `get_alloc_size_n`, which is how ggml-alloc now
//! places a context's tensors); devices say whether weights may be memory-mapped; backends add
//! allocation dependencies in `graph_optimize`; graphs carry a `uid`; a backend's fast
//! AllReduce is a communicator (the comm API) instead of a proc address; five ops were added.

#![allow(non_camel_case_types)]

mod layout_check;

use std::ffi::{c_char, c_int, c_void};
use std::ptr;

use ggml_backend_rs_core::chunk;
use ggml_backend_rs_core::names;
use ggml_backend_rs_core::op::{Op, OpTable};
use ggml_backend_rs_core::split::{RawSplitState, Split};

use crate::abi::{
    ggml_backend_buffer_t, ggml_backend_buffer_type_t, ggml_backend_buffer_usage_raw,
    ggml_backend_dev_t, ggml_backend_meta_get_split_state_t, ggml_backend_meta_split_axis_raw,
    ggml_backend_t, ggml_hash_set, ggml_op, ggml_tallocr_alloc, ggml_tallocr_new, ggml_tensor,
    per_device_arrays, AllocDep, Backend, Buffer, Buft, Graph, Tensor, GGML_STATUS_SUCCESS,
};
use crate::ffi::{handle_arg, null_argument};
use crate::log::{abort, log_error};

/// The ggml release whose ABI this build implements.
pub const GGML_VERSION: &str = "0.26.0";

/// Version a backend registry must report in `ggml_backend_reg::api_version`.
pub const GGML_BACKEND_API_VERSION: c_int = 3;

/// `enum ggml_op` of this version: every op the crate knows, in its order.
/// cbindgen:ignore
pub const OPS: OpTable = OpTable::new(&Op::ALL);

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
    /// Optional: allocates `tensors` in one or more buffers (default: plan the tensors into
    /// buffers of at most the maximum size, then place them one after another).
    pub alloc_buffer_n: Option<
        unsafe extern "C" fn(
            buft: ggml_backend_buffer_type_t,
            tensors: *mut *mut ggml_tensor,
            n_tensors: c_int,
        ) -> ggml_backend_buffer_t,
    >,
    pub get_alignment: Option<unsafe extern "C" fn(buft: ggml_backend_buffer_type_t) -> usize>,
    pub get_max_size: Option<unsafe extern "C" fn(buft: ggml_backend_buffer_type_t) -> usize>,
    pub get_alloc_size: Option<
        unsafe extern "C" fn(buft: ggml_backend_buffer_type_t, tensor: *const ggml_tensor) -> usize,
    >,
    /// Optional: bytes `alloc_buffer_n` would allocate for `tensors`.
    pub get_alloc_size_n: Option<
        unsafe extern "C" fn(
            buft: ggml_backend_buffer_type_t,
            tensors: *mut *mut ggml_tensor,
            n_tensors: c_int,
        ) -> usize,
    >,
    pub is_host: Option<unsafe extern "C" fn(buft: ggml_backend_buffer_type_t) -> bool>,
}

impl ggml_backend_buffer_type_i {
    /// No entries: the base that buffer types complete with struct-update syntax.
    pub const EMPTY: Self = Self {
        get_name: None,
        alloc_buffer: None,
        alloc_buffer_n: None,
        get_alignment: None,
        get_max_size: None,
        get_alloc_size: None,
        get_alloc_size_n: None,
        is_host: None,
    };
}

/// The entries only this version's meta buffer type fills: a context's tensors arrive as a
/// list, each device gets its slices.
/// cbindgen:ignore
pub const META_BUFT_ENTRIES: ggml_backend_buffer_type_i = ggml_backend_buffer_type_i {
    alloc_buffer_n: Some(meta_buft_alloc_buffer_n),
    ..ggml_backend_buffer_type_i::EMPTY
};

/// cbindgen:field-names=[async, host_buffer, buffer_from_host_ptr, events, mmap_support]
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ggml_backend_dev_caps {
    pub async_: bool,
    pub host_buffer: bool,
    pub buffer_from_host_ptr: bool,
    pub events: bool,
    /// Weights may be loaded by mapping the model file (libllama turns mmap off otherwise).
    pub mmap_support: bool,
}

impl ggml_backend_dev_caps {
    pub fn mmap_support(&self) -> bool {
        self.mmap_support
    }
    pub fn set_mmap_support(&mut self, supported: bool) {
        self.mmap_support = supported;
    }
}

/// What `graph_optimize` receives: a backend that runs parts of the graph out of order keeps
/// a tensor allocated until a later node of the same graph with `add_alloc_dep`.
#[repr(C)]
pub struct ggml_backend_graph_optimize_params {
    pub add_alloc_dep: Option<
        unsafe extern "C" fn(
            user_data: *mut c_void,
            tensor: *mut ggml_tensor,
            until: *mut ggml_tensor,
        ),
    >,
    pub user_data: *mut c_void,
}

pub type ggml_backend_graph_optimize_t = Option<
    unsafe extern "C" fn(
        backend: ggml_backend_t,
        cgraph: *mut ggml_cgraph,
        params: *mut ggml_backend_graph_optimize_params,
    ),
>;

/// A backend's communicator for tensor parallelism, offered by its registry as
/// `ggml_backend_comm_init` / `_free` / `_allreduce_tensor`.
pub type ggml_backend_comm_init_t =
    Option<unsafe extern "C" fn(backends: *mut ggml_backend_t, n_backends: usize) -> *mut c_void>;
pub type ggml_backend_comm_free_t = Option<unsafe extern "C" fn(comm_ctx: *mut c_void)>;
pub type ggml_backend_comm_allreduce_tensor_t =
    Option<unsafe extern "C" fn(comm_ctx: *mut c_void, tensors: *mut *mut ggml_tensor) -> bool>;

/// The split of one tensor. For a dimension axis, `ne` holds one extent per (segment,
/// device) pair, segments outer and devices inner, and segment `s` repeats `nr[s]` times (a
/// fused K/V pair as one segment repeated twice); the extents of one segment over all
/// devices add up to that segment's size along the axis.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ggml_backend_meta_split_state {
    pub axis: ggml_backend_meta_split_axis_raw,
    // 16 * GGML_BACKEND_META_MAX_DEVICES, spelled as a literal because cbindgen cannot
    // evaluate the product; `split_from_c` copies it into the core's array of that size.
    pub ne: [i64; 256],
    pub nr: [u32; 16],
    pub n_segments: u32,
}

/// A state from C in the version-free form.
pub fn split_from_c(c: &ggml_backend_meta_split_state) -> RawSplitState {
    RawSplitState {
        axis: c.axis,
        ne: c.ne,
        nr: c.nr,
        n_segments: c.n_segments,
    }
}

/// `split` as C reads it, equal consecutive segments written once with their repeat count.
pub fn split_to_c(split: &Split) -> ggml_backend_meta_split_state {
    let raw = split.to_raw();
    ggml_backend_meta_split_state {
        axis: raw.axis,
        ne: raw.ne,
        nr: raw.nr,
        n_segments: raw.n_segments,
    }
}

/// `struct ggml_cgraph` (ggml-impl.h). Private to ggml, but its layout is part of the
/// contract between ggml-base and the backend layer; `ggml_graph_view` returns it by value.
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
    /// Two graphs with the same non-zero uid are the same graph: backends may replay what they
    /// prepared for it (CUDA skips its graph checks). 0: unknown.
    pub uid: u64,
}

impl ggml_cgraph {
    pub fn uid(&self) -> u64 {
        self.uid
    }
    pub fn set_uid(&mut self, uid: u64) {
        self.uid = uid;
    }
}

extern "C" {
    /// ggml.c: a process-wide counter, never 0.
    fn ggml_graph_next_uid() -> u64;
}

/// A fresh graph identity.
pub fn next_graph_uid() -> u64 {
    // SAFETY: no arguments; ggml increments an atomic counter.
    unsafe { ggml_graph_next_uid() }
}

// ---------------------------------------------------------------------------------------
// behaviour
// ---------------------------------------------------------------------------------------

/// How libllama's split callback sizes and rotates slices, which the plugin's name policy
/// follows: FFN rows and recurrent heads in multiples of lcm(block, 128), attention's block
/// doubled towards 128 rows, rotation counted within a layer's kind (recurrent or attention).
/// cbindgen:ignore
pub const NAME_CONVENTIONS: names::Conventions = names::Conventions {
    perf_rows: 128,
    rotate_within_kind: true,
};

/// Registering a backend or device that is already registered does nothing.
/// cbindgen:ignore
pub const REGISTRATION_IS_IDEMPOTENT: bool = true;

impl Backend {
    /// Lets the backend reorder `graph` (fusion, concurrent streams) and returns the
    /// allocation dependencies it asks for.
    pub fn graph_optimize(&self, graph: Graph) -> Vec<AllocDep> {
        let Some(f) = self.iface().graph_optimize else {
            return Vec::new();
        };
        unsafe extern "C" fn add(
            user_data: *mut c_void,
            tensor: *mut ggml_tensor,
            until: *mut ggml_tensor,
        ) {
            // SAFETY: `user_data` is the Vec below, alive and not otherwise borrowed while the
            // backend runs; the tensors are nodes of the graph it was given.
            let deps = unsafe { &mut *(user_data as *mut Vec<AllocDep>) };
            // SAFETY: as above.
            let (tensor, until) = unsafe { (Tensor::from_ptr(tensor), Tensor::from_ptr(until)) };
            if let (Some(tensor), Some(until)) = (tensor, until) {
                deps.push(AllocDep { tensor, until });
            }
        }
        let mut deps: Vec<AllocDep> = Vec::new();
        let mut params = ggml_backend_graph_optimize_params {
            add_alloc_dep: Some(add),
            user_data: &mut deps as *mut Vec<AllocDep> as *mut c_void,
        };
        // SAFETY: vtable entry of a live backend, called with it, a live graph and params
        // that outlive the call.
        unsafe { f(self.as_ptr(), graph.as_ptr(), &mut params) };
        deps
    }
}

/// Up to which size (bytes) a cut runs our own CUDA kernel rather than the backends' AllReduce,
/// when both can: at every size (None). 0.26's CUDA communicator rounds f32 partial sums
/// through BF16 (its internal kernel at every size, NCCL for large tensors), so the logits would
/// leave one device's by 5e-4 to 3e-3 rel L2 (docs/gpu.md), where our kernel adds in f32.
/// cbindgen:ignore
pub const OWN_KERNEL_BEFORE_BACKEND_UP_TO: Option<usize> = None;

/// The communicator a simple backend's registry offers (`ggml_backend_comm_init`, `_free`,
/// `_allreduce_tensor`: CUDA, with NCCL or its internal kernel as `GGML_CUDA_ALLREDUCE`
/// says), made for one meta backend's simple backends and freed before them.
/// cbindgen:ignore
pub struct BackendAllReduce {
    ctx: ptr::NonNull<c_void>,
    all_reduce: unsafe extern "C" fn(*mut c_void, *mut *mut ggml_tensor) -> bool,
    free: unsafe extern "C" fn(*mut c_void),
}

impl BackendAllReduce {
    /// None when the first backend's registry offers no communicator, or makes none for these
    /// backends (CUDA makes none when one of them is not a CUDA backend).
    pub fn new(backends: &[Backend]) -> Option<BackendAllReduce> {
        let dev = backends.first()?.device_handle("meta AllReduce");
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
                std::mem::transmute::<
                    *mut c_void,
                    unsafe extern "C" fn(*mut ggml_backend_t, usize) -> *mut c_void,
                >(init),
                std::mem::transmute::<
                    *mut c_void,
                    unsafe extern "C" fn(*mut c_void, *mut *mut ggml_tensor) -> bool,
                >(all_reduce),
                std::mem::transmute::<*mut c_void, unsafe extern "C" fn(*mut c_void)>(free),
            )
        };
        let mut bs: Vec<ggml_backend_t> = backends.iter().map(|b| b.as_ptr()).collect();
        // SAFETY: live backends; the communicator may keep them, and is freed before them
        // (the meta backend's `free`).
        let ctx = ptr::NonNull::new(unsafe { init(bs.as_mut_ptr(), bs.len()) })?;
        Some(BackendAllReduce {
            ctx,
            all_reduce,
            free,
        })
    }

    /// Sums `tensors[j]` (on `backends[j]`, one layout) into all of them, queued on the
    /// backends; false when the communicator declines (the caller reduces another way).
    pub fn all_reduce(&self, backends: &[Backend], tensors: &[Tensor]) -> bool {
        let (_, mut ts) = per_device_arrays(backends, tensors);
        // SAFETY: the communicator made for these n backends, with their n live tensors.
        unsafe { (self.all_reduce)(self.ctx.as_ptr(), ts.as_mut_ptr()) }
    }
}

impl Drop for BackendAllReduce {
    fn drop(&mut self) {
        // SAFETY: made by the registry's comm_init, freed once.
        unsafe { (self.free)(self.ctx.as_ptr()) }
    }
}

// ---------------------------------------------------------------------------------------
// exports of this version only
// ---------------------------------------------------------------------------------------

/// # Safety
/// `devs` points to `n_devs` live devices (a NULL entry aborts).
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_meta_device(
    devs: *mut ggml_backend_dev_t,
    n_devs: usize,
    get_split_state: ggml_backend_meta_get_split_state_t,
    get_split_state_ud: *mut c_void,
) -> ggml_backend_dev_t {
    // SAFETY: this function's contract.
    unsafe { crate::ffi::meta::new_meta_device(devs, n_devs, get_split_state, get_split_state_ud) }
}

#[no_mangle]
pub extern "C" fn ggml_backend_meta_split_axis_name(
    axis: ggml_backend_meta_split_axis_raw,
) -> *const c_char {
    crate::ffi::meta::split_axis_name(axis)
}

/// Forwards a usage change to the simple buffers of a meta buffer.
///
/// # Safety
/// `buffer` is a live buffer (NULL and buffers that are not meta buffers abort).
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_meta_buffer_set_usage(
    buffer: ggml_backend_buffer_t,
    usage: ggml_backend_buffer_usage_raw,
) {
    const F: &str = "ggml_backend_meta_buffer_set_usage";
    let b = handle_arg!(buffer, Buffer, "ggml_backend_meta_buffer_set_usage");
    match crate::meta::buffer::of(b) {
        Some(mb) => crate::buffer::Extension::usage_changed(&*mb, usage),
        None => abort(file!(), line!(), &format!("{F}: not a meta buffer")),
    }
}

/// Ops whose result a buffer type may size above `ggml_nbytes` (scratch space of some
/// backends' kernels).
#[no_mangle]
pub extern "C" fn ggml_op_alloc_size_may_expand(op: ggml_op) -> bool {
    alloc_size_may_expand(op)
}

/// See [`ggml_op_alloc_size_may_expand`].
pub fn alloc_size_may_expand(op: ggml_op) -> bool {
    matches!(
        OPS.op(op),
        Ok(Op::FlashAttnExt | Op::MulMat | Op::MulMatId | Op::Cumsum | Op::Argsort | Op::TopK)
    )
}

/// Allocates `tensors` in buffers of `buft`: the type's own `alloc_buffer_n`, or one buffer
/// per chunk of the list that fits the type's maximum size (a multi-buffer when there are
/// several). NULL when nothing needs memory or an allocation fails (then nothing is kept).
///
/// # Safety
/// `buft` is a live buffer type (NULL aborts); `tensors` points to `n_tensors` tensor pointers.
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_buft_alloc_buffer_n(
    buft: ggml_backend_buffer_type_t,
    tensors: *mut *mut ggml_tensor,
    n_tensors: c_int,
) -> ggml_backend_buffer_t {
    const F: &str = "ggml_backend_buft_alloc_buffer_n";
    let b = handle_arg!(buft, Buft, "ggml_backend_buft_alloc_buffer_n");
    if let Some(f) = b.iface().alloc_buffer_n {
        // SAFETY: vtable entry of a live buffer type, with the caller's list.
        return unsafe { f(buft, tensors, n_tensors) };
    }
    // SAFETY: this function's contract.
    let list = unsafe { tensor_list(tensors, n_tensors, F) };
    alloc_tensors(b, &list)
}

/// Bytes `ggml_backend_buft_alloc_buffer_n` allocates for `tensors`.
///
/// # Safety
/// `buft` is a live buffer type (NULL aborts); `tensors` points to `n_tensors` tensor pointers.
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_buft_get_alloc_size_n(
    buft: ggml_backend_buffer_type_t,
    tensors: *mut *mut ggml_tensor,
    n_tensors: c_int,
) -> usize {
    const F: &str = "ggml_backend_buft_get_alloc_size_n";
    let b = handle_arg!(buft, Buft, "ggml_backend_buft_get_alloc_size_n");
    if let Some(f) = b.iface().get_alloc_size_n {
        // SAFETY: vtable entry of a live buffer type, with the caller's list.
        return unsafe { f(buft, tensors, n_tensors) };
    }
    // SAFETY: this function's contract.
    let list = unsafe { tensor_list(tensors, n_tensors, F) };
    chunk::total(&chunk::plan(&padded_sizes(b, &list), b.max_size()))
}

/// What each tensor of `list` needs in a buffer of `buft`, padded to its alignment; 0 for
/// views and tensors already placed.
fn padded_sizes(buft: Buft, list: &[Tensor]) -> Vec<usize> {
    let align = buft.alignment().max(1);
    list.iter()
        .map(|&t| {
            if t.data().is_null() && t.view_src().is_none() {
                buft.alloc_size(t).next_multiple_of(align)
            } else {
                0
            }
        })
        .collect()
}

/// The default `alloc_buffer_n`: one buffer per chunk of the list (`chunk::plan`), tensors
/// placed one after another, views initialised in their source's buffer.
fn alloc_tensors(buft: Buft, list: &[Tensor]) -> ggml_backend_buffer_t {
    const F: &str = "ggml_backend_buft_alloc_buffer_n";
    let chunks = chunk::plan(&padded_sizes(buft, list), buft.max_size());
    let mut buffers: Vec<Buffer> = Vec::with_capacity(chunks.len());
    let fail = |buffers: &[Buffer]| {
        for &b in buffers {
            // SAFETY: made above, referenced by no one but the tensors that fail with it.
            unsafe { crate::buffer::free(b) };
        }
        std::ptr::null_mut()
    };
    for c in &chunks {
        // SAFETY: a buffer just returned by the buffer type, or NULL.
        let Some(buffer) = (unsafe { Buffer::from_ptr(crate::buffer::alloc(buft, c.size)) }) else {
            log_error!(
                "{F}: failed to allocate {} buffer of size {}",
                buft.name_string(),
                c.size
            );
            return fail(&buffers);
        };
        buffers.push(buffer);
        // SAFETY: a live buffer; the allocator only reads its base, size and alignment.
        let mut talloc = unsafe { ggml_tallocr_new(buffer.as_ptr()) };
        for &t in &list[c.first..c.last] {
            let status = match (t.data().is_null(), t.view_src(), t.buffer().is_null()) {
                // SAFETY: the allocator and a tensor of the caller's list, both live.
                (true, None, _) => unsafe { ggml_tallocr_alloc(&mut talloc, t.as_ptr()) },
                (_, Some(_), true) => crate::backend::view_init(t),
                _ => GGML_STATUS_SUCCESS,
            };
            if status != GGML_STATUS_SUCCESS {
                log_error!("{F}: failed to initialize tensor {}", t.name_string());
                return fail(&buffers);
            }
        }
    }
    match buffers.len() {
        0 => std::ptr::null_mut(),
        1 => buffers[0].as_ptr(),
        _ => crate::buffer::multi::alloc(buffers).as_ptr(),
    }
}

/// The meta buffer type's `alloc_buffer_n`: each device holds only its slices.
unsafe extern "C" fn meta_buft_alloc_buffer_n(
    buft: ggml_backend_buffer_type_t,
    tensors: *mut *mut ggml_tensor,
    n_tensors: c_int,
) -> ggml_backend_buffer_t {
    const F: &str = "ggml_backend_buft_alloc_buffer_n";
    // SAFETY: ggml calls this entry with the buffer type it belongs to.
    let Some(dev) = unsafe { Buft::from_ptr(buft) }.and_then(crate::meta::device::of_buft) else {
        abort(file!(), line!(), &format!("{F}: not a meta buffer type"))
    };
    // SAFETY: ggml_backend_buft_alloc_buffer_n's contract, which called this entry.
    let list = unsafe { tensor_list(tensors, n_tensors, F) };
    // A name policy (plugin devices) decides a layer's splits from all of its tensors.
    for &t in &list {
        dev.observe(t);
    }
    crate::meta::buffer_iface::alloc_tensors(list, dev)
}

/// The caller's tensor list, every entry checked non-NULL.
///
/// # Safety
/// `tensors` points to `n` tensor pointers (or is anything when `n` is 0).
unsafe fn tensor_list(tensors: *mut *mut ggml_tensor, n: c_int, func: &str) -> Vec<Tensor> {
    let Ok(n) = usize::try_from(n) else {
        abort(file!(), line!(), &format!("{func}: n_tensors is {n}"))
    };
    if n == 0 {
        return Vec::new();
    }
    if tensors.is_null() {
        null_argument(func, "tensors");
    }
    // SAFETY: `tensors` is non-NULL and points to `n` pointers (this function's contract).
    let raw = unsafe { std::slice::from_raw_parts(tensors, n) };
    raw.iter()
        .enumerate()
        .map(|(i, &t)| {
            // SAFETY: a non-NULL entry names a live tensor (the caller's contract).
            unsafe { Tensor::from_ptr(t) }.unwrap_or_else(|| {
                abort(file!(), line!(), &format!("{func}: tensors[{i}] is NULL"))
            })
        })
        .collect()
}

// ---------------------------------------------------------------------------------------
// scheduler
// ---------------------------------------------------------------------------------------

/// `ggml_backend_sched` of this version: flash attention is not placed by its sinks, splits
/// take any number of inputs, every input leaf gets pipeline copies, a failed re-plan fails,
/// and splits are ordered by events after each of them.
pub const SCHED_POLICY: crate::sched::Policy = crate::sched::Policy {
    assign: ggml_backend_rs_core::assign::Policy {
        flash_attn_follows_weights: false,
    },
    partition: ggml_backend_rs_core::partition::Policy {
        max_inputs: None,
        graph_inputs: ggml_backend_rs_core::partition::GraphInputs::AllLeafs,
    },
    alloc_graph_size: crate::sched::AllocGraphSize::Counted,
    failed_reserve_fails: true,
    wait_before_split_without_inputs: true,
    event_after_every_split: true,
    debug_op_desc: true,
};
