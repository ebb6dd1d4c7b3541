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
//!   weight), with `X` read back from the first non-null `x` (the launcher passes one, on the
//!   launching GPU). `S` and `X` are exact; `Z` is not bit-reproducible elsewhere: the row's sum
//!   of squares is a tree of f32 adds over the block and the root is `rsqrt.approx.f32`.
//!
//! The parameters are listed by [`params`] in order. Every output is a list of `n` pointers,
//! each one nullable (0: not stored): a launch writes only the devices it is meant to write
//! (see [`crate::launch`]). Outputs may alias inputs (in-place ops); every element is read and
//! written by one thread only, which loads all inputs of the element before any store, stores
//! `S`, then `X`, then `Z` (so where two outputs are the same memory the later one stays).
//!
//! `Sum` and `Add` take an element range `[first, limit)` which the threads of the grid stride
//! over. `AddRmsNormMul` takes a row range: block `b` takes rows `first + b`,
//! `first + b + nctaid`, ... below `limit`, and its threads stride over the row's columns; it
//! needs a block of a multiple of 32 threads, at most 1024 (one shared slot per warp).
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

    fn tag(self) -> &'static str {
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
    assert!(n >= 1, "an AllReduce kernel needs at least one partial");
    let mut s = String::from(".version 7.0\n.target sm_52\n.address_size 64\n");
    for e in Epilogue::ALL {
        s.push('\n');
        s.push_str(&entry(n, e));
    }
    s
}

/// One instruction line (indented) into a `String`.
macro_rules! op {
    ($s:expr, $($arg:tt)*) => {{
        let _ = writeln!($s, "    {}", format_args!($($arg)*));
    }};
}

fn entry(n: usize, e: Epilogue) -> String {
    let mut s = String::new();
    let list: Vec<String> = params(n, e)
        .into_iter()
        .map(|p| format!("    .param {} {}", p.ptx_type(), p.name()))
        .collect();
    let add = e != Epilogue::Sum;
    let norm = e == Epilogue::AddRmsNormMul;
    // a block of 1024 threads must fit the register file (64K 32-bit registers)
    let bound = if norm { ".maxntid 1024, 1, 1\n" } else { "" };
    let _ = write!(
        s,
        ".visible .entry {}(\n{}\n)\n{bound}{{\n",
        kernel_name(n, e),
        list.join(",\n")
    );
    let chain = n.saturating_sub(1).max(1);
    // registers: %a partial addresses, %so/%xo/%zo output addresses with their non-null
    // predicates %hs/%hx/%hz, %v the partials' values, %s the sums of the reference order
    let mut pred = format!("%done, %hs<{n}>");
    let mut b64 = format!("%off, %e, %t, %limit, %a<{n}>, %so<{n}>");
    let mut f32 = format!("%v<{n}>, %s<{chain}>");
    if add {
        pred += &format!(", %hx<{n}>");
        b64 += &format!(", %ra, %xo<{n}>");
        f32 += ", %rv, %x";
    }
    if norm {
        pred += &format!(", %hz<{n}>, %cdone, %lead, %w0, %inw");
        b64 += &format!(", %wa, %zo<{n}>, %xb, %ncols, %row, %base, %c, %c0, %cstep, %rstep");
        b64 += ", %red, %slot, %lslot";
        f32 += ", %acc, %o, %eps, %nf, %scale, %w, %z";
    } else {
        b64 += ", %i, %stride";
    }
    op!(s, ".reg .pred {pred};");
    op!(
        s,
        ".reg .b32 %r<4>{};",
        if norm { ", %lane, %warp, %nw" } else { "" }
    );
    op!(s, ".reg .b64 {b64};");
    op!(s, ".reg .f32 {f32};");
    if norm {
        // 32 warp partials, then the row's total (a slot of its own: see `row_body`)
        op!(s, ".shared .align 4 .f32 red[33];");
    }
    for k in 0..n {
        op!(s, "ld.param.u64 %a{k}, [p{k}];");
        op!(s, "cvta.to.global.u64 %a{k}, %a{k};");
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
        row_body(&mut s, n);
    } else {
        grid_body(&mut s, n, add);
    }
    s.push_str("DONE:\n    ret;\n}\n");
    s
}

/// The work of element `i` (byte offset in `%off`): load the partials, sum them in reference
/// order, store `S`; with `add`, `X = r[i] + S` into `%x` and stored. Returns the register
/// holding `S`.
fn element(s: &mut String, n: usize, add: bool) -> String {
    for k in 0..n {
        op!(s, "add.u64 %e, %a{k}, %off;");
        op!(s, "ld.global.f32 %v{k}, [%e];");
    }
    let mut next = 0usize;
    let sum = exchange::reference_expr((0..n).map(|k| format!("%v{k}")).collect(), |a, b| {
        let d = format!("%s{next}");
        next += 1;
        op!(s, "add.rn.f32 {d}, {a}, {b};");
        d
    })
    .expect("n >= 1");
    if add {
        op!(s, "add.u64 %e, %ra, %off;");
        op!(s, "ld.global.f32 %rv, [%e];");
    }
    // every input of the element is loaded: stores may now overwrite any of them
    store(s, n, "so", "hs", &sum);
    if add {
        op!(s, "add.rn.f32 %x, %rv, {sum};");
        store(s, n, "xo", "hx", "%x");
    }
    sum
}

/// `value` stored at `%off` into every non-null output `%{out}k`.
fn store(s: &mut String, n: usize, out: &str, h: &str, value: &str) {
    for k in 0..n {
        op!(s, "add.u64 %e, %{out}{k}, %off;");
        op!(s, "@%{h}{k} st.global.f32 [%e], {value};");
    }
}

/// `Sum` and `Add`: the threads of the grid stride over the elements `[first, limit)`.
fn grid_body(s: &mut String, n: usize, add: bool) {
    s.push_str(
        "    ld.param.u64 %i, [first];
    ld.param.u64 %limit, [limit];
    mov.u32 %r0, %ctaid.x;
    mov.u32 %r1, %ntid.x;
    mov.u32 %r2, %tid.x;
    mov.u32 %r3, %nctaid.x;
    mul.wide.u32 %t, %r0, %r1;
    add.u64 %i, %i, %t;
    cvt.u64.u32 %t, %r2;
    add.u64 %i, %i, %t;
    mul.wide.u32 %stride, %r3, %r1;
LOOP:
    setp.ge.u64 %done, %i, %limit;
    @%done bra DONE;
    shl.b64 %off, %i, 2;
",
    );
    element(s, n, add);
    s.push_str("    add.u64 %i, %i, %stride;\n    bra LOOP;\n");
}

/// `%acc` summed over the 32 lanes of a warp (every lane gets the total).
fn butterfly(s: &mut String) {
    for d in [16, 8, 4, 2, 1] {
        op!(s, "shfl.sync.bfly.b32 %o, %acc, {d}, 31, 0xffffffff;");
        op!(s, "add.rn.f32 %acc, %acc, %o;");
    }
}

/// `AddRmsNormMul`: block `b` takes rows `first + b`, `first + b + nctaid`, ...; per row two
/// passes of the block's threads over the columns `tid, tid + ntid, ...`.
///
/// Pass 1 stores `S` and `X` and sums `X²` per thread; the block total goes through shared
/// memory with two barriers per row: A after every warp's lane 0 stored its warp's sum in
/// `red[warp]`, B after warp 0 stored the total in `red[32]`. B also orders warp 0's reads of
/// `red[0..32]` before the next row's stores there, and the next row's A orders every thread's
/// read of `red[32]` before warp 0 overwrites it, so no third barrier is needed.
///
/// Pass 2 reads `X` back from memory (the first non-null `x`, which the launcher puts on this
/// GPU): an input may be aliased by an output, so the partials and `r` may be gone. The thread
/// that stored `X[i]` in pass 1 is the one that reads it back (same column stride), and a
/// thread sees its own stores in program order, so no barrier is needed between the passes.
fn row_body(s: &mut String, n: usize) {
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
    cvt.u64.u32 %cstep, %r1;
    cvt.u64.u32 %c0, %r2;
    cvt.u64.u32 %rstep, %r3;
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
    mov.u64 %c, %c0;
PASS1:
    setp.ge.u64 %cdone, %c, %ncols;
    @%cdone bra REDUCE;
    add.u64 %t, %base, %c;
    shl.b64 %off, %t, 2;
",
    );
    element(s, n, true);
    s.push_str(
        "    fma.rn.f32 %acc, %x, %x, %acc;
    add.u64 %c, %c, %cstep;
    bra PASS1;
REDUCE:
",
    );
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
    mov.u64 %c, %c0;
PASS2:
    setp.ge.u64 %cdone, %c, %ncols;
    @%cdone bra NEXT;
    add.u64 %t, %base, %c;
    shl.b64 %off, %t, 2;
    add.u64 %e, %xb, %off;
    ld.global.f32 %x, [%e];
    shl.b64 %t, %c, 2;
    add.u64 %e, %wa, %t;
    ld.global.f32 %w, [%e];
    mul.rn.f32 %z, %scale, %x;
    mul.rn.f32 %z, %z, %w;
",
    );
    store(s, n, "zo", "hz", "%z");
    s.push_str(
        "    add.u64 %c, %c, %cstep;
    bra PASS2;
NEXT:
    add.u64 %row, %row, %rstep;
    bra ROW;
",
    );
}

#[cfg(test)]
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

    /// The instruction lines of an entry's body, trimmed, without the trailing `;`.
    fn instructions(text: &str) -> Vec<String> {
        let body = &text[text.find("{\n").unwrap() + 2..];
        body.lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.ends_with(':') && *l != "}" && !l.starts_with('.'))
            .map(|l| l.trim_end_matches(';').to_string())
            .collect()
    }

    /// The sum of `p{lo}[i] .. p{hi-1}[i]` in the order of the exchange module's doc:
    /// balanced halves for a power of two, left to right otherwise (written independently of
    /// `reference_expr`).
    fn expected_sum(n: usize) -> String {
        fn tree(lo: usize, hi: usize) -> String {
            if hi - lo == 1 {
                return format!("p{lo}[i]");
            }
            let mid = (lo + hi) / 2;
            format!("({}+{})", tree(lo, mid), tree(mid, hi))
        }
        if n.is_power_of_two() {
            return tree(0, n);
        }
        (1..n).fold("p0[i]".to_string(), |acc, k| format!("({acc}+p{k}[i])"))
    }

    /// A store the symbolic run saw: (predicate, address, value).
    type Store = (String, String, String);

    /// Runs an entry's instructions once each, in text order (every loop body once, every
    /// branch ignored), over symbolic values, and returns the global stores.
    fn symbolic_stores(text: &str) -> Vec<Store> {
        let mut sym: HashMap<String, String> = HashMap::new();
        let mut stores = Vec::new();
        for line in instructions(text) {
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
                "st.global.f32" => {
                    let p = pred.clone().expect("stores are predicated");
                    stores.push((get(&sym, &p), v(0), v(1)));
                    continue;
                }
                o if o.starts_with("ld.param") => {
                    v(1).trim_matches(|c| c == '[' || c == ']').into()
                }
                "cvta.to.global.u64" => v(1),
                "setp.ne.u64" => format!("{}!=0", v(1)),
                "mov.u64" if pred.is_some() => {
                    format!("({}?{}:{})", get(&sym, pred.as_ref().unwrap()), v(1), v(0))
                }
                o if o.starts_with("mov.") => v(1),
                "shl.b64" => format!("4*{}", v(1)),
                "add.u64" if ops[2] == "%off" => format!("{}[i]", v(1)),
                "add.u64" if v(2).starts_with("4*") => format!("{}[c]", v(1)),
                "ld.global.f32" => v(1),
                "ld.shared.f32" => "shared".into(),
                "add.rn.f32" => format!("({}+{})", v(1), v(2)),
                "mul.rn.f32" => format!("({}*{})", v(1), v(2)),
                "div.rn.f32" => format!("({}/{})", v(1), v(2)),
                "rsqrt.approx.f32" => format!("rsqrt({})", v(1)),
                "cvt.rn.f32.u64" => format!("f32({})", v(1)),
                _ => format!("{opcode}(..)"),
            };
            sym.insert(ops[0].to_string(), value);
        }
        stores
    }

    fn outputs(n: usize, param: &str, value: &str, idx: &str) -> Vec<Store> {
        (0..n)
            .map(|k| {
                (
                    format!("{param}{k}!=0"),
                    format!("{param}{k}[{idx}]"),
                    value.into(),
                )
            })
            .collect()
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
            let sum = expected_sum(n);
            let x = format!("(r[i]+{sum})");
            let s_out = outputs(n, "s", &sum, "i");
            let x_out = outputs(n, "x", "%x", "i");
            let x_out: Vec<Store> = x_out
                .into_iter()
                .map(|(p, a, _)| (p, a, x.clone()))
                .collect();

            assert_eq!(
                symbolic_stores(&entry_text(n, Epilogue::Sum)),
                s_out,
                "n = {n}"
            );
            let add = [s_out.clone(), x_out.clone()].concat();
            assert_eq!(
                symbolic_stores(&entry_text(n, Epilogue::Add)),
                add,
                "n = {n}"
            );

            // pass 2 reads X back from the first non-null x
            let xb = (0..n - 1)
                .rev()
                .fold(format!("x{}", n - 1), |b, k| format!("(x{k}!=0?x{k}:{b})"));
            let z = format!("((rsqrt(((shared/f32(ncols))+eps))*{xb}[i])*w[c])");
            let norm = [add, outputs(n, "z", &z, "i")].concat();
            assert_eq!(
                symbolic_stores(&entry_text(n, Epilogue::AddRmsNormMul)),
                norm,
                "n = {n}"
            );
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
            assert!(ins.contains(&"fma.rn.f32 %acc, %x, %x, %acc".to_string()));
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
                assert_eq!(stores.len(), outs.len());
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
