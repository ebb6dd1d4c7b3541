//! The PTX of the meta backend's CUDA AllReduce kernels, generated per device count as text.
//! The root crate's `meta::cuda` hands it to the CUDA driver, which compiles it for the GPU at
//! run time; here it is only a string, so its summation order is tested without a GPU.
//!
//! One module ([`ptx`]) per device count `n` holds three entries ([`kernel_name`]), one per
//! [`Epilogue`]. All of them sum element `i` of the `n` partials in
//! [`exchange::reference_expr`] order into `S` and store `S` wherever asked; they differ in
//! what follows the sum:
//!
//! * [`Epilogue::Sum`]: nothing (the plain AllReduce);
//! * [`Epilogue::Add`]: `X = r[i] + S` (a residual add);
//! * [`Epilogue::AddRmsNormMul`]: `X` as for `Add`, then per row of `ncols` elements
//!   `Z = (rsqrt(mean(X²) + eps) * X) * w[col]` (ggml's `rms_norm` and the `mul` by its
//!   weight), with `X` still in registers where a thread's columns of the row fit one trip
//!   ([`row_chunk`] columns: decode rows), else read back from the first non-null `x` (the
//!   launcher passes one, on the launching GPU). `S` and `X` are exact; `Z` is not
//!   bit-reproducible elsewhere: the row's sum of squares is a tree of f32 adds over the block
//!   and the root is `rsqrt.approx.f32`; but both paths give the same `Z` (the same values,
//!   summed in the same order).
//!
//! The parameters are listed by [`params`] in order. Every output is a list of `n` pointers,
//! each one nullable (0: not stored): a launch writes only the devices it is meant to write
//! (see [`crate::launch`]). Outputs may alias inputs (in-place ops); every element is read and
//! written by one thread only, which loads all inputs of the element before any store, stores
//! `S`, then `X`, then `Z` (so where two outputs are the same memory the later one stays).
//! `AddRmsNormMul` loads all inputs of a trip's elements (up to [`row_chunk`] columns a thread)
//! before the trip's first store, and the weight `w`, which no output aliases, after its `X`.
//!
//! `Sum` and `Add` take an element range `[first, limit)` which the threads of the grid stride
//! over. `AddRmsNormMul` takes a row range: block `b` takes rows `first + b`,
//! `first + b + nctaid`, ... below `limit`, and its threads stride over the row's columns
//! (thread `tid` takes `tid, tid + ntid, ...`, see [`row_chunk`]); it needs a block of a
//! multiple of 32 threads, at most 1024 (one shared slot per warp).
//!
//! Arithmetic is f32, rounded to nearest, denormals kept (no `.ftz`). Target PTX 7.0 / sm_52,
//! so the driver compiles it for any GPU it supports (`shfl.sync` needs PTX 6.0).

use crate::exchange;
use std::fmt::Write;

/// What a kernel does after the sum (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Epilogue {
    Sum,
    Add,
    AddRmsNormMul,
}

impl Epilogue {
    pub const ALL: [Epilogue; 3] = [Epilogue::Sum, Epilogue::Add, Epilogue::AddRmsNormMul];

    pub(crate) fn tag(self) -> &'static str {
        match self {
            Epilogue::Sum => "sum",
            Epilogue::Add => "add",
            Epilogue::AddRmsNormMul => "add_rms_mul",
        }
    }
}

/// One kernel parameter. All are `.u64` (addresses, counts, indices) except [`Param::Eps`],
/// a `.f32`. `(k)` is the device index.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Param {
    /// `p{k}`: device `k`'s partial sum (read; never null).
    Partial(usize),
    /// `s{k}`: where to store the sum `S` (nullable).
    SumOut(usize),
    /// `r`: the residual (read).
    Residual,
    /// `x{k}`: where to store `X = r + S` (nullable).
    AddOut(usize),
    /// `w`: the norm's weight, `ncols` elements (read).
    Weight,
    /// `z{k}`: where to store the normalised, weighted row (nullable).
    NormOut(usize),
    /// `eps`: added to the mean square.
    Eps,
    /// `ncols`: elements per row.
    Ncols,
    /// `first`: the first element (`Sum`, `Add`) or row (`AddRmsNormMul`).
    First,
    /// `limit`: one past the last element or row.
    Limit,
    /// The mapped kernels' own (`crate::mapped`): the pinned region as this GPU sees it, one
    /// slot's bytes, the first flag, one GPU's flag array in bytes, the first error word, this
    /// GPU's epoch counters (device memory, one per flag), its index and the GPUs' count, and
    /// the wait's bound in nanoseconds.
    Slots,
    SlotBytes,
    Flags,
    FlagBytes,
    Errors,
    Counters,
    Gpu,
    Gpus,
    Timeout,
}

impl Param {
    /// Its name in the PTX.
    pub fn name(self) -> String {
        match self {
            Param::Partial(k) => format!("p{k}"),
            Param::SumOut(k) => format!("s{k}"),
            Param::Residual => "r".into(),
            Param::AddOut(k) => format!("x{k}"),
            Param::Weight => "w".into(),
            Param::NormOut(k) => format!("z{k}"),
            Param::Eps => "eps".into(),
            Param::Ncols => "ncols".into(),
            Param::First => "first".into(),
            Param::Limit => "limit".into(),
            Param::Slots => "slots".into(),
            Param::SlotBytes => "slot_bytes".into(),
            Param::Flags => "flags".into(),
            Param::FlagBytes => "flag_bytes".into(),
            Param::Errors => "errors".into(),
            Param::Counters => "counters".into(),
            Param::Gpu => "gpu".into(),
            Param::Gpus => "gpus".into(),
            Param::Timeout => "timeout".into(),
        }
    }

    /// Its PTX type: `.f32` for [`Param::Eps`], `.u64` for the rest.
    pub fn ptx_type(self) -> &'static str {
        match self {
            Param::Eps => ".f32",
            _ => ".u64",
        }
    }
}

/// The entry point of the kernel for `n` partials and epilogue `e`.
pub fn kernel_name(n: usize, e: Epilogue) -> String {
    format!("ggml_meta_allreduce_{}_f32_x{n}", e.tag())
}

/// The parameters of the kernel for `n` partials and epilogue `e`, in order:
/// `p0..p(n-1)`, `s0..s(n-1)`; for `Add` and `AddRmsNormMul` then `r`, `x0..x(n-1)`; for
/// `AddRmsNormMul` then `w`, `z0..z(n-1)`, `eps`, `ncols`; last `first`, `limit`.
pub fn params(n: usize, e: Epilogue) -> Vec<Param> {
    let mut v: Vec<Param> = (0..n).map(Param::Partial).collect();
    v.extend((0..n).map(Param::SumOut));
    if e != Epilogue::Sum {
        v.push(Param::Residual);
        v.extend((0..n).map(Param::AddOut));
    }
    if e == Epilogue::AddRmsNormMul {
        v.push(Param::Weight);
        v.extend((0..n).map(Param::NormOut));
        v.extend([Param::Eps, Param::Ncols]);
    }
    v.extend([Param::First, Param::Limit]);
    v
}

/// The PTX module for `n >= 1` partials, holding the entries of all three epilogues.
pub fn ptx(n: usize) -> String {
    module(n, Source::Peer)
}

/// Where a kernel reads the partials: in the devices' memory (peer access), or in the slots
/// of the pinned host region after the exchange ([`crate::mapped`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Source {
    Peer,
    Mapped,
}

impl Source {
    /// The load of a partial's value. A slot is read `.volatile`: another GPU wrote it during
    /// this kernel, so no copy of it may come from a cache filled before.
    fn load(self) -> &'static str {
        match self {
            Source::Peer => "ld.global.f32",
            Source::Mapped => "ld.volatile.global.f32",
        }
    }
}

/// The module for `n >= 1` partials read from `src`, with one entry per epilogue.
pub(crate) fn module(n: usize, src: Source) -> String {
    assert!(n >= 1, "an AllReduce kernel needs at least one partial");
    let mut s = String::from(".version 7.0\n.target sm_52\n.address_size 64\n");
    for e in Epilogue::ALL {
        s.push('\n');
        s.push_str(&entry(n, e, src));
    }
    s
}

/// One instruction line (indented) into a `String`.
macro_rules! op {
    ($s:expr, $($arg:tt)*) => {{
        let _ = writeln!($s, "    {}", format_args!($($arg)*));
    }};
}
pub(crate) use op;

fn entry(n: usize, e: Epilogue, src: Source) -> String {
    let mut s = String::new();
    let (name, params) = match src {
        Source::Peer => (kernel_name(n, e), params(n, e)),
        Source::Mapped => (
            crate::mapped::kernel_name(n, e),
            crate::mapped::params(n, e),
        ),
    };
    let list: Vec<String> = params
        .into_iter()
        .map(|p| format!("    .param {} {}", p.ptx_type(), p.name()))
        .collect();
    let add = e != Epilogue::Sum;
    let norm = e == Epilogue::AddRmsNormMul;
    // a block of 1024 threads must fit the register file (64K 32-bit registers)
    let bound = if norm { ".maxntid 1024, 1, 1\n" } else { "" };
    let _ = write!(
        s,
        ".visible .entry {name}(\n{}\n)\n{bound}{{\n",
        list.join(",\n")
    );
    let chain = n.saturating_sub(1).max(1);
    // registers: %a partial addresses, %so/%xo/%zo output addresses with their non-null
    // predicates %hs/%hx/%hz, %v the partials' values, %s the sums of the reference order
    let mut pred = format!("%done, %hs<{n}>");
    let mut b64 = format!("%e, %t, %limit, %a<{n}>, %so<{n}>");
    let mut f32 = String::new();
    if add {
        pred += &format!(", %hx<{n}>");
        b64 += &format!(", %ra, %xo<{n}>");
    }
    if norm {
        // per column j of a trip (see `row_body`): %lc its column in the trip, %in whether it
        // is in the row, %v/%s/%rv the sum's operands, %x X, %wt w[col]
        let u = row_chunk(n);
        pred += &format!(", %hz<{n}>, %cdone, %lead, %w0, %inw, %fit, %in<{u}>");
        b64 += &format!(", %wa, %zo<{n}>, %xb, %ncols, %row, %base, %cbase, %cchunk, %rem");
        b64 += ", %roff, %wroff, %co, %rstep, %red, %slot, %lslot";
        f32 += &format!(
            "%v<{}>, %s<{}>, %rv<{u}>, %x<{u}>, %wt<{u}>",
            n * u,
            chain * u
        );
        f32 += ", %acc, %o, %eps, %nf, %scale, %z";
    } else {
        b64 = format!("%off, {b64}, %i, %stride");
        f32 = format!("%v<{n}>, %s<{chain}>");
        if add {
            f32 += ", %rv, %x";
        }
    }
    op!(s, ".reg .pred {pred};");
    if norm {
        op!(
            s,
            ".reg .b32 %r<4>, %lane, %warp, %nw, %lc<{}>;",
            row_chunk(n)
        );
    } else {
        op!(s, ".reg .b32 %r<4>;");
    }
    op!(s, ".reg .b64 {b64};");
    op!(s, ".reg .f32 {f32};");
    if norm {
        // 32 warp partials, then the row's total (a slot of its own: see `row_body`)
        op!(s, ".shared .align 4 .f32 red[33];");
    }
    match src {
        Source::Peer => {
            for k in 0..n {
                op!(s, "ld.param.u64 %a{k}, [p{k}];");
                op!(s, "cvta.to.global.u64 %a{k}, %a{k};");
            }
        }
        // the exchange, which leaves the slots' addresses in %a
        Source::Mapped => crate::mapped::prologue(&mut s, n, e),
    }
    let nullable = |s: &mut String, out: &str, h: &str, param: &str| {
        for k in 0..n {
            op!(s, "ld.param.u64 %{out}{k}, [{param}{k}];");
            op!(s, "setp.ne.u64 %{h}{k}, %{out}{k}, 0;");
            op!(s, "@%{h}{k} cvta.to.global.u64 %{out}{k}, %{out}{k};");
        }
    };
    nullable(&mut s, "so", "hs", "s");
    if add {
        op!(s, "ld.param.u64 %ra, [r];");
        op!(s, "cvta.to.global.u64 %ra, %ra;");
        nullable(&mut s, "xo", "hx", "x");
    }
    if norm {
        op!(s, "ld.param.u64 %wa, [w];");
        op!(s, "cvta.to.global.u64 %wa, %wa;");
        nullable(&mut s, "zo", "hz", "z");
        row_body(&mut s, n, src);
    } else {
        grid_body(&mut s, n, add, src);
    }
    s.push_str("DONE:\n");
    if src == Source::Mapped {
        crate::mapped::finish(&mut s);
    }
    s.push_str("    ret;\n}\n");
    s
}

/// The sum of `n` partials in reference order over the registers `%v{first}..`, into
/// `%s{sums}..`; returns the register holding it.
pub(crate) fn reference_sum(s: &mut String, n: usize, first: usize, sums: usize) -> String {
    let mut next = sums;
    exchange::reference_expr(
        (0..n).map(|k| format!("%v{}", first + k)).collect(),
        |a, b| {
            let d = format!("%s{next}");
            next += 1;
            op!(s, "add.rn.f32 {d}, {a}, {b};");
            d
        },
    )
    .expect("n >= 1")
}

/// The work of element `i` (byte offset in `%off`): load the partials, sum them in reference
/// order, store `S`; with `add`, `X = r[i] + S` into `%x` and stored.
fn element(s: &mut String, n: usize, add: bool, src: Source) {
    for k in 0..n {
        op!(s, "add.u64 %e, %a{k}, %off;");
        op!(s, "{} %v{k}, [%e];", src.load());
    }
    let sum = reference_sum(s, n, 0, 0);
    if add {
        op!(s, "add.u64 %e, %ra, %off;");
        op!(s, "ld.global.f32 %rv, [%e];");
    }
    // every input of the element is loaded: stores may now overwrite any of them
    store(s, n, "so", "hs", "%off", &sum);
    if add {
        op!(s, "add.rn.f32 %x, %rv, {sum};");
        store(s, n, "xo", "hx", "%off", "%x");
    }
}

/// `value` stored at byte offset `off` into every non-null output `%{out}k`.
fn store(s: &mut String, n: usize, out: &str, h: &str, off: &str, value: &str) {
    for k in 0..n {
        op!(s, "add.u64 %e, %{out}{k}, {off};");
        op!(s, "@%{h}{k} st.global.f32 [%e], {value};");
    }
}

/// The registers of an [`element_loop`]: the element, its limit, the stride, its byte offset,
/// a scratch register and predicate, and the block's `ctaid`, `ntid`, `tid`, `nctaid`.
pub(crate) struct Stride {
    pub i: &'static str,
    pub limit: &'static str,
    pub stride: &'static str,
    pub off: &'static str,
    pub t: &'static str,
    pub done: &'static str,
    pub ctaid: &'static str,
    pub ntid: &'static str,
    pub tid: &'static str,
    pub nctaid: &'static str,
}

/// The elements a thread takes in `Sum` and `Add`: from `first + ctaid*ntid + tid` (`r.i` holds
/// `first`), every `nctaid*ntid` further, below `r.limit`; the loop's head at `label`, leaving
/// for `exit`, with the element's byte offset in `r.off`. The exchange through host memory
/// (`crate::mapped`) copies the partials over the same loop, so a block posts exactly the
/// elements its body reads.
pub(crate) fn element_loop(s: &mut String, r: &Stride, label: &str, exit: &str) {
    let Stride {
        i,
        limit,
        stride,
        off,
        t,
        done,
        ctaid,
        ntid,
        tid,
        nctaid,
    } = r;
    op!(s, "mul.wide.u32 {t}, {ctaid}, {ntid};");
    op!(s, "add.u64 {i}, {i}, {t};");
    op!(s, "cvt.u64.u32 {t}, {tid};");
    op!(s, "add.u64 {i}, {i}, {t};");
    op!(s, "mul.wide.u32 {stride}, {nctaid}, {ntid};");
    let _ = writeln!(s, "{label}:");
    op!(s, "setp.ge.u64 {done}, {i}, {limit};");
    op!(s, "@{done} bra {exit};");
    op!(s, "shl.b64 {off}, {i}, 2;");
}

/// `Sum` and `Add`: the threads of the grid stride over the elements `[first, limit)`.
fn grid_body(s: &mut String, n: usize, add: bool, src: Source) {
    s.push_str(
        "    ld.param.u64 %i, [first];
    ld.param.u64 %limit, [limit];
    mov.u32 %r0, %ctaid.x;
    mov.u32 %r1, %ntid.x;
    mov.u32 %r2, %tid.x;
    mov.u32 %r3, %nctaid.x;
",
    );
    let r = Stride {
        i: "%i",
        limit: "%limit",
        stride: "%stride",
        off: "%off",
        t: "%t",
        done: "%done",
        ctaid: "%r0",
        ntid: "%r1",
        tid: "%r2",
        nctaid: "%r3",
    };
    element_loop(s, &r, "LOOP", "DONE");
    element(s, n, add, src);
    s.push_str("    add.u64 %i, %i, %stride;\n    bra LOOP;\n");
}

/// `%acc` summed over the 32 lanes of a warp (every lane gets the total).
fn butterfly(s: &mut String) {
    for d in [16, 8, 4, 2, 1] {
        op!(s, "shfl.sync.bfly.b32 %o, %acc, {d}, 31, 0xffffffff;");
        op!(s, "add.rn.f32 %acc, %acc, %o;");
    }
}

/// Columns a thread of `AddRmsNormMul` takes per loop trip for `n` partials (see
/// [`row_body`]): 4 up to 5 devices (decode rows of 4096 on 1024 threads take the register
/// path), fewer beyond: as many as fit the registers without spilling (a block of 1024 threads
/// has 64 a thread; checked with ptxas 12.9 for sm_80, sm_89, sm_90 and sm_100), and no more
/// than pay. On an H200 (`bench/ptxcheck/run.sh`) 8 columns for two devices took as long as 4
/// on rows of 8192 and longer on rows of 4096 and on 512 rows of 4096.
pub fn row_chunk(n: usize) -> usize {
    match n {
        0..=5 => 4,
        6 | 7 => 3,
        _ => 2,
    }
}

/// The trip at column `%cbase` of the row at element `%base`: `%in{j}` whether its column `j`
/// (`cbase + lc{j}`) is in the row, `%roff` the byte offset of its first element, `%wroff` that
/// of its first column in `w`.
fn trip(s: &mut String, u: usize) {
    op!(s, "sub.u64 %rem, %ncols, %cbase;");
    for j in 0..u {
        op!(s, "cvt.u64.u32 %t, %lc{j};");
        op!(s, "setp.lt.u64 %in{j}, %t, %rem;");
    }
    op!(s, "add.u64 %t, %base, %cbase;");
    op!(s, "shl.b64 %roff, %t, 2;");
    op!(s, "shl.b64 %wroff, %cbase, 2;");
}

/// Into `%e`: the address of column `j` of the trip in `base`, a row-major tensor (`%roff`) or
/// `w` (`%wroff`).
fn address(s: &mut String, base: &str, trip_off: &str, j: usize) {
    op!(s, "add.u64 %e, {base}, {trip_off};");
    op!(s, "mul.wide.u32 %t, %lc{j}, 4;");
    op!(s, "add.u64 %e, %e, %t;");
}

/// One load of a trip's column: the register, the tensor and trip offset of [`address`], and
/// the instruction.
type Load = (String, String, &'static str, &'static str);

/// The loads `of(j)` of the trip's columns: those of column `j` after the guard `%in{j}`, which
/// ends the loads (the columns ascend: every later one is out of the row too) in a block
/// `{tag}Z{j}` that sets the registers of the columns left to 0 and goes on at `{tag}L`. So a
/// register is written on every path (none keeps a value from the trip before alive across
/// the loop), and a thread issues the loads of its columns only, back to back.
fn loads(s: &mut String, u: usize, tag: &str, of: impl Fn(usize) -> Vec<Load>) {
    for j in 0..u {
        op!(s, "@!%in{j} bra {tag}Z{j};");
        for (reg, base, trip_off, ld) in of(j) {
            address(s, &base, trip_off, j);
            op!(s, "{ld} {reg}, [%e];");
        }
    }
    op!(s, "bra {tag}L;");
    for j in 0..u {
        let _ = writeln!(s, "{tag}Z{j}:");
        for (reg, ..) in of(j) {
            op!(s, "mov.f32 {reg}, 0f00000000;");
        }
    }
    let _ = writeln!(s, "{tag}L:");
}

/// `value` stored at column `j` of the trip into every non-null output `%{out}k`.
fn store_column(s: &mut String, n: usize, out: &str, h: &str, j: usize, value: &str) {
    op!(s, "mul.wide.u32 %co, %lc{j}, 4;");
    op!(s, "add.u64 %co, %roff, %co;");
    for k in 0..n {
        op!(s, "add.u64 %e, %{out}{k}, %co;");
        op!(s, "@%{h}{k} st.global.f32 [%e], {value};");
    }
}

/// Pass 1 of a trip of `u` columns (set up by [`trip`]): every load first (the partials and
/// `r`, see [`loads`]; `tag` names their labels), then per column in order `S`, `X = r + S` into `%x{j}`, their stores and `X²` into
/// `%acc`. A column out of the row ends the trip (branch to `end`): the columns of a trip
/// ascend, so every later one is out of the row too.
fn pass1(s: &mut String, n: usize, u: usize, tag: &str, end: &str, src: Source) {
    loads(s, u, tag, |j| {
        let mut v: Vec<Load> = (0..n)
            .map(|k| {
                (
                    format!("%v{}", j * n + k),
                    format!("%a{k}"),
                    "%roff",
                    src.load(),
                )
            })
            .collect();
        v.push((format!("%rv{j}"), "%ra".into(), "%roff", "ld.global.f32"));
        v
    });
    // every input of the trip's elements is loaded: stores may now overwrite any of them
    let chain = n.saturating_sub(1).max(1);
    for j in 0..u {
        op!(s, "@!%in{j} bra {end};");
        let sum = reference_sum(s, n, j * n, j * chain);
        store_column(s, n, "so", "hs", j, &sum);
        op!(s, "add.rn.f32 %x{j}, %rv{j}, {sum};");
        store_column(s, n, "xo", "hx", j, &format!("%x{j}"));
        op!(s, "fma.rn.f32 %acc, %x{j}, %x{j}, %acc;");
    }
}

/// `w` of the trip's columns into `%wt{j}`.
fn weights(s: &mut String, u: usize, tag: &str) {
    loads(s, u, tag, |j| {
        vec![(format!("%wt{j}"), "%wa".into(), "%wroff", "ld.global.f32")]
    });
}

/// Pass 2 of a trip of `u` columns: per column `Z = (scale * X) * w` from `%x{j}` and `%wt{j}`,
/// stored; a column out of the row ends the trip (branch to `end`).
fn pass2(s: &mut String, n: usize, u: usize, end: &str) {
    for j in 0..u {
        op!(s, "@!%in{j} bra {end};");
        op!(s, "mul.rn.f32 %z, %scale, %x{j};");
        op!(s, "mul.rn.f32 %z, %z, %wt{j};");
        store_column(s, n, "zo", "hz", j, "%z");
    }
}

/// `AddRmsNormMul`: block `b` takes rows `first + b`, `first + b + nctaid`, ...; per row two
/// passes of the block's threads over the columns `tid, tid + ntid, ...`, in trips of
/// `u =` [`row_chunk`] columns: the trip at column `cbase` (a multiple of `u * ntid`) gives
/// thread `tid` the columns `cbase + tid + j * ntid`, `j < u`, each guarded by `col < ncols`.
/// So a thread still takes its columns in ascending order and sums their `X²` in that order,
/// and the trip loop is the same for the whole block.
///
/// Pass 1 stores `S` and `X` and sums `X²` per thread. A trip issues the loads of all its
/// columns in the row before its first store, so they are in flight together (a column out of
/// the row ends the loads, its registers set to 0 instead: see [`loads`]); then per column `S`,
/// `X` and their stores. The block total goes through shared memory with two barriers per row:
/// A after every warp's lane 0 stored its warp's sum in `red[warp]`, B after warp 0 stored the
/// total in `red[32]`. B also orders warp 0's reads of `red[0..32]` before the next row's
/// stores there, and the next row's A orders every thread's read of `red[32]` before warp 0
/// overwrites it, so no third barrier is needed.
///
/// Where the row is one trip (`ncols <= u * ntid`, `%fit`, the same for the whole block) it
/// takes the register path (`FIT1`, `FITW`, `FIT2`): after storing `X` the thread loads the `w`
/// of its columns (in flight during the reduction), and pass 2 computes `Z` from the `X` and
/// `w` in registers, with no load at all. Otherwise (`PASS1`, `PASS2`) pass 2 reads `X` back
/// from memory (the first non-null `x`, which the launcher puts on this GPU; an input may be
/// aliased by an output, so the partials and `r` may be gone) with `w`, a trip's loads again
/// before its stores. The thread that stored `X[i]` in pass 1 is the one that reads it back
/// (same columns), and a thread sees its own stores in program order, so no barrier is needed
/// between the passes. Both paths compute the same `Z`: `X` in a register is the value stored
/// to (and read back from) that `x`.
fn row_body(s: &mut String, n: usize, src: Source) {
    let u = row_chunk(n);
    // %xb: the first non-null x (the launcher guarantees one)
    op!(s, "mov.u64 %xb, %xo{};", n - 1);
    for k in (0..n - 1).rev() {
        op!(s, "@%hx{k} mov.u64 %xb, %xo{k};");
    }
    s.push_str(
        "    ld.param.f32 %eps, [eps];
    ld.param.u64 %ncols, [ncols];
    cvt.rn.f32.u64 %nf, %ncols;
    ld.param.u64 %row, [first];
    ld.param.u64 %limit, [limit];
    mov.u32 %r0, %ctaid.x;
    mov.u32 %r1, %ntid.x;
    mov.u32 %r2, %tid.x;
    mov.u32 %r3, %nctaid.x;
    cvt.u64.u32 %t, %r0;
    add.u64 %row, %row, %t;
    cvt.u64.u32 %rstep, %r3;
",
    );
    // column j of a trip: tid + j * ntid (below u * ntid, a few thousand: 32 bits hold it)
    op!(s, "mov.u32 %lc0, %r2;");
    for j in 1..u {
        op!(s, "add.u32 %lc{j}, %lc{}, %r1;", j - 1);
    }
    op!(s, "mul.wide.u32 %cchunk, %r1, {u};");
    s.push_str(
        "    setp.le.u64 %fit, %ncols, %cchunk;
    and.b32 %lane, %r2, 31;
    shr.u32 %warp, %r2, 5;
    shr.u32 %nw, %r1, 5;
    setp.eq.u32 %lead, %lane, 0;
    setp.eq.u32 %w0, %warp, 0;
    setp.lt.u32 %inw, %lane, %nw;
    mov.u64 %red, red;
    mul.wide.u32 %t, %warp, 4;
    add.u64 %slot, %red, %t;
    mul.wide.u32 %t, %lane, 4;
    add.u64 %lslot, %red, %t;
ROW:
    setp.ge.u64 %done, %row, %limit;
    @%done bra DONE;
    mul.lo.u64 %base, %row, %ncols;
    mov.f32 %acc, 0f00000000;
    mov.u64 %cbase, 0;
    @%fit bra FIT1;
PASS1:
    setp.ge.u64 %cdone, %cbase, %ncols;
    @%cdone bra REDUCE;
",
    );
    trip(s, u);
    pass1(s, n, u, "P1", "STEP1", src);
    s.push_str(
        "STEP1:
    add.u64 %cbase, %cbase, %cchunk;
    bra PASS1;
FIT1:
",
    );
    trip(s, u);
    pass1(s, n, u, "F1", "FITW", src);
    s.push_str("FITW:\n");
    weights(s, u, "FW");
    s.push_str("REDUCE:\n");
    butterfly(s);
    s.push_str(
        "    @%lead st.shared.f32 [%slot], %acc;
    bar.sync 0;
    @!%w0 bra TOTAL;
    mov.f32 %acc, 0f00000000;
    @%inw ld.shared.f32 %acc, [%lslot];
",
    );
    butterfly(s);
    s.push_str(
        "    @%lead st.shared.f32 [%red+128], %acc;
TOTAL:
    bar.sync 0;
    ld.shared.f32 %acc, [%red+128];
    div.rn.f32 %scale, %acc, %nf;
    add.rn.f32 %scale, %scale, %eps;
    rsqrt.approx.f32 %scale, %scale;
    mov.u64 %cbase, 0;
    @%fit bra FIT2;
PASS2:
    setp.ge.u64 %cdone, %cbase, %ncols;
    @%cdone bra NEXT;
",
    );
    trip(s, u);
    loads(s, u, "P2", |j| {
        vec![
            (format!("%x{j}"), "%xb".into(), "%roff", "ld.global.f32"),
            (format!("%wt{j}"), "%wa".into(), "%wroff", "ld.global.f32"),
        ]
    });
    pass2(s, n, u, "STEP2");
    s.push_str(
        "STEP2:
    add.u64 %cbase, %cbase, %cchunk;
    bra PASS2;
FIT2:
",
    );
    trip(s, u);
    pass2(s, n, u, "NEXT");
    s.push_str(
        "NEXT:
    add.u64 %row, %row, %rstep;
    bra ROW;
",
    );
}

// Not under miri (scripts/miri.sh): the PTX text and its symbolic reading are string work in safe
// code, which takes hours there.
#[cfg(all(test, not(miri)))]
mod tests {
    use super::*;
    use std::collections::{HashMap, HashSet};

    /// The text of entry `e` in `ptx(n)`, from `.visible .entry` to its closing brace.
    fn entry_text(n: usize, e: Epilogue) -> String {
        let p = ptx(n);
        let head = format!(".visible .entry {}(", kernel_name(n, e));
        let start = p.find(&head).expect("entry present");
        let end = start + p[start..].find("\n}\n").expect("entry closed") + 3;
        p[start..end].to_string()
    }

    /// The instruction and label (`NAME:`) lines of an entry's body, trimmed, without the
    /// trailing `;`.
    fn body_lines(text: &str) -> Vec<String> {
        let body = &text[text.find("{\n").unwrap() + 2..];
        body.lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && *l != "}" && !l.starts_with('.'))
            .map(|l| l.trim_end_matches(';').to_string())
            .collect()
    }

    /// The instruction lines of an entry's body, trimmed, without the trailing `;`.
    fn instructions(text: &str) -> Vec<String> {
        body_lines(text)
            .into_iter()
            .filter(|l| !l.ends_with(':'))
            .collect()
    }

    /// `lines` less, for each `(from, to)`, those from label `from` up to label `to` (which
    /// stays).
    fn without(lines: &[String], cut: &[(&str, &str)]) -> Vec<String> {
        let mut out = Vec::new();
        let mut skipping: Option<&str> = None;
        for l in lines {
            let label = l.strip_suffix(':');
            if let Some(to) = skipping {
                if label != Some(to) {
                    continue;
                }
                skipping = None;
            }
            if let Some(&(_, to)) = cut.iter().find(|(from, _)| label == Some(*from)) {
                skipping = Some(to);
                continue;
            }
            out.push(l.clone());
        }
        assert_eq!(skipping, None, "every cut ends at its label");
        out
    }

    /// The lines from label `from` up to label `to`, both left out.
    fn between(lines: &[String], from: &str, to: &str) -> Vec<String> {
        let start = lines.iter().position(|l| *l == format!("{from}:")).unwrap();
        let len = lines[start..]
            .iter()
            .position(|l| *l == format!("{to}:"))
            .unwrap();
        lines[start + 1..start + len].to_vec()
    }

    /// `AddRmsNormMul`'s register path (a row in one trip) and its read-back path, each with
    /// every column in the row (none of the blocks that zero the registers of the columns out
    /// of it).
    fn register_path(text: &str) -> Vec<String> {
        let cut = [
            ("PASS1", "FIT1"),
            ("PASS2", "FIT2"),
            ("F1Z0", "F1L"),
            ("FWZ0", "FWL"),
        ];
        without(&body_lines(text), &cut)
    }
    fn read_back_path(text: &str) -> Vec<String> {
        let cut = [
            ("FIT1", "REDUCE"),
            ("FIT2", "NEXT"),
            ("P1Z0", "P1L"),
            ("P2Z0", "P2L"),
        ];
        without(&body_lines(text), &cut)
    }

    /// The sum of `p{lo}{idx} .. p{hi-1}{idx}` in the order of the exchange module's doc:
    /// balanced halves for a power of two, left to right otherwise (written independently of
    /// `reference_expr`).
    fn expected_sum(n: usize, idx: &str) -> String {
        let tree = |lo: usize, hi: usize| -> String {
            fn go(lo: usize, hi: usize, idx: &str) -> String {
                if hi - lo == 1 {
                    return format!("p{lo}{idx}");
                }
                let mid = (lo + hi) / 2;
                format!("({}+{})", go(lo, mid, idx), go(mid, hi, idx))
            }
            go(lo, hi, idx)
        };
        if n.is_power_of_two() {
            return tree(0, n);
        }
        (1..n).fold(format!("p0{idx}"), |acc, k| format!("({acc}+p{k}{idx})"))
    }

    /// A store the symbolic run saw: (predicate, address, value). The predicate of a store
    /// after a column guard (`@!%in{j} bra`, since the last label) ends in ` & ` and the guard's
    /// condition.
    type Store = (String, String, String);
    /// A load the symbolic run saw: (predicate, or the column guard in force, or "", address).
    type Load = (String, String);

    /// `a[i]` from address `a` and element (or column) `i`; `a[(b+i)]` from `a[b]`.
    fn index(a: &str, i: &str) -> String {
        match a.strip_suffix(']').and_then(|h| h.split_once('[')) {
            Some((head, b)) => format!("{head}[({b}+{i})]"),
            _ => format!("{a}[{i}]"),
        }
    }

    /// Runs `lines` (instructions and labels) once each, in text order (every loop body once,
    /// every branch ignored but for the column guards, see [`Store`]), over symbolic values,
    /// and returns the global stores and loads.
    fn symbolic(lines: &[String]) -> (Vec<Store>, Vec<Load>) {
        let mut sym: HashMap<String, String> = HashMap::new();
        let mut stores = Vec::new();
        let mut loads = Vec::new();
        let mut guard: Option<String> = None;
        for line in lines {
            if line.ends_with(':') {
                guard = None;
                continue;
            }
            let (pred, rest) = match line.strip_prefix('@') {
                Some(r) => {
                    let (p, i) = r.split_once(' ').unwrap();
                    (Some(p.to_string()), i.to_string())
                }
                None => (None, line.clone()),
            };
            let (opcode, operands) = rest.split_once(' ').unwrap_or((&rest, ""));
            let ops: Vec<&str> = operands.split(", ").map(str::trim).collect();
            let get = |sym: &HashMap<String, String>, r: &str| {
                let r = r.trim_matches(|c| c == '[' || c == ']');
                sym.get(r).cloned().unwrap_or_else(|| r.to_string())
            };
            let v = |i: usize| get(&sym, ops[i]);
            let value = match opcode {
                "bra" => {
                    let column = pred.as_deref().and_then(|p| p.strip_prefix('!'));
                    if let Some(p) = column.filter(|p| p.starts_with("%in")) {
                        guard = Some(get(&sym, p));
                    }
                    continue;
                }
                "st.global.f32" => {
                    let p = get(&sym, pred.as_deref().expect("stores are predicated"));
                    let p = match &guard {
                        Some(g) => format!("{p} & {g}"),
                        None => p,
                    };
                    stores.push((p, v(0), v(1)));
                    continue;
                }
                "ld.global.f32" => {
                    let p = pred
                        .as_deref()
                        .map_or(guard.clone().unwrap_or_default(), |p| get(&sym, p));
                    loads.push((p, v(1)));
                    v(1)
                }
                o if o.starts_with("ld.param") => {
                    v(1).trim_matches(|c| c == '[' || c == ']').into()
                }
                "cvta.to.global.u64" | "cvt.u64.u32" => v(1),
                "setp.ne.u64" => format!("{}!=0", v(1)),
                "setp.lt.u64" => format!("{}<{}", v(1), v(2)),
                "setp.le.u64" => format!("{}<={}", v(1), v(2)),
                "mov.u64" if pred.is_some() => {
                    format!("({}?{}:{})", get(&sym, pred.as_ref().unwrap()), v(1), v(0))
                }
                o if o.starts_with("mov.") => v(1),
                "shl.b64" if ops[2] == "2" => format!("4*{}", v(1)),
                "mul.wide.u32" if ops[2] == "4" => format!("4*{}", v(1)),
                "mul.wide.u32" | "mul.lo.u64" => format!("({}*{})", v(1), v(2)),
                "add.u64" if ops[2] == "%off" => format!("{}[i]", v(1)),
                "add.u64" if v(1).starts_with("4*") && v(2).starts_with("4*") => {
                    format!("4*({}+{})", &v(1)[2..], &v(2)[2..])
                }
                "add.u64" if v(2).starts_with("4*") => index(&v(1), &v(2)[2..]),
                "add.u64" | "add.u32" => format!("({}+{})", v(1), v(2)),
                "sub.u64" => format!("({}-{})", v(1), v(2)),
                "ld.shared.f32" => "shared".into(),
                "add.rn.f32" => format!("({}+{})", v(1), v(2)),
                "mul.rn.f32" => format!("({}*{})", v(1), v(2)),
                "div.rn.f32" => format!("({}/{})", v(1), v(2)),
                "rsqrt.approx.f32" => format!("rsqrt({})", v(1)),
                "cvt.rn.f32.u64" => format!("f32({})", v(1)),
                _ => format!("{opcode}(..)"),
            };
            if ops[0].starts_with('%') {
                sym.insert(ops[0].to_string(), value);
            }
        }
        (stores, loads)
    }

    /// The stores of an entry's text run once in order (`Sum`, `Add`).
    fn symbolic_stores(text: &str) -> Vec<Store> {
        symbolic(&body_lines(text)).0
    }

    /// `value` stored to `{param}k[idx]` for every `k` where `{param}k` is non-null and
    /// `guard` (if any) holds.
    fn outputs(n: usize, param: &str, value: &str, idx: &str, guard: Option<&str>) -> Vec<Store> {
        (0..n)
            .map(|k| {
                let p = format!("{param}{k}!=0");
                (
                    guard.map_or(p.clone(), |g| format!("{p} & {g}")),
                    format!("{param}{k}[{idx}]"),
                    value.into(),
                )
            })
            .collect()
    }

    /// Column `j` of a thread's first trip, its element in the block's first row, and the
    /// condition that it is in the row, as the symbolic run writes them.
    fn column(j: usize) -> (String, String, String) {
        let col = (1..=j).fold("%tid.x".to_string(), |c, _| format!("({c}+%ntid.x)"));
        let elem = format!("((((first+%ctaid.x)*ncols)+0)+{col})");
        let cond = format!("{col}<(ncols-0)");
        (col, elem, cond)
    }

    /// The stores of `AddRmsNormMul` for `n` partials, `u` columns a trip: per column `S` and
    /// `X`, then per column `Z` with `X` from `x_of(elem, X)`.
    fn norm_stores(n: usize, u: usize, x_of: impl Fn(&str, &str) -> String) -> Vec<Store> {
        let mut pass1 = Vec::new();
        let mut pass2 = Vec::new();
        for j in 0..u {
            let (col, elem, cond) = column(j);
            let sum = expected_sum(n, &format!("[{elem}]"));
            let x = format!("(r[{elem}]+{sum})");
            pass1.extend(outputs(n, "s", &sum, &elem, Some(&cond)));
            pass1.extend(outputs(n, "x", &x, &elem, Some(&cond)));
            let z = format!(
                "((rsqrt(((shared/f32(ncols))+eps))*{})*w[(0+{col})])",
                x_of(&elem, &x)
            );
            pass2.extend(outputs(n, "z", &z, &elem, Some(&cond)));
        }
        [pass1, pass2].concat()
    }

    #[test]
    fn sum_entry_adds_in_reference_order() {
        let adds = |n| -> Vec<String> {
            instructions(&entry_text(n, Epilogue::Sum))
                .into_iter()
                .filter(|l| l.starts_with("add.rn.f32"))
                .collect()
        };
        assert_eq!(
            adds(4),
            [
                "add.rn.f32 %s0, %v0, %v1",
                "add.rn.f32 %s1, %v2, %v3",
                "add.rn.f32 %s2, %s0, %s1",
            ]
        );
        assert_eq!(
            adds(3),
            ["add.rn.f32 %s0, %v0, %v1", "add.rn.f32 %s1, %s0, %v2"]
        );
        assert!(entry_text(3, Epilogue::Sum).contains(".reg .f32 %v<3>, %s<2>;"));
    }

    #[test]
    fn every_entry_stores_what_its_epilogue_says() {
        for n in 1..=8 {
            let sum = expected_sum(n, "[i]");
            let x = format!("(r[i]+{sum})");
            let s_out = outputs(n, "s", &sum, "i", None);
            let x_out = outputs(n, "x", &x, "i", None);
            assert_eq!(
                symbolic_stores(&entry_text(n, Epilogue::Sum)),
                s_out,
                "n = {n}"
            );
            assert_eq!(
                symbolic_stores(&entry_text(n, Epilogue::Add)),
                [s_out, x_out].concat(),
                "n = {n}"
            );

            let text = entry_text(n, Epilogue::AddRmsNormMul);
            let u = row_chunk(n);
            // a row in one trip: Z from the X in registers
            let (stores, _) = symbolic(&register_path(&text));
            assert_eq!(stores, norm_stores(n, u, |_, x| x.into()), "n = {n}");
            // a longer row: pass 2 reads X back from the first non-null x
            let xb = (0..n - 1)
                .rev()
                .fold(format!("x{}", n - 1), |b, k| format!("(x{k}!=0?x{k}:{b})"));
            let (stores, _) = symbolic(&read_back_path(&text));
            let want = norm_stores(n, u, |elem, _| format!("{xb}[{elem}]"));
            assert_eq!(stores, want, "n = {n}");
        }
    }

    /// A trip of `AddRmsNormMul`: `u` columns `ntid` apart, a thread's columns in ascending
    /// order over the trips (`u * ntid` apart), and the register path exactly where the row
    /// is one trip.
    #[test]
    fn norm_trips_cover_the_row_in_order() {
        for n in 1..=8 {
            let u = row_chunk(n);
            assert!((1..=8).contains(&u) && u * (n + 1) <= 24, "n = {n}");
            let text = entry_text(n, Epilogue::AddRmsNormMul);
            let lines = body_lines(&text);
            let (_, loads) = symbolic(&register_path(&text));
            let mut sym = HashMap::new();
            for l in instructions(&text) {
                if let Some(rest) = l.strip_prefix("mul.wide.u32 %cchunk, ") {
                    sym.insert("cchunk", rest.to_string());
                }
            }
            assert_eq!(sym["cchunk"], format!("%r1, {u}"), "u * ntid");
            let ins = instructions(&text);
            assert!(ins.contains(&"mov.u32 %r1, %ntid.x".to_string()));
            assert!(ins.contains(&"setp.le.u64 %fit, %ncols, %cchunk".to_string()));
            assert!(ins.contains(&"@%fit bra FIT1".to_string()));
            assert!(ins.contains(&"@%fit bra FIT2".to_string()));
            for (from, to) in [("STEP1", "FIT1"), ("STEP2", "FIT2")] {
                let step = between(&lines, from, to);
                assert_eq!(step[0], "add.u64 %cbase, %cbase, %cchunk");
            }
            // the trips start at column 0 of each pass
            assert_eq!(ins.iter().filter(|l| *l == "mov.u64 %cbase, 0").count(), 2);
            // every load of the register path is guarded by its own column
            assert_eq!(loads.len(), u * (n + 2));
            for (pred, addr) in &loads {
                let j = (0..u).find(|&j| *pred == column(j).2).expect(pred);
                assert!(addr.ends_with(&format!("+{})]", column(j).0)), "{addr}");
            }
            // X² in a thread's column order: ascending within a trip, trip after trip
            let fma: Vec<String> = ins
                .iter()
                .filter(|l| l.starts_with("fma.rn.f32"))
                .cloned()
                .collect();
            let trip: Vec<String> = (0..u)
                .map(|j| format!("fma.rn.f32 %acc, %x{j}, %x{j}, %acc"))
                .collect();
            assert_eq!(fma, [trip.clone(), trip].concat(), "n = {n}");
        }
    }

    /// A trip loads every input of its columns before its first store; the register path loads
    /// `w` after its stores (in flight during the reduction) and nothing in pass 2.
    #[test]
    fn norm_trips_load_before_they_store() {
        for n in 1..=8 {
            let u = row_chunk(n);
            let lines = body_lines(&entry_text(n, Epilogue::AddRmsNormMul));
            let kind = |l: &String| {
                if l.contains("ld.global") {
                    'l'
                } else if l.contains("st.global") {
                    's'
                } else {
                    '.'
                }
            };
            for (from, to, loads) in [
                ("PASS1", "STEP1", u * (n + 1)),
                ("FIT1", "FITW", u * (n + 1)),
                ("PASS2", "STEP2", 2 * u),
            ] {
                let seq: String = between(&lines, from, to).iter().map(kind).collect();
                let seq = seq.replace('.', "");
                let want = "l".repeat(loads);
                assert!(seq.starts_with(&want), "{from}: {seq}");
                assert!(!seq[loads..].contains('l'), "{from}: {seq}");
            }
            let fitw = between(&lines, "FITW", "REDUCE");
            assert_eq!(fitw.iter().filter(|l| l.contains("ld.global")).count(), u);
            assert!(fitw.iter().all(|l| !l.contains("st.global")));
            assert!(fitw
                .iter()
                .filter(|l| l.contains("ld.global"))
                .all(|l| l.contains("ld.global.f32 %wt")));
            let fit2 = between(&lines, "FIT2", "NEXT");
            assert!(fit2.iter().all(|l| !l.contains("ld.")), "no load in pass 2");
            // the registers a column loads are set to 0 where the column is out of the row
            for tag in ["P1", "F1", "FW", "P2"] {
                let mut loaded = vec![Vec::new(); u];
                let mut j = None;
                for l in &lines {
                    if let Some(rest) = l.strip_prefix("@!%in") {
                        let (col, target) = rest.split_once(" bra ").unwrap();
                        if target.starts_with(tag) {
                            j = Some(col.parse::<usize>().unwrap());
                            assert_eq!(target, format!("{tag}Z{col}"));
                            continue;
                        }
                    }
                    if *l == format!("bra {tag}L") {
                        break;
                    }
                    if let (Some(j), Some(rest)) = (j, l.strip_prefix("ld.global.f32 ")) {
                        loaded[j].push(rest.split(',').next().unwrap().to_string());
                    }
                }
                assert!(loaded.iter().all(|l| !l.is_empty()), "{tag}");
                for (j, regs) in loaded.iter().enumerate() {
                    let next = if j + 1 < u {
                        format!("{tag}Z{}", j + 1)
                    } else {
                        format!("{tag}L")
                    };
                    let zeroed: Vec<String> = between(&lines, &format!("{tag}Z{j}"), &next)
                        .iter()
                        .map(|l| {
                            let reg = l.strip_prefix("mov.f32 ").unwrap();
                            reg.strip_suffix(", 0f00000000").unwrap().to_string()
                        })
                        .collect();
                    assert_eq!(&zeroed, regs, "{tag}, column {j}");
                }
            }
        }
    }

    #[test]
    fn parameters_in_order_with_their_types() {
        let n = 3;
        let names = |e| -> Vec<String> { params(n, e).into_iter().map(Param::name).collect() };
        assert_eq!(
            names(Epilogue::Sum),
            ["p0", "p1", "p2", "s0", "s1", "s2", "first", "limit"]
        );
        assert_eq!(
            names(Epilogue::Add),
            ["p0", "p1", "p2", "s0", "s1", "s2", "r", "x0", "x1", "x2", "first", "limit"]
        );
        assert_eq!(
            names(Epilogue::AddRmsNormMul),
            [
                "p0", "p1", "p2", "s0", "s1", "s2", "r", "x0", "x1", "x2", "w", "z0", "z1", "z2",
                "eps", "ncols", "first", "limit"
            ]
        );
        for n in 1..=8 {
            for (e, count) in [
                (Epilogue::Sum, 2 * n + 2),
                (Epilogue::Add, 3 * n + 3),
                (Epilogue::AddRmsNormMul, 4 * n + 6),
            ] {
                let list = params(n, e);
                assert_eq!(list.len(), count);
                let declared: Vec<String> = entry_text(n, e)
                    .lines()
                    .filter_map(|l| l.trim().strip_prefix(".param "))
                    .map(|l| l.trim_end_matches(',').to_string())
                    .collect();
                let want: Vec<String> = list
                    .iter()
                    .map(|p| format!("{} {}", p.ptx_type(), p.name()))
                    .collect();
                assert_eq!(declared, want, "n = {n}, {e:?}");
                let f32s: Vec<Param> = list
                    .into_iter()
                    .filter(|p| p.ptx_type() == ".f32")
                    .collect();
                let want_f32 = if e == Epilogue::AddRmsNormMul {
                    vec![Param::Eps]
                } else {
                    vec![]
                };
                assert_eq!(f32s, want_f32);
            }
        }
    }

    #[test]
    fn module_holds_one_entry_per_epilogue() {
        assert_eq!(
            kernel_name(2, Epilogue::Sum),
            "ggml_meta_allreduce_sum_f32_x2"
        );
        assert_eq!(
            kernel_name(2, Epilogue::Add),
            "ggml_meta_allreduce_add_f32_x2"
        );
        assert_eq!(
            kernel_name(2, Epilogue::AddRmsNormMul),
            "ggml_meta_allreduce_add_rms_mul_f32_x2"
        );
        for n in 1..=8 {
            let p = ptx(n);
            assert!(p.starts_with(".version 7.0\n.target sm_52\n.address_size 64\n"));
            let entries: Vec<&str> = p
                .lines()
                .filter_map(|l| l.strip_prefix(".visible .entry "))
                .collect();
            let want: Vec<String> = Epilogue::ALL
                .iter()
                .map(|&e| format!("{}(", kernel_name(n, e)))
                .collect();
            assert_eq!(entries, want);
            assert_eq!(p.matches('{').count(), 3);
            assert_eq!(p.matches('}').count(), 3);
            // round to nearest everywhere, denormals kept
            assert!(!p.contains(".ftz"));
            for e in Epilogue::ALL {
                let text = entry_text(n, e);
                // every branch target is a label of the same entry
                let labels: HashSet<&str> =
                    text.lines().filter_map(|l| l.strip_suffix(':')).collect();
                for l in instructions(&text) {
                    if let Some((_, target)) = l.split_once("bra ") {
                        assert!(labels.contains(target), "{target} in {e:?}");
                    }
                }
                assert_eq!(
                    text.contains(".maxntid 1024, 1, 1"),
                    e == Epilogue::AddRmsNormMul
                );
            }
        }
    }

    /// Every register an instruction names is declared (an indexed one below its count), and
    /// none twice.
    #[test]
    fn registers_are_declared() {
        let special = ["%tid", "%ntid", "%ctaid", "%nctaid"];
        for n in 1..=8 {
            for e in Epilogue::ALL {
                let text = entry_text(n, e);
                let mut plain = HashSet::new();
                let mut indexed = HashMap::new();
                for l in text.lines().filter_map(|l| l.trim().strip_prefix(".reg ")) {
                    let (_, list) = l.split_once(' ').unwrap();
                    for item in list.trim_end_matches(';').split(", ") {
                        let fresh = match item.split_once('<') {
                            Some((name, count)) => {
                                let count: usize = count.trim_end_matches('>').parse().unwrap();
                                assert!(count > 0, "{item}");
                                indexed.insert(name.to_string(), count).is_none()
                            }
                            None => plain.insert(item.to_string()),
                        };
                        assert!(
                            fresh && !plain.iter().any(|p| indexed.contains_key(p)),
                            "{item}"
                        );
                    }
                }
                for l in instructions(&text) {
                    let mut rest = l.as_str();
                    while let Some(at) = rest.find('%') {
                        let tail = &rest[at..];
                        let len = 1 + tail[1..]
                            .bytes()
                            .take_while(|b| b.is_ascii_alphanumeric() || *b == b'_')
                            .count();
                        let reg = &tail[..len];
                        rest = &tail[len..];
                        if special.contains(&reg) && rest.starts_with(".x") {
                            continue;
                        }
                        if plain.contains(reg) {
                            continue;
                        }
                        let digits = reg.bytes().rev().take_while(u8::is_ascii_digit).count();
                        let (name, idx) = reg.split_at(reg.len() - digits);
                        let ok = indexed
                            .get(name)
                            .is_some_and(|&c| idx.parse::<usize>().is_ok_and(|i| i < c));
                        assert!(ok, "{reg} undeclared in {e:?} for n = {n}: {l}");
                    }
                }
            }
        }
    }

    #[test]
    fn row_total_by_warp_butterflies_and_two_barriers() {
        for n in [2, 5, 8] {
            let text = entry_text(n, Epilogue::AddRmsNormMul);
            let ins = instructions(&text);
            // one butterfly per warp, then one in warp 0; each shuffle followed by its add
            let mut offsets = Vec::new();
            for (i, l) in ins.iter().enumerate() {
                if let Some(rest) = l.strip_prefix("shfl.sync.bfly.b32 %o, %acc, ") {
                    let (d, mask) = rest.split_once(", ").unwrap();
                    assert_eq!(mask, "31, 0xffffffff");
                    assert_eq!(ins[i + 1], "add.rn.f32 %acc, %acc, %o");
                    offsets.push(d.parse::<u32>().unwrap());
                }
            }
            assert_eq!(offsets, [16, 8, 4, 2, 1, 16, 8, 4, 2, 1]);
            assert_eq!(ins.iter().filter(|l| *l == "bar.sync 0").count(), 2);
            assert!(text.contains(".shared .align 4 .f32 red[33];"));
            // warp partials below slot 32, the total in slot 32 (byte 128)
            assert!(ins.contains(&"@%lead st.shared.f32 [%slot], %acc".to_string()));
            assert!(ins.contains(&"@%lead st.shared.f32 [%red+128], %acc".to_string()));
            assert!(ins.contains(&"ld.shared.f32 %acc, [%red+128]".to_string()));
            // the X² of pass 1 (see `norm_trips_cover_the_row_in_order`) before the reduction
            let reduce = body_lines(&text)
                .iter()
                .position(|l| l == "REDUCE:")
                .unwrap();
            let lines = body_lines(&text);
            assert!(lines[..reduce]
                .iter()
                .any(|l| l.starts_with("fma.rn.f32 %acc")));
            assert!(!lines[reduce..].iter().any(|l| l.starts_with("fma.")));
            for e in [Epilogue::Sum, Epilogue::Add] {
                let t = entry_text(n, e);
                assert!(!t.contains("shfl") && !t.contains("bar.sync") && !t.contains(".shared"));
            }
        }
    }

    #[test]
    fn outputs_are_null_checked_once_each() {
        for n in [1, 2, 7] {
            for e in Epilogue::ALL {
                let ins = instructions(&entry_text(n, e));
                let outs: Vec<Param> = params(n, e)
                    .into_iter()
                    .filter(|p| {
                        matches!(p, Param::SumOut(_) | Param::AddOut(_) | Param::NormOut(_))
                    })
                    .collect();
                let setps = ins.iter().filter(|l| l.starts_with("setp.ne.u64")).count();
                assert_eq!(setps, outs.len());
                let stores: Vec<&String> = ins.iter().filter(|l| l.contains("st.global")).collect();
                // AddRmsNormMul: each output once per column of a trip, in both paths
                let copies = if e == Epilogue::AddRmsNormMul {
                    2 * row_chunk(n)
                } else {
                    1
                };
                assert_eq!(stores.len(), outs.len() * copies);
                assert!(stores.iter().all(|l| l.starts_with("@%h")));
                for p in params(n, e) {
                    let loads = ins
                        .iter()
                        .filter(|l| l.ends_with(&format!(", [{}]", p.name())))
                        .count();
                    assert_eq!(loads, 1, "{p:?}");
                }
            }
        }
    }
}
