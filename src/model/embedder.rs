//! [`Embedder`]: text in, sentence vectors out. `xsent embed`, `eval` and `mine` work with this
//! trait, so every kind of model directory xsent can load (transformer encoders, averaging
//! models, heads over a frozen encoder) serves them alike.

use anyhow::{bail, Context, Result};

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
    /// The files the model was loaded from (reports record their digests); empty for a model
    /// that lives in memory only (one being trained).
    fn files(&self) -> Vec<std::path::PathBuf> {
        Vec::new()
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
        bail!(
            "the model gave a vector with NaN or infinite values for text {} of {} ({}): its weights are broken \
             (e.g. NaN after a diverged training run) or its activations overflow; no score is computed from it",
            i + 1,
            rows.len(),
            shown(texts.get(i).copied().unwrap_or_default())
        );
    }
    Ok(())
}

/// A text as a message shows it: its first 60 characters, quoted, and its length if longer.
pub fn shown(text: &str) -> String {
    let head: String = text.chars().take(60).collect();
    if head.len() < text.len() {
        format!("{head:?}… of {} bytes", text.len())
    } else {
        format!("{head:?}")
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
    let path = super::source::local_dir(spec).join("xsent.json");
    if !path.is_file() {
        return Ok(None);
    }
    let text = std::fs::read_to_string(&path).with_context(|| format!("cannot read {}", path.display()))?;
    let k: Kind = serde_json::from_str(&text).with_context(|| format!("invalid {}", path.display()))?;
    // A transformer model's xsent.json (its prefix) names no kind; it sits beside config.json.
    // Without either, the folder's kind cannot be known, and "no config.json" would mislead.
    // (A Transformer in a subfolder has modules.json on top instead.)
    if k.kind.is_none() && !path.with_file_name("config.json").exists() && !path.with_file_name("modules.json").exists()
    {
        bail!(
            "{} names no \"kind\" and its folder has no config.json, so what model it holds is unknown: \
             xsent writes \"kind\": \"averaging\" (sp, word and trigram models) or \"disentangle\" there, \
             and a transformer model needs config.json. Was the file edited? Train or copy the model again",
            path.display()
        );
    }
    Ok(k.kind)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xsent_json_without_a_kind_needs_config_json() {
        let d = tempfile::tempdir().unwrap();
        let spec = d.path().to_str().unwrap();
        std::fs::write(d.path().join("xsent.json"), r#"{"prefix": "query: "}"#).unwrap();
        let e = format!("{:#}", saved_kind(spec).unwrap_err());
        assert!(e.contains("names no \"kind\" and its folder has no config.json"), "{e}");
        std::fs::write(d.path().join("modules.json"), "[]").unwrap();
        assert_eq!(saved_kind(spec).unwrap(), None, "a Transformer in a subfolder: modules.json on top");
        std::fs::remove_file(d.path().join("modules.json")).unwrap();
        std::fs::write(d.path().join("config.json"), "{}").unwrap();
        assert_eq!(saved_kind(spec).unwrap(), None);
        std::fs::write(d.path().join("xsent.json"), r#"{"kind": "averaging"}"#).unwrap();
        std::fs::remove_file(d.path().join("config.json")).unwrap();
        assert_eq!(saved_kind(spec).unwrap().as_deref(), Some("averaging"));
    }
}
