//! Dropout with a counter-based mask, for GPUs: element `i` of a tensor is dropped when
//! `splitmix64(seed + (i + 1)·φ)`, read as a fraction in [0, 1) from its top 24 bits, is below
//! `p`. The mask is a function of the seed and the position, so it is computed where the tensor
//! lives (one kernel, src/gpu/dropout.cu), never drawn on the host and copied over, and never
//! stored: backward recomputes it. The CPU computes the same mask (so the two can be compared),
//! but CPU training keeps its own masks, drawn element by element from the run's RNG.

use anyhow::Result;
use candle_core::{CpuStorage, CustomOp1, Layout, Shape, Tensor};

/// Whether element `i` survives under `seed` and drop probability `p`.
#[inline(always)]
pub fn keep(seed: u64, i: u64, p: f32) -> bool {
    let mut z = seed.wrapping_add((i + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    let u = (z >> 40) as f32 * (1.0 / 16_777_216.0);
    u >= p
}

/// `x ⊙ mask / (1 − p)`; its backward is the same op on the gradient (same seed, same mask).
struct HashDropout {
    seed: u64,
    p: f32,
    scale: f32,
}

impl CustomOp1 for HashDropout {
    fn name(&self) -> &'static str {
        "xsent-dropout"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let Some((a, b)) = l.contiguous_offsets() else { candle_core::bail!("{}: contiguous input only", self.name()) };
        let drop = |i: usize, x: f32| if keep(self.seed, i as u64, self.p) { x * self.scale } else { 0.0 };
        let out = match s {
            CpuStorage::F32(v) => CpuStorage::F32(v[a..b].iter().enumerate().map(|(i, &x)| drop(i, x)).collect()),
            // bf16 training: in f32 and rounded once, as the f32 op on the widened values.
            CpuStorage::BF16(v) => CpuStorage::BF16(
                v[a..b].iter().enumerate().map(|(i, &x)| half::bf16::from_f32(drop(i, x.to_f32()))).collect(),
            ),
            _ => candle_core::bail!("{}: f32 or bf16 only", self.name()),
        };
        Ok((out, l.shape().clone()))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s: &candle_core::CudaStorage,
        l: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        crate::gpu::dropout(s, l, self.seed, self.p, self.scale)
    }

    fn bwd(&self, _arg: &Tensor, _res: &Tensor, grad: &Tensor) -> candle_core::Result<Option<Tensor>> {
        Ok(Some(grad.contiguous()?.apply_op1(HashDropout { ..*self })?))
    }
}

/// Whether [`apply`] runs on `x`: f32 or bf16 (computed in f32, rounded once), on the CPU or CUDA.
pub fn applies(x: &Tensor) -> bool {
    let device_ok = x.device().is_cpu() || x.device().is_cuda();
    matches!(x.dtype(), candle_core::DType::F32 | candle_core::DType::BF16) && device_ok
}

/// Inverted dropout of `x` with drop probability `0 < p < 1` and the mask of `seed`; `None` where
/// the op does not run (see [`applies`]).
pub fn apply(x: &Tensor, p: f64, seed: u64) -> Result<Option<Tensor>> {
    if !applies(x) {
        return Ok(None);
    }
    let op = HashDropout { seed, p: p as f32, scale: (1.0 / (1.0 - p)) as f32 };
    Ok(Some(x.contiguous()?.apply_op1(op)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    /// The drop rate is p, the kept values are scaled by 1/(1−p), another seed gives another
    /// mask, and the gradient is the mask times the scale.
    #[test]
    fn drops_p_of_the_values_and_backward_uses_the_same_mask() -> Result<()> {
        let n = 200_000;
        let x = candle_core::Var::from_tensor(&Tensor::ones(n, candle_core::DType::F32, &Device::Cpu)?)?;
        for p in [0.1, 0.5] {
            let y = apply(x.as_tensor(), p, 42)?.expect("runs on the CPU");
            let v = y.to_vec1::<f32>()?;
            let dropped = v.iter().filter(|&&a| a == 0.0).count() as f64 / n as f64;
            assert!((dropped - p).abs() < 0.005, "p {p}: dropped {dropped}");
            let scale = (1.0 / (1.0 - p)) as f32;
            assert!(v.iter().all(|&a| a == 0.0 || a == scale));
            let g = y.sum_all()?.backward()?;
            assert_eq!(g.get(x.as_tensor()).unwrap().to_vec1::<f32>()?, v, "the gradient of Σ dropout(1) is the mask");
            let other = apply(x.as_tensor(), p, 43)?.unwrap().to_vec1::<f32>()?;
            assert!(other.iter().zip(&v).filter(|(a, b)| a != b).count() > n / 20);
        }
        // A view is made contiguous first: its mask is that of its elements in order.
        let m = Tensor::arange(0f32, 12.0, &Device::Cpu)?.reshape((3, 4))?;
        let a = apply(&m.t()?, 0.5, 7)?.unwrap();
        let b = apply(&m.t()?.contiguous()?, 0.5, 7)?.unwrap();
        assert_eq!(a.flatten_all()?.to_vec1::<f32>()?, b.flatten_all()?.to_vec1::<f32>()?);
        assert!(apply(&m.to_dtype(candle_core::DType::F64)?, 0.5, 7)?.is_none());
        Ok(())
    }

    /// bf16: the f32 op's bits on the widened values, rounded once, forward and backward.
    #[test]
    fn bf16_equals_the_f32_op_rounded() -> Result<()> {
        use candle_core::{DType, Var};
        let n = 10_007;
        let vals: Vec<f32> = (0..n).map(|i| ((i * 7919) % 211) as f32 / 17.0 - 5.0).collect();
        let xb = Var::from_tensor(&Tensor::from_vec(vals, n, &Device::Cpu)?.to_dtype(DType::BF16)?)?;
        let yb = apply(xb.as_tensor(), 0.1, 7)?.expect("bf16 runs");
        assert_eq!(yb.dtype(), DType::BF16);
        let yf = apply(&xb.as_tensor().to_dtype(DType::F32)?, 0.1, 7)?.unwrap().to_dtype(DType::BF16)?;
        let bits =
            |t: &Tensor| -> Result<Vec<u16>> { Ok(t.to_vec1::<half::bf16>()?.iter().map(|v| v.to_bits()).collect()) };
        assert_eq!(bits(&yb)?, bits(&yf)?, "values");
        let up = Tensor::from_vec((0..n).map(|i| (i % 97) as f32 / 7.0).collect::<Vec<_>>(), n, &Device::Cpu)?
            .to_dtype(DType::BF16)?;
        let g = (&yb * &up)?.to_dtype(DType::F32)?.sum_all()?.backward()?;
        let want = apply(&up.to_dtype(DType::F32)?, 0.1, 7)?.unwrap().to_dtype(DType::BF16)?;
        assert_eq!(bits(g.get(xb.as_tensor()).unwrap())?, bits(&want)?, "gradients: the mask on the upstream gradient");
        Ok(())
    }
}
