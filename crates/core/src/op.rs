//! The graph operations of ggml (`enum ggml_op` in ggml.h), as a Rust enum known by name.
//!
//! The numeric values differ between ggml versions (0.26 inserted `COL2IM_1D` after
//! `IM2COL_3D`, shifting every later op), so an [`Op`] has no value of its own: a version's
//! values are an [`OpTable`] listing its ops in value order, which the C edge holds per ggml
//! version. [`OpTable::op`] is the only way from C's `int` to an [`Op`], so an out-of-range
//! value is an error value here, never an invalid enum. The root crate's tests check the
//! linked ggml's table, value by value, against `ggml_op_name`.

use std::fmt;

/// One ggml graph operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    None,
    Dup,
    Add,
    AddId,
    Add1,
    Acc,
    Sub,
    Mul,
    Div,
    Sqr,
    Sqrt,
    Log,
    Sin,
    Cos,
    Sum,
    SumRows,
    Cumsum,
    Mean,
    Argmax,
    CountEqual,
    Repeat,
    RepeatBack,
    Concat,
    SiluBack,
    Norm,
    RmsNorm,
    RmsNormBack,
    GroupNorm,
    L2Norm,
    MulMat,
    MulMatId,
    OutProd,
    Scale,
    Set,
    Cpy,
    Cont,
    Reshape,
    View,
    Permute,
    Transpose,
    GetRows,
    GetRowsBack,
    SetRows,
    Diag,
    DiagMaskInf,
    DiagMaskZero,
    SoftMax,
    SoftMaxBack,
    Rope,
    RopeBack,
    Clamp,
    ConvTranspose1d,
    Im2col,
    Im2colBack,
    Im2col3d,
    Col2im1d,
    Conv2d,
    Conv3d,
    Conv2dDw,
    ConvTranspose2d,
    Pool1d,
    Pool2d,
    Pool2dBack,
    Upscale,
    Pad,
    PadReflect1d,
    Roll,
    Arange,
    TimestepEmbedding,
    Argsort,
    TopK,
    LeakyRelu,
    Tri,
    Fill,
    FlashAttnExt,
    FlashAttnBack,
    SsmConv,
    SsmScan,
    WinPart,
    WinUnpart,
    GetRelPos,
    AddRelPos,
    RwkvWkv6,
    GatedLinearAttn,
    RwkvWkv7,
    SolveTri,
    GatedDeltaNet,
    LightningIndexer,
    Dsv4HcComb,
    Dsv4HcPre,
    Dsv4HcPost,
    Unary,
    MapCustom1,
    MapCustom2,
    MapCustom3,
    Custom,
    CrossEntropyLoss,
    CrossEntropyLossBack,
    OptStepAdamw,
    OptStepSgd,
    Glu,
}

impl Op {
    /// Every op of every supported ggml version, in the value order of the newest.
    pub const ALL: [Op; 101] = [
        Op::None,
        Op::Dup,
        Op::Add,
        Op::AddId,
        Op::Add1,
        Op::Acc,
        Op::Sub,
        Op::Mul,
        Op::Div,
        Op::Sqr,
        Op::Sqrt,
        Op::Log,
        Op::Sin,
        Op::Cos,
        Op::Sum,
        Op::SumRows,
        Op::Cumsum,
        Op::Mean,
        Op::Argmax,
        Op::CountEqual,
        Op::Repeat,
        Op::RepeatBack,
        Op::Concat,
        Op::SiluBack,
        Op::Norm,
        Op::RmsNorm,
        Op::RmsNormBack,
        Op::GroupNorm,
        Op::L2Norm,
        Op::MulMat,
        Op::MulMatId,
        Op::OutProd,
        Op::Scale,
        Op::Set,
        Op::Cpy,
        Op::Cont,
        Op::Reshape,
        Op::View,
        Op::Permute,
        Op::Transpose,
        Op::GetRows,
        Op::GetRowsBack,
        Op::SetRows,
        Op::Diag,
        Op::DiagMaskInf,
        Op::DiagMaskZero,
        Op::SoftMax,
        Op::SoftMaxBack,
        Op::Rope,
        Op::RopeBack,
        Op::Clamp,
        Op::ConvTranspose1d,
        Op::Im2col,
        Op::Im2colBack,
        Op::Im2col3d,
        Op::Col2im1d,
        Op::Conv2d,
        Op::Conv3d,
        Op::Conv2dDw,
        Op::ConvTranspose2d,
        Op::Pool1d,
        Op::Pool2d,
        Op::Pool2dBack,
        Op::Upscale,
        Op::Pad,
        Op::PadReflect1d,
        Op::Roll,
        Op::Arange,
        Op::TimestepEmbedding,
        Op::Argsort,
        Op::TopK,
        Op::LeakyRelu,
        Op::Tri,
        Op::Fill,
        Op::FlashAttnExt,
        Op::FlashAttnBack,
        Op::SsmConv,
        Op::SsmScan,
        Op::WinPart,
        Op::WinUnpart,
        Op::GetRelPos,
        Op::AddRelPos,
        Op::RwkvWkv6,
        Op::GatedLinearAttn,
        Op::RwkvWkv7,
        Op::SolveTri,
        Op::GatedDeltaNet,
        Op::LightningIndexer,
        Op::Dsv4HcComb,
        Op::Dsv4HcPre,
        Op::Dsv4HcPost,
        Op::Unary,
        Op::MapCustom1,
        Op::MapCustom2,
        Op::MapCustom3,
        Op::Custom,
        Op::CrossEntropyLoss,
        Op::CrossEntropyLossBack,
        Op::OptStepAdamw,
        Op::OptStepSgd,
        Op::Glu,
    ];

    /// The name ggml gives the op (`ggml_op_name`), e.g. `MUL_MAT`.
    #[inline]
    pub const fn name(self) -> &'static str {
        NAMES[self as usize]
    }

    /// Ops that only reinterpret their source's memory: no computation, no data of their own.
    #[inline]
    pub const fn is_view(self) -> bool {
        matches!(self, Op::View | Op::Reshape | Op::Permute | Op::Transpose)
    }
}

/// Names in the order of [`Op::ALL`] (which is the enum's declaration order).
const NAMES: [&str; Op::ALL.len()] = [
    "NONE",
    "DUP",
    "ADD",
    "ADD_ID",
    "ADD1",
    "ACC",
    "SUB",
    "MUL",
    "DIV",
    "SQR",
    "SQRT",
    "LOG",
    "SIN",
    "COS",
    "SUM",
    "SUM_ROWS",
    "CUMSUM",
    "MEAN",
    "ARGMAX",
    "COUNT_EQUAL",
    "REPEAT",
    "REPEAT_BACK",
    "CONCAT",
    "SILU_BACK",
    "NORM",
    "RMS_NORM",
    "RMS_NORM_BACK",
    "GROUP_NORM",
    "L2_NORM",
    "MUL_MAT",
    "MUL_MAT_ID",
    "OUT_PROD",
    "SCALE",
    "SET",
    "CPY",
    "CONT",
    "RESHAPE",
    "VIEW",
    "PERMUTE",
    "TRANSPOSE",
    "GET_ROWS",
    "GET_ROWS_BACK",
    "SET_ROWS",
    "DIAG",
    "DIAG_MASK_INF",
    "DIAG_MASK_ZERO",
    "SOFT_MAX",
    "SOFT_MAX_BACK",
    "ROPE",
    "ROPE_BACK",
    "CLAMP",
    "CONV_TRANSPOSE_1D",
    "IM2COL",
    "IM2COL_BACK",
    "IM2COL_3D",
    "COL2IM_1D",
    "CONV_2D",
    "CONV_3D",
    "CONV_2D_DW",
    "CONV_TRANSPOSE_2D",
    "POOL_1D",
    "POOL_2D",
    "POOL_2D_BACK",
    "UPSCALE",
    "PAD",
    "PAD_REFLECT_1D",
    "ROLL",
    "ARANGE",
    "TIMESTEP_EMBEDDING",
    "ARGSORT",
    "TOP_K",
    "LEAKY_RELU",
    "TRI",
    "FILL",
    "FLASH_ATTN_EXT",
    "FLASH_ATTN_BACK",
    "SSM_CONV",
    "SSM_SCAN",
    "WIN_PART",
    "WIN_UNPART",
    "GET_REL_POS",
    "ADD_REL_POS",
    "RWKV_WKV6",
    "GATED_LINEAR_ATTN",
    "RWKV_WKV7",
    "SOLVE_TRI",
    "GATED_DELTA_NET",
    "LIGHTNING_INDEXER",
    "DSV4_HC_COMB",
    "DSV4_HC_PRE",
    "DSV4_HC_POST",
    "UNARY",
    "MAP_CUSTOM1",
    "MAP_CUSTOM2",
    "MAP_CUSTOM3",
    "CUSTOM",
    "CROSS_ENTROPY_LOSS",
    "CROSS_ENTROPY_LOSS_BACK",
    "OPT_STEP_ADAMW",
    "OPT_STEP_SGD",
    "GLU",
];

/// The ops of one ggml version in value order: `ops[v]` is the op whose `enum ggml_op` value is
/// `v`.
#[derive(Clone, Copy, Debug)]
pub struct OpTable(&'static [Op]);

impl OpTable {
    /// A version's table. Every op appears at most once (checked at compile time when the
    /// table is a constant).
    pub const fn new(ops: &'static [Op]) -> OpTable {
        let mut i = 0;
        while i < ops.len() {
            let mut j = i + 1;
            while j < ops.len() {
                assert!(ops[i] as usize != ops[j] as usize, "an op appears twice");
                j += 1;
            }
            i += 1;
        }
        OpTable(ops)
    }

    /// The op with C value `value`.
    #[inline]
    pub fn op(&self, value: i32) -> Result<Op, UnknownOp> {
        usize::try_from(value)
            .ok()
            .and_then(|i| self.0.get(i).copied())
            .ok_or(UnknownOp(value))
    }

    /// The C value of `op`, or `None` when this version has no such op.
    pub const fn value(&self, op: Op) -> Option<i32> {
        let mut i = 0;
        while i < self.0.len() {
            if self.0[i] as usize == op as usize {
                return Some(i as i32);
            }
            i += 1;
        }
        None
    }

    /// The C value of an op the version must have (for compile-time constants).
    pub const fn value_of(&self, op: Op) -> i32 {
        match self.value(op) {
            Some(v) => v,
            None => panic!("op missing from this ggml version's table"),
        }
    }

    /// `GGML_OP_COUNT` of the version.
    #[inline]
    pub const fn len(&self) -> usize {
        self.0.len()
    }

    /// Always false for a real version; present for clippy's `len_without_is_empty`.
    #[inline]
    pub const fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The ops in value order.
    pub fn ops(&self) -> &'static [Op] {
        self.0
    }
}

/// [`Op::ALL`] without `removed`, in the same order: the table of an older ggml version that
/// lacks ops a newer one inserted.
pub const fn all_without<const N: usize, const K: usize>(removed: [Op; K]) -> [Op; N] {
    assert!(
        N + K == Op::ALL.len(),
        "table length does not match the ops removed"
    );
    let mut out = [Op::None; N];
    let (mut i, mut n) = (0, 0);
    while i < Op::ALL.len() {
        let op = Op::ALL[i];
        let mut keep = true;
        let mut k = 0;
        while k < K {
            if removed[k] as usize == op as usize {
                keep = false;
            }
            k += 1;
        }
        if keep {
            out[n] = op;
            n += 1;
        }
        i += 1;
    }
    assert!(n == N, "an op to remove is not in Op::ALL");
    out
}

/// A value that is not a ggml op (at the linked version).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnknownOp(pub i32);

impl fmt::Display for UnknownOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown ggml op value {}", self.0)
    }
}

impl std::error::Error for UnknownOp {}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NEWEST: OpTable = OpTable::new(&Op::ALL);
    const OLDER: [Op; 99] = all_without([Op::Col2im1d, Op::Glu]);

    #[test]
    fn all_is_in_declaration_order() {
        for (i, op) in Op::ALL.iter().enumerate() {
            assert_eq!(*op as usize, i);
        }
    }

    #[test]
    fn values_round_trip() {
        for (i, op) in Op::ALL.iter().enumerate() {
            assert_eq!(NEWEST.value(*op), Some(i as i32));
            assert_eq!(NEWEST.op(i as i32), Ok(*op));
        }
    }

    #[test]
    fn removing_ops_shifts_the_later_values() {
        let t = OpTable::new(&OLDER);
        assert_eq!(t.len(), 99);
        assert_eq!(t.value(Op::Col2im1d), None);
        assert_eq!(t.value(Op::Im2col3d), NEWEST.value(Op::Im2col3d));
        assert_eq!(t.value_of(Op::Conv2d), NEWEST.value_of(Op::Conv2d) - 1);
        assert_eq!(t.op(t.value_of(Op::OptStepSgd)), Ok(Op::OptStepSgd));
    }

    #[test]
    fn out_of_range_values_are_errors() {
        let n = NEWEST.len() as i32;
        for v in [-1, n, n + 1, i32::MAX, i32::MIN] {
            assert_eq!(NEWEST.op(v), Err(UnknownOp(v)));
        }
    }

    #[test]
    fn names_follow_the_variants() {
        assert_eq!(Op::MulMat.name(), "MUL_MAT");
        assert_eq!(Op::FlashAttnExt.name(), "FLASH_ATTN_EXT");
        assert_eq!(Op::ConvTranspose1d.name(), "CONV_TRANSPOSE_1D");
        assert_eq!(Op::Col2im1d.name(), "COL2IM_1D");
        assert_eq!(Op::Dsv4HcPost.name(), "DSV4_HC_POST");
        assert_eq!(Op::Glu.to_string(), "GLU");
    }
}
