//! Attention's masked softmax, and the exp approximation it uses.

use anyhow::Result;
use candle_core::{CpuStorage, CustomOp2, Layout, Shape, Tensor};

use super::{cpu_f32, fused_train, one_f32, two_f32};

/// `e^x` for f32 by range reduction `x = n·ln2 + r` and a degree-6 polynomial for `e^r`
/// (about 1 ulp); 0 below -87.3 (where f32 `e^x` underflows), written so that it vectorises.
#[inline(always)]
pub fn exp_f32(x: f32) -> f32 {
    let underflow = x < -87.3;
    let x = x.clamp(-87.3, 88.7);
    let n = round_half_away(x * std::f32::consts::LOG2_E);
    // r = x - n·ln2 in two steps (Cody-Waite) to keep it exact enough.
    let r = x - n * 0.693_145_75 - n * 1.428_606_8e-6;
    let mut p = 1.0 / 720.0;
    p = p * r + 1.0 / 120.0;
    p = p * r + 1.0 / 24.0;
    p = p * r + 1.0 / 6.0;
    p = p * r + 0.5;
    p = p * r + 1.0;
    p = p * r + 1.0;
    // `n` is a whole number in [-126, 128] (NaN only for a NaN `x`, which `p` carries on): its
    // bits after adding 1.5·2²³ hold it, as for `quantize_one` (a float-to-int cast is done one
    // value at a time).
    const MAGIC: f32 = 12_582_912.0;
    let ni = ((n + MAGIC).to_bits() as i32).wrapping_sub(MAGIC.to_bits() as i32);
    let scale = f32::from_bits((ni.wrapping_add(127) as u32) << 23);
    if underflow {
        0.0
    } else {
        p * scale
    }
}

/// `v.round()` (halves away from zero) with `trunc`, which vectorises where `round` is a library
/// call: `v - trunc(v)` is exact, and is at least one half exactly when `round` moves away from
/// zero. (A zero keeps or loses its sign; `exp_f32` gives the same either way.)
#[inline(always)]
fn round_half_away(v: f32) -> f32 {
    let t = v.trunc();
    if (v - t).abs() >= 0.5 {
        t + 1f32.copysign(v)
    } else {
        t
    }
}

super::vectorised_fn! {
    /// `y ⊙ (g − Σ g⊙y)` for each row of `n` (see [`SoftmaxGrad`]).
    fn softmax_grad_rows(out: &mut [f32], y: &[f32], g: &[f32], n: usize) {
        for ((o, y), g) in out.chunks_exact_mut(n).zip(y.chunks_exact(n)).zip(g.chunks_exact(n)) {
            let dot: f32 = y.iter().zip(g).map(|(y, g)| y * g).sum();
            for i in 0..n {
                o[i] = y[i] * (g[i] - dot);
            }
        }
    }
}

super::vectorised_fn! {
    /// Softmax of each row of `lk` scores in `x` plus its bias row: the bias of `[B, 1, 1, Lk]`
    /// for row `r` is row `r / rows_per_bias` (see [`MaskedSoftmax`]).
    fn softmax_rows(x: &[f32], bias: &[f32], rows_per_bias: usize, lk: usize) -> Vec<f32> {
        let lk = lk.max(1);
        let mut out = Vec::with_capacity(x.len());
        for (r, (o, row)) in out.spare_capacity_mut()[..x.len()].chunks_exact_mut(lk).zip(x.chunks_exact(lk)).enumerate() {
            let bias = &bias[(r / rows_per_bias) * lk..][..lk];
            for ((o, &x), &b) in o.iter_mut().zip(row).zip(bias) {
                o.write(x + b);
            }
        }
        // SAFETY: `x.len()` is a multiple of `lk` (the caller's `[B, H, Lq, Lk]`), all written.
        unsafe { out.set_len(x.len() / lk * lk) };
        let mut groups = out.chunks_exact_mut(8 * lk);
        for g in &mut groups {
            softmax_group::<8>(g, lk);
        }
        for row in groups.into_remainder().chunks_exact_mut(lk) {
            softmax_group::<1>(row, lk);
        }
        out
    }
}

/// Softmax of `G` rows of `lk` in place. Each row's maximum and sum are taken in the row's order
/// (the same bits as one row at a time), but the `G` rows' chains run side by side: one row's sum
/// is a chain of dependent additions, and rows are short (a batch's tokens).
#[inline(always)]
fn softmax_group<const G: usize>(rows: &mut [f32], lk: usize) {
    let mut max = [f32::NEG_INFINITY; G];
    let mut sum = [0f32; G];
    for i in 0..lk {
        for g in 0..G {
            max[g] = max[g].max(rows[g * lk + i]);
        }
    }
    for (g, row) in rows.chunks_exact_mut(lk).enumerate() {
        row.iter_mut().for_each(|x| *x = exp_f32(*x - max[g]));
    }
    for i in 0..lk {
        for g in 0..G {
            sum[g] += rows[g * lk + i];
        }
    }
    for (g, row) in rows.chunks_exact_mut(lk).enumerate() {
        let inv = 1.0 / sum[g];
        row.iter_mut().for_each(|x| *x *= inv);
    }
}

/// Softmax backward from the output y and the gradient g: `y ⊙ (g − Σ g⊙y)` per row.
struct SoftmaxGrad;

impl CustomOp2 for SoftmaxGrad {
    fn name(&self) -> &'static str {
        "fast-softmax-grad"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (y, g) = two_f32(self.name(), s1, l1, s2, l2)?;
        let n = (*l1.dims().last().unwrap_or(&1)).max(1);
        let mut out = vec![0f32; y.len()];
        softmax_grad_rows(&mut out, y, g, n);
        Ok((CpuStorage::F32(out), l1.shape().clone()))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s1: &candle_core::CudaStorage,
        l1: &Layout,
        s2: &candle_core::CudaStorage,
        l2: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        crate::gpu::softmax::backward((s1, l1), (s2, l2))
    }
}

/// Softmax over the last dimension of `scores + bias`, where `scores` is `[B, H, Lq, Lk]` and the
/// additive mask `bias` is `[B, 1, 1, Lk]` (broadcast over heads and query rows), as attention
/// computes it. Its backward is [`SoftmaxGrad`] for the scores; the bias, made from the attention
/// mask, gets no gradient.
struct MaskedSoftmax;

impl CustomOp2 for MaskedSoftmax {
    fn name(&self) -> &'static str {
        "fast-masked-softmax"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (x, bias) = (one_f32(self.name(), s1, l1)?, one_f32(self.name(), s2, l2)?);
        let &[b, h, lq, lk] = l1.dims() else {
            candle_core::bail!("{}: scores of rank 4 expected, got {:?}", self.name(), l1.dims())
        };
        if l2.dims() != [b, 1, 1, lk] {
            candle_core::bail!("{}: a mask bias of shape [{b}, 1, 1, {lk}] expected, got {:?}", self.name(), l2.dims());
        }
        let out = softmax_rows(x, bias, h * lq, lk);
        Ok((CpuStorage::F32(out), l1.shape().clone()))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s1: &candle_core::CudaStorage,
        l1: &Layout,
        s2: &candle_core::CudaStorage,
        l2: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        crate::gpu::softmax::masked((s1, l1), (s2, l2))
    }

    fn bwd(
        &self,
        _scores: &Tensor,
        _bias: &Tensor,
        res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>)> {
        Ok((Some(res.contiguous()?.apply_op2_no_bwd(&grad.contiguous()?, &SoftmaxGrad)?), None))
    }
}

/// Attention probabilities `softmax(scores + bias)` (see [`MaskedSoftmax`]): one fused kernel on
/// CPU f32 for a `[B, 1, 1, Lk]` bias that needs no gradient (with a fused backward in training),
/// and in training on CUDA f32 too (src/gpu/softmax.cu); candle's ops elsewhere (in training with
/// a backward in closed form, [`super::given_value`]). GPU inference keeps candle's ops.
pub fn masked_softmax(scores: &Tensor, bias: &Tensor, train: bool) -> Result<Tensor> {
    // The fused op's shapes, and a bias that needs no gradient (the fused op gives it none).
    let fits = match scores.dims() {
        &[b, _, _, lk] => bias.dims() == [b, 1, 1, lk],
        _ => false,
    };
    let fused = if train { fused_train(&[scores, bias]) } else { cpu_f32(&[scores, bias]) };
    if fused && fits && !bias.track_op() {
        let (scores, bias) = (scores.contiguous()?, bias.contiguous()?);
        Ok(if train {
            scores.apply_op2(&bias, MaskedSoftmax)?
        } else {
            scores.apply_op2_no_bwd(&bias, &MaskedSoftmax)?
        })
    } else {
        let x = scores.broadcast_add(bias)?;
        Ok(if train { super::given_value::softmax_last_dim(&x)? } else { candle_nn::ops::softmax_last_dim(&x)? })
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{max_diff, scores_and_bias};
    use super::*;

    #[test]
    fn exp_is_accurate() {
        let mut worst = 0f64;
        for i in -87_000..=88_000 {
            let x = i as f32 / 1000.0;
            let (got, want) = (exp_f32(x) as f64, (x as f64).exp());
            worst = worst.max(((got - want) / want).abs());
        }
        assert!(worst < 5e-7, "max relative exp error {worst}");
        assert_eq!(exp_f32(-1e30), 0.0);
        assert_eq!(exp_f32(-100.0), 0.0);
    }

    /// The vectorisable `round_half_away` and integer step give `exp_f32` exactly the bits of
    /// `f32::round` and a float-to-int cast (the form it had before), and the dispatched
    /// (AVX-512/AVX2) softmax the bits of the same loop compiled for the baseline target.
    #[test]
    fn exp_and_softmax_keep_their_bits() {
        fn exp_before(x: f32) -> f32 {
            let underflow = x < -87.3;
            let x = x.clamp(-87.3, 88.7);
            let n = (x * std::f32::consts::LOG2_E).round();
            let r = x - n * 0.693_145_75 - n * 1.428_606_8e-6;
            let mut p = 1.0 / 720.0;
            p = p * r + 1.0 / 120.0;
            p = p * r + 1.0 / 24.0;
            p = p * r + 1.0 / 6.0;
            p = p * r + 0.5;
            p = p * r + 1.0;
            p = p * r + 1.0;
            let scale = f32::from_bits(((n as i32 + 127) as u32) << 23);
            if underflow {
                0.0
            } else {
                p * scale
            }
        }
        for i in -4 * 130..=4 * 130 {
            let v = i as f32 / 4.0; // halves and quarters: the ties
            assert_eq!(round_half_away(v), v.round(), "{v}");
        }
        let mut xs: Vec<f32> = (-90_000..=90_000).map(|i| i as f32 / 1000.0).collect();
        // Inputs whose x·log2(e) is a tie (k + 1/2), where rounding directions differ.
        xs.extend((-250..250).map(|k| (k as f32 + 0.5) / std::f32::consts::LOG2_E));
        for &x in &xs {
            assert_eq!(exp_f32(x).to_bits(), exp_before(x).to_bits(), "exp({x})");
        }
        // 20 softmax rows of 37 (two groups of 8 and 4 single rows) with a bias row per 5 rows: the
        // kernel against the baseline loop, one row at a time.
        let lk = 37;
        let x: Vec<f32> = (0..20 * lk).map(|i| ((i * 7919) % 211) as f32 / 7.0 - 15.0).collect();
        let bias: Vec<f32> = (0..4 * lk).map(|i| if i % 11 == 3 { -1e30 } else { 0.0 }).collect();
        let got = softmax_rows(&x, &bias, 5, lk);
        let mut want = x.clone();
        for (r, row) in want.chunks_exact_mut(lk).enumerate() {
            let bias = &bias[(r / 5) * lk..][..lk];
            row.iter_mut().zip(bias).for_each(|(x, b)| *x += b);
            let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let mut sum = 0.0;
            for x in row.iter_mut() {
                *x = exp_before(*x - max);
                sum += *x;
            }
            row.iter_mut().for_each(|x| *x *= 1.0 / sum);
        }
        assert!(got.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()), "softmax bits differ");
    }

    #[test]
    fn masked_softmax_matches_candle() -> Result<()> {
        let (scores, bias) = scores_and_bias(&candle_core::Device::Cpu)?;
        let want = candle_nn::ops::softmax(&scores.broadcast_add(&bias)?, candle_core::D::Minus1)?;
        for train in [false, true] {
            let got = masked_softmax(&scores, &bias, train)?;
            let worst = max_diff(&got, &want)?;
            assert!(worst < 1e-7, "max |softmax difference| {worst}");
        }
        let p = masked_softmax(&scores, &bias, false)?.flatten_all()?.to_vec1::<f32>()?;
        // Masked keys get probability 0 in every row of their batch entry only.
        assert_eq!(p[3], 0.0);
        assert_eq!(p[3 * 5 * 37 + 30], 0.0);
        assert!(p[30] > 0.0 && p[3 * 5 * 37 + 3] > 0.0);
        Ok(())
    }
}
