//! The linear layer: product and bias in one op, with a fused backward for training.

use anyhow::Result;
use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, CustomOp1, CustomOp3, Layout, Shape, Tensor};

use super::{cpu_f32, f32_or_bf16, fused_f32_or_bf16, one_f32, widened};

/// Column sums of a `[rows, n]` tensor, a `[n]` vector (accumulated in f64, rounded to f32, and
/// for a bf16 tensor then to bf16: the bias gradient of bf16 training, which candle's bf16 sum
/// on the CPU accumulates in bf16, rounding after every row).
struct ColumnSums;

impl CustomOp1 for ColumnSums {
    fn name(&self) -> &'static str {
        "fast-column-sums"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let (v, bf16) = widened(self.name(), s, l)?;
        let n = *l.dims().last().unwrap_or(&1);
        let mut acc = vec![0f64; n];
        if n > 0 {
            for row in v.chunks_exact(n) {
                acc.iter_mut().zip(row).for_each(|(a, &x)| *a += x as f64);
            }
        }
        Ok((f32_or_bf16(acc.into_iter().map(|v| v as f32).collect(), bf16), Shape::from(n)))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s: &candle_core::CudaStorage,
        l: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        crate::gpu::linear::column_sums((s, l))
    }
}

/// `x·Wᵀ + b` for a `[rows, in]` `x`, a `[out, in]` weight and a `[out]` bias: the product as
/// candle computes `x.matmul(&w.t())` (the same gemm call, so the same values), then the bias.
/// Its backward gives the weight's gradient as `gradᵀ·x`, already `[out, in]`, where candle's
/// composition sends `xᵀ·grad` through the transpose node (a transposed view, copied where a
/// contiguous gradient is needed), and the bias its gradient as one column sum ([`ColumnSums`])
/// where candle's broadcast add reduces the gradient over the rows with its generic sum.
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
        let (&[m, k], &[n, k2], 1) = (l1.dims(), l2.dims(), l3.dims().len()) else {
            candle_core::bail!(
                "{name}: [rows, in], [out, in] and [out] expected, got {:?}, {:?}, {:?}",
                l1.dims(),
                l2.dims(),
                l3.dims()
            )
        };
        if k != k2 || l3.dims() != [n] {
            candle_core::bail!("{name}: shapes {:?}, {:?}, {:?} do not fit", l1.dims(), l2.dims(), l3.dims());
        }
        if let (CpuStorage::BF16(_), CpuStorage::BF16(_), CpuStorage::BF16(_)) = (s1, s2, s3) {
            // bf16 training: candle's bf16 product and broadcast sum, as its ops would run them
            // (the same bits), in one graph node with this op's backward.
            let prod = s1.matmul(s2, (1, m, n, k), l1, &l2.transpose(0, 1)?)?; // CPU only
            let out =
                prod.binary_impl::<candle_core::op::Add>(s3, &Layout::contiguous((m, n)), &l3.broadcast_as((m, n))?)?;
            return Ok((out, Shape::from((m, n))));
        }
        let (CpuStorage::F32(x), CpuStorage::F32(w)) = (s1, s2) else {
            candle_core::bail!("{name}: f32, or bf16 for all three, only")
        };
        let b = one_f32(name, s3, l3)?;
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
        let wt = l2.transpose(0, 1)?;
        for (what, l) in [("input", l1), ("weight", &wt)] {
            if !crate::model::matmul::cublas_reads(l.dims(), l.stride()) {
                candle_core::bail!("{}: cuBLAS cannot read the {what}'s strides {:?}", self.name(), l.stride());
            }
        }
        crate::gpu::linear::forward((s1, l1), (s2, l2), (s3, l3))
    }

    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        b: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        // Off the CPU the operands are made readable by cuBLAS first (a no-op on the CPU's own path).
        let mm = |a: &Tensor, b: &Tensor| {
            crate::model::matmul::matmul(a, b).map_err(|e| candle_core::Error::Msg(format!("{}: {e:#}", self.name())))
        };
        let dx = if x.track_op() { Some(mm(grad, &w.detach())?) } else { None };
        let dw = if w.track_op() { Some(mm(&grad.t()?, &x.detach())?) } else { None };
        let db = if b.track_op() { Some(grad.contiguous()?.apply_op1_no_bwd(&ColumnSums)?) } else { None };
        Ok((dx, dw, db))
    }
}

/// `x·Wᵀ + b` with `x` `[rows, in]`, `w` `[out, in]` and `b` `[out]`: on CPU f32, and in training
/// on CUDA f32 (src/gpu/linear.rs), one op (the same values as candle's `matmul` then
/// `broadcast_add`, one output buffer instead of two) whose backward (`train`) hands the weight its
/// gradient in its own layout; in bf16 training (all three bf16) the same op on the CPU and on
/// CUDA, the product and bias by candle's bf16 kernels, the bias gradient summed in f64; candle's
/// ops elsewhere.
pub fn linear(x: &Tensor, w: &Tensor, b: &Tensor, train: bool) -> Result<Tensor> {
    anyhow::ensure!(
        x.rank() == 2 && w.rank() == 2 && b.rank() == 1,
        "linear: [rows, in], [out, in] and [out] expected, got {:?}, {:?}, {:?}",
        x.dims(),
        w.dims(),
        b.dims()
    );
    // Training on CUDA f32 (and on the CPU with `XSENT_KERNELS=gpu`) takes the fused op too, its
    // operands made readable by cuBLAS.
    // (An empty product stays with candle, whose matmul answers it without cuBLAS.)
    let empty = x.elem_count() == 0 || w.elem_count() == 0;
    if !(cpu_f32(&[x, w, b]) || (train && !empty && fused_f32_or_bf16(&[x, w, b]))) {
        return Ok(crate::model::matmul::matmul(x, &w.t()?)?.broadcast_add(b)?);
    }
    let (x, w) = (&crate::model::matmul::blas_ready(x)?, &crate::model::matmul::blas_ready(w)?);
    let b = b.contiguous()?;
    Ok(if train { x.apply_op3(w, &b, FusedLinear)? } else { x.apply_op3_no_bwd(w, &b, &FusedLinear)? })
}

#[cfg(test)]
mod tests {
    use super::super::tests::{check_grads, max_diff};
    use super::*;

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

    /// bf16 training's linear layer (all three bf16): values and the input's gradient bit for bit
    /// candle's bf16 `matmul` then `broadcast_add`, on a contiguous input and a column slice; the
    /// weight's gradient within bf16 rounding of candle's composition; the bias gradient, summed
    /// over 4,096 rows, within a bf16 rounding of the f64 sum of the same bf16 values, where
    /// candle's bf16 sum (rounding after every row) is further off (which also shows the op ran).
    #[test]
    fn bf16_linear_equals_candle_and_sums_the_bias_gradient_in_f64() -> Result<()> {
        use candle_core::{DType, Var};
        let dev = candle_core::Device::Cpu;
        let bf = |n: usize, k: usize, shape: (usize, usize)| -> Result<Tensor> {
            let v: Vec<f32> = (0..n).map(|i| (((i + k) * 7919) % 211) as f32 / 105.0 - 1.0).collect();
            Ok(Tensor::from_vec(v, shape, &dev)?.to_dtype(DType::BF16)?)
        };
        let (rows, inp, out) = (4096, 70, 45);
        let reference =
            |x: &Tensor, w: &Tensor, b: &Tensor| -> Result<Tensor> { Ok(x.matmul(&w.t()?)?.broadcast_add(b)?) };
        let up = bf(rows * out, 9, (rows, out))?;
        let run = |view: &dyn Fn(&Tensor) -> candle_core::Result<Tensor>, fused: bool| -> Result<Vec<Vec<f32>>> {
            let xb = Var::from_tensor(&bf(rows * (inp + 9), 3, (rows, inp + 9))?)?;
            let w = Var::from_tensor(&bf(out * inp, 1, (out, inp))?)?;
            let b = Var::from_tensor(&bf(out, 2, (1, out))?.squeeze(0)?)?;
            let x = view(xb.as_tensor())?;
            let y = if fused {
                linear(&x, w.as_tensor(), b.as_tensor(), true)?
            } else {
                reference(&x, w.as_tensor(), b.as_tensor())?
            };
            assert_eq!(y.dtype(), DType::BF16);
            let g = (&y * &up)?.to_dtype(DType::F32)?.sum_all()?.backward()?;
            let host = |t: &Tensor| t.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>();
            let mut outs = vec![host(&y)?];
            for v in [&xb, &w, &b] {
                let gv = g.get(v.as_tensor()).expect("a gradient");
                assert_eq!(gv.dtype(), DType::BF16);
                outs.push(host(gv)?);
            }
            Ok(outs)
        };
        type View = dyn Fn(&Tensor) -> candle_core::Result<Tensor>;
        let views: [(&str, Box<View>); 2] = [
            ("a column slice", Box::new(move |t: &Tensor| t.narrow(1, 5, inp))),
            ("contiguous", Box::new(move |t: &Tensor| t.narrow(1, 0, inp)?.contiguous())),
        ];
        for (what, view) in &views {
            let (ours, theirs) = (run(view.as_ref(), true)?, run(view.as_ref(), false)?);
            assert!(ours[0].iter().zip(&theirs[0]).all(|(a, b)| a.to_bits() == b.to_bits()), "{what}: values differ");
            // The input's gradient is candle's own call (`grad·w`): the same bits.
            assert!(ours[1].iter().zip(&theirs[1]).all(|(a, b)| a.to_bits() == b.to_bits()), "{what}: dx differs");
            // The weight's is `gradᵀ·x` where candle takes `(xᵀ·grad)ᵀ`: the same sums in the gemm's
            // order, each rounded to bf16.
            let worst =
                ours[2].iter().zip(&theirs[2]).map(|(a, b)| (a - b).abs() / b.abs().max(1.0)).fold(0f32, f32::max);
            assert!(worst <= 1.0 / 128.0, "{what}: gradient of w {worst} from candle's");
            // The bias gradient: Σ over rows of the bf16 upstream gradient, in f64.
            let upv = up.to_dtype(DType::F32)?.to_vec2::<f32>()?;
            let exact: Vec<f64> = (0..out).map(|j| upv.iter().map(|r| r[j] as f64).sum()).collect();
            let err = |got: &[f32]| {
                got.iter().zip(&exact).map(|(g, e)| (*g as f64 - e).abs() / e.abs().max(1.0)).fold(0f64, f64::max)
            };
            let (e_ours, e_candle) = (err(&ours[3]), err(&theirs[3]));
            assert!(e_ours <= 1.0 / 256.0, "{what}: bias gradient {e_ours} from the f64 sum");
            assert!(e_candle > 4.0 * e_ours.max(1e-6), "{what}: candle's bf16 sum {e_candle}, ours {e_ours}");
            crate::errln!("{what}: bias gradient's largest error: ours {e_ours:.2e}, candle's bf16 sum {e_candle:.2e}");
        }
        Ok(())
    }
}
