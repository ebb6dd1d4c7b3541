//! The C objects of a meta device: the device, its buffer type and a small private registry,
//! with their vtables. Each entry finds its [`MetaDevice`] by address and calls the state's
//! methods, the meta backend or the meta buffers.
//!
//! One meta device exists per (simple devices in order, callback, userdata): asking again
//! returns the same device. Devices, buffer types and the registry live for the process.
//! The meta device is not listed by the global registry (as upstream), but it has a registry
//! of its own whose only entries forward `ggml_backend_set_n_threads` and
//! `ggml_backend_set_abort_callback` to the simple backends, so that libllama's thread count
//! reaches CPU devices inside a meta device.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::ptr;
use std::sync::Mutex;

use ggml_backend_rs_core::names::NamePolicy;

use super::device::{of_buft, Face, MetaDevice, Policy};
use crate::abi::log::{abort, ggml_assert};
use crate::abi::*;
use crate::registry::{c_name, StaticReg};

type Key = (Vec<usize>, usize, usize);
static DEVICES: Mutex<Vec<(Key, usize)>> = Mutex::new(Vec::new());

/// The meta device over `simple` (1..=16 devices) with the split-state callback.
pub fn get_or_create(
    simple: Vec<Device>,
    callback: ggml_backend_meta_get_split_state_t,
    userdata: *mut c_void,
) -> ggml_backend_dev_t {
    check_count(simple.len());
    let key: Key = (
        simple.iter().map(|d| d.as_ptr() as usize).collect(),
        callback.map_or(0, |f| f as usize),
        userdata as usize,
    );
    let mut devices = DEVICES.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, dev)) = devices.iter().find(|(k, _)| *k == key) {
        return *dev as ggml_backend_dev_t;
    }
    let n = simple.len();
    let names: Vec<String> = simple.iter().map(|d| d.name_string()).collect();
    let descs: Vec<String> = simple.iter().map(|d| d.description_string()).collect();
    let device = create(
        simple,
        Policy::Callback {
            callback,
            userdata: userdata as usize,
        },
        vec![1; n],
        Face::Meta,
        format!("Meta({})", names.join(",")),
        format!("Meta({})", descs.join(",")),
    );
    devices.push((key, device as usize));
    device
}

/// How a plugin device splits by tensor name.
pub struct NameSettings {
    /// The attention head size where the tensors do not tell it.
    pub head_dim: Option<i64>,
    /// Whether gated-delta-net layers are split.
    pub split_recurrent: bool,
}

/// A plugin device over `simple` named `name`, listed by `reg`, splitting by tensor name with
/// the members' relative shares `weights` (one each).
pub fn create_plugin(
    simple: Vec<Device>,
    weights: Vec<u64>,
    name: String,
    description: String,
    reg: ggml_backend_reg_t,
    settings: &NameSettings,
) -> ggml_backend_dev_t {
    check_count(simple.len());
    let device_id = simple.first().and_then(|d| {
        // SAFETY: a plain C struct of pointers, integers and bools: all-zero is a valid value.
        let mut p: ggml_backend_dev_props = unsafe { std::mem::zeroed() };
        d.props(&mut p);
        // SAFETY: a device's props strings are NULL or NUL-terminated and live as long as
        // the device; the id is copied at once.
        (!p.device_id.is_null()).then(|| unsafe { CStr::from_ptr(p.device_id) }.to_owned())
    });
    let n = simple.len();
    create(
        simple,
        Policy::Names(Box::new(Mutex::new({
            let p = NamePolicy::new(n, settings.head_dim)
                .with_conventions(crate::version::NAME_CONVENTIONS)
                .with_weights(&weights);
            if settings.split_recurrent {
                p
            } else {
                p.mirroring_recurrent()
            }
        }))),
        weights,
        Face::Plugin { device_id, reg },
        name,
        description,
    )
}

fn check_count(n: usize) {
    ggml_assert!(
        n > 0 && n <= GGML_BACKEND_META_MAX_DEVICES,
        "ggml_backend_meta_device: n_devs must be 1..={GGML_BACKEND_META_MAX_DEVICES}, got {n}"
    );
}

fn create(
    simple: Vec<Device>,
    policy: Policy,
    weights: Vec<u64>,
    face: Face,
    name: String,
    description: String,
) -> ggml_backend_dev_t {
    let reg = match &face {
        Face::Meta => registry(),
        Face::Plugin { reg, .. } => *reg,
    };
    let meta: &'static mut MetaDevice = Box::leak(Box::new(MetaDevice::new(
        simple,
        policy,
        weights,
        face,
        c_name(name),
        c_name(description),
    )));
    let ctx = meta as *mut MetaDevice as *mut c_void;
    let device = Box::leak(Box::new(ggml_backend_device {
        iface: DEVICE_IFACE,
        reg,
        context: ctx,
    })) as *mut ggml_backend_device;
    let buft = Box::leak(Box::new(ggml_backend_buffer_type {
        iface: BUFT_IFACE,
        device,
        context: ctx,
    })) as *mut ggml_backend_buffer_type;
    meta.device = device;
    meta.buft = buft;
    // SAFETY: the buffer type was just made and lives for the process.
    if let Some(b) = unsafe { Buft::from_ptr(buft) } {
        crate::buffer::allocate_empty(b);
    }
    super::device::DEVICES.push(super::device::Slot {
        device: device as usize,
        buft: buft as usize,
        meta,
    });
    device
}

/// The meta device behind a device vtable entry's argument: only meta devices carry that
/// vtable, so anything else is a caller's error.
fn meta(dev: ggml_backend_dev_t) -> &'static MetaDevice {
    super::device::device_at(dev as usize).unwrap_or_else(|| {
        abort(
            file!(),
            line!(),
            &format!("meta device vtable called with {dev:p}, which is not a meta device"),
        )
    })
}

/// The meta device behind a buffer type vtable entry's argument.
fn meta_of_buft(buft: ggml_backend_buffer_type_t) -> &'static MetaDevice {
    super::device::device_of_buft_at(buft as usize).unwrap_or_else(|| {
        abort(
            file!(),
            line!(),
            &format!(
                "meta buffer type vtable called with {buft:p}, which is not a meta buffer type"
            ),
        )
    })
}

// --- device vtable ------------------------------------------------------------------------

const DEVICE_IFACE: ggml_backend_device_i = ggml_backend_device_i {
    get_name: Some(dev_get_name),
    get_description: Some(dev_get_description),
    get_memory: Some(dev_get_memory),
    get_type: Some(dev_get_type),
    get_props: Some(dev_get_props),
    init_backend: Some(dev_init_backend),
    get_buffer_type: Some(dev_get_buffer_type),
    get_host_buffer_type: Some(dev_get_host_buffer_type),
    buffer_from_host_ptr: None,
    supports_op: Some(dev_supports_op),
    supports_buft: Some(dev_supports_buft),
    offload_op: None,
    event_new: None,
    event_free: None,
    event_synchronize: None,
};

unsafe extern "C" fn dev_get_name(dev: ggml_backend_dev_t) -> *const c_char {
    meta(dev).name.as_ptr()
}

unsafe extern "C" fn dev_get_description(dev: ggml_backend_dev_t) -> *const c_char {
    meta(dev).description.as_ptr()
}

/// The memory the split can place, in the device's unit (`memory::Shares`), not the sum of
/// the devices': a physical device listed twice is one pool, and a weighted split is bounded
/// by the member its shares fill first.
unsafe extern "C" fn dev_get_memory(dev: ggml_backend_dev_t, free: *mut usize, total: *mut usize) {
    let m = meta(dev);
    let (f, t) = m.shares().placeable(&m.memory_entries());
    // SAFETY: ggml_backend_dev_memory passes two writable `size_t`s.
    unsafe {
        *free = usize::try_from(f).unwrap_or(usize::MAX);
        *total = usize::try_from(t).unwrap_or(usize::MAX);
    }
}

unsafe extern "C" fn dev_get_type(dev: ggml_backend_dev_t) -> ggml_backend_dev_type_raw {
    meta(dev).device_type()
}

unsafe extern "C" fn dev_get_props(dev: ggml_backend_dev_t, props: *mut ggml_backend_dev_props) {
    let m = meta(dev);
    // SAFETY: ggml_backend_dev_get_props passes a writable props struct, ours for the call.
    let p = unsafe { &mut *props };
    p.name = m.name.as_ptr();
    p.description = m.description.as_ptr();
    p.type_ = m.device_type();
    p.device_id = match &m.face {
        Face::Plugin {
            device_id: Some(id),
            ..
        } => id.as_ptr(),
        _ => ptr::null(),
    };
    // SAFETY: `dev` is this meta device; both fields are writable.
    unsafe { dev_get_memory(dev, &mut p.memory_free, &mut p.memory_total) };
    // Asynchronous (and file-mapped weights) only if every simple device is; no host
    // buffers, host pointers or events of its own.
    let simple_caps: Vec<ggml_backend_dev_caps> = m
        .simple
        .iter()
        .map(|d| {
            // SAFETY: a plain C struct of pointers, integers and bools: all-zero is a valid
            // value.
            let mut sp: ggml_backend_dev_props = unsafe { std::mem::zeroed() };
            d.props(&mut sp);
            sp.caps
        })
        .collect();
    p.caps.async_ = simple_caps.iter().all(|c| c.async_);
    // Weights reach the devices through set_tensor from wherever libllama reads them.
    p.caps
        .set_mmap_support(simple_caps.iter().all(|c| c.mmap_support()));
    p.caps.host_buffer = false;
    p.caps.buffer_from_host_ptr = false;
    p.caps.events = false;
}

unsafe extern "C" fn dev_init_backend(
    dev: ggml_backend_dev_t,
    params: *const c_char,
) -> ggml_backend_t {
    // SAFETY: `params` is the caller's NUL-terminated string or NULL
    // (ggml_backend_dev_init's contract).
    unsafe { super::backend::init(meta(dev), params) }
}

unsafe extern "C" fn dev_get_buffer_type(dev: ggml_backend_dev_t) -> ggml_backend_buffer_type_t {
    meta(dev).buft
}

unsafe extern "C" fn dev_get_host_buffer_type(
    dev: ggml_backend_dev_t,
) -> ggml_backend_buffer_type_t {
    // A host buffer type common to every simple device, if there is one.
    let m = meta(dev);
    let first = m.simple[0].host_buffer_type();
    if !first.is_null() && m.simple.iter().all(|d| d.host_buffer_type() == first) {
        first
    } else {
        ptr::null_mut()
    }
}

unsafe extern "C" fn dev_supports_op(dev: ggml_backend_dev_t, op: *const ggml_tensor) -> bool {
    // SAFETY: ggml_backend_dev_supports_op passes NULL or a live tensor.
    let Some(t) = (unsafe { Tensor::from_ptr(op as *mut ggml_tensor) }) else {
        return false;
    };
    let m = meta(dev);
    // libllama asks about an op on each weight before it allocates any (to choose its buffer
    // type): seeing them all then lets a name policy decide a layer's split on the whole layer
    // when the first of its tensors is sized (`buft_get_alloc_size`). Only sources without
    // data: the weights of a graph being scheduled were seen when they were allocated.
    for src in t.srcs().filter(|s| s.data().is_null()) {
        m.observe(src);
    }
    m.check_rope(t);
    let supported = m.simple.iter().all(|d| d.supports_op(t));
    if !supported {
        m.check_recurrent(t);
    }
    supported
}

unsafe extern "C" fn dev_supports_buft(
    dev: ggml_backend_dev_t,
    buft: ggml_backend_buffer_type_t,
) -> bool {
    // Only meta buffer types over the same simple devices, in the same order.
    // SAFETY: ggml_backend_dev_supports_buft passes NULL or a live buffer type.
    let Some(b) = (unsafe { Buft::from_ptr(buft) }) else {
        return false;
    };
    match of_buft(b) {
        Some(other) => other.simple == meta(dev).simple,
        None => false,
    }
}

// --- buffer type vtable -------------------------------------------------------------------

// Where buffer types take tensor lists (fact `list-alloc`), a context's tensors arrive as one
// list and each device gets its slices; else ggml-alloc calls the exported
// `ggml_backend_meta_alloc_ctx_tensors_from_buft`, which does the same.
#[allow(clippy::needless_update)] // without the fact every entry is named here
const BUFT_IFACE: ggml_backend_buffer_type_i = ggml_backend_buffer_type_i {
    get_name: Some(buft_get_name),
    alloc_buffer: Some(buft_alloc_buffer),
    get_alignment: Some(buft_get_alignment),
    get_max_size: Some(buft_get_max_size),
    get_alloc_size: Some(buft_get_alloc_size),
    is_host: Some(buft_is_host),
    ..ggml_backend_buffer_type_i::EMPTY
}
.with_alloc_buffer_n(buft_alloc_buffer_n);

/// `alloc_buffer_n`: each device holds only its slices.
unsafe extern "C" fn buft_alloc_buffer_n(
    buft: ggml_backend_buffer_type_t,
    tensors: *mut *mut ggml_tensor,
    n_tensors: c_int,
) -> ggml_backend_buffer_t {
    const F: &str = "ggml_backend_buft_alloc_buffer_n";
    let dev = meta_of_buft(buft);
    // SAFETY: ggml_backend_buft_alloc_buffer_n's contract, which called this entry.
    let list = unsafe { tensor_list(tensors, n_tensors, F) };
    // A name policy (plugin devices) decides a layer's splits from all of its tensors.
    for &t in &list {
        dev.observe(t);
    }
    super::buffer_iface::alloc_tensors(list, dev)
}

unsafe extern "C" fn buft_get_name(buft: ggml_backend_buffer_type_t) -> *const c_char {
    meta_of_buft(buft).name.as_ptr()
}

unsafe extern "C" fn buft_alloc_buffer(
    buft: ggml_backend_buffer_type_t,
    size: usize,
) -> ggml_backend_buffer_t {
    let m = meta_of_buft(buft);
    if m.is_plugin() {
        super::buffer_iface::alloc_deferred(m, size)
    } else {
        super::buffer_iface::alloc(m, size)
    }
}

unsafe extern "C" fn buft_get_alignment(buft: ggml_backend_buffer_type_t) -> usize {
    meta_of_buft(buft).device_alignment()
}

unsafe extern "C" fn buft_get_max_size(buft: ggml_backend_buffer_type_t) -> usize {
    let m = meta_of_buft(buft);
    m.simple_bufts()
        .map(|b| b.max_size())
        .min()
        .unwrap_or(usize::MAX)
}

unsafe extern "C" fn buft_get_alloc_size(
    buft: ggml_backend_buffer_type_t,
    t: *const ggml_tensor,
) -> usize {
    // What the tensor takes on the devices, in the device's unit (`slices::alloc_size`).
    let m = meta_of_buft(buft);
    // SAFETY: ggml_backend_buft_get_alloc_size passes NULL or a live tensor.
    let Some(t) = (unsafe { Tensor::from_ptr(t as *mut ggml_tensor) }) else {
        return 0;
    };
    // ggml-alloc asks the size of every tensor of a context before it places them (per chunk,
    // when the buffer type has a maximum size: the name policy's decisions stay consistent then
    // too, see its module documentation).
    m.observe(t);
    super::slices::alloc_size(m, t)
}

unsafe extern "C" fn buft_is_host(_buft: ggml_backend_buffer_type_t) -> bool {
    // Never: a meta tensor's `data` is a placeholder, its bytes live on the simple devices.
    false
}

// --- private registry ---------------------------------------------------------------------

static REG: StaticReg = StaticReg::new(ggml_backend_reg_i {
    get_name: Some(reg_get_name),
    get_device_count: Some(reg_get_device_count),
    get_device: Some(reg_get_device),
    get_proc_address: Some(reg_get_proc_address),
});

fn registry() -> ggml_backend_reg_t {
    REG.as_ptr()
}

unsafe extern "C" fn reg_get_name(_reg: ggml_backend_reg_t) -> *const c_char {
    c"Meta".as_ptr()
}

unsafe extern "C" fn reg_get_device_count(_reg: ggml_backend_reg_t) -> usize {
    // Meta devices are created on demand, not enumerated.
    0
}

unsafe extern "C" fn reg_get_device(_reg: ggml_backend_reg_t, index: usize) -> ggml_backend_dev_t {
    abort(
        file!(),
        line!(),
        &format!("ggml_backend_reg_dev_get: the meta registry lists no devices (index {index})"),
    )
}

unsafe extern "C" fn reg_get_proc_address(
    _reg: ggml_backend_reg_t,
    name: *const c_char,
) -> *mut c_void {
    if name.is_null() {
        return ptr::null_mut();
    }
    // SAFETY: non-null, and NUL-terminated by ggml_backend_reg_get_proc_address's contract.
    proc_address(unsafe { CStr::from_ptr(name) })
}

/// The registry functions of meta devices (and of the plugin's devices).
pub fn proc_address(name: &CStr) -> *mut c_void {
    match name.to_bytes() {
        b"ggml_backend_set_n_threads" => super::backend::set_n_threads as *mut c_void,
        b"ggml_backend_set_abort_callback" => super::backend::set_abort_callback as *mut c_void,
        _ => ptr::null_mut(),
    }
}
