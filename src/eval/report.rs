//! JSON reports of evaluation runs.

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// One score line of a report.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Entry {
    pub task: String,
    pub split: String,
    pub language: String,
    pub main_score: f64,
    pub scores: serde_json::Value,
    /// The per-item outcomes behind the scores, for intervals and `--compare`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub items: Option<super::bootstrap::Items>,
}

/// One file a model was loaded from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelFile {
    pub path: String,
    pub bytes: u64,
    pub sha256: String,
}

impl ModelFile {
    /// The files with their sizes and digests (read in a stream: about a second per GB).
    pub fn describe(files: &[std::path::PathBuf]) -> Result<Vec<Self>> {
        files
            .iter()
            .map(|f| {
                let (sha256, bytes) = crate::io::digest::sha256_file_len(f)?;
                Ok(Self { path: f.display().to_string(), bytes, sha256 })
            })
            .collect()
    }
}

/// A whole run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    pub model: String,
    pub prefix: String,
    pub xsent_version: String,
    /// The git commit xsent was built from, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// The model options of the run (`--dtype`, `--pooling`, `--max-length`, `--layers`, …; null
    /// where the model's own setting was used), so that two runs of one model can be told apart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settings: Option<serde_json::Value>,
    /// The files the model was loaded from (config, weights, tokenizer, modules), with their
    /// sizes and sha256: which weights a score belongs to, whatever the model's name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub model_files: Vec<ModelFile>,
    /// The data files read, with their sha256 and whether each is the pinned benchmark file.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub data: Vec<crate::data::provenance::DataFile>,
    pub date: String,
    pub seconds: f64,
    pub results: Vec<Entry>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra: Option<serde_json::Value>,
}

impl Report {
    /// Write the report as JSON, gzip-compressed when `path` ends in `.gz` (as [`Self::read`]
    /// reads it, and as the run records keep reports).
    pub fn write(&self, path: &Path) -> Result<()> {
        let text = serde_json::to_string_pretty(self)? + "\n";
        let bytes = if path.extension().is_some_and(|e| e == "gz") {
            use std::io::Write;
            let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
            gz.write_all(text.as_bytes())?;
            gz.finish()?
        } else {
            text.into_bytes()
        };
        // Through a temporary file and a rename: a failed write (a full disk) keeps the earlier report.
        crate::io::atomic::write_file_atomically(path, &bytes)
            .with_context(|| format!("cannot write report {}", path.display()))
    }

    /// Read a report that `eval --report` wrote (gzip-compressed when its name ends in `.gz`, as
    /// the run records in docs/results/runs keep them).
    pub fn read(path: &Path) -> Result<Self> {
        let text =
            crate::data::read_lines(path).with_context(|| format!("cannot read report {}", path.display()))?.join("\n");
        let report: Self = serde_json::from_str(&text)
            .with_context(|| format!("{} is not a report of xsent eval --report", path.display()))?;
        for e in &report.results {
            if let Some(items) = &e.items {
                items.check().with_context(|| {
                    format!("{}: the items of {} {} {} are damaged", path.display(), e.task, e.split, e.language)
                })?;
            }
        }
        Ok(report)
    }
}

/// Paired bootstrap differences between this run's entries and another report's for the same
/// sets (same task, split and language; entries without items, or absent from the other
/// report, are left out), per set and as the mean over each task's sets: the markdown table
/// and its JSON.
pub fn compare(this: &[Entry], other: &Report, other_path: &Path) -> Result<(String, serde_json::Value)> {
    use super::bootstrap::{paired, show, Items};
    let key = |e: &Entry| (e.task.clone(), e.split.clone(), e.language.clone());
    let others: std::collections::HashMap<_, &Items> =
        other.results.iter().filter_map(|e| e.items.as_ref().map(|i| (key(e), i))).collect();
    let mut table =
        String::from("| task | set | this | other | difference | 95 % CI | p |\n|---|---|---:|---:|---:|---:|---:|\n");
    let mut json = Vec::new();
    let mut by_task: Vec<(String, Vec<(&Items, &Items)>)> = Vec::new();
    for e in this {
        let (Some(mine), Some(theirs)) = (e.items.as_ref(), others.get(&key(e))) else { continue };
        let d = paired(&[mine], &[theirs])
            .with_context(|| format!("{} {} against {}", e.task, e.language, other_path.display()))?;
        table += &format!(
            "| {} | {} | {:.2} | {:.2} | {:+.2} | {} | {:.3} |\n",
            e.task,
            e.language,
            d.this,
            d.other,
            d.difference,
            show(d.ci95),
            d.p
        );
        json.push(serde_json::json!({"task": e.task, "split": e.split, "language": e.language, "difference": d}));
        match by_task.iter_mut().find(|(t, _)| *t == e.task) {
            Some((_, v)) => v.push((mine, theirs)),
            None => by_task.push((e.task.clone(), vec![(mine, theirs)])),
        }
    }
    anyhow::ensure!(!json.is_empty(), "{} has no scores of the sets scored here (same task, split and language, with per-item data: reports of xsent 0.1 from before --compare lack it)", other_path.display());
    for (task, pairs) in &by_task {
        if pairs.len() < 2 {
            continue;
        }
        let (a, b): (Vec<&Items>, Vec<&Items>) = pairs.iter().copied().unzip();
        let d = paired(&a, &b)?;
        let name = format!("mean of {} sets", pairs.len());
        table += &format!(
            "| {task} | **{name}** | {:.2} | {:.2} | **{:+.2}** | {} | {:.3} |\n",
            d.this,
            d.other,
            d.difference,
            show(d.ci95),
            d.p
        );
        json.push(serde_json::json!({"task": task, "language": name, "difference": d}));
    }
    table += &format!(
        "\nThis run minus {} ({}), paired: {}; p: the share of resamples whose difference is 0 or of the other sign.\n",
        other_path.display(),
        other.model,
        super::bootstrap::DESCRIPTION
    );
    Ok((
        table,
        serde_json::json!({"against": other_path.display().to_string(), "model": other.model, "differences": json}),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A report whose items are damaged is refused when it is read (before the model loads),
    /// naming the file and the set.
    #[test]
    fn damaged_items_are_refused_on_reading() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.json");
        let entry = |gold: Vec<f64>| Entry {
            task: "sts".into(),
            split: "test".into(),
            language: "en-en".into(),
            main_score: 0.0,
            scores: serde_json::json!({}),
            items: Some(super::super::bootstrap::Items::Correlation { sim: vec![0.1, 0.2, 0.3], gold }),
        };
        let report = |gold| Report {
            model: "m".into(),
            prefix: String::new(),
            xsent_version: "0".into(),
            commit: None,
            settings: None,
            model_files: Vec::new(),
            data: Vec::new(),
            date: String::new(),
            seconds: 0.0,
            results: vec![entry(gold)],
            extra: None,
        };
        report(vec![1.0, 2.0, 3.0]).write(&path).unwrap();
        assert!(Report::read(&path).is_ok());
        // A `.gz` name is written gzip-compressed (it was plain JSON under that name), and read back.
        let gz = path.with_extension("json.gz");
        report(vec![1.0, 2.0, 3.0]).write(&gz).unwrap();
        assert_eq!(&std::fs::read(&gz).unwrap()[..2], [0x1f, 0x8b]);
        assert_eq!(Report::read(&gz).unwrap().results.len(), 1);
        report(vec![1.0, 2.0]).write(&path).unwrap();
        let e = format!("{:#}", Report::read(&path).unwrap_err());
        assert!(e.contains("the items of sts test en-en are damaged") && e.contains("3 similarities but 2"), "{e}");
    }
}
