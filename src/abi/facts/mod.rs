//! The ABI facts: what tells ggml's backend ABIs apart, each a cargo feature. Cargo.toml's
//! `[features]` is the class table (which facts each ggml release has; docs/abi-classes.md);
//! CMake enables the release of the tree it builds. Each file here holds one fact's layouts,
//! with and without it, and the few conversions that read them; behaviour that differs reads
//! the fact's constant. The exports a fact adds or renames are declared with the exports
//! (`crate::ffi`), gated by the same feature.
//!
//! | feature | without it (class A, ggml 0.9.11) | with it |
//! |---|---|---|
//! | `meta-c-linkage` | meta API in ggml-ext.h, C++ names | in ggml-backend.h, C names |
//! | `split-nr` | split state: extents per segment | segments repeat (`nr`) |
//! | `comm-api` | AllReduce: registry proc `ggml_backend_allreduce_tensor` | `ggml_backend_comm_*` |
//! | `cgraph-uid` | graphs have no identity | `ggml_cgraph.uid` |
//! | `mmap-caps` | 4 device capabilities | `mmap_support` |
//! | `graph-optimize-params` | `graph_optimize(backend, graph)` | `+ params` (allocation dependencies) |
//! | `op-enum-101` | 96 ops | 101 (COL2IM_1D, LIGHTNING_INDEXER, DSV4_HC_*) |
//! | `alloc-size-may-expand` | every result is `ggml_nbytes` | `ggml_op_alloc_size_may_expand` |
//! | `meta-buffer-set-usage` | — | `ggml_backend_meta_buffer_set_usage` |
//! | `list-alloc` | 6 buffer-type entries, `ggml_backend_meta_alloc_ctx_tensors_from_buft` | 8, `ggml_backend_buft_alloc_buffer_n` |

#![allow(non_camel_case_types)]

pub mod alloc_size_may_expand;
pub mod cgraph_uid;
pub mod comm_api;
pub mod graph_optimize_params;
pub mod list_alloc;
pub mod mmap_caps;
pub mod op_enum;
pub mod split_nr;

pub use alloc_size_may_expand::alloc_size_may_expand;
pub use cgraph_uid::{ggml_cgraph, next_graph_uid};
pub use comm_api::*;
pub use graph_optimize_params::*;
pub use list_alloc::ggml_backend_buffer_type_i;
pub use mmap_caps::ggml_backend_dev_caps;
pub use op_enum::OPS;
pub use split_nr::{ggml_backend_meta_split_state, split_from_c, split_to_c};
