//! [`LoadOptions`]: how a model is loaded (device, layers, pooling, prefix, limits, dtype), and
//! the defaults of its limits.

use super::pooling::Pooling;
use candle_core::Device;

/// How to load a model. `None` fields come from the model directory.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    pub device: Device,
    /// Keep only the first N transformer layers.
    pub layers: Option<usize>,
    pub pooling: Option<Pooling>,
    pub prefix: Option<String>,
    /// Use the prompt of this name in the model's `config_sentence_transformers.json` as the
    /// prefix (sentence-transformers' `prompt_name`); not together with `prefix`.
    pub prompt_name: Option<String>,
    pub max_length: Option<usize>,
    /// L2-normalise the embeddings; `None`: as sentence-transformers runs the model, i.e. when
    /// its `modules.json` lists a Normalize module, and for a model without a `modules.json`.
    pub normalize: Option<bool>,
    /// Load the weights as trainable variables.
    pub trainable: bool,
    /// Load weights that hold tensors the model does not use (more layers than config.json
    /// says, say); otherwise that is an error naming them.
    pub allow_unused_weights: bool,
    /// At most this many tokens in one batch, padding included ([`DEFAULT_MAX_BATCH_TOKENS`]).
    pub max_batch_tokens: usize,
    /// Bytes of a text tokenised at most ([`DEFAULT_MAX_TEXT_BYTES`]): a longer text is cut there
    /// first and counts as truncated.
    pub max_text_bytes: usize,
    /// Element type of the linear layers at inference (`None`: f32, or the model's own
    /// quantisation; see [`super::quant`]).
    pub dtype: Option<super::quant::Dtype>,
}

/// Default of [`LoadOptions::max_batch_tokens`] (`--max-batch-tokens`): a batch's activations
/// take about 4 × tokens × (2·heads·length + 10·hidden + 2·intermediate) bytes (docs/reliability.md),
/// 0.6 GB per worker for e5-small at 512 tokens. Sentences of usual length never reach it at
/// the default 64 per batch.
pub const DEFAULT_MAX_BATCH_TOKENS: usize = 8192;

/// Default of [`LoadOptions::max_text_bytes`] (`--max-line-bytes`): 1 MiB. Tokenising takes up to
/// about 270 bytes of memory per byte of text (measured: ASCII punctuation without spaces on
/// MiniLM's tokenizer, each byte a word of its own; spaceless CJK about 100),
/// and a text that is not mostly characters the tokenizer drops reaches the 512 tokens of the
/// longest models long before (WordPiece's worst case, 512 words of over 100 characters, each an
/// unknown token, is 207 KB).
pub const DEFAULT_MAX_TEXT_BYTES: usize = 1 << 20;

impl Default for LoadOptions {
    fn default() -> Self {
        Self {
            device: Device::Cpu,
            layers: None,
            pooling: None,
            prefix: None,
            prompt_name: None,
            max_length: None,
            normalize: None,
            trainable: false,
            allow_unused_weights: false,
            max_batch_tokens: DEFAULT_MAX_BATCH_TOKENS,
            max_text_bytes: DEFAULT_MAX_TEXT_BYTES,
            dtype: None,
        }
    }
}
