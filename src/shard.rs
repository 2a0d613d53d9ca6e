//! Sharded, resumable `xsent embed`: shard i of N embeds one byte range of the input and writes
//! its vectors and a manifest into a folder; `xsent embed --merge` checks the manifests and
//! joins the shards in order.
//!
//! Shard boundaries lie on the spans of `--window-bytes` that the embed driver cuts its windows
//! by ([`crate::embed::Windows`]), snapped forward to the next line start, so a shard's windows,
//! batches and vectors are those of a run over the whole file, and the merged output equals it
//! byte for byte. Shard i reads its own bytes only (and the line that crosses its end): it finds
//! its first line by seeking, never by reading what comes before.
//!
//! A shard's output is written under a temporary name and renamed; its manifest is written
//! last, the same way, so a complete manifest means a complete output. A shard whose manifest
//! matches the run (input, model, options) and whose output still has the recorded size and
//! sha256 is skipped; anything else (no manifest, a `.partial`, a changed output) is redone.

use anyhow::{bail, ensure, Context, Result};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::io::{BufRead, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// Version of the manifest format.
pub const MANIFEST_VERSION: u32 = 1;

/// `--shard i/N`: shard `index` (0-based) of `count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShardSpec {
    pub index: u32,
    pub count: u32,
}

impl std::str::FromStr for ShardSpec {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        let bad = || format!("--shard {s:?}: give i/N, shard i (counted from 0) of N, e.g. 0/8 … 7/8");
        let (i, n) = s.split_once('/').ok_or_else(bad)?;
        let (index, count): (u32, u32) = (i.trim().parse().map_err(|_| bad())?, n.trim().parse().map_err(|_| bad())?);
        if count == 0 {
            return Err(format!("--shard {s}: N must be at least 1"));
        }
        if index >= count {
            return Err(format!("--shard {s}: i counts from 0, so it must be 0..={} for N = {count}", count - 1));
        }
        Ok(Self { index, count })
    }
}

impl std::fmt::Display for ShardSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

impl ShardSpec {
    /// `shard-00003-of-00008`, the stem of this shard's files.
    pub fn stem(&self) -> String {
        format!("shard-{:05}-of-{:05}", self.index, self.count)
    }

    /// The manifest's path in `dir`.
    pub fn manifest_path(&self, dir: &Path) -> PathBuf {
        dir.join(format!("{}.manifest.json", self.stem()))
    }
}

/// The first line start at or after byte `pos` of `file` (`size` bytes): `pos` itself when it
/// is 0 or follows a newline, else the byte after the next newline, else `size`. Reads from
/// `pos - 1` on, never before.
pub fn line_start_at_or_after(file: &mut std::fs::File, pos: u64, size: u64) -> Result<u64> {
    if pos == 0 || pos >= size {
        return Ok(pos.min(size));
    }
    file.seek(SeekFrom::Start(pos - 1))?;
    let mut r = std::io::BufReader::with_capacity(64 << 10, file);
    let mut at = pos - 1;
    loop {
        let buf = r.fill_buf()?;
        if buf.is_empty() {
            return Ok(size);
        }
        if let Some(i) = memchr_newline(buf) {
            return Ok((at + i as u64 + 1).min(size));
        }
        let n = buf.len();
        at += n as u64;
        r.consume(n);
    }
}

fn memchr_newline(b: &[u8]) -> Option<usize> {
    b.iter().position(|&c| c == b'\n')
}

/// The byte range `[start, end)` of shard `spec` of a file of `size` bytes, cut into spans of
/// `window_bytes`: shard i takes spans `⌊i·S/N⌋ .. ⌊(i+1)·S/N⌋` of the `S` spans, from the first
/// line that starts in them. With more shards than spans, some shards are empty.
pub fn byte_range(file: &mut std::fs::File, size: u64, spec: ShardSpec, window_bytes: u64) -> Result<(u64, u64)> {
    ensure!(window_bytes > 0, "--window-bytes must be at least 1");
    let spans = size.div_ceil(window_bytes) as u128;
    let cut =
        |i: u32| -> u64 { ((i as u128 * spans / spec.count as u128) * window_bytes as u128).min(size as u128) as u64 };
    let start = line_start_at_or_after(file, cut(spec.index), size)?;
    let end =
        if spec.index + 1 == spec.count { size } else { line_start_at_or_after(file, cut(spec.index + 1), size)? };
    Ok((start, end.max(start)))
}

/// Identity of an input file: what a shard checks before it trusts an earlier run's output.
/// The path is recorded but not compared (a shared file system may be mounted elsewhere on
/// another machine); size, modification time and the hash of its ends are.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct InputId {
    pub path: String,
    pub size: u64,
    pub mtime_ns: u64,
    /// sha256 of the first and the last 64 KiB (the whole file when it is smaller).
    pub sha256_ends: String,
}

impl InputId {
    pub fn of(path: &Path) -> Result<Self> {
        let mut f = std::fs::File::open(path).with_context(|| format!("cannot open input {}", path.display()))?;
        let meta = f.metadata().with_context(|| format!("cannot read {}", path.display()))?;
        let size = meta.len();
        let mtime_ns = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_nanos() as u64);
        const END: u64 = 64 << 10;
        let mut h = Sha256::new();
        let mut head = vec![0u8; size.min(END) as usize];
        f.read_exact(&mut head).with_context(|| format!("cannot read {}", path.display()))?;
        h.update(&head);
        if size > END {
            let tail_start = size.saturating_sub(END).max(END);
            f.seek(SeekFrom::Start(tail_start))?;
            let mut tail = vec![0u8; (size - tail_start) as usize];
            f.read_exact(&mut tail).with_context(|| format!("cannot read {}", path.display()))?;
            h.update(&tail);
        }
        let path = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
        Ok(Self { path: path.display().to_string(), size, mtime_ns, sha256_ends: hex(&h.finalize()) })
    }

    /// Whether `other` is the same file (the path aside).
    pub fn same_file(&self, other: &Self) -> bool {
        self.size == other.size && self.mtime_ns == other.mtime_ns && self.sha256_ends == other.sha256_ends
    }
}

/// Identity of a model: the directory its files come from and a hash of them (small files
/// whole; a file over 8 MiB, such as the weights, by its size and its first and last MiB).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ModelId {
    /// What the user passed (`--model`).
    pub spec: String,
    pub dir: String,
    pub sha256: String,
}

impl ModelId {
    pub fn of(spec: &str) -> Result<Self> {
        let dir = if Path::new(spec).is_dir() {
            PathBuf::from(spec)
        } else {
            let files = crate::model::source::resolve(spec)?;
            files.dir()
        };
        let dir = std::fs::canonicalize(&dir).unwrap_or(dir);
        let mut files = Vec::new();
        list_files(&dir, &dir, 0, &mut files)?;
        files.sort();
        let mut h = Sha256::new();
        for rel in &files {
            let path = dir.join(rel);
            let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
            h.update(rel.to_string_lossy().as_bytes());
            h.update([0]);
            h.update(size.to_le_bytes());
            h.update(
                file_digest(&path, 8 << 20, 1 << 20)
                    .with_context(|| format!("cannot read the model file {}", path.display()))?,
            );
        }
        Ok(Self { spec: spec.to_string(), dir: dir.display().to_string(), sha256: hex(&h.finalize()) })
    }
}

/// Files under `dir` (relative to `root`), two folder levels deep at most.
fn list_files(root: &Path, dir: &Path, depth: usize, out: &mut Vec<PathBuf>) -> Result<()> {
    let entries = std::fs::read_dir(dir).with_context(|| format!("cannot list the model folder {}", dir.display()))?;
    for e in entries {
        let path = e?.path();
        if path.is_dir() {
            if depth < 2 {
                list_files(root, &path, depth + 1, out)?;
            }
        } else if path.is_file() {
            out.push(path.strip_prefix(root).unwrap_or(&path).to_path_buf());
        }
    }
    Ok(())
}

/// sha256 of a file up to `whole` bytes, else of its first and last `part` bytes.
fn file_digest(path: &Path, whole: u64, part: u64) -> Result<[u8; 32]> {
    let mut f = std::fs::File::open(path)?;
    let size = f.metadata()?.len();
    let mut h = Sha256::new();
    if size <= whole {
        std::io::copy(&mut f, &mut h)?;
    } else {
        std::io::copy(&mut (&mut f).take(part), &mut h)?;
        f.seek(SeekFrom::Start(size - part))?;
        std::io::copy(&mut f, &mut h)?;
    }
    Ok(h.finalize().into())
}

/// The output file of a shard.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct OutputId {
    /// File name, in the manifest's folder.
    pub file: String,
    /// `f32`, `npy` or `jsonl`.
    pub format: String,
    pub dim: usize,
    pub bytes: u64,
    pub sha256: String,
}

/// What a shard wrote, and from what.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Manifest {
    pub xsent_shard_manifest: u32,
    pub xsent_version: String,
    pub shard: u32,
    pub shards: u32,
    pub input: InputId,
    /// The shard's bytes of the input: `[start, end)`.
    pub bytes: [u64; 2],
    /// sha256 of those bytes.
    pub input_sha256: String,
    /// Lines embedded (= vectors written).
    pub rows: u64,
    pub model: ModelId,
    /// The embed options that change the vectors or the file (prefix, pooling, batch size,
    /// window bytes, format, ...), as given on the command line.
    pub options: serde_json::Map<String, serde_json::Value>,
    pub output: OutputId,
    /// Lines cut at the model's maximum length.
    pub truncated: u64,
    /// Informational: how long the shard took, and where it ran.
    pub seconds: f64,
    pub host: String,
}

impl Manifest {
    pub fn read(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
        serde_json::from_str(&text).with_context(|| format!("{} is not a shard manifest of this xsent", path.display()))
    }

    /// Write the manifest as `path`, through a temporary file renamed into place.
    pub fn write(&self, path: &Path) -> Result<()> {
        // Through `.NAME.tmp` and a rename, with the mode a new file gets (a temporary file of
        // the tempfile crate is 0600, while the shard's output beside it is 0644).
        let text = serde_json::to_string_pretty(self)? + "\n";
        crate::io::atomic::write_file_atomically(path, text.as_bytes())
    }

    /// What differs between this manifest's run and `want` (same fields), if anything: the
    /// shard, the input file, the byte range, the model, the options or the xsent version.
    pub fn differs_from(&self, want: &RunId) -> Option<String> {
        if (self.shard, self.shards) != (want.spec.index, want.spec.count) {
            return Some(format!("it is shard {}/{}", self.shard, self.shards));
        }
        if !self.input.same_file(&want.input) {
            return Some(format!(
                "it was made from another input file (size {}, modified {} ns, ends {}; now {}, {}, {})",
                self.input.size,
                self.input.mtime_ns,
                short(&self.input.sha256_ends),
                want.input.size,
                want.input.mtime_ns,
                short(&want.input.sha256_ends)
            ));
        }
        if self.model.sha256 != want.model.sha256 {
            return Some(format!(
                "it was made with another model ({} at {}, hash {}; now {}, {})",
                self.model.spec,
                self.model.dir,
                short(&self.model.sha256),
                want.model.dir,
                short(&want.model.sha256)
            ));
        }
        if self.options != want.options {
            return Some(format!(
                "it was made with other options ({}; now {})",
                serde_json::Value::from(self.options.clone()),
                serde_json::Value::from(want.options.clone())
            ));
        }
        if self.xsent_version != crate::VERSION {
            return Some(format!("it was made by xsent {} (this is {})", self.xsent_version, crate::VERSION));
        }
        None
    }
}

/// The first 12 characters of a hash, as messages show it (an edited manifest may hold any
/// text: cut at a character, not a byte).
fn short(h: &str) -> &str {
    h.char_indices().nth(12).map_or(h, |(at, _)| &h[..at])
}

/// What identifies one shard's run: a manifest that matches it is this run's.
#[derive(Debug, Clone)]
pub struct RunId {
    pub spec: ShardSpec,
    pub input: InputId,
    pub model: ModelId,
    pub options: serde_json::Map<String, serde_json::Value>,
}

pub use crate::io::digest::{hex, sha256_file_len as sha256_file};

/// Whether shard `want` is done in `dir`: `Ok(Some(manifest))` when its manifest matches and
/// its output has the recorded size and sha256; `Ok(None)` when it must be (re)done (no
/// manifest, or an output that is missing or changed); an error when the folder holds this
/// shard from another run (another input, model or options), which must not be mixed.
pub fn done(dir: &Path, want: &RunId) -> Result<Option<Manifest>> {
    let path = want.spec.manifest_path(dir);
    if !path.exists() {
        return Ok(None);
    }
    let m = Manifest::read(&path)?;
    if let Some(why) = m.differs_from(want) {
        bail!(
            "{} belongs to another run: {why}. Give another --out-dir for this run, or remove that folder's shards to redo them",
            path.display()
        );
    }
    let out = dir.join(&m.output.file);
    match sha256_file(&out) {
        Ok((sha, n)) if sha == m.output.sha256 && n == m.output.bytes => Ok(Some(m)),
        Ok(_) => {
            errln!(
                "xsent embed: {} no longer matches its manifest (size or sha256): shard {} is redone",
                out.display(),
                want.spec
            );
            Ok(None)
        }
        Err(_) => {
            errln!("xsent embed: {} is missing: shard {} is redone", out.display(), want.spec);
            Ok(None)
        }
    }
}

/// A reader that hashes the bytes it hands out (through `BufRead::consume` and `Read::read`).
pub struct HashingReader<R> {
    inner: R,
    hash: Sha256,
}

impl<R: BufRead> HashingReader<R> {
    pub fn new(inner: R) -> Self {
        Self { inner, hash: Sha256::new() }
    }

    pub fn digest(&self) -> String {
        hex(&self.hash.clone().finalize())
    }
}

impl<R: BufRead> Read for HashingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hash.update(&buf[..n]);
        Ok(n)
    }
}

impl<R: BufRead> BufRead for HashingReader<R> {
    fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
        self.inner.fill_buf()
    }

    fn consume(&mut self, amt: usize) {
        if let Ok(b) = self.inner.fill_buf() {
            self.hash.update(&b[..amt.min(b.len())]);
        }
        self.inner.consume(amt);
    }
}

/// The manifests of `dir`, checked for a merge: one run's shards 0..N, all present and complete,
/// their byte ranges contiguous over the whole input. Returns them in shard order.
pub fn manifests_for_merge(dir: &Path) -> Result<Vec<Manifest>> {
    ensure!(dir.is_dir(), "--merge {}: no such folder (give the --out-dir of the sharded run)", dir.display());
    let mut found: Vec<(PathBuf, Manifest)> = Vec::new();
    for e in std::fs::read_dir(dir).with_context(|| format!("cannot list {}", dir.display()))? {
        let path = e?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        if name.starts_with("shard-") && name.ends_with(".manifest.json") {
            let m = Manifest::read(&path)?;
            ensure!(
                path.file_name() == ShardSpec { index: m.shard, count: m.shards }.manifest_path(dir).file_name(),
                "{} names another shard than the one it describes ({}/{})",
                path.display(),
                m.shard,
                m.shards
            );
            found.push((path, m));
        }
    }
    ensure!(!found.is_empty(), "--merge {}: no shard manifests (shard-*.manifest.json) there", dir.display());
    found.sort_by_key(|(_, m)| (m.shards, m.shard));
    let n = found[0].1.shards;
    if let Some((p, m)) = found.iter().find(|(_, m)| m.shards != n) {
        bail!(
            "{} holds shards of different runs: {} is one of {} shards, {} one of {n}",
            dir.display(),
            p.display(),
            m.shards,
            found[0].0.display()
        );
    }
    // `found` is sorted and each manifest names its own shard, so the missing count is n minus
    // the distinct shards found; only the first ten are listed (n may be up to 2^32 - 1: a list
    // of every missing one took memory in proportion, 6 GB at 10^8).
    let have: std::collections::BTreeSet<u32> = found.iter().map(|(_, m)| m.shard).filter(|&i| i < n).collect();
    let missing_count = u64::from(n) - have.len() as u64;
    if missing_count > 0 {
        // The gaps between the shards found, walked in order: time and memory follow the
        // manifests, not n.
        let mut first = Vec::new();
        let mut next = 0u32;
        for &i in have.iter().chain(std::iter::once(&n)) {
            first.extend((next..i).take(10 - first.len()).map(|j| format!("{j}/{n}")));
            next = i.saturating_add(1);
            if first.len() == 10 {
                break;
            }
        }
        let shown = if missing_count > 10 {
            format!("{} … ({missing_count} in all)", first.join(", "))
        } else {
            first.join(", ")
        };
        bail!("{}: shard {shown} of {n} not finished (no manifest): run `xsent embed --shard i/{n}` for each with the same options, then merge", dir.display());
    }
    let first = found[0].1.clone();
    let want = RunId {
        spec: ShardSpec { index: 0, count: n },
        input: first.input.clone(),
        model: first.model.clone(),
        options: first.options.clone(),
    };
    let mut expect_start = 0u64;
    let mut out = Vec::with_capacity(found.len());
    for (path, m) in found {
        let as_run = RunId { spec: ShardSpec { index: m.shard, count: n }, ..want.clone() };
        if let Some(why) = m.differs_from(&as_run) {
            bail!("{} is not of the same run as shard 0/{n}: {why}", path.display());
        }
        ensure!(
            m.bytes[0] == expect_start && m.bytes[0] <= m.bytes[1],
            "{}: shard {}/{n} covers bytes {}..{}, but the shards before it end at byte {expect_start}",
            path.display(),
            m.shard,
            m.bytes[0],
            m.bytes[1]
        );
        ensure!(
            m.output.dim == first.output.dim && m.output.format == first.output.format,
            "{}: another format or dimension than shard 0",
            path.display()
        );
        // What a hand-edited manifest could change and the output's sha256 would not catch:
        // the version, the output's name (another shard's file, or one outside DIR), and for
        // f32 the rows (npy's are checked against the header, jsonl's as the lines are copied).
        ensure!(
            m.xsent_shard_manifest == MANIFEST_VERSION,
            "{}: manifest version {}, this xsent reads version {MANIFEST_VERSION}: run that shard again",
            path.display(),
            m.xsent_shard_manifest
        );
        let stem = ShardSpec { index: m.shard, count: n }.stem();
        let want_file = format!("{stem}.{}", m.output.format);
        ensure!(
            m.output.file == want_file,
            "{}: its output is {:?}, but shard {}/{n}'s is {want_file:?} in the same folder: run that shard again",
            path.display(),
            m.output.file,
            m.shard
        );
        if m.output.format == "f32" {
            ensure!(
                (m.output.dim as u64).checked_mul(4).and_then(|row| m.rows.checked_mul(row)) == Some(m.output.bytes),
                "{}: {} rows of {} floats are not the {} bytes it records: run that shard again",
                path.display(),
                m.rows,
                m.output.dim,
                m.output.bytes
            );
        }
        expect_start = m.bytes[1];
        out.push(m);
    }
    ensure!(
        expect_start == first.input.size,
        "the shards end at byte {expect_start}, but the input {} has {} bytes",
        first.input.path,
        first.input.size
    );
    Ok(out)
}

/// Join the shards' outputs (`manifests`, from [`manifests_for_merge`]) in order into `out`,
/// checking each file's size and sha256 against its manifest as it is read; returns the rows.
/// npy shards are joined under one header for all rows.
pub fn join(dir: &Path, manifests: &[Manifest], out: &mut dyn std::io::Write) -> Result<u64> {
    let rows: u64 = manifests.iter().map(|m| m.rows).sum();
    let Some(first) = manifests.first() else { return Ok(0) };
    let npy = first.output.format == "npy";
    if npy {
        out.write_all(&crate::io::npy::npy_header(Some(rows), first.output.dim))?;
    }
    for m in manifests {
        let path = dir.join(&m.output.file);
        let f = std::fs::File::open(&path)
            .with_context(|| format!("cannot open {} (shard {}/{})", path.display(), m.shard, m.shards))?;
        let mut r = HashingReader::new(std::io::BufReader::with_capacity(1 << 20, f));
        let mut header_bytes = 0;
        if npy {
            let (hrows, dim, header) = crate::io::npy::read_npy_header(&mut r)
                .with_context(|| format!("{} is not a finished .npy file", path.display()))?;
            header_bytes = header;
            ensure!(
                hrows == m.rows && dim == m.output.dim,
                "{}: its header says {hrows} × {dim}, its manifest {} × {}",
                path.display(),
                m.rows,
                m.output.dim
            );
        }
        let mut lines = NewlineCounter { inner: &mut *out, newlines: 0 };
        let body = std::io::copy(&mut r, &mut lines).with_context(|| format!("cannot copy {}", path.display()))?;
        let newlines = lines.newlines;
        let sha = r.digest();
        let total = body + header_bytes;
        ensure!(
            total == m.output.bytes && sha == m.output.sha256,
            "{} has changed since shard {}/{} wrote it ({total} bytes, sha256 {}; its manifest says {} bytes, {}): run that shard again",
            path.display(),
            m.shard,
            m.shards,
            short(&sha),
            m.output.bytes,
            short(&m.output.sha256)
        );
        // A JSON-lines shard holds one line per row (its manifest's rows could be edited).
        ensure!(
            m.output.format != "jsonl" || newlines == m.rows,
            "{}: {newlines} lines, but its manifest says {} rows: run that shard again",
            path.display(),
            m.rows
        );
    }
    Ok(rows)
}

/// A writer that counts the newlines passing through it.
struct NewlineCounter<'a> {
    inner: &'a mut dyn std::io::Write,
    newlines: u64,
}

impl std::io::Write for NewlineCounter<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.newlines += buf[..n].iter().filter(|&&b| b == b'\n').count() as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn shard_specs_parse_with_clear_errors() {
        assert_eq!("3/8".parse::<ShardSpec>().unwrap(), ShardSpec { index: 3, count: 8 });
        assert!("8/8".parse::<ShardSpec>().unwrap_err().contains("0..=7"));
        assert!("0/0".parse::<ShardSpec>().unwrap_err().contains("at least 1"));
        assert!("x".parse::<ShardSpec>().unwrap_err().contains("give i/N"));
        assert_eq!(ShardSpec { index: 3, count: 8 }.stem(), "shard-00003-of-00008");
    }

    /// An edited manifest's hash of multi-byte characters is cut at a character (it panicked
    /// at byte 12).
    #[test]
    fn short_hashes_cut_at_characters() {
        assert_eq!(short("0123456789abcdef"), "0123456789ab");
        assert_eq!(short("abc"), "abc");
        let odd = format!("a{}", "é".repeat(20));
        assert_eq!(short(&odd), format!("a{}", "é".repeat(11)));
    }

    /// Shards tile the file at line starts, each range starts on a span boundary's line, and
    /// more shards than spans leave some empty.
    #[test]
    fn byte_ranges_tile_the_file_at_line_starts() {
        let dir = tempfile::tempdir().unwrap();
        let text =
            b"alpha\r\n\nbeta gamma delta\nx\n\n\nlonger line here, much longer than a window\nlast without newline";
        let path = dir.path().join("t.txt");
        std::fs::File::create(&path).unwrap().write_all(text).unwrap();
        let size = text.len() as u64;
        let starts: Vec<u64> = std::iter::once(0)
            .chain(text.iter().enumerate().filter(|(_, &c)| c == b'\n').map(|(i, _)| i as u64 + 1))
            .collect();
        for window in [1u64, 3, 7, 16, 1000] {
            for n in [1u32, 2, 3, 5, 40, 200] {
                let mut f = std::fs::File::open(&path).unwrap();
                let mut at = 0;
                for i in 0..n {
                    let (s, e) = byte_range(&mut f, size, ShardSpec { index: i, count: n }, window).unwrap();
                    assert_eq!(s, at, "window {window}, {i}/{n}");
                    assert!(s == size || starts.contains(&s), "{s} is not a line start");
                    // The start is the first line start at or after the shard's span boundary.
                    let spans = size.div_ceil(window) as u128;
                    let cut = ((i as u128 * spans / n as u128) as u64 * window).min(size);
                    assert_eq!(s, starts.iter().copied().find(|&x| x >= cut).unwrap_or(size));
                    at = e;
                }
                assert_eq!(at, size);
            }
        }
        let empty = dir.path().join("e.txt");
        std::fs::File::create(&empty).unwrap();
        let mut f = std::fs::File::open(&empty).unwrap();
        assert_eq!(byte_range(&mut f, 0, ShardSpec { index: 2, count: 3 }, 10).unwrap(), (0, 0));
    }

    #[test]
    fn hashing_reader_hashes_what_is_consumed() {
        let data = b"one\ntwo\nthree";
        let mut r = HashingReader::new(std::io::BufReader::with_capacity(3, &data[..]));
        let mut line = Vec::new();
        while r.read_until(b'\n', &mut line).unwrap() > 0 {}
        assert_eq!(line, data);
        assert_eq!(r.digest(), hex(&Sha256::digest(data)));
    }
}
