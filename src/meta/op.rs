//! Values of `enum ggml_op` at the pin (ggml.h of ggml 0.9.11) that the split rules name.
//! The unit test below checks each against the linked ggml's `ggml_op_name`.

pub(crate) const NONE: i32 = 0;
pub(crate) const DUP: i32 = 1;
pub(crate) const ADD: i32 = 2;
pub(crate) const ADD_ID: i32 = 3;
pub(crate) const SUB: i32 = 6;
pub(crate) const MUL: i32 = 7;
pub(crate) const DIV: i32 = 8;
pub(crate) const SQR: i32 = 9;
pub(crate) const SQRT: i32 = 10;
pub(crate) const LOG: i32 = 11;
pub(crate) const SIN: i32 = 12;
pub(crate) const COS: i32 = 13;
pub(crate) const SUM_ROWS: i32 = 15;
pub(crate) const CUMSUM: i32 = 16;
pub(crate) const MEAN: i32 = 17;
pub(crate) const ARGMAX: i32 = 18;
pub(crate) const REPEAT: i32 = 20;
pub(crate) const CONCAT: i32 = 22;
pub(crate) const SILU_BACK: i32 = 23;
pub(crate) const NORM: i32 = 24;
pub(crate) const RMS_NORM: i32 = 25;
pub(crate) const L2_NORM: i32 = 28;
pub(crate) const MUL_MAT: i32 = 29;
pub(crate) const MUL_MAT_ID: i32 = 30;
pub(crate) const SCALE: i32 = 32;
pub(crate) const CPY: i32 = 34;
pub(crate) const CONT: i32 = 35;
pub(crate) const RESHAPE: i32 = 36;
pub(crate) const VIEW: i32 = 37;
pub(crate) const PERMUTE: i32 = 38;
pub(crate) const TRANSPOSE: i32 = 39;
pub(crate) const GET_ROWS: i32 = 40;
pub(crate) const SET_ROWS: i32 = 42;
pub(crate) const SOFT_MAX: i32 = 46;
pub(crate) const ROPE: i32 = 48;
pub(crate) const CLAMP: i32 = 50;
pub(crate) const PAD: i32 = 63;
pub(crate) const ARGSORT: i32 = 68;
pub(crate) const TOP_K: i32 = 69;
pub(crate) const LEAKY_RELU: i32 = 70;
pub(crate) const FILL: i32 = 72;
pub(crate) const FLASH_ATTN_EXT: i32 = 73;
pub(crate) const UNARY: i32 = 86;
pub(crate) const GLU: i32 = 95;

#[cfg(test)]
mod tests {
    use std::ffi::CStr;

    extern "C" {
        fn ggml_op_name(op: i32) -> *const std::ffi::c_char;
    }

    /// Every value above names the op it says, per the linked ggml's own op names.
    #[test]
    fn values_match_ggml() {
        let ops = [
            (super::NONE, "NONE"),
            (super::DUP, "DUP"),
            (super::ADD, "ADD"),
            (super::ADD_ID, "ADD_ID"),
            (super::SUB, "SUB"),
            (super::MUL, "MUL"),
            (super::DIV, "DIV"),
            (super::SQR, "SQR"),
            (super::SQRT, "SQRT"),
            (super::LOG, "LOG"),
            (super::SIN, "SIN"),
            (super::COS, "COS"),
            (super::SUM_ROWS, "SUM_ROWS"),
            (super::CUMSUM, "CUMSUM"),
            (super::MEAN, "MEAN"),
            (super::ARGMAX, "ARGMAX"),
            (super::REPEAT, "REPEAT"),
            (super::CONCAT, "CONCAT"),
            (super::SILU_BACK, "SILU_BACK"),
            (super::NORM, "NORM"),
            (super::RMS_NORM, "RMS_NORM"),
            (super::L2_NORM, "L2_NORM"),
            (super::MUL_MAT, "MUL_MAT"),
            (super::MUL_MAT_ID, "MUL_MAT_ID"),
            (super::SCALE, "SCALE"),
            (super::CPY, "CPY"),
            (super::CONT, "CONT"),
            (super::RESHAPE, "RESHAPE"),
            (super::VIEW, "VIEW"),
            (super::PERMUTE, "PERMUTE"),
            (super::TRANSPOSE, "TRANSPOSE"),
            (super::GET_ROWS, "GET_ROWS"),
            (super::SET_ROWS, "SET_ROWS"),
            (super::SOFT_MAX, "SOFT_MAX"),
            (super::ROPE, "ROPE"),
            (super::CLAMP, "CLAMP"),
            (super::PAD, "PAD"),
            (super::ARGSORT, "ARGSORT"),
            (super::TOP_K, "TOP_K"),
            (super::LEAKY_RELU, "LEAKY_RELU"),
            (super::FILL, "FILL"),
            (super::FLASH_ATTN_EXT, "FLASH_ATTN_EXT"),
            (super::UNARY, "UNARY"),
            (super::GLU, "GLU"),
        ];
        for (value, name) in ops {
            // SAFETY: ggml_op_name returns a static string for every op value.
            let got = unsafe { CStr::from_ptr(ggml_op_name(value)) };
            assert_eq!(got.to_str().unwrap(), name, "op value {value}");
        }
    }
}
