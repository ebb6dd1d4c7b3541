//! `#[repr(C)]` mirrors of the ggml core types this library reads and writes, and the
//! ggml core functions (target ggml-base, which stays C) that it calls.
//!
//! Layouts follow `ggml.h` and the private `ggml-impl.h`; what differs between ggml versions
//! (the graph struct, the op values) comes from the ABI's facts (`super::facts`). The ctest `abi_layout`
//! compares every size and offset with the C compiler's.

#![allow(non_camel_case_types)]

use super::facts::OPS;
use ggml_backend_rs_core::Op;
use std::ffi::{c_char, c_int, c_void};

pub const GGML_MAX_DIMS: usize = 4;
pub const GGML_MAX_SRC: usize = 10;
pub const GGML_MAX_OP_PARAMS: usize = 64;
pub const GGML_MAX_NAME: usize = 64;

/// Alignment of every tensor in a CPU buffer (`TENSOR_ALIGNMENT` in ggml-impl.h).
pub const TENSOR_ALIGNMENT: usize = 32;

/// `enum ggml_status`.
pub type ggml_status = c_int;
pub const GGML_STATUS_ALLOC_FAILED: ggml_status = -2;
pub const GGML_STATUS_FAILED: ggml_status = -1;
pub const GGML_STATUS_SUCCESS: ggml_status = 0;
pub const GGML_STATUS_ABORTED: ggml_status = 1;

/// `enum ggml_log_level`.
pub type ggml_log_level = c_int;
pub const GGML_LOG_LEVEL_DEBUG: ggml_log_level = 1;
pub const GGML_LOG_LEVEL_INFO: ggml_log_level = 2;
pub const GGML_LOG_LEVEL_WARN: ggml_log_level = 3;
pub const GGML_LOG_LEVEL_ERROR: ggml_log_level = 4;

/// `enum ggml_type`, kept as its integer value; only f32 is named (partial-sum arithmetic).
pub type ggml_type = c_int;
pub const GGML_TYPE_F32: ggml_type = 0;
/// `enum ggml_op`; only the view operations are named here.
pub type ggml_op = c_int;

/// `ggml_guid`: 16 bytes identifying a backend implementation.
pub type ggml_guid = [u8; 16];
pub type ggml_guid_t = *mut ggml_guid;

/// `struct ggml_tensor` (ggml.h). `Copy`: a header is plain data (its pointers are not owned).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ggml_tensor {
    pub type_: ggml_type,
    pub buffer: *mut super::backend::ggml_backend_buffer,
    pub ne: [i64; GGML_MAX_DIMS],
    pub nb: [usize; GGML_MAX_DIMS],
    pub op: ggml_op,
    pub op_params: [i32; GGML_MAX_OP_PARAMS / 4],
    pub flags: i32,
    pub src: [*mut ggml_tensor; GGML_MAX_SRC],
    pub view_src: *mut ggml_tensor,
    pub view_offs: usize,
    pub data: *mut c_void,
    pub name: [c_char; GGML_MAX_NAME],
    pub extra: *mut c_void,
    pub padding: [c_char; 8],
}

impl ggml_tensor {
    /// A tensor header with every field zero / NULL (what `ggml_new_tensor` starts from).
    pub const fn zeroed() -> ggml_tensor {
        ggml_tensor {
            type_: 0,
            buffer: std::ptr::null_mut(),
            ne: [0; GGML_MAX_DIMS],
            nb: [0; GGML_MAX_DIMS],
            op: 0,
            op_params: [0; GGML_MAX_OP_PARAMS / 4],
            flags: 0,
            src: [std::ptr::null_mut(); GGML_MAX_SRC],
            view_src: std::ptr::null_mut(),
            view_offs: 0,
            data: std::ptr::null_mut(),
            name: [0; GGML_MAX_NAME],
            extra: std::ptr::null_mut(),
            padding: [0; 8],
        }
    }
}

/// `struct ggml_hash_set` (ggml-impl.h).
#[repr(C)]
pub struct ggml_hash_set {
    pub size: usize,
    pub used: *mut u32,
    pub keys: *mut *mut ggml_tensor,
}

pub use super::facts::ggml_cgraph;

impl ggml_cgraph {
    /// A graph over caller-owned node and leaf lists, without gradients or a visited set: the
    /// form ggml-alloc and the backends need (as `ggml_graph_view` makes).
    pub fn over_lists(
        nodes: *mut *mut ggml_tensor,
        n_nodes: usize,
        leafs: *mut *mut ggml_tensor,
        n_leafs: usize,
    ) -> Self {
        // SAFETY: a plain C struct of integers and raw pointers (whatever the version's
        // fields): all-zero is a valid value, an empty graph with no identity.
        let mut g: ggml_cgraph = unsafe { std::mem::zeroed() };
        g.size = n_nodes.max(n_leafs) as c_int;
        g.n_nodes = n_nodes as c_int;
        g.n_leafs = n_leafs as c_int;
        g.nodes = nodes;
        g.leafs = leafs;
        g
    }

    /// A graph with no nodes.
    pub fn empty() -> Self {
        Self::over_lists(std::ptr::null_mut(), 0, std::ptr::null_mut(), 0)
    }
}

/// `struct ggml_init_params`.
#[repr(C)]
pub struct ggml_init_params {
    pub mem_size: usize,
    pub mem_buffer: *mut c_void,
    pub no_alloc: bool,
}

/// Opaque `struct ggml_context`.
#[repr(C)]
pub struct ggml_context {
    _private: [u8; 0],
}

// Values of `enum ggml_op` that C-facing code names, from the version's table (the ctest
// `abi_layout` checks the table's length against the linked ggml's GGML_OP_COUNT, and the test
// below every value's name).
pub const GGML_OP_COUNT: usize = OPS.len();
pub const GGML_OP_NONE: ggml_op = OPS.value_of(Op::None);
pub const GGML_OP_RESHAPE: ggml_op = OPS.value_of(Op::Reshape);
pub const GGML_OP_VIEW: ggml_op = OPS.value_of(Op::View);
pub const GGML_OP_PERMUTE: ggml_op = OPS.value_of(Op::Permute);
pub const GGML_OP_TRANSPOSE: ggml_op = OPS.value_of(Op::Transpose);
pub const GGML_OP_MUL_MAT_ID: ggml_op = OPS.value_of(Op::MulMatId);
pub const GGML_OP_ROPE: ggml_op = OPS.value_of(Op::Rope);

/// `enum ggml_tensor_flag`.
pub const GGML_TENSOR_FLAG_INPUT: i32 = 1;
pub const GGML_TENSOR_FLAG_OUTPUT: i32 = 2;
pub const GGML_TENSOR_FLAG_COMPUTE: i32 = 16;

/// `struct ggml_tallocr` (ggml-alloc.h): places tensors one after another in a buffer.
#[repr(C)]
pub struct ggml_tallocr {
    pub buffer: *mut super::backend::ggml_backend_buffer,
    pub base: *mut c_void,
    pub alignment: usize,
    pub offset: usize,
}

/// Opaque `struct ggml_gallocr` (ggml-alloc.c).
#[repr(C)]
pub struct ggml_gallocr {
    _private: [u8; 0],
}
pub type ggml_gallocr_t = *mut ggml_gallocr;

extern "C" {
    pub fn ggml_nbytes(tensor: *const ggml_tensor) -> usize;
    pub fn ggml_nelements(tensor: *const ggml_tensor) -> i64;
    pub fn ggml_blck_size(type_: ggml_type) -> i64;
    pub fn ggml_is_contiguous(tensor: *const ggml_tensor) -> bool;
    pub fn ggml_get_first_tensor(ctx: *const ggml_context) -> *mut ggml_tensor;
    pub fn ggml_get_next_tensor(
        ctx: *const ggml_context,
        tensor: *mut ggml_tensor,
    ) -> *mut ggml_tensor;
    pub fn ggml_abort(file: *const c_char, line: c_int, fmt: *const c_char, ...) -> !;
    pub fn ggml_log_internal(level: ggml_log_level, format: *const c_char, ...);

    pub fn ggml_aligned_malloc(size: usize) -> *mut c_void;
    pub fn ggml_aligned_free(ptr: *mut c_void, size: usize);

    pub fn ggml_init(params: ggml_init_params) -> *mut ggml_context;
    pub fn ggml_free(ctx: *mut ggml_context);
    pub fn ggml_tensor_overhead() -> usize;
    pub fn ggml_graph_overhead_custom(size: usize, grads: bool) -> usize;
    pub fn ggml_new_graph_custom(
        ctx: *mut ggml_context,
        size: usize,
        grads: bool,
    ) -> *mut ggml_cgraph;
    pub fn ggml_new_tensor_1d(
        ctx: *mut ggml_context,
        type_: ggml_type,
        ne0: i64,
    ) -> *mut ggml_tensor;
    pub fn ggml_dup_tensor(ctx: *mut ggml_context, src: *const ggml_tensor) -> *mut ggml_tensor;
    pub fn ggml_set_name(tensor: *mut ggml_tensor, name: *const c_char) -> *mut ggml_tensor;
    pub fn ggml_graph_view(cgraph: *mut ggml_cgraph, i0: c_int, i1: c_int) -> ggml_cgraph;

    pub fn ggml_hash_size(min_sz: usize) -> usize;
    pub fn ggml_view_tensor(ctx: *mut ggml_context, src: *mut ggml_tensor) -> *mut ggml_tensor;
    pub fn ggml_op_desc(t: *const ggml_tensor) -> *const c_char;
    pub fn ggml_op_name(op: ggml_op) -> *const c_char;

    pub fn ggml_gallocr_new_n(
        bufts: *mut super::backend::ggml_backend_buffer_type_t,
        n_bufs: c_int,
    ) -> ggml_gallocr_t;
    pub fn ggml_gallocr_free(galloc: ggml_gallocr_t);
    pub fn ggml_gallocr_reserve_n(
        galloc: ggml_gallocr_t,
        graph: *mut ggml_cgraph,
        node_buffer_ids: *const c_int,
        leaf_buffer_ids: *const c_int,
    ) -> bool;
    pub fn ggml_gallocr_reserve_n_size(
        galloc: ggml_gallocr_t,
        graph: *mut ggml_cgraph,
        node_buffer_ids: *const c_int,
        leaf_buffer_ids: *const c_int,
        sizes: *mut usize,
    );
    pub fn ggml_gallocr_alloc_graph(galloc: ggml_gallocr_t, graph: *mut ggml_cgraph) -> bool;
    pub fn ggml_gallocr_get_buffer_size(galloc: ggml_gallocr_t, buffer_id: c_int) -> usize;

    pub fn ggml_tallocr_new(buffer: *mut super::backend::ggml_backend_buffer) -> ggml_tallocr;
    pub fn ggml_tallocr_alloc(talloc: *mut ggml_tallocr, tensor: *mut ggml_tensor) -> ggml_status;

    /// ggml-alloc.c: allocates every tensor of `ctx` in one buffer of `backend`.
    pub fn ggml_backend_alloc_ctx_tensors(
        ctx: *mut ggml_context,
        backend: *mut super::backend::ggml_backend,
    ) -> *mut super::backend::ggml_backend_buffer;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    /// Every value of the version's op table names the linked ggml's op of that value
    /// (`ggml_op_name`).
    #[test]
    fn ops_match_the_linked_ggml() {
        for (value, op) in OPS.ops().iter().enumerate() {
            // SAFETY: ggml_op_name returns a static string for every value below GGML_OP_COUNT,
            // which the table's length is (ctest abi_layout).
            let name = unsafe { CStr::from_ptr(ggml_op_name(value as ggml_op)) };
            assert_eq!(name.to_str(), Ok(op.name()), "op value {value}");
        }
    }
}
