//! Links the Rust tests with ggml core.
//!
//! The crate calls into ggml core (ggml-base's C code) and ggml core calls the crate, so a
//! test binary needs both. `scripts/test.sh` builds them with CMake and passes the libraries
//! in `GGML_BACKEND_RS_TEST_LIBS` (';'-separated absolute paths, see
//! `build/static/rust-test-libs.txt`). The libraries and the crate refer to each other, so
//! they are linked as one group. Library builds (staticlib, cdylib) are unaffected: there
//! ggml core is provided by the program that links the crate.

fn main() {
    println!("cargo:rerun-if-env-changed=GGML_BACKEND_RS_TEST_LIBS");
    println!("cargo::rustc-check-cfg=cfg(ggml_backend_rs_test_build)");
    let Ok(libs) = std::env::var("GGML_BACKEND_RS_TEST_LIBS") else {
        return;
    };
    let libs: Vec<&str> = libs.split(';').filter(|l| !l.is_empty()).collect();
    if libs.is_empty() {
        return;
    }
    // Test binaries unwind (the harness needs it); see the panic guard in src/lib.rs.
    println!("cargo:rustc-cfg=ggml_backend_rs_test_build");
    // Unit tests of the library and the integration tests in tests/ both need the group;
    // `--no-as-needed` keeps shared libraries of the list (OpenMP, libstdc++) linked.
    println!("cargo:rustc-link-arg=-Wl,--no-as-needed");
    println!("cargo:rustc-link-arg=-Wl,--start-group");
    for lib in &libs {
        println!("cargo:rerun-if-changed={lib}");
        println!("cargo:rustc-link-arg={lib}");
    }
    println!("cargo:rustc-link-arg=-Wl,--end-group");
}
