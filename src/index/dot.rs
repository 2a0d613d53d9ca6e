//! Inner products of two blocks of rows (`A · Bᵀ`), one GEMM each, on the calling thread.
//!
//! The similarity of a query and a vector must not depend on which other rows share its block:
//! a sharded index, or another split of the queries, must find the same numbers bit for bit.
//! gemm's main kernel gives every element the same sum whatever the block's shape, but its
//! paths for tiny products (one row or column, or at most 256 elements) sum in another order.
//! So blocks are padded with zero rows to at least [`MIN_SIDE`] rows on each side, which keeps
//! every product on the main kernel. And gemm cuts long rows into pieces whose length depends
//! on the block's shape (above 384 values, measured), so rows are multiplied in pieces of
//! [`K_PIECE`] values, each product added to the last in a fixed order (tested below for the
//! shapes and dimensions used).

/// Each side of a product has at least this many rows (zero rows pad a smaller one).
pub const MIN_SIDE: usize = 32;
/// Values of a row multiplied in one GEMM.
pub const K_PIECE: usize = 384;

/// `out[i * n + j] = a_i · b_j` for the `m` rows of `a` and the `n` rows of `b` (`d` values
/// each, row-major). `scratch` holds the padding when a side is small.
pub fn dot_block(a: &[f32], m: usize, b: &[f32], n: usize, d: usize, out: &mut Vec<f32>, scratch: &mut Scratch) {
    debug_assert!(a.len() >= m * d && b.len() >= n * d);
    out.clear();
    if m == 0 || n == 0 {
        return;
    }
    let (pm, pn) = (m.max(MIN_SIDE), n.max(MIN_SIDE));
    let a = pad(a, m, pm, d, &mut scratch.a);
    let b = pad(b, n, pn, d, &mut scratch.b);
    if pm == m && pn == n {
        out.resize(m * n, 0.0);
        gemm_nt(a, m, b, n, d, out);
        return;
    }
    scratch.out.clear();
    scratch.out.resize(pm * pn, 0.0);
    gemm_nt(a, pm, b, pn, d, &mut scratch.out);
    out.reserve(m * n);
    for row in scratch.out.chunks_exact(pn).take(m) {
        out.extend_from_slice(&row[..n]);
    }
}

/// Buffers reused across [`dot_block`] calls.
#[derive(Default)]
pub struct Scratch {
    a: Vec<f32>,
    b: Vec<f32>,
    out: Vec<f32>,
}

/// `rows` rows of `x`, or a copy padded with zero rows to `padded`.
fn pad<'a>(x: &'a [f32], rows: usize, padded: usize, d: usize, buf: &'a mut Vec<f32>) -> &'a [f32] {
    if rows == padded {
        return &x[..rows * d];
    }
    buf.clear();
    buf.extend_from_slice(&x[..rows * d]);
    buf.resize(padded * d, 0.0);
    buf
}

/// `out = a · bᵀ` (`m × n`), single-threaded, in pieces of [`K_PIECE`] values.
fn gemm_nt(a: &[f32], m: usize, b: &[f32], n: usize, d: usize, out: &mut [f32]) {
    assert!(a.len() >= m * d && b.len() >= n * d && out.len() >= m * n, "gemm_nt: buffers smaller than their shapes");
    for k0 in (0..d).step_by(K_PIECE) {
        let k = K_PIECE.min(d - k0);
        // SAFETY: `a` is `m × d` and `b` is `n × d`, row-major, within their slices (asserted
        // above), so columns `k0 .. k0 + k` of their rows are too; `out` is an `m × n` row-major
        // matrix within its slice. bᵀ is read through swapped strides. The first piece writes
        // `out`, the others add to it.
        unsafe {
            gemm::gemm(
                m,
                n,
                k,
                out.as_mut_ptr(),
                1,
                n as isize,
                k0 > 0,
                a.as_ptr().add(k0),
                1,
                d as isize,
                b.as_ptr().add(k0),
                d as isize,
                1,
                1.0,
                1.0,
                false,
                false,
                false,
                gemm::Parallelism::None,
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lcg(seed: u64, len: usize) -> Vec<f32> {
        let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (0..len)
            .map(|_| {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                (s >> 40) as f32 / (1u64 << 24) as f32 - 0.5
            })
            .collect()
    }

    /// Every sub-block of rows gives the same bits as the whole product, for the block sizes and
    /// dimensions an index meets (tiny and large lists, 1 to 1,500 queries).
    #[test]
    fn a_similarity_does_not_depend_on_its_block() {
        let mut s = Scratch::default();
        for d in [5usize, 384, 385, 768, 1024] {
            let (m0, n0) = (1500, 2100);
            let a = lcg(d as u64, m0 * d);
            let b = lcg(d as u64 + 1000, n0 * d);
            let mut full = Vec::new();
            dot_block(&a, m0, &b, n0, d, &mut full, &mut s);
            let mut out = Vec::new();
            for (m, n) in [
                (1, 1),
                (1, 700),
                (2, 3),
                (17, 15),
                (31, 33),
                (64, 1),
                (100, 2100),
                (1500, 7),
                (257, 1031),
                (1000, 2000),
            ] {
                for (i0, j0) in [(0, 0), (m0 - m, n0 - n), ((m0 - m) / 3, (n0 - n) / 2)] {
                    dot_block(&a[i0 * d..], m, &b[j0 * d..], n, d, &mut out, &mut s);
                    for i in 0..m {
                        for j in 0..n {
                            assert_eq!(
                                out[i * n + j].to_bits(),
                                full[(i0 + i) * n0 + j0 + j].to_bits(),
                                "d {d}, block {m} × {n} at ({i0}, {j0}), element ({i}, {j})"
                            );
                        }
                    }
                }
            }
        }
    }
}
