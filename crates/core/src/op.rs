//! The graph operations of ggml (`enum ggml_op` in ggml.h of ggml 0.9.11, the version the pin
//! ships), as a Rust enum.
//!
//! The C side hands over an `int`; [`Op::try_from`] is the only way from it to an [`Op`], so an
//! out-of-range value from C is an error value here, never an invalid enum. The root crate's
//! tests check every value and name against the linked ggml's `ggml_op_name`.

use std::fmt;

/// One ggml graph operation. The discriminants are ggml's values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum Op {
    None = 0,
    Dup = 1,
    Add = 2,
    AddId = 3,
    Add1 = 4,
    Acc = 5,
    Sub = 6,
    Mul = 7,
    Div = 8,
    Sqr = 9,
    Sqrt = 10,
    Log = 11,
    Sin = 12,
    Cos = 13,
    Sum = 14,
    SumRows = 15,
    Cumsum = 16,
    Mean = 17,
    Argmax = 18,
    CountEqual = 19,
    Repeat = 20,
    RepeatBack = 21,
    Concat = 22,
    SiluBack = 23,
    Norm = 24,
    RmsNorm = 25,
    RmsNormBack = 26,
    GroupNorm = 27,
    L2Norm = 28,
    MulMat = 29,
    MulMatId = 30,
    OutProd = 31,
    Scale = 32,
    Set = 33,
    Cpy = 34,
    Cont = 35,
    Reshape = 36,
    View = 37,
    Permute = 38,
    Transpose = 39,
    GetRows = 40,
    GetRowsBack = 41,
    SetRows = 42,
    Diag = 43,
    DiagMaskInf = 44,
    DiagMaskZero = 45,
    SoftMax = 46,
    SoftMaxBack = 47,
    Rope = 48,
    RopeBack = 49,
    Clamp = 50,
    ConvTranspose1d = 51,
    Im2col = 52,
    Im2colBack = 53,
    Im2col3d = 54,
    Conv2d = 55,
    Conv3d = 56,
    Conv2dDw = 57,
    ConvTranspose2d = 58,
    Pool1d = 59,
    Pool2d = 60,
    Pool2dBack = 61,
    Upscale = 62,
    Pad = 63,
    PadReflect1d = 64,
    Roll = 65,
    Arange = 66,
    TimestepEmbedding = 67,
    Argsort = 68,
    TopK = 69,
    LeakyRelu = 70,
    Tri = 71,
    Fill = 72,
    FlashAttnExt = 73,
    FlashAttnBack = 74,
    SsmConv = 75,
    SsmScan = 76,
    WinPart = 77,
    WinUnpart = 78,
    GetRelPos = 79,
    AddRelPos = 80,
    RwkvWkv6 = 81,
    GatedLinearAttn = 82,
    RwkvWkv7 = 83,
    SolveTri = 84,
    GatedDeltaNet = 85,
    Unary = 86,
    MapCustom1 = 87,
    MapCustom2 = 88,
    MapCustom3 = 89,
    Custom = 90,
    CrossEntropyLoss = 91,
    CrossEntropyLossBack = 92,
    OptStepAdamw = 93,
    OptStepSgd = 94,
    Glu = 95,
}

impl Op {
    /// Every op, in value order: `Op::ALL[v as usize] as i32 == v`.
    pub const ALL: [Op; 96] = [
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

/// A value that is not a ggml op (at the pinned version).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnknownOp(pub i32);

impl fmt::Display for UnknownOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown ggml op value {}", self.0)
    }
}

impl std::error::Error for UnknownOp {}

impl TryFrom<i32> for Op {
    type Error = UnknownOp;

    #[inline]
    fn try_from(value: i32) -> Result<Op, UnknownOp> {
        usize::try_from(value)
            .ok()
            .and_then(|i| Op::ALL.get(i).copied())
            .ok_or(UnknownOp(value))
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_round_trip() {
        for (i, op) in Op::ALL.iter().enumerate() {
            assert_eq!(*op as i32, i as i32);
            assert_eq!(Op::try_from(i as i32), Ok(*op));
        }
    }

    #[test]
    fn out_of_range_values_are_errors() {
        let n = Op::ALL.len() as i32;
        for v in [-1, n, n + 1, i32::MAX, i32::MIN] {
            assert_eq!(Op::try_from(v), Err(UnknownOp(v)));
        }
    }

    #[test]
    fn names_follow_the_variants() {
        assert_eq!(Op::MulMat.name(), "MUL_MAT");
        assert_eq!(Op::FlashAttnExt.name(), "FLASH_ATTN_EXT");
        assert_eq!(Op::ConvTranspose1d.name(), "CONV_TRANSPOSE_1D");
        assert_eq!(Op::Glu.to_string(), "GLU");
    }
}
