//! The meta device, its buffer type and its private registry.
//!
//! One meta device exists per (simple devices in order, callback, userdata): asking again
//! returns the same device. Devices, buffer types and the registry live for the process.
//! The meta device is not listed by the global registry (as upstream), but it has a registry
//! of its own whose only entries forward `ggml_backend_set_n_threads` and
//! `ggml_backend_set_abort_callback` to the simple backends, so that libllama's thread count
//! reaches CPU devices inside a meta device.
//!
//! The plugin's devices (`create_plugin`) are the same device with another [`Face`] (listed
//! by the plugin's registry, type GPU) and [`Policy`] (splits by tensor name).

use std::ffi::{c_char, c_void, CStr, CString};
use std::ptr;
use std::sync::Mutex;

use ggml_backend_rs_core::names::{Info, NamePolicy};

use super::lock;
use super::split::{Split, StateError};
use crate::abi::*;
use crate::log::{abort, ggml_assert};
use crate::registry::StaticReg;

/// How a meta device learns the splits of weights and caches.
pub enum Policy {
    /// The callback given to `ggml_backend_meta_device` (libllama's, in tensor mode); none
    /// mirrors everything.
    Callback {
        callback: ggml_backend_meta_get_split_state_t,
        userdata: usize,
    },
    /// Rules by GGUF tensor name, from the tensors allocated on the device (the plugin's
    /// devices: libllama sees them as plain devices and gives no callback). Boxed: the policy's
    /// tables are far larger than a callback.
    Names(Box<Mutex<NamePolicy>>),
}

/// What ggml sees of a meta device.
pub enum Face {
    /// `ggml_backend_meta_device`'s: type META, in a private registry, not enumerated.
    Meta,
    /// A plugin device, listed by the plugin's registry `reg`: type GPU, so that programs
    /// may name it, with `device_id` (its first simple device's) so that libllama's default
    /// device selection, which skips a second device with the id of one it has, keeps
    /// using the simple devices themselves.
    Plugin {
        device_id: Option<CString>,
        reg: ggml_backend_reg_t,
    },
}

/// Everything a meta device knows. Reached from the C objects' `context` pointers.
pub struct MetaDevice {
    pub simple: Vec<Device>,
    policy: Policy,
    face: Face,
    name: CString,
    description: CString,
    /// The C device object (for `buft.device` and backends).
    pub device: ggml_backend_dev_t,
    /// The meta buffer type of this device.
    pub buft: ggml_backend_buffer_type_t,
}

// SAFETY: the simple device handles are shared by design (ggml devices are process-wide);
// the callback and userdata are only called/passed, as the C API expects; the plugin's
// registry lives for the process; the name policy is behind its mutex.
unsafe impl Send for MetaDevice {}
// SAFETY: as for `Send` above: shared access goes through the same synchronisation.
unsafe impl Sync for MetaDevice {}

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
    let names: Vec<String> = simple.iter().map(|d| d.name_string()).collect();
    let descs: Vec<String> = simple.iter().map(|d| d.description_string()).collect();
    let device = create(
        simple,
        Policy::Callback {
            callback,
            userdata: userdata as usize,
        },
        Face::Meta,
        format!("Meta({})", names.join(",")),
        format!("Meta({})", descs.join(",")),
    );
    devices.push((key, device as usize));
    device
}

/// A plugin device over `simple` named `name`, listed by `reg`, splitting by tensor name
/// (`head_dim`: the head size where the tensors do not tell it; `split_recurrent`: whether
/// gated-delta-net layers are split).
pub fn create_plugin(
    simple: Vec<Device>,
    name: String,
    description: String,
    reg: ggml_backend_reg_t,
    head_dim: Option<i64>,
    split_recurrent: bool,
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
            let p = NamePolicy::new(n, head_dim).with_conventions(crate::version::NAME_CONVENTIONS);
            if split_recurrent {
                p
            } else {
                p.mirroring_recurrent()
            }
        }))),
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
    face: Face,
    name: String,
    description: String,
) -> ggml_backend_dev_t {
    let reg = match &face {
        Face::Meta => registry(),
        Face::Plugin { reg, .. } => *reg,
    };
    let meta: &'static mut MetaDevice = Box::leak(Box::new(MetaDevice {
        simple,
        policy,
        face,
        name: cstring(name),
        description: cstring(description),
        device: ptr::null_mut(),
        buft: ptr::null_mut(),
    }));
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
    super::DEVICES.push(super::Slot {
        device: device as usize,
        buft: buft as usize,
        meta,
    });
    device
}

fn cstring(s: String) -> CString {
    CString::new(s.replace('\0', " ")).unwrap_or_default()
}

impl MetaDevice {
    pub fn n(&self) -> usize {
        self.simple.len()
    }

    /// The split of a statically allocated tensor (weights, caches), from the callback.
    pub fn callback_split(&self, t: Tensor) -> Result<Split, StateError> {
        let ne = [t.ne(0), t.ne(1), t.ne(2), t.ne(3)];
        let blck = t.blck_size();
        let granule = |axis| if axis == 0 { blck } else { 1 };
        let (callback, userdata) = match &self.policy {
            Policy::Callback { callback, userdata } => (*callback, *userdata),
            Policy::Names(p) => {
                let raw = lock(p).split(&t.name_string(), Info { blck, ne });
                return Split::from_raw(&raw, ne, self.n(), granule);
            }
        };
        let Some(cb) = callback else {
            return Ok(Split::Mirrored);
        };
        // SAFETY: the callback has the C type of the version's header; it is called with a live
        // tensor and the userdata it was registered with. Its result's axis is a plain integer
        // (`ggml_backend_meta_split_axis_raw`), so an invalid value from C is an error below.
        let c = unsafe { cb(t.as_ptr(), userdata as *mut c_void) };
        let raw = crate::version::split_from_c(&c);
        Split::from_raw(&raw, ne, self.n(), granule)
    }

    /// Notes a tensor about to be allocated on the device, for a name policy (which needs
    /// a layer's other tensors to split any of them). Only leaves with names count:
    /// weights, caches and inputs, not the graph's intermediate results.
    pub fn observe(&self, t: Tensor) {
        if let Policy::Names(p) = &self.policy {
            if t.op_kind() == Some(ggml_backend_rs_core::Op::None) && t.view_src().is_none() {
                let info = Info {
                    blck: t.blck_size(),
                    ne: [t.ne(0), t.ne(1), t.ne(2), t.ne(3)],
                };
                lock(p).record(&t.name_string(), info);
            }
        }
    }

    pub fn is_plugin(&self) -> bool {
        matches!(self.face, Face::Plugin { .. })
    }

    fn simple_bufts(&self) -> impl Iterator<Item = Buft> + '_ {
        self.simple.iter().map(|d| {
            // SAFETY: buffer types returned by a device live as long as the device.
            unsafe { Buft::from_ptr(d.buffer_type()) }.unwrap_or_else(|| {
                abort(
                    file!(),
                    line!(),
                    &format!("device {} has no buffer type", d.name_string()),
                )
            })
        })
    }

    pub fn simple_buft(&self, j: usize) -> Buft {
        self.simple_bufts()
            .nth(j)
            .expect("index checked by the caller")
    }
}

/// The meta device of a C device, if it is one.
pub fn of_device(dev: Device) -> Option<&'static MetaDevice> {
    super::device_at(dev.as_ptr() as usize)
}

/// The meta device of a C buffer type, if it is a meta buffer type.
pub fn of_buft(buft: Buft) -> Option<&'static MetaDevice> {
    super::device_of_buft_at(buft.as_ptr() as usize)
}

/// The meta device behind a device vtable entry's argument: only meta devices carry that
/// vtable, so anything else is a caller's error.
fn meta(dev: ggml_backend_dev_t) -> &'static MetaDevice {
    super::device_at(dev as usize).unwrap_or_else(|| {
        abort(
            file!(),
            line!(),
            &format!("meta device vtable called with {dev:p}, which is not a meta device"),
        )
    })
}

/// The meta device behind a buffer type vtable entry's argument.
fn meta_of_buft(buft: ggml_backend_buffer_type_t) -> &'static MetaDevice {
    super::device_of_buft_at(buft as usize).unwrap_or_else(|| {
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

unsafe extern "C" fn dev_get_memory(dev: ggml_backend_dev_t, free: *mut usize, total: *mut usize) {
    let (mut f_sum, mut t_sum) = (0usize, 0usize);
    for d in &meta(dev).simple {
        let (mut f, mut t) = (0, 0);
        d.memory(&mut f, &mut t);
        f_sum = f_sum.saturating_add(f);
        t_sum = t_sum.saturating_add(t);
    }
    // SAFETY: ggml_backend_dev_memory passes two writable `size_t`s.
    unsafe {
        *free = f_sum;
        *total = t_sum;
    }
}

unsafe extern "C" fn dev_get_type(dev: ggml_backend_dev_t) -> ggml_backend_dev_type_raw {
    meta(dev).device_type()
}

impl MetaDevice {
    fn device_type(&self) -> ggml_backend_dev_type_raw {
        match self.face {
            Face::Meta => DEVICE_META,
            Face::Plugin { .. } => DEVICE_GPU,
        }
    }
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
    m.check_rope(t);
    let supported = m.simple.iter().all(|d| d.supports_op(t));
    if !supported {
        m.check_recurrent(t);
    }
    supported
}

impl MetaDevice {
    /// For a name policy: an op of a split gated-delta-net layer that the devices cannot run
    /// would run elsewhere and come back whole to consumers that are split, which no rule
    /// computes. The scheduler asks about every node when the context reserves its graphs:
    /// stop there, naming the op and the setting that keeps those layers whole.
    fn check_recurrent(&self, t: Tensor) {
        use ggml_backend_rs_core::Op;
        let Policy::Names(p) = &self.policy else {
            return;
        };
        if !matches!(
            t.op_kind(),
            Some(Op::GetRows | Op::Concat | Op::SsmConv | Op::GatedDeltaNet)
        ) {
            return;
        }
        let Some(layer) = node_layer(t) else {
            return;
        };
        if lock(p).splits_recurrent(layer) {
            let name = t.name_string();
            abort(
                file!(),
                line!(),
                &format!(
                    "{}: its devices cannot run {} ('{name}'), which layer {layer}'s gated delta \
                     net needs on each device when it is split: set \
                     GGML_BACKEND_RS_TP_RECURRENT=mirrored to compute those layers whole",
                    self.name.to_string_lossy(),
                    t.op_desc()
                ),
            );
        }
    }

    /// For a name policy: a rope node shows its layer's head size (its rows), which the
    /// weights' names and shapes may not have told. The scheduler asks about every node when
    /// the context reserves its graphs, so a split that cuts heads stops there, with a message
    /// that names the layer and the setting that fixes it, rather than in the first decode.
    fn check_rope(&self, t: Tensor) {
        let Policy::Names(p) = &self.policy else {
            return;
        };
        if t.op_kind() != Some(ggml_backend_rs_core::Op::Rope) {
            return;
        }
        let Some(layer) = node_layer(t) else {
            return;
        };
        if let Err(e) = lock(p).check_head_size(layer, t.ne(0)) {
            abort(
                file!(),
                line!(),
                &format!("{}: {e}", self.name.to_string_lossy()),
            );
        }
    }
}

/// The layer of a graph node: libllama names a layer's nodes "<name>-<layer>" ("Kcur-3").
fn node_layer(t: Tensor) -> Option<u32> {
    layer_of_name(&t.name_string()).or_else(|| {
        // Unnamed nodes (libllama of ggml 0.26 names fewer of them, e.g. `node_24`): the layer
        // of what they read, a named node (`conv_input-0`) or a cache (`cache_r_l0`), two
        // steps up at most.
        let mut near: Vec<Tensor> = t.view_src().into_iter().collect();
        for s in t.srcs() {
            near.push(s);
            near.extend(s.srcs());
            near.extend(s.view_src());
        }
        near.iter().find_map(|s| layer_of_name(&s.name_string()))
    })
}

/// The layer a tensor name carries: libllama's `<name>-<layer>` of graph nodes, or the
/// `<cache>_l<layer>` of its caches.
fn layer_of_name(name: &str) -> Option<u32> {
    let node = name.rsplit_once('-').and_then(|(_, l)| l.parse().ok());
    node.or_else(|| {
        let (_, l) = name.rsplit_once("_l")?;
        l.parse().ok()
    })
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

// The version's own entries complete the struct; a version may have none.
#[allow(clippy::needless_update)]
const BUFT_IFACE: ggml_backend_buffer_type_i = ggml_backend_buffer_type_i {
    get_name: Some(buft_get_name),
    alloc_buffer: Some(buft_alloc_buffer),
    get_alignment: Some(buft_get_alignment),
    get_max_size: Some(buft_get_max_size),
    get_alloc_size: Some(buft_get_alloc_size),
    is_host: Some(buft_is_host),
    ..crate::version::META_BUFT_ENTRIES
};

unsafe extern "C" fn buft_get_name(buft: ggml_backend_buffer_type_t) -> *const c_char {
    meta_of_buft(buft).name.as_ptr()
}

unsafe extern "C" fn buft_alloc_buffer(
    buft: ggml_backend_buffer_type_t,
    size: usize,
) -> ggml_backend_buffer_t {
    let m = meta_of_buft(buft);
    if m.is_plugin() {
        super::buffer::alloc_deferred(m, size)
    } else {
        super::buffer::alloc(m, size)
    }
}

unsafe extern "C" fn buft_get_alignment(buft: ggml_backend_buffer_type_t) -> usize {
    let m = meta_of_buft(buft);
    let align = m.simple_bufts().map(|b| b.alignment()).max().unwrap_or(1);
    for b in m.simple_bufts() {
        let a = b.alignment();
        ggml_assert!(
            a != 0 && align % a == 0,
            "meta buffer type: alignment {a} of {} does not divide {align}",
            b.name_string()
        );
    }
    align
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
    // The whole tensor's size: a meta buffer is laid out like an unsplit one, and every
    // device's slice fits at the same offset.
    let m = meta_of_buft(buft);
    // SAFETY: ggml_backend_buft_get_alloc_size passes NULL or a live tensor.
    let Some(t) = (unsafe { Tensor::from_ptr(t as *mut ggml_tensor) }) else {
        return 0;
    };
    // ggml-alloc asks the size of every tensor of a context before it places them (per chunk,
    // when the buffer type has a maximum size: the name policy's decisions stay consistent then
    // too, see its module documentation).
    m.observe(t);
    m.simple_bufts().map(|b| b.alloc_size(t)).max().unwrap_or(0)
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
