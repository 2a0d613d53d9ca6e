//! Calibration of int8 smoothing: the largest magnitude of each input column of every linear
//! layer, recorded in an f32 forward over calibration text, gives SmoothQuant's factors
//! `s_c = sqrt(max|x_c| / max_j |W_jc|)` (α = ½). See docs/quantization.md for how the
//! text and its size were chosen (on STS-B train and dev only).

use anyhow::Result;
use candle_core::Tensor;
use std::sync::Mutex;

/// The built-in calibration text: 64 English sentences of STS-B train (a training split; none
/// of the test sets), one per line.
pub const BUILTIN: &str = include_str!("../../../assets/int8-calibration.txt");

/// [`BUILTIN`]'s sentences.
pub fn builtin() -> Vec<&'static str> {
    BUILTIN.lines().filter(|l| !l.trim().is_empty()).collect()
}

/// Where [`BUILTIN`] comes from, for model cards.
pub const BUILTIN_SOURCE: &str =
    "xsent's built-in calibration text (assets/int8-calibration.txt: 64 sentences of STS-B train)";

/// The largest magnitude seen in each column of a linear layer's inputs: NaN once a NaN was seen
/// there, infinity once an infinity was (so that the check of the maxima finds them).
#[derive(Debug, Default)]
pub struct ColumnMax(Mutex<Vec<f32>>);

impl ColumnMax {
    /// Take in the rows of `x` (`[rows, in]`).
    pub fn record(&self, x: &Tensor) -> Result<()> {
        let (_, k) = x.dims2()?;
        let v: Vec<f32> = x.to_dtype(candle_core::DType::F32)?.flatten_all()?.to_vec1()?;
        let mut m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if m.len() != k {
            anyhow::ensure!(m.is_empty(), "calibration: a layer saw inputs of {} and then {k} columns", m.len());
            m.resize(k, 0.0);
        }
        for row in v.chunks_exact(k) {
            for (a, b) in m.iter_mut().zip(row) {
                // `f32::max` returns the other operand for NaN: NaN is kept explicitly.
                let b = b.abs();
                *a = if a.is_nan() || b.is_nan() { f32::NAN } else { a.max(b) };
            }
        }
        Ok(())
    }

    /// The maxima so far (empty if nothing was recorded).
    pub fn maxima(&self) -> Vec<f32> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// Smoothing factors for a layer with `weight` (`[out, in]`) whose input columns reach `amax`:
/// `s_c = sqrt(amax_c / max_j |W_jc|)`, divided by their geometric mean; a column that is zero
/// (or not finite) on either side keeps 1. A column whose input is always 0 is no error (a unit
/// a ReLU never opens); callers refuse maxima that are not finite, or a layer's all 0
/// ([`crate::model::quantized::int8_layers`]).
pub fn smoothing(amax: &[f32], weight: &Tensor) -> Result<Vec<f32>> {
    let (_, k) = weight.dims2()?;
    let w: Vec<f32> = weight.to_dtype(candle_core::DType::F32)?.flatten_all()?.to_vec1()?;
    smoothing_of(amax, &w, k)
}

/// [`smoothing`] of the weights `w` (`[out, k]`, row-major).
pub fn smoothing_of(amax: &[f32], w: &[f32], k: usize) -> Result<Vec<f32>> {
    anyhow::ensure!(amax.len() == k, "smoothing: {} column maxima for a layer of {k} inputs", amax.len());
    let mut wmax = vec![0f32; k];
    for row in w.chunks_exact(k) {
        for (m, v) in wmax.iter_mut().zip(row) {
            *m = m.max(v.abs());
        }
    }
    let mut s: Vec<f32> = amax
        .iter()
        .zip(&wmax)
        .map(|(&a, &w)| if a > 0.0 && w > 0.0 && a.is_finite() && w.is_finite() { (a / w).sqrt() } else { 1.0 })
        .collect();
    let g = (s.iter().map(|v| (*v as f64).ln()).sum::<f64>() / k as f64).exp() as f32;
    s.iter_mut().for_each(|v| *v /= g);
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    #[test]
    fn column_max_takes_magnitudes_over_rows_and_calls() {
        let c = ColumnMax::default();
        assert!(c.maxima().is_empty());
        let x = Tensor::new(&[[1.0f32, -5.0, 0.0], [-2.0, 3.0, 6.0]], &Device::Cpu).unwrap();
        c.record(&x).unwrap();
        let y = Tensor::new(&[[0.5f32, 4.0, -7.0]], &Device::Cpu).unwrap();
        c.record(&y).unwrap();
        assert_eq!(c.maxima(), vec![2.0, 5.0, 7.0]);
        let wrong = Tensor::new(&[[1.0f32, 2.0]], &Device::Cpu).unwrap();
        assert!(c.record(&wrong).is_err());
    }

    /// NaN and infinity are kept (NaN over anything, in any later call), so that the check of
    /// the maxima sees them; before, NaN was skipped and a NaN layer looked like a zero one.
    #[test]
    fn column_max_keeps_nan_and_infinity() {
        let c = ColumnMax::default();
        let x = Tensor::new(&[[1.0f32, f32::NAN, 2.0], [-2.0, 3.0, f32::NEG_INFINITY]], &Device::Cpu).unwrap();
        c.record(&x).unwrap();
        let y = Tensor::new(&[[0.5f32, 4.0, -7.0]], &Device::Cpu).unwrap();
        c.record(&y).unwrap();
        let m = c.maxima();
        assert_eq!(m[0], 2.0);
        assert!(m[1].is_nan(), "{m:?}");
        assert_eq!(m[2], f32::INFINITY);
    }

    #[test]
    fn smoothing_balances_columns_and_has_unit_geometric_mean() {
        // Column maxima 16, 1, 0; weight column maxima 1, 4, 2.
        let w = Tensor::new(&[[1.0f32, -4.0, 2.0], [0.5, 1.0, -1.0]], &Device::Cpu).unwrap();
        let s = smoothing(&[16.0, 1.0, 0.0], &w).unwrap();
        // Raw: sqrt(16/1) = 4, sqrt(1/4) = 0.5, 1 (zero column); geometric mean 4^(1/3)·0.5^(1/3) = 2^(1/3).
        let g = 2f32.powf(1.0 / 3.0);
        for (got, want) in s.iter().zip([4.0 / g, 0.5 / g, 1.0 / g]) {
            assert!((got - want).abs() < 1e-6, "{s:?}");
        }
        assert!(smoothing(&[1.0, 2.0], &w).is_err());
    }
}
