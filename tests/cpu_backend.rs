//! Rust-side behaviour tests through the exported C ABI, on the CPU backend of ggml-cpu
//! (linked in by build.rs from the CMake build; see scripts/test.sh).

// Without ggml to link (plain `cargo test`, see build.rs) there is nothing to run here.
#![cfg(not(ggml_backend_rs_unlinked))]

use std::ffi::{c_char, c_void, CStr};
use std::ptr;

use ggml_backend_rs::abi::*;

#[allow(improper_ctypes)]
extern "C" {
    fn ggml_backend_cpu_buffer_type() -> ggml_backend_buffer_type_t;
    fn ggml_backend_buft_name(buft: ggml_backend_buffer_type_t) -> *const c_char;
    fn ggml_backend_buft_alloc_buffer(
        buft: ggml_backend_buffer_type_t,
        size: usize,
    ) -> ggml_backend_buffer_t;
    fn ggml_backend_buffer_free(buffer: ggml_backend_buffer_t);
    fn ggml_backend_buffer_get_base(buffer: ggml_backend_buffer_t) -> *mut c_void;
    fn ggml_backend_buffer_get_size(buffer: ggml_backend_buffer_t) -> usize;
    fn ggml_backend_tensor_alloc(
        buffer: ggml_backend_buffer_t,
        tensor: *mut ggml_tensor,
        addr: *mut c_void,
    ) -> ggml_status;
    fn ggml_backend_tensor_set_2d(
        t: *mut ggml_tensor,
        data: *const c_void,
        offset: usize,
        size: usize,
        n: usize,
        st: usize,
        sd: usize,
    );
    fn ggml_backend_tensor_get_2d(
        t: *const ggml_tensor,
        data: *mut c_void,
        offset: usize,
        size: usize,
        n: usize,
        st: usize,
        sd: usize,
    );
    fn ggml_backend_tensor_get(
        t: *const ggml_tensor,
        data: *mut c_void,
        offset: usize,
        size: usize,
    );
    fn ggml_backend_tensor_copy(src: *const ggml_tensor, dst: *mut ggml_tensor);
    fn ggml_backend_cpu_buffer_from_ptr(ptr: *mut c_void, size: usize) -> ggml_backend_buffer_t;
    fn ggml_backend_dev_count() -> usize;
    fn ggml_backend_dev_by_name(name: *const c_char) -> ggml_backend_dev_t;
    fn ggml_backend_dev_name(dev: ggml_backend_dev_t) -> *const c_char;
    fn ggml_backend_reg_by_name(name: *const c_char) -> ggml_backend_reg_t;
    fn ggml_backend_init_by_name(name: *const c_char, params: *const c_char) -> ggml_backend_t;
    fn ggml_backend_load(path: *const c_char) -> ggml_backend_reg_t;
    fn ggml_new_tensor_1d(ctx: *mut ggml_context, ty: ggml_type, ne0: i64) -> *mut ggml_tensor;
}

const GGML_TYPE_F32: ggml_type = 0;

struct Ctx(*mut ggml_context);

impl Ctx {
    fn new() -> Self {
        // SAFETY: plain ggml context creation; metadata only.
        let ctx = unsafe {
            ggml_init(ggml_init_params {
                mem_size: 1 << 16,
                mem_buffer: ptr::null_mut(),
                no_alloc: true,
            })
        };
        assert!(!ctx.is_null());
        Ctx(ctx)
    }
    fn tensor_f32(&self, n: i64) -> *mut ggml_tensor {
        // SAFETY: the context is live.
        unsafe { ggml_new_tensor_1d(self.0, GGML_TYPE_F32, n) }
    }
}

impl Drop for Ctx {
    fn drop(&mut self) {
        // SAFETY: created by ggml_init.
        unsafe { ggml_free(self.0) }
    }
}

fn text(p: *const c_char) -> String {
    // SAFETY: the library returns static or backend-owned C strings.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

#[test]
fn cpu_buffer_type_allocates_aligned_host_memory() {
    unsafe {
        let buft = ggml_backend_cpu_buffer_type();
        assert_eq!(text(ggml_backend_buft_name(buft)), "CPU");
        let buf = ggml_backend_buft_alloc_buffer(buft, 4096);
        assert_eq!(ggml_backend_buffer_get_size(buf), 4096);
        assert_eq!(
            ggml_backend_buffer_get_base(buf) as usize % TENSOR_ALIGNMENT,
            0
        );
        ggml_backend_buffer_free(buf);
    }
}

/// 2D transfers with strides that differ on both sides, then a copy into a buffer of a
/// different type (memory owned by the test).
#[test]
fn strided_transfers_and_cross_buffer_copy() {
    let ctx = Ctx::new();
    let a = ctx.tensor_f32(24);
    let b = ctx.tensor_f32(24);
    unsafe {
        let buf = ggml_backend_buft_alloc_buffer(ggml_backend_cpu_buffer_type(), 256);
        assert_eq!(
            ggml_backend_tensor_alloc(buf, a, ggml_backend_buffer_get_base(buf)),
            GGML_STATUS_SUCCESS
        );

        let zeros = [0f32; 24];
        ggml_backend_tensor_set_2d(a, zeros.as_ptr().cast(), 0, 96, 1, 0, 0);
        // 4 blocks of 2 floats, every 6 floats in the tensor, every 3 floats in host memory
        let src: Vec<f32> = (0..12).map(|i| i as f32 + 1.0).collect();
        ggml_backend_tensor_set_2d(a, src.as_ptr().cast(), 4, 8, 4, 24, 12);
        let mut all = [0f32; 24];
        ggml_backend_tensor_get(a, all.as_mut_ptr().cast(), 0, 96);
        let expected: Vec<f32> = (0..24)
            .map(|i| match (i / 6, i % 6) {
                (blk, 1) => src[blk * 3],
                (blk, 2) => src[blk * 3 + 1],
                _ => 0.0,
            })
            .collect();
        assert_eq!(all.to_vec(), expected);

        let mut back = [0f32; 8];
        ggml_backend_tensor_get_2d(a, back.as_mut_ptr().cast(), 4, 8, 4, 24, 8);
        assert_eq!(back, [1.0, 2.0, 4.0, 5.0, 7.0, 8.0, 10.0, 11.0]);

        let mut owned = vec![0u64; 16]; // 128 bytes, 8-byte aligned; align further below
        let base = owned.as_mut_ptr() as usize;
        let aligned = base.next_multiple_of(32);
        let mapped = ggml_backend_cpu_buffer_from_ptr(aligned as *mut c_void, 96);
        assert_eq!(
            ggml_backend_tensor_alloc(mapped, b, aligned as *mut c_void),
            GGML_STATUS_SUCCESS
        );
        ggml_backend_tensor_copy(a, b);
        let copied = std::slice::from_raw_parts(aligned as *const f32, 24);
        assert_eq!(copied, &expected[..]);
        ggml_backend_buffer_free(mapped);
        drop(owned);
        ggml_backend_buffer_free(buf);
    }
}

#[test]
fn registry_finds_the_cpu_backend_and_rejects_unknown_names() {
    unsafe {
        assert!(ggml_backend_dev_count() >= 1);
        let dev = ggml_backend_dev_by_name(c"cpu".as_ptr());
        assert!(!dev.is_null());
        assert_eq!(text(ggml_backend_dev_name(dev)), "CPU");
        assert!(!ggml_backend_reg_by_name(c"CPU".as_ptr()).is_null());
        assert!(ggml_backend_dev_by_name(c"no such device".as_ptr()).is_null());
        assert!(ggml_backend_dev_by_name(ptr::null()).is_null());
        assert!(ggml_backend_init_by_name(c"no such device".as_ptr(), ptr::null()).is_null());
        assert!(ggml_backend_load(c"/nonexistent/libggml-x.so".as_ptr()).is_null());
        assert!(ggml_backend_load(ptr::null()).is_null());
        let backend = ggml_backend_init_by_name(c"CPU".as_ptr(), ptr::null());
        assert!(!backend.is_null());
        // SAFETY: a live backend from the registry; its vtable frees it.
        ((*backend).iface.free.unwrap())(backend);
    }
}
