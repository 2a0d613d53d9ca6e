//! Training: the shared trainer (config, optimiser, checkpoints, resume) and the recipes.

pub mod cache;
pub mod checksums;
pub mod config;
pub mod decontam;
pub mod disentangle;
pub mod distill;
pub mod dueam;
pub mod lightweight;
pub mod lock;
pub mod optim;
pub mod sp;
pub mod trainer;
pub mod wmd;

pub use config::Config;
pub use optim::{AdamW, AdamWConfig};
pub use trainer::{restore_run, Outcome, Recipe, RunOptions, StepLoss, Trainer};

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

/// Build the recipe a config names, for run directory `out` (where a recipe may keep what it
/// derives from the data once, e.g. the sp recipe's learned vocabulary, so a resumed run reuses it).
pub fn build_recipe(cfg: &Config, out: &Path) -> Result<Box<dyn Recipe>> {
    match cfg.recipe.as_str() {
        "distill" => Ok(Box::new(distill::Distill::new(cfg)?)),
        "disentangle" => Ok(Box::new(disentangle::Disentangle::new(cfg)?)),
        "sp" => Ok(Box::new(sp::SpRecipe::new(cfg, out)?)),
        "dueam" => Ok(Box::new(dueam::Dueam::new(cfg)?)),
        "lightweight" => Ok(Box::new(lightweight::Lightweight::new(cfg, out)?)),
        other => anyhow::bail!("recipe = {other:?} is not known; this xsent trains: distill, disentangle, dueam, lightweight, sp"),
    }
}

/// Write the resolved config as run directory `out`'s `config.toml` (atomically, with the
/// header that marks it as a run's).
pub fn write_run_config(out: &Path, cfg: &Config) -> Result<()> {
    trainer::write_file_atomically(&out.join("config.toml"), config::run_config_text(cfg)?.as_bytes())
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
