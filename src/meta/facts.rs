//! The edge of split inference: reads tensors into the core's plain facts
//! ([`ggml_backend_rs_core::infer`]) and asks the meta device's memo, in one trip per question.
//!
//! * [`derived`]: a tensor's split as consumers see it (transfers, plans, copies);
//! * [`derive_fresh`]: the same, derived again, for a tensor being initialised in a meta buffer;
//! * [`check_reserve`]: every node of a graph a meta backend is given, before it has memory.
//!
//! Each lists the tensor (or graph) and whatever of its ancestry the memo does not answer with
//! the same facts, sources before consumers, and hands the list to the core's one pass.

use std::hash::Hasher;
use std::ptr;

use super::buffer;
use super::device::MetaDevice;
use super::split::Split;
use crate::abi::*;
use ggml_backend_rs_core::infer::{self, Derivation, InferError, InferErrorKind, Input, NodeFacts};
use ggml_backend_rs_core::op::Op;
use ggml_backend_rs_core::owned::{AddrHasher, AddrSet};
use ggml_backend_rs_core::packed::Packed;
use ggml_backend_rs_core::rules::{Derived, Layout};

use infer::{Origin, Placement};

const _: () = assert!(GGML_MAX_SRC == infer::MAX_SRC);

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

/// Where `t`'s memory is (a view: where its own facts say; the memory it views decides).
/// Only leaves are placed: an op's result in a static meta buffer (a program that allocates
/// results with their sources, as ggml's test-backend-ops does) is what its op yields, laid out
/// as that when it is placed.
fn origin(t: Tensor) -> Origin {
    if t.view_src().is_some() {
        return Origin::Compute;
    }
    match t.own_buffer() {
        None => Origin::Compute,
        Some(b) if !buffer::is_meta(b) => Origin::Elsewhere,
        Some(b) if b.usage() == USAGE_COMPUTE => Origin::Compute,
        Some(_) if t.op_kind() != Some(Op::None) => Origin::Compute,
        Some(_) => Origin::Placed,
    }
}

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
        op: crate::abi::facts::OPS.op(t.op()).map_err(|_| t.op()),
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

/// Which tensors a walk lists again even when the memo answers them with the same facts.
#[derive(Clone, Copy, PartialEq)]
enum Relist {
    /// None: the memo's answers stand.
    Nothing,
    /// The roots; for the rest the memo's answers stand, and else its earlier probes' answers
    /// are given to the pass (`SplitMemo::probed`).
    RootsOverProbes,
    /// The walk's roots.
    Roots,
    /// Every tensor the meta device computes (`Origin::Compute`); weights and other memory
    /// keep their answers.
    Computed,
}

/// How `dev`'s pass learns `t`'s split, and whether the walk goes on to `t`'s sources.
fn input(dev: &MetaDevice, t: Tensor, f: NodeFacts) -> Result<(Input, bool), String> {
    // another meta device's tensor (its buffer type serves this device too): that device's
    // memo and policy decide, for this pass only
    if let Some(holder) = buffer::holding(t).filter(|mb| !ptr::eq(mb.dev, dev)) {
        let derived = derived_in(holder.dev, t)?;
        return Ok((Input::Given { facts: f, derived }, false));
    }
    let empty = f.layout.ne.iter().product::<i64>() == 0;
    Ok(match f.origin {
        // copied to the meta device whole by the scheduler
        Origin::Elsewhere => {
            let derived = Derived {
                split: Split::Mirrored,
                reduce: false,
                sliced: Vec::new(),
            };
            (Input::Given { facts: f, derived }, false)
        }
        Origin::Placed => {
            // (an empty tensor is mirrored whatever the policy says)
            let placement = if empty {
                Placement::New(Split::Mirrored)
            } else {
                let fixed = buffer::holding(t).and_then(|mb| mb.placement(t));
                dev.placement(t, fixed).map_err(|e| named(t, e))?
            };
            (
                Input::Placed {
                    facts: f,
                    placement,
                },
                false,
            )
        }
        Origin::Compute => {
            // views made by view ops and ggml_view_tensor (op NONE) are their memory alone; an
            // empty result is mirrored whatever its sources
            let memory_only =
                f.view.is_some() && f.op.is_ok_and(|op| op.is_view() || op == Op::None);
            (Input::Derive(f), !memory_only && !empty)
        }
    })
}

/// The tensors a walk visits after `t`: its view source, and its sources when `with_sources`.
fn next(t: Tensor, with_sources: bool) -> impl Iterator<Item = Tensor> {
    let srcs = t
        .srcs_by_slot()
        .map(|(_, s)| s)
        .filter(move |&s| with_sources && s != t);
    // pushed in reverse, so that they are listed in slot order, the view source first
    let mut all: Vec<Tensor> = t.view_src().into_iter().chain(srcs).collect();
    all.reverse();
    all.into_iter()
}

/// The tensors of a walk, each with how its split is known, in dependency order.
struct Walk {
    inputs: Vec<Input>,
    /// The tensor of each input, for messages.
    tensors: Vec<Tensor>,
}

impl Walk {
    /// Lists `roots` and the part of their ancestry `dev`'s memo does not answer.
    fn new(
        dev: &MetaDevice,
        roots: impl IntoIterator<Item = Tensor>,
        relist: Relist,
    ) -> Result<Walk, String> {
        let mut walk = Walk {
            inputs: Vec::new(),
            tensors: Vec::new(),
        };
        let mut seen = AddrSet::default();
        // Depth-first, sources before consumers, without recursion (graphs are deep). A tensor
        // is pushed once to be looked at, and again, with its input, to be listed once its
        // sources are.
        let mut stack: Vec<(Tensor, bool, Option<Input>)> = Vec::new();
        for root in roots {
            stack.push((root, true, None));
            while let Some((t, is_root, looked_at)) = stack.pop() {
                let id = t.as_ptr() as usize;
                if seen.contains(&id) {
                    continue;
                }
                let Some(input) = looked_at else {
                    let f = facts(t);
                    let listed = match relist {
                        Relist::Roots | Relist::RootsOverProbes => is_root,
                        Relist::Computed => f.origin == Origin::Compute,
                        Relist::Nothing => false,
                    };
                    if !listed && dev.splits(|m| m.current(&f).is_some()) {
                        seen.insert(id);
                        continue;
                    }
                    // an earlier probe's answer, handed to the pass as it is
                    let probed = (relist == Relist::RootsOverProbes && !listed)
                        .then(|| dev.splits(|m| m.probed(&f).map(|e| e.derived.clone())))
                        .flatten();
                    if let Some(derived) = probed {
                        stack.push((t, is_root, Some(Input::Given { facts: f, derived })));
                        continue;
                    }
                    let (input, with_sources) = input(dev, t, f)?;
                    stack.push((t, is_root, Some(input)));
                    stack.extend(
                        next(t, with_sources)
                            .filter(|s| !seen.contains(&(s.as_ptr() as usize)))
                            .map(|s| (s, false, None)),
                    );
                    continue;
                };
                seen.insert(id);
                walk.tensors.push(t);
                walk.inputs.push(input);
            }
        }
        Ok(walk)
    }

    /// The walk of one tensor whose sources `dev`'s memo answers; None when it does not (the
    /// common case of allocation, where sources come first, without a walk's sets).
    fn single(dev: &MetaDevice, t: Tensor) -> Result<Option<Walk>, String> {
        let f = facts(t);
        let (input, with_sources) = input(dev, t, f)?;
        let answered = |s: Tensor| dev.splits(|m| m.current(&facts(s)).is_some());
        if !next(t, with_sources).all(answered) {
            return Ok(None);
        }
        Ok(Some(Walk {
            inputs: vec![input],
            tensors: vec![t],
        }))
    }

    /// Derives the listed tensors in `dev`'s memo and returns the last one's derivation.
    fn derive(self, dev: &MetaDevice) -> Result<Option<Derivation>, String> {
        let Walk { inputs, tensors } = self;
        dev.splits(|m| m.derive(inputs))
            .map_err(|e| describe(&tensors, e))
    }
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
    derived_in(mb.dev, t)
}

/// [`derived`] for `t` in a buffer of `dev`.
fn derived_in(dev: &MetaDevice, t: Tensor) -> Result<Derived, String> {
    if let Some(d) = dev.splits(|m| m.current(&facts(t)).map(|e| e.derived.clone())) {
        return Ok(d);
    }
    Walk::new(dev, [t], Relist::Nothing)?
        .derive(dev)?
        .map(|e| e.derived)
        .ok_or_else(|| named(t, "its split was not stored"))
}

/// Derives `t`'s split afresh (it is being initialised in a buffer of `dev`).
pub fn derive_fresh(dev: &MetaDevice, t: Tensor) -> Result<Derivation, String> {
    let walk = match Walk::single(dev, t)? {
        Some(w) => w,
        None => Walk::new(dev, [t], Relist::Roots)?,
    };
    walk.derive(dev)?
        .ok_or_else(|| named(t, "its split was not stored"))
}

/// Checks that every node of `nodes` (the graphs the scheduler gives one meta backend, in
/// execution order) can be split over `dev`'s devices, before any compute tensor has memory:
/// the scheduler calls this when it reserves a graph, i.e. when libllama creates a context,
/// so that a model the meta device cannot run fails there and not in the first decode.
/// Compute tensors, graph inputs, the scheduler's copies and views are derived again here (a
/// graph reserved again may have moved them); weights and caches keep their placed splits.
/// The answers are not kept: the tensors get memory, and their splits, when allocated.
pub fn check_reserve(
    dev: &MetaDevice,
    nodes: impl IntoIterator<Item = Tensor>,
) -> Result<(), String> {
    let Walk { inputs, tensors } = Walk::new(dev, nodes, Relist::Computed)?;
    dev.splits(|m| m.check(inputs))
        .map_err(|e| describe(&tensors, e))
}

/// A context's tensors, checked together before they are laid out (`slices::settle`).
pub struct ContextCheck {
    /// The first tensor whose split cannot be derived over its sources', and why.
    pub failed: Option<(Tensor, String)>,
    /// The placement policy's answers for the weights being placed (not placed or settled
    /// before).
    pub answers: Vec<(Tensor, Split)>,
}

/// Derives `tensors` (a context's, in dependency order, attached to a new buffer of `dev`)
/// over their placements without keeping any answer: the weights as the policy answers (or
/// as settled), the results by their ops' rules.
pub fn check_context(dev: &MetaDevice, tensors: &[Tensor]) -> Result<ContextCheck, String> {
    let Walk { inputs, tensors } = Walk::new(dev, tensors.iter().copied(), Relist::Roots)?;
    let answers = inputs
        .iter()
        .zip(&tensors)
        .filter_map(|(input, &t)| match input {
            Input::Placed {
                placement: Placement::New(split),
                ..
            } => Some((t, split.clone())),
            _ => None,
        })
        .collect();
    let failed = dev.splits(|m| m.check(inputs)).err().map(|e| {
        let t = tensors
            .iter()
            .copied()
            .find(|t| t.as_ptr() as usize == e.node);
        let why = describe(&tensors, e);
        (t, why)
    });
    Ok(ContextCheck {
        failed: failed.and_then(|(t, why)| t.map(|t| (t, why))),
        answers,
    })
}

/// Whether `t` can be computed device by device over the splits its sources have now:
/// `supports_op`'s question. The answers are kept apart as probes (`SplitMemo::probe`), so that
/// the scheduler, which asks about every node of a graph in order, derives each once, and a
/// program that asks about its nodes in order learns about a result that reads another (a
/// weight reads its placement; a leaf without memory is mirrored, as the scheduler copies it
/// in whole); plans and transfers never read them.
pub fn check_op(dev: &MetaDevice, t: Tensor) -> Result<(), String> {
    let Walk { inputs, tensors } = Walk::new(dev, [t], Relist::RootsOverProbes)?;
    dev.splits(|m| m.probe(inputs))
        .map_err(|e| describe(&tensors, e))
}
