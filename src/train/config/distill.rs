//! Multilingual knowledge distillation (Reimers & Gurevych 2020, seed 003): the `[distill]` section.

use serde::{Deserialize, Serialize};

use super::defaults::distill as d;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DistillConfig {
    /// The frozen teacher: model directory or hub id. Not needed (and not loaded) when
    /// `targets = "student"` and `projection = "none"`: nothing then uses it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub teacher: String,
    #[serde(default)]
    pub teacher_prefix: String,
    /// L2-normalise the teacher's embeddings (the targets). Default: as the teacher's own
    /// `modules.json` says (a Normalize module or not, as sentence-transformers runs it); a
    /// model without `modules.json` is normalised, as `xsent embed` does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub teacher_normalize: Option<bool>,
    /// The trainable student: model directory or hub id.
    pub student: String,
    #[serde(default)]
    pub student_prefix: String,
    /// Keep only the student's first N layers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub student_layers: Option<usize>,
    /// Truncate inputs (teacher and student) to this many tokens.
    #[serde(default = "d::max_length")]
    pub max_length: usize,
    /// Dense projection after the student's pooling: `lstsq` (closed-form affine init),
    /// `procrustes` (closed-form orthogonal init, keeps the student's cosines), `identity`,
    /// `random`, or `none` (only when the dimensions agree).
    #[serde(default = "d::projection")]
    pub projection: Projection,
    /// Training examples used for the closed-form fit: source sentences (`projection_fit =
    /// "source"`) or pairs (`"pairs"`).
    #[serde(default = "d::projection_fit_size")]
    pub projection_fit_size: usize,
    /// What the closed-form fit predicts the teacher's vector of a source sentence from:
    /// `source`, the student's vector of that sentence (the loss's first term); `pairs`, the
    /// student's vectors of both sides of training pairs (both terms: the projection that
    /// minimises the recipe's loss with the encoder frozen).
    #[serde(default)]
    pub projection_fit: FitOn,
    /// L2-normalise the student's output. Default: as the teacher is (`teacher_normalize`),
    /// so that the student's vectors can match their targets; normalised without a teacher.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub normalize: Option<bool>,
    /// What the student learns to reproduce for each source sentence: `teacher` (the teacher's
    /// embedding, seed 003 §2) or `student` (the student's own embedding before training,
    /// projection included, computed once and cached: self-distillation, which seed 003 §2
    /// allows; after a fitted projection these are the student's English mapped into the
    /// teacher's space, so the English term starts at zero and training aligns the translations).
    #[serde(default)]
    pub targets: Targets,
    /// Override the student's dropout probability (hidden and attention).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dropout: Option<f64>,
    /// Batch size for the teacher's embeddings and validation (inference).
    #[serde(default = "d::embed_batch_size")]
    pub embed_batch_size: usize,
    /// Fit the projection on these sources (`[[distill.projection_fit_sources]]`, read like
    /// `[[data.sources]]`) instead of the training pairs: split by `seed` and `data.val_size` as
    /// training data would be (not split with `[[data.val_sources]]`), the fit drawn from the
    /// training part less the run's validation sentences. Empty: the training pairs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub projection_fit_sources: Vec<crate::data::bitext::Source>,
    /// Weight of the source term: loss = `source_weight` · MSE(M̂(s), M(s)) + MSE(M̂(t), M(s)).
    /// Seed 003 §2 weighs the two equally (1). A larger weight holds the source language (English)
    /// closer to its targets while the translations move towards them.
    #[serde(default = "d::source_weight")]
    pub source_weight: f64,
}

impl DistillConfig {
    /// Whether training needs the teacher: for the targets, or for the projection's fit or
    /// dimension.
    pub fn uses_teacher(&self) -> bool {
        self.targets == Targets::Teacher || self.projection != Projection::None
    }

    /// Checks that need no files.
    pub fn validate(&self) -> anyhow::Result<()> {
        if let Some(p) = self.dropout {
            anyhow::ensure!((0.0..1.0).contains(&p), "distill.dropout must be in [0, 1), got {p}");
        }
        anyhow::ensure!(self.embed_batch_size >= 1, "distill.embed_batch_size must be at least 1");
        anyhow::ensure!(
            self.source_weight.is_finite() && self.source_weight >= 0.0,
            "distill.source_weight must be a finite number >= 0 (1 weighs the two terms equally, as seed 003), got {}",
            self.source_weight
        );
        if self.uses_teacher() {
            anyhow::ensure!(
                !self.teacher.is_empty(),
                "distill.teacher is missing: name the teacher's model directory or hub id (only targets = \"student\" with projection = \"none\" trains without one)"
            );
        }
        anyhow::ensure!(
            self.projection_fit_sources.is_empty() || matches!(self.projection, Projection::Lstsq | Projection::Procrustes),
            "distill.projection_fit_sources is only read by a fitted projection (projection = \"lstsq\" or \"procrustes\"); remove it or change distill.projection"
        );
        if matches!(self.projection, Projection::Lstsq | Projection::Procrustes) {
            anyhow::ensure!(
                self.projection_fit_size >= 2,
                "distill.projection_fit_size must be at least 2 for projection = \"{}\" (3000 is the default), got {}",
                if self.projection == Projection::Lstsq { "lstsq" } else { "procrustes" },
                self.projection_fit_size
            );
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Projection {
    None,
    Identity,
    Random,
    Lstsq,
    Procrustes,
}

/// The vectors the student learns to reproduce (`distill.targets`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Targets {
    #[default]
    Teacher,
    Student,
}

/// The examples a closed-form projection is fitted on (`distill.projection_fit`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FitOn {
    #[default]
    Source,
    Pairs,
}
