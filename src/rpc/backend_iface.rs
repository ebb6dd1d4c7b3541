//! A backend on a server: asynchronous transfers, graphs and events.

use std::ffi::{c_char, c_void};
use std::sync::Arc;

use ggml_backend_rs_rpc::GraphMsg;

use super::buffer_iface::{host_bytes, on_wire, read_failed, read_into, upload};
use super::on_wire::wire_graph;
use super::state::{backend, find_device, lock, wait_event, BACKENDS, EVENTS};
use crate::abi::log::log_error;
use crate::abi::*;

pub(super) const BACKEND_IFACE: ggml_backend_i = ggml_backend_i {
    get_name: Some(backend_get_name),
    free: Some(backend_free),
    set_tensor_async: Some(backend_set_tensor_async),
    get_tensor_async: Some(backend_get_tensor_async),
    set_tensor_2d_async: None,
    get_tensor_2d_async: None,
    cpy_tensor_async: None,
    synchronize: Some(backend_synchronize),
    graph_plan_create: None,
    graph_plan_free: None,
    graph_plan_update: None,
    graph_plan_compute: None,
    graph_compute: Some(backend_graph_compute),
    event_record: Some(backend_event_record),
    event_wait: Some(backend_event_wait),
    graph_optimize: None,
};

unsafe extern "C" fn backend_get_name(be: ggml_backend_t) -> *const c_char {
    backend(be).dev.long_name.as_ptr()
}

pub(super) unsafe extern "C" fn backend_free(be: ggml_backend_t) {
    if let Some(b) = BACKENDS.remove(be as usize) {
        // SAFETY: the live backend ggml frees through this entry.
        if let Some(h) = unsafe { Backend::from_ptr(be) } {
            crate::backend::unextend(h);
        }
        b.dev.remote.drain();
        // SAFETY: made by dev_init_backend with Box; ggml frees a backend once, through this
        // entry.
        drop(unsafe { Box::from_raw(be) });
    }
}

unsafe extern "C" fn backend_set_tensor_async(
    be: ggml_backend_t,
    tensor: *mut ggml_tensor,
    data: *const c_void,
    offset: usize,
    size: usize,
) {
    let b = backend(be);
    let Some((t, w)) = on_wire(b.dev, tensor) else {
        return;
    };
    // SAFETY: ggml_backend_tensor_set_async passes `size` readable bytes; they are copied now.
    let bytes = unsafe { host_bytes(data as usize, size) }.to_vec();
    let weights = t
        .data_buffer()
        .is_some_and(|buf| buf.usage() == USAGE_WEIGHTS);
    b.dev
        .remote
        .post(move |c| upload(c, &w, weights, offset, &bytes));
}

unsafe extern "C" fn backend_get_tensor_async(
    be: ggml_backend_t,
    tensor: *const ggml_tensor,
    data: *mut c_void,
    offset: usize,
    size: usize,
) {
    let b = backend(be);
    let at = data as usize;
    let Some((_, w)) = on_wire(b.dev, tensor) else {
        // SAFETY: as below; written now, before the caller can synchronize.
        unsafe { read_failed(at, size) };
        return;
    };
    // SAFETY: ggml_backend_tensor_get_async's caller keeps `size` writable bytes at `data`
    // untouched until it synchronizes the backend, which waits for this job.
    b.dev
        .remote
        .post(move |c| unsafe { read_into(c, &w, offset, at, size) });
}

unsafe extern "C" fn backend_synchronize(be: ggml_backend_t) {
    backend(be).dev.remote.drain();
}

unsafe extern "C" fn backend_graph_compute(
    be: ggml_backend_t,
    cgraph: *mut ggml_cgraph,
) -> ggml_status {
    let b = backend(be);
    let d = b.dev;
    if let Some(e) = d.remote.failure() {
        log_error!(
            "{}: graph compute refused: {e}",
            d.long_name.to_string_lossy()
        );
        return GGML_STATUS_FAILED;
    }
    // SAFETY: ggml_backend_graph_compute passes a live graph.
    let Some(g) = (unsafe { Graph::from_ptr(cgraph) }) else {
        return GGML_STATUS_FAILED;
    };
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

unsafe extern "C" fn backend_event_record(be: ggml_backend_t, event: ggml_backend_event_t) {
    let b = backend(be);
    if let Some(m) = EVENTS.get(event as usize) {
        m.record(&b.dev.remote);
    }
}

unsafe extern "C" fn backend_event_wait(be: ggml_backend_t, event: ggml_backend_event_t) {
    let b = backend(be);
    // SAFETY: ggml_backend_event_wait passes a live event.
    let ev_dev = unsafe { (*event).device } as usize;
    // One queue per server keeps its own order; an event of another server is waited for here.
    let same_server =
        find_device(|d| d.device == ev_dev).is_some_and(|d| Arc::ptr_eq(&d.remote, &b.dev.remote));
    if !same_server {
        wait_event(event);
    }
}
