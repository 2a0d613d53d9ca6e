//! CPU kernels for what candle computes with scalar libm calls or many small ops: GELU (erf) and
//! attention's masked softmax, for inference (no autograd) and for training (custom ops whose backward is a fused
//! kernel too), attention's head split and merge, the linear layers (product and bias in one op,
//! with a fused backward for training), and for training LayerNorm and the dropout product: candle's backward costs every op a zeroed gradient and an
//! added copy per input (even for inputs that need no gradient, such as a dropout mask), and its
//! broadcast ops a strided row reduction, so one fused op with a fused backward saves several
//! full-size passes. Tests check values and gradients against candle's own
//! differentiable ops.

use anyhow::Result;
use candle_core::{CpuStorage, CustomOp1, CustomOp2, CustomOp3, Layout, Shape, Tensor};

/// `erf(x)` as a rational function of `x` on `[-4, 4]` (±1 outside, where f32 erf is ±1):
/// the approximation Eigen and XLA use for f32; written so that it vectorises.
#[inline(always)]
pub fn erf_f32(x: f32) -> f32 {
    let x = x.clamp(-4.0, 4.0);
    let x2 = x * x;
    let mut p = x2 * -2.726_142_3e-10 + 2.770_681_4e-8;
    p = x2 * p + -2.101_024e-6;
    p = x2 * p + -5.692_506_4e-5;
    p = x2 * p + -7.349_906_3e-4;
    p = x2 * p + -2.954_6e-3;
    p = x2 * p + -1.609_603_3e-2;
    p *= x;
    let mut q = x2 * -1.456_607_2e-5 + -2.133_740_6e-4;
    q = x2 * q + -1.682_827e-3;
    q = x2 * q + -7.373_329e-3;
    q = x2 * q + -1.426_474e-2;
    p / q
}

/// `0.5 · x · (1 + erf(x / √2))`, the exact (erf) GELU of BERT and XLM-R.
struct GeluErf;

impl CustomOp1 for GeluErf {
    fn name(&self) -> &'static str {
        "fast-gelu-erf"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let out: Vec<f32> = one_f32(self.name(), s, l)?
            .iter()
            .map(|&x| 0.5 * x * (1.0 + erf_f32(x * std::f32::consts::FRAC_1_SQRT_2)))
            .collect();
        Ok((CpuStorage::F32(out), l.shape().clone()))
    }
}

/// The f32 data of two contiguous inputs of the same length (the backward kernels' inputs).
fn two_f32<'a>(
    op: &str,
    s1: &'a CpuStorage,
    l1: &Layout,
    s2: &'a CpuStorage,
    l2: &Layout,
) -> candle_core::Result<(&'a [f32], &'a [f32])> {
    let (CpuStorage::F32(x), CpuStorage::F32(y)) = (s1, s2) else { candle_core::bail!("{op}: f32 only") };
    let (Some((a, b)), Some((c, d))) = (l1.contiguous_offsets(), l2.contiguous_offsets()) else {
        candle_core::bail!("{op}: contiguous inputs only")
    };
    if b - a != d - c {
        candle_core::bail!("{op}: inputs of {} and {} elements", b - a, d - c);
    }
    Ok((&x[a..b], &y[c..d]))
}

/// `d/dx GELU(x) · g = g · (Φ(x) + x·φ(x))`.
struct GeluErfGrad;

impl CustomOp2 for GeluErfGrad {
    fn name(&self) -> &'static str {
        "fast-gelu-erf-grad"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (x, g) = two_f32(self.name(), s1, l1, s2, l2)?;
        const INV_SQRT_2PI: f32 = 0.398_942_3;
        let out: Vec<f32> = x
            .iter()
            .zip(g)
            .map(|(&x, &g)| {
                let cdf = 0.5 * (1.0 + erf_f32(x * std::f32::consts::FRAC_1_SQRT_2));
                g * (cdf + x * INV_SQRT_2PI * exp_f32(-0.5 * x * x))
            })
            .collect();
        Ok((CpuStorage::F32(out), l1.shape().clone()))
    }
}

/// GELU (erf) whose backward is [`GeluErfGrad`].
struct GeluErfTrain;

impl CustomOp1 for GeluErfTrain {
    fn name(&self) -> &'static str {
        "fast-gelu-erf-train"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        GeluErf.cpu_fwd(s, l)
    }

    fn bwd(&self, arg: &Tensor, _res: &Tensor, grad: &Tensor) -> candle_core::Result<Option<Tensor>> {
        Ok(Some(arg.contiguous()?.apply_op2_no_bwd(&grad.contiguous()?, &GeluErfGrad)?))
    }
}

/// GELU (erf) for training: vectorised forward and backward on CPU f32, candle's op elsewhere.
pub fn gelu_erf_train(x: &Tensor) -> Result<Tensor> {
    if cpu_f32(&[x]) {
        Ok(x.contiguous()?.apply_op1(GeluErfTrain)?)
    } else {
        Ok(x.gelu_erf()?)
    }
}

/// GELU (erf) for inference: the vectorised kernel on CPU f32, candle's op elsewhere.
pub fn gelu_erf_infer(x: &Tensor) -> Result<Tensor> {
    if cpu_f32(&[x]) {
        Ok(x.contiguous()?.apply_op1_no_bwd(&GeluErf)?)
    } else {
        Ok(x.gelu_erf()?)
    }
}

/// `e^x` for f32 by range reduction `x = n·ln2 + r` and a degree-6 polynomial for `e^r`
/// (about 1 ulp); 0 below -87.3 (where f32 `e^x` underflows), written so that it vectorises.
#[inline(always)]
pub fn exp_f32(x: f32) -> f32 {
    let underflow = x < -87.3;
    let x = x.clamp(-87.3, 88.7);
    let n = (x * std::f32::consts::LOG2_E).round();
    // r = x - n·ln2 in two steps (Cody-Waite) to keep it exact enough.
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
        for ((o, y), g) in out.chunks_exact_mut(n).zip(y.chunks_exact(n)).zip(g.chunks_exact(n)) {
            let dot: f32 = y.iter().zip(g).map(|(y, g)| y * g).sum();
            for i in 0..n {
                o[i] = y[i] * (g[i] - dot);
            }
        }
        Ok((CpuStorage::F32(out), l1.shape().clone()))
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
        let mut out = x.to_vec();
        for (r, row) in out.chunks_exact_mut(lk.max(1)).enumerate() {
            let bias = &bias[(r / (h * lq)) * lk..][..lk];
            row.iter_mut().zip(bias).for_each(|(x, b)| *x += b);
            let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let mut sum = 0.0;
            for x in row.iter_mut() {
                *x = exp_f32(*x - max);
                sum += *x;
            }
            let inv = 1.0 / sum;
            row.iter_mut().for_each(|x| *x *= inv);
        }
        Ok((CpuStorage::F32(out), l1.shape().clone()))
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
/// candle's ops elsewhere.
pub fn masked_softmax(scores: &Tensor, bias: &Tensor, train: bool) -> Result<Tensor> {
    // The fused op's shapes, and a bias that needs no gradient (the fused op gives it none).
    let fits = match scores.dims() {
        &[b, _, _, lk] => bias.dims() == [b, 1, 1, lk],
        _ => false,
    };
    if cpu_f32(&[scores, bias]) && fits && !bias.track_op() {
        let (scores, bias) = (scores.contiguous()?, bias.contiguous()?);
        Ok(if train {
            scores.apply_op2(&bias, MaskedSoftmax)?
        } else {
            scores.apply_op2_no_bwd(&bias, &MaskedSoftmax)?
        })
    } else {
        let x = scores.broadcast_add(bias)?;
        Ok(if train {
            candle_nn::ops::softmax(&x, candle_core::D::Minus1)?
        } else {
            candle_nn::ops::softmax_last_dim(&x)?
        })
    }
}

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

/// Attention's head split, `[B·L, heads·d]` → `[B, heads, L, d]` (contiguous), or its inverse
/// (`merge`); the backward of each is the other.
struct Heads {
    b: usize,
    l: usize,
    heads: usize,
    merge: bool,
}

impl CustomOp1 for Heads {
    fn name(&self) -> &'static str {
        if self.merge {
            "fast-merge-heads"
        } else {
            "fast-split-heads"
        }
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let x = one_f32(self.name(), s, l)?;
        let (b, len, nh) = (self.b, self.l, self.heads);
        let d = match (self.merge, l.dims()) {
            (true, &[.., d]) => d,
            (false, &[_, w]) if nh > 0 => w / nh,
            _ => 0,
        };
        let (want, out_shape) = if self.merge {
            ([b, nh, len, d].to_vec(), Shape::from((b * len, nh * d)))
        } else {
            ([b * len, nh * d].to_vec(), Shape::from((b, nh, len, d)))
        };
        if l.dims() != want.as_slice() || nh == 0 {
            candle_core::bail!("{}: shape {:?} for {b} × {len} tokens and {nh} heads", self.name(), l.dims());
        }
        let mut out = vec![0f32; x.len()];
        for bi in 0..b {
            for h in 0..nh {
                for t in 0..len {
                    let split = ((bi * nh + h) * len + t) * d; // [B, heads, L, d]
                    let flat = (bi * len + t) * nh * d + h * d; // [B·L, heads·d]
                    let (from, to) = if self.merge { (split, flat) } else { (flat, split) };
                    out[to..to + d].copy_from_slice(&x[from..from + d]);
                }
            }
        }
        Ok((CpuStorage::F32(out), out_shape))
    }

    fn bwd(&self, _arg: &Tensor, _res: &Tensor, grad: &Tensor) -> candle_core::Result<Option<Tensor>> {
        let inverse = Heads { merge: !self.merge, ..*self };
        Ok(Some(grad.contiguous()?.apply_op1_no_bwd(&inverse)?))
    }
}

/// `[B·L, heads·d]` → `[B, heads, L, d]` (contiguous), as attention splits its projections.
pub fn split_heads(x: &Tensor, b: usize, l: usize, heads: usize) -> Result<Tensor> {
    if cpu_f32(&[x]) {
        Ok(x.contiguous()?.apply_op1(Heads { b, l, heads, merge: false })?)
    } else {
        let d = x.dim(1)? / heads;
        Ok(x.reshape((b, l, heads, d))?.transpose(1, 2)?.contiguous()?)
    }
}

/// `[B, heads, L, d]` → `[B·L, heads·d]`, the inverse of [`split_heads`].
pub fn merge_heads(x: &Tensor) -> Result<Tensor> {
    let (b, heads, l, d) = x.dims4()?;
    if cpu_f32(&[x]) {
        Ok(x.contiguous()?.apply_op1(Heads { b, l, heads, merge: true })?)
    } else {
        Ok(x.transpose(1, 2)?.reshape((b * l, heads * d))?)
    }
}

/// Whether every tensor is on the CPU and f32: the kernels' domain (elsewhere candle's ops run),
/// unless [`candle_ops_forced`].
fn cpu_f32(ts: &[&Tensor]) -> bool {
    !candle_ops_forced() && ts.iter().all(|t| t.device().is_cpu() && t.dtype() == candle_core::DType::F32)
}

thread_local! {
    static FORCED_HERE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether the CPU runs what a GPU runs: candle's ops instead of these kernels, operands made
/// contiguous for cuBLAS ([`super::matmul`]), dense token-table gradients and the optimiser's
/// device path. Set for a process by `XSENT_KERNELS=candle` (tests of the GPU's code paths on a
/// machine without one), or on one thread by [`with_candle_ops`].
pub fn candle_ops_forced() -> bool {
    static FROM_ENV: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    FORCED_HERE.with(|f| f.get())
        || *FROM_ENV.get_or_init(|| match std::env::var("XSENT_KERNELS").as_deref() {
            Ok("candle") => true,
            // avx2 and portable pick the int8/bf16 kernels' path (model::quant) and keep these.
            Ok("") | Ok("fused") | Ok("avx2") | Ok("portable") | Err(_) => false,
            Ok(other) => {
                crate::errln!("xsent: XSENT_KERNELS={other:?} is not \"candle\", \"fused\", \"avx2\" or \"portable\"; the fused CPU kernels are used");
                false
            }
        })
}

/// `f()` with [`candle_ops_forced`] on this thread (for tests).
pub fn with_candle_ops<T>(f: impl FnOnce() -> T) -> T {
    struct Reset(bool);
    impl Drop for Reset {
        fn drop(&mut self) {
            FORCED_HERE.with(|c| c.set(self.0));
        }
    }
    let _reset = Reset(FORCED_HERE.with(|c| c.replace(true)));
    f()
}

/// The f32 data of a contiguous input.
fn one_f32<'a>(op: &str, s: &'a CpuStorage, l: &Layout) -> candle_core::Result<&'a [f32]> {
    let CpuStorage::F32(v) = s else { candle_core::bail!("{op}: f32 only") };
    let Some((a, b)) = l.contiguous_offsets() else { candle_core::bail!("{op}: contiguous input only") };
    Ok(&v[a..b])
}

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

/// Column sums of a `[rows, n]` tensor, a `[n]` vector (accumulated in f64).
struct ColumnSums;

impl CustomOp1 for ColumnSums {
    fn name(&self) -> &'static str {
        "fast-column-sums"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let v = one_f32(self.name(), s, l)?;
        let n = *l.dims().last().unwrap_or(&1);
        let mut acc = vec![0f64; n];
        if n > 0 {
            for row in v.chunks_exact(n) {
                acc.iter_mut().zip(row).for_each(|(a, &x)| *a += x as f64);
            }
        }
        Ok((CpuStorage::F32(acc.into_iter().map(|v| v as f32).collect()), Shape::from(n)))
    }
}

/// `x·Wᵀ + b` for a `[rows, in]` `x`, a `[out, in]` weight and a `[out]` bias: the product as
/// candle computes `x.matmul(&w.t())` (the same gemm call, so the same values), then the bias.
/// Its backward gives the weight's gradient as `gradᵀ·x`, already `[out, in]`: candle's
/// composition sends it through the transpose node, which costs a zeroed `[in, out]` gradient,
/// an add, and then a zeroed `[out, in]` gradient plus an add that reads the first one column by
/// column; and the bias add's node costs a zeroed `[rows, out]` gradient plus an add.
struct FusedLinear;

impl CustomOp3 for FusedLinear {
    fn name(&self) -> &'static str {
        "fast-linear"
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
        let name = self.name();
        let (CpuStorage::F32(x), CpuStorage::F32(w)) = (s1, s2) else { candle_core::bail!("{name}: f32 only") };
        let b = one_f32(name, s3, l3)?;
        let (&[m, k], &[n, k2], 1) = (l1.dims(), l2.dims(), l3.dims().len()) else {
            candle_core::bail!(
                "{name}: [rows, in], [out, in] and [out] expected, got {:?}, {:?}, {:?}",
                l1.dims(),
                l2.dims(),
                l3.dims()
            )
        };
        if k != k2 || b.len() != n {
            candle_core::bail!("{name}: shapes {:?}, {:?}, {:?} do not fit", l1.dims(), l2.dims(), l3.dims());
        }
        let mut out = vec![0f32; m * n];
        if m > 0 && n > 0 && k > 0 {
            let (xs, ws) = (l1.stride(), l2.stride());
            let threads = candle_core::utils::get_num_threads();
            let parallelism = if threads > 1 { gemm::Parallelism::Rayon(threads) } else { gemm::Parallelism::None };
            // SAFETY: by candle's invariant a tensor's layout lies within its storage, so the
            // layouts describe `m × k` and `n × k` matrices inside `x` and `w`; `out` is a
            // contiguous `m × n` matrix.
            unsafe {
                gemm::gemm(
                    m,
                    n,
                    k,
                    out.as_mut_ptr(),
                    1,
                    n as isize,
                    false,
                    x[l1.start_offset()..].as_ptr(),
                    xs[1] as isize,
                    xs[0] as isize,
                    // Wᵀ: its column j is the weight's row j.
                    w[l2.start_offset()..].as_ptr(),
                    ws[0] as isize,
                    ws[1] as isize,
                    0.0,
                    1.0,
                    false,
                    false,
                    false,
                    parallelism,
                )
            }
        }
        for row in out.chunks_exact_mut(n.max(1)) {
            row.iter_mut().zip(b).for_each(|(o, b)| *o += b);
        }
        Ok((CpuStorage::F32(out), Shape::from((m, n))))
    }

    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        b: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let dx = if x.track_op() { Some(grad.matmul(&w.detach())?) } else { None }; // CPU only
        let dw = if w.track_op() { Some(grad.t()?.matmul(&x.detach())?) } else { None }; // CPU only
        let db = if b.track_op() { Some(grad.contiguous()?.apply_op1_no_bwd(&ColumnSums)?) } else { None };
        Ok((dx, dw, db))
    }
}

/// `x·Wᵀ + b` with `x` `[rows, in]`, `w` `[out, in]` and `b` `[out]`: on CPU f32 one op (the same
/// values as candle's `matmul` then `broadcast_add`, one output buffer instead of two) whose
/// backward (`train`) hands the weight its gradient in its own layout; candle's ops elsewhere.
pub fn linear(x: &Tensor, w: &Tensor, b: &Tensor, train: bool) -> Result<Tensor> {
    anyhow::ensure!(
        x.rank() == 2 && w.rank() == 2 && b.rank() == 1,
        "linear: [rows, in], [out, in] and [out] expected, got {:?}, {:?}, {:?}",
        x.dims(),
        w.dims(),
        b.dims()
    );
    if !cpu_f32(&[x, w, b]) {
        return Ok(super::matmul::matmul(x, &w.t()?)?.broadcast_add(b)?);
    }
    let b = b.contiguous()?;
    Ok(if train { x.apply_op3(w, &b, FusedLinear)? } else { x.apply_op3_no_bwd(w, &b, &FusedLinear)? })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reference erf in f64 by numerical integration (independent of any erf implementation).
    fn erf_ref(x: f64) -> f64 {
        // Simpson integration of 2/√π e^{-t²} on [0, |x|], 2000 intervals: error < 1e-12 here.
        let n = 2000;
        let h = x.abs() / n as f64;
        let f = |t: f64| (-t * t).exp();
        let mut s = f(0.0) + f(x.abs());
        for i in 1..n {
            s += f(i as f64 * h) * if i % 2 == 1 { 4.0 } else { 2.0 };
        }
        (s * h / 3.0 * 2.0 / std::f64::consts::PI.sqrt()).copysign(x)
    }

    #[test]
    fn erf_is_accurate() {
        let mut worst = 0f64;
        for i in -6000..=6000 {
            let x = i as f64 / 1000.0;
            worst = worst.max((erf_f32(x as f32) as f64 - erf_ref(x)).abs());
        }
        assert!(worst < 5e-7, "max |erf error| {worst}"); // a few f32 ulps
    }

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

    /// A `[2, 3, 5, 37]` score tensor and a `[2, 1, 1, 37]` mask bias with two masked keys.
    fn scores_and_bias(dev: &candle_core::Device) -> Result<(Tensor, Tensor)> {
        let xs: Vec<f32> = (0..2 * 3 * 5 * 37).map(|i| ((i * 7919) % 211) as f32 / 13.0 - 8.0).collect();
        let mut bias = vec![0f32; 2 * 37];
        bias[3] = -1e30;
        bias[37 + 30] = -1e30;
        Ok((Tensor::from_vec(xs, (2, 3, 5, 37), dev)?, Tensor::from_vec(bias, (2, 1, 1, 37), dev)?))
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

    /// Values and gradients of the training kernels against candle's differentiable ops.
    #[test]
    fn training_kernels_match_candle_gradients() -> Result<()> {
        let dev = candle_core::Device::Cpu;
        let xs: Vec<f32> = (0..6 * 29).map(|i| ((i * 7919) % 401) as f32 / 40.0 - 5.0).collect();
        let weights: Vec<f32> = (0..6 * 29).map(|i| ((i * 104_729) % 97) as f32 / 48.0 - 1.0).collect();
        let w = Tensor::from_vec(weights, (6, 29), &dev)?;
        let check = |name: &str,
                     ours: &dyn Fn(&Tensor) -> Result<Tensor>,
                     theirs: &dyn Fn(&Tensor) -> Result<Tensor>,
                     tol: f32|
         -> Result<()> {
            let mut x = Tensor::from_vec(xs.clone(), (6, 29), &dev)?;
            x = x.slice_assign(&[0..6, 5..6], &Tensor::full(-1e30f32, (6, 1), &dev)?)?;
            let (va, vb) = (candle_core::Var::from_tensor(&x)?, candle_core::Var::from_tensor(&x)?);
            let ya = ours(va.as_tensor())?;
            let yb = theirs(vb.as_tensor())?;
            let ga = ya.mul(&w)?.sum_all()?.backward()?;
            let gb = yb.mul(&w)?.sum_all()?.backward()?;
            let d = |a: &Tensor, b: &Tensor| -> Result<f32> {
                let (a, b) = (a.flatten_all()?.to_vec1::<f32>()?, b.flatten_all()?.to_vec1::<f32>()?);
                Ok(a.iter()
                    .zip(&b)
                    .map(|(x, y)| if x.is_finite() || y.is_finite() { (x - y).abs() } else { 0.0 })
                    .fold(0f32, f32::max))
            };
            let (dv, dg) = (d(&ya, &yb)?, d(ga.get(va.as_tensor()).unwrap(), gb.get(vb.as_tensor()).unwrap())?);
            assert!(dv < tol && dg < tol, "{name}: value diff {dv}, gradient diff {dg}");
            Ok(())
        };
        // GELU on finite inputs (|x| <= 50); values up to 5, so 5e-6 is about 1e-6 relative.
        check(
            "gelu",
            &|x| gelu_erf_train(&x.clamp(-50f32, 50f32)?),
            &|x| Ok(x.clamp(-50f32, 50f32)?.gelu_erf()?),
            5e-6,
        )?;
        Ok(())
    }

    /// Largest absolute difference between two tensors' values.
    fn max_diff(a: &Tensor, b: &Tensor) -> Result<f32> {
        assert_eq!(a.dims(), b.dims());
        let (a, b) = (a.flatten_all()?.to_vec1::<f32>()?, b.flatten_all()?.to_vec1::<f32>()?);
        // NaN or infinity anywhere makes the difference NaN (f32::max would skip a NaN).
        Ok(a.iter().zip(&b).map(|(x, y)| (x - y).abs()).fold(0f32, |m, d| {
            if d.is_finite() && m.is_finite() {
                m.max(d)
            } else {
                f32::NAN
            }
        }))
    }

    /// The differences between two implementations of an op under a weighted sum: of the values,
    /// then of each input's gradient; relative to `theirs`, element by element (absolute below
    /// 1), NaN if anything is not finite.
    fn grad_errors(
        inputs: &[Tensor],
        ours: &dyn Fn(&[Tensor]) -> Result<Tensor>,
        theirs: &dyn Fn(&[Tensor]) -> Result<Tensor>,
    ) -> Result<Vec<f32>> {
        let va: Vec<candle_core::Var> =
            inputs.iter().map(candle_core::Var::from_tensor).collect::<candle_core::Result<_>>()?;
        let vb: Vec<candle_core::Var> =
            inputs.iter().map(candle_core::Var::from_tensor).collect::<candle_core::Result<_>>()?;
        let ta: Vec<Tensor> = va.iter().map(|v| v.as_tensor().clone()).collect();
        let tb: Vec<Tensor> = vb.iter().map(|v| v.as_tensor().clone()).collect();
        let (ya, yb) = (ours(&ta)?, theirs(&tb)?);
        let n = ya.elem_count();
        let w: Vec<f32> = (0..n).map(|i| ((i * 104_729) % 97) as f32 / 48.0 - 1.0).collect();
        let w = Tensor::from_vec(w, ya.shape(), ya.device())?;
        let (ga, gb) = (ya.mul(&w)?.sum_all()?.backward()?, yb.mul(&w)?.sum_all()?.backward()?);
        let rel = |a: &Tensor, b: &Tensor| -> Result<f32> {
            assert_eq!(a.dims(), b.dims());
            let (a, b) = (a.flatten_all()?.to_vec1::<f32>()?, b.flatten_all()?.to_vec1::<f32>()?);
            Ok(a.iter().zip(&b).map(|(x, y)| (x - y).abs() / y.abs().max(1.0)).fold(0f32, |m, d| {
                if d.is_finite() && m.is_finite() {
                    m.max(d)
                } else {
                    f32::NAN
                }
            }))
        };
        let mut errors = vec![rel(&ya, &yb)?];
        for (a, b) in ta.iter().zip(&tb) {
            errors.push(rel(ga.get(a).expect("our gradient"), gb.get(b).expect("the reference's gradient"))?);
        }
        Ok(errors)
    }

    /// [`grad_errors`] each below `tol`.
    fn check_grads(
        name: &str,
        inputs: &[Tensor],
        ours: &dyn Fn(&[Tensor]) -> Result<Tensor>,
        theirs: &dyn Fn(&[Tensor]) -> Result<Tensor>,
        tol: f32,
    ) -> Result<()> {
        let errors = grad_errors(inputs, ours, theirs)?;
        assert!(
            errors.iter().all(|e| *e < tol),
            "{name}: differences (value, then each input's gradient) {errors:?}, tolerance {tol}"
        );
        Ok(())
    }

    #[test]
    fn layer_norm_bias_add_and_masked_softmax_match_candle_gradients() -> Result<()> {
        let dev = candle_core::Device::Cpu;
        // Rows of different scales and offsets (one nearly constant, where rstd is large); candle's
        // composition in f64 as the reference.
        let (rows, n) = (7, 33);
        let xs: Vec<f32> = (0..rows * n)
            .map(|i| {
                let r = i / n;
                let v = ((i * 7919) % 401) as f32 / 40.0 - 5.0;
                if r == 3 {
                    2.0 + v * 1e-2
                } else {
                    v * (r as f32 + 0.5) + r as f32
                }
            })
            .collect();
        let x = Tensor::from_vec(xs, (rows, n), &dev)?;
        let w = Tensor::from_vec((0..n).map(|i| 0.5 + (i % 7) as f32 / 5.0).collect::<Vec<_>>(), n, &dev)?;
        let b = Tensor::from_vec((0..n).map(|i| (i % 5) as f32 / 10.0 - 0.2).collect::<Vec<_>>(), n, &dev)?;
        // Against the f64 reference ours is as accurate as candle's own f32 composition (row 3's
        // deviations are 1% of its mean, so rounding x − mean in f32 alone costs ~1e-5 there).
        for eps in [1e-12f32, 1e-5] {
            let inputs = [x.reshape((1, rows, n))?, w.clone(), b.clone()];
            let f64_ref = |t: &[Tensor]| -> Result<Tensor> {
                let f = |t: &Tensor| t.to_dtype(candle_core::DType::F64);
                Ok(candle_nn::ops::layer_norm_slow(&f(&t[0])?, &f(&t[1])?, &f(&t[2])?, eps)?
                    .to_dtype(candle_core::DType::F32)?)
            };
            let ours = grad_errors(&inputs, &|t| layer_norm_train(&t[0], &t[1], &t[2], eps), &f64_ref)?;
            let candle_f32 =
                grad_errors(&inputs, &|t| Ok(candle_nn::ops::layer_norm_slow(&t[0], &t[1], &t[2], eps)?), &f64_ref)?;
            for (o, c) in ours.iter().zip(&candle_f32) {
                assert!(
                    *o <= (2.0 * c).max(2e-6),
                    "layer norm, eps {eps}: our errors {ours:?}, candle's f32 errors {candle_f32:?}"
                );
            }
        }
        let wl =
            Tensor::from_vec((0..n * n).map(|i| ((i * 31) % 17) as f32 / 8.0 - 1.0).collect::<Vec<_>>(), (n, n), &dev)?;
        check_grads(
            "linear",
            &[x.clone(), wl.clone(), b.clone()],
            &|t| linear(&t[0], &t[1], &t[2], true),
            &|t| Ok(t[0].matmul(&t[1].t()?)?.broadcast_add(&t[2])?),
            1e-5,
        )?;
        let (scores, mask) = scores_and_bias(&dev)?;
        let scores = (scores / 4.0)?;
        let va = candle_core::Var::from_tensor(&scores)?;
        let vb = candle_core::Var::from_tensor(&scores)?;
        let ya = masked_softmax(va.as_tensor(), &mask, true)?;
        let yb = candle_nn::ops::softmax(&vb.as_tensor().broadcast_add(&mask)?, candle_core::D::Minus1)?;
        let wts = Tensor::from_vec(
            (0..ya.elem_count()).map(|i| ((i * 104_729) % 97) as f32 / 48.0 - 1.0).collect::<Vec<_>>(),
            ya.shape(),
            &dev,
        )?;
        let (ga, gb) = (ya.mul(&wts)?.sum_all()?.backward()?, yb.mul(&wts)?.sum_all()?.backward()?);
        let dg = max_diff(ga.get(va.as_tensor()).unwrap(), gb.get(vb.as_tensor()).unwrap())?;
        assert!(dg < 1e-6, "masked softmax: gradient diff {dg}");
        // Only the tracked inputs get gradients: a frozen bias (and weight) gets none, the input
        // still does.
        let v = candle_core::Var::from_tensor(&x)?;
        let g = linear(v.as_tensor(), &wl, &b, true)?.sum_all()?.backward()?;
        assert!(g.get(&wl).is_none() && g.get(&b).is_none() && g.get(v.as_tensor()).is_some());
        let g = layer_norm_train(v.as_tensor(), &w, &b, 1e-12)?.sum_all()?.backward()?;
        assert!(g.get(&w).is_none() && g.get(&b).is_none() && g.get(v.as_tensor()).is_some());
        Ok(())
    }

    #[test]
    fn head_split_merge_and_dropout_match_candle() -> Result<()> {
        let dev = candle_core::Device::Cpu;
        let (b, l, nh, d) = (3, 5, 4, 6);
        let x = Tensor::from_vec(
            (0..b * l * nh * d).map(|i| i as f32 * 0.37 - 20.0).collect::<Vec<_>>(),
            (b * l, nh * d),
            &dev,
        )?;
        let theirs = x.reshape((b, l, nh, d))?.transpose(1, 2)?.contiguous()?;
        let ours = split_heads(&x, b, l, nh)?;
        assert_eq!(ours.dims(), &[b, nh, l, d]);
        assert_eq!(max_diff(&ours, &theirs)?, 0.0);
        assert_eq!(max_diff(&merge_heads(&ours)?, &x)?, 0.0);
        // No rows: empty in, empty out; a width that is not heads × d is refused.
        let empty = Tensor::zeros((0, nh * d), candle_core::DType::F32, &dev)?;
        assert_eq!(merge_heads(&split_heads(&empty, 0, l, nh)?)?.dims(), &[0, nh * d]);
        assert!(split_heads(&Tensor::zeros((b * l, nh * d + 1), candle_core::DType::F32, &dev)?, b, l, nh).is_err());
        // Gradients through split, a product with fixed weights and merge, against candle's views.
        let w = Tensor::from_vec(
            (0..b * nh * l * d).map(|i| ((i * 31) % 17) as f32 - 8.0).collect::<Vec<_>>(),
            (b, nh, l, d),
            &dev,
        )?;
        check_grads(
            "split/merge heads",
            std::slice::from_ref(&x),
            &|t| merge_heads(&split_heads(&t[0], b, l, nh)?.mul(&w)?),
            &|t| {
                Ok(t[0].reshape((b, l, nh, d))?.transpose(1, 2)?.mul(&w)?.transpose(1, 2)?.reshape((b * l, nh * d))?)
            },
            1e-7,
        )?;
        // Dropout's product: the input's gradient is the mask's product, the mask gets none.
        let mask = Tensor::from_vec(
            (0..b * l * nh * d).map(|i| if i % 3 == 0 { 0f32 } else { 1.25 }).collect::<Vec<_>>(),
            (b * l, nh * d),
            &dev,
        )?;
        let v = candle_core::Var::from_tensor(&x)?;
        let y = dropout_mul(v.as_tensor(), &mask)?;
        assert_eq!(max_diff(&y, &x.mul(&mask)?)?, 0.0);
        let g = y.mul(&x)?.sum_all()?.backward()?;
        assert_eq!(max_diff(g.get(v.as_tensor()).unwrap(), &x.mul(&mask)?)?, 0.0);
        assert!(g.get(&mask).is_none());
        Ok(())
    }

    /// A whole attention block (q/k/v and output projections, head split, masked softmax,
    /// dropout, merge, residual, LayerNorm) with the fused ops and with candle's compositions:
    /// the gradients of every input agree. Covers a tensor with several consumers (the input
    /// feeds q, k, v and the residual), an input view that starts at an offset, a fully masked
    /// batch entry, and a LayerNorm or bias add whose input needs no gradient while its
    /// parameters do.
    #[test]
    fn fused_attention_block_matches_candle_gradients() -> Result<()> {
        let dev = candle_core::Device::Cpu;
        let (b, l, nh, d) = (2, 5, 2, 4);
        let h = nh * d;
        let val = |n: usize, k: usize| -> Vec<f32> {
            (0..n).map(|i| (((i + k) * 7919) % 211) as f32 / 105.0 - 1.0).collect()
        };
        let mat = |r: usize, c: usize, k: usize| Tensor::from_vec(val(r * c, k), (r, c), &dev);
        // Inputs: x is rows 1.. of a larger tensor (a view at an offset), then 4 projections, LN.
        let mut inputs = vec![mat(b * l + 1, h, 1)?];
        for k in 0..4 {
            inputs.push(mat(h, h, 10 + k)?);
            inputs.push(Tensor::from_vec(val(h, 20 + k), h, &dev)?);
        }
        inputs.push((Tensor::from_vec(val(h, 30), h, &dev)? + 1.0)?);
        inputs.push(Tensor::from_vec(val(h, 31), h, &dev)?);
        // Key 3 of entry 0 masked; every key of entry 1 masked.
        let mut mask = vec![0f32; b * l];
        mask[3] = -1e30;
        mask[l..].iter_mut().for_each(|m| *m = -1e30);
        let mask = Tensor::from_vec(mask, (b, 1, 1, l), &dev)?;
        let drop = |n: usize| {
            Tensor::from_vec((0..n).map(|i| if i % 4 == 1 { 0f32 } else { 1.0 / 0.75 }).collect::<Vec<_>>(), n, &dev)
        };
        let (drop_p, drop_a) = (drop(b * nh * l * l)?.reshape((b, nh, l, l))?, drop(b * l * h)?.reshape((b * l, h))?);
        let block = |t: &[Tensor], fused: bool| -> Result<Tensor> {
            let x = t[0].narrow(0, 1, b * l)?;
            let lin = |x: &Tensor, i: usize| -> Result<Tensor> {
                if fused {
                    linear(x, &t[1 + 2 * i], &t[2 + 2 * i], true)
                } else {
                    Ok(x.matmul(&t[1 + 2 * i].t()?)?.broadcast_add(&t[2 + 2 * i])?)
                }
            };
            let split = |y: Tensor| -> Result<Tensor> {
                if fused {
                    split_heads(&y, b, l, nh)
                } else {
                    Ok(y.reshape((b, l, nh, d))?.transpose(1, 2)?.contiguous()?)
                }
            };
            let q = split((lin(&x, 0)? * 0.5)?)?;
            let (k, v) = (split(lin(&x, 1)?)?, split(lin(&x, 2)?)?);
            let scores = q.matmul(&k.t()?)?;
            let probs = if fused {
                dropout_mul(&masked_softmax(&scores, &mask, true)?, &drop_p)?
            } else {
                candle_nn::ops::softmax(&scores.broadcast_add(&mask)?, candle_core::D::Minus1)?.mul(&drop_p)?
            };
            let ctx = probs.matmul(&v)?;
            let ctx = if fused { merge_heads(&ctx)? } else { ctx.transpose(1, 2)?.reshape((b * l, h))? };
            let a = lin(&ctx, 3)?;
            let a = if fused { dropout_mul(&a, &drop_a)? } else { a.mul(&drop_a)? };
            let r = (a + &x)?;
            if fused {
                layer_norm_train(&r, &t[9], &t[10], 1e-12)
            } else {
                Ok(candle_nn::ops::layer_norm_slow(&r, &t[9], &t[10], 1e-12)?)
            }
        };
        check_grads("attention block", &inputs, &|t| block(t, true), &|t| block(t, false), 1e-5)?;
        // The same block through the fallbacks a GPU runs (candle's ops, operands made
        // contiguous for cuBLAS), forced on the CPU, against the fused kernels.
        check_grads(
            "attention block, GPU fallbacks",
            &inputs,
            &|t| with_candle_ops(|| block(t, true)),
            &|t| block(t, true),
            1e-5,
        )?;
        // Untracked inputs, tracked parameters: only the parameters get gradients, as candle's.
        let x = mat(b * l, h, 3)?;
        check_grads(
            "layer norm parameters",
            &inputs[9..11],
            &|t| layer_norm_train(&x, &t[0], &t[1], 1e-12),
            &|t| Ok(candle_nn::ops::layer_norm_slow(&x, &t[0], &t[1], 1e-12)?),
            1e-5,
        )?;
        check_grads(
            "linear parameters",
            &inputs[1..3],
            &|t| linear(&x, &t[0], &t[1], true),
            &|t| Ok(x.matmul(&t[0].t()?)?.broadcast_add(&t[1])?),
            1e-6,
        )?;
        Ok(())
    }

    /// The fused linear layer (training and inference) against candle's `x.matmul(&w.t())` plus
    /// bias: values equal to the last bit (the same gemm call), gradients of every input within rounding, for inputs and
    /// weights in several layouts (contiguous, a column slice whose rows are wider, a transposed
    /// matrix, a view at an offset, a broadcast row), each a view of a tracked tensor; only
    /// tracked inputs get gradients.
    #[test]
    fn linear_matches_candle() -> Result<()> {
        let dev = candle_core::Device::Cpu;
        let val = |n: usize, k: usize| -> Vec<f32> {
            (0..n).map(|i| (((i + k) * 7919) % 211) as f32 / 105.0 - 1.0).collect()
        };
        let (rows, inp, out) = (37, 70, 45);
        type View = dyn Fn(&Tensor) -> candle_core::Result<Tensor>;
        // Each case: a base tensor (tracked by the gradient check) and the view the layer reads.
        let xs: Vec<(Tensor, Box<View>)> = vec![
            (Tensor::from_vec(val(rows * inp, 4), (rows, inp), &dev)?, Box::new(|t: &Tensor| Ok(t.clone()))),
            (
                Tensor::from_vec(val(rows * (inp + 9), 3), (rows, inp + 9), &dev)?,
                Box::new(move |t: &Tensor| t.narrow(1, 5, inp)),
            ),
            (Tensor::from_vec(val(rows * inp, 5), (inp, rows), &dev)?, Box::new(|t: &Tensor| t.t())),
            (Tensor::from_vec(val(inp, 6), (1, inp), &dev)?, Box::new(move |t: &Tensor| t.broadcast_as((rows, inp)))),
        ];
        let ws: Vec<(Tensor, Box<View>)> = vec![
            (Tensor::from_vec(val(out * inp, 1), (out, inp), &dev)?, Box::new(|t: &Tensor| Ok(t.clone()))),
            (
                Tensor::from_vec(val((out + 2) * inp, 7), (out + 2, inp), &dev)?,
                Box::new(move |t: &Tensor| t.narrow(0, 1, out)),
            ),
            (Tensor::from_vec(val(out * inp, 8), (inp, out), &dev)?, Box::new(|t: &Tensor| t.t())),
        ];
        let b = Tensor::from_vec(val(out, 2), out, &dev)?;
        let reference =
            |x: &Tensor, w: &Tensor, b: &Tensor| -> Result<Tensor> { Ok(x.matmul(&w.t()?)?.broadcast_add(b)?) };
        for (xb, xv) in &xs {
            for (wb, wv) in &ws {
                let (x, w) = (xv(xb)?, wv(wb)?);
                assert_eq!(max_diff(&linear(&x, &w, &b, true)?, &reference(&x, &w, &b)?)?, 0.0);
                assert_eq!(max_diff(&linear(&x, &w, &b, false)?, &reference(&x, &w, &b)?)?, 0.0);
                check_grads(
                    "linear",
                    &[xb.clone(), wb.clone(), b.clone()],
                    &|t| linear(&xv(&t[0])?, &wv(&t[1])?, &t[2], true),
                    &|t| reference(&xv(&t[0])?, &wv(&t[1])?, &t[2]),
                    1e-5,
                )?;
            }
        }
        let (x, w) = (xs[0].0.clone(), ws[0].0.clone());
        // Only the tracked inputs get gradients: a frozen layer passes one to its input only, an
        // untracked input leaves the parameters theirs, and each parameter alone gets its own.
        let v = candle_core::Var::from_tensor(&x)?;
        let g = linear(v.as_tensor(), &w, &b, true)?.sum_all()?.backward()?;
        assert!(g.get(&w).is_none() && g.get(&b).is_none() && g.get(v.as_tensor()).is_some());
        let (vw, vb) = (candle_core::Var::from_tensor(&w)?, candle_core::Var::from_tensor(&b)?);
        let g = linear(&x, vw.as_tensor(), vb.as_tensor(), true)?.sum_all()?.backward()?;
        assert!(g.get(&x).is_none() && g.get(vw.as_tensor()).is_some() && g.get(vb.as_tensor()).is_some());
        check_grads(
            "linear weight alone",
            std::slice::from_ref(&w),
            &|t| linear(&x, &t[0], &b, true),
            &|t| reference(&x, &t[0], &b),
            1e-5,
        )?;
        check_grads(
            "linear bias alone",
            std::slice::from_ref(&b),
            &|t| linear(&x, &w, &t[0], true),
            &|t| reference(&x, &w, &t[0]),
            1e-6,
        )?;
        // No rows, no inputs (the bias alone) or no outputs; mismatched shapes are refused.
        let empty = Tensor::zeros((0, inp), candle_core::DType::F32, &dev)?;
        assert_eq!(linear(&empty, &w, &b, true)?.dims(), &[0, out]);
        let (x0, w0) = (
            Tensor::zeros((rows, 0), candle_core::DType::F32, &dev)?,
            Tensor::zeros((out, 0), candle_core::DType::F32, &dev)?,
        );
        assert_eq!(max_diff(&linear(&x0, &w0, &b, true)?, &b.broadcast_as((rows, out))?.contiguous()?)?, 0.0);
        let (wn, bn) =
            (Tensor::zeros((0, inp), candle_core::DType::F32, &dev)?, Tensor::zeros(0, candle_core::DType::F32, &dev)?);
        let vb0 = candle_core::Var::from_tensor(&bn)?;
        let g = linear(&x, &wn, vb0.as_tensor(), true)?.sum_all()?.backward()?;
        assert_eq!(g.get(vb0.as_tensor()).unwrap().dims(), &[0]);
        assert!(linear(&x, &w.narrow(1, 0, inp - 1)?, &b, true).is_err());
        assert!(linear(&x, &w, &b.narrow(0, 0, out - 1)?, true).is_err());
        assert!(linear(&x.unsqueeze(0)?, &w, &b, true).is_err());
        Ok(())
    }

    /// The fallbacks a GPU runs, forced on the CPU, against the fused kernels: the linear layer
    /// on every view layout of [`linear_matches_candle`] (where CUDA's matmul needs copies), the
    /// inference ops, and f64 inputs (which always take the fallbacks).
    #[test]
    fn candle_fallbacks_match_the_fused_kernels() -> Result<()> {
        let dev = candle_core::Device::Cpu;
        let val = |n: usize, k: usize| -> Vec<f32> {
            (0..n).map(|i| (((i + k) * 7919) % 211) as f32 / 105.0 - 1.0).collect()
        };
        let (rows, inp, out) = (9, 12, 7);
        let wide = Tensor::from_vec(val(rows * (inp + 4), 1), (rows, inp + 4), &dev)?;
        let tall = Tensor::from_vec(val((out + 3) * inp, 2), (out + 3, inp), &dev)?;
        let b = Tensor::from_vec(val(out, 3), out, &dev)?;
        // A column slice of x, rows 2.. of the weight, and both transposed from their storage.
        let views =
            |t: &[Tensor]| -> Result<(Tensor, Tensor)> { Ok((t[0].narrow(1, 3, inp)?, t[1].narrow(0, 2, out)?)) };
        check_grads(
            "linear on views",
            &[wide.clone(), tall.clone(), b.clone()],
            &|t| with_candle_ops(|| views(t).and_then(|(x, w)| linear(&x, &w, &t[2], true))),
            &|t| views(t).and_then(|(x, w)| linear(&x, &w, &t[2], true)),
            1e-6,
        )?;
        let wt = Tensor::from_vec(val(inp * out, 4), (inp, out), &dev)?;
        check_grads(
            "linear, transposed weight",
            &[wide.clone(), wt, b.clone()],
            &|t| with_candle_ops(|| linear(&t[0].narrow(1, 1, inp)?, &t[1].t()?, &t[2], true)),
            &|t| linear(&t[0].narrow(1, 1, inp)?, &t[1].t()?, &t[2], true),
            1e-6,
        )?;
        let (x, w) = views(&[wide.clone(), tall.clone()])?;
        assert!(max_diff(&with_candle_ops(|| linear(&x, &w, &b, false))?, &linear(&x, &w, &b, false)?)? < 1e-6);
        let (scores, bias) = scores_and_bias(&dev)?;
        for train in [false, true] {
            let d = max_diff(
                &with_candle_ops(|| masked_softmax(&scores, &bias, train))?,
                &masked_softmax(&scores, &bias, train)?,
            )?;
            assert!(d < 1e-6, "masked softmax (train {train}): {d}");
        }
        let g = wide.affine(3.0, 0.0)?;
        assert!(max_diff(&with_candle_ops(|| gelu_erf_infer(&g))?, &gelu_erf_infer(&g)?)? < 1e-6);
        check_grads(
            "gelu",
            std::slice::from_ref(&g),
            &|t| with_candle_ops(|| gelu_erf_train(&t[0])),
            &|t| gelu_erf_train(&t[0]),
            1e-6,
        )?;
        // f64 needs no switch: it is outside the kernels' domain.
        let x64 = x.to_dtype(candle_core::DType::F64)?;
        let w64 = w.to_dtype(candle_core::DType::F64)?;
        let y64 = linear(&x64, &w64, &b.to_dtype(candle_core::DType::F64)?, true)?.to_dtype(candle_core::DType::F32)?;
        assert!(max_diff(&y64, &linear(&x, &w, &b, true)?)? < 1e-5);
        Ok(())
    }

    #[test]
    fn gelu_matches_candle() -> Result<()> {
        let xs: Vec<f32> = (-3000..3000).map(|i| i as f32 / 300.0).collect();
        let t = Tensor::new(xs.as_slice(), &candle_core::Device::Cpu)?;
        let a = gelu_erf_infer(&t)?.to_vec1::<f32>()?;
        let b = t.gelu_erf()?.to_vec1::<f32>()?;
        let worst = a.iter().zip(&b).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max);
        assert!(worst < 1e-6, "max |gelu difference| {worst}");
        Ok(())
    }
}
