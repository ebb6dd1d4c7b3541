//! ABI class F: ggml 0.26.0, the llama.cpp of `llama-cpp-sys-2 =0.1.160` and `=0.1.161`. Its
//! layouts are the ABI facts Cargo.toml's feature `ggml-0-26-0` lists (all of them); here is
//! the rest of what tells it apart, as data.

mod layout_check;

use std::ffi::c_int;

use ggml_backend_rs_core::abi_class::AbiClass;
use ggml_backend_rs_core::assign;
use ggml_backend_rs_core::names;
use ggml_backend_rs_core::partition::{self, GraphInputs};
use ggml_backend_rs_core::sched_policy::{AllocGraphSize, SchedPolicy};

/// Version a backend registry must report in `ggml_backend_reg::api_version`.
pub const GGML_BACKEND_API_VERSION: c_int = 3;

/// Only 0.26.0 has this ABI; a host is told from class E's 0.24/0.25 by the list allocation
/// entry points that replaced the meta device's context allocator.
/// cbindgen:ignore
pub const ABI_CLASS: AbiClass = AbiClass {
    name: "F",
    releases: &["0.26.0"],
    has_exports: &[c"ggml_backend_buft_alloc_buffer_n"],
    lacks_exports: &[c"ggml_backend_meta_alloc_ctx_tensors_from_buft"],
};

/// How libllama's split callback sizes and rotates slices, which the plugin's name policy
/// follows: FFN rows and recurrent heads in multiples of lcm(block, 128), attention's block
/// doubled towards 128 rows, rotation counted within a layer's kind (recurrent or attention).
/// cbindgen:ignore
pub const NAME_CONVENTIONS: names::Conventions = names::Conventions {
    perf_rows: 128,
    rotate_within_kind: true,
};

/// Registering a backend or device that is already registered does nothing.
/// cbindgen:ignore
pub const REGISTRATION_IS_IDEMPOTENT: bool = true;

/// Up to which size (bytes) a cut runs our own CUDA kernel rather than the backends' AllReduce,
/// when both can: at every size (None). The CUDA communicator rounds f32 partial sums through
/// BF16 (its internal kernel at every size, NCCL for large tensors), so the logits would leave
/// one device's by 5e-4 to 3e-3 rel L2 (docs/gpu.md), where our kernel adds in f32.
/// cbindgen:ignore
pub const OWN_KERNEL_BEFORE_BACKEND_UP_TO: Option<usize> = None;

/// `ggml_backend_sched`: flash attention is not placed by its sinks, splits take any number of
/// inputs, every input leaf gets pipeline copies, a failed re-plan fails, and splits are
/// ordered by events after each of them.
/// cbindgen:ignore
pub const SCHED_POLICY: SchedPolicy = SchedPolicy {
    assign: assign::Policy {
        flash_attn_follows_weights: false,
    },
    partition: partition::Policy {
        max_inputs: None,
        graph_inputs: GraphInputs::AllLeafs,
    },
    alloc_graph_size: AllocGraphSize::Counted,
    failed_reserve_fails: true,
    wait_before_split_without_inputs: true,
    event_after_every_split: true,
    debug_op_desc: true,
};
