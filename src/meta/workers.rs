//! Persistent threads that let synchronous simple backends (CPU devices inside a meta device)
//! compute their sub-graphs at the same time. Asynchronous backends need none: queuing a graph
//! on each in turn already runs them concurrently.
//!
//! Sub-graphs of a decode step take microseconds, so a hand-off that sleeps in the kernel on
//! each side would cost more than the work. Both sides therefore spin for a short while
//! ([`SPIN`]) before parking: back-to-back sub-graphs never sleep, an idle meta backend does.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{JoinHandle, Thread};
use std::time::{Duration, Instant};

use crate::abi::*;
use ggml_backend_rs_core::owned::lock;

/// How long a waiting side spins before it parks.
const SPIN: Duration = Duration::from_micros(200);

const IDLE: u8 = 0;
const READY: u8 = 1;
const DONE: u8 = 2;
const QUIT: u8 = 3;

struct Slot {
    state: AtomicU8,
    job: Mutex<Option<(Backend, Graph)>>,
    status: Mutex<ggml_status>,
    /// The thread waiting for DONE.
    caller: Mutex<Option<Thread>>,
}

struct Worker {
    slot: Arc<Slot>,
    thread: JoinHandle<()>,
}

pub struct Workers {
    workers: Vec<Worker>,
}

/// Waits until `cond` holds: spins for [`SPIN`], then parks between checks (whoever makes
/// `cond` true unparks this thread afterwards, so no wake-up is lost).
fn wait_until(cond: impl Fn() -> bool) {
    let start = Instant::now();
    let mut i = 0u32;
    while !cond() {
        i = i.wrapping_add(1);
        if i % 64 == 0 && start.elapsed() > SPIN {
            std::thread::park();
        } else {
            std::hint::spin_loop();
        }
    }
}

impl Workers {
    /// `n` threads (one per simple backend after the first, which runs on the caller).
    pub fn new(n: usize) -> Workers {
        let workers = (0..n)
            .map(|i| {
                let slot = Arc::new(Slot {
                    state: AtomicU8::new(IDLE),
                    job: Mutex::new(None),
                    status: Mutex::new(GGML_STATUS_SUCCESS),
                    caller: Mutex::new(None),
                });
                let s = Arc::clone(&slot);
                let thread = std::thread::Builder::new()
                    .name(format!("ggml-meta-{}", i + 1))
                    .spawn(move || serve(&s))
                    .unwrap_or_else(|e| {
                        crate::abi::log::abort(
                            file!(),
                            line!(),
                            &format!("meta backend: cannot start a worker thread: {e}"),
                        )
                    });
                Worker { slot, thread }
            })
            .collect();
        Workers { workers }
    }

    /// Computes `graphs[j]` on `backends[j]` for every `j`, all at once; the first failure wins.
    pub fn run(&self, backends: &[Backend], graphs: &[Graph]) -> ggml_status {
        debug_assert_eq!(backends.len(), self.workers.len() + 1);
        let me = std::thread::current();
        for (w, (&b, &g)) in self
            .workers
            .iter()
            .zip(backends[1..].iter().zip(&graphs[1..]))
        {
            *lock(&w.slot.job) = Some((b, g));
            *lock(&w.slot.caller) = Some(me.clone());
            w.slot.state.store(READY, Ordering::Release);
            w.thread.thread().unpark();
        }
        let mut status = compute(backends[0], graphs[0]);
        for w in &self.workers {
            wait_until(|| w.slot.state.load(Ordering::Acquire) == DONE);
            w.slot.state.store(IDLE, Ordering::Release);
            let s = *lock(&w.slot.status);
            if status == GGML_STATUS_SUCCESS {
                status = s;
            }
        }
        status
    }
}

/// Queues `g` on `b`. A device's part of a sub-graph can be empty (every node of it was zeroed
/// or computed by an AllReduce epilogue); nothing is queued then, as backends need not accept a
/// graph without nodes (CUDA's graph cache keys on the first node).
pub(super) fn compute(b: Backend, g: Graph) -> ggml_status {
    if g.n_nodes() == 0 {
        return GGML_STATUS_SUCCESS;
    }
    crate::backend::graph_compute_async(b, g)
}

fn serve(slot: &Slot) {
    loop {
        wait_until(|| matches!(slot.state.load(Ordering::Acquire), READY | QUIT));
        if slot.state.load(Ordering::Acquire) == QUIT {
            return;
        }
        let job = lock(&slot.job).take();
        let status = match job {
            Some((b, g)) => compute(b, g),
            None => GGML_STATUS_FAILED,
        };
        *lock(&slot.status) = status;
        let caller = lock(&slot.caller).take();
        slot.state.store(DONE, Ordering::Release);
        if let Some(c) = caller {
            c.unpark();
        }
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        for w in self.workers.drain(..) {
            w.slot.state.store(QUIT, Ordering::Release);
            w.thread.thread().unpark();
            let _ = w.thread.join();
        }
    }
}
