//! Exact k-nearest-neighbour search by inner product, and LASER-style margin mining.
//!
//! The search works in blocks: a block of queries against a block of targets at a time (one
//! GEMM each), never the full N×M similarity matrix, with query blocks spread over
//! [`crate::threads::threads`] workers. [`knn_both`] keeps a running top-k for the rows (the
//! queries) and for the columns (the targets) of every block product, so the two directions
//! that margin mining needs cost one pass of GEMMs, not two.
//!
//! Ties between equal similarities go to the lower index, in both directions, so the neighbour
//! lists do not depend on the number of workers or on the block sizes. (The similarities
//! themselves are bit for bit the same for any blocks that run the GEMM's main kernel, as all
//! blocks of 64 rows or more do; the tests check both.)

use anyhow::{anyhow, ensure, Result};
use candle_core::{Storage, Tensor};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

pub use super::matrix::{Matrix, Neighbours};

/// Query blocks are at most this many rows (one GEMM's rows)...
const MAX_QUERY_BLOCK: usize = 1024;
/// ...and at least this many, so that small searches still run efficient GEMMs...
const MIN_QUERY_BLOCK: usize = 64;
/// ...and between the two, small enough for this many blocks per worker (load balance).
const BLOCKS_PER_WORKER: usize = 4;
/// Targets per GEMM.
const TARGET_BLOCK: usize = 8192;
/// Target sides up to this size are cut into GEMM blocks once and shared by the workers;
/// larger ones are copied block by block, so the search's memory stays bounded by its blocks.
const SHARED_TARGETS_MAX_BYTES: usize = 64 << 20;

/// Block sizes and worker count of one search.
#[derive(Debug, Clone, Copy)]
struct Plan {
    query_block: usize,
    target_block: usize,
    workers: usize,
    /// Cut the targets into blocks once and share them, instead of copying each block per use.
    share_targets: bool,
}

impl Plan {
    /// For `n` queries and `m` targets of dimension `d`: query blocks of `n / (4 × workers)`
    /// rows within [64, 1024], so that there are at least as many blocks as workers whenever
    /// there are at least 64 × workers queries.
    fn new(n: usize, m: usize, d: usize, workers: usize) -> Self {
        let workers = workers.max(1);
        let query_block = n.div_ceil(workers * BLOCKS_PER_WORKER).clamp(MIN_QUERY_BLOCK, MAX_QUERY_BLOCK);
        let share_targets = m.saturating_mul(d).saturating_mul(4) <= SHARED_TARGETS_MAX_BYTES;
        Plan { query_block, target_block: TARGET_BLOCK, workers, share_targets }
    }

    fn for_search(queries: &Matrix, targets: &Matrix) -> Self {
        Self::new(queries.rows(), targets.rows(), targets.dim, crate::threads::threads())
    }
}

/// `n` rows cut into `ceil(n / size)` spans of nearly equal length: `(start, len)`.
fn spans(n: usize, size: usize) -> Vec<(usize, usize)> {
    let count = n.div_ceil(size.max(1));
    let (base, extra) = (n.checked_div(count).unwrap_or(0), n.checked_rem(count).unwrap_or(0));
    let mut start = 0;
    (0..count)
        .map(|b| {
            let len = base + usize::from(b < extra);
            start += len;
            (start - len, len)
        })
        .collect()
}

/// Exact top-k inner-product search of `queries` among `targets` (one direction).
/// Translation retrieval accuracy ×100: the share of rows i of `queries` whose nearest row of
/// `targets` (cosine) is row i, for line-aligned translations.
pub fn translation_accuracy(queries: &Matrix, targets: &Matrix) -> Result<f64> {
    let nn = knn(queries, targets, 1)?;
    Ok(100.0 * nn.idx.iter().enumerate().filter(|(i, j)| **j as usize == *i).count() as f64
        / queries.rows().max(1) as f64)
}

pub fn knn(queries: &Matrix, targets: &Matrix, k: usize) -> Result<Neighbours> {
    Ok(search(queries, targets, k, Plan::for_search(queries, targets), false)?.0)
}

/// Exact top-k inner-product search in both directions in one pass: each row of `x` among the
/// rows of `y` (`k` capped at `y`'s rows) and each row of `y` among the rows of `x` (`k` capped
/// at `x`'s rows). The same lists as `(knn(x, y, k), knn(y, x, k))` at half the GEMM work.
pub fn knn_both(x: &Matrix, y: &Matrix, k: usize) -> Result<(Neighbours, Neighbours)> {
    let (fwd, bwd) = search(x, y, k, Plan::for_search(x, y), true)?;
    Ok((fwd, bwd.expect("asked for both directions")))
}

/// Running top-k of every target (the columns), kept by one worker over the queries it saw.
struct ColumnTop {
    k: usize,
    sims: Vec<f32>,
    idx: Vec<u32>,
    /// `sims` of each column's k-th entry, contiguous so the scan can compare a row at a time.
    min: Vec<f32>,
}

impl ColumnTop {
    fn new(columns: usize, k: usize) -> Self {
        Self {
            k,
            sims: vec![f32::NEG_INFINITY; columns * k],
            idx: vec![0; columns * k],
            min: vec![f32::NEG_INFINITY; columns],
        }
    }
}

/// Insert `(v, id)` into a list sorted best first, where `v` beats its last entry. Ids reach a
/// list in increasing order, so an equal similarity already there (a lower id) stays ahead.
#[inline(always)]
fn insert(sims: &mut [f32], idx: &mut [u32], v: f32, id: u32) {
    let mut p = sims.len() - 1;
    while p > 0 && sims[p - 1] < v {
        sims[p] = sims[p - 1];
        idx[p] = idx[p - 1];
        p -= 1;
    }
    sims[p] = v;
    idx[p] = id;
}

/// One similarity `v` of query `qid` and target `tid`: into the row's list when it beats the
/// row's k-th (`rmin`), and with `BOTH` into the column's list when it beats the column's k-th.
#[inline(always)]
fn visit<const BOTH: bool>(
    v: f32,
    qid: u32,
    tid: usize,
    bs: &mut [f32],
    bi: &mut [u32],
    rmin: &mut f32,
    cols: &mut ColumnTop,
) {
    if v > *rmin {
        insert(bs, bi, v, tid as u32);
        *rmin = bs[bs.len() - 1];
    }
    if BOTH && v > cols.min[tid] {
        let k = cols.k;
        insert(&mut cols.sims[tid * k..(tid + 1) * k], &mut cols.idx[tid * k..(tid + 1) * k], v, qid);
        cols.min[tid] = cols.sims[tid * k + k - 1];
    }
}

/// Fold one block product (`rows × width`, row-major; queries from `q0`, targets from `t0`)
/// into the rows' top-k (`row_sims`/`row_idx`, `kr` per row) and, with `BOTH`, the columns'.
#[allow(clippy::too_many_arguments)]
fn scan<const BOTH: bool>(
    s: &[f32],
    rows: usize,
    width: usize,
    q0: usize,
    t0: usize,
    kr: usize,
    row_sims: &mut [f32],
    row_idx: &mut [u32],
    cols: &mut ColumnTop,
) {
    const LANES: usize = 16;
    for r in 0..rows {
        let line = &s[r * width..(r + 1) * width];
        let (bs, bi) = (&mut row_sims[r * kr..(r + 1) * kr], &mut row_idx[r * kr..(r + 1) * kr]);
        let mut rmin = bs[kr - 1];
        let qid = (q0 + r) as u32;
        let mut j = 0;
        while j + LANES <= width {
            let v = &line[j..j + LANES];
            // Branch-free test of a whole chunk (vectorised); most chunks change nothing.
            let mut hit = false;
            if BOTH {
                let c = &cols.min[t0 + j..t0 + j + LANES];
                for l in 0..LANES {
                    hit |= (v[l] > rmin) | (v[l] > c[l]);
                }
            } else {
                for &x in v {
                    hit |= x > rmin;
                }
            }
            if hit {
                for (l, &x) in v.iter().enumerate() {
                    visit::<BOTH>(x, qid, t0 + j + l, bs, bi, &mut rmin, cols);
                }
            }
            j += LANES;
        }
        for (l, &x) in line[j..].iter().enumerate() {
            visit::<BOTH>(x, qid, t0 + j + l, bs, bi, &mut rmin, cols);
        }
    }
}

/// The blocked search: `queries` against `targets`, rows' top-k and, with `both`, columns'.
fn search(
    queries: &Matrix,
    targets: &Matrix,
    k: usize,
    plan: Plan,
    both: bool,
) -> Result<(Neighbours, Option<Neighbours>)> {
    queries.check("queries")?;
    targets.check("targets")?;
    if let Some(dev) = super::knn_gpu::device() {
        return super::knn_gpu::search(queries, targets, k, both, &dev);
    }
    let (n, m) = (queries.rows(), targets.rows());
    ensure!(queries.dim == targets.dim || n == 0 || m == 0, "dimension mismatch: {} vs {}", queries.dim, targets.dim);
    ensure!(n <= u32::MAX as usize && m <= u32::MAX as usize, "kNN indices are 32-bit: {n} × {m} rows is too many");
    let (kr, kc) = (k.min(m), k.min(n));
    let mut rows = Neighbours::empty(n, kr);
    if kr == 0 || kc == 0 {
        return Ok((rows, both.then(|| Neighbours::empty(m, kc))));
    }
    let qspans = spans(n, plan.query_block);
    let tspans = spans(m, plan.target_block);
    let shared: Option<Vec<Tensor>> = if plan.share_targets {
        Some(tspans.iter().map(|&(s, len)| targets.block(s, len)).collect::<Result<_>>()?)
    } else {
        None
    };
    // One query block against every target block, into its rows' lists and `cols`.
    let run_block =
        |q0: usize, len: usize, row_sims: &mut [f32], row_idx: &mut [u32], cols: &mut ColumnTop| -> Result<()> {
            let q = queries.block(q0, len)?;
            for (i, &(t0, width)) in tspans.iter().enumerate() {
                let t = match &shared {
                    Some(blocks) => blocks[i].clone(),
                    None => targets.block(t0, width)?,
                };
                let p = crate::model::matmul::matmul(&q, &t.t()?)?;
                let (storage, layout) = p.storage_and_layout();
                let Storage::Cpu(cpu) = &*storage else { return Err(anyhow!("kNN block product is not on the CPU")) };
                ensure!(layout.is_contiguous(), "kNN block product is not contiguous");
                let s = &cpu.as_slice::<f32>()?[layout.start_offset()..][..len * width];
                if both {
                    scan::<true>(s, len, width, q0, t0, kr, row_sims, row_idx, cols);
                } else {
                    scan::<false>(s, len, width, q0, t0, kr, row_sims, row_idx, cols);
                }
            }
            Ok(())
        };
    let next = AtomicUsize::new(0);
    let out = Mutex::new((&mut rows.sims, &mut rows.idx));
    let work = || -> Result<Option<ColumnTop>> {
        let mut cols = ColumnTop::new(if both { m } else { 0 }, kc);
        let (mut row_sims, mut row_idx) = (Vec::new(), Vec::new());
        loop {
            // Blocks are taken in increasing order, so every list sees ids in increasing order.
            let b = next.fetch_add(1, Ordering::Relaxed);
            let Some(&(q0, len)) = qspans.get(b) else { break };
            row_sims.clear();
            row_sims.resize(len * kr, f32::NEG_INFINITY);
            row_idx.clear();
            row_idx.resize(len * kr, 0);
            if let Err(e) = run_block(q0, len, &mut row_sims, &mut row_idx, &mut cols) {
                // The other workers take no further block.
                next.store(qspans.len(), Ordering::Relaxed);
                return Err(e);
            }
            let mut o = out.lock().expect("no worker panicked");
            o.0[q0 * kr..(q0 + len) * kr].copy_from_slice(&row_sims);
            o.1[q0 * kr..(q0 + len) * kr].copy_from_slice(&row_idx);
        }
        Ok(both.then_some(cols))
    };
    let workers = plan.workers.min(qspans.len()).max(1);
    let results: Vec<Result<Option<ColumnTop>>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers).map(|_| s.spawn(work)).collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(|_| Err(anyhow!("a kNN worker panicked")))).collect()
    });
    let mut parts = Vec::with_capacity(workers);
    for r in results {
        parts.extend(r?);
    }
    Ok((rows, both.then(|| merge_columns(&parts, m, kc))))
}

/// The columns' top-k over all workers' partial lists: best similarity first, then lower id.
fn merge_columns(parts: &[ColumnTop], m: usize, k: usize) -> Neighbours {
    let mut out = Neighbours::empty(m, k);
    let mut cand: Vec<(f32, u32)> = Vec::with_capacity(parts.len() * k);
    for c in 0..m {
        cand.clear();
        for p in parts {
            cand.extend(
                p.sims[c * k..(c + 1) * k]
                    .iter()
                    .copied()
                    .zip(p.idx[c * k..(c + 1) * k].iter().copied())
                    .filter(|(s, _)| *s > f32::NEG_INFINITY),
            );
        }
        cand.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        for (r, &(s, i)) in cand.iter().take(k).enumerate() {
            out.sims[c * k + r] = s;
            out.idx[c * k + r] = i;
        }
    }
    out
}

/// How a candidate's cosine is compared with its neighbourhood (Artetxe & Schwenk 2019).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Margin {
    /// `cos / avg` (the default of seed 000 and seed 003).
    Ratio,
    /// `cos - avg`.
    Distance,
    /// `cos` alone.
    Absolute,
}

/// Which candidates are kept (LASER's `mine_bitexts` retrieval modes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Retrieval {
    /// Each source's best target.
    Fwd,
    /// Each target's best source.
    Bwd,
    /// Both, sorted by score and accepted greedily with every sentence used at most once.
    Max,
    /// Pairs that are each other's best.
    Intersect,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Candidate {
    pub src: usize,
    pub tgt: usize,
    pub score: f64,
}

fn apply_margin(margin: Margin, cos: f64, avg: f64) -> f64 {
    match margin {
        Margin::Ratio => cos / avg,
        Margin::Distance => cos - avg,
        Margin::Absolute => cos,
    }
}

/// A note for the user when `k` exceeds the candidates of a side: the margin then averages
/// over all of them (the neighbourhoods are cut to the side's size).
pub fn k_note(k: usize, sources: usize, targets: usize) -> Option<String> {
    (k > sources.min(targets)).then(|| {
        format!("k = {k} is more than the {sources} sources or {targets} targets: each neighbourhood holds all of that side's sentences")
    })
}

/// Margin-scored bitext candidates between normalised `x` (sources) and `y` (targets), best
/// first: score(x, y) = margin(cos(x, y), Σ_{z∈NNk(x)} cos(x, z)/2k + Σ_{z∈NNk(y)} cos(y, z)/2k).
pub fn mine(x: &Matrix, y: &Matrix, k: usize, margin: Margin, retrieval: Retrieval) -> Result<Vec<Candidate>> {
    let (x2y, y2x) = knn_both(x, y, k)?;
    mine_neighbours(&x2y, &y2x, k, margin, retrieval)
}

/// [`mine`] from neighbour lists found elsewhere (an approximate index): `x2y` holds each
/// source's best targets, `y2x` each target's best sources, best first. The margin averages each
/// list's first `k` entries.
pub fn mine_neighbours(
    x2y: &Neighbours,
    y2x: &Neighbours,
    k: usize,
    margin: Margin,
    retrieval: Retrieval,
) -> Result<Vec<Candidate>> {
    let (nx, ny) = (x2y.sims.len().checked_div(x2y.k).unwrap_or(0), y2x.sims.len().checked_div(y2x.k).unwrap_or(0));
    let cut = |nb: &Neighbours| -> Neighbours {
        let kk = k.min(nb.k);
        if kk == nb.k {
            return nb.clone();
        }
        let rows = nb.sims.len().checked_div(nb.k).unwrap_or(0);
        let mut out = Neighbours { k: kk, sims: Vec::with_capacity(rows * kk), idx: Vec::with_capacity(rows * kk) };
        for i in 0..rows {
            let (s, ix) = nb.row(i);
            out.sims.extend_from_slice(&s[..kk]);
            out.idx.extend_from_slice(&ix[..kk]);
        }
        out
    };
    let (x2y, y2x) = (cut(x2y), cut(y2x));
    ensure!(
        x2y.idx.iter().all(|&j| (j as usize) < ny) && y2x.idx.iter().all(|&i| (i as usize) < nx),
        "the neighbour lists name rows beyond the other side's {ny} targets or {nx} sources"
    );
    let (xm, ym) = (x2y.means(), y2x.means());
    // cos / avg ranks backwards when the neighbourhoods' mean cosine is negative: refuse rather
    // than mine by a reversed score. (At 0, as for zero vectors, the score is not finite and the
    // candidate is left out, as before.)
    let negative = std::cell::Cell::new((0usize, f64::INFINITY));
    // Best of each query's k candidates under the margin score.
    let best = |nb: &Neighbours, own: &[f64], other: &[f64]| -> Vec<(usize, f64)> {
        (0..own.len())
            .map(|i| {
                let (s, ix) = nb.row(i);
                s.iter()
                    .zip(ix)
                    .map(|(&c, &j)| {
                        let avg = (own[i] + other[j as usize]) / 2.0;
                        if margin == Margin::Ratio && avg < 0.0 {
                            let (n, low) = negative.get();
                            negative.set((n + 1, low.min(avg)));
                        }
                        (j as usize, apply_margin(margin, c as f64, avg))
                    })
                    .fold((0, f64::NEG_INFINITY), |a, b| if b.1 > a.1 { b } else { a })
            })
            .collect()
    };
    let fwd: Vec<Candidate> = best(&x2y, &xm, &ym)
        .into_iter()
        .enumerate()
        .filter(|(_, (_, s))| s.is_finite())
        .map(|(i, (j, s))| Candidate { src: i, tgt: j, score: s })
        .collect();
    let bwd: Vec<Candidate> = best(&y2x, &ym, &xm)
        .into_iter()
        .enumerate()
        .filter(|(_, (_, s))| s.is_finite())
        .map(|(j, (i, s))| Candidate { src: i, tgt: j, score: s })
        .collect();
    if let (n @ 1.., low) = negative.get() {
        anyhow::bail!(
            "the ratio margin divides by the mean cosine of the two sentences' {k} nearest neighbours, but for {n} candidate pairs \
             it is negative (lowest {low:.4}): these vectors point apart, and cos / mean would rank such candidates backwards. \
             Use --margin distance (cos − mean) or --margin absolute."
        );
    }
    let mut out = match retrieval {
        Retrieval::Fwd => fwd,
        Retrieval::Bwd => bwd,
        Retrieval::Intersect => {
            let back: std::collections::HashSet<(usize, usize)> = bwd.iter().map(|c| (c.src, c.tgt)).collect();
            fwd.into_iter().filter(|c| back.contains(&(c.src, c.tgt))).collect()
        }
        Retrieval::Max => {
            let mut all: Vec<Candidate> = fwd.into_iter().chain(bwd).collect();
            sort_desc(&mut all);
            let (mut used_s, mut used_t) = (vec![false; nx], vec![false; ny]);
            all.into_iter()
                .filter(|c| {
                    let ok = !used_s[c.src] && !used_t[c.tgt];
                    if ok {
                        used_s[c.src] = true;
                        used_t[c.tgt] = true;
                    }
                    ok
                })
                .collect()
        }
    };
    sort_desc(&mut out);
    Ok(out)
}

fn sort_desc(c: &mut [Candidate]) {
    c.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.src.cmp(&b.src)).then(a.tgt.cmp(&b.tgt)));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(rows: &[[f32; 2]]) -> Matrix {
        Matrix::normalized(&rows.iter().map(|r| r.to_vec()).collect::<Vec<_>>())
    }

    /// Sides whose vectors point apart (every cosine negative): the ratio margin would rank
    /// backwards, so it is refused; the distance and absolute margins mine them.
    #[test]
    fn ratio_margin_refuses_neighbourhoods_with_a_negative_mean_cosine() {
        let x = m(&[[1.0, 0.1], [1.0, -0.1]]);
        let y = m(&[[-1.0, 0.2], [-1.0, -0.2]]);
        let err = mine(&x, &y, 1, Margin::Ratio, Retrieval::Max).unwrap_err().to_string();
        assert!(err.contains("for 4 candidate pairs it is negative") && err.contains("--margin distance"), "{err}");
        for margin in [Margin::Distance, Margin::Absolute] {
            let c = mine(&x, &y, 1, margin, Retrieval::Max).unwrap();
            assert_eq!(c.len(), 2, "{margin:?}");
        }
        // Positive neighbourhoods are mined by ratio as before.
        let y = m(&[[1.0, 0.2], [1.0, -0.2]]);
        assert_eq!(mine(&x, &y, 1, Margin::Ratio, Retrieval::Max).unwrap().len(), 2);
        // Zero vectors (an averaging model's lines with no known unit) have a mean of 0: their
        // pairs with each other score no finite value and are left out; the rest are mined.
        let x = m(&[[1.0, 0.1], [0.0, 0.0]]);
        let y = m(&[[1.0, 0.2], [0.0, 0.0]]);
        let c = mine(&x, &y, 1, Margin::Ratio, Retrieval::Max).unwrap();
        assert_eq!(c.iter().map(|c| (c.src, c.tgt)).collect::<Vec<_>>(), [(0, 0)]);
    }

    fn plan(query_block: usize, target_block: usize, workers: usize, share_targets: bool) -> Plan {
        Plan { query_block, target_block, workers, share_targets }
    }

    /// Block shapes from tiny (many block boundaries, odd sizes) to the production ones, with
    /// 1 to 4 workers, shared and per-block target copies.
    fn plans() -> Vec<Plan> {
        vec![
            plan(1, 1, 1, true),
            plan(3, 5, 1, false),
            plan(3, 5, 3, true),
            plan(4, 7, 2, false),
            plan(7, 2, 4, true),
            plan(MIN_QUERY_BLOCK, TARGET_BLOCK, 2, true),
            plan(MAX_QUERY_BLOCK, TARGET_BLOCK, 1, false),
        ]
    }

    /// Deterministic pseudo-random values (an LCG), so the tests need no RNG state.
    fn lcg(seed: u64) -> impl FnMut() -> u64 {
        let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        move || {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            s >> 33
        }
    }

    /// Rows of small integers: every inner product is exact in f32 whatever the summation
    /// order, and many are equal, so ties are everywhere.
    fn int_matrix(rows: usize, dim: usize, seed: u64) -> Matrix {
        let mut r = lcg(seed);
        Matrix { data: (0..rows * dim).map(|_| (r() % 5) as f32 - 2.0).collect(), dim }
    }

    /// Unit rows of random floats.
    fn float_matrix(rows: usize, dim: usize, seed: u64) -> Matrix {
        let mut r = lcg(seed);
        let raw: Vec<Vec<f32>> =
            (0..rows).map(|_| (0..dim).map(|_| (r() % 20001) as f32 / 10000.0 - 1.0).collect()).collect();
        Matrix::normalized(&raw)
    }

    /// Brute force in f64: for each row of `q`, all targets by similarity, ties by lower index.
    fn brute(q: &Matrix, t: &Matrix, k: usize) -> Vec<Vec<(f64, u32)>> {
        let d = q.dim;
        (0..q.rows())
            .map(|i| {
                let qi = &q.data[i * d..(i + 1) * d];
                let mut all: Vec<(f64, u32)> = (0..t.rows())
                    .map(|j| {
                        (
                            qi.iter().zip(&t.data[j * d..(j + 1) * d]).map(|(&a, &b)| a as f64 * b as f64).sum::<f64>(),
                            j as u32,
                        )
                    })
                    .collect();
                all.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
                all.truncate(k);
                all
            })
            .collect()
    }

    fn assert_exact(nb: &Neighbours, want: &[Vec<(f64, u32)>], what: &str) {
        assert_eq!(nb.sims.len(), want.len() * nb.k, "{what}");
        for (i, w) in want.iter().enumerate() {
            let (s, ix) = nb.row(i);
            let got: Vec<(f64, u32)> = s.iter().map(|&v| v as f64).zip(ix.iter().copied()).collect();
            assert_eq!(&got, w, "{what}, row {i}");
        }
    }

    #[test]
    fn both_directions_match_brute_force_with_ties_for_every_blocking() {
        let (x, y) = (int_matrix(23, 5, 1), int_matrix(31, 5, 2));
        for k in [1, 2, 4, 23, 31, 40] {
            let (fwd, bwd) = (brute(&x, &y, k.min(31)), brute(&y, &x, k.min(23)));
            for p in plans() {
                let (r, c) = search(&x, &y, k, p, true).unwrap();
                assert_eq!((r.k, c.as_ref().unwrap().k), (k.min(31), k.min(23)));
                assert_exact(&r, &fwd, &format!("x->y k {k} {p:?}"));
                assert_exact(c.as_ref().unwrap(), &bwd, &format!("y->x k {k} {p:?}"));
                // One direction gives the same rows.
                let (one, none) = search(&x, &y, k, p, false).unwrap();
                assert!(none.is_none());
                assert_eq!(one, r, "knn vs knn_both rows, k {k} {p:?}");
            }
        }
        // The public functions agree with the internal one.
        let (r, c) = knn_both(&x, &y, 4).unwrap();
        assert_exact(&r, &brute(&x, &y, 4), "knn_both x->y");
        assert_exact(&c, &brute(&y, &x, 4), "knn_both y->x");
        assert_eq!(knn(&y, &x, 4).unwrap(), c);
    }

    #[test]
    fn both_directions_match_brute_force_across_target_blocks() {
        // More targets than one production target block, so block merging is exercised.
        let d = 8;
        let (x, y) = (float_matrix(150, d, 3), float_matrix(TARGET_BLOCK + 300, d, 4));
        let (fwd, bwd) = (brute(&x, &y, 4), brute(&y, &x, 4));
        let check = |nb: &Neighbours, want: &[Vec<(f64, u32)>], what: &str| {
            for (i, w) in want.iter().enumerate() {
                let (s, ix) = nb.row(i);
                for (r, &(ws, wi)) in w.iter().enumerate() {
                    assert!((s[r] as f64 - ws).abs() < 1e-5, "{what} row {i} rank {r}: {} vs {ws}", s[r]);
                    // A different index only where the two similarities tie within rounding.
                    assert!(ix[r] == wi || (s[r] as f64 - ws).abs() < 1e-6, "{what} row {i} rank {r}");
                }
            }
        };
        let mut first: Option<(Neighbours, Neighbours)> = None;
        for p in [plan(64, TARGET_BLOCK, 1, true), plan(100, TARGET_BLOCK, 3, false), plan(150, 1000, 2, true)] {
            let (r, c) = search(&x, &y, 4, p, true).unwrap();
            let c = c.unwrap();
            check(&r, &fwd, &format!("x->y {p:?}"));
            check(&c, &bwd, &format!("y->x {p:?}"));
            // Blocks of at least 64 rows: the same GEMM kernel, bit for bit the same lists.
            match &first {
                None => first = Some((r, c)),
                Some((r0, c0)) => assert!(r0 == &r && c0 == &c, "{p:?} differs from the first plan"),
            }
        }
    }

    #[test]
    fn k_above_the_other_side_and_empty_sides() {
        let (x, y) = (int_matrix(7, 3, 5), int_matrix(3, 3, 6));
        let (r, c) = knn_both(&x, &y, 5).unwrap();
        assert_eq!((r.k, r.sims.len(), c.k, c.sims.len()), (3, 21, 5, 15));
        assert_exact(&r, &brute(&x, &y, 3), "k > targets");
        assert_exact(&c, &brute(&y, &x, 5), "k < queries");
        let empty = Matrix { data: vec![], dim: 3 };
        for (a, b) in [(&empty, &y), (&y, &empty), (&empty, &empty)] {
            let (r, c) = knn_both(a, b, 4).unwrap();
            assert_eq!((r.sims.len(), c.sims.len()), (a.rows() * r.k, b.rows() * c.k));
            assert_eq!((r.k, c.k), (4.min(b.rows()), 4.min(a.rows())));
            assert!(mine(a, b, 4, Margin::Ratio, Retrieval::Max).unwrap().is_empty());
        }
        // No rows at all (dimension unknown) and k = 0.
        let none = Matrix::normalized(&[]);
        assert_eq!(knn_both(&none, &y, 4).unwrap().0.sims.len(), 0);
        let (r, c) = knn_both(&x, &y, 0).unwrap();
        assert_eq!((r.k, c.k, r.sims.len()), (0, 0, 0));
        // Bad shapes are errors, not panics.
        let e = knn_both(&x, &int_matrix(2, 4, 7), 1).unwrap_err().to_string();
        assert!(e.contains("dimension mismatch: 3 vs 4"), "{e}");
        let ragged = Matrix { data: vec![1.0; 7], dim: 3 };
        let e = knn(&ragged, &y, 1).unwrap_err().to_string();
        assert!(e.contains("7 values are not whole rows of dimension 3"), "{e}");
    }

    #[test]
    fn query_blocks_keep_every_worker_busy() {
        for (n, workers, block) in [
            (10, 2, 64),
            (100, 2, 64),
            (1000, 2, 125),
            (10_000, 2, 1024),
            (100_000, 2, 1024),
            (1000, 16, 64),
            (5000, 4, 313),
        ] {
            let p = Plan::new(n, 1000, 384, workers);
            assert_eq!(p.query_block, block, "n {n}, {workers} workers");
            let s = spans(n, p.query_block);
            // Contiguous, complete, nearly equal.
            assert_eq!(s.iter().map(|b| b.1).sum::<usize>(), n);
            assert!(s.windows(2).all(|w| w[0].0 + w[0].1 == w[1].0));
            let (lo, hi) = (s.iter().map(|b| b.1).min().unwrap(), s.iter().map(|b| b.1).max().unwrap());
            assert!(hi - lo <= 1 && hi <= block);
            if n >= MIN_QUERY_BLOCK * workers {
                assert!(s.len() >= workers, "n {n}: {} blocks for {workers} workers", s.len());
            }
        }
        assert!(spans(0, 64).is_empty());
        assert!(Plan::new(10, 1000, 384, 2).share_targets && !Plan::new(10, 1_000_000, 384, 2).share_targets);
    }

    /// A hand-computed ratio-margin example with k = 1.
    #[test]
    fn margin_scores_by_hand() {
        // x0 = (1,0), x1 = (0.6,0.8); y0 = (1,0), y1 = (0,1).
        // cos: x0·y0 = 1, x0·y1 = 0, x1·y0 = 0.6, x1·y1 = 0.8.
        // k = 1: NN1(x0) = y0 (1.0), NN1(x1) = y1 (0.8); NN1(y0) = x0 (1.0), NN1(y1) = x1 (0.8).
        // fwd: x0 -> y0: 1 / ((1 + 1)/2) = 1;  x1 -> y1: 0.8 / ((0.8 + 0.8)/2) = 1.
        let x = m(&[[1.0, 0.0], [0.6, 0.8]]);
        let y = m(&[[1.0, 0.0], [0.0, 1.0]]);
        let c = mine(&x, &y, 1, Margin::Ratio, Retrieval::Max).unwrap();
        assert_eq!(c.len(), 2);
        for cand in &c {
            assert_eq!(cand.src, cand.tgt);
            assert!((cand.score - 1.0).abs() < 1e-6);
        }
        // k = 2: avg(x0) = 0.5, avg(x1) = 0.7, avg(y0) = 0.8, avg(y1) = 0.4.
        // x1 -> y0: 0.6 / ((0.7 + 0.8)/2) = 0.8; x1 -> y1: 0.8 / ((0.7 + 0.4)/2) = 1.4545...
        // x0 -> y0: 1 / ((0.5 + 0.8)/2) = 1.5384...
        let c = mine(&x, &y, 2, Margin::Ratio, Retrieval::Fwd).unwrap();
        assert_eq!((c[0].src, c[0].tgt), (0, 0));
        assert!((c[0].score - 1.0 / 0.65).abs() < 1e-6, "{c:?}");
        assert_eq!((c[1].src, c[1].tgt), (1, 1));
        assert!((c[1].score - 0.8 / 0.55).abs() < 1e-6, "{c:?}");
        // Distance margin: 0.8 - 0.55 = 0.25 for x1 -> y1; absolute: plain cosine.
        let c = mine(&x, &y, 2, Margin::Distance, Retrieval::Fwd).unwrap();
        assert!((c.iter().find(|c| c.src == 1).unwrap().score - 0.25).abs() < 1e-6);
        let c = mine(&x, &y, 2, Margin::Absolute, Retrieval::Fwd).unwrap();
        assert!((c.iter().find(|c| c.src == 1).unwrap().score - 0.8).abs() < 1e-6);
    }

    #[test]
    fn max_retrieval_uses_each_sentence_once() {
        // Both sources prefer target 0; max keeps the better one and x1 cannot reuse y0.
        let x = m(&[[1.0, 0.0], [0.9, 0.1]]);
        let y = m(&[[1.0, 0.0], [-1.0, 0.2]]);
        let c = mine(&x, &y, 1, Margin::Absolute, Retrieval::Max).unwrap();
        let srcs: Vec<usize> = c.iter().map(|c| c.src).collect();
        let tgts: Vec<usize> = c.iter().map(|c| c.tgt).collect();
        let mut s = srcs.clone();
        s.dedup();
        assert_eq!(s.len(), srcs.len());
        let mut t = tgts.clone();
        t.sort();
        t.dedup();
        assert_eq!(t.len(), tgts.len());
        assert_eq!((c[0].src, c[0].tgt), (0, 0));
        let inter = mine(&x, &y, 1, Margin::Absolute, Retrieval::Intersect).unwrap();
        assert_eq!(inter.len(), 1);
        // One direction each: every source's best target (both y0), every target's best source
        // (y1's is x1, the less negative cosine), as (src, tgt) pairs.
        let pairs = |r| {
            let mut p: Vec<(usize, usize)> =
                mine(&x, &y, 1, Margin::Absolute, r).unwrap().iter().map(|c| (c.src, c.tgt)).collect();
            p.sort();
            p
        };
        assert_eq!(pairs(Retrieval::Fwd), [(0, 0), (1, 0)]);
        assert_eq!(pairs(Retrieval::Bwd), [(0, 0), (1, 1)]);
        assert_eq!(pairs(Retrieval::Intersect), [(0, 0)]);
    }

    /// Rows of small integers (products and sums exact in f32 in any order, so every block size
    /// gives the same similarities) with many ties: values in -2..=2, and repeated rows.
    fn tied_rows(n: usize, dim: usize, seed: u64) -> Matrix {
        use rand::{Rng as _, SeedableRng};
        let mut g = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let mut data: Vec<f32> = (0..n * dim).map(|_| g.random_range(-2i32..=2) as f32).collect();
        for i in (0..n).step_by(7) {
            let j = i / 2;
            data.copy_within(j * dim..(j + 1) * dim, i * dim);
        }
        Matrix { data, dim }
    }

    /// The device algorithm ([`crate::index::knn_gpu`]), run with candle's CPU ops, gives the CPU
    /// search's lists exactly, in both directions, with ties, with k above a side's size, and
    /// with one block or several blocks of each side.
    #[test]
    fn device_search_equals_the_cpu_search() -> Result<()> {
        use crate::index::knn_gpu;
        use candle_core::Device;
        for (n, m, k) in [(300, 200, 4), (5, 9, 7), (40, 3, 5), (1, 1, 1), (130, 260, 3)] {
            let (x, y) = (tied_rows(n, 6, n as u64), tied_rows(m, 6, 7 + m as u64));
            let want = knn_both(&x, &y, k)?;
            for blocks in [(knn_gpu::QUERY_BLOCK, knn_gpu::TARGET_BLOCK), (64, 50), (7, 3)] {
                let got = knn_gpu::search_blocks(&x, &y, k, true, &Device::Cpu, blocks)?;
                assert_eq!(got.0, want.0, "rows, {n} × {m}, k {k}, blocks {blocks:?}");
                assert_eq!(got.1.as_ref(), Some(&want.1), "columns, {n} × {m}, k {k}, blocks {blocks:?}");
            }
            assert_eq!(knn_gpu::search(&x, &y, k, false, &Device::Cpu)?.0, knn(&x, &y, k)?);
        }
        Ok(())
    }
}
