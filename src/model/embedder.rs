//! [`Embedder`]: text in, sentence vectors out. `xsent embed`, `eval` and `mine` work with this
//! trait, so every kind of model directory xsent can load (transformer encoders, averaging
//! models, heads over a frozen encoder) serves them alike.

use super::sentence::{LoadOptions, SentenceEncoder};
use anyhow::{bail, Context, Result};
use std::path::Path;

/// Sentence vectors of a window of texts, in input order.
#[derive(Debug, Clone, Default)]
pub struct Embedded {
    pub rows: Vec<Vec<f32>>,
    /// Per input: it was longer than the model takes and was cut.
    pub truncated: Vec<bool>,
}

/// Anything that embeds text.
pub trait Embedder: Send + Sync {
    /// Dimension of the vectors.
    fn dim(&self) -> usize;
    /// Embed texts (inference), in input order, in batches of `batch_size`.
    fn embed_checked(&self, texts: &[&str], batch_size: usize) -> Result<Embedded>;
    /// Text prepended to every input (recorded in evaluation reports).
    fn prefix(&self) -> &str {
        ""
    }
    /// Longest input in tokens, when inputs are cut.
    fn max_length(&self) -> Option<usize> {
        None
    }
}

impl dyn Embedder + '_ {
    /// Embed texts (inference), in input order; a vector that is not finite is an error
    /// ([`ensure_finite`]).
    pub fn embed<S: AsRef<str>>(&self, texts: &[S], batch_size: usize) -> Result<Vec<Vec<f32>>> {
        let texts: Vec<&str> = texts.iter().map(AsRef::as_ref).collect();
        let rows = self.embed_checked(&texts, batch_size)?.rows;
        ensure_finite(&rows, &texts)?;
        Ok(rows)
    }
}

/// A NaN or infinite value in a sentence vector is an error naming the text: scores computed
/// from such vectors (cosines, correlations, nearest neighbours) would be meaningless numbers.
pub fn ensure_finite(rows: &[Vec<f32>], texts: &[&str]) -> Result<()> {
    if let Some(i) = rows.iter().position(|r| r.iter().any(|x| !x.is_finite())) {
        let text = texts.get(i).copied().unwrap_or_default();
        let shown: String = text.chars().take(60).collect();
        bail!(
            "the model gave a vector with NaN or infinite values for text {} of {} ({:?}{}): its weights are broken \
             (e.g. NaN after a diverged training run) or its activations overflow; no score is computed from it",
            i + 1,
            rows.len(),
            shown,
            if shown.len() < text.len() { "…" } else { "" }
        );
    }
    Ok(())
}

impl Embedder for SentenceEncoder {
    fn dim(&self) -> usize {
        SentenceEncoder::dim(self)
    }

    fn embed_checked(&self, texts: &[&str], batch_size: usize) -> Result<Embedded> {
        let encoded = self.tokenize(texts)?;
        let truncated = encoded.iter().map(|e| e.truncated).collect();
        Ok(Embedded { rows: self.embed_encoded(&encoded, batch_size)?, truncated })
    }

    fn prefix(&self) -> &str {
        &self.prefix
    }

    fn max_length(&self) -> Option<usize> {
        Some(self.max_length)
    }
}

/// What `xsent.json` says about a model directory xsent wrote.
#[derive(Debug, Clone, Default, serde::Deserialize)]
struct Kind {
    #[serde(default)]
    kind: Option<String>,
}

/// The `kind` recorded in DIR/xsent.json, if `spec` is a local directory that has one.
pub fn saved_kind(spec: &str) -> Result<Option<String>> {
    let path = Path::new(spec).join("xsent.json");
    if !path.is_file() {
        return Ok(None);
    }
    let text = std::fs::read_to_string(&path).with_context(|| format!("cannot read {}", path.display()))?;
    let k: Kind = serde_json::from_str(&text).with_context(|| format!("invalid {}", path.display()))?;
    Ok(k.kind)
}

/// Load any model xsent can embed with: a directory or hub id of a BERT/XLM-R-family encoder,
/// or a directory xsent trained whose `xsent.json` names another kind. `head` picks one of a
/// model's output heads (models with heads only).
pub fn load_embedder(spec: &str, opts: &LoadOptions, head: Option<&str>) -> Result<Box<dyn Embedder>> {
    match saved_kind(spec)?.as_deref() {
        None | Some("transformer") => {
            if let Some(h) = head {
                bail!("--head {h}: {spec} is an encoder with one output; heads belong to models trained with the disentangle recipe");
            }
            Ok(Box::new(SentenceEncoder::load(spec, opts)?))
        }
        Some(super::kinds::disentangle::KIND) => {
            let head = head.map(super::kinds::disentangle::Head::parse).transpose()?.unwrap_or(super::kinds::disentangle::Head::Meaning);
            Ok(Box::new(super::kinds::disentangle::DisentangledEncoder::load(Path::new(spec), opts, head)?))
        }
        Some("averaging") => {
            if let Some(h) = head {
                bail!("--head {h}: {spec} is an averaging model with a single output");
            }
            if opts.layers.is_some() || opts.pooling.is_some() || opts.max_length.is_some() || opts.prompt_name.is_some() {
                bail!("{spec} is an averaging model (mean of unit embeddings): --layers, --pooling, --max-length and --prompt-name do not apply to it");
            }
            if opts.dtype.is_some_and(|d| d != super::quant::Dtype::F32) {
                bail!("{spec} is an averaging model (mean of unit embeddings, no linear layers): --dtype does not apply to it");
            }
            Ok(Box::new(super::AveragingModel::load(Path::new(spec), opts.normalize.unwrap_or(true), opts.prefix.as_deref())?))
        }
        Some(other) => bail!(
            "{spec}/xsent.json names model kind {other:?}, which this xsent does not know (a newer xsent may have written it)"
        ),
    }
}
