//! The meta device's state: its simple devices, how it learns the splits of weights and
//! caches, and the memo of its tensors' splits. Its C objects and their vtables are in
//! `device_iface`.
//!
//! The plugin's devices (`create_plugin`) are the same device with another [`Face`] (listed
//! by the plugin's registry, type GPU) and [`Policy`] (splits by tensor name).

use std::collections::HashMap;
use std::ffi::{c_void, CString};
use std::ptr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

use ggml_backend_rs_core::infer::{Placed, Placement, SplitMemo};
use ggml_backend_rs_core::memory::{Entry, Shares};
use ggml_backend_rs_core::names::{Info, NamePolicy};

use super::split::{Split, StateError};
use crate::abi::log::{abort, ggml_assert, log_debug};
use crate::abi::*;
use ggml_backend_rs_core::owned::lock;

/// How a meta device learns the splits of weights and caches.
pub enum Policy {
    /// The callback given to `ggml_backend_meta_device` (libllama's, in tensor mode); none
    /// mirrors everything.
    Callback {
        callback: ggml_backend_meta_get_split_state_t,
        userdata: usize,
    },
    /// Rules by GGUF tensor name, from the tensors allocated on the device (the plugin's
    /// devices: libllama sees them as plain devices and gives no callback). Boxed: the policy's
    /// tables are far larger than a callback.
    Names(Box<Mutex<NamePolicy>>),
}

/// What ggml sees of a meta device.
pub enum Face {
    /// `ggml_backend_meta_device`'s: type META, in a private registry, not enumerated.
    Meta,
    /// A plugin device, listed by the plugin's registry `reg`: type GPU, so that programs
    /// may name it, with `device_id` (its first simple device's) so that libllama's default
    /// device selection, which skips a second device with the id of one it has, keeps
    /// using the simple devices themselves.
    Plugin {
        device_id: Option<CString>,
        reg: ggml_backend_reg_t,
    },
}

/// Everything a meta device knows. Reached from the C objects' `context` pointers.
pub struct MetaDevice {
    pub simple: Vec<Device>,
    pub(super) policy: Policy,
    pub(super) face: Face,
    pub(super) name: CString,
    pub(super) description: CString,
    /// The C device object (for `buft.device` and backends).
    pub device: ggml_backend_dev_t,
    /// The meta buffer type of this device.
    pub buft: ggml_backend_buffer_type_t,
    /// The splits of the tensors this device's buffers and backends touch (see `facts`).
    splits: Mutex<SplitMemo>,
    /// Each member's share of a split tensor, relative to the others': the plugin's
    /// `GGML_BACKEND_RS_TP_SPLIT`; even for a device whose callback decides (it tells the
    /// shares only tensor by tensor, after a planner has asked for the memory).
    weights: Vec<u64>,
    /// The unit its memory, buffers and tensor sizes are counted in (`memory::Shares`), fixed
    /// the first time it is needed.
    shares: OnceLock<Shares>,
    /// The size answered for each weight or cache not placed yet ([`MetaDevice::sized`]).
    sized: Mutex<HashMap<SizeKey, usize>>,
}

/// A tensor as far as its size goes: address, type, shape and name.
type SizeKey = (usize, ggml_type, [i64; 4], String);

fn size_key(t: Tensor) -> SizeKey {
    (t.as_ptr() as usize, t.type_(), t.ne_all(), t.name_string())
}

/// Most sizes [`MetaDevice::sized`] keeps (tensors sized and never placed: a planner's dry run).
const SIZED_MAX: usize = 1 << 16;

// SAFETY: the simple device handles are shared by design (ggml devices are process-wide);
// the callback and userdata are only called/passed, as the C API expects; the plugin's
// registry lives for the process; the name policy is behind its mutex.
unsafe impl Send for MetaDevice {}
// SAFETY: as for `Send` above: shared access goes through the same synchronisation.
unsafe impl Sync for MetaDevice {}

impl MetaDevice {
    /// A device's state, before its C objects (`device`, `buft`) exist.
    pub(super) fn new(
        simple: Vec<Device>,
        policy: Policy,
        weights: Vec<u64>,
        face: Face,
        name: CString,
        description: CString,
    ) -> MetaDevice {
        MetaDevice {
            splits: Mutex::new(SplitMemo::new(simple.len())),
            weights,
            shares: OnceLock::new(),
            sized: Mutex::new(HashMap::new()),
            simple,
            policy,
            face,
            name,
            description,
            device: ptr::null_mut(),
            buft: ptr::null_mut(),
        }
    }

    pub fn n(&self) -> usize {
        self.simple.len()
    }

    /// The size of weight or cache `t` as first answered until it is placed, else `size()`'s.
    /// ggml-alloc asks twice, to size a buffer and then to place each tensor in it, and a name
    /// policy that meanwhile saw the context's other tensors (where another model's tensors of
    /// the same names were seen before) may answer more the second time than the buffer holds.
    /// Each device's memory is what the slices take when placed, whatever ggml counted.
    pub(super) fn sized(&self, t: Tensor, size: impl FnOnce() -> usize) -> usize {
        let key = size_key(t);
        if let Some(&s) = lock(&self.sized).get(&key) {
            return s;
        }
        // (no lock held while the policy, perhaps a caller's callback, answers)
        let s = size();
        let mut m = lock(&self.sized);
        if m.len() >= SIZED_MAX {
            m.clear();
        }
        *m.entry(key).or_insert(s)
    }

    /// Forgets `t`'s size (it is placed now).
    pub(super) fn forget_size(&self, t: Tensor) {
        lock(&self.sized).remove(&size_key(t));
    }

    /// The split of a statically allocated tensor (weights, caches), from the callback.
    pub fn callback_split(&self, t: Tensor) -> Result<Split, StateError> {
        self.policy_split(t, false)
    }

    /// How `t`'s split is known, where `fixed` is the split its placement fixed (if it is placed
    /// for its current type and shape). A name policy is never asked again about a placed
    /// tensor: its later answers may differ (it decides as it sees more of the model), and the
    /// slices are where the first answer put them. A caller's callback is asked again, and the
    /// core refuses an answer that contradicts the placement.
    pub fn placement(&self, t: Tensor, fixed: Option<Placed>) -> Result<Placement, StateError> {
        Ok(match (fixed, &self.policy) {
            (None, _) => Placement::New(self.callback_split(t)?),
            (Some(placed), Policy::Names(_)) => Placement::Fixed {
                placed,
                asked: None,
            },
            (Some(placed), Policy::Callback { .. }) => Placement::Fixed {
                placed,
                asked: Some(self.callback_split(t)?),
            },
        })
    }

    /// The split `callback_split` would give now, fixing no decision of a name policy (which
    /// decides a layer once, and may not have seen all of it yet): for sizes.
    pub fn tentative_split(&self, t: Tensor) -> Result<Split, StateError> {
        self.policy_split(t, true)
    }

    fn policy_split(&self, t: Tensor, tentative: bool) -> Result<Split, StateError> {
        let ne = [t.ne(0), t.ne(1), t.ne(2), t.ne(3)];
        let blck = t.blck_size();
        let granule = |axis| if axis == 0 { blck } else { 1 };
        let (callback, userdata) = match &self.policy {
            Policy::Callback { callback, userdata } => (*callback, *userdata),
            Policy::Names(p) => {
                let (name, info) = (t.name_string(), Info { blck, ne });
                let mut policy = lock(p);
                let raw = if tentative {
                    policy.peek(&name, info)
                } else {
                    policy.split(&name, info)
                };
                // The rules by name describe libllama's layouts; a tensor they cannot split as
                // it is (slices that are not whole quantization blocks, say) is placed whole.
                return Ok(
                    Split::from_raw(&raw, ne, self.n(), granule).unwrap_or_else(|e| {
                        log_debug!(
                            "{}: '{name}' placed whole: {e}",
                            self.name.to_string_lossy()
                        );
                        Split::Mirrored
                    }),
                );
            }
        };
        let Some(cb) = callback else {
            return Ok(Split::Mirrored);
        };
        // SAFETY: the callback has the C type of the version's header; it is called with a live
        // tensor and the userdata it was registered with. Its result's axis is a plain integer
        // (`ggml_backend_meta_split_axis_raw`), so an invalid value from C is an error below.
        let c = unsafe { cb(t.as_ptr(), userdata as *mut c_void) };
        let raw = crate::abi::facts::split_from_c(&c);
        Split::from_raw(&raw, ne, self.n(), granule)
    }

    /// Notes a tensor about to be allocated on the device, for a name policy (which needs
    /// a layer's other tensors to split any of them). Only leaves with names count:
    /// weights, caches and inputs, not the graph's intermediate results.
    pub fn observe(&self, t: Tensor) {
        if let Policy::Names(p) = &self.policy {
            if t.op_kind() == Some(ggml_backend_rs_core::Op::None)
                && t.view_src().is_none()
                && !t.name_string().is_empty()
            {
                let info = Info {
                    blck: t.blck_size(),
                    ne: [t.ne(0), t.ne(1), t.ne(2), t.ne(3)],
                };
                lock(p).record(&t.name_string(), info);
            }
        }
    }

    pub fn is_plugin(&self) -> bool {
        matches!(self.face, Face::Plugin { .. })
    }

    pub(super) fn simple_bufts(&self) -> impl Iterator<Item = Buft> + '_ {
        self.simple.iter().map(|d| {
            // SAFETY: buffer types returned by a device live as long as the device.
            unsafe { Buft::from_ptr(d.buffer_type()) }.unwrap_or_else(|| {
                abort(
                    file!(),
                    line!(),
                    &format!("device {} has no buffer type", d.name_string()),
                )
            })
        })
    }

    /// The unit of the device's figures. An even split counts a byte on each member; a
    /// weighted one picks its reference share from the members' total memory, which is asked
    /// for here, the first time (not when the device is made, which would make every GPU's
    /// context as soon as a plugin loads).
    pub(super) fn shares(&self) -> &Shares {
        self.shares.get_or_init(|| {
            if self.weights.iter().all(|&w| w == self.weights[0]) {
                Shares::even(self.n())
            } else {
                Shares::plan(&self.weights, &self.memory_entries())
            }
        })
    }

    /// Each member's memory as it reports it, and which physical device it is.
    pub(super) fn memory_entries(&self) -> Vec<Entry> {
        self.simple
            .iter()
            .map(|d| {
                let (mut free, mut total) = (0, 0);
                d.memory(&mut free, &mut total);
                Entry {
                    physical: physical_key(d),
                    free: free as u64,
                    total: total as u64,
                }
            })
            .collect()
    }

    /// The alignment every simple buffer type's divides (checked), which slices are
    /// padded to.
    pub(super) fn device_alignment(&self) -> usize {
        let align = self
            .simple_bufts()
            .map(|b| b.alignment())
            .max()
            .unwrap_or(1);
        for b in self.simple_bufts() {
            let a = b.alignment();
            ggml_assert!(
                a != 0 && align % a == 0,
                "meta buffer type: alignment {a} of {} does not divide {align}",
                b.name_string()
            );
        }
        align
    }

    pub fn simple_buft(&self, j: usize) -> Buft {
        self.simple_bufts()
            .nth(j)
            .expect("index checked by the caller")
    }
}

/// The meta device of a C device, if it is one.
pub fn of_device(dev: Device) -> Option<&'static MetaDevice> {
    device_at(dev.as_ptr() as usize)
}

/// The meta device of a C buffer type, if it is a meta buffer type.
pub fn of_buft(buft: Buft) -> Option<&'static MetaDevice> {
    device_of_buft_at(buft.as_ptr() as usize)
}

impl MetaDevice {
    /// Runs `f` on the device's split memo. (Never call into C inside: the memo's lock is
    /// not reentrant.)
    pub(super) fn splits<R>(&self, f: impl FnOnce(&mut SplitMemo) -> R) -> R {
        f(&mut lock(&self.splits))
    }

    /// Advances when anything this device's graph plans were built from changes: a split,
    /// the graph's structure, or a per-device tensor made or dropped.
    pub(super) fn generation(&self) -> u64 {
        self.splits(|m| m.generation())
    }

    /// Marks this device's graph plans stale (per-device tensors were made or dropped).
    pub(super) fn touch(&self) {
        self.splits(SplitMemo::touch)
    }

    pub(super) fn device_type(&self) -> ggml_backend_dev_type_raw {
        match self.face {
            Face::Meta => DEVICE_META,
            Face::Plugin { .. } => DEVICE_GPU,
        }
    }
}

impl MetaDevice {
    /// For a name policy: an op of a split gated-delta-net layer that the devices cannot run
    /// would run elsewhere and come back whole to consumers that are split, which no rule
    /// computes. The scheduler asks about every node when the context reserves its graphs:
    /// stop there, naming the op and the setting that keeps those layers whole.
    pub(super) fn check_recurrent(&self, t: Tensor) {
        use ggml_backend_rs_core::Op;
        let Policy::Names(p) = &self.policy else {
            return;
        };
        if !matches!(
            t.op_kind(),
            Some(Op::GetRows | Op::Concat | Op::SsmConv | Op::GatedDeltaNet)
        ) {
            return;
        }
        let Some(layer) = node_layer(t) else {
            return;
        };
        if lock(p).splits_recurrent(layer) {
            let name = t.name_string();
            abort(
                file!(),
                line!(),
                &format!(
                    "{}: its devices cannot run {} ('{name}'), which layer {layer}'s gated delta \
                     net needs on each device when it is split: set \
                     GGML_BACKEND_RS_TP_RECURRENT=mirrored to compute those layers whole",
                    self.name.to_string_lossy(),
                    t.op_desc()
                ),
            );
        }
    }

    /// For a name policy: a rope node shows its layer's head size (its rows), which the
    /// weights' names and shapes may not have told. The scheduler asks about every node when
    /// the context reserves its graphs, so a split that cuts heads stops there, with a message
    /// that names the layer and the setting that fixes it, rather than in the first decode.
    pub(super) fn check_rope(&self, t: Tensor) {
        let Policy::Names(p) = &self.policy else {
            return;
        };
        if t.op_kind() != Some(ggml_backend_rs_core::Op::Rope) {
            return;
        }
        let Some(layer) = node_layer(t) else {
            return;
        };
        if let Err(e) = lock(p).check_head_size(layer, t.ne(0)) {
            abort(
                file!(),
                line!(),
                &format!("{}: {e}", self.name.to_string_lossy()),
            );
        }
    }
}

/// The layer of a graph node: libllama names a layer's nodes "<name>-<layer>" ("Kcur-3").
fn node_layer(t: Tensor) -> Option<u32> {
    layer_of_name(&t.name_string()).or_else(|| {
        // Unnamed nodes (libllama of ggml 0.26 names fewer of them, e.g. `node_24`): the layer
        // of what they read, a named node (`conv_input-0`) or a cache (`cache_r_l0`), two
        // steps up at most.
        let mut near: Vec<Tensor> = t.view_src().into_iter().collect();
        for s in t.srcs() {
            near.push(s);
            near.extend(s.srcs());
            near.extend(s.view_src());
        }
        near.iter().find_map(|s| layer_of_name(&s.name_string()))
    })
}

/// The layer a tensor name carries: libllama's `<name>-<layer>` of graph nodes, or the
/// `<cache>_l<layer>` of its caches.
fn layer_of_name(name: &str) -> Option<u32> {
    let node = name.rsplit_once('-').and_then(|(_, l)| l.parse().ok());
    node.or_else(|| {
        let (_, l) = name.rsplit_once("_l")?;
        l.parse().ok()
    })
}

/// What tells one physical device from another: its `device_id` (a PCI bus id, which two
/// backends of one GPU share), else the device handle.
fn physical_key(d: &Device) -> String {
    d.device_id()
        .map_or_else(|| format!("dev:{:p}", d.as_ptr()), |id| format!("id:{id}"))
}

// --- the table of meta devices -----------------------------------------------------------

/// Append-only table of meta devices: the C device's and buffer type's addresses with the
/// device's state. Lock-free lookups.
pub(super) struct Table {
    slots: [OnceLock<Slot>; 256],
    len: AtomicUsize,
    push_lock: Mutex<()>,
}

#[derive(Clone, Copy)]
pub(super) struct Slot {
    pub(super) device: usize,
    pub(super) buft: usize,
    pub(super) meta: &'static MetaDevice,
}

impl Table {
    const fn new() -> Table {
        Table {
            slots: [const { OnceLock::new() }; 256],
            len: AtomicUsize::new(0),
            push_lock: Mutex::new(()),
        }
    }

    pub(super) fn push(&self, slot: Slot) {
        let _guard = lock(&self.push_lock);
        let n = self.len.load(Ordering::Acquire);
        crate::abi::log::ggml_assert!(
            n < self.slots.len(),
            "too many meta devices (at most {})",
            self.slots.len()
        );
        let fresh = self.slots[n].set(slot).is_ok();
        debug_assert!(fresh, "slots are filled in order under the lock");
        self.len.store(n + 1, Ordering::Release);
    }

    fn find(&self, pred: impl Fn(&Slot) -> bool) -> Option<&'static MetaDevice> {
        let n = self.len.load(Ordering::Acquire);
        self.slots[..n]
            .iter()
            .filter_map(OnceLock::get)
            .find(|s| pred(s))
            .map(|s| s.meta)
    }
}

/// Every meta device made.
pub(super) static DEVICES: Table = Table::new();

/// The meta device behind a C device address.
pub(super) fn device_at(dev: usize) -> Option<&'static MetaDevice> {
    if dev == 0 {
        return None;
    }
    DEVICES.find(|s| s.device == dev)
}

/// The meta device behind a C buffer type address.
pub(super) fn device_of_buft_at(buft: usize) -> Option<&'static MetaDevice> {
    if buft == 0 {
        return None;
    }
    DEVICES.find(|s| s.buft == buft)
}
