//! The two entry points of a ggml backend plugin, for programs built against
//! upstream ggml: `ggml_backend_load("libggml-backend-rs-tp.so")` or
//! `GGML_BACKEND_PATH=libggml-backend-rs-tp.so`. The devices and their configuration are
//! described in `ggml_backend_rs::plugin`.
//!
//! Panics cannot cross these functions: the profiles build with `panic = "abort"`, and an
//! `extern "C"` function aborts rather than unwind in any case.

use std::ffi::c_int;

use ggml_backend_rs::abi::ggml_backend_reg_t;

/// The plugin's registry (`TP`), or NULL when the host's ggml is not in the process.
#[no_mangle]
pub extern "C" fn ggml_backend_init() -> ggml_backend_reg_t {
    ggml_backend_rs::plugin::init()
}

/// 1 in a host of the ABI class the plugin was built for, 0 in any other.
#[no_mangle]
pub extern "C" fn ggml_backend_score() -> c_int {
    ggml_backend_rs::plugin::score()
}
