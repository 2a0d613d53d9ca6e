//! Symmetric int8 quantisation: weights per output channel (at load time), activations per row
//! (at run time).
//!
//! A row `x` becomes `q = round(x / s)` clamped to [-127, 127] with `s = max|x| / 127` (`s = 1`
//! for an all-zero row), so `x ≈ s·q`. -128 is never produced: the AVX2 kernel's sign trick
//! (`|a|·sign(b, a)`) and the u8 shift of the VNNI kernel both rely on |q| ≤ 127.

use std::mem::MaybeUninit;

/// The scale of a row: `max|x| / 127`, or 1 for a row of zeros (or of non-finite values, which
/// then quantise to 0: finite inputs are the caller's contract).
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

/// `m / 127`, or 1 for a maximum of 0 or infinity.
#[inline(always)]
fn scale_of_max(m: f32) -> f32 {
    if m > 0.0 && m.is_finite() {
        m / 127.0
    } else {
        1.0
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

/// Quantise a row into `out` (same length), returning the scale.
pub fn quantize_row(x: &[f32], out: &mut [i8]) -> f32 {
    debug_assert_eq!(x.len(), out.len());
    let s = row_scale(x);
    let inv = 1.0 / s;
    for (o, &v) in out.iter_mut().zip(x) {
        *o = quantize_one(v, inv);
    }
    s
}

/// Quantise the `m` rows of `x` (`[m, k]`, row-major) into `[m, kp]` bytes (`kp ≥ k`, the tail
/// padded with 0). With `shift` each byte holds `q + 128` as u8 (the VNNI kernel's unsigned
/// operand; it is `q ^ 0x80`), else `q` as i8 bits. With `mul` (length `k`), column `c` is
/// multiplied by `mul[c]` first (the layer's smoothing, see [`super::QLinear`]). Returns the
/// per-row scales.
pub fn quantize_activations(
    x: &[f32],
    m: usize,
    k: usize,
    kp: usize,
    shift: bool,
    mul: Option<&[f32]>,
    out: &mut Vec<u8>,
) -> Vec<f32> {
    assert!(x.len() == m * k && kp >= k, "quantize_activations: [{m}, {k}] input expected, got {}", x.len());
    out.clear();
    out.reserve(m * kp);
    let mut scales = vec![0f32; m];
    activations(x, k, kp, shift, mul, &mut out.spare_capacity_mut()[..m * kp], &mut scales);
    // SAFETY: `activations` wrote every byte of the `m` rows of `kp` (values and padding).
    unsafe { out.set_len(m * kp) };
    scales
}

crate::model::kernels::vectorised_fn! {
    /// Quantises each row of `x` into its `kp` bytes of `out` (the tail past `k` is the code of 0),
    /// setting its scale. With `mul`, the row is multiplied first, and its maximum taken in the same
    /// pass.
    fn activations(
        x: &[f32],
        k: usize,
        kp: usize,
        shift: bool,
        mul: Option<&[f32]>,
        out: &mut [MaybeUninit<u8>],
        scales: &mut [f32],
    ) {
        let flip = if shift { 0x80u8 } else { 0 };
        let mut tmp = vec![0f32; if mul.is_some() { k } else { 0 }];
        for ((row, dst), s) in x.chunks_exact(k).zip(out.chunks_exact_mut(kp)).zip(scales.iter_mut()) {
            let (row, scale) = match mul {
                Some(mul) => {
                    let scale = scaled_row_scale(row, mul, &mut tmp);
                    (&tmp[..], scale)
                }
                None => (row, row_scale(row)),
            };
            *s = scale;
            let inv = 1.0 / scale;
            let (values, pad) = dst.split_at_mut(k);
            for (o, &v) in values.iter_mut().zip(row) {
                o.write((quantize_one(v, inv) as u8) ^ flip);
            }
            for o in pad {
                o.write(flip);
            }
        }
    }
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
        let s = quantize_activations(&x, 1, 5, 8, true, None, &mut out);
        assert_eq!(s, vec![1.0]);
        assert_eq!(out, vec![0x80; 8]);
        let x = [-1f32, 1.0, 0.5];
        let s = quantize_activations(&x, 1, 3, 4, true, None, &mut out);
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
}
