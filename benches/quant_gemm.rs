//! Linear-layer throughput on the encoders' shapes (M = a batch's tokens, K/N = 384/1536), one
//! thread: f32 (the gemm crate, as inference runs now), candle's Q8_0 quantized matmul, and
//! xsent's int8 kernels and bf16 kernels on every path this CPU has (bf16: the GEMM alone, and
//! the rounding of the activations that precedes it). `cargo bench --bench quant_gemm`.
//! Prints GMAC/s (multiply-adds per second) and each one's ratio to f32.

use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
use candle_core::{Device, Module, Tensor};
use std::time::Instant;
use xsent::model::quant::gemm_bf16::{self, BfPath, PackedBf16};
use xsent::model::quant::{Path, QLinear};

fn best<F: FnMut()>(mut f: F) -> f64 {
    f();
    (0..5)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

/// Issue rate of the bare instructions, 16 independent accumulators (no loads): f32 FMAs
/// (`vfmadd231ps zmm`) and `vdpbf16ps zmm`, in instructions per nanosecond. Tells whether the
/// bf16 kernel is held back by the instruction itself or by its shape.
#[cfg(target_arch = "x86_64")]
fn probe_issue_rates() {
    use std::arch::x86_64::*;
    const ITERS: usize = 20_000_000;
    #[target_feature(enable = "avx512f")]
    unsafe fn fma() -> f32 {
        let (a, b) = (_mm512_set1_ps(1.0e-8), _mm512_set1_ps(0.999));
        let mut c = [_mm512_set1_ps(1.0); 16];
        for _ in 0..ITERS {
            for v in c.iter_mut() {
                *v = _mm512_fmadd_ps(*v, b, a);
            }
        }
        c.iter().map(|v| _mm512_reduce_add_ps(*v)).sum()
    }
    #[target_feature(enable = "avx512f,avx512bf16")]
    unsafe fn dpbf16() -> f32 {
        let x: __m512bh = std::mem::transmute(_mm512_set1_epi16(0x3f80));
        let y: __m512bh = std::mem::transmute(_mm512_set1_epi16(0x3380));
        let mut c = [_mm512_set1_ps(1.0); 16];
        for _ in 0..ITERS {
            for v in c.iter_mut() {
                *v = _mm512_dpbf16_ps(*v, x, y);
            }
        }
        c.iter().map(|v| _mm512_reduce_add_ps(*v)).sum()
    }
    let rate = |f: &dyn Fn() -> f32| {
        let s = best(|| {
            std::hint::black_box(f());
        });
        (16 * ITERS) as f64 / s / 1e9
    };
    if is_x86_feature_detected!("avx512f") {
        // SAFETY: avx512f checked above.
        let r = rate(&|| unsafe { fma() });
        xsent::outln!("issue rate, 16 chains: vfmadd231ps zmm {r:.2} per ns ({:.1} GMAC/s)", 16.0 * r);
    }
    if is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512bf16") {
        // SAFETY: avx512f and avx512bf16 checked above.
        let r = rate(&|| unsafe { dpbf16() });
        xsent::outln!("issue rate, 16 chains: vdpbf16ps zmm   {r:.2} per ns ({:.1} GMAC/s)", 32.0 * r);
    }
}

fn main() -> anyhow::Result<()> {
    std::env::set_var("RAYON_NUM_THREADS", "1");
    #[cfg(target_arch = "x86_64")]
    probe_issue_rates();
    let dev = Device::Cpu;
    let m = 2000;
    xsent::outln!("{:>16} {:>10} {:>12} {:>8}", "shape MxKxN", "kind", "GMAC/s", "vs f32");
    for (k, n) in [(384, 384), (384, 1536), (1536, 384)] {
        let x = Tensor::randn(0f32, 1.0, (m, k), &dev)?;
        let w = (Tensor::randn(0f32, 1.0, (n, k), &dev)? * 0.05)?;
        let b = Tensor::zeros(n, candle_core::DType::F32, &dev)?;
        let macs = (m * k * n) as f64;
        let shape = format!("{m}x{k}x{n}");
        let f32_s = best(|| {
            xsent::model::kernels::linear(&x, &w, &b, false).unwrap();
        });
        xsent::outln!("{shape:>16} {:>10} {:>12.1} {:>8.2}", "f32", macs / f32_s / 1e9, 1.0);
        let q = QMatMul::from_qtensor(QTensor::quantize(&w, GgmlDType::Q8_0)?)?;
        let s = best(|| {
            q.forward(&x).unwrap();
        });
        xsent::outln!("{shape:>16} {:>10} {:>12.1} {:>8.2}", "candle-q8_0", macs / s / 1e9, f32_s / s);
        let ql = QLinear::from_f32(&w, &b, None)?;
        let xs: Vec<f32> = x.flatten_all()?.to_vec1()?;
        for path in Path::all_available() {
            let s = best(|| {
                ql.forward_slice(path, &xs, m);
            });
            xsent::outln!(
                "{shape:>16} {:>10} {:>12.1} {:>8.2}",
                format!("{path:?}").to_lowercase(),
                macs / s / 1e9,
                f32_s / s
            );
        }
        let wv: Vec<f32> = w.flatten_all()?.to_vec1()?;
        let wb: Vec<u16> = wv.iter().map(|&v| gemm_bf16::to_bf16(v)).collect();
        let packed = PackedBf16::pack(&wb, n, k);
        let bias = vec![0f32; n];
        let mut out = vec![0f32; m * n];
        for path in BfPath::all_available() {
            let acts = gemm_bf16::activations(path, &xs, m, k, packed.kp);
            let s = best(|| gemm_bf16::gemm(path, &acts, m, &packed, &bias, &mut out));
            let r = best(|| {
                gemm_bf16::activations(path, &xs, m, k, packed.kp);
            });
            xsent::outln!(
                "{shape:>16} {:>10} {:>12.1} {:>8.2}   (rounding the activations: {:.1} % of the GEMM's time)",
                format!("bf16-{path:?}").to_lowercase(),
                macs / s / 1e9,
                f32_s / s,
                100.0 * r / s
            );
        }
    }
    Ok(())
}
