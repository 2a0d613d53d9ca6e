//! Checkpoints of a run: `checkpoints/step-N/` with `params.safetensors`,
//! `optimizer.safetensors` and `state.json` (the trainer's [`State`]), each file covered by its
//! checksum.

use super::optim::AdamW;
use crate::io::atomic::write_atomically;
use crate::model::weights::Params;
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Trainer state saved in each checkpoint.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct State {
    pub(crate) step: u64,
    /// Data position: epoch and micro-batches' examples consumed in it.
    pub(crate) epoch: u64,
    pub(crate) pos: usize,
    /// Word position of the ChaCha8 RNG (as a decimal string: it is a u128).
    pub(crate) rng_word_pos: String,
    pub(crate) best: Option<(u64, f64)>,
    /// What `best` scores: `train.best_metric` and its mode (`sts_spearman/max`); None in
    /// checkpoints written before it was recorded.
    #[serde(default)]
    pub(crate) best_of: Option<String>,
    pub(crate) evals_since_best: usize,
    pub(crate) sentences: u64,
    pub(crate) elapsed_s: f64,
    /// The run ended (all steps, or early stopping) and its final validation is in `best`; None
    /// in checkpoints written before it was recorded.
    #[serde(default)]
    pub(crate) finished: Option<bool>,
    /// A validation of this step is still owed: it failed on an unknown `train.best_metric`, and
    /// a resume runs it before the next step.
    #[serde(default)]
    pub(crate) pending_validation: bool,
    /// The recipe's [`crate::train::data_digest`] and its number of training examples; None in
    /// checkpoints written before they were recorded.
    #[serde(default)]
    pub(crate) data_digest: Option<String>,
    #[serde(default)]
    pub(crate) examples: Option<usize>,
    /// The config's values the checkpoint was trained with, but for the data
    /// ([`crate::train::config::trained_with`]); None in checkpoints written before they were
    /// recorded.
    #[serde(default)]
    pub(crate) trained_with: Option<std::collections::BTreeMap<String, String>>,
}

/// The newest checkpoint of a run directory, as it is (see [`resume_checkpoint`]).
pub fn latest_checkpoint(out: &Path) -> Result<Option<PathBuf>> {
    let dir = out.join("checkpoints");
    Ok(checkpoint_steps(&dir)?.last().map(|n| dir.join(format!("step-{n}"))))
}

/// The checkpoint to resume from: the newest whose files match their checksums. Newer ones
/// that fail (damaged on disk, or edited) are set aside as `checkpoints/damaged-step-N`,
/// never deleted, and the message says so; when none passes, nothing is moved and the error
/// lists what is wrong with each.
pub fn resume_checkpoint(out: &Path) -> Result<Option<PathBuf>> {
    let dir = out.join("checkpoints");
    let steps = checkpoint_steps(&dir)?;
    let mut bad: Vec<(u64, String)> = Vec::new();
    for &n in steps.iter().rev() {
        let ckpt = dir.join(format!("step-{n}"));
        let mut old = false;
        // Without checksums (an older xsent's), a checkpoint whose files cannot be read is
        // damaged as well: it is passed over for the one before.
        match super::checksums::problem(&ckpt, &CHECKPOINT_FILES, &mut old).or_else(|| unreadable(&ckpt, old)) {
            Some(p) => bad.push((n, p)),
            None => {
                for (b, why) in &bad {
                    let aside = free_name(&dir, &format!("damaged-step-{b}"));
                    std::fs::rename(dir.join(format!("step-{b}")), &aside).with_context(|| {
                        format!("cannot move the damaged checkpoint step-{b} aside to {}", aside.display())
                    })?;
                    crate::errln!(
                        "xsent train: checkpoint step-{b} is damaged ({why}); it is kept as {} and the run resumes from step-{n}",
                        aside.display()
                    );
                }
                if old {
                    crate::errln!(
                        "xsent train: {} has no {} (an older xsent wrote it): resuming without verifying it",
                        ckpt.display(),
                        super::checksums::CHECKSUMS
                    );
                }
                return Ok(Some(ckpt));
            }
        }
    }
    if bad.is_empty() {
        return Ok(None);
    }
    let list: Vec<String> = bad.iter().map(|(n, why)| format!("step-{n}: {why}")).collect();
    bail!(
        "no checkpoint in {} can be resumed:\n  {}\nrestore them from a backup, or start a new run with another --out",
        dir.display(),
        list.join("\n  ")
    )
}

/// Refuses a resume whose `cfg` gives other values than `was`, the [`State::trained_with`] of
/// the checkpoint whose state is `state_file`, naming each.
pub(crate) fn refuse_other_training(
    state_file: &Path,
    was: &std::collections::BTreeMap<String, String>,
    cfg: &super::config::Config,
) -> Result<()> {
    let differ = super::config::trained_otherwise(was, &super::config::trained_with(cfg)?);
    if !differ.is_empty() {
        bail!(
            "--resume: {} was trained with other values than this config gives (the model, the recipe's settings, \
             the seed or the batch), checkpoint -> config:\n  {}\nresume with the values the run started with, \
             or start a new run with --out",
            state_file.display(),
            differ.join("\n  ")
        );
    }
    Ok(())
}

/// The same refusal before the run reads its data and embeds (which can take most of an hour):
/// from the newest checkpoint's `state.json`, where it can be read. Where it cannot (a damaged
/// checkpoint), the resume checks the checkpoint it falls back to.
pub fn refuse_other_training_early(out: &Path, cfg: &super::config::Config) -> Result<()> {
    let Some(ckpt) = latest_checkpoint(out)? else { return Ok(()) };
    let file = ckpt.join("state.json");
    let Some(state) = std::fs::read(&file).ok().and_then(|b| serde_json::from_slice::<State>(&b).ok()) else {
        return Ok(());
    };
    match &state.trained_with {
        Some(was) => refuse_other_training(&file, was, cfg),
        None => Ok(()),
    }
}

/// For a checkpoint without checksums (`unverified`), what makes its files unreadable: a
/// `state.json` that is not a trainer state, a safetensors file that is damaged (read from its
/// header). None when they read, or when checksums vouched for them already.
fn unreadable(ckpt: &Path, unverified: bool) -> Option<String> {
    if !unverified {
        return None;
    }
    let state = ckpt.join("state.json");
    if let Err(e) = std::fs::read(&state)
        .map_err(|e| e.to_string())
        .and_then(|b| serde_json::from_slice::<State>(&b).map_err(|e| e.to_string()))
    {
        return Some(format!("state.json cannot be read: {e}"));
    }
    ["params.safetensors", "optimizer.safetensors"].iter().find_map(|f| {
        if !ckpt.join(f).is_file() {
            return Some(format!("{f} is missing"));
        }
        crate::model::weights::diagnose_safetensors(&ckpt.join(f), false).map(|why| format!("{f}: {why}"))
    })
}

/// Write checkpoint `checkpoints/step-N/` of run directory `out` (atomically, checksums last),
/// then remove all but the newest `keep_last` (at least 2).
pub(crate) fn save_checkpoint(out: &Path, keep_last: usize, params: &Params, opt: &AdamW, state: &State) -> Result<()> {
    let dir = out.join("checkpoints");
    std::fs::create_dir_all(&dir)?;
    write_atomically(&dir.join(format!("step-{}", state.step)), |d| {
        crate::model::weights::save_tensors(&params.tensors(), &d.join("params.safetensors"))?;
        crate::model::weights::save_tensors(&opt.state_tensors()?, &d.join("optimizer.safetensors"))?;
        std::fs::write(d.join("state.json"), serde_json::to_string_pretty(state)?)?;
        // Last: read back from disk, so that it vouches for what is stored.
        super::checksums::write(d, &CHECKPOINT_FILES)
    })?;
    // keep-last-K, and never fewer than 2: a resume falls back to the one before a
    // damaged newest checkpoint (Config::validate refuses 0).
    let steps = checkpoint_steps(&dir)?;
    let keep = keep_last.max(2);
    if steps.len() > keep {
        for s in &steps[..steps.len() - keep] {
            std::fs::remove_dir_all(dir.join(format!("step-{s}")))?;
        }
    }
    Ok(())
}

/// The files of a checkpoint, each covered by its checksum.
pub(crate) const CHECKPOINT_FILES: [&str; 3] = ["params.safetensors", "optimizer.safetensors", "state.json"];

/// `dir/name`, or where that exists `dir/name.1`, `dir/name.2`, … (the first that does not).
pub(crate) fn free_name(dir: &Path, name: &str) -> PathBuf {
    let mut p = dir.join(name);
    let mut i = 1;
    while p.exists() {
        p = dir.join(format!("{name}.{i}"));
        i += 1;
    }
    p
}

/// The N of every `step-N` directory under `dir`, ascending (none if `dir` does not exist).
pub(crate) fn checkpoint_steps(dir: &Path) -> Result<Vec<u64>> {
    if !dir.is_dir() {
        return Ok(Vec::new());
    }
    let mut steps: Vec<u64> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok()?.file_name().to_str()?.strip_prefix("step-")?.parse().ok())
        .collect();
    steps.sort_unstable();
    Ok(steps)
}

pub(crate) fn load_checkpoint(dir: &Path, params: &Params, opt: &mut AdamW) -> Result<State> {
    let state_file = dir.join("state.json");
    let text = std::fs::read_to_string(&state_file).with_context(|| format!("cannot read {}", state_file.display()))?;
    let state: State = serde_json::from_str(&text).with_context(|| format!("invalid {}", state_file.display()))?;
    let named = dir.file_name().and_then(|n| n.to_str()?.strip_prefix("step-")?.parse::<u64>().ok());
    if named.is_some_and(|n| n != state.step) {
        bail!("{} says step {}, but it is the checkpoint of step {}: it was edited or moved; restore it, or start a new run with --out", state_file.display(), state.step, named.unwrap_or_default());
    }
    let saved = crate::model::weights::load_safetensors(
        &dir.join("params.safetensors"),
        &candle_core::Device::Cpu,
        "the parameters",
    )?;
    for (name, var) in &params.vars {
        let t = saved
            .get(name)
            .with_context(|| format!("{} has no parameter {name}: was it written by another config?", dir.display()))?;
        if t.dims() != var.dims() {
            bail!("{}: {name} is {:?} in the checkpoint but {:?} in the model", dir.display(), t.dims(), var.dims());
        }
        var.set(&t.to_device(var.device())?)?;
    }
    // A checkpoint with parameters the model lacks was written by a larger model (e.g. more
    // layers): resuming would silently drop trained weights.
    let mut extra: Vec<&String> = saved.keys().filter(|k| !params.vars.iter().any(|(n, _)| n == *k)).collect();
    if !extra.is_empty() {
        extra.sort();
        bail!(
            "{} holds {} parameter(s) this model does not have (first: {}): the run was started with another model shape \
             (e.g. more layers); resume without --set for the model's settings, or start a new run with --out",
            dir.display(),
            extra.len(),
            extra[0]
        );
    }
    let opt_path = dir.join("optimizer.safetensors");
    let opt_state =
        crate::model::weights::load_safetensors(&opt_path, &candle_core::Device::Cpu, "the optimizer state")?;
    opt.load_state(&opt_state, state.step).with_context(|| format!("{}", opt_path.display()))?;
    Ok(state)
}
