//! The library as a backend plugin: tensor-parallel devices for a program built against
//! upstream ggml, loaded with `ggml_backend_load(path)` or `GGML_BACKEND_PATH`.
//!
//! The plugin build (`crates/plugin`, linked by CMake into `libggml-backend-rs-tp.so`) exports
//! only `ggml_backend_init` and `ggml_backend_score`; everything else, this library's own
//! `ggml_backend_*` functions included, is local to it, so nothing collides with the host's
//! backend layer. The host's objects (its devices, their buffers and backends) are used
//! through their vtables, as any ggml code does. Two functions of the host are needed by
//! name and found in the process's global scope: `ggml_backend_dev_count`/`_dev_get` (the
//! devices to build on) and `ggml_backend_buffer_init`/`_free`, which make and release every
//! buffer object from then on (see [`crate::buffer::HostBuffers`]).
//!
//! Devices: `GGML_BACKEND_RS_TP` lists them, `;` between devices and `,` between the host
//! devices of one (names as the host lists them, any case): `CPU,CPU` or
//! `CUDA0,CUDA1;CUDA2,CUDA3`. Unset, there is one device over all of the host's GPUs when
//! it has two or more, else none. They are named `TP0`, `TP1`, ... and have type GPU; a
//! device over GPUs carries its first GPU's device id, so libllama's default device
//! selection skips it (it keeps one device per id) and uses the GPUs as before, while
//! `--devices TP0` selects it. `GGML_BACKEND_RS_TP_SPLIT` gives each device's members their
//! shares of every split tensor, as `--tensor-split` does for libllama's own tensor mode and in
//! the same syntax as `GGML_BACKEND_RS_TP` (`3,1`, or `3,1;1,1` for two devices; unset or
//! empty for a device: even); a device whose shares do not match its members is left out.
//! A device reports its memory and sizes in the unit of `ggml_backend_rs_core::memory`: what
//! its members can place, a GPU listed twice counted once. `GGML_BACKEND_RS_TP_HEAD_DIM` gives the attention head size
//! where the model's tensors do not tell it (see `ggml_backend_rs_core::names`);
//! `GGML_BACKEND_RS_TP_RECURRENT=mirrored` keeps gated-delta-net layers whole on every device
//! (for devices that cannot run their ops).
//!
//! The registry's `get_proc_address` offers `ggml_backend_set_n_threads` and
//! `ggml_backend_set_abort_callback` (forwarded to the simple backends, which is how
//! libllama's thread count reaches CPU devices), and the meta API's inspection functions
//! (`ggml_backend_meta_get_split_state`, `ggml_backend_meta_buffer_simple_buffer`, ...) for
//! the plugin's objects: the host's own `ggml_backend_meta_*` do not know them.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::OnceLock;

use crate::abi::log::{log_error, log_info};
use crate::abi::object::{reg_iface, CObject};
use crate::abi::*;
use crate::buffer::{HostBuffers, HostFree, HostInit};
use crate::registry::StaticReg;
use ggml_backend_rs_core::abi_class::Mismatch;

type DevCount = unsafe extern "C" fn() -> usize;
type DevGet = unsafe extern "C" fn(usize) -> ggml_backend_dev_t;

/// The plugin's registry and its devices, made by the first [`init`].
struct Plugin {
    reg: ggml_backend_reg_t,
    devices: Vec<ggml_backend_dev_t>,
}

// SAFETY: the registry and devices are process-lifetime objects that are only read after
// `init` made them.
unsafe impl Send for Plugin {}
// SAFETY: as for `Send`.
unsafe impl Sync for Plugin {}

static PLUGIN: OnceLock<Option<Plugin>> = OnceLock::new();

/// `ggml_backend_score` of the plugin: usable (1) in a host of the ABI class it was built
/// for (the devices it builds on are the host's), 0 in any other.
pub fn score() -> c_int {
    c_int::from(host_class_matches())
}

/// `ggml_backend_init` of the plugin: its registry, or NULL when the host's ggml cannot be
/// found in the process or is of another ABI class (a log message says which function is
/// missing, or which versions differ).
pub fn init() -> ggml_backend_reg_t {
    // This library's panic hook is installed when the module loads (see
    // `crate::abi::log::keep_panic_hook`); the call only keeps its constructor linked.
    crate::abi::log::keep_panic_hook();
    PLUGIN
        .get_or_init(make)
        .as_ref()
        .map_or(std::ptr::null_mut(), |p| p.reg)
}

/// Whether the host is a ggml of [`crate::version::ABI_CLASS`]; asked once, and when it is
/// not, the one log line says why.
fn host_class_matches() -> bool {
    static MATCHES: OnceLock<bool> = OnceLock::new();
    *MATCHES.get_or_init(|| {
        let class = &crate::version::ABI_CLASS;
        let process = libloading::os::unix::Library::this();
        let has = |name: &CStr| {
            // SAFETY: only the symbol's presence is asked; nothing is called through it.
            unsafe { process.get::<*const c_void>(name.to_bytes_with_nul()) }.is_ok()
        };
        type Version = unsafe extern "C" fn() -> *const c_char;
        // SAFETY: `ggml_version` is `const char * (void)` in every ggml release; it returns a
        // static NUL-terminated string.
        let version = unsafe {
            process
                .get::<Version>(b"ggml_version\0")
                .ok()
                .map(|f| f())
                .filter(|p| !p.is_null())
                .map(|p| CStr::from_ptr(p).to_string_lossy().into_owned())
        };
        let Some(version) = version else {
            log_error!(
                "ggml-backend-rs plugin: the host process has no `ggml_version` in its global \
                 symbols (the plugin needs a program linked with ggml's shared libraries)"
            );
            return false;
        };
        let unlisted = crate::version::UNLISTED_RELEASE;
        let built = format!(
            "ggml {} (ABI class {})",
            class.releases_text(unlisted),
            class.name
        );
        let rebuild = "rebuild the plugin from the host's llama.cpp tree \
                       (cmake -DLLAMA_CPP_DIR=<that tree>)";
        match class.check(&version, unlisted, has) {
            Ok(()) => true,
            Err(Mismatch::Release(host)) => {
                log_error!(
                    "ggml-backend-rs plugin: built for {built}, but the host is ggml {host}: \
                     not loaded; {rebuild}"
                );
                false
            }
            Err(Mismatch::Export { name, present }) => {
                log_error!(
                    "ggml-backend-rs plugin: built for {built}; the host says ggml {version} but \
                     {} `{name}`, so its ABI is another: not loaded; {rebuild}",
                    if present { "defines" } else { "lacks" }
                );
                false
            }
        }
    })
}

fn make() -> Option<Plugin> {
    if !host_class_matches() {
        return None;
    }
    let process = libloading::os::unix::Library::this();
    // SAFETY: each name is a function of ggml's C API with the type given here; a host that
    // is a ggml build defines them (ggml-base and ggml). The copies outlive `process`: the
    // host's libraries stay loaded while it runs the plugin.
    let host = unsafe {
        (|| -> Result<(HostBuffers, DevCount, DevGet), &'static str> {
            let init = *process
                .get::<HostInit>(b"ggml_backend_buffer_init\0")
                .map_err(|_| "ggml_backend_buffer_init")?;
            let free = *process
                .get::<HostFree>(b"ggml_backend_buffer_free\0")
                .map_err(|_| "ggml_backend_buffer_free")?;
            let count = *process
                .get::<DevCount>(b"ggml_backend_dev_count\0")
                .map_err(|_| "ggml_backend_dev_count")?;
            let get = *process
                .get::<DevGet>(b"ggml_backend_dev_get\0")
                .map_err(|_| "ggml_backend_dev_get")?;
            Ok((HostBuffers { init, free }, count, get))
        })()
    };
    let (buffers, dev_count, dev_get) = match host {
        Ok(h) => h,
        Err(missing) => {
            log_error!(
                "ggml-backend-rs plugin: the host process has no `{missing}` in its global \
                 symbols (the plugin needs a program linked with ggml's shared libraries)"
            );
            return None;
        }
    };
    if !crate::buffer::use_host_buffers(buffers) {
        log_error!("ggml-backend-rs plugin: loaded into two different ggml builds at once");
        return None;
    }
    // SAFETY: the host's registry functions, called while it registers this plugin (its
    // list is complete up to here) and with indices below its count.
    let host_devices: Vec<Device> = unsafe {
        (0..dev_count())
            .filter_map(|i| Device::from_ptr(dev_get(i)))
            .collect()
    };
    let reg = registry();
    let head_dim = std::env::var("GGML_BACKEND_RS_TP_HEAD_DIM")
        .ok()
        .and_then(|v| v.trim().parse::<i64>().ok())
        .filter(|&h| h > 0);
    let split_recurrent = match std::env::var("GGML_BACKEND_RS_TP_RECURRENT") {
        Ok(v) if v.trim() == "mirrored" => false,
        Ok(v) if v.trim() == "split" || v.trim().is_empty() => true,
        Ok(v) => {
            log_error!(
                "ggml-backend-rs plugin: GGML_BACKEND_RS_TP_RECURRENT={v} is neither 'split' nor \
                 'mirrored'; splitting"
            );
            true
        }
        Err(_) => true,
    };
    let settings = crate::meta::device_iface::NameSettings {
        head_dim,
        split_recurrent,
    };
    let splits = std::env::var("GGML_BACKEND_RS_TP_SPLIT").unwrap_or_default();
    let mut splits = splits.split(';');
    let mut devices = Vec::new();
    for group in groups(&host_devices) {
        let names: Vec<String> = group.iter().map(|d| d.name_string()).collect();
        let description = format!("TP({})", names.join(","));
        let weights = match weights(splits.next().unwrap_or(""), group.len()) {
            Ok(w) => w,
            Err(e) => {
                log_error!(
                    "ggml-backend-rs plugin: GGML_BACKEND_RS_TP_SPLIT for {description}: {e}; \
                     device left out"
                );
                continue;
            }
        };
        let name = format!("TP{}", devices.len());
        log_info!("ggml-backend-rs plugin: {name} = {description}, shares {weights:?}");
        devices.push(crate::meta::device_iface::create_plugin(
            group,
            weights,
            name,
            description,
            reg,
            &settings,
        ));
    }
    Some(Plugin { reg, devices })
}

/// The relative shares of `n` members from one device's part of `GGML_BACKEND_RS_TP_SPLIT`
/// (proportions, as `--tensor-split`): whole numbers scaled so that the largest is 10^6, or
/// even for an empty part.
fn weights(spec: &str, n: usize) -> Result<Vec<u64>, String> {
    if spec.trim().is_empty() {
        return Ok(vec![1; n]);
    }
    let parts: Vec<f64> = spec
        .split(',')
        .map(|p| p.trim().parse::<f64>())
        .collect::<Result<_, _>>()
        .map_err(|_| format!("`{spec}` is not a list of numbers"))?;
    if parts.len() != n {
        return Err(format!(
            "`{spec}` gives {} shares for {n} devices",
            parts.len()
        ));
    }
    if parts.iter().any(|&p| !p.is_finite() || p <= 0.0) {
        return Err(format!(
            "`{spec}` has a share that is not a positive number"
        ));
    }
    let max = parts.iter().copied().fold(0.0, f64::max);
    Ok(parts
        .iter()
        .map(|&p| ((p / max * 1e6).round() as u64).max(1))
        .collect())
}

/// The simple devices of each plugin device (see the module documentation).
fn groups(host: &[Device]) -> Vec<Vec<Device>> {
    let Ok(spec) = std::env::var("GGML_BACKEND_RS_TP") else {
        let gpus: Vec<Device> = host
            .iter()
            .copied()
            .filter(|d| d.dev_type() == DEVICE_GPU)
            .collect();
        return if gpus.len() >= 2 { vec![gpus] } else { vec![] };
    };
    let mut out = Vec::new();
    for group in spec.split(';').map(str::trim).filter(|g| !g.is_empty()) {
        let mut members = Vec::new();
        for name in group.split(',').map(str::trim) {
            match host
                .iter()
                .find(|d| d.name_string().eq_ignore_ascii_case(name))
            {
                Some(d) => members.push(*d),
                None => {
                    log_error!(
                        "ggml-backend-rs plugin: GGML_BACKEND_RS_TP names `{name}`, which the \
                         host does not have; device `{group}` left out"
                    );
                    members.clear();
                    break;
                }
            }
        }
        if members.len() > GGML_BACKEND_META_MAX_DEVICES {
            log_error!(
                "ggml-backend-rs plugin: `{group}` has {} devices, at most {} fit one device",
                members.len(),
                GGML_BACKEND_META_MAX_DEVICES
            );
        } else if !members.is_empty() {
            out.push(members);
        }
    }
    out
}

// --- registry -----------------------------------------------------------------------------

static REG: StaticReg = StaticReg::new(reg_iface!(TpReg {
    get_name,
    get_device_count,
    get_device,
    get_proc_address,
}));

fn registry() -> ggml_backend_reg_t {
    REG.as_ptr()
}

/// The plugin's registry "TP", which lists its tensor-parallel devices.
struct TpReg;

impl CObject for TpReg {
    const KIND: &'static str = "TP registry";
    type Held = TpReg;
    fn find(addr: usize) -> Option<TpReg> {
        (addr == registry() as usize).then_some(TpReg)
    }
}

impl TpReg {
    fn devices(&self) -> &'static [ggml_backend_dev_t] {
        PLUGIN
            .get()
            .and_then(Option::as_ref)
            .map_or(&[], |p| p.devices.as_slice())
    }

    fn get_name(&self, _: Reg) -> &CStr {
        c"TP"
    }

    fn get_device_count(&self, _: Reg) -> usize {
        self.devices().len()
    }

    fn get_device(&self, _: Reg, index: usize) -> ggml_backend_dev_t {
        match self.devices().get(index) {
            Some(d) => *d,
            None => crate::abi::log::abort(
                file!(),
                line!(),
                &format!(
                    "ggml_backend_reg_dev_get: index {index} out of range (the TP registry has {} devices)",
                    self.devices().len()
                ),
            ),
        }
    }

    fn get_proc_address(&self, _: Reg, name: &CStr) -> *mut c_void {
        let f = crate::meta::device_iface::proc_address(name);
        if f.is_null() {
            crate::ffi::inspection_proc(name)
        } else {
            f
        }
    }
}

#[cfg(test)]
mod tests {
    use super::weights;

    #[test]
    fn split_shares_are_proportions_scaled_to_whole_numbers() {
        assert_eq!(weights("", 3), Ok(vec![1, 1, 1]));
        assert_eq!(weights(" 3, 1 ", 2), Ok(vec![1_000_000, 333_333]));
        assert_eq!(weights("0.75,0.25", 2), Ok(vec![1_000_000, 333_333]));
        assert_eq!(weights("1,1", 2), Ok(vec![1_000_000, 1_000_000]));
    }

    #[test]
    fn a_split_that_does_not_match_its_device_is_refused() {
        assert!(weights("3,1", 3)
            .unwrap_err()
            .contains("2 shares for 3 devices"));
        assert!(weights("3,x", 2)
            .unwrap_err()
            .contains("not a list of numbers"));
        assert!(weights("3,0", 2)
            .unwrap_err()
            .contains("not a positive number"));
        assert!(weights("3,-1", 2).is_err());
        assert!(weights("inf,1", 2).is_err());
    }
}
