//! Paraphrastic sentence embeddings by averaging (Wieting et al. 2019, seed 002): the `[sp]` section.

use crate::model::kinds::averaging::Units;
use crate::model::kinds::vocab::SubwordModel;
use anyhow::{bail, ensure, Result};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

use super::defaults::sp as d;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SpConfig {
    /// `sp` (SentencePiece pieces), `word` or `trigram` (seed 002 §2).
    #[serde(default = "d::units")]
    pub units: Units,
    /// A tokenizer.json to use (sp or word units); default: learned from the training pairs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokenizer: Option<PathBuf>,
    /// `unigram` or `bpe` (sp units, when the vocabulary is learned).
    #[serde(default = "d::subword_model")]
    pub subword_model: SubwordModel,
    /// Vocabulary size: pieces (sp, default 20,000) or most frequent types kept (word and
    /// trigram, default 200,000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vocab_size: Option<usize>,
    /// Lowercase inputs (NFKC always).
    #[serde(default)]
    pub lowercase: bool,
    /// Embedding dimension.
    #[serde(default = "d::dim")]
    pub dim: usize,
    /// Embeddings start from N(0, init_std²).
    #[serde(default = "d::init_std")]
    pub init_std: f64,
    /// δ of the margin loss.
    #[serde(default = "d::margin")]
    pub margin: f64,
    /// Largest mega-batch, in mini-batches (M_max).
    #[serde(default = "d::megabatch_max")]
    pub megabatch_max: usize,
    /// M grows by one every this many mini-batches (0: M_max from the start).
    #[serde(default = "d::anneal_rate")]
    pub anneal_rate: u64,
    /// Also the hardest source-side negative for each target.
    #[serde(default)]
    pub symmetric: bool,
    /// Dropout rate in training.
    #[serde(default = "d::dropout")]
    pub dropout: f64,
    /// What dropout drops: `element` (each value of each looked-up embedding, the kept ones
    /// scaled by 1/(1 − p): standard dropout, as seed 002 and its authors' code) or `unit` (each
    /// unit of a sentence whole, the mean taken over the units kept).
    #[serde(default = "d::dropout_kind")]
    pub dropout_kind: DropoutKind,
    /// No training: write the randomly initialised encoder (seed 002 Table 2's random rows).
    #[serde(default)]
    pub random: bool,
}

/// What `sp.dropout` drops in training.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DropoutKind {
    /// Each value of each looked-up embedding (standard dropout, kept values scaled by 1/(1 − p)).
    Element,
    /// Each unit of a sentence whole; when every unit of a sentence is drawn, none is dropped.
    Unit,
}

impl SpConfig {
    pub fn vocab_size(&self) -> usize {
        self.vocab_size.unwrap_or(match self.units {
            Units::Sp => 20_000,
            Units::Word | Units::Trigram => 200_000,
        })
    }

    pub fn validate(&self) -> Result<()> {
        ensure!(self.dim > 0, "sp.dim must be at least 1");
        crate::model::kinds::vocab::check_size("sp.vocab_size", self.vocab_size())?;
        ensure!(
            self.margin.is_finite() && self.margin >= 0.0,
            "sp.margin must be a finite number >= 0, got {}",
            self.margin
        );
        ensure!(self.megabatch_max >= 1, "sp.megabatch_max must be at least 1");
        ensure!((0.0..1.0).contains(&self.dropout), "sp.dropout must be in [0, 1), got {}", self.dropout);
        ensure!(
            self.init_std > 0.0 && (self.init_std as f32).is_finite() && self.init_std as f32 > 0.0,
            "sp.init_std must be a positive number within f32 range (e.g. 0.1), got {}",
            self.init_std
        );
        let largest = max_init_std(self.dim);
        ensure!(
            self.init_std <= largest,
            "sp.init_std = {:?} is too large for sp.dim = {}: a sentence vector's squared length (about dim × init_std²) \
             would near f32's limit, and overflowing it gives cosines of 0 and no gradient, so nothing trains; \
             keep init_std at most {largest:.1e} (the paper's random encoders use 1)",
            self.init_std,
            self.dim
        );
        if self.tokenizer.is_some() && self.units == Units::Trigram {
            bail!("sp.tokenizer is for sp or word units; trigram units learn their trigrams from the data");
        }
        Ok(())
    }
}

/// The largest `sp.init_std` for `dim` dimensions: a sentence vector's squared length is about
/// `dim × init_std²`, and it keeps a factor of 100 below f32's largest value.
pub fn max_init_std(dim: usize) -> f64 {
    (f32::MAX as f64 / (100.0 * dim.max(1) as f64)).sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A table whose vectors' lengths overflow f32 trains nothing (every cosine 0): refused, with
    /// the largest value that is accepted; the paper's N(0, 1) is far within it.
    #[test]
    fn an_init_std_that_would_overflow_the_norms_is_refused() {
        let sp = |set: &str| -> SpConfig { toml::from_str(set).unwrap() };
        sp("").validate().unwrap();
        sp("init_std = 1e15").validate().unwrap();
        let e = sp("init_std = 1e30").validate().unwrap_err().to_string();
        assert!(e.contains("sp.init_std = 1e30 is too large for sp.dim = 300") && e.contains("at most 1.1e17"), "{e}");
        assert!(sp(&format!("init_std = {}", max_init_std(300) * 1.01)).validate().is_err());
        assert!(sp(&format!("init_std = {}", max_init_std(300) * 0.99)).validate().is_ok());
    }
}
