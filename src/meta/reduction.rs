//! What the AllReduce paths share: the paths, one cut's reduction as a plan holds it, how a
//! stage's adds run, and the error of a plan that cannot get its memory.

use super::epilogue::Epilogue;
use crate::abi::*;

/// The ways a cut's AllReduce can run (see `allreduce`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Path {
    Backend,
    Own,
    Host,
    Staged,
    Copies,
    Direct,
}

impl Path {
    pub(super) fn parse(s: &str) -> Option<Path> {
        match s {
            "backend" | "comm" => Some(Path::Backend),
            "own" => Some(Path::Own),
            "host" => Some(Path::Host),
            "staged" => Some(Path::Staged),
            "copies" => Some(Path::Copies),
            "direct" => Some(Path::Direct),
            _ => None,
        }
    }
}

/// One cut's AllReduce, as the plan runs it.
pub struct Reduction {
    pub targets: Vec<Tensor>,
    pub path: Path,
    /// The nodes behind the cut that the AllReduce computes (own and host paths only).
    pub epilogue: Option<Epilogue>,
    /// The backend AllReduce declined this cut once: the plan does not ask again.
    pub(super) declined: bool,
    /// Its cut in the plan's [`CopyPlan`] (for the copies path, and as the backend's fallback).
    pub(super) copies: Option<usize>,
    /// Its cut in the plan's [`DirectPlan`].
    pub(super) direct: Option<usize>,
}

/// A device could not allocate memory a plan needs: the graph is not computed and the caller
/// gets `GGML_STATUS_ALLOC_FAILED` (libllama's `llama_decode` then returns -2).
#[derive(Debug)]
pub struct OutOfMemory(pub String);

/// How the adds of a stage run: queued on each backend, or on the meta backend's threads.
pub trait RunAll {
    fn run_all(&mut self, graphs: &[Graph]) -> ggml_status;
}
