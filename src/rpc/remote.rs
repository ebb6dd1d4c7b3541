//! One server's connection and the thread that owns it.
//!
//! Requests to a server go out in the order they were made. Asynchronous work
//! (`set_tensor_async`, `get_tensor_async`, graph computes) is queued for one thread per server
//! and the caller goes on; synchronous work is queued behind it and waited for, or, when
//! nothing is queued or running, done at once on the caller's thread (as upstream's client does
//! every request: no hand-over between threads for a read after the server went idle). Several
//! servers therefore work at the same time, and a backend's `synchronize` is the wait for its
//! queue to drain, as upstream's dispatcher does it.
//!
//! Every request is bounded by the client's [`Timeouts`], so every wait here is bounded too.
//! The first failure is logged once and kept: the client answers every later request with it
//! at once, and [`Remote::failure`] lets graph computes report it.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use ggml_backend_rs_rpc::{Client, Timeouts};

use crate::abi::log::log_error;
use ggml_backend_rs_core::owned::lock;

type Job = Box<dyn FnOnce(&mut Client) + Send>;

/// The queue between callers and a server's thread. Waits park on condition variables without
/// spinning: the client, the servers and these threads often share a few cores.
///
/// Locks: a caller may take `client` while it holds `state` (to run a request at once, see
/// [`Remote::call`]); the thread never holds `client` while it waits for `state`.
struct Queue {
    state: Mutex<State>,
    /// The connection, used by the thread for queued jobs and by callers for requests done at
    /// once.
    client: Mutex<Client>,
    /// The thread waits here for work.
    work: Condvar,
    /// Callers wait here for jobs to be done.
    done: Condvar,
}

#[derive(Default)]
struct State {
    jobs: VecDeque<Job>,
    /// Jobs queued and done since the start: job `n` (from 1) is done once `done >= n`.
    posted: u64,
    finished: u64,
    /// Set when the remote is dropped: the thread ends once the queue is empty.
    closed: bool,
}

impl Queue {
    fn lock(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// Queues `job` and returns its number.
    fn push(&self, job: Job) -> u64 {
        let mut s = self.lock();
        s.jobs.push_back(job);
        s.posted += 1;
        self.work.notify_one();
        s.posted
    }

    /// Waits until job `n` is done.
    fn wait_for(&self, n: u64) {
        let mut s = self.lock();
        while s.finished < n {
            s = self.done.wait(s).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// The thread's loop: runs the jobs in order until the queue is closed and empty.
    fn serve(&self, failure: &Mutex<Option<String>>) {
        loop {
            let job = {
                let mut s = self.lock();
                loop {
                    if let Some(job) = s.jobs.pop_front() {
                        break job;
                    }
                    if s.closed {
                        return;
                    }
                    s = self.work.wait(s).unwrap_or_else(|p| p.into_inner());
                }
            };
            {
                let mut client = lock(&self.client);
                // A job that panics (only where panics unwind: tests) still counts as done, so
                // that its caller and every later one return instead of waiting for ever.
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(&mut client)));
                keep_failure(&client, failure);
            }
            let mut s = self.lock();
            s.finished += 1;
            self.done.notify_all();
        }
    }
}

/// A job in the queue that borrows from the caller's frame: dropping this waits until it has
/// run.
struct Queued<'q> {
    queue: &'q Queue,
    n: u64,
}

impl<'q> Queued<'q> {
    /// Queues `job`; the guard is made as soon as the job is in the queue (nothing between can
    /// unwind).
    fn push(queue: &'q Queue, job: Job) -> Queued<'q> {
        Queued {
            queue,
            n: queue.push(job),
        }
    }
}

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        self.queue.wait_for(self.n);
    }
}

/// Logs and keeps the client's failure, once: every later request is answered with it.
fn keep_failure(client: &Client, failure: &Mutex<Option<String>>) {
    if let Some(e) = client.failure() {
        let mut f = lock(failure);
        if f.is_none() {
            log_error!(
                "ggml-rpc (ggml-backend-rs): {e}; the server's devices fail every later request"
            );
            *f = Some(e.to_string());
        }
    }
}

/// A connected server: its request queue and the failure that ended its connection, if any.
pub struct Remote {
    queue: Arc<Queue>,
    failure: Arc<Mutex<Option<String>>>,
    /// A graph compute was queued since the last [`Remote::take_unsettled`]: its outcome shows
    /// only at the next reply.
    unsettled: AtomicBool,
}

impl Drop for Remote {
    fn drop(&mut self) {
        self.queue.lock().closed = true;
        self.queue.work.notify_one();
    }
}

impl Remote {
    /// Connects to `endpoint` ("host:port") and starts its thread.
    pub fn connect(endpoint: &str, timeouts: &Timeouts) -> Result<Remote, String> {
        let client = Client::connect(endpoint, timeouts).map_err(|e| e.to_string())?;
        let queue = Arc::new(Queue {
            state: Mutex::default(),
            client: Mutex::new(client),
            work: Condvar::new(),
            done: Condvar::new(),
        });
        let failure = Arc::new(Mutex::new(None::<String>));
        let (q, f) = (queue.clone(), failure.clone());
        std::thread::Builder::new()
            .name(format!("rpc {endpoint}"))
            .spawn(move || q.serve(&f))
            .map_err(|e| format!("RPC server {endpoint}: cannot start its thread: {e}"))?;
        Ok(Remote {
            queue,
            failure,
            unsettled: AtomicBool::new(false),
        })
    }

    /// Queues `job` behind every request made before it.
    pub fn post(&self, job: impl FnOnce(&mut Client) + Send + 'static) {
        self.queue.push(Box::new(job));
    }

    /// Queues a graph compute (`job`), which has no reply of its own: see
    /// [`Remote::take_unsettled`].
    pub fn post_compute(&self, job: impl FnOnce(&mut Client) + Send + 'static) {
        self.unsettled.store(true, Ordering::Release);
        self.post(job);
    }

    /// Whether a graph compute was queued since the last call (which clears it): only then
    /// does a settle need a round trip.
    pub fn take_unsettled(&self) -> bool {
        self.unsettled.swap(false, Ordering::AcqRel)
    }

    /// Runs `job` after every request made before it and returns its result: at once on this
    /// thread when nothing is queued or running, else behind the queue (`None` if it panicked
    /// there). `job` may borrow from the caller (the bytes of a `set_tensor`, the destination
    /// of a `get_tensor`): this returns only after the job has run.
    pub fn call<R: Send>(&self, job: impl FnOnce(&mut Client) -> R + Send) -> Option<R> {
        let s = self.queue.lock();
        if s.jobs.is_empty() && s.finished == s.posted {
            // Idle: the thread holds no job and cannot take one before this is done (a job
            // queued meanwhile waits for the client).
            let mut client = lock(&self.queue.client);
            drop(s);
            let r = job(&mut client);
            keep_failure(&client, &self.failure);
            return Some(r);
        }
        drop(s);
        let slot = Mutex::new(None);
        let put = &slot;
        let borrowing: Box<dyn FnOnce(&mut Client) + Send + '_> = Box::new(move |c| {
            *lock(put) = Some(job(c));
        });
        // SAFETY: only the lifetime changes (the same trait object). `Queued::push` queues the
        // job and returns the guard that waits for it, and this frame ends only through the
        // guard's drop, on return or on unwinding. The thread counts a job done only after it
        // has run it (or it panicked) and dropped it, so nothing the job borrows (the
        // caller's data, `slot`) is used after the borrow ends. Should the thread die without
        // counting it, the wait never returns and the borrow never ends.
        let job: Job = unsafe { std::mem::transmute::<Box<_>, Job>(borrowing) };
        drop(Queued::push(&self.queue, job));
        slot.into_inner().unwrap_or_else(|p| p.into_inner())
    }

    /// Returns once every request made before has been done (or has failed).
    pub fn drain(&self) {
        let n = self.queue.lock().posted;
        self.queue.wait_for(n);
    }

    /// The error that ended the connection, if one did.
    pub fn failure(&self) -> Option<String> {
        lock(&self.failure).clone()
    }
}

/// A point in one server's queue (an event): recorded by queuing a marker, reached when the
/// server's thread gets to it.
#[derive(Default)]
pub struct Marker {
    /// (points recorded, the last point reached)
    points: Mutex<(u64, u64)>,
    changed: Condvar,
}

impl Marker {
    fn lock(&self) -> MutexGuard<'_, (u64, u64)> {
        lock(&self.points)
    }

    /// Queues a new point on `remote`; [`Marker::wait`] then waits for it.
    pub fn record(self: &Arc<Self>, remote: &Remote) {
        let point = {
            let mut p = self.lock();
            p.0 += 1;
            p.0
        };
        let me = self.clone();
        remote.post(move |_| {
            let mut p = me.lock();
            p.1 = p.1.max(point);
            me.changed.notify_all();
        });
    }

    /// Waits until the last recorded point is reached (at once when none was recorded).
    pub fn wait(&self) {
        let mut p = self.lock();
        let target = p.0;
        while p.1 < target {
            p = self.changed.wait(p).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// The client's bounds (see `Timeouts`), from the environment: `GGML_BACKEND_RS_RPC_TIMEOUT`
/// sets connect, reply and compute at once, in seconds; `..._TIMEOUT_CONNECT`,
/// `..._TIMEOUT_REPLY` and `..._TIMEOUT_COMPUTE` each one of them (over the first);
/// `GGML_BACKEND_RS_RPC_MIN_RATE` the slowest a transfer may go, in MiB/s. A value that is not
/// a positive number is reported and the default kept.
pub(super) fn timeouts() -> Timeouts {
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

#[cfg(test)]
mod tests {
    use super::*;
    use ggml_backend_rs_rpc::wire::{HelloReply, CONN_CAPS_SIZE, PROTOCOL};
    use std::io::{Read, Write};
    use std::net::TcpListener;
    use std::sync::mpsc;
    use std::time::Instant;

    /// The longest anything here waits.
    const LIMIT: Duration = Duration::from_secs(20);

    /// A server that answers HELLO and then reads until the client closes; its address.
    fn server() -> String {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            s.set_read_timeout(Some(LIMIT)).unwrap();
            let mut hello = [0u8; 9 + CONN_CAPS_SIZE];
            s.read_exact(&mut hello).unwrap();
            let rsp = HelloReply {
                version: PROTOCOL,
                conn_caps: [0; CONN_CAPS_SIZE],
            }
            .encode();
            s.write_all(&(rsp.len() as u64).to_le_bytes()).unwrap();
            s.write_all(&rsp).unwrap();
            let mut rest = Vec::new();
            let _ = s.read_to_end(&mut rest);
        });
        addr
    }

    #[test]
    fn a_call_with_nothing_queued_runs_on_the_callers_thread() {
        let remote = Remote::connect(&server(), &Timeouts::default()).unwrap();
        let me = std::thread::current().id();
        assert_eq!(remote.call(|_| std::thread::current().id()), Some(me));
    }

    #[test]
    fn a_call_behind_queued_work_writes_the_callers_buffer_before_it_returns() {
        let remote = Remote::connect(&server(), &Timeouts::default()).unwrap();
        // the server's thread runs a job that holds it until released
        let (started, running) = mpsc::channel();
        let (release, released) = mpsc::channel::<()>();
        remote.post(move |_| {
            started.send(()).unwrap();
            let _ = released.recv_timeout(LIMIT);
        });
        running.recv_timeout(LIMIT).unwrap();
        let mut out = [0u8; 4];
        std::thread::scope(|s| {
            let caller = s.spawn(|| {
                let me = std::thread::current().id();
                let ran_on = remote.call(|_| {
                    out.copy_from_slice(&[1, 2, 3, 4]);
                    std::thread::current().id()
                });
                (me, ran_on)
            });
            // the call is queued (job 2) while job 1 runs: only then is job 1 released
            let start = Instant::now();
            while remote.queue.lock().posted < 2 {
                assert!(start.elapsed() < LIMIT, "the call was not queued");
                std::thread::sleep(Duration::from_millis(1));
            }
            release.send(()).unwrap();
            let (me, ran_on) = caller.join().unwrap();
            assert_ne!(ran_on, Some(me), "queued work runs on the server's thread");
            assert!(ran_on.is_some(), "the job ran to its end");
        });
        assert_eq!(out, [1, 2, 3, 4]);
    }
}
