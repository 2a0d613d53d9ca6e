//! BUCC 2018 bitext mining: `{pair}.{split}.{xx|en}` with `id<TAB>sentence` lines and
//! `{pair}.{split}.gold` with `xx-id<TAB>en-id` lines (pair like `zh-en`). Each file may be kept
//! gzip-compressed as its name plus `.gz`.

use super::{read_lines, require_plain_or_gz};
use anyhow::{bail, Result};
use std::collections::HashMap;
use std::path::Path;

#[derive(Debug, Clone)]
pub struct BuccSplit {
    pub pair: String,
    pub split: String,
    pub src_ids: Vec<String>,
    pub src: Vec<String>,
    pub tgt_ids: Vec<String>,
    pub tgt: Vec<String>,
    /// Gold pairs as (source index, target index).
    pub gold: Vec<(usize, usize)>,
    /// The files read (for reports: which data, with its digest).
    pub files: Vec<std::path::PathBuf>,
}

/// Every `(pair, split)` with a gold file `{pair}.{split}.gold` (or `.gold.gz`) in `dir`, sorted,
/// each once.
fn gold_files(dir: &Path) -> Result<Vec<(String, String)>> {
    let mut out: Vec<(String, String)> = std::fs::read_dir(dir)
        .map_err(|e| anyhow::anyhow!("cannot list BUCC directory {}: {e}", dir.display()))?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter_map(|n| {
            let n = n.strip_suffix(".gz").unwrap_or(&n);
            let (pair, split) = n.strip_suffix(".gold")?.split_once('.')?;
            Some((pair.to_string(), split.to_string()))
        })
        .collect();
    out.sort();
    out.dedup();
    Ok(out)
}

/// The language pairs (`zh-en`, …) with a gold file in `dir`, sorted.
pub fn pairs(dir: &Path) -> Result<Vec<String>> {
    let mut out: Vec<String> = gold_files(dir)?.into_iter().map(|(pair, _)| pair).collect();
    out.dedup();
    if out.is_empty() {
        bail!(
            "no BUCC gold file in {} (expected PAIR.SPLIT.gold, e.g. zh-en.test.gold, beside PAIR.SPLIT.{{xx,en}})",
            dir.display()
        );
    }
    Ok(out)
}

/// Splits of `pair` present in `dir` (those with a gold file), sorted.
pub fn splits(dir: &Path, pair: &str) -> Result<Vec<String>> {
    let out: Vec<String> = gold_files(dir)?.into_iter().filter(|(p, _)| p == pair).map(|(_, split)| split).collect();
    if out.is_empty() {
        bail!(
            "no BUCC gold file for {pair} in {} (expected {pair}.SPLIT.gold beside {pair}.SPLIT.{{xx,en}})",
            dir.display()
        );
    }
    Ok(out)
}

fn read_side(path: &Path, expected: &str, files: &mut Vec<std::path::PathBuf>) -> Result<(Vec<String>, Vec<String>)> {
    let path = &require_plain_or_gz(path, "BUCC", expected)?;
    files.push(path.clone());
    let mut ids = Vec::new();
    let mut sents = Vec::new();
    let mut seen: HashMap<String, usize> = HashMap::new();
    for (i, l) in read_lines(path)?.into_iter().enumerate() {
        let Some((id, s)) = l.split_once('\t') else {
            bail!("{}:{}: expected `id<TAB>sentence`", path.display(), i + 1)
        };
        if let Some(first) = seen.insert(id.to_string(), i + 1) {
            bail!(
                "{}:{}: the id {id} is already on line {first}; ids must be unique (the gold pairs name them)",
                path.display(),
                i + 1
            );
        }
        ids.push(id.to_string());
        sents.push(s.to_string());
    }
    Ok((ids, sents))
}

pub fn read(dir: &Path, pair: &str, split: &str) -> Result<BuccSplit> {
    let Some((xx, en)) = pair.split_once('-') else { bail!("BUCC pair {pair:?}: expected xx-en, e.g. zh-en") };
    let expected = format!(
        "split {split} of {pair} needs {pair}.{split}.{xx} and {pair}.{split}.{en} (`id<TAB>sentence` lines) and {pair}.{split}.gold (`{xx}-id<TAB>{en}-id` lines) in {}",
        dir.display()
    );
    let mut files = Vec::new();
    let (src_ids, src) = read_side(&dir.join(format!("{pair}.{split}.{xx}")), &expected, &mut files)?;
    let (tgt_ids, tgt) = read_side(&dir.join(format!("{pair}.{split}.{en}")), &expected, &mut files)?;
    let index =
        |ids: &[String]| -> HashMap<String, usize> { ids.iter().enumerate().map(|(i, s)| (s.clone(), i)).collect() };
    let (si, ti) = (index(&src_ids), index(&tgt_ids));
    let gold_path = require_plain_or_gz(&dir.join(format!("{pair}.{split}.gold")), "BUCC", &expected)?;
    files.push(gold_path.clone());
    let mut gold = Vec::new();
    for (n, l) in read_lines(&gold_path)?.into_iter().enumerate() {
        let Some((a, b)) = l.split_once('\t') else {
            bail!("{}:{}: expected `{xx}-id<TAB>{en}-id`", gold_path.display(), n + 1)
        };
        let (Some(&i), Some(&j)) = (si.get(a), ti.get(b)) else {
            bail!("{}:{}: id {a:?} or {b:?} is not in the {xx}/{en} files of split {split}", gold_path.display(), n + 1)
        };
        gold.push((i, j));
    }
    Ok(BuccSplit { pair: pair.into(), split: split.into(), src_ids, src, tgt_ids, tgt, gold, files })
}
