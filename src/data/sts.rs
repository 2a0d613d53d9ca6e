//! SemEval-2017 STS (`STS2017.eval.v1.1` + `STS2017.gs`) and the extended `STS2017.en-de.txt`; each
//! file may be kept gzip-compressed as its name plus `.gz`.

use super::{read_lines, require_file, require_plain_or_gz};
use anyhow::{bail, Context, Result};
use std::path::Path;

/// One STS set: sentence pairs with gold scores (0..5).
#[derive(Debug, Clone)]
pub struct StsSet {
    /// `ar-ar`, `ar-en`, `es-es`, `es-en`, `es-en-wmt`, `en-en` or `en-de`.
    pub name: String,
    pub pairs: Vec<(String, String)>,
    pub gold: Vec<f64>,
    /// The files read (for reports: which data, with its digest).
    pub files: Vec<std::path::PathBuf>,
}

/// (set name, file stem of tracks 1-5).
pub const TRACKS: [(&str, &str); 6] = [
    ("ar-ar", "track1.ar-ar"),
    ("ar-en", "track2.ar-en"),
    ("es-es", "track3.es-es"),
    ("es-en", "track4a.es-en"),
    ("es-en-wmt", "track4b.es-en"),
    ("en-en", "track5.en-en"),
];

/// Every set name `read_sts2017` knows.
pub fn set_names() -> Vec<&'static str> {
    TRACKS.iter().map(|t| t.0).chain(["en-de"]).collect()
}

/// Read the chosen sets (all when `only` is empty) from `sts_dir` (the `sts/` folder).
pub fn read_sts2017(sts_dir: &Path, only: &[String]) -> Result<Vec<StsSet>> {
    for name in only {
        if name == "tr-en" {
            bail!("STS 2017 track 6 (tr-en) is unusable: its input has 500 pairs but its gold file 250 scores, and no alignment is given; xsent does not guess one");
        }
        if !set_names().contains(&name.as_str()) {
            bail!("unknown STS 2017 set {name:?}; choose from {}", set_names().join(", "));
        }
    }
    let wanted = |n: &str| only.is_empty() || only.iter().any(|o| o == n);
    let mut sets = Vec::new();
    for (name, stem) in TRACKS {
        if !wanted(name) {
            continue;
        }
        let expected = format!(
            "expected STS2017.eval.v1.1/STS.input.trackN.xx-yy.txt and STS2017.gs/STS.gs.trackN.xx-yy.txt under {}",
            sts_dir.display()
        );
        let file = |name: String| require_plain_or_gz(&sts_dir.join(name), "STS 2017", &expected);
        let input = file(format!("STS2017.eval.v1.1/STS.input.{stem}.txt"))?;
        let gold = file(format!("STS2017.gs/STS.gs.{stem}.txt"))?;
        let lines = read_lines(&input)?;
        let scores = read_lines(&gold)?;
        if lines.len() != scores.len() {
            bail!(
                "{} has {} pairs but {} has {} scores; they must be line-aligned",
                input.display(),
                lines.len(),
                gold.display(),
                scores.len()
            );
        }
        let mut set =
            StsSet { name: name.into(), pairs: Vec::new(), gold: Vec::new(), files: vec![input.clone(), gold.clone()] };
        for (i, (l, g)) in lines.iter().zip(&scores).enumerate() {
            let Some((a, b)) = l.split_once('\t') else {
                bail!("{}:{}: expected `sentence1<TAB>sentence2`", input.display(), i + 1)
            };
            let b = b.split('\t').next().unwrap_or(b);
            set.pairs.push((a.to_string(), b.to_string()));
            set.gold.push(benchmark_score(g, &gold, i)?);
        }
        sets.push(set);
    }
    if wanted("en-de") {
        let path = require_plain_or_gz(
            &sts_dir.join("STS2017.en-de.txt"),
            "STS 2017 en-de",
            "expected STS2017.en-de.txt with `en<TAB>de<TAB>score` lines",
        )?;
        let mut set = StsSet { name: "en-de".into(), pairs: Vec::new(), gold: Vec::new(), files: vec![path.clone()] };
        for (i, l) in read_lines(&path)?.iter().enumerate() {
            let f: Vec<&str> = l.split('\t').collect();
            if f.len() != 3 {
                bail!("{}:{}: expected `en<TAB>de<TAB>score`, found {} fields", path.display(), i + 1, f.len());
            }
            set.pairs.push((f[0].to_string(), f[1].to_string()));
            set.gold.push(benchmark_score(f[2], &path, i)?);
        }
        sets.push(set);
    }
    Ok(sets)
}

/// The gold score `text` on line `i` (0-based) of `path`: a finite number.
fn score(text: &str, path: &Path, i: usize) -> Result<f64> {
    let g: f64 = text.trim().parse().with_context(|| format!("{}:{}: not a score: {text:?}", path.display(), i + 1))?;
    if !g.is_finite() {
        bail!("{}:{}: not a finite score: {text:?}", path.display(), i + 1);
    }
    Ok(g)
}

/// A gold score of the STS 2017 files: [`score`], and on their scale, 0 to 5 (a value outside
/// it is a damaged file, and would be scored as if it were a real one).
fn benchmark_score(text: &str, path: &Path, i: usize) -> Result<f64> {
    let g = score(text, path, i)?;
    if !(0.0..=5.0).contains(&g) {
        bail!(
            "{}:{}: the score {text:?} is outside STS 2017's scale of 0 to 5: the file is damaged",
            path.display(),
            i + 1
        );
    }
    Ok(g)
}

/// Sentence pairs with gold similarity scores from one file, for validation during training
/// (e.g. the STS benchmark's `sts-dev.csv`). Each line is either the STS benchmark's layout
/// (tab-separated: genre, file, year, id, score, sentence 1, sentence 2, then optional source
/// columns) or `sentence1<TAB>sentence2<TAB>score`. Blank lines are skipped. The set is named
/// after the file (its name without the extension).
pub fn read_scored_pairs(path: &Path) -> Result<StsSet> {
    require_file(
        path,
        "STS pairs",
        "expected the STS benchmark's csv layout or `sentence1<TAB>sentence2<TAB>score` lines",
    )?;
    let name = path.file_stem().map(|s| s.to_string_lossy().to_string()).unwrap_or_default();
    let mut set = StsSet { name, pairs: Vec::new(), gold: Vec::new(), files: vec![path.to_path_buf()] };
    for (i, l) in read_lines(path)?.iter().enumerate() {
        if l.trim().is_empty() {
            continue;
        }
        let f: Vec<&str> = l.split('\t').collect();
        let (a, b, score) = match f.len() {
            3 => (f[0], f[1], f[2]),
            n if n >= 7 => (f[5], f[6], f[4]),
            n => bail!(
                "{}:{}: found {n} tab-separated fields; expected 3 (`sentence1<TAB>sentence2<TAB>score`) or at least 7 (the STS benchmark's genre, file, year, id, score, sentence 1, sentence 2)",
                path.display(),
                i + 1
            ),
        };
        let g = self::score(score, path, i)?;
        set.pairs.push((a.to_string(), b.to_string()));
        set.gold.push(g);
    }
    if set.pairs.len() < 2 {
        bail!("{} has {} scored pairs; a correlation needs at least 2", path.display(), set.pairs.len());
    }
    if set.gold.iter().all(|&g| g == set.gold[0]) {
        bail!(
            "every pair in {} has the score {}: a correlation with constant scores is undefined",
            path.display(),
            set.gold[0]
        );
    }
    Ok(set)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// STS 2017 gold scores must be on its 0..5 scale (an outside probe: -7 and 1e300 were
    /// scored, the latter as a Pearson of -0.00); scored pairs of one's own may use any scale.
    #[test]
    fn sts2017_gold_outside_its_scale_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::create_dir_all(d.join("STS2017.eval.v1.1")).unwrap();
        std::fs::create_dir_all(d.join("STS2017.gs")).unwrap();
        std::fs::write(d.join("STS2017.eval.v1.1/STS.input.track5.en-en.txt"), "a\tb\nc\td\ne\tf\n").unwrap();
        for (gold, ok) in [("0\n2.5\n5\n", true), ("0\n-7\n5\n", false), ("0\n1e300\n5\n", false)] {
            std::fs::write(d.join("STS2017.gs/STS.gs.track5.en-en.txt"), gold).unwrap();
            let r = read_sts2017(d, &["en-en".to_string()]);
            assert_eq!(r.is_ok(), ok, "{gold:?}");
            if let Err(e) = r {
                assert!(e.to_string().contains("STS.gs.track5.en-en.txt:2: the score"), "{e}");
            }
        }
        let own = d.join("own.tsv");
        std::fs::write(&own, "a\tb\t-7\nc\td\t30\n").unwrap();
        assert_eq!(read_scored_pairs(&own).unwrap().gold, [-7.0, 30.0]);
    }

    #[test]
    fn scored_pairs_in_both_layouts_and_errors_with_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let stsb = dir.path().join("sts-dev.csv");
        std::fs::write(
            &stsb,
            "main-captions\tMSRvid\t2012test\t0000\t5.000\tA man is dancing.\tA man dances.\n\
             main-news\theadlines\t2015\t0001\t0.500\tStocks fell.\tA cat sleeps.\tsrc1\tsrc2\n\n",
        )
        .unwrap();
        let s = read_scored_pairs(&stsb).unwrap();
        assert_eq!(s.name, "sts-dev");
        assert_eq!(
            s.pairs,
            vec![("A man is dancing.".into(), "A man dances.".into()), ("Stocks fell.".into(), "A cat sleeps.".into())]
        );
        assert_eq!(s.gold, vec![5.0, 0.5]);
        let plain = dir.path().join("pairs.tsv");
        std::fs::write(&plain, "a\tb\t4.2\nc\td\t1\n").unwrap();
        let p = read_scored_pairs(&plain).unwrap();
        assert_eq!((p.pairs[1].clone(), p.gold.clone()), (("c".into(), "d".into()), vec![4.2, 1.0]));
        std::fs::write(&plain, "a\tb\t4.2\nc\td\n").unwrap();
        let e = format!("{:#}", read_scored_pairs(&plain).unwrap_err());
        assert!(e.contains("pairs.tsv:2") && e.contains("found 2"), "{e}");
        std::fs::write(&plain, "a\tb\t4.2\nc\td\thigh\n").unwrap();
        let e = format!("{:#}", read_scored_pairs(&plain).unwrap_err());
        assert!(e.contains("pairs.tsv:2") && e.contains("not a score"), "{e}");
        std::fs::write(&plain, "a\tb\t4.2\nc\td\tNaN\n").unwrap();
        let e = format!("{:#}", read_scored_pairs(&plain).unwrap_err());
        assert!(e.contains("pairs.tsv:2") && e.contains("not a finite score"), "{e}");
        std::fs::write(&plain, "a\tb\t4.2\n").unwrap();
        assert!(format!("{:#}", read_scored_pairs(&plain).unwrap_err()).contains("at least 2"));
        std::fs::write(&plain, "a\tb\t3\nc\td\t3\n").unwrap();
        assert!(format!("{:#}", read_scored_pairs(&plain).unwrap_err()).contains("constant scores"));
        let e = format!("{:#}", read_scored_pairs(&dir.path().join("missing.csv")).unwrap_err());
        assert!(e.contains("missing.csv") && e.contains("is missing"), "{e}");
        // STS 2017's own files: a gold score that is no finite number is named, not taken for a
        // NaN cosine of the model.
        std::fs::write(dir.path().join("STS2017.en-de.txt"), "a\tb\t4.2\nc\td\tinf\n").unwrap();
        let e = format!("{:#}", read_sts2017(dir.path(), &["en-de".to_string()]).unwrap_err());
        assert!(e.contains("STS2017.en-de.txt:2") && e.contains("not a finite score"), "{e}");
    }
}
