//! Fact `split-nr`: a split state's segments repeat (`nr[s]` times; a fused K/V pair as one
//! segment repeated twice). Without it every segment is written out.

use ggml_backend_rs_core::split::{RawSplitState, Split};

use crate::abi::meta::ggml_backend_meta_split_axis_raw;

/// The split of one tensor. For a dimension axis, `ne` holds one extent per (segment,
/// device) pair, segments outer and devices inner, and segment `s` repeats `nr[s]` times (a
/// fused K/V pair as one segment repeated twice); the extents of one segment over all
/// devices add up to that segment's size along the axis.
#[cfg(feature = "split-nr")]
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ggml_backend_meta_split_state {
    pub axis: ggml_backend_meta_split_axis_raw,
    // 16 * GGML_BACKEND_META_MAX_DEVICES, spelled as a literal because cbindgen cannot
    // evaluate the product; `split_from_c` copies it into the core's array of that size.
    pub ne: [i64; 256],
    pub nr: [u32; 16],
    pub n_segments: u32,
}

/// The split of one tensor. For a dimension axis, `ne` holds one extent per (segment,
/// device) pair, segments outer and devices inner; the extents of one segment over all
/// devices add up to that segment's size along the axis.
#[cfg(not(feature = "split-nr"))]
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ggml_backend_meta_split_state {
    pub axis: ggml_backend_meta_split_axis_raw,
    // 16 * GGML_BACKEND_META_MAX_DEVICES, spelled as a literal because cbindgen cannot
    // evaluate the product; `split_from_c` copies it into the core's array of that size.
    pub ne: [i64; 256],
    pub n_segments: u32,
}

/// A state from C in the version-free form.
#[cfg(feature = "split-nr")]
pub fn split_from_c(c: &ggml_backend_meta_split_state) -> RawSplitState {
    RawSplitState {
        axis: c.axis,
        ne: c.ne,
        nr: c.nr,
        n_segments: c.n_segments,
    }
}

/// A state from C in the version-free form: every segment counted once.
#[cfg(not(feature = "split-nr"))]
pub fn split_from_c(c: &ggml_backend_meta_split_state) -> RawSplitState {
    RawSplitState {
        axis: c.axis,
        ne: c.ne,
        n_segments: c.n_segments,
        ..RawSplitState::mirrored()
    }
}

/// `split` as C reads it, equal consecutive segments written once with their repeat count.
#[cfg(feature = "split-nr")]
pub fn split_to_c(split: &Split) -> ggml_backend_meta_split_state {
    let raw = split.to_raw();
    ggml_backend_meta_split_state {
        axis: raw.axis,
        ne: raw.ne,
        nr: raw.nr,
        n_segments: raw.n_segments,
    }
}

/// `split` as C reads it, repeated segments spelled out.
#[cfg(not(feature = "split-nr"))]
pub fn split_to_c(split: &Split) -> ggml_backend_meta_split_state {
    let n = split.as_dim().map_or(1, |d| d.n);
    let Some(raw) = split.to_raw().expanded(n) else {
        crate::abi::log::abort(
            file!(),
            line!(),
            &format!(
                "ggml_backend_meta_get_split_state: {} has more segments than a split state \
                 without repeats holds",
                split.describe()
            ),
        )
    };
    ggml_backend_meta_split_state {
        axis: raw.axis,
        ne: raw.ne,
        n_segments: raw.n_segments,
    }
}
