//! `.npy` files of float32 rows, as `xsent embed` writes them (2-D, `<f4`, C order): a writer
//! for an unknown number of rows, and the header reader that `index` and `shard` use.

use anyhow::{bail, ensure, Result};
use std::io::{Read, Seek, SeekFrom, Write};

pub(crate) fn write_f32(w: &mut dyn Write, row: &[f32]) -> std::io::Result<()> {
    for x in row {
        w.write_all(&x.to_le_bytes())?;
    }
    Ok(())
}

/// A `.npy` writer for an unknown number of rows: a fixed-size header is rewritten at the end
/// (until then it is one numpy cannot parse).
pub struct NpyWriter {
    file: std::io::BufWriter<std::fs::File>,
    dim: usize,
    rows: u64,
}

const NPY_HEADER_LEN: usize = 128;

/// The header of `rows` × `dim` float32 rows; `rows = None` writes a header that numpy refuses
/// to parse (`shape` names the file unfinished), so that a run killed before
/// [`NpyWriter::finish`] leaves a file that fails to load rather than one that loads as empty.
pub fn npy_header(rows: Option<u64>, dim: usize) -> Vec<u8> {
    let shape = match rows {
        Some(rows) => format!("({rows}, {dim})"),
        None => "UNFINISHED: xsent embed stopped before the row count".to_string(),
    };
    let dict = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': {shape}, }}");
    assert!(dict.len() < NPY_HEADER_LEN - 10, "the npy header holds {} characters", dict.len());
    let mut h = Vec::with_capacity(NPY_HEADER_LEN);
    h.extend_from_slice(b"\x93NUMPY\x01\x00");
    h.extend_from_slice(&((NPY_HEADER_LEN - 10) as u16).to_le_bytes());
    h.extend_from_slice(dict.as_bytes());
    h.resize(NPY_HEADER_LEN - 1, b' ');
    h.push(b'\n');
    h
}

impl NpyWriter {
    pub fn new(file: std::fs::File, dim: usize) -> Result<Self> {
        let mut file = std::io::BufWriter::with_capacity(1 << 20, file);
        file.write_all(&npy_header(None, dim))?;
        Ok(Self { file, dim, rows: 0 })
    }

    pub fn write_row(&mut self, row: &[f32]) -> Result<()> {
        debug_assert_eq!(row.len(), self.dim);
        write_f32(&mut self.file, row)?;
        self.rows += 1;
        Ok(())
    }

    pub fn finish(mut self) -> Result<()> {
        self.file.flush()?;
        let mut f = self.file.into_inner().map_err(|e| e.into_error())?;
        f.seek(SeekFrom::Start(0))?;
        f.write_all(&npy_header(Some(self.rows), self.dim))?;
        f.flush()?;
        Ok(())
    }
}

/// Read an .npy header of float32 rows: (rows, dim, header bytes).
pub fn read_npy_header(r: &mut dyn Read) -> Result<(u64, usize, u64)> {
    let mut pre = [0u8; 10];
    r.read_exact(&mut pre)?;
    ensure!(&pre[..6] == b"\x93NUMPY", "no .npy magic");
    let (len, skip) = match pre[6] {
        1 => (u16::from_le_bytes([pre[8], pre[9]]) as usize, 10),
        2 | 3 => {
            let mut more = [0u8; 2];
            r.read_exact(&mut more)?;
            (u32::from_le_bytes([pre[8], pre[9], more[0], more[1]]) as usize, 12)
        }
        v => bail!("npy format version {v} is unknown"),
    };
    ensure!(len <= 1 << 20, "an npy header of {len} bytes");
    let mut h = vec![0u8; len];
    r.read_exact(&mut h)?;
    let h = String::from_utf8_lossy(&h);
    ensure!(h.contains("'descr': '<f4'"), "not little-endian float32 (the header is {h:?})");
    ensure!(h.contains("'fortran_order': False"), "not in C order (the header is {h:?})");
    let shape = h
        .split("'shape':")
        .nth(1)
        .and_then(|s| s.split_once('('))
        .and_then(|(_, s)| s.split_once(')'))
        .map(|(s, _)| s.to_string());
    let Some(shape) = shape else { bail!("no shape in the header {h:?} (an unfinished file?)") };
    let dims: Vec<&str> = shape.split(',').map(str::trim).filter(|s| !s.is_empty()).collect();
    let parse = |s: &str| s.parse::<u64>().map_err(|_| anyhow::anyhow!("shape ({shape}) is not numbers"));
    match dims.as_slice() {
        [r, d] => Ok((parse(r)?, parse(d)? as usize, (skip + len) as u64)),
        _ => bail!("shape ({shape}) is not two-dimensional"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn npy_header_is_aligned() {
        let h = npy_header(Some(u64::MAX), 4096);
        assert_eq!(h.len(), NPY_HEADER_LEN);
        assert_eq!(h.len() % 64, 0);
        assert_eq!(*h.last().unwrap(), b'\n');
        let text = String::from_utf8_lossy(&h[10..]);
        assert!(text.contains("'shape': (18446744073709551615, 4096)"), "{text}");
        let h = npy_header(None, 384);
        assert_eq!(h.len(), NPY_HEADER_LEN);
        assert!(String::from_utf8_lossy(&h[10..]).contains("'shape': UNFINISHED"));
    }
}
