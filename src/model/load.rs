//! [`load_embedder`]: the model kind a directory holds (its `xsent.json`), loaded as an
//! [`Embedder`].

use super::embedder::{saved_kind, Embedder};
use super::sentence::{LoadOptions, SentenceEncoder};
use anyhow::{bail, Result};

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
            Ok(Box::new(super::kinds::disentangle::DisentangledEncoder::load(&super::source::local_dir(spec), opts, head)?))
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
            Ok(Box::new(super::AveragingModel::load(&super::source::local_dir(spec), opts.normalize.unwrap_or(true), opts.prefix.as_deref(), opts.max_text_bytes)?))
        }
        Some(other) => bail!(
            "{spec}/xsent.json names model kind {other:?}, which this xsent does not know (a newer xsent may have written it)"
        ),
    }
}
