//! Split states at the C edge: the core's [`Split`] (`ggml_backend_rs_core::split`) and its
//! constants, checked against the C enum. The conversions to and from C's
//! `ggml_backend_meta_split_state`, whose layout depends on the ggml version, are the version's
//! (`crate::abi::facts::split_from_c` into [`RawSplitState`], then [`Split::from_raw`], which
//! checks it; `crate::abi::facts::split_to_c`).

pub use ggml_backend_rs_core::split::*;

use crate::abi::{ggml_backend_meta_split_axis as Axis, GGML_BACKEND_META_MAX_DEVICES};

const _: () = {
    assert!(MAX_DEVICES == GGML_BACKEND_META_MAX_DEVICES);
    assert!(Axis::GGML_BACKEND_SPLIT_AXIS_MIRRORED as i32 == AXIS_MIRRORED);
    assert!(Axis::GGML_BACKEND_SPLIT_AXIS_PARTIAL as i32 == AXIS_PARTIAL);
    assert!(Axis::GGML_BACKEND_SPLIT_AXIS_NONE as i32 == AXIS_NONE);
    assert!(Axis::GGML_BACKEND_SPLIT_AXIS_UNKNOWN as i32 == AXIS_UNKNOWN);
};
