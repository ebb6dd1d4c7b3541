//! ABI class C: ggml 0.18.0 (the llama.cpp of `llama-cpp-sys-2 =0.1.154`). Its layouts are the ABI
//! facts Cargo.toml's feature `ggml-0-18-0` lists: class D's but `mmap-caps` (a device's caps end
//! before `mmap_support`). Here is the rest, as data: libllama sizes slices as in class D, and the
//! scheduler is class D's but for the graph size it hands to ggml-alloc (room for a full split's
//! inputs, each split holding at most `MAX_SPLIT_INPUTS`).

mod layout_check;

use std::ffi::c_int;

use ggml_backend_rs_core::abi_class::AbiClass;
use ggml_backend_rs_core::assign;
use ggml_backend_rs_core::names;
use ggml_backend_rs_core::partition::{self, GraphInputs, MAX_SPLIT_INPUTS};
use ggml_backend_rs_core::sched_policy::{AllocGraphSize, SchedPolicy};

/// Version a backend registry must report in `ggml_backend_reg::api_version`.
pub const GGML_BACKEND_API_VERSION: c_int = 2;

/// A host is told from class D (and E, F) by `ggml_build_forward_order`, which it lacks, from
/// class B by `ggml_is_contiguous_to_1`, new in 0.18, from class A by the meta constructor's C
/// name.
/// cbindgen:ignore
pub const ABI_CLASS: AbiClass = AbiClass {
    name: "C",
    releases: &["0.18.0"],
    has_exports: &[
        c"ggml_backend_meta_alloc_ctx_tensors_from_buft",
        c"ggml_backend_meta_device",
        c"ggml_is_contiguous_to_1",
    ],
    lacks_exports: &[c"ggml_build_forward_order"],
};

/// How libllama's split callback sizes and rotates slices, as in class D: FFN rows and
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

/// As in class D: the CUDA communicator rounds f32 partial sums through BF16, so our kernel,
/// which adds in f32, goes first at every size.
/// cbindgen:ignore
pub const OWN_KERNEL_BEFORE_BACKEND_UP_TO: Option<usize> = None;

/// `ggml_backend_sched` of 0.18.0: class D's, but the graph handed to ggml-alloc has room for
/// `MAX_SPLIT_INPUTS` inputs per split, as in class A.
/// cbindgen:ignore
pub const SCHED_POLICY: SchedPolicy = SchedPolicy {
    assign: assign::Policy {
        flash_attn_follows_weights: false,
    },
    partition: partition::Policy {
        max_inputs: Some(MAX_SPLIT_INPUTS),
        graph_inputs: GraphInputs::Consumed,
    },
    alloc_graph_size: AllocGraphSize::PerSplit,
    failed_reserve_fails: false,
    wait_before_split_without_inputs: false,
    event_after_every_split: false,
    debug_op_desc: true,
};
