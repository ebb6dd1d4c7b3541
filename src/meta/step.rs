//! A tensor-parallel step as one CUDA graph.
//!
//! Run eagerly, every cut of a step over CUDA devices costs two event hops: the devices' streams
//! into our stream before our AllReduce kernel, and back after it (about 6 µs of an H200's
//! time per cut, measured in docs/benchmarks.md). Captured, the same work is one CUDA graph
//! whose edges take the hops' place, launched on our stream with one hop in and one out for the
//! whole step (`cuda::CudaAllReduce::begin_capture`, `end_capture`, `launch`).
//!
//! When a plan's step is captured, replayed or run eagerly is `core::capture`'s decision, by the
//! identity (`uid`) ggml's scheduler gives the graph: eager on an identity's first run, captured
//! on its second, replayed while it lasts.
//!
//! What a plan must not contain to be captured, decided when it is built and logged in the plan
//! log (`GGML_META_DEBUG=1`): a cut reduced any other way than by our kernel (host waits,
//! copies through other backends), a device computing an empty slice (zeros uploaded from host
//! memory), or a node for which the CUDA backend may synchronize its stream (`MUL_MAT_ID`:
//! ggml-cuda copies the expert ids to the host for some shapes). `GGML_META_CUDA_GRAPH=0`
//! turns capturing off; a step over several GPUs (one graph across devices, our streams on each
//! joined through events) is captured only with `GGML_META_CUDA_GRAPH=1` until it has been
//! measured on such a host.
//!
//! The CUDA backend must not begin a capture of its own on a stream that is part of ours (the
//! driver refuses, and ggml-cuda aborts). It captures a graph when it has seen the graph
//! unchanged since the last call with the same first node (`warmup_complete` in ggml-cuda.cu,
//! in every pinned release from 0.9.11 to 0.26), and runs it directly when anything differs.
//! So the sub-graphs queued while we capture start with a marker: an empty node (which the
//! backend skips) whose parameters carry a serial never used before in the process
//! ([`mark`]). Every such call differs from the last one with the same first node, and the
//! backend runs it directly: into our capture.

use std::sync::atomic::{AtomicU64, Ordering};

use super::allreduce::{Planned, Reducer};
use crate::abi::*;
use ggml_backend_rs_core::Op;

pub(super) use ggml_backend_rs_core::capture::{Next, Step};

/// What `GGML_META_CUDA_GRAPH` asks for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Wanted {
    /// `0`: never capture.
    Never,
    /// Unset (or another value): capture where it was measured, one GPU.
    Measured,
    /// `1`: capture over several GPUs too.
    Always,
}

fn wanted() -> Wanted {
    static W: std::sync::OnceLock<Wanted> = std::sync::OnceLock::new();
    *W.get_or_init(|| match std::env::var("GGML_META_CUDA_GRAPH").as_deref() {
        Ok("0") => Wanted::Never,
        Ok("1") => Wanted::Always,
        _ => Wanted::Measured,
    })
}

/// Gives `marker` (the first node of the sub-graphs queued while capturing) parameters no call
/// before carried, so that the CUDA backend sees a graph it has not seen and runs it directly.
pub(super) fn mark(marker: Tensor) {
    static SERIAL: AtomicU64 = AtomicU64::new(1);
    let n = SERIAL.fetch_add(1, Ordering::Relaxed);
    marker.set_op_params(&[n as i32, (n >> 32) as i32]);
}

/// Why a plan's step cannot be captured (the module doc's list); `None` when it can. `kept`
/// holds the plan's nodes with their per-device tensors, `zeroed` whether a device computes an
/// empty slice of each.
pub(super) fn blocker(
    reducer: &Reducer,
    kept: &[(Tensor, Vec<Tensor>)],
    zeroed: &[bool],
    planned: &Planned,
) -> Option<String> {
    let Some(cuda) = reducer.cuda() else {
        return Some("the devices have no CUDA AllReduce of ours".into());
    };
    match wanted() {
        Wanted::Never => return Some("GGML_META_CUDA_GRAPH=0".into()),
        Wanted::Measured if cuda.gpus() > 1 => {
            return Some(format!(
                "{} GPUs: a step over several GPUs is captured with GGML_META_CUDA_GRAPH=1 \
                 (not yet measured there)",
                cuda.gpus()
            ))
        }
        _ => {}
    }
    if zeroed.iter().any(|&z| z) {
        return Some("a device computes an empty slice (zeros uploaded from the host)".into());
    }
    if let Some((t, _)) = kept.iter().find(|(t, _)| t.op_kind() == Some(Op::MulMatId)) {
        return Some(format!(
            "'{}' (MUL_MAT_ID): the CUDA backend may synchronize its stream for it",
            t.name_string()
        ));
    }
    reducer.capture_blocker(planned)
}
