//! Backends (streams), and placing tensors into buffers.

pub mod graph_copy;

use std::ffi::c_void;
use std::sync::Arc;

use ggml_backend_rs_core::owned::Registry;

use crate::abi::log::{abort, ggml_assert};
use crate::abi::*;

/// What a backend implemented in this crate adds to ggml's backend vtable. The scheduler asks
/// it, by backend, where it would otherwise have to name a backend kind.
pub trait Extension: Send + Sync {
    /// Whether the backend can run `nodes` (every node the scheduler gives it for one graph,
    /// in execution order) before any of them has memory: called when a graph is reserved, so
    /// that what cannot run fails when a context is made, not in its first compute.
    fn check_reserve(&self, nodes: Vec<Tensor>) -> Result<(), String> {
        let _ = nodes;
        Ok(())
    }

    /// Why the backend can no longer compute, if it cannot (an RPC server lost): asked after
    /// waits that ggml's interface gives no status, so that the step fails there.
    fn failure(&self) -> Option<String> {
        None
    }

    /// Waits for the work queued on the backend where it learns only later than the call that
    /// queued it whether that work ran (an RPC server computes after `graph_compute` returned,
    /// and reads have no status), and says whether it did. The scheduler asks once per
    /// compute, after the last split, so that a step with a lost server fails in that step
    /// instead of handing back outputs nobody computed. Nothing to wait for: `Ok`.
    fn settle(&self) -> Result<(), String> {
        Ok(())
    }
}

/// Whether any of `backends` reports a failure through its extension (see
/// [`Extension::failure`]).
pub fn any_failed(backends: &[Backend]) -> bool {
    backends
        .iter()
        .any(|&b| extension(b).is_some_and(|e| e.failure().is_some()))
}

/// Settles `backend` if it has an extension (see [`Extension::settle`]).
pub fn settle(backend: Backend) -> Result<(), String> {
    extension(backend).map_or(Ok(()), |e| e.settle())
}

/// Settles every one of `backends`; the first failure found.
pub fn settle_all(backends: &[Backend]) -> Result<(), String> {
    backends.iter().try_for_each(|&b| settle(b))
}

static EXTENSIONS: Registry<dyn Extension> = Registry::new();

/// Attaches `ext` to `backend` until [`unextend`].
pub fn extend(backend: Backend, ext: Arc<dyn Extension>) {
    EXTENSIONS.insert(backend.as_ptr() as usize, ext);
}

/// Detaches the extension of `backend` (when it is freed).
pub fn unextend(backend: Backend) {
    EXTENSIONS.remove(backend.as_ptr() as usize);
}

/// The extension of `backend`, if it has one.
pub fn extension(backend: Backend) -> Option<Arc<dyn Extension>> {
    EXTENSIONS.get(backend.as_ptr() as usize)
}

/// Queues the graph on the backend (asynchronously where the backend can).
pub fn graph_compute_async(backend: Backend, graph: Graph) -> ggml_status {
    backend.graph_compute(graph)
}

/// Computes the graph and waits for the result.
pub fn graph_compute(backend: Backend, graph: Graph) -> ggml_status {
    let status = graph_compute_async(backend, graph);
    backend.synchronize();
    status
}

/// Default buffer type of a backend: its device's.
pub fn default_buffer_type(backend: Backend, func: &str) -> Buft {
    let device = backend.device_handle(func);
    // SAFETY: buffer types returned by a device live as long as the device.
    match unsafe { Buft::from_ptr(device.buffer_type()) } {
        Some(b) => b,
        None => abort(
            file!(),
            line!(),
            &format!("{func}: device {} has no buffer type", device.name_string()),
        ),
    }
}

/// Points a view at its source's memory and lets the buffer initialise it.
pub fn view_init(tensor: Tensor) -> ggml_status {
    const F: &str = "ggml_backend_view_init";
    ggml_assert!(
        tensor.buffer().is_null(),
        "{F}: tensor '{}' already has a buffer",
        tensor.name_string()
    );
    let Some(src) = tensor.view_src() else {
        abort(
            file!(),
            line!(),
            &format!("{F}: tensor '{}' is not a view", tensor.name_string()),
        )
    };
    let Some(buffer) = src.own_buffer() else {
        abort(
            file!(),
            line!(),
            &format!("{F}: view source '{}' has no buffer", src.name_string()),
        )
    };
    ggml_assert!(
        !src.data().is_null(),
        "{F}: view source '{}' is not allocated",
        src.name_string()
    );
    let data = (src.data() as *mut u8).wrapping_add(tensor.view_offs()) as *mut c_void;
    tensor.attach(buffer, data);
    buffer.init_tensor(tensor)
}

/// Places an unallocated tensor at `addr` inside `buffer` and lets the buffer initialise it.
pub fn tensor_alloc(buffer: Buffer, tensor: Tensor, addr: *mut c_void) -> ggml_status {
    const F: &str = "ggml_backend_tensor_alloc";
    ggml_assert!(
        tensor.buffer().is_null(),
        "{F}: tensor '{}' already has a buffer",
        tensor.name_string()
    );
    ggml_assert!(
        tensor.data().is_null(),
        "{F}: tensor '{}' already has data",
        tensor.name_string()
    );
    ggml_assert!(
        tensor.view_src().is_none(),
        "{F}: tensor '{}' is a view; use ggml_backend_view_init",
        tensor.name_string()
    );
    let base = crate::buffer::base(buffer) as usize;
    let addr_n = addr as usize;
    ggml_assert!(
        addr_n >= base,
        "{F}: address {addr:p} is below the buffer's base"
    );
    if !crate::buffer::has_placeholder_addresses(buffer) {
        let size = buffer.buft_handle().alloc_size(tensor);
        let end = addr_n.checked_add(size);
        let limit = base.checked_add(buffer.size());
        ggml_assert!(
            matches!((end, limit), (Some(e), Some(l)) if e <= l),
            "{F}: tensor '{}' ({size} bytes at offset {}) does not fit in the buffer ({} bytes)",
            tensor.name_string(),
            addr_n - base,
            buffer.size()
        );
    }
    tensor.attach(buffer, addr);
    buffer.init_tensor(tensor)
}
