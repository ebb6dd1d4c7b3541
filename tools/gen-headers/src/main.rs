//! Writes the generated headers into the main crate's `include/ggml-<version>/`.

fn main() {
    let root = gen_headers::main_crate_dir();
    let headers = gen_headers::generate(&root).unwrap_or_else(|e| {
        eprintln!("gen-headers: {e}");
        std::process::exit(1);
    });
    for h in headers {
        let path = root.join(&h.path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, h.text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        println!("wrote {}", h.path);
    }
}
