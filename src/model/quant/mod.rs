//! Reduced-precision inference for the encoder's linear layers: int8 (weights per output
//! channel, activations per row, exact i32 sums) and bf16. Kernels are chosen at run time from
//! the CPU's features; `XSENT_KERNELS=avx2` or `XSENT_KERNELS=portable` forces a slower path
//! (for tests and comparisons); for bf16 `XSENT_BF16_KERNELS=avx512|avx2|portable` picks any
//! path (see [`gemm_bf16::BfPath`]). See docs/quantization.md for the scheme.

pub mod calibrate;
pub mod gemm_bf16;
pub mod gemm_i8;
pub mod quantize;

use anyhow::{bail, Context, Result};
use candle_core::{CpuStorage, CustomOp1, Layout, Shape, Tensor};
use std::sync::OnceLock;

/// A kernel path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Path {
    /// AVX-512 VNNI (`vpdpbusd`). The bf16 paths are [`gemm_bf16::BfPath`].
    Avx512Vnni,
    /// AVX2 (`vpmaddubsw`/`vpmaddwd`).
    Avx2,
    /// Plain Rust.
    Portable,
}

impl Path {
    /// Whether this CPU can run the path.
    pub fn available(self) -> bool {
        match self {
            #[cfg(target_arch = "x86_64")]
            Path::Avx512Vnni => {
                is_x86_feature_detected!("avx512f")
                    && is_x86_feature_detected!("avx512bw")
                    && is_x86_feature_detected!("avx512vnni")
            }
            #[cfg(target_arch = "x86_64")]
            Path::Avx2 => is_x86_feature_detected!("avx2"),
            Path::Portable => true,
            #[allow(unreachable_patterns)]
            _ => false,
        }
    }

    /// The paths this CPU can run, fastest first.
    pub fn all_available() -> Vec<Path> {
        [Path::Avx512Vnni, Path::Avx2, Path::Portable].into_iter().filter(|p| p.available()).collect()
    }

    /// The fastest path this CPU has.
    pub fn detected() -> Path {
        Self::all_available()[0]
    }

    /// The path in use: the fastest this CPU has, unless `XSENT_KERNELS=avx2|portable` asks for
    /// a slower one (a path the CPU lacks is refused with a warning).
    pub fn current() -> Path {
        static PATH: OnceLock<Path> = OnceLock::new();
        *PATH.get_or_init(|| {
            let want = match std::env::var("XSENT_KERNELS").as_deref() {
                Ok("avx2") => Path::Avx2,
                Ok("portable") => Path::Portable,
                _ => return Path::detected(),
            };
            if want.available() {
                want
            } else {
                crate::errln!(
                    "xsent: XSENT_KERNELS asks for the {want:?} kernels, which this CPU lacks; using {:?}",
                    Path::detected()
                );
                Path::detected()
            }
        })
    }
}

/// Element type of the encoder's linear layers at inference.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dtype {
    #[default]
    F32,
    Bf16,
    F16,
    Int8,
}

impl std::fmt::Display for Dtype {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Dtype::F32 => "f32",
            Dtype::Bf16 => "bf16",
            Dtype::F16 => "f16",
            Dtype::Int8 => "int8",
        })
    }
}

/// An int8 linear layer: `y = x Wᵀ + b` with `W` quantised per output channel.
///
/// With smoothing factors `s` (per input column; SmoothQuant's migration, from calibration:
/// [`calibrate`]), `x Wᵀ = (x / s)(W diag(s))ᵀ`: the weights are quantised as `W diag(s)`
/// and each activation row as `x / s`, which flattens outlier columns of `x` before its
/// per-row scale is taken.
#[derive(Debug)]
pub struct QLinear {
    packed: gemm_i8::PackedI8,
    /// Per-channel scales and bias, padded to `packed.np`.
    scales: Vec<f32>,
    bias: Vec<f32>,
    /// `1 / s` per input column, when smoothed.
    inv_smooth: Option<Vec<f32>>,
    /// Asymmetric activations (a scale and an offset per row): `sw_j · Σ_k q_jk` per channel
    /// (padded), for the offset's share of the output.
    asym: Option<Vec<f32>>,
}

impl QLinear {
    /// Quantise f32 weights `[out, in]` and bias `[out]`, with optional smoothing factors `[in]`.
    pub fn from_f32(weight: &Tensor, bias: &Tensor, smooth: Option<&[f32]>) -> Result<Self> {
        let (n, k) = weight.dims2()?;
        let (q, scales) = int8_weights(weight, smooth)?;
        Self::from_int8_smoothed(&q, &scales, &bias.to_dtype(candle_core::DType::F32)?.to_vec1()?, n, k, smooth)
    }

    /// [`Self::from_int8`] of weights quantised as `W diag(s)` with smoothing factors `s`.
    pub fn from_int8_smoothed(
        q: &[i8],
        scales: &[f32],
        bias: &[f32],
        n: usize,
        k: usize,
        smooth: Option<&[f32]>,
    ) -> Result<Self> {
        if let Some(s) = smooth {
            anyhow::ensure!(s.len() == k, "int8 linear layer: {k} smoothing factors expected, got {}", s.len());
            check_positive(s, "the smoothing factor of input column").context("int8 linear layer")?;
        }
        let mut l = Self::from_int8(q, scales, bias, n, k)?;
        l.inv_smooth = smooth.map(|s| s.iter().map(|f| 1.0 / f).collect());
        Ok(l)
    }

    /// From int8 weights `[n, k]` (values in [-127, 127]), their `n` scales (finite and
    /// positive) and the bias.
    pub fn from_int8(q: &[i8], scales: &[f32], bias: &[f32], n: usize, k: usize) -> Result<Self> {
        if q.len() != n * k || scales.len() != n || bias.len() != n {
            bail!(
                "int8 linear layer: {n}×{k} weights, {n} scales and {n} biases expected, got {}, {} and {}",
                q.len(),
                scales.len(),
                bias.len()
            );
        }
        if q.contains(&-128) {
            bail!("int8 linear layer: weights must lie in [-127, 127] (symmetric quantisation), found -128");
        }
        check_positive(scales, "the scale of output channel").context("int8 linear layer")?;
        let packed = gemm_i8::PackedI8::pack(q, n, k);
        let mut scales = scales.to_vec();
        let mut bias = bias.to_vec();
        scales.resize(packed.np, 0.0);
        bias.resize(packed.np, 0.0);
        Ok(Self { packed, scales, bias, inv_smooth: None, asym: None })
    }

    /// Quantise this layer's activations asymmetrically (a scale and an offset per row, all 256
    /// byte values) or symmetrically (the default).
    pub fn set_asymmetric(&mut self, on: bool) {
        self.asym =
            on.then(|| self.packed.channel_sums().iter().zip(&self.scales).map(|(&q, &s)| q as f32 * s).collect());
    }

    pub fn out_dim(&self) -> usize {
        self.packed.n
    }

    pub fn in_dim(&self) -> usize {
        self.packed.k
    }

    /// `x` (`[rows, in]` f32 on the CPU) through the layer with `path`.
    pub fn forward_slice(&self, path: Path, x: &[f32], rows: usize) -> Vec<f32> {
        let p = &self.packed;
        let mut qa = Vec::new();
        let (sa, oa) = quantize::quantize_activations(
            x,
            rows,
            p.k,
            p.kp,
            gemm_i8::shifted(path),
            self.inv_smooth.as_deref(),
            self.asym.is_some(),
            &mut qa,
        );
        let offsets = oa.as_deref().zip(self.asym.as_deref());
        gemm_i8::gemm_f32(path, &qa, rows, &sa, p, &self.scales, &self.bias, offsets)
    }
}

/// f32 weights `[out, in]` (times the smoothing factors `[in]`, if any) quantised per output
/// channel: the int8 values `[out, in]` and the `out` scales. A NaN or an infinity is refused
/// with its row and column (see [`check_weights`]).
pub fn int8_weights(weight: &Tensor, smooth: Option<&[f32]>) -> Result<(Vec<i8>, Vec<f32>)> {
    let (n, k) = weight.dims2()?;
    let w: Vec<f32> = weight.to_dtype(candle_core::DType::F32)?.flatten_all()?.to_vec1()?;
    int8_weights_of(w, n, k, smooth)
}

/// [`int8_weights`] of the values `w` (`[n, k]`, row-major).
pub fn int8_weights_of(mut w: Vec<f32>, n: usize, k: usize, smooth: Option<&[f32]>) -> Result<(Vec<i8>, Vec<f32>)> {
    anyhow::ensure!(w.len() == n * k, "int8 linear layer: {n}×{k} weights expected, got {}", w.len());
    check_weights(&w, k)?;
    if let Some(s) = smooth {
        anyhow::ensure!(s.len() == k, "int8 linear layer: {k} smoothing factors expected, got {}", s.len());
        check_positive(s, "the smoothing factor of input column")?;
        for row in w.chunks_exact_mut(k) {
            for (v, f) in row.iter_mut().zip(s) {
                *v *= f;
            }
        }
        if let Some(i) = first_non_finite(&w) {
            bail!(
                "row {}, column {} times its smoothing factor {} overflows f32: the weights or the calibration are broken",
                i / k,
                i % k,
                show(s[i % k])
            );
        }
    }
    Ok(quantize::quantize_weights(&w, n, k))
}

/// Refuses weights (`[_, k]`, row-major) holding a NaN or an infinity, naming its row and column:
/// int8 would quantise a NaN to 0 (the scales skip it) and give finite, wrong vectors.
pub fn check_weights(w: &[f32], k: usize) -> Result<()> {
    match first_non_finite(w) {
        Some(i) => bail!(
            "row {}, column {} is {}: the weights are broken (e.g. NaN after a diverged training run); use a checkpoint without NaN or infinite values",
            i / k.max(1),
            i % k.max(1),
            w[i]
        ),
        None => Ok(()),
    }
}

/// The index of the first NaN or infinity in `x`, if any: one pass that vectorises (a block is
/// searched for the index only when it holds one).
pub fn first_non_finite(x: &[f32]) -> Option<usize> {
    const BLOCK: usize = 4096;
    x.chunks(BLOCK).enumerate().find_map(|(b, c)| {
        if c.iter().fold(true, |ok, v| ok & v.is_finite()) {
            None
        } else {
            c.iter().position(|v| !v.is_finite()).map(|i| b * BLOCK + i)
        }
    })
}

/// Refuses a value that is not a positive normal f32 (NaN, infinite, 0, negative or subnormal:
/// scales multiply the sums, and smoothing divides by its factors), as "`what` I is V".
pub fn check_positive(values: &[f32], what: &str) -> Result<()> {
    match values.iter().position(|v| !(v.is_normal() && *v > 0.0)) {
        Some(i) => bail!("{what} {i} is {}; it must be finite and positive (and not subnormal)", show(values[i])),
        None => Ok(()),
    }
}

/// `v` for a message: in exponent form when tiny or huge.
fn show(v: f32) -> String {
    if v != 0.0 && (v.abs() < 1e-4 || v.abs() >= 1e16) {
        format!("{v:e}")
    } else {
        format!("{v}")
    }
}

/// A bf16 linear layer: `y = x Wᵀ + b` with `W` rounded to bf16 (nearest, ties to even) and
/// prepacked, each activation rounded to bf16 per call, sums in f32 (see [`gemm_bf16`]).
#[derive(Debug)]
pub struct BLinear {
    packed: gemm_bf16::PackedBf16,
    bias: Vec<f32>,
}

impl BLinear {
    /// Round f32 weights `[out, in]` to bf16; the bias `[out]` stays f32.
    pub fn from_f32(weight: &Tensor, bias: &Tensor) -> Result<Self> {
        let (n, k) = weight.dims2()?;
        let w: Vec<f32> = weight.to_dtype(candle_core::DType::F32)?.flatten_all()?.to_vec1()?;
        let bits: Vec<u16> = w.iter().map(|&v| gemm_bf16::to_bf16(v)).collect();
        Self::from_bf16(&bits, &bias.to_dtype(candle_core::DType::F32)?.to_vec1()?, n, k)
    }

    /// From bf16 weights `[n, k]` (bits) and the f32 bias.
    pub fn from_bf16(w: &[u16], bias: &[f32], n: usize, k: usize) -> Result<Self> {
        if w.len() != n * k || bias.len() != n {
            bail!("bf16 linear layer: {n}×{k} weights and {n} biases expected, got {} and {}", w.len(), bias.len());
        }
        Ok(Self { packed: gemm_bf16::PackedBf16::pack(w, n, k), bias: bias.to_vec() })
    }

    pub fn out_dim(&self) -> usize {
        self.packed.n
    }

    pub fn in_dim(&self) -> usize {
        self.packed.k
    }

    /// `x` (`[rows, in]` f32 on the CPU) through the layer with `path`.
    pub fn forward_slice(&self, path: gemm_bf16::BfPath, x: &[f32], rows: usize) -> Vec<f32> {
        let p = &self.packed;
        let a = gemm_bf16::activations(path, x, rows, p.k, p.kp);
        let mut out = vec![0f32; rows * p.n];
        gemm_bf16::gemm(path, &a, rows, p, &self.bias, &mut out);
        out
    }
}

/// A linear layer's weights in reduced precision.
#[derive(Debug)]
pub enum Reduced {
    Int8(QLinear),
    Bf16(BLinear),
}

impl Reduced {
    pub fn in_dim(&self) -> usize {
        match self {
            Reduced::Int8(q) => q.in_dim(),
            Reduced::Bf16(b) => b.in_dim(),
        }
    }

    pub fn out_dim(&self) -> usize {
        match self {
            Reduced::Int8(q) => q.out_dim(),
            Reduced::Bf16(b) => b.out_dim(),
        }
    }

    /// `x` (`[rows, in]` f32 on the CPU) through the layer with the current kernel path.
    pub fn forward_slice(&self, x: &[f32], rows: usize) -> Vec<f32> {
        match self {
            Reduced::Int8(q) => q.forward_slice(Path::current(), x, rows),
            Reduced::Bf16(b) => b.forward_slice(gemm_bf16::BfPath::current(), x, rows),
        }
    }

    /// `x` (`[rows, in]`, contiguous f32 on the CPU) through the layer.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        Ok(x.apply_op1_no_bwd(&ROp(self))?)
    }
}

struct ROp<'a>(&'a Reduced);

impl CustomOp1 for ROp<'_> {
    fn name(&self) -> &'static str {
        match self.0 {
            Reduced::Int8(_) => "int8-linear",
            Reduced::Bf16(_) => "bf16-linear",
        }
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let name = self.name();
        let (rows, k) = layout.shape().dims2()?;
        if k != self.0.in_dim() {
            candle_core::bail!("{name} layer: input has {k} features, the layer takes {}", self.0.in_dim());
        }
        let x = match storage {
            CpuStorage::F32(v) => v,
            _ => candle_core::bail!("{name} layer: f32 input expected"),
        };
        let x = match layout.contiguous_offsets() {
            Some((a, b)) => &x[a..b],
            None => candle_core::bail!("{name} layer: contiguous input expected"),
        };
        let out = self.0.forward_slice(x, rows);
        Ok((CpuStorage::F32(out), Shape::from((rows, self.0.out_dim()))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    /// A NaN or an infinity in the weights is refused with its row and column (and a value that
    /// overflows once multiplied by its smoothing factor): before, NaN quantised to 0 and the
    /// scales skipped it, so int8 gave finite, wrong vectors.
    #[test]
    fn int8_weights_refuse_non_finite_values_naming_row_and_column() {
        let w: Vec<f32> = (0..12).map(|i| i as f32 / 7.0 - 0.5).collect();
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            let mut w = w.clone();
            w[2 * 4 + 1] = bad;
            let t = Tensor::from_vec(w, (3, 4), &Device::Cpu).unwrap();
            let e = int8_weights(&t, None).unwrap_err().to_string();
            assert!(e.contains(&format!("row 2, column 1 is {bad}")), "{e}");
            let e = int8_weights(&t, Some(&[1.0; 4])).unwrap_err().to_string();
            assert!(e.contains(&format!("row 2, column 1 is {bad}")), "{e}");
        }
        let t = Tensor::from_vec(w, (3, 4), &Device::Cpu).unwrap();
        assert!(int8_weights(&t, None).is_ok());
        let e = int8_weights(&t, Some(&[1.0, 1.0, 1.0, f32::MAX])).unwrap_err().to_string();
        assert!(e.contains("row 2, column 3") && e.contains("smoothing factor"), "{e}");
    }

    /// Scales and smoothing factors must be finite and positive (smoothing divides by them).
    #[test]
    fn int8_layers_refuse_scales_and_smoothing_factors_that_are_not_finite_and_positive() {
        let q = vec![1i8; 6];
        let bias = [0.0f32; 2];
        assert!(QLinear::from_int8_smoothed(&q, &[1.0, 0.5], &bias, 2, 3, Some(&[1.0, 2.0, 0.5])).is_ok());
        for (bad, shown) in [(f32::NAN, "NaN"), (f32::INFINITY, "inf"), (0.0, "0"), (-1.0, "-1"), (1e-40, "1e-40")] {
            let e = format!("{:#}", QLinear::from_int8_smoothed(&q, &[1.0, bad], &bias, 2, 3, None).unwrap_err());
            assert!(e.contains(&format!("scale of output channel 1 is {shown}")), "{e}");
            let e = format!(
                "{:#}",
                QLinear::from_int8_smoothed(&q, &[1.0, 1.0], &bias, 2, 3, Some(&[1.0, 1.0, bad])).unwrap_err()
            );
            assert!(e.contains(&format!("smoothing factor of input column 2 is {shown}")), "{e}");
        }
    }
}
