//! bf16 GEMM: `y[i][j] = Σ_k a[i][k] · w[j][k] + b[j]` with bf16 weights (rounded to nearest
//! even from f32 at load, prepacked), activations rounded to bf16 per call, sums in f32.
//!
//! A product of two bf16 values (8 significant bits each) is exact in f32, so the only rounding
//! is that of each f32 addition: every path below adds the same exact products, and two paths
//! that add them in the same order give the same bits.
//!
//! Packed weights: `n` padded to a multiple of 32 ([`NR`]) and `k` to a multiple of 2, panels
//! of 32 output channels; inside a panel, for each pair of `k`, the 2 values of channel 0, then
//! of channel 1, … of channel 31 (64 × u16): one `vdpbf16ps` operand per 16 channels. Padding
//! is 0 so it adds nothing.
//!
//! Paths (chosen in [`BfPath`]):
//! - AVX-512 BF16: `vdpbf16ps` adds, per channel, the products of `k = 2g + 1` then of `2g`
//!   (Intel's definition) to the f32 sum; inputs below the normal range count as 0 (DAZ).
//! - AVX-512F and AVX2: the bf16 weights widened to f32 (a shift), one FMA per `k` in order.
//! - Portable: the same sums in scalar Rust (`acc += a·w`, in order).
//!
//! The last three give the same bits; the first differs by the order within each pair.

use rayon::prelude::*;
use std::sync::OnceLock;

/// Output channels per panel.
pub const NR: usize = 32;
/// Rows per micro-tile.
pub const MR: usize = 8;
/// Rows per cache block.
const MB: usize = 64;

type Tile = [[f32; NR]; MR];

/// A bf16 kernel path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BfPath {
    /// AVX-512 BF16 `vdpbf16ps`.
    Avx512Bf16,
    /// AVX-512F: bf16 widened to f32, FMA.
    Avx512,
    /// AVX2: bf16 widened to f32, FMA.
    Avx2,
    /// Plain Rust.
    Portable,
}

impl BfPath {
    /// Whether this CPU can run the path.
    pub fn available(self) -> bool {
        match self {
            #[cfg(target_arch = "x86_64")]
            BfPath::Avx512Bf16 => is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512bf16"),
            #[cfg(target_arch = "x86_64")]
            BfPath::Avx512 => is_x86_feature_detected!("avx512f"),
            #[cfg(target_arch = "x86_64")]
            BfPath::Avx2 => is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma"),
            BfPath::Portable => true,
            #[allow(unreachable_patterns)]
            _ => false,
        }
    }

    /// The paths this CPU can run, fastest first.
    pub fn all_available() -> Vec<BfPath> {
        [BfPath::Avx512Bf16, BfPath::Avx512, BfPath::Avx2, BfPath::Portable]
            .into_iter()
            .filter(|p| p.available())
            .collect()
    }

    /// The path in use: the fastest this CPU has, unless `XSENT_BF16_KERNELS=avx512|avx2|portable`
    /// asks for a slower one, or else `XSENT_KERNELS=avx2|portable` (which also picks the f32
    /// and int8 kernels); a path the CPU lacks is refused with a warning.
    pub fn current() -> BfPath {
        static PATH: OnceLock<BfPath> = OnceLock::new();
        *PATH.get_or_init(|| {
            let best = Self::all_available()[0];
            let asked = std::env::var("XSENT_BF16_KERNELS").or_else(|_| std::env::var("XSENT_KERNELS"));
            let want = match asked.as_deref() {
                Ok("avx512") => BfPath::Avx512,
                Ok("avx2") => BfPath::Avx2,
                Ok("portable") => BfPath::Portable,
                Ok(other) if std::env::var_os("XSENT_BF16_KERNELS").is_some() => {
                    crate::errln!("xsent: XSENT_BF16_KERNELS={other:?} is not \"avx512\", \"avx2\" or \"portable\"; using {best:?}");
                    return best;
                }
                _ => return best,
            };
            if want.available() {
                want
            } else {
                crate::errln!("xsent: XSENT_KERNELS asks for the {want:?} bf16 kernels, which this CPU lacks; using {best:?}");
                best
            }
        })
    }
}

/// f32 to bf16 bits, rounded to nearest, ties to even (NaN stays NaN).
#[inline(always)]
pub fn to_bf16(v: f32) -> u16 {
    half::bf16::from_f32(v).to_bits()
}

/// bf16 bits to f32 (exact).
#[inline(always)]
pub fn from_bf16(b: u16) -> f32 {
    f32::from_bits((b as u32) << 16)
}

/// Weights prepacked for the kernels (see the module doc).
#[derive(Clone, Debug)]
pub struct PackedBf16 {
    pub n: usize,
    pub k: usize,
    /// `k` rounded up to a multiple of 2.
    pub kp: usize,
    /// `n` rounded up to a multiple of [`NR`].
    pub np: usize,
    data: Vec<u16>,
}

impl PackedBf16 {
    /// Pack bf16 weights `[n, k]` (bits, row-major).
    pub fn pack(w: &[u16], n: usize, k: usize) -> Self {
        assert_eq!(w.len(), n * k, "pack: {n}×{k} weights expected, got {}", w.len());
        let kp = k.div_ceil(2) * 2;
        let np = n.div_ceil(NR) * NR;
        let mut data = vec![0u16; np * kp];
        for j in 0..n {
            let (p, c) = (j / NR, j % NR);
            for (kk, &v) in w[j * k..(j + 1) * k].iter().enumerate() {
                data[p * kp * NR + (kk / 2) * 2 * NR + c * 2 + kk % 2] = v;
            }
        }
        Self { n, k, kp, np, data }
    }

    fn panel(&self, p: usize) -> &[u16] {
        &self.data[p * self.kp * NR..(p + 1) * self.kp * NR]
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        2 * self.data.len()
    }
}

/// The activations as the kernels of `path` read them: `[m, kp]`, each value rounded to bf16,
/// as bf16 bits (AVX-512 BF16) or as the f32 they stand for (the widening paths). With `mul`
/// (length `k`), column `c` is multiplied by `mul[c]` before rounding.
pub enum Acts {
    Bf16(Vec<u16>),
    F32(Vec<f32>),
}

/// Round the `m` rows of `x` (`[m, k]`) for `path` (see [`Acts`]); the tail up to `kp` is 0.
pub fn activations(path: BfPath, x: &[f32], m: usize, k: usize, kp: usize) -> Acts {
    assert!(x.len() == m * k && kp >= k, "bf16 activations: [{m}, {k}] input expected, got {}", x.len());
    match path {
        BfPath::Avx512Bf16 => {
            let mut out = vec![0u16; m * kp];
            for (row, dst) in x.chunks_exact(k).zip(out.chunks_exact_mut(kp)) {
                for (o, &v) in dst.iter_mut().zip(row) {
                    *o = to_bf16(v);
                }
            }
            Acts::Bf16(out)
        }
        _ => {
            let mut out = vec![0f32; m * kp];
            for (row, dst) in x.chunks_exact(k).zip(out.chunks_exact_mut(kp)) {
                for (o, &v) in dst.iter_mut().zip(row) {
                    *o = from_bf16(to_bf16(v));
                }
            }
            Acts::F32(out)
        }
    }
}

/// `rows` (≤ [`MR`]) rows of activations (stride `kp`) against one panel: raw f32 sums.
type Kernel<A> = unsafe fn(a: &[A], kp: usize, rows: usize, panel: &[u16], acc: &mut Tile);

#[inline(always)]
fn drive<A: Sync>(kernel: Kernel<A>, a: &[A], m: usize, w: &PackedBf16, bias: &[f32], out: &mut [f32]) {
    let (n, kp) = (w.n, w.kp);
    let panels = w.np / NR;
    let block = |(bi, out): (usize, &mut [f32])| {
        let r0 = bi * MB;
        let rows = (m - r0).min(MB);
        let mut acc: Tile = [[0.0; NR]; MR];
        for p in 0..panels {
            let panel = w.panel(p);
            let c0 = p * NR;
            let cols = (n - c0).min(NR);
            let mut r = 0;
            while r < rows {
                let mr = (rows - r).min(MR);
                // SAFETY: the caller chose `kernel` for a path this CPU supports.
                unsafe { kernel(&a[(r0 + r) * kp..(r0 + r + mr) * kp], kp, mr, panel, &mut acc) };
                for (i, accr) in acc.iter().enumerate().take(mr) {
                    let o = (r + i) * n + c0;
                    for ((y, &s), &b) in out[o..o + cols].iter_mut().zip(accr).zip(&bias[c0..c0 + cols]) {
                        *y = s + b;
                    }
                }
                r += mr;
            }
        }
    };
    if m > MB && rayon::current_num_threads() > 1 {
        out[..m * n].par_chunks_mut(MB * n).enumerate().for_each(block);
    } else {
        out[..m * n].chunks_mut(MB * n).enumerate().for_each(block);
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bf16")]
unsafe fn run_bf16(a: &[u16], m: usize, w: &PackedBf16, bias: &[f32], out: &mut [f32]) {
    drive(tile_dpbf16, a, m, w, bias, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn run_avx512(a: &[f32], m: usize, w: &PackedBf16, bias: &[f32], out: &mut [f32]) {
    drive(tile_avx512, a, m, w, bias, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn run_avx2(a: &[f32], m: usize, w: &PackedBf16, bias: &[f32], out: &mut [f32]) {
    drive(tile_avx2, a, m, w, bias, out)
}

/// `out[i][j] = Σ_k a_ik w_jk + b_j` (`[m, n]`) for activations from [`activations`] with the
/// same `path`, and `bias` of length `w.n`.
pub fn gemm(path: BfPath, a: &Acts, m: usize, w: &PackedBf16, bias: &[f32], out: &mut [f32]) {
    assert!(path.available(), "bf16 GEMM: the {path:?} path is not supported by this CPU");
    assert!(bias.len() == w.n && out.len() >= m * w.n, "bf16 GEMM: bias or output of the wrong length");
    if m == 0 {
        return;
    }
    match (path, a) {
        // SAFETY (all three): `path.available()` checked the CPU features above.
        #[cfg(target_arch = "x86_64")]
        (BfPath::Avx512Bf16, Acts::Bf16(a)) => {
            assert_eq!(a.len(), m * w.kp, "bf16 GEMM: activations must be [m, kp]");
            unsafe { run_bf16(a, m, w, bias, out) }
        }
        #[cfg(target_arch = "x86_64")]
        (BfPath::Avx512, Acts::F32(a)) => {
            assert_eq!(a.len(), m * w.kp, "bf16 GEMM: activations must be [m, kp]");
            unsafe { run_avx512(a, m, w, bias, out) }
        }
        #[cfg(target_arch = "x86_64")]
        (BfPath::Avx2, Acts::F32(a)) => {
            assert_eq!(a.len(), m * w.kp, "bf16 GEMM: activations must be [m, kp]");
            unsafe { run_avx2(a, m, w, bias, out) }
        }
        (BfPath::Portable, Acts::F32(a)) => {
            assert_eq!(a.len(), m * w.kp, "bf16 GEMM: activations must be [m, kp]");
            drive(tile_portable, a, m, w, bias, out)
        }
        _ => panic!("bf16 GEMM: activations prepared for another path than {path:?}"),
    }
}

/// Portable micro-kernel: `acc += a·w` per `k` in order.
unsafe fn tile_portable(a: &[f32], kp: usize, rows: usize, panel: &[u16], acc: &mut Tile) {
    for r in 0..rows {
        let row = &a[r * kp..(r + 1) * kp];
        let mut s = [0f32; NR];
        for (g, w) in panel.chunks_exact(2 * NR).enumerate() {
            let (a0, a1) = (row[2 * g], row[2 * g + 1]);
            for c in 0..NR {
                s[c] += a0 * from_bf16(w[2 * c]);
                s[c] += a1 * from_bf16(w[2 * c + 1]);
            }
        }
        acc[r] = s;
    }
}

/// AVX-512 BF16 micro-kernel: 8 rows × 32 channels in 16 zmm accumulators, one `vdpbf16ps` per
/// 2 k × 16 channels.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bf16")]
unsafe fn tile_dpbf16(a: &[u16], kp: usize, rows: usize, panel: &[u16], acc: &mut Tile) {
    use std::arch::x86_64::*;
    debug_assert!((1..=MR).contains(&rows) && a.len() >= rows * kp && panel.len() == kp * NR);
    // Rows past `rows` repeat the last one (computed, not stored).
    let ap: [*const u16; MR] = std::array::from_fn(|r| a.as_ptr().add(r.min(rows - 1) * kp));
    let wp = panel.as_ptr();
    let mut c = [[_mm512_setzero_ps(); 2]; MR];
    for g in 0..kp / 2 {
        let w0: __m512bh = std::mem::transmute(_mm512_loadu_si512(wp.add(g * 2 * NR) as *const _));
        let w1: __m512bh = std::mem::transmute(_mm512_loadu_si512(wp.add(g * 2 * NR + 32) as *const _));
        for r in 0..MR {
            let x: __m512bh = std::mem::transmute(_mm512_set1_epi32((ap[r].add(2 * g) as *const i32).read_unaligned()));
            c[r][0] = _mm512_dpbf16_ps(c[r][0], x, w0);
            c[r][1] = _mm512_dpbf16_ps(c[r][1], x, w1);
        }
    }
    for r in 0..rows {
        _mm512_storeu_ps(acc[r].as_mut_ptr(), c[r][0]);
        _mm512_storeu_ps(acc[r].as_mut_ptr().add(16), c[r][1]);
    }
}

/// AVX-512F micro-kernel: 4 rows × 32 channels; each 32-value load of the panel is widened to
/// the 16 channels' weights at `k = 2g` (shift left by 16) and at `2g + 1` (mask).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn tile_avx512(a: &[f32], kp: usize, rows: usize, panel: &[u16], acc: &mut Tile) {
    use std::arch::x86_64::*;
    const R: usize = 4;
    let hi = _mm512_set1_epi32(0xffff_0000u32 as i32);
    let wp = panel.as_ptr();
    let mut r = 0;
    while r < rows {
        let ap: [*const f32; R] = std::array::from_fn(|i| a.as_ptr().add((r + i).min(rows - 1) * kp));
        let mut c = [[_mm512_setzero_ps(); 2]; R];
        for g in 0..kp / 2 {
            let v0 = _mm512_loadu_si512(wp.add(g * 2 * NR) as *const _);
            let v1 = _mm512_loadu_si512(wp.add(g * 2 * NR + 32) as *const _);
            let e0 = _mm512_castsi512_ps(_mm512_slli_epi32::<16>(v0));
            let o0 = _mm512_castsi512_ps(_mm512_and_si512(v0, hi));
            let e1 = _mm512_castsi512_ps(_mm512_slli_epi32::<16>(v1));
            let o1 = _mm512_castsi512_ps(_mm512_and_si512(v1, hi));
            for i in 0..R {
                let x0 = _mm512_set1_ps(*ap[i].add(2 * g));
                let x1 = _mm512_set1_ps(*ap[i].add(2 * g + 1));
                c[i][0] = _mm512_fmadd_ps(x0, e0, c[i][0]);
                c[i][1] = _mm512_fmadd_ps(x0, e1, c[i][1]);
                c[i][0] = _mm512_fmadd_ps(x1, o0, c[i][0]);
                c[i][1] = _mm512_fmadd_ps(x1, o1, c[i][1]);
            }
        }
        for (i, ci) in c.iter().enumerate().take((rows - r).min(R)) {
            _mm512_storeu_ps(acc[r + i].as_mut_ptr(), ci[0]);
            _mm512_storeu_ps(acc[r + i].as_mut_ptr().add(16), ci[1]);
        }
        r += R;
    }
}

/// AVX2 micro-kernel: 2 rows × 32 channels (8 ymm accumulators), widening as the AVX-512F one.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn tile_avx2(a: &[f32], kp: usize, rows: usize, panel: &[u16], acc: &mut Tile) {
    use std::arch::x86_64::*;
    let hi = _mm256_set1_epi32(0xffff_0000u32 as i32);
    let wp = panel.as_ptr();
    let mut r = 0;
    while r < rows {
        let a0 = a.as_ptr().add(r * kp);
        let a1 = a.as_ptr().add((r + 1).min(rows - 1) * kp);
        let mut c0 = [_mm256_setzero_ps(); 4];
        let mut c1 = [_mm256_setzero_ps(); 4];
        for g in 0..kp / 2 {
            let x00 = _mm256_set1_ps(*a0.add(2 * g));
            let x01 = _mm256_set1_ps(*a0.add(2 * g + 1));
            let x10 = _mm256_set1_ps(*a1.add(2 * g));
            let x11 = _mm256_set1_ps(*a1.add(2 * g + 1));
            for j in 0..4 {
                let v = _mm256_loadu_si256(wp.add(g * 2 * NR + 16 * j) as *const _);
                let e = _mm256_castsi256_ps(_mm256_slli_epi32::<16>(v));
                let o = _mm256_castsi256_ps(_mm256_and_si256(v, hi));
                c0[j] = _mm256_fmadd_ps(x00, e, c0[j]);
                c1[j] = _mm256_fmadd_ps(x10, e, c1[j]);
                c0[j] = _mm256_fmadd_ps(x01, o, c0[j]);
                c1[j] = _mm256_fmadd_ps(x11, o, c1[j]);
            }
        }
        for j in 0..4 {
            _mm256_storeu_ps(acc[r].as_mut_ptr().add(8 * j), c0[j]);
            if r + 1 < rows {
                _mm256_storeu_ps(acc[r + 1].as_mut_ptr().add(8 * j), c1[j]);
            }
        }
        r += 2;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic normal-range values (no subnormals, so `vdpbf16ps`'s DAZ changes nothing),
    /// with exact zeros, both signs and a few large magnitudes.
    fn values(len: usize, seed: u64) -> Vec<f32> {
        let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (0..len)
            .map(|i| {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let u = ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0;
                match i % 23 {
                    0 => 0.0,
                    7 => u * 300.0,
                    _ => u,
                }
            })
            .collect()
    }

    /// The scalar reference: both operands rounded to bf16 like the kernels, f32 sums of the
    /// exact products in `k` order, or with each pair `(2g, 2g + 1)` added odd first (`pairs`,
    /// the order of `vdpbf16ps`), then the bias.
    fn reference(x: &[f32], w: &[f32], b: &[f32], m: usize, n: usize, k: usize, pairs: bool) -> Vec<f32> {
        let r = |v: f32| from_bf16(to_bf16(v));
        let mut out = vec![0f32; m * n];
        for i in 0..m {
            for j in 0..n {
                let p = |kk: usize| if kk < k { r(x[i * k + kk]) * r(w[j * k + kk]) } else { 0.0 };
                let mut s = 0f32;
                if pairs {
                    for g in 0..k.div_ceil(2) {
                        s += p(2 * g + 1);
                        s += p(2 * g);
                    }
                } else {
                    for kk in 0..k {
                        s += p(kk);
                    }
                }
                out[i * n + j] = s + b[j];
            }
        }
        out
    }

    fn run(path: BfPath, x: &[f32], w: &[f32], b: &[f32], m: usize, n: usize, k: usize) -> Vec<f32> {
        let wb: Vec<u16> = w.iter().map(|&v| to_bf16(v)).collect();
        let pw = PackedBf16::pack(&wb, n, k);
        let a = activations(path, x, m, k, pw.kp);
        let mut out = vec![f32::NAN; m * n];
        gemm(path, &a, m, &pw, b, &mut out);
        out
    }

    #[test]
    fn rounding_is_to_nearest_even() {
        // 1 + 2⁻⁸ lies halfway between 1 and 1 + 2⁻⁷: ties go to the even mantissa (1).
        assert_eq!(to_bf16(1.0 + 1.0 / 256.0), 0x3f80);
        // 1 + 3·2⁻⁸ lies halfway between 1 + 2⁻⁷ (odd) and 1 + 2⁻⁶: up to even.
        assert_eq!(to_bf16(1.0 + 3.0 / 256.0), 0x3f82);
        assert_eq!(to_bf16(1.0 + 1.0 / 256.0 + 1e-6), 0x3f81);
        assert_eq!(from_bf16(to_bf16(-2.5)), -2.5);
        assert!(from_bf16(to_bf16(f32::NAN)).is_nan());
    }

    /// Every path against the scalar reference, bit for bit: the widening paths and the portable
    /// one add the exact products in `k` order, `vdpbf16ps` in pairs, odd `k` first.
    #[test]
    fn every_path_matches_the_reference_bit_for_bit() {
        let shapes = [
            (1, 1, 1),
            (1, 384, 384),
            (3, 5, 7),
            (8, 32, 2),
            (9, 33, 17),
            (70, 31, 65),
            (130, 97, 383),
            (65, 384, 1536),
            (2, 1536, 385),
            (17, 1, 1),
        ];
        let paths = BfPath::all_available();
        assert!(paths.contains(&BfPath::Portable));
        for (si, &(m, n, k)) in shapes.iter().enumerate() {
            let x = values(m * k, 3 * si as u64 + 1);
            let w = values(n * k, 3 * si as u64 + 2);
            let b = values(n, 3 * si as u64 + 3);
            let in_order = reference(&x, &w, &b, m, n, k, false);
            let in_pairs = reference(&x, &w, &b, m, n, k, true);
            for &path in &paths {
                let want = if path == BfPath::Avx512Bf16 { &in_pairs } else { &in_order };
                let got = run(path, &x, &w, &b, m, n, k);
                for (idx, (g, e)) in got.iter().zip(want).enumerate() {
                    assert_eq!(
                        g.to_bits(),
                        e.to_bits(),
                        "{path:?} m={m} n={n} k={k} at ({}, {}): {g} vs {e}",
                        idx / n,
                        idx % n
                    );
                }
            }
        }
    }

    /// The two orders differ by rounding only: each f32 addition errs by at most half an ulp of
    /// its result, so two orders of `k` additions of the same exact products differ by at most
    /// `2 · k · 2⁻²⁴ · Σ_k |a_k w_k|` (each sum within `k · 2⁻²⁴ · Σ|p|` of the exact one).
    #[test]
    fn the_orders_agree_within_the_rounding_bound() {
        let (m, n, k) = (33, 70, 1537);
        let x = values(m * k, 11);
        let w = values(n * k, 12);
        let b = vec![0f32; n];
        let r = |v: f32| from_bf16(to_bf16(v)) as f64;
        let a = reference(&x, &w, &b, m, n, k, false);
        let p = reference(&x, &w, &b, m, n, k, true);
        for i in 0..m {
            for j in 0..n {
                let abs: f64 = (0..k).map(|kk| (r(x[i * k + kk]) * r(w[j * k + kk])).abs()).sum();
                let bound = 2.0 * k as f64 * 2f64.powi(-24) * abs;
                let d = (a[i * n + j] as f64 - p[i * n + j] as f64).abs();
                assert!(d <= bound, "({i}, {j}): {d} > {bound}");
            }
        }
    }
}
