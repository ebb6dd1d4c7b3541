//! The C objects this library makes, driven from Rust through ggml's exported API, one test per
//! object family: the meta device, its buffer type, buffers, backend and registry (over two CPU
//! devices, so the split, the per-device copies and the reduction all run), multi-buffers, and
//! the guard every vtable entry of ours has (`abi::object`): called with an object that is not
//! of its kind, or with NULL where the ABI promises an object, it aborts and names both.
//!
//! The data checks are exact: every value is a small integer in f32, so sums are exact too.

// Without ggml to link (plain `cargo test`, see build.rs) there is nothing to run here.
#![cfg(not(ggml_backend_rs_unlinked))]

use std::ffi::{c_char, c_int, c_void, CStr};
use std::os::unix::process::ExitStatusExt;
use std::process::Command;
use std::ptr;

use ggml_backend_rs::abi::*;
use ggml_backend_rs_core::split::Split;

#[allow(improper_ctypes)]
extern "C" {
    fn ggml_backend_dev_by_name(name: *const c_char) -> ggml_backend_dev_t;
    fn ggml_backend_dev_name(dev: ggml_backend_dev_t) -> *const c_char;
    fn ggml_backend_dev_description(dev: ggml_backend_dev_t) -> *const c_char;
    fn ggml_backend_dev_memory(dev: ggml_backend_dev_t, free: *mut usize, total: *mut usize);
    fn ggml_backend_dev_type(dev: ggml_backend_dev_t) -> c_int;
    fn ggml_backend_dev_get_props(dev: ggml_backend_dev_t, props: *mut ggml_backend_dev_props);
    fn ggml_backend_dev_init(dev: ggml_backend_dev_t, params: *const c_char) -> ggml_backend_t;
    fn ggml_backend_dev_buffer_type(dev: ggml_backend_dev_t) -> ggml_backend_buffer_type_t;
    fn ggml_backend_dev_supports_buft(
        dev: ggml_backend_dev_t,
        buft: ggml_backend_buffer_type_t,
    ) -> bool;
    fn ggml_backend_dev_backend_reg(dev: ggml_backend_dev_t) -> ggml_backend_reg_t;
    fn ggml_backend_reg_name(reg: ggml_backend_reg_t) -> *const c_char;
    fn ggml_backend_reg_dev_count(reg: ggml_backend_reg_t) -> usize;
    fn ggml_backend_reg_get_proc_address(
        reg: ggml_backend_reg_t,
        name: *const c_char,
    ) -> *mut c_void;
    fn ggml_backend_buft_name(buft: ggml_backend_buffer_type_t) -> *const c_char;
    fn ggml_backend_buft_get_alignment(buft: ggml_backend_buffer_type_t) -> usize;
    fn ggml_backend_buft_is_host(buft: ggml_backend_buffer_type_t) -> bool;
    fn ggml_backend_buft_get_alloc_size(
        buft: ggml_backend_buffer_type_t,
        tensor: *const ggml_tensor,
    ) -> usize;
    fn ggml_backend_buft_alloc_buffer(
        buft: ggml_backend_buffer_type_t,
        size: usize,
    ) -> ggml_backend_buffer_t;
    fn ggml_backend_cpu_buffer_type() -> ggml_backend_buffer_type_t;
    fn ggml_backend_buffer_get_size(buffer: ggml_backend_buffer_t) -> usize;
    fn ggml_backend_buffer_clear(buffer: ggml_backend_buffer_t, value: u8);
    fn ggml_backend_buffer_free(buffer: ggml_backend_buffer_t);
    fn ggml_backend_multi_buffer_alloc_buffer(
        buffers: *mut ggml_backend_buffer_t,
        n: usize,
    ) -> ggml_backend_buffer_t;
    fn ggml_backend_alloc_ctx_tensors_from_buft(
        ctx: *mut ggml_context,
        buft: ggml_backend_buffer_type_t,
    ) -> ggml_backend_buffer_t;
    fn ggml_backend_tensor_set(t: *mut ggml_tensor, data: *const c_void, off: usize, n: usize);
    fn ggml_backend_tensor_get(t: *const ggml_tensor, data: *mut c_void, off: usize, n: usize);
    fn ggml_backend_tensor_memset(t: *mut ggml_tensor, value: u8, off: usize, n: usize);
    fn ggml_backend_tensor_copy(src: *const ggml_tensor, dst: *mut ggml_tensor);
    fn ggml_backend_tensor_set_async(
        backend: ggml_backend_t,
        t: *mut ggml_tensor,
        data: *const c_void,
        off: usize,
        n: usize,
    );
    fn ggml_backend_tensor_get_async(
        backend: ggml_backend_t,
        t: *const ggml_tensor,
        data: *mut c_void,
        off: usize,
        n: usize,
    );
    fn ggml_backend_tensor_set_2d_async(
        backend: ggml_backend_t,
        t: *mut ggml_tensor,
        data: *const c_void,
        off: usize,
        size: usize,
        n_copies: usize,
        stride_tensor: usize,
        stride_data: usize,
    );
    fn ggml_backend_tensor_get_2d_async(
        backend: ggml_backend_t,
        t: *const ggml_tensor,
        data: *mut c_void,
        off: usize,
        size: usize,
        n_copies: usize,
        stride_tensor: usize,
        stride_data: usize,
    );
    fn ggml_backend_name(backend: ggml_backend_t) -> *const c_char;
    fn ggml_backend_synchronize(backend: ggml_backend_t);
    fn ggml_backend_graph_compute(backend: ggml_backend_t, graph: *mut ggml_cgraph) -> ggml_status;
    fn ggml_backend_free(backend: ggml_backend_t);
    fn ggml_backend_meta_device(
        devs: *mut ggml_backend_dev_t,
        n: usize,
        get_split_state: ggml_backend_meta_get_split_state_t,
        userdata: *mut c_void,
    ) -> ggml_backend_dev_t;
    fn ggml_new_tensor_1d(ctx: *mut ggml_context, ty: ggml_type, ne0: i64) -> *mut ggml_tensor;
    fn ggml_add(
        ctx: *mut ggml_context,
        a: *mut ggml_tensor,
        b: *mut ggml_tensor,
    ) -> *mut ggml_tensor;
    fn ggml_new_graph(ctx: *mut ggml_context) -> *mut ggml_cgraph;
    fn ggml_build_forward_expand(graph: *mut ggml_cgraph, tensor: *mut ggml_tensor);
}

const F32: ggml_type = 0;
const N: usize = 8;
const SIGABRT: i32 = 6;

/// Tensors named `split*` are split along dimension 0 in equal halves; every other tensor is
/// on both devices whole.
unsafe extern "C" fn halves(
    t: *const ggml_tensor,
    _: *mut c_void,
) -> ggml_backend_meta_split_state {
    // SAFETY: ggml passes a live tensor, whose name is a NUL-terminated array.
    let (name, ne0) = unsafe { (CStr::from_ptr((*t).name.as_ptr()), (*t).ne[0]) };
    let split = if name.to_bytes().starts_with(b"split") {
        Split::dim(0, vec![ne0 / 2, ne0 - ne0 / 2])
    } else {
        Split::Mirrored
    };
    split_to_c(&split)
}

fn text(p: *const c_char) -> String {
    assert!(!p.is_null());
    // SAFETY: the library returns static or object-owned C strings.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

fn cpu() -> ggml_backend_dev_t {
    // SAFETY: a C string.
    let cpu = unsafe { ggml_backend_dev_by_name(c"CPU".as_ptr()) };
    assert!(!cpu.is_null());
    cpu
}

/// The meta device over two CPU devices that splits by [`halves`].
fn meta_device() -> ggml_backend_dev_t {
    let mut devs = [cpu(), cpu()];
    // SAFETY: two live devices; the callback lives as long as the process.
    let dev =
        unsafe { ggml_backend_meta_device(devs.as_mut_ptr(), 2, Some(halves), ptr::null_mut()) };
    assert!(!dev.is_null());
    dev
}

/// A ggml context for metadata (tensors and a graph); its tensors get memory from buffers.
struct Ctx(*mut ggml_context);

impl Ctx {
    fn new() -> Ctx {
        // SAFETY: plain context creation, metadata only.
        let ctx = unsafe {
            ggml_init(ggml_init_params {
                mem_size: 1 << 20,
                mem_buffer: ptr::null_mut(),
                no_alloc: true,
            })
        };
        assert!(!ctx.is_null());
        Ctx(ctx)
    }

    fn tensor(&self, name: &CStr) -> *mut ggml_tensor {
        self.tensor_of(name, N)
    }

    fn tensor_of(&self, name: &CStr, n: usize) -> *mut ggml_tensor {
        // SAFETY: a live context and a C string.
        unsafe {
            let t = ggml_new_tensor_1d(self.0, F32, n as i64);
            ggml_set_name(t, name.as_ptr());
            t
        }
    }
}

impl Drop for Ctx {
    fn drop(&mut self) {
        // SAFETY: made by ggml_init, freed once.
        unsafe { ggml_free(self.0) }
    }
}

fn set(t: *mut ggml_tensor, v: &[f32; N]) {
    // SAFETY: an allocated tensor of N floats and N readable floats.
    unsafe { ggml_backend_tensor_set(t, v.as_ptr().cast(), 0, 4 * N) }
}

fn get(t: *const ggml_tensor) -> [f32; N] {
    let mut v = [f32::NAN; N];
    // SAFETY: an allocated tensor of N floats and room for N floats.
    unsafe { ggml_backend_tensor_get(t, v.as_mut_ptr().cast(), 0, 4 * N) };
    v
}

fn counting(from: f32) -> [f32; N] {
    std::array::from_fn(|i| from + i as f32)
}

#[test]
fn meta_device_reports_its_members() {
    let dev = meta_device();
    let cpu = cpu();
    // SAFETY: live devices and writable results.
    unsafe {
        assert_eq!(text(ggml_backend_dev_name(dev)), "Meta(CPU,CPU)");
        assert!(text(ggml_backend_dev_description(dev)).starts_with("Meta("));
        assert_eq!(ggml_backend_dev_type(dev), DEVICE_META);
        let (mut free, mut total) = (0, 0);
        ggml_backend_dev_memory(dev, &mut free, &mut total);
        let (mut cpu_free, mut cpu_total) = (0, 0);
        ggml_backend_dev_memory(cpu, &mut cpu_free, &mut cpu_total);
        // one physical device listed twice is one pool: each member gets half of it
        assert!(total > 0 && total <= cpu_total, "{total} of {cpu_total}");
        let mut props: ggml_backend_dev_props = std::mem::zeroed();
        ggml_backend_dev_get_props(dev, &mut props);
        assert_eq!(text(props.name), "Meta(CPU,CPU)");
        assert_eq!(props.memory_total, total);
        assert!(!props.caps.events && !props.caps.host_buffer);

        let buft = ggml_backend_dev_buffer_type(dev);
        assert!(ggml_backend_dev_supports_buft(dev, buft));
        assert!(!ggml_backend_dev_supports_buft(
            dev,
            ggml_backend_cpu_buffer_type()
        ));
        assert!(!ggml_backend_buft_is_host(buft));
        assert_eq!(text(ggml_backend_buft_name(buft)), "Meta(CPU,CPU)");
        assert!(ggml_backend_buft_get_alignment(buft) >= TENSOR_ALIGNMENT);

        let reg = ggml_backend_dev_backend_reg(dev);
        assert_eq!(text(ggml_backend_reg_name(reg)), "Meta");
        assert_eq!(ggml_backend_reg_dev_count(reg), 0);
        let threads =
            ggml_backend_reg_get_proc_address(reg, c"ggml_backend_set_n_threads".as_ptr());
        assert!(!threads.is_null());
        assert!(ggml_backend_reg_get_proc_address(reg, c"no such function".as_ptr()).is_null());
        assert!(ggml_backend_reg_get_proc_address(reg, ptr::null()).is_null());
    }
}

#[test]
fn meta_buffer_holds_split_and_mirrored_tensors() {
    let dev = meta_device();
    let ctx = Ctx::new();
    let (split, whole, copy) = (
        ctx.tensor(c"split_a"),
        ctx.tensor(c"whole"),
        ctx.tensor(c"split_copy"),
    );
    // SAFETY: live objects throughout; every transfer stays inside its tensor.
    unsafe {
        let buft = ggml_backend_dev_buffer_type(dev);
        // A weight split in halves takes what one device holds of it (aligned), a mirrored one
        // a whole copy: sizes in the device's unit.
        let align = ggml_backend_buft_get_alignment(buft);
        let wide = Ctx::new();
        let (wide_split, wide_whole) = (wide.tensor_of(c"split_w", 64), wide.tensor_of(c"w", 64));
        assert_eq!(
            ggml_backend_buft_get_alloc_size(buft, wide_split),
            (4 * 64 / 2usize).next_multiple_of(align)
        );
        assert_eq!(ggml_backend_buft_get_alloc_size(buft, wide_whole), 4 * 64);
        let buf = ggml_backend_alloc_ctx_tensors_from_buft(ctx.0, buft);
        assert!(!buf.is_null());
        assert!(ggml_backend_buffer_get_size(buf) > 0);

        set(split, &counting(1.0));
        set(whole, &counting(10.0));
        assert_eq!(get(split), counting(1.0));
        assert_eq!(get(whole), counting(10.0));

        // bytes [8, 24) cross the devices' boundary (16 bytes each)
        ggml_backend_tensor_memset(split, 0, 8, 16);
        let mut expect = counting(1.0);
        expect[2..6].fill(0.0);
        assert_eq!(get(split), expect);
        let mut part = [0f32; 3];
        ggml_backend_tensor_get(split, part.as_mut_ptr().cast(), 4 * 5, 12);
        assert_eq!(part, [0.0, 7.0, 8.0]);

        // meta to meta with the same split: device by device
        ggml_backend_tensor_copy(split, copy);
        assert_eq!(get(copy), expect);

        ggml_backend_buffer_clear(buf, 0);
        assert_eq!(get(split), [0.0; N]);
        assert_eq!(get(whole), [0.0; N]);
        ggml_backend_buffer_free(buf);
    }
}

#[test]
fn meta_backend_computes_a_graph_on_both_devices() {
    let dev = meta_device();
    let ctx = Ctx::new();
    let (a, b) = (ctx.tensor(c"split_a"), ctx.tensor(c"split_b"));
    // SAFETY: live objects throughout; the graph's tensors are allocated before it runs.
    unsafe {
        let c = ggml_add(ctx.0, a, b);
        ggml_set_name(c, c"split_sum".as_ptr());
        let graph = ggml_new_graph(ctx.0);
        ggml_build_forward_expand(graph, c);
        let buf =
            ggml_backend_alloc_ctx_tensors_from_buft(ctx.0, ggml_backend_dev_buffer_type(dev));
        assert!(!buf.is_null());

        let backend = ggml_backend_dev_init(dev, ptr::null());
        assert!(!backend.is_null());
        assert_eq!(text(ggml_backend_name(backend)), "Meta(CPU,CPU)");
        let (x, y) = (counting(1.0), counting(100.0));
        ggml_backend_tensor_set_async(backend, a, x.as_ptr().cast(), 0, 4 * N);
        ggml_backend_tensor_set_async(backend, b, y.as_ptr().cast(), 0, 4 * N);
        assert_eq!(
            ggml_backend_graph_compute(backend, graph),
            GGML_STATUS_SUCCESS
        );
        let mut sum = [f32::NAN; N];
        ggml_backend_tensor_get_async(backend, c, sum.as_mut_ptr().cast(), 0, 4 * N);
        ggml_backend_synchronize(backend);
        assert_eq!(sum, std::array::from_fn(|i| x[i] + y[i]));
        ggml_backend_free(backend);
        ggml_backend_buffer_free(buf);
    }
}

/// The asynchronous transfers, plain and 2D, on a backend that queues them (the meta backend:
/// each device's part on that device's backend) and on one that has no asynchronous entries
/// (the CPU backend: synchronized, then done by the buffer); the 2D forms go block by block,
/// as neither has a 2D entry.
#[test]
fn asynchronous_transfers_in_every_form() {
    let dev = meta_device();
    for on_meta in [true, false] {
        let ctx = Ctx::new();
        let t = ctx.tensor(c"split_t");
        // SAFETY: live objects; every transfer stays inside the tensor and its host memory
        // lives until the backend is synchronized.
        unsafe {
            let (d, buft) = if on_meta {
                (dev, ggml_backend_dev_buffer_type(dev))
            } else {
                (cpu(), ggml_backend_cpu_buffer_type())
            };
            let buf = ggml_backend_alloc_ctx_tensors_from_buft(ctx.0, buft);
            let backend = ggml_backend_dev_init(d, ptr::null());
            assert!(!buf.is_null() && !backend.is_null());
            let x = counting(1.0);
            ggml_backend_tensor_set_async(backend, t, x.as_ptr().cast(), 0, 4 * N);
            // 3 blocks of 1 float: tensor floats 1, 4, 7 from host floats 0, 2, 4
            let y = [-1f32, 0.0, -2.0, 0.0, -3.0];
            ggml_backend_tensor_set_2d_async(backend, t, y.as_ptr().cast(), 4, 4, 3, 12, 8);
            let mut all = [f32::NAN; N];
            ggml_backend_tensor_get_async(backend, t, all.as_mut_ptr().cast(), 0, 4 * N);
            let mut pairs = [f32::NAN; 4];
            // 2 blocks of 2 floats: tensor floats 0..2 and 4..6
            ggml_backend_tensor_get_2d_async(backend, t, pairs.as_mut_ptr().cast(), 0, 8, 2, 16, 8);
            ggml_backend_synchronize(backend);
            assert_eq!(
                all,
                [1.0, -1.0, 3.0, 4.0, -2.0, 6.0, 7.0, -3.0],
                "meta: {on_meta}"
            );
            assert_eq!(pairs, [1.0, -1.0, -2.0, 6.0], "meta: {on_meta}");
            ggml_backend_free(backend);
            ggml_backend_buffer_free(buf);
        }
    }
}

#[test]
fn multi_buffer_clears_and_frees_its_parts() {
    // SAFETY: live buffers, owned by the multi-buffer once it is made.
    unsafe {
        let cpu = ggml_backend_cpu_buffer_type();
        let mut parts = [
            ggml_backend_buft_alloc_buffer(cpu, 64),
            ggml_backend_buft_alloc_buffer(cpu, 32),
        ];
        let multi = ggml_backend_multi_buffer_alloc_buffer(parts.as_mut_ptr(), 2);
        assert_eq!(ggml_backend_buffer_get_size(multi), 96);
        ggml_backend_buffer_clear(multi, 7);
        for p in parts {
            let base = (*p).iface.get_base.unwrap()(p) as *const u8;
            assert!(std::slice::from_raw_parts(base, (*p).size)
                .iter()
                .all(|&v| v == 7));
        }
        ggml_backend_buffer_free(multi);
    }
}

// --- the guard of every entry ----------------------------------------------------------------

/// Selects the misuse the child commits.
const CHILD: &str = "GGML_BACKEND_RS_OBJECTS_CHILD";

/// Calls one of our vtable entries with what ggml never passes it; returns only if the entry
/// did not abort.
fn misuse(which: &str) {
    let dev = meta_device();
    let cpu_dev = cpu();
    // SAFETY: deliberately wrong objects for the entries under test, which must refuse them
    // before touching them; every object passed is itself live.
    unsafe {
        let buft = ggml_backend_dev_buffer_type(dev);
        let cpu_buft = ggml_backend_cpu_buffer_type();
        match which {
            "device" => {
                (*dev).iface.get_name.unwrap()(cpu_dev);
            }
            "buft" => {
                (*buft).iface.get_alignment.unwrap()(cpu_buft);
            }
            "buffer" | "buffer-null-tensor" => {
                let ctx = Ctx::new();
                ctx.tensor(c"whole");
                let buf = ggml_backend_alloc_ctx_tensors_from_buft(ctx.0, buft);
                if which == "buffer" {
                    let cpu_buf = ggml_backend_buft_alloc_buffer(cpu_buft, 64);
                    (*buf).iface.clear.unwrap()(cpu_buf, 0);
                } else {
                    (*buf).iface.init_tensor.unwrap()(buf, ptr::null_mut());
                }
            }
            "backend" => {
                let backend = ggml_backend_dev_init(dev, ptr::null());
                let cpu_backend = ggml_backend_dev_init(cpu_dev, ptr::null());
                (*backend).iface.synchronize.unwrap()(cpu_backend);
            }
            "registry" => {
                let reg = ggml_backend_dev_backend_reg(dev);
                (*reg).iface.get_device_count.unwrap()(ggml_backend_dev_backend_reg(cpu_dev));
            }
            "multi-buffer" => {
                let mut parts = [ggml_backend_buft_alloc_buffer(cpu_buft, 64)];
                let multi = ggml_backend_multi_buffer_alloc_buffer(parts.as_mut_ptr(), 1);
                let other = ggml_backend_buft_alloc_buffer(cpu_buft, 64);
                (*multi).iface.clear.unwrap()(other, 0);
            }
            _ => unreachable!("no misuse {which}"),
        }
    }
}

#[test]
fn every_entry_refuses_an_object_that_is_not_its_own() {
    if let Ok(which) = std::env::var(CHILD) {
        misuse(&which);
        println!("child: `{which}` returned");
        std::process::exit(0);
    }
    let cases = [
        (
            "device",
            "meta device vtable called with 0x",
            "which is not a live meta device",
        ),
        (
            "buft",
            "meta buffer type vtable called with 0x",
            "which is not a live meta buffer type",
        ),
        (
            "buffer",
            "meta buffer vtable called with 0x",
            "which is not a live meta buffer",
        ),
        (
            "buffer-null-tensor",
            "meta buffer init_tensor: an object argument is NULL",
            "",
        ),
        (
            "backend",
            "meta backend vtable called with 0x",
            "which is not a live meta backend",
        ),
        (
            "registry",
            "meta registry vtable called with 0x",
            "which is not a live meta registry",
        ),
        (
            "multi-buffer",
            "multi-buffer vtable called with 0x",
            "which is not a live multi-buffer",
        ),
    ];
    for (which, starts, ends) in cases {
        let out = Command::new(std::env::current_exe().unwrap())
            .args([
                "every_entry_refuses_an_object_that_is_not_its_own",
                "--exact",
            ])
            .args(["--nocapture", "--test-threads", "1"])
            .env(CHILD, which)
            // ggml_abort's backtrace (gdb attaching to the child) is not under test.
            .env("GGML_NO_BACKTRACE", "1")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        let report = format!(
            "child `{which}`: {}\n{}\n{stderr}",
            out.status,
            String::from_utf8_lossy(&out.stdout)
        );
        assert_eq!(out.status.signal(), Some(SIGABRT), "{report}");
        // ggml_abort's line: "<file>:<line>: <message>"
        let named = stderr.lines().any(|l| {
            l.split_once(": ")
                .is_some_and(|(_, m)| m.starts_with(starts) && m.ends_with(ends))
        });
        assert!(named, "expected `{starts}...{ends}`\n{report}");
    }
}
