//! The committed headers in `include/` must equal what the generator produces now.

#[test]
fn committed_headers_are_up_to_date() {
    let root = gen_headers::main_crate_dir();
    let headers = gen_headers::generate(&root).expect("generating the headers");
    let mut stale = Vec::new();
    for h in &headers {
        let path = root.join(&h.path);
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        if committed != h.text {
            let line = committed
                .lines()
                .zip(h.text.lines())
                .position(|(a, b)| a != b)
                .unwrap_or_else(|| committed.lines().count().min(h.text.lines().count()))
                + 1;
            stale.push(format!("{} (first difference at line {line})", h.path));
        }
    }
    assert!(
        stale.is_empty(),
        "stale generated headers: {}\nregenerate with:\n    cargo run --manifest-path tools/gen-headers/Cargo.toml\nand commit the result",
        stale.join(", ")
    );
}
