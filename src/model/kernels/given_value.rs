//! LayerNorm and softmax for training where the fused kernels (CPU f32, CUDA f32) do not run
//! (other dtypes and devices, or `XSENT_KERNELS=candle`): the value from candle's one-kernel op (`layer_norm`,
//! `softmax_last_dim`, which have no backward), the backward from the closed form in a few
//! candle ops. Candle's differentiable compositions record about 15 ops for a LayerNorm and 7 for
//! a softmax, each with its own backward; on a GPU every op is a kernel launch and an allocation
//! issued by the CPU, which bounds the training step there (docs/gpu.md).
//!
//! The op's output is a copy of the fused op's value (a custom op must return new storage; one
//! device copy, which the taken value then frees).

use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, CustomOp1, CustomOp3, Layout, Shape, Storage, Tensor, D};
use std::sync::Mutex;

/// The value an op returns once, taken at its forward.
struct Value(Mutex<Option<Tensor>>);

impl Value {
    fn new(y: Tensor) -> Self {
        Self(Mutex::new(Some(y)))
    }

    /// The value's storage and shape, checked to be the whole storage.
    fn take(&self, op: &str) -> candle_core::Result<Tensor> {
        let y = self.0.lock().map_err(|_| candle_core::Error::Msg(format!("{op}: poisoned")))?.take();
        let Some(y) = y else { candle_core::bail!("{op}: the forward ran twice") };
        let l = y.layout();
        if !l.is_contiguous() || l.start_offset() != 0 {
            candle_core::bail!("{op}: the fused op's value is not a whole contiguous tensor");
        }
        Ok(y)
    }

    fn cpu(&self, op: &str) -> candle_core::Result<(CpuStorage, Shape)> {
        let y = self.take(op)?;
        let (s, l) = y.storage_and_layout();
        let Storage::Cpu(s) = &*s else { candle_core::bail!("{op}: the value is not on the CPU") };
        Ok((s.try_clone(l)?, l.shape().clone()))
    }

    #[cfg(feature = "cuda")]
    fn cuda(&self, op: &str) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        let y = self.take(op)?;
        let (s, l) = y.storage_and_layout();
        let Storage::Cuda(s) = &*s else { candle_core::bail!("{op}: the value is not on the GPU") };
        Ok((s.try_clone(l)?, l.shape().clone()))
    }
}

/// LayerNorm over the last dimension with the value of candle's fused `layer_norm`.
struct LayerNorm {
    value: Value,
    eps: f32,
}

impl CustomOp3 for LayerNorm {
    fn name(&self) -> &'static str {
        "layer-norm-given-value"
    }

    fn cpu_fwd(
        &self,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        self.value.cpu(self.name())
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        _: &candle_core::CudaStorage,
        _: &Layout,
        _: &candle_core::CudaStorage,
        _: &Layout,
        _: &candle_core::CudaStorage,
        _: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        self.value.cuda(self.name())
    }

    /// With `x̂ = (x − mean)·r`, `r = 1/√(var + eps)` and `g = dy·w`:
    /// `dx = r·(g − mean(g) − x̂·mean(g·x̂))`, `dw = Σ dy·x̂`, `db = Σ dy` over the rows.
    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        b: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let n = x.dim(D::Minus1)?;
        let rows = x.elem_count() / n.max(1);
        let (x2, dy) = (x.reshape((rows, n))?, grad.reshape((rows, n))?);
        let xc = x2.broadcast_sub(&x2.mean_keepdim(1)?)?;
        let r = (xc.sqr()?.mean_keepdim(1)? + self.eps as f64)?.sqrt()?.recip()?;
        let xhat = xc.broadcast_mul(&r)?;
        let g = dy.broadcast_mul(w)?;
        let dx = g
            .broadcast_sub(&g.mean_keepdim(1)?)?
            .sub(&xhat.broadcast_mul(&(&g * &xhat)?.mean_keepdim(1)?)?)?
            .broadcast_mul(&r)?;
        let dw = if w.track_op() { Some((&dy * &xhat)?.sum(0)?) } else { None };
        let db = if b.track_op() { Some(dy.sum(0)?) } else { None };
        Ok((Some(dx.reshape(x.shape())?), dw, db))
    }
}

/// LayerNorm over the last dimension of `x` (any dtype candle's fused op takes) for training,
/// with the backward in closed form.
pub fn layer_norm(x: &Tensor, w: &Tensor, b: &Tensor, eps: f32) -> candle_core::Result<Tensor> {
    let y = candle_nn::ops::layer_norm(&x.contiguous()?, w, b, eps)?;
    x.apply_op3(w, b, LayerNorm { value: Value::new(y), eps })
}

/// Softmax over the last dimension with the value of candle's fused `softmax_last_dim`.
struct Softmax {
    value: Value,
}

impl CustomOp1 for Softmax {
    fn name(&self) -> &'static str {
        "softmax-given-value"
    }

    fn cpu_fwd(&self, _: &CpuStorage, _: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        self.value.cpu(self.name())
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        _: &candle_core::CudaStorage,
        _: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        self.value.cuda(self.name())
    }

    /// `dx = y·dy − y·Σ(y·dy)` over the last dimension.
    fn bwd(&self, _arg: &Tensor, y: &Tensor, grad: &Tensor) -> candle_core::Result<Option<Tensor>> {
        let ydy = (y * grad)?;
        Ok(Some(ydy.sub(&y.broadcast_mul(&ydy.sum_keepdim(D::Minus1)?)?)?))
    }
}

/// Softmax over the last dimension of `x` for training, with the backward in closed form.
pub fn softmax_last_dim(x: &Tensor) -> candle_core::Result<Tensor> {
    let y = candle_nn::ops::softmax_last_dim(&x.contiguous()?)?;
    x.apply_op1(Softmax { value: Value::new(y) })
}

#[cfg(test)]
mod tests {
    use super::super::tests::{max_diff, scores_and_bias};
    use super::*;
    use anyhow::Result;
    use candle_core::{Device, Var};

    /// Values and gradients of every input equal to candle's differentiable composition within
    /// rounding, on a row of large mean and small spread too.
    #[test]
    fn layer_norm_matches_candles_composition() -> Result<()> {
        let dev = Device::Cpu;
        let (rows, n) = (11, 37);
        let xs: Vec<f32> = (0..rows * n)
            .map(|i| ((i * 7919) % 211) as f32 / 17.0 - 5.0 + if i / n == 3 { 40.0 } else { 0.0 })
            .collect();
        let x = Var::from_vec(xs, (rows, n), &dev)?;
        let w = Var::from_vec((0..n).map(|i| 0.5 + i as f32 / 40.0).collect::<Vec<f32>>(), n, &dev)?;
        let b = Var::from_vec((0..n).map(|i| i as f32 / 80.0 - 0.2).collect::<Vec<f32>>(), n, &dev)?;
        let wts = Tensor::from_vec(
            (0..rows * n).map(|i| ((i * 31) % 17) as f32 - 8.0).collect::<Vec<f32>>(),
            (rows, n),
            &dev,
        )?;
        let ours = layer_norm(x.as_tensor(), w.as_tensor(), b.as_tensor(), 1e-12)?;
        let theirs = candle_nn::ops::layer_norm_slow(x.as_tensor(), w.as_tensor(), b.as_tensor(), 1e-12)?;
        // Candle's fused op takes the variance as E[x²] − mean² in f32, one pass: the row of mean
        // 40 loses digits there (4.3e-5 measured).
        assert!(max_diff(&ours, &theirs)? < 1e-4, "values differ by {}", max_diff(&ours, &theirs)?);
        let (ga, gb) = (ours.mul(&wts)?.sum_all()?.backward()?, theirs.mul(&wts)?.sum_all()?.backward()?);
        for v in [&x, &w, &b] {
            let (a, b) = (ga.get(v.as_tensor()).expect("a gradient"), gb.get(v.as_tensor()).expect("a gradient"));
            let scale = b.abs()?.max_keepdim(0)?.max_all()?.to_scalar::<f32>()?.max(1.0);
            assert!(max_diff(a, b)? < 2e-5 * scale, "gradients differ by {} (scale {scale})", max_diff(a, b)?);
        }
        Ok(())
    }

    #[test]
    fn softmax_matches_candles_composition() -> Result<()> {
        let dev = Device::Cpu;
        let (scores, bias) = scores_and_bias(&dev)?;
        let x = Var::from_tensor(&scores.broadcast_add(&bias)?)?;
        let wts = Tensor::from_vec(
            (0..x.elem_count()).map(|i| ((i * 31) % 17) as f32 - 8.0).collect::<Vec<f32>>(),
            x.shape(),
            &dev,
        )?;
        let ours = softmax_last_dim(x.as_tensor())?;
        let theirs = candle_nn::ops::softmax(x.as_tensor(), D::Minus1)?;
        assert!(max_diff(&ours, &theirs)? < 1e-6);
        let (ga, gb) = (ours.mul(&wts)?.sum_all()?.backward()?, theirs.mul(&wts)?.sum_all()?.backward()?);
        let (a, b) = (ga.get(x.as_tensor()).expect("a gradient"), gb.get(x.as_tensor()).expect("a gradient"));
        assert!(max_diff(a, b)? < 1e-5, "gradients differ by {}", max_diff(a, b)?);
        Ok(())
    }
}
