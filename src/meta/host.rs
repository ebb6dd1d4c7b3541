//! The AllReduce of devices whose memory the host reads and writes (CPU backends, which compute
//! synchronously): after the cut's sub-graphs, the host sums the partials in the reference
//! order and computes the [`Epilogue`] with the CPU backend's own arithmetic (the sum of
//! squares in double precision, `(x * scale) * w`), so that every device gets the bits the
//! copies path and the nodes in the graph would have given it, with none of their copies and
//! graph launches.
//!
//! Tensors above [`HOST_MAX`] bytes per partial take the copies path: its adds run on the CPU
//! backends' threads, this loop on one.

use std::ffi::c_void;

use super::epilogue::Epilogue;
use crate::abi::*;
use crate::tensor::{Host, Via};
use ggml_backend_rs_core::exchange::reference_sum;
use ggml_backend_rs_core::split::MAX_DEVICES;

/// Bytes per partial up to which the host reduces (decode-sized cuts).
pub(super) const HOST_MAX: usize = 1 << 20;

/// Whether the host may reduce or write `t`: contiguous f32 in host memory.
pub fn supports(t: Tensor) -> bool {
    t.type_() == GGML_TYPE_F32 && t.is_contiguous() && crate::tensor::is_host(t)
}

/// Each device's f32 data.
fn data(ts: &[Tensor]) -> [*mut f32; MAX_DEVICES] {
    let mut a = [std::ptr::null_mut(); MAX_DEVICES];
    for (p, t) in a.iter_mut().zip(ts) {
        *p = t.data() as *mut f32;
    }
    a
}

/// The CPU backend's RMS norm scale of a row whose squares sum to `sum_sq`.
fn rms_scale(sum_sq: f64, ncols: usize, eps: f32) -> f32 {
    let mean = (sum_sq / ncols as f64) as f32;
    1.0 / (mean + eps).sqrt()
}

/// Leaves the sum of `targets` (one per backend, [`supports`]ed, same layout) on every device,
/// or, with an epilogue, its results (and the sum where other nodes read it).
pub fn reduce(backends: &[Backend], targets: &[Tensor], epi: Option<&Epilogue>) {
    for b in backends {
        b.synchronize();
    }
    let io = Rows {
        parts: data(targets),
        n: targets.len(),
        keep_sum: epi.is_none_or(|e| e.keeps_sum),
        residual: epi.map(|e| e.residual[0].data() as *const f32),
        x: epi.map(|e| data(&e.add_out)),
        norm: epi
            .and_then(|e| e.norm.as_ref())
            .map(|m| (m.weight[0].data() as *const f32, data(&m.out), m.eps)),
    };
    let len = targets[0].nelements() as usize;
    let ncols = ncols(epi, len);
    // SAFETY: every pointer is the data of a live, contiguous f32 tensor of `len` elements in
    // host memory (`supports`; the epilogue's tensors have the targets' element count, the
    // weight one row of `ncols`: `Epilogue::fits`), and the backends are synchronized.
    unsafe { io.compute(len, ncols) }
}

/// Elements per row of the epilogue's norm (the whole tensor without one).
fn ncols(epi: Option<&Epilogue>, len: usize) -> usize {
    epi.and_then(|e| e.norm.as_ref())
        .map_or(len, |m| m.weight[0].nelements() as usize)
        .max(1)
}

/// Where one AllReduce reads and writes, per device (`n` of each array are used).
struct Rows {
    parts: [*mut f32; MAX_DEVICES],
    n: usize,
    /// Store the sum back into `parts` (other nodes read it).
    keep_sum: bool,
    residual: Option<*const f32>,
    x: Option<[*mut f32; MAX_DEVICES]>,
    /// The norm's weight (one row), its outputs and eps.
    norm: Option<(*const f32, [*mut f32; MAX_DEVICES], f32)>,
}

impl Rows {
    /// The sum in the reference order and the epilogue, element by element.
    ///
    /// # Safety
    /// Every pointer addresses `len` f32 values (the weight `ncols`), readable and writable as
    /// used, with nothing else accessing them. Outputs may alias inputs of the same device
    /// (in-place ops): each element's inputs are read before its outputs are written, and the
    /// norm's second pass reads `x` back from device 0's output.
    unsafe fn compute(&self, len: usize, ncols: usize) {
        let (n, p) = (self.n, &self.parts);
        let mut parts = [0f32; MAX_DEVICES];
        // SAFETY: in bounds of the `len` (or `ncols`) values of the caller's contract.
        unsafe {
            for row in 0..len / ncols {
                let mut sum_sq = 0f64;
                for i in row * ncols..(row + 1) * ncols {
                    for (v, q) in parts.iter_mut().zip(&p[..n]) {
                        *v = *q.add(i);
                    }
                    let s = reference_sum(&parts[..n]).unwrap_or(0.0);
                    if self.keep_sum {
                        p[..n].iter().for_each(|q| *q.add(i) = s);
                    }
                    if let (Some(r), Some(x)) = (self.residual, &self.x) {
                        let v = *r.add(i) + s;
                        x[..n].iter().for_each(|q| *q.add(i) = v);
                        sum_sq += (v * v) as f64;
                    }
                }
                if let (Some((w, z, eps)), Some(x)) = (&self.norm, &self.x) {
                    let scale = rms_scale(sum_sq, ncols, *eps);
                    for c in 0..ncols {
                        let i = row * ncols + c;
                        let v = *x[0].add(i) * scale * *w.add(c);
                        z[..n].iter().for_each(|q| *q.add(i) = v);
                    }
                }
            }
        }
    }
}

/// Whether the staged path can fetch and store `t`: contiguous f32, in any memory.
pub fn stageable(t: Tensor) -> bool {
    t.type_() == GGML_TYPE_F32 && t.is_contiguous()
}

/// Host memory of the staged path, owned by a graph plan and reused by its cuts.
#[derive(Default)]
pub struct Staging {
    /// Each device's partial, then the sum (the same on every device).
    parts: Vec<Vec<f32>>,
    residual: Vec<f32>,
    x: Vec<f32>,
    weight: Vec<f32>,
    z: Vec<f32>,
}

/// [`reduce`] for devices whose memory the host reaches only through the backends (RPC
/// servers, GPUs that do not copy between each other): the partials (and the epilogue's residual
/// and weight, from the first device in host memory, else device 0) are fetched with
/// asynchronous reads, summed by the host with the same arithmetic, and the results sent back
/// with asynchronous writes. One wait per cut; the next cut's first wait also covers this cut's
/// writes, whose data `staging` keeps until then.
pub fn reduce_staged(
    backends: &[Backend],
    targets: &[Tensor],
    epi: Option<&Epilogue>,
    staging: &mut Staging,
) {
    let n = targets.len();
    let len = targets[0].nelements() as usize;
    let ncols = ncols(epi, len);
    let norm = epi.and_then(|e| e.norm.as_ref());
    // the last cut's writes read the staging memory until the backends are synchronized
    for b in backends {
        b.synchronize();
    }
    let st = staging;
    st.parts.resize_with(n, Vec::new);
    st.parts.iter_mut().for_each(|v| v.resize(len, 0.0));
    let get = |b: Backend, t: Tensor, v: &mut Vec<f32>, count: usize| {
        v.resize(count, 0.0);
        // SAFETY: `v` holds `count` f32, the tensor's size (contiguous f32: `stageable`), and
        // stays untouched until the synchronize below.
        unsafe {
            crate::tensor::transfer(
                Via::Backend(b),
                t,
                Host::Dst(v.as_mut_ptr() as *mut c_void),
                0,
                count * 4,
            )
        }
    };
    for (j, (&b, &t)) in backends.iter().zip(targets).enumerate() {
        get(b, t, &mut st.parts[j], len);
    }
    // The epilogue's residual and weight are the same on every device: read from one whose
    // memory is the host's where there is one (a copy in memory, not a device's round trip).
    let near = |ts: &[Tensor]| (0..n).find(|&j| crate::tensor::is_host(ts[j])).unwrap_or(0);
    if let Some(e) = epi {
        let j = near(&e.residual);
        get(backends[j], e.residual[j], &mut st.residual, len);
        st.x.resize(len, 0.0);
    }
    if let Some(m) = norm {
        let j = near(&m.weight);
        get(backends[j], m.weight[j], &mut st.weight, ncols);
        st.z.resize(len, 0.0);
    }
    for b in backends {
        b.synchronize();
    }
    let mut parts = [std::ptr::null_mut(); MAX_DEVICES];
    for (p, v) in parts.iter_mut().zip(st.parts.iter_mut()) {
        *p = v.as_mut_ptr();
    }
    let one = |p: *mut f32| [p; MAX_DEVICES];
    let rows = Rows {
        parts,
        n,
        keep_sum: true,
        residual: epi.map(|_| st.residual.as_ptr()),
        x: epi.map(|_| one(st.x.as_mut_ptr())),
        norm: norm.map(|m| (st.weight.as_ptr(), one(st.z.as_mut_ptr()), m.eps)),
    };
    // SAFETY: the staging vectors hold `len` values (the weight `ncols`), resized above; `x` and
    // `z` are one array each for every device (the same values go to all), written element by
    // element after that element's reads.
    unsafe { rows.compute(len, ncols) };
    let put = |b: Backend, t: Tensor, v: &[f32]| {
        // SAFETY: `v` holds the tensor's size in f32 and is kept unchanged until the backend is
        // synchronized (by the next cut, or before the plan is dropped).
        unsafe {
            crate::tensor::transfer(
                Via::Backend(b),
                t,
                Host::Src(v.as_ptr() as *const c_void),
                0,
                v.len() * 4,
            )
        }
    };
    // the outputs in the order S, X, Z: where two are the same memory the later one stays
    let keep_sum = epi.is_none_or(|e| e.keeps_sum);
    for j in 0..n {
        if keep_sum {
            put(backends[j], targets[j], &st.parts[0]);
        }
        if let Some(e) = epi {
            put(backends[j], e.add_out[j], &st.x);
        }
        if let Some(m) = norm {
            put(backends[j], m.out[j], &st.z);
        }
    }
}
