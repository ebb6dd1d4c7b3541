//! The ggml versions this library implements, one module each: everything that differs
//! between them — C layouts and vtables, the op table, the exports only one version has, and
//! the behaviour a version's callers expect — lives in that version's module, and the rest of
//! the crate is version-free. Cargo picks the version (feature `ggml-0-26-0`, the default, or
//! `ggml-0-9-11`); CMake enables the one that matches the llama.cpp tree it builds.
//!
//! Every version module provides the same names, so the crate compiles against whichever is
//! selected:
//!
//! * identity: `GGML_VERSION`, `GGML_BACKEND_API_VERSION`, `OPS` (the `enum ggml_op` values as
//!   an `OpTable` of the core's ops);
//! * layouts: `ggml_backend_buffer_type_i` (with `EMPTY`, and `META_BUFT_ENTRIES`, the entries
//!   only this version's meta buffer type fills), `ggml_backend_dev_caps` (with
//!   `mmap_support` / `set_mmap_support`), `ggml_backend_graph_optimize_t`,
//!   `ggml_backend_meta_split_state` (with `split_from_c` / `split_to_c`), `ggml_cgraph` (with
//!   `uid` / `set_uid`, and `next_graph_uid`), and `layout_check`, the compile-time proof of them
//!   against the C compiler's view of upstream's headers;
//! * behaviour: `Backend::graph_optimize` (with the allocation dependencies the backend asks
//!   for), `BackendAllReduce` (the AllReduce the simple backends offer),
//!   `OWN_KERNEL_BEFORE_BACKEND_UP_TO` (when our CUDA kernel goes first), `NAME_CONVENTIONS`
//!   (how libllama sizes and rotates slices, for the plugin's name policy),
//!   `REGISTRATION_IS_IDEMPOTENT`, `SCHED_POLICY` (what its `ggml_backend_sched` does
//!   differently, as data: `crate::sched::Policy`);
//! * the functions only this version exports.
//!
//! Supporting another ggml release is one more module here, checked by the ABI tests of that
//! version (exports, layouts, prototypes against its headers).

#[cfg(all(feature = "ggml-0-9-11", feature = "ggml-0-26-0"))]
compile_error!("enable exactly one ggml version feature: ggml-0-26-0 or ggml-0-9-11");
#[cfg(not(any(feature = "ggml-0-9-11", feature = "ggml-0-26-0")))]
compile_error!("enable one ggml version feature: ggml-0-26-0 (default) or ggml-0-9-11");

#[cfg(feature = "ggml-0-9-11")]
mod ggml_0_9_11;
#[cfg(feature = "ggml-0-9-11")]
pub use ggml_0_9_11::*;

#[cfg(feature = "ggml-0-26-0")]
mod ggml_0_26_0;
#[cfg(feature = "ggml-0-26-0")]
pub use ggml_0_26_0::*;
