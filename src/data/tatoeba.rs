//! Tatoeba (LASER's similarity-search test set): `tatoeba.xxx-eng.xxx` and `tatoeba.xxx-eng.eng`,
//! line i of one the translation of line i of the other.

use super::{read_lines, require_file};
use anyhow::{bail, Result};
use std::path::Path;

#[derive(Debug, Clone)]
pub struct TatoebaSet {
    /// ISO 639-3 code, e.g. `deu`.
    pub lang: String,
    pub xx: Vec<String>,
    pub eng: Vec<String>,
}

/// Codes of every language with both files in `dir`, sorted.
pub fn languages(dir: &Path) -> Result<Vec<String>> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| anyhow::anyhow!("cannot list Tatoeba directory {}: {e}", dir.display()))?;
    let mut langs: Vec<String> = entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter_map(|n| {
            let code = n.strip_prefix("tatoeba.")?.strip_suffix("-eng.eng")?.to_string();
            dir.join(format!("tatoeba.{code}-eng.{code}")).is_file().then_some(code)
        })
        .collect();
    langs.sort();
    if langs.is_empty() {
        bail!("no Tatoeba files in {} (expected pairs tatoeba.xxx-eng.xxx and tatoeba.xxx-eng.eng)", dir.display());
    }
    Ok(langs)
}

/// Read one language pair; the two files must have the same number of lines.
pub fn read(dir: &Path, lang: &str) -> Result<TatoebaSet> {
    let xx_path = dir.join(format!("tatoeba.{lang}-eng.{lang}"));
    let eng_path = dir.join(format!("tatoeba.{lang}-eng.eng"));
    let expected =
        format!("language {lang:?} needs tatoeba.{lang}-eng.{lang} and tatoeba.{lang}-eng.eng in {}", dir.display());
    for p in [&xx_path, &eng_path] {
        require_file(p, "Tatoeba", &expected)?;
    }
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
    Ok(TatoebaSet { lang: lang.to_string(), xx, eng })
}
