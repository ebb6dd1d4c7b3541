//! Split inference: the split of every tensor a meta device touches, derived in one memoised
//! pass over plain facts.
//!
//! The edge reads each tensor once into [`NodeFacts`] (op, parameters, layout, view source,
//! sources, where its memory is) and hands the core a list in which every tensor comes after
//! the tensors it reads. [`SplitMemo::derive`] walks that list once: a tensor's split follows
//! from its facts and from the splits of its sources, which are earlier in the list or already
//! in the memo. The allocation path, the plan builder and transfers read and fill the same
//! memo (one per meta device); a reserve's check ([`SplitMemo::check`]) reads it and keeps its
//! own answers to itself, so a tensor's split is decided in exactly one place.
//!
//! The memo keeps each tensor's facts beside its split: an entry answers only while the
//! tensor's facts are unchanged ([`SplitMemo::current`]). Changes that graph plans depend on
//! (the graph's structure, a split, a reduction) advance the memo's [`generation`], which
//! plans record when they are built.
//!
//! [`generation`]: SplitMemo::generation

use std::fmt;

use crate::op::{Op, UnknownOp};
use crate::owned::AddrMap;
use crate::packed::{self, Packed};
use crate::rules::{self, Derived, DeviceLayout, Layout, Src};
use crate::split::Split;

/// A tensor's identity: the edge's choice (the address of its C header). Only compared.
pub type Id = usize;

/// Source slots of a tensor: ggml's `GGML_MAX_SRC` (10 in every supported version; the edge
/// checks it at compile time).
pub const MAX_SRC: usize = 10;

/// Where a tensor's memory is. Part of the facts, so that a tensor whose memory changed kind
/// at the same address is derived again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// A compute buffer of the meta device, or no memory yet.
    Compute,
    /// Weights and caches in a meta buffer: the placement policy decides their split.
    Placed,
    /// Memory outside the meta device's buffers (another backend's, another meta device's).
    Elsewhere,
}

/// What the core needs to know of a view: which tensor's memory, and where in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ViewOf {
    pub base: Id,
    pub offs: usize,
}

/// One tensor, as plain data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeFacts {
    pub id: Id,
    /// The op; `Err` carries a value the version's op table does not define.
    pub op: Result<Op, i32>,
    pub op_params: [i32; 16],
    pub layout: Layout,
    pub view: Option<ViewOf>,
    /// The sources by slot; a tensor that reads itself is left out.
    pub srcs: [Option<Id>; MAX_SRC],
    /// How the result packs two tensors into one (see [`packed`]).
    pub packing: Option<Packed>,
    pub origin: Origin,
    /// The element type's code and a hash of the name: the placement policy reads both, so
    /// a tensor whose type or name changed is asked again.
    pub type_code: i32,
    pub name_hash: u64,
}

impl NodeFacts {
    fn nelements(&self) -> i64 {
        self.layout.ne.iter().product()
    }
}

/// One item of a pass: a tensor's facts and how its split is known.
#[derive(Clone, Debug)]
pub enum Input {
    /// From its facts: its op's rule over its sources, or for a view the memory it views.
    Derive(NodeFacts),
    /// A weight or cache (a leaf in a meta buffer that is not a compute buffer): its split is
    /// the one its placement fixed.
    Placed {
        facts: NodeFacts,
        placement: Placement,
    },
    /// Decided outside this memo (another meta device's memo; mirrored for another backend's
    /// memory): used by this pass, not kept.
    Given { facts: NodeFacts, derived: Derived },
}

impl Input {
    pub fn facts(&self) -> &NodeFacts {
        match self {
            Input::Derive(f) | Input::Placed { facts: f, .. } | Input::Given { facts: f, .. } => f,
        }
    }
}

/// How a weight's or cache's split is known. A split is decided once, when the tensor is placed
/// in a meta buffer; every later question reads that decision.
#[derive(Clone, Debug)]
pub enum Placement {
    /// Being placed now: the placement policy's answer, which placing fixes.
    New(Split),
    /// Placed as `placed` says. `asked`: the policy's answer now, where the policy is a caller's
    /// callback that is asked again; it must agree with the answer the tensor was placed by.
    Fixed {
        placed: Placed,
        asked: Option<Split>,
    },
}

/// A placed tensor's split, and the policy's answer it was placed by.
#[derive(Clone, Debug)]
pub struct Placed {
    /// The split its slices are laid out with.
    pub split: Split,
    /// The policy's answer: `split` itself, or a split that the results computed from the
    /// tensor in its own buffer could not be derived over, so that it was placed whole.
    pub answered: Split,
}

impl Placed {
    /// Placed as the policy answered.
    pub fn as_answered(split: Split) -> Placed {
        Placed {
            answered: split.clone(),
            split,
        }
    }

    /// Placed whole instead of as the policy answered.
    pub fn whole_instead_of(answered: Split) -> Placed {
        Placed {
            split: Split::Mirrored,
            answered,
        }
    }
}

/// What the memo knows of a tensor: the facts its split was derived from, and the answer.
#[derive(Clone, Debug)]
pub struct Derivation {
    pub facts: NodeFacts,
    pub derived: Derived,
    /// For a view: each device's layout of it in its base's slice. `None` for other
    /// tensors, and for an empty view whose mapping failed (nothing to place).
    pub view_layouts: Option<Vec<DeviceLayout>>,
}

/// Why a tensor cannot be split; `node` is the tensor the message is about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InferError {
    pub node: Id,
    pub kind: InferErrorKind,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InferErrorKind {
    /// The op's rule, or the view mapping, refused.
    Rule(Box<rules::RuleError>),
    UnknownOp(i32),
    /// A source is neither earlier in the pass nor in the memo: the edge's list is not in
    /// dependency order.
    MissingSource(Id),
    /// It reads `src`, a packed result, other than through a view.
    ReadsPacked {
        src: Id,
    },
    /// An op whose result is a view yields another split than the memory it writes (both
    /// described).
    WritesIntoView {
        yields: String,
        memory: String,
    },
    /// The placement policy now answers `now` for a tensor it answered `was` for when the
    /// tensor was placed (as `was` says, or whole: `whole`).
    PlacementChanged {
        now: String,
        was: String,
        whole: bool,
    },
}

impl fmt::Display for InferErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InferErrorKind::Rule(e) => e.fmt(f),
            InferErrorKind::UnknownOp(op) => UnknownOp(*op).fmt(f),
            InferErrorKind::MissingSource(_) => {
                f.write_str("a source's split is unknown (internal ordering error)")
            }
            // the edge names the source (it knows the names)
            InferErrorKind::ReadsPacked { .. } => f.write_str(
                "it reads a gated_delta_net result, which packs output and states per device, \
                 other than through a view",
            ),
            InferErrorKind::WritesIntoView { yields, memory } => write!(
                f,
                "the op yields {yields} but writes into a view split as {memory}"
            ),
            InferErrorKind::PlacementChanged {
                now,
                was,
                whole: false,
            } => write!(
                f,
                "the split-state callback now answers {now} for it, but its slices were placed \
                 as {was}"
            ),
            InferErrorKind::PlacementChanged {
                now,
                was,
                whole: true,
            } => write!(
                f,
                "the split-state callback now answers {now} for it, but it answered {was} when \
                 the tensor was placed (whole, as the results in its buffer could not be split \
                 over that)"
            ),
        }
    }
}

/// The splits of one meta device's tensors.
#[derive(Debug)]
pub struct SplitMemo {
    n: usize,
    kept: AddrMap<Derivation>,
    /// The answers of [`SplitMemo::probe`]: read by later probes only, and at most
    /// [`PROBED_MAX`] of them (the tensors a program asks about need never get memory here).
    probed: AddrMap<Derivation>,
    generation: u64,
}

/// How many probe answers a memo keeps before it starts afresh.
pub const PROBED_MAX: usize = 1 << 16;

/// Where a pass stores its answers: the memo's own store, or a reserve's.
enum Store<'a> {
    Kept,
    Apart(&'a mut AddrMap<Derivation>),
}

impl SplitMemo {
    /// The memo of a meta device over `n` devices.
    pub fn new(n: usize) -> SplitMemo {
        SplitMemo {
            n,
            kept: AddrMap::default(),
            probed: AddrMap::default(),
            generation: 0,
        }
    }

    /// Advances whenever something graph plans depend on changes: a split, a reduction, the
    /// graph's structure (ops, sources, views), or (through [`SplitMemo::touch`]) the
    /// per-device tensors the edge made.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Marks plans built so far as stale.
    pub fn touch(&mut self) {
        self.generation += 1;
    }

    /// The kept answer for a tensor whose facts are `facts`, if it was derived from the same.
    pub fn current(&self, facts: &NodeFacts) -> Option<&Derivation> {
        self.kept.get(&facts.id).filter(|e| e.facts == *facts)
    }

    /// An earlier probe's answer for a tensor whose facts are `facts`, if derived from the same
    /// facts. (A probe's walk hands it to the pass as [`Input::Given`]: the pass never looks
    /// the probes up by address, where an older tensor's answer could stand in.)
    pub fn probed(&self, facts: &NodeFacts) -> Option<&Derivation> {
        self.probed.get(&facts.id).filter(|e| e.facts == *facts)
    }

    /// Drops the kept answer of `id` (the tensor left its buffer).
    pub fn forget(&mut self, id: Id) {
        self.probed.remove(&id);
        if self.kept.remove(&id).is_some() {
            self.touch();
        }
    }

    /// Derives every tensor of `inputs` in order and keeps the answers (those of
    /// [`Input::Given`] only for the pass). Each tensor's sources (and a view's base) must be
    /// earlier in `inputs` or kept already. Returns the last tensor's derivation. Stops at the
    /// first tensor that cannot be split; the ones before it are kept.
    pub fn derive(&mut self, inputs: Vec<Input>) -> Result<Option<Derivation>, InferError> {
        self.pass(inputs, Store::Kept)
    }

    /// Checks that every tensor of `inputs` (a reserved graph, in dependency order) can be
    /// split, reading the kept answers but keeping none of its own: a reserve's tensors have no
    /// memory yet, and what allocated tensors and built plans rely on must not change.
    pub fn check(&mut self, inputs: Vec<Input>) -> Result<(), InferError> {
        let mut apart = AddrMap::default();
        self.pass(inputs, Store::Apart(&mut apart)).map(|_| ())
    }

    /// Checks that every tensor of `inputs` (in dependency order) can be split, as a program's
    /// question about ops it may run: the answers are kept apart, where later probes find
    /// them (a program asks about a graph's nodes in order) and nothing else reads them, so a
    /// guess made before a tensor has memory never reaches a plan.
    pub fn probe(&mut self, inputs: Vec<Input>) -> Result<(), InferError> {
        let mut answers = AddrMap::default();
        let result = self.pass(inputs, Store::Apart(&mut answers)).map(|_| ());
        if self.probed.len() + answers.len() > PROBED_MAX {
            self.probed.clear();
        }
        self.probed.extend(answers);
        result
    }

    fn pass(
        &mut self,
        inputs: Vec<Input>,
        mut store: Store,
    ) -> Result<Option<Derivation>, InferError> {
        // answers given from outside, for this pass only
        let mut given: AddrMap<Derivation> = AddrMap::default();
        let mut last = None;
        for input in inputs {
            let id = input.facts().id;
            let fail = |kind| InferError { node: id, kind };
            let lookup = |id: Id| {
                given
                    .get(&id)
                    .or_else(|| match &store {
                        Store::Apart(a) => a.get(&id),
                        Store::Kept => None,
                    })
                    .or_else(|| self.kept.get(&id))
            };
            let (derived, view_layouts, keep) = match &input {
                Input::Given { derived, .. } => (derived.clone(), None, false),
                _ => {
                    let (d, l) = self.derive_one(&input, &lookup).map_err(fail)?;
                    (d, l, true)
                }
            };
            let facts = match input {
                Input::Derive(f)
                | Input::Placed { facts: f, .. }
                | Input::Given { facts: f, .. } => f,
            };
            let entry = Derivation {
                facts,
                derived,
                view_layouts,
            };
            last = Some((id, keep));
            if matches!(store, Store::Kept) && keep {
                // a probe's answer never shadows a kept one
                self.probed.remove(&id);
            }
            match (&mut store, keep) {
                (_, false) => {
                    given.insert(id, entry);
                }
                (Store::Apart(a), true) => {
                    a.insert(id, entry);
                }
                (Store::Kept, true) => match self.kept.get_mut(&id) {
                    // the common case of a graph allocated again: nothing to replace
                    Some(old) if old.facts == entry.facts && old.derived == entry.derived => {
                        old.view_layouts = entry.view_layouts;
                    }
                    Some(old) => {
                        if affects_plans(old, &entry) {
                            self.generation += 1;
                        }
                        *old = entry;
                    }
                    None => {
                        self.generation += 1;
                        self.kept.insert(id, entry);
                    }
                },
            }
        }
        Ok(last.and_then(|(id, keep)| match (keep, &store) {
            (false, _) => given.remove(&id),
            (true, Store::Apart(a)) => a.get(&id).cloned(),
            (true, Store::Kept) => self.kept.get(&id).cloned(),
        }))
    }

    fn derive_one<'a>(
        &self,
        input: &Input,
        lookup: &impl Fn(Id) -> Option<&'a Derivation>,
    ) -> Result<(Derived, Option<Vec<DeviceLayout>>), InferErrorKind>
    where
        Self: 'a,
    {
        let n = self.n;
        let f = input.facts();
        let known = |id: Id| lookup(id).ok_or(InferErrorKind::MissingSource(id));
        if let Some(view) = f.view {
            let base = known(view.base)?;
            let mapped = map_view(&base.facts, &base.derived.split, f, n);
            if f.nelements() == 0 {
                // nothing to split; a mapping error surfaces only where the layouts are needed
                return Ok((plain(Split::Mirrored), mapped.ok().map(|(_, l)| l)));
            }
            let (memory, layouts) = mapped?;
            let op = f.op.map_err(InferErrorKind::UnknownOp)?;
            // view ops, and views made by ggml_view_tensor (op NONE), are their memory
            if op.is_view() || op == Op::None {
                return Ok((plain(memory), Some(layouts)));
            }
            // an op whose result is a view (a copy into a cache, an in-place op) must yield
            // its values where that memory already places them, as one value
            let d = op_rule(f, op, n, &known)?;
            if !d.split.same_as(&memory) || d.reduce {
                return Err(InferErrorKind::WritesIntoView {
                    yields: d.split.describe(),
                    memory: memory.describe(),
                });
            }
            return Ok((d, Some(layouts)));
        }
        if f.nelements() == 0 {
            return Ok((plain(Split::Mirrored), None));
        }
        let d = match input {
            Input::Placed { placement, .. } => match placement {
                Placement::New(split) => plain(split.clone()),
                // the slices are where the split they were placed with put them
                Placement::Fixed {
                    placed,
                    asked: Some(now),
                } if !now.same_as(&placed.answered) => {
                    return Err(InferErrorKind::PlacementChanged {
                        now: now.describe(),
                        was: placed.answered.describe(),
                        whole: !placed.split.same_as(&placed.answered),
                    })
                }
                Placement::Fixed { placed, .. } => plain(placed.split.clone()),
            },
            _ => {
                let op = f.op.map_err(InferErrorKind::UnknownOp)?;
                op_rule(f, op, n, &known)?
            }
        };
        Ok((d, None))
    }
}

/// `f`'s op rule over its sources' splits.
fn op_rule<'a>(
    f: &NodeFacts,
    op: Op,
    n: usize,
    known: &impl Fn(Id) -> Result<&'a Derivation, InferErrorKind>,
) -> Result<Derived, InferErrorKind> {
    let mut srcs: Vec<Option<Src>> = vec![None; MAX_SRC];
    for (slot, id) in f.srcs.iter().enumerate() {
        let Some(id) = *id else { continue };
        let s = known(id)?;
        let split = if s.facts.nelements() == 0 {
            Split::Mirrored
        } else {
            s.derived.split.clone()
        };
        // a packed result's device slices are not its split's slices: only views, which map
        // each part through its own layout, may read it
        if matches!(split, Split::Dim(_)) && s.facts.packing.is_some() {
            return Err(InferErrorKind::ReadsPacked { src: id });
        }
        srcs[slot] = Some(Src {
            split,
            ne: s.facts.layout.ne,
        });
    }
    rules::derive(op, &f.op_params, f.layout.ne, &srcs, n)
        .map_err(|e| InferErrorKind::Rule(Box::new(e)))
}

/// Whether replacing `old` by `new` changes what a graph plan was built from: the graph's
/// structure (op, sources, view source) or the split. Shapes and offsets are read from the
/// tensors when a plan runs.
fn affects_plans(old: &Derivation, new: &Derivation) -> bool {
    old.facts.op != new.facts.op
        || old.facts.srcs != new.facts.srcs
        || old.facts.view.map(|v| v.base) != new.facts.view.map(|v| v.base)
        || !old.derived.split.same_as(&new.derived.split)
        || old.derived.reduce != new.derived.reduce
        || old.derived.sliced != new.derived.sliced
}

fn plain(split: Split) -> Derived {
    Derived {
        split,
        reduce: false,
        sliced: Vec::new(),
    }
}

/// The split and per-device layouts of view `v` of `base`, which is split as `split`.
pub fn map_view(
    base: &NodeFacts,
    split: &Split,
    v: &NodeFacts,
    n: usize,
) -> Result<(Split, Vec<DeviceLayout>), InferErrorKind> {
    let offs = v.view.map_or(0, |w| w.offs);
    match base.packing {
        Some(p) => packed::map_view(p, &base.layout, split, &v.layout, offs, n),
        None => rules::map_view(&base.layout, split, &v.layout, offs, n),
    }
    .map_err(|e| InferErrorKind::Rule(Box::new(e)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(id: Id, op: Op, ne: [i64; 4], srcs: &[Id], origin: Origin) -> NodeFacts {
        NodeFacts {
            id,
            op: Ok(op),
            op_params: [0; 16],
            layout: Layout {
                ne,
                nb: contiguous_nb(ne),
                blck: 1,
            },
            view: None,
            srcs: std::array::from_fn(|i| srcs.get(i).copied()),
            packing: None,
            origin,
            type_code: 0,
            name_hash: 0,
        }
    }

    fn contiguous_nb(ne: [i64; 4]) -> [usize; 4] {
        let mut nb = [4usize; 4];
        for d in 1..4 {
            nb[d] = nb[d - 1] * ne[d - 1] as usize;
        }
        nb
    }

    fn derive(facts: NodeFacts) -> Input {
        Input::Derive(facts)
    }

    fn placed(facts: NodeFacts, split: Split) -> Input {
        Input::Placed {
            facts,
            placement: Placement::New(split),
        }
    }

    fn halves(axis: usize, total: i64) -> Split {
        Split::dim(axis, vec![total / 2, total / 2])
    }

    fn kept(memo: &SplitMemo, id: Id) -> &Derivation {
        memo.kept.get(&id).expect("kept")
    }

    fn facts_mut(i: &mut Input) -> &mut NodeFacts {
        match i {
            Input::Derive(f) | Input::Placed { facts: f, .. } | Input::Given { facts: f, .. } => f,
        }
    }

    /// A column-parallel then row-parallel pair of matmuls (attention's Q and output
    /// projections): the first result is split by rows, the second holds partial sums.
    fn two_matmuls() -> Vec<Input> {
        let w1 = facts(1, Op::None, [64, 96, 1, 1], &[], Origin::Placed);
        let x = facts(2, Op::None, [64, 5, 1, 1], &[], Origin::Compute);
        let y = facts(3, Op::MulMat, [96, 5, 1, 1], &[1, 2], Origin::Compute);
        let w2 = facts(4, Op::None, [96, 64, 1, 1], &[], Origin::Placed);
        let z = facts(5, Op::MulMat, [64, 5, 1, 1], &[4, 3], Origin::Compute);
        vec![
            placed(w1, halves(1, 96)),
            derive(x),
            derive(y),
            placed(w2, halves(0, 96)),
            derive(z),
        ]
    }

    #[test]
    fn one_pass_derives_a_chain_in_order() {
        let mut memo = SplitMemo::new(2);
        let last = memo.derive(two_matmuls()).unwrap().unwrap();
        assert_eq!(last.facts.id, 5);
        let y = &kept(&memo, 3).derived;
        assert!(y.split.same_as(&halves(0, 96)));
        assert!(!y.reduce);
        assert!(
            kept(&memo, 5).derived.reduce,
            "a contraction over split columns yields partial sums"
        );
    }

    #[test]
    fn sources_must_come_first() {
        let mut memo = SplitMemo::new(2);
        let mut inputs = two_matmuls();
        let y = inputs.remove(2);
        inputs.push(y);
        let e = memo.derive(inputs).unwrap_err();
        assert_eq!(e.node, 5);
        assert_eq!(e.kind, InferErrorKind::MissingSource(3));
    }

    #[test]
    fn answers_stand_while_the_facts_are_unchanged() {
        let mut memo = SplitMemo::new(2);
        memo.derive(two_matmuls()).unwrap();
        let mut f = kept(&memo, 3).facts.clone();
        assert!(memo.current(&f).is_some());
        f.op_params[0] = 1;
        assert!(memo.current(&f).is_none());
        memo.forget(3);
        assert!(!memo.kept.contains_key(&3));
    }

    #[test]
    fn generation_moves_only_with_what_plans_depend_on() {
        let mut memo = SplitMemo::new(2);
        memo.derive(two_matmuls()).unwrap();
        let g = memo.generation();
        // the same graph again: nothing changed
        memo.derive(two_matmuls()).unwrap();
        assert_eq!(memo.generation(), g);
        // another batch size: shapes are read when a plan runs
        let mut inputs = two_matmuls();
        for i in &mut inputs[1..] {
            let f = facts_mut(i);
            if f.layout.ne[1] == 5 {
                f.layout.ne[1] = 7;
            }
        }
        memo.derive(inputs).unwrap();
        assert_eq!(memo.generation(), g);
        // another split of the first weight (its slices not placed yet)
        let mut inputs = two_matmuls();
        inputs[0] = Input::Placed {
            facts: facts_mut(&mut inputs[0]).clone(),
            placement: Placement::New(Split::Mirrored),
        };
        memo.derive(inputs).unwrap();
        assert!(memo.generation() > g);
    }

    #[test]
    fn placed_slices_keep_their_split() {
        let mut memo = SplitMemo::new(2);
        memo.derive(two_matmuls()).unwrap();
        let w1 = kept(&memo, 1).facts.clone();
        let fixed = |asked| Input::Placed {
            facts: w1.clone(),
            placement: Placement::Fixed {
                placed: Placed::as_answered(halves(1, 96)),
                asked,
            },
        };
        // a callback asked again must agree with the placement
        let e = memo.derive(vec![fixed(Some(Split::Mirrored))]).unwrap_err();
        assert_eq!(e.node, 1);
        assert_eq!(
            e.kind.to_string(),
            "the split-state callback now answers MIRRORED for it, but its slices were placed \
             as AXIS_1{48,48}"
        );
        memo.derive(vec![fixed(Some(halves(1, 96)))]).unwrap();
        // a policy not asked again: the placement is the answer
        let d = memo.derive(vec![fixed(None)]).unwrap().unwrap();
        assert!(d.derived.split.same_as(&halves(1, 96)));
        // placed whole instead of as answered: the callback's answer is compared with its
        // first answer, and the slices are whole
        let whole = |asked| Input::Placed {
            facts: w1.clone(),
            placement: Placement::Fixed {
                placed: Placed::whole_instead_of(halves(1, 96)),
                asked,
            },
        };
        let d = memo
            .derive(vec![whole(Some(halves(1, 96)))])
            .unwrap()
            .unwrap();
        assert_eq!(d.derived.split, Split::Mirrored);
        let e = memo.derive(vec![whole(Some(Split::Mirrored))]).unwrap_err();
        assert!(
            e.kind.to_string().contains("answered AXIS_1{48,48} when"),
            "{}",
            e.kind
        );
    }

    #[test]
    fn probes_see_each_other_and_nothing_else_sees_them() {
        let mut memo = SplitMemo::new(2);
        let mut inputs = two_matmuls();
        let z = inputs.pop().unwrap();
        let g = memo.generation();
        memo.probe(inputs).unwrap();
        // the second matmul alone, its sources given as the first probe answered them (as the
        // edge's walk hands them over)
        let given = |id: Id| {
            let d = memo.probed.get(&id).unwrap().clone();
            Input::Given {
                facts: d.facts,
                derived: d.derived,
            }
        };
        let (w2, y) = (given(4), given(3));
        memo.probe(vec![w2, y, z]).unwrap();
        assert_eq!(memo.generation(), g, "plans are not affected");
        assert!(memo.kept.is_empty());
        let y = memo.probed.get(&3).unwrap().facts.clone();
        assert!(memo.probed(&y).is_some());
        assert!(memo.current(&y).is_none());
        let mut other = y.clone();
        other.op_params[0] = 1;
        assert!(
            memo.probed(&other).is_none(),
            "another tensor at the same address"
        );
        // a tensor derived for real (initialised) or forgotten leaves the probes
        memo.derive(two_matmuls()).unwrap();
        assert!(memo.probed.is_empty());
    }

    #[test]
    fn a_check_keeps_nothing() {
        let mut memo = SplitMemo::new(2);
        memo.derive(two_matmuls()).unwrap();
        let g = memo.generation();
        // the reserve of another batch size reads the kept weights, derives its own tensors
        let mut inputs = two_matmuls().split_off(1);
        inputs.remove(2); // w2 is kept already
        for i in &mut inputs {
            facts_mut(i).layout.ne[1] = 9;
        }
        memo.check(inputs).unwrap();
        assert_eq!(memo.generation(), g);
        assert_eq!(kept(&memo, 5).facts.layout.ne[1], 5);
        // and reports what cannot be split, naming the tensor
        let mut bad = two_matmuls();
        facts_mut(&mut bad[4]).op = Err(999);
        let e = memo.check(bad).unwrap_err();
        assert_eq!((e.node, e.kind), (5, InferErrorKind::UnknownOp(999)));
    }

    #[test]
    fn given_answers_serve_one_pass() {
        let mut memo = SplitMemo::new(2);
        // another meta device's weight, split by rows
        let w = facts(1, Op::None, [64, 96, 1, 1], &[], Origin::Elsewhere);
        let x = facts(2, Op::None, [64, 5, 1, 1], &[], Origin::Compute);
        let y = facts(3, Op::MulMat, [96, 5, 1, 1], &[1, 2], Origin::Compute);
        let given = Input::Given {
            facts: w,
            derived: plain(halves(1, 96)),
        };
        memo.derive(vec![given, derive(x), derive(y)]).unwrap();
        assert!(kept(&memo, 3).derived.split.same_as(&halves(0, 96)));
        assert!(!memo.kept.contains_key(&1), "not kept");
    }

    #[test]
    fn empty_tensors_are_mirrored() {
        let mut memo = SplitMemo::new(2);
        let e = facts(2, Op::MulMat, [0, 2, 1, 1], &[], Origin::Compute);
        memo.derive(vec![derive(e)]).unwrap();
        assert_eq!(kept(&memo, 2).derived.split, Split::Mirrored);
    }

    #[test]
    fn views_take_their_memorys_split_and_writes_must_match_it() {
        let mut memo = SplitMemo::new(2);
        let cache = facts(1, Op::None, [64, 8, 1, 1], &[], Origin::Placed);
        // a view of the first four cache rows, split like the cache
        let mut v = facts(2, Op::View, [64, 4, 1, 1], &[1], Origin::Compute);
        v.layout.nb = cache.layout.nb;
        v.view = Some(ViewOf { base: 1, offs: 0 });
        // a copy of mirrored values into that view: yields mirrored into split memory
        let x = facts(3, Op::None, [64, 4, 1, 1], &[], Origin::Compute);
        let mut cpy = facts(4, Op::Cpy, [64, 4, 1, 1], &[3, 2], Origin::Compute);
        cpy.layout.nb = cache.layout.nb;
        cpy.view = Some(ViewOf { base: 2, offs: 0 });
        let split = halves(0, 64);
        memo.derive(vec![placed(cache, split.clone()), derive(v), derive(x)])
            .unwrap();
        assert!(kept(&memo, 2).derived.split.same_as(&split));
        assert_eq!(kept(&memo, 2).view_layouts.as_ref().unwrap().len(), 2);
        let e = memo.derive(vec![derive(cpy)]).unwrap_err();
        assert_eq!(e.node, 4);
        assert!(
            matches!(e.kind, InferErrorKind::WritesIntoView { .. }),
            "{e:?}"
        );
    }
}
