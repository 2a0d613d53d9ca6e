//! Streaming `xsent embed`: lines in, vectors out, in bounded memory.
//!
//! Lines are read in windows; each window is tokenised, sorted by length into batches (little
//! padding), embedded, and written back in input order. An empty line embeds the empty text.
//! Invalid UTF-8 stops the run with the line number after everything before it is written.
//!
//! Windows are cut by the input's bytes, not by line counts: a window holds the lines that
//! start in one span of [`Limits::span`] bytes of the file (at most [`Limits::window`] of
//! them, counted from the span's first line). The vectors of a line depend a little (in the
//! last bits) on the other lines of its batch, so this rule is what lets a shard that starts at
//! a span boundary ([`crate::shard`]) form the same batches as a run over the whole file.

use crate::io::npy::{write_f32, NpyWriter};
use crate::model::Embedder;
use crate::whole_rows::RowWriter;
use anyhow::{bail, Context, Result};
use std::io::{BufRead, Seek, Write};

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
    Jsonl(RowWriter<Box<dyn Write>>),
    F32(RowWriter<Box<dyn Write>>),
    Npy(NpyWriter),
}

impl Sink {
    /// Vectors in `format` to `output` (an open file and the name errors give it), else to
    /// standard output.
    pub fn new(format: Format, output: Option<(std::fs::File, String)>, dim: usize) -> Result<Self> {
        let name = output.as_ref().map_or_else(|| "standard output".to_string(), |(_, n)| n.clone());
        // Rows are passed on whole (an interrupted run never ends its output with a cut row).
        let boxed = |out: Option<std::fs::File>| -> RowWriter<Box<dyn Write>> {
            match out {
                Some(f) => match f.try_clone() {
                    // A file is cut back to whole rows if a write fails part-way (a full disk).
                    Ok(c) if f.metadata().is_ok_and(|m| m.is_file()) => RowWriter::for_file(Box::new(f), c),
                    _ => RowWriter::new(Box::new(f)),
                },
                None => RowWriter::new(Box::new(std::io::stdout().lock())),
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
            Out::Jsonl(w) => w
                .row(|b| {
                    serde_json::to_writer(&mut *b, row).map_err(std::io::Error::from).and_then(|()| b.write_all(b"\n"))
                })
                .map_err(anyhow::Error::from),
            Out::F32(w) => w.row(|b| write_f32(b, row)).map_err(anyhow::Error::from),
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

/// What a run did.
#[derive(Debug, Default, Clone)]
pub struct Summary {
    pub lines: u64,
    pub truncated: u64,
    /// 1-based line number of the first truncated line.
    pub first_truncated: Option<u64>,
    /// Lines longer than the byte cap, read only up to it (not counted in `truncated`).
    pub cut: u64,
    /// 1-based line number of the first of them.
    pub first_cut: Option<u64>,
}

/// How much `embed_stream` holds at once.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Texts per batch (at most).
    pub batch_size: usize,
    /// Lines read before they are embedded together (sorted by length into batches).
    pub window: usize,
    /// Bytes of text read before they are embedded together, whatever the number of lines.
    pub window_bytes: usize,
    /// Bytes of a line kept; the rest of a longer line is skipped unread into memory.
    pub max_line_bytes: usize,
    /// A window holds only lines that start in one span `[j × span, (j + 1) × span)` of the
    /// file's bytes (`--window-bytes`): what lets a shard that starts at a span boundary
    /// ([`crate::shard`]) form the same batches as a run over the whole file.
    pub span: u64,
    /// Where in the file the input starts (a shard's first byte; 0 for a whole file).
    pub start: u64,
}

/// The default `--window-bytes`: about as many lines of ordinary sentences as the windows of
/// `--batch-size 64` hold (2,048).
pub const DEFAULT_WINDOW_BYTES: u64 = 256 << 10;

/// Read one line into `buf` (its `\n` included), keeping at most `cap` bytes of it besides the
/// `\n`: the rest is consumed without being stored. Returns the bytes consumed (0 at the end) and whether the
/// line was longer than `cap`.
fn read_line_capped(input: &mut impl BufRead, buf: &mut Vec<u8>, cap: usize) -> std::io::Result<(usize, bool)> {
    let (mut consumed, mut over) = (0, false);
    loop {
        let chunk = match input.fill_buf() {
            Ok(c) => c,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if chunk.is_empty() {
            return Ok((consumed, over));
        }
        let (take, done) = match chunk.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (chunk.len(), false),
        };
        let room = cap.saturating_sub(buf.len());
        // The newline itself does not count against the cap.
        let keep = if done && take - 1 <= room && !over { take } else { take.min(room) };
        buf.extend_from_slice(&chunk[..keep]);
        if keep < take {
            over = true;
        }
        input.consume(take);
        consumed += take;
        if done {
            return Ok((consumed, over));
        }
    }
}

/// Progress callback: (lines done, bytes read).
pub type Progress<'a> = &'a dyn Fn(u64, u64);

/// Embed every line of `input` into `sink`, a window of lines at a time (memory bounded by
/// `limits`, whatever the input).
pub fn embed_stream(
    enc: &dyn Embedder,
    mut input: impl BufRead,
    sink: &mut Sink,
    limits: Limits,
    progress: Progress,
) -> Result<Summary> {
    anyhow::ensure!(
        limits.span > 0 && limits.window > 0,
        "windows of {} bytes and {} lines hold nothing",
        limits.span,
        limits.window
    );
    let mut summary = Summary::default();
    let mut pending: Vec<String> = Vec::with_capacity(limits.window.min(1 << 16));
    // Which lines of the window were cut at the byte cap.
    let mut pending_cut: Vec<bool> = Vec::with_capacity(limits.window.min(1 << 16));
    let mut pending_bytes = 0usize;
    // The byte span of the lines in `pending`.
    let mut span = 0u64;
    let mut buf = Vec::new();
    let mut bytes = 0u64;
    loop {
        // A line that starts in another byte span than the pending lines closes their window.
        let here = (limits.start + bytes) / limits.span;
        if here != span {
            if !pending.is_empty() {
                flush_window(enc, &mut pending, &mut pending_cut, sink, limits.batch_size, &mut summary)?;
                pending_bytes = 0;
                progress(summary.lines, bytes);
            }
            span = here;
        }
        buf.clear();
        // What stops the run at this line, if anything: the lines before it are written first.
        let mut problem = None;
        let (n, over) = match read_line_capped(&mut input, &mut buf, limits.max_line_bytes) {
            Ok(r) => r,
            Err(e) => {
                problem = Some(format!("cannot be read ({e})"));
                (0, false)
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
            let text = match std::str::from_utf8(&buf) {
                Ok(s) => Some(s),
                // The cap fell inside a character: the line is kept up to the character before.
                Err(e) if over && e.error_len().is_none() => {
                    Some(std::str::from_utf8(&buf[..e.valid_up_to()]).expect("valid up to there"))
                }
                Err(e) => {
                    problem = Some(format!("is not valid UTF-8 (byte {} of the line)", e.valid_up_to() + 1));
                    None
                }
            };
            if let Some(t) = text {
                pending_bytes += t.len();
                pending.push(t.to_string());
                pending_cut.push(over);
            }
        }
        if let Some(what) = problem {
            flush_window(enc, &mut pending, &mut pending_cut, sink, limits.batch_size, &mut summary)?;
            bail!("line {} {what}; the {} lines before it were embedded and written", summary.lines + 1, summary.lines);
        }
        if pending.len() >= limits.window || pending_bytes >= limits.window_bytes || (at_end && !pending.is_empty()) {
            flush_window(enc, &mut pending, &mut pending_cut, sink, limits.batch_size, &mut summary)?;
            pending_bytes = 0;
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
    pending_cut: &mut Vec<bool>,
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
    for (i, &c) in pending_cut.iter().enumerate() {
        if c {
            summary.cut += 1;
            summary.first_cut.get_or_insert(summary.lines + i as u64 + 1);
        }
    }
    // Lines cut at the byte cap are counted apart (whatever their tokens).
    for (i, (&t, &c)) in embedded.truncated.iter().zip(pending_cut.iter()).enumerate() {
        if t && !c {
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
    pending_cut.clear();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_lines_are_read_up_to_the_cap() {
        let text = b"short\nabcdefghij\nabcde\n\nlast without newline";
        // A reader that hands out 3 bytes at a time.
        let mut r = std::io::BufReader::with_capacity(3, &text[..]);
        let mut got = Vec::new();
        loop {
            let mut buf = Vec::new();
            let (n, over) = read_line_capped(&mut r, &mut buf, 5).unwrap();
            if n == 0 {
                break;
            }
            got.push((String::from_utf8(buf).unwrap(), n, over));
        }
        let want =
            [("short\n", 6, false), ("abcde", 11, true), ("abcde\n", 6, false), ("\n", 1, false), ("last ", 20, true)];
        assert_eq!(got, want.map(|(s, n, o)| (s.to_string(), n, o)));
    }
}
