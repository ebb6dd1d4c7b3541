//! The meta device: tensor parallelism. A meta device wraps `n` simple devices (GPUs, or the
//! CPU device several times); its buffers hold every tensor as `n` per-device tensors split
//! as the tensor's [`Split`] says, and its backend runs each graph on all simple backends,
//! summing partial results (AllReduce) where a matmul's contraction was split.
//!
//! Modules, each using only those above it:
//!
//! * [`split`]: split states; `rules` (the core's): how splits propagate through ops and views;
//! * [`device`]: the device's state (simple devices, split policy, the memo of its tensors'
//!   splits);
//! * [`buffer`]: a meta buffer's state (simple buffers, per-device tensors of its tensors);
//! * [`facts`]: split inference, the edge: tensors read into the core's facts, one pass of
//!   `core::infer` per question (a tensor, a tensor being initialised, a reserved graph);
//! * [`slices`]: per-device tensors and the memory of each device's slices;
//! * [`transfer`]: host <-> meta tensor transfers, one routine for every direction and queue;
//! * `arena`: graph metadata; [`allreduce`]: the AllReduce, one file per path — `backend_allreduce`
//!   (the simple backends' own), `cuda` (our kernels, driver loaded at run time; with `mapped`
//!   and `engines`, the exchange through host memory by kernel or by the copy engines), `host`
//!   (devices in host memory, and the staged path), `copies`, `direct` — around what they share
//!   (`reduction`, [`epilogue`], `scratch`), with [`exchange`] (the copy/add schedule and
//!   summation order);
//! * `graph_plan`: a graph's plan (its cuts, AllReduces and per-device sub-graphs);
//!   [`backend`]: the meta backend, its cache of plans and their runs; `step`: a plan's step
//!   captured as one CUDA graph (with `cuda`); `workers`: threads that let CPU devices inside a
//!   meta device compute at the same time;
//! * [`buffer_iface`], [`device_iface`]: the C objects (buffers; devices, buffer types and a
//!   small private registry) and their vtables.
//!
//! Meta objects are recognised by address, and their Rust state is found the same way:
//! devices and buffer types are never freed and sit in an append-only table with their
//! `&'static MetaDevice`; buffers and backends sit in [`Registry`]s while alive, holding their
//! state as an `Arc`. No code casts a C object's `context` back to a Rust type.
//!
//! Unsafe code: the vtable entries (`unsafe extern "C" fn`) receive C pointers from ggml; they
//! find their object's state by address (above) and turn the tensors and host pointers the
//! ggml ABI describes into handles, each in a commented `unsafe` block. Everything else is
//! safe Rust over the typed handles of `abi::handle`, plus small commented `unsafe` blocks for
//! the ggml core calls (metadata contexts and graphs) and the split-state callback.

pub mod allreduce;
mod arena;
pub mod backend;
mod backend_allreduce;
pub mod buffer;
pub mod buffer_iface;
mod copies;
mod cuda;
pub mod device;
pub mod device_iface;
mod direct;
mod engines;
pub mod epilogue;
pub mod facts;
mod fault;
mod graph_plan;
mod host;
mod mapped;
mod reduction;
mod scratch;
pub mod slices;
pub mod split;
mod step;
pub mod transfer;
mod workers;

pub use ggml_backend_rs_core::{exchange, rules};

pub use split::Split;

pub fn is_meta_device(dev: *const crate::abi::ggml_backend_device) -> bool {
    device::device_at(dev as usize).is_some()
}
pub fn is_meta_buft(buft: *const crate::abi::ggml_backend_buffer_type) -> bool {
    device::device_of_buft_at(buft as usize).is_some()
}
pub fn is_meta_buffer(buf: *const crate::abi::ggml_backend_buffer) -> bool {
    buffer::BUFFERS.contains(buf as usize)
}
pub fn is_meta_backend(backend: *const crate::abi::ggml_backend) -> bool {
    backend::BACKENDS.contains(backend as usize)
}
