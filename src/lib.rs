//! ggml-backend-rs: ggml's backend layer — buffers, backends, devices, the registry with
//! dynamic loading — implemented in Rust behind ggml's C ABI, so that an unchanged
//! llama.cpp (libllama, ggml-cpu, ggml-cuda, ...) links against it in place of upstream's
//! `ggml-backend.cpp`, `ggml-backend-reg.cpp` and `ggml-backend-dl.cpp`.
//!
//! Layout: [`abi`] mirrors the C types and wraps their vtables in typed handles (the only
//! place that dereferences C pointers); [`buffer`], [`tensor`], [`backend`] and
//! [`registry`] hold the behaviour; `ffi` holds the exported functions, which validate
//! arguments and call the rest.

// Test binaries need unwinding for the test harness (cargo ignores `panic` for them); build.rs
// sets this cfg only for them. Even then no panic crosses into C: an `extern "C"` function
// aborts instead of unwinding.
#[cfg(all(not(panic = "abort"), not(ggml_backend_rs_test_build)))]
compile_error!(
    "ggml-backend-rs must be built with panic = \"abort\": a panic must never unwind into C"
);

pub mod abi;
mod log;

pub mod backend;
pub mod buffer;
pub mod meta;
pub mod registry;
pub mod sched;
pub mod tensor;

mod ffi;
