//! The exact kNN of [`super::knn`] on a GPU: block products and each block's top-k computed on
//! the device with candle's ops, only the `k` best of each row (and, for both directions, of
//! each column) read back and merged on the host.
//!
//! A query block of [`QUERY_BLOCK`] rows meets a target block of [`TARGET_BLOCK`] rows at a
//! time, so the device holds one `QUERY_BLOCK × TARGET_BLOCK` product and a few masks of its
//! size (about 0.5 GB at the defaults) plus the targets (uploaded once when they take at most
//! [`SHARED_TARGETS_MAX_BYTES`], else block by block). Ties go to the lower index, as on the
//! CPU: a block's best is its largest similarity at its lowest column, and blocks are merged in
//! increasing order. The similarities themselves are cuBLAS's, which may differ from the CPU's
//! gemm in the last bits.

use super::matrix::{Matrix, Neighbours};
use anyhow::{ensure, Result};
use candle_core::{DType, Device, Tensor};
use std::sync::Mutex;

/// Query rows per block product.
pub(super) const QUERY_BLOCK: usize = 2048;
/// Target rows per block product.
pub(super) const TARGET_BLOCK: usize = 16384;
/// Targets up to this size are uploaded once; larger ones block by block.
const SHARED_TARGETS_MAX_BYTES: usize = 2 << 30;

static DEVICE: Mutex<Option<Device>> = Mutex::new(None);

/// Run the exact kNN searches of this process on `device` (a GPU), or on the CPU (`cpu`, the
/// default). The commands that load a model call this with the model's device.
pub fn search_on(device: &Device) {
    *DEVICE.lock().expect("no thread panicked holding the kNN device") = (!device.is_cpu()).then(|| device.clone());
}

/// The device set by [`search_on`], if it is not the CPU.
pub fn device() -> Option<Device> {
    DEVICE.lock().expect("no thread panicked holding the kNN device").clone()
}

/// `rows × dim` of a matrix, from row `start`, on `dev`.
fn upload(m: &Matrix, start: usize, len: usize, dev: &Device) -> Result<Tensor> {
    Ok(Tensor::from_slice(&m.data[start * m.dim..(start + len) * m.dim], (len, m.dim), &Device::Cpu)?.to_device(dev)?)
}

/// Per row: the `k` best similarities and their columns.
type TopK = (Vec<Vec<f32>>, Vec<Vec<u32>>);

/// The `k` largest values of each row of `s` (`[rows, width]`, `k ≤ width`), best first, with
/// their columns; ties to the lower column. `k` passes over the block on its device, one read
/// back.
pub(crate) fn top_k_rows(s: &Tensor, k: usize) -> Result<TopK> {
    let (rows, width) = s.dims2()?;
    ensure!(k <= width && width < 1 << 24, "top_k_rows: k = {k} of {width} columns");
    let dev = s.device();
    // Column numbers as f32 (exact below 2²⁴), and the fill values, broadcast without copies.
    let cols = Tensor::arange(0f32, width as f32, dev)?.reshape((1, width))?.broadcast_as((rows, width))?;
    let far = Tensor::new(f32::INFINITY, dev)?.broadcast_as((rows, width))?;
    let gone = Tensor::new(f32::NEG_INFINITY, dev)?.broadcast_as((rows, width))?;
    let mut s = s.to_dtype(DType::F32)?;
    let (mut vals, mut idx) = (Vec::with_capacity(k), Vec::with_capacity(k));
    for _ in 0..k {
        let best = s.max_keepdim(1)?;
        let at = s.broadcast_eq(&best)?.where_cond(&cols, &far)?.min_keepdim(1)?;
        s = cols.broadcast_eq(&at)?.where_cond(&gone, &s)?;
        vals.push(best);
        idx.push(at);
    }
    if k == 0 {
        return Ok((vec![Vec::new(); rows], vec![Vec::new(); rows]));
    }
    let vals = Tensor::cat(&vals, 1)?.to_vec2::<f32>()?;
    let idx = Tensor::cat(&idx, 1)?
        .to_vec2::<f32>()?
        .into_iter()
        .map(|r| r.into_iter().map(|c| c as u32).collect())
        .collect();
    Ok((vals, idx))
}

/// Merge a block's list (`vals`, `ids`: best first, ids all above the running list's) into the
/// running list `(sims, idx)` of length `k`: an equal similarity already there stays ahead.
fn merge(sims: &mut [f32], idx: &mut [u32], vals: &[f32], ids: impl Iterator<Item = u32>) {
    let k = sims.len();
    let (old_s, old_i) = (sims.to_vec(), idx.to_vec());
    let new: Vec<(f32, u32)> = vals.iter().copied().zip(ids).collect();
    let (mut a, mut b) = (0, 0);
    for r in 0..k {
        if b < new.len() && (a >= k || new[b].0 > old_s[a]) {
            (sims[r], idx[r]) = new[b];
            b += 1;
        } else {
            (sims[r], idx[r]) = (old_s[a], old_i[a]);
            a += 1;
        }
    }
}

/// [`super::knn`]'s search on `dev`: the rows' top-k, and with `both` the columns'.
pub fn search(
    queries: &Matrix,
    targets: &Matrix,
    k: usize,
    both: bool,
    dev: &Device,
) -> Result<(Neighbours, Option<Neighbours>)> {
    search_blocks(queries, targets, k, both, dev, (QUERY_BLOCK, TARGET_BLOCK))
}

/// [`search`] with query and target blocks of the given rows.
pub(super) fn search_blocks(
    queries: &Matrix,
    targets: &Matrix,
    k: usize,
    both: bool,
    dev: &Device,
    (qb, tb): (usize, usize),
) -> Result<(Neighbours, Option<Neighbours>)> {
    let (n, m) = (queries.rows(), targets.rows());
    ensure!(
        queries.data.len() == n * queries.dim && targets.data.len() == m * targets.dim,
        "kNN: values are not whole rows"
    );
    ensure!(queries.dim == targets.dim || n == 0 || m == 0, "dimension mismatch: {} vs {}", queries.dim, targets.dim);
    ensure!(n <= u32::MAX as usize && m <= u32::MAX as usize, "kNN indices are 32-bit: {n} × {m} rows is too many");
    let (kr, kc) = (k.min(m), k.min(n));
    let empty =
        |rows: usize, k: usize| Neighbours { k, sims: vec![f32::NEG_INFINITY; rows * k], idx: vec![0; rows * k] };
    let (mut rows, mut cols) = (empty(n, kr), empty(if both { m } else { 0 }, kc));
    if kr == 0 || kc == 0 {
        return Ok((rows, both.then(|| empty(m, kc))));
    }
    let tblocks: Vec<(usize, usize)> = (0..m).step_by(tb).map(|s| (s, tb.min(m - s))).collect();
    let shared: Option<Vec<Tensor>> = if m * targets.dim * 4 <= SHARED_TARGETS_MAX_BYTES {
        Some(tblocks.iter().map(|&(s, len)| upload(targets, s, len, dev)).collect::<Result<_>>()?)
    } else {
        None
    };
    for q0 in (0..n).step_by(qb) {
        let qlen = qb.min(n - q0);
        let q = upload(queries, q0, qlen, dev)?;
        for (b, &(t0, tlen)) in tblocks.iter().enumerate() {
            let t = match &shared {
                Some(ts) => ts[b].clone(),
                None => upload(targets, t0, tlen, dev)?,
            };
            let s = crate::model::matmul::matmul(&q, &t.t()?)?;
            let (vals, ids) = top_k_rows(&s, kr.min(tlen))?;
            for (r, (v, i)) in vals.iter().zip(&ids).enumerate() {
                let at = (q0 + r) * kr;
                merge(
                    &mut rows.sims[at..at + kr],
                    &mut rows.idx[at..at + kr],
                    v,
                    i.iter().map(|&c| (t0 + c as usize) as u32),
                );
            }
            if both {
                let (vals, ids) = top_k_rows(&s.t()?.contiguous()?, kc.min(qlen))?;
                for (c, (v, i)) in vals.iter().zip(&ids).enumerate() {
                    let at = (t0 + c) * kc;
                    merge(
                        &mut cols.sims[at..at + kc],
                        &mut cols.idx[at..at + kc],
                        v,
                        i.iter().map(|&r| (q0 + r as usize) as u32),
                    );
                }
            }
        }
    }
    Ok((rows, both.then_some(cols)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A block's best is its largest value at its lowest column, row by row, also when a row's
    /// values run out.
    #[test]
    fn top_k_rows_breaks_ties_to_the_lower_column() -> Result<()> {
        let s = Tensor::from_vec(vec![1f32, 3., 3., 2., 3., 0.], (2, 3), &Device::Cpu)?;
        let (v, i) = top_k_rows(&s, 3)?;
        assert_eq!((v[0].clone(), i[0].clone()), (vec![3., 3., 1.], vec![1, 2, 0]));
        assert_eq!((v[1].clone(), i[1].clone()), (vec![3., 2., 0.], vec![1, 0, 2]));
        Ok(())
    }

    /// Blocks smaller than the sides: merging lists across blocks keeps ties at the lower id.
    #[test]
    fn merging_keeps_the_lower_id_ahead() {
        let (mut s, mut i) = (vec![0.9f32, 0.5, 0.5], vec![3u32, 4, 8]);
        merge(&mut s, &mut i, &[0.7, 0.5], [10u32, 11].into_iter());
        assert_eq!((s, i), (vec![0.9, 0.7, 0.5], vec![3, 10, 4]));
    }
}
