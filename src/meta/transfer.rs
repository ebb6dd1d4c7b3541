//! Data transfers between the host and a meta tensor: one routine for every direction and
//! queue. A transfer is planned once (which bytes go to or come from which device, from the
//! tensor's split) and then carried out on the host (the buffer's entry points, which wait)
//! or on each device's backend (the meta backend's asynchronous entry points).

use std::ffi::c_void;

use super::buffer::MetaBuffer;
use super::facts::{self, named};
use super::slices;
use super::split::Split;
use crate::abi::log::{abort, ggml_assert};
use crate::abi::*;
use crate::tensor::{transfer, transfer_2d, Host, Via};
use ggml_backend_rs_core::packed;
use ggml_backend_rs_core::transfer::{pieces, Piece};

/// Who carries out the per-device copies.
#[derive(Clone, Copy)]
pub enum Queue<'a> {
    /// The host, waiting for each copy.
    Host,
    /// Each device's backend (by device index), in its stream order; the host memory must
    /// stay valid until they are synchronized.
    Backends(&'a [Backend]),
}

impl Queue<'_> {
    /// Who carries out device `j`'s copies.
    fn via(self, j: usize) -> Via {
        match self {
            Queue::Host => Via::Buffer,
            Queue::Backends(b) => Via::Backend(b[j]),
        }
    }

    /// Waits for the queued work (partial sums are combined on the host).
    fn drain(self) {
        if let Queue::Backends(b) = self {
            b.iter().for_each(|b| b.synchronize());
        }
    }
}

/// Moves bytes `[offset, offset + size)` of meta tensor `t` between the host and its
/// devices, as its split places them. `what` names the entry point in messages.
///
/// # Safety
/// `host` holds `size` bytes, readable (`Src`) or writable and used by nothing else (`Dst`), and
/// stays so until `queue` is synchronized.
pub unsafe fn execute(t: Tensor, offset: usize, size: usize, host: Host, queue: Queue, what: &str) {
    if super::buffer::failed_for(t).is_some() {
        // Its buffer's memory could not be made: the graph it belongs to reports that when it
        // is computed; the bytes have nowhere to go or come from (ggml's setters and getters
        // return nothing).
        return;
    }
    let (plan, simple) = plan(t, offset, size, what);
    // Every piece below lies inside `[0, size)` of the host memory (`transfer::pieces`), and
    // the per-device tensors are live while `t` is: with the contract above, that is what
    // each copy's own contract asks.
    match (plan, host) {
        (Plan::Mirrored, Host::Src(_)) => {
            for (j, s) in simple.into_iter().enumerate() {
                // SAFETY: as stated above the match.
                unsafe { transfer(queue.via(j), s, host, offset, size) };
            }
        }
        // reads come from device 0
        // SAFETY: as stated above the match.
        (Plan::Mirrored, Host::Dst(_)) => unsafe {
            transfer(queue.via(0), simple[0], host, offset, size)
        },
        // rare (partial biases): on the host, after the queued work
        (Plan::Partial, Host::Src(data)) => {
            queue.drain();
            // SAFETY: as stated above the match.
            unsafe { set_partial(&simple, data, offset, size) };
        }
        (Plan::Partial, Host::Dst(data)) => {
            queue.drain();
            // SAFETY: as stated above the match.
            unsafe { get_partial_sum(t, &simple, data, offset, size) };
        }
        (Plan::Pieces(pieces), _) => {
            for p in pieces {
                let (j, at) = (p.device, host.offset(p.host_offset));
                // SAFETY: as stated above the match.
                unsafe { transfer_2d(queue.via(j), simple[j], at, p.strided) };
            }
        }
    }
}

/// Sets bytes `[offset, offset + size)` of `t` to `value` on every device that holds them.
pub fn fill(t: Tensor, offset: usize, size: usize, value: u8, what: &str) {
    let (plan, simple) = plan(t, offset, size, what);
    // one host copy of the pattern serves every write (no piece is longer than the range)
    let bytes = vec![value; size];
    let src = bytes.as_ptr() as *const c_void;
    // Below, `bytes` holds `size` bytes, and no write is longer.
    match plan {
        Plan::Mirrored => simple
            .iter()
            // SAFETY: as stated above the match.
            .for_each(|&s| unsafe { transfer(Via::Buffer, s, Host::Src(src), offset, size) }),
        // SAFETY: as stated above the match.
        Plan::Partial => unsafe { set_partial(&simple, src, offset, size) },
        Plan::Pieces(pieces) => {
            for p in pieces {
                let s = p.strided;
                for i in 0..s.n_copies {
                    // SAFETY: as stated above the match.
                    unsafe {
                        transfer(
                            Via::Buffer,
                            simple[p.device],
                            Host::Src(src),
                            s.offset + i * s.stride_tensor,
                            s.size,
                        )
                    };
                }
            }
        }
    }
}

/// How a transfer of `t` is carried out: per device, what to do.
enum Plan {
    /// The same bytes on every device (reads come from device 0).
    Mirrored,
    /// Device 0 holds the value, the others zero (writes); the sum over devices (reads).
    Partial,
    Pieces(Vec<Piece>),
}

/// The plan for moving bytes `[offset, offset+size)` of meta tensor `t`, with the per-device
/// tensors the plan's offsets are in. A split view moves the bytes it spans in its view
/// source, which is contiguous and owns the slices: what ggml moves for a view (the
/// scheduler copies a permuted view's span whole, with its strides).
fn plan(t: Tensor, offset: usize, size: usize, what: &str) -> (Plan, Vec<Tensor>) {
    let fail = |e: String| -> ! { abort(file!(), line!(), &format!("{what}: {}", named(t, e))) };
    // (the split's errors name their tensor already)
    let unsplittable = |e: String| -> ! { abort(file!(), line!(), &format!("{what}: {e}")) };
    let Some(mb) = slices::placed(t) else {
        fail("not in a meta buffer".into())
    };
    let d = facts::derived(t).unwrap_or_else(|e| unsplittable(e));
    let initialised = |mb: &MetaBuffer, x: Tensor| {
        slices::simple_tensors(mb, x).unwrap_or_else(|| {
            fail(format!(
                "'{}' is not initialised in its meta buffer",
                x.name_string()
            ))
        })
    };
    let Split::Dim(_) = &d.split else {
        // (a reduced matmul result reads as mirrored: the backend reduced it after computing it)
        let plan = if d.split == Split::Partial {
            Plan::Partial
        } else {
            Plan::Mirrored
        };
        return (plan, initialised(&mb, t));
    };
    let (owner, at) = match t.view_src() {
        Some(base) => (base, t.view_offs() + offset),
        None => (t, offset),
    };
    let owner_split = if owner == t {
        d.split
    } else {
        facts::derived(owner)
            .unwrap_or_else(|e| unsplittable(e))
            .split
    };
    let Split::Dim(ds) = &owner_split else {
        fail(format!(
            "a split view of '{}', which is {}",
            owner.name_string(),
            owner_split.describe()
        ))
    };
    if !owner.is_contiguous() {
        fail("transfers of a split tensor need a contiguous tensor".into());
    }
    let owner_layout = facts::layout(owner);
    let ps = match facts::packing(owner) {
        Some(p) => packed::pieces(p, &owner_layout, ds, at, size).map_err(|e| e.to_string()),
        None => pieces(&owner_layout, ds, at, size).map_err(|e| e.to_string()),
    };
    let owner_mb = if owner == t {
        mb
    } else {
        slices::placed(owner).unwrap_or_else(|| fail("view source not in a meta buffer".into()))
    };
    let simple = initialised(&owner_mb, owner);
    (Plan::Pieces(ps.unwrap_or_else(|e| fail(e))), simple)
}

/// Writes a partial-sum tensor's value: device 0 takes the bytes, the others zeros, so the sum
/// over devices is the value exactly, whatever the type.
///
/// # Safety
/// `data` is readable for `size` bytes.
unsafe fn set_partial(simple: &[Tensor], data: *const c_void, offset: usize, size: usize) {
    // SAFETY: `data` is readable for `size` bytes (the contract above).
    unsafe { transfer(Via::Buffer, simple[0], Host::Src(data), offset, size) };
    let zeros = vec![0u8; size];
    for &s in &simple[1..] {
        // SAFETY: `zeros` holds `size` bytes.
        unsafe {
            transfer(
                Via::Buffer,
                s,
                Host::Src(zeros.as_ptr() as *const c_void),
                offset,
                size,
            )
        };
    }
}

/// Reads a partial-sum tensor as its value: the sum over devices, in device order (F32).
///
/// # Safety
/// `data` is writable for `size` bytes (any alignment).
unsafe fn get_partial_sum(
    t: Tensor,
    simple: &[Tensor],
    data: *mut c_void,
    offset: usize,
    size: usize,
) {
    ggml_assert!(
        t.type_() == GGML_TYPE_F32 && offset % 4 == 0 && size % 4 == 0,
        "meta backend: reading partial sums of '{}' needs an F32 tensor and a range of whole floats",
        t.name_string()
    );
    let n = size / 4;
    let mut sum = vec![0f32; n];
    let mut part = vec![0f32; n];
    for &s in simple {
        // SAFETY: `part` holds `n` floats, i.e. `size` bytes.
        unsafe {
            transfer(
                Via::Buffer,
                s,
                Host::Dst(part.as_mut_ptr() as *mut c_void),
                offset,
                size,
            )
        };
        for (o, x) in sum.iter_mut().zip(&part) {
            *o += *x;
        }
    }
    // SAFETY: `sum` holds `size` bytes; `data` is writable for `size` bytes (the contract
    // above), a caller's buffer that cannot overlap our vector; bytes need no alignment.
    unsafe { std::ptr::copy_nonoverlapping(sum.as_ptr() as *const u8, data as *mut u8, size) };
}
