//! int8 GEMM: `acc[i][j] = Σ_k a[i][k] · w[j][k]` with int8 activations (quantised per row) and
//! int8 weights (per output channel, prepacked), exact in i32, then `y = acc · sa_i · sw_j + b_j`.
//!
//! Packed weights: `n` padded to a multiple of 32 ([`NR`]) and `k` to a multiple of 4, panels of
//! 32 output channels; inside a panel, for each group of 4 `k`, the 4 bytes of channel 0, then
//! of channel 1, … of channel 31 (128 bytes): one `vpdpbusd` operand per 16 channels, one AVX2
//! register per 8. Padding is 0 so it adds nothing.
//!
//! Paths (chosen in [`super::Path`]):
//! - AVX-512 VNNI: `vpdpbusd` takes unsigned × signed bytes, so activations are stored as
//!   `q + 128` (u8) and `128 · Σ_k w[j][k]` (the packed row sums) is subtracted afterwards.
//! - AVX2: `vpmaddubsw(|a|, sign(w, a))` = pairs of `a·w`, each |a·w| ≤ 127², so the i16 pair
//!   sums (≤ 32,258) never saturate; `vpmaddwd` with ones widens them to i32. No shift.
//! - Portable: the same sums in scalar Rust.
//!
//! All three give the same i32 sums bit for bit (tested), hence the same f32 outputs.

use super::Path;
use rayon::prelude::*;
use std::mem::MaybeUninit;

/// Output channels per panel.
pub const NR: usize = 32;
/// Rows per micro-tile.
pub const MR: usize = 8;
/// Rows per cache block: each weight panel is used for this many rows before the next.
const MB: usize = 64;

type Tile = [[i32; NR]; MR];

/// Weights prepacked for the kernels (see the module doc).
#[derive(Clone, Debug)]
pub struct PackedI8 {
    pub n: usize,
    pub k: usize,
    /// `k` rounded up to a multiple of 4.
    pub kp: usize,
    /// `n` rounded up to a multiple of [`NR`].
    pub np: usize,
    data: Vec<i8>,
    /// `Σ_k w[j][k]` per output channel (0 for padding), for the VNNI path's shift.
    rowsum: Vec<i32>,
}

impl PackedI8 {
    /// Pack `q` (`[n, k]` int8, row-major; values in [-127, 127]).
    pub fn pack(q: &[i8], n: usize, k: usize) -> Self {
        assert_eq!(q.len(), n * k, "pack: {n}×{k} weights expected, got {}", q.len());
        assert!(q.iter().all(|&v| v != -128), "pack: int8 weights must lie in [-127, 127]");
        let kp = k.div_ceil(4) * 4;
        let np = n.div_ceil(NR) * NR;
        let mut data = vec![0i8; np * kp];
        let mut rowsum = vec![0i32; np];
        for j in 0..n {
            let (p, c) = (j / NR, j % NR);
            let row = &q[j * k..(j + 1) * k];
            rowsum[j] = row.iter().map(|&v| v as i32).sum();
            for (kk, &v) in row.iter().enumerate() {
                data[p * kp * NR + (kk / 4) * 4 * NR + c * 4 + kk % 4] = v;
            }
        }
        Self { n, k, kp, np, data, rowsum }
    }

    fn panel(&self, p: usize) -> &[i8] {
        &self.data[p * self.kp * NR..(p + 1) * self.kp * NR]
    }

    /// `Σ_k w[j][k]` per output channel, padded to `np` with 0.
    pub fn channel_sums(&self) -> &[i32] {
        &self.rowsum
    }

    /// Bytes held (packed weights and row sums).
    pub fn bytes(&self) -> usize {
        self.data.len() + 4 * self.rowsum.len()
    }
}

/// Whether `path` wants activations shifted to u8 (`q + 128`).
pub fn shifted(path: Path) -> bool {
    matches!(path, Path::Avx512Vnni)
}

/// Consumes finished tiles.
trait Epilogue: Sync {
    /// `acc`: raw sums of rows `row0..row0 + rows` (of this block) and channels
    /// `32·panel..32·panel + 32`, before the VNNI correction `corr` (0 elsewhere). Writes every
    /// one of those outputs (channels below `n`): [`drive`] calls it once for each of them, so
    /// `out` needs no initial value.
    fn tile(&self, out: &mut [MaybeUninit<f32>], row0: usize, rows: usize, panel: usize, acc: &Tile, corr: &[i32; NR]);
}

/// The micro-kernel of each path: raw sums of `rows` (≤ [`MR`]) rows of `a` (stride `kp`)
/// against one panel.
type Kernel = unsafe fn(a: &[u8], kp: usize, rows: usize, panel: &[i8], acc: &mut Tile);

#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn drive<E: Epilogue>(
    kernel: Kernel,
    path: Path,
    a: &[u8],
    m: usize,
    w: &PackedI8,
    out: &mut [MaybeUninit<f32>],
    ld_out: usize,
    e: &E,
) {
    let kp = w.kp;
    let panels = w.np / NR;
    let corr: Vec<[i32; NR]> = (0..panels)
        .map(|p| {
            let mut c = [0i32; NR];
            if shifted(path) {
                for (ci, &s) in c.iter_mut().zip(&w.rowsum[p * NR..(p + 1) * NR]) {
                    *ci = 128 * s;
                }
            }
            c
        })
        .collect();
    let block = |(bi, out): (usize, &mut [MaybeUninit<f32>])| {
        let r0 = bi * MB;
        let rows = (m - r0).min(MB);
        let mut acc: Tile = [[0; NR]; MR];
        for (p, corr) in corr.iter().enumerate() {
            let panel = w.panel(p);
            let mut r = 0;
            while r < rows {
                let mr = (rows - r).min(MR);
                // SAFETY: the caller chose `kernel` for a path this CPU supports.
                unsafe { kernel(&a[(r0 + r) * kp..(r0 + r + mr) * kp], kp, mr, panel, &mut acc) };
                e.tile(out, r0 + r, mr, p, &acc, corr);
                r += mr;
            }
        }
        let _ = ld_out;
    };
    if m > MB && rayon::current_num_threads() > 1 {
        out[..m * ld_out].par_chunks_mut(MB * ld_out).enumerate().for_each(|(bi, o)| block((bi, o)));
    } else {
        out[..m * ld_out].chunks_mut(MB * ld_out).enumerate().for_each(block);
    }
}

/// `y = (acc - corr) · sa_i · sw_j + b_j` into `out` (`[m, n]`, row-major); `out` is the block's
/// slice, so rows are taken relative to the block.
struct F32Out<'a> {
    n: usize,
    sa: &'a [f32],
    /// Scales and bias padded to `np`.
    sw: &'a [f32],
    b: &'a [f32],
    /// Asymmetric rows: each row's offset `o_i` and, per channel (padded to `np`),
    /// `sw_j · Σ_k w_jk`; `y` gains `o_i · sw_j · Σ_k w_jk`.
    off: Option<(&'a [f32], &'a [f32])>,
}

impl Epilogue for F32Out<'_> {
    #[inline(always)]
    fn tile(&self, out: &mut [MaybeUninit<f32>], row0: usize, rows: usize, panel: usize, acc: &Tile, corr: &[i32; NR]) {
        f32_tile(self, out, row0, rows, panel, acc, corr)
    }
}

crate::model::kernels::vectorised_fn! {
    /// [`F32Out`]'s tile, compiled for AVX-512/AVX2: it runs in `drive`'s block closure, which
    /// is compiled for the baseline target even where `drive` is inlined into a kernel's entry
    /// (so this was SSE code: 8 % of the int8 encoder's time).
    #[allow(clippy::needless_range_loop)]
    fn f32_tile(
        e: &F32Out<'_>,
        out: &mut [MaybeUninit<f32>],
        row0: usize,
        rows: usize,
        panel: usize,
        acc: &Tile,
        corr: &[i32; NR],
    ) {
        let c0 = panel * NR;
        let cols = (e.n - c0).min(NR);
        let sw: &[f32; NR] = e.sw[c0..c0 + NR].try_into().unwrap();
        let b: &[f32; NR] = e.b[c0..c0 + NR].try_into().unwrap();
        let local0 = row0 % MB;
        for r in 0..rows {
            let s = e.sa[row0 + r];
            let o = (local0 + r) * e.n + c0;
            if let Some((oa, cw)) = e.off {
                let oi = oa[row0 + r];
                let cw: &[f32; NR] = cw[c0..c0 + NR].try_into().unwrap();
                if cols == NR {
                    let dst: &mut [MaybeUninit<f32>; NR] = (&mut out[o..o + NR]).try_into().unwrap();
                    for c in 0..NR {
                        dst[c].write((acc[r][c] - corr[c]) as f32 * (s * sw[c]) + (oi * cw[c] + b[c]));
                    }
                } else {
                    for (c, d) in out[o..o + cols].iter_mut().enumerate() {
                        d.write((acc[r][c] - corr[c]) as f32 * (s * sw[c]) + (oi * cw[c] + b[c]));
                    }
                }
                continue;
            }
            // Written in place (a copy through a temporary became a `memmove` call per row, the
            // largest copy in the int8 encoder's profile).
            if cols == NR {
                let dst: &mut [MaybeUninit<f32>; NR] = (&mut out[o..o + NR]).try_into().unwrap();
                for c in 0..NR {
                    dst[c].write((acc[r][c] - corr[c]) as f32 * (s * sw[c]) + b[c]);
                }
            } else {
                for (c, d) in out[o..o + cols].iter_mut().enumerate() {
                    d.write((acc[r][c] - corr[c]) as f32 * (s * sw[c]) + b[c]);
                }
            }
        }
    }
}

/// The exact sums, as f32 bit patterns of i32 (for tests: `out` holds i32 bits).
struct I32Out {
    n: usize,
}

impl Epilogue for I32Out {
    #[inline(always)]
    fn tile(&self, out: &mut [MaybeUninit<f32>], row0: usize, rows: usize, panel: usize, acc: &Tile, corr: &[i32; NR]) {
        let c0 = panel * NR;
        let cols = (self.n - c0).min(NR);
        let local0 = row0 % MB;
        for r in 0..rows {
            for c in 0..cols {
                out[(local0 + r) * self.n + c0 + c].write(f32::from_bits((acc[r][c] - corr[c]) as u32));
            }
        }
    }
}

macro_rules! entry {
    ($name:ident, $features:literal, $kernel:path) => {
        #[target_feature(enable = $features)]
        unsafe fn $name<E: Epilogue>(
            path: Path,
            a: &[u8],
            m: usize,
            w: &PackedI8,
            out: &mut [MaybeUninit<f32>],
            e: &E,
        ) {
            drive($kernel, path, a, m, w, out, w.n, e)
        }
    };
}

#[cfg(target_arch = "x86_64")]
entry!(run_vnni, "avx512f,avx512bw,avx512vnni", tile_vnni);
#[cfg(target_arch = "x86_64")]
entry!(run_avx2, "avx2", tile_avx2);

/// `[m, n]` outputs of `e`, every one written by [`drive`].
fn run<E: Epilogue>(path: Path, a: &[u8], m: usize, w: &PackedI8, e: &E) -> Vec<f32> {
    assert!(path.available(), "int8 GEMM: the {path:?} path is not supported by this CPU");
    assert_eq!(a.len(), m * w.kp, "int8 GEMM: activations must be [m, kp]");
    // Not zeroed first: zeroing it was one of the `memset`s of the int8 encoder's profile
    // (docs/quantization.md, "Where the time went").
    let mut out: Vec<f32> = Vec::with_capacity(m * w.n);
    run_into(path, a, m, w, &mut out.spare_capacity_mut()[..m * w.n], e);
    // SAFETY: `drive` calls the epilogue for every row block, panel and row of `[m, n]`, and each
    // epilogue writes every channel below `n` of the rows it is given (see `Epilogue::tile`).
    unsafe { out.set_len(m * w.n) };
    out
}

fn run_into<E: Epilogue>(path: Path, a: &[u8], m: usize, w: &PackedI8, out: &mut [MaybeUninit<f32>], e: &E) {
    if m == 0 {
        return;
    }
    match path {
        // SAFETY: `run` checked the CPU features (`path.available()`).
        #[cfg(target_arch = "x86_64")]
        Path::Avx512Vnni => unsafe { run_vnni(path, a, m, w, out, e) },
        #[cfg(target_arch = "x86_64")]
        Path::Avx2 => unsafe { run_avx2(path, a, m, w, out, e) },
        _ => drive(tile_portable, path, a, m, w, out, w.n, e),
    }
}

/// `out[i][j] = (Σ_k a_ik w_jk) · sa_i · sw_j + b_j` for `m` rows of activations `a` quantised by
/// [`super::quantize::quantize_activations`] with `shift = shifted(path)` (`[m, kp]`), weights
/// `w` with scales `sw` and bias `b` (each padded to `w.np`). Asymmetric rows pass `offsets`:
/// the row offsets `oa` and, per channel, `cw_j = sw_j · Σ_k w_jk` (padded to `w.np`, see
/// [`PackedI8::channel_sums`]); `out[i][j]` then gains `oa_i · cw_j`. Returns `out`, `[m, n]`.
#[allow(clippy::too_many_arguments)]
pub fn gemm_f32(
    path: Path,
    a: &[u8],
    m: usize,
    sa: &[f32],
    w: &PackedI8,
    sw: &[f32],
    b: &[f32],
    offsets: Option<(&[f32], &[f32])>,
) -> Vec<f32> {
    assert!(sa.len() == m && sw.len() == w.np && b.len() == w.np, "int8 GEMM: scales or bias of the wrong length");
    if let Some((oa, cw)) = offsets {
        assert!(oa.len() == m && cw.len() == w.np, "int8 GEMM: offsets of the wrong length");
    }
    run(path, a, m, w, &F32Out { n: w.n, sa, sw, b, off: offsets })
}

/// The exact i32 sums `Σ_k a_ik w_jk` (`[m, n]`), for tests.
pub fn gemm_i32(path: Path, a: &[u8], m: usize, w: &PackedI8) -> Vec<i32> {
    run(path, a, m, w, &I32Out { n: w.n }).into_iter().map(|v| v.to_bits() as i32).collect()
}

/// Portable micro-kernel (activations as i8 bits).
unsafe fn tile_portable(a: &[u8], kp: usize, rows: usize, panel: &[i8], acc: &mut Tile) {
    for r in 0..rows {
        let row = &a[r * kp..(r + 1) * kp];
        let mut s = [0i32; NR];
        for (g, w) in panel.chunks_exact(4 * NR).enumerate() {
            let av = [
                row[4 * g] as i8 as i32,
                row[4 * g + 1] as i8 as i32,
                row[4 * g + 2] as i8 as i32,
                row[4 * g + 3] as i8 as i32,
            ];
            for c in 0..NR {
                let wc = &w[4 * c..4 * c + 4];
                s[c] += av[0] * wc[0] as i32 + av[1] * wc[1] as i32 + av[2] * wc[2] as i32 + av[3] * wc[3] as i32;
            }
        }
        acc[r] = s;
    }
}

/// AVX-512 VNNI micro-kernel: 8 rows × 32 channels in 16 zmm accumulators, one `vpdpbusd` per
/// 4 k × 16 channels (activations as u8 `q + 128`).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn tile_vnni(a: &[u8], kp: usize, rows: usize, panel: &[i8], acc: &mut Tile) {
    use std::arch::x86_64::*;
    debug_assert!((1..=MR).contains(&rows) && a.len() >= rows * kp && panel.len() == kp * NR);
    // Rows past `rows` repeat the last one (computed, not stored).
    let ap: [*const u8; MR] = std::array::from_fn(|r| a.as_ptr().add(r.min(rows - 1) * kp));
    let wp = panel.as_ptr();
    let mut c = [[_mm512_setzero_si512(); 2]; MR];
    for g in 0..kp / 4 {
        let w0 = _mm512_loadu_si512(wp.add(g * 4 * NR) as *const _);
        let w1 = _mm512_loadu_si512(wp.add(g * 4 * NR + 64) as *const _);
        for r in 0..MR {
            let x = _mm512_set1_epi32((ap[r].add(4 * g) as *const i32).read_unaligned());
            c[r][0] = _mm512_dpbusd_epi32(c[r][0], x, w0);
            c[r][1] = _mm512_dpbusd_epi32(c[r][1], x, w1);
        }
    }
    for r in 0..rows {
        _mm512_storeu_si512(acc[r].as_mut_ptr() as *mut _, c[r][0]);
        _mm512_storeu_si512(acc[r].as_mut_ptr().add(16) as *mut _, c[r][1]);
    }
}

/// AVX2 micro-kernel: 2 rows × 32 channels at a time (8 ymm accumulators), `vpmaddubsw` of
/// `|a|` and `sign(w, a)` then `vpmaddwd` with ones (activations as i8).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn tile_avx2(a: &[u8], kp: usize, rows: usize, panel: &[i8], acc: &mut Tile) {
    use std::arch::x86_64::*;
    let ones = _mm256_set1_epi16(1);
    let wp = panel.as_ptr();
    let mut r = 0;
    while r < rows {
        let a0 = a.as_ptr().add(r * kp);
        let a1 = a.as_ptr().add((r + 1).min(rows - 1) * kp);
        let mut c0 = [_mm256_setzero_si256(); 4];
        let mut c1 = [_mm256_setzero_si256(); 4];
        for g in 0..kp / 4 {
            let x0 = _mm256_set1_epi32((a0.add(4 * g) as *const i32).read_unaligned());
            let x1 = _mm256_set1_epi32((a1.add(4 * g) as *const i32).read_unaligned());
            let ax0 = _mm256_sign_epi8(x0, x0);
            let ax1 = _mm256_sign_epi8(x1, x1);
            for j in 0..4 {
                let w = _mm256_loadu_si256(wp.add(g * 4 * NR + 32 * j) as *const _);
                let p0 = _mm256_maddubs_epi16(ax0, _mm256_sign_epi8(w, x0));
                let p1 = _mm256_maddubs_epi16(ax1, _mm256_sign_epi8(w, x1));
                c0[j] = _mm256_add_epi32(c0[j], _mm256_madd_epi16(p0, ones));
                c1[j] = _mm256_add_epi32(c1[j], _mm256_madd_epi16(p1, ones));
            }
        }
        for j in 0..4 {
            _mm256_storeu_si256(acc[r].as_mut_ptr().add(8 * j) as *mut _, c0[j]);
            if r + 1 < rows {
                _mm256_storeu_si256(acc[r + 1].as_mut_ptr().add(8 * j) as *mut _, c1[j]);
            }
        }
        r += 2;
    }
}

#[cfg(test)]
mod tests {
    use super::super::quantize::quantize_activations;
    use super::*;

    /// Deterministic int8 values in [-127, 127], extremes included.
    fn values(len: usize, seed: u64) -> Vec<i8> {
        let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (0..len)
            .map(|i| {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                match i % 17 {
                    0 => 127,
                    5 => -127,
                    _ => (((s >> 33) % 255) as i32 - 127) as i8,
                }
            })
            .collect()
    }

    fn reference(a: &[i8], w: &[i8], m: usize, n: usize, k: usize) -> Vec<i32> {
        let mut out = vec![0i32; m * n];
        for i in 0..m {
            for j in 0..n {
                out[i * n + j] = (0..k).map(|kk| a[i * k + kk] as i32 * w[j * k + kk] as i32).sum();
            }
        }
        out
    }

    /// Bytes for `path` from int8 activations (padded to `kp`, shifted where the path wants).
    fn layout(a: &[i8], m: usize, k: usize, kp: usize, path: Path) -> Vec<u8> {
        let flip = if shifted(path) { 0x80 } else { 0 };
        let mut out = vec![flip; m * kp];
        for i in 0..m {
            for kk in 0..k {
                out[i * kp + kk] = (a[i * k + kk] as u8) ^ flip;
            }
        }
        out
    }

    #[test]
    fn every_path_matches_the_integer_reference_bit_for_bit() {
        let shapes = [
            (1, 1, 1),
            (1, 384, 384),
            (3, 5, 7),
            (8, 32, 4),
            (9, 33, 17),
            (70, 31, 65),
            (130, 97, 383),
            (65, 384, 1536),
            (2, 1536, 384),
            (17, 1, 1),
        ];
        let paths = Path::all_available();
        assert!(paths.contains(&Path::Portable));
        for (si, &(m, n, k)) in shapes.iter().enumerate() {
            let a = values(m * k, 2 * si as u64 + 1);
            let w = values(n * k, 2 * si as u64 + 2);
            let want = reference(&a, &w, m, n, k);
            let pw = PackedI8::pack(&w, n, k);
            for &path in &paths {
                let got = gemm_i32(path, &layout(&a, m, k, pw.kp, path), m, &pw);
                assert!(got == want, "{path:?} differs from the reference at m={m} n={n} k={k}");
            }
        }
    }

    #[test]
    fn extreme_values_do_not_saturate() {
        // All ±127: the largest pair sums of the AVX2 path and the largest VNNI shifts.
        let (m, n, k) = (9, 40, 1540);
        // -128 activations (asymmetric rows) with ±127 weights: AVX2 pair sums of 2·128·127.
        for (sa, sw) in [(127i8, 127i8), (-127, 127), (127, -127), (-127, -127), (-128, 127), (-128, -127)] {
            let a = vec![sa; m * k];
            let w = vec![sw; n * k];
            let want = reference(&a, &w, m, n, k);
            let pw = PackedI8::pack(&w, n, k);
            for path in Path::all_available() {
                assert_eq!(gemm_i32(path, &layout(&a, m, k, pw.kp, path), m, &pw), want, "{path:?} {sa} {sw}");
            }
        }
    }

    /// Weights `[n, k]` (int8, packed) with per-channel scales and bias padded to `np`, for the
    /// f32 epilogue tests.
    fn f32_layer(n: usize, k: usize, seed: u64) -> (Vec<i8>, PackedI8, Vec<f32>, Vec<f32>) {
        let wq = values(n * k, seed);
        let pw = PackedI8::pack(&wq, n, k);
        let mut sw: Vec<f32> = (0..n).map(|j| 0.01 + j as f32 * 1e-3).collect();
        let mut b: Vec<f32> = (0..n).map(|j| j as f32 * 0.5 - 3.0).collect();
        sw.resize(pw.np, 0.0);
        b.resize(pw.np, 0.0);
        (wq, pw, sw, b)
    }

    #[test]
    fn f32_outputs_agree_across_paths_and_with_the_formula() {
        let (m, n, k) = (75, 45, 130);
        let x: Vec<f32> = (0..m * k).map(|i| ((i * 37 % 211) as f32 - 105.0) / 17.0).collect();
        let (_, pw, sw, b) = f32_layer(n, k, 9);
        let mut outs = Vec::new();
        for path in Path::all_available() {
            let mut qa = Vec::new();
            let (sa, _) = quantize_activations(&x, m, k, pw.kp, shifted(path), None, false, &mut qa);
            let out = gemm_f32(path, &qa, m, &sa, &pw, &sw, &b, None);
            let exact = gemm_i32(path, &qa, m, &pw);
            for i in 0..m {
                for j in 0..n {
                    let want = exact[i * n + j] as f32 * (sa[i] * sw[j]) + b[j];
                    assert_eq!(out[i * n + j].to_bits(), want.to_bits(), "{path:?} ({i}, {j})");
                }
            }
            outs.push(out);
        }
        assert!(outs.windows(2).all(|w| w[0] == w[1]), "paths give different f32 outputs");
    }

    #[test]
    fn asymmetric_rows_agree_across_paths_and_approximate_the_product() {
        // One-sided rows (as after GELU), with a few large columns; k not a multiple of 4.
        let (m, n, k) = (75, 45, 130);
        let x: Vec<f32> =
            (0..m * k).map(|i| ((i * 37 % 211) as f32 / 40.0 - 0.17) * if i % k == 7 { 9.0 } else { 1.0 }).collect();
        let (wq, pw, sw, b) = f32_layer(n, k, 11);
        let cw: Vec<f32> = pw.channel_sums().iter().zip(&sw).map(|(&q, &s)| q as f32 * s).collect();
        let mut outs = Vec::new();
        for path in Path::all_available() {
            let mut qa = Vec::new();
            let (sa, oa) = quantize_activations(&x, m, k, pw.kp, shifted(path), None, true, &mut qa);
            let oa = oa.unwrap();
            let out = gemm_f32(path, &qa, m, &sa, &pw, &sw, &b, Some((&oa, &cw)));
            let exact = gemm_i32(path, &qa, m, &pw);
            for i in 0..m {
                for j in 0..n {
                    let want = exact[i * n + j] as f32 * (sa[i] * sw[j]) + (oa[i] * cw[j] + b[j]);
                    assert_eq!(out[i * n + j].to_bits(), want.to_bits(), "{path:?} ({i}, {j})");
                    // Against the f64 product with the dequantised weights: each activation is
                    // off by at most half a step, sa[i] / 2.
                    let exact_y: f64 =
                        (0..k).map(|kk| x[i * k + kk] as f64 * wq[j * k + kk] as f64 * sw[j] as f64).sum::<f64>()
                            + b[j] as f64;
                    let bound: f64 = (0..k).map(|kk| (wq[j * k + kk] as f64 * sw[j] as f64).abs()).sum::<f64>()
                        * sa[i] as f64
                        * 0.5001;
                    assert!((out[i * n + j] as f64 - exact_y).abs() <= bound + 1e-3, "{path:?} ({i}, {j})");
                }
            }
            outs.push(out);
        }
        assert!(outs.windows(2).all(|w| w[0] == w[1]), "paths give different f32 outputs");
    }
}
