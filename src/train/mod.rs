//! Training: the shared trainer (config, optimiser, checkpoints, resume) and the recipes.

pub mod builtin;
pub mod cache;
pub mod checkpoint;
pub mod checksums;
pub mod config;
pub mod decontam;
pub mod fit;
pub mod lock;
pub mod optim;
pub mod progress;
pub mod recipe;
pub mod recipes;
pub mod run_dir;
pub mod sampler;
pub mod shards;
pub mod split;
pub mod trainer;

pub use config::Config;
pub use optim::{AdamW, AdamWConfig};
pub use recipe::{Recipe, StepLoss, StepPlan};
pub use run_dir::{restore_run, write_run_config};
pub use trainer::{Outcome, RunOptions, Trainer};

use anyhow::Result;
use recipes::{disentangle, distill, dueam, lightweight, sp};
use std::path::{Path, PathBuf};

/// xsent's cache directory: `XSENT_CACHE`, else `~/.cache/xsent` ([`crate::places::cache_dir`]).
pub fn cache_dir() -> PathBuf {
    crate::places::cache_dir()
}

/// Build the recipe a config names, for run directory `out` (where a recipe may keep what it
/// derives from the data once, e.g. the sp recipe's learned vocabulary, so a resumed run reuses it).
pub fn build_recipe(cfg: &Config, out: &Path) -> Result<Box<dyn Recipe>> {
    match cfg.recipe.as_str() {
        "distill" => Ok(Box::new(distill::Distill::new(cfg)?)),
        "disentangle" => Ok(Box::new(disentangle::Disentangle::new(cfg)?)),
        "sp" => Ok(Box::new(sp::SpRecipe::new(cfg, out)?)),
        "dueam" => Ok(Box::new(dueam::Dueam::new(cfg)?)),
        "lightweight" => Ok(Box::new(lightweight::Lightweight::new(cfg, out)?)),
        other => anyhow::bail!(
            "recipe = {other:?} is not known; this xsent trains: distill, disentangle, dueam, lightweight, sp"
        ),
    }
}

/// Train a config into run directory `out` (resuming from its newest checkpoint with `resume`).
pub fn train(cfg: &Config, out: &Path, resume: bool, opts: &RunOptions) -> Result<Outcome> {
    if cfg.recipe == "sp" && cfg.sp.as_ref().is_some_and(|s| s.random) {
        // The untrained encoders of seed 002 Table 2: no step to take.
        sp::write_untrained(cfg, out)?;
        return Ok(Outcome::Finished);
    }
    let mut recipe = build_recipe(cfg, out)?;
    Trainer::new(cfg, out).run(recipe.as_mut(), resume, opts)
}
