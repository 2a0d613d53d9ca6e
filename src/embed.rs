//! Streaming `xsent embed`: lines in, vectors out, in bounded memory.
//!
//! Lines are read in windows; each window is tokenised, sorted by length into batches (little
//! padding), embedded, and written back in input order. An empty line embeds the empty text.
//! Invalid UTF-8 stops the run with the line number after everything before it is written.
//!
//! Windows are cut by the input's bytes, not by line counts: a window holds the lines that
//! start in one span of [`Windows::bytes`] bytes of the file (at most [`Windows::lines`] of
//! them, counted from the span's first line). The vectors of a line depend a little (in the
//! last bits) on the other lines of its batch, so this rule is what lets a shard that starts at
//! a span boundary ([`crate::shard`]) form the same batches as a run over the whole file.

use crate::model::Embedder;
use anyhow::{bail, Context, Result};
use std::io::{BufRead, Seek, SeekFrom, Write};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// One JSON array per input line.
    Jsonl,
    /// NumPy `.npy`, float32, shape (lines, dim); needs `-o FILE`.
    Npy,
    /// Raw little-endian float32 rows.
    F32,
}

/// Where vectors go: a file or standard output, named in write errors.
pub struct Sink {
    out: Out,
    name: String,
    rows: u64,
}

enum Out {
    Jsonl(Box<dyn Write>),
    F32(Box<dyn Write>),
    Npy(NpyWriter),
}

impl Sink {
    /// Vectors in `format` to `output` (an open file and the name errors give it), else to
    /// standard output.
    pub fn new(format: Format, output: Option<(std::fs::File, String)>, dim: usize) -> Result<Self> {
        let name = output.as_ref().map_or_else(|| "standard output".to_string(), |(_, n)| n.clone());
        let boxed = |out: Option<std::fs::File>| -> Box<dyn Write> {
            match out {
                Some(f) => Box::new(std::io::BufWriter::with_capacity(1 << 20, f)),
                None => Box::new(std::io::BufWriter::with_capacity(1 << 20, std::io::stdout().lock())),
            }
        };
        let out = match format {
            Format::Jsonl => Out::Jsonl(boxed(output.map(|o| o.0))),
            Format::F32 => Out::F32(boxed(output.map(|o| o.0))),
            Format::Npy => {
                let Some((mut file, _)) = output else {
                    bail!("--format npy needs -o FILE (the header, which holds the row count, is written last)")
                };
                if file.stream_position().is_err() {
                    bail!("--format npy writes its header (which holds the row count) last, so -o {name} must be a file it can seek in, not a pipe or terminal");
                }
                Out::Npy(NpyWriter::new(file, dim).with_context(|| format!("cannot write {name}"))?)
            }
        };
        Ok(Self { out, name, rows: 0 })
    }

    /// Rows written so far.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    pub fn write_row(&mut self, row: &[f32]) -> Result<()> {
        let r = match &mut self.out {
            // Through `io::Error`, which keeps the writer's own error (its kind, e.g. a closed pipe)
            // where serde_json's error would hide it from the error chain.
            Out::Jsonl(w) => serde_json::to_writer(&mut *w, row)
                .map_err(std::io::Error::from)
                .and_then(|()| w.write_all(b"\n"))
                .map_err(anyhow::Error::from),
            Out::F32(w) => write_f32(w, row),
            Out::Npy(n) => n.write_row(row),
        };
        r.with_context(|| format!("cannot write {}", self.name))?;
        self.rows += 1;
        Ok(())
    }

    pub fn finish(self) -> Result<()> {
        let r = match self.out {
            Out::Jsonl(mut w) | Out::F32(mut w) => w.flush().map_err(anyhow::Error::from),
            Out::Npy(n) => n.finish(),
        };
        r.with_context(|| format!("cannot write {}", self.name))
    }
}

fn write_f32(w: &mut dyn Write, row: &[f32]) -> Result<()> {
    let mut bytes = Vec::with_capacity(row.len() * 4);
    for x in row {
        bytes.extend_from_slice(&x.to_le_bytes());
    }
    w.write_all(&bytes)?;
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

/// What a run did.
#[derive(Debug, Default, Clone)]
pub struct Summary {
    pub lines: u64,
    pub truncated: u64,
    /// 1-based line number of the first truncated line.
    pub first_truncated: Option<u64>,
}

/// Progress callback: (lines done, bytes read).
pub type Progress<'a> = &'a dyn Fn(u64, u64);

/// How lines are grouped into windows (each window is sorted by length into batches).
#[derive(Debug, Clone, Copy)]
pub struct Windows {
    /// Most lines in one window.
    pub lines: usize,
    /// A window holds only lines that start in one span `[j × bytes, (j + 1) × bytes)` of the
    /// file's bytes.
    pub bytes: u64,
    /// Where in the file the input starts (a shard's first byte; 0 for a whole file).
    pub start: u64,
}

/// The default `--window-bytes`: about as many lines of ordinary sentences as the windows of
/// `--batch-size 64` hold (2,048).
pub const DEFAULT_WINDOW_BYTES: u64 = 256 << 10;

/// Embed every line of `input` into `sink`, one window at a time.
pub fn embed_stream(
    enc: &dyn Embedder,
    mut input: impl BufRead,
    sink: &mut Sink,
    batch_size: usize,
    windows: Windows,
    progress: Progress,
) -> Result<Summary> {
    anyhow::ensure!(windows.bytes > 0 && windows.lines > 0, "windows of {} bytes and {} lines hold nothing", windows.bytes, windows.lines);
    let mut summary = Summary::default();
    let mut pending: Vec<String> = Vec::with_capacity(windows.lines.min(1 << 16));
    // The byte span of the lines in `pending`.
    let mut span = 0u64;
    let mut buf = Vec::new();
    let mut bytes = 0u64;
    loop {
        // A line that starts in another byte span than the pending lines closes their window.
        let here = (windows.start + bytes) / windows.bytes;
        if here != span {
            if !pending.is_empty() {
                flush_window(enc, &mut pending, sink, batch_size, &mut summary)?;
                progress(summary.lines, bytes);
            }
            span = here;
        }
        buf.clear();
        // What stops the run at this line, if anything: the lines before it are written first.
        let mut problem = None;
        let n = match input.read_until(b'\n', &mut buf) {
            Ok(n) => n,
            Err(e) => {
                problem = Some(format!("cannot be read ({e})"));
                0
            }
        };
        bytes += n as u64;
        let at_end = n == 0;
        if !at_end {
            if buf.last() == Some(&b'\n') {
                buf.pop();
                if buf.last() == Some(&b'\r') {
                    buf.pop();
                }
            }
            match std::str::from_utf8(&buf) {
                Ok(s) => pending.push(s.to_string()),
                Err(e) => problem = Some(format!("is not valid UTF-8 (byte {} of the line)", e.valid_up_to() + 1)),
            }
        }
        if let Some(what) = problem {
            flush_window(enc, &mut pending, sink, batch_size, &mut summary)?;
            bail!("line {} {what}; the {} lines before it were embedded and written", summary.lines + 1, summary.lines);
        }
        if pending.len() >= windows.lines || (at_end && !pending.is_empty()) {
            flush_window(enc, &mut pending, sink, batch_size, &mut summary)?;
            progress(summary.lines, bytes);
        }
        if at_end {
            return Ok(summary);
        }
    }
}

fn flush_window(
    enc: &dyn Embedder,
    pending: &mut Vec<String>,
    sink: &mut Sink,
    batch_size: usize,
    summary: &mut Summary,
) -> Result<()> {
    if pending.is_empty() {
        return Ok(());
    }
    let texts: Vec<&str> = pending.iter().map(String::as_str).collect();
    let embedded = enc
        .embed_checked(&texts, batch_size)
        .and_then(|e| crate::model::embedder::ensure_finite(&e.rows, &texts).map(|()| e))
        .with_context(|| {
        format!(
            "embedding lines {}-{}; the {} lines before them were embedded and written",
            summary.lines + 1,
            summary.lines + texts.len() as u64,
            summary.lines
        )
    })?;
    for (i, &t) in embedded.truncated.iter().enumerate() {
        if t {
            summary.truncated += 1;
            summary.first_truncated.get_or_insert(summary.lines + i as u64 + 1);
        }
    }
    let rows = embedded.rows;
    for row in &rows {
        sink.write_row(row)?;
    }
    summary.lines += rows.len() as u64;
    pending.clear();
    Ok(())
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
