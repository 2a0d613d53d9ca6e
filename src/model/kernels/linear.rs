//! The linear layer: product and bias in one op, with a fused backward for training.

use anyhow::Result;
use candle_core::{CpuStorage, CustomOp1, CustomOp3, Layout, Shape, Tensor};

use super::{cpu_f32, fused_train, one_f32};

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
/// gradient in its own layout; candle's ops elsewhere.
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
    if !(cpu_f32(&[x, w, b]) || (train && !empty && fused_train(&[x, w, b]))) {
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
}
