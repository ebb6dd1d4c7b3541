//! The RPC client's objects as Rust state: the servers and devices (which live for the process,
//! as upstream's), buffers, backends and events (in registries while alive), and how a vtable
//! entry's argument finds its object. Every object is recognised by its address; no code casts
//! a C object's `context` back to a Rust type.

use std::collections::HashMap;
use std::ffi::CString;
use std::sync::{Arc, Mutex};

pub(super) use ggml_backend_rs_core::owned::lock;
use ggml_backend_rs_core::owned::Registry;

use super::remote::{Marker, Remote};
use crate::abi::*;

/// ggml-rpc's devices pad quantized rows to 512 elements on CUDA servers: tensors whose
/// first dimension is not a multiple of it are sized and initialised by the server.
pub(super) const PADDED_ROW: i64 = 512;

pub(super) static GUID: ggml_guid = [
    0x3c, 0x52, 0x9d, 0x07, 0xa1, 0x6e, 0x48, 0x0b, 0x8f, 0x14, 0x6a, 0xd3, 0x27, 0x90, 0xc5, 0x1e,
];

// --- state ----------------------------------------------------------------------------------

/// A server added with `ggml_backend_rpc_add_server`.
pub(super) struct Server {
    pub(super) endpoint: String,
    pub(super) name: CString,
    /// Our registry object for it (`RPC[endpoint]`).
    pub(super) reg: usize,
    pub(super) devices: Vec<&'static RpcDevice>,
}

/// One device of a server.
pub struct RpcDevice {
    pub(super) remote: Arc<Remote>,
    /// The device's index on its server.
    pub(super) index: u32,
    /// `RPC<n>`, numbered over all servers in the order they were added.
    pub(super) name: CString,
    /// The endpoint.
    pub(super) description: CString,
    /// `RPC<index>[endpoint]`: its buffer type's and backends' name.
    pub(super) long_name: CString,
    pub(super) alignment: usize,
    pub(super) max_size: usize,
    pub(super) device: usize,
    pub(super) buft: usize,
    /// The uid of the last graph sent for this device: the server keeps it for a recompute.
    pub(super) last_graph: Mutex<u64>,
    /// Sizes the server reported for tensors it sizes itself, by shape and op.
    pub(super) alloc_sizes: Mutex<HashMap<AllocKey, usize>>,
}

#[derive(Clone, PartialEq, Eq, Hash)]
pub(super) struct AllocKey {
    pub(super) ty: ggml_type,
    pub(super) op: ggml_op,
    pub(super) op_params: [i32; GGML_MAX_OP_PARAMS / 4],
    pub(super) ne: [i64; 4],
    pub(super) nb: [usize; 4],
}

/// A buffer on a server: its handle there and its base address in the server's memory (the
/// buffer's base: tensors' `data` are server addresses).
pub(super) struct RpcBuffer {
    pub(super) dev: &'static RpcDevice,
    pub(super) handle: u64,
    pub(super) base: u64,
}

pub(super) struct RpcBackend {
    pub(super) dev: &'static RpcDevice,
}

pub(super) static SERVERS: Mutex<Vec<&'static Server>> = Mutex::new(Vec::new());
pub(super) static DEVICES: Mutex<Vec<&'static RpcDevice>> = Mutex::new(Vec::new());
pub(super) static BUFFERS: Registry<RpcBuffer> = Registry::new();
pub(super) static BACKENDS: Registry<RpcBackend> = Registry::new();
pub(super) static EVENTS: Registry<Marker> = Registry::new();

pub(super) fn find_device(pred: impl Fn(&RpcDevice) -> bool) -> Option<&'static RpcDevice> {
    lock(&DEVICES).iter().copied().find(|d| pred(d))
}

/// Waits on the host for `event`: ours, or another device's through that device.
pub(super) fn wait_event(event: ggml_backend_event_t) {
    if let Some(m) = EVENTS.get(event as usize) {
        m.wait();
        return;
    }
    // SAFETY: ggml passes a live event, whose device outlives it.
    if let Some(e) = unsafe { Event::from_ptr(event) } {
        if let Some(d) = e.device() {
            d.event_synchronize(e);
        }
    }
}
