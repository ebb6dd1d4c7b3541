//! The PTX of the meta backend's CUDA AllReduce kernels, generated per device count as text.
//! The root crate's `meta::cuda` hands it to the CUDA driver, which compiles it for the GPU at
//! run time; here it is only a string, so its summation order is tested without a GPU.

use crate::exchange;

/// The entry point of the kernel for `n` partials.
pub fn kernel_name(n: usize) -> String {
    format!("ggml_meta_allreduce_f32_x{n}")
}

/// PTX of the kernel for `n` partials: parameters `p0 .. p(n-1)` (f32 arrays), `first`,
/// `limit`; threads stride over `[first, limit)`, load element `i` of every partial, add them in
/// [`exchange::reference_expr`] order (round to nearest, denormals kept) and store the sum
/// into every partial.
pub fn ptx(n: usize) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let params: Vec<String> = (0..n)
        .map(|k| format!("    .param .u64 p{k}"))
        .chain([
            "    .param .u64 first".into(),
            "    .param .u64 limit".into(),
        ])
        .collect();
    let _ = write!(
        s,
        ".version 7.0\n.target sm_52\n.address_size 64\n\n.visible .entry {}(\n{}\n)\n{{\n",
        kernel_name(n),
        params.join(",\n")
    );
    let _ = writeln!(s, "    .reg .pred %done;");
    let _ = writeln!(s, "    .reg .b32 %r<4>;");
    let _ = writeln!(s, "    .reg .b64 %i, %limit, %stride, %off, %t;");
    let _ = writeln!(s, "    .reg .b64 %a<{n}>;");
    let _ = writeln!(s, "    .reg .b64 %q<{n}>;");
    let _ = writeln!(s, "    .reg .f32 %v<{n}>;");
    let _ = writeln!(s, "    .reg .f32 %s<{}>;", n.max(2));
    for k in 0..n {
        let _ = writeln!(s, "    ld.param.u64 %a{k}, [p{k}];");
        let _ = writeln!(s, "    cvta.to.global.u64 %a{k}, %a{k};");
    }
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
    for k in 0..n {
        let _ = writeln!(s, "    add.u64 %q{k}, %a{k}, %off;");
        let _ = writeln!(s, "    ld.global.f32 %v{k}, [%q{k}];");
    }
    let mut next = 0usize;
    let mut body = String::new();
    let root = exchange::reference_expr((0..n).map(|k| format!("%v{k}")).collect(), |a, b| {
        let r = format!("%s{next}");
        next += 1;
        let _ = writeln!(body, "    add.rn.f32 {r}, {a}, {b};");
        r
    })
    .unwrap_or_default();
    s.push_str(&body);
    for k in 0..n {
        let _ = writeln!(s, "    st.global.f32 [%q{k}], {root};");
    }
    s.push_str(
        "    add.u64 %i, %i, %stride;
    bra LOOP;
DONE:
    ret;
}
",
    );
    s
}

#[cfg(test)]
mod tests {
    use super::ptx;

    #[test]
    fn ptx_adds_in_reference_order() {
        let p = ptx(4);
        let adds: Vec<&str> = p.lines().filter(|l| l.contains("add.rn.f32")).collect();
        assert_eq!(
            adds,
            [
                "    add.rn.f32 %s0, %v0, %v1;",
                "    add.rn.f32 %s1, %v2, %v3;",
                "    add.rn.f32 %s2, %s0, %s1;",
            ]
        );
        assert_eq!(p.matches("st.global.f32").count(), 4);
        let p = ptx(3);
        let adds: Vec<&str> = p.lines().filter(|l| l.contains("add.rn.f32")).collect();
        assert_eq!(
            adds,
            [
                "    add.rn.f32 %s0, %v0, %v1;",
                "    add.rn.f32 %s1, %s0, %v2;"
            ]
        );
        assert!(p.contains(".reg .f32 %s<3>;"));
    }
}
