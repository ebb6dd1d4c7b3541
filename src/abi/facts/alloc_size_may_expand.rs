//! Fact `alloc-size-may-expand`: some ops' results may take more than `ggml_nbytes` in a
//! buffer (scratch space of some backends' kernels), and ggml exports which
//! (`ggml_op_alloc_size_may_expand`, `crate::ffi::list_alloc`). Without it none may.

use crate::abi::ggml::ggml_op;

/// Whether a buffer type may size a result of `op` above `ggml_nbytes`.
#[cfg(feature = "alloc-size-may-expand")]
pub fn alloc_size_may_expand(op: ggml_op) -> bool {
    use ggml_backend_rs_core::Op;
    matches!(
        super::OPS.op(op),
        Ok(Op::FlashAttnExt | Op::MulMat | Op::MulMatId | Op::Cumsum | Op::Argsort | Op::TopK)
    )
}

/// Whether a buffer type may size a result of `op` above `ggml_nbytes`: never.
#[cfg(not(feature = "alloc-size-may-expand"))]
pub fn alloc_size_may_expand(_op: ggml_op) -> bool {
    false
}
