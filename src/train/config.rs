//! Training configuration: one TOML file per run, with sections for the trainer (`[train]`), the
//! optimiser and schedule (`[optim]`), the data (`[data]`) and the recipe (`[distill]`, `[dueam]`, …).
//! Unknown keys are errors; `--set key=value` overrides any value; the resolved config (every
//! default filled in) is written into the run directory.

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Which recipe trains: `distill`, `disentangle`, `dueam`, `lightweight` or `sp`.
    pub recipe: String,
    /// Seeds initialisation, data order and dropout.
    #[serde(default = "d_seed")]
    pub seed: u64,
    #[serde(default)]
    pub train: TrainConfig,
    #[serde(default)]
    pub optim: OptimConfig,
    #[serde(default)]
    pub data: DataConfig,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub distill: Option<super::recipes::distill::DistillConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disentangle: Option<super::recipes::disentangle::DisentangleConfig>,
    pub sp: Option<super::recipes::sp::SpConfig>,
    pub dueam: Option<super::recipes::dueam::DueamConfig>,
    pub lightweight: Option<super::recipes::lightweight::LightweightConfig>,
}

fn d_seed() -> u64 {
    42
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TrainConfig {
    /// Optimiser steps in all; 0: `epochs` passes over the data.
    pub max_steps: u64,
    pub epochs: u64,
    /// Examples per micro-batch (a recipe's example is e.g. one parallel pair).
    pub batch_size: usize,
    /// Micro-batches whose gradients are summed into one optimiser step.
    pub grad_accum: usize,
    /// Examples per shard: a micro-batch is cut into shards that run forward and backward on
    /// separate cores (for recipes whose loss is a mean over examples).
    pub shard_size: usize,
    /// Write a metrics line (and a progress line when stderr is not a terminal) every N steps.
    pub log_every: u64,
    /// Validate every N steps (0: only at the end).
    pub eval_every: u64,
    /// Validate before the first step too (the untrained model's scores).
    pub eval_at_start: bool,
    /// Checkpoint every N steps (0: only at the end and on interruption).
    pub checkpoint_every: u64,
    /// Keep this many most recent checkpoints (at least 2 are kept: a resume falls back to the
    /// one before a damaged newest checkpoint).
    pub keep_last: usize,
    /// Keep the model with the best validation score in `best/`.
    pub keep_best: bool,
    /// The validation score that decides "best" (default: the recipe's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub best_metric: Option<String>,
    /// `max` or `min` (default: the recipe's, with its metric).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub best_mode: Option<BestMode>,
    /// Stop when the best score has not improved for this many validations (0: never).
    pub early_stopping_patience: usize,
    /// `cpu`, `cuda` or `cuda:N` (cuda needs a build with `--features cuda`).
    pub device: String,
    /// Sentence pairs with gold similarity scores (the STS benchmark's csv layout, e.g.
    /// `sts-dev.csv`, or `sentence1<TAB>sentence2<TAB>score`), scored at every validation with the
    /// cosine of the model's embeddings: `sts_spearman` and `sts_pearson` (×100). Every recipe;
    /// `disentangle` scores its meaning embeddings (it keeps the base encoder loaded for this).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub val_sts: Option<String>,
}

impl Default for TrainConfig {
    fn default() -> Self {
        Self {
            max_steps: 0,
            epochs: 1,
            batch_size: 32,
            grad_accum: 1,
            shard_size: 8,
            log_every: 10,
            eval_every: 200,
            eval_at_start: true,
            checkpoint_every: 200,
            keep_last: 2,
            keep_best: true,
            best_metric: None,
            best_mode: None,
            early_stopping_patience: 0,
            device: "cpu".into(),
            val_sts: None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BestMode {
    Max,
    Min,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Schedule {
    /// Linear warmup to `lr`, then linear decay to 0 at the last step.
    Linear,
    /// Linear warmup to `lr`, then constant.
    Constant,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OptimConfig {
    pub lr: f64,
    pub weight_decay: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    /// Clip gradients to this global L2 norm (0: no clipping).
    pub max_grad_norm: f64,
    pub warmup_steps: u64,
    pub schedule: Schedule,
}

impl Default for OptimConfig {
    fn default() -> Self {
        Self {
            lr: 2e-5,
            weight_decay: 0.01,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-6,
            max_grad_norm: 1.0,
            warmup_steps: 0,
            schedule: Schedule::Linear,
        }
    }
}

impl OptimConfig {
    /// Values that would silently wreck training (NaN at the first step, or no clipping).
    pub fn validate(&self) -> Result<()> {
        let o = self;
        if !(o.lr >= 0.0 && o.lr.is_finite()) {
            bail!("optim.lr must be a finite number >= 0, got {}", o.lr);
        }
        if !(o.weight_decay >= 0.0 && o.weight_decay.is_finite()) {
            bail!("optim.weight_decay must be a finite number >= 0, got {}", o.weight_decay);
        }
        for (name, b) in [("beta1", o.beta1), ("beta2", o.beta2)] {
            if !(0.0..1.0).contains(&b) {
                bail!("optim.{name} must be in [0, 1), got {b}");
            }
        }
        if !(o.eps > 0.0 && o.eps.is_finite()) {
            bail!("optim.eps must be a finite number > 0 (1e-6 is usual), got {}", o.eps);
        }
        if !(o.max_grad_norm >= 0.0 && o.max_grad_norm.is_finite()) {
            bail!("optim.max_grad_norm must be a finite number >= 0 (0: no clipping), got {}", o.max_grad_norm);
        }
        Ok(())
    }

    /// Learning rate of optimiser step `step` (0-based) out of `total`.
    pub fn lr_at(&self, step: u64, total: u64) -> f64 {
        let w = self.warmup_steps;
        if step < w {
            return self.lr * (step + 1) as f64 / w as f64;
        }
        match self.schedule {
            Schedule::Constant => self.lr,
            Schedule::Linear => {
                let left = total.saturating_sub(step) as f64;
                let span = total.saturating_sub(w).max(1) as f64;
                self.lr * (left / span).clamp(0.0, 1.0)
            }
        }
    }

    pub fn adamw(&self) -> super::AdamWConfig {
        super::AdamWConfig {
            beta1: self.beta1,
            beta2: self.beta2,
            eps: self.eps,
            weight_decay: self.weight_decay,
            max_grad_norm: (self.max_grad_norm > 0.0).then_some(self.max_grad_norm),
        }
    }
}

/// Training data: a list of sources, and how much of it is held out for validation.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DataConfig {
    pub sources: Vec<crate::data::bitext::Source>,
    /// Examples (distinct source sentences) held out for validation.
    pub val_size: usize,
    /// Validate on these sources instead of holding out `val_size` sentences of `sources`
    /// (which then trains on every pair whose source sentence is not among them).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub val_sources: Vec<crate::data::bitext::Source>,
    /// Drop every training (and projection-fitting) pair with a side in an evaluation set: the
    /// benchmark sets under `eval_dir`, the config's validation files and `eval_pairs` /
    /// `eval_lines` ([`crate::data::decontam`]).
    pub decontaminate: bool,
    /// The benchmark data whose sets are checked (default: `XSENT_DATA`, else `../shared/data`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub eval_dir: Option<PathBuf>,
    /// More evaluation sets to keep out of training: files of scored pairs (as `eval sts --pairs`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub eval_pairs: Vec<PathBuf>,
    /// More evaluation sets to keep out of training: one sentence per line (as `eval xsr --src/--tgt`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub eval_lines: Vec<PathBuf>,
}

impl Default for DataConfig {
    fn default() -> Self {
        Self {
            sources: Vec::new(),
            val_size: 500,
            val_sources: Vec::new(),
            decontaminate: true,
            eval_dir: None,
            eval_pairs: Vec::new(),
            eval_lines: Vec::new(),
        }
    }
}

/// The recipes' own sections.
const RECIPE_SECTIONS: [&str; 5] = ["distill", "disentangle", "dueam", "lightweight", "sp"];

/// The error for a section that the config's recipe does not read: a typo in `recipe`, or a key
/// set for the wrong recipe (`--set sp.dim=…` on a distill config).
fn other_recipes_section(name: &str, recipe: &str) -> anyhow::Error {
    anyhow::anyhow!(
        "[{name}] is set, but recipe = {recipe:?} does not read it; remove the section (or the --set that made it), or set recipe = \"{name}\""
    )
}

/// Where a config's text comes from, which decides what its relative paths are relative to
/// ([`Config::paths_mut`] lists them). Paths given by `--set` are relative to the current
/// directory.
#[derive(Clone, Copy)]
pub enum ConfigFrom<'a> {
    /// A file: relative paths in it are relative to its folder.
    File(&'a Path),
    /// A config of `configs/` compiled into xsent: it names places by variables, and a relative
    /// path in it is relative to the current directory.
    BuiltIn(&'static super::builtin::BuiltIn),
    /// A run directory's `config.toml`: written with absolute paths; a relative one (written by
    /// an older xsent) is relative to the current directory, as it was then.
    Run(&'a Path),
}

impl ConfigFrom<'_> {
    /// The config as messages name it: its path, or `built-in config NAME`.
    pub fn name(&self) -> String {
        match self {
            Self::File(p) | Self::Run(p) => p.display().to_string(),
            Self::BuiltIn(b) => format!("built-in config {}", b.name),
        }
    }

    fn text(&self) -> Result<String> {
        match self {
            Self::File(p) | Self::Run(p) => {
                std::fs::read_to_string(p).with_context(|| format!("cannot read config {}", p.display()))
            }
            Self::BuiltIn(b) => Ok(b.text.to_string()),
        }
    }

    /// The folder relative paths of the config are relative to.
    fn base(&self) -> Result<PathBuf> {
        let cwd = std::env::current_dir().context("cannot read the current directory")?;
        Ok(match self {
            Self::File(p) => cwd.join(p.parent().unwrap_or(Path::new(""))),
            Self::BuiltIn(_) | Self::Run(_) => cwd,
        })
    }
}

/// What a path of a config names: a model (a directory, or a hub id when no such directory
/// exists) or a file or folder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathKind {
    Model,
    File,
}

/// A path-valued setting of a config, by key (`data.sources.0.src`).
pub struct PathField<'a> {
    pub key: String,
    pub kind: PathKind,
    value: PathValue<'a>,
}

enum PathValue<'a> {
    Text(&'a mut String),
    Path(&'a mut PathBuf),
}

impl PathField<'_> {
    /// The value as written.
    pub fn get(&self) -> String {
        match &self.value {
            PathValue::Text(t) => t.to_string(),
            PathValue::Path(p) => p.display().to_string(),
        }
    }

    fn set(&mut self, v: String) {
        match &mut self.value {
            PathValue::Text(t) => **t = v,
            PathValue::Path(p) => **p = PathBuf::from(v),
        }
    }
}

/// Read a config file and apply `--set key=value` overrides.
pub fn load(path: &Path, sets: &[String]) -> Result<Config> {
    load_with(path, &[], sets, false)
}

/// Read a config file, remove the `--unset` keys (their defaults apply), then apply the `--set`
/// overrides. A key to remove that the file does not set is an error, unless `missing_ok`
/// (a file compared with a run's saved config, which writes out every default).
pub fn load_with(path: &Path, unsets: &[String], sets: &[String], missing_ok: bool) -> Result<Config> {
    load_from(ConfigFrom::File(path), unsets, sets, missing_ok)
}

/// [`load_with`] for a config from anywhere: its paths made absolute ([`ConfigFrom`]) with
/// `${XSENT_DATA}`-style variables expanded ([`crate::places::expand`]).
pub fn load_from(from: ConfigFrom, unsets: &[String], sets: &[String], missing_ok: bool) -> Result<Config> {
    let name = from.name();
    let text = from.text()?;
    let mut value: toml::Value = toml::from_str(&text).with_context(|| format!("{name} is not valid TOML"))?;
    for k in unsets {
        apply_unset(&mut value, k, missing_ok).with_context(|| format!("in config {name}"))?;
    }
    for s in sets {
        apply_set(&mut value, s)?;
    }
    // Before the sections' own fields are read: a half-filled section of another recipe (made
    // by `--set distill.teacher=…` on an sp config) is named as such, not as a missing field.
    if let Some(recipe) = value.get("recipe").and_then(toml::Value::as_str).filter(|r| RECIPE_SECTIONS.contains(r)) {
        if let Some(name) = RECIPE_SECTIONS.iter().find(|n| **n != recipe && value.get(**n).is_some()) {
            return Err(other_recipes_section(name, recipe));
        }
    }
    let mut cfg: Config = if sets.is_empty() && unsets.is_empty() {
        // Straight from the text, so that the error shows the line and column.
        toml::from_str(&text).map_err(|e| anyhow::anyhow!("invalid config {name}: {}", e.to_string().trim_end()))?
    } else {
        value.try_into().map_err(|e: toml::de::Error| {
            let changes: Vec<String> = unsets
                .iter()
                .map(|k| format!("--unset {k}"))
                .chain(sets.iter().map(|s| format!("--set {s}")))
                .collect();
            anyhow::anyhow!("invalid config {name} after {}: {}", changes.join(" "), e.to_string().trim_end())
        })?
    };
    cfg.validate()?;
    let base = from.base()?;
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    let set_keys: Vec<&str> = sets.iter().filter_map(|s| s.split_once('=')).map(|(k, _)| k.trim()).collect();
    for mut f in cfg.paths_mut() {
        let by_set = set_keys.iter().any(|k| f.key == *k || f.key.strip_prefix(k).is_some_and(|r| r.starts_with('.')));
        let (base, said) = if by_set { (cwd.as_path(), "--set") } else { (base.as_path(), "config") };
        let v = resolve_path(&f.get(), f.kind, base, &cwd)
            .with_context(|| format!("{name}: {} = {:?} ({said})", f.key, f.get()))?;
        f.set(v);
    }
    Ok(cfg)
}

/// A path of a config made absolute: variables expanded, then a relative path joined to `base`
/// (a model path that is no directory there but has the form `org/name` stays a hub id). A
/// relative path that exists only relative to `cwd` is refused with a hint: older xsent read
/// config paths relative to the current directory.
fn resolve_path(value: &str, kind: PathKind, base: &Path, cwd: &Path) -> Result<String> {
    let expanded = crate::places::expand(value)?;
    let p = Path::new(&expanded);
    if p.is_absolute() {
        return Ok(expanded);
    }
    let rel = p.strip_prefix(".").unwrap_or(p);
    let joined = base.join(rel);
    if kind == PathKind::Model && !joined.is_dir() && crate::model::source::looks_like_hub_id(&expanded) {
        if base != cwd && cwd.join(rel).is_dir() {
            bail!(
                "no model directory {} (paths in a config are relative to its folder), but {} is one; \
                 write \"${{XSENT_MODELS}}/NAME\" for a model that scripts/setup.sh installed, a path relative to the config's folder, \
                 or an absolute path (older xsent read config paths relative to the current directory)",
                joined.display(),
                cwd.join(rel).display()
            );
        }
        return Ok(expanded);
    }
    if base != cwd && !joined.exists() && cwd.join(rel).exists() {
        bail!(
            "{} does not exist (paths in a config are relative to its folder), but {} does; \
             write \"${{XSENT_DATA}}/…\" for the benchmark data, a path relative to the config's folder, \
             or an absolute path (older xsent read config paths relative to the current directory)",
            joined.display(),
            cwd.join(rel).display()
        );
    }
    Ok(joined.display().to_string())
}

/// `a.b.c=value`: the value is TOML (`20`, `2e-5`, `true`, `"text"`, `["de", "fr"]`); anything
/// that does not parse as TOML is taken as a string. Array elements are addressed by index.
pub fn apply_set(root: &mut toml::Value, set: &str) -> Result<()> {
    let Some((key, raw)) = set.split_once('=') else {
        bail!("--set {set:?}: expected key=value, e.g. --set train.max_steps=20")
    };
    let key = key.trim();
    let parsed: toml::Value = match toml::from_str::<toml::Table>(&format!("v = {raw}")) {
        Ok(mut t) => t.remove("v").expect("the key just written"),
        Err(_) => toml::Value::String(raw.to_string()),
    };
    let parts: Vec<&str> = key.split('.').collect();
    if parts.iter().any(|p| p.is_empty()) {
        bail!("--set {set:?}: empty key part in {key:?}");
    }
    let mut cur = root;
    for (i, part) in parts.iter().enumerate() {
        let last = i + 1 == parts.len();
        cur = match cur {
            toml::Value::Table(t) => {
                if last {
                    t.insert(part.to_string(), parsed);
                    return Ok(());
                }
                t.entry(part.to_string()).or_insert_with(|| toml::Value::Table(toml::Table::new()))
            }
            toml::Value::Array(a) => {
                let idx: usize = part
                    .parse()
                    .map_err(|_| anyhow::anyhow!("--set {key}: {part:?} indexes a list and must be a number"))?;
                let len = a.len();
                let slot = a
                    .get_mut(idx)
                    .ok_or_else(|| anyhow::anyhow!("--set {key}: index {idx} but the list has {len} entries"))?;
                if last {
                    *slot = parsed;
                    return Ok(());
                }
                slot
            }
            _ => bail!("--set {key}: {} is not a table", parts[..i].join(".")),
        };
    }
    unreachable!("the loop returns at the last key part")
}

/// `a.b.c`: remove the key, so that its default applies (an optional setting such as
/// `train.val_sts` is then off). A key the config does not set is an error (a typo would
/// otherwise change nothing), unless `missing_ok`. Entries of a list are not removed one by one:
/// `--set` the list.
pub fn apply_unset(root: &mut toml::Value, key: &str, missing_ok: bool) -> Result<()> {
    let key = key.trim();
    if key.contains('=') {
        bail!("--unset {key}: --unset takes a key alone (e.g. --unset train.val_sts); to give a value use --set KEY=VALUE");
    }
    let parts: Vec<&str> = key.split('.').collect();
    if parts.iter().any(|p| p.is_empty()) {
        bail!("--unset {key}: empty key part");
    }
    let (last, path) = parts.split_last().expect("split gives at least one part");
    let mut cur = root;
    for (i, part) in path.iter().enumerate() {
        let here = parts[..=i].join(".");
        cur = match cur {
            toml::Value::Table(t) => match t.get_mut(*part) {
                Some(v) => v,
                None if missing_ok => return Ok(()),
                None => bail!("--unset {key}: the config does not set {here} (nothing to remove)"),
            },
            toml::Value::Array(a) => {
                let len = a.len();
                let idx: usize = part
                    .parse()
                    .map_err(|_| anyhow::anyhow!("--unset {key}: {part:?} indexes a list and must be a number"))?;
                match a.get_mut(idx) {
                    Some(v) => v,
                    None if missing_ok => return Ok(()),
                    None => bail!("--unset {key}: index {idx} but the list has {len} entries"),
                }
            }
            _ => bail!("--unset {key}: {} is a value, not a table", parts[..i].join(".")),
        };
    }
    match cur {
        toml::Value::Table(t) => {
            if t.remove(*last).is_none() && !missing_ok {
                bail!("--unset {key}: the config does not set {key} (nothing to remove)");
            }
            Ok(())
        }
        toml::Value::Array(_) => bail!(
            "--unset {key}: {} is a list, whose entries are not removed one by one; give the whole list with --set {}=[...]",
            path.join("."),
            path.join(".")
        ),
        _ => bail!("--unset {key}: {} is a value, not a table", path.join(".")),
    }
}

impl Config {
    pub fn validate(&self) -> Result<()> {
        let t = &self.train;
        if t.batch_size == 0 || t.grad_accum == 0 || t.shard_size == 0 {
            bail!("train.batch_size, train.grad_accum and train.shard_size must be at least 1");
        }
        if t.batch_size.checked_mul(t.grad_accum).is_none_or(|n| u64::try_from(n).is_err()) {
            bail!("train.batch_size × train.grad_accum = {} × {} is too large to count; a step takes batch_size × grad_accum examples", t.batch_size, t.grad_accum);
        }
        if t.max_steps == 0 && t.epochs == 0 {
            bail!("set train.max_steps or train.epochs");
        }
        if t.keep_last == 0 {
            bail!("train.keep_last = 0: the last checkpoint is always kept (--resume starts from it); give 1 or more");
        }
        self.optim.validate()?;
        // Each recipe and whether its section is set.
        let present = [
            self.distill.is_some(),
            self.disentangle.is_some(),
            self.dueam.is_some(),
            self.lightweight.is_some(),
            self.sp.is_some(),
        ];
        let sections: Vec<(&str, bool)> = RECIPE_SECTIONS.into_iter().zip(present).collect();
        match self.recipe.as_str() {
            "distill" => match &self.distill {
                None => bail!("recipe = \"distill\" needs a [distill] section"),
                Some(d) => d.validate()?,
            },
            "disentangle" => match &self.disentangle {
                None => bail!("recipe = \"disentangle\" needs a [disentangle] section"),
                Some(d) => d.validate()?,
            },
            "sp" => match &self.sp {
                None => bail!("recipe = \"sp\" needs an [sp] section"),
                Some(sp) => sp.validate().context("[sp]")?,
            },
            "dueam" => match &self.dueam {
                None => bail!("recipe = \"dueam\" needs a [dueam] section"),
                Some(d) => {
                    d.validate()?;
                    if !self.data.sources.is_empty() || !self.data.val_sources.is_empty() {
                        bail!("recipe = \"dueam\" builds its pairs from [dueam] xnli_dir/langs/pairs and validates on [[dueam.val_sources]]; remove [[data.sources]] and [[data.val_sources]]");
                    }
                }
            },
            "lightweight" => match &self.lightweight {
                None => bail!("recipe = \"lightweight\" needs a [lightweight] section"),
                Some(l) => l.validate().context("[lightweight]")?,
            },
            other => {
                bail!("recipe = {other:?} is not known; this xsent trains: {}", RECIPE_SECTIONS.join(", "))
            }
        }
        // A section of another recipe would be ignored: a typo in `recipe`, or a key set for
        // the wrong recipe (`--set sp.dim=…` on a distill config).
        if let Some((name, _)) = sections.iter().find(|(name, present)| *present && *name != self.recipe) {
            return Err(other_recipes_section(name, &self.recipe));
        }
        crate::device::parse_device(&t.device).context("train.device")?;
        crate::data::bitext::validate_sources(&self.data.sources, "data.sources")?;
        crate::data::bitext::validate_sources(&self.data.val_sources, "data.val_sources")?;
        Ok(())
    }

    /// The resolved config as TOML.
    pub fn to_toml(&self) -> Result<String> {
        Ok(toml::to_string_pretty(self)?)
    }

    /// Every path the config holds (models, data files and folders, tokenizers), by key. A new
    /// path-valued setting must be listed here, so that it resolves as the others do.
    pub fn paths_mut(&mut self) -> Vec<PathField<'_>> {
        fn text<'a>(out: &mut Vec<PathField<'a>>, key: &str, kind: PathKind, v: &'a mut String) {
            if !v.is_empty() {
                out.push(PathField { key: key.into(), kind, value: PathValue::Text(v) });
            }
        }
        fn path<'a>(out: &mut Vec<PathField<'a>>, key: &str, v: Option<&'a mut PathBuf>) {
            if let Some(v) = v.filter(|v| !v.as_os_str().is_empty()) {
                out.push(PathField { key: key.into(), kind: PathKind::File, value: PathValue::Path(v) });
            }
        }
        fn sources<'a>(out: &mut Vec<PathField<'a>>, key: &str, list: &'a mut [crate::data::bitext::Source]) {
            for (i, s) in list.iter_mut().enumerate() {
                path(out, &format!("{key}.{i}.path"), s.path.as_mut());
                path(out, &format!("{key}.{i}.src"), s.src.as_mut());
                path(out, &format!("{key}.{i}.tgt"), s.tgt.as_mut());
                path(out, &format!("{key}.{i}.dir"), s.dir.as_mut());
            }
        }
        let mut out = Vec::new();
        if let Some(v) = self.train.val_sts.as_mut() {
            text(&mut out, "train.val_sts", PathKind::File, v);
        }
        sources(&mut out, "data.sources", &mut self.data.sources);
        sources(&mut out, "data.val_sources", &mut self.data.val_sources);
        path(&mut out, "data.eval_dir", self.data.eval_dir.as_mut());
        for (i, p) in self.data.eval_pairs.iter_mut().enumerate() {
            path(&mut out, &format!("data.eval_pairs.{i}"), Some(p));
        }
        for (i, p) in self.data.eval_lines.iter_mut().enumerate() {
            path(&mut out, &format!("data.eval_lines.{i}"), Some(p));
        }
        if let Some(d) = self.distill.as_mut() {
            text(&mut out, "distill.teacher", PathKind::Model, &mut d.teacher);
            text(&mut out, "distill.student", PathKind::Model, &mut d.student);
            sources(&mut out, "distill.projection_fit_sources", &mut d.projection_fit_sources);
        }
        if let Some(d) = self.disentangle.as_mut() {
            text(&mut out, "disentangle.base", PathKind::Model, &mut d.base);
        }
        if let Some(d) = self.dueam.as_mut() {
            text(&mut out, "dueam.anchor", PathKind::Model, &mut d.anchor);
            text(&mut out, "dueam.learner", PathKind::Model, &mut d.learner);
            path(&mut out, "dueam.xnli_dir", Some(&mut d.xnli_dir));
            sources(&mut out, "dueam.val_sources", &mut d.val_sources);
        }
        if let Some(l) = self.lightweight.as_mut() {
            path(&mut out, "lightweight.tokenizer", l.tokenizer.as_mut());
        }
        if let Some(s) = self.sp.as_mut() {
            path(&mut out, "sp.tokenizer", s.tokenizer.as_mut());
        }
        out
    }
}

/// The values a `--resume` may not change, `key: saved -> new` for each that differs between
/// the run's saved config and the one it would resume with: what the checkpoint holds or was
/// drawn with (`recipe`, `seed`, the recipe's section but for its `embed_batch_size`), and what
/// fixes the data order and its position (`data`, `train.batch_size`, `train.grad_accum`).
/// Schedule, optimiser, validation and checkpoint settings may change.
pub fn changed_on_resume(saved: &Config, new: &Config) -> Result<Vec<String>> {
    let section = format!("{}.", saved.recipe);
    differences_where(saved, new, |k| {
        matches!(k, "recipe" | "seed" | "train.batch_size" | "train.grad_accum")
            || k.starts_with("data.")
            || (k.starts_with(&section) && !k.ends_with(".embed_batch_size"))
    })
}

/// Every key whose value differs between two configs, as `key: first -> second`, in key order.
pub fn differences(a: &Config, b: &Config) -> Result<Vec<String>> {
    differences_where(a, b, |_| true)
}

fn differences_where(saved: &Config, new: &Config, keep: impl Fn(&str) -> bool) -> Result<Vec<String>> {
    fn flat(prefix: &str, v: &toml::Value, out: &mut std::collections::BTreeMap<String, String>) {
        match v {
            toml::Value::Table(t) => {
                for (k, v) in t {
                    flat(&if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") }, v, out);
                }
            }
            _ => {
                out.insert(prefix.to_string(), v.to_string());
            }
        }
    }
    let (mut a, mut b) = (Default::default(), Default::default());
    flat("", &toml::Value::try_from(saved)?, &mut a);
    flat("", &toml::Value::try_from(new)?, &mut b);
    let none = "(unset)".to_string();
    let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    Ok(keys
        .into_iter()
        .filter(|k| keep(k) && a.get(*k) != b.get(*k))
        .map(|k| format!("{k}: {} -> {}", a.get(k).unwrap_or(&none), b.get(k).unwrap_or(&none)))
        .collect())
}

/// The first line of a run directory's `config.toml`: what tells a run's files from a user's
/// own of the same name when a new run may clear a failed start.
pub const RUN_CONFIG_HEADER: &str = "# xsent train: the resolved config of this run, every default written out\n";

/// Whether `path` is a `config.toml` that `xsent train` wrote (it starts with [`RUN_CONFIG_HEADER`]).
pub fn is_run_config(path: &Path) -> bool {
    std::fs::read_to_string(path).is_ok_and(|t| t.starts_with(RUN_CONFIG_HEADER))
}

/// A run directory's `config.toml`: [`RUN_CONFIG_HEADER`], then the config.
pub fn run_config_text(cfg: &Config) -> Result<String> {
    Ok(format!("{RUN_CONFIG_HEADER}{}", cfg.to_toml()?))
}

/// The default run directory of a config: `runs/<file stem>` (a built-in's: `runs/<name>`).
pub fn default_out(config: &ConfigFrom) -> PathBuf {
    match config {
        ConfigFrom::File(p) | ConfigFrom::Run(p) => PathBuf::from("runs").join(p.file_stem().unwrap_or_default()),
        ConfigFrom::BuiltIn(b) => PathBuf::from("runs").join(b.name),
    }
}

/// The config `--config ARG` names: the file ARG when it exists, else the built-in config of
/// that name (`dueam` or `dueam.toml`), saying on stderr which one is used.
pub fn find(arg: &Path) -> Result<ConfigFrom<'_>> {
    let builtin = arg.to_str().and_then(super::builtin::find);
    if arg.is_file() {
        if builtin.is_some() {
            errln!("xsent train: config {} (the file; the built-in config of that name is not used)", arg.display());
        }
        return Ok(ConfigFrom::File(arg));
    }
    if arg.exists() {
        bail!(
            "--config {} is not a file: give a config file, or the name of a built-in config ({})",
            arg.display(),
            super::builtin::names()
        );
    }
    match builtin {
        Some(b) => {
            errln!("xsent train: config {} (built in; no file {} here; `xsent config show {}` prints it)", b.name, arg.display(), b.name);
            Ok(ConfigFrom::BuiltIn(b))
        }
        None => bail!(
            "--config {}: no such file, and no built-in config of that name; the built-in ones are {} (`xsent config list`)",
            arg.display(),
            super::builtin::names()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> toml::Value {
        toml::from_str("recipe = \"distill\"\n[train]\nmax_steps = 5\n[distill]\nteacher = \"t\"\nstudent = \"s\"\n")
            .unwrap()
    }

    /// The paper-scale distillation config lists the paper's languages, each paired with
    /// English once.
    #[test]
    fn the_paper_distillation_config_has_the_papers_languages() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("configs");
        let paper = load(&dir.join("distill-paper.toml"), &["train.device=\"cpu\"".to_string()]).unwrap();
        let langs: Vec<&str> = paper.data.sources.iter().map(|s| s.tgt_lang.as_deref().unwrap()).collect();
        assert_eq!(langs.len(), 52);
        assert!(paper.data.sources.iter().all(|s| s.src_lang.as_deref() == Some("en")));
        let distinct: std::collections::BTreeSet<&str> = langs.iter().copied().collect();
        assert_eq!(distinct.len(), langs.len());
        for l in ["ar", "de", "tr", "fr-ca", "pt-br", "zh-cn", "zh-tw", "ku", "my"] {
            assert!(distinct.contains(l), "{l}");
        }
    }

    #[test]
    fn set_overrides_values_and_creates_tables() {
        let mut v = base();
        apply_set(&mut v, "train.max_steps=20").unwrap();
        apply_set(&mut v, "optim.lr=1e-4").unwrap();
        apply_set(&mut v, "distill.student_prefix=query: ").unwrap();
        apply_set(&mut v, "data.val_size=7").unwrap();
        let c: Config = v.try_into().unwrap();
        assert_eq!(c.train.max_steps, 20);
        assert_eq!(c.optim.lr, 1e-4);
        assert_eq!(c.data.val_size, 7);
        assert_eq!(c.distill.unwrap().student_prefix, "query: ");
    }

    #[test]
    fn unknown_keys_are_errors() {
        let mut v = base();
        apply_set(&mut v, "train.max_stepz=20").unwrap();
        let e = v.try_into::<Config>().unwrap_err().to_string();
        assert!(e.contains("max_stepz"), "{e}");
        assert!(apply_set(&mut base(), "train.max_steps").is_err());
        assert!(apply_set(&mut base(), "recipe.x=1").unwrap_err().to_string().contains("not a table"));
    }

    #[test]
    fn unset_removes_a_key_and_its_default_applies() {
        let mut v = base();
        apply_set(&mut v, "train.val_sts=\"dev.csv\"").unwrap();
        apply_set(&mut v, "train.eval_every=7").unwrap();
        apply_unset(&mut v, "train.val_sts", false).unwrap();
        apply_unset(&mut v, "train.eval_every", false).unwrap();
        let c: Config = v.clone().try_into().unwrap();
        assert_eq!(c.train.val_sts, None);
        assert_eq!(c.train.eval_every, TrainConfig::default().eval_every);
        assert_eq!(c.train.max_steps, 5, "other keys stay");
        // Keys the config does not set, paths through values, list entries and key=value are
        // errors naming the key; a file compared with a saved config may lack the key.
        let e = apply_unset(&mut v, "train.val_sts", false).unwrap_err().to_string();
        assert!(e.contains("does not set train.val_sts"), "{e}");
        apply_unset(&mut v, "train.val_sts", true).unwrap();
        let e = apply_unset(&mut v, "optim.lr", false).unwrap_err().to_string();
        assert!(e.contains("does not set optim"), "{e}");
        apply_unset(&mut v, "optim.lr", true).unwrap();
        let e = apply_unset(&mut v, "train.max_steps.x.y", false).unwrap_err().to_string();
        assert!(e.contains("train.max_steps is a value"), "{e}");
        apply_set(&mut v, "data.sources=[{kind = \"tsv\", path = \"a.tsv\"}]").unwrap();
        let e = apply_unset(&mut v, "data.sources.0", false).unwrap_err().to_string();
        assert!(e.contains("is a list") && e.contains("--set data.sources=[...]"), "{e}");
        let e = apply_unset(&mut v, "data.sources.3.path", false).unwrap_err().to_string();
        assert!(e.contains("index 3 but the list has 1 entries"), "{e}");
        apply_unset(&mut v, " data.sources.0.path ", false).unwrap();
        assert!(apply_unset(&mut v, "train.max_steps=3", false).unwrap_err().to_string().contains("takes a key alone"));
        assert!(apply_unset(&mut v, "train..x", false).is_err());
    }

    #[test]
    fn schedule() {
        let o = OptimConfig { lr: 1.0, warmup_steps: 10, ..Default::default() };
        assert!((o.lr_at(0, 110) - 0.1).abs() < 1e-12);
        assert!((o.lr_at(9, 110) - 1.0).abs() < 1e-12);
        assert!((o.lr_at(10, 110) - 1.0).abs() < 1e-12);
        assert!((o.lr_at(60, 110) - 0.5).abs() < 1e-12);
        assert!((o.lr_at(109, 110) - 0.01).abs() < 1e-12);
        let c = OptimConfig { schedule: Schedule::Constant, ..o };
        assert_eq!(c.lr_at(100, 110), 1.0);
        let no_warmup = OptimConfig { lr: 2.0, ..Default::default() };
        assert_eq!(no_warmup.lr_at(0, 4), 2.0);
        assert_eq!(no_warmup.lr_at(2, 4), 1.0);
    }

    #[test]
    fn every_shipped_config_loads() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("configs");
        let mut n = 0;
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "toml") {
                // The paper-scale configs name a GPU; this build may have no CUDA.
                let cfg = load(&p, &["train.device=\"cpu\"".to_string()])
                    .unwrap_or_else(|e| panic!("{}: {e:#}", p.display()));
                assert!(!cfg.recipe.is_empty());
                n += 1;
            }
        }
        assert!(n >= 10, "only {n} configs in {}", dir.display());
        let distill = load(&dir.join("distill.toml"), &[]).unwrap();
        assert_eq!(
            distill.train.val_sts,
            Some(crate::places::data_dir().0.join("sts/stsbenchmark/sts-dev.csv").display().to_string())
        );
    }
}
