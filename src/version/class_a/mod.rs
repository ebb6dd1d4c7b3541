//! ABI class A: ggml 0.9.11, the llama.cpp of `llama-cpp-sys-2 =0.1.146`, the release that
//! introduced tensor parallelism. It has none of the ABI facts (Cargo.toml's feature
//! `ggml-0-9-11`); here is the rest of what tells it apart, as data.

mod layout_check;

use std::ffi::c_int;

use ggml_backend_rs_core::abi_class::AbiClass;
use ggml_backend_rs_core::assign;
use ggml_backend_rs_core::names;
use ggml_backend_rs_core::partition::{self, GraphInputs, MAX_SPLIT_INPUTS};
use ggml_backend_rs_core::sched_policy::{AllocGraphSize, SchedPolicy};

/// Version a backend registry must report in `ggml_backend_reg::api_version`.
pub const GGML_BACKEND_API_VERSION: c_int = 2;

/// Only 0.9.11 has this ABI; a host is told from the later classes by its meta API's C++
/// linkage (from 0.13 on the same function has C linkage).
/// cbindgen:ignore
pub const ABI_CLASS: AbiClass = AbiClass {
    name: "A",
    releases: &["0.9.11"],
    has_exports: &[c"_Z24ggml_backend_meta_devicePP19ggml_backend_devicemPF29ggml_backend_meta_split_statePK11ggml_tensorPvES6_"],
    lacks_exports: &[c"ggml_backend_meta_device"],
};

/// How libllama's split callback sizes and rotates slices, which the plugin's name policy
/// follows: whole quantization blocks, rotation by layer index.
/// cbindgen:ignore
pub const NAME_CONVENTIONS: names::Conventions = names::Conventions::BLOCKS;

/// Registering a backend or device again adds it again.
/// cbindgen:ignore
pub const REGISTRATION_IS_IDEMPOTENT: bool = false;

/// Up to which size (bytes) a cut runs our own CUDA kernel rather than the backends' AllReduce
/// (NCCL, in f32), when both can: at decode sizes (8–32 KiB per token) NCCL's latency
/// dominates, above 1 MiB its bandwidth.
/// cbindgen:ignore
pub const OWN_KERNEL_BEFORE_BACKEND_UP_TO: Option<usize> = Some(1 << 20);

/// `ggml_backend_sched`: flash attention runs next to its sinks like any op reading weights, a
/// split takes at most 30 inputs, graph inputs get pipeline copies where a node reads them, a
/// failed re-plan is not checked, and only splits with inputs record events.
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
    debug_op_desc: false,
};
