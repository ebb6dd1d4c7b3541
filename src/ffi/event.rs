//! Events: `ggml_backend_event_*`.

use super::{handle_arg, optional_arg};
use crate::abi::log::abort;
use crate::abi::*;

/// NULL when the device is NULL or has no events, as upstream.
///
/// # Safety
/// `device` is NULL or a live device.
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_event_new(
    device: ggml_backend_dev_t,
) -> ggml_backend_event_t {
    optional_arg!(device, Device).map_or(std::ptr::null_mut(), |d| d.event_new())
}

fn event_device(event: Event, func: &str) -> Device {
    event
        .device()
        .unwrap_or_else(|| abort(file!(), line!(), &format!("{func}: event has no device")))
}

/// # Safety
/// `event` is NULL or a live event, not used after the call.
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_event_free(event: ggml_backend_event_t) {
    if let Some(e) = optional_arg!(event, Event) {
        event_device(e, "ggml_backend_event_free").event_free(e)
    }
}

/// # Safety
/// `event` is a live event and `backend` a live backend (NULL aborts).
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_event_record(
    event: ggml_backend_event_t,
    backend: ggml_backend_t,
) {
    let b = handle_arg!(backend, Backend, "ggml_backend_event_record");
    b.event_record(handle_arg!(event, Event, "ggml_backend_event_record"))
}

/// # Safety
/// `event` is a live event (NULL aborts).
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_event_synchronize(event: ggml_backend_event_t) {
    let e = handle_arg!(event, Event, "ggml_backend_event_synchronize");
    event_device(e, "ggml_backend_event_synchronize").event_synchronize(e)
}

/// # Safety
/// `event` is a live event and `backend` a live backend (NULL aborts).
#[no_mangle]
pub unsafe extern "C" fn ggml_backend_event_wait(
    backend: ggml_backend_t,
    event: ggml_backend_event_t,
) {
    let b = handle_arg!(backend, Backend, "ggml_backend_event_wait");
    b.event_wait(handle_arg!(event, Event, "ggml_backend_event_wait"))
}
