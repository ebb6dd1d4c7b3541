//! The copies path of the AllReduce: any backend. Asynchronous copies between devices and
//! in-place adds, staged as `exchange::schedule` says (butterfly for powers of two,
//! gather-and-add otherwise), into scratch slots the plan owns; see `allreduce` for how copies
//! and adds are ordered without waiting on the host.

use super::arena::GraphArena;
use super::reduction::{OutOfMemory, Path, Reduction, RunAll};
use super::scratch::{add_node, chain_graph, scratch_header, slot_size, Refresh, Scratch};
use crate::abi::log::ggml_assert;
use crate::abi::*;
use ggml_backend_rs_core::exchange::{self, Loc};

/// The copies path's memory and pre-built operations for all cuts of one plan.
pub struct CopyPlan {
    /// Per device: `slots(n)` slots in two sets.
    scratch: Scratch,
    /// The slot and add-node headers the graphs point at.
    headers: Headers,
    _arena: GraphArena,
    cuts: Vec<CutOps>,
    /// AllReduces run so far (selects the slot set).
    runs: usize,
}

/// The copies path of one cut.
struct CutOps {
    stages: Vec<StageOps>,
    /// Headers to bring up to date before a run (see [`Refresh`]).
    refresh: Vec<(usize, Tensor, Refresh)>,
}

struct StageOps {
    /// (from, to, source target, destination slot per slot set)
    transfers: Vec<(usize, usize, Tensor, [Tensor; 2])>,
    /// Per device: the receivers of its value in this stage, which it waits for before its adds.
    waits: Vec<Vec<usize>>,
    receivers: Vec<usize>,
    /// Per slot set, per device: the device's adds of this stage as one graph.
    graphs: [Vec<Graph>; 2],
}

/// The copies path's plan, for the cuts on the copies or the backend path (its fallback).
pub(super) fn plan_copies(
    backends: &[Backend],
    reductions: &mut [Reduction],
) -> Result<Option<CopyPlan>, OutOfMemory> {
    let n = backends.len();
    let need: Vec<usize> = (0..reductions.len())
        .filter(|&c| {
            matches!(reductions[c].path, Path::Copies | Path::Backend)
                && reductions[c].targets[0].nbytes() > 0
        })
        .collect();
    if n < 2 || need.is_empty() {
        return Ok(None);
    }
    let slots = exchange::slots(n);
    let schedule = exchange::schedule(n);
    let slot_bytes = slot_size(backends, reductions, &need);
    let scratch = Scratch::alloc(backends, 2 * slots, slot_bytes)?;
    let max_adds = schedule
        .iter()
        .flat_map(|s| (0..n).map(move |j| s.adds_on(j).count()))
        .max()
        .unwrap_or(1);
    let arena = GraphArena::new(need.len() * schedule.len() * n * 2, max_adds);
    let mut headers = Headers::new();
    let mut cuts = Vec::with_capacity(need.len());
    for &c in &need {
        let targets = &reductions[c].targets;
        let mut refresh = Vec::new();
        // slot headers: [set][device][slot]
        let mut slot_t = [Vec::with_capacity(n), Vec::with_capacity(n)];
        for (set, per_set) in slot_t.iter_mut().enumerate() {
            for (j, &target) in targets.iter().enumerate() {
                let mut per_dev = Vec::with_capacity(slots);
                for s in 0..slots {
                    let mut h = scratch_header(target);
                    scratch.place(&mut h, j, set * slots + s);
                    let (i, t) = headers.push(h);
                    refresh.push((i, target, Refresh::Layout));
                    per_dev.push(t);
                }
                per_set.push(per_dev);
            }
        }
        let at = |set: usize, j: usize, l: Loc| match l {
            Loc::Own => targets[j],
            Loc::Slot(s) => slot_t[set][j][s],
        };
        let mut stages = Vec::with_capacity(schedule.len());
        for stage in &schedule {
            let transfers = stage
                .transfers
                .iter()
                .map(|t| {
                    (
                        t.from,
                        t.to,
                        targets[t.from],
                        [slot_t[0][t.to][t.slot], slot_t[1][t.to][t.slot]],
                    )
                })
                .collect();
            let waits = (0..n).map(|k| stage.receivers_of(k).collect()).collect();
            let mut receivers: Vec<usize> = stage.transfers.iter().map(|t| t.to).collect();
            receivers.sort_unstable();
            receivers.dedup();
            let mut graphs = [Vec::with_capacity(n), Vec::with_capacity(n)];
            for (set, g_set) in graphs.iter_mut().enumerate() {
                for j in 0..n {
                    let nodes: Vec<Tensor> = stage
                        .adds_on(j)
                        .map(|a| {
                            let dst = at(set, j, a.dst);
                            let (h, node) =
                                headers.push(add_node(dst, at(set, j, a.a), at(set, j, a.b)));
                            refresh.push((h, dst, Refresh::Node));
                            node
                        })
                        .collect();
                    g_set.push(chain_graph(&arena, &nodes));
                }
            }
            stages.push(StageOps {
                transfers,
                waits,
                receivers,
                graphs,
            });
        }
        reductions[c].copies = Some(cuts.len());
        cuts.push(CutOps { stages, refresh });
    }
    Ok(Some(CopyPlan {
        scratch,
        headers,
        _arena: arena,
        cuts,
        runs: 0,
    }))
}

impl CopyPlan {
    /// Brings cut `c`'s headers up to its targets' shapes and memory.
    pub(super) fn prepare(&mut self, c: usize) {
        self.headers.refresh(&self.cuts[c].refresh);
    }

    /// The bytes of a scratch slot: the largest target when the plan was built.
    pub(super) fn slot_bytes(&self) -> usize {
        self.scratch.slot_bytes
    }

    /// Runs cut `c`'s stages: each stage's copies, ordered before its adds by `events` (one per
    /// device) or, without events, by synchronizing every backend.
    pub(super) fn run(
        &mut self,
        c: usize,
        backends: &[Backend],
        events: Option<&[Event]>,
        runner: &mut dyn RunAll,
    ) -> ggml_status {
        let set = self.runs % 2;
        self.runs += 1;
        for st in &self.cuts[c].stages {
            for &(from, to, src, dst) in &st.transfers {
                crate::tensor::copy_async(Some(backends[from]), backends[to], src, dst[set]);
            }
            match events {
                Some(ev) => {
                    for &j in &st.receivers {
                        backends[j].event_record(ev[j]);
                    }
                    for (k, waits) in st.waits.iter().enumerate() {
                        for &j in waits {
                            backends[k].event_wait(ev[j]);
                        }
                    }
                }
                None => backends.iter().for_each(|b| b.synchronize()),
            }
            let s = runner.run_all(&st.graphs[set]);
            if s != GGML_STATUS_SUCCESS {
                return s;
            }
        }
        GGML_STATUS_SUCCESS
    }
}

/// A pair of devices whose backends cannot copy between each other asynchronously: every copy
/// of the copies path from `from` to `to` waits for both devices and goes through the host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Declined {
    pub from: usize,
    pub to: usize,
}

/// Elements of the tensor [`CopyPlan::declined_copy`] copies between the devices.
const PROBE_ELEMENTS: usize = 16;

impl CopyPlan {
    /// The first pair of devices between which `backends` decline an asynchronous copy, found
    /// by asking for one small copy each way between this plan's scratch slots (nothing else
    /// uses them yet); `None` when every pair copies asynchronously or both ends are host
    /// memory (`host_memory`, per backend: the host then copies with memcpy). Waits for the
    /// copies it queued.
    ///
    /// A backend may have `cpy_tensor_async` and still decline it between devices (ggml-vulkan
    /// between two GPUs: "Async copy only works within the same device"), so the entry point's
    /// presence says nothing: the backends are asked.
    pub(super) fn declined_copy(
        &self,
        backends: &[Backend],
        host_memory: &[bool],
    ) -> Option<Declined> {
        let n = backends.len();
        let bytes = PROBE_ELEMENTS * std::mem::size_of::<f32>();
        ggml_assert!(
            self.scratch.slot_bytes >= bytes,
            "meta AllReduce: scratch slots of {} bytes",
            self.scratch.slot_bytes
        );
        let mut headers = Headers::new();
        let probes: Vec<Tensor> = (0..n)
            .map(|j| {
                let mut h = ggml_tensor::zeroed();
                h.type_ = GGML_TYPE_F32;
                h.ne = [PROBE_ELEMENTS as i64, 1, 1, 1];
                h.nb = [std::mem::size_of::<f32>(), bytes, bytes, bytes];
                self.scratch.place(&mut h, j, 0);
                headers.push(h).1
            })
            .collect();
        let declined = (0..n)
            .flat_map(|from| (0..n).map(move |to| Declined { from, to }))
            .filter(|p| p.from != p.to && !(host_memory[p.from] && host_memory[p.to]))
            .find(|p| {
                !crate::tensor::copy_queued(
                    Some(backends[p.from]),
                    backends[p.to],
                    probes[p.from],
                    probes[p.to],
                )
            });
        // the probes' copies are done before their headers go
        for b in backends {
            b.synchronize();
        }
        drop(headers);
        declined
    }
}
