//! Fact `op-enum-101`: `enum ggml_op` has 101 values (COL2IM_1D at 55 shifts every later op
//! by one; LIGHTNING_INDEXER and DSV4_HC_COMB/PRE/POST follow at 87-90). Without it, 96.

use ggml_backend_rs_core::op::{Op, OpTable};

/// `enum ggml_op`: every op the crate knows, in this ABI's order.
/// cbindgen:ignore
#[cfg(feature = "op-enum-101")]
pub const OPS: OpTable = OpTable::new(&Op::ALL);

/// `enum ggml_op`: every op the crate knows but the five added with the fact, in this ABI's
/// order.
/// cbindgen:ignore
#[cfg(not(feature = "op-enum-101"))]
pub const OPS: OpTable = OpTable::new(&OPS_96);
#[cfg(not(feature = "op-enum-101"))]
const OPS_96: [Op; 96] = ggml_backend_rs_core::op::all_without([
    Op::Col2im1d,
    Op::LightningIndexer,
    Op::Dsv4HcComb,
    Op::Dsv4HcPre,
    Op::Dsv4HcPost,
]);
