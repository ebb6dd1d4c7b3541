//! `#[repr(C)]` definitions of the meta split API: how a tensor is split across the devices of
//! a meta device (`ggml-ext.h` in ggml 0.9.11, `ggml-backend.h` since). The split state's
//! layout is a fact of the ABI (`super::facts::split_nr`).

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

/// `enum ggml_backend_meta_split_axis` as it crosses the ABI (a callback may write any int).
pub type ggml_backend_meta_split_axis_raw = std::ffi::c_int;

pub use super::facts::ggml_backend_meta_split_state;

/// Assigns the split state of a statically allocated tensor.
pub type ggml_backend_meta_get_split_state_t = Option<
    unsafe extern "C" fn(
        tensor: *const ggml_tensor,
        userdata: *mut c_void,
    ) -> ggml_backend_meta_split_state,
>;
