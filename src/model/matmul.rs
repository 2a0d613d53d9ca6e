//! Matrix products that run on every device.
//!
//! candle's CUDA matmul hands its operands to cuBLAS, which reads a matrix only when it is
//! contiguous or plainly transposed (rows, or columns, one after another with no gap). A view such
//! as a column slice (`x.narrow(1, …)`: rows wider than the matrix) fails there with "matmul is
//! only supported for contiguous tensors". [`matmul`] copies such an operand to a contiguous
//! tensor first, off the CPU only: gemm on the CPU reads any strides.

use anyhow::Result;
use candle_core::Tensor;

/// `a · b` as candle's `matmul`, each operand made readable by cuBLAS first off the CPU (or on
/// the CPU when [`super::candle_ops::candle_ops_forced`], so that CPU tests run the GPU's path).
pub fn matmul(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    Ok(blas_ready(a)?.matmul(&blas_ready(b)?)?)
}

/// `t` itself where cuBLAS reads its layout (or on the CPU), else a contiguous copy. The copy is
/// an op like any other: gradients flow through it.
pub fn blas_ready(t: &Tensor) -> Result<Tensor> {
    let cpu = t.device().is_cpu() && !super::candle_ops::candle_ops_forced();
    if cpu || cublas_reads(t.dims(), t.stride()) {
        Ok(t.clone())
    } else {
        Ok(t.contiguous()?)
    }
}

/// Whether candle 0.11's CUDA matmul accepts an operand of these dims and strides: the rule of
/// its `gemm_config` (cuda_backend/mod.rs), for either side. The last two dims are a matrix
/// stored row after row or column after column (a dimension of size 1 may have any stride);
/// of the dims before them, one may have any stride, and of two the outer one must step over
/// the inner one whole (or one of them be 1).
pub fn cublas_reads(dims: &[usize], stride: &[usize]) -> bool {
    let r = dims.len();
    if r < 2 || stride.len() != r {
        return false;
    }
    let (rows, cols) = (dims[r - 2], dims[r - 1]);
    let (s_row, s_col) = (stride[r - 2], stride[r - 1]);
    let normal = (s_col == 1 || cols == 1) && (s_row == cols || rows == 1);
    let transposed = (s_col == rows || cols == 1) && (s_row == 1 || rows == 1);
    let batch = match (&dims[..r - 2], &stride[..r - 2]) {
        ([], []) | ([_], [_]) => true,
        ([d0, d1], [s0, s1]) => *s0 == s1 * d1 || *d0 == 1 || *d1 == 1,
        _ => false,
    };
    (normal || transposed) && batch
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Tensor};

    fn t(shape: &[usize]) -> Tensor {
        let n: usize = shape.iter().product();
        Tensor::from_vec(
            (0..n).map(|i| ((i * 7919) % 211) as f32 / 50.0 - 2.0).collect::<Vec<_>>(),
            shape,
            &Device::Cpu,
        )
        .unwrap()
    }

    /// The two layouts of the failing lightweight step (`u·vᵀ` with `u`, `v` the halves of
    /// a `[128, 1024]` tensor) are refused, as candle refused them on the GPU; contiguous and
    /// transposed matrices, and the batched layouts attention uses, are read.
    #[test]
    fn knows_what_cublas_reads() {
        assert!(!cublas_reads(&[128, 512], &[1024, 1]));
        assert!(!cublas_reads(&[512, 128], &[1, 1024]));
        let x = t(&[6, 10]);
        let (u, v) = (x.narrow(1, 0, 5).unwrap(), x.narrow(1, 5, 5).unwrap());
        assert!(!cublas_reads(u.dims(), u.stride()) && !cublas_reads(v.t().unwrap().dims(), v.t().unwrap().stride()));
        assert!(cublas_reads(x.dims(), x.stride()) && cublas_reads(x.t().unwrap().dims(), x.t().unwrap().stride()));
        // Rows of a contiguous matrix (a view at an offset) are fine.
        let rows = x.narrow(0, 2, 3).unwrap();
        assert!(cublas_reads(rows.dims(), rows.stride()));
        // [B, heads, L, d] contiguous and its key transpose; a [B, L, heads, d] view with heads
        // moved in front is not (the batch dims do not nest).
        let q = t(&[2, 3, 4, 5]);
        let kt = q.t().unwrap();
        assert!(cublas_reads(q.dims(), q.stride()) && cublas_reads(kt.dims(), kt.stride()));
        let moved = t(&[2, 4, 3, 5]).transpose(1, 2).unwrap();
        assert!(!cublas_reads(moved.dims(), moved.stride()));
        // Rank 3: any batch stride.
        let b3 = t(&[4, 6, 5]).narrow(0, 1, 2).unwrap();
        assert!(cublas_reads(b3.dims(), b3.stride()));
        assert!(!cublas_reads(&[3], &[1]));
    }

    /// With the GPU's path forced on the CPU, `matmul` of views gives what candle's CPU matmul of
    /// the views gives, and its operands reach candle in layouts cuBLAS reads; gradients agree.
    #[test]
    fn views_are_made_contiguous_and_values_and_gradients_agree() -> Result<()> {
        let x = candle_core::Var::from_tensor(&t(&[6, 10]))?;
        let y = candle_core::Var::from_tensor(&t(&[6, 10]))?;
        let theirs = |x: &Tensor| -> Result<Tensor> { Ok(x.narrow(1, 0, 5)?.matmul(&x.narrow(1, 5, 5)?.t()?)?) };
        let ours = |x: &Tensor| -> Result<Tensor> { matmul(&x.narrow(1, 0, 5)?, &x.narrow(1, 5, 5)?.t()?) };
        let want = theirs(x.as_tensor())?;
        let got = super::super::candle_ops::with_candle_ops(|| -> Result<Tensor> {
            let (a, b) =
                (blas_ready(&y.as_tensor().narrow(1, 0, 5)?)?, blas_ready(&y.as_tensor().narrow(1, 5, 5)?.t()?)?);
            assert!(cublas_reads(a.dims(), a.stride()) && cublas_reads(b.dims(), b.stride()));
            ours(y.as_tensor())
        })?;
        // gemm may take another kernel for contiguous operands: equal to rounding.
        let diff = (&want - &got)?.abs()?.max_all()?.to_scalar::<f32>()?;
        assert!(diff < 1e-5, "values differ by {diff}");
        let w = t(&[6, 6]);
        let ga = want.mul(&w)?.sum_all()?.backward()?;
        let gb = got.mul(&w)?.sum_all()?.backward()?;
        let gd =
            (ga.get(x.as_tensor()).unwrap() - gb.get(y.as_tensor()).unwrap())?.abs()?.max_all()?.to_scalar::<f32>()?;
        assert!(gd < 1e-6, "gradient differs by {gd}");
        Ok(())
    }

    /// Every matrix product in the library goes through [`matmul`] (or a CPU-only kernel), so
    /// that a view can never reach cuBLAS: a `.matmul(` outside this file and the CPU kernels'
    /// backward fails this test. Test modules (after `mod tests`) may call candle's directly.
    #[test]
    fn library_code_multiplies_through_this_module() {
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut bad = Vec::new();
        let mut stack = vec![src];
        while let Some(dir) = stack.pop() {
            for e in std::fs::read_dir(&dir).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    stack.push(p);
                    continue;
                }
                if p.extension().is_none_or(|x| x != "rs") || p.ends_with("model/matmul.rs") {
                    continue;
                }
                let text = std::fs::read_to_string(&p).unwrap();
                for (i, line) in text.lines().enumerate() {
                    if line.trim_start().starts_with("mod tests") {
                        break;
                    }
                    // A product on the CPU only is marked so, and one on storages whose
                    // layouts were checked with `cublas_reads` (src/gpu) is marked cuBLAS-ready.
                    if line.contains(".matmul(")
                        && !line.contains("// CPU only")
                        && !line.contains("// cuBLAS-ready")
                        && !line.trim_start().starts_with("//")
                    {
                        bad.push(format!("{}:{}: {}", p.display(), i + 1, line.trim()));
                    }
                }
            }
        }
        assert!(
            bad.is_empty(),
            "use crate::model::matmul::matmul (cuBLAS needs contiguous operands):\n{}",
            bad.join("\n")
        );
    }
}
