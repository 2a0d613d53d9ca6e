//! Attention's masked softmax, and the exp approximation it uses.

use anyhow::Result;
use candle_core::{CpuStorage, CustomOp2, CustomOp3, DType, Layout, Shape, Tensor};

use super::{cpu_f32, f32_or_bf16, fused_train_bf16, one_f32, two_f32, widened};

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
/// computes it. Its backward is [`SoftmaxGrad`] for the scores (for bf16 scores
/// [`MaskedSoftmaxGradBf16`]); the bias, made from the attention mask, gets no gradient.
struct MaskedSoftmax;

#[cfg(test)]
thread_local! {
    /// How many bf16 forwards and backwards of the op this thread ran (tests: that the op, not
    /// the cast path of the same bits, ran).
    static BF16_RUNS: std::cell::Cell<(usize, usize)> = const { std::cell::Cell::new((0, 0)) };
}

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
        let ((x, bf16), bias) = (widened(self.name(), s1, l1)?, one_f32(self.name(), s2, l2)?);
        let per_bias = rows_per_bias(self.name(), l1, l2)?;
        let out = softmax_rows(&x, bias, per_bias, l1.dims()[3]);
        #[cfg(test)]
        if bf16 {
            BF16_RUNS.with(|c| c.set((c.get().0 + 1, c.get().1)));
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
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        crate::gpu::softmax::masked((s1, l1), (s2, l2))
    }

    fn bwd(
        &self,
        scores: &Tensor,
        bias: &Tensor,
        res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>)> {
        let grad = grad.contiguous()?;
        Ok((
            Some(if res.dtype() == DType::BF16 {
                // The f32 probabilities the gradient needs are not kept: they are recomputed.
                scores.apply_op3_no_bwd(bias, &grad, &MaskedSoftmaxGradBf16)?
            } else {
                res.contiguous()?.apply_op2_no_bwd(&grad, &SoftmaxGrad)?
            }),
            None,
        ))
    }
}

/// The shapes [`MaskedSoftmax`] takes, scores `[B, H, Lq, Lk]` and a bias `[B, 1, 1, Lk]`,
/// checked: the number of score rows per bias row, `H·Lq`.
fn rows_per_bias(op: &str, scores: &Layout, bias: &Layout) -> candle_core::Result<usize> {
    Ok(crate::gpu::launch::softmax_shapes(op, scores.dims(), bias.dims())?.2)
}

/// [`MaskedSoftmax`]'s backward for bf16 scores (bf16 training), from the scores, the bias and
/// the probabilities' gradient (bf16): the f32 probabilities are recomputed from the scores, the
/// gradient `y ⊙ (g − Σ g⊙y)` taken in f32 and rounded once. Those are the bits of the cast path
/// (the scores widened, the f32 op, its output rounded: its backward keeps the f32 probabilities,
/// widens the gradient and rounds the result), without the four casts or the f32 probabilities
/// kept from forward to backward (`[B, H, Lq, Lk]` f32 per layer).
struct MaskedSoftmaxGradBf16;

impl CustomOp3 for MaskedSoftmaxGradBf16 {
    fn name(&self) -> &'static str {
        "fast-masked-softmax-grad-bf16"
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
        let ((x, x_bf16), bias, (g, g_bf16)) =
            (widened(self.name(), s1, l1)?, one_f32(self.name(), s2, l2)?, widened(self.name(), s3, l3)?);
        if !(x_bf16 && g_bf16) || l3.dims() != l1.dims() {
            candle_core::bail!("{}: bf16 scores and a bf16 gradient of their shape expected", self.name());
        }
        let per_bias = rows_per_bias(self.name(), l1, l2)?;
        let lk = l1.dims()[3];
        let y = softmax_rows(&x, bias, per_bias, lk);
        let mut out = vec![0f32; y.len()];
        softmax_grad_rows(&mut out, &y, &g, lk.max(1));
        #[cfg(test)]
        BF16_RUNS.with(|c| c.set((c.get().0, c.get().1 + 1)));
        Ok((f32_or_bf16(out, true), l1.shape().clone()))
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
        crate::gpu::softmax::backward_bf16((s1, l1), (s2, l2), (s3, l3))
    }
}

/// Attention probabilities `softmax(scores + bias)` (see [`MaskedSoftmax`]): one fused kernel on
/// CPU f32 for a `[B, 1, 1, Lk]` bias that needs no gradient (with a fused backward in training),
/// and in training on CUDA f32 too (src/gpu/softmax.cu); candle's ops elsewhere (in training with
/// a backward in closed form, [`super::given_value`]). GPU inference keeps candle's ops.
///
/// bf16 training (bf16 scores, the f32 bias): the softmax in f32 and the probabilities rounded to
/// bf16, in one op where the kernels run (its backward recomputes the f32 probabilities:
/// [`MaskedSoftmaxGradBf16`]; the bits of the fused f32 op between two casts), elsewhere between
/// two casts around the f32 path (with the kernels off, candle's softmax).
pub fn masked_softmax(scores: &Tensor, bias: &Tensor, train: bool) -> Result<Tensor> {
    // The fused op's shapes, and a bias that needs no gradient (the fused op gives it none).
    let fits = crate::gpu::launch::softmax_dims(scores.dims(), bias.dims()).is_some();
    let fused = if train { fused_train_bf16(&[scores, bias]) } else { cpu_f32(&[scores, bias]) };
    if fused && fits && !bias.track_op() {
        let (scores, bias) = (scores.contiguous()?, bias.contiguous()?);
        Ok(if train {
            scores.apply_op2(&bias, MaskedSoftmax)?
        } else {
            scores.apply_op2_no_bwd(&bias, &MaskedSoftmax)?
        })
    } else if scores.dtype() != bias.dtype() {
        // bf16 training where the op does not run: the softmax in the bias's f32.
        Ok(masked_softmax(&scores.to_dtype(bias.dtype())?, bias, train)?.to_dtype(scores.dtype())?)
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

    /// bf16 training's softmax (bf16 scores, the f32 bias): the one op, whose backward recomputes
    /// the f32 probabilities, gives the bits of the cast path (widen, the f32 op, round) for the
    /// values and the scores' gradient, masked keys included (and the op ran: the cast path
    /// gives the same bits); with the kernels off (`XSENT_KERNELS=candle`) it takes the cast path
    /// around candle's softmax, within bf16 rounding of the op.
    #[test]
    fn bf16_scores_equal_the_f32_op_on_their_widened_values() -> Result<()> {
        use candle_core::Var;
        let dev = candle_core::Device::Cpu;
        let (scores, bias) = scores_and_bias(&dev)?;
        let up: Vec<f32> = (0..scores.elem_count()).map(|i| ((i * 104_729) % 307) as f32 / 150.0 - 1.0).collect();
        let up = Tensor::from_vec(up, scores.dims(), &dev)?.to_dtype(DType::BF16)?;
        let run = |widen: bool| -> Result<[Vec<f32>; 2]> {
            let s = Var::from_tensor(&scores.to_dtype(DType::BF16)?)?;
            let p = if widen {
                masked_softmax(&s.as_tensor().to_dtype(DType::F32)?, &bias, true)?.to_dtype(DType::BF16)?
            } else {
                masked_softmax(s.as_tensor(), &bias, true)?
            };
            assert_eq!(p.dtype(), DType::BF16);
            let g = (&p * &up)?.to_dtype(DType::F32)?.sum_all()?.backward()?;
            let gs = g.get(s.as_tensor()).expect("a gradient");
            assert_eq!(gs.dtype(), DType::BF16);
            let host = |t: &Tensor| t.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>();
            Ok([host(&p)?, host(gs)?])
        };
        let runs = || BF16_RUNS.with(|c| c.get());
        let before = runs();
        let one = run(false)?;
        let after = runs();
        assert_eq!((after.0 - before.0, after.1 - before.1), (1, 1), "the bf16 op did not run forward and backward");
        let cast = run(true)?;
        assert_eq!(runs(), after, "the cast path ran the bf16 op");
        for (what, a, b) in [("values", &one[0], &cast[0]), ("gradients", &one[1], &cast[1])] {
            let off = a.iter().zip(b).filter(|(p, q)| p.to_bits() != q.to_bits()).count();
            assert_eq!(off, 0, "bf16 softmax: {off} of {} {what} differ from the cast path's", a.len());
        }
        assert!(one[0].contains(&0.0) && one[1].iter().any(|&g| g != 0.0));
        let off = super::super::with_candle_ops(|| run(false))?;
        assert_eq!(runs(), after, "the bf16 op ran with the kernels off");
        for (a, b) in off.iter().zip(&one) {
            let worst = a.iter().zip(b).map(|(p, q)| (p - q).abs() / q.abs().max(1.0)).fold(0f32, f32::max);
            assert!(worst < 1e-2, "with the kernels off: {worst} from the fused op (bf16 rounding allowed)");
        }
        // The op's backward refuses what it was not made for.
        let s16 = scores.to_dtype(DType::BF16)?;
        assert!(s16.apply_op3_no_bwd(&bias, &s16.narrow(3, 0, 36)?.contiguous()?, &MaskedSoftmaxGradBf16).is_err());
        assert!(scores.apply_op3_no_bwd(&bias, &scores, &MaskedSoftmaxGradBf16).is_err());
        Ok(())
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
