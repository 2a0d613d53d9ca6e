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

/// The widest row a row or column kernel takes: they index a row's columns (and the column
/// sums' outputs, the softmax's keys) in 32 bits.
pub const MAX_ROW: usize = i32::MAX as usize / 2;

/// `n` values per row, or an error that names the op when no row kernel takes them (none, or more
/// than [`MAX_ROW`]).
pub fn row_width(op: &str, n: usize) -> candle_core::Result<usize> {
    if n == 0 || n > MAX_ROW {
        candle_core::bail!("{op}: rows of {n} values (a kernel takes 1 to {MAX_ROW})");
    }
    Ok(n)
}

/// A launch of a column-sum kernel over `n` columns: blocks of 32 × 32 threads, block x taking
/// columns 32x … 32x + 31 (`n` is at most [`MAX_ROW`]: `rows_and_width` checks it).
pub fn column_sums(n: usize) -> Grid {
    Grid { blocks: (n.div_ceil(32).max(1) as u32, 1, 1), threads: (32, 32, 1) }
}

/// The masked softmax's shapes, scores `[B, H, Lq, Lk]` and a mask bias `[B, 1, 1, Lk]` (one rule
/// for the CPU op, its CUDA side and the choice between the op and candle's): the score rows
/// (none without keys), their width `Lk`, and the score rows per bias row (`H·Lq`); `None` for
/// other shapes.
pub fn softmax_dims(scores: &[usize], bias: &[usize]) -> Option<(usize, usize, usize)> {
    let &[b, h, lq, lk] = scores else { return None };
    (bias == [b, 1, 1, lk]).then_some((if lk == 0 { 0 } else { b * h * lq }, lk, h * lq))
}

/// [`softmax_dims`], or an error that names the shape expected.
pub fn softmax_shapes(op: &str, scores: &[usize], bias: &[usize]) -> candle_core::Result<(usize, usize, usize)> {
    softmax_dims(scores, bias).ok_or_else(|| {
        candle_core::Error::msg(match *scores {
            [b, _, _, lk] => format!("{op}: a mask bias of shape [{b}, 1, 1, {lk}] expected, got {bias:?}"),
            _ => format!("{op}: scores of rank 4 expected, got {scores:?}"),
        })
    })
}

/// The head split's or merge's input strides in elements per sequence, head, token and element
/// of a head (`[sb, sh, st, se]`), from its layout's strides: a merge's input is `[B, heads, L, d]`,
/// a split's `[B·L, heads·d]` (row `b·L + t`, column `h·d + e`). `None` for strides of another rank.
pub fn heads_strides(merge: bool, l: usize, d: usize, stride: &[usize]) -> Option<[usize; 4]> {
    match (merge, stride) {
        (true, &[sb, sh, st, se]) => Some([sb, sh, st, se]),
        (false, &[r, c]) => Some([l * r, d * c, r, c]),
        _ => None,
    }
}

/// The head split's scale factor in the input's dtype, as candle's affine op rounds it (bf16: to
/// bf16; otherwise to f32): one rule for the CPU op, its CUDA side and the emulated kernel's test.
pub fn heads_factor(dtype: candle_core::DType, scale: f64) -> f32 {
    match dtype {
        candle_core::DType::BF16 => half::bf16::from_f64(scale).to_f32(),
        _ => scale as f32,
    }
}

/// The elements from an input's first to the last one a gather over `dims` (`[B, heads, L, d]`)
/// with `strides` reads, inclusive: 0 when a dimension is empty (nothing is read).
pub fn heads_span(dims: [usize; 4], strides: [usize; 4]) -> usize {
    if dims.contains(&0) {
        return 0;
    }
    1 + dims.iter().zip(strides).map(|(&k, st)| (k - 1) * st).sum::<usize>()
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

/// The parameters of `kernel`'s entry in PTX text, a letter each: `Q` a 64-bit integer (a
/// pointer is one), `I` a 32-bit integer, `f` an f32, `d` an f64. `None` when the PTX has no
/// such entry or a parameter of another type.
pub fn ptx_params(ptx: &str, kernel: &str) -> Option<String> {
    let start = ptx.find(&format!(".entry {kernel}("))? + ".entry (".len() + kernel.len();
    let list = &ptx[start..start + ptx[start..].find(')')?];
    list.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_whitespace().nth(1)? {
            ".u64" | ".s64" | ".b64" => Some('Q'),
            ".u32" | ".s32" | ".b32" => Some('I'),
            ".f32" => Some('f'),
            ".f64" => Some('d'),
            _ => None,
        })
        .collect()
}

/// Arguments `given` (letters as [`ptx_params`]) against `kernel`'s parameters in `ptx`: an
/// error that names both lists where the count or a type differs.
pub fn check_args(ptx: &str, kernel: &str, given: &str) -> Result<(), String> {
    match ptx_params(ptx, kernel) {
        Some(want) if want == given => Ok(()),
        Some(want) => Err(format!(
            "{kernel}: launched with arguments ({given}), its PTX takes ({want}) \
             (Q 64-bit or pointer, I 32-bit, f f32, d f64): a bug in src/gpu, please report it"
        )),
        None => Err(format!("{kernel}: no such kernel in its module's PTX (or a parameter type xsent does not know)")),
    }
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

    #[test]
    fn head_strides_and_span() {
        // Split of a contiguous [2·3, 4·5]: rows of 20.
        let st = heads_strides(false, 3, 5, &[20, 1]).unwrap();
        assert_eq!(st, [60, 5, 20, 1]);
        assert_eq!(heads_span([2, 4, 3, 5], st), 120);
        // Merge of a transposed view of a contiguous [2, 4, 5, 3] (elements of a head 3 apart).
        let st = heads_strides(true, 3, 5, &[60, 15, 1, 3]).unwrap();
        assert_eq!(heads_span([2, 4, 3, 5], st), 120);
        // A column slice of a [6, 40] tensor: the last row ends 20 elements short of the buffer.
        assert_eq!(heads_span([2, 4, 3, 5], heads_strides(false, 3, 5, &[40, 1]).unwrap()), 220);
        assert_eq!(heads_span([0, 4, 3, 5], [60, 5, 20, 1]), 0);
        assert!(heads_strides(true, 3, 5, &[20, 1]).is_none() && heads_strides(false, 3, 5, &[1, 1, 1, 1]).is_none());
    }

    #[test]
    fn softmax_shapes_are_checked() {
        assert_eq!(softmax_shapes("t", &[2, 3, 5, 7], &[2, 1, 1, 7]).unwrap(), (30, 7, 15));
        assert_eq!(softmax_shapes("t", &[2, 3, 5, 0], &[2, 1, 1, 0]).unwrap(), (0, 0, 15));
        let err = softmax_shapes("t", &[2, 3, 5, 7], &[2, 1, 5, 7]).unwrap_err().to_string();
        assert!(err.contains("[2, 1, 1, 7]") && err.contains("[2, 1, 5, 7]"), "{err}");
        assert!(softmax_shapes("t", &[3, 5, 7], &[3, 1, 1, 7]).unwrap_err().to_string().contains("rank 4"));
        assert_eq!(softmax_dims(&[2, 3, 5, 7], &[2, 1, 5, 7]), None);
        assert!(softmax_shapes("t", &[2, 3, 5, 7], &[1, 1, 1, 7]).is_err());
    }

    /// Widths the kernels' 32-bit column index cannot hold are refused, with the op's name.
    #[test]
    fn row_widths_are_bounded() {
        assert_eq!(row_width("t", 1).unwrap(), 1);
        assert_eq!(row_width("t", MAX_ROW).unwrap(), MAX_ROW);
        for n in [0, MAX_ROW + 1, u32::MAX as usize + 7] {
            let err = row_width("xsent-op", n).unwrap_err().to_string();
            assert!(err.contains("xsent-op") && err.contains(&format!("rows of {n} values")), "{err}");
        }
    }

    /// Two entries as nvcc 13.0 writes them (src/gpu/adamw.cu and a made-up one with every type).
    const PTX: &str = "
.visible .entry xsent_sumsq_many_f32(
\t.param .u64 xsent_sumsq_many_f32_param_0,
\t.param .u64 xsent_sumsq_many_f32_param_1,
\t.param .u64 xsent_sumsq_many_f32_param_2,
\t.param .u64 xsent_sumsq_many_f32_param_3
)
{
\t.reg .pred \t%p<27>;
}
.visible .entry xsent_all(
\t.param .u64 xsent_all_param_0,
\t.param .u32 xsent_all_param_1,
\t.param .f32 xsent_all_param_2,
\t.param .f64 xsent_all_param_3
)
{
}
";

    #[test]
    fn reads_a_kernels_parameters_from_ptx() {
        assert_eq!(ptx_params(PTX, "xsent_sumsq_many_f32").as_deref(), Some("QQQQ"));
        assert_eq!(ptx_params(PTX, "xsent_all").as_deref(), Some("QIfd"));
        assert_eq!(ptx_params(PTX, "xsent_sumsq_many"), None, "a prefix of a name is not the name");
        assert_eq!(ptx_params(PTX, "xsent_none"), None);
        assert!(check_args(PTX, "xsent_all", "QIfd").is_ok());
        let err = check_args(PTX, "xsent_all", "QIf").unwrap_err();
        assert!(err.contains("(QIf)") && err.contains("(QIfd)"), "{err}");
        assert!(check_args(PTX, "xsent_all", "QffD").is_err());
        assert!(check_args(PTX, "xsent_none", "Q").unwrap_err().contains("no such kernel"));
    }
}
