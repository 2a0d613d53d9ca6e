//! Meaning / language autoencoder (Tiyajamorn et al. 2021, seed 004): the `[disentangle]` section.

use crate::model::Pooling;
use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};

use super::defaults::disentangle as d;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DisentangleConfig {
    /// The frozen base encoder: model directory or hub id.
    pub base: String,
    /// Text prepended to every input of the base encoder (e5 models want "query: ").
    #[serde(default)]
    pub prefix: String,
    /// The base encoder's pooling (default: the model's own, else mean). The paper used cls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pooling: Option<Pooling>,
    /// Truncate inputs to this many tokens.
    #[serde(default = "d::max_length")]
    pub max_length: usize,
    /// L2-normalise the base embeddings before the heads.
    #[serde(default = "d::normalize_input")]
    pub normalize_input: bool,
    /// Train with L_M (false: the "w/o meaning loss" ablation).
    #[serde(default = "d::meaning_loss")]
    pub meaning_loss: bool,
    /// Keep L_M's two negative terms `max(0, cos(ŝ_M, ŝ′_M)) + max(0, cos(t̂_M, t̂′_M))` (false:
    /// L_M is the translation term `1 − cos(ŝ_M, t̂_M)` alone; a diagnostic ablation, not one of
    /// the paper's).
    #[serde(default = "d::meaning_negatives")]
    pub meaning_negatives: bool,
    /// Train with L_L (false: the "w/o language loss" ablation).
    #[serde(default = "d::language_loss")]
    pub language_loss: bool,
    /// Weight of L_R in the total loss (the paper: 1). L_R is a mean over the d dimensions, so
    /// its size beside the cosine terms depends on the length of the base embeddings: ‖e‖²/d,
    /// 1/d for unit-length inputs.
    #[serde(default = "d::reconstruction_weight")]
    pub reconstruction_weight: f64,
    /// MLP_M's learning rate as a multiple of `optim.lr` (default 1: one rate for all heads, as
    /// in the paper). MLP_M starting as the identity is already a good meaning map, while the
    /// language head starts random and needs the full rate to learn at all.
    #[serde(default = "d::meaning_lr_scale")]
    pub meaning_lr_scale: f64,
    /// Batch size of the base encoder (inference).
    #[serde(default = "d::embed_batch_size")]
    pub embed_batch_size: usize,
    /// Initial MLP_M: `random` (PyTorch's nn.Linear initialisation, as the paper's code would
    /// have it), `identity` (the meaning embedding starts as the base embedding itself) or
    /// `centered` (identity weight, bias −μ with μ the mean base embedding of the training
    /// sentences: the meaning embedding starts as the centred base embedding).
    #[serde(default)]
    pub meaning_init: MeaningInit,
}

impl DisentangleConfig {
    /// Values that would wreck training silently (checked when the config is loaded).
    pub fn validate(&self) -> Result<()> {
        if !(self.reconstruction_weight.is_finite() && self.reconstruction_weight >= 0.0) {
            bail!(
                "disentangle.reconstruction_weight = {} must be a finite number ≥ 0 (the paper's weight is 1)",
                self.reconstruction_weight
            );
        }
        if !(self.meaning_lr_scale.is_finite() && self.meaning_lr_scale >= 0.0) {
            bail!("disentangle.meaning_lr_scale = {} must be a finite number ≥ 0 (1: MLP_M trains at optim.lr like the other heads; 0 freezes it)", self.meaning_lr_scale);
        }
        if !self.meaning_loss && !self.language_loss && self.reconstruction_weight == 0.0 {
            bail!(
                "disentangle: no training task: meaning_loss and language_loss are false and reconstruction_weight is 0, \
                 so every step's loss would be 0 and the heads would stay as drawn; set meaning_loss or language_loss to true, \
                 or reconstruction_weight > 0 (the paper's is 1)"
            );
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MeaningInit {
    #[default]
    Random,
    Identity,
    Centered,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With no loss term left, every step's loss and gradient are 0: refused, not trained.
    #[test]
    fn a_config_with_no_loss_term_is_refused() {
        let cfg = |rest: &str| -> DisentangleConfig { toml::from_str(&format!("base = \"m\"\n{rest}")).unwrap() };
        let none = "meaning_loss = false\nlanguage_loss = false\nreconstruction_weight = 0.0";
        let e = cfg(none).validate().unwrap_err().to_string();
        assert!(e.contains("no training task"), "{e}");
        for one in [
            "meaning_loss = false\nlanguage_loss = false",
            "meaning_loss = false\nreconstruction_weight = 0.0",
            "language_loss = false\nreconstruction_weight = 0.0",
        ] {
            cfg(one).validate().unwrap();
        }
    }
}
