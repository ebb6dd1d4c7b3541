//! Generates, for each ggml version the library implements, `include/ggml-<version>/` with
//! `ggml-backend.h`, `ggml-backend-impl.h` and `ggml-ext.h` from the ggml-backend-rs sources
//! with cbindgen.
//!
//! cbindgen parses the crate once (settings in `cbindgen.toml`), every version's module
//! included; for each version this crate keeps the items whose `cfg` holds with that version's
//! features enabled (its release feature and the ABI facts the main crate's Cargo.toml lists
//! for it), splits them over the three headers the way that version of upstream does (the
//! meta API sits in `ggml-ext.h` without the fact `meta-c-linkage`, in `ggml-backend.h` with
//! it), and writes each header in three parts:
//!
//! 1. typedefs (handles first, then function-pointer types): always visible;
//! 2. macros, constants, enums and structs, inside `#ifndef GGML_BACKEND_RS_PROTOTYPES_ONLY`;
//! 3. function prototypes inside `extern "C"`, always visible.
//!
//! Defining `GGML_BACKEND_RS_PROTOTYPES_ONLY` after including upstream's headers therefore
//! redeclares every typedef and function against upstream's types: C++ accepts only identical
//! redeclarations, so the ctest `abi_prototypes` turns any mismatch into a compile error.
//!
//! One thing cbindgen cannot express is handled here, visibly: ggml 0.9.11's ggml-ext.h declares
//! `ggml_backend_meta_device` and `ggml_backend_meta_split_axis_name` without `extern "C"`, so
//! C++ code links them by their mangled names, which the crate exports. Their prototypes are
//! hand-written in `fragments/meta-cxx-linkage.h`, outside any `extern "C"` block.

use std::collections::HashSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use cbindgen::ir::{Cfg, Documentation, Function, Item, ItemContainer, Type};
use cbindgen::{Bindings, Config};

/// Defined by a translation unit that already included upstream's headers and wants only our
/// typedefs and prototypes checked against them.
pub const PROTOTYPES_ONLY: &str = "GGML_BACKEND_RS_PROTOTYPES_ONLY";

/// One generated header: its path relative to the main crate's root, and its text.
pub struct Header {
    pub path: String,
    pub text: String,
}

/// A ggml version the library implements: the crate feature that selects it.
pub struct Version {
    /// `0.9.11`: the headers go to `include/ggml-<name>/`.
    pub name: &'static str,
    feature: &'static str,
    /// Items only this version has, which must be found.
    own: &'static [&'static str],
}

/// A version with the features its build enables, read from the main crate's Cargo.toml.
struct Build {
    version: &'static Version,
    features: Vec<String>,
    /// The meta API's types and constructor: `ggml-ext.h` (with C++ linkage for the
    /// constructor) or `ggml-backend.h`.
    meta_api: Target,
}

pub const VERSIONS: &[Version] = &[
    Version {
        name: "0.9.11",
        feature: "ggml-0-9-11",
        own: &[
            "ggml_backend_meta_alloc_ctx_tensors_from_buft",
            "ggml_backend_allreduce_tensor_t",
        ],
    },
    Version {
        name: "0.13.1",
        feature: "ggml-0-13-1",
        own: CLASS_B_C_D_OWN,
    },
    Version {
        name: "0.18.0",
        feature: "ggml-0-18-0",
        own: CLASS_B_C_D_OWN,
    },
    Version {
        name: "0.19.0",
        feature: "ggml-0-19-0",
        own: CLASS_B_C_D_OWN,
    },
    Version {
        name: "0.24.0",
        feature: "ggml-0-24-0",
        own: CLASS_E_OWN,
    },
    Version {
        name: "0.25.3",
        feature: "ggml-0-25-3",
        own: CLASS_E_OWN,
    },
    Version {
        name: "0.26.0",
        feature: "ggml-0-26-0",
        own: &[
            "ggml_backend_meta_device",
            "ggml_backend_meta_split_axis_name",
            "ggml_backend_buft_alloc_buffer_n",
            "ggml_backend_buft_get_alloc_size_n",
            "ggml_backend_meta_buffer_set_usage",
            "ggml_op_alloc_size_may_expand",
            "ggml_backend_graph_optimize_params",
            "ggml_backend_comm_init_t",
            "ggml_backend_comm_free_t",
            "ggml_backend_comm_allreduce_tensor_t",
        ],
    },
];

/// What classes B, C and D must have: class E's meta API and communicator, without the
/// functions 0.24 added.
const CLASS_B_C_D_OWN: &[&str] = &[
    "ggml_backend_meta_device",
    "ggml_backend_meta_split_axis_name",
    "ggml_backend_meta_alloc_ctx_tensors_from_buft",
    "ggml_backend_comm_init_t",
    "ggml_backend_comm_free_t",
    "ggml_backend_comm_allreduce_tensor_t",
];

/// What class E's two releases must have: class F's meta API and communicator, with class
/// A's context allocator for meta buffer types.
const CLASS_E_OWN: &[&str] = &[
    "ggml_backend_meta_device",
    "ggml_backend_meta_split_axis_name",
    "ggml_backend_meta_alloc_ctx_tensors_from_buft",
    "ggml_backend_meta_buffer_set_usage",
    "ggml_op_alloc_size_may_expand",
    "ggml_backend_graph_optimize_params",
    "ggml_backend_comm_init_t",
    "ggml_backend_comm_free_t",
    "ggml_backend_comm_allreduce_tensor_t",
];

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
    "ggml_backend_meta_buffer_set_usage",
    "ggml_op_alloc_size_may_expand",
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

/// Exported under C++-mangled names by ggml 0.9.11's module (what cbindgen reports as their
/// names); declared by `fragments/meta-cxx-linkage.h`.
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
    "ggml_backend_graph_optimize_t",
    "ggml_backend_graph_optimize_params",
    "ggml_backend_init_t",
    "ggml_backend_score_t",
    "GGML_BACKEND_API_VERSION",
];

/// Types of the meta split API (in ggml-ext.h or ggml-backend.h: `Version::meta_api`).
const META_TYPES: &[&str] = &[
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
    "GGML_OP_COUNT",
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

fn target_of_type(name: &str, version: &Build) -> Target {
    if IMPL_TYPES.contains(&name) {
        Target::Impl
    } else if META_TYPES.contains(&name) {
        version.meta_api
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

/// Whether `cfg` holds in a build with exactly `features` enabled, not under test.
fn holds(cfg: &Cfg, features: &[String]) -> bool {
    match cfg {
        Cfg::Boolean(_) => false,
        Cfg::Named(key, value) => key == "feature" && features.iter().any(|f| f == value),
        Cfg::Any(cs) => cs.iter().any(|c| holds(c, features)),
        Cfg::All(cs) => cs.iter().all(|c| holds(c, features)),
        Cfg::Not(c) => !holds(c, features),
    }
}

/// The features a build of `feature` enables: itself and, transitively, what the main crate's
/// Cargo.toml `[features]` lists for it (a release's ABI facts).
fn enabled_features(crate_dir: &Path, feature: &str) -> Result<Vec<String>, String> {
    let path = crate_dir.join("Cargo.toml");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let manifest: toml::Table = text
        .parse()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let table = manifest
        .get("features")
        .and_then(|f| f.as_table())
        .ok_or_else(|| format!("{}: no [features]", path.display()))?;
    let mut out: Vec<String> = Vec::new();
    let mut todo = vec![feature.to_owned()];
    while let Some(f) = todo.pop() {
        if out.contains(&f) {
            continue;
        }
        let list = table
            .get(&f)
            .and_then(|v| v.as_array())
            .ok_or_else(|| format!("{}: no feature {f}", path.display()))?;
        todo.extend(list.iter().filter_map(|v| v.as_str()).map(str::to_owned));
        out.push(f);
    }
    Ok(out)
}

/// The item's `cfg`, to read or to clear (a kept item is unconditional in its version's
/// headers).
fn cfg_of(item: &mut ItemContainer) -> &mut Option<Cfg> {
    match item {
        ItemContainer::Constant(c) => &mut c.cfg,
        ItemContainer::Static(g) => &mut g.cfg,
        ItemContainer::OpaqueItem(o) => &mut o.cfg,
        ItemContainer::Struct(s) => &mut s.cfg,
        ItemContainer::Union(u) => &mut u.cfg,
        ItemContainer::Enum(e) => &mut e.cfg,
        ItemContainer::Typedef(t) => &mut t.cfg,
    }
}

/// Keeps what exists in `version`'s build, made unconditional.
fn for_version<T>(list: &[T], version: &Build, cfg: impl Fn(&mut T) -> &mut Option<Cfg>) -> Vec<T>
where
    T: Clone,
{
    let mut out = Vec::new();
    for item in list {
        let mut item = item.clone();
        let c = cfg(&mut item);
        if c.as_ref().is_none_or(|c| holds(c, &version.features)) {
            *c = None;
            out.push(item);
        }
    }
    out
}

struct Spec {
    target: Target,
    file: &'static str,
    includes: &'static [&'static str],
    /// Macros defined with the types (part 2).
    macros: &'static [&'static str],
    /// Hand-written declarations appended after the generated prototypes.
    trailer: &'static [&'static str],
}

fn specs(version: &Build) -> [Spec; 3] {
    let cxx_meta = version.meta_api == Target::Ext;
    [
        Spec {
            target: Target::Public,
            file: "ggml-backend.h",
            includes: &["ggml.h", "ggml-alloc.h"],
            macros: &[include_str!("../fragments/backend-api.h")],
            trailer: &[],
        },
        Spec {
            target: Target::Impl,
            file: "ggml-backend-impl.h",
            includes: &["ggml-backend.h"],
            macros: &[include_str!("../fragments/backend-dl.h")],
            trailer: &[],
        },
        Spec {
            target: Target::Ext,
            file: "ggml-ext.h",
            includes: &["ggml.h", "ggml-backend.h"],
            macros: &[],
            trailer: if cxx_meta {
                &[include_str!("../fragments/meta-cxx-linkage.h")]
            } else {
                &[]
            },
        },
    ]
}

/// Generates the three headers of every version for the crate rooted at `crate_dir`.
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
        .filter(|n| !IMPL_TYPES.contains(n) && !META_TYPES.contains(n))
        .collect();
    if !unknown.is_empty() {
        return Err(format!(
            "constants not assigned to a header (add them to gen-headers' lists): {unknown:?}"
        ));
    }

    let mut headers = Vec::new();
    for version in VERSIONS {
        let features = enabled_features(crate_dir, version.feature)?;
        let meta_api = if features.iter().any(|f| f == "meta-c-linkage") {
            Target::Public
        } else {
            Target::Ext
        };
        let version = &Build {
            version,
            features,
            meta_api,
        };
        let items = for_version(&items, version, cfg_of);
        let constants = for_version(&constants, version, |c| &mut c.cfg);
        let functions = for_version(&functions, version, |f: &mut Function| &mut f.cfg);
        check_expected(&items, &functions, version)?;
        for spec in specs(version) {
            let text = header_text(
                &mut bindings,
                &spec,
                version,
                &items,
                &constants,
                &functions,
            );
            headers.push(Header {
                path: format!("include/ggml-{}/{}", version.version.name, spec.file),
                text,
            });
        }
    }
    Ok(headers)
}

/// One header of one version, from that version's items.
fn header_text(
    bindings: &mut Bindings,
    spec: &Spec,
    version: &Build,
    items: &[ItemContainer],
    constants: &[cbindgen::ir::Constant],
    functions: &[Function],
) -> String {
    let here = |name: &str| target_of_type(name, version) == spec.target;
    let typedefs_of = |fn_ptr: bool| -> Vec<ItemContainer> {
        items
            .iter()
            .filter(|i| here(i.deref().name()))
            .filter(|i| matches!(i, ItemContainer::Typedef(t) if matches!(t.aliased, Type::FuncPtr { .. }) == fn_ptr))
            .cloned()
            .collect()
    };
    let mut typedefs = typedefs_of(false);
    typedefs.extend(typedefs_of(true));
    let definitions: Vec<ItemContainer> = items
        .iter()
        .filter(|i| here(i.deref().name()))
        .filter(|i| !matches!(i, ItemContainer::Typedef(_)))
        .cloned()
        .collect();
    let consts: Vec<_> = constants
        .iter()
        .filter(|c| here(c.name()))
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
    writeln!(text, "{}", preamble(spec, version)).unwrap();
    // The structs of this header declared first: the function-pointer typedefs before them
    // may name them (a tag first seen in a parameter list would be local to it).
    for d in &definitions {
        if let ItemContainer::Struct(st) = d {
            writeln!(text, "struct {};", st.path.name()).unwrap();
        }
    }
    text += &section(bindings, typedefs, vec![], vec![]);
    writeln!(text, "\n#ifndef {PROTOTYPES_ONLY}\n").unwrap();
    for m in spec.macros {
        writeln!(text, "{m}").unwrap();
    }
    text += &section(bindings, definitions, consts, vec![]);
    writeln!(text, "\n#endif // {PROTOTYPES_ONLY}\n").unwrap();
    text += &section(bindings, vec![], vec![], fns);
    for t in spec.trailer {
        writeln!(text, "\n{t}").unwrap();
    }
    tidy(&text)
}

fn preamble(spec: &Spec, version: &Build) -> String {
    let matches = if spec.target == Target::Ext && version.meta_api != Target::Ext {
        "// ggml-backend-rs's own extension (upstream has no such header in this version): the\n\
         // meta device's accessors.\n"
            .to_string()
    } else {
        "// Declaration-compatible with upstream ggml's header of the same name.\n".to_string()
    };
    let mut s = format!(
        "// {file}: ggml {version}; generated from the ggml-backend-rs sources by\n\
         // tools/gen-headers (cbindgen). Do not edit; regenerate with\n\
         //     cargo run --manifest-path tools/gen-headers/Cargo.toml\n\
         {matches}\
         // Defining {PROTOTYPES_ONLY} hides macros, constants, enums and structs, leaving the\n\
         // typedefs and prototypes (used to check them against upstream's in one C++ TU).\n\
         \n#pragma once\n\n\
         // Lets a translation unit check that it reads these headers and not upstream's.\n\
         #define GGML_BACKEND_RS_HEADERS 1\n\n",
        file = spec.file,
        version = version.version.name,
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
    functions: &[Function],
    version: &Build,
) -> Result<(), String> {
    let names: HashSet<&str> = items.iter().map(|i| i.deref().name()).collect();
    let fnames: HashSet<&str> = functions.iter().map(|f| f.path.name()).collect();
    let of_other_versions = |n: &&str| {
        VERSIONS
            .iter()
            .any(|v| v.name != version.version.name && v.own.contains(n))
    };
    let types = IMPL_TYPES
        .iter()
        .chain(META_TYPES)
        .filter(|n| !n.starts_with("GGML_"))
        .filter(|n| !of_other_versions(n));
    let fns = IMPL_FUNCTIONS.iter().filter(|n| !of_other_versions(n));
    let missing: Vec<&str> = types
        .copied()
        .filter(|n| !names.contains(n))
        .chain(fns.copied().filter(|n| !fnames.contains(n)))
        .chain(
            version
                .version
                .own
                .iter()
                .copied()
                .filter(|n| !names.contains(n) && !fnames.contains(n)),
        )
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "cbindgen did not find, for ggml {}: {missing:?}",
            version.version.name
        ))
    }
}

/// The main crate's root: two levels above this crate.
pub fn main_crate_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}
