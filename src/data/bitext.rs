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

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SourceKind {
    /// `path`: `src<TAB>tgt` per line (further columns ignored).
    Tsv,
    /// `src` and `tgt`: two files, line i of one the translation of line i of the other.
    Aligned,
    /// `dir` with `{split}-{lang}.tsv`: `pivot` paired with each of `langs`, premises and
    /// hypotheses of the `splits`.
    Xnli,
}

/// One data source of a training config (`[[data.sources]]`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Source {
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
    #[serde(default = "d_splits")]
    pub splits: Vec<String>,
    #[serde(default = "d_pivot")]
    pub pivot: String,
    #[serde(default)]
    pub langs: Vec<String>,
    /// Use at most this many pairs of the source (the first ones).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_pairs: Option<usize>,
}

fn d_splits() -> Vec<String> {
    vec!["dev".into(), "test".into()]
}
fn d_pivot() -> String {
    "en".into()
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

impl Source {
    pub fn validate(&self) -> Result<()> {
        let need = |v: &Option<PathBuf>, key: &str| -> Result<()> {
            if v.is_none() {
                bail!("kind = \"{}\" needs `{key}`", self.kind.name());
            }
            Ok(())
        };
        if self.max_pairs == Some(0) {
            bail!("max_pairs = 0 reads no pairs: leave it out to read them all");
        }
        // A key of another kind (an xnli source given `path`, say) would be silently unread.
        let set = [
            ("path", self.path.is_some()),
            ("src", self.src.is_some()),
            ("tgt", self.tgt.is_some()),
            ("dir", self.dir.is_some()),
            ("src_lang", self.src_lang.is_some()),
            ("tgt_lang", self.tgt_lang.is_some()),
            ("langs", !self.langs.is_empty()),
        ];
        let reads: &[&str] = match self.kind {
            SourceKind::Tsv => &["path", "src_lang", "tgt_lang"],
            SourceKind::Aligned => &["src", "tgt", "src_lang", "tgt_lang"],
            SourceKind::Xnli => &["dir", "langs", "splits", "pivot"],
        };
        let mut unread: Vec<&str> = set.iter().filter(|(k, on)| *on && !reads.contains(k)).map(|(k, _)| *k).collect();
        // `splits` and `pivot` have defaults (written out in a run's config), so only a value
        // other than the default shows that they were set.
        if self.kind != SourceKind::Xnli {
            unread.extend(
                [("splits", self.splits != d_splits()), ("pivot", self.pivot != d_pivot())]
                    .iter()
                    .filter(|(_, on)| *on)
                    .map(|(k, _)| *k),
            );
        }
        if !unread.is_empty() {
            bail!(
                "kind = \"{}\" does not read {}: remove {} (it reads {})",
                self.kind.name(),
                unread.join(", "),
                if unread.len() == 1 { "it" } else { "them" },
                reads.join(", ")
            );
        }
        match self.kind {
            SourceKind::Tsv => need(&self.path, "path"),
            SourceKind::Aligned => need(&self.src, "src").and(need(&self.tgt, "tgt")),
            SourceKind::Xnli => {
                need(&self.dir, "dir")?;
                if self.langs.is_empty() {
                    bail!("kind = \"xnli\" needs `langs`, e.g. [\"de\", \"es\"]");
                }
                if self.splits.is_empty() {
                    bail!("kind = \"xnli\" needs `splits`, e.g. [\"dev\", \"test\"] (the default)");
                }
                if self.langs.contains(&self.pivot) {
                    bail!(
                        "`langs` lists the pivot {:?}: its pairs would be each sentence with itself; list only the languages paired with {:?}",
                        self.pivot,
                        self.pivot
                    );
                }
                Ok(())
            }
        }
    }

    /// Read the pairs of this source.
    pub fn read(&self) -> Result<Vec<Pair>> {
        self.validate()?;
        let lang = |l: &Option<String>, d: &str| l.clone().unwrap_or_else(|| d.to_string());
        let mut pairs = match self.kind {
            SourceKind::Tsv => {
                read_tsv_pairs(self.path.as_ref().unwrap(), &lang(&self.src_lang, "src"), &lang(&self.tgt_lang, "tgt"))?
            }
            SourceKind::Aligned => read_aligned(
                self.src.as_ref().unwrap(),
                self.tgt.as_ref().unwrap(),
                &lang(&self.src_lang, "src"),
                &lang(&self.tgt_lang, "tgt"),
            )?,
            SourceKind::Xnli => {
                let mut all = Vec::new();
                for lang in &self.langs {
                    for split in &self.splits {
                        all.extend(xnli_pairs(self.dir.as_ref().unwrap(), split, &self.pivot, lang)?);
                    }
                }
                if all.is_empty() {
                    bail!(
                        "{}: the {}-{{{}}}.tsv files of splits {:?} have no pairs (no row where the pivot and a language both have text)",
                        self.dir.as_ref().unwrap().display(),
                        self.pivot,
                        self.langs.join(","),
                        self.splits
                    );
                }
                all
            }
        };
        if let Some(n) = self.max_pairs {
            pairs.truncate(n);
        }
        Ok(pairs)
    }
}

/// Read every source, dropping exact duplicate pairs (XNLI repeats each premise three times).
pub fn read_sources(sources: &[Source], key: &str) -> Result<Vec<Pair>> {
    if sources.is_empty() {
        bail!("no data in {key}: add [[{key}]] to the config (kind = \"tsv\", \"aligned\" or \"xnli\")");
    }
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for (i, s) in sources.iter().enumerate() {
        for p in s.read().with_context(|| format!("{key}[{i}]"))? {
            if seen.insert((p.src.clone(), p.tgt.clone())) {
                out.push(p);
            }
        }
    }
    Ok(out)
}

/// Check every source of the config list `key` (e.g. `data.sources`) without reading it; an
/// error names the entry, `key[i]`.
pub fn validate_sources(sources: &[Source], key: &str) -> Result<()> {
    for (i, s) in sources.iter().enumerate() {
        s.validate().with_context(|| format!("{key}[{i}]"))?;
    }
    Ok(())
}

/// `src<TAB>tgt[<TAB>…]` lines. Empty lines, and pairs with an empty side (as in
/// [`read_aligned`]), are skipped; a line without a tab is an error.
pub fn read_tsv_pairs(path: &Path, src_lang: &str, tgt_lang: &str) -> Result<Vec<Pair>> {
    let mut out = Vec::new();
    for (i, line) in read_lines(path)?.iter().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let mut cols = line.split('\t');
        let (Some(a), Some(b)) = (cols.next(), cols.next()) else {
            bail!("{}: line {} has no tab; expected `source<TAB>target`", path.display(), i + 1);
        };
        if a.trim().is_empty() || b.trim().is_empty() {
            continue;
        }
        out.push(Pair { src: a.to_string(), tgt: b.to_string(), src_lang: src_lang.into(), tgt_lang: tgt_lang.into() });
    }
    if out.is_empty() {
        bail!("{} has no pairs", path.display());
    }
    Ok(out)
}

/// Two line-aligned files. Pairs where either side is empty are skipped.
pub fn read_aligned(src: &Path, tgt: &Path, src_lang: &str, tgt_lang: &str) -> Result<Vec<Pair>> {
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
    let out: Vec<Pair> = a
        .into_iter()
        .zip(b)
        .filter(|(x, y)| !x.trim().is_empty() && !y.trim().is_empty())
        .map(|(x, y)| Pair { src: x, tgt: y, src_lang: src_lang.into(), tgt_lang: tgt_lang.into() })
        .collect();
    if out.is_empty() {
        bail!("{} and {} have no pairs (no line where both files have text)", src.display(), tgt.display());
    }
    Ok(out)
}

/// The premise/hypothesis columns of one XNLI file.
fn xnli_rows(path: &Path) -> Result<Vec<(String, String)>> {
    if !path.is_file() {
        bail!(
            "{} does not exist: the XNLI directory should hold {{split}}-{{lang}}.tsv files (e.g. dev-de.tsv, test-de.tsv)",
            path.display()
        );
    }
    read_lines(path)?
        .into_iter()
        .enumerate()
        .map(|(i, l)| {
            let mut c = l.split('\t');
            match (c.next(), c.next()) {
                (Some(p), Some(h)) => Ok((p.to_string(), h.to_string())),
                _ => {
                    bail!("{}: line {} has no tab; expected premise<TAB>hypothesis[<TAB>label]", path.display(), i + 1)
                }
            }
        })
        .collect()
}

/// Rows of `{split}-{lang}.tsv` in every language given, checked to have the same count.
pub fn xnli_parallel_rows(dir: &Path, split: &str, langs: &[&str]) -> Result<Vec<Vec<(String, String)>>> {
    let files: Vec<PathBuf> = langs.iter().map(|l| dir.join(format!("{split}-{l}.tsv"))).collect();
    let rows: Vec<Vec<(String, String)>> = files.iter().map(|f| xnli_rows(f)).collect::<Result<_>>()?;
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
        let src = Source {
            kind: SourceKind::Xnli,
            path: None,
            src: None,
            tgt: None,
            dir: Some(d.path().to_path_buf()),
            src_lang: None,
            tgt_lang: None,
            splits: vec!["dev".into()],
            pivot: "en".into(),
            langs: vec!["de".into()],
            max_pairs: None,
        };
        let all = read_sources(std::slice::from_ref(&src), "data.sources").unwrap();
        assert_eq!(all.len(), 3, "the repeated premise pair is kept once");
        let e = read_sources(&[Source { langs: vec!["fr".into()], ..src.clone() }], "data.sources").unwrap_err();
        let e = format!("{e:#}");
        assert!(e.contains("dev-en.tsv has 2 rows") && e.contains("dev-fr.tsv has 1"), "{e}");
        let e = format!(
            "{:#}",
            read_sources(&[Source { splits: vec!["train".into()], ..src.clone() }], "data.sources").unwrap_err()
        );
        assert!(e.contains("train-en.tsv does not exist"), "{e}");
        // A language with no text among others still gives the others' pairs; alone, an error.
        let both =
            read_sources(&[Source { langs: vec!["de".into(), "sw".into()], ..src.clone() }], "data.sources").unwrap();
        assert_eq!(both.len(), 3);
        let e = format!(
            "{:#}",
            read_sources(&[Source { langs: vec!["sw".into()], ..src.clone() }], "data.sources").unwrap_err()
        );
        assert!(e.contains("data.sources[0]") && e.contains("en-{sw}.tsv") && e.contains("no pairs"), "{e}");
        // Settings that would read nothing, or pair English with itself, are refused.
        for (bad, want) in [
            (Source { splits: vec![], ..src.clone() }, "kind = \"xnli\" needs `splits`"),
            (Source { langs: vec!["de".into(), "en".into()], ..src.clone() }, "`langs` lists the pivot \"en\""),
            (Source { max_pairs: Some(0), ..src.clone() }, "max_pairs = 0 reads no pairs"),
            (
                Source {
                    kind: SourceKind::Aligned,
                    src: Some("a".into()),
                    dir: None,
                    langs: vec![],
                    splits: d_splits(),
                    ..src.clone()
                },
                "kind = \"aligned\" needs `tgt`",
            ),
            // A key of another kind would go unread.
            (Source { path: Some("p.tsv".into()), ..src.clone() }, "kind = \"xnli\" does not read path: remove it"),
            (
                Source {
                    kind: SourceKind::Aligned,
                    src: Some("a".into()),
                    tgt: Some("b".into()),
                    splits: d_splits(),
                    ..src.clone()
                },
                "kind = \"aligned\" does not read dir, langs: remove them (it reads src, tgt, src_lang, tgt_lang)",
            ),
            // Keys with defaults: a value other than the default was set.
            (
                Source {
                    kind: SourceKind::Tsv,
                    path: Some("p.tsv".into()),
                    dir: None,
                    langs: vec![],
                    pivot: "de".into(),
                    splits: vec!["x".into()],
                    ..src.clone()
                },
                "kind = \"tsv\" does not read splits, pivot: remove them (it reads path, src_lang, tgt_lang)",
            ),
        ] {
            let e = format!("{:#}", read_sources(&[bad], "data.sources").unwrap_err());
            assert!(e.contains(want), "{e}");
        }
        // The defaults, as a run's config writes them out for every source, are no mistake.
        let tsv = Source {
            kind: SourceKind::Tsv,
            path: Some("p.tsv".into()),
            dir: None,
            langs: vec![],
            pivot: d_pivot(),
            splits: d_splits(),
            ..src
        };
        tsv.validate().unwrap();
    }
}
