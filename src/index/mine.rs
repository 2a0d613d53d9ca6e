//! Margin mining's neighbour lists from IVF indexes instead of the exact search: the index of
//! each side is built in memory and searched with the other side's vectors.

use super::{BuildParams, Codec, Ivf, Knn, Quantizer, SliceRows};
use crate::index::knn::{Matrix, Neighbours};
use anyhow::{ensure, Result};

/// Settings of the approximate search (`--index` and its options).
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct AnnParams {
    pub nlist: Option<usize>,
    pub nprobe: usize,
    pub sample: Option<usize>,
    pub iterations: usize,
    pub seed: u64,
    pub codec: Codec,
}

impl AnnParams {
    fn build(&self) -> BuildParams {
        BuildParams {
            nlist: self.nlist,
            sample: self.sample,
            iterations: self.iterations,
            seed: self.seed,
            codec: self.codec,
        }
    }
}

/// Top-k lists of an index search as [`Neighbours`] (row ids of a side of at most 2³² rows).
pub fn to_neighbours(knn: &Knn) -> Result<Neighbours> {
    ensure!(
        knn.ids.iter().all(|&i| i != u64::MAX),
        "an index search found fewer than k = {} neighbours for a query",
        knn.k
    );
    ensure!(knn.ids.iter().all(|&i| i <= u32::MAX as u64), "neighbour ids beyond 2^32 rows");
    Ok(Neighbours { k: knn.k, sims: knn.sims.clone(), idx: knn.ids.iter().map(|&i| i as u32).collect() })
}

/// Approximate [`crate::index::knn::knn_both`]: each row of `x` among `y` and each row of `y`
/// among `x`, `k` capped at the other side's rows, from an index of each side (built one after
/// the other, so one index is held at a time).
pub fn knn_both_ivf(x: &Matrix, y: &Matrix, k: usize, p: &AnnParams) -> Result<(Neighbours, Neighbours)> {
    let threads = crate::threads::threads();
    let one = |queries: &Matrix, db: &Matrix| -> Result<Neighbours> {
        let kk = k.min(db.rows());
        if kk == 0 || queries.rows() == 0 {
            return Ok(Neighbours { k: kk, sims: vec![], idx: vec![] });
        }
        let mut src = SliceRows { data: &db.data, dim: db.dim };
        let params = BuildParams { nlist: p.build().nlist.map(|n| n.min(db.rows())), ..p.build() };
        let q = Quantizer::train(&mut src, &params, threads)?;
        let index = Ivf::build(q, &mut src, 0, vec![], threads)?;
        let knn = index.search(&queries.data, queries.rows(), kk, p.nprobe, threads)?;
        let mut nb = to_neighbours(&knn).or_else(|_| {
            // Some query's probed lists held fewer than k vectors: search it in every list.
            let all = index.search(&queries.data, queries.rows(), kk, index.meta.nlist, threads)?;
            let mut merged = knn.clone();
            for (q, chunk) in knn.ids.chunks(kk).enumerate() {
                if chunk.contains(&u64::MAX) {
                    merged.ids[q * kk..(q + 1) * kk].copy_from_slice(&all.ids[q * kk..(q + 1) * kk]);
                    merged.sims[q * kk..(q + 1) * kk].copy_from_slice(&all.sims[q * kk..(q + 1) * kk]);
                }
            }
            to_neighbours(&merged)
        })?;
        nb.k = kk;
        Ok(nb)
    };
    ensure!(x.dim == y.dim || x.rows() == 0 || y.rows() == 0, "dimension mismatch: {} vs {}", x.dim, y.dim);
    Ok((one(x, y)?, one(y, x)?))
}
