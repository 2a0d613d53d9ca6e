//! The rows an exact kNN search takes ([`Matrix`]) and the lists it gives ([`Neighbours`]),
//! shared by the CPU search ([`super::knn`]) and the GPU one ([`super::knn_gpu`]).

use anyhow::{ensure, Result};
use candle_core::{Device, Tensor};

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
        let mut m = Self { data: Vec::with_capacity(rows.len() * dim), dim };
        for r in rows {
            m.push_normalized(r);
        }
        m
    }

    /// Append `row` L2-normalised (a zero row stays zero). Its length must be `dim`.
    pub fn push_normalized(&mut self, row: &[f32]) {
        debug_assert_eq!(row.len(), self.dim);
        let start = self.data.len();
        self.data.extend_from_slice(row);
        crate::model::pooling::l2_normalize_row(&mut self.data[start..]);
    }

    /// Embed `texts` with `enc` into L2-normalised rows, `128 × batch_size` texts at a time:
    /// besides the vectors, only one window's tokens are held.
    pub fn embed_normalized<S: AsRef<str>>(
        enc: &dyn crate::model::Embedder,
        texts: &[S],
        batch_size: usize,
    ) -> Result<Self> {
        let dim = enc.dim();
        let mut m = Self { data: Vec::with_capacity(texts.len() * dim), dim };
        for window in texts.chunks(batch_size.clamp(1, usize::MAX / 128) * 128) {
            for row in enc.embed(window, batch_size)? {
                ensure!(row.len() == dim, "the encoder returned a vector of {} values, expected {dim}", row.len());
                m.push_normalized(&row);
            }
        }
        Ok(m)
    }

    pub fn rows(&self) -> usize {
        self.data.len().checked_div(self.dim).unwrap_or(0)
    }

    pub(super) fn check(&self, what: &str) -> Result<()> {
        ensure!(
            self.data.len().is_multiple_of(self.dim),
            "{what}: {} values are not whole rows of dimension {}",
            self.data.len(),
            self.dim
        );
        Ok(())
    }

    pub(super) fn block(&self, start: usize, len: usize) -> Result<Tensor> {
        Ok(Tensor::from_slice(&self.data[start * self.dim..(start + len) * self.dim], (len, self.dim), &Device::Cpu)?)
    }
}

/// For each query, its `k` best targets, best first (`k` is capped at the number of targets).
#[derive(Debug, Clone, PartialEq)]
pub struct Neighbours {
    pub k: usize,
    pub sims: Vec<f32>,
    pub idx: Vec<u32>,
}

impl Neighbours {
    pub(super) fn empty(rows: usize, k: usize) -> Self {
        Self { k, sims: vec![f32::NEG_INFINITY; rows * k], idx: vec![0; rows * k] }
    }

    pub fn row(&self, i: usize) -> (&[f32], &[u32]) {
        (&self.sims[i * self.k..(i + 1) * self.k], &self.idx[i * self.k..(i + 1) * self.k])
    }

    /// Mean similarity of each query to its k neighbours.
    pub fn means(&self) -> Vec<f64> {
        self.sims
            .chunks(self.k.max(1))
            .map(|c| c.iter().map(|&s| s as f64).sum::<f64>() / c.len().max(1) as f64)
            .collect()
    }
}
