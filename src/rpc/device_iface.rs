//! An RPC device's vtable, its backends' extension and its events.

use std::ffi::{c_void, CStr};
use std::sync::Arc;

use ggml_backend_rs_rpc::Client;

use super::backend_iface::BACKEND_IFACE;
use super::remote::Marker;
use super::state::{find_device, wait_event, RpcBackend, RpcDevice, BACKENDS, EVENTS, GUID};
use crate::abi::object::{device_iface, CObject};
use crate::abi::*;

pub(super) const DEVICE_IFACE: ggml_backend_device_i = device_iface!(RpcDevice {
    get_name,
    get_description,
    get_memory,
    get_type,
    get_props,
    init_backend,
    get_buffer_type,
    supports_op,
    supports_buft,
    event_new,
    event_free,
    event_synchronize,
});

impl CObject for RpcDevice {
    const KIND: &'static str = "RPC device";
    type Held = &'static RpcDevice;
    fn find(addr: usize) -> Option<&'static RpcDevice> {
        find_device(|d| d.device == addr)
    }
}

impl RpcDevice {
    fn get_name(&self, _: Device) -> &CStr {
        &self.name
    }

    fn get_description(&self, _: Device) -> &CStr {
        &self.description
    }

    /// The server's free and total memory; zeros when it cannot be asked.
    fn get_memory(&self, _: Device) -> (usize, usize) {
        let index = self.index;
        match self
            .remote
            .call(move |c: &mut Client| c.device_memory(index))
        {
            Some(Ok(m)) => (
                usize::try_from(m.free).unwrap_or(usize::MAX),
                usize::try_from(m.total).unwrap_or(usize::MAX),
            ),
            _ => (0, 0),
        }
    }

    fn get_type(&self, _: Device) -> ggml_backend_dev_type_raw {
        // what upstream's client reports: the server's kind is not part of the protocol
        DEVICE_GPU
    }

    fn get_props(&self, dev: Device, p: &mut ggml_backend_dev_props) {
        p.name = self.name.as_ptr();
        p.description = self.description.as_ptr();
        p.type_ = DEVICE_GPU;
        p.device_id = std::ptr::null();
        (p.memory_free, p.memory_total) = self.get_memory(dev);
        p.caps.async_ = true;
        p.caps.set_mmap_support(true);
        p.caps.host_buffer = false;
        p.caps.buffer_from_host_ptr = false;
        p.caps.events = true;
    }

    fn init_backend(
        this: &'static RpcDevice,
        dev: Device,
        _params: Option<&CStr>,
    ) -> ggml_backend_t {
        let b = Arc::new(RpcBackend { dev: this });
        let backend = Box::into_raw(Box::new(ggml_backend {
            guid: &GUID as *const ggml_guid as ggml_guid_t,
            iface: BACKEND_IFACE,
            device: dev.as_ptr(),
            // the state's address, for identification only: it is found through the registry
            context: Arc::as_ptr(&b) as *mut c_void,
        }));
        BACKENDS.insert(backend as usize, b.clone());
        // SAFETY: made just above; live until the backend's `free`.
        if let Some(h) = unsafe { Backend::from_ptr(backend) } {
            crate::backend::extend(h, b);
        }
        backend
    }

    fn get_buffer_type(&self, _: Device) -> ggml_backend_buffer_type_t {
        self.buft as ggml_backend_buffer_type_t
    }

    fn supports_op(&self, _: Device, _: Tensor) -> bool {
        // the protocol cannot ask; the server's backend computes what it is sent (as upstream)
        true
    }

    fn supports_buft(&self, _: Device, buft: Buft) -> bool {
        self.buft == buft.as_ptr() as usize
    }

    fn event_new(&self, dev: Device) -> ggml_backend_event_t {
        let marker = Arc::new(Marker::default());
        let event = Box::into_raw(Box::new(ggml_backend_event {
            device: dev.as_ptr(),
            context: Arc::as_ptr(&marker) as *mut c_void,
        }));
        EVENTS.insert(event as usize, marker);
        event
    }

    fn event_free(&self, _: Device, event: Event) {
        if EVENTS.remove(event.as_ptr() as usize).is_some() {
            // SAFETY: made by event_new with Box; ggml frees an event once, through this entry.
            drop(unsafe { Box::from_raw(event.as_ptr()) });
        }
    }

    fn event_synchronize(&self, _: Device, event: Event) {
        wait_event(event.as_ptr());
    }
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
