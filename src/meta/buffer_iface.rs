//! The C object of a meta buffer and its vtable: making buffers (compute, deferred, packed
//! weights and caches), initialising tensors in them, transfers, copies, clearing and reset.

use std::ffi::c_void;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, OnceLock};

use std::collections::HashMap;

use super::buffer::{failed_for, holding, of, Deferred, MetaBuffer, Tensors, META_BASE};
use super::device::MetaDevice;
use super::facts;
use super::slices::{
    self, alloc_full, complete_all_sources, in_dependency_order, init_layout, init_simple, pack,
    settle, take_room,
};
use super::transfer::{self, Queue};
use crate::abi::log::{abort, log_error};
use crate::abi::object::{buffer_iface, CObject};
use crate::abi::*;
use crate::tensor::Host;
use ggml_backend_rs_core::owned::lock;

fn new_buffer(
    dev: &'static MetaDevice,
    simple: Option<Vec<Option<Buffer>>>,
    size: usize,
    deferred: bool,
) -> Buffer {
    let mb = Arc::new(MetaBuffer {
        dev,
        simple: simple.map_or_else(OnceLock::new, OnceLock::from),
        tensors: Mutex::new(Tensors {
            map: HashMap::new(),
            epoch: 0,
            settled: HashMap::new(),
        }),
        deferred: deferred.then(|| Mutex::new(Deferred::default())),
        packed: std::sync::atomic::AtomicBool::new(false),
        failed: Mutex::new(None),
    });
    // The context is the state's address for identification only; the state is found through
    // the registry (`of`, `ctx`).
    let context = Arc::as_ptr(&mb) as *mut c_void;
    let buffer = crate::buffer::init(dev.buft, BUFFER_IFACE, context, size);
    super::buffer::BUFFERS.insert(buffer.as_ptr() as usize, mb.clone());
    crate::buffer::extend(buffer, mb);
    buffer
}

/// A compute buffer: every device gets a simple buffer of the full size, laid out as the meta
/// buffer is.
pub fn alloc(dev: &'static MetaDevice, size: usize) -> ggml_backend_buffer_t {
    match alloc_full(dev, size) {
        Ok(simple) => new_buffer(dev, Some(simple), size, false).as_ptr(),
        Err(e) => {
            log_error!("{e}");
            std::ptr::null_mut()
        }
    }
}

/// A buffer of a plugin device, whose memory is made when first needed. Programs built
/// against upstream ggml allocate weights and caches on a plugin device the generic way
/// (`alloc_buffer`, then every tensor at its offset): they cannot know it is a meta device
/// and call `ggml_backend_meta_alloc_ctx_tensors_from_buft`. So the first tensor decides:
/// in a compute buffer (usage COMPUTE, which ggml-alloc sets before it places tensors)
/// every device gets the full size, as in [`alloc`]; otherwise the tensors are collected and
/// each device allocates only its slices, packed, when the buffer is first used (its data
/// is written, read or cleared, or a graph needs its tensors). An allocation failure there
/// aborts with a message: the buffer's callers can no longer be told.
pub fn alloc_deferred(dev: &'static MetaDevice, size: usize) -> ggml_backend_buffer_t {
    new_buffer(dev, None, size, true).as_ptr()
}

/// Allocates the unallocated tensors of a context (`tensors`: all of them, in the context's
/// order) in a new meta buffer of `dev`, each device holding only its slices. NULL when no
/// tensor needs memory, or when a device cannot allocate its slices (logged; nothing kept).
pub fn alloc_tensors(tensors: Vec<Tensor>, dev: &'static MetaDevice) -> ggml_backend_buffer_t {
    let (own, views): (Vec<Tensor>, Vec<Tensor>) = tensors
        .into_iter()
        .filter(|t| t.data().is_null() && t.buffer().is_null())
        .partition(|t| t.view_src().is_none());
    if own.is_empty() {
        return std::ptr::null_mut();
    }
    let (own, views) = (in_dependency_order(own), in_dependency_order(views));
    let meta_buf = new_buffer(dev, None, 0, false);
    let Some(mb) = of(meta_buf) else {
        unreachable!("registered in new_buffer")
    };
    // Each tensor's split and layout first, for the packing; a result that reads a view (placed
    // after the memory) points at it once the views are placed. The weights' placements are
    // settled first, over the results and views that read them here.
    for &t in &own {
        t.attach(meta_buf, META_BASE as *mut c_void);
    }
    settle(&mb, &own, &views);
    for &t in &own {
        if let Err(e) = init_layout(&mb, t) {
            abort(file!(), line!(), &e);
        }
    }
    mb.clear_settled();
    let (simple, size) = match pack(&mb, &own) {
        Ok(p) => p,
        Err(e) => {
            log_error!("{e}");
            // Undo: the tensors' placement and the meta buffer.
            for &t in own.iter().chain(views.iter()) {
                t.detach();
            }
            // SAFETY: created above and referenced nowhere else.
            unsafe { crate::buffer::free(meta_buf) };
            return std::ptr::null_mut();
        }
    };
    mb.set_packed(simple);
    meta_buf.set_size_field(size);
    for &v in &views {
        let src = v.view_src().expect("partitioned on view_src");
        let data = (src.data() as *mut u8).wrapping_add(v.view_offs()) as *mut c_void;
        v.attach(meta_buf, data);
        if let Err(e) = init_layout(&mb, v) {
            abort(file!(), line!(), &e);
        }
    }
    complete_all_sources(&mb, own.iter().chain(&views).copied());
    meta_buf.as_ptr()
}

// --- buffer vtable ------------------------------------------------------------------------

const BUFFER_IFACE: ggml_backend_buffer_i = buffer_iface!(MetaBuffer {
    free_buffer,
    get_base,
    init_tensor,
    memset_tensor,
    set_tensor,
    get_tensor,
    cpy_tensor,
    clear,
    reset,
});

impl CObject for MetaBuffer {
    const KIND: &'static str = "meta buffer";
    type Held = Arc<MetaBuffer>;
    fn find(addr: usize) -> Option<Arc<MetaBuffer>> {
        super::buffer::BUFFERS.get(addr)
    }
}

impl MetaBuffer {
    fn free_buffer(this: Arc<MetaBuffer>, buffer: Buffer) {
        this.clear_failure();
        super::buffer::BUFFERS.remove(buffer.as_ptr() as usize);
        crate::buffer::unextend(buffer);
        for b in this.owned_buffers() {
            // SAFETY: the simple buffers belong to this meta buffer alone and go with it.
            unsafe { crate::buffer::free(b) };
        }
        let ids: Vec<usize> = this.lock().map.keys().copied().collect();
        this.dev.splits(|m| {
            ids.into_iter().for_each(|id| m.forget(id));
            m.touch();
        });
    }

    fn get_base(&self, _: Buffer) -> usize {
        META_BASE
    }

    fn init_tensor(self: &Arc<Self>, buffer: Buffer, t: Tensor) -> ggml_status {
        if let Some(d) = &self.deferred {
            if buffer.usage() == USAGE_COMPUTE {
                // full-size memory per device, as `alloc` makes it
                if self.simple.get().is_none() {
                    // Once per allocation pass: the tensors after the first find it failed.
                    if self.failure().is_some() {
                        return GGML_STATUS_ALLOC_FAILED;
                    }
                    let simple = match alloc_full(self.dev, buffer.size()) {
                        Ok(simple) => simple,
                        Err(e) => {
                            // ggml-alloc does not look at the status: the graph's compute will
                            // fail, naming this (`failed_for`).
                            log_error!("{e}");
                            self.fail(e);
                            return GGML_STATUS_ALLOC_FAILED;
                        }
                    };
                    // The host's `ggml_backend_buffer_set_usage` does not tell us; backends
                    // (CUDA's padding rules) look at their own buffer's usage.
                    for b in simple.iter().flatten() {
                        crate::buffer::set_usage(*b, USAGE_COMPUTE);
                    }
                    if let Err(unused) = self.simple.set(simple) {
                        for b in unused.into_iter().flatten() {
                            // SAFETY: allocated just now and never shared.
                            unsafe { crate::buffer::free(b) };
                        }
                    }
                }
            } else {
                // Weights or caches. Until the buffer is used they are collected (under the lock
                // that placing takes, so none is missed) and placed together.
                let mut g = lock(d);
                if self.simple.get().is_none() {
                    // own tensors need no other tensor's slices: their layout is made now, their
                    // sources are pointed at once the buffer is placed
                    if t.view_src().is_none() {
                        if let Err(e) = init_layout(self, t) {
                            abort(file!(), line!(), &e);
                        }
                        // A device that cannot hold its slices fails the host's allocation now
                        // (libllama's load then fails, naming the buffer type), not the first use.
                        if !g.pending.contains(&t) {
                            if let Err(e) = take_room(self, &mut g.room, t) {
                                log_error!("{e}");
                                self.forget(t);
                                return GGML_STATUS_ALLOC_FAILED;
                            }
                        }
                    }
                    if !g.pending.contains(&t) {
                        g.pending.push(t);
                    }
                    return GGML_STATUS_SUCCESS;
                }
                drop(g);
                if t.view_src().is_none() && self.placed_as(t) != Some(true) {
                    // A tensor placed in a buffer that is in use already (or a new tensor at the
                    // address of one whose slices have another shape): its slices get buffers of
                    // their own.
                    self.forget(t);
                    if let Err(e) = init_simple(self, t, None) {
                        abort(file!(), line!(), &e);
                    }
                    match pack(self, &[t]) {
                        Ok((bufs, _)) => lock(d).late.extend(bufs.into_iter().flatten()),
                        Err(e) => {
                            log_error!("{e}");
                            // no half-placed tensor: using it reports that it is not initialised
                            self.forget(t);
                            return GGML_STATUS_ALLOC_FAILED;
                        }
                    }
                    return GGML_STATUS_SUCCESS;
                }
            }
        } else if self.packed.load(Ordering::Acquire)
            && t.view_src().is_none()
            && self.placed_as(t) == Some(false)
        {
            abort(
                file!(),
                line!(),
                &format!(
                    "meta buffer: tensor '{}' is initialised again with another shape in a buffer \
                     whose slices are packed (weights, caches); it cannot be placed there",
                    t.name_string()
                ),
            );
        }
        let place = if t.view_src().is_none() && !self.packed.load(Ordering::Acquire) {
            Some((t.data() as usize).wrapping_sub(META_BASE))
        } else {
            None
        };
        if let Err(e) = init_simple(self, t, place) {
            if failed_for(t).is_some() {
                // a source's memory could not be made: not initialised, which its graph's
                // compute reports
                return GGML_STATUS_ALLOC_FAILED;
            }
            abort(file!(), line!(), &e);
        }
        GGML_STATUS_SUCCESS
    }

    fn set_tensor(&self, _: Buffer, t: Tensor, data: &[u8], offset: usize) {
        let to = Host::Src(data.as_ptr().cast());
        // SAFETY: `data`'s bytes, readable for this call, which the host queue waits for.
        unsafe {
            transfer::execute(
                t,
                offset,
                data.len(),
                to,
                Queue::Host,
                "ggml_backend_tensor_set",
            )
        }
    }

    fn get_tensor(&self, _: Buffer, t: Tensor, out: &mut [u8], offset: usize) {
        let from = Host::Dst(out.as_mut_ptr().cast());
        // SAFETY: `out`'s bytes, writable and ours for this call, which the host queue waits
        // for.
        unsafe {
            transfer::execute(
                t,
                offset,
                out.len(),
                from,
                Queue::Host,
                "ggml_backend_tensor_get",
            )
        }
    }

    fn memset_tensor(&self, _: Buffer, t: Tensor, value: u8, offset: usize, size: usize) {
        transfer::fill(t, offset, size, value, "ggml_backend_tensor_memset")
    }

    fn cpy_tensor(&self, _: Buffer, s: Tensor, d: Tensor) -> bool {
        // Meta to meta with the same split: device by device. Anything else goes through the
        // host (the core's fallback uses get/set, which scatter and gather).
        if holding(s).is_none() {
            return false;
        }
        let (Ok(ds), Ok(dd)) = (facts::derived(s), facts::derived(d)) else {
            return false;
        };
        // (packed results: device by device only into the same packing)
        let packed_alike = facts::packing(s) == facts::packing(d);
        if !ds.split.same_as(&dd.split) || ds.reduce != dd.reduce || !packed_alike {
            return false;
        }
        let (Some(ss), Some(sd)) = (
            slices::placed(s).and_then(|m| slices::simple_tensors(&m, s)),
            slices::placed(d).and_then(|m| slices::simple_tensors(&m, d)),
        ) else {
            return false;
        };
        // devices holding an empty slice have nothing (and no memory) to copy
        for (a, b) in ss.into_iter().zip(sd).filter(|(a, _)| a.nbytes() > 0) {
            crate::tensor::copy(a, b);
        }
        true
    }

    fn clear(self: &Arc<Self>, _: Buffer, value: u8) {
        slices::place_deferred(self);
        for b in self.owned_buffers() {
            crate::buffer::clear(b, value);
        }
    }

    fn reset(&self, _: Buffer) {
        // a new allocation pass tries to make the memory again
        self.clear_failure();
        for b in self.simple().iter().flatten() {
            b.reset();
        }
        // Drop the per-device tensors of tensors not initialised since the previous reset:
        // ggml re-initialises every live tensor of a compute buffer after a reset.
        let mut g = self.lock();
        let keep_from = g.epoch;
        let gone: Vec<usize> = g
            .map
            .iter()
            .filter(|(_, e)| e.epoch < keep_from)
            .map(|(&id, _)| id)
            .collect();
        for id in &gone {
            g.map.remove(id);
        }
        g.epoch += 1;
        drop(g);
        if !gone.is_empty() {
            // per-device tensors went: plans that hold them are stale
            self.dev.splits(|m| {
                gone.into_iter().for_each(|id| m.forget(id));
                m.touch();
            });
        }
    }
}
