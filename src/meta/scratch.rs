//! What the copies and direct AllReduce paths own per graph plan: scratch memory on every
//! device, and plan-owned tensor headers (slots, add nodes) that follow the targets' shapes.

use std::ffi::c_void;
use std::ptr;

use super::arena::GraphArena;
use super::reduction::{OutOfMemory, Reduction};
use crate::abi::log::ggml_assert;
use crate::abi::*;
use ggml_backend_rs_core::Op;

/// Scratch memory of `slots` equal slots on every simple device, owned by a plan and freed with
/// it (plans are dropped only after the backends were synchronized).
pub(super) struct Scratch {
    buffers: Vec<Buffer>,
    slots: usize,
    /// The largest target when the plan was built, aligned.
    pub(super) slot_bytes: usize,
}

impl Scratch {
    /// The slots on every device, or what could not be allocated (the devices' buffers that
    /// were allocated are freed again).
    pub(super) fn alloc(
        backends: &[Backend],
        slots: usize,
        slot_bytes: usize,
    ) -> Result<Scratch, OutOfMemory> {
        let bytes = slots * slot_bytes;
        let mut scratch = Scratch {
            buffers: Vec::with_capacity(backends.len()),
            slots,
            slot_bytes,
        };
        for &b in backends {
            let buft = crate::backend::default_buffer_type(b, "meta AllReduce");
            let raw = crate::buffer::alloc(buft, bytes);
            // SAFETY: returned by the buffer type.
            match unsafe { Buffer::from_ptr(raw) } {
                Some(buf) => scratch.buffers.push(buf),
                None => {
                    return Err(OutOfMemory(format!(
                        "meta AllReduce: cannot allocate {bytes} bytes of scratch memory on {}",
                        b.name_string()
                    )))
                }
            }
        }
        Ok(scratch)
    }

    /// Places header `h` in slot `s` of device `dev`.
    pub(super) fn place(&self, h: &mut ggml_tensor, dev: usize, s: usize) {
        ggml_assert!(
            s < self.slots,
            "meta AllReduce: scratch slot {s} of {}",
            self.slots
        );
        let b = self.buffers[dev];
        h.buffer = b.as_ptr();
        // SAFETY: slot s < slots starts inside the buffer of slots * slot_bytes bytes.
        h.data =
            unsafe { (crate::buffer::base(b) as *mut u8).add(s * self.slot_bytes) } as *mut c_void;
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        for b in self.buffers.drain(..) {
            // SAFETY: our buffer, no longer used by queued work (see the type's doc).
            unsafe { crate::buffer::free(b) };
        }
    }
}

/// Bytes per scratch slot for the cuts `need`: the largest target, aligned for every device.
pub(super) fn slot_size(backends: &[Backend], reductions: &[Reduction], need: &[usize]) -> usize {
    let align = backends
        .iter()
        .map(|&b| crate::backend::default_buffer_type(b, "meta AllReduce").alignment())
        .max()
        .unwrap_or(1)
        .max(64);
    need.iter()
        .map(|&c| reductions[c].targets[0].nbytes())
        .max()
        .unwrap_or(0)
        .next_multiple_of(align)
}

/// `like`'s type and shape.
pub(super) fn take_layout(h: &mut ggml_tensor, like: Tensor) {
    h.type_ = like.type_();
    h.ne = like.ne_all();
    h.nb = like.nb_all();
}

/// `like`'s memory, as a view of it (what an in-place op writing into `like` is).
pub(super) fn take_memory(h: &mut ggml_tensor, like: Tensor) {
    h.view_src = like.view_src().map_or(like.as_ptr(), |v| v.as_ptr());
    h.view_offs = like.view_src().map_or(0, |_| like.view_offs());
    h.buffer = like.buffer();
    h.data = like.data();
}

/// A leaf with `t`'s layout (not placed yet).
pub(super) fn scratch_header(t: Tensor) -> ggml_tensor {
    let mut h = t.header();
    h.op = Op::None as i32;
    h.op_params = [0; 16];
    h.src = [ptr::null_mut(); GGML_MAX_SRC];
    h.view_src = ptr::null_mut();
    h.view_offs = 0;
    h.flags = 0;
    h
}

/// `dst = a + b` in place: an ADD whose result is `dst`'s memory.
pub(super) fn add_node(dst: Tensor, a: Tensor, b: Tensor) -> ggml_tensor {
    let mut h = scratch_header(dst);
    h.op = Op::Add as i32;
    // backends skip nodes that graph building did not mark as needing computation
    h.flags = GGML_TENSOR_FLAG_COMPUTE;
    h.src[0] = a.as_ptr();
    h.src[1] = b.as_ptr();
    take_memory(&mut h, dst);
    h
}

/// One graph of add nodes in execution order; each feeds only later nodes of the chain, so
/// ggml's use counts are 1, and 0 for the last (read after the graph, by the next sub-graph).
pub(super) fn chain_graph(arena: &GraphArena, nodes: &[Tensor]) -> Graph {
    let g = arena.graph(nodes.len());
    for (i, &node) in nodes.iter().enumerate() {
        g.push_node(node);
        g.note_use_count(node, if i + 1 == nodes.len() { 0 } else { 1 });
    }
    g
}

/// How a plan-owned header follows the tensor it was made from. Plans outlive shape changes
/// (the scheduler re-allocates a graph of the same structure for another batch size), so
/// layouts are read from the targets before each run, as the sub-graphs read theirs.
#[derive(Clone, Copy)]
pub(super) enum Refresh {
    /// A partial: the whole header of the target (op, sources, shape), placed in scratch.
    Partial,
    /// A scratch slot: the layout of the target.
    Layout,
    /// An add node: layout and memory of its destination.
    Node,
}

impl Headers {
    /// Brings the headers of `list` (index, tensor followed, how) up to date.
    pub(super) fn refresh(&mut self, list: &[(usize, Tensor, Refresh)]) {
        for &(i, like, what) in list {
            self.update(i, |h| match what {
                Refresh::Partial => {
                    let (buffer, data) = (h.buffer, h.data);
                    *h = like.header();
                    h.buffer = buffer;
                    h.data = data;
                    h.view_src = ptr::null_mut();
                    h.view_offs = 0;
                }
                Refresh::Layout => take_layout(h, like),
                Refresh::Node => {
                    take_layout(h, like);
                    take_memory(h, like);
                }
            });
        }
    }
}
