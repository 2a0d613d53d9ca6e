//! CPU kernels for what candle computes with scalar libm calls or many small ops, one op per file:
//! GELU (erf) and attention's masked softmax, for inference (no autograd) and for training (custom
//! ops whose backward is a fused kernel too), attention's head split and merge, the linear layers
//! (product and bias in one op, with a fused backward for training), and for training LayerNorm
//! and the dropout product. Candle's backward costs every op its own gradient ops (and its
//! broadcast ops a strided row reduction), so one fused op with a fused backward saves several
//! full-size passes. The training ops of LayerNorm, the masked softmax, GELU and the linear layer,
//! and the head split and merge, have a CUDA side too (`src/gpu`, `--features cuda`): on a GPU
//! each is one kernel forward and one or two backward, where candle's ops take a launch per op. Where no kernel runs (other dtypes, other
//! devices, `XSENT_KERNELS=candle`), LayerNorm and softmax still train as one forward op each with
//! a backward in closed form ([`given_value`]). This module holds the dispatch and the storage
//! accessors the ops share. Tests check values and gradients against candle's own differentiable
//! ops.

use candle_core::{CpuStorage, Layout, Tensor};

mod gelu;
mod given_value;
mod heads;
mod layer_norm;
mod linear;
mod mask_mul;
mod softmax;

pub use gelu::{erf_f32, gelu_erf_infer, gelu_erf_train};
pub use heads::{merge_heads, split_heads};
pub use layer_norm::{add_layer_norm_infer, layer_norm_train};
pub use linear::linear;
pub use mask_mul::dropout_mul;
pub use softmax::{exp_f32, masked_softmax};

pub use super::candle_ops::{candle_ops_forced, training_kernels_off, with_candle_ops, with_gpu_paths};

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

/// The values of a contiguous f32 or bf16 input as f32 (bf16 widened, exactly), and whether it
/// was bf16: the kernels that take a bf16 activation compute in f32, as the f32 path on its
/// widened copy would.
fn widened<'a>(op: &str, s: &'a CpuStorage, l: &Layout) -> candle_core::Result<(std::borrow::Cow<'a, [f32]>, bool)> {
    let Some((a, b)) = l.contiguous_offsets() else { candle_core::bail!("{op}: contiguous input only") };
    match s {
        CpuStorage::F32(v) => Ok((std::borrow::Cow::Borrowed(&v[a..b]), false)),
        CpuStorage::BF16(v) => Ok((std::borrow::Cow::Owned(v[a..b].iter().map(|x| x.to_f32()).collect()), true)),
        _ => candle_core::bail!("{op}: f32 or bf16 only"),
    }
}

/// `out` as f32 storage, or rounded (to nearest even) to bf16.
fn f32_or_bf16(out: Vec<f32>, bf16: bool) -> CpuStorage {
    if bf16 {
        CpuStorage::BF16(out.into_iter().map(half::bf16::from_f32).collect())
    } else {
        CpuStorage::F32(out)
    }
}

/// Whether every tensor is on the CPU and f32: the kernels' domain (elsewhere candle's ops run),
/// unless [`candle_ops_forced`].
fn cpu_f32(ts: &[&Tensor]) -> bool {
    !candle_ops_forced() && ts.iter().all(|t| t.device().is_cpu() && t.dtype() == candle_core::DType::F32)
}

/// Defines `fn name(args) -> ret { body }` that runs `body` compiled for AVX-512 (or AVX2) when
/// this CPU has it. The element-wise kernels are written to vectorise, but the default target is
/// x86-64's baseline (SSE2), where `trunc` is a library call and vectors are 4 wide; inlined into
/// these functions the same loops use 16- or 8-wide vectors and `vrndscaleps`/`vroundps`. The
/// results are the same bits on every path: Rust never fuses a multiply and an add, and the
/// loops keep their order of additions. (A closure passed to one such function was not inlined
/// into it, hence a macro.)
macro_rules! vectorised_fn {
    ($(#[$m:meta])* $vis:vis fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)? $body:block) => {
        $(#[$m])*
        $vis fn $name($($arg: $ty),*) $(-> $ret)? {
            $(#[$m])*
            #[inline(always)]
            fn inner($($arg: $ty),*) $(-> $ret)? $body
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl")]
                unsafe fn avx512($($arg: $ty),*) $(-> $ret)? {
                    inner($($arg),*)
                }
                #[target_feature(enable = "avx2")]
                unsafe fn avx2($($arg: $ty),*) $(-> $ret)? {
                    inner($($arg),*)
                }
                if $crate::model::kernels::has_avx512() {
                    // SAFETY: the CPU has these features (`has_avx512`).
                    return unsafe { avx512($($arg),*) };
                }
                if is_x86_feature_detected!("avx2") {
                    // SAFETY: the CPU has AVX2 (checked just above).
                    return unsafe { avx2($($arg),*) };
                }
            }
            inner($($arg),*)
        }
    };
}
pub(crate) use vectorised_fn;

/// Whether the CPU has the AVX-512 subsets [`vectorised_fn`] compiles for.
#[cfg(target_arch = "x86_64")]
pub(crate) fn has_avx512() -> bool {
    is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512bw")
        && is_x86_feature_detected!("avx512dq")
        && is_x86_feature_detected!("avx512vl")
}

/// Whether the training ops with a CUDA side (LayerNorm, masked softmax, GELU: forward and
/// backward) run fused on these tensors: f32 on the CPU (this module's kernels) or, in a
/// `--features cuda` build, f32 on a GPU (`src/gpu/*.cu`), unless [`training_kernels_off`]
/// (`XSENT_KERNELS=candle`, which keeps candle's ops on every device: the fallback, and a way
/// back should a GPU kernel be at fault). `XSENT_KERNELS=gpu` keeps them on: a GPU runs them.
fn fused_train(ts: &[&Tensor]) -> bool {
    !training_kernels_off() && ts.iter().all(|t| t.dtype() == candle_core::DType::F32) && same_kernel_device(ts)
}

/// [`fused_train`] for an op whose activation `ts[0]` may also be bf16 (bf16 training: LayerNorm
/// takes it as it is, computes in f32 and rounds once, where a cast to f32 and back would cost two
/// more ops and give the same bits) and whose other inputs are f32.
fn fused_train_bf16(ts: &[&Tensor]) -> bool {
    let x_ok = ts.first().is_some_and(|x| matches!(x.dtype(), candle_core::DType::F32 | candle_core::DType::BF16));
    !training_kernels_off()
        && x_ok
        && ts[1..].iter().all(|t| t.dtype() == candle_core::DType::F32)
        && same_kernel_device(ts)
}

/// [`fused_train`]'s rule for an op whose inputs may also all be bf16: bf16 training's linear
/// layer (a bf16 activation and the step's bf16 copy of the weight and bias), and the head split
/// and merge, which take it in inference too (the name says "fused", not "train", for that).
fn fused_f32_or_bf16(ts: &[&Tensor]) -> bool {
    let bf16 = ts.iter().all(|t| t.dtype() == candle_core::DType::BF16);
    fused_train(ts) || (bf16 && !training_kernels_off() && same_kernel_device(ts))
}

/// Whether the tensors are all on the CPU, or (`--features cuda`) all on one GPU.
fn same_kernel_device(ts: &[&Tensor]) -> bool {
    let one_gpu = ts.windows(2).all(|p| p[0].device().same_device(p[1].device()));
    ts.iter().all(|t| t.device().is_cpu())
        || (cfg!(feature = "cuda") && one_gpu && ts.iter().all(|t| t.device().is_cuda()))
}

/// The f32 data of a contiguous input.
fn one_f32<'a>(op: &str, s: &'a CpuStorage, l: &Layout) -> candle_core::Result<&'a [f32]> {
    let CpuStorage::F32(v) = s else { candle_core::bail!("{op}: f32 only") };
    let Some((a, b)) = l.contiguous_offsets() else { candle_core::bail!("{op}: contiguous input only") };
    Ok(&v[a..b])
}

#[cfg(test)]
mod tests {
    use anyhow::Result;

    use super::*;

    /// A `[2, 3, 5, 37]` score tensor and a `[2, 1, 1, 37]` mask bias with two masked keys.
    pub(super) fn scores_and_bias(dev: &candle_core::Device) -> Result<(Tensor, Tensor)> {
        let xs: Vec<f32> = (0..2 * 3 * 5 * 37).map(|i| ((i * 7919) % 211) as f32 / 13.0 - 8.0).collect();
        let mut bias = vec![0f32; 2 * 37];
        bias[3] = -1e30;
        bias[37 + 30] = -1e30;
        Ok((Tensor::from_vec(xs, (2, 3, 5, 37), dev)?, Tensor::from_vec(bias, (2, 1, 1, 37), dev)?))
    }

    /// Largest absolute difference between two tensors' values.
    pub(super) fn max_diff(a: &Tensor, b: &Tensor) -> Result<f32> {
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
    pub(super) fn check_grads(
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
        let ours = split_heads(&x, b, l, nh, None)?;
        assert_eq!(ours.dims(), &[b, nh, l, d]);
        assert_eq!(max_diff(&ours, &theirs)?, 0.0);
        assert_eq!(max_diff(&merge_heads(&ours)?, &x)?, 0.0);
        // No rows: empty in, empty out; a width that is not heads × d is refused.
        let empty = Tensor::zeros((0, nh * d), candle_core::DType::F32, &dev)?;
        assert_eq!(merge_heads(&split_heads(&empty, 0, l, nh, None)?)?.dims(), &[0, nh * d]);
        assert!(
            split_heads(&Tensor::zeros((b * l, nh * d + 1), candle_core::DType::F32, &dev)?, b, l, nh, None).is_err()
        );
        // Gradients through split, a product with fixed weights and merge, against candle's views.
        let w = Tensor::from_vec(
            (0..b * nh * l * d).map(|i| ((i * 31) % 17) as f32 - 8.0).collect::<Vec<_>>(),
            (b, nh, l, d),
            &dev,
        )?;
        check_grads(
            "split/merge heads",
            std::slice::from_ref(&x),
            &|t| merge_heads(&split_heads(&t[0], b, l, nh, None)?.mul(&w)?),
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
            let split = |y: Tensor, scale: Option<f64>| -> Result<Tensor> {
                if fused {
                    split_heads(&y, b, l, nh, scale)
                } else {
                    let y = match scale {
                        Some(s) => (y * s)?,
                        None => y,
                    };
                    Ok(y.reshape((b, l, nh, d))?.transpose(1, 2)?.contiguous()?)
                }
            };
            let q = split(lin(&x, 0)?, Some(0.5))?;
            let (k, v) = (split(lin(&x, 1)?, None)?, split(lin(&x, 2)?, None)?);
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

    /// The fallbacks a GPU runs, forced on the CPU, against the fused kernels: the linear layer
    /// on every view layout of `linear::tests::linear_matches_candle` (where CUDA's matmul needs
    /// copies), the inference ops, and f64 inputs (which always take the fallbacks).
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

    /// `gpu` keeps training's LayerNorm on its fused kernel (the CPU standing in for the CUDA
    /// one: the default run's bits), `candle` takes candle's ops for it (other bits); both force
    /// the GPU's other paths, and a test's setting ends with its closure.
    #[test]
    fn gpu_paths_keep_the_training_kernels_and_candle_drops_them() -> anyhow::Result<()> {
        let x: Vec<f32> = (0..6 * 37).map(|i| ((i * 7919) % 211) as f32 / 13.0 - 8.0).collect();
        let x = candle_core::Var::from_tensor(&Tensor::from_vec(x, (6, 37), &candle_core::Device::Cpu)?)?;
        let (w, b) = (
            Tensor::ones(37, candle_core::DType::F32, &candle_core::Device::Cpu)?,
            Tensor::zeros(37, candle_core::DType::F32, &candle_core::Device::Cpu)?,
        );
        let norm = || -> anyhow::Result<(Vec<u32>, Vec<u32>)> {
            let y = layer_norm_train(x.as_tensor(), &w, &b, 1e-12)?;
            let g = (&y * &y)?.sum_all()?.backward()?;
            let bits = |t: &Tensor| -> anyhow::Result<Vec<u32>> {
                Ok(t.flatten_all()?.to_vec1::<f32>()?.iter().map(|v| v.to_bits()).collect())
            };
            Ok((bits(&y)?, bits(g.get(x.as_tensor()).unwrap())?))
        };
        let fused = norm()?;
        assert!(!candle_ops_forced() && !training_kernels_off());
        let gpu = with_gpu_paths(|| {
            assert!(candle_ops_forced() && !training_kernels_off());
            norm()
        })?;
        let candle = with_candle_ops(|| {
            assert!(candle_ops_forced() && training_kernels_off());
            norm()
        })?;
        assert!(!candle_ops_forced() && !training_kernels_off());
        assert_eq!(gpu, fused, "XSENT_KERNELS=gpu left the fused LayerNorm");
        assert_ne!(candle, fused, "XSENT_KERNELS=candle kept the fused LayerNorm");
        Ok(())
    }
}
