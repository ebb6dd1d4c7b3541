//! The scheduler's passes 1–4: which backend computes each node of a graph.
//!
//! The passes see the graph and the backends only through [`Graph`] and [`Backends`], which the
//! root crate implements over ggml's tensors and devices; the result is the map from tensor to
//! backend index (lower index = higher priority; the last backend is the CPU).
//!
//! Guarantees of [`assign`]: afterwards every node and every source of a node has a backend; a
//! tensor already allocated in a buffer runs on a backend that can use that buffer (or the
//! result is [`AssignError::Preallocated`]); assignments already in the map (the user's) are
//! kept.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash};

use crate::Op;

/// What the ggml versions' passes 1–4 do differently.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    /// Pass 1 runs a FLASH_ATTN_EXT next to a weight it reads (its attention sinks). When
    /// false it is treated like ROPE: a tensor that small does not decide the backend.
    pub flash_attn_follows_weights: bool,
}

/// Tensors: their sources, and where their data already is.
pub trait Tensors {
    /// A tensor's identity.
    type Tensor: Copy + Eq + Hash;
    /// A buffer type's identity.
    type Buft: Copy + Eq;

    /// The sources of `t` that are present, in slot order.
    fn srcs(&self, t: Self::Tensor) -> impl Iterator<Item = Self::Tensor> + '_;
    fn view_src(&self, t: Self::Tensor) -> Option<Self::Tensor>;
    /// `t`'s op only reinterprets memory (VIEW, RESHAPE, PERMUTE, TRANSPOSE).
    fn is_view_op(&self, t: Self::Tensor) -> bool;
    /// `t` is a graph input (`GGML_TENSOR_FLAG_INPUT`).
    fn is_input(&self, t: Self::Tensor) -> bool;
    /// `t`'s op (`None` for an op the core does not name).
    fn op(&self, t: Self::Tensor) -> Option<Op>;
    /// The type of the buffer that holds `t`'s data (its own or its view source's), if any.
    fn data_buft(&self, t: Self::Tensor) -> Option<Self::Buft>;
    /// Whether `t` has a buffer of its own (not through a view), and that buffer holds weights
    /// (`GGML_BACKEND_BUFFER_USAGE_WEIGHTS`).
    fn in_weight_buffer(&self, t: Self::Tensor) -> bool;
    /// Whether `t`'s own buffer is host memory (asked only of tensors in weight buffers).
    fn in_host_buffer(&self, t: Self::Tensor) -> bool;
}

/// A graph of [`Tensors`].
pub trait Graph: Tensors {
    /// The leafs and the nodes, in graph order.
    fn leafs(&self) -> impl Iterator<Item = Self::Tensor> + '_;
    fn nodes(&self) -> impl Iterator<Item = Self::Tensor> + '_;
}

/// The scheduler's backends, in priority order (the last is the CPU).
pub trait Backends<G: Tensors> {
    fn count(&self) -> usize;
    fn supports_op(&self, b: usize, op: G::Tensor) -> bool;
    fn supports_buft(&self, b: usize, buft: G::Buft) -> bool;
    /// Backend `b` wants to run `op` although its weights are in host memory.
    fn offload_op(&self, b: usize, op: G::Tensor) -> bool;
    /// Backend `b`'s buffer type (where its compute buffers go).
    fn buft(&self, b: usize) -> G::Buft;
    /// Op offload is on (`ggml_backend_sched_new`'s `op_offload`).
    fn op_offload(&self) -> bool;
    /// No backend runs `op` next to `weight`, so the weight will be copied (for logs).
    fn weight_copied(&self, _weight: G::Tensor, _op: G::Tensor) {}
}

/// Why a graph cannot be assigned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AssignError<T> {
    /// `tensor` is allocated in a buffer (of type `buft`) that no backend able to run its op
    /// can use.
    Preallocated { tensor: T },
    /// No backend supports `node`.
    Unsupported { node: T },
}

/// Runs passes 1–4 over `g`, completing `backend_of`.
pub fn assign<G, B, S>(
    g: &G,
    b: &B,
    policy: Policy,
    backend_of: &mut HashMap<G::Tensor, usize, S>,
) -> Result<(), AssignError<G::Tensor>>
where
    G: Graph,
    B: Backends<G>,
    S: BuildHasher,
{
    let mut p = Passes {
        g,
        b,
        policy,
        backend_of,
    };
    p.place_decided()?;
    p.expand();
    p.upgrade_and_fill();
    p.assign_sources()
}

/// Whether backend `b` can read `t` where it is (or, by `backend_of`, will be) allocated.
pub fn buffer_supported<G, B, S>(
    g: &G,
    backends: &B,
    backend_of: &HashMap<G::Tensor, usize, S>,
    t: G::Tensor,
    b: usize,
) -> bool
where
    G: Tensors,
    B: Backends<G>,
    S: BuildHasher,
{
    let buft = match g.data_buft(t) {
        Some(buft) => buft,
        None => match backend_of
            .get(&t)
            .or_else(|| g.view_src(t).and_then(|v| backend_of.get(&v)))
        {
            Some(&id) => backends.buft(id),
            None => return false,
        },
    };
    backends.supports_buft(b, buft)
}

struct Passes<'a, G: Graph, B, S> {
    g: &'a G,
    b: &'a B,
    policy: Policy,
    backend_of: &'a mut HashMap<G::Tensor, usize, S>,
}

impl<G, B, S> Passes<'_, G, B, S>
where
    G: Graph,
    B: Backends<G>,
    S: BuildHasher,
{
    fn id(&self, t: G::Tensor) -> Option<usize> {
        self.backend_of.get(&t).copied()
    }

    fn cpu(&self) -> usize {
        self.b.count() - 1
    }

    fn supported(&self, t: G::Tensor, b: usize) -> bool {
        buffer_supported(self.g, self.b, self.backend_of, t, b)
    }

    /// Highest-priority backend that can run `op` reading `tensor` where it is allocated.
    fn backend_by_buffer(&self, tensor: G::Tensor, op: G::Tensor) -> Option<usize> {
        let buft = self.g.data_buft(tensor)?;
        let found = (0..self.b.count())
            .find(|&b| self.b.supports_buft(b, buft) && self.b.supports_op(b, op));
        if found.is_none() {
            self.b.weight_copied(tensor, op);
        }
        found
    }

    /// The backend a node must or should use given where its data and inputs already are.
    fn backend_by_placement(&self, t: G::Tensor) -> Result<Option<usize>, AssignError<G::Tensor>> {
        if let Some(b) = self.backend_by_buffer(t, t) {
            return Ok(Some(b));
        }
        if let Some(v) = self.g.view_src(t) {
            if let Some(b) = self.backend_by_buffer(v, t) {
                return Ok(Some(b));
            }
        }
        if self.g.data_buft(t).is_some() {
            return Err(AssignError::Preallocated { tensor: t });
        }
        // Graph inputs start on the CPU (the last backend), where the user writes them.
        if self.g.is_input(t) {
            return Ok(Some(self.cpu()));
        }
        // Ops that read weights run next to the weights.
        if !self.follows_weights(t) {
            return Ok(None);
        }
        for src in self.g.srcs(t) {
            if !self.g.in_weight_buffer(src) {
                continue;
            }
            let src_backend = self.backend_by_buffer(src, t);
            // Host weights are on the CPU backend; a higher-priority backend may still want
            // the op (e.g. a large matmul) if op offload is on.
            if self.b.op_offload() && src_backend == Some(self.cpu()) && self.g.in_host_buffer(src)
            {
                let wants =
                    (0..self.cpu()).find(|&b| self.b.supports_op(b, t) && self.b.offload_op(b, t));
                if let Some(b) = wants {
                    return Ok(Some(b));
                }
            }
            return Ok(src_backend);
        }
        Ok(None)
    }

    /// Whether pass 1 places `t` by the weights it reads: not ROPE, whose frequency table is
    /// too small to decide anything, nor (by the version's policy) FLASH_ATTN_EXT's sinks.
    fn follows_weights(&self, t: G::Tensor) -> bool {
        match self.g.op(t) {
            Some(Op::Rope) => false,
            Some(Op::FlashAttnExt) => self.policy.flash_attn_follows_weights,
            _ => true,
        }
    }

    /// Pass 1: tensors whose placement is already decided by their buffers or inputs.
    fn place_decided(&mut self) -> Result<(), AssignError<G::Tensor>> {
        let g = self.g;
        for t in g.leafs().chain(g.nodes()) {
            if self.id(t).is_none() {
                if let Some(b) = self.backend_by_placement(t)? {
                    self.backend_of.insert(t, b);
                }
            }
        }
        Ok(())
    }

    fn set_if_supported(&mut self, node: G::Tensor, b: usize) {
        if self.b.supports_op(b, node) {
            self.backend_of.insert(node, b);
        }
    }

    /// Pass 2: neighbours of assigned nodes join their backend where it supports them: first
    /// the non-CPU backends spread down and up (so the CPU is used only where it must be), then
    /// any backend spreads down and up.
    fn expand(&mut self) {
        let cpu = self.cpu();
        let order: Vec<G::Tensor> = self.g.nodes().filter(|&n| !self.g.is_view_op(n)).collect();
        for (skip_cpu, reverse) in [(true, false), (true, true), (false, false), (false, true)] {
            let mut current: Option<usize> = None;
            let mut visit = |p: &mut Self, node: G::Tensor| match p.id(node) {
                Some(b) => current = if skip_cpu && b == cpu { None } else { Some(b) },
                None => {
                    if let Some(b) = current {
                        p.set_if_supported(node, b);
                    }
                }
            };
            if reverse {
                order.iter().rev().for_each(|&n| visit(self, n));
            } else {
                order.iter().for_each(|&n| visit(self, n));
            }
        }
    }

    /// Pass 3: move assigned nodes to a higher-priority backend that uses the same buffer type
    /// and can read all their sources; give each node still unassigned the backend that
    /// supports it and can read most of its sources.
    fn upgrade_and_fill(&mut self) {
        let g = self.g;
        for node in g.nodes() {
            if g.is_view_op(node) {
                continue;
            }
            match self.id(node) {
                None => {
                    let mut best: Option<(usize, usize)> = None;
                    for b in 0..self.b.count() {
                        if !self.b.supports_op(b, node) {
                            continue;
                        }
                        let n_supported = self
                            .g
                            .srcs(node)
                            .filter(|&s| {
                                let placed = self.id(s).is_some()
                                    || self.g.view_src(s).is_some_and(|v| self.id(v).is_some());
                                placed && self.supported(s, b)
                            })
                            .count();
                        if best.is_none_or(|(_, n)| n_supported > n) {
                            best = Some((b, n_supported));
                        }
                    }
                    if let Some((b, _)) = best {
                        self.backend_of.insert(node, b);
                    }
                }
                Some(current) => {
                    let upgrade = (0..current).find(|&b| {
                        self.b.buft(b) == self.b.buft(current)
                            && self.b.supports_op(b, node)
                            && self.g.srcs(node).all(|s| self.supported(s, b))
                    });
                    if let Some(b) = upgrade {
                        self.backend_of.insert(node, b);
                    }
                }
            }
        }
    }

    /// Pass 4: views follow their source, unassigned sources follow their consumer, and a node
    /// still unassigned goes to the first backend that supports it.
    fn assign_sources(&mut self) -> Result<(), AssignError<G::Tensor>> {
        let g = self.g;
        for node in g.nodes() {
            if let Some(v) = g.view_src(node) {
                if self.id(node).is_none() {
                    if let Some(b) = self.id(v) {
                        self.backend_of.insert(node, b);
                    }
                }
            }
            let current = self.id(node);
            for src in g.srcs(node) {
                if self.id(src).is_some() {
                    continue;
                }
                let b = match self.g.view_src(src) {
                    Some(v) => self.id(v),
                    None => current,
                };
                if let Some(b) = b {
                    self.backend_of.insert(src, b);
                }
            }
            if self.id(node).is_none() {
                if let Some(b) = (0..self.b.count()).find(|&b| self.b.supports_op(b, node)) {
                    self.backend_of.insert(node, b);
                }
            }
            if self.id(node).is_none() {
                return Err(AssignError::Unsupported { node });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tensor of the mock graph: its sources, whether it is a view of another, an input,
    /// and (for weights) the buffer type it is allocated in.
    #[derive(Clone, Default)]
    struct T {
        srcs: Vec<usize>,
        view_src: Option<usize>,
        input: bool,
        buft: Option<u8>,
        op: Option<Op>,
    }

    struct Mock {
        tensors: Vec<T>,
        leafs: Vec<usize>,
        nodes: Vec<usize>,
    }

    impl Tensors for Mock {
        type Tensor = usize;
        type Buft = u8;
        fn srcs(&self, t: usize) -> impl Iterator<Item = usize> + '_ {
            self.tensors[t].srcs.iter().copied()
        }
        fn view_src(&self, t: usize) -> Option<usize> {
            self.tensors[t].view_src
        }
        fn is_view_op(&self, t: usize) -> bool {
            self.tensors[t].view_src.is_some()
        }
        fn is_input(&self, t: usize) -> bool {
            self.tensors[t].input
        }
        fn op(&self, t: usize) -> Option<Op> {
            self.tensors[t].op
        }
        fn data_buft(&self, t: usize) -> Option<u8> {
            self.tensors[t].buft
        }
        fn in_weight_buffer(&self, t: usize) -> bool {
            self.tensors[t].buft.is_some()
        }
        fn in_host_buffer(&self, t: usize) -> bool {
            self.tensors[t].buft == Some(1)
        }
    }

    impl Graph for Mock {
        fn leafs(&self) -> impl Iterator<Item = usize> + '_ {
            self.leafs.iter().copied()
        }
        fn nodes(&self) -> impl Iterator<Item = usize> + '_ {
            self.nodes.iter().copied()
        }
    }

    /// Backend 0: a GPU with buffer type 0 that supports every op but `gpu_refuses`;
    /// backend 1: the CPU, buffer type 1 (host), supports everything.
    struct Two {
        gpu_refuses: Vec<usize>,
        offload: bool,
    }

    impl Backends<Mock> for Two {
        fn count(&self) -> usize {
            2
        }
        fn supports_op(&self, b: usize, op: usize) -> bool {
            b == 1 || !self.gpu_refuses.contains(&op)
        }
        fn supports_buft(&self, b: usize, buft: u8) -> bool {
            b as u8 == buft
        }
        fn offload_op(&self, _b: usize, _op: usize) -> bool {
            self.offload
        }
        fn buft(&self, b: usize) -> u8 {
            b as u8
        }
        fn op_offload(&self) -> bool {
            self.offload
        }
    }

    /// x (input) → mul_mat(w, x) → add(·, b) → view; w and b in `weights`' buffer type.
    fn chain(weights: u8) -> Mock {
        let t = |srcs: Vec<usize>| T {
            srcs,
            ..T::default()
        };
        let mut tensors = vec![
            T {
                input: true,
                ..T::default()
            },
            T {
                buft: Some(weights),
                ..T::default()
            },
            T {
                buft: Some(weights),
                ..T::default()
            },
            t(vec![1, 0]),
            t(vec![3, 2]),
        ];
        tensors.push(T {
            srcs: vec![4],
            view_src: Some(4),
            ..T::default()
        });
        Mock {
            tensors,
            leafs: vec![0, 1, 2],
            nodes: vec![3, 4, 5],
        }
    }

    const POLICY: Policy = Policy {
        flash_attn_follows_weights: true,
    };

    fn run(g: &Mock, b: &Two) -> Result<HashMap<usize, usize>, AssignError<usize>> {
        run_with(g, b, POLICY)
    }

    fn run_with(
        g: &Mock,
        b: &Two,
        policy: Policy,
    ) -> Result<HashMap<usize, usize>, AssignError<usize>> {
        let mut map = HashMap::new();
        assign(g, b, policy, &mut map).map(|()| map)
    }

    /// q, k, v (inputs, on the CPU) and a sinks weight on the GPU, read by node 4 with `op`.
    fn attention(op: Op) -> Mock {
        let input = T {
            input: true,
            ..T::default()
        };
        Mock {
            tensors: vec![
                input.clone(),
                input.clone(),
                input,
                T {
                    buft: Some(0),
                    ..T::default()
                },
                T {
                    srcs: vec![0, 1, 2, 3],
                    op: Some(op),
                    ..T::default()
                },
            ],
            leafs: vec![0, 1, 2, 3],
            nodes: vec![4],
        }
    }

    #[test]
    fn flash_attention_follows_its_sinks_only_by_policy() {
        let b = Two {
            gpu_refuses: vec![],
            offload: false,
        };
        let follows = run_with(&attention(Op::FlashAttnExt), &b, POLICY).unwrap();
        assert_eq!(follows[&4], 0, "placed next to its sinks");
        let ignores = Policy {
            flash_attn_follows_weights: false,
        };
        let m = run_with(&attention(Op::FlashAttnExt), &b, ignores).unwrap();
        assert_eq!(m[&4], 1, "placed where most of its sources are");
        // ROPE never follows its frequency table; other ops always follow their weights
        assert_eq!(run(&attention(Op::Rope), &b).unwrap()[&4], 1);
        assert_eq!(run_with(&attention(Op::Mul), &b, ignores).unwrap()[&4], 0);
    }

    #[test]
    fn ops_follow_their_weights_and_views_their_source() {
        let m = run(
            &chain(0),
            &Two {
                gpu_refuses: vec![],
                offload: false,
            },
        )
        .unwrap();
        assert_eq!(m[&0], 1, "inputs start on the CPU");
        assert_eq!((m[&1], m[&2]), (0, 0), "weights run where they are");
        assert_eq!((m[&3], m[&4], m[&5]), (0, 0, 0));
    }

    #[test]
    fn host_weights_stay_on_the_cpu_unless_offloaded() {
        let m = run(
            &chain(1),
            &Two {
                gpu_refuses: vec![],
                offload: false,
            },
        )
        .unwrap();
        assert_eq!((m[&3], m[&4]), (1, 1));
        let m = run(
            &chain(1),
            &Two {
                gpu_refuses: vec![],
                offload: true,
            },
        )
        .unwrap();
        assert_eq!(m[&3], 0, "op offload takes the matmul to the GPU");
    }

    #[test]
    fn a_refused_op_falls_back_to_a_backend_that_runs_it() {
        let m = run(
            &chain(0),
            &Two {
                gpu_refuses: vec![4],
                offload: false,
            },
        )
        .unwrap();
        assert_eq!((m[&3], m[&4]), (0, 1));
    }

    #[test]
    fn a_preallocated_tensor_no_backend_can_use_is_an_error() {
        let mut g = chain(0);
        g.tensors[3].buft = Some(7);
        assert_eq!(
            run(
                &g,
                &Two {
                    gpu_refuses: vec![],
                    offload: false
                }
            ),
            Err(AssignError::Preallocated { tensor: 3 })
        );
    }

    #[test]
    fn user_assignments_are_kept() {
        let g = chain(0);
        let mut map = HashMap::from([(4, 1)]);
        assign(
            &g,
            &Two {
                gpu_refuses: vec![],
                offload: false,
            },
            POLICY,
            &mut map,
        )
        .unwrap();
        assert_eq!(map[&4], 1);
        assert!(buffer_supported(
            &g,
            &Two {
                gpu_refuses: vec![],
                offload: false
            },
            &map,
            5,
            1
        ));
    }
}
