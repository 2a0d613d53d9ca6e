//! Training: the shared trainer (config, optimiser, checkpoints, resume) and the recipes.

pub mod ahead;
pub mod builtin;
pub mod cache;
pub mod checkpoint;
pub mod checksums;
pub mod config;
pub mod data_digest;
pub mod decontam;
pub mod fit;
pub mod optim;
pub mod precision;
pub mod progress;
pub mod recipe;
pub mod recipes;
pub mod run_dir;
pub mod sampler;
pub mod shards;
pub mod split;
pub mod trainer;

pub use config::{Config, RecipeConfig};
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
    Ok(match &cfg.recipe {
        RecipeConfig::Distill(d) => Box::new(distill::Distill::new(cfg, d)?),
        RecipeConfig::Disentangle(d) => Box::new(disentangle::Disentangle::new(cfg, d)?),
        RecipeConfig::Sp(s) => Box::new(sp::SpRecipe::new(cfg, s, out)?),
        RecipeConfig::Dueam(d) => Box::new(dueam::Dueam::new(cfg, d)?),
        RecipeConfig::Lightweight(l) => Box::new(lightweight::Lightweight::new(cfg, l, out)?),
    })
}

/// Train a config into run directory `out` (resuming from its newest checkpoint with `resume`).
pub fn train(cfg: &Config, out: &Path, resume: bool, opts: &RunOptions) -> Result<Outcome> {
    if let RecipeConfig::Sp(s) = &cfg.recipe {
        if s.random {
            // The untrained encoders of seed 002 Table 2: no step to take.
            sp::write_untrained(cfg, s, out)?;
            return Ok(Outcome::Finished);
        }
    }
    let mut recipe = build_recipe(cfg, out)?;
    Trainer::new(cfg, out).run(recipe.as_mut(), resume, opts)
}
