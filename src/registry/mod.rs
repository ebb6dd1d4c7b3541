//! The backend registry: the process-wide list of backend registries and their devices.
//!
//! Backends compiled into the build are registered on first use. Their list comes from target
//! `ggml` (`ggml_backend_rs_builtin_regs`, see `cmake/ggml-backend-rs-builtins.c`), which hands
//! it over when its library loads ([`set_builtin_list`]), so the list is found however the
//! library was loaded (Python's ctypes keeps it out of the global scope); else it is looked up in
//! the process. A process without it (this crate's `libggml_backend_rs.so` linked in place of
//! upstream's backend files) gets the backends whose registration functions
//! (`ggml_backend_<name>_reg`) it finds instead, in upstream's order. Others are added with
//! `ggml_backend_register`, `ggml_backend_device_register` or loaded from shared libraries
//! ([`loader`]).
//!
//! A backend of this library can take the place of another library's registry (our RPC client
//! for upstream's): it adds a [`Substitute`] when the library loads ([`substitute_with`]), and
//! every registry added is listed as the substitutes say.

pub mod loader;

use std::sync::{Arc, Mutex, MutexGuard, Once};

use crate::abi::log::log_debug;
use crate::abi::*;
use crate::version;
use ggml_backend_rs_core::owned::lock;

/// `ggml_backend_rs_builtin_regs`, provided by the build (target `ggml`): writes up to
/// `capacity` registries of the compiled-in backends to `regs` and returns how many there are.
pub type BuiltinRegs =
    unsafe extern "C" fn(regs: *mut ggml_backend_reg_t, capacity: usize) -> usize;

/// The builtin list target `ggml` handed over when it loaded (see the module documentation).
static BUILTIN_LIST: std::sync::OnceLock<BuiltinRegs> = std::sync::OnceLock::new();

/// Takes the builtin list from target `ggml`; the first one given counts (a process has one
/// ggml build). Used when the registry is first read.
pub fn set_builtin_list(list: BuiltinRegs) {
    let _ = BUILTIN_LIST.set(list);
}

/// Given a registry being added, the registry to list in its place (itself, when it is not the
/// one the substitute replaces).
pub type Substitute = fn(Reg) -> Reg;

static SUBSTITUTES: Mutex<Vec<Substitute>> = Mutex::new(Vec::new());

/// Adds a substitute: backends call it when the library is loaded, before any registry is.
pub fn substitute_with(s: Substitute) {
    lock(&SUBSTITUTES).push(s);
}

/// `reg` as the substitutes list it.
fn substituted(reg: Reg) -> Reg {
    let subs = lock(&SUBSTITUTES).clone();
    subs.iter().fold(reg, |r, s| s(r))
}

/// A registry object of the library's own (the meta devices', the plugin's) that lives for the
/// process: built at compile time, never written, read by C through [`StaticReg::as_ptr`].
pub struct StaticReg(std::cell::UnsafeCell<ggml_backend_reg>);

// SAFETY: the object is initialised at compile time and never written; sharing its address
// between threads only lets C read it.
unsafe impl Sync for StaticReg {}

impl StaticReg {
    /// A registry of backend API version `GGML_BACKEND_API_VERSION` with `iface` and no context.
    pub const fn new(iface: ggml_backend_reg_i) -> StaticReg {
        StaticReg(std::cell::UnsafeCell::new(ggml_backend_reg {
            api_version: crate::version::GGML_BACKEND_API_VERSION,
            iface,
            context: std::ptr::null_mut(),
        }))
    }

    pub fn as_ptr(&self) -> ggml_backend_reg_t {
        self.0.get()
    }
}

/// A name for a C object of ours (a device, a registry, a buffer type): a NUL inside it, which
/// C would take for its end, becomes a space.
pub fn c_name(name: String) -> std::ffi::CString {
    std::ffi::CString::new(name.replace('\0', " ")).unwrap_or_default()
}

/// A backend's registration function, `ggml_backend_reg_t ggml_backend_<name>_reg(void)`.
type RegFn = unsafe extern "C" fn() -> ggml_backend_reg_t;

/// The registration functions a build can compile in, in the order upstream registers them
/// (Vulkan unless `GGML_DISABLE_VULKAN` is set, as upstream).
const REG_FUNCTIONS: &[&[u8]] = &[
    b"ggml_backend_cuda_reg\0",
    b"ggml_backend_metal_reg\0",
    b"ggml_backend_sycl_reg\0",
    b"ggml_backend_vk_reg\0",
    b"ggml_backend_webgpu_reg\0",
    b"ggml_backend_zdnn_reg\0",
    b"ggml_backend_virtgpu_reg\0",
    b"ggml_backend_opencl_reg\0",
    b"ggml_backend_zendnn_reg\0",
    b"ggml_backend_hexagon_reg\0",
    b"ggml_backend_cann_reg\0",
    b"ggml_backend_blas_reg\0",
    b"ggml_backend_rpc_reg\0",
    b"ggml_backend_openvino_reg\0",
    // ggml 0.26 on; absent from older processes
    b"ggml_backend_et_reg\0",
    b"ggml_backend_cpu_reg\0",
];

struct Entry {
    reg: Reg,
    /// The shared library the backend came from; dropping it unloads the library.
    library: Option<libloading::Library>,
}

struct Registry {
    backends: Vec<Entry>,
    devices: Vec<Device>,
    /// Shared copy of `devices` for lookups, rebuilt after a change: lookups call backend
    /// callbacks and must not hold the lock, and backends look devices up on hot paths (e.g.
    /// from `supports_op`), where copying the list each time would cost an allocation.
    device_snapshot: Option<Arc<[Device]>>,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    backends: Vec::new(),
    devices: Vec::new(),
    device_snapshot: None,
});
static BUILTINS: Once = Once::new();

/// Locks the registry, registering the compiled-in backends the first time.
///
/// Backend callbacks (device enumeration, names) are never called while the lock is held,
/// so a backend may itself call registry functions from them.
fn registry() -> MutexGuard<'static, Registry> {
    ensure_builtins();
    lock_only()
}

fn ensure_builtins() {
    BUILTINS.call_once(|| {
        for reg in builtin_regs() {
            add(reg, None);
        }
    });
}

fn builtin_regs() -> Vec<Reg> {
    let process = libloading::os::unix::Library::this();
    let listed = match BUILTIN_LIST.get() {
        Some(&list) => Ok(list),
        None => {
            // SAFETY: the symbol, where the build defines it, has the type `BuiltinRegs`
            // declares.
            unsafe { process.get::<BuiltinRegs>(b"ggml_backend_rs_builtin_regs\0") }.map(|s| *s)
        }
    };
    let regs = match listed {
        Ok(list) => {
            // SAFETY: a NULL buffer with capacity 0 only asks for the count.
            let count = unsafe { list(std::ptr::null_mut(), 0) };
            let mut regs = vec![std::ptr::null_mut(); count];
            // SAFETY: `regs` has room for `count` entries.
            let written = unsafe { list(regs.as_mut_ptr(), count) }.min(count);
            regs.truncate(written);
            regs
        }
        Err(_) => {
            log_debug!(
                "ggml_backend_rs: no builtin list in the process; looking for backends' registration functions"
            );
            REG_FUNCTIONS
                .iter()
                .filter(|name| {
                    **name != b"ggml_backend_vk_reg\0"
                        || std::env::var_os("GGML_DISABLE_VULKAN").is_none()
                })
                .filter_map(|name| {
                    // SAFETY: every `ggml_backend_<name>_reg` has the type `RegFn` declares.
                    let f = unsafe { process.get::<RegFn>(name) }.ok()?;
                    // SAFETY: a registration function takes no arguments and may be called
                    // at any time; it returns its backend's registry or NULL.
                    Some(unsafe { f() })
                })
                .collect()
        }
    };
    // SAFETY: registries of compiled-in backends live for the whole process.
    regs.into_iter()
        .filter_map(|r| unsafe { Reg::from_ptr(r) })
        .collect()
}

/// Adds a backend registry and all its devices. `library` keeps a loaded plugin mapped.
pub fn register(reg: Reg, library: Option<libloading::Library>) {
    ensure_builtins();
    add(reg, library);
}

fn add(reg: Reg, library: Option<libloading::Library>) {
    let reg = substituted(reg);
    if version::REGISTRATION_IS_IDEMPOTENT && lock_only().backends.iter().any(|e| e.reg == reg) {
        return;
    }
    let devices = reg.devices();
    log_debug!(
        "ggml_backend_register: registered backend {} ({} devices)",
        reg.name_string(),
        devices.len()
    );
    for dev in &devices {
        log_debug!(
            "ggml_backend_register: registered device {}",
            dev.name_string()
        );
    }
    let mut r = lock_only();
    r.backends.push(Entry { reg, library });
    for dev in devices {
        if !(version::REGISTRATION_IS_IDEMPOTENT && r.devices.contains(&dev)) {
            r.devices.push(dev);
        }
    }
    r.device_snapshot = None;
}

/// Adds a single device (e.g. a meta device) to the device list.
pub fn register_device(device: Device) {
    if version::REGISTRATION_IS_IDEMPOTENT && registry().devices.contains(&device) {
        return;
    }
    log_debug!(
        "ggml_backend_device_register: registered device {}",
        device.name_string()
    );
    let mut r = registry();
    r.devices.push(device);
    r.device_snapshot = None;
}

/// The lock without the built-in registration, for use inside that registration.
fn lock_only() -> MutexGuard<'static, Registry> {
    REGISTRY
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Removes a registry and its devices; a dynamically loaded library is unloaded.
/// Returns false when `reg` is not registered.
pub fn unregister(reg: Reg) -> bool {
    let removed = {
        let mut r = registry();
        let Some(pos) = r.backends.iter().position(|e| e.reg == reg) else {
            return false;
        };
        r.devices.retain(|d| d.reg() != reg.as_ptr());
        r.device_snapshot = None;
        r.backends.remove(pos)
    };
    // Unload outside the lock: a library's destructors may call back into the registry.
    drop(removed.library);
    true
}

pub fn reg_count() -> usize {
    registry().backends.len()
}

pub fn reg_get(index: usize) -> Option<Reg> {
    registry().backends.get(index).map(|e| e.reg)
}

pub fn dev_count() -> usize {
    registry().devices.len()
}

pub fn dev_get(index: usize) -> Option<Device> {
    registry().devices.get(index).copied()
}

fn regs() -> Vec<Reg> {
    registry().backends.iter().map(|e| e.reg).collect()
}

fn devices() -> Arc<[Device]> {
    let mut r = registry();
    let r = &mut *r;
    r.device_snapshot
        .get_or_insert_with(|| r.devices.as_slice().into())
        .clone()
}

/// ASCII case-insensitive name comparison, as upstream.
fn same_name(a: &str, b: &[u8]) -> bool {
    a.as_bytes().eq_ignore_ascii_case(b)
}

pub fn reg_by_name(name: &[u8]) -> Option<Reg> {
    regs()
        .into_iter()
        .find(|r| same_name(&r.name_string(), name))
}

pub fn dev_by_name(name: &[u8]) -> Option<Device> {
    devices()
        .iter()
        .copied()
        .find(|d| same_name(&d.name_string(), name))
}

pub fn dev_by_type(ty: ggml_backend_dev_type_raw) -> Option<Device> {
    devices().iter().copied().find(|d| d.dev_type() == ty)
}

/// The first GPU, else the first integrated GPU, else the first CPU device.
pub fn best_device() -> Option<Device> {
    [DEVICE_GPU, DEVICE_IGPU, DEVICE_CPU]
        .into_iter()
        .find_map(dev_by_type)
}

#[cfg(test)]
mod tests {
    use super::same_name;

    #[test]
    fn names_compare_ascii_case_insensitively() {
        assert!(same_name("CUDA0", b"cuda0"));
        assert!(!same_name("CUDA0", b"cuda"));
        assert!(!same_name("CPU", b"CPUX"));
        assert!(same_name("", b""));
    }
}
