//! The training side of decontamination ([`crate::data::decontam`]): which evaluation sets a
//! config's training data is checked against, and the overlap each recipe reports.

use super::config::{Config, PairKind, RecipeConfig};
use crate::data::bitext::{read_sources, Pair, Source};
use crate::data::decontam::{default_data_dir, standard_sets, EvalSet, Index, Layout, Overlap, Split};
use crate::data::xnli::PairSet;
use anyhow::Result;

/// A config's decontamination: the index of the evaluation sets its training data must stay
/// out of (none with `data.decontaminate = false`), and the overlap found so far.
pub struct Decontam {
    index: Option<Index>,
    pub overlaps: Vec<Overlap>,
}

impl Decontam {
    /// The benchmark sets under `data.eval_dir` (else `XSENT_DATA`, else `../shared/data`), and
    /// the config's own validation files (`train.val_sts`, `dueam.val_sources`) and
    /// `data.eval_pairs` / `data.eval_lines`.
    pub fn new(cfg: &Config) -> Result<Self> {
        if !cfg.data.decontaminate {
            errln!("{}: decontamination is off (data.decontaminate = false): training data is not checked against the evaluation sets", crate::log::command());
            return Ok(Self { index: None, overlaps: Vec::new() });
        }
        let t0 = std::time::Instant::now();
        let index = Index::build(sets(cfg)?)?;
        let n: usize = index.sets().map(|(_, n)| n).sum();
        errln!(
            "{}: decontamination: {} evaluation sets, {n} sentences ({:.1} s)",
            crate::log::command(),
            index.sets().count(),
            t0.elapsed().as_secs_f64()
        );
        Ok(Self { index: Some(index), overlaps: Vec::new() })
    }

    /// Drop the pairs (read from config key `what`) with a side in an evaluation set, printing
    /// the count.
    pub fn pairs(&mut self, what: &str, pairs: Vec<Pair>) -> Vec<Pair> {
        let Some(index) = &self.index else { return pairs };
        let (kept, o) = index.filter_pairs(what, pairs);
        errln!("{}: {}", crate::log::command(), o.summary());
        self.overlaps.push(o);
        kept
    }

    /// Drop the pairs of a DuEAM pair set with a side in an evaluation set.
    pub fn pair_set(&mut self, what: &str, mut data: PairSet) -> PairSet {
        let Some(index) = &self.index else { return data };
        let (keep, o) = index.check(what, data.len(), true, |i| {
            let (a, b) = data.pair(i);
            [a, b]
        });
        errln!("{}: {}", crate::log::command(), o.summary());
        self.overlaps.push(o);
        let mut i = 0;
        data.retain(|_| {
            i += 1;
            keep[i - 1]
        });
        data
    }

    /// The index, when on.
    pub fn index(&self) -> Option<&Index> {
        self.index.as_ref()
    }
}

/// Say on stderr which evaluation files of the registry the data folder lacks (their sentences
/// are not removed from training), by data set, with the command that fetches them.
fn warn_missing(dir: &std::path::Path) {
    let missing = crate::data::decontam::missing_eval_files(dir);
    let mut by_set: Vec<(&str, Vec<&str>)> = Vec::new();
    for (set, path) in missing {
        match by_set.iter_mut().find(|(s, _)| *s == set) {
            Some((_, v)) => v.push(path),
            None => by_set.push((set, vec![path])),
        }
    }
    for (set, paths) in by_set {
        let shown = if paths.len() > 3 {
            format!("{} … ({} in all)", paths[..3].join(", "), paths.len())
        } else {
            paths.join(", ")
        };
        errln!(
            "xsent: warning: decontamination: {} is missing {set} evaluation files ({shown}): training data is not checked \
             against them, so it may hold their sentences; `xsent data fetch {set} --data-dir {}` gets them",
            dir.display(),
            dir.display()
        );
    }
}

/// The sets of [`index`].
pub fn sets(cfg: &Config) -> Result<Vec<EvalSet>> {
    let d = &cfg.data;
    let mut sets = match d.eval_dir.clone().or_else(default_data_dir) {
        Some(dir) => {
            anyhow::ensure!(
                dir.is_dir(),
                "data.eval_dir {} is not a folder (the benchmark data, as ../shared/data)",
                dir.display()
            );
            let sets = standard_sets(&dir);
            if !sets.is_empty() {
                warn_missing(&dir);
            }
            sets
        }
        None => Vec::new(),
    };
    if sets.is_empty() {
        errln!(
            "{}: warning: no benchmark data found for decontamination (set data.eval_dir or XSENT_DATA to the benchmark folder): \
             training data is checked only against the config's own validation and evaluation files", crate::log::command()
        );
    }
    // The config's own files, unless a benchmark set already holds them (train.val_sts is often
    // the STS benchmark's dev split).
    let known: Vec<std::path::PathBuf> =
        sets.iter().flat_map(|s| s.files.iter().filter_map(|(p, _)| p.canonicalize().ok())).collect();
    let mut own = |name: String, files: Vec<(std::path::PathBuf, Layout)>| {
        if !files.iter().all(|(p, _)| p.canonicalize().is_ok_and(|c| known.contains(&c))) {
            sets.push(EvalSet { name, split: Split::Dev, files });
        }
    };
    if let Some(p) = &cfg.train.val_sts {
        own("train.val_sts".into(), vec![(p.into(), Layout::ScoredPairs)]);
    }
    // (`data.val_sources` are held out of training by their source sentences already: see
    // `train_val_pairs`.)
    let dueam_val: &[Source] = match &cfg.recipe {
        RecipeConfig::Dueam(d) => &d.val_sources,
        _ => &[],
    };
    for (i, s) in dueam_val.iter().enumerate() {
        own(format!("dueam.val_sources[{i}]"), source_files(s));
    }
    for p in &d.eval_pairs {
        anyhow::ensure!(p.is_file(), "data.eval_pairs: {} is not a file", p.display());
        own(format!("data.eval_pairs {}", p.display()), vec![(p.clone(), Layout::ScoredPairs)]);
    }
    for p in &d.eval_lines {
        anyhow::ensure!(p.is_file(), "data.eval_lines: {} is not a file", p.display());
        own(format!("data.eval_lines {}", p.display()), vec![(p.clone(), Layout::Lines)]);
    }
    Ok(sets)
}

/// The files of a validation source, as sentence lists.
fn source_files(s: &Source) -> Vec<(std::path::PathBuf, Layout)> {
    match s {
        Source::Tsv { path, .. } => vec![(path.clone(), Layout::Tabs)],
        Source::Aligned { src, tgt, .. } => vec![(src.clone(), Layout::Lines), (tgt.clone(), Layout::Lines)],
        // XNLI files are training text; validating on them is refused elsewhere where it matters.
        Source::Xnli { .. } => Vec::new(),
    }
}

/// The line `metrics.jsonl` gets at the start of a run: per source, pairs read and dropped,
/// and the sets hit.
pub fn metrics_line(overlaps: &[Overlap]) -> serde_json::Value {
    let sources: Vec<serde_json::Value> = overlaps
        .iter()
        .map(|o| {
            let hits: serde_json::Map<String, serde_json::Value> =
                o.sets.iter().filter(|r| r.pairs > 0).map(|r| (r.set.clone(), serde_json::json!(r.pairs))).collect();
            serde_json::json!({"source": o.source, "pairs": o.items, "dropped": o.dropped, "by_set": hits})
        })
        .collect();
    serde_json::json!({"step": 0, "decontamination": sources})
}

/// `xsent data audit`: the overlap of each of the config's training, fitting and validation
/// sources with the evaluation sets, without training. Training and fitting sources are checked
/// against every set (they would be dropped from training); validation sources against the
/// benchmark sets only (they are kept: a validation set that holds test sentences is the
/// config's to fix).
pub fn audit(cfg: &Config) -> Result<Vec<Overlap>> {
    let all = Index::build(sets(cfg)?)?;
    let tests = Index::build(match cfg.data.eval_dir.clone().or_else(default_data_dir) {
        Some(dir) => standard_sets(&dir).into_iter().filter(|s| s.split == Split::Test).collect(),
        None => Vec::new(),
    })?;
    let validation = |what: String, p: Vec<Pair>| {
        let mut o = tests.filter_pairs(&what, p).1;
        o.validation = true;
        o
    };
    let mut out = Vec::new();
    if !cfg.data.sources.is_empty() {
        out.push(all.filter_pairs("data.sources", read_sources(&cfg.data.sources, "data.sources")?).1);
    }
    if let RecipeConfig::Distill(dc) = &cfg.recipe {
        if !dc.projection_fit_sources.is_empty() {
            let key = "distill.projection_fit_sources";
            out.push(all.filter_pairs(key, read_sources(&dc.projection_fit_sources, key)?).1);
        }
    }
    for (i, s) in cfg.data.val_sources.iter().enumerate() {
        out.push(validation(format!("data.val_sources[{i}]"), s.read()?));
    }
    if let RecipeConfig::Dueam(dc) = &cfg.recipe {
        let data = match dc.pairs {
            PairKind::Weak => crate::data::xnli::weak_pairs(&dc.xnli_dir, &dc.splits, &dc.langs, dc.cross_lingual)?,
            PairKind::Unsup => {
                crate::data::xnli::unsup_pairs(&dc.xnli_dir, &dc.splits, &dc.langs, dc.unsup_pairs, cfg.seed)?
            }
        };
        let (_, o) = all.check("dueam.xnli_dir", data.len(), true, |i| {
            let (a, b) = data.pair(i);
            [a, b]
        });
        out.push(o);
        for (i, s) in dc.val_sources.iter().enumerate() {
            out.push(validation(format!("dueam.val_sources[{i}]"), s.read()?));
        }
    }
    Ok(out)
}
