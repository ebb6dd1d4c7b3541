//! The meta (tensor-parallel) API: device creation and axis names (exported by each version's
//! module, `crate::version`: C++ linkage in ggml 0.9.11, C since), the predicates and simple
//! backends of `ggml-backend-impl.h`, and the seed-era accessors of our `ggml-ext.h`.

use std::ffi::{c_char, c_void};

use super::{handle_arg, null_argument, optional_arg};
use crate::abi::facts::split_to_c;
use crate::abi::log::{abort, ggml_assert};
use crate::abi::*;
use crate::meta::{self, backend, buffer, device};

/// `ggml_backend_meta_device`: the meta device over `devs`, made once per device list,
/// callback and userdata.
///
/// # Safety
/// `devs` points to `n_devs` live devices (a NULL entry aborts).
unsafe fn new_meta_device(
    devs: *mut ggml_backend_dev_t,
    n_devs: usize,
    get_split_state: ggml_backend_meta_get_split_state_t,
    get_split_state_ud: *mut c_void,
) -> ggml_backend_dev_t {
    const F: &str = "ggml_backend_meta_device";
    if devs.is_null() {
        null_argument(F, "devs");
    }
    ggml_assert!(
        (1..=GGML_BACKEND_META_MAX_DEVICES).contains(&n_devs),
        "{F}: n_devs must be 1..={GGML_BACKEND_META_MAX_DEVICES}, got {n_devs}"
    );
    // SAFETY: `devs` is non-NULL (checked above) and points to `n_devs` device handles (this
    // function's contract).
    let simple: Vec<Device> = unsafe { std::slice::from_raw_parts(devs, n_devs) }
        .iter()
        .enumerate()
        .map(|(i, &d)| {
            // SAFETY: a non-NULL entry names a live device (this function's contract).
            unsafe { Device::from_ptr(d) }
                .unwrap_or_else(|| abort(file!(), line!(), &format!("{F}: devs[{i}] is NULL")))
        })
        .collect();
    ggml_assert!(
        simple.iter().all(|d| device::of_device(*d).is_none()),
        "{F}: a meta device cannot wrap another meta device"
    );
    meta::device_iface::get_or_create(simple, get_split_state, get_split_state_ud)
}

// The meta device's constructor and axis names: C names where the meta API is in
// ggml-backend.h (fact `meta-c-linkage`), else the C++ names ggml-ext.h's declarations link to.

/// # Safety
/// `devs` points to `n_devs` live devices (a NULL entry aborts).
#[cfg(feature = "meta-c-linkage")]
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_meta_device(
    devs: *mut ggml_backend_dev_t,
    n_devs: usize,
    get_split_state: ggml_backend_meta_get_split_state_t,
    get_split_state_ud: *mut c_void,
) -> ggml_backend_dev_t {
    // SAFETY: this function's contract.
    unsafe { new_meta_device(devs, n_devs, get_split_state, get_split_state_ud) }
}

/// `ggml_backend_dev_t ggml_backend_meta_device(ggml_backend_dev_t * devs, size_t n_devs,
/// ggml_backend_meta_get_split_state_t get_split_state, void * get_split_state_ud)`, declared
/// with C++ linkage.
///
/// # Safety
/// `devs` points to `n_devs` live devices (a NULL entry aborts).
#[cfg(not(feature = "meta-c-linkage"))]
#[export_name = "_Z24ggml_backend_meta_devicePP19ggml_backend_devicemPF29ggml_backend_meta_split_statePK11ggml_tensorPvES6_"]
pub unsafe extern "C" fn ggml_backend_meta_device(
    devs: *mut ggml_backend_dev_t,
    n_devs: usize,
    get_split_state: ggml_backend_meta_get_split_state_t,
    get_split_state_ud: *mut c_void,
) -> ggml_backend_dev_t {
    // SAFETY: this function's contract.
    unsafe { new_meta_device(devs, n_devs, get_split_state, get_split_state_ud) }
}

#[cfg(feature = "meta-c-linkage")]
#[no_mangle]
pub extern "C" fn ggml_backend_meta_split_axis_name(
    axis: ggml_backend_meta_split_axis_raw,
) -> *const c_char {
    split_axis_name(axis)
}

/// `const char * ggml_backend_meta_split_axis_name(enum ggml_backend_meta_split_axis)`, C++
/// linkage.
#[cfg(not(feature = "meta-c-linkage"))]
#[export_name = "_Z33ggml_backend_meta_split_axis_name28ggml_backend_meta_split_axis"]
pub extern "C" fn ggml_backend_meta_split_axis_name(
    axis: ggml_backend_meta_split_axis_raw,
) -> *const c_char {
    split_axis_name(axis)
}

/// `ggml_backend_meta_split_axis_name`.
fn split_axis_name(axis: ggml_backend_meta_split_axis_raw) -> *const c_char {
    match meta::split::axis_name(axis) {
        Some(s) => s.as_ptr(),
        None => abort(
            file!(),
            line!(),
            &format!("ggml_backend_meta_split_axis_name: invalid split axis {axis}"),
        ),
    }
}

/// # Safety
/// `backend` is NULL or a live backend.
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_is_meta(backend: ggml_backend_t) -> bool {
    meta::is_meta_backend(backend)
}

/// # Safety
/// `buf` is NULL or a live buffer.
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_buffer_is_meta(buf: ggml_backend_buffer_t) -> bool {
    meta::is_meta_buffer(buf)
}

/// # Safety
/// `buft` is NULL or a live buffer type.
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_buft_is_meta(buft: ggml_backend_buffer_type_t) -> bool {
    meta::is_meta_buft(buft)
}

/// # Safety
/// `dev` is NULL or a live device.
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_dev_is_meta(dev: ggml_backend_dev_t) -> bool {
    meta::is_meta_device(dev)
}

/// The meta object behind a handle argument: aborts when the handle is NULL (naming `arg`)
/// or not a meta object of that kind (naming `what`).
fn meta_arg<H, T>(
    handle: Option<H>,
    lookup: impl Fn(H) -> Option<T>,
    func: &str,
    arg: &str,
    what: &str,
) -> T {
    let Some(h) = handle else {
        null_argument(func, arg)
    };
    lookup(h).unwrap_or_else(|| not_meta(func, what))
}

#[cold]
fn not_meta(func: &str, what: &str) -> ! {
    abort(file!(), line!(), &format!("{func}: not a meta {what}"))
}

/// The meta backend behind a backend argument (see [`meta_arg`]).
///
/// # Safety
/// `b` is NULL or a live backend.
unsafe fn meta_backend_arg(b: ggml_backend_t, func: &str) -> std::sync::Arc<backend::MetaBackend> {
    meta_arg(
        optional_arg!(b, Backend),
        backend::of,
        func,
        "meta_backend",
        "backend",
    )
}

/// The meta device behind a device argument (see [`meta_arg`]). Safe for any address: it
/// becomes a handle only once it is known to be one of the meta devices this library made.
fn meta_device(d: ggml_backend_dev_t, func: &str) -> &'static device::MetaDevice {
    if !d.is_null() && !meta::is_meta_device(d) {
        not_meta(func, "device")
    }
    // SAFETY: `d` is NULL or a meta device this library made (checked above), and meta
    // devices are never freed (see `crate::meta`).
    let h = unsafe { Device::from_ptr(d) };
    meta_arg(h, device::of_device, func, "dev", "device")
}

/// The meta device behind a buffer type argument (see [`meta_arg`]). Safe for any address:
/// it becomes a handle only once it is known to be one of the meta buffer types this library
/// made.
pub(crate) fn meta_buft(b: ggml_backend_buffer_type_t, func: &str) -> &'static device::MetaDevice {
    if !b.is_null() && !meta::is_meta_buft(b) {
        not_meta(func, "buffer type")
    }
    // SAFETY: `b` is NULL or a meta buffer type this library made (checked above), and meta
    // buffer types are never freed (see `crate::meta`).
    let h = unsafe { Buft::from_ptr(b) };
    meta_arg(h, device::of_buft, func, "buft", "buffer type")
}

/// The meta buffer behind a buffer argument (see [`meta_arg`]).
///
/// # Safety
/// `b` is NULL or a live buffer.
unsafe fn meta_buffer(b: ggml_backend_buffer_t, func: &str) -> std::sync::Arc<buffer::MetaBuffer> {
    meta_arg(optional_arg!(b, Buffer), buffer::of, func, "buf", "buffer")
}

fn check_index(i: usize, n: usize, func: &str) {
    ggml_assert!(i < n, "{func}: index {i} out of range ({n} devices)");
}

/// # Safety
/// `meta_backend` is a live backend (NULL and backends that are not meta backends abort).
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_meta_n_backends(meta_backend: ggml_backend_t) -> usize {
    // SAFETY: `meta_backend` is NULL or a live backend (this function's contract).
    unsafe { meta_backend_arg(meta_backend, "ggml_backend_meta_n_backends") }
        .simple
        .len()
}

/// # Safety
/// `meta_backend` is a live backend (NULL and backends that are not meta backends abort).
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_meta_simple_backend(
    meta_backend: ggml_backend_t,
    index: usize,
) -> ggml_backend_t {
    const F: &str = "ggml_backend_meta_simple_backend";
    // SAFETY: `meta_backend` is NULL or a live backend (this function's contract).
    let m = unsafe { meta_backend_arg(meta_backend, F) };
    check_index(index, m.simple.len(), F);
    m.simple[index].as_ptr()
}

/// # Safety
/// `dev` is a live device (NULL and devices that are not meta devices abort).
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_meta_dev_n_devs(dev: ggml_backend_dev_t) -> usize {
    meta_device(dev, "ggml_backend_meta_dev_n_devs").n()
}

/// # Safety
/// `dev` is a live device (NULL and devices that are not meta devices abort).
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_meta_dev_simple_dev(
    dev: ggml_backend_dev_t,
    index: usize,
) -> ggml_backend_dev_t {
    const F: &str = "ggml_backend_meta_dev_simple_dev";
    let m = meta_device(dev, F);
    check_index(index, m.n(), F);
    m.simple[index].as_ptr()
}

/// # Safety
/// `buft` is a live buffer type (NULL and types that are not meta buffer types abort).
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_meta_buft_n_bufts(buft: ggml_backend_buffer_type_t) -> usize {
    meta_buft(buft, "ggml_backend_meta_buft_n_bufts").n()
}

/// # Safety
/// `buft` is a live buffer type (NULL and types that are not meta buffer types abort).
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_meta_buft_simple_buft(
    buft: ggml_backend_buffer_type_t,
    index: usize,
) -> ggml_backend_buffer_type_t {
    const F: &str = "ggml_backend_meta_buft_simple_buft";
    let m = meta_buft(buft, F);
    check_index(index, m.n(), F);
    m.simple_buft(index).as_ptr()
}

/// # Safety
/// `buf` is a live buffer (NULL and buffers that are not meta buffers abort).
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_meta_buffer_n_bufs(buf: ggml_backend_buffer_t) -> usize {
    // SAFETY: `buf` is NULL or a live buffer (this function's contract).
    unsafe { meta_buffer(buf, "ggml_backend_meta_buffer_n_bufs") }.n()
}

/// # Safety
/// `buf` is a live buffer (NULL and buffers that are not meta buffers abort).
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_meta_buffer_simple_buffer(
    buf: ggml_backend_buffer_t,
    index: usize,
) -> ggml_backend_buffer_t {
    const F: &str = "ggml_backend_meta_buffer_simple_buffer";
    // SAFETY: `buf` is NULL or a live buffer (this function's contract).
    let m = unsafe { meta_buffer(buf, F) };
    check_index(index, m.n(), F);
    // a plugin device's weights are placed when first used, which asking for them is
    crate::meta::slices::place_deferred(&m);
    m.simple()
        .get(index)
        .copied()
        .flatten()
        .map_or(std::ptr::null_mut(), |b| b.as_ptr())
}

/// Device `index`'s tensor of meta tensor `tensor`; NULL if it was never initialised.
///
/// # Safety
/// `tensor` is a live tensor (NULL aborts, as does a tensor outside meta buffers).
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_meta_buffer_simple_tensor(
    tensor: *const ggml_tensor,
    index: usize,
) -> *mut ggml_tensor {
    const F: &str = "ggml_backend_meta_buffer_simple_tensor";
    let t = handle_arg!(tensor, Tensor, "ggml_backend_meta_buffer_simple_tensor");
    // (a plugin device's weights are placed when first used, which asking for them is)
    let mb = crate::meta::slices::placed(t).unwrap_or_else(|| {
        abort(
            file!(),
            line!(),
            &format!("{F}: tensor is not in a meta buffer"),
        )
    });
    check_index(index, mb.n(), F);
    crate::meta::slices::simple_tensors(&mb, t).map_or(std::ptr::null_mut(), |s| s[index].as_ptr())
}

/// The split of a meta tensor. `assume_sync`: whether a matmul result whose devices hold
/// partial sums is reported as it reads after the meta backend's AllReduce (MIRRORED) or as
/// it sits in memory right after the matmul (PARTIAL).
///
/// # Safety
/// `tensor` is a live tensor (NULL aborts, as does a tensor outside meta buffers).
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_meta_get_split_state(
    tensor: *const ggml_tensor,
    assume_sync: bool,
) -> ggml_backend_meta_split_state {
    let t = handle_arg!(tensor, Tensor, "ggml_backend_meta_get_split_state");
    match meta::facts::derived(t) {
        Ok(d) if d.reduce && !assume_sync => split_to_c(&meta::Split::Partial),
        Ok(d) => split_to_c(&d.split),
        Err(e) => abort(file!(), line!(), &e),
    }
}

/// The meta API's inspection functions by name, for the plugin's registry: a host program
/// has upstream's own `ggml_backend_meta_*` functions, which do not know the plugin's
/// devices, so it finds ours through `ggml_backend_reg_get_proc_address`. NULL for any
/// other name.
pub(crate) fn inspection_proc(name: &std::ffi::CStr) -> *mut std::ffi::c_void {
    use std::ffi::c_void;
    match name.to_bytes() {
        b"ggml_backend_meta_get_split_state" => ggml_backend_meta_get_split_state as *mut c_void,
        b"ggml_backend_meta_split_axis_name" => ggml_backend_meta_split_axis_name as *mut c_void,
        b"ggml_backend_dev_is_meta" => ggml_backend_dev_is_meta as *mut c_void,
        b"ggml_backend_meta_dev_n_devs" => ggml_backend_meta_dev_n_devs as *mut c_void,
        b"ggml_backend_meta_dev_simple_dev" => ggml_backend_meta_dev_simple_dev as *mut c_void,
        b"ggml_backend_buffer_is_meta" => ggml_backend_buffer_is_meta as *mut c_void,
        b"ggml_backend_meta_buffer_n_bufs" => ggml_backend_meta_buffer_n_bufs as *mut c_void,
        b"ggml_backend_meta_buffer_simple_buffer" => {
            ggml_backend_meta_buffer_simple_buffer as *mut c_void
        }
        b"ggml_backend_meta_buffer_simple_tensor" => {
            ggml_backend_meta_buffer_simple_tensor as *mut c_void
        }
        _ => std::ptr::null_mut(),
    }
}

/// Forwards a usage change to the simple buffers of a meta buffer. Fact
/// `meta-buffer-set-usage`.
///
/// # Safety
/// `buffer` is a live buffer (NULL and buffers that are not meta buffers abort).
#[cfg(feature = "meta-buffer-set-usage")]
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_meta_buffer_set_usage(
    buffer: ggml_backend_buffer_t,
    usage: ggml_backend_buffer_usage_raw,
) {
    const F: &str = "ggml_backend_meta_buffer_set_usage";
    let b = handle_arg!(buffer, Buffer, "ggml_backend_meta_buffer_set_usage");
    match buffer::of(b) {
        Some(mb) => crate::buffer::Extension::usage_changed(&*mb, usage),
        None => abort(file!(), line!(), &format!("{F}: not a meta buffer")),
    }
}

/// Allocates every unallocated tensor of `ctx` in a buffer of meta buffer type `buft`, each
/// device holding only its slices: where buffer types take no tensor lists (without fact
/// `list-alloc`), ggml-alloc calls this for meta buffer types.
///
/// # Safety
/// `ctx` is NULL (an error) or a live ggml context.
#[cfg(not(feature = "list-alloc"))]
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_meta_alloc_ctx_tensors_from_buft(
    ctx: *mut ggml_context,
    buft: ggml_backend_buffer_type_t,
) -> ggml_backend_buffer_t {
    const F: &str = "ggml_backend_meta_alloc_ctx_tensors_from_buft";
    if ctx.is_null() {
        null_argument(F, "ctx");
    }
    let dev = meta_buft(buft, F);
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
    meta::buffer_iface::alloc_tensors(tensors, dev)
}
