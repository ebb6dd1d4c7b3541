//! Split inference: the split of every tensor a meta device touches, derived in one memoised
//! pass over plain facts.
//!
//! The edge reads each tensor once into a [`NodeFacts`] (op, parameters, layout, view source,
//! sources, where its memory is) and hands the core a list in which every tensor comes after
//! the tensors it reads. [`SplitMemo::derive`] walks that list once: a tensor's split follows
//! from its facts and from the splits of its sources, which are either earlier in the list or
//! already in the memo. The allocation path, the reserve check and the plan builder all read
//! and fill the same memo, so a tensor's split is decided in exactly one place.
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

/// Where a tensor's split comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// Computed by the meta device (or not allocated yet): its op's rule decides; a view
    /// takes the split of the memory it views.
    Op,
    /// Weights and caches in a meta buffer: the split the placement policy gave it, which
    /// the edge passes along with the facts ([`Input::placed`]).
    Placed,
    /// Memory of another backend: the scheduler copies it whole to the meta device.
    Foreign,
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

/// One item of a pass: a tensor's facts, and for [`Origin::Placed`] the policy's split.
#[derive(Clone, Debug)]
pub struct Input {
    pub facts: NodeFacts,
    pub placed: Option<Split>,
}

/// A memo entry: the facts a split was derived from, and the answer.
#[derive(Clone, Debug)]
pub struct Entry {
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
    /// The view mapping of a packed result refused.
    Packed(String),
    UnknownOp(i32),
    /// A source is neither earlier in the pass nor in the memo: the edge's list is not in
    /// dependency order.
    MissingSource(Id),
    /// A placed tensor came without the policy's split.
    MissingPlacement,
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
}

impl fmt::Display for InferErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InferErrorKind::Rule(e) => e.fmt(f),
            InferErrorKind::Packed(e) => f.write_str(e),
            InferErrorKind::UnknownOp(op) => UnknownOp(*op).fmt(f),
            InferErrorKind::MissingSource(_) => {
                f.write_str("a source's split is unknown (internal ordering error)")
            }
            InferErrorKind::MissingPlacement => {
                f.write_str("its placement policy gave no split (internal error)")
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
        }
    }
}

/// Which store a pass writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Tensors that live in meta buffers: kept until the edge forgets them.
    Kept,
    /// A reserve's graph, whose compute tensors have no memory yet: kept beside the main store
    /// until the next reserve ([`SplitMemo::begin_reserve`]), so a reserve never replaces what
    /// allocated tensors and the plans built on them rely on.
    Reserve,
}

/// The splits of one meta device's tensors.
#[derive(Debug, Default)]
pub struct SplitMemo {
    kept: AddrMap<Entry>,
    reserve: AddrMap<Entry>,
    generation: u64,
}

impl SplitMemo {
    pub fn new() -> SplitMemo {
        SplitMemo::default()
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

    /// The kept entry of `id`, whatever its facts.
    pub fn get(&self, id: Id) -> Option<&Entry> {
        self.kept.get(&id)
    }

    /// The kept split of a tensor whose facts are `facts`, if it was derived from the same.
    pub fn current(&self, facts: &NodeFacts) -> Option<&Entry> {
        self.kept.get(&facts.id).filter(|e| e.facts == *facts)
    }

    /// Whether a pass in `scope` would find `facts`' tensor answered: stored there (a reserve
    /// also reads the kept store) from the same facts.
    pub fn answers(&self, facts: &NodeFacts, scope: Scope) -> bool {
        self.lookup(facts.id, scope)
            .is_some_and(|e| e.facts == *facts)
    }

    /// Drops the kept entry of `id` (the tensor left its buffer).
    pub fn forget(&mut self, id: Id) {
        if self.kept.remove(&id).is_some() {
            self.touch();
        }
    }

    /// Starts a reserve: the previous reserve's entries go.
    pub fn begin_reserve(&mut self) {
        self.reserve.clear();
    }

    /// The split as a reserve sees it: its own entries first, then the kept ones.
    fn lookup(&self, id: Id, scope: Scope) -> Option<&Entry> {
        match scope {
            Scope::Reserve => self.reserve.get(&id).or_else(|| self.kept.get(&id)),
            Scope::Kept => self.kept.get(&id),
        }
    }

    /// Derives every tensor of `inputs` in order and stores the answers in `scope`. Each
    /// tensor's sources (and a view's base) must be earlier in `inputs` or in the memo.
    /// Returns the last tensor's entry. Stops at the first tensor that cannot be split; the
    /// ones before it are stored.
    pub fn derive(
        &mut self,
        inputs: Vec<Input>,
        n: usize,
        scope: Scope,
    ) -> Result<Option<&Entry>, InferError> {
        let mut last = None;
        for input in inputs {
            let id = input.facts.id;
            let fail = |kind| InferError { node: id, kind };
            let (derived, view_layouts) = self.derive_one(&input, n, scope).map_err(fail)?;
            let entry = Entry {
                facts: input.facts,
                derived,
                view_layouts,
            };
            match scope {
                Scope::Kept => {
                    if self
                        .kept
                        .get(&id)
                        .is_none_or(|old| affects_plans(old, &entry))
                    {
                        self.generation += 1;
                    }
                    self.kept.insert(id, entry);
                }
                Scope::Reserve => {
                    self.reserve.insert(id, entry);
                }
            }
            last = Some(id);
        }
        Ok(last.and_then(|id| self.lookup(id, scope)))
    }

    fn derive_one(
        &self,
        input: &Input,
        n: usize,
        scope: Scope,
    ) -> Result<(Derived, Option<Vec<DeviceLayout>>), InferErrorKind> {
        let f = &input.facts;
        let known = |id: Id| {
            self.lookup(id, scope)
                .ok_or(InferErrorKind::MissingSource(id))
        };
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
            let d = self.op_rule(f, op, n, scope)?;
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
        let d = match f.origin {
            Origin::Foreign => plain(Split::Mirrored),
            Origin::Placed => plain(
                input
                    .placed
                    .clone()
                    .ok_or(InferErrorKind::MissingPlacement)?,
            ),
            Origin::Op => {
                let op = f.op.map_err(InferErrorKind::UnknownOp)?;
                self.op_rule(f, op, n, scope)?
            }
        };
        Ok((d, None))
    }

    /// `f`'s op rule over its sources' splits.
    fn op_rule(
        &self,
        f: &NodeFacts,
        op: Op,
        n: usize,
        scope: Scope,
    ) -> Result<Derived, InferErrorKind> {
        let mut srcs: Vec<Option<Src>> = vec![None; MAX_SRC];
        for (slot, id) in f.srcs.iter().enumerate() {
            let Some(id) = *id else { continue };
            let s = self
                .lookup(id, scope)
                .ok_or(InferErrorKind::MissingSource(id))?;
            let split = if s.facts.nelements() == 0 {
                Split::Mirrored
            } else {
                s.derived.split.clone()
            };
            // a packed result's device slices are not its split's slices: only views, which
            // map each part through its own layout, may read it
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
}

/// Whether replacing `old` by `new` changes what a graph plan was built from: the graph's
/// structure (op, sources, view source) or the split. Shapes and offsets are read from the
/// tensors when a plan runs.
fn affects_plans(old: &Entry, new: &Entry) -> bool {
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
        Some(p) => packed::map_view(p, &base.layout, split, &v.layout, offs, n)
            .map_err(|e| InferErrorKind::Packed(e.to_string())),
        None => rules::map_view(&base.layout, split, &v.layout, offs, n)
            .map_err(|e| InferErrorKind::Rule(Box::new(e))),
    }
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

    fn input(facts: NodeFacts) -> Input {
        Input {
            facts,
            placed: None,
        }
    }

    fn placed(facts: NodeFacts, split: Split) -> Input {
        Input {
            facts,
            placed: Some(split),
        }
    }

    fn halves(axis: usize, total: i64) -> Split {
        Split::dim(axis, vec![total / 2, total / 2])
    }

    /// A column-parallel then row-parallel pair of matmuls (attention's Q and output
    /// projections): the first result is split by rows, the second holds partial sums.
    fn two_matmuls() -> Vec<Input> {
        let w1 = facts(1, Op::None, [64, 96, 1, 1], &[], Origin::Placed);
        let x = facts(2, Op::None, [64, 5, 1, 1], &[], Origin::Op);
        let y = facts(3, Op::MulMat, [96, 5, 1, 1], &[1, 2], Origin::Op);
        let w2 = facts(4, Op::None, [96, 64, 1, 1], &[], Origin::Placed);
        let z = facts(5, Op::MulMat, [64, 5, 1, 1], &[4, 3], Origin::Op);
        vec![
            placed(w1, halves(1, 96)),
            input(x),
            input(y),
            placed(w2, halves(0, 96)),
            input(z),
        ]
    }

    #[test]
    fn one_pass_derives_a_chain_in_order() {
        let mut memo = SplitMemo::new();
        memo.derive(two_matmuls(), 2, Scope::Kept).unwrap();
        let y = &memo.get(3).unwrap().derived;
        assert!(y.split.same_as(&halves(0, 96)));
        assert!(!y.reduce);
        let z = &memo.get(5).unwrap().derived;
        assert!(
            z.reduce,
            "a contraction over split columns yields partial sums"
        );
    }

    #[test]
    fn sources_must_come_first() {
        let mut memo = SplitMemo::new();
        let mut inputs = two_matmuls();
        let y = inputs.remove(2);
        inputs.push(y);
        let e = memo.derive(inputs, 2, Scope::Kept).unwrap_err();
        assert_eq!(e.node, 5);
        assert_eq!(e.kind, InferErrorKind::MissingSource(3));
    }

    #[test]
    fn entries_answer_while_their_facts_are_unchanged() {
        let mut memo = SplitMemo::new();
        memo.derive(two_matmuls(), 2, Scope::Kept).unwrap();
        let mut f = memo.get(3).unwrap().facts.clone();
        assert!(memo.current(&f).is_some());
        f.op_params[0] = 1;
        assert!(memo.current(&f).is_none());
    }

    #[test]
    fn generation_moves_only_with_what_plans_depend_on() {
        let mut memo = SplitMemo::new();
        memo.derive(two_matmuls(), 2, Scope::Kept).unwrap();
        let g = memo.generation();
        // the same graph again: nothing changed
        memo.derive(two_matmuls(), 2, Scope::Kept).unwrap();
        assert_eq!(memo.generation(), g);
        // another batch size: shapes are read when a plan runs
        let mut inputs = two_matmuls();
        for i in &mut inputs[1..] {
            if i.facts.layout.ne[1] == 5 {
                i.facts.layout.ne[1] = 7;
            }
        }
        memo.derive(inputs, 2, Scope::Kept).unwrap();
        assert_eq!(memo.generation(), g);
        // another split of the first weight
        let mut inputs = two_matmuls();
        inputs[0].placed = Some(Split::Mirrored);
        memo.derive(inputs, 2, Scope::Kept).unwrap();
        assert!(memo.generation() > g);
    }

    #[test]
    fn a_reserve_never_replaces_kept_entries() {
        let mut memo = SplitMemo::new();
        memo.derive(two_matmuls(), 2, Scope::Kept).unwrap();
        let g = memo.generation();
        memo.begin_reserve();
        // the reserve sees the kept weights and derives its own compute tensors
        let mut inputs = two_matmuls().split_off(1);
        inputs.remove(2); // w2 is kept already
        inputs[0].facts.layout.ne[1] = 9;
        inputs[1].facts.layout.ne[1] = 9;
        inputs[2].facts.layout.ne[1] = 9;
        memo.derive(inputs, 2, Scope::Reserve).unwrap();
        assert_eq!(memo.generation(), g);
        assert_eq!(memo.get(5).unwrap().facts.layout.ne[1], 5);
    }

    #[test]
    fn foreign_memory_is_mirrored_and_empty_tensors_too() {
        let mut memo = SplitMemo::new();
        let a = facts(1, Op::Add, [8, 2, 1, 1], &[], Origin::Foreign);
        let e = facts(2, Op::MulMat, [0, 2, 1, 1], &[], Origin::Op);
        memo.derive(vec![input(a), input(e)], 2, Scope::Kept)
            .unwrap();
        assert_eq!(memo.get(1).unwrap().derived.split, Split::Mirrored);
        assert_eq!(memo.get(2).unwrap().derived.split, Split::Mirrored);
    }

    #[test]
    fn views_take_their_memorys_split_and_writes_must_match_it() {
        let mut memo = SplitMemo::new();
        let cache = facts(1, Op::None, [64, 8, 1, 1], &[], Origin::Placed);
        // a view of the first four cache rows, split like the cache
        let mut v = facts(2, Op::View, [64, 4, 1, 1], &[1], Origin::Op);
        v.layout.nb = cache.layout.nb;
        v.view = Some(ViewOf { base: 1, offs: 0 });
        // a copy of mirrored values into that view: yields mirrored into split memory
        let x = facts(3, Op::None, [64, 4, 1, 1], &[], Origin::Op);
        let mut cpy = facts(4, Op::Cpy, [64, 4, 1, 1], &[3, 2], Origin::Op);
        cpy.layout.nb = cache.layout.nb;
        cpy.view = Some(ViewOf { base: 2, offs: 0 });
        let split = halves(0, 64);
        memo.derive(
            vec![placed(cache, split.clone()), input(v), input(x)],
            2,
            Scope::Kept,
        )
        .unwrap();
        assert!(memo.get(2).unwrap().derived.split.same_as(&split));
        assert_eq!(memo.get(2).unwrap().view_layouts.as_ref().unwrap().len(), 2);
        let e = memo.derive(vec![input(cpy)], 2, Scope::Kept).unwrap_err();
        assert_eq!(e.node, 4);
        assert!(
            matches!(e.kind, InferErrorKind::WritesIntoView { .. }),
            "{e:?}"
        );
    }

    #[test]
    fn unknown_ops_are_named() {
        let mut memo = SplitMemo::new();
        let mut f = facts(1, Op::Add, [8, 2, 1, 1], &[], Origin::Op);
        f.op = Err(999);
        let e = memo.derive(vec![input(f)], 2, Scope::Kept).unwrap_err();
        assert_eq!(e.kind, InferErrorKind::UnknownOp(999));
    }
}
