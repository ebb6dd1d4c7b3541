//! The ABI classes this library implements, one module of data each: which ggml releases
//! share the ABI (checked against a host by the plugin), the backend API version, and what the
//! class's ggml does differently that is not a layout — the scheduler's policy, how libllama
//! sizes slices, registration, the AllReduce preference. Layouts and exports that differ are
//! the ABI facts (`crate::abi::facts`, cargo features); Cargo.toml's `[features]` says which
//! facts each release has. A class module imports the core and `abi` only.
//!
//! Cargo picks the release (feature `ggml-0-26-0`, the default, `ggml-0-25-3`, `ggml-0-24-0`,
//! `ggml-0-19-0`, `ggml-0-18-0`, `ggml-0-13-1` or `ggml-0-9-11`); CMake enables the one that
//! matches the llama.cpp tree it builds (cmake/ggml-version.cmake, which holds the same class
//! table for the C programs). Each module also carries `layout_check`, the compile-time proof of
//! the class's layouts against the C compiler's view of upstream's headers. This file is the
//! only `cfg` on a release but for class E's one scheduler difference (`class_e::GRAPH_INPUTS`).

macro_rules! one_release {
    ($($f:literal),*) => {
        const RELEASES_ENABLED: usize = 0 $(+ cfg!(feature = $f) as usize)*;
        const _: () = assert!(
            RELEASES_ENABLED == 1,
            concat!("enable exactly one ggml release feature:" $(, " ", $f)*)
        );
    };
}
one_release!(
    "ggml-0-9-11",
    "ggml-0-13-1",
    "ggml-0-18-0",
    "ggml-0-19-0",
    "ggml-0-24-0",
    "ggml-0-25-3",
    "ggml-0-26-0"
);

/// The llama.cpp tree's own ggml version, when CMake builds a tree whose version no class
/// lists but whose headers equal a listed release's (cmake/ggml-version.cmake); the plugin
/// takes a host of that version as its class's. Set by CMake's cargo command.
/// cbindgen:ignore
pub const UNLISTED_RELEASE: Option<&str> = match option_env!("GGML_BACKEND_RS_UNLISTED_RELEASE") {
    Some(v) if !v.is_empty() => Some(v),
    _ => None,
};

#[cfg(feature = "ggml-0-9-11")]
mod class_a;
#[cfg(feature = "ggml-0-9-11")]
pub use class_a::*;

#[cfg(feature = "ggml-0-13-1")]
mod class_b;
#[cfg(feature = "ggml-0-13-1")]
pub use class_b::*;

#[cfg(feature = "ggml-0-18-0")]
mod class_c;
#[cfg(feature = "ggml-0-18-0")]
pub use class_c::*;

#[cfg(feature = "ggml-0-19-0")]
mod class_d;
#[cfg(feature = "ggml-0-19-0")]
pub use class_d::*;

#[cfg(any(feature = "ggml-0-24-0", feature = "ggml-0-25-3"))]
mod class_e;
#[cfg(any(feature = "ggml-0-24-0", feature = "ggml-0-25-3"))]
pub use class_e::*;

#[cfg(feature = "ggml-0-26-0")]
mod class_f;
#[cfg(feature = "ggml-0-26-0")]
pub use class_f::*;
