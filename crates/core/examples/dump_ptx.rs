//! Writes the AllReduce kernels' PTX modules to a directory, one file per device count, for
//! tools that run them without the library (`bench/ptxcheck`):
//!
//!     cargo run -p ggml-backend-rs-core --example dump_ptx -- DIR
//!
//! writes `DIR/allreduce_x{n}.ptx` for n = 2..=8, and the mapped kernel's `DIR/mapped_x{n}.ptx`
//! for n = 1..=8 (`bench/ptxcheck/mappedcheck.c`).

use ggml_backend_rs_core::{mapped, ptx};
use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let Some(dir) = std::env::args_os().nth(1).map(PathBuf::from) else {
        eprintln!("usage: dump_ptx DIR");
        return ExitCode::from(2);
    };
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!("dump_ptx: {}: {e}", dir.display());
        return ExitCode::FAILURE;
    }
    let modules = (2..=8)
        .map(|n| (format!("allreduce_x{n}.ptx"), ptx::ptx(n)))
        .chain((1..=8).map(|n| (format!("mapped_x{n}.ptx"), mapped::ptx(n))));
    for (name, text) in modules {
        let path = dir.join(name);
        if let Err(e) = std::fs::write(&path, text) {
            eprintln!("dump_ptx: {}: {e}", path.display());
            return ExitCode::FAILURE;
        }
        println!("{}", path.display());
    }
    ExitCode::SUCCESS
}
