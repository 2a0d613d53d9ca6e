//! Parallel text for training: TSV pairs, two line-aligned files, and pairs cut from the XNLI
//! files (row i of `{split}-{lang}.tsv` is the same premise/hypothesis in all 15 languages).
//! Files ending in `.gz` are read through gzip. Misaligned inputs are errors naming both files
//! and their line counts.

use super::read_lines;
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// One translation pair.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Pair {
    pub src: String,
    pub tgt: String,
    pub src_lang: String,
    pub tgt_lang: String,
}

/// One data source of a training config (`[[data.sources]]`), as `kind` says: only that kind's
/// keys can be given (a key of another kind, or a missing one, is an error naming it when the
/// config is read, see [`SourceKeys`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "SourceKeys", into = "SourceKeys")]
pub enum Source {
    /// `kind = "tsv"`: `path`, `src<TAB>tgt` per line (further columns ignored).
    Tsv { path: PathBuf, src_lang: Option<String>, tgt_lang: Option<String>, max_pairs: Option<usize> },
    /// `kind = "aligned"`: `src` and `tgt`, two files, line i of one the translation of line i
    /// of the other.
    Aligned { src: PathBuf, tgt: PathBuf, src_lang: Option<String>, tgt_lang: Option<String>, max_pairs: Option<usize> },
    /// `kind = "xnli"`: `dir` with `{split}-{lang}.tsv`: `pivot` paired with each of `langs`,
    /// premises and hypotheses of the `splits`.
    Xnli { dir: PathBuf, langs: Vec<String>, splits: Vec<String>, pivot: String, max_pairs: Option<usize> },
}

/// The `kind` key of a source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SourceKind {
    Tsv,
    Aligned,
    Xnli,
}

impl SourceKind {
    /// The name a config gives it.
    pub fn name(self) -> &'static str {
        match self {
            SourceKind::Tsv => "tsv",
            SourceKind::Aligned => "aligned",
            SourceKind::Xnli => "xnli",
        }
    }
}

/// A source as a config writes it: `kind` and every key any kind reads. [`Source`] is read
/// through it, so that a key of another kind or a missing one gets an error that says which
/// (serde's own would say "unknown field"), and written through it, so that a run's config
/// keeps the layout it always had (`splits` and `pivot` written out for every kind).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceKeys {
    pub kind: SourceKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub src: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tgt: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dir: Option<PathBuf>,
    /// Language codes of `src` / `tgt` (tsv, aligned); for xnli `pivot` and `langs`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub src_lang: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tgt_lang: Option<String>,
    #[serde(default = "default_splits")]
    pub splits: Vec<String>,
    #[serde(default = "default_pivot")]
    pub pivot: String,
    #[serde(default)]
    pub langs: Vec<String>,
    /// Use at most this many pairs of the source (the first ones).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_pairs: Option<usize>,
}

/// `splits` of an xnli source when the config gives none.
pub fn default_splits() -> Vec<String> {
    vec!["dev".into(), "test".into()]
}

/// `pivot` of an xnli source when the config gives none.
pub fn default_pivot() -> String {
    "en".into()
}

impl TryFrom<SourceKeys> for Source {
    type Error = anyhow::Error;

    fn try_from(k: SourceKeys) -> Result<Self> {
        // A key of another kind (an xnli source given `path`, say) would be silently unread.
        let set = [
            ("path", k.path.is_some()),
            ("src", k.src.is_some()),
            ("tgt", k.tgt.is_some()),
            ("dir", k.dir.is_some()),
            ("src_lang", k.src_lang.is_some()),
            ("tgt_lang", k.tgt_lang.is_some()),
            ("langs", !k.langs.is_empty()),
        ];
        let reads: &[&str] = match k.kind {
            SourceKind::Tsv => &["path", "src_lang", "tgt_lang"],
            SourceKind::Aligned => &["src", "tgt", "src_lang", "tgt_lang"],
            SourceKind::Xnli => &["dir", "langs", "splits", "pivot"],
        };
        let mut unread: Vec<&str> =
            set.iter().filter(|(key, on)| *on && !reads.contains(key)).map(|(key, _)| *key).collect();
        // `splits` and `pivot` have defaults (written out in a run's config), so only a value
        // other than the default shows that they were set.
        if k.kind != SourceKind::Xnli {
            unread.extend(
                [("splits", k.splits != default_splits()), ("pivot", k.pivot != default_pivot())]
                    .iter()
                    .filter(|(_, on)| *on)
                    .map(|(key, _)| *key),
            );
        }
        if !unread.is_empty() {
            bail!(
                "kind = \"{}\" does not read {}: remove {} (it reads {})",
                k.kind.name(),
                unread.join(", "),
                if unread.len() == 1 { "it" } else { "them" },
                reads.join(", ")
            );
        }
        let need = |v: Option<PathBuf>, key: &str| -> Result<PathBuf> {
            v.ok_or_else(|| anyhow::anyhow!("kind = \"{}\" needs `{key}`", k.kind.name()))
        };
        let source = match k.kind {
            SourceKind::Tsv => Source::Tsv {
                path: need(k.path, "path")?,
                src_lang: k.src_lang,
                tgt_lang: k.tgt_lang,
                max_pairs: k.max_pairs,
            },
            SourceKind::Aligned => Source::Aligned {
                src: need(k.src, "src")?,
                tgt: need(k.tgt, "tgt")?,
                src_lang: k.src_lang,
                tgt_lang: k.tgt_lang,
                max_pairs: k.max_pairs,
            },
            SourceKind::Xnli => Source::Xnli {
                dir: need(k.dir, "dir")?,
                langs: k.langs,
                splits: k.splits,
                pivot: k.pivot,
                max_pairs: k.max_pairs,
            },
        };
        source.check()?;
        Ok(source)
    }
}

impl From<Source> for SourceKeys {
    fn from(s: Source) -> Self {
        let mut k = SourceKeys {
            kind: s.kind(),
            path: None,
            src: None,
            tgt: None,
            dir: None,
            src_lang: None,
            tgt_lang: None,
            splits: default_splits(),
            pivot: default_pivot(),
            langs: Vec::new(),
            max_pairs: s.max_pairs(),
        };
        match s {
            Source::Tsv { path, src_lang, tgt_lang, .. } => {
                (k.path, k.src_lang, k.tgt_lang) = (Some(path), src_lang, tgt_lang);
            }
            Source::Aligned { src, tgt, src_lang, tgt_lang, .. } => {
                (k.src, k.tgt, k.src_lang, k.tgt_lang) = (Some(src), Some(tgt), src_lang, tgt_lang);
            }
            Source::Xnli { dir, langs, splits, pivot, .. } => {
                (k.dir, k.langs, k.splits, k.pivot) = (Some(dir), langs, splits, pivot);
            }
        }
        k
    }
}

impl Source {
    /// Its `kind`.
    pub fn kind(&self) -> SourceKind {
        match self {
            Source::Tsv { .. } => SourceKind::Tsv,
            Source::Aligned { .. } => SourceKind::Aligned,
            Source::Xnli { .. } => SourceKind::Xnli,
        }
    }

    /// `max_pairs`: read at most this many pairs (the first ones).
    pub fn max_pairs(&self) -> Option<usize> {
        match self {
            Source::Tsv { max_pairs, .. } | Source::Aligned { max_pairs, .. } | Source::Xnli { max_pairs, .. } => {
                *max_pairs
            }
        }
    }

    /// Values that would read nothing, or pair the pivot with itself.
    pub fn check(&self) -> Result<()> {
        if self.max_pairs() == Some(0) {
            bail!("max_pairs = 0 reads no pairs: leave it out to read them all");
        }
        if let Source::Xnli { langs, splits, pivot, .. } = self {
            if langs.is_empty() {
                bail!("kind = \"xnli\" needs `langs`, e.g. [\"de\", \"es\"]");
            }
            if splits.is_empty() {
                bail!("kind = \"xnli\" needs `splits`, e.g. [\"dev\", \"test\"] (the default)");
            }
            if langs.contains(pivot) {
                bail!(
                    "`langs` lists the pivot {pivot:?}: its pairs would be each sentence with itself; list only the languages paired with {pivot:?}"
                );
            }
        }
        Ok(())
    }

    /// Read the pairs of this source.
    pub fn read(&self) -> Result<Vec<Pair>> {
        self.read_counted().map(|(pairs, _)| pairs)
    }

    /// [`Source::read`], and for `tsv` and `aligned` how many lines were read and skipped.
    pub fn read_counted(&self) -> Result<(Vec<Pair>, Option<LineCounts>)> {
        self.check()?;
        let lang = |l: &Option<String>, d: &str| l.clone().unwrap_or_else(|| d.to_string());
        let (mut pairs, counts) = match self {
            Source::Tsv { path, src_lang, tgt_lang, .. } => {
                let (p, c) = tsv_pairs(path, &lang(src_lang, "src"), &lang(tgt_lang, "tgt"))?;
                (p, Some(c))
            }
            Source::Aligned { src, tgt, src_lang, tgt_lang, .. } => {
                let (p, c) = aligned_pairs(src, tgt, &lang(src_lang, "src"), &lang(tgt_lang, "tgt"))?;
                (p, Some(c))
            }
            Source::Xnli { dir, langs, splits, pivot, .. } => {
                let mut all = Vec::new();
                for lang in langs {
                    for split in splits {
                        all.extend(xnli_pairs(dir, split, pivot, lang)?);
                    }
                }
                if all.is_empty() {
                    bail!(
                        "{}: the {}-{{{}}}.tsv files of splits {:?} have no pairs (no row where the pivot and a language both have text)",
                        dir.display(),
                        pivot,
                        langs.join(","),
                        splits
                    );
                }
                (all, None)
            }
        };
        if let Some(n) = self.max_pairs() {
            pairs.truncate(n);
        }
        Ok((pairs, counts))
    }

    /// The files it reads, for messages: `path`, `src, tgt`, or `dir`.
    pub fn files(&self) -> String {
        match self {
            Source::Tsv { path, .. } => path.display().to_string(),
            Source::Aligned { src, tgt, .. } => format!("{}, {}", src.display(), tgt.display()),
            Source::Xnli { dir, .. } => dir.display().to_string(),
        }
    }
}

/// The lines of a `tsv` source's file (or an `aligned` source's line pairs), and how many of
/// them gave no pair (blank, or a side empty).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LineCounts {
    pub lines: usize,
    pub skipped: usize,
}

/// The line a run prints for source `name` (`data.sources[0]`) when lines were skipped.
pub fn skipped_note(name: &str, source: &Source, counts: LineCounts) -> Option<String> {
    (counts.skipped > 0).then(|| {
        format!(
            "{name} ({}): {} of {} lines skipped (blank, or a side empty)",
            source.files(),
            counts.skipped,
            counts.lines
        )
    })
}

/// Read every source, dropping exact duplicate pairs (XNLI repeats each premise three times).
/// A `tsv` or `aligned` source with lines skipped gets a line on stderr that counts them.
pub fn read_sources(sources: &[Source], key: &str) -> Result<Vec<Pair>> {
    if sources.is_empty() {
        bail!("no data in {key}: add [[{key}]] to the config (kind = \"tsv\", \"aligned\" or \"xnli\")");
    }
    // A 128-bit digest per pair, not a copy of its text (that doubled the memory the pairs take).
    let mut seen: HashSet<[u8; 16]> = HashSet::new();
    let mut out = Vec::new();
    for (i, s) in sources.iter().enumerate() {
        let name = format!("{key}[{i}]");
        let (pairs, counts) = s.read_counted().with_context(|| name.clone())?;
        if let Some(note) = counts.and_then(|c| skipped_note(&name, s, c)) {
            errln!("{}: {note}", crate::log::command());
        }
        for p in pairs {
            if seen.insert(pair_key(&p.src, &p.tgt)) {
                out.push(p);
            }
        }
    }
    Ok(out)
}

/// What [`read_sources`] tells pairs apart by: the first 16 bytes of the sha256 of the pair (the
/// source side's length first, so that no two pairs give the same bytes).
fn pair_key(src: &str, tgt: &str) -> [u8; 16] {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    h.update((src.len() as u64).to_le_bytes());
    h.update(src.as_bytes());
    h.update(tgt.as_bytes());
    let mut key = [0u8; 16];
    key.copy_from_slice(&h.finalize()[..16]);
    key
}

/// `src<TAB>tgt[<TAB>…]` lines. Empty lines, and pairs with an empty side (as in
/// [`read_aligned`]), are skipped; a line without a tab is an error.
pub fn read_tsv_pairs(path: &Path, src_lang: &str, tgt_lang: &str) -> Result<Vec<Pair>> {
    tsv_pairs(path, src_lang, tgt_lang).map(|(pairs, _)| pairs)
}

/// [`read_tsv_pairs`], and how many lines were read and skipped.
fn tsv_pairs(path: &Path, src_lang: &str, tgt_lang: &str) -> Result<(Vec<Pair>, LineCounts)> {
    // Streamed: only the pairs are kept, not the file's lines besides them.
    let mut out = Vec::new();
    let mut counts = LineCounts { lines: 0, skipped: 0 };
    super::each_line(path, usize::MAX, |n, line| {
        let line = line.unwrap_or_default();
        counts.lines += 1;
        if line.trim().is_empty() {
            counts.skipped += 1;
            return Ok(());
        }
        let mut cols = line.split('\t');
        let (Some(a), Some(b)) = (cols.next(), cols.next()) else {
            bail!("{}: line {n} has no tab; expected `source<TAB>target`", path.display());
        };
        if a.trim().is_empty() || b.trim().is_empty() {
            counts.skipped += 1;
            return Ok(());
        }
        out.push(Pair { src: a.to_string(), tgt: b.to_string(), src_lang: src_lang.into(), tgt_lang: tgt_lang.into() });
        Ok(())
    })?;
    if counts.lines == 0 {
        bail!("{} is empty", path.display());
    }
    if out.is_empty() {
        bail!("{} has no pairs", path.display());
    }
    Ok((out, counts))
}

/// Two line-aligned files. Pairs where either side is empty are skipped.
pub fn read_aligned(src: &Path, tgt: &Path, src_lang: &str, tgt_lang: &str) -> Result<Vec<Pair>> {
    aligned_pairs(src, tgt, src_lang, tgt_lang).map(|(pairs, _)| pairs)
}

/// [`read_aligned`], and how many line pairs were read and skipped.
fn aligned_pairs(src: &Path, tgt: &Path, src_lang: &str, tgt_lang: &str) -> Result<(Vec<Pair>, LineCounts)> {
    let a = read_lines(src)?;
    let b = read_lines(tgt)?;
    if a.len() != b.len() {
        bail!(
            "{} has {} lines but {} has {}: line-aligned files must have the same number of lines",
            src.display(),
            a.len(),
            tgt.display(),
            b.len()
        );
    }
    let lines = a.len();
    let out: Vec<Pair> = a
        .into_iter()
        .zip(b)
        .filter(|(x, y)| !x.trim().is_empty() && !y.trim().is_empty())
        .map(|(x, y)| Pair { src: x, tgt: y, src_lang: src_lang.into(), tgt_lang: tgt_lang.into() })
        .collect();
    if out.is_empty() {
        bail!("{} and {} have no pairs (no line where both files have text)", src.display(), tgt.display());
    }
    let skipped = lines - out.len();
    Ok((out, LineCounts { lines, skipped }))
}

/// A line of an XNLI file that holds no row: empty or whitespace, without a tab.
fn blank_row(line: &str) -> bool {
    !line.contains('\t') && line.trim().is_empty()
}

/// The file read for `path` (`path.gz` when only that exists; `path` when both do) and its
/// premise/hypothesis columns. Blank lines at its end are left out; one elsewhere is an error,
/// since rows are matched across the language files by line.
fn xnli_rows(path: &Path) -> Result<(PathBuf, Vec<(String, String)>)> {
    let Some(file) = super::plain_or_gz(path) else {
        bail!(
            "{} does not exist (nor {}.gz): the XNLI directory should hold {{split}}-{{lang}}.tsv files, \
             or .tsv.gz ones (e.g. dev-de.tsv, test-de.tsv.gz)",
            path.display(),
            path.display()
        );
    };
    let mut lines = read_lines(&file)?;
    while lines.last().is_some_and(|l| blank_row(l)) {
        lines.pop();
    }
    let rows = lines
        .into_iter()
        .enumerate()
        .map(|(i, l)| {
            if blank_row(&l) {
                bail!(
                    "{}: line {} is blank; XNLI rows are matched across the language files by line, so a blank line \
                     cannot be skipped: remove the line if it is extra, or restore the row it replaced",
                    file.display(),
                    i + 1
                );
            }
            let mut c = l.split('\t');
            match (c.next(), c.next()) {
                (Some(p), Some(h)) => Ok((p.to_string(), h.to_string())),
                _ => {
                    bail!("{}: line {} has no tab; expected premise<TAB>hypothesis[<TAB>label]", file.display(), i + 1)
                }
            }
        })
        .collect::<Result<_>>()?;
    Ok((file, rows))
}

/// Rows of `{split}-{lang}.tsv` (or `.tsv.gz`) in every language given, checked to have the
/// same count.
pub fn xnli_parallel_rows(dir: &Path, split: &str, langs: &[&str]) -> Result<Vec<Vec<(String, String)>>> {
    let (files, rows): (Vec<PathBuf>, Vec<Vec<(String, String)>>) = langs
        .iter()
        .map(|l| xnli_rows(&dir.join(format!("{split}-{l}.tsv"))))
        .collect::<Result<Vec<_>>>()?
        .into_iter()
        .unzip();
    for (f, r) in files.iter().zip(&rows).skip(1) {
        if r.len() != rows[0].len() {
            bail!(
                "{} has {} rows but {} has {}: XNLI files of one split must be row-aligned",
                files[0].display(),
                rows[0].len(),
                f.display(),
                r.len()
            );
        }
    }
    Ok(rows)
}

/// Pairs (pivot, lang) from the premises and hypotheses of one XNLI split.
pub fn xnli_pairs(dir: &Path, split: &str, pivot: &str, lang: &str) -> Result<Vec<Pair>> {
    let rows = xnli_parallel_rows(dir, split, &[pivot, lang])?;
    let mut out = Vec::with_capacity(rows[0].len() * 2);
    for ((p0, h0), (p1, h1)) in rows[0].iter().zip(&rows[1]) {
        for (a, b) in [(p0, p1), (h0, h1)] {
            if !a.trim().is_empty() && !b.trim().is_empty() {
                out.push(Pair { src: a.clone(), tgt: b.clone(), src_lang: pivot.into(), tgt_lang: lang.into() });
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn readers_and_errors() {
        let d = tempfile::tempdir().unwrap();
        let tsv = write(d.path(), "p.tsv", "a\tA\n\nb\tB\textra\r\n\t\n c \t \n");
        let p = read_tsv_pairs(&tsv, "en", "de").unwrap();
        assert_eq!(p.len(), 2);
        assert_eq!((p[1].src.as_str(), p[1].tgt.as_str()), ("b", "B"));
        let bad = write(d.path(), "bad.tsv", "a\tA\nno tab here\n");
        let e = read_tsv_pairs(&bad, "en", "de").unwrap_err().to_string();
        assert!(e.contains("bad.tsv") && e.contains("line 2"), "{e}");

        let a = write(d.path(), "a.txt", "x\ny\nz\n");
        let b = write(d.path(), "b.txt", "X\nY\n");
        let e = read_aligned(&a, &b, "en", "de").unwrap_err().to_string();
        assert!(e.contains("a.txt") && e.contains("3 lines") && e.contains("b.txt") && e.contains("has 2"), "{e}");

        // gzip
        let gz = d.path().join("c.txt.gz");
        let mut enc = flate2::write::GzEncoder::new(std::fs::File::create(&gz).unwrap(), flate2::Compression::fast());
        std::io::Write::write_all(&mut enc, b"X\nY\nZ\n").unwrap();
        enc.finish().unwrap();
        let p = read_aligned(&a, &gz, "en", "de").unwrap();
        assert_eq!(p[2].tgt, "Z");
        // Files with no line where both sides have text are an error naming both.
        let blank = write(d.path(), "blank.txt", "\n \n\n");
        let e = read_aligned(&a, &blank, "en", "de").unwrap_err().to_string();
        assert!(e.contains("a.txt") && e.contains("blank.txt") && e.contains("no pairs"), "{e}");
    }

    #[test]
    fn xnli_pairs_and_dedup() {
        let d = tempfile::tempdir().unwrap();
        write(d.path(), "dev-en.tsv", "P1\tH1\tneutral\nP1\tH2\tcontradiction\n");
        write(d.path(), "dev-de.tsv", "p1\th1\tneutral\np1\th2\tcontradiction\n");
        write(d.path(), "dev-fr.tsv", "p1\th1\tneutral\n");
        let p = xnli_pairs(d.path(), "dev", "en", "de").unwrap();
        assert_eq!(p.len(), 4);
        // A language with no text: no pairs from it, which is an error only when the whole
        // source yields none.
        write(d.path(), "dev-sw.tsv", "\t\tneutral\n \t\tcontradiction\n");
        assert!(xnli_pairs(d.path(), "dev", "en", "sw").unwrap().is_empty());
        let src = Source::Xnli {
            dir: d.path().to_path_buf(),
            splits: vec!["dev".into()],
            pivot: "en".into(),
            langs: vec!["de".into()],
            max_pairs: None,
        };
        let xnli = |langs: &[&str], splits: &[&str]| Source::Xnli {
            dir: d.path().to_path_buf(),
            splits: splits.iter().map(|s| s.to_string()).collect(),
            pivot: "en".into(),
            langs: langs.iter().map(|s| s.to_string()).collect(),
            max_pairs: None,
        };
        let all = read_sources(std::slice::from_ref(&src), "data.sources").unwrap();
        assert_eq!(all.len(), 3, "the repeated premise pair is kept once");
        let e = read_sources(&[xnli(&["fr"], &["dev"])], "data.sources").unwrap_err();
        let e = format!("{e:#}");
        assert!(e.contains("dev-en.tsv has 2 rows") && e.contains("dev-fr.tsv has 1"), "{e}");
        let e = format!("{:#}", read_sources(&[xnli(&["de"], &["train"])], "data.sources").unwrap_err());
        assert!(e.contains("train-en.tsv does not exist"), "{e}");
        // A language with no text among others still gives the others' pairs; alone, an error.
        let both = read_sources(&[xnli(&["de", "sw"], &["dev"])], "data.sources").unwrap();
        assert_eq!(both.len(), 3);
        let e = format!("{:#}", read_sources(&[xnli(&["sw"], &["dev"])], "data.sources").unwrap_err());
        assert!(e.contains("data.sources[0]") && e.contains("en-{sw}.tsv") && e.contains("no pairs"), "{e}");
        // Values that would read nothing, or pair English with itself, are refused when read.
        for (bad, want) in [
            (xnli(&["de"], &[]), "kind = \"xnli\" needs `splits`"),
            (xnli(&["de", "en"], &["dev"]), "`langs` lists the pivot \"en\""),
            (
                Source::Tsv { path: "p.tsv".into(), src_lang: None, tgt_lang: None, max_pairs: Some(0) },
                "max_pairs = 0 reads no pairs",
            ),
        ] {
            let e = format!("{:#}", read_sources(&[bad], "data.sources").unwrap_err());
            assert!(e.contains(want), "{e}");
        }
    }

    fn write_gz(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        let mut enc = flate2::write::GzEncoder::new(std::fs::File::create(&p).unwrap(), flate2::Compression::fast());
        std::io::Write::write_all(&mut enc, text.as_bytes()).unwrap();
        enc.finish().unwrap();
        p
    }

    fn xnli_source(dir: &Path, langs: &[&str]) -> Source {
        Source::Xnli {
            dir: dir.to_path_buf(),
            splits: vec!["dev".into()],
            pivot: "en".into(),
            langs: langs.iter().map(|s| s.to_string()).collect(),
            max_pairs: None,
        }
    }

    /// An XNLI file may be kept as `{split}-{lang}.tsv.gz`; with both forms there the plain one
    /// is read. A missing file's error says that `.tsv.gz` is taken too.
    #[test]
    fn xnli_files_may_be_gzip_compressed() {
        let d = tempfile::tempdir().unwrap();
        let (en, de) = ("P1\tH1\tneutral\nP2\tH2\tneutral\n", "p1\th1\tneutral\np2\th2\tneutral\n");
        write(d.path(), "dev-en.tsv", en);
        write(d.path(), "dev-de.tsv", de);
        let plain = read_sources(&[xnli_source(d.path(), &["de"])], "data.sources").unwrap();
        assert_eq!(plain.len(), 4);
        let g = tempfile::tempdir().unwrap();
        write_gz(g.path(), "dev-en.tsv.gz", en);
        write(g.path(), "dev-de.tsv", de); // one plain, one compressed
        assert_eq!(read_sources(&[xnli_source(g.path(), &["de"])], "data.sources").unwrap(), plain);
        assert_eq!(xnli_parallel_rows(g.path(), "dev", &["en", "de"]).unwrap()[0][1], ("P2".into(), "H2".into()));
        // Both forms: the plain file is read.
        write_gz(g.path(), "dev-de.tsv.gz", "x\ty\tneutral\n");
        assert_eq!(read_sources(&[xnli_source(g.path(), &["de"])], "data.sources").unwrap(), plain);
        // A row count mismatch names the file read.
        write_gz(g.path(), "dev-fr.tsv.gz", "q1\tg1\tneutral\n");
        let e = format!("{:#}", read_sources(&[xnli_source(g.path(), &["fr"])], "data.sources").unwrap_err());
        assert!(e.contains("dev-en.tsv.gz has 2 rows") && e.contains("dev-fr.tsv.gz has 1"), "{e}");
        let e = format!("{:#}", read_sources(&[xnli_source(g.path(), &["es"])], "data.sources").unwrap_err());
        assert!(e.contains("dev-es.tsv does not exist (nor ") && e.contains("dev-es.tsv.gz)"), "{e}");
        assert!(e.contains("or .tsv.gz ones"), "{e}");
    }

    /// Blank lines at the end of an XNLI file are left out; one elsewhere is an error that names
    /// it and says why it cannot be skipped.
    #[test]
    fn xnli_blank_lines_end_a_file_or_are_an_error() {
        let d = tempfile::tempdir().unwrap();
        write(d.path(), "dev-en.tsv", "P1\tH1\tneutral\nP2\tH2\tneutral\n\n \n");
        write(d.path(), "dev-de.tsv", "p1\th1\tneutral\np2\th2\tneutral\n");
        let rows = xnli_parallel_rows(d.path(), "dev", &["en", "de"]).unwrap();
        assert_eq!((rows[0].len(), rows[1].len()), (2, 2));
        assert_eq!(read_sources(&[xnli_source(d.path(), &["de"])], "data.sources").unwrap().len(), 4);
        // A row of empty columns (tabs only) is still a row.
        write(d.path(), "dev-sw.tsv", "\t\tneutral\np\th\tneutral\n\t\n");
        let e = format!("{:#}", xnli_parallel_rows(d.path(), "dev", &["en", "sw"]).unwrap_err());
        assert!(e.contains("dev-sw.tsv has 3"), "{e}");
        // Blank in the middle: an error naming the line.
        write(d.path(), "dev-de.tsv", "p1\th1\tneutral\n  \np2\th2\tneutral\n");
        let e = format!("{:#}", read_sources(&[xnli_source(d.path(), &["de"])], "data.sources").unwrap_err());
        assert!(e.contains("dev-de.tsv: line 2 is blank"), "{e}");
        assert!(e.contains("matched across the language files by line") && e.contains("cannot be skipped"), "{e}");
        // A line with text but no tab is still "no tab".
        write(d.path(), "dev-de.tsv", "p1\th1\tneutral\nno tab\n");
        let e = format!("{:#}", read_sources(&[xnli_source(d.path(), &["de"])], "data.sources").unwrap_err());
        assert!(e.contains("dev-de.tsv: line 2 has no tab"), "{e}");
    }

    /// `tsv` and `aligned` sources count the lines they skip (blank, or a side empty); the note
    /// names the source, its files and both counts, and there is none when nothing was skipped.
    #[test]
    fn skipped_lines_are_counted() {
        let d = tempfile::tempdir().unwrap();
        let tsv = write(d.path(), "p.tsv", "a\tA\n\n   \n\t\nx\t\n\ty\n \t \nb\tB\textra\n");
        let src = Source::Tsv { path: tsv.clone(), src_lang: None, tgt_lang: None, max_pairs: Some(1) };
        let (pairs, counts) = src.read_counted().unwrap();
        assert_eq!(pairs.len(), 1, "max_pairs cuts the pairs, not the counts");
        assert_eq!(counts, Some(LineCounts { lines: 8, skipped: 6 }));
        assert_eq!(
            skipped_note("data.sources[0]", &src, counts.unwrap()).unwrap(),
            format!("data.sources[0] ({}): 6 of 8 lines skipped (blank, or a side empty)", tsv.display())
        );
        let a = write(d.path(), "a.txt", "x\n\ny\nz\n");
        let b = write(d.path(), "b.txt", "X\nY\n \nZ\n");
        let al = Source::Aligned { src: a.clone(), tgt: b.clone(), src_lang: None, tgt_lang: None, max_pairs: None };
        let (pairs, counts) = al.read_counted().unwrap();
        assert_eq!((pairs.len(), counts), (2, Some(LineCounts { lines: 4, skipped: 2 })));
        let note = skipped_note("data.val_sources[1]", &al, counts.unwrap()).unwrap();
        assert_eq!(
            note,
            format!(
                "data.val_sources[1] ({}, {}): 2 of 4 lines skipped (blank, or a side empty)",
                a.display(),
                b.display()
            )
        );
        // Nothing skipped: no note. XNLI sources are not counted.
        let clean = Source::Tsv {
            path: write(d.path(), "c.tsv", "a\tA\nb\tB\n"),
            src_lang: None,
            tgt_lang: None,
            max_pairs: None,
        };
        let (_, counts) = clean.read_counted().unwrap();
        assert_eq!(counts, Some(LineCounts { lines: 2, skipped: 0 }));
        assert!(skipped_note("data.sources[0]", &clean, counts.unwrap()).is_none());
        write(d.path(), "dev-en.tsv", "P\tH\n");
        write(d.path(), "dev-de.tsv", "p\th\n");
        assert_eq!(xnli_source(d.path(), &["de"]).read_counted().unwrap().1, None);
        // The pairs read are those `read` gives, in order.
        assert_eq!(src.read().unwrap(), src.read_counted().unwrap().0);
        assert_eq!(read_tsv_pairs(&tsv, "src", "tgt").unwrap().len(), 2);
    }

    /// A source as a config writes it: a missing key or a key of another kind is an error that
    /// names it, before anything is read; a source written out reads back the same.
    #[test]
    fn a_source_takes_only_its_kinds_keys() {
        let parse = |text: &str| -> std::result::Result<Source, String> {
            toml::from_str::<Source>(text).map_err(|e| e.to_string())
        };
        for (text, want) in [
            ("kind = \"xnli\"\ndir = \"x\"\nlangs = [\"de\"]\nsplits = []", "kind = \"xnli\" needs `splits`"),
            ("kind = \"xnli\"\ndir = \"x\"", "kind = \"xnli\" needs `langs`"),
            ("kind = \"xnli\"\ndir = \"x\"\nlangs = [\"de\", \"en\"]", "`langs` lists the pivot \"en\""),
            ("kind = \"tsv\"\npath = \"p.tsv\"\nmax_pairs = 0", "max_pairs = 0 reads no pairs"),
            ("kind = \"aligned\"\nsrc = \"a\"", "kind = \"aligned\" needs `tgt`"),
            ("kind = \"tsv\"", "kind = \"tsv\" needs `path`"),
            // A key of another kind would go unread.
            (
                "kind = \"xnli\"\ndir = \"x\"\nlangs = [\"de\"]\npath = \"p.tsv\"",
                "kind = \"xnli\" does not read path: remove it",
            ),
            (
                "kind = \"aligned\"\nsrc = \"a\"\ntgt = \"b\"\ndir = \"x\"\nlangs = [\"de\"]",
                "kind = \"aligned\" does not read dir, langs: remove them (it reads src, tgt, src_lang, tgt_lang)",
            ),
            // Keys with defaults: a value other than the default was set.
            (
                "kind = \"tsv\"\npath = \"p.tsv\"\nsplits = [\"x\"]\npivot = \"de\"",
                "kind = \"tsv\" does not read splits, pivot: remove them (it reads path, src_lang, tgt_lang)",
            ),
            ("kind = \"csv\"\npath = \"p.csv\"", "unknown variant `csv`"),
            ("kind = \"tsv\"\npath = \"p.tsv\"\nfile = \"q\"", "unknown field `file`"),
        ] {
            let e = parse(text).unwrap_err();
            assert!(e.contains(want), "{text}: {e}");
        }
        // The defaults, as a run's config writes them out for every source, are no mistake; a
        // source written and read again is the same.
        let tsv =
            parse("kind = \"tsv\"\npath = \"p.tsv\"\nsplits = [\"dev\", \"test\"]\npivot = \"en\"\nsrc_lang = \"en\"")
                .unwrap();
        assert_eq!(
            tsv,
            Source::Tsv { path: "p.tsv".into(), src_lang: Some("en".into()), tgt_lang: None, max_pairs: None }
        );
        for s in [
            tsv,
            Source::Aligned {
                src: "a".into(),
                tgt: "b".into(),
                src_lang: None,
                tgt_lang: Some("de".into()),
                max_pairs: Some(3),
            },
            Source::Xnli {
                dir: "x".into(),
                langs: vec!["de".into()],
                splits: vec!["dev".into()],
                pivot: "en".into(),
                max_pairs: None,
            },
        ] {
            let text = toml::to_string(&s).unwrap();
            assert_eq!(parse(&text).unwrap(), s, "{text}");
        }
    }
}
