//! The shared trainer: optimiser steps with warmup/decay, clipping and gradient accumulation,
//! validation, keep-best, early stopping, exact resume, interruption and metrics. It calls the
//! parts: [`super::sampler`] (data order), [`super::shards`] (forward and backward of a
//! micro-batch), [`super::checkpoint`], [`super::run_dir`] and [`super::progress`]. Recipes
//! ([`super::recipe::Recipe`]) supply a loss and a validation.

use super::ahead::{Pending, StepBatches};
use super::checkpoint::{load_checkpoint, resume_checkpoint, save_checkpoint, State};
use super::config::{BestMode, Config};
use super::optim::AdamW;
use super::progress::{nan_message, Progress};
use super::recipe::{Recipe, StepPlan};
use super::run_dir::{restore_run, set_aside_stale_best, truncate_metrics, validation_logged};
use super::sampler::Sampler;
use super::shards::{add_grads, add_terms, run_coupled, run_shards};
use crate::data::sts::StsSet;
use crate::io::atomic::write_atomically;
use crate::model::encoder::Rng;
use crate::model::weights::Params;
use anyhow::{bail, Context, Result};
use candle_core::backprop::GradStore;
use rand::{RngCore, SeedableRng};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

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
    /// Write a CPU profile of this invocation's steps here ([`crate::profile`]).
    pub profile: Option<PathBuf>,
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

/// The trainer over one recipe and one run directory.
pub struct Trainer<'a> {
    cfg: &'a Config,
    out: PathBuf,
}

impl<'a> Trainer<'a> {
    pub fn new(cfg: &'a Config, out: &Path) -> Self {
        Self { cfg, out: out.to_path_buf() }
    }

    /// Total optimiser steps for `n` examples; an error where `train.epochs` passes need more
    /// steps than a u64 counts (the product wrapped to a few steps, or none).
    pub fn total_steps(cfg: &Config, n: usize) -> Result<u64> {
        if cfg.train.max_steps > 0 {
            return Ok(cfg.train.max_steps);
        }
        let per_epoch = (n as u64).div_ceil((cfg.train.batch_size as u64).saturating_mul(cfg.train.grad_accum as u64));
        cfg.train.epochs.checked_mul(per_epoch).with_context(|| {
            format!(
                "train.epochs = {} passes of {per_epoch} steps each are more steps than xsent counts; give fewer epochs",
                cfg.train.epochs
            )
        })
    }

    /// Train. With `resume`, continue from the newest checkpoint in the run directory.
    pub fn run(&self, recipe: &mut dyn Recipe, resume: bool, opts: &RunOptions) -> Result<Outcome> {
        let cfg = self.cfg;
        let t = &cfg.train;
        let n = recipe.num_examples();
        let (sts, total) = self.check_run(recipe, n)?;
        let params = recipe.params();
        let mut opt = AdamW::new(&params, cfg.optim.adamw())?;
        opt.set_lr_scales(|name| recipe.lr_scale(name));
        let mut rng = Rng::seed_from_u64(cfg.seed);
        let trained_with = super::config::trained_with(cfg)?;
        let mut state = fresh_state(n, recipe.data_digest(), &trained_with);
        let (best_metric, best_mode) = best_rule(cfg, recipe)?;
        std::fs::create_dir_all(&self.out)
            .with_context(|| format!("cannot create run directory {}", self.out.display()))?;
        restore_run(&self.out)?;
        if resume {
            state = self.resume_state(
                &params,
                &mut opt,
                &mut rng,
                (n, recipe.data_digest(), total),
                (&best_metric, best_mode),
            )?;
        }
        let ended = match self.end_of(&mut state, total) {
            End::Open => None,
            End::Ended(o) => Some(o),
            End::NothingToDo(o) => return Ok(o),
        };
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
        let plan = recipe.plan();
        let mut mega: Mega = (0, plan.megabatch_len(0), Vec::new());
        let progress = Progress::new(total, state.step);
        let mut stopped_before = false;
        if state.pending_validation && ended.is_none() {
            // The validation of the checkpointed step failed on an unknown metric: run it now.
            state.pending_validation = false;
            stopped_before =
                self.validate(recipe, sts.as_ref(), &mut metrics, &mut state, (&best_metric, best_mode), &progress)?;
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
        let profile = opts.profile.as_deref().map(crate::profile::Profile::start).transpose()?;
        // The job preparing this step's batches, started during the previous step.
        let mut pending: Option<Pending> = None;
        while ended.is_none() && !stopped_before && state.step < total {
            let step_start = Instant::now();
            let lr = cfg.optim.lr_at(state.step, total);
            // Time on this thread for the work ahead: waiting for the job, and what a recipe
            // runs here for the next step (DuEAM's anchor forward).
            let t_ahead = Instant::now();
            if t.ahead && pending.is_none() {
                // The first step of this invocation is prepared now, the same way: each step is
                // run from prepared batches, whatever step a run resumes at.
                if let Some(job) = recipe.ahead(&Vec::new(), &step_batches(recipe, t, &sampler, 0)) {
                    pending = Some(Pending::start(state.step + 1, job)?);
                }
            }
            if let Some(p) = pending.take() {
                recipe.take_ahead(p.join()?)?;
            }
            // The next step's batches, peeked at (the sampler draws them when their step comes):
            // none past the run's last step or this invocation's.
            let next = state.step + 2;
            if t.ahead && next <= total && opts.stop_after.is_none_or(|s| s >= next) {
                let now = step_batches(recipe, t, &sampler, 0);
                if let Some(job) = recipe.ahead(&now, &step_batches(recipe, t, &sampler, 1)) {
                    pending = Some(Pending::start(next, job)?);
                }
            }
            let ahead_s = t_ahead.elapsed().as_secs_f64();
            let (sums, grads) = self.micro_batches(recipe, &params, &mut sampler, &mut mega, &mut rng, state.step)?;
            let t_opt = Instant::now();
            let grad_norm = opt.grad_norm(&grads)?;
            if !grad_norm.is_finite() {
                bail!(nan_message(state.step + 1, grad_norm, &[("grad_norm".into(), grad_norm)], &self.out)?);
            }
            opt.step_with_norm(&grads, lr, grad_norm)?;
            drop(grads);
            let opt_s = t_opt.elapsed().as_secs_f64();
            state.step += 1;
            state.sentences += sums.sentences as u64;
            (state.epoch, state.pos) = (sampler.epoch, sampler.pos);
            window.1 += sums.sentences as u64;
            let step_s = step_start.elapsed().as_secs_f64();
            state.elapsed_s = elapsed_before + started.elapsed().as_secs_f64();

            let interrupted = opts.interrupt.as_ref().is_some_and(|f| f.load(Ordering::SeqCst));
            // A stop at the last step is the end of the run: it finishes (final/ written).
            let stop_here = opts.stop_after == Some(state.step) && state.step < total;
            if state.step.is_multiple_of(t.log_every.max(1)) || state.step == total || interrupted || stop_here {
                let secs = window.0.elapsed().as_secs_f64().max(1e-9);
                let sps = window.1 as f64 / secs;
                window = (Instant::now(), 0);
                let mut line = step_line(&state, n, lr, &sums, grad_norm, sps, (step_s, opt_s));
                if t.ahead {
                    line["ahead_s"] = serde_json::json!(ahead_s);
                }
                writeln!(metrics, "{line}")?;
                progress.log(state.step, sums.loss, sps);
            }
            progress.set(state.step, sums.loss);
            let mut stop_early = false;
            if t.eval_every > 0 && state.step.is_multiple_of(t.eval_every) && state.step < total {
                match self.validate(
                    recipe,
                    sts.as_ref(),
                    &mut metrics,
                    &mut state,
                    (&best_metric, best_mode),
                    &progress,
                ) {
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
        if let Some(p) = profile {
            p.finish()?;
        }
        let interrupted = || opts.interrupt.as_ref().is_some_and(|f| f.load(Ordering::SeqCst));
        if outcome == Outcome::Finished && state.finished != Some(true) && interrupted() {
            // After the last step's check, before the final validation: stop as after any step;
            // --resume validates and writes final/.
            state.rng_word_pos = rng.get_word_pos().to_string();
            self.checkpoint(&params, &opt, &state)?;
            outcome = Outcome::Interrupted;
        }
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
        if outcome == Outcome::Finished && interrupted() {
            // During the final validation: it was finished and saved, as a step is.
            errln!("xsent train: interrupted during the final validation; the run is complete");
            return Ok(Outcome::Interrupted);
        }
        Ok(outcome)
    }

    /// The run's checks before anything is allocated or written: its data, batch size and
    /// STS validation set; returns the validation set and the total number of steps.
    fn check_run(&self, recipe: &dyn Recipe, n: usize) -> Result<(Option<StsSet>, u64)> {
        let cfg = self.cfg;
        let t = &cfg.train;
        if n == 0 {
            bail!("the training data is empty");
        }
        // A batch (or a mega-batch of batches) larger than the data would repeat examples
        // within itself: refuse it before anything is allocated for it.
        if t.batch_size > n {
            bail!(
                "train.batch_size = {} is larger than the {n} training examples; lower train.batch_size (or add data)",
                t.batch_size
            );
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
        let total = Self::total_steps(cfg, n)?;
        if cfg.optim.warmup_steps > total {
            crate::errln!(
                "xsent train: warning: optim.warmup_steps = {} is more than the {total} steps of this run, so the learning rate \
                 peaks at {:.3} of optim.lr, at the last step; lower optim.warmup_steps (or train longer)",
                cfg.optim.warmup_steps,
                total as f64 / cfg.optim.warmup_steps as f64
            );
        }
        check_megabatches(recipe, total.saturating_mul(t.grad_accum as u64), t.batch_size, n)?;
        Ok((sts, total))
    }

    /// The state of a resumed run, from its newest sound checkpoint (parameters, optimiser and
    /// RNG restored), checked against this config's data and steps.
    fn resume_state(
        &self,
        params: &Params,
        opt: &mut AdamW,
        rng: &mut Rng,
        (n, digest, total): (usize, &str, u64),
        (best_metric, best_mode): (&str, BestMode),
    ) -> Result<State> {
        let Some(ckpt) = resume_checkpoint(&self.out)? else {
            bail!("--resume: {} has no checkpoint (checkpoints/step-N/) to resume from", self.out.display());
        };
        let mut state = load_checkpoint(&ckpt, params, opt)?;
        let state_file = ckpt.join("state.json");
        rng.set_word_pos(
            state
                .rng_word_pos
                .parse::<u128>()
                .with_context(|| format!("{}: bad rng_word_pos", state_file.display()))?,
        );
        // Before the data: another seed or batch size would otherwise be named as other data.
        match &state.trained_with {
            Some(was) => super::checkpoint::refuse_other_training(&state_file, was, self.cfg)?,
            // Written before checkpoints recorded them: this config's from now on.
            None => state.trained_with = Some(super::config::trained_with(self.cfg)?),
        }
        match (&state.data_digest, state.examples) {
            (Some(was), examples) if was != digest => bail!(
                "--resume: {} was written for other training data than this config reads now ({} training examples then, {n} now; \
                 data digest {was}, now {digest}): a data file was replaced or edited, or the evaluation sets that decontamination reads changed. \
                 Resume with the data the run started with, or start a new run with --out",
                state_file.display(),
                examples.map_or("an unrecorded number of".to_string(), |e| e.to_string()),
            ),
            (Some(_), _) => {}
            (None, _) => {
                // Written before checkpoints recorded the data: this run's data from now on.
                state.data_digest = Some(digest.to_string());
                state.examples = Some(n);
            }
        }
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
        let of = best_of(best_metric, best_mode);
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
        Ok(state)
    }

    /// Whether the run already ended (all steps, or patience ran out under this config): such a
    /// run is only completed, never trained further or validated again.
    fn end_of(&self, state: &mut State, total: u64) -> End {
        let patience = self.cfg.train.early_stopping_patience;
        let patience_out = patience > 0 && state.best.is_some() && state.evals_since_best >= patience;
        let ended =
            if patience_out { Some(Outcome::EarlyStopped) } else { (state.step == total).then_some(Outcome::Finished) };
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
                return End::NothingToDo(o);
            }
        } else {
            state.finished = Some(false);
        }
        match ended {
            Some(o) => End::Ended(o),
            None => End::Open,
        }
    }

    /// The `grad_accum` micro-batches of optimiser step `step` (0-based), forward and backward:
    /// their summed loss and loss terms, and their gradients.
    fn micro_batches(
        &self,
        recipe: &mut dyn Recipe,
        params: &Params,
        sampler: &mut Sampler,
        mega: &mut Mega,
        rng: &mut Rng,
        step: u64,
    ) -> Result<(StepSums, GradStore)> {
        let cfg = self.cfg;
        let t = &cfg.train;
        let n = recipe.num_examples();
        let plan = recipe.plan();
        recipe.begin_step()?;
        let mut grads: Option<GradStore> = None;
        let mut loss_sum = 0f64;
        let mut terms: Vec<(String, f64)> = Vec::new();
        let mut sentences = 0usize;
        let (mut fwd_s, mut bwd_s) = (0f64, 0f64);
        for a in 0..t.grad_accum {
            let mut batch = sampler.next_batch(t.batch_size);
            let micro = step * t.grad_accum as u64 + a as u64;
            while micro >= mega.0 + mega.1 as u64 {
                *mega = (mega.0 + mega.1 as u64, plan.megabatch_len(mega.0 + mega.1 as u64), Vec::new());
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
            let shards = shards_of(plan, t, &batch);
            // One RNG per shard, seeded in order from the run's RNG: the same dropout
            // whatever the number of threads.
            let seeds: Vec<u64> = shards.iter().map(|_| rng.next_u64()).collect();
            let mb = if plan == StepPlan::Coupled {
                run_coupled(recipe, &batch, &shards, &seeds, t.grad_accum, params)?
            } else {
                run_shards(recipe, &shards, examples, &seeds, batch.len(), t.grad_accum, params)?
            };
            if let Some((value, terms)) = mb.non_finite {
                bail!(nan_message(step + 1, value, &terms, &self.out)?);
            }
            loss_sum += mb.loss;
            add_terms(&mut terms, mb.terms);
            sentences += mb.sentences;
            fwd_s += mb.forward_s;
            bwd_s += mb.backward_s;
            grads = Some(add_grads(grads, mb.grads, params)?);
        }
        let sums = StepSums { loss: loss_sum, terms, sentences, forward_s: fwd_s, backward_s: bwd_s };
        Ok((sums, grads.expect("grad_accum >= 1")))
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
            return Err(UnknownMetric(format!(
                "train.best_metric = {best_metric:?} is not among the validation scores {names:?}"
            ))
            .into());
        };
        let mut val = serde_json::Map::new();
        for (k, v) in &scores {
            val.insert(k.clone(), serde_json::json!(v));
        }
        writeln!(
            metrics,
            "{}",
            serde_json::json!({"step": state.step, "val": val, "val_s": t0.elapsed().as_secs_f64()})
        )?;
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
                    std::fs::write(
                        d.join("xsent-best.json"),
                        serde_json::to_string_pretty(&serde_json::json!({"step": state.step, best_metric: score}))?,
                    )?;
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

    /// Checkpoint the current step ([`save_checkpoint`]).
    fn checkpoint(&self, params: &Params, opt: &AdamW, state: &State) -> Result<()> {
        save_checkpoint(&self.out, self.cfg.train.keep_last, params, opt, state)
    }
}

/// The validation score that decides "best" and its direction: `train.best_metric` (default:
/// the recipe's) and `train.best_mode`, checked against the direction known for the metric.
fn best_rule(cfg: &Config, recipe: &dyn Recipe) -> Result<(String, BestMode)> {
    let t = &cfg.train;
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
        Some(chosen) => Ok((metric, chosen)),
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
}

/// The state of a run that starts at step 0 on `n` examples of digest `digest`.
fn fresh_state(n: usize, digest: &str, trained_with: &std::collections::BTreeMap<String, String>) -> State {
    State {
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
        data_digest: Some(digest.to_string()),
        examples: Some(n),
        trained_with: Some(trained_with.clone()),
    }
}

/// Where a run stands before its first step: open, ended (to be completed), or ended with
/// `final/` in place (nothing to do).
enum End {
    Open,
    Ended(Outcome),
    NothingToDo(Outcome),
}

/// The mega-batch of the current micro-batch: its first micro-batch, its length, and its
/// examples (filled when longer than one micro-batch).
type Mega = (u64, usize, Vec<usize>);

/// One optimiser step's micro-batches, summed (their gradients aside).
struct StepSums {
    loss: f64,
    terms: Vec<(String, f64)>,
    sentences: usize,
    forward_s: f64,
    backward_s: f64,
}

/// The `metrics.jsonl` line of a step.
fn step_line(
    state: &State,
    n: usize,
    lr: f64,
    sums: &StepSums,
    grad_norm: f64,
    sps: f64,
    (step_s, opt_s): (f64, f64),
) -> serde_json::Value {
    let mut line = serde_json::json!({
        "step": state.step,
        "epoch": state.epoch as f64 + state.pos as f64 / n as f64,
        "lr": lr,
        "loss": sums.loss,
        "grad_norm": grad_norm,
        "sentences_per_s": sps,
        "step_s": step_s,
        "forward_s": sums.forward_s,
        "backward_s": sums.backward_s,
        "optimizer_s": opt_s,
        "elapsed_s": state.elapsed_s,
    });
    for (k, v) in &sums.terms {
        line[k.as_str()] = serde_json::json!(v);
    }
    line
}

/// Refuse, before the first step, a run whose mega-batches (over its `micro_batches`) would
/// grow larger than the `n` training examples: the mega-batch is a slice of one pass over the
/// data order, so it cannot hold more. The step loop walks the same mega-batches.
pub fn check_megabatches(recipe: &dyn Recipe, micro_batches: u64, batch_size: usize, n: usize) -> Result<()> {
    let (mut first, mut largest) = (0u64, 1usize);
    while first < micro_batches {
        let m = recipe.plan().megabatch_len(first);
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
        // Mega-batches keep their length until the next step of the anneal: jump there (one at
        // a time, a run of 9e18 steps took for ever before its first step).
        first = match recipe.plan() {
            StepPlan::MegaBatch { anneal_rate, max } if anneal_rate > 0 && m < max.max(1) => {
                let level_end = (m as u64).saturating_mul(anneal_rate);
                first.saturating_add(level_end.saturating_sub(first).div_ceil(m as u64).max(1).saturating_mul(m as u64))
            }
            // Every later mega-batch has this length.
            _ => break,
        };
    }
    Ok(())
}

/// A micro-batch's shards as the trainer runs them.
fn shards_of<'b>(plan: StepPlan, t: &super::config::TrainConfig, batch: &'b [usize]) -> Vec<&'b [usize]> {
    if plan.shards() {
        batch.chunks(t.shard_size.max(1)).collect()
    } else {
        vec![batch]
    }
}

/// The micro-batches of the step `sampler` draws after the next `later` steps, each cut into
/// its shards as [`Trainer::micro_batches`] cuts them (peeked at: nothing is drawn).
fn step_batches(recipe: &dyn Recipe, t: &super::config::TrainConfig, sampler: &Sampler, later: usize) -> StepBatches {
    let plan = recipe.plan();
    let first = later * t.grad_accum;
    (first..first + t.grad_accum)
        .map(|a| {
            let mut batch = sampler.peek(a * t.batch_size, t.batch_size);
            recipe.order_batch(&mut batch);
            shards_of(plan, t, &batch).into_iter().map(<[usize]>::to_vec).collect()
        })
        .collect()
}

/// How `State::best_of` names a metric and its mode (`sts_spearman/max`).
fn best_of(metric: &str, mode: BestMode) -> String {
    format!("{metric}/{}", if mode == BestMode::Max { "max" } else { "min" })
}
