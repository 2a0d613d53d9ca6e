//! Symmetric int8 quantisation: weights per output channel (at load time), activations per row
//! (at run time).
//!
//! A row `x` becomes `q = round(x / s)` clamped to [-127, 127] with `s = max|x| / 127` (`s = 1`
//! for an all-zero row), so `x ≈ s·q`. -128 is never produced: the AVX2 kernel's sign trick
//! (`|a|·sign(b, a)`) and the u8 shift of the VNNI kernel both rely on |q| ≤ 127.

/// The scale of a row: `max|x| / 127`, or 1 for a row of zeros (or of non-finite values, which
/// then quantise to 0: finite inputs are the caller's contract).
pub fn row_scale(x: &[f32]) -> f32 {
    let m = x.iter().fold(0f32, |m, v| m.max(v.abs()));
    if m > 0.0 && m.is_finite() {
        m / 127.0
    } else {
        1.0
    }
}

/// One value quantised with the reciprocal of its row's scale.
#[inline(always)]
pub fn quantize_one(v: f32, inv: f32) -> i8 {
    (v * inv).round().clamp(-127.0, 127.0) as i8
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
/// operand; it is `q ^ 0x80`), else `q` as i8 bits. Returns the per-row scales.
pub fn quantize_activations(x: &[f32], m: usize, k: usize, kp: usize, shift: bool, out: &mut Vec<u8>) -> Vec<f32> {
    out.clear();
    out.resize(m * kp, if shift { 0x80 } else { 0 });
    let flip = if shift { 0x80u8 } else { 0 };
    let mut scales = Vec::with_capacity(m);
    for (row, dst) in x.chunks_exact(k).zip(out.chunks_exact_mut(kp)) {
        let s = row_scale(row);
        let inv = 1.0 / s;
        for (o, &v) in dst.iter_mut().zip(row) {
            *o = (quantize_one(v, inv) as u8) ^ flip;
        }
        scales.push(s);
    }
    scales
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
            assert!((v - s * qi as f32).abs() <= 0.5 * s * 1.0001, "{v} vs {}", s * qi as f32);
        }
    }

    #[test]
    fn zero_rows_and_shift() {
        let x = [0f32; 5];
        let mut out = Vec::new();
        let s = quantize_activations(&x, 1, 5, 8, true, &mut out);
        assert_eq!(s, vec![1.0]);
        assert_eq!(out, vec![0x80; 8]);
        let x = [-1f32, 1.0, 0.5];
        let s = quantize_activations(&x, 1, 3, 4, true, &mut out);
        assert!((s[0] - 1.0 / 127.0).abs() < 1e-9);
        assert_eq!(out, vec![1, 255, 128 + 64, 128]);
    }
}
