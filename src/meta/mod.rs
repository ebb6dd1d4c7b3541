//! The meta device: tensor parallelism. A meta device wraps `n` simple devices (GPUs, or the
//! CPU device several times); its buffers hold every tensor as `n` per-device tensors split
//! as the tensor's [`Split`] says, and its backend runs each graph on all simple backends,
//! summing partial results (AllReduce) where a matmul's contraction was split.
//!
//! * [`split`]: split states; [`rules`]: how splits propagate through ops and views;
//! * [`device`]: device, buffer type and a small private registry (thread counts);
//! * [`buffer`]: meta buffers, per-device tensors, data transfers;
//! * [`backend`]: the meta backend and its graph plans; `workers`: threads that let CPU devices
//!   inside a meta device compute at the same time;
//! * [`allreduce`]: the AllReduce paths; [`exchange`]: the copy/add schedule and summation
//!   order they share; `cuda`: our CUDA kernels (driver loaded at run time).
//!
//! Meta objects are recognised by address: devices and buffer types are never freed and sit
//! in an append-only table; buffers and backends are tracked in sets while alive.
//!
//! Unsafe code: the vtable entries (`unsafe extern "C" fn`) are reached only through objects
//! this module created, so ggml calls each with a live object of the entry's own kind whose
//! `context` is this module's Rust state, and with the tensors and host pointers the ggml
//! ABI describes; their bodies rely on exactly that contract. Everything else is safe Rust
//! over the typed handles of `abi::handle`, plus small commented `unsafe` blocks for the
//! ggml core calls (metadata contexts and graphs) and the callback.

pub mod allreduce;
pub mod backend;
pub mod buffer;
mod cuda;
pub mod device;
pub mod split;
mod workers;

pub use ggml_backend_rs_core::{exchange, rules};

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

pub use split::Split;

/// Append-only table of addresses (meta devices, meta buffer types): lock-free lookups.
struct Table {
    slots: [AtomicUsize; 256],
    len: AtomicUsize,
    push_lock: Mutex<()>,
}

impl Table {
    const fn new() -> Table {
        Table {
            slots: [const { AtomicUsize::new(0) }; 256],
            len: AtomicUsize::new(0),
            push_lock: Mutex::new(()),
        }
    }

    fn push(&self, addr: usize) {
        let _guard = self.push_lock.lock().unwrap_or_else(|e| e.into_inner());
        let n = self.len.load(Ordering::Acquire);
        crate::log::ggml_assert!(
            n < self.slots.len(),
            "too many meta devices (at most {})",
            self.slots.len()
        );
        self.slots[n].store(addr, Ordering::Release);
        self.len.store(n + 1, Ordering::Release);
    }

    fn contains(&self, addr: usize) -> bool {
        let n = self.len.load(Ordering::Acquire);
        addr != 0
            && self.slots[..n]
                .iter()
                .any(|s| s.load(Ordering::Relaxed) == addr)
    }
}

/// Set of live objects (meta buffers, meta backends). `any` lets non-meta programs skip the lock.
struct LiveSet {
    any: AtomicBool,
    set: Mutex<Option<HashSet<usize>>>,
}

impl LiveSet {
    const fn new() -> LiveSet {
        LiveSet {
            any: AtomicBool::new(false),
            set: Mutex::new(None),
        }
    }
    fn insert(&self, addr: usize) {
        let mut g = self.set.lock().unwrap_or_else(|e| e.into_inner());
        g.get_or_insert_with(HashSet::new).insert(addr);
        self.any.store(true, Ordering::Release);
    }
    fn remove(&self, addr: usize) {
        let mut g = self.set.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(s) = g.as_mut() {
            s.remove(&addr);
        }
    }
    fn contains(&self, addr: usize) -> bool {
        if !self.any.load(Ordering::Acquire) {
            return false;
        }
        let g = self.set.lock().unwrap_or_else(|e| e.into_inner());
        g.as_ref().is_some_and(|s| s.contains(&addr))
    }
}

static DEVICES: Table = Table::new();
static BUFTS: Table = Table::new();
static BUFFERS: LiveSet = LiveSet::new();
static BACKENDS: LiveSet = LiveSet::new();

pub fn is_meta_device(dev: *const crate::abi::ggml_backend_device) -> bool {
    DEVICES.contains(dev as usize)
}
pub fn is_meta_buft(buft: *const crate::abi::ggml_backend_buffer_type) -> bool {
    BUFTS.contains(buft as usize)
}
pub fn is_meta_buffer(buf: *const crate::abi::ggml_backend_buffer) -> bool {
    BUFFERS.contains(buf as usize)
}
pub fn is_meta_backend(backend: *const crate::abi::ggml_backend) -> bool {
    BACKENDS.contains(backend as usize)
}
