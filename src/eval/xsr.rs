//! Cross-lingual sentence retrieval (seed 001 §4.4): P@1 of each source sentence retrieving its
//! translation (same line of the target file) among all target sentences plus distractors.
//!
//! The Multi30k preset (issue 7, seed 001 §4.4 adapted): for a direction x→y the queries are the
//! `test_2016_flickr` sentences in x, and each must retrieve its own line of `test_2016_flickr.y`
//! among `test_2016_flickr.y`, `test_2017_flickr.y` and `val.y` (1,000 + 1,000 + 1,014 = 3,014).
//!
//! Candidates are identified by index, and a retrieved candidate whose text equals the gold's
//! (same text, same vector: no model can tell them apart) counts as a hit too: a distractor
//! that copies the gold, or a target line repeated in the target file, never costs one.

use super::bootstrap::Items;
use crate::index::knn::{knn, Matrix};
use crate::model::Embedder;
use anyhow::{bail, ensure, Context, Result};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// `src[i]`'s translation is `tgt[i]`; the candidates are `tgt` followed by `distractors`.
/// Returns each query's hit and the number of candidates (P@1 is `hits.scores(None)[0]`).
pub fn p_at_1(
    enc: &dyn Embedder,
    src: &[String],
    tgt: &[String],
    distractors: &[String],
    batch_size: usize,
) -> Result<(Items, usize)> {
    ensure!(
        src.len() == tgt.len(),
        "{} source and {} target sentences: they must be line-aligned",
        src.len(),
        tgt.len()
    );
    let all: Vec<&String> = tgt.iter().chain(distractors).collect();
    let vecs = super::embed_unique(enc, src.iter().chain(all.iter().copied()).map(String::as_str), batch_size)?;
    let q = rows(&vecs, src.iter());
    let t = rows(&vecs, all.iter().copied());
    Ok((Items::hits(&[&hits_at_1(&q, &t, |i, j| all[j] == &tgt[i])?]), all.len()))
}

/// The vectors of `texts`, in order, as L2-normalised rows (every text is a key of `vecs`).
fn rows<'a>(vecs: &HashMap<String, Vec<f32>>, texts: impl Iterator<Item = &'a String>) -> Matrix {
    Matrix::normalized(&texts.map(|s| vecs[s.as_str()].clone()).collect::<Vec<_>>())
}

/// P@1 ×100 when query i's answer is target i, or any target j with `same_text(i, j)`.
pub fn p_at_1_vectors(q: &Matrix, t: &Matrix, same_text: impl Fn(usize, usize) -> bool) -> Result<f64> {
    let hits = hits_at_1(q, t, same_text)?;
    Ok(100.0 * hits.iter().filter(|h| **h).count() as f64 / hits.len().max(1) as f64)
}

/// Per query of [`p_at_1_vectors`]: whether its nearest candidate is its answer.
pub fn hits_at_1(q: &Matrix, t: &Matrix, same_text: impl Fn(usize, usize) -> bool) -> Result<Vec<bool>> {
    let nb = knn(q, t, 1)?;
    Ok((0..q.rows())
        .map(|i| nb.row(i).1.first().is_some_and(|&j| j as usize == i || same_text(i, j as usize)))
        .collect())
}

/// Multi30k split of the queries (and of their translations, the first candidates).
pub const MULTI30K_QUERIES: &str = "test_2016_flickr";
/// Target-side splits that make up the candidates, in this order: the queries' own translations
/// first, so that query i's answer is candidate i.
pub const MULTI30K_CANDIDATES: [&str; 3] = ["test_2016_flickr", "test_2017_flickr", "val"];
/// Directions evaluated when `--langs` is not given.
pub const MULTI30K_DIRECTIONS: [&str; 4] = ["en-de", "de-en", "en-fr", "fr-en"];
/// The split name in reports.
pub const MULTI30K_SPLIT: &str = "multi30k-test2016";

/// One Multi30k direction: `queries[i]`'s translation is `candidates[i]`.
#[derive(Debug, Clone)]
pub struct Multi30kSet {
    pub src: String,
    pub tgt: String,
    pub queries: Vec<String>,
    pub candidates: Vec<String>,
    /// The files read (for reports: which data, with its digest).
    pub files: Vec<PathBuf>,
}

impl Multi30kSet {
    /// `en-de`.
    pub fn direction(&self) -> String {
        format!("{}-{}", self.src, self.tgt)
    }
}

/// `en-de` → (`en`, `de`).
pub fn parse_direction(s: &str) -> Result<(String, String)> {
    match s.trim().split_once('-') {
        Some((a, b)) if !a.is_empty() && !b.is_empty() && !b.contains('-') && a != b => {
            Ok((a.to_string(), b.to_string()))
        }
        _ => bail!("direction {s:?} is not SRC-TGT with two different language codes; pass e.g. --langs en-de,de-en"),
    }
}

fn multi30k_file(dir: &Path, split: &str, lang: &str) -> PathBuf {
    dir.join(format!("{split}.{lang}.gz"))
}

/// The files of direction `src`→`tgt` in the Multi30k directory `dir`: the queries, then the
/// candidates in order ([`MULTI30K_CANDIDATES`] in `tgt`).
pub fn multi30k_files(dir: &Path, src: &str, tgt: &str) -> (PathBuf, Vec<PathBuf>) {
    (
        multi30k_file(dir, MULTI30K_QUERIES, src),
        MULTI30K_CANDIDATES.iter().map(|s| multi30k_file(dir, s, tgt)).collect(),
    )
}

/// Languages in `dir` that can be a source (the query split is there) and a target (every
/// candidate split is there), each sorted.
pub fn multi30k_languages(dir: &Path) -> Result<(Vec<String>, Vec<String>)> {
    let entries = std::fs::read_dir(dir).with_context(|| format!("cannot list the Multi30k directory {} (expected <data dir>/parallel/multi30k with test_2016_flickr.en.gz, ...)", dir.display()))?;
    let mut langs: Vec<String> = entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter_map(|n| Some(n.strip_prefix(MULTI30K_QUERIES)?.strip_prefix('.')?.strip_suffix(".gz")?.to_string()))
        .collect();
    langs.sort();
    let targets = langs
        .iter()
        .filter(|l| MULTI30K_CANDIDATES.iter().all(|s| multi30k_file(dir, s, l).is_file()))
        .cloned()
        .collect();
    Ok((langs, targets))
}

/// Read direction `direction` (`en-de`) from the Multi30k directory `dir`. A missing file is
/// named in the error, with the languages that can be used instead.
pub fn read_multi30k(dir: &Path, direction: &str) -> Result<Multi30kSet> {
    let (src, tgt) = parse_direction(direction)?;
    let (query_path, candidate_paths) = multi30k_files(dir, &src, &tgt);
    for p in std::iter::once(&query_path).chain(&candidate_paths) {
        if !p.is_file() {
            let (sources, targets) = multi30k_languages(dir)?;
            bail!(
                "Multi30k file {} is missing: direction {src}-{tgt} needs {MULTI30K_QUERIES}.{src}.gz (queries) and {} (candidates) in {}. \
                 Source languages there: {}; target languages (all of {}): {}. Choose directions among these with --langs",
                p.display(),
                MULTI30K_CANDIDATES.iter().map(|s| format!("{s}.{tgt}.gz")).collect::<Vec<_>>().join(", "),
                dir.display(),
                list(&sources),
                MULTI30K_CANDIDATES.join(", "),
                list(&targets)
            );
        }
    }
    let queries = crate::data::read_lines(&query_path)?;
    let mut candidates = Vec::new();
    for (i, p) in candidate_paths.iter().enumerate() {
        let lines = crate::data::read_lines(p)?;
        ensure!(
            i > 0 || lines.len() == queries.len(),
            "{} has {} lines but {} has {}; they must be line-aligned",
            query_path.display(),
            queries.len(),
            p.display(),
            lines.len()
        );
        candidates.extend(lines);
    }
    let files = std::iter::once(query_path).chain(candidate_paths).collect();
    Ok(Multi30kSet { src, tgt, queries, candidates, files })
}

fn list(langs: &[String]) -> String {
    if langs.is_empty() {
        "none".into()
    } else {
        langs.join(", ")
    }
}

/// One direction's result.
#[derive(Debug, Clone)]
pub struct Multi30kScore {
    /// `en-de`.
    pub direction: String,
    pub queries: usize,
    pub candidates: usize,
    /// P@1 ×100.
    pub p_at_1: f64,
    /// Bootstrap 95 % interval of `p_at_1` ([`super::bootstrap`]).
    pub p_at_1_ci95: super::bootstrap::Interval,
    /// Hit or miss of each query.
    pub items: Items,
}

/// P@1 of every set. Each distinct sentence of the run is embedded once, so a language used in
/// two directions (as source and as target, or as the target of two) costs one pass.
pub fn evaluate_multi30k(enc: &dyn Embedder, sets: &[Multi30kSet], batch_size: usize) -> Result<Vec<Multi30kScore>> {
    let texts = sets.iter().flat_map(|s| s.queries.iter().chain(&s.candidates)).map(String::as_str);
    let vecs = super::embed_unique(enc, texts, batch_size)?;
    sets.iter()
        .map(|s| {
            ensure!(
                s.queries.len() <= s.candidates.len(),
                "{}: {} queries but only {} candidates",
                s.direction(),
                s.queries.len(),
                s.candidates.len()
            );
            let hits = hits_at_1(&rows(&vecs, s.queries.iter()), &rows(&vecs, s.candidates.iter()), |i, j| {
                s.candidates[j] == s.candidates[i]
            })?;
            let items = Items::hits(&[&hits]);
            let (p_at_1, p_at_1_ci95) = (items.scores(None)[0], super::bootstrap::intervals(&items)[0]);
            Ok(Multi30kScore {
                direction: s.direction(),
                queries: s.queries.len(),
                candidates: s.candidates.len(),
                p_at_1,
                p_at_1_ci95,
                items,
            })
        })
        .collect()
}

/// The markdown table: one row per direction, their mean, and seed 001's published XSR numbers
/// for reference.
pub fn multi30k_markdown(scores: &[Multi30kScore]) -> String {
    let arrow = |d: &str| d.replacen('-', " → ", 1);
    let mut out =
        String::from("| Multi30k XSR | queries | candidates | P@1 ×100 | 95 % CI |\n|---|---:|---:|---:|---:|\n");
    for s in scores {
        out += &format!(
            "| {} | {} | {} | {:.2} | {} |\n",
            arrow(&s.direction),
            s.queries,
            s.candidates,
            s.p_at_1,
            super::bootstrap::show(s.p_at_1_ci95)
        );
    }
    let mean = scores.iter().map(|s| s.p_at_1).sum::<f64>() / scores.len().max(1) as f64;
    let plural = if scores.len() == 1 { "" } else { "s" };
    let mean_ci = super::bootstrap::mean_interval(&scores.iter().map(|s| &s.items).collect::<Vec<_>>());
    out += &format!(
        "| **mean ({} direction{plural})** | | | **{mean:.2}** | {} |\n",
        scores.len(),
        super::bootstrap::show(mean_ci)
    );
    out += &format!("\n95 % CI: {} (the mean: within each direction).\n", super::bootstrap::DESCRIPTION);
    out += &format!(
        "\nQueries: {MULTI30K_QUERIES} in the source language; candidates: {} in the target language, in that order (a hit: the top-1 candidate is the query's own line; ties go to the lower index).\n",
        MULTI30K_CANDIDATES.join(" + ")
    );
    for p in super::published_tables::XSR_P_AT_1 {
        let values: Vec<String> = scores
            .iter()
            .filter_map(|s| p.get(&s.direction).map(|v| format!("{} {v:.1}", arrow(&s.direction))))
            .collect();
        if !values.is_empty() {
            out += &format!(
                "For reference, {} P@1 ×100: {} (Europarl, 2,000 queries among 200k target sentences: not comparable).\n",
                p.source,
                values.join(", ")
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn p_at_1_by_hand() {
        let m = |r: &[[f32; 2]]| Matrix::normalized(&r.iter().map(|x| x.to_vec()).collect::<Vec<_>>());
        // q0 -> t0 (hit); q1 is nearest to the distractor t2 (miss).
        let q = m(&[[1.0, 0.0], [0.0, 1.0]]);
        let t = m(&[[1.0, 0.1], [1.0, 1.0], [0.1, 1.0]]);
        assert_eq!(p_at_1_vectors(&q, &t, |_, _| false).unwrap(), 50.0);
    }

    /// A target line repeated in the target file: the query of the later copy retrieves the
    /// earlier one (ties go to the lower index), the same text, and that is a hit.
    #[test]
    fn a_repeated_target_line_is_a_hit_for_either_query() {
        let m = |r: &[[f32; 2]]| Matrix::normalized(&r.iter().map(|x| x.to_vec()).collect::<Vec<_>>());
        let q = m(&[[1.0, 0.2], [1.0, 0.3], [0.0, 1.0]]);
        let t = m(&[[1.0, 0.1], [1.0, 0.1], [0.1, 1.0]]);
        assert_eq!(p_at_1_vectors(&q, &t, |_, _| false).unwrap(), 100.0 * 2.0 / 3.0, "by index alone query 1 misses");
        let texts = ["same", "same", "other"];
        assert_eq!(p_at_1_vectors(&q, &t, |i, j| texts[i] == texts[j]).unwrap(), 100.0);
    }

    #[test]
    fn identical_distractor_does_not_cost_a_hit() {
        let m = |r: &[[f32; 2]]| Matrix::normalized(&r.iter().map(|x| x.to_vec()).collect::<Vec<_>>());
        // t2 is an exact copy of the gold t0 (same text, same vector): the tie goes to index 0.
        let q = m(&[[1.0, 0.2]]);
        let t = m(&[[1.0, 0.1], [0.0, 1.0], [1.0, 0.1]]);
        assert_eq!(p_at_1_vectors(&q, &t, |_, _| false).unwrap(), 100.0);
    }

    fn write_gz(path: &Path, lines: &[&str]) {
        let mut enc = flate2::write::GzEncoder::new(std::fs::File::create(path).unwrap(), flate2::Compression::fast());
        std::io::Write::write_all(&mut enc, (lines.join("\n") + "\n").as_bytes()).unwrap();
        enc.finish().unwrap();
    }

    /// A tiny Multi30k directory: every split in en and de, cs only for the query split and val.
    fn tiny_multi30k() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        for lang in ["en", "de"] {
            write_gz(
                &d.path().join(format!("test_2016_flickr.{lang}.gz")),
                &[&format!("{lang} q0"), &format!("{lang} q1")],
            );
            write_gz(&d.path().join(format!("test_2017_flickr.{lang}.gz")), &[&format!("{lang} t17a")]);
            write_gz(
                &d.path().join(format!("val.{lang}.gz")),
                &[&format!("{lang} val0"), &format!("{lang} val1"), &format!("{lang} val2")],
            );
        }
        write_gz(&d.path().join("test_2016_flickr.cs.gz"), &["cs q0", "cs q1"]);
        write_gz(&d.path().join("val.cs.gz"), &["cs val0"]);
        d
    }

    #[test]
    fn multi30k_candidates_are_test2016_test2017_val_of_the_target() {
        let d = tiny_multi30k();
        let (q, c) = multi30k_files(d.path(), "en", "de");
        assert_eq!(q, d.path().join("test_2016_flickr.en.gz"));
        let names: Vec<_> = c.iter().map(|p| p.file_name().unwrap().to_str().unwrap()).collect();
        assert_eq!(names, ["test_2016_flickr.de.gz", "test_2017_flickr.de.gz", "val.de.gz"]);

        let s = read_multi30k(d.path(), "en-de").unwrap();
        assert_eq!((s.src.as_str(), s.tgt.as_str(), s.direction()), ("en", "de", "en-de".to_string()));
        assert_eq!(s.queries, ["en q0", "en q1"]);
        assert_eq!(s.candidates, ["de q0", "de q1", "de t17a", "de val0", "de val1", "de val2"]);
        let s = read_multi30k(d.path(), "de-en").unwrap();
        assert_eq!(s.queries, ["de q0", "de q1"]);
        assert_eq!(s.candidates, ["en q0", "en q1", "en t17a", "en val0", "en val1", "en val2"]);
        // cs can be a source (its queries exist), not a target.
        let s = read_multi30k(d.path(), "cs-en").unwrap();
        assert_eq!(s.queries, ["cs q0", "cs q1"]);
        assert_eq!(s.candidates.len(), 6);
        assert_eq!(
            multi30k_languages(d.path()).unwrap(),
            (vec!["cs".into(), "de".into(), "en".into()], vec!["de".into(), "en".into()])
        );
    }

    #[test]
    fn multi30k_errors_name_the_missing_file_and_the_languages() {
        let d = tiny_multi30k();
        let err = read_multi30k(d.path(), "en-cs").unwrap_err().to_string();
        assert!(err.contains("test_2017_flickr.cs.gz is missing"), "{err}");
        assert!(err.contains("Source languages there: cs, de, en") && err.contains("val): de, en"), "{err}");
        assert!(err.contains("test_2016_flickr.cs.gz, test_2017_flickr.cs.gz, val.cs.gz (candidates)"), "{err}");
        let err = read_multi30k(d.path(), "fr-en").unwrap_err().to_string();
        assert!(err.contains("test_2016_flickr.fr.gz is missing"), "{err}");
        for bad in ["ende", "en-", "-de", "en-en", "en-de-fr"] {
            let err = read_multi30k(d.path(), bad).unwrap_err().to_string();
            assert!(err.contains("SRC-TGT") && err.contains("--langs en-de"), "{bad}: {err}");
        }
        write_gz(&d.path().join("test_2016_flickr.de.gz"), &["only one line"]);
        let err = read_multi30k(d.path(), "en-de").unwrap_err().to_string();
        assert!(err.contains("has 2 lines") && err.contains("has 1; they must be line-aligned"), "{err}");
        let err = read_multi30k(&d.path().join("nowhere"), "en-de").unwrap_err().to_string();
        assert!(err.contains("cannot list the Multi30k directory"), "{err}");
    }

    #[test]
    fn multi30k_table_has_a_mean_row_and_the_published_footnote() {
        // 99 and 97 hits of 100 queries.
        let s = |d: &str, hits: usize| {
            let items = Items::hits(&[&(0..100).map(|i| i < hits).collect::<Vec<bool>>()]);
            Multi30kScore {
                direction: d.into(),
                queries: 100,
                candidates: 3014,
                p_at_1: items.scores(None)[0],
                p_at_1_ci95: [90.0, 100.0],
                items,
            }
        };
        let t = multi30k_markdown(&[s("en-de", 99), s("cs-en", 97)]);
        assert!(t.contains("| en → de | 100 | 3014 | 99.00 | [90.00, 100.00] |"), "{t}");
        assert!(t.contains("| **mean (2 directions)** | | | **98.00** | ["), "{t}");
        assert!(t.contains("seed 001 Tab. 4 P@1 ×100: en → de 86.3 (Europarl"), "{t}");
    }
}
