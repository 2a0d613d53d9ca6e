//! LayerNorm for training: a fused forward and a fused backward.

use anyhow::Result;
use candle_core::{CpuStorage, CustomOp2, CustomOp3, Layout, Shape, Tensor};

use super::{cpu_f32, one_f32, two_f32};

/// The rows of `x` (`[…, n]`) and a `[n]` vector's data, checked to fit.
fn rows_and_vec<'a>(
    op: &str,
    x: (&'a CpuStorage, &Layout),
    v: (&'a CpuStorage, &Layout),
) -> candle_core::Result<(&'a [f32], &'a [f32], usize)> {
    let n = *x.1.dims().last().unwrap_or(&1);
    let (xs, vs) = (one_f32(op, x.0, x.1)?, one_f32(op, v.0, v.1)?);
    if n == 0 || vs.len() != n || v.1.dims().len() != 1 {
        candle_core::bail!("{op}: a vector of {n} elements expected, got shape {:?}", v.1.dims());
    }
    Ok((xs, vs, n))
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
        let (x, w, n) = rows_and_vec(self.name(), (s1, l1), (s2, l2))?;
        let (_, b, _) = rows_and_vec(self.name(), (s1, l1), (s3, l3))?;
        let mut out = vec![0f32; x.len()];
        for (o, row) in out.chunks_exact_mut(n).zip(x.chunks_exact(n)) {
            normalise_row(row, self.eps, o);
            for i in 0..n {
                o[i] = o[i] * w[i] + b[i];
            }
        }
        Ok((CpuStorage::F32(out), l1.shape().clone()))
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
        let (_, w, n) = rows_and_vec(self.name(), (s1, l1), (s2, l2))?;
        let (x, g) = two_f32(self.name(), s1, l1, s3, l3)?;
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
        Ok((CpuStorage::F32(out), l1.shape().clone()))
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
        let (x, g) = two_f32(self.name(), s1, l1, s2, l2)?;
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
}

/// LayerNorm over the last dimension for training: fused forward and backward on CPU f32,
/// candle's differentiable composition (`layer_norm_slow`) elsewhere.
pub fn layer_norm_train(x: &Tensor, w: &Tensor, b: &Tensor, eps: f32) -> Result<Tensor> {
    if cpu_f32(&[x, w, b]) {
        Ok(x.contiguous()?.apply_op3(&w.contiguous()?, &b.contiguous()?, LayerNormTrain { eps })?)
    } else {
        Ok(candle_nn::ops::layer_norm_slow(x, w, b, eps)?)
    }
}
