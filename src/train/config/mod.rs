//! Training configuration: one TOML file per run, with sections for the trainer (`[train]`), the
//! optimiser and schedule (`[optim]`), the data (`[data]`) and the recipe (`[distill]`, `[dueam]`, …).
//! Unknown keys are errors; `--set key=value` overrides any value; the resolved config (every
//! default filled in) is written into the run directory.

use crate::data::bitext::Source;
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

pub mod defaults;
pub mod disentangle;
pub mod distill;
pub mod dueam;
pub mod lightweight;
mod load;
pub mod sp;

pub use disentangle::{DisentangleConfig, MeaningInit};
pub use distill::{DistillConfig, FitOn, Projection, Targets};
pub use dueam::{DueamConfig, LossTerms, PairKind, SolverKind};
pub use lightweight::{Generative, LightweightConfig};
pub use load::{apply_set, apply_unset, find, load, load_from, load_with, ConfigFrom};
pub use sp::{DropoutKind, SpConfig};

/// A training config: the trainer's sections and the section of the recipe that trains.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(try_from = "ConfigFile", into = "ConfigFile")]
pub struct Config {
    /// Which recipe trains, with its section (`recipe = "distill"` and `[distill]` in the file).
    pub recipe: RecipeConfig,
    /// Seeds initialisation, data order and dropout.
    pub seed: u64,
    pub train: TrainConfig,
    pub optim: OptimConfig,
    pub data: DataConfig,
}

/// The recipe that trains, with its own section of the config.
#[derive(Debug, Clone)]
pub enum RecipeConfig {
    Distill(DistillConfig),
    Disentangle(DisentangleConfig),
    Dueam(DueamConfig),
    Lightweight(LightweightConfig),
    Sp(SpConfig),
}

impl RecipeConfig {
    /// The recipes' names, as `recipe = …` and their sections name them.
    pub const NAMES: [&'static str; 5] = ["distill", "disentangle", "dueam", "lightweight", "sp"];

    /// Its name: `recipe = …` and its section's.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Distill(_) => "distill",
            Self::Disentangle(_) => "disentangle",
            Self::Dueam(_) => "dueam",
            Self::Lightweight(_) => "lightweight",
            Self::Sp(_) => "sp",
        }
    }

    /// The section's own checks (no files read).
    fn validate(&self) -> Result<()> {
        match self {
            Self::Distill(d) => d.validate(),
            Self::Disentangle(d) => d.validate(),
            Self::Dueam(d) => d.validate(),
            Self::Lightweight(l) => l.validate().context("[lightweight]"),
            Self::Sp(s) => s.validate().context("[sp]"),
        }
    }
}

impl std::fmt::Display for RecipeConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A config as its file has it: `recipe = "NAME"` beside one optional section per recipe.
/// [`Config`] is read and written through it; only the named recipe's section may be set.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    recipe: String,
    #[serde(default = "defaults::seed")]
    seed: u64,
    #[serde(default)]
    train: TrainConfig,
    #[serde(default)]
    optim: OptimConfig,
    #[serde(default)]
    data: DataConfig,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    distill: Option<DistillConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    disentangle: Option<DisentangleConfig>,
    sp: Option<SpConfig>,
    dueam: Option<DueamConfig>,
    lightweight: Option<LightweightConfig>,
}

impl TryFrom<ConfigFile> for Config {
    type Error = anyhow::Error;

    /// The recipe's section, which must be set; any other recipe's section is an error (a typo
    /// in `recipe`, or a key set for the wrong recipe: `--set sp.dim=…` on a distill config).
    fn try_from(f: ConfigFile) -> Result<Self> {
        let present =
            [f.distill.is_some(), f.disentangle.is_some(), f.dueam.is_some(), f.lightweight.is_some(), f.sp.is_some()];
        let needs = |name: &str| {
            let article = if name == "sp" { "an" } else { "a" };
            anyhow::anyhow!("recipe = \"{name}\" needs {article} [{name}] section")
        };
        let recipe = match f.recipe.as_str() {
            "distill" => RecipeConfig::Distill(f.distill.ok_or_else(|| needs("distill"))?),
            "disentangle" => RecipeConfig::Disentangle(f.disentangle.ok_or_else(|| needs("disentangle"))?),
            "dueam" => RecipeConfig::Dueam(f.dueam.ok_or_else(|| needs("dueam"))?),
            "lightweight" => RecipeConfig::Lightweight(f.lightweight.ok_or_else(|| needs("lightweight"))?),
            "sp" => RecipeConfig::Sp(f.sp.ok_or_else(|| needs("sp"))?),
            other => bail!("recipe = {other:?} is not known; this xsent trains: {}", RecipeConfig::NAMES.join(", ")),
        };
        if let Some((name, _)) =
            RecipeConfig::NAMES.iter().zip(present).find(|(name, set)| *set && **name != recipe.name())
        {
            return Err(other_recipes_section(name, recipe.name()));
        }
        Ok(Config { recipe, seed: f.seed, train: f.train, optim: f.optim, data: f.data })
    }
}

impl From<Config> for ConfigFile {
    fn from(c: Config) -> Self {
        let mut f = ConfigFile {
            recipe: c.recipe.name().to_string(),
            seed: c.seed,
            train: c.train,
            optim: c.optim,
            data: c.data,
            distill: None,
            disentangle: None,
            sp: None,
            dueam: None,
            lightweight: None,
        };
        match c.recipe {
            RecipeConfig::Distill(d) => f.distill = Some(d),
            RecipeConfig::Disentangle(d) => f.disentangle = Some(d),
            RecipeConfig::Dueam(d) => f.dueam = Some(d),
            RecipeConfig::Lightweight(l) => f.lightweight = Some(l),
            RecipeConfig::Sp(s) => f.sp = Some(s),
        }
        f
    }
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
    /// Prepare the next optimiser step's batches (tokenising; DuEAM's WMDs) on a background
    /// thread while the current step runs. Off: in the step (the same numbers).
    pub ahead: bool,
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
    /// `f32`, or `bf16`: the encoder's matrix products and activations in bf16, its master
    /// weights, gradients and optimiser state in f32 ([`crate::train::precision`]).
    pub precision: Precision,
}

/// `train.precision`: the element type of a training forward.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    /// Everything in f32.
    #[default]
    F32,
    /// The transformer layers' matrix products and activations in bf16; LayerNorm, softmax,
    /// the embedding lookups, the heads after pooling and the loss in f32.
    Bf16,
}

impl Precision {
    /// The values `train.precision` accepts.
    pub const NAMES: [&'static str; 2] = ["f32", "bf16"];
}

impl<'de> Deserialize<'de> for Precision {
    /// Written by hand for an error that names the key and says why f16 is not among the values.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        match s.as_str() {
            "f32" => Ok(Self::F32),
            "bf16" => Ok(Self::Bf16),
            other => Err(serde::de::Error::custom(format!(
                "train.precision = {other:?} is not supported; give \"f32\" (the default) or \"bf16\"{}",
                if other.eq_ignore_ascii_case("f16") || other.eq_ignore_ascii_case("fp16") {
                    " (f16 training would need loss scaling, which xsent does not do)"
                } else {
                    ""
                }
            ))),
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
        // The optimiser adds eps in f32: a value that f32 rounds to 0 or to infinity is refused too.
        if !(o.eps > 0.0 && o.eps as f32 > 0.0 && (o.eps as f32).is_finite()) {
            bail!(
                "optim.eps must be a finite number > 0 that f32 holds (between about 1.4e-45 and 3.4e38; 1e-6 is usual), got {:?}",
                o.eps
            );
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
    pub sources: Vec<Source>,
    /// Examples (distinct source sentences) held out for validation.
    pub val_size: usize,
    /// Validate on these sources instead of holding out `val_size` sentences of `sources`
    /// (which then trains on every pair whose source sentence is not among them).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub val_sources: Vec<Source>,
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

/// The error for a section that the config's recipe does not read: a typo in `recipe`, or a key
/// set for the wrong recipe (`--set sp.dim=…` on a distill config).
fn other_recipes_section(name: &str, recipe: &str) -> anyhow::Error {
    anyhow::anyhow!(
        "[{name}] is set, but recipe = {recipe:?} does not read it; remove the section (or the --set that made it), or set recipe = \"{name}\""
    )
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
        self.recipe.validate()?;
        if matches!(self.recipe, RecipeConfig::Dueam(_))
            && (!self.data.sources.is_empty() || !self.data.val_sources.is_empty())
        {
            bail!("recipe = \"dueam\" builds its pairs from [dueam] xnli_dir/langs/pairs and validates on [[dueam.val_sources]]; remove [[data.sources]] and [[data.val_sources]]");
        }
        crate::device::parse_device(&t.device).context("train.device")?;
        if t.precision != Precision::F32 {
            if let RecipeConfig::Sp(_) | RecipeConfig::Disentangle(_) = self.recipe {
                bail!(
                    "train.precision = \"bf16\" applies to the recipes that train a transformer encoder (distill, dueam, lightweight); \
                     {} trains {}, which stays in f32: remove train.precision or set it to \"f32\"",
                    self.recipe,
                    if matches!(self.recipe, RecipeConfig::Sp(_)) {
                        "a table of unit embeddings that it averages (no matrix products for bf16 to run)"
                    } else {
                        "small MLP heads on a frozen encoder's cached vectors"
                    }
                );
            }
        }
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
        fn sources<'a>(out: &mut Vec<PathField<'a>>, key: &str, list: &'a mut [Source]) {
            for (i, s) in list.iter_mut().enumerate() {
                match s {
                    Source::Tsv { path: p, .. } => path(out, &format!("{key}.{i}.path"), Some(p)),
                    Source::Aligned { src, tgt, .. } => {
                        path(out, &format!("{key}.{i}.src"), Some(src));
                        path(out, &format!("{key}.{i}.tgt"), Some(tgt));
                    }
                    Source::Xnli { dir, .. } => path(out, &format!("{key}.{i}.dir"), Some(dir)),
                }
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
        match &mut self.recipe {
            RecipeConfig::Distill(d) => {
                text(&mut out, "distill.teacher", PathKind::Model, &mut d.teacher);
                text(&mut out, "distill.student", PathKind::Model, &mut d.student);
                sources(&mut out, "distill.projection_fit_sources", &mut d.projection_fit_sources);
            }
            RecipeConfig::Disentangle(d) => text(&mut out, "disentangle.base", PathKind::Model, &mut d.base),
            RecipeConfig::Dueam(d) => {
                text(&mut out, "dueam.anchor", PathKind::Model, &mut d.anchor);
                text(&mut out, "dueam.learner", PathKind::Model, &mut d.learner);
                path(&mut out, "dueam.xnli_dir", Some(&mut d.xnli_dir));
                sources(&mut out, "dueam.val_sources", &mut d.val_sources);
            }
            RecipeConfig::Lightweight(l) => path(&mut out, "lightweight.tokenizer", l.tokenizer.as_mut()),
            RecipeConfig::Sp(s) => path(&mut out, "sp.tokenizer", s.tokenizer.as_mut()),
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
    let section = format!("{}.", saved.recipe.name());
    differences_where(saved, new, |k| k.starts_with("data.") || trained_with_key(k, &section))
}

/// Whether `key` (flat, `train.batch_size`) is one a checkpoint was trained with, other than
/// the data's: `section` is the recipe's (`distill.`).
fn trained_with_key(key: &str, section: &str) -> bool {
    matches!(key, "recipe" | "seed" | "train.batch_size" | "train.grad_accum")
        || (key.starts_with(section) && !key.ends_with(".embed_batch_size"))
}

/// The values a checkpoint was trained with, but for the data (whose digest the checkpoint
/// keeps) and for paths (models and files may move, or be spelt otherwise; the checkpoint's
/// parameters are checked against the model's shapes): `key = value` in key order, for its
/// `state.json`. A `--resume` with a config that gives another value is refused, whichever file
/// that config came from.
pub fn trained_with(cfg: &Config) -> Result<std::collections::BTreeMap<String, String>> {
    let section = format!("{}.", cfg.recipe.name());
    let mut all = Default::default();
    flat("", &toml::Value::try_from(cfg)?, &mut all);
    let mut c = cfg.clone();
    let paths: Vec<String> = c.paths_mut().into_iter().map(|f| f.key).collect();
    // A list of sources is one value here; it holds paths when any entry does.
    let holds_path = |k: &str| paths.iter().any(|p| p == k || p.strip_prefix(k).is_some_and(|r| r.starts_with('.')));
    all.retain(|k, _| trained_with_key(k, &section) && !holds_path(k));
    Ok(all)
}

/// The keys of `was` (a checkpoint's [`trained_with`]) that `now` gives otherwise, as
/// `key: was -> now`. Keys a later xsent adds are not in `was` and not compared.
pub fn trained_otherwise(
    was: &std::collections::BTreeMap<String, String>,
    now: &std::collections::BTreeMap<String, String>,
) -> Vec<String> {
    was.iter()
        .filter(|(k, v)| now.get(*k) != Some(*v))
        .map(|(k, v)| format!("{k}: {v} -> {}", now.get(k).map_or("(unset)", String::as_str)))
        .collect()
}

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

/// Every key whose value differs between two configs, as `key: first -> second`, in key order.
pub fn differences(a: &Config, b: &Config) -> Result<Vec<String>> {
    differences_where(a, b, |_| true)
}

fn differences_where(saved: &Config, new: &Config, keep: impl Fn(&str) -> bool) -> Result<Vec<String>> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

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
        let pairs: Vec<(&str, &str)> = paper
            .data
            .sources
            .iter()
            .map(|s| match s {
                Source::Tsv { src_lang: Some(a), tgt_lang: Some(b), .. } => (a.as_str(), b.as_str()),
                other => panic!("{other:?}"),
            })
            .collect();
        let langs: Vec<&str> = pairs.iter().map(|p| p.1).collect();
        assert_eq!(langs.len(), 52);
        assert!(pairs.iter().all(|p| p.0 == "en"));
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
        let RecipeConfig::Distill(d) = c.recipe else { panic!("{:?}", c.recipe) };
        assert_eq!(d.student_prefix, "query: ");
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

    /// What a checkpoint keeps as trained with: the recipe's settings, seed and batch, not its
    /// paths (a model moved, or spelt otherwise, is the same model: the parameters' shapes are
    /// checked on load) nor schedule or data; keys a later xsent adds are not compared.
    #[test]
    fn trained_with_leaves_out_paths_and_compares_what_it_kept() {
        let cfg = |sets: &[&str]| -> Config {
            let mut v = base();
            for s in sets {
                apply_set(&mut v, s).unwrap();
            }
            v.try_into().unwrap()
        };
        let was = trained_with(&cfg(&[])).unwrap();
        assert!(
            was.contains_key("seed") && was.contains_key("train.batch_size") && was.contains_key("distill.max_length")
        );
        assert!(
            !was.keys().any(|k| k == "distill.teacher" || k == "distill.student" || k.starts_with("data.")),
            "{was:?}"
        );
        let moved = cfg(&["distill.teacher=\"../elsewhere/t\"", "optim.lr=0.5", "train.max_steps=9"]);
        assert!(trained_otherwise(&was, &trained_with(&moved).unwrap()).is_empty());
        let fit = cfg(&["distill.projection_fit_sources=[{kind = \"tsv\", path = \"fit.tsv\"}]"]);
        assert!(!trained_with(&fit).unwrap().contains_key("distill.projection_fit_sources"), "a list holding paths");
        let other = trained_with(&cfg(&["seed=9", "train.batch_size=4"])).unwrap();
        assert_eq!(trained_otherwise(&was, &other), ["seed: 42 -> 9", "train.batch_size: 32 -> 4"]);
        let mut newer = other.clone();
        newer.insert("distill.a_later_key".into(), "1".into());
        assert_eq!(trained_otherwise(&other, &newer), Vec::<String>::new());
    }

    /// Values that passed without a word: a second key after a line break (dropped), a number
    /// TOML does not read (a string, refused later as one) and a section replaced whole.
    #[test]
    fn set_refuses_values_that_would_change_more_or_less_than_said() {
        let e = apply_set(&mut base(), "train.seed=5\nbogus=9").unwrap_err().to_string();
        assert!(e.contains("--set train.seed: the value") && e.contains("is not one TOML value"), "{e}");
        for n in [".5", "1.", "18446744073709551615", "+.5e-3", "1e400", "007"] {
            let e = apply_set(&mut base(), &format!("optim.lr={n}")).unwrap_err().to_string();
            assert!(e.contains(&format!("--set optim.lr={n}: not a number TOML reads")), "{e}");
        }
        // Words stay strings; TOML's own inf and nan stay numbers.
        for (raw, string) in [("Inf", true), ("nan", false), ("inf", false), ("de", true), ("1e300", false)] {
            let mut v = base();
            apply_set(&mut v, &format!("distill.student_prefix={raw}")).unwrap();
            assert_eq!(v["distill"]["student_prefix"].is_str(), string, "{raw}");
        }
        // Quoted, such text is a string.
        let mut v = base();
        apply_set(&mut v, "distill.student_prefix=\"007\"").unwrap();
        assert_eq!(v["distill"]["student_prefix"].as_str(), Some("007"));
        let e = apply_set(&mut base(), "train={max_steps=5}").unwrap_err().to_string();
        assert!(e.contains("train is a section") && e.contains("--set train.max_steps=…"), "{e}");
        // An inline table where there is none yet (a new section, or a list's entry) is fine.
        let mut v = base();
        apply_set(&mut v, "extra={a=1}").unwrap();
        apply_set(&mut v, "data.sources=[{kind = \"tsv\", path = \"a.tsv\"}]").unwrap();
        apply_set(&mut v, "data.sources.0={kind = \"tsv\", path = \"b.tsv\"}").unwrap();
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
                assert!(RecipeConfig::NAMES.contains(&cfg.recipe.name()));
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
