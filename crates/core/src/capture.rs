//! When a tensor-parallel step is captured as one CUDA graph, replayed, or run eagerly.
//!
//! A captured step is valid only while what it recorded stays as it was: the tensors' shapes
//! and addresses and the kernels chosen for them. ggml's scheduler gives a graph a new identity
//! (`uid`) whenever it places it anew and keeps it while the caller reuses the graph, so a
//! plan's step runs eagerly the first time an identity is seen, is captured on the second run
//! with it, and is replayed while it lasts. A graph without identity (0) always runs eagerly.
//! The root crate's `meta/step.rs` says how the capture is made.

/// The capture state of one graph plan. `G` is the captured graph (`()` in the tests).
#[derive(Debug)]
pub enum Step<G> {
    /// Never captured: why.
    Never(String),
    /// Not captured now: the identity of the graph of the last eager run (0: none).
    Waiting(u64),
    /// Captured for graph identity `uid`.
    Captured { uid: u64, graph: G },
}

/// What a run of a plan does.
#[derive(Debug, PartialEq, Eq)]
pub enum Next {
    /// Queue the step's work as it comes.
    Eager,
    /// Capture the step as one graph, keep it with [`Step::captured`] and launch it.
    Capture,
    /// Launch the graph captured before ([`Step::graph`]).
    Replay,
}

impl<G> Step<G> {
    /// The state of a new plan: `blocker` says why it can never be captured.
    pub fn new(blocker: Option<String>) -> Step<G> {
        match blocker {
            Some(why) => Step::Never(why),
            None => Step::Waiting(0),
        }
    }

    /// What the run of a graph with identity `uid` does; a captured graph of another identity
    /// is dropped.
    pub fn next(&mut self, uid: u64) -> Next {
        match self {
            Step::Never(_) => Next::Eager,
            Step::Captured { uid: u, .. } if *u == uid => Next::Replay,
            Step::Waiting(u) if uid != 0 && *u == uid => Next::Capture,
            _ => {
                *self = Step::Waiting(uid);
                Next::Eager
            }
        }
    }

    /// Keeps the graph captured for `uid`.
    pub fn captured(&mut self, uid: u64, graph: G) {
        *self = Step::Captured { uid, graph };
    }

    /// The captured graph, when there is one.
    pub fn graph(&self) -> Option<&G> {
        match self {
            Step::Captured { graph, .. } => Some(graph),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_is_captured_on_the_second_run_of_an_identity_and_replayed_while_it_lasts() {
        let mut s: Step<()> = Step::new(None);
        assert_eq!(s.next(7), Next::Eager);
        assert_eq!(s.next(7), Next::Capture);
        s.captured(7, ());
        assert_eq!(s.next(7), Next::Replay);
        assert_eq!(s.next(7), Next::Replay);
        // a new identity: the graph may have changed; eager once, then captured anew
        assert_eq!(s.next(8), Next::Eager);
        assert!(s.graph().is_none());
        assert_eq!(s.next(8), Next::Capture);
        s.captured(8, ());
        assert_eq!(s.next(7), Next::Eager);
        assert_eq!(s.next(8), Next::Eager);
        assert_eq!(s.next(8), Next::Capture);
    }

    #[test]
    fn a_graph_without_identity_and_a_blocked_plan_always_run_eagerly() {
        let mut s: Step<()> = Step::new(None);
        for _ in 0..3 {
            assert_eq!(s.next(0), Next::Eager);
        }
        let mut b: Step<()> = Step::new(Some("why".into()));
        for uid in [5, 5, 5] {
            assert_eq!(b.next(uid), Next::Eager);
        }
        assert!(matches!(b, Step::Never(ref why) if why == "why"));
    }

    #[test]
    fn a_capture_that_failed_leaves_the_plan_waiting_for_its_identity_again() {
        // the caller gives up with `Step::Never` after a failure; a capture that was not
        // kept (no `captured`) is retried on the next run of the identity
        let mut s: Step<()> = Step::new(None);
        s.next(3);
        assert_eq!(s.next(3), Next::Capture);
        assert_eq!(s.next(3), Next::Capture);
    }
}
