//! Split states at the C edge: the core's [`Split`] (`ggml_backend_rs_core::split`) converted to
//! C's `ggml_backend_meta_split_state`. The other direction is [`Split::from_raw`], fed with
//! [`RawSplitState`], which has the C struct's layout (checked below) with the axis as a plain
//! integer, so that an invalid value written by a C callback is an error, not an invalid enum.

pub use ggml_backend_rs_core::split::*;

use crate::abi::{
    ggml_backend_meta_split_axis as Axis, ggml_backend_meta_split_state,
    GGML_BACKEND_META_MAX_DEVICES,
};

const _: () = assert!(MAX_DEVICES == GGML_BACKEND_META_MAX_DEVICES);
const _: () = {
    use std::mem::{align_of, offset_of, size_of};
    assert!(size_of::<RawSplitState>() == size_of::<ggml_backend_meta_split_state>());
    assert!(align_of::<RawSplitState>() == align_of::<ggml_backend_meta_split_state>());
    assert!(offset_of!(RawSplitState, ne) == offset_of!(ggml_backend_meta_split_state, ne));
    assert!(
        offset_of!(RawSplitState, n_segments)
            == offset_of!(ggml_backend_meta_split_state, n_segments)
    );
    assert!(Axis::GGML_BACKEND_SPLIT_AXIS_MIRRORED as i32 == AXIS_MIRRORED);
    assert!(Axis::GGML_BACKEND_SPLIT_AXIS_PARTIAL as i32 == AXIS_PARTIAL);
    assert!(Axis::GGML_BACKEND_SPLIT_AXIS_NONE as i32 == AXIS_NONE);
    assert!(Axis::GGML_BACKEND_SPLIT_AXIS_UNKNOWN as i32 == AXIS_UNKNOWN);
};

/// The C form of `split`, as `ggml_backend_meta_get_split_state` returns it.
pub fn to_c(split: &Split) -> ggml_backend_meta_split_state {
    let raw = split.to_raw();
    let axis = match raw.axis {
        0 => Axis::GGML_BACKEND_SPLIT_AXIS_0,
        1 => Axis::GGML_BACKEND_SPLIT_AXIS_1,
        2 => Axis::GGML_BACKEND_SPLIT_AXIS_2,
        3 => Axis::GGML_BACKEND_SPLIT_AXIS_3,
        AXIS_PARTIAL => Axis::GGML_BACKEND_SPLIT_AXIS_PARTIAL,
        _ => Axis::GGML_BACKEND_SPLIT_AXIS_MIRRORED,
    };
    ggml_backend_meta_split_state {
        axis,
        ne: raw.ne,
        n_segments: raw.n_segments,
    }
}
