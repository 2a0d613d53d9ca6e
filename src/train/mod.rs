//! Training: the shared trainer (config, optimiser, checkpoints, resume) and the recipes.

pub mod config;
pub mod distill;
pub mod dueam;
pub mod optim;
pub mod trainer;
pub mod wmd;

pub use config::Config;
pub use optim::{AdamW, AdamWConfig};
pub use trainer::{Outcome, Recipe, RunOptions, StepLoss, Trainer};

use anyhow::Result;
use std::path::{Path, PathBuf};

/// xsent's cache directory: `XSENT_CACHE`, else `~/.cache/xsent`.
pub fn cache_dir() -> PathBuf {
    if let Some(p) = std::env::var_os("XSENT_CACHE") {
        return PathBuf::from(p);
    }
    let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("."));
    home.join(".cache/xsent")
}

/// Build the recipe a config names.
pub fn build_recipe(cfg: &Config) -> Result<Box<dyn Recipe>> {
    match cfg.recipe.as_str() {
        "distill" => Ok(Box::new(distill::Distill::new(cfg)?)),
        "dueam" => Ok(Box::new(dueam::Dueam::new(cfg)?)),
        other => anyhow::bail!("recipe = {other:?} is not known; this xsent trains: distill, dueam"),
    }
}

/// Train a config into run directory `out` (resuming from its newest checkpoint with `resume`).
pub fn train(cfg: &Config, out: &Path, resume: bool, opts: &RunOptions) -> Result<Outcome> {
    let mut recipe = build_recipe(cfg)?;
    Trainer::new(cfg, out).run(recipe.as_mut(), resume, opts)
}
