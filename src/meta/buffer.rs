//! Meta buffers' state: every tensor of a meta buffer is `n` per-device ("simple") tensors in
//! the simple devices' buffers, each holding its slice as the tensor's split says.
//!
//! * Compute buffers: every simple buffer is as large as the meta buffer and a tensor's slice
//!   sits at the tensor's own offset; ggml-alloc places tensors at a placeholder base address
//!   ([`META_BASE`]) that is never dereferenced.
//! * Static buffers (weights, KV caches): each device allocates only its slices, packed.
//!
//! Per-device tensor headers are owned here (`abi::Headers`, stable addresses) and reused
//! when ggml initialises the same tensor again, so repeated graph allocation does not grow
//! memory. How they are made is `slices`; the C buffer object and its vtable are
//! `buffer_iface`; splits live in the device's memo (`device`), asked through `facts`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use super::device::MetaDevice;
use crate::abi::*;
use ggml_backend_rs_core::infer::Placed;
use ggml_backend_rs_core::owned::{lock, Registry};

/// Placeholder base address of every meta buffer. Non-canonical on x86-64 and outside the
/// user address space elsewhere: a stray dereference faults at once instead of reading
/// another object's memory.
pub(crate) const META_BASE: usize = 0x1000_0000_0000_0000;

pub(super) struct Entry {
    /// The type and shape `simple` was made for.
    pub(super) made_for: (ggml_type, [i64; 4]),
    /// Per-device tensors; empty until the tensor is initialised in this buffer. C code holds
    /// their addresses, which [`Headers`] keeps in place.
    pub(super) simple: Headers,
    /// Per-device slices of whole sources the op reads split (`Derived::sliced`): source slot,
    /// one view header per device.
    pub(super) slices: Vec<(usize, Headers)>,
    /// `reset` count when last initialised (entries untouched for a whole reset cycle go).
    pub(super) epoch: u64,
    /// For a weight or cache (`infer::Origin::Placed`): the split its slices were laid out
    /// with, decided when it was first initialised here; every later question reads it.
    pub(super) placement: Option<Placed>,
    /// Some source had no per-device tensors when this one was initialised (`slices::
    /// init_layout`): its per-device tensors do not point at it yet.
    pub(super) sources_pending: bool,
}

impl Entry {
    /// Whether some device holds this tensor's slice in memory already.
    pub(super) fn placed(&self) -> bool {
        self.simple.tensors().any(|p| !p.data().is_null())
    }
}

pub(super) struct Tensors {
    pub(super) map: HashMap<usize, Entry>,
    pub(super) epoch: u64,
    /// Placements decided for a context's tensors before they are initialised here
    /// (`slices::settle`), by address; each goes to its entry when it is initialised.
    pub(super) settled: HashMap<usize, Placed>,
}

pub struct MetaBuffer {
    pub dev: &'static MetaDevice,
    /// Per device: the simple buffer (None: nothing allocated there). Set once: when the
    /// buffer is made, or, for weights, once their slices are placed.
    pub(super) simple: OnceLock<Vec<Option<Buffer>>>,
    pub(super) tensors: Mutex<Tensors>,
    /// Buffers a plugin device allocated through `alloc_buffer`, whose memory is made when it
    /// is first needed (see `buffer_iface::alloc_deferred`); None for every other buffer.
    pub(super) deferred: Option<Mutex<Deferred>>,
    /// Each device's slices are packed (weights and caches): a tensor's offset in the meta
    /// buffer says nothing about where its slices are.
    pub(super) packed: std::sync::atomic::AtomicBool,
    /// Why its memory could not be made (a plugin device's compute buffer, made when its first
    /// tensor is initialised), until the next reset: its tensors are not initialised then.
    pub(super) failed: Mutex<Option<String>>,
}

/// The state of a deferred buffer before and after its memory is made.
#[derive(Default)]
pub(super) struct Deferred {
    /// Tensors initialised before the memory was made, in order (views last placed).
    pub(super) pending: Vec<Tensor>,
    /// Per-device buffers of tensors initialised after the memory was made.
    pub(super) late: Vec<Buffer>,
    /// What the pending tensors' slices take on each device, against its free memory
    /// (`slices::take_room`).
    pub(super) room: Option<ggml_backend_rs_core::memory::Room>,
}

// SAFETY: the boxed tensors are only touched under the mutex or by ggml's single-threaded
// graph contract; buffer handles are plain addresses.
unsafe impl Send for MetaBuffer {}
// SAFETY: as for `Send` above: shared access goes through the same synchronisation.
unsafe impl Sync for MetaBuffer {}

/// Every live meta buffer's state, by the C buffer's address.
pub(super) static BUFFERS: Registry<MetaBuffer> = Registry::new();

impl MetaBuffer {
    pub(super) fn lock(&self) -> MutexGuard<'_, Tensors> {
        lock(&self.tensors)
    }

    pub fn n(&self) -> usize {
        self.dev.n()
    }

    /// Per device: the simple buffer (None: nothing allocated there); empty until set.
    pub fn simple(&self) -> &[Option<Buffer>] {
        self.simple.get().map_or(&[], Vec::as_slice)
    }

    /// Every buffer of the simple devices that this meta buffer owns.
    pub(super) fn owned_buffers(&self) -> Vec<Buffer> {
        let mut all: Vec<Buffer> = self.simple().iter().flatten().copied().collect();
        if let Some(d) = &self.deferred {
            all.extend(lock(d).late.iter().copied());
        }
        all
    }

    /// For `t` (not a view) whose slices are in place on the devices: whether they were placed
    /// for its current type and shape. None when it has no slices in place.
    pub(super) fn placed_as(&self, t: Tensor) -> Option<bool> {
        let g = self.lock();
        let e = g.map.get(&(t.as_ptr() as usize))?;
        if !e.placed() {
            return None;
        }
        Some(e.made_for == (t.type_(), t.ne_all()))
    }

    /// Records that this buffer's memory could not be made (`why` names the device and the
    /// bytes). Its tensors stay uninitialised until the next reset, and a graph that uses
    /// them is not computed (`failed_for`).
    pub(super) fn fail(&self, why: String) {
        let mut f = lock(&self.failed);
        if f.is_none() {
            FAILED_BUFFERS.fetch_add(1, Ordering::SeqCst);
        }
        *f = Some(why);
    }

    /// Why this buffer's memory could not be made, if it could not.
    pub(super) fn failure(&self) -> Option<String> {
        lock(&self.failed).clone()
    }

    /// Forgets a failure (a reset or free): the next initialisation tries again.
    pub(super) fn clear_failure(&self) {
        let mut f = lock(&self.failed);
        if f.take().is_some() {
            FAILED_BUFFERS.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// Sets the simple buffers that hold each device's slices packed (weights, caches).
    pub(super) fn set_packed(&self, simple: Vec<Option<Buffer>>) {
        // packed first: an initialisation that sees the slices must not place by offset
        self.packed.store(true, Ordering::Release);
        let placed = self.simple.set(simple).is_ok();
        crate::abi::log::ggml_assert!(placed, "meta buffer: slices placed twice");
    }

    /// How `t`'s slices were laid out, while it has the type and shape they were made for (a
    /// weight or cache initialised in this buffer), or how they will be where that was settled
    /// before it is initialised.
    pub fn placement(&self, t: Tensor) -> Option<Placed> {
        let g = self.lock();
        let id = t.as_ptr() as usize;
        let Some(e) = g.map.get(&id) else {
            return g.settled.get(&id).cloned();
        };
        (e.made_for == (t.type_(), t.ne_all()))
            .then(|| e.placement.clone())
            .flatten()
    }

    /// Settles `t`'s placement before it is initialised here.
    pub(super) fn settle(&self, t: Tensor, placed: Placed) {
        self.lock().settled.insert(t.as_ptr() as usize, placed);
    }

    /// Drops `t`'s settled placement.
    pub(super) fn unsettle(&self, t: Tensor) {
        self.lock().settled.remove(&(t.as_ptr() as usize));
    }

    /// Drops the placements settled and not used (a context's allocation ended).
    pub(super) fn clear_settled(&self) {
        self.lock().settled.clear();
    }

    /// Drops what this buffer knows of `t` (its split and per-device headers).
    pub(super) fn forget(&self, t: Tensor) {
        let id = t.as_ptr() as usize;
        if self.lock().map.remove(&id).is_some() {
            self.dev.splits(|m| m.forget(id));
        }
    }

    /// Gives `t`'s per-device tensors its flags as they are now: a program may build its graph
    /// after allocating it, and ggml marks the nodes a graph computes (a flag that ggml-cpu
    /// reads) only then.
    pub(super) fn sync_flags(&self, t: Tensor) {
        let flags = t.flags();
        let mut g = self.lock();
        if let Some(e) = g.map.get_mut(&(t.as_ptr() as usize)) {
            for j in 0..e.simple.len() {
                if e.simple.tensor(j).flags() != flags {
                    e.simple.update(j, |h| h.flags = flags);
                }
            }
        }
    }

    /// Whether `t`'s per-device tensors still lack a source (`slices::complete_sources`).
    pub(super) fn sources_pending(&self, t: Tensor) -> bool {
        self.lock()
            .map
            .get(&(t.as_ptr() as usize))
            .is_some_and(|e| e.sources_pending)
    }

    /// The per-device tensors of `t` as they are (placed or not).
    pub(super) fn entry_tensors(&self, t: Tensor) -> Option<Vec<Tensor>> {
        let g = self.lock();
        let e = g.map.get(&(t.as_ptr() as usize))?;
        if e.simple.is_empty() {
            return None;
        }
        Some(e.simple.tensors().collect())
    }
}

/// The meta buffer of a C buffer, if it is a live one.
pub fn of(buffer: Buffer) -> Option<Arc<MetaBuffer>> {
    BUFFERS.get(buffer.as_ptr() as usize)
}

/// Whether `buffer` is a live meta buffer (without taking a reference to it).
pub fn is_meta(buffer: Buffer) -> bool {
    BUFFERS.contains(buffer.as_ptr() as usize)
}

/// The meta buffer that holds `t`'s data (its own buffer, or its view source's).
pub fn holding(t: Tensor) -> Option<Arc<MetaBuffer>> {
    t.own_buffer().or_else(|| t.data_buffer()).and_then(of)
}

/// How many meta buffers could not make their memory (`MetaBuffer::fail`): while none, no
/// tensor needs to be asked (`failed_for` is one atomic load).
static FAILED_BUFFERS: AtomicUsize = AtomicUsize::new(0);

/// Whether some meta buffer could not make its memory.
pub fn any_failed() -> bool {
    FAILED_BUFFERS.load(Ordering::Acquire) > 0
}

/// Why `t` cannot be computed or initialised, when it or one of its sources lies in a meta
/// buffer whose memory could not be made.
pub fn failed_for(t: Tensor) -> Option<String> {
    if !any_failed() {
        return None;
    }
    std::iter::once(t)
        .chain(t.view_src())
        .chain(t.srcs_indexed().map(|(_, s)| s))
        .filter_map(holding)
        .find_map(|mb| mb.failure())
}

impl crate::buffer::Extension for MetaBuffer {
    /// Tensors of a meta buffer have placeholder addresses (`META_BASE` + offset).
    fn placeholder_addresses(&self) -> bool {
        true
    }

    /// Forwards a usage change to the simple buffers.
    fn usage_changed(&self, usage: ggml_backend_buffer_usage_raw) {
        for b in self.owned_buffers() {
            crate::buffer::set_usage(b, usage);
        }
    }
}
