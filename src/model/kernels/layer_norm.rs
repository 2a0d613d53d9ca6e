//! LayerNorm: for training a fused forward and a fused backward; for inference the residual
//! sum and the norm in one op.

use anyhow::Result;
use candle_core::{CpuStorage, CustomOp2, CustomOp3, Layout, Shape, Tensor};

use super::{cpu_f32, f32_or_bf16, fused_train_bf16, one_f32, two_f32, widened};

/// A `[n]` f32 vector for rows of `n` in an input of `len` values (its layout `lx`), checked.
fn vec_for<'a>(
    op: &str,
    what: &str,
    len: usize,
    lx: &Layout,
    v: &'a CpuStorage,
    lv: &Layout,
) -> candle_core::Result<&'a [f32]> {
    let n = *lx.dims().last().unwrap_or(&1);
    let vs = one_f32(op, v, lv)?;
    if n == 0 || vs.len() != n || lv.dims().len() != 1 || !len.is_multiple_of(n) {
        candle_core::bail!("{op}: a {what} of {n} elements expected, got shape {:?}", lv.dims());
    }
    Ok(vs)
}

fn same_len(op: &str, a: usize, b: usize) -> candle_core::Result<()> {
    if a != b {
        candle_core::bail!("{op}: inputs of {a} and {b} elements");
    }
    Ok(())
}

/// A row normalised, `x̂ = (x − mean) / √(var + eps)`, into `out`; returns `1/√(var + eps)`.
/// Mean and variance in two
/// passes as candle's `layer_norm_slow` computes them, but in f64 (a row of large mean and small
/// spread loses digits to `x − mean` in f32).
#[inline(always)]
fn normalise_row(row: &[f32], eps: f32, out: &mut [f32]) -> f32 {
    let n = row.len() as f64;
    let mean = row.iter().map(|&x| x as f64).sum::<f64>() / n;
    let var = row.iter().map(|&x| (x as f64 - mean) * (x as f64 - mean)).sum::<f64>() / n;
    let rstd = 1.0 / (var + eps as f64).sqrt();
    out.iter_mut().zip(row).for_each(|(o, &x)| *o = ((x as f64 - mean) * rstd) as f32);
    rstd as f32
}

/// LayerNorm over the last dimension, `(x − mean) / √(var + eps) · w + b`, whose backward is
/// [`LayerNormGradX`] and [`LayerNormGradWB`] (the statistics are recomputed from `x`).
struct LayerNormTrain {
    eps: f32,
}

impl CustomOp3 for LayerNormTrain {
    fn name(&self) -> &'static str {
        "fast-layer-norm-train"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (x, bf16) = widened(self.name(), s1, l1)?;
        let w = vec_for(self.name(), "weight", x.len(), l1, s2, l2)?;
        let b = vec_for(self.name(), "bias", x.len(), l1, s3, l3)?;
        let n = w.len();
        let mut out = vec![0f32; x.len()];
        for (o, row) in out.chunks_exact_mut(n).zip(x.chunks_exact(n)) {
            normalise_row(row, self.eps, o);
            for i in 0..n {
                o[i] = o[i] * w[i] + b[i];
            }
        }
        Ok((f32_or_bf16(out, bf16), l1.shape().clone()))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s1: &candle_core::CudaStorage,
        l1: &Layout,
        s2: &candle_core::CudaStorage,
        l2: &Layout,
        s3: &candle_core::CudaStorage,
        l3: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        crate::gpu::layer_norm::forward((s1, l1), (s2, l2), (s3, l3), self.eps)
    }

    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        b: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let (x, g) = (x.contiguous()?, grad.contiguous()?);
        let dx = if x.track_op() {
            Some(x.apply_op3_no_bwd(&w.contiguous()?, &g, &LayerNormGradX { eps: self.eps })?)
        } else {
            None
        };
        let (dw, db) = if w.track_op() || b.track_op() {
            let wb = x.apply_op2_no_bwd(&g, &LayerNormGradWB { eps: self.eps })?;
            (w.track_op().then(|| wb.get(0)).transpose()?, b.track_op().then(|| wb.get(1)).transpose()?)
        } else {
            (None, None)
        };
        Ok((dx, dw, db))
    }
}

/// LayerNorm's gradient for its input, from `x`, the weight `w` and the output gradient `g`:
/// with `x̂ = (x − mean)·rstd` and `d = g ⊙ w`, `rstd · (d − mean(d) − x̂ · mean(d ⊙ x̂))` per row.
struct LayerNormGradX {
    eps: f32,
}

impl CustomOp3 for LayerNormGradX {
    fn name(&self) -> &'static str {
        "fast-layer-norm-grad-x"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (x, bf16) = widened(self.name(), s1, l1)?;
        let (g, _) = widened(self.name(), s3, l3)?;
        let w = vec_for(self.name(), "weight", x.len(), l1, s2, l2)?;
        same_len(self.name(), x.len(), g.len())?;
        let n = w.len();
        let mut out = vec![0f32; x.len()];
        let (mut d, mut xhat) = (vec![0f32; n], vec![0f32; n]);
        for ((o, row), grow) in out.chunks_exact_mut(n).zip(x.chunks_exact(n)).zip(g.chunks_exact(n)) {
            let rstd = normalise_row(row, self.eps, &mut xhat);
            let (mut sum_d, mut sum_dx) = (0f64, 0f64);
            for i in 0..n {
                d[i] = grow[i] * w[i];
                sum_d += d[i] as f64;
                sum_dx += (d[i] * xhat[i]) as f64;
            }
            let (mean_d, mean_dx) = ((sum_d / n as f64) as f32, (sum_dx / n as f64) as f32);
            for i in 0..n {
                o[i] = rstd * (d[i] - mean_d - xhat[i] * mean_dx);
            }
        }
        Ok((f32_or_bf16(out, bf16), l1.shape().clone()))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s1: &candle_core::CudaStorage,
        l1: &Layout,
        s2: &candle_core::CudaStorage,
        l2: &Layout,
        s3: &candle_core::CudaStorage,
        l3: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        crate::gpu::layer_norm::grad_x((s1, l1), (s2, l2), (s3, l3), self.eps)
    }
}

/// LayerNorm's gradients for its weight and bias, from `x` and the output gradient `g`: a
/// `[2, n]` tensor holding `Σ g ⊙ x̂` and `Σ g` over the rows (accumulated in f64).
struct LayerNormGradWB {
    eps: f32,
}

impl CustomOp2 for LayerNormGradWB {
    fn name(&self) -> &'static str {
        "fast-layer-norm-grad-wb"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let ((x, _), (g, _)) = (widened(self.name(), s1, l1)?, widened(self.name(), s2, l2)?);
        same_len(self.name(), x.len(), g.len())?;
        let n = (*l1.dims().last().unwrap_or(&1)).max(1);
        let (mut dw, mut db, mut xhat) = (vec![0f64; n], vec![0f64; n], vec![0f32; n]);
        for (row, grow) in x.chunks_exact(n).zip(g.chunks_exact(n)) {
            normalise_row(row, self.eps, &mut xhat);
            for i in 0..n {
                dw[i] += (grow[i] * xhat[i]) as f64;
                db[i] += grow[i] as f64;
            }
        }
        let out: Vec<f32> = dw.into_iter().chain(db).map(|v| v as f32).collect();
        Ok((CpuStorage::F32(out), Shape::from((2, n))))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s1: &candle_core::CudaStorage,
        l1: &Layout,
        s2: &candle_core::CudaStorage,
        l2: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        crate::gpu::layer_norm::grad_wb((s1, l1), (s2, l2), self.eps)
    }
}

/// LayerNorm over the last dimension for training: fused forward and backward on the CPU and
/// CUDA (src/gpu/layer_norm.cu) for an f32 or bf16 `x` with f32 weights, elsewhere candle's fused
/// forward and a backward in closed form ([`super::given_value`]).
pub fn layer_norm_train(x: &Tensor, w: &Tensor, b: &Tensor, eps: f32) -> Result<Tensor> {
    if fused_train_bf16(&[x, w, b]) {
        // f32, or (bf16 training) a bf16 `x` and output with f32 weights: the same bits as the
        // f32 op on `x` widened, its output rounded, in one op instead of three.
        Ok(x.contiguous()?.apply_op3(&w.contiguous()?, &b.contiguous()?, LayerNormTrain { eps })?)
    } else if x.dtype() != w.dtype() {
        // bf16 training where the op does not run: statistics, scale and shift in the weights'
        // dtype, the output back in the input's.
        Ok(layer_norm_train(&x.to_dtype(w.dtype())?, w, b, eps)?.to_dtype(x.dtype())?)
    } else {
        Ok(super::given_value::layer_norm(x, w, b, eps)?)
    }
}

/// `layer_norm(a + x)` for inference: the residual sum and candle's `layer_norm` in one op. The
/// arithmetic is candle's (`candle_nn::ops::layer_norm` on CPU f32: sums of the row and of its
/// squares in f32, in order; `var = E[x²] − mean²`), so the results are the same bits; it saves
/// the sum's separate pass and buffer, and runs eight rows' sums side by side.
struct AddLayerNorm<'a> {
    w: &'a [f32],
    b: &'a [f32],
    eps: f32,
}

impl CustomOp2 for AddLayerNorm<'_> {
    fn name(&self) -> &'static str {
        "fast-add-layer-norm"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (a, x) = two_f32(self.name(), s1, l1, s2, l2)?;
        let n = self.w.len();
        if l1.dims() != l2.dims() || l1.dims().last() != Some(&n) || self.b.len() != n {
            candle_core::bail!(
                "{}: [.., {n}] inputs of one shape expected, got {:?} and {:?}",
                self.name(),
                l1.dims(),
                l2.dims()
            );
        }
        Ok((CpuStorage::F32(add_norm_rows(a, x, self.w, self.b, self.eps)), l1.shape().clone()))
    }
}

super::vectorised_fn! {
    /// `a + x`, then each row of `w.len()` normalised as candle does (see [`AddLayerNorm`]).
    fn add_norm_rows(a: &[f32], x: &[f32], w: &[f32], b: &[f32], eps: f32) -> Vec<f32> {
        let n = w.len().max(1);
        let len = a.len().min(x.len()) / n * n;
        let mut out = Vec::with_capacity(len);
        for ((o, &a), &x) in out.spare_capacity_mut()[..len].iter_mut().zip(a).zip(x) {
            o.write(a + x);
        }
        // SAFETY: the loop wrote all `len` values.
        unsafe { out.set_len(len) };
        let mut groups = out.chunks_exact_mut(8 * n);
        for g in &mut groups {
            norm_group::<8>(g, w, b, eps);
        }
        for row in groups.into_remainder().chunks_exact_mut(n) {
            norm_group::<1>(row, w, b, eps);
        }
        out
    }
}

/// `G` rows of `w.len()` normalised in place, each with candle's arithmetic in its order; the
/// rows' sums (chains of dependent additions) run side by side.
#[inline(always)]
fn norm_group<const G: usize>(rows: &mut [f32], w: &[f32], b: &[f32], eps: f32) {
    let n = w.len();
    let (mut sum, mut sum2) = ([0f32; G], [0f32; G]);
    for i in 0..n {
        for g in 0..G {
            let v = rows[g * n + i];
            sum[g] += v;
            sum2[g] += v * v;
        }
    }
    for (g, row) in rows.chunks_exact_mut(n).enumerate() {
        let mean = sum[g] / n as f32;
        let var = sum2[g] / n as f32 - mean * mean;
        let inv_std = (var + eps).sqrt().recip();
        for ((d, &alpha), &beta) in row.iter_mut().zip(w).zip(b) {
            *d = (*d - mean) * inv_std * alpha + beta;
        }
    }
}

/// LayerNorm of `a + x` over the last dimension, for inference: one fused op on CPU f32 (same
/// bits as candle's add and `layer_norm`), candle's ops elsewhere.
pub fn add_layer_norm_infer(a: &Tensor, x: &Tensor, w: &Tensor, b: &Tensor, eps: f32) -> Result<Tensor> {
    if cpu_f32(&[a, x, w, b]) && a.dims() == x.dims() && w.rank() == 1 && b.dims() == w.dims() {
        let (w, b) = (w.to_vec1::<f32>()?, b.to_vec1::<f32>()?);
        Ok(a.contiguous()?.apply_op2_no_bwd(&x.contiguous()?, &AddLayerNorm { w: &w, b: &b, eps })?)
    } else {
        Ok(candle_nn::ops::layer_norm(&(a + x)?.contiguous()?, w, b, eps)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fused op gives exactly the bits of candle's add then `layer_norm`, on 21 rows (two
    /// groups of eight and five single rows) of a width that is not a multiple of 16.
    #[test]
    fn add_layer_norm_is_candles_bit_for_bit() -> Result<()> {
        let dev = candle_core::Device::Cpu;
        let (rows, n) = (21, 37);
        let a: Vec<f32> = (0..rows * n).map(|i| ((i * 7919) % 211) as f32 / 17.0 - 5.0).collect();
        let x: Vec<f32> = (0..rows * n).map(|i| ((i * 104_729) % 307) as f32 / 29.0 + 3.0).collect();
        let a = Tensor::from_vec(a, (rows, n), &dev)?;
        let x = Tensor::from_vec(x, (rows, n), &dev)?;
        let w = Tensor::from_vec((0..n).map(|i| 0.5 + i as f32 / 40.0).collect::<Vec<f32>>(), n, &dev)?;
        let b = Tensor::from_vec((0..n).map(|i| i as f32 / 80.0 - 0.2).collect::<Vec<f32>>(), n, &dev)?;
        let got = add_layer_norm_infer(&a, &x, &w, &b, 1e-12)?.flatten_all()?.to_vec1::<f32>()?;
        let want = candle_nn::ops::layer_norm(&(&a + &x)?, &w, &b, 1e-12)?.flatten_all()?.to_vec1::<f32>()?;
        assert_eq!(got.len(), want.len());
        assert!(got.iter().zip(&want).all(|(g, w)| g.to_bits() == w.to_bits()), "fused add + LayerNorm differs");
        // Shapes that do not fit are refused, not misread.
        let short = Tensor::zeros((rows, n - 1), candle_core::DType::F32, &dev)?;
        assert!(add_layer_norm_infer(&short, &short, &w, &b, 1e-12).is_err());
        Ok(())
    }

    /// bf16 training's LayerNorm (a bf16 activation, f32 weights): the one op gives the bits of
    /// the cast path (widen, the f32 op, round), values and all three gradients, on rows of a
    /// large mean too; with the kernels off (`XSENT_KERNELS=candle`) it takes the cast path.
    #[test]
    fn bf16_input_equals_the_f32_op_on_its_widened_values() -> Result<()> {
        use candle_core::{DType, Var};
        let dev = candle_core::Device::Cpu;
        let (rows, n) = (9, 37);
        let x: Vec<f32> =
            (0..rows * n).map(|i| ((i * 7919) % 211) as f32 / 17.0 - 5.0 + (i / n) as f32 * 9.0).collect();
        let w: Vec<f32> = (0..n).map(|i| 1.0 + ((i * 31) % 13) as f32 / 20.0).collect();
        let b: Vec<f32> = (0..n).map(|i| ((i * 17) % 11) as f32 / 10.0 - 0.5).collect();
        let up: Vec<f32> = (0..rows * n).map(|i| ((i * 104_729) % 307) as f32 / 150.0 - 1.0).collect();
        let up = Tensor::from_vec(up, (rows, n), &dev)?.to_dtype(DType::BF16)?;
        let run = |widen: bool| -> Result<Vec<Vec<f32>>> {
            let xv = Var::from_tensor(&Tensor::from_vec(x.clone(), (rows, n), &dev)?.to_dtype(DType::BF16)?)?;
            let wv = Var::from_tensor(&Tensor::from_vec(w.clone(), n, &dev)?)?;
            let bv = Var::from_tensor(&Tensor::from_vec(b.clone(), n, &dev)?)?;
            let y = if widen {
                layer_norm_train(&xv.as_tensor().to_dtype(DType::F32)?, wv.as_tensor(), bv.as_tensor(), 1e-12)?
                    .to_dtype(DType::BF16)?
            } else {
                layer_norm_train(xv.as_tensor(), wv.as_tensor(), bv.as_tensor(), 1e-12)?
            };
            assert_eq!(y.dtype(), DType::BF16);
            let g = (&y * &up)?.to_dtype(DType::F32)?.sum_all()?.backward()?;
            let mut out = vec![y.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?];
            for v in [&xv, &wv, &bv] {
                let gv = g.get(v.as_tensor()).expect("a gradient");
                assert_eq!(gv.dtype(), v.dtype());
                out.push(gv.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?);
            }
            Ok(out)
        };
        let (one, cast) = (run(false)?, run(true)?);
        for (what, a, b) in [("values", 0), ("x's gradient", 1), ("w's gradient", 2), ("b's gradient", 3)]
            .map(|(w, i)| (w, &one[i], &cast[i]))
        {
            assert!(a.iter().zip(b).all(|(p, q)| p.to_bits() == q.to_bits()), "{what} differ");
        }
        let off = super::super::with_candle_ops(|| run(false))?;
        for (a, b) in off.iter().zip(&one) {
            let worst = a.iter().zip(b).map(|(p, q)| (p - q).abs() / q.abs().max(1.0)).fold(0f32, f32::max);
            assert!(worst < 2e-2, "with the kernels off: {worst} from the fused op (bf16 rounding allowed)");
        }
        Ok(())
    }
}
