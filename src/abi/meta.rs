//! `#[repr(C)]` definitions of the meta split API of `ggml-ext.h`: how a tensor is split
//! across the devices of a meta device. cbindgen emits them into `include/ggml-ext.h`.
//! The functions of that API are still upstream's `ggml-backend-meta.cpp` (pending port).

#![allow(non_camel_case_types)]

use std::ffi::c_void;

use super::ggml::ggml_tensor;

/// Most devices a meta device can wrap.
pub const GGML_BACKEND_META_MAX_DEVICES: usize = 16;

/// How a tensor is distributed over the devices of a meta device.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ggml_backend_meta_split_axis {
    /// Each device holds a slice along tensor dimension 0 (1, 2, 3 below likewise).
    GGML_BACKEND_SPLIT_AXIS_0 = 0,
    GGML_BACKEND_SPLIT_AXIS_1 = 1,
    GGML_BACKEND_SPLIT_AXIS_2 = 2,
    GGML_BACKEND_SPLIT_AXIS_3 = 3,
    /// Every device holds all values.
    GGML_BACKEND_SPLIT_AXIS_MIRRORED = 10,
    /// Every device holds a partial sum; the full value is their sum.
    GGML_BACKEND_SPLIT_AXIS_PARTIAL = 11,
    /// Bookkeeping only: not split.
    GGML_BACKEND_SPLIT_AXIS_NONE = 98,
    /// Bookkeeping only: not yet known.
    GGML_BACKEND_SPLIT_AXIS_UNKNOWN = 99,
}

/// The split of one tensor. For a dimension axis, `ne` holds one extent per (segment,
/// device) pair, segments outer and devices inner; the extents of one segment over all
/// devices add up to that segment's size along the axis.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ggml_backend_meta_split_state {
    pub axis: ggml_backend_meta_split_axis,
    // 16 * GGML_BACKEND_META_MAX_DEVICES, spelled as a literal because cbindgen cannot
    // evaluate the product; checked below.
    pub ne: [i64; 256],
    pub n_segments: u32,
}

const _: () = assert!(256 == 16 * GGML_BACKEND_META_MAX_DEVICES);

/// Assigns the split state of a statically allocated tensor.
pub type ggml_backend_meta_get_split_state_t = Option<
    unsafe extern "C" fn(
        tensor: *const ggml_tensor,
        userdata: *mut c_void,
    ) -> ggml_backend_meta_split_state,
>;
