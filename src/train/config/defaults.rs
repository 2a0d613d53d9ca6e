//! Every default of a training config, in one place, by section and key (a key not listed
//! here defaults to its type's empty value: `false`, `""`, none, an empty list). The
//! `[train]`, `[optim]` and `[data]` sections are whole structs; each recipe's section lists
//! the keys that have a default (its other keys must be given). A data source's own defaults
//! (`splits`, `pivot` of `kind = "xnli"`) belong to the data layer:
//! [`crate::data::bitext::default_splits`] and [`crate::data::bitext::default_pivot`].

use super::{DataConfig, OptimConfig, Schedule, TrainConfig};

/// `seed`.
pub fn seed() -> u64 {
    42
}

impl Default for TrainConfig {
    fn default() -> Self {
        Self {
            max_steps: 0,
            epochs: 1,
            batch_size: 32,
            grad_accum: 1,
            shard_size: 8,
            ahead: true,
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
            precision: Default::default(),
        }
    }
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

/// `[distill]`.
pub mod distill {
    use crate::train::config::distill::Projection;

    pub fn max_length() -> usize {
        128
    }
    pub fn projection() -> Projection {
        Projection::Lstsq
    }
    pub fn projection_fit_size() -> usize {
        3000
    }
    pub fn embed_batch_size() -> usize {
        64
    }
    pub fn source_weight() -> f64 {
        1.0
    }
}

/// `[dueam]`.
pub mod dueam {
    use crate::train::config::dueam::{LossTerms, SolverKind};

    pub fn max_length() -> usize {
        128
    }
    pub fn lambda() -> f64 {
        0.003
    }
    pub fn loss() -> LossTerms {
        LossTerms::Both
    }
    pub fn wmd_normalize() -> bool {
        true
    }
    pub fn wmd_skip_special() -> bool {
        true
    }
    pub fn wmd_solver() -> SolverKind {
        SolverKind::Exact
    }
    pub fn sinkhorn_eps() -> f64 {
        3e-3
    }
    pub fn sinkhorn_tol() -> f64 {
        1e-4
    }
    pub fn sinkhorn_max_iter() -> usize {
        100_000
    }
    pub fn splits() -> Vec<String> {
        vec!["dev".into(), "test".into()]
    }
    pub fn cross_lingual() -> bool {
        true
    }
    pub fn unsup_pairs() -> usize {
        100_000
    }
    pub fn embed_batch_size() -> usize {
        64
    }
}

/// `[lightweight]`.
pub mod lightweight {
    use crate::model::kinds::vocab::SubwordModel;
    use crate::train::config::lightweight::Generative;

    pub fn vocab_size() -> usize {
        16_000
    }
    pub fn subword_model() -> SubwordModel {
        SubwordModel::Unigram
    }
    pub fn layers() -> usize {
        2
    }
    pub fn hidden() -> usize {
        512
    }
    pub fn heads() -> usize {
        8
    }
    pub fn ffn() -> usize {
        1024
    }
    pub fn max_length() -> usize {
        64
    }
    pub fn dropout() -> f64 {
        0.1
    }
    pub fn generative() -> Generative {
        Generative::Ugt
    }
    pub fn align() -> bool {
        true
    }
    pub fn sim() -> bool {
        true
    }
    pub fn gen_weight() -> f64 {
        1.0
    }
    pub fn align_weight() -> f64 {
        2.0
    }
    pub fn sim_weight() -> f64 {
        2.0
    }
    pub fn mlm_prob() -> f64 {
        0.15
    }
    pub fn embed_batch_size() -> usize {
        128
    }
}

/// `[sp]`.
pub mod sp {
    use crate::model::kinds::averaging::Units;
    use crate::model::kinds::vocab::SubwordModel;
    use crate::train::config::sp::DropoutKind;

    pub fn units() -> Units {
        Units::Sp
    }
    pub fn subword_model() -> SubwordModel {
        SubwordModel::Unigram
    }
    pub fn dim() -> usize {
        300
    }
    pub fn init_std() -> f64 {
        1.0
    }
    pub fn margin() -> f64 {
        0.4
    }
    pub fn megabatch_max() -> usize {
        120
    }
    pub fn anneal_rate() -> u64 {
        150
    }
    pub fn dropout() -> f64 {
        0.3
    }
    pub fn dropout_kind() -> DropoutKind {
        DropoutKind::Element
    }
}

/// `[disentangle]`.
pub mod disentangle {
    pub fn max_length() -> usize {
        128
    }
    pub fn normalize_input() -> bool {
        true
    }
    pub fn meaning_loss() -> bool {
        true
    }
    pub fn meaning_negatives() -> bool {
        true
    }
    pub fn language_loss() -> bool {
        true
    }
    pub fn reconstruction_weight() -> f64 {
        1.0
    }
    pub fn meaning_lr_scale() -> f64 {
        1.0
    }
    pub fn embed_batch_size() -> usize {
        64
    }
}
