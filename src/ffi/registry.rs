//! Backend registries and the global registry: `ggml_backend_reg_*`, device enumeration,
//! `ggml_backend_init_*` and dynamic loading.

use std::ffi::{c_char, c_void, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use super::{c_str_arg, handle_arg, optional_arg};
use crate::abi::log::{abort, log_error};
use crate::abi::*;
use crate::registry::{self, loader};

/// # Safety
/// `reg` is a live registry (NULL aborts).
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_reg_name(reg: ggml_backend_reg_t) -> *const c_char {
    handle_arg!(reg, Reg, "ggml_backend_reg_name").name()
}

/// # Safety
/// `reg` is a live registry (NULL aborts).
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_reg_dev_count(reg: ggml_backend_reg_t) -> usize {
    handle_arg!(reg, Reg, "ggml_backend_reg_dev_count").device_count()
}

/// # Safety
/// `reg` is a live registry (NULL aborts).
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_reg_dev_get(
    reg: ggml_backend_reg_t,
    index: usize,
) -> ggml_backend_dev_t {
    handle_arg!(reg, Reg, "ggml_backend_reg_dev_get").device(index)
}

/// # Safety
/// `reg` is a live registry (NULL aborts); `name` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_reg_get_proc_address(
    reg: ggml_backend_reg_t,
    name: *const c_char,
) -> *mut c_void {
    let r = handle_arg!(reg, Reg, "ggml_backend_reg_get_proc_address");
    // SAFETY: `name` is NULL or a NUL-terminated string (this function's contract).
    match unsafe { c_str_arg(name) } {
        Some(name) => r.proc_address(name),
        None => std::ptr::null_mut(),
    }
}

/// Registering NULL is a no-op, as upstream.
///
/// # Safety
/// `reg` is NULL or a live registry that stays live until it is unloaded or the process exits.
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_register(reg: ggml_backend_reg_t) {
    if let Some(r) = optional_arg!(reg, Reg) {
        registry::register(r, None)
    }
}

/// # Safety
/// `device` is a live device (NULL aborts) that stays live until the process exits.
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_device_register(device: ggml_backend_dev_t) {
    registry::register_device(handle_arg!(device, Device, "ggml_backend_device_register"))
}

#[no_mangle]
pub extern "C" fn ggml_backend_reg_count() -> usize {
    registry::reg_count()
}

#[no_mangle]
pub extern "C" fn ggml_backend_reg_get(index: usize) -> ggml_backend_reg_t {
    match registry::reg_get(index) {
        Some(r) => r.as_ptr(),
        None => abort(
            file!(),
            line!(),
            &format!(
                "ggml_backend_reg_get: index {index} out of range ({} registries)",
                registry::reg_count()
            ),
        ),
    }
}

/// # Safety
/// `name` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_reg_by_name(name: *const c_char) -> ggml_backend_reg_t {
    // SAFETY: `name` is NULL or a NUL-terminated string (this function's contract).
    let Some(name) = (unsafe { c_str_arg(name) }) else {
        return std::ptr::null_mut();
    };
    registry::reg_by_name(name.to_bytes()).map_or(std::ptr::null_mut(), Reg::as_ptr)
}

#[no_mangle]
pub extern "C" fn ggml_backend_dev_count() -> usize {
    registry::dev_count()
}

#[no_mangle]
pub extern "C" fn ggml_backend_dev_get(index: usize) -> ggml_backend_dev_t {
    match registry::dev_get(index) {
        Some(d) => d.as_ptr(),
        None => abort(
            file!(),
            line!(),
            &format!(
                "ggml_backend_dev_get: index {index} out of range ({} devices)",
                registry::dev_count()
            ),
        ),
    }
}

/// # Safety
/// `name` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_dev_by_name(name: *const c_char) -> ggml_backend_dev_t {
    // SAFETY: `name` is NULL or a NUL-terminated string (this function's contract).
    let Some(name) = (unsafe { c_str_arg(name) }) else {
        return std::ptr::null_mut();
    };
    registry::dev_by_name(name.to_bytes()).map_or(std::ptr::null_mut(), Device::as_ptr)
}

#[no_mangle]
pub extern "C" fn ggml_backend_dev_by_type(ty: ggml_backend_dev_type_raw) -> ggml_backend_dev_t {
    registry::dev_by_type(ty).map_or(std::ptr::null_mut(), Device::as_ptr)
}

/// # Safety
/// `name` and `params` are NULL or NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_init_by_name(
    name: *const c_char,
    params: *const c_char,
) -> ggml_backend_t {
    // SAFETY: `name` is NULL or a NUL-terminated string (this function's contract).
    let Some(name) = (unsafe { c_str_arg(name) }) else {
        return std::ptr::null_mut();
    };
    registry::dev_by_name(name.to_bytes()).map_or(std::ptr::null_mut(), |d| {
        // SAFETY: `params` is NULL or a NUL-terminated string (this function's contract).
        d.init_backend(unsafe { c_str_arg(params) })
    })
}

/// # Safety
/// `params` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_init_by_type(
    ty: ggml_backend_dev_type_raw,
    params: *const c_char,
) -> ggml_backend_t {
    registry::dev_by_type(ty).map_or(std::ptr::null_mut(), |d| {
        // SAFETY: `params` is NULL or a NUL-terminated string (this function's contract).
        d.init_backend(unsafe { c_str_arg(params) })
    })
}

#[no_mangle]
pub extern "C" fn ggml_backend_init_best() -> ggml_backend_t {
    registry::best_device().map_or(std::ptr::null_mut(), |d| d.init_backend(None))
}

/// # Safety
/// `path` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_load(path: *const c_char) -> ggml_backend_reg_t {
    // SAFETY: `path` is NULL or a NUL-terminated string (this function's contract).
    let Some(path) = (unsafe { c_str_arg(path) }) else {
        log_error!("ggml_backend_load: path is NULL");
        return std::ptr::null_mut();
    };
    let path = Path::new(OsStr::from_bytes(path.to_bytes()));
    loader::load(path, false).map_or(std::ptr::null_mut(), Reg::as_ptr)
}

/// Unregisters `reg` and unloads its library; unknown or NULL registries are ignored.
///
/// # Safety
/// `reg` is NULL or a live registry, not used after the call.
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_unload(reg: ggml_backend_reg_t) {
    if let Some(r) = optional_arg!(reg, Reg) {
        registry::unregister(r);
    }
}

#[no_mangle]
pub extern "C" fn ggml_backend_load_all() {
    loader::load_all(None)
}

/// # Safety
/// `dir_path` is NULL (default search paths) or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_load_all_from_path(dir_path: *const c_char) {
    // SAFETY: `dir_path` is NULL or a NUL-terminated string (this function's contract).
    let dir = unsafe { c_str_arg(dir_path) }.map(|p| Path::new(OsStr::from_bytes(p.to_bytes())));
    loader::load_all(dir)
}

/// Called by target `ggml` when its library loads (cmake/ggml-backend-rs-builtins.c): the list
/// of the backends compiled into the build, which the registry reads on first use. A program
/// that loads the libraries with `RTLD_LOCAL` (Python's ctypes: llama-cpp-python) keeps their
/// symbols out of the global scope, where the registry would otherwise look the list up.
///
/// Not in any header: cmake/ggml-backend-rs-builtins.c declares it for itself.
///
/// # Safety
/// `list` is NULL (ignored) or a function of type `ggml_backend_rs_builtin_regs` that stays
/// callable for the life of the process.
///
/// cbindgen:ignore
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_rs_set_builtin_list(
    list: Option<crate::registry::BuiltinRegs>,
) {
    if let Some(list) = list {
        crate::registry::set_builtin_list(list);
    }
}
