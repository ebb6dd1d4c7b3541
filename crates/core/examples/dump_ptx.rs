//! Writes the AllReduce kernels' PTX modules to a directory, one file per device count, for
//! tools that run them without the library (`bench/ptxcheck`):
//!
//!     cargo run -p ggml-backend-rs-core --example dump_ptx -- DIR
//!
//! writes `DIR/allreduce_x{n}.ptx` for n = 2..=8.

use ggml_backend_rs_core::ptx;
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
    for n in 2..=8 {
        let path = dir.join(format!("allreduce_x{n}.ptx"));
        if let Err(e) = std::fs::write(&path, ptx::ptx(n)) {
            eprintln!("dump_ptx: {}: {e}", path.display());
            return ExitCode::FAILURE;
        }
        println!("{}", path.display());
    }
    ExitCode::SUCCESS
}
