//! One server's connection and the thread that owns it.
//!
//! Requests to a server go out in the order they were made, from one thread per server that
//! owns the [`Client`]: asynchronous work (`set_tensor_async`, `get_tensor_async`, graph
//! computes) is queued and the caller goes on; synchronous work is queued and waited for.
//! Several servers therefore work at the same time, and a backend's `synchronize` is the wait
//! for its queue to drain, as upstream's dispatcher does it.
//!
//! Every request is bounded by the client's [`Timeouts`], so every wait here is bounded too.
//! The first failure is logged once and kept: the client answers every later request with it
//! at once, and [`Remote::failure`] lets graph computes report it.

use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Condvar, Mutex};

use ggml_backend_rs_core::rpc::{Client, Timeouts};

use crate::log::log_error;

type Job = Box<dyn FnOnce(&mut Client) + Send>;

/// A connected server: its request queue and the failure that ended its connection, if any.
pub struct Remote {
    queue: Mutex<Sender<Job>>,
    failure: Arc<Mutex<Option<String>>>,
}

impl Remote {
    /// Connects to `endpoint` ("host:port") and starts its thread.
    pub fn connect(endpoint: &str, timeouts: &Timeouts) -> Result<Remote, String> {
        let mut client = Client::connect(endpoint, timeouts).map_err(|e| e.to_string())?;
        let (tx, rx) = mpsc::channel::<Job>();
        let failure = Arc::new(Mutex::new(None::<String>));
        let seen = failure.clone();
        std::thread::Builder::new()
            .name(format!("rpc {endpoint}"))
            .spawn(move || {
                // ends when every sender is gone
                for job in rx {
                    job(&mut client);
                    if let Some(e) = client.failure() {
                        let mut f = seen.lock().unwrap_or_else(|p| p.into_inner());
                        if f.is_none() {
                            log_error!("ggml-rpc (ggml-backend-rs): {e}; the server's devices fail every later request");
                            *f = Some(e.to_string());
                        }
                    }
                }
            })
            .map_err(|e| format!("RPC server {endpoint}: cannot start its thread: {e}"))?;
        Ok(Remote {
            queue: Mutex::new(tx),
            failure,
        })
    }

    /// Queues `job` behind every request made before it.
    pub fn post(&self, job: impl FnOnce(&mut Client) + Send + 'static) {
        let queue = self.queue.lock().unwrap_or_else(|p| p.into_inner());
        // The thread lives as long as the queue's sender (this object), so the send succeeds.
        let _ = queue.send(Box::new(job));
    }

    /// Runs `job` after every request made before it and returns its result (None if the
    /// server's thread is gone, which a panic in it would have ended the process for).
    pub fn call<R: Send + 'static>(
        &self,
        job: impl FnOnce(&mut Client) -> R + Send + 'static,
    ) -> Option<R> {
        let (tx, rx) = mpsc::sync_channel(1);
        self.post(move |c| {
            let _ = tx.send(job(c));
        });
        rx.recv().ok()
    }

    /// Returns once every request made before has been done (or has failed).
    pub fn drain(&self) {
        let _ = self.call(|_| ());
    }

    /// The error that ended the connection, if one did.
    pub fn failure(&self) -> Option<String> {
        self.failure
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// A point in one server's queue (an event): recorded by queuing a marker, reached when the
/// server's thread gets to it.
#[derive(Default)]
pub struct Marker {
    reached: Mutex<u64>,
    generation: Mutex<u64>,
    changed: Condvar,
}

impl Marker {
    /// Queues a new point on `remote`; [`Marker::wait`] then waits for it.
    pub fn record(self: &Arc<Self>, remote: &Remote) {
        let generation = {
            let mut g = self.generation.lock().unwrap_or_else(|p| p.into_inner());
            *g += 1;
            *g
        };
        let me = self.clone();
        remote.post(move |_| {
            let mut r = me.reached.lock().unwrap_or_else(|p| p.into_inner());
            *r = (*r).max(generation);
            me.changed.notify_all();
        });
    }

    /// Waits until the last recorded point is reached (at once when none was recorded).
    pub fn wait(&self) {
        let target = *self.generation.lock().unwrap_or_else(|p| p.into_inner());
        let mut r = self.reached.lock().unwrap_or_else(|p| p.into_inner());
        while *r < target {
            r = self.changed.wait(r).unwrap_or_else(|p| p.into_inner());
        }
    }
}
