//! A graph's plan: how the meta backend runs one ggml graph on its devices. The graph's nodes
//! with their per-device tensors, cut after every node whose devices hold partial sums; per cut
//! the AllReduce that follows (its path, and the epilogue our kernel computes with it); between
//! cuts one ggml graph per device (`SubGraph`), and the same graphs behind the marker for a
//! capture (`step`). A plan records what it was built from (`Stamp`) and what it read of its
//! graph (`Assumed`) so that the backend reuses it only while both hold.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ptr;

use super::allreduce::{self, Planned, Reducer};
use super::arena::GraphArena;
use super::buffer;
use super::cuda::StepGraph;
use super::device::MetaDevice;
use super::epilogue::{Epilogue, NormEpilogue};
use super::facts;
use super::reduction::OutOfMemory;
use super::slices;
use super::split::Split;
use super::step::{self, Step};
use crate::abi::log::log_info;
use crate::abi::*;
use ggml_backend_rs_core::{plan, Op};

/// A run of nodes between two cuts: one ggml graph per device over its tensors.
pub(super) struct SubGraph {
    /// Per device, tensors to zero before the sub-graph runs (see `empty_contraction`): where
    /// to write (the node, or its direct-path partial slot) and the node (whose size counts:
    /// the slot's header is brought up to date only when its cut is prepared).
    pub(super) zero: Vec<(usize, Tensor, Tensor)>,
    pub(super) graphs: Vec<Graph>,
    /// The same graphs behind the plan's marker, queued while the step is captured (see
    /// `step`); none where the plan is never captured.
    pub(super) capture: Vec<Graph>,
    /// Index into `GraphPlan::reductions`: the AllReduce after this sub-graph.
    pub(super) reduce: Option<usize>,
}

/// The generations of the meta devices whose splits and per-device tensors a plan was built
/// from: its own device, and any other whose buffers hold its nodes or their sources.
pub(super) struct Stamp(Vec<(&'static MetaDevice, u64)>);

impl Stamp {
    fn new(dev: &'static MetaDevice) -> Stamp {
        Stamp(vec![(dev, dev.generation())])
    }

    /// Records `dev`'s generation when first seen (before the plan reads its tensors: a change
    /// made while planning must make the plan stale, not current).
    fn add(&mut self, dev: &'static MetaDevice) {
        if !self.0.iter().any(|(d, _)| ptr::eq(*d, dev)) {
            self.0.push((dev, dev.generation()));
        }
    }

    pub(super) fn current(&self) -> bool {
        self.0.iter().all(|(d, g)| d.generation() == *g)
    }
}

/// A fresh identity for a sub-graph. Only the meta backend's own simple backends see its
/// sub-graphs, so their identities need only differ from each other: they are counted here,
/// from 2^63, apart from ggml's counter (`ggml_graph_next_uid`, which the scheduler's graphs take
/// theirs from, and which a plugin cannot rely on its host to export).
fn next_sub_graph_uid() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1 << 63);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

pub(super) struct GraphPlan {
    nodes: Vec<usize>,
    /// The identity of the graph the sub-graphs' identities were issued for (see `follow`).
    uid: u64,
    pub(super) stamp: Stamp,
    assumed: Assumed,
    /// Holds the sub-graphs' ggml graphs; dropped with the plan (after them).
    pub(super) subgraphs: Vec<SubGraph>,
    /// The AllReduces of the cuts, with the memory and operations their paths own.
    pub(super) reductions: Planned,
    /// Host zeros for `SubGraph::zero` (uploaded asynchronously, so they live with the plan).
    pub(super) zeros: Vec<u8>,
    /// Whether the step is captured as one CUDA graph, and the graph.
    pub(super) step: Step<StepGraph>,
    /// The first node of the `capture` graphs (see `step::mark`).
    pub(super) marker: Option<Tensor>,
    _arena: GraphArena,
}

impl GraphPlan {
    /// Whether this plan was built for exactly the nodes of `g`.
    pub(super) fn is_for(&self, g: Graph) -> bool {
        self.nodes.len() == g.n_nodes()
            && g.nodes()
                .zip(&self.nodes)
                .all(|(t, &a)| t.as_ptr() as usize == a)
    }

    /// Whether `g` (whose nodes `is_for` matched) is still the graph the plan was built for in
    /// what the plan read of it besides the addresses ([`Assumed`]). ggml's scheduler renews a
    /// graph's identity whenever it may have changed, so an identity seen before needs no
    /// check; a new one, or none, does.
    pub(super) fn still_for(&self, g: Graph) -> bool {
        (g.uid() != 0 && g.uid() == self.uid) || self.assumed.hold(g)
    }

    /// Gives the sub-graphs identities that say what the caller's graph says. ggml's scheduler
    /// renews a graph's identity whenever its nodes may have changed (shapes, addresses), and a
    /// backend that sees a graph's identity again reuses what it prepared for it (the CUDA
    /// backend skips comparing its nodes, which it does for a graph without identity on every
    /// launch; the RPC client asks its server to run the graph it holds again). While
    /// `uid` stays the same the sub-graphs keep theirs; a new one gives them new ones; a graph
    /// without identity leaves them without.
    pub(super) fn follow(&mut self, uid: u64) {
        if uid != 0 && uid == self.uid {
            return;
        }
        self.uid = uid;
        for g in self.subgraphs.iter().flat_map(|sg| &sg.graphs) {
            g.set_uid(if uid == 0 { 0 } else { next_sub_graph_uid() });
        }
    }

    /// The key of the plan's graph ([`key`]).
    pub(super) fn key(&self) -> u64 {
        key(&self.nodes)
    }

    /// Whether the memory the plan owns still covers the tensors (the same graph structure
    /// can come back with larger shapes).
    pub(super) fn fits(&self) -> bool {
        self.reductions.fits() && zero_bytes(&self.subgraphs) <= self.zeros.len()
    }
}

/// A key for the graph whose node addresses are `nodes` (the plan cache remembers the graphs
/// whose plans it dropped by it).
pub(super) fn key(nodes: &[usize]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    nodes.hash(&mut h);
    h.finish()
}

/// What a plan read of its graph besides the node addresses (`GraphPlan::is_for`) and the
/// splits (`Stamp`): the use counts its decisions and the device graphs depend on (whether a cut
/// fuses the add and norm behind it, and whether it keeps the sum; the counts the CUDA backend
/// reads for fusing ops), and each fused norm's epsilon (the AllReduce's epilogue computes the
/// norm with it, on every path). Any of them can change with the nodes at the same addresses,
/// e.g. a consumer added in another backend's part of the graph.
struct Assumed {
    /// (node address, its use count).
    uses: Vec<(usize, UseCount)>,
    /// (index of a norm node in the graph, its first parameter).
    params: Vec<(usize, i32)>,
}

/// How often a tensor is used as a source: as ggml recorded it for the whole graph (the
/// scheduler hands over views of it, and consumers in other backends' splits count too), else
/// counted within the graph handed over.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum UseCount {
    Recorded(i32),
    Counted(i32),
}

impl UseCount {
    /// The count of the tensor at `address` in `g`; `within` holds `g`'s own counts, made on
    /// first need (ggml records every node's count in the graphs it builds).
    fn of(g: Graph, address: usize, within: &mut Option<HashMap<usize, i32>>) -> UseCount {
        match g.recorded_use_count_at(address) {
            Some(n) => UseCount::Recorded(n),
            None => {
                let w = within.get_or_insert_with(|| count_within(g.nodes()));
                UseCount::Counted(w.get(&address).copied().unwrap_or(0))
            }
        }
    }

    fn get(self) -> i32 {
        match self {
            UseCount::Recorded(n) | UseCount::Counted(n) => n,
        }
    }
}

impl Assumed {
    /// Whether `g`, whose nodes are at the plan's addresses, has what the plan read.
    fn hold(&self, g: Graph) -> bool {
        let mut within = None;
        self.uses
            .iter()
            .all(|&(a, n)| UseCount::of(g, a, &mut within) == n)
            && self
                .params
                .iter()
                .all(|&(i, p)| i < g.n_nodes() && g.node(i).op_params()[0] == p)
    }
}

/// The parts of a graph a plan reads besides its nodes and their splits, remembering what was
/// read ([`Assumed`]).
struct GraphReads {
    g: Graph,
    /// The graph's own use counts, once needed (see [`UseCount::of`]).
    within: RefCell<Option<HashMap<usize, i32>>>,
    read: RefCell<Assumed>,
}

impl GraphReads {
    fn new(g: Graph) -> GraphReads {
        GraphReads {
            g,
            within: RefCell::new(None),
            read: RefCell::new(Assumed {
                uses: Vec::new(),
                params: Vec::new(),
            }),
        }
    }

    /// How often `t` is used as a source (see [`UseCount`]).
    fn uses(&self, t: Tensor) -> i32 {
        let a = t.as_ptr() as usize;
        let n = UseCount::of(self.g, a, &mut self.within.borrow_mut());
        self.read.borrow_mut().uses.push((a, n));
        n.get()
    }

    /// The epsilon of RMS norm node `rms`, one of the graph's nodes (were it not, no graph
    /// would hold what the plan read).
    fn eps(&self, rms: Tensor) -> f32 {
        let p = rms.op_params()[0];
        let i = self.g.nodes().position(|t| t == rms).unwrap_or(usize::MAX);
        self.read.borrow_mut().params.push((i, p));
        f32::from_bits(p as u32)
    }

    fn into_assumed(self) -> Assumed {
        let mut a = self.read.into_inner();
        a.uses.sort_unstable();
        a.uses.dedup();
        a
    }
}

/// How often each of `nodes` is used as a source by the others.
fn count_within(nodes: impl Iterator<Item = Tensor>) -> HashMap<usize, i32> {
    let mut uses = HashMap::new();
    for t in nodes {
        for s in t.srcs() {
            *uses.entry(s.as_ptr() as usize).or_insert(0) += 1;
        }
    }
    uses
}

/// The nodes of a graph that run on the devices.
struct DeviceNodes {
    /// Each node with its per-device tensors.
    kept: Vec<(Tensor, Vec<Tensor>)>,
    /// Per kept node: whether it is a cut point (its partial sums are reduced after it).
    reduce_at: Vec<bool>,
    stamp: Stamp,
}

/// Picks the nodes of `all` that run on the devices (views and graph inputs outside meta
/// buffers do not), with their per-device tensors, and where the graph is cut: after a node
/// whose devices hold partial sums, or after the linear tail behind it.
fn device_nodes(
    dev: &'static MetaDevice,
    n: usize,
    all: &[Tensor],
    uses: &GraphReads,
) -> Result<DeviceNodes, String> {
    let mut stamp = Stamp::new(dev);
    let mut kept: Vec<(Tensor, Vec<Tensor>)> = Vec::with_capacity(all.len());
    let mut reduce_at: Vec<bool> = Vec::new();
    let mut i = 0;
    while i < all.len() {
        let t = all[i];
        i += 1;
        let Some(mb) = slices::placed(t) else {
            if t.is_view_op() || t.op_kind() == Some(Op::None) {
                continue;
            }
            return Err(format!(
                "meta backend: node '{}' ({}) is not in a meta buffer",
                t.name_string(),
                t.op_desc()
            ));
        };
        // (the placement step of the memory the node reads, then its per-device tensors made
        // whole, before the stamp reads the device's generation)
        let held: Vec<_> = t.srcs().filter_map(slices::placed).collect();
        slices::complete_sources(&mb, t)?;
        mb.sync_flags(t);
        stamp.add(mb.dev);
        for s in held {
            stamp.add(s.dev);
        }
        let d = facts::derived(t)?;
        let simple = slices::simple_tensors(&mb, t)
            .ok_or_else(|| format!("meta backend: node '{}' was not allocated", t.name_string()))?;
        kept.push((t, simple));
        reduce_at.push(false);
        // One device holds whole sums: no cut, the graph runs as one sub-graph.
        if !d.reduce || n == 1 {
            continue;
        }
        // Partial sums: reduce after the linear tail that MoE layers put behind the matmul
        // (bias per expert, router weights, sum over the selected experts), so the AllReduce
        // moves the smallest tensor.
        let tail = plan::moe_tail(&NodeView { uses }, all, i - 1);
        for &k in &tail {
            let tk = all[k];
            let mbk = slices::placed(tk).ok_or("meta backend: MoE tail outside meta buffers")?;
            let held: Vec<_> = tk.srcs().filter_map(slices::placed).collect();
            slices::complete_sources(&mbk, tk)?;
            mbk.sync_flags(tk);
            stamp.add(mbk.dev);
            for s in held {
                stamp.add(s.dev);
            }
            facts::derived(tk)?;
            let sk = slices::simple_tensors(&mbk, tk).ok_or_else(|| {
                format!(
                    "meta backend: node '{}' was not allocated",
                    tk.name_string()
                )
            })?;
            kept.push((tk, sk));
            reduce_at.push(false);
        }
        i += tail.len();
        *reduce_at.last_mut().expect("non-empty") = true;
    }
    // A partial bias (e.g. ffn_down_exps.bias) must be absorbed before the reduction: check
    // that no node outside a tail consumes a partial source.
    let kept_nodes: Vec<Tensor> = kept.iter().map(|(t, _)| *t).collect();
    let view = NodeView { uses };
    if let Err(e) = plan::check_partial_consumers(&view, &kept_nodes, &reduce_at)? {
        return Err(format!(
            "meta backend: node '{}' ({}) combines the partial sum '{}' with full values",
            e.node.name_string(),
            e.node.op_desc(),
            e.partial.name_string()
        ));
    }
    Ok(DeviceNodes {
        kept,
        reduce_at,
        stamp,
    })
}

/// Why a graph has no plan.
pub(super) enum PlanError {
    /// The graph is not one the meta backend can split (a defect or an unsupported model).
    Graph(String),
    /// A device could not allocate what the plan needs.
    Memory(OutOfMemory),
}

impl From<String> for PlanError {
    fn from(e: String) -> Self {
        PlanError::Graph(e)
    }
}

/// The plan of `g` (whose node addresses are `nodes`) for the meta device `dev`, whose simple
/// backends are `simple` and whose cuts `reducer` reduces. Four passes: the nodes that run on
/// the devices and where the graph is cut (`device_nodes`), the runs of nodes between cuts
/// (`plan::sub_graphs`), each cut's AllReduce with what it takes over from the graph
/// (`reductions`), and one ggml graph per device and run (`device_graphs`).
pub(super) fn build_plan(
    dev: &'static MetaDevice,
    simple: &[Backend],
    reducer: &Reducer,
    g: Graph,
    nodes: Vec<usize>,
) -> Result<GraphPlan, PlanError> {
    let n = simple.len();
    let all: Vec<Tensor> = g.nodes().collect();
    let uses = GraphReads::new(g);
    let DeviceNodes {
        kept,
        reduce_at,
        stamp,
    } = device_nodes(dev, n, &all, &uses)?;

    // A matmul whose contraction slice is empty on a device (that device holds none of the
    // weight's columns) has a zero partial sum there. It is not run (backends need not accept
    // empty operands); its output is zeroed instead, at its place in the graph: it starts a
    // sub-graph of its own, so the zeroing comes after whatever earlier nodes wrote there.
    let zeroed: Vec<Vec<usize>> = kept
        .iter()
        .map(|(_, simple)| (0..n).filter(|&j| empty_contraction(simple[j])).collect())
        .collect();
    if debug_enabled() {
        log_nodes(&kept, &reduce_at, &zeroed)?;
    }
    let zeroed_anywhere: Vec<bool> = zeroed.iter().map(|z| !z.is_empty()).collect();
    let bounds: Vec<(usize, usize, bool)> = plan::sub_graphs(&reduce_at, &zeroed_anywhere)
        .into_iter()
        .map(|b| (b.start, b.end, b.reduce))
        .collect();
    // The AllReduces first: the direct path moves each cut's partial sums out of the graph's
    // memory (`Planned::output`), which the sub-graphs must then write, and an AllReduce that
    // takes over the nodes behind its cut takes them out of the next sub-graph.
    let (planned, taken) = reductions(reducer, simple, &kept, &bounds, &uses)?;
    let blocker = step::blocker(reducer, &kept, &zeroed_anywhere, &planned);
    // where the step can be captured, room for the capture graphs too, one node longer (the
    // marker)
    let capturable = blocker.is_none();
    let max_len = bounds.iter().map(|b| b.1 - b.0).max().unwrap_or(0);
    let arena = GraphArena::new(
        bounds.len() * n * (1 + usize::from(capturable)),
        max_len + usize::from(capturable),
    );
    let marker = capturable.then(|| arena.marker());
    let parts = Parts {
        kept: &kept,
        zeroed: &zeroed,
        taken: &taken,
        uses: &uses,
        planned: &planned,
    };
    let subgraphs = device_graphs(&parts, &bounds, n, &arena, marker);
    let zeros = vec![0; zero_bytes(&subgraphs)];
    if debug_enabled() {
        log_plan(blocker.as_deref(), reducer, &planned);
    }
    Ok(GraphPlan {
        nodes,
        uid: 0,
        stamp,
        assumed: uses.into_assumed(),
        subgraphs,
        reductions: planned,
        zeros,
        step: Step::new(blocker),
        marker,
        _arena: arena,
    })
}

/// The host zeros the sub-graphs' zeroed outputs take: as many bytes as the largest.
fn zero_bytes(subgraphs: &[SubGraph]) -> usize {
    subgraphs
        .iter()
        .flat_map(|sg| &sg.zero)
        .map(|(_, _, like)| like.nbytes())
        .max()
        .unwrap_or(0)
}

/// Each cut's AllReduce (`bounds` marks the runs that end in one), with the nodes behind it
/// that its epilogue computes where the path takes them over; and which of `kept` no sub-graph
/// runs for that reason.
fn reductions(
    reducer: &Reducer,
    simple: &[Backend],
    kept: &[(Tensor, Vec<Tensor>)],
    bounds: &[(usize, usize, bool)],
    uses: &GraphReads,
) -> Result<(Planned, Vec<bool>), PlanError> {
    let kept_nodes: Vec<Tensor> = kept.iter().map(|(t, _)| *t).collect();
    let view = NodeView { uses };
    let mut fusions = Vec::new();
    let mut cuts = Vec::new();
    for (i, &(_, b, r)) in bounds.iter().enumerate() {
        if !r {
            continue;
        }
        let next_end = bounds.get(i + 1).map_or(b, |nb| nb.1);
        let fused = plan::fusion(&view, &kept_nodes, b - 1, next_end)
            .and_then(|f| epilogue(kept, b - 1, f, uses));
        let (f, e) = fused.map_or((None, None), |(f, e)| (Some(f), Some(e)));
        fusions.push(f);
        cuts.push((kept[b - 1].1.clone(), e));
    }
    let planned = allreduce::plan(reducer, simple, cuts).map_err(PlanError::Memory)?;
    let mut taken = vec![false; kept.len()];
    for (c, f) in fusions.iter().enumerate() {
        if let Some(f) = f.filter(|_| planned.fused(c)) {
            taken[f.nodes()].iter_mut().for_each(|x| *x = true);
        }
    }
    Ok((planned, taken))
}

/// What the sub-graphs are built from: the kept nodes with their per-device tensors, per node
/// the devices whose output is zeroed instead of computed and whether an AllReduce computes it,
/// ggml's use counts, and the cuts' AllReduces.
struct Parts<'a> {
    kept: &'a [(Tensor, Vec<Tensor>)],
    zeroed: &'a [Vec<usize>],
    taken: &'a [bool],
    uses: &'a GraphReads,
    planned: &'a Planned,
}

/// One ggml graph per device for each run of nodes in `bounds`, in `arena`; with `marker`
/// (the step can be captured) the same graphs again behind it.
fn device_graphs(
    p: &Parts,
    bounds: &[(usize, usize, bool)],
    n: usize,
    arena: &GraphArena,
    marker: Option<Tensor>,
) -> Vec<SubGraph> {
    let mut subgraphs = Vec::with_capacity(bounds.len());
    let mut n_cuts = 0;
    for &(a, b, r) in bounds {
        let reduce = r.then(|| {
            n_cuts += 1;
            n_cuts - 1
        });
        // where device j's node writes: its own tensor, or the direct path's partial slot
        let out = |k: usize, j: usize| match reduce {
            Some(c) if k + 1 == b => p.planned.output(c, j).unwrap_or(p.kept[k].1[j]),
            _ => p.kept[k].1[j],
        };
        let mut graphs = Vec::with_capacity(n);
        let mut capture = Vec::new();
        for j in 0..n {
            let fill = |graph: Graph| {
                for (k, (t, _)) in p.kept.iter().enumerate().take(b).skip(a) {
                    if !p.zeroed[k].contains(&j) && !p.taken[k] {
                        graph.push_node(out(k, j));
                        graph.note_use_count(out(k, j), p.uses.uses(*t));
                    }
                }
                graph
            };
            let graph = fill(arena.graph(b - a));
            if let Some(mk) = marker {
                let behind = arena.graph(b - a + 1);
                if graph.n_nodes() > 0 {
                    behind.push_node(mk);
                }
                capture.push(fill(behind));
            }
            graphs.push(graph);
        }
        let zero = p.zeroed[a]
            .iter()
            .map(|&j| (j, out(a, j), p.kept[a].1[j]))
            .collect();
        subgraphs.push(SubGraph {
            graphs,
            capture,
            zero,
            reduce,
        });
    }
    subgraphs
}

/// The plan log's lines on the step's capture and each cut's AllReduce (`GGML_META_DEBUG=1`).
fn log_plan(blocker: Option<&str>, reducer: &Reducer, planned: &Planned) {
    match (blocker, reducer.cuda()) {
        (_, None) => {}
        (None, Some(_)) => log_info!(
            "meta plan: the step can be captured as one CUDA graph (from the second run of the \
             graph's uid)"
        ),
        (Some(why), Some(_)) => log_info!("meta plan: the step runs eagerly: {why}"),
    }
    for (c, r) in planned.reductions.iter().enumerate() {
        let takes = match &r.epilogue {
            Some(e) if e.norm.is_some() => " + add, rms_norm, mul",
            Some(_) => " + add",
            None => "",
        };
        log_info!(
            "meta plan: AllReduce {c:3} of '{}' ({} bytes): {:?}{takes}",
            r.targets[0].name_string(),
            r.targets[0].nbytes(),
            r.path
        );
    }
}

/// The per-device tensors of fusion `f` behind the cut after `kept[cut]`, when our kernel can
/// compute them (contiguous f32 everywhere); the norm is left to the graph when only it cannot.
fn epilogue(
    kept: &[(Tensor, Vec<Tensor>)],
    cut: usize,
    mut f: plan::Fusion,
    reads: &GraphReads,
) -> Option<(plan::Fusion, Epilogue)> {
    use super::cuda::CudaAllReduce;
    let per_device = |t: Tensor| {
        let held = slices::placed(t)?;
        slices::simple_tensors(&held, t)
    };
    let ok = |ts: &[Tensor]| ts.iter().all(|&t| CudaAllReduce::supports(t));
    let (add, add_out) = &kept[f.add];
    let residual = per_device(add.src(f.residual_slot)?)?;
    if !ok(&kept[cut].1) || !ok(add_out) || !ok(&residual) {
        return None;
    }
    let norm = f.norm.and_then(|k| {
        let (rms, _) = &kept[k];
        let (mul, out) = &kept[k + 1];
        let weight = per_device(mul.src(1)?)?;
        (ok(&weight) && ok(out)).then(|| NormEpilogue {
            weight,
            out: out.clone(),
            eps: reads.eps(*rms),
        })
    });
    if norm.is_none() {
        f.norm = None;
    }
    let e = Epilogue {
        residual,
        add_out: add_out.clone(),
        norm,
        keeps_sum: f.keeps_sum,
    };
    Some((f, e))
}

/// `GGML_META_DEBUG`: every kept node of a plan, its split and whether the graph is cut after it.
fn log_nodes(
    kept: &[(Tensor, Vec<Tensor>)],
    reduce_at: &[bool],
    zeroed: &[Vec<usize>],
) -> Result<(), String> {
    for (k, (t, _)) in kept.iter().enumerate() {
        let d = facts::derived(*t)?;
        log_info!(
            "meta plan: {:4} {:24} {:16} {}{}{}",
            k,
            t.name_string(),
            t.op_desc(),
            d.split.describe(),
            if reduce_at[k] {
                "  -> AllReduce"
            } else if d.reduce {
                "  (partial sums)"
            } else {
                ""
            },
            if zeroed[k].is_empty() {
                String::new()
            } else {
                format!("  (zero on devices {:?})", zeroed[k])
            }
        );
    }
    Ok(())
}

/// A matmul with a non-empty result whose weight slice on this device is empty.
fn empty_contraction(t: Tensor) -> bool {
    matches!(t.op_kind(), Some(Op::MulMat | Op::MulMatId))
        && t.nelements() > 0
        && t.src(0).is_some_and(|w| w.nelements() == 0)
}

/// `GGML_META_DEBUG=1` logs every graph plan (nodes, their splits and the AllReduce points)
/// and every weight placed whole instead of as its policy answered (`slices::settle`).
pub(super) fn debug_enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("GGML_META_DEBUG").is_ok_and(|v| v != "0"))
}

/// The graph's nodes as the core's plan decisions see them.
struct NodeView<'a> {
    uses: &'a GraphReads,
}

impl plan::Nodes for NodeView<'_> {
    type Node = Tensor;
    type Error = String;

    fn op(&self, n: Tensor) -> Option<Op> {
        n.op_kind()
    }
    fn src(&self, n: Tensor, slot: usize) -> Option<Tensor> {
        n.src(slot)
    }
    fn srcs(&self, n: Tensor) -> impl Iterator<Item = Tensor> + '_ {
        n.srcs_by_slot().map(|(_, s)| s)
    }
    fn uses(&self, n: Tensor) -> i32 {
        self.uses.uses(n)
    }
    fn split(&self, n: Tensor) -> Result<Option<Split>, String> {
        if buffer::holding(n).is_none() {
            return Ok(None);
        }
        facts::derived(n).map(|d| Some(d.split))
    }
    fn reduces(&self, n: Tensor) -> Result<bool, String> {
        facts::derived(n).map(|d| d.reduce)
    }
    fn ne(&self, n: Tensor, dim: usize) -> i64 {
        n.ne(dim)
    }
    fn nb(&self, n: Tensor, dim: usize) -> usize {
        n.nb(dim)
    }
    fn view_offs(&self, n: Tensor) -> usize {
        n.view_offs()
    }
}
