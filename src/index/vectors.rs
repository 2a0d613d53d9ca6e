//! Files of float32 rows, as `xsent embed` writes them: `.npy` (2-D, `<f4`, C order) or raw
//! little-endian `.f32` (whose dimension must be given). Several files read as one sequence of
//! rows: the shards of a sharded run, in order.

use anyhow::{bail, ensure, Context, Result};
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// The largest norm a vector of an index may have: inner products of two such vectors stay far
/// inside float32's range.
pub const MAX_NORM: f64 = 1e9;

/// One file of rows.
struct VectorFile {
    path: PathBuf,
    file: std::fs::File,
    data_start: u64,
    rows: u64,
}

impl VectorFile {
    fn open(path: &Path, dim: Option<usize>) -> Result<(Self, usize)> {
        refuse_gzip(path, "vector")?;
        let mut file = std::fs::File::open(path).with_context(|| format!("cannot open vectors {}", path.display()))?;
        let size = file.metadata()?.len();
        let is_npy = path.extension().is_some_and(|e| e == "npy");
        let (rows, d, data_start) = if is_npy {
            let (rows, d, start) = crate::io::npy::read_npy_header(&mut std::io::BufReader::new(&mut file))
                .with_context(|| format!("{} is not a float32 .npy file", path.display()))?;
            ensure!(
                rows.checked_mul(d as u64).and_then(|v| v.checked_mul(4)).and_then(|b| b.checked_add(start))
                    == Some(size),
                "{}: its header says {rows} × {d} float32 values, but it holds {} bytes after the header",
                path.display(),
                size - start.min(size)
            );
            ensure!(d > 0, "{}: its header says rows of 0 values; an index needs vectors", path.display());
            if let Some(want) = dim {
                ensure!(
                    want == d,
                    "{}: rows of {d} values, where {want} were expected (--dim, or the files before it)",
                    path.display()
                );
            }
            (rows, d, start)
        } else {
            if path.extension().is_some_and(|e| e == "jsonl" || e == "json") {
                bail!(
                    "{}: vectors for an index are float32 files: embed with --format f32 or --format npy",
                    path.display()
                );
            }
            let Some(d) = dim else {
                bail!(
                    "{}: a raw float32 file does not say its dimension: give --dim (384 for e5-small) or use .npy",
                    path.display()
                )
            };
            ensure!(d > 0, "--dim must be at least 1");
            let row = (d as u64).checked_mul(4).with_context(|| format!("--dim {d} is too large"))?;
            ensure!(size % row == 0, "{}: {size} bytes are not whole rows of {d} float32 values", path.display());
            (size / row, d, 0)
        };
        Ok((Self { path: path.to_path_buf(), file, data_start, rows }, d))
    }
}

/// Vector files are read in place, at any row, which a `.gz` file does not allow; neighbour
/// files are read as they are too. A gzipped one is refused by its name, before its compressed
/// bytes are taken for rows (before: "a raw float32 file does not say its dimension").
pub fn refuse_gzip(path: &Path, what: &str) -> Result<()> {
    if path.extension().is_some_and(|e| e == "gz") {
        bail!(
            "{}: {what} files are read uncompressed (only text inputs and reports are read through gzip): \
             decompress it first (gunzip -k {})",
            path.display(),
            path.display()
        );
    }
    Ok(())
}

/// Files of rows read as one matrix, in the order given.
pub struct VectorSet {
    files: Vec<VectorFile>,
    /// Global row where each file starts.
    starts: Vec<u64>,
    rows: u64,
    dim: usize,
}

impl VectorSet {
    /// Open `paths` (`.npy`, or raw `.f32` with `dim`); all must have the same dimension.
    pub fn open(paths: &[PathBuf], dim: Option<usize>) -> Result<Self> {
        ensure!(!paths.is_empty(), "no vector files given");
        let mut files = Vec::with_capacity(paths.len());
        let mut starts = Vec::with_capacity(paths.len());
        let (mut rows, mut common) = (0u64, dim);
        for p in paths {
            let (f, d) = VectorFile::open(p, common)?;
            if let Some(c) = common {
                ensure!(c == d, "{} has rows of {d} values, the files before it {c}", p.display());
            }
            common = Some(d);
            starts.push(rows);
            rows += f.rows;
            files.push(f);
        }
        Ok(Self { files, starts, rows, dim: common.unwrap_or(0) })
    }

    pub fn rows(&self) -> u64 {
        self.rows
    }

    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Append rows `start .. start + count` to `out`.
    pub fn read(&mut self, start: u64, count: usize, out: &mut Vec<f32>) -> Result<()> {
        ensure!(start + count as u64 <= self.rows, "rows {start}..{} asked of {}", start + count as u64, self.rows);
        let (mut at, mut left) = (start, count as u64);
        while left > 0 {
            let f = self.starts.partition_point(|&s| s <= at) - 1;
            let file = &mut self.files[f];
            let local = at - self.starts[f];
            let take = left.min(file.rows - local);
            let bytes = (take * self.dim as u64 * 4) as usize;
            let mut buf = vec![0u8; bytes];
            file.file.seek(SeekFrom::Start(file.data_start + local * self.dim as u64 * 4))?;
            file.file.read_exact(&mut buf).with_context(|| format!("cannot read {}", file.path.display()))?;
            let from = out.len();
            out.extend(buf.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])));
            if let Some(k) = out[from..].iter().position(|x| !x.is_finite()) {
                bail!(
                    "{}: row {} (counting from 0) holds {}, at value {}; an index needs finite vectors",
                    file.path.display(),
                    local + (k / self.dim) as u64,
                    out[from + k],
                    k % self.dim
                );
            }
            // Inner products are taken in f32: two vectors of norm up to MAX_NORM give at most
            // 1e18, where larger ones could overflow to infinity (or NaN) without a word.
            let norm = crate::model::pooling::norm_f64;
            if let Some(r) = out[from..].chunks_exact(self.dim).position(|row| norm(row) > MAX_NORM) {
                bail!(
                    "{}: row {} (counting from 0) has norm {:.3e}; an index needs vectors of norm at most {MAX_NORM:e} \
                     (their inner products are computed in float32): scale or normalise the vectors",
                    file.path.display(),
                    local + r as u64,
                    norm(&out[from + r * self.dim..from + (r + 1) * self.dim])
                );
            }
            at += take;
            left -= take;
        }
        Ok(())
    }
}
