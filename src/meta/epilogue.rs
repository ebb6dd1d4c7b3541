//! What a cut's AllReduce can compute besides the sum: the nodes right after the cut (the
//! residual add, then the RMS norm times its weight), shared by the paths that run it (our CUDA
//! kernel, the host and staged paths) and the plan that decides it.

use crate::abi::*;

/// What a cut's AllReduce computes besides the sum, in place of the nodes right after the cut
/// (`plan::Fusion`), per device. Our CUDA kernel and the host path run it; on other paths the
/// nodes stay in the sub-graphs.
#[derive(Clone)]
pub struct Epilogue {
    /// The residual added to the sum: each device's copy of the mirrored operand.
    pub residual: Vec<Tensor>,
    /// Where `residual + sum` goes: the add node's tensors.
    pub add_out: Vec<Tensor>,
    pub norm: Option<NormEpilogue>,
    /// The targets keep the sum too (other nodes read it).
    pub keeps_sum: bool,
}

/// `rms_norm(residual + sum) * weight`, per device.
#[derive(Clone)]
pub struct NormEpilogue {
    /// One row of `ncols` values on each device.
    pub weight: Vec<Tensor>,
    /// The multiplication's tensors.
    pub out: Vec<Tensor>,
    pub eps: f32,
}

impl Epilogue {
    /// Every tensor the epilogue reads or writes.
    pub(super) fn tensors(&self) -> impl Iterator<Item = Tensor> + '_ {
        let norm = self.norm.iter().flat_map(|m| m.weight.iter().chain(&m.out));
        self.residual
            .iter()
            .chain(&self.add_out)
            .chain(norm)
            .copied()
    }

    /// Whether the tensors still have the shapes the fusion was decided for (plans outlive
    /// shape changes): every operand as many elements as the sum, rows of the weight's length.
    pub(super) fn fits(&self, sum: Tensor) -> bool {
        let n = sum.nelements();
        let same = |ts: &[Tensor]| ts.iter().all(|t| t.nelements() == n);
        same(&self.residual)
            && same(&self.add_out)
            && self.norm.as_ref().is_none_or(|m| {
                let cols = m.weight[0].nelements();
                same(&m.out) && cols > 0 && n % cols == 0
            })
    }
}
