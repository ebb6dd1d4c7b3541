//! The host-mapped AllReduce, as plain data and a model: how GPUs that cannot read each other's
//! memory (GeForce cards on PCIe: no peer access) exchange their partial sums through pinned
//! host memory that every GPU maps, and synchronise with flags in that memory, without system
//! atomics (consumer cards report no `hostNativeAtomicSupported`).
//!
//! * [`Layout`]: where one meta device's exchange lives in the pinned region: per parity and
//!   member a slot for its partial, per GPU and block a flag, per GPU an error word.
//! * [`choose`]: which AllReduce a set of GPUs gets (our peer kernel, this one, or neither),
//!   and the reason, said once per meta device.
//! * [`Exchange`]: the protocol run by one block of one GPU's kernel, over a [`Region`] of
//!   32-bit words; the tests here run it on threads (under miri too).
//! * [`ptx`]: the kernel that does the same steps on the mapped memory (the plain sum; no
//!   epilogue yet), checked on a GPU by `bench/ptxcheck/mappedcheck.c` against this contract.
//!   The meta backend does not launch it yet.
//!
//! The protocol, for one cut (one launch per GPU, every GPU the same grid of `blocks` blocks,
//! block `b` of every GPU taking the same units: contiguous [`share`]s in the model, the peer
//! kernel's grid-stride order in [`ptx`]):
//!
//! 1. Block `b` reads its epoch `e` from its own counter in device memory: the counter's value
//!    plus one ([`next_epoch`]). Each block keeps its own counter, so no block of a launch can
//!    see another's update, and a captured step replays with fresh epochs.
//! 2. It copies its units of every partial of its GPU's members into their slots of parity
//!    `e & 1`, then (after a system-scope fence) writes `e` into its flag (its GPU, block `b`).
//! 3. It waits until the flag of block `b` of every other GPU reads `e`, or the epoch after it
//!    (that GPU ran ahead, [`reached`]), with a system-scope fence after the last read, at
//!    most a bound ([`Wait`]); past it, it writes the GPU it waited for into
//!    its error word and ends without storing anything: the step fails, naming that GPU.
//! 4. It sums its units of all slots in [`crate::exchange::reference_sum`] order (the same bits
//!    as every other path, on every device) and stores the results on its GPU's members.
//! 5. It writes `e` to its counter.
//!
//! Why no slot is overwritten while another GPU reads it: GPU `g` writes a slot of parity `p`
//! again two epochs later, in `e + 2`, after block `b` of every GPU posted `e + 1`, i.e. after
//! each of them finished `e` (a GPU runs its launches in order) and with it every read of
//! block `b`'s units of the `e` slots. A failed step leaves the epochs of the GPUs apart: the
//! meta backend then clears every flag, error word and counter ([`Layout::words_to_clear`])
//! before the next step.
//!
//! Never a hang: a block waits only for the block of the same index on *other* GPUs and for
//! nothing on its own, so the blocks of one GPU need not be resident together; the members a
//! GPU holds (two on one GPU, as `CUDA0,CUDA0`) are served by one launch, so no launch of a GPU
//! waits for another launch of the same GPU. Every wait is bounded.

use std::fmt::Write;
use std::ops::Range;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::exchange;
use crate::ptx::{self, op};

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
    /// Blocks of every launch.
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
    /// launches have `blocks` blocks; None when it does not fit in memory's address range or
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

/// The entry point of the mapped kernel for `n` members (the plain sum).
pub fn kernel_name(n: usize) -> String {
    format!("ggml_meta_allreduce_mapped_sum_f32_x{n}")
}

/// The kernel's parameters, in order (all `.u64`): `p0..p(n-1)` (a member's partial on this
/// GPU, else 0), `s0..s(n-1)` (where to store its sum on this GPU, else 0), `slots` (the
/// region's address on this GPU), `slot_bytes`, `flags` (the first flag's address),
/// `flag_bytes` (one GPU's flag array), `error` (this GPU's error word), `counters` (one `u32`
/// per block, device memory), `gpu`, `gpus`, `timeout` (ns), `first`, `limit` (elements).
pub fn params(n: usize) -> Vec<String> {
    let mut v: Vec<String> = (0..n).map(|k| format!("p{k}")).collect();
    v.extend((0..n).map(|k| format!("s{k}")));
    for p in [
        "slots",
        "slot_bytes",
        "flags",
        "flag_bytes",
        "error",
        "counters",
        "gpu",
        "gpus",
        "timeout",
        "first",
        "limit",
    ] {
        v.push(p.to_owned());
    }
    v
}

/// The PTX module of the mapped kernel for `n >= 1` members: [`Exchange::run`] as one block of
/// the grid runs it, with the peer kernel's grid-stride element order (block `b`, thread `t`:
/// elements `first + b*ntid + t`, then every `nctaid*ntid` further), the same in the copy into
/// the slots and in the sum, so a block sums exactly the elements the same block of every GPU
/// posted. Slots and flags are read and written with `.volatile` (system-coherent), a
/// `membar.sys` orders the slot stores before the flag and the flag before the slot loads, and
/// the wait is bounded by `%globaltimer`.
pub fn ptx(n: usize) -> String {
    assert!(n >= 1, "a mapped AllReduce needs at least one member");
    let mut s = String::from(".version 7.0\n.target sm_52\n.address_size 64\n\n");
    let list: Vec<String> = params(n)
        .into_iter()
        .map(|p| format!("    .param .u64 {p}"))
        .collect();
    let _ = write!(
        s,
        ".visible .entry {}(\n{}\n)\n{{\n",
        kernel_name(n),
        list.join(",\n")
    );
    let chain = n.saturating_sub(1).max(1);
    op!(s, ".reg .pred %done, %t0, %ok, %late, %hp<{n}>, %hs<{n}>;");
    op!(s, ".reg .b32 %r<4>, %c, %ep, %nx, %f, %fail;");
    op!(
        s,
        ".reg .b64 %i, %i0, %limit, %stride, %off, %e, %t, %bo, %p<{n}>, %so<{n}>, %sl<{n}>, \
             %base, %sb, %fl, %fb, %err, %cnt, %g, %gpu, %gpus, %to, %ts, %tn, %fa;"
    );
    op!(s, ".reg .f32 %v<{n}>, %s<{chain}>;");
    op!(s, ".shared .align 4 .u32 sh_e;");
    op!(s, ".shared .align 4 .u32 sh_fail;");
    for (param, reg, pred) in [("p", "p", "hp"), ("s", "so", "hs")] {
        for k in 0..n {
            op!(s, "ld.param.u64 %{reg}{k}, [{param}{k}];");
            op!(s, "setp.ne.u64 %{pred}{k}, %{reg}{k}, 0;");
            op!(s, "@%{pred}{k} cvta.to.global.u64 %{reg}{k}, %{reg}{k};");
        }
    }
    for (reg, param, global) in [
        ("base", "slots", true),
        ("sb", "slot_bytes", false),
        ("fl", "flags", true),
        ("fb", "flag_bytes", false),
        ("err", "error", true),
        ("cnt", "counters", true),
        ("gpu", "gpu", false),
        ("gpus", "gpus", false),
        ("to", "timeout", false),
    ] {
        op!(s, "ld.param.u64 %{reg}, [{param}];");
        if global {
            op!(s, "cvta.to.global.u64 %{reg}, %{reg};");
        }
    }
    // 1. the epoch: thread 0 reads the block's counter and shares the next epoch
    s.push_str(
        "    mov.u32 %r0, %ctaid.x;
    mov.u32 %r1, %ntid.x;
    mov.u32 %r2, %tid.x;
    mov.u32 %r3, %nctaid.x;
    mul.wide.u32 %bo, %r0, 4;
    add.u64 %cnt, %cnt, %bo;
    setp.eq.u32 %t0, %r2, 0;
    @!%t0 bra EPOCH;
    ld.volatile.global.u32 %c, [%cnt];
    setp.eq.u32 %late, %c, 0xFFFFFFFF;
    add.u32 %ep, %c, 1;
    @%late mov.u32 %ep, 2;
    st.shared.u32 [sh_e], %ep;
    mov.u32 %fail, 0;
    st.shared.u32 [sh_fail], %fail;
EPOCH:
    bar.sync 0;
    ld.shared.u32 %ep, [sh_e];
    and.b32 %c, %ep, 1;
    cvt.u64.u32 %t, %c;
",
    );
    op!(s, "mul.lo.u64 %t, %t, {n};");
    for k in 0..n {
        op!(s, "add.u64 %e, %t, {k};");
        op!(s, "mul.lo.u64 %e, %e, %sb;");
        op!(s, "add.u64 %sl{k}, %base, %e;");
    }
    s.push_str(
        "    ld.param.u64 %i0, [first];
    ld.param.u64 %limit, [limit];
    mul.wide.u32 %t, %r0, %r1;
    add.u64 %i0, %i0, %t;
    cvt.u64.u32 %t, %r2;
    add.u64 %i0, %i0, %t;
    mul.wide.u32 %stride, %r3, %r1;
    mov.u64 %i, %i0;
POST:
    setp.ge.u64 %done, %i, %limit;
    @%done bra POSTED;
    shl.b64 %off, %i, 2;
",
    );
    // 2. this GPU's members' partials into their slots, then the flag
    for k in 0..n {
        op!(s, "add.u64 %e, %p{k}, %off;");
        op!(s, "@%hp{k} ld.global.f32 %v{k}, [%e];");
        op!(s, "add.u64 %e, %sl{k}, %off;");
        op!(s, "@%hp{k} st.volatile.global.f32 [%e], %v{k};");
    }
    // 3. thread 0 posts, then waits for every other GPU's block of the same index
    s.push_str(
        "    add.u64 %i, %i, %stride;
    bra POST;
POSTED:
    membar.sys;
    bar.sync 0;
    @!%t0 bra WAITED;
    mul.lo.u64 %e, %gpu, %fb;
    add.u64 %e, %e, %fl;
    add.u64 %e, %e, %bo;
    st.volatile.global.u32 [%e], %ep;
    setp.eq.u32 %late, %ep, 0xFFFFFFFF;
    add.u32 %nx, %ep, 1;
    @%late mov.u32 %nx, 2;
    mov.u64 %g, 0;
GLOOP:
    setp.ge.u64 %done, %g, %gpus;
    @%done bra GDONE;
    setp.eq.u64 %done, %g, %gpu;
    @%done bra GNEXT;
    mul.lo.u64 %fa, %g, %fb;
    add.u64 %fa, %fa, %fl;
    add.u64 %fa, %fa, %bo;
    mov.u64 %ts, %globaltimer;
POLL:
    ld.volatile.global.u32 %f, [%fa];
    setp.eq.u32 %ok, %f, %ep;
    @%ok bra GNEXT;
    setp.eq.u32 %ok, %f, %nx;
    @%ok bra GNEXT;
    mov.u64 %tn, %globaltimer;
    sub.u64 %tn, %tn, %ts;
    setp.le.u64 %late, %tn, %to;
    @%late bra POLL;
    cvt.u32.u64 %f, %g;
    add.u32 %f, %f, 1;
    st.volatile.global.u32 [%err], %f;
    mov.u32 %fail, 1;
    st.shared.u32 [sh_fail], %fail;
    bra GDONE;
GNEXT:
    add.u64 %g, %g, 1;
    bra GLOOP;
GDONE:
    membar.sys;
WAITED:
    bar.sync 0;
    ld.shared.u32 %fail, [sh_fail];
    setp.ne.u32 %late, %fail, 0;
    @%late bra DONE;
    mov.u64 %i, %i0;
SUM:
    setp.ge.u64 %done, %i, %limit;
    @%done bra SUMMED;
    shl.b64 %off, %i, 2;
",
    );
    // 4. every member's slot, summed in reference order, stored on this GPU's members
    for k in 0..n {
        op!(s, "add.u64 %e, %sl{k}, %off;");
        op!(s, "ld.volatile.global.f32 %v{k}, [%e];");
    }
    let sum = ptx::reference_sum(&mut s, n, 0, 0);
    for k in 0..n {
        op!(s, "add.u64 %e, %so{k}, %off;");
        op!(s, "@%hs{k} st.global.f32 [%e], {sum};");
    }
    // 5. the counter moves on
    s.push_str(
        "    add.u64 %i, %i, %stride;
    bra SUM;
SUMMED:
    @%t0 st.volatile.global.u32 [%cnt], %ep;
DONE:
    ret;
}
",
    );
    s
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

/// A block gave up waiting for GPU `gpu`'s flag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lost {
    pub gpu: usize,
}

/// One block of one GPU's launch for one cut.
#[derive(Debug)]
pub struct Exchange<'a> {
    pub layout: &'a Layout,
    pub region: &'a Region,
    /// The launching GPU.
    pub gpu: usize,
    /// GPU of each member.
    pub gpu_of: &'a [usize],
    pub block: usize,
    /// Values in each partial (at most the layout's capacity).
    pub len: usize,
    pub wait: Wait,
}

impl Exchange<'_> {
    /// Runs the protocol (module doc) for this block: `counter` is the block's epoch counter
    /// in device memory; `partials[k]` and `outputs[k]` are member `k`'s partial and result
    /// where `k` is on this GPU (ignored elsewhere).
    pub fn run(
        &self,
        counter: &mut u32,
        partials: &[Option<&[f32]>],
        outputs: &mut [Option<&mut [f32]>],
    ) -> Result<(), Lost> {
        let e = self.post(*counter, partials);
        self.collect(e, counter, outputs)
    }

    /// Steps 1 and 2: copies this GPU's partials into their slots and posts the epoch, which
    /// it returns.
    pub fn post(&self, counter: u32, partials: &[Option<&[f32]>]) -> u32 {
        let (l, r) = (self.layout, self.region);
        let e = next_epoch(counter);
        let slot_parity = (e & 1) as usize;
        for k in (0..l.members).filter(|&k| self.gpu_of[k] == self.gpu) {
            let p = partials[k].expect("a partial for every member on this GPU");
            for i in share(self.block, l.blocks, self.len) {
                r.word(l.slot(slot_parity, k) + 4 * i)
                    .store(p[i].to_bits(), Ordering::Relaxed);
            }
        }
        r.word(l.flag(self.gpu, self.block))
            .store(e, Ordering::Release);
        e
    }

    /// Steps 3 to 5 for epoch `e`: waits for every other GPU's post, sums and stores, and
    /// moves the counter on. A wait past the bound stores nothing and leaves the counter.
    pub fn collect(
        &self,
        e: u32,
        counter: &mut u32,
        outputs: &mut [Option<&mut [f32]>],
    ) -> Result<(), Lost> {
        let (l, r) = (self.layout, self.region);
        for g in (0..l.gpus).filter(|&g| g != self.gpu) {
            let flag = r.word(l.flag(g, self.block));
            let mut polls = 0u64;
            while !reached(flag.load(Ordering::Acquire), e) {
                polls += 1;
                if polls >= self.wait.polls {
                    r.word(l.error(self.gpu))
                        .store(g as u32 + 1, Ordering::Release);
                    return Err(Lost { gpu: g });
                }
                std::hint::spin_loop();
            }
        }
        let slot_parity = (e & 1) as usize;
        let mut parts = vec![0f32; l.members];
        for i in share(self.block, l.blocks, self.len) {
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
        *counter = e;
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

    /// Runs `steps` cuts of `len` values over members on GPUs `gpu_of`, every GPU's launch of
    /// `blocks` blocks on threads (blocks of a GPU in turn, GPUs at once), and checks every
    /// member's result of every step against the reference sum.
    fn run_steps(gpu_of: &[usize], blocks: usize, len: usize, steps: usize) {
        let members = gpu_of.len();
        let gpus = gpu_of.iter().max().unwrap() + 1;
        let layout = Layout::new(members, gpus, blocks, len).unwrap();
        let region = Region::new(&layout);
        thread::scope(|scope| {
            for g in 0..gpus {
                let (layout, region) = (&layout, &region);
                scope.spawn(move || {
                    let mut counters = vec![0u32; blocks];
                    for s in 0..steps {
                        let parts: Vec<Vec<f32>> = (0..members)
                            .map(|k| (0..len).map(|i| value(s, k, i)).collect())
                            .collect();
                        let mut outs: Vec<Vec<f32>> = vec![vec![f32::NAN; len]; members];
                        for (b, counter) in counters.iter_mut().enumerate() {
                            let x = Exchange {
                                layout,
                                region,
                                gpu: g,
                                gpu_of,
                                block: b,
                                len,
                                wait: Wait { polls: u64::MAX },
                            };
                            let p: Vec<Option<&[f32]>> =
                                parts.iter().map(|v| Some(v.as_slice())).collect();
                            let mut o: Vec<Option<&mut [f32]>> =
                                outs.iter_mut().map(|v| Some(v.as_mut_slice())).collect();
                            x.run(counter, &p, &mut o).unwrap();
                        }
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
        run_steps(&[0, 1], 3, 7, steps);
        run_steps(&[0, 1, 2], 2, 5, steps);
        if !cfg!(miri) {
            run_steps(&[0, 1, 2, 3], 4, 33, steps);
        }
        // two members on one GPU, one launch for both (CUDA0,CUDA0)
        run_steps(&[0, 0], 2, 9, steps);
        // mixed: two on the first GPU, one on the second
        run_steps(&[0, 0, 1], 3, 6, steps);
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
            len: 4,
            wait: Wait { polls: 1000 },
        };
        let mut counter = 0;
        // GPU 1 never runs its launch
        let r = x.run(
            &mut counter,
            &[Some(&part), None],
            &mut [Some(&mut out), None],
        );
        assert_eq!(r, Err(Lost { gpu: 1 }));
        assert_eq!(region.lost(&layout, 0), Some(1));
        assert_eq!(out, [0.0; 4], "nothing stored");
        assert_eq!(counter, 0, "the epoch is not used up");
        // cleared (with the counters), the next step starts afresh
        region.clear(layout.words_to_clear());
        assert_eq!(region.lost(&layout, 0), None);
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
            len: 1,
            wait: Wait { polls: 1 << 20 },
        };
        let (x0, x1) = (at(0), at(1));
        let (mut c0, mut c1) = (0u32, 0u32);
        let (mut o0, mut o1) = ([0f32], [0f32]);
        let e0 = x0.post(c0, &[Some(&[1.0]), None]);
        let e1 = x1.post(c1, &[None, Some(&[2.0])]);
        x0.collect(e0, &mut c0, &mut [Some(&mut o0), None]).unwrap();
        let next = x0.post(c0, &[Some(&[100.0]), None]);
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
            Err(Lost { gpu: 1 })
        );
    }

    #[test]
    fn the_kernel_text_follows_the_protocol() {
        for n in [1, 2, 3, 4, 8] {
            let t = ptx(n);
            assert!(t.contains(&format!(".visible .entry {}(", kernel_name(n))));
            for p in params(n) {
                assert!(t.contains(&format!(".param .u64 {p}")), "{p}");
            }
            // post, fence, flag, wait, fence, sum, counter: in that order
            let at = |needle: &str| t.find(needle).unwrap_or_else(|| panic!("{needle}"));
            let order = [
                "POST:",
                "membar.sys",
                "st.volatile.global.u32 [%e], %ep",
                "POLL:",
                "GDONE:",
                "SUM:",
                "st.volatile.global.u32 [%cnt], %ep",
            ];
            for w in order.windows(2) {
                assert!(at(w[0]) < at(w[1]), "{} before {}", w[0], w[1]);
            }
            // every slot read after the wait is volatile, and n of them
            let sum = &t[at("SUM:")..];
            assert_eq!(sum.matches("ld.volatile.global.f32").count(), n);
            // the sum's additions in reference order: n - 1 of them
            assert_eq!(sum.matches("add.rn.f32").count(), n - 1);
            // a wait past the bound names the GPU and skips the sum
            assert!(t.contains("st.volatile.global.u32 [%err], %f"));
            // registers declared for every member
            assert!(t.contains(&format!("%sl<{n}>")));
        }
        // the reference order for four: (p0 + p1) + (p2 + p3)
        let four = ptx(4);
        assert!(four.contains("add.rn.f32 %s0, %v0, %v1;"));
        assert!(four.contains("add.rn.f32 %s1, %v2, %v3;"));
        assert!(four.contains("add.rn.f32 %s2, %s0, %s1;"));
    }

    #[test]
    fn a_replayed_launch_takes_fresh_epochs_from_its_counters() {
        // the same launch (a captured step) twice: the epochs come from device memory, so the
        // second run does not mistake the first run's flags for its own
        let layout = Layout::new(2, 2, 1, 2).unwrap();
        let region = Region::new(&layout);
        let mut counters = [0u32; 2];
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
        assert_eq!(counters, [3, 3]);
    }
}
