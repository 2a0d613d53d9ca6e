//! Inference-only CPU kernels that candle computes with scalar libm calls.
//! The training path keeps candle's differentiable ops; tests check the two agree.

use anyhow::Result;
use candle_core::{CpuStorage, CustomOp1, Layout, Shape, Tensor};

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
    p = x2 * p + -2.954_600e-3;
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
        let CpuStorage::F32(v) = s else { candle_core::bail!("fast-gelu-erf: f32 only") };
        let Some((a, b)) = l.contiguous_offsets() else { candle_core::bail!("fast-gelu-erf: contiguous input only") };
        let out: Vec<f32> = v[a..b]
            .iter()
            .map(|&x| 0.5 * x * (1.0 + erf_f32(x * std::f32::consts::FRAC_1_SQRT_2)))
            .collect();
        Ok((CpuStorage::F32(out), l.shape().clone()))
    }
}

/// GELU (erf) for inference: the vectorised kernel on CPU f32, candle's op elsewhere.
pub fn gelu_erf_infer(x: &Tensor) -> Result<Tensor> {
    if x.device().is_cpu() && x.dtype() == candle_core::DType::F32 {
        Ok(x.contiguous()?.apply_op1_no_bwd(&GeluErf)?)
    } else {
        Ok(x.gelu_erf()?)
    }
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
