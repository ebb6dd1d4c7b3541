//! The C ABI this library shares with ggml: type mirrors, the ggml core functions it calls,
//! typed handles over its objects, and ggml's logger and fatal-error path as the library uses
//! them ([`log`]). Behaviour lives in the other modules.

pub mod backend;
pub mod facts;
pub mod ggml;
pub mod meta;

pub use backend::*;
pub use facts::*;
pub use ggml::*;
pub use meta::*;
pub mod handle;
pub mod header;
pub mod log;
pub mod object;

pub use handle::{
    per_device_arrays, tensor_list, AllocDep, Backend, Buffer, Buft, Device, Event, Graph, Reg,
    Tensor,
};
pub use header::Headers;
