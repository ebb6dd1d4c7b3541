//! Faults injected into the CUDA path for its tests (`GGML_META_CUDA_FAULT`, rules as the core's
//! `fault` reads them): the points only a failing GPU reaches otherwise.
//!
//! * `allreduce`: a launch of our AllReduce kernel fails before anything is queued, as a launch
//!   the driver refuses (on our own path, and where the backend's AllReduce declined a cut);
//! * `mapped_lost`: through host memory, the last GPU's launches of an AllReduce are left out
//!   (outside a capture), as a GPU that stopped: the others give up waiting for it and the step
//!   fails naming it;
//! * `capture_end`: the driver will not end a step's capture. The capture is ended, and its
//!   graph dropped, but the step is told the stream is still capturing: what a real refusal
//!   leaves (the backend stops).

use std::sync::{Mutex, OnceLock};

use ggml_backend_rs_core::fault::{self, Injector};

use crate::abi::log::{abort, log_error};
use ggml_backend_rs_core::owned::lock;

const VAR: &str = "GGML_META_CUDA_FAULT";
const POINTS: &[&str] = &["allreduce", "mapped_lost", "capture_end"];

fn injector() -> Option<&'static Mutex<Injector>> {
    static INJECTOR: OnceLock<Option<Mutex<Injector>>> = OnceLock::new();
    INJECTOR
        .get_or_init(|| {
            let spec = std::env::var(VAR).ok()?;
            match fault::parse(&spec, POINTS) {
                Ok(rules) => Some(Mutex::new(Injector::new(rules))),
                Err(e) => abort(file!(), line!(), &format!("{VAR}={spec}: {e}")),
            }
        })
        .as_ref()
}

/// Counts a pass through `point`; when a rule makes it fail, logs it and returns the message.
pub fn fires(point: &str) -> Option<String> {
    let n = lock(injector()?).pass(point)?;
    let what = format!("injected fault: {point} #{n}");
    log_error!("meta backend: {what}");
    Some(what)
}
