//! An RPC device's vtable, its backends' extension and its events.

use std::ffi::{c_char, c_void};
use std::sync::Arc;

use ggml_backend_rs_rpc::Client;

use super::backend_iface::BACKEND_IFACE;
use super::remote::Marker;
use super::state::{device, wait_event, RpcBackend, RpcDevice, BACKENDS, EVENTS, GUID};
use crate::abi::*;

pub(super) const DEVICE_IFACE: ggml_backend_device_i = ggml_backend_device_i {
    get_name: Some(dev_get_name),
    get_description: Some(dev_get_description),
    get_memory: Some(dev_get_memory),
    get_type: Some(dev_get_type),
    get_props: Some(dev_get_props),
    init_backend: Some(dev_init_backend),
    get_buffer_type: Some(dev_get_buffer_type),
    get_host_buffer_type: None,
    buffer_from_host_ptr: None,
    supports_op: Some(dev_supports_op),
    supports_buft: Some(dev_supports_buft),
    offload_op: None,
    event_new: Some(dev_event_new),
    event_free: Some(dev_event_free),
    event_synchronize: Some(dev_event_synchronize),
};

unsafe extern "C" fn dev_get_name(dev: ggml_backend_dev_t) -> *const c_char {
    device(dev).name.as_ptr()
}

unsafe extern "C" fn dev_get_description(dev: ggml_backend_dev_t) -> *const c_char {
    device(dev).description.as_ptr()
}

/// The server's free and total memory; zeros when it cannot be asked.
pub(super) fn memory(d: &'static RpcDevice) -> (usize, usize) {
    let index = d.index;
    match d.remote.call(move |c: &mut Client| c.device_memory(index)) {
        Some(Ok(m)) => (
            usize::try_from(m.free).unwrap_or(usize::MAX),
            usize::try_from(m.total).unwrap_or(usize::MAX),
        ),
        _ => (0, 0),
    }
}

unsafe extern "C" fn dev_get_memory(dev: ggml_backend_dev_t, free: *mut usize, total: *mut usize) {
    let (f, t) = memory(device(dev));
    // SAFETY: ggml_backend_dev_memory passes two writable `size_t`s.
    unsafe {
        *free = f;
        *total = t;
    }
}

unsafe extern "C" fn dev_get_type(_dev: ggml_backend_dev_t) -> ggml_backend_dev_type_raw {
    // what upstream's client reports: the server's kind is not part of the protocol
    DEVICE_GPU
}

unsafe extern "C" fn dev_get_props(dev: ggml_backend_dev_t, props: *mut ggml_backend_dev_props) {
    let d = device(dev);
    // SAFETY: ggml_backend_dev_get_props passes a writable props struct, ours for the call.
    let p = unsafe { &mut *props };
    p.name = d.name.as_ptr();
    p.description = d.description.as_ptr();
    p.type_ = DEVICE_GPU;
    p.device_id = std::ptr::null();
    (p.memory_free, p.memory_total) = memory(d);
    p.caps.async_ = true;
    p.caps.set_mmap_support(true);
    p.caps.host_buffer = false;
    p.caps.buffer_from_host_ptr = false;
    p.caps.events = true;
}

pub(super) unsafe extern "C" fn dev_init_backend(
    dev: ggml_backend_dev_t,
    _params: *const c_char,
) -> ggml_backend_t {
    let d = device(dev);
    let b = Arc::new(RpcBackend { dev: d });
    let backend = Box::into_raw(Box::new(ggml_backend {
        guid: &GUID as *const ggml_guid as ggml_guid_t,
        iface: BACKEND_IFACE,
        device: dev,
        // the state's address, for identification only: it is found through the registry
        context: Arc::as_ptr(&b) as *mut c_void,
    }));
    BACKENDS.insert(backend as usize, b.clone());
    // SAFETY: made just above; live until `backend_free`.
    if let Some(h) = unsafe { Backend::from_ptr(backend) } {
        crate::backend::extend(h, b);
    }
    backend
}

impl crate::backend::Extension for RpcBackend {
    fn failure(&self) -> Option<String> {
        self.dev.remote.failure()
    }

    /// One round trip after the graphs sent since the last one (none when nothing was sent:
    /// the server's other devices settled it): its reply comes once they are computed.
    fn settle(&self) -> Result<(), String> {
        let remote = &self.dev.remote;
        if remote.take_unsettled() {
            remote.call(|c| {
                let _ = c.synchronize();
            });
        }
        remote.failure().map_or(Ok(()), Err)
    }
}

unsafe extern "C" fn dev_get_buffer_type(dev: ggml_backend_dev_t) -> ggml_backend_buffer_type_t {
    device(dev).buft as ggml_backend_buffer_type_t
}

unsafe extern "C" fn dev_supports_op(_dev: ggml_backend_dev_t, op: *const ggml_tensor) -> bool {
    // the protocol cannot ask; the server's backend computes what it is sent (as upstream)
    !op.is_null()
}

unsafe extern "C" fn dev_supports_buft(
    dev: ggml_backend_dev_t,
    buft: ggml_backend_buffer_type_t,
) -> bool {
    device(dev).buft == buft as usize
}

unsafe extern "C" fn dev_event_new(dev: ggml_backend_dev_t) -> ggml_backend_event_t {
    let _ = device(dev);
    let marker = Arc::new(Marker::default());
    let event = Box::into_raw(Box::new(ggml_backend_event {
        device: dev,
        context: Arc::as_ptr(&marker) as *mut c_void,
    }));
    EVENTS.insert(event as usize, marker);
    event
}

unsafe extern "C" fn dev_event_free(_dev: ggml_backend_dev_t, event: ggml_backend_event_t) {
    if EVENTS.remove(event as usize).is_some() {
        // SAFETY: made by dev_event_new with Box; ggml frees an event once, through this entry.
        drop(unsafe { Box::from_raw(event) });
    }
}

unsafe extern "C" fn dev_event_synchronize(_dev: ggml_backend_dev_t, event: ggml_backend_event_t) {
    wait_event(event);
}
