//! Placing a meta tensor on the devices: its per-device tensors (headers for each device's
//! slice, views of their sources' slices) and the simple buffers' memory they live in.

use std::ffi::c_void;

use super::buffer::{holding, Entry, MetaBuffer};
use super::device::MetaDevice;
use super::facts::{self, named};
use super::split::{DimSplit, Split};
use crate::abi::log::{abort, ggml_assert, log_info};
use crate::abi::*;
use ggml_backend_rs_core::infer;
use ggml_backend_rs_core::infer::{Derivation, Placed};
use ggml_backend_rs_core::memory;
use ggml_backend_rs_core::op::Op;
use ggml_backend_rs_core::owned::lock;
use ggml_backend_rs_core::rules::Derived;
use ggml_backend_rs_core::rules::{self, DeviceLayout};

/// The per-device tensors of `t`, if `t` was initialised in this buffer and the buffer has its
/// memory. A read: a deferred buffer gets its memory in the step that first uses it
/// ([`placed`]), never here.
pub fn simple_tensors(mb: &MetaBuffer, t: Tensor) -> Option<Vec<Tensor>> {
    if mb.deferred.is_some() && mb.simple.get().is_none() {
        return None;
    }
    mb.entry_tensors(t)
}

/// The meta buffer holding `t`, with its memory: the placement step of everything that uses a
/// tensor's memory (a graph planned, a tensor initialised on another's slices, data moved,
/// copied or cleared), which places a deferred buffer ([`place_deferred`]) before it reads.
pub fn placed(t: Tensor) -> Option<std::sync::Arc<MetaBuffer>> {
    let mb = holding(t)?;
    place_deferred(&mb);
    Some(mb)
}

/// Makes a deferred buffer's memory for the tensors initialised so far (a no-op for
/// other buffers and once made): each device's slices packed, as `alloc_tensors`
/// does; the views among them then point into their sources' slices.
pub fn place_deferred(mb: &MetaBuffer) {
    let Some(d) = &mb.deferred else { return };
    if mb.simple.get().is_some() {
        return;
    }
    let (own, views): (Vec<Tensor>, Vec<Tensor>) = {
        let mut g = lock(d);
        if mb.simple.get().is_some() {
            return;
        }
        let (views, own): (Vec<Tensor>, Vec<Tensor>) = std::mem::take(&mut g.pending)
            .into_iter()
            .partition(|t| t.view_src().is_some());
        let simple = pack(mb, &own)
            .unwrap_or_else(|e| abort(file!(), line!(), &e))
            .0;
        mb.set_packed(simple);
        (own, in_dependency_order(views))
    };
    for &v in &views {
        if let Err(e) = init_layout(mb, v) {
            abort(file!(), line!(), &e);
        }
    }
    complete_all_sources(mb, own.into_iter().chain(views));
}

/// [`complete_sources`] for each of `tensors` whose sources are initialised by now; the others
/// are completed when a graph first reads them.
pub(super) fn complete_all_sources(mb: &MetaBuffer, tensors: impl IntoIterator<Item = Tensor>) {
    for t in tensors.into_iter().filter(|&t| sources_initialised(t)) {
        if let Err(e) = complete_sources(mb, t) {
            abort(file!(), line!(), &e);
        }
    }
}

/// The size `t` takes in a buffer of `dev`, in the device's unit (`memory::Shares`).
///
/// Weights and caches (leaves that are not graph inputs) are packed per device, each device's
/// slices apart from the offsets ggml gives: their size is the device's figure of their slices
/// as the device's policy splits them (a name policy's decision as it would be made now: the
/// same once the layer has been seen whole, which libllama makes sure of before it sizes
/// anything, see `dev_supports_op`). Anything else goes into compute buffers, which every
/// device lays out as the meta buffer is, and ggml's allocator requires an op's result to take
/// at least its bytes and a result computed in place of a source no more than that source: its
/// size is a whole copy's, what a device holds of it at most. A leaf whose split the policy
/// cannot give counts as a whole copy too.
pub(super) fn alloc_size(dev: &MetaDevice, t: Tensor) -> usize {
    let whole = || {
        dev.simple_bufts()
            .map(|b| b.alloc_size(t))
            .max()
            .unwrap_or(0)
    };
    let leaf = t.view_src().is_none() && t.op_kind() == Some(Op::None) && t.srcs().next().is_none();
    if !leaf || t.flags() & GGML_TENSOR_FLAG_INPUT != 0 {
        return whole();
    }
    dev.sized(t, || {
        let split = if t.ne_all().iter().product::<i64>() == 0 {
            Ok(Split::Mirrored)
        } else {
            dev.tentative_split(t).map_err(|e| e.to_string())
        };
        let Ok(layouts) = split.and_then(|s| {
            rules::own_layouts(&facts::layout(t), &s, dev.n()).map_err(|e| e.to_string())
        }) else {
            return whole();
        };
        let mut headers = Headers::new();
        let mut parts = Vec::with_capacity(layouts.len());
        for (b, l) in dev.simple_bufts().zip(&layouts) {
            let mut h = t.header();
            h.ne = l.ne;
            h.nb = l.nb;
            h.buffer = std::ptr::null_mut();
            h.data = std::ptr::null_mut();
            parts.push(b.alloc_size(headers.push(h).1));
        }
        dev.shares().size(&parts, dev.device_alignment())
    })
}

/// A simple buffer of `size` bytes on every device of `dev` (a compute buffer: each device holds
/// its slices at their tensors' offsets); when one fails, none (the others freed) and the
/// message naming the device.
pub(super) fn alloc_full(
    dev: &'static MetaDevice,
    size: usize,
) -> Result<Vec<Option<Buffer>>, String> {
    let mut simple = Vec::with_capacity(dev.n());
    for j in 0..dev.n() {
        let buft = dev.simple_buft(j);
        let b = crate::buffer::alloc(buft, size);
        // SAFETY: a buffer returned by a buffer type is live until freed.
        match unsafe { Buffer::from_ptr(b) } {
            Some(b) => simple.push(Some(b)),
            None => {
                for b in simple.into_iter().flatten() {
                    // SAFETY: allocated above, not shared yet.
                    unsafe { crate::buffer::free(b) };
                }
                return Err(format!(
                    "meta buffer: failed to allocate {size} bytes on {}",
                    dev.simple[j].name_string()
                ));
            }
        }
    }
    Ok(simple)
}

/// Device `j`'s slice of `full` (its whole copy of a mirrored tensor) as `want` places it: a
/// view of its one run of indices along `want.axis`, a leaf of the device's graph.
fn slice_header(full: Tensor, want: &DimSplit, j: usize) -> Result<ggml_tensor, String> {
    let (start, len) = want
        .intervals()
        .into_iter()
        .find(|iv| iv.device == j)
        .map_or((0, 0), |iv| (iv.host_start, iv.len));
    let blck = if want.axis == 0 { full.blck_size() } else { 1 };
    if start % blck != 0 || len % blck != 0 {
        return Err(format!(
            "its slice {start}..{} of '{}' is not whole blocks of {blck}",
            start + len,
            full.name_string()
        ));
    }
    let mut h = full.header();
    let offs = (start / blck) as usize * h.nb[want.axis];
    h.ne[want.axis] = len;
    h.op = Op::None as i32;
    h.op_params = [0; 16];
    h.src = [std::ptr::null_mut(); GGML_MAX_SRC];
    h.flags = 0;
    h.view_src = full.view_src().map_or(full.as_ptr(), |v| v.as_ptr());
    h.view_offs = full.view_src().map_or(0, |_| full.view_offs()) + offs;
    h.data = if full.data().is_null() {
        std::ptr::null_mut()
    } else {
        (full.data() as *mut u8).wrapping_add(offs) as *mut c_void
    };
    Ok(h)
}

/// Creates or refreshes the per-device tensors of `t` (which lives in `mb`), placing
/// non-views at `offset` in each simple buffer when `place` is set.
pub(super) fn init_simple(mb: &MetaBuffer, t: Tensor, place: Option<usize>) -> Result<(), String> {
    init(mb, t, place, Sources::All)
}

/// [`init_simple`] for a tensor of a static buffer whose sources may not be initialised yet
/// (a context that lists a result before what it reads): its split and layout are made, and
/// the per-device sources it cannot point to yet are filled in by [`complete_sources`] before
/// any graph reads it.
pub(super) fn init_layout(mb: &MetaBuffer, t: Tensor) -> Result<(), String> {
    init(mb, t, None, Sources::Initialised)
}

/// Settles the placements of a context's weights (`own`: its tensors in dependency order,
/// attached to `mb`; `views`: its views, placed after them) before they are laid out: each as
/// the device's policy answers, except where a result or view of the same context cannot be
/// derived over those answers. Then, of the weights that result is computed from and that the
/// policy split, the nearest one whose whole copy lets the result be derived is placed whole
/// (its inputs before its weights: sources in reverse slot order), else all of them: the split
/// the policy gave them cannot be used consistently, and a whole copy serves every op. Each
/// round places at least one weight of this context more whole, so this ends; a result that
/// still cannot be derived is the layout's error.
pub(super) fn settle(mb: &MetaBuffer, own: &[Tensor], views: &[Tensor]) {
    // weights alone (libllama's model contexts): nothing here is computed from them
    if views.is_empty() && own.iter().all(|t| t.op_kind() == Some(Op::None)) {
        return;
    }
    let all: Vec<Tensor> = own.iter().chain(views).copied().collect();
    let Ok(mut check) = facts::check_context(mb.dev, &all) else {
        return;
    };
    loop {
        let Some((failed, why)) = check.failed.take() else {
            return;
        };
        let near: Vec<(Tensor, Split)> = ancestry(failed)
            .into_iter()
            .filter_map(|t| check.answers.iter().find(|(w, _)| *w == t).cloned())
            .filter(|(w, s)| *s != Split::Mirrored && own.contains(w))
            .collect();
        if near.is_empty() {
            return;
        }
        // the nearest weight whose whole copy alone lets `failed` be derived (its check is the
        // next round's), else all of them
        let mut whole = Vec::new();
        for (w, answered) in &near {
            mb.settle(*w, Placed::whole_instead_of(answered.clone()));
            match facts::check_context(mb.dev, &all) {
                Ok(next) if next.failed.as_ref().is_none_or(|(t, _)| *t != failed) => {
                    whole.push((*w, answered.clone()));
                    check = next;
                    break;
                }
                _ => mb.unsettle(*w),
            }
        }
        if whole.is_empty() {
            for (w, answered) in &near {
                mb.settle(*w, Placed::whole_instead_of(answered.clone()));
            }
            whole = near;
            check = match facts::check_context(mb.dev, &all) {
                Ok(c) => c,
                Err(_) => return,
            };
        }
        if super::graph_plan::debug_enabled() {
            for (w, answered) in &whole {
                log_info!(
                    "meta placement: '{}' whole on every device, not {}: {why}",
                    w.name_string(),
                    answered.describe()
                );
            }
        }
    }
}

/// `t` and the tensors it is computed from, through sources and view sources, nearest first;
/// of one tensor's, the view source, then the sources from the last slot.
fn ancestry(t: Tensor) -> Vec<Tensor> {
    let mut found = vec![t];
    let mut i = 0;
    while i < found.len() {
        let x = found[i];
        let mut srcs: Vec<Tensor> = x.srcs().collect();
        srcs.reverse();
        for s in x.view_src().into_iter().chain(srcs) {
            if !found.contains(&s) {
                found.push(s);
            }
        }
        i += 1;
    }
    found
}

/// Points `t`'s per-device tensors at their sources where [`init_layout`] could not: a no-op
/// when it could. An error names a source that is still not initialised.
pub(super) fn complete_sources(mb: &MetaBuffer, t: Tensor) -> Result<(), String> {
    if mb.sources_pending(t) {
        init_simple(mb, t, None)?;
    }
    Ok(())
}

/// Which of a tensor's sources initialising it needs.
#[derive(Clone, Copy, PartialEq)]
enum Sources {
    /// All of them: an error names one that is not initialised.
    All,
    /// Those initialised so far; the entry records that the others are pending.
    Initialised,
}

fn init(mb: &MetaBuffer, t: Tensor, place: Option<usize>, need: Sources) -> Result<(), String> {
    let mut fresh = facts::derive_fresh(mb.dev, t)?;
    let (layouts, bases) = device_layouts(t, &mut fresh, mb.n())?;
    let DeviceSources {
        srcs,
        missing,
        pending: sources_pending,
    } = device_sources(mb, t, need)?;
    // (slices of a source not initialised yet are made when it is)
    let slices = if missing {
        Vec::new()
    } else {
        source_slices(t, &fresh.derived, &srcs, mb.n())?
    };
    // a weight or cache: its size is what it is placed as now, and a placement settled or made
    // earlier keeps the answer it was placed by
    let placement = if fresh.facts.origin == infer::Origin::Placed {
        mb.dev.forget_size(t);
        Some(
            mb.placement(t)
                .unwrap_or_else(|| Placed::as_answered(fresh.derived.split.clone())),
        )
    } else {
        None
    };
    let placing = Placing {
        layouts,
        bases,
        srcs,
        slices,
        place,
        placement,
        sources_pending,
    };
    let simple = write_headers(mb, t, placing);
    for st in simple {
        if let Some(buf) = st.own_buffer() {
            if !st.data().is_null() {
                let status = buf.init_tensor(st);
                if status != GGML_STATUS_SUCCESS {
                    return Err(named(
                        t,
                        format!("the simple buffer failed to initialise it ({status})"),
                    ));
                }
            }
        }
    }
    Ok(())
}

/// Each device's layout of `t`, and for a view each device's view source.
fn device_layouts(
    t: Tensor,
    fresh: &mut Derivation,
    n: usize,
) -> Result<(Vec<DeviceLayout>, Option<Vec<Tensor>>), String> {
    Ok(match t.view_src() {
        Some(base) => {
            let bmb = placed(base).ok_or_else(|| named(t, "view source not in a meta buffer"))?;
            let bases = simple_tensors(&bmb, base).ok_or_else(|| {
                named(
                    t,
                    format!("view source '{}' is not initialised", base.name_string()),
                )
            })?;
            let l = match fresh.view_layouts.take() {
                Some(l) => l,
                None => {
                    let bs = facts::derived(base)?;
                    infer::map_view(&facts::facts(base), &bs.split, &fresh.facts, n)
                        .map_err(|e| named(t, e))?
                        .1
                }
            };
            (l, Some(bases))
        }
        None => {
            let physical = if fresh.derived.reduce {
                Split::Partial
            } else {
                fresh.derived.split.clone()
            };
            (
                rules::own_layouts(&fresh.facts.layout, &physical, n).map_err(|e| named(t, e))?,
                None,
            )
        }
    })
}

/// Each source of `t` on every device (a tensor that reads itself is left out), and whether
/// any of them is pending: not initialised yet (left out with [`Sources::Initialised`]), or
/// without memory yet.
fn device_sources(mb: &MetaBuffer, t: Tensor, need: Sources) -> Result<DeviceSources, String> {
    let mut srcs: Vec<Option<Vec<Tensor>>> = vec![None; GGML_MAX_SRC];
    let (mut missing, mut pending) = (false, false);
    for (i, s) in t.srcs_indexed() {
        if s == t {
            continue;
        }
        let held = holding(s).ok_or_else(|| {
            named(
                t,
                format!("source '{}' is not in a meta buffer", s.name_string()),
            )
        })?;
        // Another buffer's source is placed first (its memory, for a compute buffer's tensor);
        // not while a static buffer lays out its own tensors, which may hold that buffer's
        // lock: its per-device headers stay where they are, and `pending` covers their memory.
        let smb = if std::ptr::eq(&*held, mb) || need == Sources::Initialised {
            held
        } else {
            placed(s).unwrap_or(held)
        };
        let per_device = smb.entry_tensors(s);
        pending |= per_device
            .as_ref()
            .is_none_or(|ts| ts.iter().any(|d| d.data().is_null() && d.nbytes() > 0));
        srcs[i] = match (per_device, need) {
            (Some(per_device), _) => Some(per_device),
            (None, Sources::Initialised) => {
                missing = true;
                None
            }
            (None, Sources::All) => {
                return Err(named(
                    t,
                    format!("source '{}' is not initialised", s.name_string()),
                ))
            }
        };
    }
    Ok(DeviceSources {
        srcs,
        missing,
        pending,
    })
}

/// `t`'s sources on every device, by slot ([`device_sources`]).
struct DeviceSources {
    srcs: Vec<Option<Vec<Tensor>>>,
    /// Some source is not initialised ([`Sources::Initialised`] leaves it out).
    missing: bool,
    /// Some source is not initialised, or has no memory yet.
    pending: bool,
}

/// Whether every source of `t` has per-device tensors (is initialised in its meta buffer).
pub(super) fn sources_initialised(t: Tensor) -> bool {
    t.srcs()
        .filter(|&s| s != t)
        .all(|s| holding(s).is_some_and(|mb| mb.entry_tensors(s).is_some()))
}

/// `tensors` ordered so that each comes after the ones among them it reads or views: a
/// context lists a result before its sources when they were created in that order.
pub(super) fn in_dependency_order(tensors: Vec<Tensor>) -> Vec<Tensor> {
    let ids: std::collections::HashSet<usize> =
        tensors.iter().map(|t| t.as_ptr() as usize).collect();
    let mut done: std::collections::HashSet<usize> = std::collections::HashSet::new();
    // (a source that leads back to a tensor being expanded, which a graph cannot have but C
    // can write, is not followed)
    let mut expanding: std::collections::HashSet<usize> = std::collections::HashSet::new();
    let mut out = Vec::with_capacity(tensors.len());
    // Depth-first without recursion: a tensor is listed once its sources in the list are.
    for &root in &tensors {
        let mut stack = vec![(root, false)];
        while let Some((t, expanded)) = stack.pop() {
            let id = t.as_ptr() as usize;
            if done.contains(&id) {
                continue;
            }
            if expanded {
                done.insert(id);
                out.push(t);
                continue;
            }
            if !expanding.insert(id) {
                continue;
            }
            stack.push((t, true));
            let deps = t.view_src().into_iter().chain(t.srcs());
            stack.extend(
                deps.filter(|&d| d != t)
                    .filter(|d| ids.contains(&(d.as_ptr() as usize)))
                    .filter(|d| !done.contains(&(d.as_ptr() as usize)))
                    .map(|d| (d, false)),
            );
        }
    }
    out
}

/// Per device, the slices of whole sources the op reads split (`Derived::sliced`): each
/// device reads a view of its copy.
fn source_slices(
    t: Tensor,
    d: &Derived,
    srcs: &[Option<Vec<Tensor>>],
    n: usize,
) -> Result<Vec<(usize, Vec<ggml_tensor>)>, String> {
    let mut slices: Vec<(usize, Vec<ggml_tensor>)> = Vec::with_capacity(d.sliced.len());
    for (slot, want) in &d.sliced {
        let full = srcs
            .get(*slot)
            .and_then(|s| s.as_ref())
            .ok_or_else(|| named(t, format!("source {slot} to slice is missing")))?;
        let headers = (0..n)
            .map(|j| slice_header(full[j], want, j))
            .collect::<Result<Vec<_>, String>>()
            .map_err(|e| named(t, e))?;
        slices.push((*slot, headers));
    }
    Ok(slices)
}

/// What [`write_headers`] writes into each device's tensor.
struct Placing {
    layouts: Vec<DeviceLayout>,
    /// For a view: each device's view source.
    bases: Option<Vec<Tensor>>,
    srcs: Vec<Option<Vec<Tensor>>>,
    slices: Vec<(usize, Vec<ggml_tensor>)>,
    /// The offset in each compute buffer (not for views, nor where slices are packed).
    place: Option<usize>,
    /// A weight's or cache's placement, which its entry keeps.
    placement: Option<Placed>,
    /// Some source is not initialised or has no memory yet (`device_sources`).
    sources_pending: bool,
}

/// Writes `t`'s per-device tensors into `mb`'s entry for it (made on first use, reused after),
/// and returns them.
fn write_headers(mb: &MetaBuffer, t: Tensor, p: Placing) -> Vec<Tensor> {
    let n = mb.n();
    let header = t.header();
    let Placing {
        layouts,
        bases,
        srcs,
        slices,
        place,
        placement,
        sources_pending,
    } = p;
    let mut g = mb.lock();
    let epoch = g.epoch;
    let mut made = false;
    g.settled.remove(&(t.as_ptr() as usize));
    let entry = g.map.entry(t.as_ptr() as usize).or_insert_with(|| Entry {
        made_for: (header.type_, header.ne),
        simple: Headers::new(),
        slices: Vec::new(),
        epoch,
        placement: None,
        sources_pending: false,
    });
    entry.epoch = epoch;
    entry.placement = placement;
    entry.sources_pending = sources_pending;
    entry.made_for = (header.type_, header.ne);
    if entry.simple.len() != n {
        entry.simple = Headers::zeroed(n);
        made = true;
    }
    let same_slots = entry.slices.len() == slices.len()
        && entry.slices.iter().zip(&slices).all(|(a, b)| a.0 == b.0);
    if !same_slots {
        entry.slices = slices
            .iter()
            .map(|(slot, _)| (*slot, Headers::zeroed(n)))
            .collect();
        made = true;
    }
    for ((_, stored), (_, fresh)) in entry.slices.iter_mut().zip(&slices) {
        for (j, h) in fresh.iter().enumerate() {
            stored.update(j, |s| *s = *h);
        }
    }
    for j in 0..n {
        let self_ptr = entry.simple.tensor(j).as_ptr();
        let mut st = ggml_tensor {
            ne: layouts[j].ne,
            nb: layouts[j].nb,
            buffer: std::ptr::null_mut(),
            data: std::ptr::null_mut(),
            view_src: std::ptr::null_mut(),
            view_offs: 0,
            src: [std::ptr::null_mut(); GGML_MAX_SRC],
            ..header
        };
        for (i, s) in t.srcs_indexed() {
            st.src[i] = if s == t {
                self_ptr
            } else if let Some((_, h)) = entry.slices.iter().find(|(slot, _)| *slot == i) {
                h.tensor(j).as_ptr()
            } else {
                srcs[i]
                    .as_ref()
                    .map_or(std::ptr::null_mut(), |per_device| per_device[j].as_ptr())
            };
        }
        if let Some(bases) = &bases {
            let b = bases[j];
            st.view_src = b.as_ptr();
            st.view_offs = layouts[j].offs;
            st.buffer = b.buffer();
            st.data = if b.data().is_null() {
                std::ptr::null_mut()
            } else {
                (b.data() as *mut u8).wrapping_add(layouts[j].offs) as *mut c_void
            };
        } else if let (Some(offset), Some(buf)) = (place, mb.simple().get(j).copied().flatten()) {
            st.buffer = buf.as_ptr();
            st.data = (crate::buffer::base(buf) as *mut u8).wrapping_add(offset) as *mut c_void;
        } else if !entry.simple.is_empty() {
            // initialised again where its slices are packed: they stay where they are
            let old = entry.simple.tensor(j);
            st.buffer = old.buffer();
            st.data = old.data();
        }
        entry.simple.update(j, |h| *h = st);
    }
    let simple: Vec<Tensor> = entry.simple.tensors().collect();
    drop(g);
    if made {
        mb.dev.touch();
    }
    simple
}

/// Counts `t`'s slices (initialised in `mb`, not yet placed) against what each device had free
/// when the first tensor of the buffer arrived (`room`, made then): a device that cannot hold
/// them is an error naming it and the bytes, while the host can still fail the allocation.
pub(super) fn take_room(
    mb: &MetaBuffer,
    room: &mut Option<memory::Room>,
    t: Tensor,
) -> Result<(), String> {
    let dev = mb.dev;
    let room = room.get_or_insert_with(|| memory::Room::new(&dev.memory_entries()));
    let slices = mb
        .entry_tensors(t)
        .expect("initialised before it is counted");
    let parts: Vec<u64> = slices
        .iter()
        .enumerate()
        .map(|(j, &s)| {
            let buft = dev.simple_buft(j);
            buft.alloc_size(s).next_multiple_of(buft.alignment().max(1)) as u64
        })
        .collect();
    room.take(&parts).map_err(|s| {
        format!(
            "meta buffer: {} cannot hold its slices of the weights: '{}' brings them to {} bytes \
             and it has {} free ({} bytes missing)",
            dev.simple[s.member].name_string(),
            t.name_string(),
            s.need,
            s.free,
            s.need - s.free
        )
    })
}

/// Packs each device's slices of `own` (initialised in `mb`, not yet placed) into buffers of
/// that device: one buffer per device, or a multi-buffer when the buffer type's maximum size
/// asks for several. Returns them with their size in the device's unit; on failure, frees what
/// it allocated and says what failed.
pub(super) fn pack(
    mb: &MetaBuffer,
    own: &[Tensor],
) -> Result<(Vec<Option<Buffer>>, usize), String> {
    let dev = mb.dev;
    let n = dev.n();
    let mut simple: Vec<Option<Buffer>> = vec![None; n];
    let mut totals = vec![0usize; n];
    for j in 0..n {
        let buft = dev.simple_buft(j);
        let align = buft.alignment().max(1);
        let max_size = buft.max_size();
        let parts: Vec<Tensor> = own
            .iter()
            .map(|&t| mb.entry_tensors(t).expect("initialised before packing")[j])
            .collect();
        // chunks of (tensor, offset) below the buffer type's maximum size
        let mut chunks: Vec<(Vec<(Tensor, usize)>, usize)> = vec![(Vec::new(), 0)];
        for &p in &parts {
            let size = buft.alloc_size(p);
            let cur = chunks.last_mut().expect("non-empty");
            if size == 0 {
                // an empty slice still gets a buffer and an address: backends look at the
                // buffer of every source, empty or not
                cur.0.push((p, 0));
                continue;
            }
            let off = cur.1.next_multiple_of(align);
            if off + size > max_size && !cur.0.is_empty() {
                chunks.push((vec![(p, 0)], size));
            } else {
                cur.0.push((p, off));
                cur.1 = off + size;
            }
        }
        totals[j] = chunks.iter().map(|c| c.1).sum();
        let mut bufs = Vec::new();
        for (members, size) in &chunks {
            let b = crate::buffer::alloc(buft, if *size == 0 { align } else { *size });
            // SAFETY: returned by the buffer type; live until freed.
            let Some(b) = (unsafe { Buffer::from_ptr(b) }) else {
                // SAFETY: these buffers were created above and are referenced nowhere else
                // (the slices placed in them belong to tensors that are being given up).
                unsafe {
                    for b in simple.iter().flatten().chain(bufs.iter()) {
                        crate::buffer::free(*b);
                    }
                }
                return Err(format!(
                    "meta buffer: failed to allocate {size} bytes on {}",
                    dev.simple[j].name_string()
                ));
            };
            let base = crate::buffer::base(b) as *mut u8;
            for &(p, off) in members {
                let status =
                    crate::backend::tensor_alloc(b, p, base.wrapping_add(off) as *mut c_void);
                ggml_assert!(
                    status == GGML_STATUS_SUCCESS,
                    "meta buffer: placing a slice failed ({status})"
                );
            }
            bufs.push(b);
        }
        simple[j] = Some(if bufs.len() == 1 {
            bufs[0]
        } else {
            crate::buffer::multi::alloc(bufs)
        });
    }
    Ok((simple, dev.shares().span(&totals)))
}
