//! Dropout's product with its mask.

use anyhow::Result;
use candle_core::{CpuStorage, CustomOp2, Layout, Shape, Tensor};

use super::{cpu_f32, two_f32};

/// `x ⊙ mask` for dropout (the mask holds 0 or the keep scale), whose backward gives `x` the
/// gradient times the mask and the mask, drawn by the caller, none (candle's `mul` would also
/// compute the mask's gradient, a full-size product and sum wasted per dropout).
struct MaskMul;

impl CustomOp2 for MaskMul {
    fn name(&self) -> &'static str {
        "fast-mask-mul"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        if l1.dims() != l2.dims() {
            candle_core::bail!(
                "{}: a mask of shape {:?} for an input of shape {:?}",
                self.name(),
                l2.dims(),
                l1.dims()
            );
        }
        let (x, m) = two_f32(self.name(), s1, l1, s2, l2)?;
        Ok((CpuStorage::F32(x.iter().zip(m).map(|(x, m)| x * m).collect()), l1.shape().clone()))
    }

    fn bwd(
        &self,
        x: &Tensor,
        mask: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>)> {
        Ok((if x.track_op() { Some(grad.contiguous()?.apply_op2_no_bwd(mask, &MaskMul)?) } else { None }, None))
    }
}

/// `x ⊙ mask` with a dropout mask of `x`'s shape (see [`MaskMul`]): a fused op on CPU f32 for a
/// mask that needs no gradient, candle's `mul` elsewhere.
pub fn dropout_mul(x: &Tensor, mask: &Tensor) -> Result<Tensor> {
    if cpu_f32(&[x, mask]) && x.dims() == mask.dims() && !mask.track_op() {
        Ok(x.contiguous()?.apply_op2(&mask.contiguous()?, MaskMul)?)
    } else {
        Ok(x.mul(mask)?)
    }
}
