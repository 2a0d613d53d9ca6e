//! GELU (erf): the erf approximation, and GELU's forward and backward kernels.

use anyhow::Result;
use candle_core::{CpuStorage, CustomOp1, CustomOp2, Layout, Shape, Tensor};

use super::softmax::exp_f32;
use super::{cpu_f32, fused_train, one_f32, two_f32};

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

super::vectorised_fn! {
    /// `0.5 · x · (1 + erf(x / √2))` of each value.
    fn gelu(x: &[f32]) -> Vec<f32> {
        // A loop here, not `collect` (a generic function of its own, compiled without AVX), into
        // an unzeroed buffer.
        let mut out = Vec::with_capacity(x.len());
        for (o, &x) in out.spare_capacity_mut()[..x.len()].iter_mut().zip(x) {
            o.write(0.5 * x * (1.0 + erf_f32(x * std::f32::consts::FRAC_1_SQRT_2)));
        }
        // SAFETY: the loop wrote all `x.len()` values.
        unsafe { out.set_len(x.len()) };
        out
    }
}

super::vectorised_fn! {
    /// `g · (Φ(x) + x·φ(x))` of each pair.
    fn gelu_grad(x: &[f32], g: &[f32]) -> Vec<f32> {
        const INV_SQRT_2PI: f32 = 0.398_942_3;
        let n = x.len().min(g.len());
        let mut out = Vec::with_capacity(n);
        for ((o, &x), &g) in out.spare_capacity_mut()[..n].iter_mut().zip(x).zip(g) {
            let cdf = 0.5 * (1.0 + erf_f32(x * std::f32::consts::FRAC_1_SQRT_2));
            o.write(g * (cdf + x * INV_SQRT_2PI * exp_f32(-0.5 * x * x)));
        }
        // SAFETY: the loop wrote all `n` values.
        unsafe { out.set_len(n) };
        out
    }
}

/// `0.5 · x · (1 + erf(x / √2))`, the exact (erf) GELU of BERT and XLM-R.
struct GeluErf;

impl CustomOp1 for GeluErf {
    fn name(&self) -> &'static str {
        "fast-gelu-erf"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let out = gelu(one_f32(self.name(), s, l)?);
        Ok((CpuStorage::F32(out), l.shape().clone()))
    }
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
        let out = gelu_grad(x, g);
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
        crate::gpu::gelu::backward((s1, l1), (s2, l2))
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

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s: &candle_core::CudaStorage,
        l: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        crate::gpu::gelu::forward((s, l))
    }

    fn bwd(&self, arg: &Tensor, _res: &Tensor, grad: &Tensor) -> candle_core::Result<Option<Tensor>> {
        Ok(Some(arg.contiguous()?.apply_op2_no_bwd(&grad.contiguous()?, &GeluErfGrad)?))
    }
}

/// GELU (erf) for training: vectorised forward and backward on CPU f32, one kernel each on CUDA
/// f32 and bf16 (src/gpu/gelu.cu, the CPU's arithmetic), candle's op elsewhere.
pub fn gelu_erf_train(x: &Tensor) -> Result<Tensor> {
    let cuda_bf16 = cfg!(feature = "cuda")
        && x.device().is_cuda()
        && x.dtype() == candle_core::DType::BF16
        && !super::training_kernels_off();
    if fused_train(&[x]) || cuda_bf16 {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The dispatched (AVX-512/AVX2) GELU and its gradient give the bits of the same arithmetic
    /// compiled for the baseline target.
    #[test]
    fn vectorised_gelu_keeps_its_bits() {
        let x: Vec<f32> =
            (-60_000..60_000).map(|i| i as f32 / 7_000.0).chain([f32::MAX, -f32::MAX, 0.0, -0.0]).collect();
        let g: Vec<f32> = x.iter().map(|v| 1.0 - v * 0.25).collect();
        let (y, dy) = (gelu(&x), gelu_grad(&x, &g));
        for (i, &v) in x.iter().enumerate() {
            let want = 0.5 * v * (1.0 + erf_f32(v * std::f32::consts::FRAC_1_SQRT_2));
            assert_eq!(y[i].to_bits(), want.to_bits(), "gelu({v})");
            let cdf = 0.5 * (1.0 + erf_f32(v * std::f32::consts::FRAC_1_SQRT_2));
            let want = g[i] * (cdf + v * 0.398_942_3 * exp_f32(-0.5 * v * v));
            assert_eq!(dy[i].to_bits(), want.to_bits(), "gelu'({v})");
        }
    }

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
