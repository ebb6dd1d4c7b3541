//! An RPC device's buffer type.

use std::ffi::{c_void, CStr};
use std::sync::Arc;

use ggml_backend_rs_rpc::wire::MAX_SRC;
use ggml_backend_rs_rpc::{Client, Error as RpcError, WireTensor};

use super::buffer_iface::BUFFER_IFACE;
use super::on_wire::{server_pads, wire};
use super::state::{find_device, lock, AllocKey, RpcBuffer, RpcDevice, BUFFERS};
use crate::abi::log::log_error;
use crate::abi::object::{buft_iface, CObject};
use crate::abi::*;

pub(super) const BUFT_IFACE: ggml_backend_buffer_type_i = buft_iface!(RpcBuft {
    get_name,
    alloc_buffer,
    get_alignment,
    get_max_size,
    get_alloc_size,
});

/// An RPC device as its buffer type.
#[derive(Clone, Copy)]
pub(super) struct RpcBuft(&'static RpcDevice);

impl CObject for RpcBuft {
    const KIND: &'static str = "RPC buffer type";
    type Held = RpcBuft;
    fn find(addr: usize) -> Option<RpcBuft> {
        find_device(|d| d.buft == addr).map(RpcBuft)
    }
}

impl RpcBuft {
    fn get_name(&self, _: Buft) -> &CStr {
        &self.0.long_name
    }

    fn alloc_buffer(&self, buft: Buft, size: usize) -> ggml_backend_buffer_t {
        let d = self.0;
        let index = d.index;
        let made = d.remote.call(move |c: &mut Client| -> Result<_, RpcError> {
            let Some(rb) = c.alloc_buffer(index, size as u64)? else {
                return Ok(None);
            };
            Ok(Some((rb, c.buffer_base(rb.handle)?)))
        });
        let (rb, base) = match made {
            Some(Ok(Some(made))) => made,
            Some(Ok(None)) => {
                log_error!(
                    "{}: the server cannot allocate {size} bytes",
                    d.long_name.to_string_lossy()
                );
                return std::ptr::null_mut();
            }
            // the connection's failure is logged by its thread
            _ => return std::ptr::null_mut(),
        };
        let state = Arc::new(RpcBuffer {
            dev: d,
            handle: rb.handle,
            base,
        });
        // the context is the state's address, for identification only
        let context = Arc::as_ptr(&state) as *mut c_void;
        let b = crate::buffer::init(
            buft.as_ptr(),
            BUFFER_IFACE,
            context,
            usize::try_from(rb.size).unwrap_or(size),
        );
        BUFFERS.insert(b.as_ptr() as usize, state);
        b.as_ptr()
    }

    fn get_alignment(&self, _: Buft) -> usize {
        self.0.alignment
    }

    fn get_max_size(&self, _: Buft) -> usize {
        self.0.max_size
    }

    fn get_alloc_size(&self, _: Buft, t: Tensor) -> usize {
        let d = self.0;
        let nbytes = t.nbytes();
        if !server_pads(t) && !crate::abi::facts::alloc_size_may_expand(t.op()) {
            return nbytes;
        }
        let key = AllocKey {
            ty: t.type_(),
            op: t.op(),
            op_params: t.op_params(),
            ne: t.ne_all(),
            nb: t.nb_all(),
        };
        if let Some(&size) = lock(&d.alloc_sizes).get(&key) {
            return size.max(nbytes);
        }
        let (Ok(w), Ok(srcs)) = (
            wire(t, &d.remote),
            (0..MAX_SRC)
                .map(|j| {
                    t.src(j)
                        .map_or(Ok(WireTensor::default()), |s| wire(s, &d.remote))
                })
                .collect::<Result<Vec<_>, _>>(),
        ) else {
            return nbytes;
        };
        let index = d.index;
        match d
            .remote
            .call(move |c: &mut Client| c.alloc_size(index, &w, &srcs))
        {
            Some(Ok(size)) => {
                let size = usize::try_from(size).unwrap_or(usize::MAX);
                lock(&d.alloc_sizes).insert(key, size);
                size.max(nbytes)
            }
            _ => nbytes,
        }
    }
}
