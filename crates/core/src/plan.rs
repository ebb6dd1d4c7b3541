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

    /// A mock graph: per node, op, sources, uses, split, reduce flag, ne[0..2], nb[1], offs.
    #[derive(Clone)]
    struct N {
        op: Op,
        src: Vec<usize>,
        uses: i32,
        split: Option<Split>,
        reduce: bool,
        ne: [i64; 2],
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
            ne: [8, 1],
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
                ne: [8, 2],
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
}
