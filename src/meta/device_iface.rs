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

use std::ffi::{c_void, CStr};
use std::ptr;
use std::sync::Mutex;

use ggml_backend_rs_core::names::NamePolicy;

use super::device::{of_buft, Face, MetaDevice, Policy};
use crate::abi::log::{abort, ggml_assert, log_debug};
use crate::abi::object::{buft_iface, device_iface, reg_iface, CObject};
use crate::abi::*;
use crate::registry::{c_name, StaticReg};
use ggml_backend_rs_core::owned::lock;

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
    let mut devices = lock(&DEVICES);
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

// --- device vtable ------------------------------------------------------------------------

const DEVICE_IFACE: ggml_backend_device_i = device_iface!(MetaDevice {
    get_name,
    get_description,
    get_memory,
    get_type,
    get_props,
    init_backend,
    get_buffer_type,
    get_host_buffer_type,
    supports_op,
    supports_buft,
});

impl CObject for MetaDevice {
    const KIND: &'static str = "meta device";
    type Held = &'static MetaDevice;
    fn find(addr: usize) -> Option<&'static MetaDevice> {
        super::device::device_at(addr)
    }
}

impl MetaDevice {
    fn get_name(&self, _: Device) -> &CStr {
        &self.name
    }

    fn get_description(&self, _: Device) -> &CStr {
        &self.description
    }

    /// The memory the split can place, in the device's unit (`memory::Shares`), not the sum
    /// of the devices': a physical device listed twice is one pool, and a weighted split is
    /// bounded by the member its shares fill first.
    fn get_memory(&self, _: Device) -> (usize, usize) {
        let (f, t) = self.shares().placeable(&self.memory_entries());
        (
            usize::try_from(f).unwrap_or(usize::MAX),
            usize::try_from(t).unwrap_or(usize::MAX),
        )
    }

    fn get_type(&self, _: Device) -> ggml_backend_dev_type_raw {
        self.device_type()
    }

    fn get_props(&self, dev: Device, p: &mut ggml_backend_dev_props) {
        p.name = self.name.as_ptr();
        p.description = self.description.as_ptr();
        p.type_ = self.device_type();
        p.device_id = match &self.face {
            Face::Plugin {
                device_id: Some(id),
                ..
            } => id.as_ptr(),
            _ => ptr::null(),
        };
        (p.memory_free, p.memory_total) = self.get_memory(dev);
        // Asynchronous (and file-mapped weights) only if every simple device is; no host
        // buffers, host pointers or events of its own.
        let simple_caps: Vec<ggml_backend_dev_caps> = self
            .simple
            .iter()
            .map(|d| {
                // SAFETY: a plain C struct of pointers, integers and bools: all-zero is a
                // valid value.
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

    fn init_backend(this: &'static MetaDevice, _: Device, params: Option<&CStr>) -> ggml_backend_t {
        super::backend::init(this, params)
    }

    fn get_buffer_type(&self, _: Device) -> ggml_backend_buffer_type_t {
        self.buft
    }

    fn get_host_buffer_type(&self, _: Device) -> ggml_backend_buffer_type_t {
        // A host buffer type common to every simple device, if there is one.
        let first = self.simple[0].host_buffer_type();
        if !first.is_null() && self.simple.iter().all(|d| d.host_buffer_type() == first) {
            first
        } else {
            ptr::null_mut()
        }
    }

    fn supports_op(&self, _: Device, t: Tensor) -> bool {
        // libllama asks about an op on each weight before it allocates any (to choose its
        // buffer type): seeing them all then lets a name policy decide a layer's split on the
        // whole layer when the first of its tensors is sized (`get_alloc_size`). Only sources
        // without data: the weights of a graph being scheduled were seen when they were
        // allocated.
        for src in t.srcs().filter(|s| s.data().is_null()) {
            self.observe(src);
        }
        self.check_rope(t);
        let supported = self.simple.iter().all(|d| d.supports_op(t));
        if !supported {
            self.check_recurrent(t);
            return false;
        }
        // A plugin device refuses an op it cannot compute over its sources' splits, so that the
        // scheduler runs it elsewhere. (A linked meta device's caller, libllama, decides its
        // splits for the graphs it builds: a graph it cannot split stops when the context is
        // made, naming the node, rather than running piece by piece on another backend.)
        if self.is_plugin() && t.op_kind() != Some(ggml_backend_rs_core::Op::None) {
            if let Err(why) = super::facts::check_op(self, t) {
                // A split that cuts heads (the head size unknown) shows in a rope node above:
                // stop there with the setting that fixes it, as when the rope is asked first.
                for above in near_sources(t, 3) {
                    self.check_rope(above);
                }
                log_debug!("{}: not supported: {why}", self.name.to_string_lossy());
                return false;
            }
        }
        true
    }

    fn supports_buft(&self, _: Device, b: Buft) -> bool {
        // Only meta buffer types over the same simple devices, in the same order.
        match of_buft(b) {
            Some(other) => other.simple == self.simple,
            None => false,
        }
    }
}

/// The tensors `t` reads, through views, up to `depth` steps up.
fn near_sources(t: Tensor, depth: usize) -> Vec<Tensor> {
    let mut found: Vec<Tensor> = Vec::new();
    let mut level = vec![t];
    for _ in 0..depth {
        let next: Vec<Tensor> = level
            .iter()
            .flat_map(|x| x.srcs().chain(x.view_src()))
            .filter(|s| !found.contains(s))
            .collect();
        found.extend(&next);
        level = next;
    }
    found
}

// --- buffer type vtable -------------------------------------------------------------------

// Where buffer types take tensor lists (fact `list-alloc`), a context's tensors arrive as one
// list and each device gets its slices; else ggml-alloc calls the exported
// `ggml_backend_meta_alloc_ctx_tensors_from_buft`, which does the same.
const BUFT_IFACE: ggml_backend_buffer_type_i = buft_iface!(MetaBuft {
    get_name,
    alloc_buffer,
    alloc_buffer_n,
    get_alignment,
    get_max_size,
    get_alloc_size,
    is_host,
});

/// A meta device as its buffer type.
#[derive(Clone, Copy)]
struct MetaBuft(&'static MetaDevice);

impl CObject for MetaBuft {
    const KIND: &'static str = "meta buffer type";
    type Held = MetaBuft;
    fn find(addr: usize) -> Option<MetaBuft> {
        super::device::device_of_buft_at(addr).map(MetaBuft)
    }
}

impl MetaBuft {
    fn get_name(&self, _: Buft) -> &CStr {
        &self.0.name
    }

    fn alloc_buffer(&self, _: Buft, size: usize) -> ggml_backend_buffer_t {
        if self.0.is_plugin() {
            super::buffer_iface::alloc_deferred(self.0, size)
        } else {
            super::buffer_iface::alloc(self.0, size)
        }
    }

    /// Each device holds only its slices.
    fn alloc_buffer_n(&self, _: Buft, list: Vec<Tensor>) -> ggml_backend_buffer_t {
        // A name policy (plugin devices) decides a layer's splits from all of its tensors.
        for &t in &list {
            self.0.observe(t);
        }
        super::buffer_iface::alloc_tensors(list, self.0)
    }

    fn get_alignment(&self, _: Buft) -> usize {
        self.0.device_alignment()
    }

    fn get_max_size(&self, _: Buft) -> usize {
        self.0
            .simple_bufts()
            .map(|b| b.max_size())
            .min()
            .unwrap_or(usize::MAX)
    }

    /// What the tensor takes on the devices, in the device's unit (`slices::alloc_size`).
    fn get_alloc_size(&self, _: Buft, t: Tensor) -> usize {
        // ggml-alloc asks the size of every tensor of a context before it places them (per
        // chunk, when the buffer type has a maximum size: the name policy's decisions stay
        // consistent then too, see its module documentation).
        self.0.observe(t);
        super::slices::alloc_size(self.0, t)
    }

    fn is_host(&self, _: Buft) -> bool {
        // Never: a meta tensor's `data` is a placeholder, its bytes live on the simple devices.
        false
    }
}

// --- private registry ---------------------------------------------------------------------

static REG: StaticReg = StaticReg::new(reg_iface!(MetaReg {
    get_name,
    get_device_count,
    get_device,
    get_proc_address,
}));

fn registry() -> ggml_backend_reg_t {
    REG.as_ptr()
}

/// The registry of meta devices, which lists none.
struct MetaReg;

impl CObject for MetaReg {
    const KIND: &'static str = "meta registry";
    type Held = MetaReg;
    fn find(addr: usize) -> Option<MetaReg> {
        (addr == registry() as usize).then_some(MetaReg)
    }
}

impl MetaReg {
    fn get_name(&self, _: Reg) -> &CStr {
        c"Meta"
    }

    fn get_device_count(&self, _: Reg) -> usize {
        // Meta devices are created on demand, not enumerated.
        0
    }

    fn get_device(&self, _: Reg, index: usize) -> ggml_backend_dev_t {
        abort(
            file!(),
            line!(),
            &format!(
                "ggml_backend_reg_dev_get: the meta registry lists no devices (index {index})"
            ),
        )
    }

    fn get_proc_address(&self, _: Reg, name: &CStr) -> *mut c_void {
        proc_address(name)
    }
}

/// The registry functions of meta devices (and of the plugin's devices).
pub fn proc_address(name: &CStr) -> *mut c_void {
    match name.to_bytes() {
        b"ggml_backend_set_n_threads" => super::backend::set_n_threads as *mut c_void,
        b"ggml_backend_set_abort_callback" => super::backend::set_abort_callback as *mut c_void,
        _ => ptr::null_mut(),
    }
}
