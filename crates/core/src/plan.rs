//! The decisions of the meta backend's graph plan, over node indices: where the MoE layers'
//! linear tail behind a reduced matmul ends (the AllReduce goes after it, on the smallest
//! tensor), how the node list is cut into sub-graphs, and where a partial sum would be
//! combined with full values (an error: it would be added once per device).
//!
//! The root crate's `meta::backend` implements [`Nodes`] over ggml's tensors and builds the
//! per-device graphs from these answers.

use std::fmt;

use crate::op::Op;
use crate::split::Split;

/// What the plan needs to know about the nodes of a graph.
pub trait Nodes {
    /// A node's identity.
    type Node: Copy + Eq;
    /// Why a node's split is not known (the root crate's message).
    type Error;

    fn op(&self, n: Self::Node) -> Option<Op>;
    /// Source `slot` of `n`, if present.
    fn src(&self, n: Self::Node, slot: usize) -> Option<Self::Node>;
    /// The present sources of `n`.
    fn srcs(&self, n: Self::Node) -> impl Iterator<Item = Self::Node> + '_;
    /// How often `n` is used as a source in the whole graph.
    fn uses(&self, n: Self::Node) -> i32;
    /// `n`'s split as consumers see it; `None` when `n` is not in a meta buffer.
    fn split(&self, n: Self::Node) -> Result<Option<Split>, Self::Error>;
    /// `n` holds per-device partial sums right after it is computed (a reduced matmul).
    fn reduces(&self, n: Self::Node) -> Result<bool, Self::Error>;
    fn ne(&self, n: Self::Node, dim: usize) -> i64;
    fn nb(&self, n: Self::Node, dim: usize) -> usize;
    fn view_offs(&self, n: Self::Node) -> usize;
}

/// Indices of the nodes after `all[i]` (a reduced MoE matmul) that are linear in it and used
/// only along the chain: ADD_ID with a partial bias, MUL by mirrored router weights, then the
/// sum of the per-expert views (one VIEW per selected expert and the ADDs chaining them).
/// Empty when `all[i]` is not a MUL_MAT_ID.
pub fn moe_tail<N: Nodes>(g: &N, all: &[N::Node], i: usize) -> Vec<usize> {
    let mut tail = Vec::new();
    let mut cur = all[i];
    let mut k = i + 1;
    let once = |t: N::Node| g.uses(t) == 1;
    let split_of = |t: N::Node| g.split(t).ok().flatten();
    if g.op(cur) != Some(Op::MulMatId) {
        return tail;
    }
    if let Some(&t) = all.get(k) {
        if g.op(t) == Some(Op::AddId)
            && g.src(t, 0) == Some(cur)
            && once(cur)
            && g.src(t, 1).and_then(split_of) == Some(Split::Partial)
        {
            tail.push(k);
            cur = t;
            k += 1;
        }
    }
    if let Some(&t) = all.get(k) {
        if g.op(t) == Some(Op::Mul)
            && g.src(t, 0) == Some(cur)
            && once(cur)
            && g.src(t, 1).and_then(split_of) == Some(Split::Mirrored)
        {
            tail.push(k);
            cur = t;
            k += 1;
        }
    }
    // n_used views of `cur`, one per selected expert, then n_used - 1 adds chaining them.
    let n_used = g.ne(cur, 1).max(0) as usize;
    if n_used < 2 || g.uses(cur).max(0) as usize != n_used || k + 2 * n_used - 1 > all.len() {
        return tail;
    }
    let views = &all[k..k + n_used];
    let views_ok = views.iter().enumerate().all(|(e, &v)| {
        g.op(v) == Some(Op::View)
            && g.src(v, 0) == Some(cur)
            && g.view_offs(v) == e * g.nb(cur, 1)
            && g.ne(v, 0) == g.ne(cur, 0)
            && once(v)
    });
    if !views_ok {
        return tail;
    }
    let adds = &all[k + n_used..k + 2 * n_used - 1];
    let mut acc = views[0];
    for (e, &a) in adds.iter().enumerate() {
        let ok = g.op(a) == Some(Op::Add)
            && g.src(a, 0) == Some(acc)
            && g.src(a, 1) == Some(views[e + 1])
            && (e + 1 == adds.len() || once(a));
        if !ok {
            return tail;
        }
        acc = a;
    }
    tail.extend(k..k + 2 * n_used - 1);
    tail
}

/// A node that would combine a partial sum with full values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PartialConsumer<T> {
    pub node: T,
    pub partial: T,
}

/// Checks that partial sums are combined only inside a pending tail: from a reduced matmul
/// up to its AllReduce (`reduce_at[k]`: node `kept[k]` ends with one), where partial operands
/// (e.g. a partial bias) are summed with the rest. Elsewhere a partial operand would be added
/// once per device.
pub fn check_partial_consumers<N: Nodes>(
    g: &N,
    kept: &[N::Node],
    reduce_at: &[bool],
) -> Result<Result<(), PartialConsumer<N::Node>>, N::Error> {
    let mut pending = false;
    for (k, &t) in kept.iter().enumerate() {
        if g.reduces(t)? {
            pending = true;
        }
        if !pending && g.split(t)? != Some(Split::Partial) {
            for s in g.srcs(t) {
                if g.split(s)? == Some(Split::Partial) {
                    return Ok(Err(PartialConsumer {
                        node: t,
                        partial: s,
                    }));
                }
            }
        }
        if reduce_at[k] {
            pending = false;
        }
    }
    Ok(Ok(()))
}

/// One sub-graph of the plan: nodes `start..end` of the kept list; `reduce`: it ends with an
/// AllReduce of its last node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bound {
    pub start: usize,
    pub end: usize,
    pub reduce: bool,
}

impl fmt::Display for Bound {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let r = if self.reduce { " + AllReduce" } else { "" };
        write!(f, "{}..{}{r}", self.start, self.end)
    }
}

/// Cuts `n` kept nodes into sub-graphs: after every node that ends with an AllReduce
/// (`reduce_at`), and before every node that some device does not run (`zeroed`: its output
/// is zeroed there instead, which must come after whatever earlier nodes wrote, so it starts
/// a sub-graph of its own). The sub-graphs cover `0..n` in order, none empty.
pub fn sub_graphs(reduce_at: &[bool], zeroed: &[bool]) -> Vec<Bound> {
    let n = reduce_at.len();
    let mut bounds = Vec::new();
    let mut start = 0;
    for k in 0..n {
        if zeroed[k] && k > start {
            bounds.push(Bound {
                start,
                end: k,
                reduce: false,
            });
            start = k;
        }
        if reduce_at[k] || k + 1 == n {
            bounds.push(Bound {
                start,
                end: k + 1,
                reduce: reduce_at[k],
            });
            start = k + 1;
        }
    }
    bounds
}

/// Work an AllReduce can do besides the sum, taken from the nodes right after its cut (the
/// first nodes of the next sub-graph), which then leave the per-device graphs: the residual
/// add, and the RMS norm with its weight behind it. Indices are into the kept node list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fusion {
    /// `kept[add]` adds the reduced node and a mirrored tensor of the same shape.
    pub add: usize,
    /// The source slot (0 or 1) of the mirrored operand (the residual) in the add.
    pub residual_slot: usize,
    /// `kept[norm]` is `rms_norm(kept[add])` (used only by the next node) and `kept[norm + 1]`
    /// multiplies it by a mirrored weight of one row.
    pub norm: Option<usize>,
    /// The reduced node is read by other nodes too, so its sum is stored as well.
    pub keeps_sum: bool,
}

impl Fusion {
    /// The kept nodes the AllReduce computes instead of the sub-graph.
    pub fn nodes(&self) -> std::ops::Range<usize> {
        self.add..self.norm.map_or(self.add + 1, |k| k + 2)
    }
}

/// What the AllReduce after `kept[cut]` can take over from the sub-graph `kept[cut + 1..end]`
/// behind it (see [`Fusion`]). Only its first nodes qualify: memory the allocator gave them may
/// have belonged to tensors that nodes before them in the same sub-graph still read. Types and
/// memory layout (contiguous f32 everywhere) are the caller's to check.
pub fn fusion<N: Nodes>(g: &N, kept: &[N::Node], cut: usize, end: usize) -> Option<Fusion> {
    let p = *kept.get(cut)?;
    let add = cut + 1;
    let a = *kept.get(add).filter(|_| add < end)?;
    let same_shape = |x: N::Node, y: N::Node| (0..4).all(|d| g.ne(x, d) == g.ne(y, d));
    let mirrored = |x: N::Node| matches!(g.split(x), Ok(Some(Split::Mirrored)));
    if g.op(a) != Some(Op::Add) {
        return None;
    }
    let residual_slot = match (g.src(a, 0), g.src(a, 1)) {
        (Some(x), Some(r)) if x == p && r != p => 1,
        (Some(r), Some(x)) if x == p && r != p => 0,
        _ => return None,
    };
    let r = g.src(a, residual_slot)?;
    if !mirrored(r) || !same_shape(a, p) || !same_shape(a, r) {
        return None;
    }
    let norm = (add + 2 < end)
        .then(|| (kept[add + 1], kept[add + 2]))
        .filter(|&(nrm, mul)| {
            let w = g.src(mul, 1);
            g.op(nrm) == Some(Op::RmsNorm)
                && g.src(nrm, 0) == Some(a)
                && g.uses(nrm) == 1
                && g.op(mul) == Some(Op::Mul)
                && g.src(mul, 0) == Some(nrm)
                && same_shape(mul, a)
                && w.is_some_and(|w| {
                    mirrored(w) && g.ne(w, 0) == g.ne(a, 0) && (1..4).all(|d| g.ne(w, d) == 1)
                })
        })
        .map(|_| add + 1);
    Some(Fusion {
        add,
        residual_slot,
        norm,
        keeps_sum: g.uses(p) > 1,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sub_graphs_cut_after_reductions_and_before_zeroed_nodes() {
        let b = sub_graphs(
            &[false, true, false, false, true, false],
            &[false, false, false, true, false, false],
        );
        let s: Vec<String> = b.iter().map(|b| b.to_string()).collect();
        assert_eq!(s, ["0..2 + AllReduce", "2..3", "3..5 + AllReduce", "5..6"]);
        assert!(sub_graphs(&[], &[]).is_empty());
        // a zeroed first node of a sub-graph needs no extra cut
        let b = sub_graphs(&[false, true, false], &[false, false, true]);
        assert_eq!(b.len(), 2);
        assert_eq!(
            b[1],
            Bound {
                start: 2,
                end: 3,
                reduce: false
            }
        );
    }

    /// A mock graph: per node, op, sources, uses, split, reduce flag, ne, nb[1], offs.
    #[derive(Clone)]
    struct N {
        op: Op,
        src: Vec<usize>,
        uses: i32,
        split: Option<Split>,
        reduce: bool,
        ne: [i64; 4],
        nb1: usize,
        offs: usize,
    }

    fn n(op: Op, src: Vec<usize>, uses: i32) -> N {
        N {
            op,
            src,
            uses,
            split: Some(Split::Mirrored),
            reduce: false,
            ne: [8, 1, 1, 1],
            nb1: 32,
            offs: 0,
        }
    }

    struct G(Vec<N>);

    impl Nodes for G {
        type Node = usize;
        type Error = ();
        fn op(&self, x: usize) -> Option<Op> {
            Some(self.0[x].op)
        }
        fn src(&self, x: usize, slot: usize) -> Option<usize> {
            self.0[x].src.get(slot).copied()
        }
        fn srcs(&self, x: usize) -> impl Iterator<Item = usize> + '_ {
            self.0[x].src.iter().copied()
        }
        fn uses(&self, x: usize) -> i32 {
            self.0[x].uses
        }
        fn split(&self, x: usize) -> Result<Option<Split>, ()> {
            Ok(self.0[x].split.clone())
        }
        fn reduces(&self, x: usize) -> Result<bool, ()> {
            Ok(self.0[x].reduce)
        }
        fn ne(&self, x: usize, dim: usize) -> i64 {
            self.0[x].ne[dim]
        }
        fn nb(&self, x: usize, _dim: usize) -> usize {
            self.0[x].nb1
        }
        fn view_offs(&self, x: usize) -> usize {
            self.0[x].offs
        }
    }

    /// weights 0, bias 1 (partial), router 2; mul_mat_id 3 → add_id 4 → mul 5 → 2 views → add.
    fn moe() -> G {
        let mut v = vec![
            n(Op::None, vec![], 1),
            N {
                split: Some(Split::Partial),
                ..n(Op::None, vec![], 1)
            },
            n(Op::None, vec![], 1),
            N {
                reduce: true,
                ..n(Op::MulMatId, vec![0], 1)
            },
            n(Op::AddId, vec![3, 1], 1),
            N {
                ne: [8, 2, 1, 1],
                ..n(Op::Mul, vec![4, 2], 2)
            },
        ];
        v.push(n(Op::View, vec![5], 1));
        v.push(N {
            offs: 32,
            ..n(Op::View, vec![5], 1)
        });
        v.push(n(Op::Add, vec![6, 7], 1));
        G(v)
    }

    #[test]
    fn the_moe_tail_runs_to_the_expert_sum() {
        let g = moe();
        let all: Vec<usize> = (0..g.0.len()).collect();
        assert_eq!(moe_tail(&g, &all, 3), vec![4, 5, 6, 7, 8]);
        assert!(moe_tail(&g, &all, 4).is_empty(), "only behind a MUL_MAT_ID");
        // a view at the wrong offset ends the tail before the sum
        let mut g2 = moe();
        g2.0[7].offs = 0;
        assert_eq!(moe_tail(&g2, &all, 3), vec![4, 5]);
        // a bias that is not partial is not part of the tail
        let mut g3 = moe();
        g3.0[1].split = Some(Split::Mirrored);
        assert!(moe_tail(&g3, &all, 3).is_empty());
    }

    #[test]
    fn partial_operands_only_inside_a_pending_tail() {
        let g = moe();
        let kept = [3, 4, 5, 6, 7, 8];
        let reduce_at = [false, false, false, false, false, true];
        assert_eq!(check_partial_consumers(&g, &kept, &reduce_at), Ok(Ok(())));
        // without the reduced matmul before it, the ADD_ID adds the partial bias per device
        assert_eq!(
            check_partial_consumers(&g, &kept[1..], &reduce_at[1..]),
            Ok(Err(PartialConsumer {
                node: 4,
                partial: 1
            }))
        );
    }

    /// residual 0, weight 1 (one row), norm weight 2; matmul 3 (reduced) → add 4 → rms_norm 5
    /// → mul 6 → matmul 7.
    fn block() -> (G, Vec<usize>) {
        let g = G(vec![
            n(Op::None, vec![], 1),
            n(Op::None, vec![], 1),
            N {
                ne: [8, 1, 1, 1],
                ..n(Op::None, vec![], 1)
            },
            N {
                reduce: true,
                ..n(Op::MulMat, vec![1, 0], 1)
            },
            n(Op::Add, vec![3, 0], 2),
            n(Op::RmsNorm, vec![4], 1),
            n(Op::Mul, vec![5, 2], 1),
            n(Op::MulMat, vec![1, 6], 1),
        ]);
        (g, vec![3, 4, 5, 6, 7])
    }

    #[test]
    fn the_residual_add_and_the_norm_behind_a_cut_fuse() {
        let (g, kept) = block();
        let f = fusion(&g, &kept, 0, 5).expect("fuses");
        assert_eq!(
            f,
            Fusion {
                add: 1,
                residual_slot: 1,
                norm: Some(2),
                keeps_sum: false
            }
        );
        assert_eq!(f.nodes(), 1..4);
        // the norm must lie inside the next sub-graph
        let f = fusion(&g, &kept, 0, 3).expect("the add alone");
        assert_eq!((f.norm, f.nodes()), (None, 1..2));
        assert_eq!(fusion(&g, &kept, 0, 1), None, "nothing after the cut");
        // operands the other way round
        let mut g2 = block().0;
        g2.0[4].src = vec![0, 3];
        assert_eq!(fusion(&g2, &kept, 0, 5).map(|f| f.residual_slot), Some(0));
        // the sum read elsewhere too
        let mut g3 = block().0;
        g3.0[3].uses = 2;
        assert!(fusion(&g3, &kept, 0, 5).is_some_and(|f| f.keeps_sum));
    }

    #[test]
    fn what_does_not_fuse() {
        let kept = [3, 4, 5, 6, 7];
        // a residual split over the devices
        let mut g = block().0;
        g.0[0].split = Some(Split::Partial);
        assert_eq!(fusion(&g, &kept, 0, 5), None);
        // broadcasting add
        let mut g = block().0;
        g.0[0].ne = [8, 2, 1, 1];
        assert_eq!(fusion(&g, &kept, 0, 5), None);
        // the reduced node added to itself
        let mut g = block().0;
        g.0[4].src = vec![3, 3];
        assert_eq!(fusion(&g, &kept, 0, 5), None);
        // not an add
        let mut g = block().0;
        g.0[4].op = Op::Mul;
        assert_eq!(fusion(&g, &kept, 0, 5), None);
        // the add is not the first node of the next sub-graph
        let (g, _) = block();
        assert_eq!(fusion(&g, &[3, 7, 4, 5, 6], 0, 5), None);
        // a norm whose result is read elsewhere, or a weight of more than one row, or another
        // norm, keep the norm in the graph
        let mut g = block().0;
        g.0[5].uses = 2;
        assert_eq!(fusion(&g, &kept, 0, 5).map(|f| f.norm), Some(None));
        let mut g = block().0;
        g.0[2].ne = [8, 2, 1, 1];
        assert_eq!(fusion(&g, &kept, 0, 5).map(|f| f.norm), Some(None));
        let mut g = block().0;
        g.0[5].op = Op::Norm;
        assert_eq!(fusion(&g, &kept, 0, 5).map(|f| f.norm), Some(None));
        let mut g = block().0;
        g.0[2].split = Some(Split::Partial);
        assert_eq!(fusion(&g, &kept, 0, 5).map(|f| f.norm), Some(None));
    }
}
