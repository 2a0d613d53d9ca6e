//! SemEval-2017 STS (`STS2017.eval.v1.1` + `STS2017.gs`) and the extended `STS2017.en-de.txt`.

use super::{read_lines, require_file};
use anyhow::{bail, Context, Result};
use std::path::Path;

/// One STS set: sentence pairs with gold scores (0..5).
#[derive(Debug, Clone)]
pub struct StsSet {
    /// `ar-ar`, `ar-en`, `es-es`, `es-en`, `es-en-wmt`, `en-en` or `en-de`.
    pub name: String,
    pub pairs: Vec<(String, String)>,
    pub gold: Vec<f64>,
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
        let input = sts_dir.join(format!("STS2017.eval.v1.1/STS.input.{stem}.txt"));
        let gold = sts_dir.join(format!("STS2017.gs/STS.gs.{stem}.txt"));
        let expected =
            format!("expected STS2017.eval.v1.1/STS.input.trackN.xx-yy.txt and STS2017.gs/STS.gs.trackN.xx-yy.txt under {}", sts_dir.display());
        for f in [&input, &gold] {
            require_file(f, "STS 2017", &expected)?;
        }
        let lines = read_lines(&input)?;
        let scores = read_lines(&gold)?;
        if lines.len() != scores.len() {
            bail!("{} has {} pairs but {} has {} scores; they must be line-aligned", input.display(), lines.len(), gold.display(), scores.len());
        }
        let mut set = StsSet { name: name.into(), pairs: Vec::new(), gold: Vec::new() };
        for (i, (l, g)) in lines.iter().zip(&scores).enumerate() {
            let Some((a, b)) = l.split_once('\t') else {
                bail!("{}:{}: expected `sentence1<TAB>sentence2`", input.display(), i + 1)
            };
            let b = b.split('\t').next().unwrap_or(b);
            set.pairs.push((a.to_string(), b.to_string()));
            set.gold.push(g.trim().parse().with_context(|| format!("{}:{}: not a score: {g:?}", gold.display(), i + 1))?);
        }
        sets.push(set);
    }
    if wanted("en-de") {
        let path = sts_dir.join("STS2017.en-de.txt");
        require_file(&path, "STS 2017 en-de", "expected STS2017.en-de.txt with `en<TAB>de<TAB>score` lines")?;
        let mut set = StsSet { name: "en-de".into(), pairs: Vec::new(), gold: Vec::new() };
        for (i, l) in read_lines(&path)?.iter().enumerate() {
            let f: Vec<&str> = l.split('\t').collect();
            if f.len() != 3 {
                bail!("{}:{}: expected `en<TAB>de<TAB>score`, found {} fields", path.display(), i + 1, f.len());
            }
            set.pairs.push((f[0].to_string(), f[1].to_string()));
            set.gold.push(f[2].trim().parse().with_context(|| format!("{}:{}: not a score: {:?}", path.display(), i + 1, f[2]))?);
        }
        sets.push(set);
    }
    Ok(sets)
}
