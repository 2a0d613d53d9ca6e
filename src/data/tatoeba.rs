//! Tatoeba (LASER's similarity-search test set): `tatoeba.xxx-eng.xxx` and `tatoeba.xxx-eng.eng`,
//! line i of one the translation of line i of the other.

use super::{plain_or_gz, read_lines, require_plain_or_gz};
use anyhow::{bail, Result};
use std::path::Path;

#[derive(Debug, Clone)]
pub struct TatoebaSet {
    /// ISO 639-3 code, e.g. `deu`.
    pub lang: String,
    pub xx: Vec<String>,
    pub eng: Vec<String>,
    /// The files read (for reports: which data, with its digest).
    pub files: Vec<std::path::PathBuf>,
}

/// Codes of every language with a file in `dir` (`tatoeba.xxx-eng.xxx` or `tatoeba.xxx-eng.eng`,
/// either gzip-compressed as `.gz`), sorted. A language with one side and not the other is an
/// error naming the missing file: leaving it out would change the average without a word.
pub fn languages(dir: &Path) -> Result<Vec<String>> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| anyhow::anyhow!("cannot list Tatoeba directory {}: {e}", dir.display()))?;
    let mut langs: Vec<String> = entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter_map(|n| {
            let n = n.strip_suffix(".gz").unwrap_or(&n);
            let (code, side) = n.strip_prefix("tatoeba.")?.split_once("-eng.")?;
            (side == code || side == "eng").then(|| code.to_string())
        })
        .collect();
    langs.sort();
    langs.dedup();
    if langs.is_empty() {
        bail!("no Tatoeba files in {} (expected pairs tatoeba.xxx-eng.xxx and tatoeba.xxx-eng.eng)", dir.display());
    }
    for lang in &langs {
        for side in [lang.as_str(), "eng"] {
            let name = format!("tatoeba.{lang}-eng.{side}");
            if plain_or_gz(&dir.join(&name)).is_none() {
                bail!(
                    "Tatoeba file {} is missing (or not a file) beside the other side of {lang}: restore it \
                     (`xsent data fetch tatoeba`), or choose languages with --langs",
                    dir.join(&name).display()
                );
            }
        }
    }
    Ok(langs)
}

/// Read one language pair (either file may be gzip-compressed, `.gz`); the two files must have
/// the same number of lines.
pub fn read(dir: &Path, lang: &str) -> Result<TatoebaSet> {
    let expected =
        format!("language {lang:?} needs tatoeba.{lang}-eng.{lang} and tatoeba.{lang}-eng.eng in {}", dir.display());
    let path = |side: &str| require_plain_or_gz(&dir.join(format!("tatoeba.{lang}-eng.{side}")), "Tatoeba", &expected);
    let (xx_path, eng_path) = (path(lang)?, path("eng")?);
    let xx = read_lines(&xx_path)?;
    let eng = read_lines(&eng_path)?;
    if xx.len() != eng.len() {
        bail!(
            "{} has {} lines but {} has {}; they must be line-aligned",
            xx_path.display(),
            xx.len(),
            eng_path.display(),
            eng.len()
        );
    }
    for (path, lines) in [(&xx_path, &xx), (&eng_path, &eng)] {
        if let Some(i) = lines.iter().position(|l| l.trim().is_empty()) {
            bail!(
                "{}:{} is blank: every Tatoeba line must hold a sentence (the pair is line {} of both files)",
                path.display(),
                i + 1,
                i + 1
            );
        }
    }
    Ok(TatoebaSet { lang: lang.to_string(), xx, eng, files: vec![xx_path, eng_path] })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A language with one side only is an error naming the missing file (an outside probe:
    /// `eval tatoeba` left deu out and averaged the rest, exit 0); gzip-compressed sides are
    /// read as the plain ones.
    #[test]
    fn a_language_missing_a_side_is_named_and_gzip_sides_are_read() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::write(d.join("tatoeba.fra-eng.fra"), "un\ndeux\n").unwrap();
        std::fs::write(d.join("tatoeba.fra-eng.eng"), "one\ntwo\n").unwrap();
        std::fs::write(d.join("tatoeba.deu-eng.eng"), "one\ntwo\n").unwrap();
        let e = languages(d).unwrap_err().to_string();
        assert!(e.contains("tatoeba.deu-eng.deu is missing"), "{e}");
        std::fs::create_dir(d.join("tatoeba.deu-eng.deu")).unwrap();
        let e = languages(d).unwrap_err().to_string();
        assert!(e.contains("tatoeba.deu-eng.deu is missing (or not a file)"), "{e}");
        std::fs::remove_dir(d.join("tatoeba.deu-eng.deu")).unwrap();
        let mut gz = flate2::write::GzEncoder::new(
            std::fs::File::create(d.join("tatoeba.deu-eng.deu.gz")).unwrap(),
            flate2::Compression::default(),
        );
        gz.write_all(b"eins\nzwei\n").unwrap();
        gz.finish().unwrap();
        assert_eq!(languages(d).unwrap(), ["deu", "fra"]);
        let set = read(d, "deu").unwrap();
        assert_eq!((set.xx, set.eng), (vec!["eins".to_string(), "zwei".into()], vec!["one".to_string(), "two".into()]));
    }
}
