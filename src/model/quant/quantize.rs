//! Symmetric int8 quantisation: weights per output channel (at load time), activations per row
//! (at run time).
//!
//! A row `x` becomes `q = round(x / s)` clamped to [-127, 127] with `s = max|x| / 127` (`s = 1`
//! for an all-zero row), so `x ≈ s·q`. -128 is never produced: the AVX2 kernel's sign trick
//! (`|a|·sign(b, a)`) and the u8 shift of the VNNI kernel both rely on |q| ≤ 127.
//!
//! A row holding a NaN or an infinity gets the scale NaN, so that the layer's outputs for it are
//! NaN, as f32's would be (the embedder then refuses the vector), not finite and wrong.

use std::mem::MaybeUninit;

/// The scale of a row: `max|x| / 127`, 1 for a row of zeros, NaN for a row with an infinity (a
/// NaN is skipped here: the quantising loop finds it, see [`quantize_row`]).
#[inline(always)]
pub fn row_scale(x: &[f32]) -> f32 {
    // 16 independent lanes so that the reduction vectorises.
    let mut lanes = [0f32; 16];
    let mut chunks = x.chunks_exact(16);
    for c in &mut chunks {
        for (l, v) in lanes.iter_mut().zip(c) {
            *l = max_skipping_nan(*l, v.abs());
        }
    }
    let m = chunks
        .remainder()
        .iter()
        .fold(lanes.iter().fold(0f32, |a, &b| max_skipping_nan(a, b)), |a, v| max_skipping_nan(a, v.abs()));
    scale_of_max(m)
}

/// `m / 127`, 1 for a maximum of 0, NaN for infinity.
#[inline(always)]
fn scale_of_max(m: f32) -> f32 {
    if m > 0.0 && m.is_finite() {
        m / 127.0
    } else if m == 0.0 {
        1.0
    } else {
        f32::NAN
    }
}

/// `a.max(b)` for an `a` that is never NaN: `b` if it is larger, so a NaN `b` is skipped as
/// `f32::max` skips it. One `vmaxps`; `f32::max` adds a NaN test and a blend per vector.
#[inline(always)]
fn max_skipping_nan(a: f32, b: f32) -> f32 {
    if b > a {
        b
    } else {
        a
    }
}

/// One value quantised with the reciprocal of its row's scale: clamped to [-127, 127], rounded
/// to nearest, ties to even; NaN gives 0.
///
/// Rounding adds 1.5·2²³: for |y| ≤ 2²², `y + 1.5·2²³` is rounded (to nearest, ties to even) to
/// an integer and that integer sits in the low bits of the sum's bit pattern, so subtracting the
/// magic number's bits gives it. Everything here is integer or float arithmetic that vectorises;
/// `f32::round` is a library call and a float-to-int `as` cast is done one value at a time
/// (measured: the cast made quantising a row cost as much as the int8 GEMM that uses it).
#[inline(always)]
pub fn quantize_one(v: f32, inv: f32) -> i8 {
    const MAGIC: f32 = 12_582_912.0;
    let y = (v * inv).clamp(-127.0, 127.0);
    let q = ((y + MAGIC).to_bits() as i32).wrapping_sub(MAGIC.to_bits() as i32) as i8;
    if y.is_nan() {
        0
    } else {
        q
    }
}

/// Quantise a row into `out` (same length), returning the scale (NaN if the row has a NaN or
/// an infinity).
pub fn quantize_row(x: &[f32], out: &mut [i8]) -> f32 {
    debug_assert_eq!(x.len(), out.len());
    let s = row_scale(x);
    let inv = 1.0 / s;
    let mut nan = false;
    for (o, &v) in out.iter_mut().zip(x) {
        *o = quantize_one(v, inv);
        nan |= v.is_nan();
    }
    if nan {
        f32::NAN
    } else {
        s
    }
}

/// Scale and offset of an asymmetric row spanning `[lo, hi]`: `x ≈ s·a + o` with `a` in
/// [-128, 127], `a = -128` at `lo` and `127` at `hi`. A constant row gets `s = 1` (its value is
/// then exact); a non-finite range (an infinity in the row, or only NaN) `s = o = NaN`.
#[inline(always)]
fn asym_params(lo: f32, hi: f32) -> (f32, f32) {
    let s = (hi - lo) / 255.0;
    if !(lo.is_finite() && hi.is_finite() && s.is_finite()) {
        (f32::NAN, f32::NAN)
    } else if s > 0.0 {
        (s, lo + 128.0 * s)
    } else {
        (1.0, lo + 128.0)
    }
}

/// [`quantize_one`] of an asymmetric row: `(v - o) / s` clamped to [-128, 127], rounded to
/// nearest, ties to even; NaN gives 0.
#[inline(always)]
pub fn quantize_one_asym(v: f32, o: f32, inv: f32) -> i8 {
    const MAGIC: f32 = 12_582_912.0;
    let y = ((v - o) * inv).clamp(-128.0, 127.0);
    let q = ((y + MAGIC).to_bits() as i32).wrapping_sub(MAGIC.to_bits() as i32) as i8;
    if y.is_nan() {
        0
    } else {
        q
    }
}

/// Quantise the `m` rows of `x` (`[m, k]`, row-major) into `[m, kp]` bytes (`kp ≥ k`, the tail
/// padded with the code of 0). With `shift` each byte holds `q + 128` as u8 (the VNNI kernel's
/// unsigned operand; it is `q ^ 0x80`), else `q` as i8 bits. With `mul` (length `k`), column `c`
/// is multiplied by `mul[c]` first (the layer's smoothing, see [`super::QLinear`]). Symmetric
/// rows (`x ≈ s·q`, `q` in [-127, 127]), or with `asym` a scale and an offset per row (each
/// row's range `[min, max]` onto all 256 byte values, `x ≈ s·q + o`, `q` in [-128, 127]).
/// Returns the per-row scales and, with `asym`, the offsets; a row with a NaN or an infinity gets
/// the scale NaN.
#[allow(clippy::too_many_arguments)]
pub fn quantize_activations(
    x: &[f32],
    m: usize,
    k: usize,
    kp: usize,
    shift: bool,
    mul: Option<&[f32]>,
    asym: bool,
    out: &mut Vec<u8>,
) -> (Vec<f32>, Option<Vec<f32>>) {
    assert!(x.len() == m * k && kp >= k, "quantize_activations: [{m}, {k}] input expected, got {}", x.len());
    out.clear();
    out.reserve(m * kp);
    let mut scales = vec![0f32; m];
    let mut offsets = asym.then(|| vec![0f32; m]);
    activations(x, k, kp, shift, mul, &mut out.spare_capacity_mut()[..m * kp], &mut scales, offsets.as_deref_mut());
    // SAFETY: `activations` wrote every byte of the `m` rows of `kp` (values and padding).
    unsafe { out.set_len(m * kp) };
    (scales, offsets)
}

crate::model::kernels::vectorised_fn! {
    /// Quantises each row of `x` into its `kp` bytes of `out` (the tail past `k` is the code of 0),
    /// setting its scale. With `mul`, the row is multiplied first, and its maximum taken in the same
    /// pass. With `offsets`, asymmetric rows (see [`quantize_activations`]).
    #[allow(clippy::too_many_arguments)]
    fn activations(
        x: &[f32],
        k: usize,
        kp: usize,
        shift: bool,
        mul: Option<&[f32]>,
        out: &mut [MaybeUninit<u8>],
        scales: &mut [f32],
        offsets: Option<&mut [f32]>,
    ) {
        let flip = if shift { 0x80u8 } else { 0 };
        let mut tmp = vec![0f32; if mul.is_some() { k } else { 0 }];
        if let Some(offsets) = offsets {
            let rows = x.chunks_exact(k).zip(out.chunks_exact_mut(kp)).zip(scales.iter_mut()).zip(offsets.iter_mut());
            for (((row, dst), s), off) in rows {
                let (row, (lo, hi)) = match mul {
                    Some(mul) => {
                        let range = scaled_row_range(row, mul, &mut tmp);
                        (&tmp[..], range)
                    }
                    None => (row, row_range(row)),
                };
                let (scale, o) = asym_params(lo, hi);
                let inv = 1.0 / scale;
                let (values, pad) = dst.split_at_mut(k);
                let mut nan = false;
                for (d, &v) in values.iter_mut().zip(row) {
                    d.write((quantize_one_asym(v, o, inv) as u8) ^ flip);
                    nan |= v.is_nan();
                }
                (*s, *off) = (if nan { f32::NAN } else { scale }, o);
                for d in pad {
                    d.write(flip);
                }
            }
            return;
        }
        for ((row, dst), s) in x.chunks_exact(k).zip(out.chunks_exact_mut(kp)).zip(scales.iter_mut()) {
            let (row, scale) = match mul {
                Some(mul) => {
                    let scale = scaled_row_scale(row, mul, &mut tmp);
                    (&tmp[..], scale)
                }
                None => (row, row_scale(row)),
            };
            let inv = 1.0 / scale;
            let (values, pad) = dst.split_at_mut(k);
            let mut nan = false;
            for (o, &v) in values.iter_mut().zip(row) {
                o.write((quantize_one(v, inv) as u8) ^ flip);
                nan |= v.is_nan();
            }
            *s = if nan { f32::NAN } else { scale };
            for o in pad {
                o.write(flip);
            }
        }
    }
}

/// The smallest and largest value of a row (NaN skipped; `(inf, -inf)` if all are NaN). Two
/// passes of one 16-lane reduction each: a loop keeping both in one pass stayed scalar code
/// (measured; it doubled the cost of quantising).
#[inline(always)]
fn row_range(x: &[f32]) -> (f32, f32) {
    (-lane_max(x, |v| -v), lane_max(x, |v| v))
}

/// The largest `f(v)` over `x` (NaN skipped; `-inf` for none), in 16 independent lanes.
#[inline(always)]
fn lane_max(x: &[f32], f: impl Fn(f32) -> f32) -> f32 {
    let mut lanes = [f32::NEG_INFINITY; 16];
    let mut chunks = x.chunks_exact(16);
    for c in &mut chunks {
        for (l, &v) in lanes.iter_mut().zip(c) {
            *l = max_skipping_nan(*l, f(v));
        }
    }
    let m = lanes.iter().fold(f32::NEG_INFINITY, |a, &b| max_skipping_nan(a, b));
    chunks.remainder().iter().fold(m, |a, &v| max_skipping_nan(a, f(v)))
}

/// `tmp = x ⊙ mul` and [`row_range`] of it.
#[inline(always)]
fn scaled_row_range(x: &[f32], mul: &[f32], tmp: &mut [f32]) -> (f32, f32) {
    for ((t, &x), &f) in tmp.iter_mut().zip(x).zip(mul) {
        *t = x * f;
    }
    row_range(tmp)
}

/// `tmp = x ⊙ mul` and [`row_scale`] of it, in one pass.
#[inline(always)]
fn scaled_row_scale(x: &[f32], mul: &[f32], tmp: &mut [f32]) -> f32 {
    let mut lanes = [0f32; 16];
    let mut chunks = tmp.chunks_exact_mut(16).zip(x.chunks_exact(16)).zip(mul.chunks_exact(16));
    for ((t, x), f) in &mut chunks {
        for (((l, t), &x), &f) in lanes.iter_mut().zip(t).zip(x).zip(f) {
            *t = x * f;
            *l = max_skipping_nan(*l, t.abs());
        }
    }
    let done = x.len() / 16 * 16;
    let mut m = lanes.iter().fold(0f32, |a, &b| max_skipping_nan(a, b));
    for ((t, &x), &f) in tmp[done..].iter_mut().zip(&x[done..]).zip(&mul[done..]) {
        *t = x * f;
        m = max_skipping_nan(m, t.abs());
    }
    scale_of_max(m)
}

/// Weights `[n, k]` (f32, row-major, Hugging Face's `[out, in]`) quantised per output channel:
/// the int8 values `[n, k]` and the `n` scales.
pub fn quantize_weights(w: &[f32], n: usize, k: usize) -> (Vec<i8>, Vec<f32>) {
    assert_eq!(w.len(), n * k);
    let mut q = vec![0i8; n * k];
    let scales = w.chunks_exact(k).zip(q.chunks_exact_mut(k)).map(|(r, o)| quantize_row(r, o)).collect();
    (q, scales)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_round_to_nearest_within_half_a_step() {
        let x: Vec<f32> = (0..37).map(|i| ((i * 7919) % 101) as f32 / 13.0 - 3.7).collect();
        let mut q = vec![0i8; x.len()];
        let s = quantize_row(&x, &mut q);
        assert!(q.iter().any(|&v| v.abs() == 127));
        for (&v, &qi) in x.iter().zip(&q) {
            assert!(qi != -128);
            assert!((v - s * qi as f32).abs() <= 0.5 * s * 1.0001 + 1e-6, "{v} vs {}", s * qi as f32);
        }
    }

    #[test]
    fn zero_rows_and_shift() {
        let x = [0f32; 5];
        let mut out = Vec::new();
        let (s, _) = quantize_activations(&x, 1, 5, 8, true, None, false, &mut out);
        assert_eq!(s, vec![1.0]);
        assert_eq!(out, vec![0x80; 8]);
        let x = [-1f32, 1.0, 0.5];
        let (s, _) = quantize_activations(&x, 1, 3, 4, true, None, false, &mut out);
        assert!((s[0] - 1.0 / 127.0).abs() < 1e-9);
        // 63.5 rounds to even.
        assert_eq!(out, vec![1, 255, 128 + 64, 128]);
        assert_eq!(quantize_one(62.5, 1.0), 62);
        assert_eq!(quantize_one(-200.0, 1.0), -127);
    }

    /// The bit trick in `quantize_one` is `round_ties_even(clamp(v · inv))` for every finite or
    /// infinite input, and 0 for NaN.
    #[test]
    fn quantize_one_rounds_the_clamped_value_to_nearest_even() {
        let reference = |v: f32, inv: f32| {
            let y = (v * inv).clamp(-127.0, 127.0);
            if y.is_nan() {
                0
            } else {
                y.round_ties_even() as i8
            }
        };
        // Every multiple of 1/64 in [-140, 140] (halves and quarters included), then pseudo-random
        // bit patterns (all exponents, subnormals, infinities, NaNs).
        for i in -140 * 64..=140 * 64 {
            let v = i as f32 / 64.0;
            assert_eq!(quantize_one(v, 1.0), reference(v, 1.0), "{v}");
        }
        let mut s = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..200_000 {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let v = f32::from_bits((s >> 32) as u32);
            let inv = f32::from_bits(0x3f00_0000 + ((s >> 8) as u32 & 0x00ff_ffff)) * 100.0;
            assert_eq!(quantize_one(v, inv), reference(v, inv), "{v} · {inv}");
        }
        for v in [f32::INFINITY, f32::NEG_INFINITY, f32::NAN, -f32::NAN, 126.5, 127.49, -127.5, 0.5, -0.5, 1.5] {
            assert_eq!(quantize_one(v, 1.0), reference(v, 1.0), "{v}");
        }
    }

    /// A row with a NaN or an infinity gets a NaN scale (so its outputs are NaN, as in f32,
    /// and the embedder refuses them) whatever the path: symmetric or asymmetric, smoothed or
    /// not; its neighbours keep theirs. Before, NaN quantised to 0 and infinity to ±127 with a
    /// finite scale: finite, wrong vectors.
    #[test]
    fn rows_with_nan_or_infinity_get_a_nan_scale() {
        let k = 37;
        let good: Vec<f32> = (0..k).map(|i| (i as f32 * 0.37).cos()).collect();
        let with = |at: usize, v: f32| {
            let mut r = good.clone();
            r[at] = v;
            r
        };
        let rows = [
            good.clone(),
            with(3, f32::NAN),
            with(20, f32::INFINITY),
            with(36, f32::NEG_INFINITY),
            vec![f32::NAN; k],
            good.clone(),
        ];
        let x: Vec<f32> = rows.concat();
        let mul: Vec<f32> = (0..k).map(|i| 0.5 + i as f32 / k as f32).collect();
        let mut out = Vec::new();
        for asym in [false, true] {
            for m in [None, Some(&mul[..])] {
                for shift in [false, true] {
                    let (s, o) = quantize_activations(&x, rows.len(), k, 40, shift, m, asym, &mut out);
                    assert!(s[0].is_finite() && s[5].is_finite(), "asym {asym}, mul {}: {s:?}", m.is_some());
                    assert!(s[1..5].iter().all(|v| v.is_nan()), "asym {asym}, mul {}: {s:?}", m.is_some());
                    assert_eq!(o.is_some(), asym);
                }
            }
        }
        let mut q = vec![0i8; k];
        assert!(quantize_row(&rows[1], &mut q).is_nan());
        assert!(quantize_row(&rows[2], &mut q).is_nan());
        assert!(quantize_row(&good, &mut q).is_finite());
    }

    #[test]
    fn asymmetric_rows_use_every_level_and_stay_within_half_a_step() {
        let rows: [Vec<f32>; 4] = [
            (0..37).map(|i| (i as f32 * 0.31).sin() * 2.0 + 1.5).collect(),
            (0..37).map(|i| if i == 3 { 40.0 } else { i as f32 / 100.0 - 0.17 }).collect(),
            vec![0.0; 37],
            vec![-2.5; 37],
        ];
        for shift in [false, true] {
            let x: Vec<f32> = rows.concat();
            let mut out = Vec::new();
            let (s, o) = quantize_activations(&x, 4, 37, 40, shift, None, true, &mut out);
            let o = o.unwrap();
            for (r, row) in rows.iter().enumerate() {
                let a: Vec<i32> = out[r * 40..r * 40 + 37]
                    .iter()
                    .map(|&b| if shift { b as i32 - 128 } else { b as i8 as i32 })
                    .collect();
                for (&v, &q) in row.iter().zip(&a) {
                    let back = s[r] * q as f32 + o[r];
                    assert!((back - v).abs() <= s[r] * 0.5 + 1e-5 * v.abs().max(1.0), "row {r}: {v} -> {q} -> {back}");
                }
                if r < 2 {
                    assert_eq!(*a.iter().min().unwrap(), -128, "row {r}: the minimum maps to -128");
                    assert_eq!(*a.iter().max().unwrap(), 127, "row {r}: the maximum maps to 127");
                }
                // Padding is the code of 0, which adds nothing.
                assert!(out[r * 40 + 37..r * 40 + 40].iter().all(|&b| b == if shift { 0x80 } else { 0 }));
            }
        }
    }
}
