//! A sentence encoder: tokenizer + [`Encoder`] + [`Pooling`] + prefix + normalisation.
//! Recipes and evaluators work with text through this type and never see token ids or files.

use super::config::EncoderConfig;
use super::dense::Dense;
use super::embedder::{Embedded, Embedder};
use super::encoder::{Encoder, Mode};
use super::files::ModelFiles;
pub use super::options::{LoadOptions, DEFAULT_MAX_BATCH_TOKENS, DEFAULT_MAX_TEXT_BYTES};
use super::pooling::{l2_normalize, Pooling};
use super::source;
use super::st_modules::{write_st_files, StFiles};
use super::weights::{self, Params};
use anyhow::{anyhow, bail, Context, Result};
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use std::path::Path;
use tokenizers::Tokenizer;

/// Refuse weights that hold tensors the model does not use: layers past config.json's (unless
/// `--layers` leaves them out on purpose: `layers_chosen`), tensors the encoder does not have,
/// and `foreign` ones that are neither the encoder's nor a known head's.
fn refuse_unused(
    files: &ModelFiles,
    config: &EncoderConfig,
    tensors: &std::collections::HashMap<String, Tensor>,
    dropped: Vec<String>,
    foreign: Vec<String>,
    layers_chosen: bool,
) -> Result<()> {
    // Layers that --layers leaves out on purpose are not unused.
    let mut unused = if layers_chosen { Vec::new() } else { dropped };
    unused.extend(super::encoder::unused_tensors(tensors, config));
    let not_encoder = match foreign.first() {
        Some(first) => format!(
            " ({} of them neither the encoder's nor a known head's, e.g. {first}: a damaged or foreign file?)",
            foreign.len()
        ),
        None => String::new(),
    };
    unused.extend(foreign);
    if !unused.is_empty() {
        bail!(
            "{} holds {} tensor(s) that the model {} describes does not use: {}{not_encoder}. config.json does not describe these \
             weights (use the model's own config.json){}; or load them anyway with --allow-unused-weights",
            super::weights::describe(&files.weights),
            unused.len(),
            files.config.display(),
            summarize_names(&unused),
            if unused.iter().any(|n| weights::layer_index(n).is_some_and(|l| l >= config.num_hidden_layers)) {
                format!(", or run only the first {} layers on purpose with --layers {}", config.num_hidden_layers, config.num_hidden_layers)
            } else {
                String::new()
            }
        );
    }
    Ok(())
}

/// Tensor names for a message: the layers they belong to as ranges (`encoder.layer.6-11.*`),
/// then the first few others.
fn summarize_names(names: &[String]) -> String {
    let mut layers: Vec<usize> = names.iter().filter_map(|n| weights::layer_index(n)).collect();
    layers.sort_unstable();
    layers.dedup();
    let mut parts = Vec::new();
    if let (Some(first), Some(last)) = (layers.first(), layers.last()) {
        let which = if first == last {
            first.to_string()
        } else if last - first + 1 == layers.len() {
            format!("{first}-{last}")
        } else {
            format!("{layers:?}")
        };
        parts.push(format!("encoder.layer.{which}.*"));
    }
    let others: Vec<&String> = names.iter().filter(|n| weights::layer_index(n).is_none()).collect();
    parts.extend(others.iter().take(5).map(|n| n.to_string()));
    if others.len() > 5 {
        parts.push(format!("and {} more", others.len() - 5));
    }
    parts.join(", ")
}

/// Texts [`TextTokenizer::tokenize`] hands the tokenizer at a time.
const TOKENIZE_WINDOW: usize = 4096;

/// Largest batch [`SentenceEncoder::forward`] pads together.
pub const FORWARD_CHUNK: usize = 16;

/// One tokenised text.
#[derive(Debug, Clone)]
pub struct Encoded {
    pub ids: Vec<u32>,
    /// It was longer than the maximum length and was cut.
    pub truncated: bool,
}

/// A padded batch on the model's device.
#[derive(Debug, Clone)]
pub struct Batch {
    /// `[B, L]` u32, padded with the tokenizer's pad id.
    pub input_ids: Tensor,
    /// `[B, L]` f32, 1 on tokens and 0 on padding.
    pub attention_mask: Tensor,
}

#[derive(Clone)]
pub struct SentenceEncoder {
    pub encoder: Encoder,
    pub config: EncoderConfig,
    pub files: ModelFiles,
    pub pooling: Pooling,
    /// A linear map after pooling (sentence-transformers' Dense module), before normalisation.
    pub dense: Option<Dense>,
    pub prefix: String,
    pub max_length: usize,
    pub normalize: bool,
    /// At most this many tokens (padding included) in one inference batch.
    pub max_batch_tokens: usize,
    /// Bytes of a text tokenised at most: a longer text is cut there first (truncated).
    pub max_text_bytes: usize,
    /// `do_lower_case` of `sentence_bert_config.json`: the tokenizer lowercases first.
    pub lowercase: bool,
    /// The encoder's trainable parameters (when loaded trainable).
    pub params: Option<Params>,
    /// The Dense module's trainable parameters (when loaded trainable and present).
    pub dense_params: Option<Params>,
    tokenizer: std::sync::Arc<Tokenizer>,
    pad_id: u32,
    device: Device,
}

/// What tokenising takes of a [`SentenceEncoder`] (its tokenizer shared, prefix and limits):
/// cheap to clone and to send to another thread, e.g. to tokenise the next training batch while
/// the current one runs. Gives what [`SentenceEncoder::tokenize`] gives.
#[derive(Clone)]
pub struct TextTokenizer {
    tokenizer: std::sync::Arc<Tokenizer>,
    prefix: String,
    max_text_bytes: usize,
    max_length: usize,
}

impl TextTokenizer {
    /// [`SentenceEncoder::tokenize`].
    pub fn tokenize<S: AsRef<str>>(&self, texts: &[S]) -> Result<Vec<Encoded>> {
        // A tokenizer's encoding holds tokens, offsets and masks besides the ids: made for a
        // whole training corpus at once they took memory in proportion to it (an outside probe:
        // 3 GB for a million pairs). Made a window at a time, only the ids stay.
        let mut out = Vec::with_capacity(texts.len());
        for window in texts.chunks(TOKENIZE_WINDOW) {
            let (encs, capped) = self.encode_all(window)?;
            out.extend(encs.iter().zip(capped).map(|(e, c)| self.encoded(e, c)));
        }
        Ok(out)
    }

    /// What the tokenizer sees of `text`: `prefix + text` with surrounding whitespace stripped,
    /// and at most its first `max_text_bytes` bytes (the flag says whether it was cut there).
    /// Only what is kept is copied.
    fn input_text(&self, text: &str) -> (String, bool) {
        let p = self.prefix.trim_start();
        let t = if p.is_empty() { text.trim_start() } else { text }.trim_end();
        let p = if t.is_empty() { p.trim_end() } else { p };
        let cap = self.max_text_bytes;
        if p.len() + t.len() <= cap {
            return (format!("{p}{t}"), false);
        }
        let head = if p.len() >= cap {
            p[..p.floor_char_boundary(cap)].to_string()
        } else {
            format!("{p}{}", &t[..t.floor_char_boundary(cap - p.len())])
        };
        (head.trim_end().to_string(), true)
    }

    /// The tokenizer's encodings of the texts as [`Self::input_text`] prepares them (a long
    /// text cut first where that leaves the kept tokens as they are: [`super::long_text`]), and
    /// which texts were cut at `max_text_bytes`.
    fn encode_all<S: AsRef<str>>(&self, texts: &[S]) -> Result<(Vec<tokenizers::Encoding>, Vec<bool>)> {
        let (inputs, capped): (Vec<String>, Vec<bool>) = texts.iter().map(|t| self.input_text(t.as_ref())).unzip();
        Ok((super::long_text::encode(&self.tokenizer, &inputs)?, capped))
    }

    /// The ids of a tokenised text, at most `max_length`, and whether it was cut (`capped`: its
    /// text was cut at `max_text_bytes`).
    fn encoded(&self, e: &tokenizers::Encoding, capped: bool) -> Encoded {
        let ids = e.get_ids();
        let keep = ids.len().min(self.max_length);
        Encoded { truncated: capped || !e.get_overflowing().is_empty() || ids.len() > keep, ids: ids[..keep].to_vec() }
    }
}

impl SentenceEncoder {
    /// Load from a `--model` spec (directory or hub id).
    pub fn load(spec: &str, opts: &LoadOptions) -> Result<Self> {
        if let Some(kind) = super::embedder::saved_kind(spec)?.filter(|k| k != "transformer") {
            bail!(
                "{spec} is an xsent {kind} model (its xsent.json says so), not a transformer encoder: \
                 `xsent embed|eval|mine` run it, but a teacher, student, anchor, learner or base must be a BERT/XLM-R-family model directory or hub id"
            );
        }
        let files = source::resolve(spec)?;
        Self::from_files(files, opts)
    }

    pub fn from_files(files: ModelFiles, opts: &LoadOptions) -> Result<Self> {
        let declares_normalize = files.declares_normalize;
        let mut config = EncoderConfig::from_file(&files.config)?;
        if let Some(n) = opts.layers {
            config.truncate_layers(n)?;
        }
        // A model `xsent quantize` wrote runs in the dtype it was written in.
        let saved_dtype = super::quantized::saved_dtype(&config.raw, &files.config)?;
        let dtype = super::quantized::effective_dtype(saved_dtype, opts.dtype, opts.trainable, &files.spec)?;
        // The tokenizer (for XLM-R 250,002 pieces parsed from JSON into maps and a trie) loads on
        // a second thread while the weights are read.
        let (tensors, tokenizer) = std::thread::scope(|s| {
            let tokenizer = s.spawn(|| super::wordpiece::load_tokenizer(&files.tokenizer));
            let tensors = if saved_dtype == Some(super::quant::Dtype::Int8) {
                super::quantized::load_int8(&files.weights, &opts.device, config.num_hidden_layers)
                    .map(|(t, d, q)| (t, d, Vec::new(), q))
            } else {
                weights::load_encoder_tensors_noting(&files.weights, &opts.device, config.num_hidden_layers)
                    .map(|(t, d, f)| (t, d, f, Default::default()))
            };
            let tokenizer = tokenizer.join().unwrap_or_else(|_| {
                Err(anyhow!("loading the tokenizer {} failed (the thread panicked)", files.tokenizer.display()))
            });
            (tensors, tokenizer)
        });
        let (tensors, dropped, foreign, stored_int8) = tensors?;
        if !opts.allow_unused_weights {
            refuse_unused(&files, &config, &tensors, dropped, foreign, opts.layers.is_some())?;
        }
        let (tensors, params) = if opts.trainable {
            let (t, p) = Params::from_tensors(tensors)?;
            (t, Some(p))
        } else {
            (tensors, None)
        };
        super::encoder::check_config(&tensors, &config)
            .with_context(|| format!("{} and {}", files.config.display(), super::weights::describe(&files.weights)))?;
        let vb = VarBuilder::from_tensors(tensors, DType::F32, &opts.device);
        let mut encoder = Encoder::load(vb, &config)
            .with_context(|| format!("loading weights {}", weights::describe(&files.weights)))?;
        if saved_dtype == Some(super::quant::Dtype::Int8) {
            let asymmetric = super::quantized::saved_asymmetric(&config.raw, &files.config)?;
            super::quantized::attach_int8(&mut encoder, stored_int8, asymmetric, &opts.device, &files.spec)?;
        } else {
            super::quantized::check(dtype, &opts.device, opts.trainable)?;
            // int8 is calibrated below, once the tokenizer is here.
            if dtype != super::quant::Dtype::Int8 {
                super::quantized::apply(&mut encoder, dtype, &opts.device, opts.trainable, None)?;
            }
        }

        let mut tokenizer = tokenizer?;
        let pad_id = super::tokenizer_setup::check_ids(&mut tokenizer, &files.tokenizer, &config, &files.config)?;
        let st = super::st_modules::resolve(&files, &config, opts)?;
        super::tokenizer_setup::fit(&mut tokenizer, &files.tokenizer, st.lowercase, st.max_length)?;
        let mut me = Self {
            encoder,
            config,
            files,
            pooling: st.pooling,
            dense: st.dense,
            prefix: st.prefix,
            max_length: st.max_length,
            normalize: opts.normalize.or(declares_normalize).unwrap_or(true),
            max_batch_tokens: opts.max_batch_tokens.max(1),
            max_text_bytes: opts.max_text_bytes.max(1),
            lowercase: st.lowercase,
            params,
            dense_params: st.dense_params,
            tokenizer: std::sync::Arc::new(tokenizer),
            pad_id,
            device: opts.device.clone(),
        };
        if dtype == super::quant::Dtype::Int8 && saved_dtype.is_none() {
            me.quantize_int8(&super::quant::calibrate::builtin())
                .with_context(|| format!("--dtype int8 on {}", super::weights::describe(&me.files.weights)))?;
        }
        Ok(me)
    }

    /// Quantise the encoder's linear layers to int8 (CPU inference), smoothed with the column
    /// maxima of their inputs over `calibration` (sentences; see [`Self::calibration_maxima`]).
    pub fn quantize_int8<S: AsRef<str>>(&mut self, calibration: &[S]) -> Result<()> {
        let maxima = self.calibration_maxima(calibration)?;
        super::quantized::apply(&mut self.encoder, super::quant::Dtype::Int8, &self.device, false, Some(&maxima))
    }

    /// The int8 calibration: the column maxima of every linear layer's input (in
    /// [`Encoder::linears_mut`]'s order) over an f32 forward of `sentences`, without the prefix
    /// (so a model quantised by `xsent quantize` and `--dtype int8` with any `--prefix` agree).
    pub fn calibration_maxima<S: AsRef<str>>(&self, sentences: &[S]) -> Result<Vec<Vec<f32>>> {
        let texts: Vec<&str> = sentences.iter().map(AsRef::as_ref).filter(|t| !t.trim().is_empty()).collect();
        if texts.is_empty() {
            bail!("the int8 calibration text has no sentences (one per line)");
        }
        let mut plain = self.clone();
        plain.prefix.clear();
        let recorders = super::quantized::observe_inputs(&mut plain.encoder)?;
        plain.embed_unchecked(&texts, 64)?;
        Ok(recorders.iter().map(|c| c.maxima()).collect())
    }

    /// Dimension of the sentence vectors (the Dense module's output when there is one).
    pub fn dim(&self) -> usize {
        self.dense.as_ref().map_or(self.encoder.hidden_size(), |d| d.out_dim())
    }

    /// Put a Dense module after pooling (replacing any), trainable if the encoder is.
    pub fn set_dense(&mut self, mut dense: Dense) -> Result<()> {
        if dense.in_dim() != self.encoder.hidden_size() {
            bail!(
                "a Dense module of {} inputs cannot follow an encoder of {} dims",
                dense.in_dim(),
                self.encoder.hidden_size()
            );
        }
        self.dense_params = if self.params.is_some() { Some(dense.make_trainable()?) } else { None };
        self.dense = Some(dense);
        Ok(())
    }

    /// Every trainable parameter: the encoder's under their Hugging Face names and the Dense
    /// module's under `dense.linear.*`.
    pub fn trainable_params(&self) -> Params {
        let mut all = self.params.clone().unwrap_or_default();
        if let Some(d) = &self.dense_params {
            all.extend("dense.", d.clone());
        }
        all
    }

    /// An inference copy sharing these weights' storage but detached from autograd (running
    /// inference on trainable variables would keep the graph alive). It follows the in-place
    /// optimiser updates of the original.
    pub fn detached(&self) -> Self {
        Self {
            encoder: self.encoder.detached(),
            dense: self.dense.as_ref().map(Dense::detached),
            params: None,
            dense_params: None,
            ..self.clone()
        }
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    pub fn pad_id(&self) -> u32 {
        self.pad_id
    }

    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    /// What tokenising takes of this encoder, to tokenise on another thread ([`TextTokenizer`]).
    pub fn text_tokenizer(&self) -> TextTokenizer {
        TextTokenizer {
            tokenizer: self.tokenizer.clone(),
            prefix: self.prefix.clone(),
            max_text_bytes: self.max_text_bytes,
            max_length: self.max_length,
        }
    }

    /// Tokenise each text as [`TextTokenizer`] prepares it (prefix, `max_text_bytes`), truncating
    /// to `max_length` tokens (specials included).
    pub fn tokenize<S: AsRef<str>>(&self, texts: &[S]) -> Result<Vec<Encoded>> {
        self.text_tokenizer().tokenize(texts)
    }

    /// The tokenizer's encodings of the texts ([`TextTokenizer::encode_all`]), and which texts
    /// were cut at `max_text_bytes`.
    fn encode_all<S: AsRef<str>>(&self, texts: &[S]) -> Result<(Vec<tokenizers::Encoding>, Vec<bool>)> {
        self.text_tokenizer().encode_all(texts)
    }

    /// Pad a set of tokenised texts into one batch.
    pub fn collate(&self, items: &[&Encoded]) -> Result<Batch> {
        let b = items.len();
        let l = items.iter().map(|e| e.ids.len()).max().unwrap_or(0).max(1);
        let mut ids = vec![self.pad_id; b * l];
        let mut mask = vec![0f32; b * l];
        for (i, e) in items.iter().enumerate() {
            ids[i * l..i * l + e.ids.len()].copy_from_slice(&e.ids);
            mask[i * l..i * l + e.ids.len()].iter_mut().for_each(|m| *m = 1.0);
        }
        Ok(Batch {
            input_ids: Tensor::from_vec(ids, (b, l), &self.device)?,
            attention_mask: Tensor::from_vec(mask, (b, l), &self.device)?,
        })
    }

    /// Token states `[B, L, H]` of a batch.
    pub fn hidden_states(&self, batch: &Batch, mode: &mut Mode) -> Result<Tensor> {
        self.encoder.forward(&batch.input_ids, &batch.attention_mask, mode)
    }

    /// Pooled (and, if set, normalised) sentence vectors `[B, H]` of a batch.
    pub fn pool(&self, hidden: &Tensor, batch: &Batch) -> Result<Tensor> {
        self.pool_with(hidden, batch, l2_normalize)
    }

    /// [`Self::pool`] for inference: rows too large for float32's squares are normalised too
    /// ([`super::pooling::l2_normalize_exact`]), where they became zeros.
    fn pool_exact(&self, hidden: &Tensor, batch: &Batch) -> Result<Tensor> {
        self.pool_with(hidden, batch, super::pooling::l2_normalize_exact)
    }

    fn pool_with(&self, hidden: &Tensor, batch: &Batch, normalize: fn(&Tensor) -> Result<Tensor>) -> Result<Tensor> {
        let pooled = self.pooling.apply(hidden, &batch.attention_mask)?;
        let pooled = match &self.dense {
            Some(d) => d.forward(&pooled)?,
            None => pooled,
        };
        if self.normalize {
            normalize(&pooled)
        } else {
            Ok(pooled)
        }
    }

    /// Pooled vectors `[B, H]` before the Dense module and normalisation (inference), in input
    /// order: what a Dense module placed after pooling would see.
    pub fn embed_pooled<S: AsRef<str>>(&self, texts: &[S], batch_size: usize) -> Result<Vec<Vec<f32>>> {
        let bare = Self { dense: None, normalize: false, ..self.detached() };
        bare.embed_unchecked(texts, batch_size)
    }

    /// Sentence vectors `[B, H]` for texts; differentiable in [`Mode::Train`].
    ///
    /// Texts are sorted by length and encoded in chunks of at most [`FORWARD_CHUNK`], so that a
    /// batch mixing short and long sentences is not padded to its longest one; the rows come
    /// back in the input order (one graph: the gradient flows through every chunk).
    pub fn forward<S: AsRef<str>>(&self, texts: &[S], mode: &mut Mode) -> Result<Tensor> {
        self.forward_on(&self.encoder, texts, mode)
    }

    /// [`Self::forward`] through `encoder`: this model's encoder in another precision
    /// ([`crate::train::precision`]).
    pub fn forward_on<S: AsRef<str>>(&self, encoder: &Encoder, texts: &[S], mode: &mut Mode) -> Result<Tensor> {
        let enc = self.tokenize(texts)?;
        self.forward_encoded(encoder, &enc.iter().collect::<Vec<_>>(), mode)
    }

    /// [`Self::forward_on`] of texts tokenised already (by [`Self::tokenize`] or a
    /// [`TextTokenizer`] of this encoder).
    pub fn forward_encoded(&self, encoder: &Encoder, enc: &[&Encoded], mode: &mut Mode) -> Result<Tensor> {
        let mut order: Vec<usize> = (0..enc.len()).collect();
        order.sort_by_key(|&i| (enc[i].ids.len(), i));
        let mut parts = Vec::new();
        for chunk in order.chunks(FORWARD_CHUNK) {
            let batch = self.collate(&chunk.iter().map(|&i| enc[i]).collect::<Vec<_>>())?;
            let hidden = encoder.forward(&batch.input_ids, &batch.attention_mask, mode)?;
            parts.push(self.pool(&hidden, &batch)?);
        }
        if parts.len() == 1 && order.iter().enumerate().all(|(j, &i)| i == j) {
            return Ok(parts.pop().expect("one part"));
        }
        let sorted = Tensor::cat(&parts, 0)?;
        let mut inverse = vec![0u32; order.len()];
        for (j, &i) in order.iter().enumerate() {
            inverse[i] = j as u32;
        }
        Ok(sorted.index_select(&Tensor::new(inverse, sorted.device())?, 0)?)
    }

    /// Embed already-tokenised texts in batches of `batch_size`, longest first, returning rows
    /// in the input order. On the CPU, batches are spread over [`crate::threads::threads`] workers.
    pub fn embed_encoded(&self, items: &[Encoded], batch_size: usize) -> Result<Vec<Vec<f32>>> {
        self.embed_encoded_with_progress(items, batch_size, &|_| {})
    }

    /// [`Self::embed_encoded`], calling `progress(n)` (from any worker) as each batch of `n`
    /// texts is done.
    pub fn embed_encoded_with_progress(
        &self,
        items: &[Encoded],
        batch_size: usize,
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<Vec<Vec<f32>>> {
        let mut order: Vec<usize> = (0..items.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(items[i].ids.len()));
        let lens: Vec<usize> = order.iter().map(|&i| items[i].ids.len()).collect();
        let batches: Vec<&[usize]> =
            length_batches(&lens, batch_size, self.max_batch_tokens).into_iter().map(|r| &order[r]).collect();
        let run = |chunk: &[usize]| -> Result<Vec<Vec<f32>>> {
            let batch = self.collate(&chunk.iter().map(|&i| &items[i]).collect::<Vec<_>>())?;
            let hidden = self.hidden_states(&batch, &mut Mode::Infer)?;
            let rows = self.pool_exact(&hidden, &batch)?.to_dtype(DType::F32)?.to_vec2::<f32>()?;
            progress(chunk.len());
            Ok(rows)
        };
        let workers = if self.device.is_cpu() { crate::threads::threads().min(batches.len()) } else { 1 };
        let mut results: Vec<Option<Result<Vec<Vec<f32>>>>> = (0..batches.len()).map(|_| None).collect();
        if workers <= 1 {
            for (slot, chunk) in results.iter_mut().zip(&batches) {
                *slot = Some(run(chunk));
            }
        } else {
            let next = std::sync::atomic::AtomicUsize::new(0);
            let done = std::sync::Mutex::new(&mut results);
            std::thread::scope(|s| {
                for _ in 0..workers {
                    s.spawn(|| loop {
                        let b = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        if b >= batches.len() {
                            break;
                        }
                        let r = run(batches[b]);
                        done.lock().expect("no worker panicked")[b] = Some(r);
                    });
                }
            });
        }
        let mut out = vec![Vec::new(); items.len()];
        for (chunk, r) in batches.iter().zip(results) {
            for (&i, row) in chunk.iter().zip(r.expect("every batch ran")?) {
                out[i] = row;
            }
        }
        Ok(out)
    }

    /// Contextual token vectors of each text (inference, no gradient): the hidden state after
    /// `layer` transformer layers (`None`: the last; `Some(0)`: the embedding output), one cloud
    /// per text as a row-major `n_i × hidden_size` vector, in input order. Padding never appears;
    /// with `skip_special` the tokenizer's special tokens (`[CLS]`, `</s>`, …) are left out too.
    /// Texts are sorted by length and run `batch_size` at a time on the calling thread.
    pub fn token_embeddings<S: AsRef<str>>(
        &self,
        texts: &[S],
        layer: Option<usize>,
        skip_special: bool,
        batch_size: usize,
    ) -> Result<Vec<Vec<f32>>> {
        let tt = self.text_tokenizer();
        let (encs, capped) = tt.encode_all(texts)?;
        let items: Vec<Encoded> = encs.iter().zip(capped).map(|(e, c)| tt.encoded(e, c)).collect();
        let kept: Vec<Vec<bool>> =
            encs.iter().zip(&items).map(|(e, it)| self.sentence_tokens(e, it.ids.len(), skip_special)).collect();
        let layer = layer.unwrap_or(self.encoder.num_layers());
        let h = self.encoder.hidden_size();
        let mut order: Vec<usize> = (0..items.len()).collect();
        order.sort_by_key(|&i| (items[i].ids.len(), i));
        let mut out = vec![Vec::new(); items.len()];
        for chunk in token_chunks(&order, |i| items[i].ids.len(), batch_size, self.max_batch_tokens) {
            let batch = self.collate(&chunk.iter().map(|&i| &items[i]).collect::<Vec<_>>())?;
            let hidden =
                self.encoder.forward_layers(&batch.input_ids, &batch.attention_mask, layer, &mut Mode::Infer)?;
            let hidden = hidden.detach().to_dtype(DType::F32)?.to_device(&Device::Cpu)?.to_vec3::<f32>()?;
            for (&i, states) in chunk.iter().zip(hidden) {
                let mut cloud = Vec::with_capacity(items[i].ids.len() * h);
                for (row, keep) in states.into_iter().zip(&kept[i]) {
                    if *keep {
                        cloud.extend(row);
                    }
                }
                out[i] = cloud;
            }
        }
        Ok(out)
    }

    /// How many token vectors [`Self::token_embeddings`] gives for each text (tokenising only).
    pub fn token_counts<S: AsRef<str>>(&self, texts: &[S], skip_special: bool) -> Result<Vec<usize>> {
        // A window at a time, as TextTokenizer::tokenize (DuEAM counts a whole corpus).
        let mut out = Vec::with_capacity(texts.len());
        for window in texts.chunks(TOKENIZE_WINDOW) {
            let (encs, _) = self.encode_all(window)?;
            out.extend(encs.iter().map(|e| {
                self.sentence_tokens(e, e.get_ids().len().min(self.max_length), skip_special)
                    .iter()
                    .filter(|k| **k)
                    .count()
            }));
        }
        Ok(out)
    }

    /// Which of the first `n` tokens belong to the text itself: not the prefix's (an
    /// instruction such as "query: ", not part of the sentence), nor, with `skip_special`, the
    /// tokenizer's special tokens.
    fn sentence_tokens(&self, e: &tokenizers::Encoding, n: usize, skip_special: bool) -> Vec<bool> {
        let special = e.get_special_tokens_mask();
        let offsets = e.get_offsets();
        // The input starts with the prefix (see `input_text`): tokens that end within it are its.
        let prefix_len = self.prefix.trim_start().len();
        (0..n)
            .map(|j| {
                let is_special = special.get(j).is_some_and(|&s| s == 1);
                let in_prefix =
                    !is_special && prefix_len > 0 && offsets.get(j).is_some_and(|&(_, end)| end <= prefix_len);
                !(in_prefix || (skip_special && is_special))
            })
            .collect()
    }

    /// Embed texts (inference), in the input order, the vectors as computed: unlike the checked
    /// entry, `<dyn Embedder>::embed`, a NaN or infinite value is no error here.
    pub fn embed_unchecked<S: AsRef<str>>(&self, texts: &[S], batch_size: usize) -> Result<Vec<Vec<f32>>> {
        let enc = self.tokenize(texts)?;
        self.embed_encoded(&enc, batch_size)
    }

    /// Save as a model directory in Hugging Face layout plus sentence-transformers files,
    /// loadable by `xsent --model DIR` and by sentence-transformers. Weights are the trainable
    /// parameters when the model was loaded trainable, else the loaded tensors.
    pub fn save(&self, dir: &Path) -> Result<()> {
        let params = self.params.as_ref().ok_or_else(|| anyhow!("only a model loaded as trainable can be saved"))?;
        std::fs::create_dir_all(dir.join("1_Pooling")).with_context(|| format!("cannot create {}", dir.display()))?;
        weights::save_tensors(&params.tensors(), &dir.join("model.safetensors"))?;
        if let Some(d) = &self.dense {
            d.save(&dir.join("2_Dense"))?;
        }
        std::fs::write(dir.join("config.json"), self.config.to_json())?;
        if super::wordpiece::is_vocab_file(&self.files.tokenizer) {
            // A checkpoint without tokenizer.json: the one transformers would convert its
            // vocab.txt into (the vocabulary and its settings are copied below too).
            std::fs::write(dir.join("tokenizer.json"), super::wordpiece::tokenizer_json(&self.files.tokenizer)?)
                .with_context(|| format!("cannot write {}", dir.join("tokenizer.json").display()))?;
        } else {
            std::fs::copy(&self.files.tokenizer, dir.join("tokenizer.json"))
                .with_context(|| format!("cannot copy {}", self.files.tokenizer.display()))?;
        }
        // transformers needs these beside tokenizer.json to build the right tokenizer class.
        if let Some(src) = self.files.tokenizer.parent() {
            for f in ["tokenizer_config.json", "special_tokens_map.json", "vocab.txt", "added_tokens.json"] {
                if src.join(f).is_file() {
                    std::fs::copy(src.join(f), dir.join(f)).with_context(|| format!("cannot copy {f}"))?;
                }
            }
        }
        let st = StFiles {
            max_seq_length: self.max_length,
            lowercase: self.lowercase,
            normalize: self.normalize,
            dense: self.dense.is_some(),
        };
        write_st_files(dir, self.pooling, self.encoder.hidden_size(), &st)?;
        // The prefix as sentence-transformers' default, query and document prompt: its `encode`,
        // `encode_query` and `encode_document` prepend it as `xsent embed` does, and xsent reads
        // the default back from there.
        let prompts = match self.prefix.as_str() {
            "" => serde_json::json!({"prompts": {}, "default_prompt_name": null, "similarity_fn_name": "cosine"}),
            p => {
                serde_json::json!({"prompts": {"query": p, "document": p}, "default_prompt_name": "query", "similarity_fn_name": "cosine"})
            }
        };
        std::fs::write(dir.join("config_sentence_transformers.json"), serde_json::to_string_pretty(&prompts)?)?;
        Ok(())
    }
}

/// Batches over lengths sorted longest first: at most `batch_size` texts and `max_tokens` tokens
/// (padding included: every text is padded to the batch's first, longest one; a text longer
/// than `max_tokens` goes alone) each, and a batch ends early when the next text would make its
/// padding more than 10 % of its real tokens. A few long texts then go in batches of their own
/// instead of padding 63 short ones to their length: on 2,000 Tatoeba sentences with e5-small's
/// tokenizer, 64 at a time, padding falls from 14.1 % to 3.1 % of the real tokens (35 batches
/// instead of 32). The token bound is what bounds a batch's memory (as text-embeddings-inference's
/// `--max-batch-tokens` and LASER's `--max-tokens` do).
pub(crate) fn length_batches(lens: &[usize], batch_size: usize, max_tokens: usize) -> Vec<std::ops::Range<usize>> {
    let batch_size = batch_size.max(1);
    let mut out = Vec::new();
    let (mut start, mut real) = (0, 0);
    for (i, &len) in lens.iter().enumerate() {
        let n = i - start;
        if n > 0
            && (n == batch_size || lens[start] * (n + 1) > max_tokens || 10 * lens[start] * (n + 1) > 11 * (real + len))
        {
            out.push(start..i);
            (start, real) = (i, 0);
        }
        real += len;
    }
    if start < lens.len() {
        out.push(start..lens.len());
    }
    out
}

/// Consecutive chunks of `order` (sorted by length, shortest first) of at most `batch_size` texts
/// and `max_tokens` tokens once padded to the chunk's longest (a longer text goes alone).
fn token_chunks(order: &[usize], len: impl Fn(usize) -> usize, batch_size: usize, max_tokens: usize) -> Vec<&[usize]> {
    let mut out = Vec::new();
    let mut start = 0;
    for j in 0..order.len() {
        let n = j - start;
        if n > 0 && (n == batch_size.max(1) || len(order[j]) * (n + 1) > max_tokens) {
            out.push(&order[start..j]);
            start = j;
        }
    }
    if start < order.len() {
        out.push(&order[start..]);
    }
    out
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

    fn files(&self) -> Vec<std::path::PathBuf> {
        self.files.read_files()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_chunks_bound_texts_and_tokens() {
        let lens = [1, 2, 3, 4, 10, 10, 10, 50];
        let order: Vec<usize> = (0..lens.len()).collect();
        let chunks = token_chunks(&order, |i| lens[i], 3, 30);
        assert_eq!(chunks, vec![&[0, 1, 2][..], &[3, 4, 5], &[6], &[7]]);
        assert_eq!(token_chunks(&order, |i| lens[i], 100, usize::MAX).len(), 1);
    }

    #[test]
    fn length_batches_cut_at_the_size_and_where_padding_would_grow() {
        // Equal lengths: batches of the full size.
        assert_eq!(length_batches(&[5; 10], 4, usize::MAX), vec![0..4, 4..8, 8..10]);
        // A long outlier goes alone rather than pad the rest to 100.
        assert_eq!(length_batches(&[100, 10, 10, 10], 64, usize::MAX), vec![0..1, 1..4]);
        // 10 % of the real tokens: 20 + 19 pad to 40 <= 1.1 * 39, a 15 would pad them to
        // 60 > 1.1 * 54; 20, 19, 18 pad to 60 <= 1.1 * 57 and stay together.
        assert_eq!(length_batches(&[20, 19, 15, 15], 64, usize::MAX), vec![0..2, 2..4]);
        assert_eq!(length_batches(&[20, 19, 18, 18], 64, usize::MAX), vec![0..4]);
        assert!(length_batches(&[], 8, usize::MAX).is_empty());
        // Every index once, in order, for any sizes.
        let lens: Vec<usize> = (0..300).map(|i| 300 - i).collect();
        let b = length_batches(&lens, 7, usize::MAX);
        assert_eq!(b.first().unwrap().start, 0);
        assert_eq!(b.last().unwrap().end, 300);
        assert!(b.windows(2).all(|w| w[0].end == w[1].start && w[0].len() <= 7));
        // The token bound: 4 texts of 10 at most 25 tokens -> 2 a batch; a text over it alone.
        assert_eq!(length_batches(&[10; 4], 64, 25), vec![0..2, 2..4]);
        assert_eq!(length_batches(&[40, 10, 10], 64, 25), vec![0..1, 1..3]);
    }
}
