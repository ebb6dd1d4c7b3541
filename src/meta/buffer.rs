//! Meta buffers: every tensor of a meta buffer is `n` per-device ("simple") tensors in the
//! simple devices' buffers, each holding its slice as the tensor's split says.
//!
//! * Compute buffers (`alloc`): every simple buffer is as large as the meta buffer and a
//!   tensor's slice sits at the tensor's own offset; ggml-alloc places tensors at a
//!   placeholder base address ([`META_BASE`]) that is never dereferenced.
//! * Static buffers (`alloc_tensors`: weights, KV caches): each device allocates only its
//!   slices, packed.
//!
//! Per-device tensor headers are owned here (boxed, stable addresses) and reused when ggml
//! initialises the same tensor again, so repeated graph allocation does not grow memory.
//! Splits are cached per tensor together with a snapshot of the fields they depend on.

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use super::device::MetaDevice;
use super::rules::{self, Derived, DeviceLayout, Layout, Src};
use super::split::{DimSplit, Split};
use crate::abi::*;
use crate::log::{abort, ggml_assert, log_error};
use ggml_backend_rs_core::op::{Op, UnknownOp};
use ggml_backend_rs_core::packed::{self, Packed};
pub use ggml_backend_rs_core::transfer::{pieces, Piece};

/// Placeholder base address of every meta buffer. Non-canonical on x86-64 and outside the
/// user address space elsewhere: a stray dereference faults at once instead of reading
/// another object's memory.
pub(crate) const META_BASE: usize = 0x1000_0000_0000_0000;

/// Bumped whenever a per-device tensor is created or dropped or a tensor's split changes:
/// graph plans built before are stale then.
static GENERATION: AtomicU64 = AtomicU64::new(1);

pub fn generation() -> u64 {
    GENERATION.load(Ordering::Acquire)
}

fn bump() {
    GENERATION.fetch_add(1, Ordering::AcqRel);
}

/// The fields of a tensor that its split and its per-device tensors depend on.
#[derive(Clone, PartialEq)]
struct Snapshot {
    type_: ggml_type,
    ne: [i64; 4],
    nb: [usize; 4],
    op: ggml_op,
    op_params: [i32; 16],
    src: [usize; GGML_MAX_SRC],
    view_src: usize,
    view_offs: usize,
    name: [std::ffi::c_char; GGML_MAX_NAME],
}

impl Snapshot {
    fn of(t: Tensor) -> Snapshot {
        let h = t.header();
        Snapshot {
            type_: h.type_,
            ne: h.ne,
            nb: h.nb,
            op: h.op,
            op_params: h.op_params,
            src: h.src.map(|p| p as usize),
            view_src: h.view_src as usize,
            view_offs: h.view_offs,
            name: h.name,
        }
    }
}

struct Entry {
    snapshot: Snapshot,
    derived: Derived,
    /// Per-device tensors; empty until the tensor is initialised in this buffer. C code holds
    /// their addresses, which [`Headers`] keeps in place.
    simple: Headers,
    /// Per-device slices of whole sources the op reads split (`Derived::sliced`): source slot,
    /// one view header per device.
    slices: Vec<(usize, Headers)>,
    /// `reset` count when last initialised (entries untouched for a whole reset cycle go).
    epoch: u64,
}

impl Entry {
    /// Whether some device holds this tensor's slice in memory already.
    fn placed(&self) -> bool {
        self.simple.tensors().any(|p| !p.data().is_null())
    }
}

struct Tensors {
    map: HashMap<usize, Entry>,
    epoch: u64,
}

pub struct MetaBuffer {
    pub dev: &'static MetaDevice,
    /// Per device: the simple buffer (None: nothing allocated there). Set once: when the
    /// buffer is made, or, for weights, once their slices are placed.
    simple: OnceLock<Vec<Option<Buffer>>>,
    tensors: Mutex<Tensors>,
    /// Buffers a plugin device allocated through `alloc_buffer`, whose memory is made when it
    /// is first needed (see [`alloc_deferred`]); None for every other buffer.
    deferred: Option<Mutex<Deferred>>,
    /// Each device's slices are packed (weights and caches): a tensor's offset in the meta
    /// buffer says nothing about where its slices are.
    packed: std::sync::atomic::AtomicBool,
}

/// The state of a deferred buffer before and after its memory is made.
#[derive(Default)]
struct Deferred {
    /// Tensors initialised before the memory was made, in order (views last placed).
    pending: Vec<Tensor>,
    /// Per-device buffers of tensors initialised after the memory was made.
    late: Vec<Buffer>,
}

// SAFETY: the boxed tensors are only touched under the mutex or by ggml's single-threaded
// graph contract; buffer handles are plain addresses.
unsafe impl Send for MetaBuffer {}
// SAFETY: as for `Send` above: shared access goes through the same synchronisation.
unsafe impl Sync for MetaBuffer {}

impl MetaBuffer {
    fn lock(&self) -> MutexGuard<'_, Tensors> {
        self.tensors.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn n(&self) -> usize {
        self.dev.n()
    }

    /// Per device: the simple buffer (None: nothing allocated there); empty until set.
    pub fn simple(&self) -> &[Option<Buffer>] {
        self.simple.get().map_or(&[], Vec::as_slice)
    }

    /// Every buffer of the simple devices that this meta buffer owns.
    fn owned_buffers(&self) -> Vec<Buffer> {
        let mut all: Vec<Buffer> = self.simple().iter().flatten().copied().collect();
        if let Some(d) = &self.deferred {
            all.extend(super::lock(d).late.iter().copied());
        }
        all
    }

    /// Makes a deferred buffer's memory for the tensors initialised so far (a no-op for
    /// other buffers and once made): each device's slices packed, as `alloc_tensors`
    /// does; the views among them then point into their sources' slices.
    pub fn place_deferred(&self) {
        let Some(d) = &self.deferred else { return };
        if self.simple.get().is_some() {
            return;
        }
        let views: Vec<Tensor> = {
            let mut g = super::lock(d);
            if self.simple.get().is_some() {
                return;
            }
            let (views, own): (Vec<Tensor>, Vec<Tensor>) = std::mem::take(&mut g.pending)
                .into_iter()
                .partition(|t| t.view_src().is_some());
            let simple = pack(self, &own)
                .unwrap_or_else(|e| abort(file!(), line!(), &e))
                .0;
            // packed first: an initialisation that sees the slices must not place by offset
            self.packed.store(true, Ordering::Release);
            let placed = self.simple.set(simple).is_ok();
            ggml_assert!(placed, "meta buffer: slices placed twice");
            views
        };
        for v in views {
            if let Err(e) = init_simple(self, v, None) {
                abort(file!(), line!(), &e);
            }
        }
    }

    /// The per-device tensors of `t`, if `t` was initialised in this buffer (placed first,
    /// if the buffer is deferred).
    pub fn simple_tensors(&self, t: Tensor) -> Option<Vec<Tensor>> {
        self.place_deferred();
        self.entry_tensors(t)
    }

    /// For `t` (not a view) whose slices are in place on the devices: whether they were placed
    /// for its current type and shape. None when it has no slices in place.
    fn placed_as(&self, t: Tensor) -> Option<bool> {
        let g = self.lock();
        let e = g.map.get(&(t.as_ptr() as usize))?;
        if !e.placed() {
            return None;
        }
        Some(e.snapshot.type_ == t.type_() && e.snapshot.ne == t.ne_all())
    }

    /// Drops what this buffer knows of `t` (its split and per-device headers).
    fn forget(&self, t: Tensor) {
        if self.lock().map.remove(&(t.as_ptr() as usize)).is_some() {
            bump();
        }
    }

    /// The per-device tensors of `t` as they are (placed or not).
    fn entry_tensors(&self, t: Tensor) -> Option<Vec<Tensor>> {
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
    super::BUFFERS.get(buffer.as_ptr() as usize)
}

/// The meta buffer that holds `t`'s data (its own buffer, or its view source's).
pub fn holding(t: Tensor) -> Option<Arc<MetaBuffer>> {
    t.own_buffer().or_else(|| t.data_buffer()).and_then(of)
}

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
        }),
        deferred: deferred.then(|| Mutex::new(Deferred::default())),
        packed: std::sync::atomic::AtomicBool::new(false),
    });
    // The context is the state's address for identification only; the state is found through
    // the registry (`of`, `ctx`).
    let context = Arc::as_ptr(&mb) as *mut c_void;
    let buffer = crate::buffer::init(dev.buft, BUFFER_IFACE, context, size);
    super::BUFFERS.insert(buffer.as_ptr() as usize, mb.clone());
    crate::buffer::extend(buffer, mb);
    buffer
}

/// A compute buffer: every device gets a simple buffer of the full size.
pub fn alloc(dev: &'static MetaDevice, size: usize) -> ggml_backend_buffer_t {
    match alloc_full(dev, size) {
        Some(simple) => new_buffer(dev, Some(simple), size, false).as_ptr(),
        None => std::ptr::null_mut(),
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

/// A simple buffer of `size` bytes on every device of `dev`; None (logged) when one fails.
fn alloc_full(dev: &'static MetaDevice, size: usize) -> Option<Vec<Option<Buffer>>> {
    let mut simple = Vec::with_capacity(dev.n());
    for j in 0..dev.n() {
        let buft = dev.simple_buft(j);
        let b = crate::buffer::alloc(buft, size);
        // SAFETY: a buffer returned by a buffer type is live until freed.
        match unsafe { Buffer::from_ptr(b) } {
            Some(b) => simple.push(Some(b)),
            None => {
                log_error!(
                    "meta buffer: failed to allocate {size} bytes on {}",
                    dev.simple[j].name_string()
                );
                for b in simple.into_iter().flatten() {
                    // SAFETY: allocated above, not shared yet.
                    unsafe { crate::buffer::free(b) };
                }
                return None;
            }
        }
    }
    Some(simple)
}

// --- splits -------------------------------------------------------------------------------

fn layout(t: Tensor) -> Layout {
    Layout {
        ne: t.ne_all(),
        nb: t.nb_all(),
        blck: t.blck_size(),
    }
}

/// How `t` packs two tensors into one, for the ops whose results do (see `packed`).
fn packing(t: Tensor) -> Option<Packed> {
    match t.op_kind() {
        Some(Op::GatedDeltaNet) => t.src(2).map(|v| Packed::gated_delta_net(v.ne_all())),
        _ => None,
    }
}

/// The split and per-device layouts of view `t` of `base`, split as `split` over `n` devices.
fn map_view(
    base: Tensor,
    split: &Split,
    t: Tensor,
    n: usize,
) -> Result<(Split, Vec<DeviceLayout>), String> {
    match packing(base) {
        Some(p) => packed::map_view(p, &layout(base), split, &layout(t), t.view_offs(), n),
        None => rules::map_view(&layout(base), split, &layout(t), t.view_offs(), n),
    }
    .map_err(|e| e.to_string())
}

fn named(t: Tensor, e: impl std::fmt::Display) -> String {
    format!(
        "meta backend: cannot split tensor '{}' ({}) across devices: {e}",
        t.name_string(),
        t.op_desc()
    )
}

/// The split of `t` (in a meta buffer) as consumers see it, cached in its buffer while the
/// tensor's header is unchanged. The cache cannot see a *source* change its split under an
/// unchanged header; `init_simple` therefore recomputes (`derive_fresh`) every tensor ggml allocates,
/// in graph order, so what compute and transfers read afterwards is current.
pub fn derived(t: Tensor) -> Result<Derived, String> {
    let Some(mb) = holding(t) else {
        return Err(named(t, "not in a meta buffer"));
    };
    if let Some(e) = mb.lock().map.get(&(t.as_ptr() as usize)) {
        if e.snapshot == Snapshot::of(t) {
            return Ok(e.derived.clone());
        }
    }
    derive_fresh(t, &mb).map(|(d, _)| d)
}

/// Computes `t`'s split and stores it in `mb`'s cache; for a view, also returns the
/// per-device layouts the mapping produced (so `init_simple` need not map it again).
fn derive_fresh(
    t: Tensor,
    mb: &MetaBuffer,
) -> Result<(Derived, Option<Vec<DeviceLayout>>), String> {
    let snap = Snapshot::of(t);
    let (d, view_layouts) = compute(t, mb)?;
    let mut g = mb.lock();
    let epoch = g.epoch;
    match g.map.get_mut(&(t.as_ptr() as usize)) {
        Some(e) => {
            // The slices of a placed weight or cache are where its split put them: a split-state
            // callback that answers differently for the same tensor is an error, not a move.
            // (cheap tests first: this runs for every tensor ggml allocates)
            let compute = t.own_buffer().is_some_and(|b| b.usage() == USAGE_COMPUTE);
            if !compute
                && t.view_src().is_none()
                && e.snapshot.type_ == snap.type_
                && e.snapshot.ne == snap.ne
                && !e.derived.split.same_as(&d.split)
                && e.placed()
            {
                let was = e.derived.split.describe();
                drop(g);
                return Err(named(
                    t,
                    format!(
                        "the split-state callback now answers {} for it, but its slices were \
                         placed as {was}",
                        d.split.describe()
                    ),
                ));
            }
            // Plans depend on splits and on the graph's structure (ops and edges: use counts,
            // the MoE tail); shapes and offsets are read from the tensors when they run.
            let structure_changed = e.snapshot.op != snap.op
                || e.snapshot.src != snap.src
                || e.snapshot.view_src != snap.view_src;
            if structure_changed
                || !e.derived.split.same_as(&d.split)
                || e.derived.reduce != d.reduce
                || e.derived.sliced != d.sliced
            {
                bump();
            }
            e.snapshot = snap;
            e.derived = d.clone();
        }
        None => {
            g.map.insert(
                t.as_ptr() as usize,
                Entry {
                    snapshot: snap,
                    derived: d.clone(),
                    simple: Headers::new(),
                    slices: Vec::new(),
                    epoch,
                },
            );
        }
    }
    Ok((d, view_layouts))
}

/// `t`'s split, and for a view its per-device layouts.
fn compute(t: Tensor, mb: &MetaBuffer) -> Result<(Derived, Option<Vec<DeviceLayout>>), String> {
    let n = mb.n();
    if let Some(base) = t.view_src() {
        let bs = derived(base)?;
        let mapped = map_view(base, &bs.split, t, n);
        if t.nelements() == 0 {
            // nothing to split; a mapping error surfaces only where the layouts are needed
            return Ok((plain(Split::Mirrored), mapped.ok().map(|(_, l)| l)));
        }
        let (d, layouts) = view_split(mapped, t, n, &mut |s| derived(s).map(|d| d.split))?;
        return Ok((d, Some(layouts)));
    }
    if t.nelements() == 0 {
        return Ok((plain(Split::Mirrored), None));
    }
    let compute_buffer = t.own_buffer().is_some_and(|b| b.usage() == USAGE_COMPUTE);
    let d = if compute_buffer {
        op_rule(t, n)?
    } else {
        mb.dev
            .callback_split(t)
            .map(plain)
            .map_err(|e| named(t, e))?
    };
    Ok((d, None))
}

/// The split of view `t` from its memory (`mapped`: `map_view` of it in its view source): view
/// ops, and views made by ggml_view_tensor (op NONE), are their memory; an op whose result is
/// a view (a copy into a cache, an in-place op) must yield its values where that memory
/// already places them, as one value (not partial sums). Sources' splits from `split_of`.
fn view_split(
    mapped: Result<(Split, Vec<DeviceLayout>), String>,
    t: Tensor,
    n: usize,
    split_of: &mut dyn FnMut(Tensor) -> Result<Split, String>,
) -> Result<(Derived, Vec<DeviceLayout>), String> {
    let (mem, layouts) = mapped.map_err(|e| named(t, e))?;
    if t.is_view_op() || t.op_kind() == Some(Op::None) {
        return Ok((plain(mem), layouts));
    }
    let d = op_rule_with(t, n, split_of)?;
    if !d.split.same_as(&mem) || d.reduce {
        return Err(named(
            t,
            format!(
                "the op yields {} but writes into a view split as {}",
                d.split.describe(),
                mem.describe()
            ),
        ));
    }
    Ok((d, layouts))
}

fn plain(split: Split) -> Derived {
    Derived {
        split,
        reduce: false,
        sliced: Vec::new(),
    }
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

fn op_rule(t: Tensor, n: usize) -> Result<Derived, String> {
    op_rule_with(t, n, &mut |s| derived(s).map(|d| d.split))
}

/// `t`'s op rule over sources whose splits `split_of` gives.
fn op_rule_with(
    t: Tensor,
    n: usize,
    split_of: &mut dyn FnMut(Tensor) -> Result<Split, String>,
) -> Result<Derived, String> {
    let mut srcs: Vec<Option<Src>> = vec![None; GGML_MAX_SRC];
    for (i, s) in t.srcs_indexed() {
        if s == t {
            continue;
        }
        let split = if s.nelements() == 0 {
            Split::Mirrored
        } else {
            split_of(s)?
        };
        // a packed result's device slices are not its split's slices (see `packed`): only
        // views, which map each part through its own layout, may read it
        if matches!(split, Split::Dim(_)) && packing(s).is_some() {
            return Err(named(
                t,
                format!(
                    "it reads '{}', whose gated_delta_net result packs output and states per \
                     device, other than through a view",
                    s.name_string()
                ),
            ));
        }
        srcs[i] = Some(Src {
            split,
            ne: s.ne_all(),
        });
    }
    let Some(op) = t.op_kind() else {
        return Err(named(t, UnknownOp(t.op())));
    };
    rules::derive(op, &t.op_params(), t.ne_all(), &srcs, n).map_err(|e| named(t, e))
}

/// Checks that every node of `nodes` (a graph in execution order, as the scheduler gives one meta
/// backend) can be split over `n` devices, before any of its compute tensors has memory: the
/// scheduler calls this when it reserves a graph, i.e. when libllama creates a context, so that
/// a model the meta device cannot run fails there and not in the first decode. The rules are
/// the ones `derived` applies once the tensors are allocated. Weights and caches read their
/// splits from their meta buffers; everything else (compute tensors, graph inputs, the
/// scheduler's copies from other backends, views) is derived here into `splits`, which the
/// caller keeps for the splits of one meta backend, in graph order.
pub fn check_unallocated(
    nodes: impl Iterator<Item = Tensor>,
    n: usize,
    splits: &mut HashMap<usize, Split>,
) -> Result<(), String> {
    for t in nodes {
        unallocated_split(t, n, splits)?;
    }
    Ok(())
}

fn unallocated_split(
    t: Tensor,
    n: usize,
    splits: &mut HashMap<usize, Split>,
) -> Result<Split, String> {
    if let Some(s) = splits.get(&(t.as_ptr() as usize)) {
        return Ok(s.clone());
    }
    if t.nelements() == 0 {
        return Ok(Split::Mirrored);
    }
    // Weights and caches (a meta buffer that is not a compute buffer) have their splits from
    // the policy; compute tensors, even when allocated before (a graph reserved again), are
    // derived here. Views, and ops that write into a view of a cache, are derived below from
    // their view source.
    if let (None, Some(own)) = (t.view_src(), t.own_buffer()) {
        match holding(t) {
            Some(_) if own.usage() != USAGE_COMPUTE => return derived(t).map(|d| d.split),
            Some(_) => {}
            // memory of another backend: the scheduler copies it to the meta backend whole
            None => return Ok(Split::Mirrored),
        }
    }
    let split = match t.view_src() {
        Some(base) => {
            let bs = unallocated_split(base, n, splits)?;
            let mapped = map_view(base, &bs, t, n);
            view_split(mapped, t, n, &mut |s| unallocated_split(s, n, splits))?
                .0
                .split
        }
        None => op_rule_with(t, n, &mut |s| unallocated_split(s, n, splits))?.split,
    };
    splits.insert(t.as_ptr() as usize, split.clone());
    Ok(split)
}

// --- per-device tensors -------------------------------------------------------------------

/// Creates or refreshes the per-device tensors of `t` (which lives in `mb`), placing
/// non-views at `offset` in each simple buffer when `place` is set.
fn init_simple(mb: &MetaBuffer, t: Tensor, place: Option<usize>) -> Result<(), String> {
    let n = mb.n();
    let (d, view_layouts) = derive_fresh(t, mb)?;
    let header = t.header();
    // Layouts, and each device's view source (for views).
    let (layouts, bases): (Vec<DeviceLayout>, Option<Vec<Tensor>>) = match t.view_src() {
        Some(base) => {
            let bmb = holding(base).ok_or_else(|| named(t, "view source not in a meta buffer"))?;
            let bases = bmb.simple_tensors(base).ok_or_else(|| {
                named(
                    t,
                    format!("view source '{}' is not initialised", base.name_string()),
                )
            })?;
            let l = match view_layouts {
                Some(l) => l,
                None => {
                    let bs = derived(base)?;
                    map_view(base, &bs.split, t, n).map_err(|e| named(t, e))?.1
                }
            };
            (l, Some(bases))
        }
        None => {
            let physical = if d.reduce {
                Split::Partial
            } else {
                d.split.clone()
            };
            (
                rules::own_layouts(&layout(t), &physical, n).map_err(|e| named(t, e))?,
                None,
            )
        }
    };
    // Sources on each device.
    let mut srcs: Vec<Option<Vec<Tensor>>> = vec![None; GGML_MAX_SRC];
    for (i, s) in t.srcs_indexed() {
        if s == t {
            continue;
        }
        let smb = holding(s).ok_or_else(|| {
            named(
                t,
                format!("source '{}' is not in a meta buffer", s.name_string()),
            )
        })?;
        srcs[i] = Some(smb.simple_tensors(s).ok_or_else(|| {
            named(
                t,
                format!("source '{}' is not initialised", s.name_string()),
            )
        })?);
    }

    // Slices of whole sources the op reads split: each device reads a view of its copy.
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

    let mut g = mb.lock();
    let epoch = g.epoch;
    let entry = g
        .map
        .get_mut(&(t.as_ptr() as usize))
        .expect("derived() created the entry");
    entry.epoch = epoch;
    if entry.simple.len() != n {
        entry.simple = Headers::zeroed(n);
        bump();
    }
    let same_slots = entry.slices.len() == slices.len()
        && entry.slices.iter().zip(&slices).all(|(a, b)| a.0 == b.0);
    if !same_slots {
        entry.slices = slices
            .iter()
            .map(|(slot, _)| (*slot, Headers::zeroed(n)))
            .collect();
        bump();
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
                srcs[i].as_ref().expect("collected above")[j].as_ptr()
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
    let meta_buf = new_buffer(dev, None, 0, false);
    let Some(mb) = of(meta_buf) else {
        unreachable!("registered in new_buffer")
    };
    for &t in &own {
        t.attach(meta_buf, META_BASE as *mut c_void);
        if let Err(e) = init_simple(&mb, t, None) {
            abort(file!(), line!(), &e);
        }
    }
    let (simple, max_total) = match pack(&mb, &own) {
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
    mb.packed.store(true, Ordering::Release);
    let placed = mb.simple.set(simple).is_ok();
    ggml_assert!(placed, "meta buffer: slices placed twice");
    meta_buf.set_size_field(max_total);
    for &v in &views {
        let src = v.view_src().expect("partitioned on view_src");
        let data = (src.data() as *mut u8).wrapping_add(v.view_offs()) as *mut c_void;
        v.attach(meta_buf, data);
        if let Err(e) = init_simple(&mb, v, None) {
            abort(file!(), line!(), &e);
        }
    }
    meta_buf.as_ptr()
}

/// Packs each device's slices of `own` (initialised in `mb`, not yet placed) into buffers of
/// that device: one buffer per device, or a multi-buffer when the buffer type's maximum size
/// asks for several. Returns them with the largest per-device total; on failure, frees what
/// it allocated and says what failed.
fn pack(mb: &MetaBuffer, own: &[Tensor]) -> Result<(Vec<Option<Buffer>>, usize), String> {
    let dev = mb.dev;
    let n = dev.n();
    let mut simple: Vec<Option<Buffer>> = vec![None; n];
    let mut max_total = 0usize;
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
        let total: usize = chunks.iter().map(|c| c.1).sum();
        max_total = max_total.max(total);
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
    Ok((simple, max_total))
}

// --- data transfers -----------------------------------------------------------------------

/// How a transfer of `t` is carried out: per device, what to do.
pub enum Plan {
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
pub fn plan(t: Tensor, offset: usize, size: usize, what: &str) -> (Plan, Vec<Tensor>) {
    let fail = |e: String| -> ! { abort(file!(), line!(), &format!("{what}: {}", named(t, e))) };
    let Some(mb) = holding(t) else {
        fail("not in a meta buffer".into())
    };
    let d = derived(t).unwrap_or_else(|e| fail(e));
    let initialised = |mb: &MetaBuffer, x: Tensor| {
        mb.simple_tensors(x).unwrap_or_else(|| {
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
        derived(owner).unwrap_or_else(|e| fail(e)).split
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
    let ps = match packing(owner) {
        Some(p) => packed::pieces(p, &layout(owner), ds, at, size).map_err(|e| e.to_string()),
        None => pieces(&layout(owner), ds, at, size).map_err(|e| e.to_string()),
    };
    let owner_mb = if owner == t {
        mb
    } else {
        holding(owner).unwrap_or_else(|| fail("view source not in a meta buffer".into()))
    };
    let simple = initialised(&owner_mb, owner);
    (Plan::Pieces(ps.unwrap_or_else(|e| fail(e))), simple)
}

// --- buffer vtable ------------------------------------------------------------------------

const BUFFER_IFACE: ggml_backend_buffer_i = ggml_backend_buffer_i {
    free_buffer: Some(free_buffer),
    get_base: Some(get_base),
    init_tensor: Some(init_tensor),
    memset_tensor: Some(memset_tensor),
    set_tensor: Some(set_tensor),
    get_tensor: Some(get_tensor),
    set_tensor_2d: None,
    get_tensor_2d: None,
    cpy_tensor: Some(cpy_tensor),
    clear: Some(clear),
    reset: Some(reset),
};

/// The meta buffer behind a buffer vtable entry's argument: only meta buffers carry that
/// vtable, so anything else is a caller's error.
fn ctx(buffer: ggml_backend_buffer_t) -> Arc<MetaBuffer> {
    super::BUFFERS.get(buffer as usize).unwrap_or_else(|| {
        abort(
            file!(),
            line!(),
            &format!("meta buffer vtable called with {buffer:p}, which is not a live meta buffer"),
        )
    })
}

unsafe extern "C" fn free_buffer(buffer: ggml_backend_buffer_t) {
    let mb = ctx(buffer);
    super::BUFFERS.remove(buffer as usize);
    // SAFETY: ggml frees a buffer once, through this entry, with the live buffer.
    if let Some(b) = unsafe { Buffer::from_ptr(buffer) } {
        crate::buffer::unextend(b);
    }
    for b in mb.owned_buffers() {
        // SAFETY: the simple buffers belong to this meta buffer alone and go with it.
        unsafe { crate::buffer::free(b) };
    }
    bump();
}

unsafe extern "C" fn get_base(_buffer: ggml_backend_buffer_t) -> *mut c_void {
    META_BASE as *mut c_void
}

unsafe extern "C" fn init_tensor(
    buffer: ggml_backend_buffer_t,
    tensor: *mut ggml_tensor,
) -> ggml_status {
    let mb = ctx(buffer);
    // SAFETY: ggml_backend_buffer_init_tensor passes NULL or a live tensor.
    let Some(t) = (unsafe { Tensor::from_ptr(tensor) }) else {
        return GGML_STATUS_FAILED;
    };
    if let Some(d) = &mb.deferred {
        // SAFETY: ggml passes the live buffer that `tensor` is being placed in.
        let compute =
            unsafe { Buffer::from_ptr(buffer) }.is_some_and(|b| b.usage() == USAGE_COMPUTE);
        if compute {
            // full-size memory per device, as `alloc` makes it
            if mb.simple.get().is_none() {
                let Some(simple) = alloc_full(mb.dev, buffer_size(buffer)) else {
                    return GGML_STATUS_ALLOC_FAILED;
                };
                // The host's `ggml_backend_buffer_set_usage` does not tell us; backends
                // (CUDA's padding rules) look at their own buffer's usage.
                for b in simple.iter().flatten() {
                    crate::buffer::set_usage(*b, USAGE_COMPUTE);
                }
                if let Err(unused) = mb.simple.set(simple) {
                    for b in unused.into_iter().flatten() {
                        // SAFETY: allocated just now and never shared.
                        unsafe { crate::buffer::free(b) };
                    }
                }
            }
        } else {
            // Weights or caches. Until the buffer is used they are collected (under the lock
            // that placing takes, so none is missed) and placed together.
            let mut g = super::lock(d);
            if mb.simple.get().is_none() {
                // own tensors need no other tensor's slices: init_simple does not place
                if t.view_src().is_none() {
                    if let Err(e) = init_simple(&mb, t, None) {
                        abort(file!(), line!(), &e);
                    }
                }
                if !g.pending.contains(&t) {
                    g.pending.push(t);
                }
                return GGML_STATUS_SUCCESS;
            }
            drop(g);
            if t.view_src().is_none() && mb.placed_as(t) != Some(true) {
                // A tensor placed in a buffer that is in use already (or a new tensor at the
                // address of one whose slices have another shape): its slices get buffers of
                // their own.
                mb.forget(t);
                if let Err(e) = init_simple(&mb, t, None) {
                    abort(file!(), line!(), &e);
                }
                match pack(&mb, &[t]) {
                    Ok((bufs, _)) => super::lock(d).late.extend(bufs.into_iter().flatten()),
                    Err(e) => {
                        log_error!("{e}");
                        // no half-placed tensor: using it reports that it is not initialised
                        mb.forget(t);
                        return GGML_STATUS_ALLOC_FAILED;
                    }
                }
                return GGML_STATUS_SUCCESS;
            }
        }
    } else if mb.packed.load(Ordering::Acquire)
        && t.view_src().is_none()
        && mb.placed_as(t) == Some(false)
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
    let place = if t.view_src().is_none() && !mb.packed.load(Ordering::Acquire) {
        Some((t.data() as usize).wrapping_sub(META_BASE))
    } else {
        None
    };
    if let Err(e) = init_simple(&mb, t, place) {
        abort(file!(), line!(), &e);
    }
    GGML_STATUS_SUCCESS
}

unsafe extern "C" fn set_tensor(
    _buffer: ggml_backend_buffer_t,
    tensor: *mut ggml_tensor,
    data: *const c_void,
    offset: usize,
    size: usize,
) {
    // SAFETY: ggml_backend_tensor_set checked the tensor and passes it live.
    let t = unsafe { Tensor::from_ptr(tensor) }.expect("checked by ggml_backend_tensor_set");
    let (plan, simple) = plan(t, offset, size, "ggml_backend_tensor_set");
    // The contract of the transfers below: `data` is readable for `size` bytes (the entry's contract);
    // every piece lies inside `[0, size)` of it (`transfer::pieces`), and the per-device
    // tensors are live while `t` is.
    match plan {
        Plan::Mirrored => {
            for s in simple {
                // SAFETY: the contract stated above the match.
                unsafe { crate::tensor::set(s, data, offset, size) };
            }
        }
        // SAFETY: the contract stated above the match.
        Plan::Partial => unsafe { set_partial(&simple, data, offset, size) },
        Plan::Pieces(pieces) => {
            for p in pieces {
                let src = (data as *const u8).wrapping_add(p.host_offset) as *const c_void;
                // SAFETY: the contract stated above the match.
                unsafe { crate::tensor::set_2d(simple[p.device], src, p.strided) };
            }
        }
    }
}

unsafe extern "C" fn get_tensor(
    _buffer: ggml_backend_buffer_t,
    tensor: *const ggml_tensor,
    data: *mut c_void,
    offset: usize,
    size: usize,
) {
    // SAFETY: ggml_backend_tensor_get checked the tensor and passes it live.
    let t = unsafe { Tensor::from_ptr(tensor as *mut ggml_tensor) }
        .expect("checked by ggml_backend_tensor_get");
    let (plan, simple) = plan(t, offset, size, "ggml_backend_tensor_get");
    // The contract of the transfers below: `data` is writable for `size` bytes (the entry's contract);
    // every piece lies inside `[0, size)` of it (`transfer::pieces`), and the per-device
    // tensors are live while `t` is.
    match plan {
        // SAFETY: the contract stated above the match.
        Plan::Mirrored => unsafe { crate::tensor::get(simple[0], data, offset, size) },
        // SAFETY: the contract stated above the match.
        Plan::Partial => unsafe { get_partial_sum(t, &simple, data, offset, size) },
        Plan::Pieces(pieces) => {
            for p in pieces {
                let dst = (data as *mut u8).wrapping_add(p.host_offset) as *mut c_void;
                // SAFETY: the contract stated above the match.
                unsafe { crate::tensor::get_2d(simple[p.device], dst, p.strided) };
            }
        }
    }
}

/// Writes a partial-sum tensor's value: device 0 takes the bytes, the others zeros, so the sum
/// over devices is the value exactly, whatever the type.
///
/// # Safety
/// `data` is readable for `size` bytes.
pub unsafe fn set_partial(simple: &[Tensor], data: *const c_void, offset: usize, size: usize) {
    // SAFETY: `data` is readable for `size` bytes (the contract above).
    unsafe { crate::tensor::set(simple[0], data, offset, size) };
    let zeros = vec![0u8; size];
    for &s in &simple[1..] {
        // SAFETY: `zeros` holds `size` bytes.
        unsafe { crate::tensor::set(s, zeros.as_ptr() as *const c_void, offset, size) };
    }
}

/// Reads a partial-sum tensor as its value: the sum over devices, in device order (F32).
///
/// # Safety
/// `data` is writable for `size` bytes (any alignment).
pub unsafe fn get_partial_sum(
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
        unsafe { crate::tensor::get(s, part.as_mut_ptr() as *mut c_void, offset, size) };
        for (o, x) in sum.iter_mut().zip(&part) {
            *o += *x;
        }
    }
    // SAFETY: `sum` holds `size` bytes; `data` is writable for `size` bytes (the contract
    // above), a caller's buffer that cannot overlap our vector; bytes need no alignment.
    unsafe { std::ptr::copy_nonoverlapping(sum.as_ptr() as *const u8, data as *mut u8, size) };
}

unsafe extern "C" fn memset_tensor(
    _buffer: ggml_backend_buffer_t,
    tensor: *mut ggml_tensor,
    value: u8,
    offset: usize,
    size: usize,
) {
    // SAFETY: ggml_backend_tensor_memset checked the tensor and passes it live.
    let t = unsafe { Tensor::from_ptr(tensor) }.expect("checked by ggml_backend_tensor_memset");
    let (plan, simple) = plan(t, offset, size, "ggml_backend_tensor_memset");
    // one host copy of the pattern serves every write (no piece is longer than the range)
    let bytes = vec![value; size];
    let src = bytes.as_ptr() as *const c_void;
    // The contract of the transfers below: `bytes` holds `size` bytes, and no write is longer.
    match plan {
        Plan::Mirrored => simple
            .iter()
            // SAFETY: the contract stated above the match.
            .for_each(|&s| unsafe { crate::tensor::set(s, src, offset, size) }),
        // SAFETY: the contract stated above the match.
        Plan::Partial => unsafe { set_partial(&simple, src, offset, size) },
        Plan::Pieces(pieces) => {
            for p in pieces {
                let s = p.strided;
                for i in 0..s.n_copies {
                    // SAFETY: the contract stated above the match.
                    unsafe {
                        crate::tensor::set(
                            simple[p.device],
                            src,
                            s.offset + i * s.stride_tensor,
                            s.size,
                        )
                    };
                }
            }
        }
    }
}

unsafe extern "C" fn cpy_tensor(
    _buffer: ggml_backend_buffer_t,
    src: *const ggml_tensor,
    dst: *mut ggml_tensor,
) -> bool {
    // Meta to meta with the same split: device by device. Anything else goes through the
    // host (the core's fallback uses get/set, which scatter and gather).
    // SAFETY: ggml_backend_tensor_copy passes NULL or live tensors.
    let (Some(s), Some(d)) = (
        unsafe { Tensor::from_ptr(src as *mut ggml_tensor) },
        unsafe { Tensor::from_ptr(dst) },
    ) else {
        return false;
    };
    if holding(s).is_none() {
        return false;
    }
    let (Ok(ds), Ok(dd)) = (derived(s), derived(d)) else {
        return false;
    };
    // (packed results: device by device only into the same packing)
    let packed_alike = packing(s) == packing(d);
    if !ds.split.same_as(&dd.split) || ds.reduce != dd.reduce || !packed_alike {
        return false;
    }
    let (Some(ss), Some(sd)) = (
        holding(s).and_then(|m| m.simple_tensors(s)),
        holding(d).and_then(|m| m.simple_tensors(d)),
    ) else {
        return false;
    };
    // devices holding an empty slice have nothing (and no memory) to copy
    for (a, b) in ss.into_iter().zip(sd).filter(|(a, _)| a.nbytes() > 0) {
        crate::tensor::copy(a, b);
    }
    true
}

unsafe extern "C" fn clear(buffer: ggml_backend_buffer_t, value: u8) {
    let mb = ctx(buffer);
    mb.place_deferred();
    for b in mb.owned_buffers() {
        crate::buffer::clear(b, value);
    }
}

/// The size field of a live buffer.
fn buffer_size(buffer: ggml_backend_buffer_t) -> usize {
    // SAFETY: the vtable entries pass their own live buffer.
    unsafe { Buffer::from_ptr(buffer) }.map_or(0, |b| b.size())
}

unsafe extern "C" fn reset(buffer: ggml_backend_buffer_t) {
    let mb = ctx(buffer);
    for b in mb.simple().iter().flatten() {
        b.reset();
    }
    // Drop the per-device tensors of tensors not initialised since the previous reset:
    // ggml re-initialises every live tensor of a compute buffer after a reset.
    let mut g = mb.lock();
    let keep_from = g.epoch;
    let before = g.map.len();
    g.map.retain(|_, e| e.epoch >= keep_from);
    g.epoch += 1;
    if g.map.len() != before {
        bump();
    }
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
