//! ABI class B: ggml 0.13.1 (the llama.cpp of `llama-cpp-sys-2 0.1.147` and `0.1.149`–`0.1.153`).
//! Its layouts are the ABI facts Cargo.toml's feature `ggml-0-13-1` lists: the meta API with C
//! names, repeated split segments, the communicator API and the graph uid, on class A's op enum
//! of 96 values. Here is the rest, as data: libllama sizes slices as in classes C and D, and the
//! scheduler is class C's but for flash attention, which still follows its weights (its sinks)
//! as in class A.
//!
//! One op differs too, and needs no data here: `gated_delta_net` takes its recurrent state
//! flattened, `[S·S·H, K, seqs]` (libllama reshapes the `[S, S, H, seqs]` cache view), where
//! later releases take it as it is. The op's rule reads which form it has from the state's shape
//! (`ggml_backend_rs_core::rules`), as the op reads each head's `S·S` values in both.

mod layout_check;

use std::ffi::c_int;

use ggml_backend_rs_core::abi_class::AbiClass;
use ggml_backend_rs_core::assign;
use ggml_backend_rs_core::names;
use ggml_backend_rs_core::partition::{self, GraphInputs, MAX_SPLIT_INPUTS};
use ggml_backend_rs_core::sched_policy::{AllocGraphSize, SchedPolicy};

/// Version a backend registry must report in `ggml_backend_reg::api_version`.
pub const GGML_BACKEND_API_VERSION: c_int = 2;

/// A host is told from class C (and D, E, F) by `ggml_is_contiguous_to_1`, new in 0.18, from
/// class A by the meta constructor's C name, and from the ggml 0.10-0.11 of llama-cpp-python
/// 0.3.21-0.3.23 (meta segments without repeats, an ABI not served) by
/// `gguf_init_from_callback`, new in 0.13.
/// cbindgen:ignore
pub const ABI_CLASS: AbiClass = AbiClass {
    name: "B",
    releases: &["0.13.1"],
    has_exports: &[
        c"ggml_backend_meta_alloc_ctx_tensors_from_buft",
        c"ggml_backend_meta_device",
        c"gguf_init_from_callback",
    ],
    lacks_exports: &[c"ggml_is_contiguous_to_1", c"ggml_build_forward_order"],
};

/// How libllama's split callback sizes and rotates slices, as in classes C and D: FFN rows and
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

/// As in classes C and D: the CUDA communicator rounds f32 partial sums through BF16, so our
/// kernel, which adds in f32, goes first at every size.
/// cbindgen:ignore
pub const OWN_KERNEL_BEFORE_BACKEND_UP_TO: Option<usize> = None;

/// `ggml_backend_sched` of 0.13.1: class C's, but flash attention runs next to its sinks like
/// any op reading weights (from 0.18 on it is exempt, as ROPE is).
/// cbindgen:ignore
pub const SCHED_POLICY: SchedPolicy = SchedPolicy {
    assign: assign::Policy {
        flash_attn_follows_weights: true,
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
