//! DuEAM (seed 000): the `[dueam]` section.

use crate::data::bitext::Source;
use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

use super::defaults::dueam as d;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DueamConfig {
    /// The frozen anchor (token vectors for the WMD): model directory or hub id.
    pub anchor: String,
    #[serde(default)]
    pub anchor_prefix: String,
    /// The trainable learner (mean pooling): model directory or hub id.
    pub learner: String,
    #[serde(default)]
    pub learner_prefix: String,
    /// Keep only the learner's first N layers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub learner_layers: Option<usize>,
    /// L2-normalise the learner's mean-pooled vectors before the loss (and in the saved model).
    /// Default false, as seed 000 (unnormalised s′, t′); with it, ‖s′ − t′‖ = √(2 − 2 cos), so
    /// L_A shapes the angles that cosine retrieval uses.
    #[serde(default)]
    pub learner_normalize: bool,
    /// Override the learner's dropout probability (hidden and attention).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dropout: Option<f64>,
    /// Truncate inputs (anchor and learner) to this many tokens.
    #[serde(default = "d::max_length")]
    pub max_length: usize,
    /// λ of `L = L_A − λ·L_B`.
    #[serde(default = "d::lambda")]
    pub lambda: f64,
    /// `both` (L_A − λ·L_B), `wmd` (L_A only) or `cos` (−L_B only).
    #[serde(default = "d::loss")]
    pub loss: LossTerms,
    /// Anchor layer whose token vectors go into the WMD (default: the last).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wmd_layer: Option<usize>,
    /// L2-normalise each anchor token vector before the WMD.
    #[serde(default = "d::wmd_normalize")]
    pub wmd_normalize: bool,
    /// Leave the tokenizer's special tokens (`<s>`, `</s>`, `[CLS]`, …) out of the WMD.
    #[serde(default = "d::wmd_skip_special")]
    pub wmd_skip_special: bool,
    /// `exact` (network simplex) or `sinkhorn` (entropic, `sinkhorn_*` below).
    #[serde(default = "d::wmd_solver")]
    pub wmd_solver: SolverKind,
    /// Sinkhorn's entropic regularisation as a fraction of the pair's largest ground cost (the
    /// largest token distance), not an absolute value: the solver uses `eps · max_ij ‖a_i − b_j‖`,
    /// so it does not depend on the scale of the token vectors. Default 3e-3 (about 0.1 % above
    /// the exact WMD).
    #[serde(default = "d::sinkhorn_eps")]
    pub sinkhorn_eps: f64,
    /// Sinkhorn stops once the plan's row sums are this close to uniform (L1).
    #[serde(default = "d::sinkhorn_tol")]
    pub sinkhorn_tol: f64,
    /// A pair Sinkhorn has not converged for after this many iterations gets its exact WMD
    /// instead (said once on stderr).
    #[serde(default = "d::sinkhorn_max_iter")]
    pub sinkhorn_max_iter: usize,
    /// Training pairs: `weak` (XNLI premise–hypothesis pairs within and across languages) or
    /// `unsup` (random pairs of XNLI sentences).
    pub pairs: PairKind,
    /// Directory with XNLI's `{split}-{lang}.tsv`.
    pub xnli_dir: PathBuf,
    #[serde(default = "d::splits")]
    pub splits: Vec<String>,
    pub langs: Vec<String>,
    /// `weak`: add the cross-lingual premise-in-A / hypothesis-in-B pairs.
    #[serde(default = "d::cross_lingual")]
    pub cross_lingual: bool,
    /// `unsup`: how many random pairs.
    #[serde(default = "d::unsup_pairs")]
    pub unsup_pairs: usize,
    /// Batch size of the anchor's and of validation's inference.
    #[serde(default = "d::embed_batch_size")]
    pub embed_batch_size: usize,
    /// Held-out parallel sentences for validation (`kind = "aligned"` or `"tsv"`; each source is
    /// scored on its own, named `{src_lang}-{tgt_lang}`).
    #[serde(default)]
    pub val_sources: Vec<Source>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LossTerms {
    /// `L_A − λ·L_B`.
    Both,
    /// `L_A` only.
    Wmd,
    /// `−L_B` only.
    Cos,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SolverKind {
    Exact,
    Sinkhorn,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PairKind {
    Weak,
    Unsup,
}

impl DueamConfig {
    /// Checks that need no files.
    pub fn validate(&self) -> Result<()> {
        if !(self.lambda.is_finite() && self.lambda >= 0.0) {
            bail!("dueam.lambda must be a finite number >= 0, got {}", self.lambda);
        }
        if let Some(p) = self.dropout {
            if !(0.0..1.0).contains(&p) {
                bail!("dueam.dropout must be in [0, 1), got {p}");
            }
        }
        if self.langs.is_empty() {
            bail!("dueam.langs is empty: list the XNLI languages, e.g. [\"en\", \"de\"]");
        }
        if self.val_sources.is_empty() {
            bail!("dueam.val_sources is empty: add held-out parallel sentences ([[dueam.val_sources]] kind = \"aligned\", src, tgt)");
        }
        for (i, s) in self.val_sources.iter().enumerate() {
            if matches!(s, Source::Xnli { .. }) {
                bail!("dueam.val_sources[{i}]: kind = \"xnli\" would validate on the training sentences; use held-out parallel text (\"aligned\" or \"tsv\")");
            }
        }
        if self.pairs == PairKind::Unsup && self.unsup_pairs == 0 {
            bail!("dueam.unsup_pairs must be at least 1");
        }
        if self.wmd_solver == SolverKind::Sinkhorn {
            if !(self.sinkhorn_eps > 0.0 && self.sinkhorn_eps.is_finite()) {
                bail!("dueam.sinkhorn_eps must be > 0, got {}", self.sinkhorn_eps);
            }
            if !(self.sinkhorn_tol > 0.0 && self.sinkhorn_tol.is_finite()) {
                bail!("dueam.sinkhorn_tol must be > 0, got {}", self.sinkhorn_tol);
            }
            if self.sinkhorn_max_iter == 0 {
                bail!("dueam.sinkhorn_max_iter must be at least 1");
            }
        }
        Ok(())
    }
}
