//! `config.json` as Hugging Face writes it for BERT and XLM-R family models.

use anyhow::{bail, Context, Result};
use serde::Deserialize;
use std::path::Path;

/// Which position-id scheme and weight-name prefix a checkpoint uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// `model_type = "bert"`: positions `0..L`, weights optionally under `bert.`.
    Bert,
    /// `model_type = "xlm-roberta"` (or `roberta`): positions `pad + 1 + cumsum(mask)`,
    /// weights optionally under `roberta.`.
    XlmRoberta,
}

fn default_act() -> String {
    "gelu".into()
}
fn default_dropout() -> f64 {
    0.1
}
fn default_eps() -> f64 {
    1e-12
}
fn default_type_vocab() -> usize {
    2
}

/// `model_type` of an int8 directory: transformers does not know it, so it refuses the
/// directory instead of loading the int8 values as if they were weights (it ignores an unknown
/// `quant_method`). The source's `model_type` is kept in `quantization_config.source_model_type`.
pub const INT8_MODEL_TYPE: &str = "xsent-int8";

/// Put back the source's `model_type` in the raw `config.json` of an int8 directory.
pub fn restore_model_type(raw: &mut serde_json::Value) {
    if raw.get("model_type").and_then(|v| v.as_str()) != Some(INT8_MODEL_TYPE) {
        return;
    }
    if let Some(orig) = raw.get("quantization_config").and_then(|q| q.get("source_model_type")).cloned() {
        raw["model_type"] = orig;
    }
}

#[derive(Debug, Clone, Deserialize)]
pub struct EncoderConfig {
    pub model_type: String,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub intermediate_size: usize,
    #[serde(default = "default_act")]
    pub hidden_act: String,
    #[serde(default = "default_dropout")]
    pub hidden_dropout_prob: f64,
    #[serde(default = "default_dropout")]
    pub attention_probs_dropout_prob: f64,
    pub max_position_embeddings: usize,
    #[serde(default = "default_type_vocab")]
    pub type_vocab_size: usize,
    #[serde(default = "default_eps")]
    pub layer_norm_eps: f64,
    #[serde(default)]
    pub pad_token_id: Option<u32>,
    #[serde(default)]
    pub position_embedding_type: Option<String>,
    /// The file as read, so that a saved model keeps every key it came with.
    #[serde(skip)]
    pub raw: serde_json::Value,
}

/// What a JSON value is, for messages.
fn json_kind(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "a list",
        serde_json::Value::Object(_) => "an object",
    }
}

impl EncoderConfig {
    pub fn from_file(path: &Path) -> Result<Self> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("cannot read model config {}", path.display()))?;
        Self::from_json(&text).with_context(|| format!("invalid model config {}", path.display()))
    }

    pub fn from_json(text: &str) -> Result<Self> {
        let mut raw: serde_json::Value = serde_json::from_str(text)?;
        if !raw.is_object() {
            bail!(
                "expected a JSON object of settings ({{\"model_type\": …, \"hidden_size\": …}}), found {}",
                json_kind(&raw)
            );
        }
        restore_model_type(&mut raw);
        // The error names the key (`num_hidden_layers: invalid type: string "4", expected usize`).
        let mut cfg: EncoderConfig = serde_path_to_error::deserialize(raw.clone()).map_err(|e| {
            let at = e.path().to_string();
            anyhow::anyhow!("{at}: {}", e.into_inner())
        })?;
        cfg.raw = raw;
        cfg.family()?;
        check_activation(&cfg.hidden_act)?;
        if let Some(p) = &cfg.position_embedding_type {
            if p != "absolute" {
                bail!("position_embedding_type = {p:?} is not supported (only \"absolute\")");
            }
        }
        for (name, v) in [
            ("hidden_size", cfg.hidden_size),
            ("num_attention_heads", cfg.num_attention_heads),
            ("num_hidden_layers", cfg.num_hidden_layers),
            ("intermediate_size", cfg.intermediate_size),
            ("vocab_size", cfg.vocab_size),
            ("max_position_embeddings", cfg.max_position_embeddings),
            ("type_vocab_size", cfg.type_vocab_size),
        ] {
            if v == 0 {
                bail!("{name} is 0; a model needs at least 1");
            }
        }
        if !(cfg.layer_norm_eps.is_finite() && cfg.layer_norm_eps > 0.0) {
            bail!("layer_norm_eps is {}; LayerNorm needs a finite value above 0 (BERT's is 1e-12)", cfg.layer_norm_eps);
        }
        let pad = cfg.pad_id() as usize;
        if pad >= cfg.vocab_size {
            bail!("pad_token_id {pad} is not a token of the vocabulary (vocab_size {})", cfg.vocab_size);
        }
        // XLM-R numbers positions from pad_token_id + 1 (an outside probe: pad_token_id 2000 was
        // reported as an input too long for --max-length).
        // A text needs two positions at least, for its two special tokens.
        if cfg.family()? == Family::XlmRoberta && pad + 3 > cfg.max_position_embeddings {
            bail!(
                "pad_token_id {pad} leaves {} position(s), fewer than the 2 a text's special tokens take: the XLM-R family \
                 numbers positions from pad_token_id + 1, and max_position_embeddings is {}",
                cfg.max_position_embeddings.saturating_sub(pad + 1),
                cfg.max_position_embeddings
            );
        }
        if !cfg.hidden_size.is_multiple_of(cfg.num_attention_heads) {
            bail!(
                "hidden_size {} is not divisible by num_attention_heads {}",
                cfg.hidden_size,
                cfg.num_attention_heads
            );
        }
        Ok(cfg)
    }

    pub fn family(&self) -> Result<Family> {
        match self.model_type.as_str() {
            "bert" => Ok(Family::Bert),
            "xlm-roberta" | "roberta" => Ok(Family::XlmRoberta),
            other => bail!(
                "model_type {other:?} is not supported: xsent loads the BERT family (\"bert\") and the XLM-R family (\"xlm-roberta\", \"roberta\")"
            ),
        }
    }

    pub fn pad_id(&self) -> u32 {
        self.pad_token_id.unwrap_or(match self.family() {
            Ok(Family::XlmRoberta) => 1,
            _ => 0,
        })
    }

    /// Longest input (in tokens, specials included) the position table allows.
    /// The encoder's parameters (embeddings, layers, LayerNorms: the tensors of
    /// [`super::weights::random_encoder_tensors`]), as a float: an absurd config's count would
    /// overflow an integer.
    pub fn num_parameters(&self) -> f64 {
        let (h, i) = (self.hidden_size as f64, self.intermediate_size as f64);
        let embeddings = (self.vocab_size + self.max_position_embeddings + self.type_vocab_size) as f64 * h + 2.0 * h;
        let layer = 4.0 * (h * h + h) + (h * i + i) + (i * h + h) + 4.0 * h;
        embeddings + self.num_hidden_layers as f64 * layer
    }

    pub fn max_positions(&self) -> usize {
        match self.family() {
            Ok(Family::XlmRoberta) => self.max_position_embeddings.saturating_sub(self.pad_id() as usize + 1),
            _ => self.max_position_embeddings,
        }
    }

    /// Keep only the first `n` layers (a smaller learner that starts from a pretrained one).
    pub fn truncate_layers(&mut self, n: usize) -> Result<()> {
        if n == 0 || n > self.num_hidden_layers {
            bail!(
                "layers = {n}: the model has {} layers; choose 1..={}",
                self.num_hidden_layers,
                self.num_hidden_layers
            );
        }
        self.num_hidden_layers = n;
        if let Some(obj) = self.raw.as_object_mut() {
            obj.insert("num_hidden_layers".into(), n.into());
        }
        Ok(())
    }

    /// The config as it should be written next to saved weights.
    pub fn to_json(&self) -> String {
        let mut raw = self.raw.clone();
        if let Some(obj) = raw.as_object_mut() {
            obj.insert("num_hidden_layers".into(), self.num_hidden_layers.into());
        }
        serde_json::to_string_pretty(&raw).expect("a JSON value serialises")
    }
}

/// The activation of an encoder's feed-forward layers (`hidden_act`).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Activation {
    GeluErf,
    GeluTanh,
    Relu,
    Silu,
}

/// Whether `hidden_act` names an activation the encoder has (checked when config.json is read).
pub(crate) fn check_activation(name: &str) -> Result<()> {
    Activation::parse(name).map(|_| ())
}

impl Activation {
    pub(crate) fn parse(name: &str) -> Result<Self> {
        Ok(match name {
            "gelu" => Self::GeluErf,
            "gelu_new" | "gelu_pytorch_tanh" | "gelu_fast" => Self::GeluTanh,
            "relu" => Self::Relu,
            "silu" | "swish" => Self::Silu,
            other => bail!("hidden_act {other:?} is not supported (gelu, gelu_new, gelu_pytorch_tanh, relu, silu)"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(model_type: &str, key: &str, value: serde_json::Value) -> Result<EncoderConfig> {
        let mut c = serde_json::json!({
            "model_type": model_type, "vocab_size": 50, "hidden_size": 8, "num_hidden_layers": 1,
            "num_attention_heads": 2, "intermediate_size": 16, "max_position_embeddings": 12
        });
        c[key] = value;
        EncoderConfig::from_json(&c.to_string())
    }

    /// Values the encoder cannot run with are refused with the key's name (an outside probe:
    /// layer_norm_eps -1 gave NaN vectors "from broken weights"; an XLM-R pad_token_id of 2000
    /// was reported as an input too long for --max-length).
    #[test]
    fn eps_and_pad_token_id_are_checked() {
        let err = |t: &str, k: &str, v: serde_json::Value| format!("{:#}", with(t, k, v).unwrap_err());
        assert!(err("bert", "layer_norm_eps", (-1.0).into())
            .contains("layer_norm_eps is -1; LayerNorm needs a finite value above 0"));
        assert!(err("bert", "layer_norm_eps", 0.0.into()).contains("layer_norm_eps is 0"));
        assert!(err("bert", "pad_token_id", 50.into())
            .contains("pad_token_id 50 is not a token of the vocabulary (vocab_size 50)"));
        assert!(err("xlm-roberta", "pad_token_id", 11.into()).contains("pad_token_id 11 leaves 0 position(s)"));
        // One or two positions left are too few too (an outside probe: every line embedded as
        // its special tokens alone, the same vector for all).
        assert!(err("xlm-roberta", "pad_token_id", 10.into())
            .contains("pad_token_id 10 leaves 1 position(s), fewer than the 2"));
        with("xlm-roberta", "pad_token_id", 9.into()).unwrap();
        with("bert", "pad_token_id", 49.into()).unwrap();
        with("bert", "layer_norm_eps", 1e-12.into()).unwrap();
    }

    /// A value of the wrong type names its key; a file that is not an object says what it is;
    /// type_vocab_size 0 is refused as the other sizes are (an outside probe: serde's messages
    /// named no key, and type_vocab_size 0 failed later as a shape mismatch).
    #[test]
    fn type_errors_name_the_key() {
        let err = |k: &str, v: serde_json::Value| format!("{:#}", with("bert", k, v).unwrap_err());
        assert!(err("num_hidden_layers", "4".into()).starts_with("num_hidden_layers: invalid type: string \"4\""));
        assert!(
            err("vocab_size", (-1).into()).starts_with("vocab_size: invalid value: integer `-1`"),
            "{}",
            err("vocab_size", (-1).into())
        );
        assert!(err("type_vocab_size", 0.into()).contains("type_vocab_size is 0; a model needs at least 1"));
        let e = format!("{:#}", EncoderConfig::from_json("[[]]").unwrap_err());
        assert!(e.contains("expected a JSON object of settings") && e.contains("found a list"), "{e}");
    }
}
