//! A buffer on a server: tensor data in and out.

use std::sync::Arc;

use ggml_backend_rs_rpc::{Client, WireTensor};

use super::on_wire::{server_pads, wire};
use super::state::{lock, RpcBuffer, RpcDevice, BUFFERS, DEVICES};
use crate::abi::log::log_error;
use crate::abi::object::{buffer_iface, CObject};
use crate::abi::*;

pub(super) const BUFFER_IFACE: ggml_backend_buffer_i = buffer_iface!(RpcBuffer {
    free_buffer,
    get_base,
    init_tensor,
    memset_tensor,
    set_tensor,
    get_tensor,
    cpy_tensor,
    clear,
});

impl CObject for RpcBuffer {
    const KIND: &'static str = "RPC buffer";
    type Held = Arc<RpcBuffer>;
    fn find(addr: usize) -> Option<Arc<RpcBuffer>> {
        BUFFERS.get(addr)
    }
}

impl RpcBuffer {
    fn free_buffer(this: Arc<RpcBuffer>, buffer: Buffer) {
        BUFFERS.remove(buffer.as_ptr() as usize);
        // The server drops its stored graphs with any buffer: the next graph of each of its
        // devices goes in full. Their graph locks are held while the free is queued, so that no
        // graph queued in between is taken for stored.
        let same: Vec<&'static RpcDevice> = lock(&DEVICES)
            .iter()
            .copied()
            .filter(|d| Arc::ptr_eq(&d.remote, &this.dev.remote))
            .collect();
        let mut graphs: Vec<_> = same.iter().map(|d| lock(&d.last_graph)).collect();
        let handle = this.handle;
        this.dev.remote.post(move |c| {
            let _ = c.free_buffer(handle);
        });
        graphs.iter_mut().for_each(|g| **g = 0);
    }

    fn get_base(&self, _: Buffer) -> usize {
        self.base as usize
    }

    fn init_tensor(&self, _: Buffer, t: Tensor) -> ggml_status {
        let Some(w) = on_wire(self.dev, t) else {
            return GGML_STATUS_FAILED;
        };
        if server_pads(t) {
            // a failure ends the connection (logged); the next compute reports it
            let _ = self
                .dev
                .remote
                .call(move |c: &mut Client| c.init_tensor(&w));
        }
        GGML_STATUS_SUCCESS
    }

    fn memset_tensor(&self, _: Buffer, t: Tensor, value: u8, offset: usize, size: usize) {
        if let Some(w) = on_wire(self.dev, t) {
            let _ = self
                .dev
                .remote
                .call(move |c: &mut Client| c.memset_tensor(&w, offset as u64, size as u64, value));
        }
    }

    fn set_tensor(&self, buffer: Buffer, t: Tensor, data: &[u8], offset: usize) {
        let Some(w) = on_wire(self.dev, t) else {
            return;
        };
        let weights = buffer.usage() == USAGE_WEIGHTS;
        let _ = self
            .dev
            .remote
            .call(|c: &mut Client| upload(c, &w, weights, offset, data));
    }

    fn get_tensor(&self, _: Buffer, t: Tensor, out: &mut [u8], offset: usize) {
        let Some(w) = on_wire(self.dev, t) else {
            out.fill(0);
            return;
        };
        let _ = self
            .dev
            .remote
            .call(|c: &mut Client| read_into(c, &w, offset, out));
    }

    fn cpy_tensor(&self, _: Buffer, s: Tensor, d: Tensor) -> bool {
        // only between buffers of one server: the protocol has no copies between servers
        let same_server = BUFFERS
            .get(s.buffer() as usize)
            .is_some_and(|sb| Arc::ptr_eq(&sb.dev.remote, &self.dev.remote));
        if !same_server {
            return false;
        }
        let (Some(ws), Some(wd)) = (on_wire(self.dev, s), on_wire(self.dev, d)) else {
            return false;
        };
        matches!(
            self.dev
                .remote
                .call(move |c: &mut Client| c.copy_tensor(&ws, &wd)),
            Some(Ok(true))
        )
    }

    fn clear(&self, _: Buffer, value: u8) {
        let handle = self.handle;
        let _ = self
            .dev
            .remote
            .call(move |c: &mut Client| c.clear_buffer(handle, value));
    }
}

/// The wire form of `t` for `d`'s server; None (logged) when it cannot be sent.
pub(super) fn on_wire(d: &RpcDevice, t: Tensor) -> Option<WireTensor> {
    match wire(t, &d.remote) {
        Ok(w) => Some(w),
        Err(e) => {
            log_error!("{}: {e}", d.long_name.to_string_lossy());
            None
        }
    }
}

/// Sends `data` to `w` at `offset`: weights through the server's cache (by hash, when large),
/// anything else directly.
pub(super) fn upload(c: &mut Client, w: &WireTensor, weights: bool, offset: usize, data: &[u8]) {
    let _ = if weights {
        c.set_weights(w, offset as u64, data).map(|_| ())
    } else {
        c.set_tensor(w, offset as u64, data)
    };
}

/// Reads `out.len()` bytes of `w` from `offset` into `out`: zeros where the server cannot give
/// them.
pub(super) fn read_into(c: &mut Client, w: &WireTensor, offset: usize, out: &mut [u8]) {
    if !out.is_empty() && c.get_tensor(w, offset as u64, out).is_err() {
        out.fill(0);
    }
}
