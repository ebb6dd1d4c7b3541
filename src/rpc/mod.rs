//! Our client for ggml-rpc servers, as a ggml backend: devices `RPC0`, `RPC1`, ... on
//! unchanged `rpc-server`s of ggml 0.26 (protocol 7), in place of upstream's client.
//!
//! Upstream's client aborts the process when a server is missing, dies or answers badly, and
//! blocks forever when one stops answering. This one speaks the same protocol through the
//! core's [`Client`](ggml_backend_rs_rpc::Client), which bounds every wait and turns
//! every failure into an error naming the server; here those errors become what the ggml ABI
//! can say: `ggml_backend_rpc_add_server` returns NULL (the endpoint and the cause logged), a
//! buffer allocation returns NULL, and a graph compute on a server whose connection failed
//! returns `GGML_STATUS_FAILED`, so `llama_decode` fails instead of the process. Reads from a
//! failed server give zeros. Nothing waits longer than the timeouts
//! (`GGML_BACKEND_RS_RPC_TIMEOUT`, below).
//!
//! The registry lists this client as backend "RPC" wherever upstream's would be (compiled in
//! with `GGML_RPC`, loaded as a module, or registered): [`substitute`] swaps the registries, and
//! the swapped-in one answers `ggml_backend_rpc_add_server` itself and forwards every other name
//! (the server's `ggml_backend_rpc_start_server`) to upstream's. `GGML_BACKEND_RS_RPC=upstream`
//! keeps upstream's client. Upstream's exported functions called by name
//! (`ggml_backend_rpc_add_server`, `ggml_backend_rpc_init`, ...) remain upstream's client.
//!
//! * [`remote`]: one thread per server that owns its connection and runs its requests in
//!   order (asynchronous ones queued, synchronous ones waited for);
//! * [`iface`]: the C objects (registries, devices, buffer types, buffers, backends, events)
//!   and their vtables.

mod iface;
mod remote;

use std::ffi::c_char;
use std::sync::OnceLock;
use std::time::Duration;

use ggml_backend_rs_rpc::Timeouts;

use crate::abi::*;
use crate::log::log_error;

pub use iface::add_server;

/// Upstream's RPC registry, where [`substitute`] replaced it (its `ggml_backend_rpc_start_server`
/// stays reachable through ours).
static UPSTREAM: OnceLock<usize> = OnceLock::new();

/// The registry to list for `reg`: ours in place of upstream's "RPC" (unless
/// `GGML_BACKEND_RS_RPC=upstream`), `reg` itself otherwise.
pub fn substitute(reg: Reg) -> Reg {
    if reg.name_string() != "RPC" || reg.as_ptr() == iface::registry() {
        return reg;
    }
    if std::env::var("GGML_BACKEND_RS_RPC").is_ok_and(|v| v == "upstream") {
        return reg;
    }
    let _ = UPSTREAM.set(reg.as_ptr() as usize);
    // SAFETY: our registry is a static of this library.
    unsafe { Reg::from_ptr(iface::registry()) }.unwrap_or(reg)
}

/// `name` looked up in upstream's RPC registry, when it was replaced.
fn upstream_proc_address(name: *const c_char) -> *mut std::ffi::c_void {
    let Some(&reg) = UPSTREAM.get() else {
        return std::ptr::null_mut();
    };
    // SAFETY: the replaced registry was compiled in, or loaded from a library that the registry
    // entry which now lists ours keeps mapped.
    let Some(reg) = (unsafe { Reg::from_ptr(reg as ggml_backend_reg_t) }) else {
        return std::ptr::null_mut();
    };
    // SAFETY: `name` is the caller's NUL-terminated string (checked non-NULL by the caller).
    reg.proc_address(unsafe { std::ffi::CStr::from_ptr(name) })
}

/// The client's bounds (see `Timeouts`), from the environment: `GGML_BACKEND_RS_RPC_TIMEOUT`
/// sets connect, reply and compute at once, in seconds; `..._TIMEOUT_CONNECT`,
/// `..._TIMEOUT_REPLY` and `..._TIMEOUT_COMPUTE` each one of them (over the first);
/// `GGML_BACKEND_RS_RPC_MIN_RATE` the slowest a transfer may go, in MiB/s. A value that is not
/// a positive number is reported and the default kept.
fn timeouts() -> Timeouts {
    static T: OnceLock<Timeouts> = OnceLock::new();
    *T.get_or_init(|| {
        let mut t = Timeouts::default();
        // A positive number below 1e9 from the variable `name`, if it is set; else reported.
        let positive = |name: &str, unit: &str| -> Option<f64> {
            let v = std::env::var(name).ok()?;
            match v.trim().parse::<f64>() {
                Ok(x) if x.is_finite() && x > 0.0 && x < 1e9 => Some(x),
                _ => {
                    log_error!("{name}={v}: not a number of {unit} above 0; using the default");
                    None
                }
            }
        };
        let seconds = |name: &str| positive(name, "seconds").map(Duration::from_secs_f64);
        if let Some(d) = seconds("GGML_BACKEND_RS_RPC_TIMEOUT") {
            (t.connect, t.reply, t.compute) = (d, d, d);
        }
        if let Some(d) = seconds("GGML_BACKEND_RS_RPC_TIMEOUT_CONNECT") {
            t.connect = d;
        }
        if let Some(d) = seconds("GGML_BACKEND_RS_RPC_TIMEOUT_REPLY") {
            t.reply = d;
        }
        if let Some(d) = seconds("GGML_BACKEND_RS_RPC_TIMEOUT_COMPUTE") {
            t.compute = d;
        }
        if let Some(mib) = positive("GGML_BACKEND_RS_RPC_MIN_RATE", "MiB/s") {
            t.min_rate = ((mib * (1u64 << 20) as f64) as u64).max(1);
        }
        t
    })
}
