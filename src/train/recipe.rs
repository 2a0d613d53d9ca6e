//! The recipe contract: what a training recipe gives the trainer (a loss per micro-batch, a
//! validation, the model to save) and how its steps are run ([`StepPlan`]).

use super::ahead::{AheadJob, Prepared, StepBatches};
use super::config::BestMode;
use crate::model::encoder::TrainContext;
use crate::model::weights::Params;
use crate::model::Embedder;
use anyhow::{bail, Result};
use candle_core::Tensor;
use std::path::Path;

/// What a recipe returns for one micro-batch.
pub struct StepLoss {
    /// The scalar to minimise (differentiable).
    pub total: Tensor,
    /// Named loss terms for the metrics (e.g. `mse_src`).
    pub terms: Vec<(String, f64)>,
    /// Named loss terms as scalar tensors, read (on a GPU, waited for) only once the backward
    /// is queued; they come before `terms` in the metrics.
    pub later: Vec<(String, Tensor)>,
    /// Sentences encoded (for sentences/s).
    pub sentences: usize,
}

/// A training recipe: a loss over examples `0..num_examples()` and a validation.
pub trait Recipe: Send + Sync {
    fn num_examples(&self) -> usize;
    /// A digest of the examples and the validation data as the recipe holds them
    /// ([`super::data_digest`]); each checkpoint keeps it, and a resume on other data is refused.
    fn data_digest(&self) -> &str;
    /// The trainable parameters (stable names: they key checkpoints).
    fn params(&self) -> Params;
    /// A parameter's learning rate as a multiple of the schedule's (default 1), by name.
    fn lr_scale(&self, _param: &str) -> f64 {
        1.0
    }
    /// Loss of one micro-batch of example indices; randomness (dropout, sampling) from `rng`,
    /// which also records the encoder's row-sparse token lookups when the trainer asks for them.
    /// With [`StepPlan::Sharded`] it is called on shards of the batch, from several threads at
    /// once.
    fn loss(&self, batch: &[usize], rng: &mut TrainContext) -> Result<StepLoss>;
    /// How the trainer runs a micro-batch of this recipe. Default: [`StepPlan::Whole`].
    fn plan(&self) -> StepPlan {
        StepPlan::Whole
    }
    /// Reorder a batch before it is cut into shards (e.g. by length, to pad less).
    fn order_batch(&self, _batch: &mut [usize]) {}
    /// Loss of `batch` (a micro-batch, or a shard of one) given the example indices of its whole
    /// mega-batch (`batch`'s micro-batch included, in sampling order), e.g. to pick negatives
    /// there. The mega-batch comes from the seeded data order, so nothing about it lives in the
    /// recipe's state. Default: [`loss`](Recipe::loss).
    fn loss_in_megabatch(&self, batch: &[usize], _mega: &[usize], rng: &mut TrainContext) -> Result<StepLoss> {
        self.loss(batch, rng)
    }
    /// For a [`StepPlan::Coupled`] recipe: the separable part of the loss of a shard (a
    /// mean over its examples) and its examples' vectors `[shard, d]` (both differentiable).
    /// The trainer weights each shard by its share of the batch's examples, so a term that is a
    /// mean over something else (e.g. lightweight's token-level `mlm`, a mean over masked
    /// tokens, whose count varies by row) is weighted per shard, not over the whole batch.
    fn shard_forward(&self, _shard: &[usize], _rng: &mut TrainContext) -> Result<(StepLoss, Tensor)> {
        bail!("this recipe does not split its loss")
    }
    /// For a [`StepPlan::Coupled`] recipe: the coupled part of the loss of `batch` given
    /// its examples' vectors `[batch, d]` in batch order. It must be a function of the vectors
    /// alone: only their gradient is taken from its backward, so a parameter used here (a
    /// learned temperature, say) would get no update.
    fn coupled_loss(&self, _batch: &[usize], _vectors: &Tensor) -> Result<StepLoss> {
        bail!("this recipe does not split its loss")
    }
    /// Called by the trainer before each optimiser step's first forward, after the previous
    /// step's update: where a recipe makes its encoder's copy for `train.precision`
    /// ([`super::precision::Compute::refresh`]). Default: nothing.
    fn begin_step(&mut self) -> Result<()> {
        Ok(())
    }
    /// Host work for the next optimiser step, to run on a background thread while this one runs
    /// (`train.ahead`): `now` and `next` are this step's and the next step's micro-batches as
    /// the trainer will run them. What the job needs of the device (a frozen model's forward)
    /// runs here, on the trainer's thread (candle's CUDA device queues work on the calling
    /// thread's stream); only host work goes into the job. Its result goes to
    /// [`Recipe::take_ahead`] before the next step, and its error is that step's. What it
    /// prepares must be what the step would compute itself, to the bit. Default: none.
    fn ahead(&self, _now: &StepBatches, _next: &StepBatches) -> Option<AheadJob> {
        None
    }
    /// Receive what [`Recipe::ahead`]'s job prepared, before the step it was for.
    fn take_ahead(&mut self, _prepared: Prepared) -> Result<()> {
        Ok(())
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

/// How the trainer runs the micro-batches of a recipe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepPlan {
    /// One forward and backward over the whole micro-batch.
    Whole,
    /// The loss is a mean over examples, so the batch's loss is the size-weighted sum of its
    /// shards' losses: shards of `train.shard_size` run forward and backward on separate cores.
    Sharded,
    /// The loss couples the examples of a batch only through one vector per example (e.g.
    /// in-batch contrastive losses over sentence vectors). The trainer then runs it in two
    /// stages so that shards still go forward and backward on separate cores (the gradient
    /// cache of Gao et al. 2021): [`Recipe::shard_forward`] on each shard, then
    /// [`Recipe::coupled_loss`] on the shards' vectors concatenated (a leaf copy), whose
    /// gradient with respect to each vector is backpropagated into its shard's graph, together
    /// with the shard's separable loss, on the shard's core. The gradient is that of one
    /// backward pass over the whole batch.
    Coupled,
    /// Mega-batching (Wieting & Gimpel 2018): consecutive micro-batches form a mega-batch, whose
    /// examples [`Recipe::loss_in_megabatch`] sees; each micro-batch runs whole. The mega-batch
    /// starting at micro-batch `first` holds [`StepPlan::megabatch_len`] micro-batches:
    /// `1 + first / anneal_rate`, at most `max` (`max` when `anneal_rate` is 0).
    MegaBatch { anneal_rate: u64, max: usize },
}

impl StepPlan {
    /// Whether a micro-batch is cut into shards of `train.shard_size`.
    pub fn shards(&self) -> bool {
        matches!(self, StepPlan::Sharded | StepPlan::Coupled)
    }

    /// The number of consecutive micro-batches that form the mega-batch starting at micro-batch
    /// `first` (micro-batches are counted over the run from 0: step × `grad_accum` + index
    /// within the step). A function of `first` alone: on resume the trainer recomputes the
    /// mega-batches from micro-batch 0. 1 unless [`StepPlan::MegaBatch`]: every micro-batch is
    /// its own mega-batch.
    pub fn megabatch_len(&self, first: u64) -> usize {
        match *self {
            StepPlan::MegaBatch { anneal_rate: 0, max } => max.max(1),
            StepPlan::MegaBatch { anneal_rate, max } => (1 + first / anneal_rate).min(max.max(1) as u64) as usize,
            _ => 1,
        }
    }
}
