//! A backend on a server: asynchronous transfers, graphs and events.

use std::ffi::{c_void, CStr};
use std::sync::Arc;

use ggml_backend_rs_rpc::GraphMsg;

use super::buffer_iface::{on_wire, read_into, upload};
use super::on_wire::wire_graph;
use super::state::{find_device, lock, wait_event, RpcBackend, BACKENDS, EVENTS};
use crate::abi::log::log_error;
use crate::abi::object::{backend_iface, CObject};
use crate::abi::*;

pub(super) const BACKEND_IFACE: ggml_backend_i = backend_iface!(RpcBackend {
    get_name,
    free,
    set_tensor_async,
    get_tensor_async,
    synchronize,
    graph_compute,
    event_record,
    event_wait,
});

impl CObject for RpcBackend {
    const KIND: &'static str = "RPC backend";
    type Held = Arc<RpcBackend>;
    fn find(addr: usize) -> Option<Arc<RpcBackend>> {
        BACKENDS.get(addr)
    }
}

impl RpcBackend {
    fn get_name(&self, _: Backend) -> &CStr {
        &self.dev.long_name
    }

    fn free(this: Arc<RpcBackend>, backend: Backend) {
        BACKENDS.remove(backend.as_ptr() as usize);
        crate::backend::unextend(backend);
        this.dev.remote.drain();
        // SAFETY: made by the device's init_backend with Box; ggml frees a backend once,
        // through this entry.
        drop(unsafe { Box::from_raw(backend.as_ptr()) });
    }

    /// # Safety
    /// `data` addresses `size` readable bytes (read before this returns).
    unsafe fn set_tensor_async(
        &self,
        _: Backend,
        t: Tensor,
        data: *const c_void,
        offset: usize,
        size: usize,
    ) {
        let Some(w) = on_wire(self.dev, t) else {
            return;
        };
        // SAFETY: this function's contract; the bytes are copied now.
        let bytes = unsafe { host_bytes(data as usize, size) }.to_vec();
        let weights = t
            .data_buffer()
            .is_some_and(|buf| buf.usage() == USAGE_WEIGHTS);
        self.dev
            .remote
            .post(move |c| upload(c, &w, weights, offset, &bytes));
    }

    /// # Safety
    /// `data` addresses `size` writable bytes that nothing else uses until the backend is
    /// synchronized.
    unsafe fn get_tensor_async(
        &self,
        _: Backend,
        t: Tensor,
        data: *mut c_void,
        offset: usize,
        size: usize,
    ) {
        let at = data as usize;
        let Some(w) = on_wire(self.dev, t) else {
            // SAFETY: this function's contract; written now, before the caller can synchronize.
            unsafe { host_bytes_mut(at, size) }.fill(0);
            return;
        };
        self.dev.remote.post(move |c| {
            // SAFETY: this function's contract: the bytes stay the caller's, untouched, until
            // it synchronizes the backend, which waits for this job.
            let out = unsafe { host_bytes_mut(at, size) };
            read_into(c, &w, offset, out)
        });
    }

    fn synchronize(&self, _: Backend) {
        self.dev.remote.drain();
    }

    fn graph_compute(&self, _: Backend, g: Graph) -> ggml_status {
        let d = self.dev;
        if let Some(e) = d.remote.failure() {
            log_error!(
                "{}: graph compute refused: {e}",
                d.long_name.to_string_lossy()
            );
            return GGML_STATUS_FAILED;
        }
        if g.n_nodes() == 0 {
            return GGML_STATUS_SUCCESS;
        }
        let index = d.index;
        let uid = g.uid();
        let mut last = lock(&d.last_graph);
        if uid != 0 && *last == uid {
            d.remote.post_compute(move |c| {
                let _ = c.graph_recompute(index);
            });
            return GGML_STATUS_SUCCESS;
        }
        // made and checked here, so that a graph the protocol cannot carry fails this call
        let payload = wire_graph(g, &d.remote).and_then(|(nodes, tensors)| {
            GraphMsg::payload(index, &nodes, &tensors)
                .map_err(|e| format!("graph of {} nodes cannot be sent: {e}", g.n_nodes()))
        });
        match payload {
            Ok(payload) => {
                *last = uid;
                d.remote.post_compute(move |c| {
                    let _ = c.send_graph(&payload);
                });
                GGML_STATUS_SUCCESS
            }
            Err(e) => {
                *last = 0;
                log_error!("{}: {e}", d.long_name.to_string_lossy());
                GGML_STATUS_FAILED
            }
        }
    }

    fn event_record(&self, _: Backend, event: Event) {
        if let Some(m) = EVENTS.get(event.as_ptr() as usize) {
            m.record(&self.dev.remote);
        }
    }

    fn event_wait(&self, _: Backend, event: Event) {
        let ev_dev = event.device().map_or(0, |d| d.as_ptr() as usize);
        // One queue per server keeps its own order; an event of another server is waited for
        // here.
        let same_server = find_device(|d| d.device == ev_dev)
            .is_some_and(|d| Arc::ptr_eq(&d.remote, &self.dev.remote));
        if !same_server {
            wait_event(event.as_ptr());
        }
    }
}

/// The caller's `size` bytes at `at`; empty, without touching the pointer (which ggml may pass
/// as NULL or dangling), when `size` is 0.
///
/// # Safety
/// When `size` > 0, `at` is the address of `size` readable bytes that stay live and unwritten
/// for `'a`.
unsafe fn host_bytes<'a>(at: usize, size: usize) -> &'a [u8] {
    if size == 0 {
        return &[];
    }
    // SAFETY: this function's contract, with a non-zero size.
    unsafe { std::slice::from_raw_parts(at as *const u8, size) }
}

/// As [`host_bytes`], writable.
///
/// # Safety
/// When `size` > 0, `at` is the address of `size` writable bytes that nothing else uses for
/// `'a`.
unsafe fn host_bytes_mut<'a>(at: usize, size: usize) -> &'a mut [u8] {
    if size == 0 {
        return &mut [];
    }
    // SAFETY: this function's contract, with a non-zero size.
    unsafe { std::slice::from_raw_parts_mut(at as *mut u8, size) }
}
