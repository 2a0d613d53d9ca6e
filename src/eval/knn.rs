//! Exact k-nearest-neighbour search by inner product, and LASER-style margin mining.
//!
//! The search works in blocks (a block of queries against a block of targets at a time, one
//! GEMM each), never holding the full N×M similarity matrix, with query blocks spread over
//! [`crate::parallel::threads`] workers.

use anyhow::{ensure, Result};
use candle_core::{Device, Tensor};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// Rows `[n, d]`, row-major.
#[derive(Debug, Clone)]
pub struct Matrix {
    pub data: Vec<f32>,
    pub dim: usize,
}

impl Matrix {
    /// L2-normalised copy of `rows` (so inner product = cosine).
    pub fn normalized(rows: &[Vec<f32>]) -> Self {
        let dim = rows.first().map_or(0, |r| r.len());
        let mut data = Vec::with_capacity(rows.len() * dim);
        for r in rows {
            let n = r.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
            data.extend(r.iter().map(|x| x / n));
        }
        Self { data, dim }
    }

    pub fn rows(&self) -> usize {
        if self.dim == 0 { 0 } else { self.data.len() / self.dim }
    }

    fn block(&self, start: usize, len: usize) -> Result<Tensor> {
        Ok(Tensor::from_slice(&self.data[start * self.dim..(start + len) * self.dim], (len, self.dim), &Device::Cpu)?)
    }
}

/// For each query, its `k` best targets, best first (`k` is capped at the number of targets).
#[derive(Debug, Clone)]
pub struct Neighbours {
    pub k: usize,
    pub sims: Vec<f32>,
    pub idx: Vec<u32>,
}

impl Neighbours {
    pub fn row(&self, i: usize) -> (&[f32], &[u32]) {
        (&self.sims[i * self.k..(i + 1) * self.k], &self.idx[i * self.k..(i + 1) * self.k])
    }

    /// Mean similarity of each query to its k neighbours.
    pub fn means(&self) -> Vec<f64> {
        self.sims.chunks(self.k.max(1)).map(|c| c.iter().map(|&s| s as f64).sum::<f64>() / c.len().max(1) as f64).collect()
    }
}

const QUERY_BLOCK: usize = 1024;
const TARGET_BLOCK: usize = 8192;

/// Exact top-k inner-product search.
pub fn knn(queries: &Matrix, targets: &Matrix, k: usize) -> Result<Neighbours> {
    ensure!(queries.dim == targets.dim || queries.rows() == 0 || targets.rows() == 0, "dimension mismatch: {} vs {}", queries.dim, targets.dim);
    let (n, m) = (queries.rows(), targets.rows());
    let k = k.min(m);
    let mut sims = vec![f32::NEG_INFINITY; n * k];
    let mut idx = vec![0u32; n * k];
    if k == 0 || n == 0 {
        return Ok(Neighbours { k, sims, idx });
    }
    let target_blocks: Vec<(usize, Tensor)> = (0..m)
        .step_by(TARGET_BLOCK)
        .map(|s| Ok((s, targets.block(s, TARGET_BLOCK.min(m - s))?.t()?.contiguous()?)))
        .collect::<Result<_>>()?;
    let blocks: Vec<usize> = (0..n).step_by(QUERY_BLOCK).collect();
    let next = AtomicUsize::new(0);
    let out = Mutex::new((&mut sims, &mut idx));
    let error = Mutex::new(None);
    let work = || {
        loop {
            let b = next.fetch_add(1, Ordering::Relaxed);
            let Some(&start) = blocks.get(b) else { break };
            let len = QUERY_BLOCK.min(n - start);
            let mut best_s = vec![f32::NEG_INFINITY; len * k];
            let mut best_i = vec![0u32; len * k];
            let r = (|| -> Result<()> {
                let q = queries.block(start, len)?;
                for (t0, t) in &target_blocks {
                    let s = q.matmul(t)?.flatten_all()?.to_vec1::<f32>()?;
                    let width = s.len() / len;
                    for row in 0..len {
                        let (bs, bi) = (&mut best_s[row * k..(row + 1) * k], &mut best_i[row * k..(row + 1) * k]);
                        for (j, &v) in s[row * width..(row + 1) * width].iter().enumerate() {
                            if v > bs[k - 1] {
                                // Insert keeping the row sorted, best first; earlier index wins ties.
                                let mut p = k - 1;
                                while p > 0 && bs[p - 1] < v {
                                    bs[p] = bs[p - 1];
                                    bi[p] = bi[p - 1];
                                    p -= 1;
                                }
                                bs[p] = v;
                                bi[p] = (t0 + j) as u32;
                            }
                        }
                    }
                }
                Ok(())
            })();
            if let Err(e) = r {
                error.lock().unwrap().get_or_insert(e);
                break;
            }
            let mut o = out.lock().unwrap();
            o.0[start * k..(start + len) * k].copy_from_slice(&best_s);
            o.1[start * k..(start + len) * k].copy_from_slice(&best_i);
        }
    };
    let workers = crate::parallel::threads().min(blocks.len()).max(1);
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(work);
        }
    });
    if let Some(e) = error.into_inner().unwrap() {
        return Err(e);
    }
    Ok(Neighbours { k, sims, idx })
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

/// Margin-scored bitext candidates between normalised `x` (sources) and `y` (targets), best
/// first: score(x, y) = margin(cos(x, y), Σ_{z∈NNk(x)} cos(x, z)/2k + Σ_{z∈NNk(y)} cos(y, z)/2k).
pub fn mine(x: &Matrix, y: &Matrix, k: usize, margin: Margin, retrieval: Retrieval) -> Result<Vec<Candidate>> {
    let x2y = knn(x, y, k)?;
    let y2x = knn(y, x, k)?;
    let (xm, ym) = (x2y.means(), y2x.means());
    // Best of each query's k candidates under the margin score.
    let best = |nb: &Neighbours, own: &[f64], other: &[f64]| -> Vec<(usize, f64)> {
        (0..own.len())
            .map(|i| {
                let (s, ix) = nb.row(i);
                s.iter()
                    .zip(ix)
                    .map(|(&c, &j)| (j as usize, apply_margin(margin, c as f64, (own[i] + other[j as usize]) / 2.0)))
                    .fold((0, f64::NEG_INFINITY), |a, b| if b.1 > a.1 { b } else { a })
            })
            .collect()
    };
    let fwd: Vec<Candidate> = best(&x2y, &xm, &ym).into_iter().enumerate().filter(|(_, (_, s))| s.is_finite()).map(|(i, (j, s))| Candidate { src: i, tgt: j, score: s }).collect();
    let bwd: Vec<Candidate> = best(&y2x, &ym, &xm).into_iter().enumerate().filter(|(_, (_, s))| s.is_finite()).map(|(j, (i, s))| Candidate { src: i, tgt: j, score: s }).collect();
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
            let (mut used_s, mut used_t) = (vec![false; x.rows()], vec![false; y.rows()]);
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

    #[test]
    fn knn_matches_brute_force_across_blocks() {
        // More targets than one block, so block merging is exercised.
        let d = 8;
        let gen = |n: usize, seed: u32| -> Vec<Vec<f32>> {
            (0..n).map(|i| (0..d).map(|j| (((i as u32 * 2654435761u32) ^ (j as u32 * 40503 + seed)) % 1000) as f32 / 500.0 - 1.0).collect()).collect()
        };
        let (q, t) = (Matrix::normalized(&gen(37, 1)), Matrix::normalized(&gen(TARGET_BLOCK + 300, 7)));
        let nb = knn(&q, &t, 3).unwrap();
        for i in 0..q.rows() {
            let qi = &q.data[i * d..(i + 1) * d];
            let mut all: Vec<(f32, usize)> =
                (0..t.rows()).map(|j| (qi.iter().zip(&t.data[j * d..(j + 1) * d]).map(|(a, b)| a * b).sum::<f32>(), j)).collect();
            all.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
            let (s, ix) = nb.row(i);
            for r in 0..3 {
                assert!((s[r] - all[r].0).abs() < 1e-5, "row {i} rank {r}");
                assert!(ix[r] as usize == all[r].1 || (s[r] - all[r].0).abs() < 1e-6);
            }
        }
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
    }
}
