//! ggml-backend-rs: ggml's backend layer — buffers, backends, devices, the registry with
//! dynamic loading, the scheduler and the meta device — implemented in Rust behind ggml's C
//! ABI, so that an unchanged llama.cpp (libllama, ggml-cpu, ggml-cuda, ...) links against it in
//! place of upstream's `ggml-backend.cpp`, `ggml-backend-reg.cpp`, `ggml-backend-dl.cpp` and
//! `ggml-backend-meta.cpp`.
//!
//! Layout: the pure rules (split states, view mapping, transfer planning, the AllReduce
//! schedule, ggml's op vocabulary) are the workspace member `ggml-backend-rs-core`, which
//! forbids `unsafe`. This crate is the edge around it: [`abi`] mirrors the C types and wraps
//! their vtables in typed handles; [`buffer`], [`tensor`], [`backend`], [`registry`],
//! [`sched`] and [`meta`] hold the behaviour, and [`rpc`] is our client for ggml-rpc servers;
//! `ffi` holds the exported functions, which validate arguments and call the rest (those that
//! take pointers are `unsafe extern "C"`, each with its caller's contract in a `# Safety`
//! section).
//!
//! Panics: a panic hook, installed by a constructor when the library is loaded (`abi/log.rs`), hands
//! the panic's message and location to `ggml_abort`, so a panic ends like ggml's own fatal
//! errors: in the application's abort callback (`ggml_set_abort_callback`) or as ggml's message
//! and backtrace on stderr, then `abort()`. Nothing unwinds into C: every profile builds with
//! `panic = "abort"`, and since Rust 1.81 (this crate needs 1.85) a panic that reaches an
//! `extern "C"` function's boundary aborts the process in any case.

// A test binary without ggml to link (plain `cargo test`, see build.rs) leaves the crate out: one
// condition for all of it.
#![cfg(not(all(test, ggml_backend_rs_unlinked)))]
// Every unsafe operation sits in its own `unsafe` block, and every block says why it is sound.
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

pub mod abi;

pub mod backend;
pub mod buffer;
pub mod meta;
pub mod plugin;
pub mod registry;
pub mod rpc;
pub mod sched;
pub mod tensor;

mod ffi;
pub mod version;
