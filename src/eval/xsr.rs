//! Cross-lingual sentence retrieval (seed 001 §4.4): P@1 of each source sentence retrieving its
//! translation (same line of the target file) among all target sentences plus distractors.

use super::knn::{knn, Matrix};
use crate::model::Embedder;
use anyhow::{ensure, Result};

/// `src[i]`'s translation is `tgt[i]`; the candidates are `tgt` followed by `distractors`.
/// Returns P@1 ×100 and the number of candidates.
pub fn p_at_1(enc: &dyn Embedder, src: &[String], tgt: &[String], distractors: &[String], batch_size: usize) -> Result<(f64, usize)> {
    ensure!(src.len() == tgt.len(), "{} source and {} target sentences: they must be line-aligned", src.len(), tgt.len());
    let all: Vec<&String> = tgt.iter().chain(distractors).collect();
    let vecs = super::embed_unique(enc, src.iter().chain(all.iter().copied()).map(String::as_str), batch_size)?;
    let q = Matrix::normalized(&src.iter().map(|s| vecs[s].clone()).collect::<Vec<_>>());
    let t = Matrix::normalized(&all.iter().map(|s| vecs[s.as_str()].clone()).collect::<Vec<_>>());
    Ok((p_at_1_vectors(&q, &t)?, all.len()))
}

/// P@1 ×100 when query i's answer is target i.
pub fn p_at_1_vectors(q: &Matrix, t: &Matrix) -> Result<f64> {
    let nb = knn(q, t, 1)?;
    let hits = (0..q.rows()).filter(|&i| nb.row(i).1.first() == Some(&(i as u32))).count();
    Ok(100.0 * hits as f64 / q.rows().max(1) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn p_at_1_by_hand() {
        let m = |r: &[[f32; 2]]| Matrix::normalized(&r.iter().map(|x| x.to_vec()).collect::<Vec<_>>());
        // q0 -> t0 (hit); q1 is nearest to the distractor t2 (miss).
        let q = m(&[[1.0, 0.0], [0.0, 1.0]]);
        let t = m(&[[1.0, 0.1], [1.0, 1.0], [0.1, 1.0]]);
        assert_eq!(p_at_1_vectors(&q, &t).unwrap(), 50.0);
    }
}
