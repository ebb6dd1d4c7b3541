//! The host-mapped AllReduce, as plain data and a model: how GPUs that cannot read each other's
//! memory (GeForce cards on PCIe: no peer access) exchange their partial sums through pinned
//! host memory that every GPU maps, and synchronise with flags in that memory, without system
//! atomics (consumer cards report no `hostNativeAtomicSupported`).
//!
//! * [`Layout`]: where one meta device's exchange lives in the pinned region: per parity and
//!   member a slot for its partial, per GPU and block index a flag, per GPU an error word.
//! * [`choose`]: which AllReduce a set of GPUs gets (our peer kernel, this one, or neither),
//!   and the reason, said once per meta device.
//! * [`Exchange`]: the protocol run by one block of one GPU's kernel, over a [`Region`] of
//!   32-bit words; the tests here run it on threads (under miri too).
//! * [`ptx`]: the kernels that do the same steps on the mapped memory, one per epilogue: the
//!   exchange ([`prologue`]), then the peer kernels' bodies (`crate::ptx`) reading the slots,
//!   so the sum, the residual add and the RMS norm give the peer path's bits. Checked on a GPU
//!   by `bench/ptxcheck/mappedcheck.c`; launched by the meta backend's `meta::cuda`.
//!
//! The protocol, for one cut: one launch per GPU (for all the members it holds), every GPU the
//! same grid, block `b` of every GPU taking the same units (contiguous [`share`]s in the model;
//! the peer bodies' orders in [`ptx`]):
//!
//! 1. Block `b` reads the launch's epoch `e` from counter `b` of its GPU, in device memory:
//!    the counter's value plus one ([`next_epoch`]). Every counter of a GPU holds the same
//!    value between launches (step 5), and block `b` alone writes counter `b` during one, so
//!    no block of a launch sees another's update, and a captured step replays with fresh
//!    epochs.
//! 2. It copies its units of every partial of its GPU's members into their slots of parity
//!    `e & 1`, then (after a system-scope fence) writes `e` into its GPU's flag `b`, and into
//!    the flags `b + blocks`, `b + 2 blocks`, ... that no block of this launch has.
//! 3. It waits until flag `b` of every other GPU reads `e`, or the epoch after it (that GPU ran
//!    ahead, [`reached`]), with a system-scope fence after the last read, at most a bound
//!    ([`Wait`]); past it, it writes the GPU it waited for into its error word and ends
//!    without storing anything: the step fails, naming that GPU.
//! 4. It sums its units of all partials in [`crate::exchange::reference_sum`] order (the same
//!    bits as every other path, on every device), those of its GPU's members read where they
//!    are and the others from their slots, and stores the results on its GPU's members.
//! 5. It writes `e` into counter `b` and the counters of the other indices of step 2.
//!
//! So after every launch, every flag and counter of a GPU holds that launch's epoch, whatever
//! its grid: launches of one cut may have as many blocks as they need (a block per row for the
//! norm, per 256 elements for the sum), and a flag left from a launch long ago can never read
//! as the epoch after the current one.
//!
//! Why no slot is overwritten while another GPU reads it: GPU `g` writes slots of parity `p`
//! again in epoch `e + 2`, in a launch that starts after its launch of `e + 1` ended, which
//! waited for every other GPU to post `e + 1`: those GPUs had ended their launches of `e`, and
//! with them every read of the `e` slots. A failed step leaves the epochs of the GPUs apart:
//! the meta backend then clears every flag and error word ([`Layout::words_to_clear`]) and
//! counter before the next step.
//!
//! Never a hang: a block waits only for blocks on *other* GPUs and for nothing on its own, so
//! the blocks of one GPU need not be resident together; the members a GPU holds (two on one
//! GPU, as `CUDA0,CUDA0`) are served by one launch, so no launch of a GPU waits for another
//! launch of the same GPU. Every wait is bounded.

use std::fmt::Write;
use std::ops::Range;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::exchange;
use crate::ptx::{self, op, Epilogue, Param, Source};

/// Alignment of slots and flag arrays in the pinned region, in bytes (a PCIe write
/// combining unit; it keeps the flags of different GPUs in different cache lines).
pub const ALIGN: usize = 128;

/// Where one meta device's exchange lives in its pinned host region (byte offsets).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Members of the meta device (one partial each).
    pub members: usize,
    /// GPUs among them (one launch, and one flag per block, each).
    pub gpus: usize,
    /// Most blocks of a launch.
    pub blocks: usize,
    /// Most f32 values of one partial.
    pub capacity: usize,
    slot_bytes: usize,
    flags_at: usize,
    flag_bytes: usize,
    errors_at: usize,
    /// Size of the region.
    pub bytes: usize,
}

fn align(x: usize) -> Option<usize> {
    x.checked_add(ALIGN - 1).map(|v| v / ALIGN * ALIGN)
}

impl Layout {
    /// The layout for `members` partials of up to `capacity` f32 values on `gpus` GPUs whose
    /// launches have up to `blocks` blocks; None when it does not fit in memory's address range or
    /// a count is zero.
    pub fn new(members: usize, gpus: usize, blocks: usize, capacity: usize) -> Option<Layout> {
        if members == 0 || gpus == 0 || gpus > members || blocks == 0 {
            return None;
        }
        let slot_bytes = align(capacity.checked_mul(4)?)?;
        let flags_at = slot_bytes.checked_mul(2)?.checked_mul(members)?;
        let flag_bytes = align(blocks.checked_mul(4)?)?;
        let errors_at = flags_at.checked_add(flag_bytes.checked_mul(gpus)?)?;
        let bytes = errors_at.checked_add(align(gpus.checked_mul(4)?)?)?;
        Some(Layout {
            members,
            gpus,
            blocks,
            capacity,
            slot_bytes,
            flags_at,
            flag_bytes,
            errors_at,
            bytes,
        })
    }

    /// Bytes of one slot.
    pub fn slot_bytes(&self) -> usize {
        self.slot_bytes
    }

    /// Bytes of one GPU's flag array.
    pub fn flag_bytes(&self) -> usize {
        self.flag_bytes
    }

    /// The slot of `member`'s partial for epochs of parity `parity` (0 or 1).
    pub fn slot(&self, parity: usize, member: usize) -> usize {
        (parity * self.members + member) * self.slot_bytes
    }

    /// The flag block `block` of GPU `gpu` posts its epochs in.
    pub fn flag(&self, gpu: usize, block: usize) -> usize {
        self.flags_at + gpu * self.flag_bytes + block * 4
    }

    /// The word where GPU `gpu`'s blocks say which GPU they gave up waiting for (plus one;
    /// 0: none).
    pub fn error(&self, gpu: usize) -> usize {
        self.errors_at + gpu * 4
    }

    /// Flags per GPU, and epoch counters per GPU: [`blocks`](Self::blocks) or a few more (the
    /// flag array is aligned).
    pub fn words_per_gpu(&self) -> usize {
        self.flag_bytes / 4
    }

    /// The byte range of flags and error words, which a failed step leaves inconsistent and
    /// which must be zero before the next (with every block's counter).
    pub fn words_to_clear(&self) -> Range<usize> {
        self.flags_at..self.bytes
    }
}

/// The epoch after `e`. Never 0 (a flag never written), and of the other parity: after
/// `u32::MAX` (odd) comes 2.
pub fn next_epoch(e: u32) -> u32 {
    if e == u32::MAX {
        2
    } else {
        e + 1
    }
}

/// Whether a flag that reads `f` says its GPU has posted epoch `e`: it has posted `e`, or
/// already the next epoch (it can be no further ahead: it cannot finish that one before this
/// GPU posts it).
pub fn reached(f: u32, e: u32) -> bool {
    f == e || f == next_epoch(e)
}

/// The units `[begin, end)` block `block` of `blocks` takes of `units`: contiguous shares, the
/// first `units % blocks` one unit larger.
pub fn share(block: usize, blocks: usize, units: usize) -> Range<usize> {
    let (base, extra) = (units / blocks, units % blocks);
    let begin = block * base + block.min(extra);
    begin..begin + base + usize::from(block < extra)
}

/// Which AllReduce kernel the GPUs of a meta device get.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kernel {
    /// Ours over peer access: each GPU reads the others' partials directly.
    Peer,
    /// Ours through mapped pinned host memory ([`Exchange`]).
    Mapped,
    /// Neither: the meta backend reduces another way (the backend's, or copies).
    None,
}

/// What [`choose`] knows of the GPUs (indices `0..gpus`).
pub trait Topology {
    fn gpus(&self) -> usize;
    fn name(&self, gpu: usize) -> String;
    /// Whether `a` can read `b`'s memory directly.
    fn peer(&self, a: usize, b: usize) -> bool;
    /// Whether `gpu` can map pinned host memory into its address space.
    fn maps_host(&self, gpu: usize) -> bool;
}

/// The kernel for the GPUs of `t`, and why (for the plan log, once per meta device):
/// the peer kernel where every pair of distinct GPUs has peer access, unless `force_mapped`;
/// else the mapped one where every GPU maps host memory; else neither.
pub fn choose(t: &impl Topology, force_mapped: bool) -> (Kernel, String) {
    let n = t.gpus();
    let no_peer = (0..n)
        .flat_map(|a| (0..n).map(move |b| (a, b)))
        .find(|&(a, b)| a != b && !t.peer(a, b));
    let no_map = (0..n).find(|&g| !t.maps_host(g));
    match (no_peer, force_mapped, no_map) {
        (None, false, _) => (Kernel::Peer, "every GPU reads the others' memory".into()),
        (_, _, Some(g)) => (
            Kernel::None,
            format!("{} cannot map pinned host memory", t.name(g)),
        ),
        (_, true, None) => (Kernel::Mapped, "forced (GGML_META_ALLREDUCE=mapped)".into()),
        (Some((a, b)), false, None) => (
            Kernel::Mapped,
            format!("{} cannot access {} directly", t.name(a), t.name(b)),
        ),
    }
}

/// The entry point of the mapped kernel for `n` members and epilogue `e`.
pub fn kernel_name(n: usize, e: Epilogue) -> String {
    format!("ggml_meta_allreduce_mapped_{}_f32_x{n}", e.tag())
}

/// The parameters of the mapped kernel for `n` members and epilogue `e`: the peer kernel's
/// ([`ptx::params`]), where a partial `p{k}` is given only for a member on this GPU (else 0),
/// then, before `first` and `limit`, the exchange's own: `slots` (the region's address on this
/// GPU), `slot_bytes`, `flags` (the first flag's address), `flag_bytes` (one GPU's flag array:
/// [`Layout::blocks`] flags), `errors` (the first GPU's error word; the others follow),
/// `counters` (as many `u32` as flags, device memory), `gpu`, `gpus`, `timeout` (ns).
pub fn params(n: usize, e: Epilogue) -> Vec<Param> {
    let mut v = ptx::params(n, e);
    let tail = v.split_off(v.len() - 2);
    v.extend([
        Param::Slots,
        Param::SlotBytes,
        Param::Flags,
        Param::FlagBytes,
        Param::Errors,
        Param::Counters,
        Param::Gpu,
        Param::Gpus,
        Param::Timeout,
    ]);
    v.extend(tail);
    v
}

/// The PTX module of the mapped kernels for `n >= 1` members: one entry per epilogue, each
/// the exchange ([`prologue`]) followed by the peer kernel's body over this GPU's partials and
/// the other GPUs' slots (read `.volatile`) and the counters' update ([`finish`]).
pub fn ptx(n: usize) -> String {
    ptx::module(n, Source::Mapped)
}

/// Steps 1 to 3 of the protocol (module doc) as block `ctaid` of a launch runs them, leaving in
/// `%a{k}` where the body reads member `k`'s partial: its own memory where it is on this GPU,
/// else its slot of this epoch's parity. With one GPU there is nothing to exchange: no copy,
/// no flag, no wait. The units a block copies are those its body reads: elements
/// `first + ctaid*ntid + tid`, then every `nctaid*ntid` further (`Sum`, `Add`, as
/// `ptx::grid_body`); for `AddRmsNormMul` rows `first + ctaid`, then every `nctaid` further,
/// each column `tid, tid + ntid, ...` (as `ptx::row_body`). Every register and label here has
/// an `m` prefix, apart from the body's.
///
/// Every block writes its epoch into every flag and counter of index `ctaid + t*nctaid`, not
/// only its own: so all flags and counters of a GPU hold the same epoch after a launch,
/// whatever grid it had, and a launch with more blocks than the one before reads its epoch
/// from a counter that moved with the others.
pub(crate) fn prologue(s: &mut String, n: usize, e: Epilogue) {
    let norm = e == Epilogue::AddRmsNormMul;
    op!(
        s,
        ".reg .pred %mdone, %mt0, %mok, %mlate, %mone, %mhp<{n}>;"
    );
    op!(
        s,
        ".reg .b32 %mc, %mep, %mnx, %mf, %mfail, %mtid, %mcta, %mntid, %mncta;"
    );
    op!(
        s,
        ".reg .b64 %mi, %mlimit, %mstride, %moff, %me, %mt, %mp<{n}>, %mbase, %msb, %mfl, \
         %mfb, %mnf, %merr, %mcnt, %mg, %mgpu, %mgpus, %mto, %mts, %mtn, %mfa, %mj, %mrow, \
         %mcol, %mncols, %ms<{n}>;"
    );
    op!(s, ".reg .f32 %mv;");
    op!(s, ".shared .align 4 .u32 m_ep;");
    op!(s, ".shared .align 4 .u32 m_fail;");
    for k in 0..n {
        op!(s, "ld.param.u64 %mp{k}, [p{k}];");
        op!(s, "setp.ne.u64 %mhp{k}, %mp{k}, 0;");
        op!(s, "@%mhp{k} cvta.to.global.u64 %mp{k}, %mp{k};");
    }
    for (reg, param, global) in [
        ("mbase", "slots", true),
        ("msb", "slot_bytes", false),
        ("mfl", "flags", true),
        ("mfb", "flag_bytes", false),
        ("merr", "errors", true),
        ("mcnt", "counters", true),
        ("mgpu", "gpu", false),
        ("mgpus", "gpus", false),
        ("mto", "timeout", false),
    ] {
        op!(s, "ld.param.u64 %{reg}, [{param}];");
        if global {
            op!(s, "cvta.to.global.u64 %{reg}, %{reg};");
        }
    }
    // 1. the epoch: thread 0 reads the block's counter and shares the next epoch
    s.push_str(
        "    mov.u32 %mcta, %ctaid.x;
    mov.u32 %mntid, %ntid.x;
    mov.u32 %mtid, %tid.x;
    mov.u32 %mncta, %nctaid.x;
    setp.eq.u32 %mt0, %mtid, 0;
    @!%mt0 bra M_EPOCH;
    mul.wide.u32 %mt, %mcta, 4;
    add.u64 %mt, %mcnt, %mt;
    ld.volatile.global.u32 %mc, [%mt];
    setp.eq.u32 %mlate, %mc, 0xFFFFFFFF;
    add.u32 %mep, %mc, 1;
    @%mlate mov.u32 %mep, 2;
    st.shared.u32 [m_ep], %mep;
    mov.u32 %mfail, 0;
    st.shared.u32 [m_fail], %mfail;
M_EPOCH:
    bar.sync 0;
    ld.shared.u32 %mep, [m_ep];
    and.b32 %mc, %mep, 1;
    cvt.u64.u32 %mt, %mc;
",
    );
    op!(s, "mul.lo.u64 %mt, %mt, {n};");
    for k in 0..n {
        op!(s, "add.u64 %me, %mt, {k};");
        op!(s, "mul.lo.u64 %me, %me, %msb;");
        op!(s, "add.u64 %ms{k}, %mbase, %me;");
    }
    // (one GPU: nobody else reads the slots, and nobody to wait for)
    op!(s, "setp.eq.u64 %mone, %mgpus, 1;");
    op!(s, "@%mone bra M_LOCAL;");
    // 2. this GPU's members' partials into their slots, over the units the body reads
    if norm {
        s.push_str(
            "    ld.param.u64 %mncols, [ncols];
    ld.param.u64 %mrow, [first];
    ld.param.u64 %mlimit, [limit];
    cvt.u64.u32 %mt, %mcta;
    add.u64 %mrow, %mrow, %mt;
M_ROW:
    setp.ge.u64 %mdone, %mrow, %mlimit;
    @%mdone bra M_POSTED;
    mul.lo.u64 %mj, %mrow, %mncols;
    cvt.u64.u32 %mcol, %mtid;
M_COL:
    setp.ge.u64 %mdone, %mcol, %mncols;
    @%mdone bra M_NEXT;
    add.u64 %mi, %mj, %mcol;
    shl.b64 %moff, %mi, 2;
",
        );
        copy(s, n);
        s.push_str(
            "    cvt.u64.u32 %mt, %mntid;
    add.u64 %mcol, %mcol, %mt;
    bra M_COL;
M_NEXT:
    cvt.u64.u32 %mt, %mncta;
    add.u64 %mrow, %mrow, %mt;
    bra M_ROW;
",
        );
    } else {
        op!(s, "ld.param.u64 %mi, [first];");
        op!(s, "ld.param.u64 %mlimit, [limit];");
        let r = ptx::Stride {
            i: "%mi",
            limit: "%mlimit",
            stride: "%mstride",
            off: "%moff",
            t: "%mt",
            done: "%mdone",
            ctaid: "%mcta",
            ntid: "%mntid",
            tid: "%mtid",
            nctaid: "%mncta",
        };
        ptx::element_loop(s, &r, "M_POST", "M_POSTED");
        copy(s, n);
        s.push_str(
            "    add.u64 %mi, %mi, %mstride;
    bra M_POST;
",
        );
    }
    // then the flags, the block's own first, by thread 0 after the whole block's copies and a
    // system fence (a barrier, then one thread's fence: cumulative), and thread 0 waits for the
    // block of the same index on every other GPU
    s.push_str(
        "M_POSTED:
    bar.sync 0;
    @%mt0 membar.sys;
    mul.lo.u64 %mt, %mgpu, %mfb;
    add.u64 %mfa, %mfl, %mt;
",
    );
    every_block_word(s, "M_FLAG", "%mfa", "st.volatile.global.u32");
    s.push_str(
        "    @!%mt0 bra M_WAITED;
    mul.wide.u32 %mj, %mcta, 4;
    setp.eq.u32 %mlate, %mep, 0xFFFFFFFF;
    add.u32 %mnx, %mep, 1;
    @%mlate mov.u32 %mnx, 2;
    mov.u64 %mg, 0;
M_GPU:
    setp.ge.u64 %mdone, %mg, %mgpus;
    @%mdone bra M_GDONE;
    setp.eq.u64 %mdone, %mg, %mgpu;
    @%mdone bra M_GNEXT;
    mul.lo.u64 %mt, %mg, %mfb;
    add.u64 %mt, %mt, %mfl;
    add.u64 %mt, %mt, %mj;
    mov.u64 %mts, %globaltimer;
M_POLL:
    ld.volatile.global.u32 %mf, [%mt];
    setp.eq.u32 %mok, %mf, %mep;
    @%mok bra M_GNEXT;
    setp.eq.u32 %mok, %mf, %mnx;
    @%mok bra M_GNEXT;
    mov.u64 %mi, 0;
M_ERRS:
    setp.ge.u64 %mdone, %mi, %mgpus;
    @%mdone bra M_CLOCK;
    shl.b64 %me, %mi, 2;
    add.u64 %me, %merr, %me;
    ld.volatile.global.u32 %mf, [%me];
    setp.ne.u32 %mok, %mf, 0;
    @%mok bra M_GIVEUP;
    add.u64 %mi, %mi, 1;
    bra M_ERRS;
M_CLOCK:
    mov.u64 %mtn, %globaltimer;
    sub.u64 %mtn, %mtn, %mts;
    setp.le.u64 %mlate, %mtn, %mto;
    @%mlate bra M_POLL;
    cvt.u32.u64 %mf, %mg;
    add.u32 %mf, %mf, 1;
    shl.b64 %me, %mgpu, 2;
    add.u64 %me, %merr, %me;
    st.volatile.global.u32 [%me], %mf;
M_GIVEUP:
    mov.u32 %mfail, 1;
    st.shared.u32 [m_fail], %mfail;
    bra M_GDONE;
M_GNEXT:
    add.u64 %mg, %mg, 1;
    bra M_GPU;
M_GDONE:
    membar.sys;
M_WAITED:
    bar.sync 0;
    ld.shared.u32 %mfail, [m_fail];
    setp.ne.u32 %mlate, %mfail, 0;
    @%mlate bra M_FAILED;
M_LOCAL:
",
    );
    // the body reads this GPU's members' partials where they are, the others' slots
    for k in 0..n {
        op!(s, "mov.u64 %a{k}, %ms{k};");
        op!(s, "@%mhp{k} mov.u64 %a{k}, %mp{k};");
    }
    s.push_str("M_BODY:\n");
}

/// The copy of unit `%moff` (bytes) of every partial given on this GPU into its slot.
fn copy(s: &mut String, n: usize) {
    for k in 0..n {
        op!(s, "add.u64 %me, %mp{k}, %moff;");
        op!(s, "@%mhp{k} ld.global.f32 %mv, [%me];");
        op!(s, "add.u64 %me, %ms{k}, %moff;");
        op!(s, "@%mhp{k} st.volatile.global.f32 [%me], %mv;");
    }
}

/// `{ld_st} [array + 4j], %mep` for every word `j = ctaid + t*nctaid` below
/// `flag_bytes / 4` that thread `t` of the block takes (`j` in steps of `ntid*nctaid`).
fn every_block_word(s: &mut String, label: &str, array: &str, st: &str) {
    let _ = write!(
        s,
        "    shr.u64 %mnf, %mfb, 2;
    mul.wide.u32 %mj, %mtid, %mncta;
    cvt.u64.u32 %mt, %mcta;
    add.u64 %mj, %mj, %mt;
    mul.wide.u32 %mstride, %mntid, %mncta;
{label}:
    setp.ge.u64 %mdone, %mj, %mnf;
    @%mdone bra {label}_END;
    shl.b64 %mt, %mj, 2;
    add.u64 %me, {array}, %mt;
    {st} [%me], %mep;
    add.u64 %mj, %mj, %mstride;
    bra {label};
{label}_END:
"
    );
}

/// Step 5, at the body's end: the block's epoch into every counter of its indices (see
/// [`prologue`]). A block that gave up waiting comes in below (`M_FAILED`): its counters stay.
/// The registers are loaded again, so none of the prologue's stays alive through the body.
pub(crate) fn finish(s: &mut String) {
    s.push_str(
        "    ld.shared.u32 %mep, [m_ep];
    ld.param.u64 %mcnt, [counters];
    cvta.to.global.u64 %mcnt, %mcnt;
    ld.param.u64 %mfb, [flag_bytes];
    mov.u32 %mcta, %ctaid.x;
    mov.u32 %mntid, %ntid.x;
    mov.u32 %mtid, %tid.x;
    mov.u32 %mncta, %nctaid.x;
",
    );
    every_block_word(s, "M_COUNT", "%mcnt", "st.global.u32");
    s.push_str("M_FAILED:\n");
}

/// The pinned region as the protocol sees it: 32-bit words, written and read by several
/// GPUs at once. Flags are stored with release and loaded with acquire ordering (the kernel's
/// system-scope fences); slot values need no ordering of their own.
#[derive(Debug)]
pub struct Region {
    words: Vec<AtomicU32>,
}

impl Region {
    /// A zeroed region for `layout`.
    pub fn new(layout: &Layout) -> Region {
        Region {
            words: (0..layout.bytes / 4).map(|_| AtomicU32::new(0)).collect(),
        }
    }

    fn word(&self, byte: usize) -> &AtomicU32 {
        &self.words[byte / 4]
    }

    /// Zeroes `bytes` (see [`Layout::words_to_clear`]).
    pub fn clear(&self, bytes: Range<usize>) {
        for w in &self.words[bytes.start / 4..bytes.end / 4] {
            w.store(0, Ordering::Relaxed);
        }
    }

    /// The GPU that `gpu`'s blocks gave up waiting for, if any.
    pub fn lost(&self, layout: &Layout, gpu: usize) -> Option<usize> {
        match self.word(layout.error(gpu)).load(Ordering::Acquire) {
            0 => None,
            k => Some(k as usize - 1),
        }
    }
}

/// How long a block waits for another GPU's flag: `polls` reads of it. (The kernel bounds the
/// wait by its clock instead, with the same outcome.)
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Wait {
    pub polls: u64,
}

/// Why a block stored nothing and left its counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// It waited past the bound for GPU `gpu`, and said so in its GPU's error word.
    Lost { gpu: usize },
    /// While it waited, a GPU's error word said the step has failed already: it gives up at
    /// once, so the cuts after a lost GPU's do not each wait the bound.
    Failed,
}

/// One block of one GPU's launch for one cut. (The model reads every partial from its slot;
/// the kernel reads its own GPU's members' partials where they are: the same values.)
#[derive(Debug)]
pub struct Exchange<'a> {
    pub layout: &'a Layout,
    pub region: &'a Region,
    /// The launching GPU.
    pub gpu: usize,
    /// GPU of each member.
    pub gpu_of: &'a [usize],
    pub block: usize,
    /// Blocks of this launch (at most [`Layout::blocks`]; the same on every GPU for one cut).
    pub blocks: usize,
    /// Values in each partial (at most the layout's capacity).
    pub len: usize,
    pub wait: Wait,
}

impl Exchange<'_> {
    /// Runs the protocol (module doc) for this block: `counters` are the launching GPU's epoch
    /// counters in device memory ([`Layout::words_per_gpu`]); `partials[k]` and `outputs[k]`
    /// are member `k`'s partial and result where `k` is on this GPU (ignored elsewhere).
    pub fn run(
        &self,
        counters: &mut [u32],
        partials: &[Option<&[f32]>],
        outputs: &mut [Option<&mut [f32]>],
    ) -> Result<(), Stop> {
        let e = self.post(counters, partials);
        self.collect(e, counters, outputs)
    }

    /// The words of a GPU's flags and counters this block writes: its own index, then every
    /// `blocks` further (see [`ptx`]: all of them hold the launch's epoch afterwards).
    fn own_words(&self) -> impl Iterator<Item = usize> {
        (self.block..self.layout.words_per_gpu()).step_by(self.blocks)
    }

    /// Steps 1 and 2: copies this GPU's partials into their slots and posts the epoch, which
    /// it returns.
    pub fn post(&self, counters: &[u32], partials: &[Option<&[f32]>]) -> u32 {
        let (l, r) = (self.layout, self.region);
        let e = next_epoch(counters[self.block]);
        let slot_parity = (e & 1) as usize;
        for k in (0..l.members).filter(|&k| self.gpu_of[k] == self.gpu) {
            let p = partials[k].expect("a partial for every member on this GPU");
            for i in share(self.block, self.blocks, self.len) {
                r.word(l.slot(slot_parity, k) + 4 * i)
                    .store(p[i].to_bits(), Ordering::Relaxed);
            }
        }
        for j in self.own_words() {
            r.word(l.flag(self.gpu, j)).store(e, Ordering::Release);
        }
        e
    }

    /// Steps 3 to 5 for epoch `e`: waits for every other GPU's post, sums and stores, and
    /// moves the counters on. A wait past the bound stores nothing and leaves the counters.
    pub fn collect(
        &self,
        e: u32,
        counters: &mut [u32],
        outputs: &mut [Option<&mut [f32]>],
    ) -> Result<(), Stop> {
        let (l, r) = (self.layout, self.region);
        for g in (0..l.gpus).filter(|&g| g != self.gpu) {
            let flag = r.word(l.flag(g, self.block));
            let mut polls = 0u64;
            while !reached(flag.load(Ordering::Acquire), e) {
                if (0..l.gpus).any(|h| r.word(l.error(h)).load(Ordering::Acquire) != 0) {
                    return Err(Stop::Failed);
                }
                polls += 1;
                if polls >= self.wait.polls {
                    r.word(l.error(self.gpu))
                        .store(g as u32 + 1, Ordering::Release);
                    return Err(Stop::Lost { gpu: g });
                }
                std::hint::spin_loop();
            }
        }
        let slot_parity = (e & 1) as usize;
        let mut parts = vec![0f32; l.members];
        for i in share(self.block, self.blocks, self.len) {
            for (k, v) in parts.iter_mut().enumerate() {
                let bits = r
                    .word(l.slot(slot_parity, k) + 4 * i)
                    .load(Ordering::Relaxed);
                *v = f32::from_bits(bits);
            }
            let s = exchange::reference_sum(&parts).unwrap_or(0.0);
            for k in (0..l.members).filter(|&k| self.gpu_of[k] == self.gpu) {
                if let Some(out) = outputs[k].as_deref_mut() {
                    out[i] = s;
                }
            }
        }
        for j in self.own_words() {
            counters[j] = e;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::thread;

    #[test]
    fn the_layout_keeps_its_parts_apart_and_aligned() {
        for (members, gpus, blocks, cap) in [(2, 2, 1, 1), (2, 1, 132, 4096), (8, 8, 7, 1000)] {
            let l = Layout::new(members, gpus, blocks, cap).unwrap();
            let mut parts: Vec<Range<usize>> = Vec::new();
            for p in 0..2 {
                for k in 0..members {
                    let s = l.slot(p, k);
                    assert_eq!(s % ALIGN, 0);
                    parts.push(s..s + 4 * cap);
                }
            }
            for g in 0..gpus {
                assert_eq!(l.flag(g, 0) % ALIGN, 0);
                parts.push(l.flag(g, 0)..l.flag(g, blocks - 1) + 4);
                parts.push(l.error(g)..l.error(g) + 4);
            }
            for (i, a) in parts.iter().enumerate() {
                assert!(a.end <= l.bytes);
                for b in &parts[i + 1..] {
                    assert!(a.end <= b.start || b.end <= a.start, "{a:?} overlaps {b:?}");
                }
            }
            let clear = l.words_to_clear();
            assert!(clear.contains(&l.flag(0, 0)) && clear.contains(&l.error(gpus - 1)));
            assert!(!clear.contains(&(l.slot(1, members - 1) + 4 * cap - 1)));
        }
        assert_eq!(Layout::new(2, 3, 1, 1), None);
        assert_eq!(Layout::new(2, 2, 1, usize::MAX / 2), None);
    }

    #[test]
    fn epochs_skip_zero_and_alternate_parity() {
        assert_eq!(next_epoch(0), 1);
        assert_eq!(next_epoch(1), 2);
        let last = u32::MAX;
        assert_eq!(next_epoch(last), 2);
        assert_ne!(last & 1, next_epoch(last) & 1);
    }

    #[test]
    fn a_flag_one_epoch_ahead_has_reached() {
        assert!(reached(5, 5) && reached(6, 5) && !reached(4, 5) && !reached(7, 5));
        assert!(reached(2, u32::MAX) && !reached(0, 1));
    }

    #[test]
    fn shares_cover_the_units_once() {
        for (blocks, units) in [(1, 0), (3, 10), (4, 4), (8, 3), (132, 4097)] {
            let mut next = 0;
            for b in 0..blocks {
                let r = share(b, blocks, units);
                assert_eq!(r.start, next);
                next = r.end;
            }
            assert_eq!(next, units);
        }
    }

    struct Gpus {
        peer: Vec<Vec<bool>>,
        maps: Vec<bool>,
    }

    impl Topology for Gpus {
        fn gpus(&self) -> usize {
            self.maps.len()
        }
        fn name(&self, g: usize) -> String {
            format!("CUDA{g}")
        }
        fn peer(&self, a: usize, b: usize) -> bool {
            self.peer[a][b]
        }
        fn maps_host(&self, g: usize) -> bool {
            self.maps[g]
        }
    }

    #[test]
    fn the_kernel_follows_the_topology() {
        let all = Gpus {
            peer: vec![vec![true; 3]; 3],
            maps: vec![true; 3],
        };
        assert_eq!(choose(&all, false).0, Kernel::Peer);
        assert_eq!(choose(&all, true).0, Kernel::Mapped);
        // peer access between some pairs only: every GPU must read every other
        let mut some = Gpus {
            peer: vec![vec![true; 3]; 3],
            maps: vec![true; 3],
        };
        some.peer[2][0] = false;
        assert_eq!(
            choose(&some, false),
            (Kernel::Mapped, "CUDA2 cannot access CUDA0 directly".into())
        );
        // a GPU that cannot map host memory: neither, and why
        some.maps[1] = false;
        assert_eq!(
            choose(&some, false),
            (Kernel::None, "CUDA1 cannot map pinned host memory".into())
        );
        // one GPU (CUDA0,CUDA0): nothing to cross
        let one = Gpus {
            peer: vec![vec![false]],
            maps: vec![true],
        };
        assert_eq!(choose(&one, false).0, Kernel::Peer);
    }

    /// Member `k`'s value `i` in step `s`: distinct for every (s, k, i), so a value read from
    /// the wrong step or slot changes the sum.
    fn value(s: usize, k: usize, i: usize) -> f32 {
        ((s * 64 + k) * 1024 + i) as f32 * 0.25 - 1000.0
    }

    /// Runs `steps` cuts of `len` values over members on GPUs `gpu_of`, step `s`'s launch on
    /// every GPU of `grids[s % grids.len()]` blocks, on threads (blocks of a GPU in turn, GPUs
    /// at once), and checks every member's result of every step against the reference sum.
    fn run_steps(gpu_of: &[usize], grids: &[usize], len: usize, steps: usize) {
        let members = gpu_of.len();
        let gpus = gpu_of.iter().max().unwrap() + 1;
        let most = *grids.iter().max().unwrap();
        let layout = Layout::new(members, gpus, most, len).unwrap();
        let region = Region::new(&layout);
        thread::scope(|scope| {
            for g in 0..gpus {
                let (layout, region) = (&layout, &region);
                scope.spawn(move || {
                    let mut counters = vec![0u32; layout.words_per_gpu()];
                    for s in 0..steps {
                        let parts: Vec<Vec<f32>> = (0..members)
                            .map(|k| (0..len).map(|i| value(s, k, i)).collect())
                            .collect();
                        let mut outs: Vec<Vec<f32>> = vec![vec![f32::NAN; len]; members];
                        let blocks = grids[s % grids.len()];
                        for b in 0..blocks {
                            let x = Exchange {
                                layout,
                                region,
                                gpu: g,
                                gpu_of,
                                block: b,
                                blocks,
                                len,
                                wait: Wait { polls: u64::MAX },
                            };
                            let p: Vec<Option<&[f32]>> =
                                parts.iter().map(|v| Some(v.as_slice())).collect();
                            let mut o: Vec<Option<&mut [f32]>> =
                                outs.iter_mut().map(|v| Some(v.as_mut_slice())).collect();
                            x.run(&mut counters, &p, &mut o).unwrap();
                        }
                        assert!(
                            counters.iter().all(|&c| c == counters[0]),
                            "every counter holds the launch's epoch"
                        );
                        for k in (0..members).filter(|&k| gpu_of[k] == g) {
                            for (i, got) in outs[k].iter().enumerate() {
                                let all: Vec<f32> = (0..members).map(|j| value(s, j, i)).collect();
                                let want = exchange::reference_sum(&all).unwrap();
                                assert_eq!(got.to_bits(), want.to_bits(), "step {s}");
                            }
                        }
                    }
                });
            }
        });
    }

    #[test]
    fn every_member_gets_the_reference_sum_in_every_step() {
        let steps = if cfg!(miri) { 3 } else { 40 };
        // each member its own GPU (2, 3 and 4: pairwise tree and device order)
        run_steps(&[0, 1], &[3], 7, steps);
        run_steps(&[0, 1, 2], &[2], 5, steps);
        if !cfg!(miri) {
            run_steps(&[0, 1, 2, 3], &[4], 33, steps);
        }
        // two members on one GPU, one launch for both (CUDA0,CUDA0)
        run_steps(&[0, 0], &[2], 9, steps);
        // mixed: two on the first GPU, one on the second
        run_steps(&[0, 0, 1], &[3], 6, steps);
    }

    #[test]
    fn launches_of_other_grids_keep_the_epochs_in_step() {
        // a cut's launches have the grid its kernel needs (a block per row for the norm):
        // consecutive launches of 5, 1, 3 and 2 blocks must still agree on their epochs
        let steps = if cfg!(miri) { 4 } else { 41 };
        run_steps(&[0, 1], &[5, 1, 3, 2], 11, steps);
        if !cfg!(miri) {
            run_steps(&[0, 1, 2], &[1, 4], 6, steps);
        }
    }

    #[test]
    fn a_lost_gpu_ends_the_wait_naming_it() {
        let layout = Layout::new(2, 2, 1, 4).unwrap();
        let region = Region::new(&layout);
        let part = [1.0f32; 4];
        let mut out = [0f32; 4];
        let x = Exchange {
            layout: &layout,
            region: &region,
            gpu: 0,
            gpu_of: &[0, 1],
            block: 0,
            blocks: 1,
            len: 4,
            wait: Wait { polls: 1000 },
        };
        let mut counters = vec![0; layout.words_per_gpu()];
        // GPU 1 never runs its launch
        let r = x.run(
            &mut counters,
            &[Some(&part), None],
            &mut [Some(&mut out), None],
        );
        assert_eq!(r, Err(Stop::Lost { gpu: 1 }));
        assert_eq!(region.lost(&layout, 0), Some(1));
        assert_eq!(out, [0.0; 4], "nothing stored");
        assert!(counters.iter().all(|&c| c == 0), "the epoch is not used up");
        // the step's next cut gives up at once instead of waiting the bound again (the
        // bound is out of reach here), and so does GPU 1 when it comes back late
        let patient = Wait { polls: u64::MAX };
        let next = Exchange { wait: patient, ..x };
        let r = next.run(
            &mut counters,
            &[Some(&part), None],
            &mut [Some(&mut out), None],
        );
        assert_eq!(r, Err(Stop::Failed));
        let late = Exchange {
            gpu: 1,
            wait: patient,
            ..x
        };
        let mut late_counters = vec![0; layout.words_per_gpu()];
        late.post(&late_counters, &[None, Some(&part)]);
        // (GPU 0's flag of its last try taken back, so that GPU 1 waits)
        region.word(layout.flag(0, 0)).store(0, Ordering::Release);
        let r = late.collect(1, &mut late_counters, &mut [None, Some(&mut out)]);
        assert_eq!(r, Err(Stop::Failed));
        assert_eq!(
            region.lost(&layout, 1),
            None,
            "only the GPU that waited says why"
        );
        assert_eq!(out, [0.0; 4], "nothing stored");
        // cleared (with the counters), the next step starts afresh
        region.clear(layout.words_to_clear());
        assert_eq!(region.lost(&layout, 0), None);
        let mut c = [
            vec![0; layout.words_per_gpu()],
            vec![0; layout.words_per_gpu()],
        ];
        let mut outs = [[0f32; 4]; 2];
        thread::scope(|scope| {
            for (g, (c, o)) in c.iter_mut().zip(outs.iter_mut()).enumerate() {
                let x = Exchange {
                    gpu: g,
                    wait: patient,
                    ..x
                };
                scope.spawn(move || {
                    let mut p: Vec<Option<&[f32]>> = vec![None, None];
                    p[g] = Some(&part);
                    let mut out: Vec<Option<&mut [f32]>> = vec![None, None];
                    out[g] = Some(&mut o[..]);
                    x.run(c, &p, &mut out).unwrap();
                });
            }
        });
        assert_eq!(outs, [[2.0; 4]; 2]);
    }

    #[test]
    fn a_slot_outlives_the_next_epochs_post() {
        // GPU 0 runs ahead: it posts the next epoch before GPU 1 has read this one's slots
        let layout = Layout::new(2, 2, 1, 1).unwrap();
        let region = Region::new(&layout);
        let at = |gpu| Exchange {
            layout: &layout,
            region: &region,
            gpu,
            gpu_of: &[0, 1],
            block: 0,
            blocks: 1,
            len: 1,
            wait: Wait { polls: 1 << 20 },
        };
        let (x0, x1) = (at(0), at(1));
        let (mut c0, mut c1) = (
            vec![0; layout.words_per_gpu()],
            vec![0; layout.words_per_gpu()],
        );
        let (mut o0, mut o1) = ([0f32], [0f32]);
        let e0 = x0.post(&c0, &[Some(&[1.0]), None]);
        let e1 = x1.post(&c1, &[None, Some(&[2.0])]);
        x0.collect(e0, &mut c0, &mut [Some(&mut o0), None]).unwrap();
        let next = x0.post(&c0, &[Some(&[100.0]), None]);
        x1.collect(e1, &mut c1, &mut [None, Some(&mut o1)]).unwrap();
        assert_eq!(
            (o0, o1),
            ([3.0], [3.0]),
            "both read the first epoch's partials"
        );
        // and GPU 0 cannot finish the next epoch until GPU 1 posts it
        let early = Exchange {
            wait: Wait { polls: 100 },
            ..at(0)
        };
        assert_eq!(
            early.collect(next, &mut c0, &mut [Some(&mut o0), None]),
            Err(Stop::Lost { gpu: 1 })
        );
    }

    /// The text of entry `name` in module `module`, from `.visible .entry` to its closing brace.
    fn entry_text<'a>(module: &'a str, name: &str) -> &'a str {
        let start = module
            .find(&format!(".visible .entry {name}("))
            .unwrap_or_else(|| panic!("{name} in the module"));
        let end = start + module[start..].find("\n}\n").expect("entry closed") + 3;
        &module[start..end]
    }

    /// The lines of an entry's body (after its opening brace).
    fn body(text: &str) -> Vec<&str> {
        text[text.find("{\n").unwrap() + 2..].lines().collect()
    }

    // (not under miri: string work in safe code, minutes there; see `ptx`'s tests)
    #[test]
    #[cfg_attr(miri, ignore)]
    fn every_kernel_is_the_exchange_then_the_peer_body_over_the_slots() {
        for n in [1, 2, 3, 4, 8] {
            let (module, peer_module) = (ptx(n), ptx::ptx(n));
            for e in Epilogue::ALL {
                let t = entry_text(&module, &kernel_name(n, e));
                let list: Vec<String> = params(n, e)
                    .into_iter()
                    .map(|p| format!("    .param {} {}", p.ptx_type(), p.name()))
                    .collect();
                assert!(t.contains(&list.join(",\n")), "parameters of {e:?} x{n}");
                // post, fence, flags, wait, fence, body, counters: in that order
                let at = |needle: &str| t.find(needle).unwrap_or_else(|| panic!("{needle}"));
                let post = if e == Epilogue::AddRmsNormMul {
                    "M_ROW:"
                } else {
                    "M_POST:"
                };
                let order = [
                    "M_EPOCH:",
                    post,
                    "M_POSTED:\n    bar.sync 0;\n    @%mt0 membar.sys;",
                    "M_FLAG:",
                    "st.volatile.global.u32 [%me], %mep;",
                    "M_POLL:",
                    "M_ERRS:",
                    "st.volatile.global.u32 [%me], %mf;\nM_GIVEUP:",
                    "M_GDONE:\n    membar.sys;",
                    "M_WAITED:\n    bar.sync 0;",
                    "@%mlate bra M_FAILED;",
                    "M_LOCAL:",
                    "M_BODY:",
                    "\nDONE:",
                    "M_COUNT:",
                    "st.global.u32 [%me], %mep;",
                    "M_FAILED:\n    ret;",
                ];
                for w in order.windows(2) {
                    assert!(at(w[0]) < at(w[1]), "{} before {}", w[0], w[1]);
                }
                // the copies into the slots are volatile stores, one per member
                let posting = &t[at(post)..at("M_POSTED:")];
                assert_eq!(posting.matches("st.volatile.global.f32").count(), n);
                // without the exchange and the counters, the text is the peer kernel's with
                // its partials read from the slots, volatile
                let lines = body(t);
                let from = lines
                    .iter()
                    .position(|l| l.contains(".reg .pred %mdone"))
                    .unwrap();
                let to = lines.iter().position(|l| *l == "M_BODY:").unwrap();
                let done = lines.iter().position(|l| *l == "DONE:").unwrap();
                let failed = lines.iter().position(|l| *l == "M_FAILED:").unwrap();
                let mut rest: Vec<&str> = lines[..from].to_vec();
                rest.extend(&lines[to + 1..=done]);
                rest.extend(&lines[failed + 1..]);
                let peer_text = entry_text(&peer_module, &ptx::kernel_name(n, e));
                // (the peer kernel's loads of the partials' addresses)
                let takes_p = |l: &&str| l.contains("[p") || l.contains("cvta.to.global.u64 %a");
                let want: Vec<String> = body(peer_text)
                    .into_iter()
                    .filter(|l| !takes_p(l))
                    .map(|l| l.replace("ld.global.f32 %v", "ld.volatile.global.f32 %v"))
                    .collect();
                assert_eq!(rest, want, "{e:?} x{n}");
            }
        }
    }

    #[test]
    fn a_replayed_launch_takes_fresh_epochs_from_its_counters() {
        // the same launch (a captured step) twice: the epochs come from device memory, so the
        // second run does not mistake the first run's flags for its own
        let layout = Layout::new(2, 2, 1, 2).unwrap();
        let region = Region::new(&layout);
        let mut counters = vec![vec![0u32; layout.words_per_gpu()]; 2];
        for s in 0..3 {
            let parts = [[s as f32, 1.0], [10.0, s as f32]];
            let mut outs = [[0f32; 2]; 2];
            thread::scope(|scope| {
                for (g, (c, o)) in counters.iter_mut().zip(outs.iter_mut()).enumerate() {
                    let (layout, region, parts) = (&layout, &region, &parts);
                    scope.spawn(move || {
                        let x = Exchange {
                            layout,
                            region,
                            gpu: g,
                            gpu_of: &[0, 1],
                            block: 0,
                            blocks: 1,
                            len: 2,
                            wait: Wait { polls: u64::MAX },
                        };
                        let p: Vec<Option<&[f32]>> =
                            (0..2).map(|k| (k == g).then_some(&parts[k][..])).collect();
                        let mut out: Vec<Option<&mut [f32]>> = vec![None, None];
                        out[g] = Some(&mut o[..]);
                        x.run(c, &p, &mut out).unwrap();
                    });
                }
            });
            for o in outs {
                assert_eq!(o, [s as f32 + 10.0, 1.0 + s as f32], "replay {s}");
            }
        }
        assert!(counters.iter().flatten().all(|&c| c == 3));
    }
}
