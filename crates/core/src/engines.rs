//! The AllReduce through host memory by the GPUs' copy engines, for large partials (prefill)
//! where the GPUs cannot read each other's memory: which cuts go this way ([`transport`]),
//! their chunks ([`chunks`]), and what each GPU queues, in which order, on its two streams
//! ([`schedule`]). The meta backend's `meta::cuda` carries the schedule out op by op.
//!
//! Every GPU has an *out* stream, which copies its members' partials out to pinned host slots,
//! and its *sum* stream (the launcher's), which copies the other GPUs' partials in to its own
//! scratch and sums with the peer kernel. The host slots come in [`SETS`] sets, chunk `c`
//! using set `c % SETS`, so chunk `c + 1` goes out while chunk `c` comes in: the link carries
//! both directions at once. Events order the rest:
//!
//! * `out[p]` of a GPU, recorded on its out stream after a chunk of set `p` left: every sum
//!   stream waits for every GPU's (its own too: the sum may overwrite the partial in place)
//!   before it copies that chunk in;
//! * `in[p]` of a GPU, recorded on its sum stream after a chunk of set `p` came in: every other
//!   GPU's out stream waits for it before it overwrites those slots with chunk `c + SETS`.
//!
//! A CUDA wait takes the event's last record *issued* before it, so the order of issue (the
//! schedule's order) is part of the proof. The tests run the schedule through a model of
//! streams and events and check every hazard; `meta::cuda` issues it in the same order.
//!
//! No op waits on another GPU by spinning: a lost GPU fails the step through the driver.

/// How an AllReduce through host memory moves the partials of one cut.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// The mapped kernel (`crate::mapped::Exchange`): the fewest hops, for small partials
    /// (decode).
    Kernel,
    /// The copy engines, in chunks of up to `rows` rows ([`schedule`]): the link's bandwidth,
    /// in both directions at once, for large partials (prefill).
    Engines { rows: u64 },
}

/// The transport of a cut over `gpus` launching GPUs whose partials have `units` rows of
/// `row_bytes` bytes: the copy engines from `engines_min` bytes a partial, where more than one
/// GPU exchanges and a row fits a slot of `slot_bytes` (chunks of as many whole rows as fit);
/// else the mapped kernel.
pub fn transport(
    gpus: usize,
    units: u64,
    row_bytes: u64,
    engines_min: u64,
    slot_bytes: u64,
) -> Transport {
    let bytes = units.saturating_mul(row_bytes);
    if gpus < 2 || units == 0 || row_bytes == 0 || row_bytes > slot_bytes || bytes < engines_min {
        return Transport::Kernel;
    }
    Transport::Engines {
        rows: slot_bytes / row_bytes,
    }
}

/// The bytes a partial from which cuts go by the copy engines, from the setting
/// `GGML_META_ENGINES_MIN` (`setting`: bytes, or `off` for never; unset or unreadable: `default`).
pub fn threshold(setting: Option<&str>, default: u64) -> Option<u64> {
    match setting.map(str::trim) {
        Some("off") => None,
        Some(v) => Some(v.parse().unwrap_or(default)),
        None => Some(default),
    }
}

/// The chunks of `units` rows, up to `rows` each, in order: (first row, rows).
pub fn chunks(units: u64, rows: u64) -> impl Iterator<Item = (u64, u64)> {
    let rows = rows.max(1);
    (0..units)
        .step_by(rows.min(usize::MAX as u64) as usize)
        .map(move |first| (first, rows.min(units - first)))
}

/// Sets of host slots (and of events) that chunks take in turn: two, so one chunk goes out
/// while the one before it comes in.
pub const SETS: usize = 2;

/// Which of a GPU's streams an op is queued on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Stream {
    /// Copies the GPU's members' partials out to the host slots.
    Out,
    /// Copies the other GPUs' partials in, sums (the launcher's stream).
    Sum,
}

/// One op of the schedule, queued on one stream of one GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Wait for the GPU's members' partials (the backends' `ready` events).
    WaitReady,
    /// Wait for GPU `gpu`'s last issued record of `out[set]`.
    WaitOut { gpu: usize, set: usize },
    /// Wait for GPU `gpu`'s last issued record of `in[set]`.
    WaitIn { gpu: usize, set: usize },
    /// Copy the GPU's members' rows of `chunk` out to their host slots of `set`.
    CopyOut { chunk: usize, set: usize },
    /// Record the GPU's `out[set]`.
    RecordOut { set: usize },
    /// Copy the other GPUs' members' rows of `chunk` in from their host slots of `set` to
    /// this GPU's scratch.
    CopyIn { chunk: usize, set: usize },
    /// Record the GPU's `in[set]`.
    RecordIn { set: usize },
    /// The peer kernel over the rows of `chunk`: the sums of the GPU's members.
    Sum { chunk: usize },
}

/// An op and where it is queued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Queued {
    pub gpu: usize,
    pub stream: Stream,
    pub op: Op,
}

/// Every op of one cut over `gpus` GPUs in `chunks` chunks, in the order to issue them.
/// Per chunk: every GPU's out stream (the first chunk waits for the partials; later ones for
/// every other GPU to have copied in the chunk that last used the set), then every GPU's sum
/// stream. The last op of a GPU's streams is its `Sum` of the last chunk, after its out
/// stream's last record: recording the GPU's `done` after it covers both streams.
///
/// Between cuts the caller makes every GPU's next partials wait for every GPU's `done` (the
/// first chunks of the next cut overwrite the host slots this one read).
pub fn schedule(gpus: usize, chunks: usize) -> Vec<Queued> {
    let mut v = Vec::new();
    let mut q = |gpu, stream, op| v.push(Queued { gpu, stream, op });
    for c in 0..chunks {
        let set = c % SETS;
        for g in 0..gpus {
            if c == 0 {
                q(g, Stream::Out, Op::WaitReady);
            }
            if c >= SETS {
                for h in (0..gpus).filter(|&h| h != g) {
                    q(g, Stream::Out, Op::WaitIn { gpu: h, set });
                }
            }
            q(g, Stream::Out, Op::CopyOut { chunk: c, set });
            q(g, Stream::Out, Op::RecordOut { set });
        }
        for g in 0..gpus {
            for h in (0..gpus).filter(|&h| h != g) {
                q(g, Stream::Sum, Op::WaitOut { gpu: h, set });
            }
            q(g, Stream::Sum, Op::CopyIn { chunk: c, set });
            q(g, Stream::Sum, Op::RecordIn { set });
            // (its own out stream only before the sum, which may overwrite the partials in
            // place: the copy in need not wait for the copy out)
            q(g, Stream::Sum, Op::WaitOut { gpu: g, set });
            q(g, Stream::Sum, Op::Sum { chunk: c });
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn transport_by_size_gpus_and_rows() {
        let slot = 4 << 20;
        // decode (16 KiB) by the kernel, prefill (8 MiB) by the engines in two chunks
        assert_eq!(transport(2, 4096, 4, 1 << 20, slot), Transport::Kernel);
        let rows = (1 << 20) as u64;
        assert_eq!(
            transport(2, 512 * 4096, 4, 1 << 20, slot),
            Transport::Engines { rows }
        );
        // rows of the norm: whole rows per chunk
        assert_eq!(
            transport(2, 512, 4096 * 4, 1 << 20, slot),
            Transport::Engines { rows: 256 }
        );
        // one GPU exchanges nothing; no units, or a row larger than a slot: the kernel
        assert_eq!(transport(1, 512 * 4096, 4, 0, slot), Transport::Kernel);
        assert_eq!(transport(4, 0, 4, 0, slot), Transport::Kernel);
        assert_eq!(transport(2, 2, slot + 4, 0, slot), Transport::Kernel);
        // the threshold is inclusive; 0 sends everything by the engines
        assert_eq!(
            transport(3, 1 << 18, 4, 1 << 20, slot),
            Transport::Engines { rows }
        );
        assert_eq!(transport(2, 1, 4, 0, slot), Transport::Engines { rows });
    }

    #[test]
    fn the_threshold_is_bytes_off_or_the_default() {
        assert_eq!(threshold(None, 128), Some(128));
        assert_eq!(threshold(Some("0"), 128), Some(0));
        assert_eq!(threshold(Some(" 1048576 "), 128), Some(1 << 20));
        assert_eq!(threshold(Some("off"), 128), None);
        assert_eq!(threshold(Some("1 MiB"), 128), Some(128));
    }

    #[test]
    fn chunks_cover_every_row_once() {
        for (units, rows) in [
            (1, 1),
            (10, 3),
            (9, 3),
            (2_097_152, 1_048_576),
            (5, 8),
            (7, 0),
        ] {
            let all: Vec<_> = chunks(units, rows).collect();
            let mut next = 0;
            for &(first, n) in &all {
                assert_eq!(first, next);
                assert!(n >= 1 && n <= rows.max(1));
                next += n;
            }
            assert_eq!(next, units);
        }
        assert_eq!(chunks(0, 4).count(), 0);
    }

    /// The schedule as CUDA runs it, for `cuts` AllReduces in a row: an op starts after the
    /// op before it on its stream and, for a wait, after the last record of that event issued
    /// before the wait; a cut's `WaitReady` after every GPU's last op of the cut before (what
    /// `meta::cuda` gives: every backend waits for every GPU's `done` before its next partial).
    /// `before[i][j]`: op `i` has ended before op `j` starts.
    struct Model {
        ops: Vec<(usize, Queued)>,
        before: Vec<Vec<bool>>,
    }

    impl Model {
        fn new(gpus: usize, chunks: usize, cuts: usize) -> Model {
            let ops: Vec<(usize, Queued)> = (0..cuts)
                .flat_map(|t| schedule(gpus, chunks).into_iter().map(move |q| (t, q)))
                .collect();
            let n = ops.len();
            let mut edges: Vec<Vec<usize>> = vec![Vec::new(); n];
            let mut last_on: HashMap<(usize, Stream), usize> = HashMap::new();
            let mut last_record: HashMap<(usize, bool, usize), usize> = HashMap::new();
            let mut done_of_cut: Vec<Vec<usize>> = vec![Vec::new(); cuts];
            for (j, &(t, q)) in ops.iter().enumerate() {
                if let Some(&i) = last_on.get(&(q.gpu, q.stream)) {
                    edges[i].push(j);
                }
                last_on.insert((q.gpu, q.stream), j);
                match q.op {
                    Op::RecordOut { set } => {
                        last_record.insert((q.gpu, true, set), j);
                    }
                    Op::RecordIn { set } => {
                        last_record.insert((q.gpu, false, set), j);
                    }
                    Op::WaitOut { gpu, set } | Op::WaitIn { gpu, set } => {
                        let out = matches!(q.op, Op::WaitOut { .. });
                        let i = *last_record.get(&(gpu, out, set)).unwrap_or_else(|| {
                            panic!("op {j} {q:?} waits for an unrecorded event")
                        });
                        edges[i].push(j);
                    }
                    Op::WaitReady if t > 0 => {
                        if done_of_cut[t - 1].is_empty() {
                            done_of_cut[t - 1] =
                                (0..gpus).map(|g| last_on[&(g, Stream::Sum)]).collect();
                        }
                        for &i in &done_of_cut[t - 1] {
                            edges[i].push(j);
                        }
                    }
                    _ => {}
                }
            }
            // ops are issued in order and every edge goes forward: a closure in one pass back
            let mut before = vec![vec![false; n]; n];
            for i in (0..n).rev() {
                for &j in &edges[i] {
                    assert!(j > i);
                    let (done, later) = before.split_at_mut(j);
                    done[i][j] = true;
                    for (a, &b) in done[i].iter_mut().zip(&later[0]) {
                        *a |= b;
                    }
                }
            }
            Model { ops, before }
        }

        /// The op `op` of GPU `gpu` in cut `cut`.
        fn find_in(&self, cut: usize, gpu: usize, op: Op) -> usize {
            self.ops
                .iter()
                .position(|&(t, q)| t == cut && q.gpu == gpu && q.op == op)
                .unwrap_or_else(|| panic!("no {op:?} on GPU {gpu} in cut {cut}"))
        }

        fn find(&self, gpu: usize, op: Op) -> usize {
            self.find_in(0, gpu, op)
        }

        fn ordered(&self, a: usize, b: usize) -> bool {
            self.before[a][b]
        }
    }

    /// Most GPUs and chunks the model checks: fewer under miri, where a model of 4 GPUs and 5
    /// chunks takes a minute (it checks no unsafe code; the cases are the same logic).
    const MOST: (usize, usize) = if cfg!(miri) { (2, 3) } else { (8, 5) };

    #[test]
    fn the_schedule_has_no_race() {
        for gpus in 2..=MOST.0 {
            for n in 1..=MOST.1 {
                let m = Model::new(gpus, n, 1);
                for c in 0..n {
                    let set = c % SETS;
                    for g in 0..gpus {
                        let copy_in = m.find(g, Op::CopyIn { chunk: c, set });
                        let sum = m.find(g, Op::Sum { chunk: c });
                        for h in 0..gpus {
                            let copy_out = m.find(h, Op::CopyOut { chunk: c, set });
                            // the slots it reads hold this chunk
                            if h != g {
                                assert!(m.ordered(copy_out, copy_in), "{gpus} {n}: {c} {g} {h}");
                            }
                            // and no later chunk overwrites them before it has read them
                            for later in (c + 1..n).filter(|l| l % SETS == set) {
                                let over = m.find(h, Op::CopyOut { chunk: later, set });
                                if h != g {
                                    assert!(m.ordered(copy_in, over), "{gpus} {n}: {c} {later}");
                                }
                            }
                        }
                        // the sum reads the chunk's partials: every other member's in the
                        // scratch, its own where they are, which it may overwrite in place
                        // only after they went out
                        assert!(m.ordered(copy_in, sum));
                        assert!(m.ordered(m.find(g, Op::CopyOut { chunk: c, set }), sum));
                        // the scratch is overwritten by the next chunk only after this sum
                        if c + 1 < n {
                            let next = m.find(
                                g,
                                Op::CopyIn {
                                    chunk: c + 1,
                                    set: (c + 1) % SETS,
                                },
                            );
                            assert!(m.ordered(sum, next));
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn every_gpu_waits_for_its_partials_and_ends_on_its_sum_stream() {
        for gpus in 2..=MOST.0 {
            let n = MOST.1.min(3);
            let m = Model::new(gpus, n, 1);
            for g in 0..gpus {
                let on = |s: Stream| {
                    (0..m.ops.len())
                        .filter(|&i| m.ops[i].1.gpu == g && m.ops[i].1.stream == s)
                        .collect::<Vec<_>>()
                };
                let (out, sum) = (on(Stream::Out), on(Stream::Sum));
                assert_eq!(m.ops[out[0]].1.op, Op::WaitReady);
                assert_eq!(m.ops[*sum.last().unwrap()].1.op, Op::Sum { chunk: n - 1 });
                // every op of the GPU's out stream ends before its sum stream's last op: the
                // `done` recorded after it covers both streams
                assert!(m.ordered(*out.last().unwrap(), *sum.last().unwrap()));
                // every sum stream's first op already waits (for the first chunk's copies out)
                assert!(matches!(m.ops[sum[0]].1.op, Op::WaitOut { .. }));
                // every GPU copies each chunk once each way and sums it once
                for c in 0..n {
                    let count = |f: &dyn Fn(Op) -> bool| {
                        m.ops.iter().filter(|(_, q)| q.gpu == g && f(q.op)).count()
                    };
                    assert_eq!(
                        count(&|o| o
                            == Op::CopyOut {
                                chunk: c,
                                set: c % SETS
                            }),
                        1
                    );
                    assert_eq!(
                        count(&|o| o
                            == Op::CopyIn {
                                chunk: c,
                                set: c % SETS
                            }),
                        1
                    );
                    assert_eq!(count(&|o| o == Op::Sum { chunk: c }), 1);
                }
            }
        }
    }

    #[test]
    fn the_next_cut_overwrites_no_slot_before_this_one_read_it() {
        for (gpus, n) in [(2, 1), (2, 2), (3, 3), (MOST.0, MOST.1)] {
            let m = Model::new(gpus, n, 2);
            for c in 0..n {
                let set = c % SETS;
                for g in 0..gpus {
                    let copy_in = m.find_in(0, g, Op::CopyIn { chunk: c, set });
                    let sum = m.find_in(0, g, Op::Sum { chunk: c });
                    for h in 0..gpus {
                        // every chunk of the next cut: its host slots, and the partials (which
                        // this cut's sums may have written in place)
                        for next in 0..n {
                            let over = m.find_in(
                                1,
                                h,
                                Op::CopyOut {
                                    chunk: next,
                                    set: next % SETS,
                                },
                            );
                            assert!(m.ordered(copy_in, over), "{gpus} {n}: {c} {g} {h}");
                            assert!(m.ordered(sum, over), "{gpus} {n}: {c} {g} {h}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn a_chunk_goes_out_while_the_one_before_comes_in() {
        // the out stream of chunk c + 1 does not wait for chunk c's copies in: the link is
        // used both ways at once
        let m = Model::new(2, 4, 1);
        for g in 0..2 {
            for c in 0..3 {
                let copy_in = m.find(
                    g,
                    Op::CopyIn {
                        chunk: c,
                        set: c % SETS,
                    },
                );
                for h in 0..2 {
                    let next_out = m.find(
                        h,
                        Op::CopyOut {
                            chunk: c + 1,
                            set: (c + 1) % SETS,
                        },
                    );
                    assert!(!m.ordered(copy_in, next_out), "{g} {h} {c}");
                }
            }
        }
    }
}
