//! The meta device, its buffer type and its private registry.
//!
//! One meta device exists per (simple devices in order, callback, userdata): asking again
//! returns the same device. Devices, buffer types and the registry live for the process.
//! The meta device is not listed by the global registry (as upstream), but it has a registry
//! of its own whose only entries forward `ggml_backend_set_n_threads` and
//! `ggml_backend_set_abort_callback` to the simple backends, so that libllama's thread count
//! reaches CPU devices inside a meta device.

use std::ffi::{c_char, c_void, CString};
use std::ptr;
use std::sync::Mutex;

use super::split::{RawSplitState, Split, StateError};
use crate::abi::*;
use crate::log::{abort, ggml_assert};

/// Everything a meta device knows. Reached from the C objects' `context` pointers.
pub struct MetaDevice {
    pub simple: Vec<Device>,
    callback: ggml_backend_meta_get_split_state_t,
    userdata: usize,
    name: CString,
    description: CString,
    /// The C device object (for `buft.device` and backends).
    pub device: ggml_backend_dev_t,
    /// The meta buffer type of this device.
    pub buft: ggml_backend_buffer_type_t,
}

// SAFETY: the simple device handles are shared by design (ggml devices are process-wide);
// the callback and userdata are only called/passed, as the C API expects.
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
    ggml_assert!(
        !simple.is_empty() && simple.len() <= GGML_BACKEND_META_MAX_DEVICES,
        "ggml_backend_meta_device: n_devs must be 1..={GGML_BACKEND_META_MAX_DEVICES}, got {}",
        simple.len()
    );
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
    let meta: &'static mut MetaDevice = Box::leak(Box::new(MetaDevice {
        simple,
        callback,
        userdata: userdata as usize,
        name: cstring(format!("Meta({})", names.join(","))),
        description: cstring(format!("Meta({})", descs.join(","))),
        device: ptr::null_mut(),
        buft: ptr::null_mut(),
    }));
    let ctx = meta as *mut MetaDevice as *mut c_void;
    let device = Box::leak(Box::new(ggml_backend_device {
        iface: DEVICE_IFACE,
        reg: registry(),
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
    devices.push((key, device as usize));
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
        let Some(cb) = self.callback else {
            return Ok(Split::Mirrored);
        };
        // SAFETY: the callback has the C type declared in ggml-ext.h; it is called with a live
        // tensor and the userdata it was registered with. Its result is read through
        // `RawSplitState`, the same layout with the axis as a plain integer, so an invalid
        // axis value from C is an error here rather than an invalid Rust enum.
        let raw: RawSplitState = unsafe {
            let f: unsafe extern "C" fn(*const ggml_tensor, *mut c_void) -> RawSplitState =
                std::mem::transmute(cb);
            f(t.as_ptr(), self.userdata as *mut c_void)
        };
        let ne = [t.ne(0), t.ne(1), t.ne(2), t.ne(3)];
        let blck = t.blck_size();
        Split::from_raw(&raw, ne, self.n(), |axis| if axis == 0 { blck } else { 1 })
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

unsafe extern "C" fn dev_get_type(_dev: ggml_backend_dev_t) -> ggml_backend_dev_type {
    ggml_backend_dev_type::GGML_BACKEND_DEVICE_TYPE_META
}

unsafe extern "C" fn dev_get_props(dev: ggml_backend_dev_t, props: *mut ggml_backend_dev_props) {
    let m = meta(dev);
    // SAFETY: ggml_backend_dev_get_props passes a writable props struct, ours for the call.
    let p = unsafe { &mut *props };
    p.name = m.name.as_ptr();
    p.description = m.description.as_ptr();
    p.type_ = ggml_backend_dev_type::GGML_BACKEND_DEVICE_TYPE_META;
    p.device_id = ptr::null();
    // SAFETY: `dev` is this meta device; both fields are writable.
    unsafe { dev_get_memory(dev, &mut p.memory_free, &mut p.memory_total) };
    // Asynchronous only if every simple device is; no host buffers, host pointers or events
    // of its own.
    p.caps.async_ = m.simple.iter().all(|d| {
        // SAFETY: a plain C struct of pointers, integers and bools: all-zero is a valid value.
        let mut sp: ggml_backend_dev_props = unsafe { std::mem::zeroed() };
        d.props(&mut sp);
        sp.caps.async_
    });
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
    meta(dev).simple.iter().all(|d| d.supports_op(t))
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

const BUFT_IFACE: ggml_backend_buffer_type_i = ggml_backend_buffer_type_i {
    get_name: Some(buft_get_name),
    alloc_buffer: Some(buft_alloc_buffer),
    get_alignment: Some(buft_get_alignment),
    get_max_size: Some(buft_get_max_size),
    get_alloc_size: Some(buft_get_alloc_size),
    is_host: Some(buft_is_host),
};

unsafe extern "C" fn buft_get_name(buft: ggml_backend_buffer_type_t) -> *const c_char {
    meta_of_buft(buft).name.as_ptr()
}

unsafe extern "C" fn buft_alloc_buffer(
    buft: ggml_backend_buffer_type_t,
    size: usize,
) -> ggml_backend_buffer_t {
    super::buffer::alloc(meta_of_buft(buft), size)
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
    m.simple_bufts().map(|b| b.alloc_size(t)).max().unwrap_or(0)
}

unsafe extern "C" fn buft_is_host(_buft: ggml_backend_buffer_type_t) -> bool {
    // Never: a meta tensor's `data` is a placeholder, its bytes live on the simple devices.
    false
}

// --- private registry ---------------------------------------------------------------------

struct StaticReg(std::cell::UnsafeCell<ggml_backend_reg>);
// SAFETY: initialised at compile time, never written.
unsafe impl Sync for StaticReg {}

static REG: StaticReg = StaticReg(std::cell::UnsafeCell::new(ggml_backend_reg {
    api_version: GGML_BACKEND_API_VERSION,
    iface: ggml_backend_reg_i {
        get_name: Some(reg_get_name),
        get_device_count: Some(reg_get_device_count),
        get_device: Some(reg_get_device),
        get_proc_address: Some(reg_get_proc_address),
    },
    context: ptr::null_mut(),
}));

fn registry() -> ggml_backend_reg_t {
    REG.0.get()
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
    match unsafe { std::ffi::CStr::from_ptr(name) }.to_bytes() {
        b"ggml_backend_set_n_threads" => super::backend::set_n_threads as *mut c_void,
        b"ggml_backend_set_abort_callback" => super::backend::set_abort_callback as *mut c_void,
        _ => ptr::null_mut(),
    }
}
