//! The safe core of ggml-backend-rs.
//!
//! Everything here is plain Rust over plain data: no C types, no pointers, no `unsafe`
//! (forbidden below, so the compiler holds the line). The root crate is the edge: it reads
//! ggml's tensors and graphs through its typed handles, turns them into the values defined
//! here, calls these functions, and turns their answers back into C objects and calls.
//!
//! * [`abi_class`]: which ggml releases share an ABI, and how a running host is checked
//!   against it;
//! * [`sched_policy`]: what the ggml versions' schedulers do differently, as data;
//! * [`assign`]: the scheduler's passes 1–4 (which backend computes each node), over traits
//!   the root crate implements for ggml's graphs and devices;
//! * [`partition`]: the scheduler's pass 5 (the graph's splits and the copies they need);
//! * [`owned`]: the registry that maps the address of a C object the library made to its
//!   Rust state;
//! * [`op`]: ggml's graph operations as an enum, built from C's `int` with `TryFrom`;
//! * [`split`]: how one tensor is distributed over the devices of a meta device (split
//!   states, segments, the runs each device holds), checked when built from C's struct;
//! * [`rules`]: per-device layouts, view mapping and the per-op rules that say which split an
//!   op's result has, with typed errors;
//! * [`transfer`]: strided transfers and the pieces that move a byte range of a split tensor;
//! * [`packed`]: the same for results that pack two tensors into one (gated_delta_net's
//!   output and states);
//! * [`exchange`]: the copy/add schedule of the AllReduce and the one summation order every
//!   AllReduce path follows;
//! * [`ptx`]: the text of our CUDA AllReduce kernels, which add in that order, and [`launch`]:
//!   how their launches share an AllReduce among GPUs (one-shot, two-shot);
//! * [`mapped`]: the AllReduce through mapped pinned host memory, for GPUs without peer
//!   access: its layout, which kernel a topology gets, and its protocol as a model; and
//!   [`engines`]: the same exchange by the copy engines for large partials, as a schedule of
//!   copies and events proven free of races;
//! * [`memory`]: the memory a tensor-parallel device can offer (what its split can place);
//! * [`names`]: a split policy by GGUF tensor name, for the plugin's tensor-parallel devices
//!   (libllama gives them no split callback);
//! * [`plan`]: the decisions of the meta backend's graph plan (MoE tails, sub-graph cuts, the
//!   nodes an AllReduce takes over, misplaced partial sums);
//! * [`capture`]: when a plan's step is captured as one CUDA graph, replayed or run eagerly;
//! * [`plan_cache`]: how many graph plans a meta backend keeps;
//!
//! `cargo test` in the repository root runs these tests (and the property tests in
//! `tests/`) without ggml, CMake or a C compiler.

#![forbid(unsafe_code)]
#![warn(missing_debug_implementations)]

pub mod abi_class;
pub mod assign;
pub mod capture;
pub mod chunk;
pub mod engines;
pub mod exchange;
pub mod fault;
pub mod infer;
pub mod launch;
pub mod mapped;
pub mod memory;
pub mod names;
pub mod op;
pub mod owned;
pub mod packed;
pub mod partition;
pub mod plan;
pub mod plan_cache;
pub mod ptx;
pub mod rules;
pub mod sched_policy;
pub mod split;
pub mod transfer;

pub use op::{Op, OpTable};
pub use split::Split;
