//! Fact `comm-api`: a backend offers its own AllReduce for tensor parallelism as a
//! communicator, `ggml_backend_comm_init` / `_free` / `_allreduce_tensor` from its registry.
//! Without it the registry offers one function, `ggml_backend_allreduce_tensor`. The meta
//! backend's use of either is `crate::meta::backend_allreduce`.

#[cfg(feature = "comm-api")]
use std::ffi::c_void;

use crate::abi::backend::ggml_backend_t;
use crate::abi::ggml::ggml_tensor;

/// Whether backends offer communicators (else the one-function AllReduce).
/// cbindgen:ignore
pub const COMM_API: bool = cfg!(feature = "comm-api");

/// A backend's communicator for tensor parallelism, offered by its registry as
/// `ggml_backend_comm_init` / `_free` / `_allreduce_tensor`.
#[cfg(feature = "comm-api")]
pub type ggml_backend_comm_init_t =
    Option<unsafe extern "C" fn(backends: *mut ggml_backend_t, n_backends: usize) -> *mut c_void>;
#[cfg(feature = "comm-api")]
pub type ggml_backend_comm_free_t = Option<unsafe extern "C" fn(comm_ctx: *mut c_void)>;
#[cfg(feature = "comm-api")]
pub type ggml_backend_comm_allreduce_tensor_t =
    Option<unsafe extern "C" fn(comm_ctx: *mut c_void, tensors: *mut *mut ggml_tensor) -> bool>;

/// A backend's own AllReduce, offered by its registry as `ggml_backend_allreduce_tensor`.
#[cfg(not(feature = "comm-api"))]
pub type ggml_backend_allreduce_tensor_t = Option<
    unsafe extern "C" fn(
        backends: *mut ggml_backend_t,
        tensors: *mut *mut ggml_tensor,
        n_backends: usize,
    ) -> bool,
>;
