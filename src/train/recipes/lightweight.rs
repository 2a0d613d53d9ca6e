//! Lightweight dual transformer (Mao et al. 2021, seed 001): a small transformer encoder (2
//! layers, hidden 512, 8 heads, feed-forward 1,024, learned positions) trained from scratch on a
//! shared subword vocabulary. The same encoder (shared parameters) encodes both sides of a
//! translation pair; the sentence vector is the mean of the last layer's token states.
//!
//! Training tasks (all switchable, to rerun seed 001 Tables 6 and 7):
//! - generative, from the sentence vector through a fully connected layer whose output is scored
//!   against the vocabulary (tied to the input embeddings, plus an output bias):
//!   - `smlm` (Eq. 1): one token w_t is masked on one side of each pair (the side drawn at
//!     random); it is predicted from the masked sentence and from its translation;
//!   - `xtr` (Eq. 2–3): KL(q ‖ p) with q uniform over the partner sentence's tokens (every N_wi
//!     set to 1, as the paper's implementation does: uniform over the distinct tokens);
//!   - `ugt` (Eq. 4): SMLM and XTR unified: the masked side's q puts ½ on w_t and ½ uniformly on
//!     the partner's tokens; the unmasked side's q is XTR's (uniform over the partner's tokens,
//!     w_t among them);
//!   - `mlm`: BERT's token-level masked LM (15% of each side's tokens masked, at least one,
//!     predicted from their token states through the same layer and output); `mlm+xtr` adds
//!     XTR on the same masked inputs;
//! - contrastive, on the mean-pooled vectors u (source side) and v (target side) of the batch:
//!   - `align` (Eq. 5): in-batch cross-entropy over inner products u·v, both directions;
//!   - `sim` (Eq. 6): −log cos(π/2 · (softmax_k(u_j·u_k) − softmax_k(v_j·v_k))).
//!
//! L = L_gen + 2·L_align + 2·L_sim (Eq. 7; weights configurable). Each term is a mean over the
//! batch's pairs of the per-pair quantity of its equation (Eq. 1–2 sum the two sides of a pair;
//! Eq. 5 the two directions; Eq. 6 the row j1 of the similarity matrices), where the paper writes
//! sums over the corpus.
//!
//! The saved model is an ordinary BERT-family model directory (config.json, model.safetensors,
//! tokenizer.json, mean pooling): `xsent embed|eval|mine` and sentence-transformers load it. The
//! generative head (fully connected layer, output bias) is training-only and lives in checkpoints.

use crate::index::knn::{translation_accuracy, Matrix};
use crate::io::atomic::write_atomically;
use crate::model::encoder::{Linear, Rng};
use crate::model::kinds::vocab;
use crate::model::matmul::matmul;
use crate::model::sentence::Encoded;
use crate::model::st_modules::{write_st_files, StFiles};
use crate::model::weights::{self, Params};
use crate::model::{EncoderConfig, LoadOptions, Mode, Pooling, SentenceEncoder};
use crate::train::config::{BestMode, Config, Generative, LightweightConfig};
use crate::train::precision::Compute;
use crate::train::recipe::{Recipe, StepLoss, StepPlan};
use crate::train::split::train_val_pairs;
use anyhow::{bail, ensure, Context, Result};
use candle_core::{DType, Device, Tensor, D};
use rand::seq::index::sample;
use rand::{Rng as _, SeedableRng};
use std::collections::HashMap;
use std::path::Path;
use tokenizers::AddedToken;

/// The mask token the recipe adds to the vocabulary (when it is not there already).
pub const MASK: &str = "<mask>";
/// The padding token the recipe adds to the vocabulary.
pub const PAD: &str = "<pad>";

impl Generative {
    fn single_mask(self) -> bool {
        matches!(self, Self::Smlm | Self::Ugt)
    }
    fn token_level(self) -> bool {
        matches!(self, Self::Mlm | Self::MlmXtr)
    }
    fn sentence_level(self) -> bool {
        matches!(self, Self::Smlm | Self::Xtr | Self::Ugt | Self::MlmXtr)
    }
}

impl LightweightConfig {
    /// The encoder's `config.json` for a vocabulary of `vocab` pieces padded with `pad`.
    pub fn encoder_config(&self, vocab: usize, pad: u32) -> serde_json::Value {
        serde_json::json!({
            "architectures": ["BertModel"],
            "model_type": "bert",
            "vocab_size": vocab,
            "hidden_size": self.hidden,
            "num_hidden_layers": self.layers,
            "num_attention_heads": self.heads,
            "intermediate_size": self.ffn,
            "hidden_act": "gelu",
            "hidden_dropout_prob": self.dropout,
            "attention_probs_dropout_prob": self.dropout,
            "max_position_embeddings": self.max_length,
            "type_vocab_size": 1,
            "layer_norm_eps": 1e-12,
            "initializer_range": 0.02,
            "pad_token_id": pad,
        })
    }
}

/// A sparse target distribution over the vocabulary: (token id, probability) pairs.
pub type Sparse = Vec<(u32, f32)>;

/// Label distributions q of the sentence-level generative tasks, as sparse rows `(token, mass)`,
/// for a pair whose side `masked` (0 source, 1 target) had token `wt` masked (SMLM/UGT).
/// Returns (q of the source-side prediction, q of the target-side prediction).
pub fn sentence_targets(task: Generative, src: &[u32], tgt: &[u32], masked: Option<(usize, u32)>) -> (Sparse, Sparse) {
    let uniform = |s: &[u32], mass: f32| -> Sparse {
        let mut t = s.to_vec();
        t.sort_unstable();
        t.dedup();
        let w = mass / t.len().max(1) as f32;
        t.into_iter().map(|id| (id, w)).collect()
    };
    let add = |mut a: Sparse, id: u32, mass: f32| {
        match a.iter_mut().find(|(t, _)| *t == id) {
            Some(e) => e.1 += mass,
            None => a.push((id, mass)),
        }
        a
    };
    match task {
        Generative::Xtr | Generative::MlmXtr => (uniform(tgt, 1.0), uniform(src, 1.0)),
        Generative::Smlm => {
            let (_, wt) = masked.expect("smlm masks a token");
            (vec![(wt, 1.0)], vec![(wt, 1.0)])
        }
        Generative::Ugt => {
            let (side, wt) = masked.expect("ugt masks a token");
            if side == 0 {
                (add(uniform(tgt, 0.5), wt, 0.5), uniform(src, 1.0))
            } else {
                (uniform(tgt, 1.0), add(uniform(src, 0.5), wt, 0.5))
            }
        }
        Generative::Mlm | Generative::None => (Vec::new(), Vec::new()),
    }
}

/// `Σ_rows KL(q_r ‖ softmax(logits_r)) / n` for sparse label rows (`Σ_i q_i log q_i − Σ_i q_i
/// log p_i`, the constant part computed on the side).
pub fn kl_sparse(logits: &Tensor, q: &[Sparse], n: usize) -> Result<Tensor> {
    let (rows, v) = logits.dims2()?;
    ensure!(rows == q.len(), "kl_sparse: {rows} rows of logits, {} label rows", q.len());
    let logp = candle_nn::ops::log_softmax(logits, D::Minus1)?.flatten_all()?;
    let mut idx = Vec::new();
    let mut w = Vec::new();
    let mut entropy = 0f64;
    for (r, row) in q.iter().enumerate() {
        for &(t, m) in row {
            ensure!((t as usize) < v, "label token {t} outside the vocabulary of {v}");
            if m > 0.0 {
                idx.push((r * v + t as usize) as u32);
                w.push(m);
                entropy += m as f64 * (m as f64).ln();
            }
        }
    }
    let dev = logits.device();
    let cross = logp.index_select(&Tensor::new(idx, dev)?, 0)?.mul(&Tensor::new(w, dev)?)?.sum_all()?;
    Ok(((cross.neg()? + entropy)? / n as f64)?)
}

/// Eq. 5: mean over rows of the cross-entropy of `u·vᵀ` rows and columns against the diagonal.
pub fn align_loss(u: &Tensor, v: &Tensor) -> Result<Tensor> {
    let b = u.dim(0)?;
    let s = matmul(u, &v.t()?)?;
    let diag = Tensor::arange(0u32, b as u32, u.device())?;
    let rows = candle_nn::loss::cross_entropy(&s, &diag)?;
    let cols = candle_nn::loss::cross_entropy(&s.t()?.contiguous()?, &diag)?;
    Ok((rows + cols)?)
}

/// Eq. 6: `Σ_{j2} −log cos(π/2 · (softmax(u uᵀ) − softmax(v vᵀ))_{j1 j2})`, mean over j1.
/// Differences of ±1 (both softmax rows one-hot on different entries) would give log 0: the
/// cosine is floored at 1e-12.
pub fn sim_loss(u: &Tensor, v: &Tensor) -> Result<Tensor> {
    let b = u.dim(0)?;
    let a = candle_nn::ops::softmax(&matmul(u, &u.t()?)?, D::Minus1)?;
    let c = candle_nn::ops::softmax(&matmul(v, &v.t()?)?, D::Minus1)?;
    let cos = ((a - c)? * std::f64::consts::FRAC_PI_2)?.cos()?;
    let cos = cos.maximum(1e-12)?;
    Ok((cos.log()?.sum_all()?.neg()? / b as f64)?)
}

/// The training-only generative head: a fully connected layer on the sentence (or token) vector,
/// scored against the tied input embeddings plus an output bias.
struct Head {
    fc: Linear,
    bias: Tensor,
    params: Params,
}

impl Head {
    /// Weights drawn on the CPU from the seeded `rng` (same on every device), then moved to `device`.
    fn new(hidden: usize, vocab: usize, rng: &mut Rng, device: &Device) -> Result<Self> {
        use rand_distr::{Distribution, Normal};
        let normal = Normal::new(0f32, 0.02).expect("a valid normal distribution");
        let w: Vec<f32> = (0..hidden * hidden).map(|_| normal.sample(rng)).collect();
        let tensors = HashMap::from([
            ("head.fc.weight".to_string(), Tensor::from_vec(w, (hidden, hidden), &Device::Cpu)?.to_device(device)?),
            ("head.fc.bias".to_string(), Tensor::zeros(hidden, DType::F32, device)?),
            ("head.out_bias".to_string(), Tensor::zeros(vocab, DType::F32, device)?),
        ]);
        let (t, params) = Params::from_tensors(tensors)?;
        let fc = Linear::new(t["head.fc.weight"].clone(), t["head.fc.bias"].clone());
        let bias = t["head.out_bias"].clone();
        Ok(Self { fc, bias, params })
    }

    /// Vocabulary logits `[n, V]` of vectors `[n, H]`.
    fn logits(&self, x: &Tensor, embeddings: &Tensor) -> Result<Tensor> {
        crate::model::kernels::linear(&self.fc.forward(x)?, embeddings, &self.bias, true)
    }
}

/// Rows encoded together when a batch is run (sorted by length, so short sentences are not
/// padded to the longest of the batch).
const CHUNK: usize = 32;

pub struct Lightweight {
    /// [`crate::train::data_digest`] of the training and validation data.
    digest: String,
    cfg: LightweightConfig,
    encoder: SentenceEncoder,
    infer: SentenceEncoder,
    head: Head,
    src: Vec<Vec<u32>>,
    tgt: Vec<Vec<u32>>,
    val_src: Vec<String>,
    val_tgt: Vec<String>,
    mask_id: u32,
    /// What decontamination dropped.
    overlaps: Vec<crate::data::decontam::Overlap>,
    /// The encoder as the training forward runs it (`train.precision`).
    compute: Compute,
}

/// Write the initial model directory (vocabulary, config, seeded random weights) into `dir`.
/// Training holds at least 16 bytes per parameter (the f32 weights, their gradients and AdamW's
/// two moments): a model whose share alone exceeds the machine's memory (`memory`) is refused
/// here, before its weights are drawn, rather than aborting on an allocation.
fn check_model_fits(lc: &LightweightConfig, cfg: &EncoderConfig, memory: Option<u64>) -> Result<()> {
    let h = cfg.hidden_size as f64;
    // The encoder and the generative head (a hidden × hidden layer and a bias per vocabulary unit).
    let params = cfg.num_parameters() + h * h + h + cfg.vocab_size as f64;
    let need = 16.0 * params;
    if let Some(m) = memory {
        if need > m as f64 {
            bail!(
                "lightweight: a model of {:.3e} parameters ({} layers, hidden {}, ffn {}, max_length {}, a vocabulary of {}) needs at least \
                 {:.1} GB to train (16 bytes per parameter: weights, gradients and AdamW's two moments), more than this machine's {:.1} GB; \
                 lower lightweight.hidden, ffn, layers, max_length or vocab_size",
                params,
                lc.layers,
                lc.hidden,
                lc.ffn,
                lc.max_length,
                cfg.vocab_size,
                need / 1e9,
                m as f64 / 1e9
            );
        }
    }
    Ok(())
}

fn write_init(lc: &LightweightConfig, texts: &[&str], seed: u64, dir: &Path) -> Result<()> {
    let mut tok = match &lc.tokenizer {
        Some(p) => tokenizers::Tokenizer::from_file(p)
            .map_err(|e| anyhow::anyhow!("lightweight.tokenizer: cannot load {}: {e}", p.display()))?,
        None => vocab::train_subword(texts, lc.subword_model, lc.vocab_size, lc.lowercase)?,
    };
    let specials: Vec<AddedToken> =
        [PAD, MASK].iter().filter(|t| tok.token_to_id(t).is_none()).map(|t| AddedToken::from(*t, true)).collect();
    tok.add_special_tokens(specials)
        .map_err(|e| anyhow::anyhow!("cannot add {PAD} and {MASK} to the vocabulary: {e}"))?;
    let pad = tok.token_to_id(PAD).context("the vocabulary has no <pad> after adding it")?;
    let vocab = tok.get_vocab_size(true);
    tok.save(dir.join("tokenizer.json"), true).map_err(|e| anyhow::anyhow!("cannot write tokenizer.json: {e}"))?;
    // For a `bert` config transformers would rebuild a WordPiece tokenizer from the vocabulary;
    // this makes it (and so sentence-transformers) use tokenizer.json as it is.
    let tokenizer_config = serde_json::json!({
        "tokenizer_class": "PreTrainedTokenizerFast", "pad_token": PAD, "mask_token": MASK, "model_max_length": lc.max_length,
    });
    std::fs::write(dir.join("tokenizer_config.json"), serde_json::to_string_pretty(&tokenizer_config)?)?;
    let json = lc.encoder_config(vocab, pad);
    std::fs::write(dir.join("config.json"), serde_json::to_string_pretty(&json)?)?;
    let cfg = EncoderConfig::from_json(&json.to_string())?;
    check_model_fits(lc, &cfg, crate::device::host_memory_bytes())?;
    let mut rng = Rng::seed_from_u64(seed ^ 0x11e_6e17);
    let tensors = weights::random_encoder_tensors(&cfg, &mut rng, &Device::Cpu)?;
    weights::save_tensors(&tensors, &dir.join("model.safetensors"))?;
    // The learned vocabulary's own normaliser lowercases when `lowercase` is set.
    let st = StFiles { max_seq_length: lc.max_length, lowercase: false, normalize: true, dense: false };
    write_st_files(dir, Pooling::Mean, lc.hidden, &st)
}

impl Lightweight {
    /// The recipe for run directory `out`. The initial model (learned vocabulary, seeded random
    /// weights) is written once to `out/init/` and read from there by a resumed run (a unigram
    /// vocabulary learned again would be the same, but a BPE one could number its pieces
    /// differently).
    pub fn new(cfg: &Config, lc: &LightweightConfig, out: &Path) -> Result<Self> {
        let lc = lc.clone();
        lc.validate()?;
        let device = crate::device::parse_device(&cfg.train.device)?;
        let mut decontam = crate::train::decontam::Decontam::new(cfg)?;
        let (train, val) = train_val_pairs(cfg, &mut decontam)?;
        let digest = crate::train::data_digest::pairs_digest(&train, &val);

        let init = out.join("init");
        if init.is_dir() {
            errln!("xsent train: initial model and vocabulary from {}", init.display());
        } else {
            let t0 = std::time::Instant::now();
            // The vocabulary is learned from the training pairs only (never the held-out ones).
            let mut texts: Vec<&str> = train.iter().flat_map(|p| [p.src.as_str(), p.tgt.as_str()]).collect();
            texts.sort_unstable();
            texts.dedup();
            std::fs::create_dir_all(out).with_context(|| format!("cannot create run directory {}", out.display()))?;
            write_atomically(&init, |d| write_init(&lc, &texts, cfg.seed, d))?;
            errln!(
                "xsent train: vocabulary and initial model written to {} ({:.1} s)",
                init.display(),
                t0.elapsed().as_secs_f64()
            );
        }
        let opts = LoadOptions {
            device: device.clone(),
            pooling: Some(Pooling::Mean),
            max_length: Some(lc.max_length),
            normalize: Some(false),
            trainable: true,
            ..Default::default()
        };
        let encoder = SentenceEncoder::load(&init.to_string_lossy(), &opts)
            .with_context(|| format!("loading the initial model {}", init.display()))?;
        ensure!(
            encoder.config.num_hidden_layers == lc.layers
                && encoder.config.hidden_size == lc.hidden
                && encoder.config.intermediate_size == lc.ffn,
            "{} was written for another model shape than [lightweight] asks for; start a new run directory",
            init.display()
        );
        let mask_id =
            encoder.tokenizer().token_to_id(MASK).with_context(|| format!("{} has no {MASK} token", init.display()))?;
        let vocab = encoder.config.vocab_size;
        errln!(
            "xsent train: {}-layer encoder, hidden {}, {} heads, feed-forward {}, vocabulary {vocab}, {:.1}M parameters",
            lc.layers,
            lc.hidden,
            lc.heads,
            lc.ffn,
            encoder.trainable_params().num_elements() as f64 / 1e6
        );
        let mut head_rng = Rng::seed_from_u64(cfg.seed ^ 0x4ead);
        let head = Head::new(lc.hidden, vocab, &mut head_rng, &device)?;

        let tokens = |texts: Vec<&str>| -> Result<Vec<Vec<u32>>> {
            Ok(encoder.tokenize(&texts)?.into_iter().map(|e| e.ids).collect())
        };
        let src_all = tokens(train.iter().map(|p| p.src.as_str()).collect())?;
        let tgt_all = tokens(train.iter().map(|p| p.tgt.as_str()).collect())?;
        let (mut src, mut tgt) = (Vec::with_capacity(src_all.len()), Vec::with_capacity(tgt_all.len()));
        let mut empty = 0;
        for (s, t) in src_all.into_iter().zip(tgt_all) {
            if s.is_empty() || t.is_empty() {
                empty += 1;
                continue;
            }
            src.push(s);
            tgt.push(t);
        }
        if empty > 0 {
            errln!("xsent train: {empty} training pairs left out: a side has no token");
        }
        ensure!(!src.is_empty(), "no training pair has tokens on both sides");
        let infer = encoder.detached();
        let compute = Compute::new(cfg.train.precision, encoder.device());
        Ok(Self {
            digest,
            cfg: lc,
            encoder,
            infer,
            head,
            src,
            tgt,
            val_src: val.iter().map(|p| p.src.clone()).collect(),
            val_tgt: val.iter().map(|p| p.tgt.clone()).collect(),
            mask_id,
            overlaps: decontam.overlaps,
            compute,
        })
    }

    /// Run `rows` through the encoder (chunks of similar length); returns the mean-pooled
    /// vectors `[n, H]` in input order and the token states at `picks` (`(row, position)`),
    /// `[picks, H]` in the order given.
    fn encode(&self, rows: &[Vec<u32>], picks: &[(usize, usize)], mode: &mut Mode) -> Result<(Tensor, Option<Tensor>)> {
        let mut order: Vec<usize> = (0..rows.len()).collect();
        order.sort_by_key(|&i| (rows[i].len(), i));
        let mut place = vec![0usize; rows.len()];
        for (j, &i) in order.iter().enumerate() {
            place[i] = j;
        }
        let h = self.cfg.hidden;
        let encoder = self.compute.encoder(&self.encoder.encoder)?;
        let mut pooled = Vec::new();
        let mut states = Vec::new();
        // (chunk, row within chunk, padded length) of every sorted row.
        let mut at = vec![(0usize, 0usize, 0usize); rows.len()];
        for (c, chunk) in order.chunks(CHUNK).enumerate() {
            let enc: Vec<Encoded> = chunk.iter().map(|&i| Encoded { ids: rows[i].clone(), truncated: false }).collect();
            let batch = self.encoder.collate(&enc.iter().collect::<Vec<_>>())?;
            let hidden = encoder.forward(&batch.input_ids, &batch.attention_mask, mode)?;
            let l = hidden.dim(1)?;
            for (r, &i) in chunk.iter().enumerate() {
                at[place[i]] = (c, r, l);
            }
            pooled.push(self.encoder.pool(&hidden, &batch)?);
            if !picks.is_empty() {
                states.push(hidden.reshape((chunk.len() * l, h))?);
            }
        }
        let pooled = Tensor::cat(&pooled, 0)?;
        let pooled = pooled
            .index_select(&Tensor::new(place.iter().map(|&p| p as u32).collect::<Vec<_>>(), pooled.device())?, 0)?;
        let picked = if picks.is_empty() {
            None
        } else {
            // Offsets of each chunk's rows in the concatenated token states.
            let mut offset = vec![0usize; states.len() + 1];
            for (c, s) in states.iter().enumerate() {
                offset[c + 1] = offset[c] + s.dim(0)?;
            }
            let all = Tensor::cat(&states, 0)?;
            let idx: Vec<u32> = picks
                .iter()
                .map(|&(row, pos)| {
                    let (c, r, l) = at[place[row]];
                    (offset[c] + r * l + pos) as u32
                })
                .collect();
            Some(all.index_select(&Tensor::new(idx, all.device())?, 0)?)
        };
        Ok((pooled, picked))
    }
}

impl Recipe for Lightweight {
    fn embedder(&self) -> Option<&dyn crate::model::Embedder> {
        Some(&self.infer)
    }

    fn overlaps(&self) -> &[crate::data::decontam::Overlap] {
        &self.overlaps
    }

    fn data_digest(&self) -> &str {
        &self.digest
    }

    fn num_examples(&self) -> usize {
        self.src.len()
    }

    fn params(&self) -> Params {
        let mut p = self.encoder.trainable_params();
        p.extend("", self.head.params.clone());
        p
    }

    /// The generative loss is a mean over pairs; align and sim couple a batch's pairs only
    /// through their sentence vectors: shards run on separate cores.
    fn plan(&self) -> StepPlan {
        if self.encoder.device().is_cpu() {
            StepPlan::Coupled
        } else {
            StepPlan::Whole
        }
    }

    fn loss(&self, batch: &[usize], rng: &mut crate::model::TrainContext) -> Result<StepLoss> {
        let (gen, vectors) = self.shard_forward(batch, rng)?;
        let c = self.coupled_loss(batch, &vectors)?;
        let (mut terms, mut later) = (gen.terms, gen.later);
        terms.extend(c.terms);
        later.extend(c.later);
        Ok(StepLoss { total: (gen.total + c.total)?, terms, later, sentences: gen.sentences })
    }

    /// Masks, forward, and the generative loss of a shard (a mean over its pairs); the
    /// vectors are `[u | v]`, `[shard, 2H]`.
    fn shard_forward(&self, batch: &[usize], rng: &mut crate::model::TrainContext) -> Result<(StepLoss, Tensor)> {
        let b = batch.len();
        let task = self.cfg.generative;
        // Inputs: the batch's source sides, then its target sides; masks drawn from the RNG.
        let mut rows: Vec<Vec<u32>> =
            batch.iter().map(|&i| self.src[i].clone()).chain(batch.iter().map(|&i| self.tgt[i].clone())).collect();
        let mut masked: Vec<Option<(usize, u32)>> = vec![None; b];
        let mut picks: Vec<(usize, usize)> = Vec::new();
        let mut pick_labels: Vec<u32> = Vec::new();
        if task.single_mask() {
            for (k, m) in masked.iter_mut().enumerate() {
                let side = usize::from(rng.random_bool(0.5));
                let row = &mut rows[side * b + k];
                let pos = rng.random_range(0..row.len());
                *m = Some((side, row[pos]));
                row[pos] = self.mask_id;
            }
        } else if task.token_level() {
            for (r, row) in rows.iter_mut().enumerate() {
                let n = ((self.cfg.mlm_prob * row.len() as f64).round() as usize).clamp(1, row.len());
                let mut pos = sample(rng, row.len(), n).into_vec();
                pos.sort_unstable();
                for p in pos {
                    picks.push((r, p));
                    pick_labels.push(row[p]);
                    row[p] = self.mask_id;
                }
            }
        }
        let (pooled, states) = self.encode(&rows, &picks, &mut Mode::Train(rng))?;
        let vectors = Tensor::cat(&[pooled.narrow(0, 0, b)?, pooled.narrow(0, b, b)?], 1)?;

        // Terms as tensors, read once the backward is queued (on a GPU a read waits for it).
        let mut later = Vec::new();
        let mut gen = Tensor::zeros((), DType::F32, pooled.device())?;
        if task != Generative::None {
            let emb = self.encoder.encoder.word_embeddings();
            if task.sentence_level() {
                let mut q_src = Vec::with_capacity(b);
                let mut q_tgt = Vec::with_capacity(b);
                for (k, &i) in batch.iter().enumerate() {
                    let (qs, qt) = sentence_targets(task, &self.src[i], &self.tgt[i], masked[k]);
                    q_src.push(qs);
                    q_tgt.push(qt);
                }
                q_src.extend(q_tgt);
                let kl = kl_sparse(&self.head.logits(&pooled, emb)?, &q_src, b)?;
                later.push((if task == Generative::Smlm { "smlm" } else { "kl" }.to_string(), kl.clone()));
                gen = (gen + kl)?;
            }
            if let Some(states) = states {
                let logits = self.head.logits(&states, emb)?;
                let labels = Tensor::new(pick_labels, logits.device())?;
                // Mean over masked tokens, times two: one term per side of a pair, as Eq. 1.
                let mlm = (candle_nn::loss::cross_entropy(&logits, &labels)? * 2.0)?;
                later.push(("mlm".to_string(), mlm.clone()));
                gen = (gen + mlm)?;
            }
            gen = (gen * self.cfg.gen_weight)?;
        }
        Ok((StepLoss { total: gen, terms: Vec::new(), later, sentences: 2 * b }, vectors))
    }

    /// `align_weight · L_align + sim_weight · L_sim` of the batch's `[u | v]` rows.
    fn coupled_loss(&self, batch: &[usize], vectors: &Tensor) -> Result<StepLoss> {
        let h = self.cfg.hidden;
        let (u, v) = (vectors.narrow(1, 0, h)?, vectors.narrow(1, h, h)?);
        let mut later = Vec::new();
        let mut total = Tensor::zeros((), DType::F32, vectors.device())?;
        if self.cfg.align {
            let a = align_loss(&u, &v)?;
            later.push(("align".to_string(), a.clone()));
            total = (total + (a * self.cfg.align_weight)?)?;
        }
        if self.cfg.sim {
            let s = sim_loss(&u, &v)?;
            later.push(("sim".to_string(), s.clone()));
            total = (total + (s * self.cfg.sim_weight)?)?;
        }
        Ok(StepLoss { total, terms: Vec::new(), later, sentences: 2 * batch.len() })
    }

    fn begin_step(&mut self) -> Result<()> {
        self.compute.refresh(&self.encoder.encoder)
    }

    fn validate(&mut self) -> Result<Vec<(String, f64)>> {
        if self.val_src.is_empty() {
            bail!("no validation pairs: set data.val_size > 0");
        }
        let es = self.infer.embed_unchecked(&self.val_src, self.cfg.embed_batch_size)?;
        let et = self.infer.embed_unchecked(&self.val_tgt, self.cfg.embed_batch_size)?;
        let (xs, xt) = (Matrix::normalized(&es), Matrix::normalized(&et));
        let (a1, a2) = (translation_accuracy(&xs, &xt)?, translation_accuracy(&xt, &xs)?);
        Ok(vec![("acc_src2tgt".into(), a1), ("acc_tgt2src".into(), a2), ("acc_mean".into(), (a1 + a2) / 2.0)])
    }

    fn default_best(&self) -> (String, BestMode) {
        ("acc_mean".into(), BestMode::Max)
    }

    /// A BERT-family model directory with mean pooling and normalised output.
    fn save_model(&self, dir: &Path) -> Result<()> {
        let mut m = self.encoder.clone();
        m.normalize = true;
        m.save(dir)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The size check counts what `write_init` draws and the head adds, and refuses a model
    /// whose 16 bytes per parameter exceed the memory given; an absurd width (the probe's
    /// `hidden = 1000000`) is an error, not an aborted allocation.
    #[test]
    fn the_size_check_counts_the_model_and_refuses_what_cannot_fit() {
        let lc: LightweightConfig =
            toml::from_str("hidden = 32\nheads = 4\nffn = 64\nlayers = 2\nmax_length = 16").unwrap();
        let cfg = EncoderConfig::from_json(&lc.encoder_config(50, 0).to_string()).unwrap();
        let mut rng = Rng::seed_from_u64(1);
        let drawn: usize = weights::random_encoder_tensors(&cfg, &mut rng, &Device::Cpu)
            .unwrap()
            .values()
            .map(|t| t.elem_count())
            .sum();
        let head = Head::new(32, 50, &mut rng, &Device::Cpu).unwrap().params.num_elements();
        let need = 16 * (drawn + head) as u64;
        assert_eq!(cfg.num_parameters() as usize, drawn);
        check_model_fits(&lc, &cfg, Some(need)).unwrap();
        check_model_fits(&lc, &cfg, None).unwrap();
        let e = check_model_fits(&lc, &cfg, Some(need - 1)).unwrap_err().to_string();
        assert!(e.contains("lower lightweight.hidden"), "{e}");

        let wide: LightweightConfig = toml::from_str("hidden = 1000000\nheads = 8\nffn = 512").unwrap();
        let cfg = EncoderConfig::from_json(&wide.encoder_config(20000, 0).to_string()).unwrap();
        let e = check_model_fits(&wide, &cfg, Some(24 << 30)).unwrap_err().to_string();
        assert!(e.contains("needs at least") && e.contains("hidden 1000000"), "{e}");
    }

    fn dense(q: &[(u32, f32)], v: usize) -> Vec<f32> {
        let mut d = vec![0f32; v];
        for &(t, m) in q {
            d[t as usize] += m;
        }
        d
    }

    #[test]
    fn label_distributions_follow_eq_3_and_4() {
        // Source "a b b" = [1, 2, 2], target "c d" = [3, 4]; token 2 of the source masked.
        let (src, tgt) = ([1u32, 2, 2], [3u32, 4]);
        let (qs, qt) = sentence_targets(Generative::Xtr, &src, &tgt, None);
        assert_eq!(dense(&qs, 5), vec![0.0, 0.0, 0.0, 0.5, 0.5], "XTR: uniform over the partner's tokens");
        assert_eq!(dense(&qt, 5), vec![0.0, 0.5, 0.5, 0.0, 0.0], "distinct tokens (N_wi = 1)");
        let (qs, qt) = sentence_targets(Generative::Ugt, &src, &tgt, Some((0, 2)));
        assert_eq!(dense(&qs, 5), vec![0.0, 0.0, 0.5, 0.25, 0.25], "UGT masked side: ½ on w_t, ½ over the partner");
        assert_eq!(dense(&qt, 5), vec![0.0, 0.5, 0.5, 0.0, 0.0], "UGT unmasked side: XTR's q");
        // Masked on the target side, with w_t also a partner token: masses add up.
        let (qs, qt) = sentence_targets(Generative::Ugt, &[3, 4], &[3, 5], Some((1, 3)));
        assert_eq!(dense(&qs, 6), vec![0.0, 0.0, 0.0, 0.5, 0.0, 0.5]);
        assert_eq!(dense(&qt, 6), vec![0.0, 0.0, 0.0, 0.75, 0.25, 0.0]);
        let (qs, qt) = sentence_targets(Generative::Smlm, &src, &tgt, Some((1, 4)));
        assert_eq!(
            (dense(&qs, 5), dense(&qt, 5)),
            (vec![0.0, 0.0, 0.0, 0.0, 1.0], vec![0.0, 0.0, 0.0, 0.0, 1.0]),
            "SMLM: w_t from both sides"
        );
        for q in [qs, qt] {
            assert!((q.iter().map(|x| x.1).sum::<f32>() - 1.0).abs() < 1e-6);
        }
    }

    #[test]
    fn kl_by_hand() {
        let d = &Device::Cpu;
        // Row 0: logits (0, ln 3) → p = (¼, ¾); q = (½, ½): KL = ½ ln 2 + ½ ln(2/3).
        // Row 1: logits (0, 0) → p = (½, ½); q = (1, 0): KL = ln 2.
        let logits = Tensor::new(&[[0f32, 3f32.ln()], [0.0, 0.0]], d).unwrap();
        let q = vec![vec![(0, 0.5), (1, 0.5)], vec![(0, 1.0)]];
        let kl = kl_sparse(&logits, &q, 2).unwrap().to_scalar::<f32>().unwrap() as f64;
        let want = (0.5 * 2f64.ln() + 0.5 * (2.0 / 3f64).ln() + 2f64.ln()) / 2.0;
        assert!((kl - want).abs() < 1e-6, "{kl} vs {want}");
        // A prediction equal to q costs nothing.
        let logits = Tensor::new(&[[1f32, 1.0, -30.0]], d).unwrap();
        let kl = kl_sparse(&logits, &[vec![(0, 0.5), (1, 0.5)]], 1).unwrap().to_scalar::<f32>().unwrap();
        assert!(kl.abs() < 1e-6, "{kl}");
        assert!(kl_sparse(&logits, &[vec![(3, 1.0)]], 1).is_err(), "label outside the vocabulary");
    }

    #[test]
    fn align_and_sim_by_hand() {
        let d = &Device::Cpu;
        // u·vᵀ = [[1, 0], [0, 2]]: rows CE = (ln(1+e⁻¹) + ln(1+e⁻²)) / 2, columns the same.
        let u = Tensor::new(&[[1f32, 0.0], [0.0, 1.0]], d).unwrap();
        let v = Tensor::new(&[[1f32, 0.0], [0.0, 2.0]], d).unwrap();
        let a = align_loss(&u, &v).unwrap().to_scalar::<f32>().unwrap() as f64;
        let row = ((1.0 + (-1f64).exp()).ln() + (1.0 + (-2f64).exp()).ln()) / 2.0;
        assert!((a - 2.0 * row).abs() < 1e-6, "{a}");
        // u uᵀ = I → softmax rows (e/(e+1), 1/(e+1)); v vᵀ = diag(1, 4) → rows (e/(e+1), ...)
        // and (1/(1+e⁴), e⁴/(1+e⁴)).
        let s = sim_loss(&u, &v).unwrap().to_scalar::<f32>().unwrap() as f64;
        let e = 1f64.exp();
        let (p, r) = (e / (e + 1.0), (4f64).exp() / (1.0 + (4f64).exp()));
        let d1 = p - r; // row 1: (1−p) − (1−r) = r − p on column 0, p − r on column 1
        let want = -2.0 * (std::f64::consts::FRAC_PI_2 * d1).cos().ln() / 2.0;
        assert!((s - want).abs() < 1e-5, "{s} vs {want}");
        // Identical spaces: no similarity loss.
        assert!(sim_loss(&u, &u).unwrap().to_scalar::<f32>().unwrap().abs() < 1e-7);
    }
}
