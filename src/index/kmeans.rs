//! Spherical k-means for the coarse quantizer: random distinct sample rows as the first
//! centroids (as faiss starts), then Lloyd iterations, each one GEMM of the sample against the
//! centroids; a centroid is the normalised mean of its rows, and an emptied one takes half of a
//! big cluster (faiss's split).

use super::dot::{dot_block, Scratch};
use super::topk::{for_each_item, offer_row};
use anyhow::{ensure, Result};
use rand::{Rng, SeedableRng};
use std::sync::Mutex;

/// Rows per block of a nearest-centroid search.
const ROW_BLOCK: usize = 256;
/// Centroids per GEMM.
const CENTROID_TILE: usize = 4096;

/// The `p` best centroids of each of the `n` rows (`n × p` ids, best first, ties to the lower
/// id) and their inner products.
pub fn nearest(
    rows: &[f32],
    n: usize,
    centroids: &[f32],
    nlist: usize,
    d: usize,
    p: usize,
    threads: usize,
) -> Result<(Vec<u32>, Vec<f32>)> {
    let p = p.min(nlist);
    let blocks = n.div_ceil(ROW_BLOCK);
    let out = Mutex::new((vec![0u32; n * p], vec![0f32; n * p]));
    for_each_item(
        threads,
        blocks,
        || (Scratch::default(), Vec::new(), Vec::new(), Vec::new()),
        |(scratch, prod, sims, ids), b| {
            let (r0, m) = (b * ROW_BLOCK, ROW_BLOCK.min(n - b * ROW_BLOCK));
            sims.clear();
            sims.resize(m * p, f32::NEG_INFINITY);
            ids.clear();
            ids.resize(m * p, u32::MAX);
            for c0 in (0..nlist).step_by(CENTROID_TILE) {
                let w = CENTROID_TILE.min(nlist - c0);
                dot_block(&rows[r0 * d..], m, &centroids[c0 * d..], w, d, prod, scratch);
                for i in 0..m {
                    offer_row(
                        &mut sims[i * p..(i + 1) * p],
                        &mut ids[i * p..(i + 1) * p],
                        &prod[i * w..(i + 1) * w],
                        |j| (c0 + j) as u32,
                    );
                }
            }
            let mut o = out.lock().map_err(|_| anyhow::anyhow!("a worker panicked"))?;
            o.0[r0 * p..(r0 + m) * p].copy_from_slice(ids);
            o.1[r0 * p..(r0 + m) * p].copy_from_slice(sims);
            Ok(())
        },
    )?;
    out.into_inner().map_err(|_| anyhow::anyhow!("a worker panicked"))
}

/// Trained centroids and the mean inner product of the sample with its nearest one.
pub struct Trained {
    pub centroids: Vec<f32>,
    pub objective: f64,
}

/// `nlist` unit centroids for the `n` rows of `sample` (`d` values each).
pub fn train(sample: &[f32], d: usize, nlist: usize, iterations: usize, seed: u64, threads: usize) -> Result<Trained> {
    let n = sample.len() / d.max(1);
    ensure!(nlist >= 1, "--nlist must be at least 1");
    ensure!(n >= nlist, "{nlist} lists need at least {nlist} training vectors, and the sample has {n}: give a smaller --nlist or a larger --sample");
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut centroids = Vec::with_capacity(nlist * d);
    let mut first = rand::seq::index::sample(&mut rng, n, nlist).into_vec();
    first.sort_unstable();
    for i in first {
        centroids.extend_from_slice(&sample[i * d..(i + 1) * d]);
    }
    normalize_rows(&mut centroids, d);
    let mut objective = 0.0;
    for it in 0..=iterations {
        let (best, sims) = nearest(sample, n, &centroids, nlist, d, 1, threads)?;
        objective = sims.iter().map(|&s| s as f64).sum::<f64>() / n.max(1) as f64;
        if it == iterations {
            break;
        }
        let mut sums = vec![0f32; nlist * d];
        let mut counts = vec![0usize; nlist];
        for (i, &c) in best.iter().enumerate() {
            let c = c as usize;
            counts[c] += 1;
            for (s, &x) in sums[c * d..(c + 1) * d].iter_mut().zip(&sample[i * d..(i + 1) * d]) {
                *s += x;
            }
        }
        split_empty(&mut sums, &mut counts, d, n, &mut rng);
        normalize_rows(&mut sums, d);
        centroids = sums;
    }
    Ok(Trained { centroids, objective })
}

/// Give each empty cluster half of a cluster chosen with probability (size − 1) / (n − k),
/// its centroid nudged apart from the other's (faiss's split of `Clustering::train`).
fn split_empty(sums: &mut [f32], counts: &mut [usize], d: usize, n: usize, rng: &mut impl Rng) {
    const EPS: f32 = 1.0 / 1024.0;
    let k = counts.len();
    if n <= k {
        return;
    }
    for ci in 0..k {
        if counts[ci] != 0 {
            continue;
        }
        let mut cj = 0;
        loop {
            let p = (counts[cj] as f32 - 1.0) / (n - k) as f32;
            if rng.random::<f32>() < p {
                break;
            }
            cj = (cj + 1) % k;
        }
        let src: Vec<f32> = sums[cj * d..(cj + 1) * d].to_vec();
        for j in 0..d {
            let (up, down) = if j % 2 == 0 { (1.0 + EPS, 1.0 - EPS) } else { (1.0 - EPS, 1.0 + EPS) };
            sums[ci * d + j] = src[j] * up;
            sums[cj * d + j] = src[j] * down;
        }
        counts[ci] = counts[cj] / 2;
        counts[cj] -= counts[ci];
    }
}

/// L2-normalise each row (a zero row stays zero).
pub fn normalize_rows(x: &mut [f32], d: usize) {
    for row in x.chunks_exact_mut(d.max(1)) {
        let mut norm = row.iter().map(|v| v * v).sum::<f32>().sqrt();
        if norm.is_infinite() {
            // A sum of many large vectors whose squares overflow float32; its norm does not.
            norm = crate::model::pooling::norm_f64(row) as f32;
        }
        if norm > 0.0 {
            row.iter_mut().for_each(|v| *v /= norm);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Points around 5 well-separated directions: k-means with 5 lists finds them, every list
    /// holds one group, and the result depends on the seed only (not on the threads).
    #[test]
    fn finds_separated_groups() {
        let d = 8;
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
        let mut x = Vec::new();
        for i in 0..500 {
            let g = i % 5;
            for j in 0..d {
                x.push(if j == g { 1.0 } else { 0.0 } + 0.05 * (rng.random::<f32>() - 0.5));
            }
        }
        normalize_rows(&mut x, d);
        let t = train(&x, d, 5, 10, 7, 1).unwrap();
        let (best, _) = nearest(&x, 500, &t.centroids, 5, d, 1, 2).unwrap();
        for g in 0..5 {
            let lists: std::collections::BTreeSet<u32> = (0..500).filter(|i| i % 5 == g).map(|i| best[i]).collect();
            assert_eq!(lists.len(), 1, "group {g} is split over {lists:?}");
        }
        assert!(t.objective > 0.99, "{}", t.objective);
        let again = train(&x, d, 5, 10, 7, 2).unwrap();
        assert!(again.centroids == t.centroids, "other thread count, other centroids");
        assert!(train(&x[..4 * d], d, 5, 1, 0, 1)
            .err()
            .unwrap()
            .to_string()
            .contains("need at least 5 training vectors"));
    }

    #[test]
    fn nearest_lists_are_sorted_with_ties_to_the_lower_id() {
        let c = [1.0, 0.0, 1.0, 0.0, 0.0, 1.0];
        let (ids, sims) = nearest(&[1.0, 0.0, 0.6, 0.8], 2, &c, 3, 2, 3, 1).unwrap();
        assert_eq!(ids, [0, 1, 2, 2, 0, 1]);
        assert_eq!(sims, [1.0, 1.0, 0.0, 0.8, 0.6, 0.6]);
    }
}
