//! The AllReduce of devices whose memory the host reads and writes (CPU backends, which compute
//! synchronously): after the cut's sub-graphs, the host sums the partials in the reference
//! order and computes the [`Epilogue`] with the CPU backend's own arithmetic (the sum of
//! squares in double precision, `(x * scale) * w`), so that every device gets the bits the
//! copies path and the nodes in the graph would have given it, with none of their copies and
//! graph launches.
//!
//! Tensors above [`HOST_MAX`] bytes per partial take the copies path: its adds run on the CPU
//! backends' threads, this loop on one.

use super::allreduce::Epilogue;
use crate::abi::*;
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
    let n = targets.len();
    let len = targets[0].nelements() as usize;
    let p = data(targets);
    let keep_sum = epi.is_none_or(|e| e.keeps_sum);
    let residual = epi.map(|e| e.residual[0].data() as *const f32);
    let x = epi.map(|e| data(&e.add_out));
    let norm = epi.and_then(|e| e.norm.as_ref());
    let ncols = norm
        .map_or(len, |m| m.weight[0].nelements() as usize)
        .max(1);
    let mut parts = [0f32; MAX_DEVICES];
    // SAFETY: every pointer is the data of a live, contiguous f32 tensor of `len` elements in
    // host memory (`supports`; the epilogue's tensors have the targets' element count, the
    // weight one row of `ncols`: `Epilogue::fits`), and the backends are synchronized. Outputs
    // may alias inputs of the same device (in-place ops): each element's inputs are read before
    // its outputs are written, and the norm's second pass reads `x` back from device 0's output.
    unsafe {
        for row in 0..len / ncols {
            let mut sum_sq = 0f64;
            for i in row * ncols..(row + 1) * ncols {
                for (v, q) in parts.iter_mut().zip(&p[..n]) {
                    *v = *q.add(i);
                }
                let s = reference_sum(&parts[..n]).unwrap_or(0.0);
                if keep_sum {
                    p[..n].iter().for_each(|q| *q.add(i) = s);
                }
                if let (Some(r), Some(x)) = (residual, &x) {
                    let v = *r.add(i) + s;
                    x[..n].iter().for_each(|q| *q.add(i) = v);
                    sum_sq += (v * v) as f64;
                }
            }
            if let (Some(m), Some(x)) = (norm, &x) {
                let scale = rms_scale(sum_sq, ncols, m.eps);
                let w = m.weight[0].data() as *const f32;
                let z = data(&m.out);
                for c in 0..ncols {
                    let i = row * ncols + c;
                    let v = *x[0].add(i) * scale * *w.add(c);
                    z[..n].iter().for_each(|q| *q.add(i) = v);
                }
            }
        }
    }
}
