//! Lightweight dual transformer (Mao et al. 2021, seed 001): the `[lightweight]` section.

use crate::model::kinds::vocab::SubwordModel;
use anyhow::{bail, ensure, Result};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

use super::defaults::lightweight as d;

/// The generative task (seed 001 Table 6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Generative {
    #[serde(rename = "none")]
    None,
    #[serde(rename = "mlm")]
    Mlm,
    #[serde(rename = "smlm")]
    Smlm,
    #[serde(rename = "xtr")]
    Xtr,
    #[serde(rename = "mlm+xtr", alias = "mlm-xtr")]
    MlmXtr,
    #[serde(rename = "ugt")]
    Ugt,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LightweightConfig {
    /// A tokenizer.json to use (e.g. from `xsent tokenizer train`); default: a shared unigram
    /// vocabulary learned from the training pairs (both sides). `<mask>` and `<pad>` are added
    /// when missing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokenizer: Option<PathBuf>,
    /// Pieces of the learned vocabulary (seed 001: 50k per language pair).
    #[serde(default = "d::vocab_size")]
    pub vocab_size: usize,
    #[serde(default = "d::subword_model")]
    pub subword_model: SubwordModel,
    /// Lowercase before learning and applying the vocabulary (NFKC always).
    #[serde(default)]
    pub lowercase: bool,
    #[serde(default = "d::layers")]
    pub layers: usize,
    #[serde(default = "d::hidden")]
    pub hidden: usize,
    #[serde(default = "d::heads")]
    pub heads: usize,
    /// Feed-forward (filter) size.
    #[serde(default = "d::ffn")]
    pub ffn: usize,
    /// Longest input in pieces (also the number of learned positions).
    #[serde(default = "d::max_length")]
    pub max_length: usize,
    /// Dropout of the hidden states and attention probabilities.
    #[serde(default = "d::dropout")]
    pub dropout: f64,
    /// `ugt`, `smlm`, `xtr`, `mlm`, `mlm+xtr` or `none`.
    #[serde(default = "d::generative")]
    pub generative: Generative,
    /// In-batch sentence alignment loss (Eq. 5).
    #[serde(default = "d::align")]
    pub align: bool,
    /// In-batch sentence similarity loss (Eq. 6).
    #[serde(default = "d::sim")]
    pub sim: bool,
    #[serde(default = "d::gen_weight")]
    pub gen_weight: f64,
    #[serde(default = "d::align_weight")]
    pub align_weight: f64,
    #[serde(default = "d::sim_weight")]
    pub sim_weight: f64,
    /// Fraction of tokens masked by `mlm` (at least one per sentence).
    #[serde(default = "d::mlm_prob")]
    pub mlm_prob: f64,
    /// Batch size of validation embedding (inference).
    #[serde(default = "d::embed_batch_size")]
    pub embed_batch_size: usize,
}

impl LightweightConfig {
    pub fn validate(&self) -> Result<()> {
        ensure!(self.layers >= 1, "lightweight.layers must be at least 1");
        ensure!(
            self.hidden >= 1 && self.heads >= 1,
            "lightweight.hidden ({}) and lightweight.heads ({}) must be at least 1",
            self.hidden,
            self.heads
        );
        ensure!(
            self.hidden.is_multiple_of(self.heads),
            "lightweight.hidden ({}) must be a multiple of lightweight.heads ({})",
            self.hidden,
            self.heads
        );
        ensure!(self.ffn >= 1, "lightweight.ffn must be at least 1");
        ensure!(self.max_length >= 2, "lightweight.max_length must be at least 2");
        crate::model::kinds::vocab::check_size("lightweight.vocab_size", self.vocab_size)?;
        ensure!((0.0..1.0).contains(&self.dropout), "lightweight.dropout must be in [0, 1), got {}", self.dropout);
        ensure!(
            self.mlm_prob > 0.0 && self.mlm_prob <= 1.0,
            "lightweight.mlm_prob must be in (0, 1], got {}",
            self.mlm_prob
        );
        ensure!(self.embed_batch_size >= 1, "lightweight.embed_batch_size must be at least 1");
        for (name, w) in
            [("gen_weight", self.gen_weight), ("align_weight", self.align_weight), ("sim_weight", self.sim_weight)]
        {
            ensure!(w.is_finite() && w >= 0.0, "lightweight.{name} must be a finite number >= 0, got {w}");
        }
        if self.generative == Generative::None && !self.align && !self.sim {
            bail!("lightweight: no training task: set generative (ugt, smlm, xtr, mlm, mlm+xtr) or align/sim");
        }
        Ok(())
    }
}
