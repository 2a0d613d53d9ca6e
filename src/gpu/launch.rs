//! The shapes of xsent's kernel launches and the optimiser's address tables: plain arithmetic,
//! compiled in every build, so that the CPU emulation of the kernels (tests/gpu_emulated.rs)
//! launches them exactly as the CUDA code does.

/// A launch's grid and block, in blocks and threads per dimension (x fastest).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grid {
    pub blocks: (u32, u32, u32),
    pub threads: (u32, u32, u32),
}

/// Threads per block of the element-wise kernels (GELU, dropout, the one-tensor AdamW).
pub const ELEMENT_THREADS: usize = 256;

/// A launch over `n` elements: the kernels loop with a grid stride, so any `n` fits.
pub fn elementwise(n: usize) -> Grid {
    let blocks = n.div_ceil(ELEMENT_THREADS).clamp(1, 65_535 * 8) as u32;
    Grid { blocks: (blocks, 1, 1), threads: (ELEMENT_THREADS as u32, 1, 1) }
}

/// Rows per block of the row kernels (LayerNorm, softmax): one warp each.
pub const ROWS_PER_BLOCK: usize = 4;

/// A launch of a row kernel over `rows` rows: one warp per row, [`ROWS_PER_BLOCK`] rows per
/// block (the kernels read the row as `blockIdx.x · blockDim.y + threadIdx.y`).
pub fn rows(op: &str, rows: usize) -> candle_core::Result<Grid> {
    let blocks = rows.div_ceil(ROWS_PER_BLOCK).max(1);
    if blocks > i32::MAX as usize {
        candle_core::bail!("{op}: {rows} rows are more than one launch takes");
    }
    Ok(Grid { blocks: (blocks as u32, 1, 1), threads: (32, ROWS_PER_BLOCK as u32, 1) })
}

/// A launch of a column-sum kernel over `n` columns: blocks of 32 × 32 threads, block x taking
/// columns 32x … 32x + 31 (`n` is at most `i32::MAX / 2`: `rows_and_width` checks it).
pub fn column_sums(n: usize) -> Grid {
    Grid { blocks: (n.div_ceil(32).max(1) as u32, 1, 1), threads: (32, 32, 1) }
}

/// Elements per block of the optimiser's passes over many tensors: one block per chunk.
pub const CHUNK: usize = 1 << 16;
/// Threads per block of those passes.
pub const CHUNK_THREADS: u32 = 256;

/// The launch over `chunks` chunks: one block each.
pub fn chunked(op: &str, chunks: usize) -> candle_core::Result<Grid> {
    if chunks > i32::MAX as usize {
        candle_core::bail!("{op}: {chunks} chunks are more than one launch takes");
    }
    Ok(Grid { blocks: (chunks as u32, 1, 1), threads: (CHUNK_THREADS, 1, 1) })
}

/// The chunks of tensors of lengths `lens`: (tensor, first element) every `chunk` elements; an
/// empty tensor has none.
pub fn chunks(lens: &[usize], chunk: usize) -> Vec<(usize, usize)> {
    lens.iter().enumerate().flat_map(|(t, &n)| (0..n).step_by(chunk.max(1)).map(move |s| (t, s))).collect()
}

/// The table of a launch over many tensors: `fields` (T values each, in order), then each
/// chunk's tensor and first element.
pub fn table(fields: &[Vec<u64>], chunks: &[(usize, usize)]) -> Vec<u64> {
    let mut t: Vec<u64> = fields.concat();
    t.extend(chunks.iter().flat_map(|&(i, s)| [i as u64, s as u64]));
    t
}

/// A tensor's learning rate and weight decay in one table entry: their f32 bits, the rate low.
pub fn lr_and_decay(lr: f32, decay: f32) -> u64 {
    (lr.to_bits() as u64) | ((decay.to_bits() as u64) << 32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_cover_every_element_once() {
        assert_eq!(chunks(&[5, 0, 2, 4], 2), vec![(0, 0), (0, 2), (0, 4), (2, 0), (3, 0), (3, 2)]);
        assert!(chunks(&[0, 0], 4).is_empty());
        let lens = [1usize, CHUNK, CHUNK + 1, 3 * CHUNK - 1];
        let c = chunks(&lens, CHUNK);
        for (t, &n) in lens.iter().enumerate() {
            let covered: usize = c.iter().filter(|(i, _)| *i == t).map(|&(_, s)| (n - s).min(CHUNK)).sum();
            assert_eq!(covered, n, "tensor {t}");
        }
    }

    #[test]
    fn table_holds_fields_then_chunks() {
        let t = table(&[vec![10, 11], vec![7, 3]], &[(0, 0), (1, 0), (1, 2)]);
        assert_eq!(t, vec![10, 11, 7, 3, 0, 0, 1, 0, 1, 2]);
    }

    #[test]
    fn grids_cover_their_work() {
        assert_eq!(elementwise(0).blocks.0, 1);
        assert_eq!(elementwise(257).blocks.0, 2);
        assert_eq!(rows("t", 9).unwrap(), Grid { blocks: (3, 1, 1), threads: (32, 4, 1) });
        assert_eq!(column_sums(33).blocks.0, 2);
        assert_eq!(lr_and_decay(1.0, 0.5), 0x3F00_0000_3F80_0000);
    }
}
