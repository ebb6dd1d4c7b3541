//! Links the Rust tests with ggml core, when there is one to link.
//!
//! The crate calls into ggml core (ggml-base's C code) and ggml core calls the crate, so a
//! test binary of this crate needs both. `scripts/test.sh` builds them with CMake and passes
//! the libraries in `GGML_BACKEND_RS_TEST_LIBS` (';'-separated absolute paths, see
//! `build/static/rust-test-libs.txt`). The libraries and the crate refer to each other, so
//! they are linked as one group. Library builds (staticlib, cdylib) are unaffected: there
//! ggml core is provided by the program that links the crate.
//!
//! Without the libraries (a plain `cargo test` on a fresh clone) nothing could link, so the
//! cfg `ggml_backend_rs_unlinked` leaves this crate's tests out of its test binaries, and
//! `cargo test` runs the core crate's tests, which need no ggml. Under clippy nothing links, so
//! clippy always sees every test.

fn main() {
    println!("cargo:rerun-if-env-changed=GGML_BACKEND_RS_TEST_LIBS");
    println!("cargo::rustc-check-cfg=cfg(ggml_backend_rs_unlinked)");
    let libs = std::env::var("GGML_BACKEND_RS_TEST_LIBS").unwrap_or_default();
    let libs: Vec<&str> = libs.split(';').filter(|l| !l.is_empty()).collect();
    if libs.is_empty() {
        // Cargo tells build scripts which wrapper drives rustc; clippy's is clippy-driver.
        let under_clippy =
            std::env::var("RUSTC_WORKSPACE_WRAPPER").is_ok_and(|w| w.contains("clippy-driver"));
        if !under_clippy {
            println!("cargo:rustc-cfg=ggml_backend_rs_unlinked");
        }
        return;
    }
    // Unit tests of the library and the integration tests in tests/ both need the group;
    // `--no-as-needed` keeps shared libraries of the list (OpenMP, libstdc++) linked.
    println!("cargo:rustc-link-arg=-Wl,--no-as-needed");
    println!("cargo:rustc-link-arg=-Wl,--start-group");
    for lib in &libs {
        println!("cargo:rerun-if-changed={lib}");
        println!("cargo:rustc-link-arg={lib}");
    }
    println!("cargo:rustc-link-arg=-Wl,--end-group");
    // The builtin list (libggml.a, kept by ggml.c's reference to it) is handed to the registry
    // by its constructor; exported too, as the static CMake consumers do.
    println!("cargo:rustc-link-arg=-Wl,--export-dynamic-symbol=ggml_backend_rs_builtin_regs");
}
