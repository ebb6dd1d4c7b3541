//! The edge of split inference: reads tensors into the core's plain facts
//! ([`ggml_backend_rs_core::infer`]) and asks the meta device's memo, in one trip per question.
//!
//! * [`derived`]: a tensor's split as consumers see it (transfers, plans, copies);
//! * [`derive_fresh`]: the same, recomputed, for a tensor being initialised in a meta buffer;
//! * [`check_reserve`]: every node of a graph a meta backend is given, before it has memory.
//!
//! Each collects the tensor (or graph) and whatever of its ancestry the memo does not hold
//! with the same facts, sources before consumers, and hands the list to the core's one pass.

use std::hash::Hasher;

use super::buffer::{self, MetaBuffer};
use super::device::MetaDevice;
use super::split::Split;
use crate::abi::*;
use ggml_backend_rs_core::infer::{self, Entry, InferError, InferErrorKind, Input, NodeFacts};
use ggml_backend_rs_core::op::Op;
use ggml_backend_rs_core::owned::{AddrHasher, AddrSet};
use ggml_backend_rs_core::packed::Packed;
use ggml_backend_rs_core::rules::{Derived, Layout};

pub use ggml_backend_rs_core::infer::Origin;

pub fn layout(t: Tensor) -> Layout {
    Layout {
        ne: t.ne_all(),
        nb: t.nb_all(),
        blck: t.blck_size(),
    }
}

/// How `t` packs two tensors into one, for the ops whose results do (see `packed`).
pub fn packing(t: Tensor) -> Option<Packed> {
    match t.op_kind() {
        Some(Op::GatedDeltaNet) => t.src(2).map(|v| Packed::gated_delta_net(v.ne_all())),
        _ => None,
    }
}

/// Where `t`'s split comes from: a view or a tensor without memory from its op (a view's
/// memory decides in the core), a meta buffer's weights and caches from the placement
/// policy, any other memory is copied to the meta device whole.
fn origin(t: Tensor) -> Origin {
    if t.view_src().is_some() {
        return Origin::Op;
    }
    match t.own_buffer() {
        None => Origin::Op,
        Some(b) => match buffer::of(b) {
            Some(_) if b.usage() != USAGE_COMPUTE => Origin::Placed,
            Some(_) => Origin::Op,
            None => Origin::Foreign,
        },
    }
}

const _: () = assert!(GGML_MAX_SRC == infer::MAX_SRC);

/// `t` as the core sees it.
pub fn facts(t: Tensor) -> NodeFacts {
    let origin = origin(t);
    // the placement policy reads the name: a renamed weight is asked again
    let name_hash = if origin == Origin::Placed {
        let mut name = AddrHasher::default();
        name.write(t.name_string().as_bytes());
        name.finish()
    } else {
        0
    };
    let mut srcs = [None; infer::MAX_SRC];
    for (i, s) in t.srcs_indexed() {
        if s != t {
            srcs[i] = Some(s.as_ptr() as usize);
        }
    }
    NodeFacts {
        id: t.as_ptr() as usize,
        op: crate::version::OPS.op(t.op()).map_err(|_| t.op()),
        op_params: t.op_params(),
        layout: layout(t),
        view: t.view_src().map(|b| infer::ViewOf {
            base: b.as_ptr() as usize,
            offs: t.view_offs(),
        }),
        srcs,
        packing: packing(t),
        origin,
        type_code: t.type_(),
        name_hash,
    }
}

pub fn named(t: Tensor, e: impl std::fmt::Display) -> String {
    format!(
        "meta backend: cannot split tensor '{}' ({}) across devices: {e}",
        t.name_string(),
        t.op_desc()
    )
}

/// Which tensors a walk lists again even when the memo holds them with the same facts.
#[derive(Clone, Copy, PartialEq)]
enum Fresh {
    /// None: the memo's answers stand.
    None,
    /// The walk's roots.
    Roots,
    /// Every tensor computed on the meta device (`Origin::Op`); weights and other memory
    /// keep their answers.
    Computed,
}

/// The tensors of a walk, each with its facts, in dependency order.
struct Walk {
    n: usize,
    inputs: Vec<Input>,
    /// The tensor of each input, for messages.
    tensors: Vec<Tensor>,
}

impl Walk {
    /// Lists `roots` and the part of their ancestry the memo cannot answer. `scope` says
    /// where the answers go, and so where the walk looks for answers given before.
    fn new(
        dev: &MetaDevice,
        roots: impl IntoIterator<Item = Tensor>,
        fresh: Fresh,
        scope: infer::Scope,
    ) -> Result<Walk, String> {
        let mut walk = Walk {
            n: dev.n(),
            inputs: Vec::new(),
            tensors: Vec::new(),
        };
        let mut seen = AddrSet::default();
        // Depth-first, sources before consumers, without recursion (graphs are deep). A tensor
        // is pushed once to be looked at, and again, with its facts, to be listed once its
        // sources are.
        let mut stack: Vec<(Tensor, bool, Option<NodeFacts>)> = Vec::new();
        for root in roots {
            stack.push((root, true, None));
            while let Some((t, is_root, expanded)) = stack.pop() {
                let id = t.as_ptr() as usize;
                if seen.contains(&id) {
                    continue;
                }
                let Some(f) = expanded else {
                    let f = facts(t);
                    let listed = match fresh {
                        Fresh::Roots => is_root,
                        Fresh::Computed => f.origin == Origin::Op,
                        Fresh::None => false,
                    };
                    if !listed && dev.splits(|m| m.answers(&f, scope)) {
                        seen.insert(id);
                        continue;
                    }
                    let sources = sources_to_walk(t, &f);
                    stack.push((t, is_root, Some(f)));
                    stack.extend(
                        sources
                            .filter(|s| !seen.contains(&(s.as_ptr() as usize)))
                            .map(|s| (s, false, None)),
                    );
                    continue;
                };
                seen.insert(id);
                let placed = placement(dev, t, &f)?;
                walk.tensors.push(t);
                walk.inputs.push(Input { facts: f, placed });
            }
        }
        Ok(walk)
    }

    /// The walk of one tensor whose sources the memo answers in `scope`; None when it does
    /// not (the common case of allocation, where sources come first, without a walk's sets).
    fn single(dev: &MetaDevice, t: Tensor, scope: infer::Scope) -> Result<Option<Walk>, String> {
        let f = facts(t);
        let known = dev.splits(|m| sources_to_walk(t, &f).all(|s| m.answers(&facts(s), scope)));
        if !known {
            return Ok(None);
        }
        let placed = placement(dev, t, &f)?;
        Ok(Some(Walk {
            n: dev.n(),
            inputs: vec![Input { facts: f, placed }],
            tensors: vec![t],
        }))
    }

    /// Runs the core's pass over the list, stores the answers in `scope` and returns `take` of
    /// the last tensor's entry.
    fn derive<R>(
        self,
        dev: &MetaDevice,
        scope: infer::Scope,
        take: impl FnOnce(Option<&Entry>) -> R,
    ) -> Result<R, String> {
        let Walk { n, inputs, tensors } = self;
        dev.splits(|m| m.derive(inputs, n, scope).map(take))
            .map_err(|e| describe(&tensors, e))
    }
}

/// The placement policy's split of a placed tensor with elements.
fn placement(dev: &MetaDevice, t: Tensor, f: &NodeFacts) -> Result<Option<Split>, String> {
    match f.origin {
        Origin::Placed if f.layout.ne.iter().product::<i64>() != 0 => {
            dev.callback_split(t).map(Some).map_err(|e| named(t, e))
        }
        _ => Ok(None),
    }
}

/// The tensors whose splits `t`'s split needs: a view's base, and the sources of a tensor the
/// meta device computes (an empty one is mirrored whatever its sources). Weights, caches and
/// other backends' memory have their splits without their sources.
fn sources_to_walk(t: Tensor, f: &NodeFacts) -> impl Iterator<Item = Tensor> {
    // views made by view ops and ggml_view_tensor (op NONE) are their memory alone
    let memory_only = f.view.is_some() && f.op.is_ok_and(|op| op.is_view() || op == Op::None);
    let computed =
        f.origin == Origin::Op && !memory_only && f.layout.ne.iter().product::<i64>() != 0;
    let srcs = t
        .srcs_by_slot()
        .map(|(_, s)| s)
        .filter(move |&s| computed && s != t);
    t.view_src().into_iter().chain(srcs)
}

/// The error of the core's pass, with the tensors' names.
fn describe(tensors: &[Tensor], e: InferError) -> String {
    let Some(&t) = tensors.iter().find(|t| t.as_ptr() as usize == e.node) else {
        return format!(
            "meta backend: cannot split a tensor across devices: {}",
            e.kind
        );
    };
    match e.kind {
        InferErrorKind::ReadsPacked { src } => {
            let name = t
                .srcs()
                .find(|s| s.as_ptr() as usize == src)
                .map_or_else(String::new, |s| s.name_string());
            named(
                t,
                format!(
                    "it reads '{name}', whose gated_delta_net result packs output and states \
                     per device, other than through a view"
                ),
            )
        }
        kind => named(t, kind),
    }
}

/// The split of `t` (in a meta buffer) as consumers see it: the memo's answer while `t`'s
/// facts are unchanged. The memo cannot see a *source* change its split under unchanged
/// facts; the allocation path therefore derives every tensor ggml allocates afresh
/// ([`derive_fresh`]), in graph order, so what compute and transfers read afterwards is current.
pub fn derived(t: Tensor) -> Result<Derived, String> {
    let Some(mb) = buffer::holding(t) else {
        return Err(named(t, "not in a meta buffer"));
    };
    let dev = mb.dev;
    let f = facts(t);
    if let Some(d) = dev.splits(|m| m.current(&f).map(|e| e.derived.clone())) {
        return Ok(d);
    }
    Walk::new(dev, [t], Fresh::None, infer::Scope::Kept)?
        .derive(dev, infer::Scope::Kept, |e| e.map(|e| e.derived.clone()))?
        .ok_or_else(|| named(t, "its split was not stored"))
}

/// Derives `t`'s split afresh (it is being initialised in `mb`) and returns the memo's entry.
/// The slices of a placed weight or cache are where its split put them: a split-state
/// callback that now answers differently for the same tensor is an error, not a move.
pub fn derive_fresh(t: Tensor, mb: &MetaBuffer) -> Result<Entry, String> {
    let dev = mb.dev;
    let id = t.as_ptr() as usize;
    let kept = infer::Scope::Kept;
    let walk = match Walk::single(dev, t, kept)? {
        Some(w) => w,
        None => Walk::new(dev, [t], Fresh::Roots, kept)?,
    };
    if let Some(new) = walk.inputs.last().and_then(|i| i.placed.clone()) {
        let old = dev.splits(|m| m.get(id).cloned());
        if let Some(old) = old {
            let f = &walk.inputs.last().expect("the root is listed").facts;
            let same_tensor =
                old.facts.type_code == f.type_code && old.facts.layout.ne == f.layout.ne;
            if same_tensor && !old.derived.split.same_as(&new) && mb.holds_placed(t) {
                return Err(named(
                    t,
                    format!(
                        "the split-state callback now answers {} for it, but its slices were \
                         placed as {}",
                        new.describe(),
                        old.derived.split.describe()
                    ),
                ));
            }
        }
    }
    walk.derive(dev, infer::Scope::Kept, |e| e.cloned())?
        .ok_or_else(|| named(t, "its split was not stored"))
}

/// Checks that every node of `nodes` (the graphs the scheduler gives one meta backend, in
/// execution order) can be split over `dev`'s devices, before any compute tensor has memory:
/// the scheduler calls this when it reserves a graph, i.e. when libllama creates a context,
/// so that a model the meta device cannot run fails there and not in the first decode.
/// Compute tensors, graph inputs, the scheduler's copies and views are derived again here (a
/// graph reserved again may have moved them); weights and caches keep their placed splits.
pub fn check_reserve(
    dev: &MetaDevice,
    nodes: impl IntoIterator<Item = Tensor>,
) -> Result<(), String> {
    let scope = infer::Scope::Reserve;
    Walk::new(dev, nodes, Fresh::Computed, scope)?.derive(dev, scope, |_| ())
}

/// The split of `s`, which `t` reads, or why it has none; for messages.
pub fn split_of(s: Tensor) -> Result<Split, String> {
    derived(s).map(|d| d.split)
}
