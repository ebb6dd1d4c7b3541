//! ABI class D: ggml 0.19.0 (the llama.cpp of `llama-cpp-sys-2 =0.1.155` and `=0.1.156`). Its
//! layouts are the ABI facts Cargo.toml's feature `ggml-0-19-0` lists: class E's but
//! `graph-optimize-params` (a backend's `graph_optimize` takes the graph only),
//! `alloc-size-may-expand` and `meta-buffer-set-usage`. Here is the rest, as data: libllama
//! sizes slices as in class E, and the scheduler is class A's but for flash attention's
//! placement, the graph size it counts and the names of its debug output.

mod layout_check;

use std::ffi::c_int;

use ggml_backend_rs_core::abi_class::AbiClass;
use ggml_backend_rs_core::assign;
use ggml_backend_rs_core::names;
use ggml_backend_rs_core::partition::{self, GraphInputs, MAX_SPLIT_INPUTS};
use ggml_backend_rs_core::sched_policy::{AllocGraphSize, SchedPolicy};

/// Version a backend registry must report in `ggml_backend_reg::api_version`.
pub const GGML_BACKEND_API_VERSION: c_int = 2;

/// A host is told from class E by `ggml_op_alloc_size_may_expand`, which it lacks, from classes
/// B and C by `ggml_build_forward_order`, new in 0.19, from class A by the meta constructor's C
/// name, and from class F by the meta device's context allocator.
/// cbindgen:ignore
pub const ABI_CLASS: AbiClass = AbiClass {
    name: "D",
    releases: &["0.19.0"],
    has_exports: &[
        c"ggml_backend_meta_alloc_ctx_tensors_from_buft",
        c"ggml_backend_meta_device",
        c"ggml_build_forward_order",
    ],
    lacks_exports: &[c"ggml_op_alloc_size_may_expand"],
};

/// How libllama's split callback sizes and rotates slices, as in class E: FFN rows and
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

/// As in class E: the CUDA communicator rounds f32 partial sums through BF16, so our kernel,
/// which adds in f32, goes first at every size.
/// cbindgen:ignore
pub const OWN_KERNEL_BEFORE_BACKEND_UP_TO: Option<usize> = None;

/// `ggml_backend_sched` of 0.19.0: class A's passes and splits (a full split's inputs start a
/// new split; an event only after splits with inputs; a failed re-plan of the buffers is not
/// an error), but flash attention no longer follows its weights' backend, the graph handed to
/// ggml-alloc is sized by the inputs there are, and `GGML_SCHED_DEBUG` names ops by
/// `ggml_op_desc`.
/// cbindgen:ignore
pub const SCHED_POLICY: SchedPolicy = SchedPolicy {
    assign: assign::Policy {
        flash_attn_follows_weights: false,
    },
    partition: partition::Policy {
        max_inputs: Some(MAX_SPLIT_INPUTS),
        graph_inputs: GraphInputs::Consumed,
    },
    alloc_graph_size: AllocGraphSize::Counted,
    failed_reserve_fails: false,
    wait_before_split_without_inputs: false,
    event_after_every_split: false,
    debug_op_desc: true,
};
