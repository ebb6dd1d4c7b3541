//! ABI class E: ggml 0.24.0 (the llama.cpp of `llama-cpp-sys-2 =0.1.157` to `=0.1.159`) and
//! 0.25.3 (vendored by PyPI's `llama-cpp-python 0.3.36`), identical in every ggml header. Its
//! layouts are the ABI facts Cargo.toml's features `ggml-0-24-0` and `ggml-0-25-3` list: class
//! F's but `list-alloc`, so buffer types have six entries and ggml-alloc hands a meta buffer
//! type's context to `ggml_backend_meta_alloc_ctx_tensors_from_buft`. Here is the rest, as
//! data; the two releases differ in one scheduler pass.

mod layout_check;

use std::ffi::c_int;

use ggml_backend_rs_core::abi_class::AbiClass;
use ggml_backend_rs_core::assign;
use ggml_backend_rs_core::names;
use ggml_backend_rs_core::partition::{self, GraphInputs};
use ggml_backend_rs_core::sched_policy::{AllocGraphSize, SchedPolicy};

/// Version a backend registry must report in `ggml_backend_reg::api_version`.
pub const GGML_BACKEND_API_VERSION: c_int = 2;

/// A host is told from class F by the meta device's context allocator it still exports (and
/// the list allocation it lacks), from classes A–D by the meta constructor's C name.
/// cbindgen:ignore
pub const ABI_CLASS: AbiClass = AbiClass {
    name: "E",
    releases: &["0.24.0", "0.25.3"],
    has_exports: &[
        c"ggml_backend_meta_alloc_ctx_tensors_from_buft",
        c"ggml_backend_meta_device",
        c"ggml_op_alloc_size_may_expand",
    ],
    lacks_exports: &[c"ggml_backend_buft_alloc_buffer_n"],
};

/// How libllama's split callback sizes and rotates slices, as in class F: FFN rows and
/// recurrent heads in multiples of lcm(block, 128), attention's block doubled towards 128 rows,
/// rotation counted within a layer's kind.
/// cbindgen:ignore
pub const NAME_CONVENTIONS: names::Conventions = names::Conventions {
    perf_rows: 128,
    rotate_within_kind: true,
};

/// Registering a backend or device that is already registered does nothing.
/// cbindgen:ignore
pub const REGISTRATION_IS_IDEMPOTENT: bool = true;

/// As in class F: the CUDA communicator rounds f32 partial sums through BF16, so our kernel,
/// which adds in f32, goes first at every size.
/// cbindgen:ignore
pub const OWN_KERNEL_BEFORE_BACKEND_UP_TO: Option<usize> = None;

/// `ggml_backend_sched` as in class F, but for which graph inputs get pipeline copies (with
/// several copies): 0.24.0 copies those a node reads, where it first reads them; 0.25.3 every
/// input leaf, read or not, in leaf order (its `ggml_set_input` takes leafs only).
/// cbindgen:ignore
pub const SCHED_POLICY: SchedPolicy = SchedPolicy {
    assign: assign::Policy {
        flash_attn_follows_weights: false,
    },
    partition: partition::Policy {
        max_inputs: None,
        graph_inputs: GRAPH_INPUTS,
    },
    alloc_graph_size: AllocGraphSize::Counted,
    failed_reserve_fails: true,
    wait_before_split_without_inputs: true,
    event_after_every_split: true,
    debug_op_desc: true,
};

#[cfg(feature = "ggml-0-24-0")]
const GRAPH_INPUTS: GraphInputs = GraphInputs::Consumed;
#[cfg(feature = "ggml-0-25-3")]
const GRAPH_INPUTS: GraphInputs = GraphInputs::AllLeafs;
