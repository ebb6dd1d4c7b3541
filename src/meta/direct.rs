//! The direct path of the AllReduce (forced only, until measured on GPUs): sub-graphs write
//! their partials into plan-owned slots and every device adds all of them, read in place, into
//! its own target; for devices that compute on each other's memory.

use std::ptr;

use super::arena::GraphArena;
use super::reduction::{OutOfMemory, Path, Reduction, RunAll};
use super::scratch::{add_node, chain_graph, scratch_header, slot_size, Refresh, Scratch};
use crate::abi::*;
use ggml_backend_rs_core::exchange;

/// The direct path's memory and operations for the direct cuts of one plan.
///
/// Each device's sub-graph writes its partial sum into a slot of its scratch memory instead of
/// the target (the plan's clone of the target's header, [`Planned::output`]); after it, every
/// device waits for the others' sub-graphs (one event each) and one graph on the device adds
/// all partials — read from the other devices' memory — into its target. One cross-device wait
/// per device and cut, no copies.
///
/// Slot reuse: direct cut `d` of a plan writes partial slot `d % 2` (slot 2 for the last one
/// when the plan has an odd number), so the next write to a slot on device k comes two direct
/// cuts later, after k waited at the cut in between for device j's sub-graph, which j queued
/// after its add of the slot's previous partials. Plans with one direct cut use another path.
/// Intermediate sums (more than two devices) live in further slots of the adding device.
pub struct DirectPlan {
    scratch: Scratch,
    headers: Headers,
    _arena: GraphArena,
    cuts: Vec<DirectCut>,
}

pub(super) struct DirectCut {
    /// Per device: where its sub-graph writes its partial sum.
    partials: Vec<Tensor>,
    /// Per device: the adds of all partials into its target.
    graphs: Vec<Graph>,
    /// Headers to bring up to date before a run (see [`Refresh`]).
    refresh: Vec<(usize, Tensor, Refresh)>,
}

pub(super) fn plan_direct(
    backends: &[Backend],
    reductions: &mut [Reduction],
) -> Result<Option<DirectPlan>, OutOfMemory> {
    let n = backends.len();
    let need: Vec<usize> = (0..reductions.len())
        .filter(|&c| reductions[c].path == Path::Direct)
        .collect();
    if n < 2 || need.is_empty() {
        return Ok(None);
    }
    let ring = if need.len() % 2 == 1 { 3 } else { 2 };
    let temps = n - 2;
    let slot_bytes = slot_size(backends, reductions, &need);
    let scratch = Scratch::alloc(backends, ring + temps, slot_bytes)?;
    let arena = GraphArena::new(need.len() * n, n - 1);
    let mut headers = Headers::new();
    let mut cuts = Vec::with_capacity(need.len());
    for (d, &c) in need.iter().enumerate() {
        let targets = &reductions[c].targets;
        let slot = if ring == 3 && d + 1 == need.len() {
            2
        } else {
            d % 2
        };
        let mut refresh = Vec::new();
        let partials: Vec<Tensor> = (0..n)
            .map(|j| {
                let mut h = targets[j].header();
                h.view_src = ptr::null_mut();
                h.view_offs = 0;
                scratch.place(&mut h, j, slot);
                let (i, t) = headers.push(h);
                refresh.push((i, targets[j], Refresh::Partial));
                t
            })
            .collect();
        let mut graphs = Vec::with_capacity(n);
        for (j, &target) in targets.iter().enumerate() {
            let mut made = 0;
            let mut nodes = Vec::with_capacity(n - 1);
            let root = exchange::reference_expr(partials.clone(), |a, b| {
                made += 1;
                let dst = if made == n - 1 {
                    target
                } else {
                    let mut h = scratch_header(target);
                    scratch.place(&mut h, j, ring + made - 1);
                    let (i, t) = headers.push(h);
                    refresh.push((i, target, Refresh::Layout));
                    t
                };
                let (i, node) = headers.push(add_node(dst, a, b));
                refresh.push((i, dst, Refresh::Node));
                nodes.push(node);
                node
            });
            debug_assert!(root.is_some() && made == n - 1);
            graphs.push(chain_graph(&arena, &nodes));
        }
        reductions[c].direct = Some(cuts.len());
        cuts.push(DirectCut {
            partials,
            graphs,
            refresh,
        });
    }
    Ok(Some(DirectPlan {
        scratch,
        headers,
        _arena: arena,
        cuts,
    }))
}

impl DirectPlan {
    /// Brings direct cut `d`'s headers up to its targets' shapes and memory.
    pub(super) fn prepare(&mut self, d: usize) {
        self.headers.refresh(&self.cuts[d].refresh);
    }

    /// Where device `dev`'s sub-graph writes its partial sum of direct cut `d`.
    pub(super) fn partial(&self, d: usize, dev: usize) -> Tensor {
        self.cuts[d].partials[dev]
    }

    /// The bytes of a scratch slot: the largest target when the plan was built.
    pub(super) fn slot_bytes(&self) -> usize {
        self.scratch.slot_bytes
    }

    /// Runs direct cut `d`: every device waits for the others' sub-graphs (their `events`,
    /// recorded here) and adds all partials into its target.
    pub(super) fn run(
        &self,
        d: usize,
        backends: &[Backend],
        events: &[Event],
        runner: &mut dyn RunAll,
    ) -> ggml_status {
        for (b, &e) in backends.iter().zip(events) {
            b.event_record(e);
        }
        for (j, b) in backends.iter().enumerate() {
            for (k, &e) in events.iter().enumerate() {
                if k != j {
                    b.event_wait(e);
                }
            }
        }
        runner.run_all(&self.cuts[d].graphs)
    }
}
