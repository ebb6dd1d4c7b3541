//! `#[repr(C)]` definitions of ggml-backend's own types: the handles, their vtables and the
//! plain structs of `ggml-backend.h` and `ggml-backend-impl.h`. These are what cbindgen turns
//! into `include/ggml-backend.h` and `include/ggml-backend-impl.h`.

#![allow(non_camel_case_types)]

use std::ffi::{c_char, c_int, c_void};

use super::ggml::{ggml_cgraph, ggml_context, ggml_guid_t, ggml_status, ggml_tensor};

pub use super::facts::{
    ggml_backend_buffer_type_i, ggml_backend_dev_caps, ggml_backend_graph_optimize_t,
};

pub type ggml_backend_buffer_type_t = *mut ggml_backend_buffer_type;
pub type ggml_backend_buffer_t = *mut ggml_backend_buffer;
pub type ggml_backend_event_t = *mut ggml_backend_event;
pub type ggml_backend_t = *mut ggml_backend;
pub type ggml_backend_graph_plan_t = *mut c_void;
pub type ggml_backend_reg_t = *mut ggml_backend_reg;
pub type ggml_backend_dev_t = *mut ggml_backend_device;

/// What a buffer holds; the scheduler prefers to run ops next to WEIGHTS buffers.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ggml_backend_buffer_usage {
    GGML_BACKEND_BUFFER_USAGE_ANY = 0,
    GGML_BACKEND_BUFFER_USAGE_WEIGHTS = 1,
    GGML_BACKEND_BUFFER_USAGE_COMPUTE = 2,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ggml_backend_dev_type {
    GGML_BACKEND_DEVICE_TYPE_CPU,
    GGML_BACKEND_DEVICE_TYPE_GPU,
    GGML_BACKEND_DEVICE_TYPE_IGPU,
    GGML_BACKEND_DEVICE_TYPE_ACCEL,
    GGML_BACKEND_DEVICE_TYPE_META,
}

// The two enums above are the C definitions (cbindgen emits them). Every value that crosses the
// ABI — arguments, returns, struct fields — is the integer below instead, which C spells as the
// enum (cbindgen.toml renames it): C may hand over any int, and a Rust enum holding a value
// outside its variants is undefined behaviour. Code compares against the constants.

/// `enum ggml_backend_buffer_usage` as it crosses the ABI.
pub type ggml_backend_buffer_usage_raw = c_int;
pub const USAGE_ANY: ggml_backend_buffer_usage_raw =
    ggml_backend_buffer_usage::GGML_BACKEND_BUFFER_USAGE_ANY as c_int;
pub const USAGE_WEIGHTS: ggml_backend_buffer_usage_raw =
    ggml_backend_buffer_usage::GGML_BACKEND_BUFFER_USAGE_WEIGHTS as c_int;
pub const USAGE_COMPUTE: ggml_backend_buffer_usage_raw =
    ggml_backend_buffer_usage::GGML_BACKEND_BUFFER_USAGE_COMPUTE as c_int;

/// `enum ggml_backend_dev_type` as it crosses the ABI.
pub type ggml_backend_dev_type_raw = c_int;
pub const DEVICE_CPU: ggml_backend_dev_type_raw =
    ggml_backend_dev_type::GGML_BACKEND_DEVICE_TYPE_CPU as c_int;
pub const DEVICE_GPU: ggml_backend_dev_type_raw =
    ggml_backend_dev_type::GGML_BACKEND_DEVICE_TYPE_GPU as c_int;
pub const DEVICE_IGPU: ggml_backend_dev_type_raw =
    ggml_backend_dev_type::GGML_BACKEND_DEVICE_TYPE_IGPU as c_int;
pub const DEVICE_ACCEL: ggml_backend_dev_type_raw =
    ggml_backend_dev_type::GGML_BACKEND_DEVICE_TYPE_ACCEL as c_int;
pub const DEVICE_META: ggml_backend_dev_type_raw =
    ggml_backend_dev_type::GGML_BACKEND_DEVICE_TYPE_META as c_int;

/// cbindgen:field-names=[name, description, memory_free, memory_total, type, device_id, caps]
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ggml_backend_dev_props {
    pub name: *const c_char,
    pub description: *const c_char,
    pub memory_free: usize,
    pub memory_total: usize,
    pub type_: ggml_backend_dev_type_raw,
    pub device_id: *const c_char,
    pub caps: ggml_backend_dev_caps,
}

#[repr(C)]
pub struct ggml_backend_feature {
    pub name: *const c_char,
    pub value: *const c_char,
}

/// The result of `ggml_backend_graph_copy`; all fields NULL when the copy failed.
#[repr(C)]
pub struct ggml_backend_graph_copy {
    pub buffer: ggml_backend_buffer_t,
    pub ctx_allocated: *mut ggml_context,
    pub ctx_unallocated: *mut ggml_context,
    pub graph: *mut ggml_cgraph,
}

pub type ggml_backend_eval_callback = Option<
    unsafe extern "C" fn(
        node_index: c_int,
        t1: *mut ggml_tensor,
        t2: *mut ggml_tensor,
        user_data: *mut c_void,
    ) -> bool,
>;

pub type ggml_backend_split_buffer_type_t = Option<
    unsafe extern "C" fn(
        main_device: c_int,
        tensor_split: *const f32,
    ) -> ggml_backend_buffer_type_t,
>;
pub type ggml_backend_set_n_threads_t =
    Option<unsafe extern "C" fn(backend: ggml_backend_t, n_threads: c_int)>;
pub type ggml_backend_dev_get_extra_bufts_t =
    Option<unsafe extern "C" fn(device: ggml_backend_dev_t) -> *mut ggml_backend_buffer_type_t>;
pub type ggml_abort_callback = Option<unsafe extern "C" fn(data: *mut c_void) -> bool>;
pub type ggml_backend_set_abort_callback_t = Option<
    unsafe extern "C" fn(
        backend: ggml_backend_t,
        abort_callback: ggml_abort_callback,
        abort_callback_data: *mut c_void,
    ),
>;
pub type ggml_backend_get_features_t =
    Option<unsafe extern "C" fn(reg: ggml_backend_reg_t) -> *mut ggml_backend_feature>;

/// Entry point a dynamically loaded backend exports as `ggml_backend_init`.
pub type ggml_backend_init_t = Option<unsafe extern "C" fn() -> ggml_backend_reg_t>;
/// Optional `ggml_backend_score` of a dynamically loaded backend: 0 means unsupported here.
pub type ggml_backend_score_t = Option<unsafe extern "C" fn() -> c_int>;

// ---------------------------------------------------------------------------------------
// buffer type
// ---------------------------------------------------------------------------------------

#[repr(C)]
pub struct ggml_backend_buffer_type {
    pub iface: ggml_backend_buffer_type_i,
    pub device: ggml_backend_dev_t,
    pub context: *mut c_void,
}

// ---------------------------------------------------------------------------------------
// buffer
// ---------------------------------------------------------------------------------------

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ggml_backend_buffer_i {
    pub free_buffer: Option<unsafe extern "C" fn(buffer: ggml_backend_buffer_t)>,
    pub get_base: Option<unsafe extern "C" fn(buffer: ggml_backend_buffer_t) -> *mut c_void>,
    pub init_tensor: Option<
        unsafe extern "C" fn(
            buffer: ggml_backend_buffer_t,
            tensor: *mut ggml_tensor,
        ) -> ggml_status,
    >,
    pub memset_tensor: Option<
        unsafe extern "C" fn(
            buffer: ggml_backend_buffer_t,
            tensor: *mut ggml_tensor,
            value: u8,
            offset: usize,
            size: usize,
        ),
    >,
    pub set_tensor: Option<
        unsafe extern "C" fn(
            buffer: ggml_backend_buffer_t,
            tensor: *mut ggml_tensor,
            data: *const c_void,
            offset: usize,
            size: usize,
        ),
    >,
    pub get_tensor: Option<
        unsafe extern "C" fn(
            buffer: ggml_backend_buffer_t,
            tensor: *const ggml_tensor,
            data: *mut c_void,
            offset: usize,
            size: usize,
        ),
    >,
    pub set_tensor_2d: Option<
        unsafe extern "C" fn(
            buffer: ggml_backend_buffer_t,
            tensor: *mut ggml_tensor,
            data: *const c_void,
            offset: usize,
            size: usize,
            n_copies: usize,
            stride_tensor: usize,
            stride_data: usize,
        ),
    >,
    pub get_tensor_2d: Option<
        unsafe extern "C" fn(
            buffer: ggml_backend_buffer_t,
            tensor: *const ggml_tensor,
            data: *mut c_void,
            offset: usize,
            size: usize,
            n_copies: usize,
            stride_tensor: usize,
            stride_data: usize,
        ),
    >,
    pub cpy_tensor: Option<
        unsafe extern "C" fn(
            buffer: ggml_backend_buffer_t,
            src: *const ggml_tensor,
            dst: *mut ggml_tensor,
        ) -> bool,
    >,
    pub clear: Option<unsafe extern "C" fn(buffer: ggml_backend_buffer_t, value: u8)>,
    pub reset: Option<unsafe extern "C" fn(buffer: ggml_backend_buffer_t)>,
}

impl ggml_backend_buffer_i {
    /// The interface of a buffer that implements nothing (zero-size buffers).
    pub const EMPTY: Self = Self {
        free_buffer: None,
        get_base: None,
        init_tensor: None,
        memset_tensor: None,
        set_tensor: None,
        get_tensor: None,
        set_tensor_2d: None,
        get_tensor_2d: None,
        cpy_tensor: None,
        clear: None,
        reset: None,
    };
}

#[repr(C)]
pub struct ggml_backend_buffer {
    pub iface: ggml_backend_buffer_i,
    pub buft: ggml_backend_buffer_type_t,
    pub context: *mut c_void,
    pub size: usize,
    pub usage: ggml_backend_buffer_usage_raw,
}

// ---------------------------------------------------------------------------------------
// backend (stream)
// ---------------------------------------------------------------------------------------

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ggml_backend_i {
    pub get_name: Option<unsafe extern "C" fn(backend: ggml_backend_t) -> *const c_char>,
    pub free: Option<unsafe extern "C" fn(backend: ggml_backend_t)>,
    pub set_tensor_async: Option<
        unsafe extern "C" fn(
            backend: ggml_backend_t,
            tensor: *mut ggml_tensor,
            data: *const c_void,
            offset: usize,
            size: usize,
        ),
    >,
    pub get_tensor_async: Option<
        unsafe extern "C" fn(
            backend: ggml_backend_t,
            tensor: *const ggml_tensor,
            data: *mut c_void,
            offset: usize,
            size: usize,
        ),
    >,
    pub set_tensor_2d_async: Option<
        unsafe extern "C" fn(
            backend: ggml_backend_t,
            tensor: *mut ggml_tensor,
            data: *const c_void,
            offset: usize,
            size: usize,
            n_copies: usize,
            stride_tensor: usize,
            stride_data: usize,
        ),
    >,
    pub get_tensor_2d_async: Option<
        unsafe extern "C" fn(
            backend: ggml_backend_t,
            tensor: *const ggml_tensor,
            data: *mut c_void,
            offset: usize,
            size: usize,
            n_copies: usize,
            stride_tensor: usize,
            stride_data: usize,
        ),
    >,
    pub cpy_tensor_async: Option<
        unsafe extern "C" fn(
            backend_src: ggml_backend_t,
            backend_dst: ggml_backend_t,
            src: *const ggml_tensor,
            dst: *mut ggml_tensor,
        ) -> bool,
    >,
    pub synchronize: Option<unsafe extern "C" fn(backend: ggml_backend_t)>,
    pub graph_plan_create: Option<
        unsafe extern "C" fn(
            backend: ggml_backend_t,
            cgraph: *const ggml_cgraph,
        ) -> ggml_backend_graph_plan_t,
    >,
    pub graph_plan_free:
        Option<unsafe extern "C" fn(backend: ggml_backend_t, plan: ggml_backend_graph_plan_t)>,
    pub graph_plan_update: Option<
        unsafe extern "C" fn(
            backend: ggml_backend_t,
            plan: ggml_backend_graph_plan_t,
            cgraph: *const ggml_cgraph,
        ),
    >,
    pub graph_plan_compute: Option<
        unsafe extern "C" fn(
            backend: ggml_backend_t,
            plan: ggml_backend_graph_plan_t,
        ) -> ggml_status,
    >,
    pub graph_compute: Option<
        unsafe extern "C" fn(backend: ggml_backend_t, cgraph: *mut ggml_cgraph) -> ggml_status,
    >,
    pub event_record:
        Option<unsafe extern "C" fn(backend: ggml_backend_t, event: ggml_backend_event_t)>,
    pub event_wait:
        Option<unsafe extern "C" fn(backend: ggml_backend_t, event: ggml_backend_event_t)>,
    pub graph_optimize: ggml_backend_graph_optimize_t,
}

impl ggml_backend_i {
    /// No entries: the base that backends complete with struct-update syntax.
    pub const EMPTY: Self = Self {
        get_name: None,
        free: None,
        set_tensor_async: None,
        get_tensor_async: None,
        set_tensor_2d_async: None,
        get_tensor_2d_async: None,
        cpy_tensor_async: None,
        synchronize: None,
        graph_plan_create: None,
        graph_plan_free: None,
        graph_plan_update: None,
        graph_plan_compute: None,
        graph_compute: None,
        event_record: None,
        event_wait: None,
        graph_optimize: None,
    };
}

#[repr(C)]
pub struct ggml_backend {
    pub guid: ggml_guid_t,
    pub iface: ggml_backend_i,
    pub device: ggml_backend_dev_t,
    pub context: *mut c_void,
}

#[repr(C)]
pub struct ggml_backend_event {
    pub device: *mut ggml_backend_device,
    pub context: *mut c_void,
}

// ---------------------------------------------------------------------------------------
// device
// ---------------------------------------------------------------------------------------

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ggml_backend_device_i {
    pub get_name: Option<unsafe extern "C" fn(dev: ggml_backend_dev_t) -> *const c_char>,
    pub get_description: Option<unsafe extern "C" fn(dev: ggml_backend_dev_t) -> *const c_char>,
    pub get_memory:
        Option<unsafe extern "C" fn(dev: ggml_backend_dev_t, free: *mut usize, total: *mut usize)>,
    pub get_type:
        Option<unsafe extern "C" fn(dev: ggml_backend_dev_t) -> ggml_backend_dev_type_raw>,
    pub get_props:
        Option<unsafe extern "C" fn(dev: ggml_backend_dev_t, props: *mut ggml_backend_dev_props)>,
    pub init_backend: Option<
        unsafe extern "C" fn(dev: ggml_backend_dev_t, params: *const c_char) -> ggml_backend_t,
    >,
    pub get_buffer_type:
        Option<unsafe extern "C" fn(dev: ggml_backend_dev_t) -> ggml_backend_buffer_type_t>,
    pub get_host_buffer_type:
        Option<unsafe extern "C" fn(dev: ggml_backend_dev_t) -> ggml_backend_buffer_type_t>,
    pub buffer_from_host_ptr: Option<
        unsafe extern "C" fn(
            dev: ggml_backend_dev_t,
            ptr: *mut c_void,
            size: usize,
            max_tensor_size: usize,
        ) -> ggml_backend_buffer_t,
    >,
    pub supports_op:
        Option<unsafe extern "C" fn(dev: ggml_backend_dev_t, op: *const ggml_tensor) -> bool>,
    pub supports_buft: Option<
        unsafe extern "C" fn(dev: ggml_backend_dev_t, buft: ggml_backend_buffer_type_t) -> bool,
    >,
    pub offload_op:
        Option<unsafe extern "C" fn(dev: ggml_backend_dev_t, op: *const ggml_tensor) -> bool>,
    pub event_new: Option<unsafe extern "C" fn(dev: ggml_backend_dev_t) -> ggml_backend_event_t>,
    pub event_free:
        Option<unsafe extern "C" fn(dev: ggml_backend_dev_t, event: ggml_backend_event_t)>,
    pub event_synchronize:
        Option<unsafe extern "C" fn(dev: ggml_backend_dev_t, event: ggml_backend_event_t)>,
}

impl ggml_backend_device_i {
    /// No entries: the base that devices complete with struct-update syntax.
    pub const EMPTY: Self = Self {
        get_name: None,
        get_description: None,
        get_memory: None,
        get_type: None,
        get_props: None,
        init_backend: None,
        get_buffer_type: None,
        get_host_buffer_type: None,
        buffer_from_host_ptr: None,
        supports_op: None,
        supports_buft: None,
        offload_op: None,
        event_new: None,
        event_free: None,
        event_synchronize: None,
    };
}

#[repr(C)]
pub struct ggml_backend_device {
    pub iface: ggml_backend_device_i,
    pub reg: ggml_backend_reg_t,
    pub context: *mut c_void,
}

// ---------------------------------------------------------------------------------------
// registry
// ---------------------------------------------------------------------------------------

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ggml_backend_reg_i {
    pub get_name: Option<unsafe extern "C" fn(reg: ggml_backend_reg_t) -> *const c_char>,
    pub get_device_count: Option<unsafe extern "C" fn(reg: ggml_backend_reg_t) -> usize>,
    pub get_device:
        Option<unsafe extern "C" fn(reg: ggml_backend_reg_t, index: usize) -> ggml_backend_dev_t>,
    pub get_proc_address:
        Option<unsafe extern "C" fn(reg: ggml_backend_reg_t, name: *const c_char) -> *mut c_void>,
}

#[repr(C)]
pub struct ggml_backend_reg {
    pub api_version: c_int,
    pub iface: ggml_backend_reg_i,
    pub context: *mut c_void,
}
