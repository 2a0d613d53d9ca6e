//! The shared trainer: data order, optimiser steps with warmup/decay, clipping and gradient
//! accumulation, validation, checkpoints (atomic, keep-last-K, keep-best), exact resume,
//! interruption, NaN detection, metrics and progress. Recipes supply a loss and a validation.
//!
//! Run directory:
//! - `config.toml`: the resolved config;
//! - `metrics.jsonl`: one line per logged step (`step`, `loss`, each loss term, `lr`,
//!   `grad_norm`, `sentences_per_s`, …) and one per validation (`"val": {…}`);
//! - `checkpoints/step-N/`: `params.safetensors`, `optimizer.safetensors`, `state.json`
//!   (step, data position, RNG position, best score);
//! - `best/` (keep-best) and `final/`: model directories written by the recipe.

use super::config::{BestMode, Config};
use super::optim::AdamW;
use crate::data::sts::StsSet;
use crate::model::encoder::{collect_row_lookups, Rng, RowLookup};
use crate::model::Embedder;
use crate::model::weights::{self, Params};
use anyhow::{bail, Context, Result};
use candle_core::backprop::GradStore;
use candle_core::Tensor;
use rand::seq::SliceRandom;
use rand::{RngCore, SeedableRng};
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// What a recipe returns for one micro-batch.
pub struct StepLoss {
    /// The scalar to minimise (differentiable).
    pub total: Tensor,
    /// Named loss terms for the metrics (e.g. `mse_src`).
    pub terms: Vec<(String, f64)>,
    /// Sentences encoded (for sentences/s).
    pub sentences: usize,
}

/// A training recipe: a loss over examples `0..num_examples()` and a validation.
pub trait Recipe: Send + Sync {
    fn num_examples(&self) -> usize;
    /// The trainable parameters (stable names: they key checkpoints).
    fn params(&self) -> Params;
    /// A parameter's learning rate as a multiple of the schedule's (default 1), by name.
    fn lr_scale(&self, _param: &str) -> f64 {
        1.0
    }
    /// Loss of one micro-batch of example indices; randomness (dropout, sampling) from `rng`.
    /// For a [`shardable`](Recipe::shardable) recipe it is called on shards of the batch, from
    /// several threads at once.
    fn loss(&self, batch: &[usize], rng: &mut Rng) -> Result<StepLoss>;
    /// The loss is a mean over examples, so the batch's loss is the size-weighted sum of its
    /// shards' losses: shards then run forward and backward on separate cores.
    fn shardable(&self) -> bool {
        false
    }
    /// Reorder a batch before it is cut into shards (e.g. by length, to pad less).
    fn order_batch(&self, _batch: &mut [usize]) {}
    /// Mega-batching (Wieting & Gimpel 2018): the number of consecutive micro-batches that form
    /// the mega-batch starting at micro-batch `first` (micro-batches are counted over the run
    /// from 0: step × `grad_accum` + index within the step). A function of `first` alone: on
    /// resume the trainer recomputes the mega-batches from micro-batch 0. Default 1: every
    /// micro-batch is its own mega-batch.
    fn megabatch_len(&self, _first: u64) -> usize {
        1
    }
    /// Loss of `batch` (a micro-batch, or a shard of one) given the example indices of its whole
    /// mega-batch (`batch`'s micro-batch included, in sampling order), e.g. to pick negatives
    /// there. The mega-batch comes from the seeded data order, so nothing about it lives in the
    /// recipe's state. Default: [`loss`](Recipe::loss).
    fn loss_in_megabatch(&self, batch: &[usize], _mega: &[usize], rng: &mut Rng) -> Result<StepLoss> {
        self.loss(batch, rng)
    }
    /// The loss couples the examples of a batch only through one vector per example (e.g.
    /// in-batch contrastive losses over sentence vectors). The trainer then runs it in two
    /// stages so that shards still go forward and backward on separate cores (the gradient
    /// cache of Gao et al. 2021): [`shard_forward`](Recipe::shard_forward) on each shard, then
    /// [`coupled_loss`](Recipe::coupled_loss) on the shards' vectors concatenated (a leaf copy),
    /// whose gradient with respect to each vector is backpropagated into its shard's graph,
    /// together with the shard's separable loss, on the shard's core. The gradient is that of
    /// one backward pass over the whole batch.
    fn coupled(&self) -> bool {
        false
    }
    /// For a [`coupled`](Recipe::coupled) recipe: the separable part of the loss of a shard (a
    /// mean over its examples) and its examples' vectors `[shard, d]` (both differentiable).
    /// The trainer weights each shard by its share of the batch's examples, so a term that is a
    /// mean over something else (e.g. lightweight's token-level `mlm`, a mean over masked
    /// tokens, whose count varies by row) is weighted per shard, not over the whole batch.
    fn shard_forward(&self, _shard: &[usize], _rng: &mut Rng) -> Result<(StepLoss, Tensor)> {
        bail!("this recipe does not split its loss")
    }
    /// For a [`coupled`](Recipe::coupled) recipe: the coupled part of the loss of `batch` given
    /// its examples' vectors `[batch, d]` in batch order. It must be a function of the vectors
    /// alone: only their gradient is taken from its backward, so a parameter used here (a
    /// learned temperature, say) would get no update.
    fn coupled_loss(&self, _batch: &[usize], _vectors: &Tensor) -> Result<StepLoss> {
        bail!("this recipe does not split its loss")
    }
    /// Validation scores by name.
    fn validate(&mut self) -> Result<Vec<(String, f64)>>;
    /// What decontamination dropped from the recipe's training data (one entry per source).
    fn overlaps(&self) -> &[crate::data::decontam::Overlap] {
        &[]
    }
    /// The model being trained as an inference embedder (sharing the trained weights), for
    /// the trainer's own validation on scored pairs (`train.val_sts`). None: the recipe cannot
    /// embed new text while it trains.
    fn embedder(&self) -> Option<&dyn Embedder> {
        None
    }
    /// The validation score that decides "best", and whether higher is better.
    fn default_best(&self) -> (String, BestMode);
    /// Write the trained model as a model directory.
    fn save_model(&self, dir: &Path) -> Result<()>;
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// All steps done; `final/` written.
    Finished,
    /// Stopped early (patience); `final/` written.
    EarlyStopped,
    /// Interrupted (Ctrl-C) or stopped by `stop_after`: checkpoint written, resume with `--resume`.
    Interrupted,
}

/// Trainer state saved in each checkpoint.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct State {
    step: u64,
    /// Data position: epoch and micro-batches' examples consumed in it.
    epoch: u64,
    pos: usize,
    /// Word position of the ChaCha8 RNG (as a decimal string: it is a u128).
    rng_word_pos: String,
    best: Option<(u64, f64)>,
    /// What `best` scores: `train.best_metric` and its mode (`sts_spearman/max`); None in
    /// checkpoints written before it was recorded.
    #[serde(default)]
    best_of: Option<String>,
    evals_since_best: usize,
    sentences: u64,
    elapsed_s: f64,
    /// The run ended (all steps, or early stopping) and its final validation is in `best`; None
    /// in checkpoints written before it was recorded.
    #[serde(default)]
    finished: Option<bool>,
    /// A validation of this step is still owed: it failed on an unknown `train.best_metric`, and
    /// a resume runs it before the next step.
    #[serde(default)]
    pending_validation: bool,
}

/// Options of one invocation (not part of the config).
#[derive(Default, Clone)]
pub struct RunOptions {
    /// Checkpoint and stop after this optimiser step (as if interrupted).
    pub stop_after: Option<u64>,
    /// Set to stop after the current step (Ctrl-C).
    pub interrupt: Option<Arc<AtomicBool>>,
    /// Set by the trainer once the first step of this invocation begins (before it, a Ctrl-C
    /// has nothing to checkpoint and may end the process at once).
    pub started: Option<Arc<AtomicBool>>,
}

/// A `train.best_metric` that the validation does not report.
#[derive(Debug)]
struct UnknownMetric(String);

impl std::fmt::Display for UnknownMetric {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UnknownMetric {}

/// Shuffled data order, reproducible from (seed, epoch) alone.
struct Sampler {
    seed: u64,
    n: usize,
    epoch: u64,
    pos: usize,
    order: Vec<usize>,
}

impl Sampler {
    fn new(seed: u64, n: usize, epoch: u64, pos: usize) -> Self {
        let mut s = Self { seed, n, epoch, pos, order: Vec::new() };
        s.shuffle();
        s
    }

    fn shuffle(&mut self) {
        let mut rng = Rng::seed_from_u64(self.seed ^ 0x5eed_da7a ^ self.epoch.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        self.order = (0..self.n).collect();
        self.order.shuffle(&mut rng);
    }

    /// The sampler after `consumed` examples of the run.
    fn at(seed: u64, n: usize, consumed: u64) -> Self {
        Self::new(seed, n, consumed / n as u64, (consumed % n as u64) as usize)
    }

    fn next_batch(&mut self, size: usize) -> Vec<usize> {
        let mut out = Vec::with_capacity(size);
        while out.len() < size {
            if self.pos >= self.n {
                self.epoch += 1;
                self.pos = 0;
                self.shuffle();
            }
            out.push(self.order[self.pos]);
            self.pos += 1;
        }
        out
    }
}

/// The trainer over one recipe and one run directory.
pub struct Trainer<'a> {
    cfg: &'a Config,
    out: PathBuf,
}

impl<'a> Trainer<'a> {
    pub fn new(cfg: &'a Config, out: &Path) -> Self {
        Self { cfg, out: out.to_path_buf() }
    }

    /// Total optimiser steps for `n` examples.
    pub fn total_steps(cfg: &Config, n: usize) -> u64 {
        if cfg.train.max_steps > 0 {
            return cfg.train.max_steps;
        }
        let per_step = cfg.train.batch_size * cfg.train.grad_accum;
        cfg.train.epochs * (n as u64).div_ceil(per_step as u64)
    }

    /// The newest checkpoint of a run directory, as it is (see [`Self::resume_checkpoint`]).
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
            match super::checksums::problem(&ckpt, &CHECKPOINT_FILES, &mut old) {
                Some(p) => bad.push((n, p)),
                None => {
                    for (b, why) in &bad {
                        let aside = free_name(&dir, &format!("damaged-step-{b}"));
                        std::fs::rename(dir.join(format!("step-{b}")), &aside)
                            .with_context(|| format!("cannot move the damaged checkpoint step-{b} aside to {}", aside.display()))?;
                        crate::errln!(
                            "xsent train: checkpoint step-{b} is damaged ({why}); it is kept as {} and the run resumes from step-{n}",
                            aside.display()
                        );
                    }
                    if old {
                        crate::errln!("xsent train: {} has no {} (an older xsent wrote it): resuming without verifying it", ckpt.display(), super::checksums::CHECKSUMS);
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

    /// Train. With `resume`, continue from the newest checkpoint in the run directory.
    pub fn run(&self, recipe: &mut dyn Recipe, resume: bool, opts: &RunOptions) -> Result<Outcome> {
        let cfg = self.cfg;
        let t = &cfg.train;
        let n = recipe.num_examples();
        if n == 0 {
            bail!("the training data is empty");
        }
        // A batch (or a mega-batch of batches) larger than the data would repeat examples
        // within itself: refuse it before anything is allocated for it.
        if t.batch_size > n {
            bail!("train.batch_size = {} is larger than the {n} training examples; lower train.batch_size (or add data)", t.batch_size);
        }
        let sts = match &t.val_sts {
            None => None,
            Some(path) => {
                if recipe.embedder().is_none() {
                    bail!("train.val_sts: the {} recipe cannot embed text while it trains; leave val_sts out and score the saved model with `xsent eval sts`", cfg.recipe);
                }
                Some(crate::data::sts::read_scored_pairs(Path::new(path)).context("train.val_sts")?)
            }
        };
        let total = Self::total_steps(cfg, n);
        if cfg.optim.warmup_steps > total {
            crate::errln!(
                "xsent train: warning: optim.warmup_steps = {} is more than the {total} steps of this run, so the learning rate \
                 peaks at {:.3} of optim.lr, at the last step; lower optim.warmup_steps (or train longer)",
                cfg.optim.warmup_steps,
                total as f64 / cfg.optim.warmup_steps as f64
            );
        }
        check_megabatches(recipe, total.saturating_mul(t.grad_accum as u64), t.batch_size, n)?;
        let params = recipe.params();
        let mut opt = AdamW::new(&params, cfg.optim.adamw())?;
        opt.set_lr_scales(|name| recipe.lr_scale(name));
        let mut rng = Rng::seed_from_u64(cfg.seed);
        let mut state = State {
            step: 0,
            epoch: 0,
            pos: 0,
            rng_word_pos: "0".into(),
            best: None,
            best_of: None,
            evals_since_best: 0,
            sentences: 0,
            elapsed_s: 0.0,
            finished: Some(false),
            pending_validation: false,
        };
        let (best_metric, best_mode) = {
            let (m, mode) = recipe.default_best();
            let metric = t.best_metric.clone().unwrap_or_else(|| m.clone());
            // The direction known for the metric: the recipe's own, or the trainer's STS scores,
            // correlations (higher is better).
            let known = if metric == m {
                Some(mode)
            } else if metric.starts_with("sts_") {
                Some(BestMode::Max)
            } else {
                None
            };
            let name = |d: BestMode| match d {
                BestMode::Max => "\"max\" (higher is better)",
                BestMode::Min => "\"min\" (lower is better)",
            };
            if let (Some(set), Some(k)) = (t.best_mode, known) {
                // Against the known direction it would keep the worst model (and stop early on
                // improvement).
                if set != k {
                    bail!(
                        "train.best_mode = {} contradicts train.best_metric {metric:?}, for which the right mode is {}: \
                         leave best_mode out (it is known for this metric) or set it to the latter",
                        name(set),
                        name(k)
                    );
                }
            }
            if t.best_metric.is_some() && metric.starts_with("sts_") && t.val_sts.is_none() {
                bail!(
                    "train.best_metric = {metric:?} is scored only with train.val_sts = \"FILE\" (pairs with gold scores, e.g. the STS benchmark's sts-dev.csv)"
                );
            }
            match t.best_mode.or(known) {
                Some(chosen) => (metric, chosen),
                None => bail!(
                    "train.best_metric = {metric:?} is not the {} recipe's own ({m:?}, {}), so whether higher or lower is better \
                     is unknown: add --set train.best_mode='\"max\"' (or '\"min\"')",
                    cfg.recipe,
                    match mode {
                        BestMode::Max => "higher is better",
                        BestMode::Min => "lower is better",
                    }
                ),
            }
        };
        std::fs::create_dir_all(&self.out).with_context(|| format!("cannot create run directory {}", self.out.display()))?;
        restore_run(&self.out)?;
        if resume {
            let Some(ckpt) = Self::resume_checkpoint(&self.out)? else {
                bail!("--resume: {} has no checkpoint (checkpoints/step-N/) to resume from", self.out.display());
            };
            state = load_checkpoint(&ckpt, &params, &mut opt)?;
            let state_file = ckpt.join("state.json");
            rng.set_word_pos(state.rng_word_pos.parse::<u128>().with_context(|| format!("{}: bad rng_word_pos", state_file.display()))?);
            if state.pos > n {
                bail!(
                    "{}: data position {} is past the {n} training examples: the checkpoint was written for other data \
                     (or edited); resume with the data it was started with, or start a new run with --out",
                    state_file.display(),
                    state.pos
                );
            }
            if state.step > total {
                bail!(
                    "--resume: {} is at step {}, past the {total} steps this config trains; raise train.max_steps (or train.epochs) to train further",
                    self.out.display(),
                    state.step
                );
            }
            errln!("xsent train: resuming {} at step {} of {total}", self.out.display(), state.step);
            let of = best_of(&best_metric, best_mode);
            if let (Some((at, b)), Some(was)) = (state.best, state.best_of.as_deref()) {
                if was != of {
                    // Scores of another metric (or mode) cannot be compared with this one's.
                    errln!(
                        "xsent train: the best so far ({b:.4} at step {at}) is {was}, and this run keeps the best by {of}: \
                         the best and the patience count start again"
                    );
                    state.best = None;
                    state.evals_since_best = 0;
                }
            }
            set_aside_stale_best(&self.out, state.step)?;
        }
        // A run that already ended (all steps, or patience ran out under this config) is only
        // completed, never trained further or validated again.
        let patience = t.early_stopping_patience;
        let patience_out = patience > 0 && state.best.is_some() && state.evals_since_best >= patience;
        let ended = if patience_out { Some(Outcome::EarlyStopped) } else { (state.step == total).then_some(Outcome::Finished) };
        if ended == Some(Outcome::Finished) && state.finished.is_none() && self.out.join("final").is_dir() {
            // Written before checkpoints recorded `finished`: the final validation is logged.
            state.finished = Some(validation_logged(&self.out.join("metrics.jsonl"), state.step));
        }
        if let Some(o) = ended {
            if state.finished == Some(true) && self.out.join("final").is_dir() {
                errln!(
                    "xsent train: {} already ended at step {} ({}); final/ is in place, nothing to do ({} to train further)",
                    self.out.display(),
                    state.step,
                    if o == Outcome::EarlyStopped { "early stopping" } else { "all steps done" },
                    if o == Outcome::EarlyStopped {
                        "raise train.early_stopping_patience, or set it to 0,"
                    } else {
                        "raise train.max_steps or train.epochs with --set"
                    }
                );
                return Ok(o);
            }
        } else {
            state.finished = Some(false);
        }
        if let (Some(n), None) = (opts.stop_after, ended) {
            if n <= state.step {
                bail!(
                    "--stop-after {n}: the run is already at step {} of {total}; give a later step (or leave --stop-after out to train to the end)",
                    state.step
                );
            }
        }
        if resume {
            // Only once the resume is accepted: the metrics after the checkpoint are dropped.
            truncate_metrics(&self.out.join("metrics.jsonl"), state.step)?;
        }
        super::write_run_config(&self.out, cfg)?;
        let mut metrics = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.out.join("metrics.jsonl"))
            .with_context(|| format!("cannot open {}", self.out.join("metrics.jsonl").display()))?;
        if !resume && !recipe.overlaps().is_empty() {
            writeln!(metrics, "{}", super::decontam::metrics_line(recipe.overlaps()))?;
        }
        let mut sampler = Sampler::new(cfg.seed, n, state.epoch, state.pos);
        // The mega-batch of the current micro-batch: first micro-batch, length, examples
        // (filled when longer than one micro-batch).
        let mut mega = (0u64, recipe.megabatch_len(0).max(1), Vec::<usize>::new());
        let progress = Progress::new(total, state.step);
        let mut stopped_before = false;
        if state.pending_validation && ended.is_none() {
            // The validation of the checkpointed step failed on an unknown metric: run it now.
            state.pending_validation = false;
            stopped_before = self.validate(recipe, sts.as_ref(), &mut metrics, &mut state, (&best_metric, best_mode), &progress)?;
        } else if state.step == 0 && t.eval_at_start {
            self.validate(recipe, sts.as_ref(), &mut metrics, &mut state, (&best_metric, best_mode), &progress)?;
        }
        if let Some(f) = &opts.started {
            f.store(true, Ordering::SeqCst);
        }
        let started = Instant::now();
        let elapsed_before = state.elapsed_s;
        let mut window = (Instant::now(), 0u64);
        let mut outcome = ended.unwrap_or(if stopped_before { Outcome::EarlyStopped } else { Outcome::Finished });
        if opts.interrupt.as_ref().is_some_and(|f| f.load(Ordering::SeqCst)) && ended.is_none() {
            // Interrupted before the first step of this invocation: nothing new to save.
            progress.finish();
            errln!("xsent train: interrupted before step {}; nothing new to checkpoint", state.step + 1);
            return Ok(Outcome::Interrupted);
        }
        while ended.is_none() && !stopped_before && state.step < total {
            let step_start = Instant::now();
            let lr = cfg.optim.lr_at(state.step, total);
            let mut grads: Option<GradStore> = None;
            let mut loss_sum = 0f64;
            let mut terms: Vec<(String, f64)> = Vec::new();
            let mut sentences = 0usize;
            let (mut fwd_s, mut bwd_s) = (0f64, 0f64);
            for a in 0..t.grad_accum {
                let mut batch = sampler.next_batch(t.batch_size);
                let micro = state.step * t.grad_accum as u64 + a as u64;
                while micro >= mega.0 + mega.1 as u64 {
                    mega = (mega.0 + mega.1 as u64, recipe.megabatch_len(mega.0 + mega.1 as u64).max(1), Vec::new());
                }
                let drawn = if mega.1 == 1 { batch.clone() } else { Vec::new() };
                let examples: &[usize] = if mega.1 == 1 {
                    &drawn
                } else {
                    if mega.2.is_empty() {
                        // At most the data: check_megabatches refused the run otherwise.
                        let size = mega.1 * t.batch_size;
                        let mut s = Sampler::at(cfg.seed, n, mega.0 * t.batch_size as u64);
                        mega.2 = s.next_batch(size);
                    }
                    let at = (micro - mega.0) as usize * t.batch_size;
                    debug_assert_eq!(&mega.2[at..at + t.batch_size], &batch[..], "the mega-batch holds this micro-batch");
                    &mega.2
                };
                recipe.order_batch(&mut batch);
                let shards: Vec<&[usize]> = if recipe.shardable() || recipe.coupled() { batch.chunks(t.shard_size.max(1)).collect() } else { vec![&batch] };
                // One RNG per shard, seeded in order from the run's RNG: the same dropout
                // whatever the number of threads.
                let seeds: Vec<u64> = shards.iter().map(|_| rng.next_u64()).collect();
                let mb = if recipe.coupled() {
                    run_coupled(recipe, &batch, &shards, &seeds, t.grad_accum, &params)?
                } else {
                    run_shards(recipe, &shards, examples, &seeds, batch.len(), t.grad_accum, &params)?
                };
                if let Some((value, terms)) = mb.non_finite {
                    bail!(nan_message(state.step + 1, value, &terms, &self.out)?);
                }
                loss_sum += mb.loss;
                add_terms(&mut terms, mb.terms);
                sentences += mb.sentences;
                fwd_s += mb.forward_s;
                bwd_s += mb.backward_s;
                grads = Some(add_grads(grads, mb.grads, &params)?);
            }
            let t_opt = Instant::now();
            let grads = grads.expect("grad_accum >= 1");
            let grad_norm = opt.grad_norm(&grads)?;
            if !grad_norm.is_finite() {
                bail!(nan_message(state.step + 1, grad_norm, &[("grad_norm".into(), grad_norm)], &self.out)?);
            }
            opt.step_with_norm(&grads, lr, grad_norm)?;
            drop(grads);
            let opt_s = t_opt.elapsed().as_secs_f64();
            state.step += 1;
            state.sentences += sentences as u64;
            (state.epoch, state.pos) = (sampler.epoch, sampler.pos);
            window.1 += sentences as u64;
            let step_s = step_start.elapsed().as_secs_f64();
            state.elapsed_s = elapsed_before + started.elapsed().as_secs_f64();

            let interrupted = opts.interrupt.as_ref().is_some_and(|f| f.load(Ordering::SeqCst));
            // A stop at the last step is the end of the run: it finishes (final/ written).
            let stop_here = opts.stop_after == Some(state.step) && state.step < total;
            if state.step.is_multiple_of(t.log_every.max(1)) || state.step == total || interrupted || stop_here {
                let secs = window.0.elapsed().as_secs_f64().max(1e-9);
                let sps = window.1 as f64 / secs;
                window = (Instant::now(), 0);
                let mut line = serde_json::json!({
                    "step": state.step,
                    "epoch": state.epoch as f64 + state.pos as f64 / n as f64,
                    "lr": lr,
                    "loss": loss_sum,
                    "grad_norm": grad_norm,
                    "sentences_per_s": sps,
                    "step_s": step_s,
                    "forward_s": fwd_s,
                    "backward_s": bwd_s,
                    "optimizer_s": opt_s,
                    "elapsed_s": state.elapsed_s,
                });
                for (k, v) in &terms {
                    line[k.as_str()] = serde_json::json!(v);
                }
                writeln!(metrics, "{line}")?;
                progress.log(state.step, loss_sum, sps);
            }
            progress.set(state.step, loss_sum);
            let mut stop_early = false;
            if t.eval_every > 0 && state.step.is_multiple_of(t.eval_every) && state.step < total {
                match self.validate(recipe, sts.as_ref(), &mut metrics, &mut state, (&best_metric, best_mode), &progress) {
                    Ok(stop) => stop_early = stop,
                    Err(e) if e.is::<UnknownMetric>() => {
                        // Keep the steps trained so far: the mistake is fixed on resume, which
                        // validates this step before training on.
                        state.rng_word_pos = rng.get_word_pos().to_string();
                        state.pending_validation = true;
                        self.checkpoint(&params, &opt, &state)?;
                        bail!(
                            "{e}\nstep {} is checkpointed: continue with --resume --out {} --set train.best_metric=NAME",
                            state.step,
                            self.out.display()
                        );
                    }
                    Err(e) => return Err(e),
                }
            }
            state.rng_word_pos = rng.get_word_pos().to_string();
            if stop_early {
                // Ends the run (final/ is written below) even if an interrupt came with it.
                outcome = Outcome::EarlyStopped;
                break;
            }
            // An interrupt that came during the validation stops here too, not a step later.
            let interrupted = interrupted || opts.interrupt.as_ref().is_some_and(|f| f.load(Ordering::SeqCst));
            let due = t.checkpoint_every > 0 && state.step.is_multiple_of(t.checkpoint_every);
            if due || interrupted || stop_here {
                self.checkpoint(&params, &opt, &state)?;
            }
            if interrupted || stop_here {
                outcome = Outcome::Interrupted;
                break;
            }
        }
        progress.finish();
        if outcome == Outcome::Interrupted {
            errln!(
                "xsent train: stopped after step {}; checkpoint in {}; continue with --resume --out {}",
                state.step,
                self.out.join(format!("checkpoints/step-{}", state.step)).display(),
                self.out.display()
            );
            return Ok(outcome);
        }
        // Final validation (unless it already ran: a resumed run that had ended), checkpoint
        // and model.
        let mut unknown_metric = None;
        if outcome == Outcome::Finished && state.finished != Some(true) {
            match self.validate(recipe, sts.as_ref(), &mut metrics, &mut state, (&best_metric, best_mode), &progress) {
                Ok(_) => {}
                Err(e) if e.is::<UnknownMetric>() => unknown_metric = Some(e),
                Err(e) => return Err(e),
            }
        }
        state.rng_word_pos = rng.get_word_pos().to_string();
        state.finished = Some(unknown_metric.is_none());
        self.checkpoint(&params, &opt, &state)?;
        write_atomically(&self.out.join("final"), |d| recipe.save_model(d))?;
        if let Some(e) = unknown_metric {
            bail!(
                "{e}\nthe trained model is in {} all the same; to validate it and keep the best model, run --resume --out {} --set train.best_metric=NAME",
                self.out.join("final").display(),
                self.out.display()
            );
        }
        errln!("xsent train: done after {} steps; model in {}", state.step, self.out.join("final").display());
        Ok(outcome)
    }

    /// Validate, log, keep the best model; returns whether patience ran out.
    fn validate(
        &self,
        recipe: &mut dyn Recipe,
        sts: Option<&StsSet>,
        metrics: &mut std::fs::File,
        state: &mut State,
        (best_metric, mode): (&str, BestMode),
        progress: &Progress,
    ) -> Result<bool> {
        let t0 = Instant::now();
        let mut scores = recipe.validate()?;
        if let (Some(set), Some(enc)) = (sts, recipe.embedder()) {
            let (r, _) = crate::eval::sts::evaluate(enc, std::slice::from_ref(set), 64).context("train.val_sts")?;
            scores.push(("sts_spearman".into(), r[0].spearman));
            scores.push(("sts_pearson".into(), r[0].pearson));
        }
        let text: Vec<String> = scores.iter().map(|(k, v)| format!("{k} {v:.4}")).collect();
        progress.println(&format!("step {}: validation {}", state.step, text.join(", ")));
        // Checked before the scores are logged: a resume with the metric fixed validates this
        // step again, and metrics.jsonl keeps one validation per step.
        let Some(&(_, score)) = scores.iter().find(|(k, _)| k == best_metric) else {
            let names: Vec<&str> = scores.iter().map(|(k, _)| k.as_str()).collect();
            return Err(UnknownMetric(format!("train.best_metric = {best_metric:?} is not among the validation scores {names:?}")).into());
        };
        let mut val = serde_json::Map::new();
        for (k, v) in &scores {
            val.insert(k.clone(), serde_json::json!(v));
        }
        writeln!(metrics, "{}", serde_json::json!({"step": state.step, "val": val, "val_s": t0.elapsed().as_secs_f64()}))?;
        // A NaN score is never the best (and a NaN best would compare false with everything).
        let better = score.is_finite()
            && match (state.best, mode) {
                (None, _) => true,
                (Some((_, b)), BestMode::Max) => score > b,
                (Some((_, b)), BestMode::Min) => score < b,
            };
        if better {
            state.best = Some((state.step, score));
            state.best_of = Some(best_of(best_metric, mode));
            state.evals_since_best = 0;
            if self.cfg.train.keep_best {
                write_atomically(&self.out.join("best"), |d| {
                    recipe.save_model(d)?;
                    std::fs::write(d.join("xsent-best.json"), serde_json::to_string_pretty(&serde_json::json!({"step": state.step, best_metric: score}))?)?;
                    Ok(())
                })?;
            }
        } else {
            state.evals_since_best += 1;
        }
        let p = self.cfg.train.early_stopping_patience;
        // Patience counts from a finite best score: a run whose scores were never finite
        // does not stop on it.
        let stop = p > 0 && state.best.is_some() && state.evals_since_best >= p;
        if let (true, Some((at, b))) = (stop, state.best) {
            progress.println(&format!(
                "xsent train: stopping early: {best_metric} has not improved on {b:.4} (step {at}) in {p} validation(s) (train.early_stopping_patience)"
            ));
        }
        Ok(stop)
    }

    fn checkpoint(&self, params: &Params, opt: &AdamW, state: &State) -> Result<()> {
        let dir = self.out.join("checkpoints");
        std::fs::create_dir_all(&dir)?;
        write_atomically(&dir.join(format!("step-{}", state.step)), |d| {
            weights::save_tensors(&params.tensors(), &d.join("params.safetensors"))?;
            weights::save_tensors(&opt.state_tensors()?, &d.join("optimizer.safetensors"))?;
            std::fs::write(d.join("state.json"), serde_json::to_string_pretty(state)?)?;
            // Last: read back from disk, so that it vouches for what is stored.
            super::checksums::write(d, &CHECKPOINT_FILES)
        })?;
        // keep-last-K, and never fewer than 2: a resume falls back to the one before a
        // damaged newest checkpoint (Config::validate refuses 0).
        let steps = checkpoint_steps(&dir)?;
        let keep = self.cfg.train.keep_last.max(2);
        if steps.len() > keep {
            for s in &steps[..steps.len() - keep] {
                std::fs::remove_dir_all(dir.join(format!("step-{s}")))?;
            }
        }
        Ok(())
    }
}

/// The files of a checkpoint, each covered by its checksum.
const CHECKPOINT_FILES: [&str; 3] = ["params.safetensors", "optimizer.safetensors", "state.json"];

/// `dir/name`, or where that exists `dir/name.1`, `dir/name.2`, … (the first that does not).
fn free_name(dir: &Path, name: &str) -> PathBuf {
    let mut p = dir.join(name);
    let mut i = 1;
    while p.exists() {
        p = dir.join(format!("{name}.{i}"));
        i += 1;
    }
    p
}

/// The N of every `step-N` directory under `dir`, ascending (none if `dir` does not exist).
fn checkpoint_steps(dir: &Path) -> Result<Vec<u64>> {
    if !dir.is_dir() {
        return Ok(Vec::new());
    }
    let mut steps: Vec<u64> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok()?.file_name().to_str()?.strip_prefix("step-")?.parse().ok())
        .collect();
    steps.sort_unstable();
    Ok(steps)
}

/// Add named loss terms into a running list, keeping first-seen order.
fn add_terms(into: &mut Vec<(String, f64)>, terms: Vec<(String, f64)>) {
    for (k, v) in terms {
        match into.iter_mut().find(|(n, _)| *n == k) {
            Some(slot) => slot.1 += v,
            None => into.push((k, v)),
        }
    }
}

/// Write a directory via `.NAME.tmp` and a rename, replacing any older one only once the new
/// one is complete and on disk (its files are synced before the rename).
pub fn write_atomically(dst: &Path, write: impl FnOnce(&Path) -> Result<()>) -> Result<()> {
    restore_replaced(dst)?;
    let name = dst.file_name().and_then(|n| n.to_str()).unwrap_or("dir");
    let tmp = dst.with_file_name(format!(".{name}.tmp"));
    let old = dst.with_file_name(format!(".{name}.old"));
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp)?;
    }
    std::fs::create_dir_all(&tmp).with_context(|| format!("cannot create {}", tmp.display()))?;
    write(&tmp).with_context(|| format!("writing {}", dst.display()))?;
    sync_tree(&tmp).with_context(|| format!("cannot sync {} to disk", tmp.display()))?;
    if dst.exists() {
        if old.exists() {
            std::fs::remove_dir_all(&old)?;
        }
        // Between this rename and the next, the previous version is only at `old`:
        // `restore_replaced` puts it back if the process dies here.
        std::fs::rename(dst, &old)?;
    }
    std::fs::rename(&tmp, dst).with_context(|| format!("cannot move {} into place", dst.display()))?;
    if let Some(parent) = dst.parent() {
        sync_dir(parent);
    }
    if old.exists() {
        std::fs::remove_dir_all(&old)?;
    }
    Ok(())
}

/// Undo a replacement by [`write_atomically`] that was cut between its two renames: `dst` is
/// missing and its previous version is `.NAME.old`, which is moved back.
pub fn restore_replaced(dst: &Path) -> Result<()> {
    let name = dst.file_name().and_then(|n| n.to_str()).unwrap_or("dir");
    let old = dst.with_file_name(format!(".{name}.old"));
    if !dst.exists() && old.is_dir() {
        std::fs::rename(&old, dst).with_context(|| format!("cannot restore {} from {}", dst.display(), old.display()))?;
    }
    Ok(())
}

/// [`restore_replaced`] for every directory a run writes atomically (`best/`, `final/`,
/// `checkpoints/step-N/`), and the temporary folders of such writes cut short removed. Call it
/// with the run directory locked ([`super::lock::RunLock`]).
pub fn restore_run(out: &Path) -> Result<()> {
    restore_replaced(&out.join("best"))?;
    restore_replaced(&out.join("final"))?;
    for name in [".best.tmp", ".final.tmp"] {
        remove_stale(&out.join(name))?;
    }
    let dir = out.join("checkpoints");
    if dir.is_dir() {
        let newest = checkpoint_steps(&dir)?.last().copied();
        for e in std::fs::read_dir(&dir).with_context(|| format!("cannot read {}", dir.display()))? {
            let e = e.with_context(|| format!("cannot read {}", dir.display()))?;
            let name = e.file_name();
            if name.to_str().is_some_and(|n| n.starts_with(".step-") && n.ends_with(".tmp")) {
                remove_stale(&e.path())?;
                continue;
            }
            let Some(step) = name.to_str().and_then(|n| n.strip_prefix(".step-")?.strip_suffix(".old")?.parse::<u64>().ok()) else { continue };
            if newest.is_none_or(|n| step > n) {
                restore_replaced(&dir.join(format!("step-{step}")))?;
            } else {
                // Its checkpoint is in place, or older than one that is: a leftover whose
                // removal was cut short, not a replacement to undo.
                std::fs::remove_dir_all(e.path()).with_context(|| format!("cannot remove {}", e.path().display()))?;
            }
        }
    }
    Ok(())
}

/// Remove the folder of a [`write_atomically`] cut short (the process was killed while it wrote
/// a checkpoint or model), saying so. Only with the run's lock held: another run's write in
/// progress looks the same.
fn remove_stale(tmp: &Path) -> Result<()> {
    if tmp.is_dir() {
        std::fs::remove_dir_all(tmp).with_context(|| format!("cannot remove {}", tmp.display()))?;
        crate::errln!("xsent train: removed {}, left by a write that was cut short", tmp.display());
    }
    Ok(())
}

/// Flush every file under `dir` (and the directories themselves) to disk.
fn sync_tree(dir: &Path) -> Result<()> {
    for e in std::fs::read_dir(dir)? {
        let p = e?.path();
        if p.is_dir() {
            sync_tree(&p)?;
        } else {
            std::fs::File::open(&p)?.sync_all()?;
        }
    }
    sync_dir(dir);
    Ok(())
}

/// Flush a directory's entries (best effort: not every platform can open a directory).
fn sync_dir(dir: &Path) {
    if let Ok(f) = std::fs::File::open(dir) {
        let _ = f.sync_all();
    }
}

fn load_checkpoint(dir: &Path, params: &Params, opt: &mut AdamW) -> Result<State> {
    let state_file = dir.join("state.json");
    let text = std::fs::read_to_string(&state_file).with_context(|| format!("cannot read {}", state_file.display()))?;
    let state: State = serde_json::from_str(&text).with_context(|| format!("invalid {}", state_file.display()))?;
    let named = dir.file_name().and_then(|n| n.to_str()?.strip_prefix("step-")?.parse::<u64>().ok());
    if named.is_some_and(|n| n != state.step) {
        bail!("{} says step {}, but it is the checkpoint of step {}: it was edited or moved; restore it, or start a new run with --out", state_file.display(), state.step, named.unwrap_or_default());
    }
    let saved = candle_core::safetensors::load(dir.join("params.safetensors"), &candle_core::Device::Cpu)
        .with_context(|| format!("cannot read {}", dir.join("params.safetensors").display()))?;
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
    let opt_state = candle_core::safetensors::load(&opt_path, &candle_core::Device::Cpu)
        .with_context(|| format!("cannot read {}", opt_path.display()))?;
    opt.load_state(&opt_state, state.step).with_context(|| format!("{}", opt_path.display()))?;
    Ok(state)
}

/// Refuse, before the first step, a run whose mega-batches (over its `micro_batches`) would
/// grow larger than the `n` training examples: the mega-batch is a slice of one pass over the
/// data order, so it cannot hold more. The step loop walks the same mega-batches.
pub fn check_megabatches(recipe: &dyn Recipe, micro_batches: u64, batch_size: usize, n: usize) -> Result<()> {
    let (mut first, mut largest) = (0u64, 1usize);
    while first < micro_batches {
        let m = recipe.megabatch_len(first).max(1);
        if m > largest {
            largest = m;
            if m.checked_mul(batch_size).is_none_or(|size| size > n) {
                bail!(
                    "from micro-batch {first} on, this run's mega-batches hold {m} batches of {batch_size} examples, larger than the {n} training \
                     examples; set sp.megabatch_max to at most {} (or lower train.batch_size, or add data)",
                    n / batch_size
                );
            }
        }
        first += m as u64;
    }
    Ok(())
}

/// Drop metrics lines of steps after `step` (written after the checkpoint resumed from).
fn truncate_metrics(path: &Path, step: u64) -> Result<()> {
    let Ok(text) = std::fs::read_to_string(path) else { return Ok(()) };
    let kept: Vec<&str> = text
        .lines()
        .filter(|l| serde_json::from_str::<serde_json::Value>(l).ok().and_then(|v| v["step"].as_u64()).is_some_and(|s| s <= step))
        .collect();
    let mut out = kept.join("\n");
    if !out.is_empty() {
        out.push('\n');
    }
    write_file_atomically(path, out.as_bytes())
}

/// How `State::best_of` names a metric and its mode (`sts_spearman/max`).
fn best_of(metric: &str, mode: BestMode) -> String {
    format!("{metric}/{}", if mode == BestMode::Max { "max" } else { "min" })
}

/// On resume from a checkpoint older than `best/`, `best/` holds a model of steps after the
/// checkpoint, which the resumed run replays (the same steps again, or others under a changed
/// config) and scores against the checkpoint's best. So that `best/` never holds a model this
/// run did not keep, it is moved aside to `best-step-N-before-resume/` (not deleted); a replay
/// that scores as well writes it again.
fn set_aside_stale_best(out: &Path, step: u64) -> Result<()> {
    let best = out.join("best");
    let Ok(text) = std::fs::read_to_string(best.join("xsent-best.json")) else { return Ok(()) };
    let Some(at) = serde_json::from_str::<serde_json::Value>(&text).ok().and_then(|v| v["step"].as_u64()) else { return Ok(()) };
    if at <= step {
        return Ok(());
    }
    let aside = out.join(format!("best-step-{at}-before-resume"));
    anyhow::ensure!(
        !aside.exists(),
        "--resume: {} holds step {at}, after the checkpoint of step {step}, and {} exists already: move one of them away, then resume",
        best.display(),
        aside.display()
    );
    std::fs::rename(&best, &aside).with_context(|| format!("cannot move {} to {}", best.display(), aside.display()))?;
    errln!(
        "xsent train: best/ held step {at}, after the checkpoint resumed (step {step}); moved to {} (the resumed run keeps its own best)",
        aside.display()
    );
    Ok(())
}

/// Whether `metrics.jsonl` holds a validation at `step`.
fn validation_logged(path: &Path, step: u64) -> bool {
    std::fs::read_to_string(path).is_ok_and(|text| {
        text.lines().filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok()).any(|v| v["step"].as_u64() == Some(step) && v.get("val").is_some())
    })
}

/// Replace a file through `.NAME.tmp` and a rename: an interruption leaves the old file or the
/// new one, never a truncated one.
pub(crate) fn write_file_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    let tmp = path.with_file_name(format!(".{name}.tmp"));
    let mut f = std::fs::File::create(&tmp).with_context(|| format!("cannot write {}", tmp.display()))?;
    f.write_all(bytes).and_then(|_| f.sync_all()).with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("cannot move {} into place", path.display()))
}

/// What the shards of one micro-batch gave.
pub struct MicroBatch {
    pub grads: GradStore,
    pub loss: f64,
    pub terms: Vec<(String, f64)>,
    pub sentences: usize,
    /// The first non-finite shard loss and its terms.
    pub non_finite: Option<(f64, Vec<(String, f64)>)>,
    /// Thread-seconds in the recipe's loss (forward) and in backward.
    pub forward_s: f64,
    pub backward_s: f64,
}

/// Forward and backward of each shard (on [`crate::parallel::threads`] workers), with `mega` the
/// examples of the micro-batch's mega-batch (see [`Recipe::loss_in_megabatch`]), each shard's
/// loss weighted by its share of the batch and by `1 / grad_accum`; gradients summed in shard
/// order, so the result does not depend on the number of threads.
pub fn run_shards(
    recipe: &dyn Recipe,
    shards: &[&[usize]],
    mega: &[usize],
    seeds: &[u64],
    batch_len: usize,
    accum: usize,
    params: &Params,
) -> Result<MicroBatch> {
    struct Done {
        grads: Option<GradStore>,
        rows: RowGrads,
        loss: f64,
        terms: Vec<(String, f64)>,
        sentences: usize,
        fwd: f64,
        bwd: f64,
    }
    /// A shard's result: its gradients, or the non-finite loss and terms it gave.
    type Shard = Result<std::result::Result<Done, (f64, Vec<(String, f64)>)>>;
    let one = |i: usize| -> Shard {
        let mut rng = Rng::seed_from_u64(seeds[i]);
        let t0 = Instant::now();
        let (l, lookups) = collect_row_lookups(|| recipe.loss_in_megabatch(shards[i], mega, &mut rng));
        let l = l?;
        let fwd = t0.elapsed().as_secs_f64();
        let w = shards[i].len() as f64 / batch_len as f64 / accum as f64;
        let value = l.total.to_dtype(candle_core::DType::F64)?.to_scalar::<f64>()?;
        if !value.is_finite() {
            return Ok(Err((value, l.terms)));
        }
        let t1 = Instant::now();
        let scaled = if w != 1.0 { (l.total * w)? } else { l.total };
        let mut grads = scaled.backward()?;
        let rows = take_row_grads(&mut grads, &lookups)?;
        let terms = l.terms.into_iter().map(|(k, v)| (k, v * w)).collect();
        Ok(Ok(Done { grads: Some(grads), rows, loss: value * w, terms, sentences: l.sentences, fwd, bwd: t1.elapsed().as_secs_f64() }))
    };
    let n = shards.len();
    // Shards are folded into the running sum in shard order as they finish, so at most a few
    // shards' gradients are alive at once.
    struct Fold {
        next: usize,
        pending: std::collections::BTreeMap<usize, Shard>,
        out: MicroBatch,
        acc: Option<GradStore>,
        tables: TableGrads,
        error: Option<anyhow::Error>,
    }
    let fold = std::sync::Mutex::new(Fold {
        next: 0,
        pending: Default::default(),
        out: MicroBatch {
            grads: GradStore::default(),
            loss: 0.0,
            terms: Vec::new(),
            sentences: 0,
            non_finite: None,
            forward_s: 0.0,
            backward_s: 0.0,
        },
        acc: None,
        tables: TableGrads::default(),
        error: None,
    });
    let finish = |i: usize, r: Shard| {
        let mut f = fold.lock().expect("no worker panicked");
        f.pending.insert(i, r);
        loop {
            let next = f.next;
            let Some(r) = f.pending.remove(&next) else { break };
            f.next += 1;
            match r {
                Err(e) => {
                    f.error.get_or_insert(e);
                }
                Ok(Err(bad)) => {
                    f.out.non_finite.get_or_insert(bad);
                }
                Ok(Ok(mut d)) => {
                    f.out.loss += d.loss;
                    add_terms(&mut f.out.terms, d.terms);
                    f.out.sentences += d.sentences;
                    f.out.forward_s += d.fwd;
                    f.out.backward_s += d.bwd;
                    let g = d.grads.take().expect("set above");
                    let acc = f.acc.take();
                    match add_grads(acc, g, params) {
                        Ok(sum) => f.acc = Some(sum),
                        Err(e) => {
                            f.error.get_or_insert(e);
                        }
                    }
                    f.tables.add(std::mem::take(&mut d.rows));
                }
            }
        }
    };
    par_for(n, |i| finish(i, one(i)));
    let Fold { mut out, acc, tables, error, .. } = fold.into_inner().expect("no worker panicked");
    if let Some(e) = error {
        return Err(e);
    }
    if let Some(a) = acc {
        out.grads = a;
    }
    tables.into_store(&mut out.grads)?;
    Ok(out)
}

/// `f(i)` for `i` in `0..n`, on [`crate::parallel::threads`] workers taking the next index as
/// they finish (on the calling thread when there is one worker).
fn par_for(n: usize, f: impl Fn(usize) + Sync) {
    let workers = crate::parallel::threads().min(n).max(1);
    if workers == 1 {
        (0..n).for_each(f);
        return;
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    break;
                }
                f(i);
            });
        }
    });
}

/// `f(0..n)` with [`par_for`], results in index order.
fn par_map<T: Send>(n: usize, f: impl Fn(usize) -> T + Sync) -> Vec<T> {
    let slots: Vec<std::sync::Mutex<Option<T>>> = (0..n).map(|_| std::sync::Mutex::new(None)).collect();
    par_for(n, |i| {
        let r = f(i);
        *slots[i].lock().expect("no worker panicked") = Some(r);
    });
    slots.into_iter().map(|m| m.into_inner().expect("no worker panicked").expect("every index ran")).collect()
}

/// One micro-batch of a [`coupled`](Recipe::coupled) recipe: shards forward on separate cores,
/// the coupled loss on a leaf copy of their vectors, then each shard's backward of its weighted
/// separable loss plus `Σ vectors ⊙ ∂L_coupled/∂vectors` on separate cores; gradients summed in
/// shard order.
pub fn run_coupled(recipe: &dyn Recipe, batch: &[usize], shards: &[&[usize]], seeds: &[u64], accum: usize, params: &Params) -> Result<MicroBatch> {
    let n = shards.len();
    let b = batch.len() as f64;
    let accum = accum as f64;
    let forward = par_map(n, |i| -> Result<(StepLoss, Tensor, Vec<RowLookup>, f64)> {
        let mut rng = Rng::seed_from_u64(seeds[i]);
        let t0 = Instant::now();
        let (r, lookups) = collect_row_lookups(|| recipe.shard_forward(shards[i], &mut rng));
        let (l, v) = r?;
        Ok((l, v, lookups, t0.elapsed().as_secs_f64()))
    });
    let mut out = MicroBatch { grads: GradStore::default(), loss: 0.0, terms: Vec::new(), sentences: 0, non_finite: None, forward_s: 0.0, backward_s: 0.0 };
    let mut parts = Vec::with_capacity(n);
    for (i, r) in forward.into_iter().enumerate() {
        let (l, v, lookups, fwd) = r?;
        let w = shards[i].len() as f64 / b / accum;
        let value = l.total.to_dtype(candle_core::DType::F64)?.to_scalar::<f64>()?;
        if !value.is_finite() {
            out.non_finite.get_or_insert((value, l.terms.clone()));
        }
        out.loss += value * w;
        add_terms(&mut out.terms, l.terms.iter().map(|(k, x)| (k.clone(), x * w)).collect());
        out.sentences += l.sentences;
        out.forward_s += fwd;
        parts.push((l.total, v, w, lookups));
    }
    let t0 = Instant::now();
    let detached: Vec<Tensor> = parts.iter().map(|p| p.1.detach()).collect();
    let leaf = candle_core::Var::from_tensor(&Tensor::cat(&detached, 0)?)?;
    let c = recipe.coupled_loss(batch, leaf.as_tensor())?;
    let value = c.total.to_dtype(candle_core::DType::F64)?.to_scalar::<f64>()?;
    if !value.is_finite() {
        out.non_finite.get_or_insert((value, c.terms.clone()));
    }
    if out.non_finite.is_some() {
        return Ok(out);
    }
    out.loss += value / accum;
    add_terms(&mut out.terms, c.terms.iter().map(|(k, x)| (k.clone(), x / accum)).collect());
    let dv = c.total.backward()?.remove(leaf.as_tensor()).map(|g| g / accum).transpose()?;
    let coupled_s = t0.elapsed().as_secs_f64();
    let mut offsets = vec![0usize; n + 1];
    for (i, p) in parts.iter().enumerate() {
        offsets[i + 1] = offsets[i] + p.1.dim(0)?;
    }
    let backward = par_map(n, |i| -> Result<(GradStore, RowGrads, f64)> {
        let t1 = Instant::now();
        let (sep, v, w, lookups) = &parts[i];
        let mut surrogate = (sep * *w)?;
        if let Some(dv) = &dv {
            let g = dv.narrow(0, offsets[i], offsets[i + 1] - offsets[i])?;
            surrogate = (surrogate + v.mul(&g)?.sum_all()?)?;
        }
        let mut grads = surrogate.backward()?;
        let rows = take_row_grads(&mut grads, lookups)?;
        Ok((grads, rows, t1.elapsed().as_secs_f64()))
    });
    let mut acc = None;
    let mut tables = TableGrads::default();
    for r in backward {
        let (g, rows, s) = r?;
        out.backward_s += s;
        acc = Some(add_grads(acc, g, params)?);
        tables.add(rows);
    }
    out.backward_s += coupled_s;
    if let Some(a) = acc {
        out.grads = a;
    }
    tables.into_store(&mut out.grads)?;
    Ok(out)
}

/// A shard's gradients of its row-sparse token lookups (see [`collect_row_lookups`]), taken out
/// of its gradient store: per lookup the table, the rows used and their gradient (row-major).
type RowGrads = Vec<(Tensor, Vec<u32>, Vec<f32>)>;

fn take_row_grads(grads: &mut GradStore, lookups: &[RowLookup]) -> Result<RowGrads> {
    let mut out = Vec::with_capacity(lookups.len());
    for l in lookups {
        if let Some(g) = grads.remove(l.leaf.as_tensor()) {
            out.push((l.table.clone(), l.rows.clone(), g.flatten_all()?.to_vec1::<f32>()?));
        }
    }
    Ok(out)
}

/// Token tables' gradients summed row by row from shards' [`RowGrads`] in the order added: one
/// table-sized buffer per table and micro-batch instead of a dense zeroed tensor and copies per lookup.
/// Each row gets the additions of the dense path, grouped per lookup (so equal to it up to the
/// rounding of a different order of additions).
#[derive(Default)]
struct TableGrads(Vec<(Tensor, Vec<f32>)>);

impl TableGrads {
    fn add(&mut self, rows: RowGrads) {
        for (table, ids, vals) in rows {
            let i = match self.0.iter().position(|(t, _)| t.id() == table.id()) {
                Some(i) => i,
                None => {
                    let n = table.elem_count();
                    self.0.push((table, vec![0f32; n]));
                    self.0.len() - 1
                }
            };
            let buf = &mut self.0[i].1;
            let h = vals.len() / ids.len().max(1);
            for (k, &r) in ids.iter().enumerate() {
                let dst = &mut buf[r as usize * h..(r as usize + 1) * h];
                for (d, v) in dst.iter_mut().zip(&vals[k * h..(k + 1) * h]) {
                    *d += v;
                }
            }
        }
    }

    /// Adds each table's gradient into `grads` (after any dense gradient it already holds, e.g.
    /// of an output layer tied to the table).
    fn into_store(self, grads: &mut GradStore) -> Result<()> {
        for (table, buf) in self.0 {
            let g = Tensor::from_vec(buf, table.shape(), table.device())?;
            let sum = match grads.get(&table) {
                Some(dense) => (dense + &g)?,
                None => g,
            };
            grads.insert(&table, sum);
        }
        Ok(())
    }
}

fn add_grads(acc: Option<GradStore>, g: GradStore, params: &Params) -> Result<GradStore> {
    let Some(mut acc) = acc else { return Ok(g) };
    for (_, var) in &params.vars {
        let t = var.as_tensor();
        match (acc.get(t), g.get(t)) {
            (Some(a), Some(b)) => {
                let s = (a + b)?;
                acc.insert(t, s);
            }
            (None, Some(b)) => {
                acc.insert(t, b.clone());
            }
            _ => {}
        }
    }
    Ok(acc)
}

fn nan_message(step: u64, value: f64, terms: &[(String, f64)], out: &Path) -> Result<String> {
    let dir = out.join("checkpoints");
    let kept = checkpoint_steps(&dir)?;
    let terms: Vec<String> = terms.iter().map(|(k, v)| format!("{k} = {v}")).collect();
    let advice = match kept.last() {
        None => "No checkpoint was written yet; lower optim.lr or check the data.".to_string(),
        // The newest checkpoint holds the very weights that gave this loss (on this step's
        // batch): resuming from it repeats the failure unless the batch is the cause.
        Some(&last) if last + 1 == step => {
            let earlier = match kept.len() {
                1 => "it is the only checkpoint written".to_string(),
                _ => format!(
                    "an earlier one is {} (move the newer ones away to --resume from it with --set optim.lr=LOWER)",
                    dir.join(format!("step-{}", kept[kept.len() - 2])).display()
                ),
            };
            format!(
                "The newest checkpoint, {}, holds the weights that gave this loss, and --resume from it repeats this step exactly; {earlier}. \
                 Or start a new run (another --out) with a lower optim.lr.",
                dir.join(format!("step-{last}")).display()
            )
        }
        Some(&last) => format!(
            "The last good checkpoint is {} (continue from it with --resume, perhaps with a lower optim.lr).",
            dir.join(format!("step-{last}")).display()
        ),
    };
    Ok(format!("the loss is {value} at step {step} ({}); stopped before updating the weights. {advice}", terms.join(", ")))
}

/// Progress on stderr: a bar on a terminal, else a line every `log_every` steps.
struct Progress {
    bar: Option<indicatif::ProgressBar>,
    total: u64,
    start: Instant,
    start_step: u64,
}

impl Progress {
    fn new(total: u64, step: u64) -> Self {
        let bar = std::io::IsTerminal::is_terminal(&std::io::stderr()).then(|| {
            let b = indicatif::ProgressBar::new(total);
            b.set_style(
                indicatif::ProgressStyle::with_template("{elapsed_precise} [{bar:30}] step {pos}/{len} {msg} ETA {eta}")
                    .expect("a valid template")
                    .progress_chars("=> "),
            );
            b.set_position(step);
            b
        });
        Self { bar, total, start: Instant::now(), start_step: step }
    }

    fn set(&self, step: u64, loss: f64) {
        if let Some(b) = &self.bar {
            b.set_position(step);
            b.set_message(format!("loss {loss:.5}"));
        }
    }

    fn log(&self, step: u64, loss: f64, sps: f64) {
        match &self.bar {
            Some(b) => b.set_message(format!("loss {loss:.5}, {sps:.1} sent/s")),
            None => {
                let done = (step - self.start_step) as f64;
                let secs = self.start.elapsed().as_secs_f64();
                let eta = if done > 0.0 { secs / done * (self.total - step) as f64 } else { 0.0 };
                errln!("step {step}/{} loss {loss:.5} {sps:.1} sent/s ETA {}", self.total, fmt_secs(eta));
            }
        }
    }

    fn println(&self, msg: &str) {
        match &self.bar {
            Some(b) => b.println(msg),
            None => errln!("{msg}"),
        }
    }

    fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}

fn fmt_secs(s: f64) -> String {
    let s = s.round() as u64;
    format!("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sampler_is_reproducible_and_covers_each_epoch() {
        let mut a = Sampler::new(7, 10, 0, 0);
        let first: Vec<usize> = (0..5).flat_map(|_| a.next_batch(2)).collect();
        let mut sorted = first.clone();
        sorted.sort();
        assert_eq!(sorted, (0..10).collect::<Vec<_>>());
        let next = a.next_batch(3);
        assert_eq!(a.epoch, 1);
        // Re-created at the saved position it continues identically.
        let mut b = Sampler::new(7, 10, 1, 3);
        let mut c = Sampler::new(7, 10, 1, 0);
        assert_eq!(c.next_batch(3), next);
        assert_eq!(b.next_batch(4), c.next_batch(4));
    }

    #[test]
    fn sampler_at_a_position_continues_the_run() {
        let mut run = Sampler::new(3, 7, 0, 0);
        let drawn: Vec<usize> = (0..6).flat_map(|_| run.next_batch(4)).collect();
        for consumed in [0usize, 4, 7, 8, 14, 20] {
            let mut s = Sampler::at(3, 7, consumed as u64);
            assert_eq!(s.next_batch(4), drawn[consumed..consumed + 4].to_vec(), "after {consumed}");
        }
    }

    #[test]
    fn nan_message_names_the_checkpoint_to_use() {
        let d = tempfile::tempdir().unwrap();
        let m = nan_message(3, f64::NAN, &[("mse".into(), f64::NAN)], d.path()).unwrap();
        assert!(m.contains("at step 3 (mse = NaN)") && m.contains("No checkpoint was written yet"), "{m}");
        let ck = d.path().join("checkpoints");
        for s in [2, 4] {
            std::fs::create_dir_all(ck.join(format!("step-{s}"))).unwrap();
        }
        // The step after the newest checkpoint: that checkpoint gave the NaN; the one before is named.
        let m = nan_message(5, f64::NAN, &[], d.path()).unwrap();
        assert!(m.contains(&format!("newest checkpoint, {}", ck.join("step-4").display())), "{m}");
        assert!(m.contains("repeats this step exactly"), "{m}");
        assert!(m.contains(&format!("an earlier one is {}", ck.join("step-2").display())), "{m}");
        // One checkpoint: the first (at least two are kept).
        std::fs::remove_dir_all(ck.join("step-2")).unwrap();
        assert!(nan_message(5, f64::NAN, &[], d.path()).unwrap().contains("it is the only checkpoint written"));
        // Later: the newest checkpoint predates the trouble.
        let m = nan_message(7, f64::INFINITY, &[], d.path()).unwrap();
        assert!(m.contains(&format!("last good checkpoint is {}", ck.join("step-4").display())), "{m}");
    }

    #[test]
    fn atomic_dir_replacement() {
        let d = tempfile::tempdir().unwrap();
        let dst = d.path().join("final");
        write_atomically(&dst, |p| Ok(std::fs::write(p.join("a"), "1")?)).unwrap();
        let e = write_atomically(&dst, |_| bail!("disk full")).unwrap_err();
        assert!(format!("{e:#}").contains("disk full"));
        assert_eq!(std::fs::read_to_string(dst.join("a")).unwrap(), "1", "a failed write leaves the old dir");
        write_atomically(&dst, |p| Ok(std::fs::write(p.join("b"), "2")?)).unwrap();
        assert!(!dst.join("a").exists() && dst.join("b").exists());
        // A replacement cut between its two renames (dst moved to .final.old, the new one
        // still at .final.tmp) is undone: the previous version comes back.
        std::fs::rename(&dst, d.path().join(".final.old")).unwrap();
        std::fs::create_dir(d.path().join(".final.tmp")).unwrap();
        restore_replaced(&dst).unwrap();
        assert_eq!(std::fs::read_to_string(dst.join("b")).unwrap(), "2");
        assert!(!d.path().join(".final.old").exists());
        // The same for a checkpoint, found by `restore_run`.
        let ck = d.path().join("checkpoints");
        std::fs::create_dir_all(ck.join(".step-4.old")).unwrap();
        std::fs::write(ck.join(".step-4.old/state.json"), "{}").unwrap();
        std::fs::create_dir_all(ck.join("step-2")).unwrap();
        restore_run(d.path()).unwrap();
        assert!(ck.join("step-4/state.json").is_file() && ck.join("step-2").is_dir());
        // A leftover older than an existing checkpoint is removed, not brought back.
        std::fs::create_dir_all(ck.join(".step-3.old")).unwrap();
        restore_run(d.path()).unwrap();
        assert!(!ck.join("step-3").exists() && !ck.join(".step-3.old").exists());
    }
}

#[cfg(test)]
mod row_lookup_tests {
    use super::*;
    use crate::model::config::EncoderConfig;
    use crate::model::encoder::{Encoder, Mode};
    use candle_core::{DType, Device};
    use rand::Rng as _;

    /// A 2-layer BERT with seeded random weights (dropout on).
    fn tiny() -> (Encoder, candle_nn::VarMap) {
        let cfg: EncoderConfig = serde_json::from_value(serde_json::json!({
            "model_type": "bert", "vocab_size": 50, "hidden_size": 8, "num_hidden_layers": 2,
            "num_attention_heads": 2, "intermediate_size": 16, "max_position_embeddings": 16
        }))
        .unwrap();
        let vm = candle_nn::VarMap::new();
        let enc = Encoder::load(candle_nn::VarBuilder::from_varmap(&vm, DType::F32, &Device::Cpu), &cfg).unwrap();
        let mut rng = Rng::seed_from_u64(5);
        for v in vm.all_vars() {
            let vals: Vec<f32> = (0..v.elem_count()).map(|_| rng.random::<f32>() - 0.5).collect();
            v.set(&Tensor::from_vec(vals, v.shape(), &Device::Cpu).unwrap()).unwrap();
        }
        (enc, vm)
    }

    /// Two lookups (token 7 in both), a use of the whole table besides (as a tied output layer
    /// makes), dropout on: the row-wise table gradient equals candle's dense one.
    #[test]
    fn row_sparse_token_lookups_give_the_dense_gradient() {
        let (enc, _vm) = tiny();
        let table = enc.word_embeddings().clone();
        let dev = Device::Cpu;
        let ids_a = Tensor::new(&[[1u32, 7, 7, 3], [9, 7, 2, 0]], &dev).unwrap();
        let ids_b = Tensor::new(&[[7u32, 40, 3, 3]], &dev).unwrap();
        let tied = Tensor::from_vec((0..50 * 8).map(|i| ((i % 13) as f32 - 6.0) / 7.0).collect::<Vec<_>>(), (50, 8), &dev).unwrap();
        let loss = || -> Tensor {
            let mut rng = Rng::seed_from_u64(11);
            let mut total = (table.mul(&tied).unwrap().sum_all().unwrap() * 0.1).unwrap();
            for ids in [&ids_a, &ids_b] {
                let mask = ids.ones_like().unwrap();
                let h = enc.forward(ids, &mask, &mut Mode::Train(&mut rng)).unwrap();
                total = (total + h.sqr().unwrap().sum_all().unwrap().sqrt().unwrap()).unwrap();
            }
            total
        };
        let dense_loss = loss();
        let dense = dense_loss.backward().unwrap().get(&table).unwrap().to_vec2::<f32>().unwrap();

        let (sparse_loss, lookups) = collect_row_lookups(loss);
        assert_eq!(lookups.len(), 2, "one leaf per lookup");
        assert_eq!(lookups[0].rows, vec![0, 1, 2, 3, 7, 9]);
        assert_eq!(sparse_loss.to_scalar::<f32>().unwrap(), dense_loss.to_scalar::<f32>().unwrap(), "the same forward");
        let mut grads = sparse_loss.backward().unwrap();
        let rows = take_row_grads(&mut grads, &lookups).unwrap();
        assert_eq!(rows.len(), 2);
        let mut tables = TableGrads::default();
        tables.add(rows);
        tables.into_store(&mut grads).unwrap();
        let sparse = grads.get(&table).unwrap().to_vec2::<f32>().unwrap();
        for (r, (d, s)) in dense.iter().zip(&sparse).enumerate() {
            for (a, b) in d.iter().zip(s) {
                assert!((a - b).abs() <= 1e-6 * a.abs().max(1.0), "row {r}: dense {a} vs row-wise {b}");
            }
        }
        // Rows no lookup used get only the tied part.
        assert_eq!(sparse[5], dense[5]);
        // Outside collect_row_lookups the lookup is candle's, with its dense gradient.
        let again = loss().backward().unwrap().get(&table).unwrap().to_vec2::<f32>().unwrap();
        assert_eq!(again, dense);
    }
}
