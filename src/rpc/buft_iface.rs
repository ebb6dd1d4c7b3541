//! An RPC device's buffer type.

use std::ffi::{c_char, c_void};
use std::sync::Arc;

use ggml_backend_rs_rpc::wire::MAX_SRC;
use ggml_backend_rs_rpc::{Client, Error as RpcError, WireTensor};

use super::buffer_iface::BUFFER_IFACE;
use super::on_wire::{server_pads, wire};
use super::state::{device_of_buft, lock, AllocKey, RpcBuffer, BUFFERS};
use crate::abi::log::log_error;
use crate::abi::*;

pub(super) const BUFT_IFACE: ggml_backend_buffer_type_i = ggml_backend_buffer_type_i {
    get_name: Some(buft_get_name),
    alloc_buffer: Some(buft_alloc_buffer),
    get_alignment: Some(buft_get_alignment),
    get_max_size: Some(buft_get_max_size),
    get_alloc_size: Some(buft_get_alloc_size),
    ..ggml_backend_buffer_type_i::EMPTY
};

unsafe extern "C" fn buft_get_name(buft: ggml_backend_buffer_type_t) -> *const c_char {
    device_of_buft(buft).long_name.as_ptr()
}

unsafe extern "C" fn buft_alloc_buffer(
    buft: ggml_backend_buffer_type_t,
    size: usize,
) -> ggml_backend_buffer_t {
    let d = device_of_buft(buft);
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
        buft,
        BUFFER_IFACE,
        context,
        usize::try_from(rb.size).unwrap_or(size),
    );
    BUFFERS.insert(b.as_ptr() as usize, state);
    b.as_ptr()
}

unsafe extern "C" fn buft_get_alignment(buft: ggml_backend_buffer_type_t) -> usize {
    device_of_buft(buft).alignment
}

unsafe extern "C" fn buft_get_max_size(buft: ggml_backend_buffer_type_t) -> usize {
    device_of_buft(buft).max_size
}

unsafe extern "C" fn buft_get_alloc_size(
    buft: ggml_backend_buffer_type_t,
    tensor: *const ggml_tensor,
) -> usize {
    let d = device_of_buft(buft);
    // SAFETY: ggml_backend_buft_get_alloc_size passes a live tensor.
    let Some(t) = (unsafe { Tensor::from_ptr(tensor as *mut ggml_tensor) }) else {
        return 0;
    };
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
