//! Fact `list-alloc`: a buffer type allocates a whole list of tensors (`alloc_buffer_n`,
//! `get_alloc_size_n`), which is how ggml-alloc places a context's tensors; ggml exports
//! `ggml_backend_buft_alloc_buffer_n` and `_get_alloc_size_n` (`crate::ffi::list_alloc`).
//! Without it the buffer type has six entries and ggml-alloc hands a meta buffer type's
//! context to the exported `ggml_backend_meta_alloc_ctx_tensors_from_buft`
//! (`crate::ffi::meta_ctx_alloc`).

use std::ffi::{c_char, c_int};

use crate::abi::backend::{ggml_backend_buffer_t, ggml_backend_buffer_type_t};
use crate::abi::ggml::ggml_tensor;

/// `alloc_buffer_n`: allocates `tensors` in one or more buffers.
pub type AllocBufferN = unsafe extern "C" fn(
    buft: ggml_backend_buffer_type_t,
    tensors: *mut *mut ggml_tensor,
    n_tensors: c_int,
) -> ggml_backend_buffer_t;

#[cfg(feature = "list-alloc")]
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ggml_backend_buffer_type_i {
    pub get_name: Option<unsafe extern "C" fn(buft: ggml_backend_buffer_type_t) -> *const c_char>,
    pub alloc_buffer: Option<
        unsafe extern "C" fn(
            buft: ggml_backend_buffer_type_t,
            size: usize,
        ) -> ggml_backend_buffer_t,
    >,
    /// Optional: allocates `tensors` in one or more buffers (default: plan the tensors into
    /// buffers of at most the maximum size, then place them one after another).
    pub alloc_buffer_n: Option<
        unsafe extern "C" fn(
            buft: ggml_backend_buffer_type_t,
            tensors: *mut *mut ggml_tensor,
            n_tensors: c_int,
        ) -> ggml_backend_buffer_t,
    >,
    pub get_alignment: Option<unsafe extern "C" fn(buft: ggml_backend_buffer_type_t) -> usize>,
    pub get_max_size: Option<unsafe extern "C" fn(buft: ggml_backend_buffer_type_t) -> usize>,
    pub get_alloc_size: Option<
        unsafe extern "C" fn(buft: ggml_backend_buffer_type_t, tensor: *const ggml_tensor) -> usize,
    >,
    /// Optional: bytes `alloc_buffer_n` would allocate for `tensors`.
    pub get_alloc_size_n: Option<
        unsafe extern "C" fn(
            buft: ggml_backend_buffer_type_t,
            tensors: *mut *mut ggml_tensor,
            n_tensors: c_int,
        ) -> usize,
    >,
    pub is_host: Option<unsafe extern "C" fn(buft: ggml_backend_buffer_type_t) -> bool>,
}

#[cfg(not(feature = "list-alloc"))]
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ggml_backend_buffer_type_i {
    pub get_name: Option<unsafe extern "C" fn(buft: ggml_backend_buffer_type_t) -> *const c_char>,
    pub alloc_buffer: Option<
        unsafe extern "C" fn(
            buft: ggml_backend_buffer_type_t,
            size: usize,
        ) -> ggml_backend_buffer_t,
    >,
    pub get_alignment: Option<unsafe extern "C" fn(buft: ggml_backend_buffer_type_t) -> usize>,
    pub get_max_size: Option<unsafe extern "C" fn(buft: ggml_backend_buffer_type_t) -> usize>,
    pub get_alloc_size: Option<
        unsafe extern "C" fn(buft: ggml_backend_buffer_type_t, tensor: *const ggml_tensor) -> usize,
    >,
    pub is_host: Option<unsafe extern "C" fn(buft: ggml_backend_buffer_type_t) -> bool>,
}

impl ggml_backend_buffer_type_i {
    /// No entries: the base that buffer types complete with struct-update syntax.
    pub const EMPTY: Self = Self {
        get_name: None,
        alloc_buffer: None,
        #[cfg(feature = "list-alloc")]
        alloc_buffer_n: None,
        get_alignment: None,
        get_max_size: None,
        get_alloc_size: None,
        #[cfg(feature = "list-alloc")]
        get_alloc_size_n: None,
        is_host: None,
    };

    /// These entries with `alloc_buffer_n` set where buffer types take tensor lists; without
    /// the fact a list reaches no buffer type, and the entries stay as they are.
    pub const fn with_alloc_buffer_n(self, f: AllocBufferN) -> Self {
        #[cfg(feature = "list-alloc")]
        return Self {
            alloc_buffer_n: Some(f),
            ..self
        };
        #[cfg(not(feature = "list-alloc"))]
        {
            let _ = f;
            self
        }
    }
}
