//! The scheduler's pass 5: cut an assigned graph into splits — runs of nodes on one backend —
//! and decide which sources each split needs copied onto its backend; and the pipeline copies
//! of the graph's inputs (in pass 5 or in a pass 6 of their own, by the version's [`Policy`]).
//!
//! Guarantees of [`partition`]: every node of a split runs on the split's backend and reads
//! only tensors that backend can use; a source from elsewhere is copied (once per pipeline
//! copy, through [`Copies`]), listed among the split's inputs the first time, and the node is
//! pointed at the current copy. With more than one pipeline copy, graph inputs get their
//! copies on their own backend. A split starts where the backend changes, and also where a
//! node on the same backend reads a weight that must be copied (so the memory of the previous
//! split's copied weights can be reused) or, with an input limit, the split's inputs are full.

use std::collections::HashMap;
use std::hash::BuildHasher;

use crate::assign::{self, Backends, Graph, Tensors};

/// Most inputs one split may copy (`GGML_SCHED_MAX_SPLIT_INPUTS`) in versions that limit them.
pub const MAX_SPLIT_INPUTS: usize = 30;

/// What the ggml versions' pass 5 does differently.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    /// Most inputs of one split, and most graph inputs with pipeline copies: a node that would
    /// need one more input copy than that starts a new split, and a graph or a single node
    /// that still needs more is an error. `None`: no limit.
    pub max_inputs: Option<usize>,
    /// Which graph inputs get pipeline copies.
    pub graph_inputs: GraphInputs,
}

/// The graph inputs (`GGML_TENSOR_FLAG_INPUT`) that get pipeline copies when there is more
/// than one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GraphInputs {
    /// Sources of non-view nodes, in the order pass 5 meets them.
    Consumed,
    /// Every input leaf, in leaf order, also those no node reads (so that a graph's
    /// allocation does not depend on which inputs a batch uses).
    AllLeafs,
}

/// A run of nodes `start..end` (graph indices, views included) computed on `backend`, with the
/// tensors from other backends it reads (each copied onto `backend`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Split<T> {
    pub backend: usize,
    pub start: usize,
    pub end: usize,
    pub inputs: Vec<T>,
}

/// The graph by node index.
pub trait Nodes: Tensors {
    fn n_nodes(&self) -> usize;
    fn node(&self, i: usize) -> Self::Tensor;
    /// The present sources of `t` with their slot.
    fn srcs_indexed(&self, t: Self::Tensor) -> impl Iterator<Item = (usize, Self::Tensor)> + '_;
}

/// The copies of tensors on other backends: made, looked up, and wired into nodes.
pub trait Copies<T> {
    /// Copy `copy` of `t` on `backend`, if made.
    fn copy_of(&self, t: T, backend: usize, copy: usize) -> Option<T>;
    /// Makes the pipeline copies of graph input `t` on its own `backend` (the current copy is
    /// `t` itself).
    fn copy_graph_input(&mut self, t: T, backend: usize);
    /// Makes the copies of `t` on `backend`, one per pipeline copy.
    fn copy_split_input(&mut self, t: T, backend: usize);
    /// Points source `slot` of `node` at `copy`.
    fn set_src(&mut self, node: T, slot: usize, copy: T);
}

/// Why a graph cannot be partitioned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PartitionError<T> {
    /// A node has no backend (passes 1–4 guarantee one, unless there is no CPU fallback).
    NodeWithoutBackend(T),
    /// A source has no backend.
    SourceWithoutBackend(T),
    /// An input leaf has no backend.
    LeafWithoutBackend(T),
    /// More graph inputs than [`Policy::max_inputs`] need pipeline copies.
    TooManyGraphInputs,
    /// A split needs more than [`Policy::max_inputs`] inputs.
    TooManySplitInputs,
}

/// The pipeline state: how many copies of each input exist, and which one is current.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pipeline {
    pub n_copies: usize,
    pub cur_copy: usize,
}

/// The result of pass 5: the splits, and the graph inputs that got pipeline copies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Partitioned<T> {
    pub splits: Vec<Split<T>>,
    pub graph_inputs: Vec<T>,
}

/// Runs pass 5 (and the graph inputs' pass) over `g`, whose nodes, sources and input leafs
/// all have a backend in `backend_of`.
pub fn partition<G, B, C, S>(
    g: &G,
    b: &B,
    backend_of: &HashMap<G::Tensor, usize, S>,
    copies: &mut C,
    pipeline: Pipeline,
    policy: Policy,
) -> Result<Partitioned<G::Tensor>, PartitionError<G::Tensor>>
where
    G: Nodes + Graph,
    B: Backends<G>,
    C: Copies<G::Tensor>,
    S: BuildHasher,
{
    let n = g.n_nodes();
    let mut out = Partitioned {
        splits: Vec::new(),
        graph_inputs: Vec::new(),
    };
    let Some(first) = (0..n).find(|&i| !g.is_view_op(g.node(i))) else {
        // Only views: one split on backend 0 covering everything, as upstream.
        out.splits.push(Split {
            backend: 0,
            start: 0,
            end: n,
            inputs: Vec::new(),
        });
        copy_input_leafs(g, backend_of, copies, pipeline, policy, &mut out)?;
        return Ok(out);
    };
    let id = |t: G::Tensor| backend_of.get(&t).copied();
    let supported = |t: G::Tensor, on: usize| assign::buffer_supported(g, b, backend_of, t, on);
    let mut split = Split {
        backend: id(g.node(first)).unwrap_or(0),
        start: 0,
        end: 0,
        inputs: Vec::new(),
    };
    for i in first..n {
        let node = g.node(i);
        if g.is_view_op(node) {
            continue;
        }
        let node_backend = id(node).ok_or(PartitionError::NodeWithoutBackend(node))?;
        let cur = split.backend;
        let mut need_new_split = false;
        if node_backend == cur && !split.inputs.is_empty() {
            for src in g.srcs(node) {
                // A weight on an incompatible backend: a new split lets the memory of the
                // previously copied weights be reused.
                if g.in_weight_buffer(src) && id(src) != Some(cur) && !supported(src, cur) {
                    need_new_split = true;
                    break;
                }
                if policy.max_inputs == Some(split.inputs.len())
                    && id(src) != Some(cur)
                    && copies.copy_of(src, cur, 0).is_none()
                    && !supported(src, cur)
                {
                    need_new_split = true;
                    break;
                }
            }
        }
        if node_backend != cur || need_new_split {
            split.end = i;
            let next = Split {
                backend: node_backend,
                start: i,
                end: 0,
                inputs: Vec::new(),
            };
            out.splits.push(std::mem::replace(&mut split, next));
        }
        let cur = split.backend;
        // (`set_src` below rewires only the slot just visited; each slot is read once)
        for (slot, src) in g.srcs_indexed(node) {
            let src_backend = id(src).ok_or(PartitionError::SourceWithoutBackend(src))?;
            if policy.graph_inputs == GraphInputs::Consumed
                && g.is_input(src)
                && pipeline.n_copies > 1
                && copies.copy_of(src, src_backend, 0).is_none()
            {
                copies.copy_graph_input(src, src_backend);
                if full(policy, &out.graph_inputs) {
                    return Err(PartitionError::TooManyGraphInputs);
                }
                out.graph_inputs.push(src);
            }
            if src_backend != cur && !supported(src, cur) {
                if copies.copy_of(src, cur, 0).is_none() {
                    copies.copy_split_input(src, cur);
                    if full(policy, &split.inputs) {
                        return Err(PartitionError::TooManySplitInputs);
                    }
                    split.inputs.push(src);
                }
                let copy = copies
                    .copy_of(src, cur, pipeline.cur_copy)
                    .expect("copy_split_input made every pipeline copy");
                copies.set_src(node, slot, copy);
            }
        }
    }
    split.end = n;
    out.splits.push(split);
    copy_input_leafs(g, backend_of, copies, pipeline, policy, &mut out)?;
    Ok(out)
}

/// Whether `inputs` already holds as many tensors as the policy allows.
fn full<T>(policy: Policy, inputs: &[T]) -> bool {
    policy.max_inputs.is_some_and(|max| inputs.len() >= max)
}

/// The pass after pass 5 under [`GraphInputs::AllLeafs`]: every input leaf gets its pipeline
/// copies on its own backend (made once per graph) and is listed among the graph inputs.
fn copy_input_leafs<G, C, S>(
    g: &G,
    backend_of: &HashMap<G::Tensor, usize, S>,
    copies: &mut C,
    pipeline: Pipeline,
    policy: Policy,
    out: &mut Partitioned<G::Tensor>,
) -> Result<(), PartitionError<G::Tensor>>
where
    G: Graph,
    C: Copies<G::Tensor>,
    S: BuildHasher,
{
    if policy.graph_inputs != GraphInputs::AllLeafs || pipeline.n_copies <= 1 {
        return Ok(());
    }
    for leaf in g.leafs().filter(|&t| g.is_input(t)) {
        let backend = *backend_of
            .get(&leaf)
            .ok_or(PartitionError::LeafWithoutBackend(leaf))?;
        if copies.copy_of(leaf, backend, 0).is_none() {
            copies.copy_graph_input(leaf, backend);
        }
        if full(policy, &out.graph_inputs) {
            return Err(PartitionError::TooManyGraphInputs);
        }
        out.graph_inputs.push(leaf);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 0.9.11's pass 5: at most 30 inputs, graph inputs copied where consumed.
    const LIMITED: Policy = Policy {
        max_inputs: Some(MAX_SPLIT_INPUTS),
        graph_inputs: GraphInputs::Consumed,
    };
    /// 0.26's: no limit, every input leaf copied.
    const UNLIMITED: Policy = Policy {
        max_inputs: None,
        graph_inputs: GraphInputs::AllLeafs,
    };

    /// Tensors 0..n: sources per tensor, an input flag; all in no buffer. Backend 0 (GPU) and
    /// 1 (CPU) each read only what runs on them.
    struct G {
        srcs: Vec<Vec<usize>>,
        input: Vec<bool>,
        nodes: Vec<usize>,
    }

    impl Tensors for G {
        type Tensor = usize;
        type Buft = u8;
        fn srcs(&self, t: usize) -> impl Iterator<Item = usize> + '_ {
            self.srcs[t].iter().copied()
        }
        fn view_src(&self, _t: usize) -> Option<usize> {
            None
        }
        fn is_view_op(&self, _t: usize) -> bool {
            false
        }
        fn is_input(&self, t: usize) -> bool {
            self.input[t]
        }
        fn op(&self, _t: usize) -> Option<crate::Op> {
            None
        }
        fn data_buft(&self, _t: usize) -> Option<u8> {
            None
        }
        fn in_weight_buffer(&self, _t: usize) -> bool {
            false
        }
        fn in_host_buffer(&self, _t: usize) -> bool {
            false
        }
    }

    impl Graph for G {
        fn leafs(&self) -> impl Iterator<Item = usize> + '_ {
            (0..self.srcs.len()).filter(|t| !self.nodes.contains(t))
        }
        fn nodes(&self) -> impl Iterator<Item = usize> + '_ {
            self.nodes.iter().copied()
        }
    }

    impl Nodes for G {
        fn n_nodes(&self) -> usize {
            self.nodes.len()
        }
        fn node(&self, i: usize) -> usize {
            self.nodes[i]
        }
        fn srcs_indexed(&self, t: usize) -> impl Iterator<Item = (usize, usize)> + '_ {
            self.srcs[t].iter().copied().enumerate()
        }
    }

    struct Two;

    impl Backends<G> for Two {
        fn count(&self) -> usize {
            2
        }
        fn supports_op(&self, _b: usize, _op: usize) -> bool {
            true
        }
        fn supports_buft(&self, b: usize, buft: u8) -> bool {
            b as u8 == buft
        }
        fn offload_op(&self, _b: usize, _op: usize) -> bool {
            false
        }
        fn buft(&self, b: usize) -> u8 {
            b as u8
        }
        fn op_offload(&self) -> bool {
            false
        }
    }

    /// Records copies and rewiring. A split input `t`'s copies on `backend` are numbered
    /// `100 + 10 t + backend` (copy 0) and `200 + 10 t + backend` (copy 1); a graph input's
    /// are the input itself and `1000 + t`.
    #[derive(Default)]
    struct Recorder {
        made: HashMap<(usize, usize), Vec<usize>>,
        rewired: Vec<(usize, usize, usize)>,
    }

    impl Copies<usize> for Recorder {
        fn copy_of(&self, t: usize, backend: usize, copy: usize) -> Option<usize> {
            self.made.get(&(t, backend)).map(|c| c[copy])
        }
        fn copy_graph_input(&mut self, t: usize, backend: usize) {
            self.made.insert((t, backend), vec![t, 1000 + t]);
        }
        fn copy_split_input(&mut self, t: usize, backend: usize) {
            self.made.insert(
                (t, backend),
                vec![100 + 10 * t + backend, 200 + 10 * t + backend],
            );
        }
        fn set_src(&mut self, node: usize, slot: usize, copy: usize) {
            self.rewired.push((node, slot, copy));
        }
    }

    /// input 0 (CPU) → node 1 (GPU) → node 2 (GPU) → node 3 (CPU) reading 2 and 0.
    fn graph() -> (G, HashMap<usize, usize>) {
        let g = G {
            srcs: vec![vec![], vec![0], vec![1], vec![2, 0]],
            input: vec![true, false, false, false],
            nodes: vec![1, 2, 3],
        };
        let backend_of = HashMap::from([(0, 1), (1, 0), (2, 0), (3, 1)]);
        (g, backend_of)
    }

    #[test]
    fn splits_follow_backends_and_copy_foreign_sources() {
        let (g, backend_of) = graph();
        let mut rec = Recorder::default();
        let one = Pipeline {
            n_copies: 1,
            cur_copy: 0,
        };
        let p = partition(&g, &Two, &backend_of, &mut rec, one, LIMITED).unwrap();
        assert_eq!(
            p.splits,
            vec![
                Split {
                    backend: 0,
                    start: 0,
                    end: 2,
                    inputs: vec![0]
                },
                Split {
                    backend: 1,
                    start: 2,
                    end: 3,
                    inputs: vec![2]
                },
            ]
        );
        assert!(
            p.graph_inputs.is_empty(),
            "one pipeline copy: no input copies"
        );
        // node 1 reads the GPU copy of input 0; node 3 the CPU copy of node 2 and input 0 as is
        assert_eq!(rec.rewired, vec![(1, 0, 100), (3, 0, 121)]);
    }

    #[test]
    fn pipeline_copies_of_graph_inputs() {
        let (g, backend_of) = graph();
        let mut rec = Recorder::default();
        let two = Pipeline {
            n_copies: 2,
            cur_copy: 1,
        };
        let p = partition(&g, &Two, &backend_of, &mut rec, two, LIMITED).unwrap();
        assert_eq!(p.graph_inputs, vec![0]);
        // the current copy (1) of each split input is wired in
        assert_eq!(rec.rewired, vec![(1, 0, 200), (3, 0, 221)]);
    }

    #[test]
    fn a_node_without_backend_is_an_error() {
        let (g, mut backend_of) = graph();
        backend_of.remove(&2);
        let one = Pipeline {
            n_copies: 1,
            cur_copy: 0,
        };
        assert_eq!(
            partition(
                &g,
                &Two,
                &backend_of,
                &mut Recorder::default(),
                one,
                LIMITED
            ),
            Err(PartitionError::NodeWithoutBackend(2))
        );
    }

    #[test]
    fn every_input_leaf_gets_pipeline_copies_by_policy() {
        let (mut g, mut backend_of) = graph();
        // input 4 on the CPU, read by no node
        g.srcs.push(vec![]);
        g.input.push(true);
        backend_of.insert(4, 1);
        let two = Pipeline {
            n_copies: 2,
            cur_copy: 0,
        };
        let mut rec = Recorder::default();
        let p = partition(&g, &Two, &backend_of, &mut rec, two, LIMITED).unwrap();
        assert_eq!(p.graph_inputs, vec![0], "only consumed inputs");
        assert!(!rec.made.contains_key(&(4, 1)));
        let mut rec = Recorder::default();
        let p = partition(&g, &Two, &backend_of, &mut rec, two, UNLIMITED).unwrap();
        assert_eq!(
            p.graph_inputs,
            vec![0, 4],
            "every input leaf, in leaf order"
        );
        assert_eq!(rec.made[&(4, 1)], vec![4, 1004]);
        // the splits do not change
        assert_eq!(p.splits.len(), 2);
        // one pipeline copy: none
        let one = Pipeline {
            n_copies: 1,
            cur_copy: 0,
        };
        let p = partition(
            &g,
            &Two,
            &backend_of,
            &mut Recorder::default(),
            one,
            UNLIMITED,
        );
        assert!(p.unwrap().graph_inputs.is_empty());
    }

    /// Leafs 0..=5 on the CPU; GPU nodes 6 (reads 0, 1), 7 (reads 6, 2) and 8 (reads 7, 3,
    /// 4, 5).
    fn many_inputs() -> (G, HashMap<usize, usize>) {
        let g = G {
            srcs: vec![
                vec![],
                vec![],
                vec![],
                vec![],
                vec![],
                vec![],
                vec![0, 1],
                vec![6, 2],
                vec![7, 3, 4, 5],
            ],
            input: vec![false; 9],
            nodes: vec![6, 7, 8],
        };
        let mut backend_of: HashMap<usize, usize> = (0..6).map(|t| (t, 1)).collect();
        backend_of.extend([(6, 0), (7, 0), (8, 0)]);
        (g, backend_of)
    }

    #[test]
    fn a_full_split_is_cut_only_with_an_input_limit() {
        let (g, backend_of) = many_inputs();
        let one = Pipeline {
            n_copies: 1,
            cur_copy: 0,
        };
        let two_inputs = Policy {
            max_inputs: Some(2),
            ..LIMITED
        };
        // node 7 needs a third input: a new split; node 8 then needs four in one split
        let p = partition(
            &g,
            &Two,
            &backend_of,
            &mut Recorder::default(),
            one,
            two_inputs,
        );
        assert_eq!(p, Err(PartitionError::TooManySplitInputs));
        let three_inputs = Policy {
            max_inputs: Some(3),
            ..LIMITED
        };
        let p = partition(
            &g,
            &Two,
            &backend_of,
            &mut Recorder::default(),
            one,
            three_inputs,
        )
        .unwrap();
        let cuts: Vec<(usize, usize, Vec<usize>)> = p
            .splits
            .iter()
            .map(|s| (s.start, s.end, s.inputs.clone()))
            .collect();
        assert_eq!(cuts, vec![(0, 2, vec![0, 1, 2]), (2, 3, vec![3, 4, 5])]);
        let p = partition(
            &g,
            &Two,
            &backend_of,
            &mut Recorder::default(),
            one,
            UNLIMITED,
        )
        .unwrap();
        assert_eq!(p.splits.len(), 1);
        assert_eq!(p.splits[0].inputs, vec![0, 1, 2, 3, 4, 5]);
    }
}
