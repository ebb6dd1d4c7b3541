//! Generates `include/ggml-backend.h`, `include/ggml-backend-impl.h` and `include/ggml-ext.h`
//! from the ggml-backend-rs sources with cbindgen.
//!
//! cbindgen parses the crate once (settings in `cbindgen.toml`); this crate then splits what it
//! found over the three headers the way upstream does, and writes each header in three parts:
//!
//! 1. typedefs (handles first, then function-pointer types): always visible;
//! 2. macros, constants, enums and structs, inside `#ifndef GGML_BACKEND_RS_PROTOTYPES_ONLY`;
//! 3. function prototypes inside `extern "C"`, always visible.
//!
//! Defining `GGML_BACKEND_RS_PROTOTYPES_ONLY` after including upstream's headers therefore
//! redeclares every typedef and function against upstream's types: C++ accepts only identical
//! redeclarations, so the ctest `abi_prototypes` turns any mismatch into a compile error.
//!
//! One thing cbindgen cannot express is handled here, visibly: upstream's ggml-ext.h declares
//! `ggml_backend_meta_device` and `ggml_backend_meta_split_axis_name` without `extern "C"`, so
//! C++ code links them by their mangled names, which the crate exports. Their prototypes are
//! hand-written in `fragments/meta-cxx-linkage.h`, outside any `extern "C"` block.

use std::collections::HashSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use cbindgen::ir::{Documentation, Item, ItemContainer, Type};
use cbindgen::{Bindings, Config};

/// Defined by a translation unit that already included upstream's headers and wants only our
/// typedefs and prototypes checked against them.
pub const PROTOTYPES_ONLY: &str = "GGML_BACKEND_RS_PROTOTYPES_ONLY";

/// One generated header: its path relative to the main crate's root, and its text.
pub struct Header {
    pub path: &'static str,
    pub text: String,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Target {
    Public,
    Impl,
    Ext,
}

/// Functions that upstream declares in ggml-backend-impl.h; every other exported function
/// belongs to ggml-backend.h.
const IMPL_FUNCTIONS: &[&str] = &[
    "ggml_backend_buffer_init",
    "ggml_backend_buffer_copy_tensor",
    "ggml_backend_multi_buffer_alloc_buffer",
    "ggml_backend_buffer_is_multi_buffer",
    "ggml_backend_multi_buffer_set_usage",
    "ggml_backend_is_meta",
    "ggml_backend_buffer_is_meta",
    "ggml_backend_buft_is_meta",
    "ggml_backend_meta_n_backends",
    "ggml_backend_meta_simple_backend",
    "ggml_backend_meta_alloc_ctx_tensors_from_buft",
];

/// Functions of ggml-ext.h with C linkage: accessors of meta objects (the seed's API, kept as
/// an extension; upstream has them as file-local functions).
const EXT_FUNCTIONS: &[&str] = &[
    "ggml_backend_dev_is_meta",
    "ggml_backend_meta_dev_n_devs",
    "ggml_backend_meta_dev_simple_dev",
    "ggml_backend_meta_buft_n_bufts",
    "ggml_backend_meta_buft_simple_buft",
    "ggml_backend_meta_buffer_n_bufs",
    "ggml_backend_meta_buffer_simple_buffer",
    "ggml_backend_meta_buffer_simple_tensor",
    "ggml_backend_meta_get_split_state",
];

/// Exported under C++-mangled names (what cbindgen reports as their names); declared by
/// `fragments/meta-cxx-linkage.h`.
const CXX_LINKAGE_FUNCTIONS: &[&str] = &[
    "_Z24ggml_backend_meta_devicePP19ggml_backend_devicemPF29ggml_backend_meta_split_statePK11ggml_tensorPvES6_",
    "_Z33ggml_backend_meta_split_axis_name28ggml_backend_meta_split_axis",
];

/// Types of ggml-backend-impl.h: the vtables, the handle structs, the loader entry points.
const IMPL_TYPES: &[&str] = &[
    "ggml_backend_buffer_type_i",
    "ggml_backend_buffer_type",
    "ggml_backend_buffer_i",
    "ggml_backend_buffer",
    "ggml_backend_i",
    "ggml_backend",
    "ggml_backend_event",
    "ggml_backend_device_i",
    "ggml_backend_device",
    "ggml_backend_reg_i",
    "ggml_backend_reg",
    "ggml_backend_init_t",
    "ggml_backend_score_t",
    "GGML_BACKEND_API_VERSION",
];

/// Types of ggml-ext.h (the meta split API).
const EXT_TYPES: &[&str] = &[
    "ggml_backend_meta_split_axis",
    "ggml_backend_meta_split_state",
    "ggml_backend_meta_get_split_state_t",
    "GGML_BACKEND_META_MAX_DEVICES",
];

/// Crate constants that mirror ggml.h / ggml-impl.h, or that name enum values for Rust, and so
/// never appear in our headers.
const GGML_CONSTANTS: &[&str] = &[
    "GGML_MAX_DIMS",
    "GGML_MAX_SRC",
    "GGML_MAX_OP_PARAMS",
    "GGML_MAX_NAME",
    "TENSOR_ALIGNMENT",
    "GGML_STATUS_ALLOC_FAILED",
    "GGML_STATUS_FAILED",
    "GGML_STATUS_SUCCESS",
    "GGML_STATUS_ABORTED",
    "GGML_LOG_LEVEL_DEBUG",
    "GGML_LOG_LEVEL_INFO",
    "GGML_LOG_LEVEL_WARN",
    "GGML_LOG_LEVEL_ERROR",
    "GGML_OP_RESHAPE",
    "GGML_OP_VIEW",
    "GGML_OP_PERMUTE",
    "GGML_OP_TRANSPOSE",
    "GGML_OP_NONE",
    "GGML_OP_MUL_MAT_ID",
    "GGML_OP_ROPE",
    "GGML_TENSOR_FLAG_INPUT",
    "GGML_TENSOR_FLAG_OUTPUT",
    "GGML_TENSOR_FLAG_COMPUTE",
    "GGML_TYPE_F32",
    // Rust names of the enum values our two ABI integers compare against
    "USAGE_ANY",
    "USAGE_WEIGHTS",
    "USAGE_COMPUTE",
    "DEVICE_CPU",
    "DEVICE_GPU",
    "DEVICE_IGPU",
    "DEVICE_ACCEL",
    "DEVICE_META",
];

fn target_of_type(name: &str) -> Target {
    if IMPL_TYPES.contains(&name) {
        Target::Impl
    } else if EXT_TYPES.contains(&name) {
        Target::Ext
    } else {
        Target::Public
    }
}

fn target_of_function(name: &str) -> Target {
    if IMPL_FUNCTIONS.contains(&name) {
        Target::Impl
    } else if EXT_FUNCTIONS.contains(&name) {
        Target::Ext
    } else {
        Target::Public
    }
}

struct Spec {
    target: Target,
    path: &'static str,
    includes: &'static [&'static str],
    /// Macros defined with the types (part 2).
    macros: &'static [&'static str],
    /// Hand-written declarations appended after the generated prototypes.
    trailer: &'static [&'static str],
}

const SPECS: &[Spec] = &[
    Spec {
        target: Target::Public,
        path: "include/ggml-backend.h",
        includes: &["ggml.h", "ggml-alloc.h"],
        macros: &[include_str!("../fragments/backend-api.h")],
        trailer: &[],
    },
    Spec {
        target: Target::Impl,
        path: "include/ggml-backend-impl.h",
        includes: &["ggml-backend.h"],
        macros: &[include_str!("../fragments/backend-dl.h")],
        trailer: &[],
    },
    Spec {
        target: Target::Ext,
        path: "include/ggml-ext.h",
        includes: &["ggml.h", "ggml-backend.h"],
        macros: &[],
        trailer: &[include_str!("../fragments/meta-cxx-linkage.h")],
    },
];

/// Generates the three headers for the crate rooted at `crate_dir`.
pub fn generate(crate_dir: &Path) -> Result<Vec<Header>, String> {
    let config_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("cbindgen.toml");
    let config =
        Config::from_file(&config_path).map_err(|e| format!("{}: {e}", config_path.display()))?;

    let mut bindings = cbindgen::Builder::new()
        .with_config(config)
        .with_src(crate_dir.join("src/lib.rs"))
        .generate()
        .map_err(|e| format!("cbindgen: {e}"))?;

    // What the crate exports, minus what is not part of the C API: imports from ggml
    // (`extern` blocks), Rust-side associated constants, and Rust doc comments on functions
    // (they talk about Rust safety contracts).
    let mut functions = std::mem::take(&mut bindings.functions);
    functions.retain(|f| !f.extern_decl);
    for f in &mut functions {
        f.documentation = Documentation::none();
    }
    let mut items = std::mem::take(&mut bindings.items);
    for item in &mut items {
        if let ItemContainer::Struct(s) = item {
            s.associated_constants.clear();
        }
    }
    // cbindgen files constants both as items and as `constants`; treat them alike: each must
    // be assigned to a header or be one of ggml's own.
    items.retain(|i| {
        !(matches!(i, ItemContainer::Constant(_)) && GGML_CONSTANTS.contains(&i.deref().name()))
    });
    let mut constants = std::mem::take(&mut bindings.constants);
    constants.retain(|c| !GGML_CONSTANTS.contains(&c.name()));
    let unknown: Vec<&str> = constants
        .iter()
        .map(|c| c.name())
        .chain(
            items
                .iter()
                .filter(|i| matches!(i, ItemContainer::Constant(_)))
                .map(|i| i.deref().name()),
        )
        .filter(|n| !IMPL_TYPES.contains(n) && !EXT_TYPES.contains(n))
        .collect();
    if !unknown.is_empty() {
        return Err(format!(
            "constants not assigned to a header (add them to gen-headers' lists): {unknown:?}"
        ));
    }
    check_expected(&items, &functions)?;

    let mut headers = Vec::new();
    for spec in SPECS {
        let typedefs_of = |fn_ptr: bool| -> Vec<ItemContainer> {
            items
                .iter()
                .filter(|i| target_of_type(i.deref().name()) == spec.target)
                .filter(|i| matches!(i, ItemContainer::Typedef(t) if matches!(t.aliased, Type::FuncPtr { .. }) == fn_ptr))
                .cloned()
                .collect()
        };
        let mut typedefs = typedefs_of(false);
        typedefs.extend(typedefs_of(true));
        let definitions: Vec<ItemContainer> = items
            .iter()
            .filter(|i| target_of_type(i.deref().name()) == spec.target)
            .filter(|i| !matches!(i, ItemContainer::Typedef(_)))
            .cloned()
            .collect();
        let consts: Vec<_> = constants
            .iter()
            .filter(|c| target_of_type(c.name()) == spec.target)
            .cloned()
            .collect();
        let fns: Vec<_> = functions
            .iter()
            .filter(|f| {
                !CXX_LINKAGE_FUNCTIONS.contains(&f.path.name())
                    && target_of_function(f.path.name()) == spec.target
            })
            .cloned()
            .collect();

        let mut text = String::new();
        writeln!(text, "{}", preamble(spec)).unwrap();
        text += &section(&mut bindings, typedefs, vec![], vec![]);
        writeln!(text, "\n#ifndef {PROTOTYPES_ONLY}\n").unwrap();
        for m in spec.macros {
            writeln!(text, "{m}").unwrap();
        }
        text += &section(&mut bindings, definitions, consts, vec![]);
        writeln!(text, "\n#endif // {PROTOTYPES_ONLY}\n").unwrap();
        text += &section(&mut bindings, vec![], vec![], fns);
        for t in spec.trailer {
            writeln!(text, "\n{t}").unwrap();
        }
        headers.push(Header {
            path: spec.path,
            text: tidy(&text),
        });
    }
    Ok(headers)
}

fn preamble(spec: &Spec) -> String {
    let mut s = format!(
        "// {path}: generated from the ggml-backend-rs sources by tools/gen-headers (cbindgen).\n\
         // Do not edit; regenerate with\n\
         //     cargo run --manifest-path tools/gen-headers/Cargo.toml\n\
         // Declaration-compatible with upstream ggml's header of the same name. Defining\n\
         // {PROTOTYPES_ONLY} hides macros, constants, enums and structs, leaving the\n\
         // typedefs and prototypes (used to check them against upstream's in one C++ TU).\n\
         \n#pragma once\n\n\
         // Lets a translation unit check that it reads these headers and not upstream's.\n\
         #define GGML_BACKEND_RS_HEADERS 1\n\n",
        path = spec.path.trim_start_matches("include/")
    );
    for inc in spec.includes {
        writeln!(s, "#include \"{inc}\"").unwrap();
    }
    s
}

/// Writes some items, constants and functions with cbindgen's C writer and the crate's
/// configuration, but without the per-file boilerplate (the composer writes that once).
fn section(
    bindings: &mut Bindings,
    items: Vec<cbindgen::ir::ItemContainer>,
    constants: Vec<cbindgen::ir::Constant>,
    functions: Vec<cbindgen::ir::Function>,
) -> String {
    if items.is_empty() && constants.is_empty() && functions.is_empty() {
        return String::new();
    }
    let c = &mut bindings.config;
    c.header = None;
    c.trailer = None;
    c.after_includes = None;
    c.autogen_warning = None;
    c.include_guard = None;
    c.pragma_once = false;
    c.no_includes = true;
    c.includes.clear();
    c.sys_includes.clear();
    bindings.items = items;
    bindings.constants = constants;
    bindings.functions = functions;
    let mut out = Vec::new();
    bindings.write(&mut out);
    String::from_utf8(out).expect("cbindgen writes UTF-8")
}

/// Collapses runs of blank lines and ends the file with exactly one newline.
fn tidy(text: &str) -> String {
    let mut out = String::new();
    let mut blank = 0;
    for line in text.lines() {
        let line = line.trim_end();
        blank = if line.is_empty() { blank + 1 } else { 0 };
        if blank <= 1 {
            out.push_str(line);
            out.push('\n');
        }
    }
    while out.ends_with("\n\n") {
        out.pop();
    }
    out
}

/// Fails when an item a header must declare is missing, so that a rename in the crate cannot
/// silently drop it from the headers.
fn check_expected(
    items: &[ItemContainer],
    functions: &[cbindgen::ir::Function],
) -> Result<(), String> {
    let names: HashSet<&str> = items.iter().map(|i| i.deref().name()).collect();
    let fnames: HashSet<&str> = functions.iter().map(|f| f.path.name()).collect();
    let missing: Vec<&str> = IMPL_TYPES
        .iter()
        .chain(EXT_TYPES)
        .filter(|n| !n.starts_with("GGML_"))
        .copied()
        .filter(|n| !names.contains(n))
        .chain(
            IMPL_FUNCTIONS
                .iter()
                .copied()
                .filter(|n| !fnames.contains(n)),
        )
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(format!("cbindgen did not find: {missing:?}"))
    }
}

/// The main crate's root: two levels above this crate.
pub fn main_crate_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}
