//! Meaning / language autoencoder over a frozen multilingual encoder (Tiyajamorn et al. 2021,
//! seed 004 §3).
//!
//! The base encoder embeds every sentence once (cached on disk). For a parallel pair (s, t) and
//! random sentences s′ (the language of s) and t′ (the language of t), with ê_M = MLP_M(e) and
//! ê_L = MLP_L(e):
//!
//! - L_R = ‖e − (ê_M + ê_L)‖² / d, for s and for t (Eq. 2);
//! - L_M = (1 − cos(ŝ_M, t̂_M)) + max(0, cos(ŝ_M, ŝ′_M)) + max(0, cos(t̂_M, t̂′_M)) (Eq. 5–7);
//! - L_L = (2 − cos(ŝ_L, ŝ′_L) − cos(t̂_L, t̂′_L)) + CE(MLP_I(ŝ_L), lang s) + CE(MLP_I(t̂_L), lang t)
//!   (Eq. 8–11);
//! - L = L_R + L_M + L_L (Eq. 1), each term the mean over the batch. `meaning_loss = false` or
//!   `language_loss = false` drop L_M or L_L (the ablation of Table 6).
//!
//! Validation: the same loss on held-out pairs (fixed s′, t′), the early-stopping criterion of
//! the paper, plus language-identification accuracy and translation retrieval with the meaning
//! embeddings.

use crate::index::knn::{translation_accuracy, Matrix};
use crate::model::encoder::Rng;
use crate::model::kinds::disentangle::{self, BaseSettings, Head, Heads};
use crate::model::weights::Params;
use crate::model::{Embedded, Embedder, LoadOptions, SentenceEncoder};
use crate::train::config::{BestMode, Config, DisentangleConfig, MeaningInit};
use crate::train::recipe::{Recipe, StepLoss, StepPlan};
use crate::train::split::train_val_pairs;
use anyhow::{bail, Context, Result};
use candle_core::{DType, Device, Tensor, D};
use rand::{Rng as _, SeedableRng};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;

/// The mean of the table rows the training examples use (each distinct sentence once).
fn mean_row(table: &Tensor, train: &[Example]) -> Result<Tensor> {
    let mut rows: Vec<u32> = train.iter().flat_map(|e| [e.s, e.t]).collect();
    rows.sort_unstable();
    rows.dedup();
    Ok(table.index_select(&Tensor::new(rows, table.device())?, 0)?.mean(0)?)
}

/// One training example: a pair, as rows of the embedding table and language ids.
#[derive(Debug, Clone, Copy)]
struct Example {
    s: u32,
    t: u32,
    s_lang: u32,
    t_lang: u32,
}

pub struct Disentangle {
    /// [`crate::train::data_digest`] of the training and validation data.
    digest: String,
    cfg: DisentangleConfig,
    heads: Heads,
    /// Inference view of the heads (same storage, no autograd).
    infer: Heads,
    params: Params,
    /// Base embeddings `[sentences, d]`.
    table: Tensor,
    languages: Vec<String>,
    train: Vec<Example>,
    /// Training sentences of each language (rows of `table`), to draw s′ and t′ from.
    pools: Vec<Vec<u32>>,
    val: Vec<Example>,
    /// Fixed s′, t′ of each validation pair.
    val_negatives: Vec<(u32, u32)>,
    base: BaseSettings,
    /// The base encoder, kept only for the trainer's validation on scored pairs
    /// (`train.val_sts`), with the base embeddings of the texts it has seen: the same texts are
    /// scored at every validation, and only the heads change.
    live: Option<LiveBase>,
    /// What decontamination dropped.
    overlaps: Vec<crate::data::decontam::Overlap>,
}

struct LiveBase {
    encoder: SentenceEncoder,
    /// Text → (base embedding, was cut).
    seen: Mutex<HashMap<String, (Vec<f32>, bool)>>,
}

impl Disentangle {
    pub fn new(cfg: &Config, dc: &DisentangleConfig) -> Result<Self> {
        let dc = dc.clone();
        let mut decontam = crate::train::decontam::Decontam::new(cfg)?;
        let (train_pairs, val_pairs) = train_val_pairs(cfg, &mut decontam)?;
        let digest = crate::train::data_digest::pairs_digest(&train_pairs, &val_pairs);

        // Every distinct (sentence, language), sorted: the same sentences give the same cache key.
        let mut sentences: Vec<(String, String)> = Vec::new();
        for p in train_pairs.iter().chain(&val_pairs) {
            sentences.push((p.src.clone(), p.src_lang.clone()));
            sentences.push((p.tgt.clone(), p.tgt_lang.clone()));
        }
        sentences.sort_unstable();
        sentences.dedup();
        let row: HashMap<(&str, &str), u32> =
            sentences.iter().enumerate().map(|(i, (s, l))| ((s.as_str(), l.as_str()), i as u32)).collect();
        let mut languages: Vec<String> = sentences.iter().map(|(_, l)| l.clone()).collect();
        languages.sort_unstable();
        languages.dedup();
        if languages.len() < 2 {
            bail!("the disentangle recipe needs pairs in at least two languages; the data has {:?}", languages);
        }
        let lang_id: HashMap<&str, u32> = languages.iter().enumerate().map(|(i, l)| (l.as_str(), i as u32)).collect();
        let example = |p: &crate::data::bitext::Pair| Example {
            s: row[&(p.src.as_str(), p.src_lang.as_str())],
            t: row[&(p.tgt.as_str(), p.tgt_lang.as_str())],
            s_lang: lang_id[p.src_lang.as_str()],
            t_lang: lang_id[p.tgt_lang.as_str()],
        };
        let train: Vec<Example> = train_pairs.iter().map(example).collect();
        let val: Vec<Example> = val_pairs.iter().map(example).collect();
        let pools = language_pools(&train, languages.len());
        let val_pools = language_pools(&val, languages.len());

        let device = crate::device::parse_device(&cfg.train.device)?;
        let opts = LoadOptions {
            device: device.clone(),
            prefix: Some(dc.prefix.clone()),
            pooling: dc.pooling,
            max_length: Some(dc.max_length),
            normalize: Some(dc.normalize_input),
            ..Default::default()
        };
        let base_enc =
            SentenceEncoder::load(&dc.base, &opts).with_context(|| format!("loading the base encoder {}", dc.base))?;
        let texts: Vec<String> = sentences.iter().map(|(s, _)| s.clone()).collect();
        let (rows, dim) = crate::train::cache::embeddings(&base_enc, &texts, dc.embed_batch_size, "base")?;
        let table = Tensor::from_vec(rows, (texts.len(), dim), &Device::Cpu)?.to_device(&device)?;
        let base = BaseSettings {
            model: dc.base.clone(),
            resolved: std::fs::canonicalize(&dc.base).ok().filter(|p| p.is_dir()).map(|p| p.display().to_string()),
            prefix: base_enc.prefix.clone(),
            pooling: base_enc.pooling,
            max_length: base_enc.max_length,
            normalize: dc.normalize_input,
        };
        // Only `train.val_sts` embeds new text while training; otherwise free the encoder.
        let live =
            cfg.train.val_sts.is_some().then(|| LiveBase { encoder: base_enc, seen: Mutex::new(HashMap::new()) });

        let mut init_rng = Rng::seed_from_u64(cfg.seed ^ 0xd15e);
        let mut heads = Heads::random(dim, languages.len(), &mut init_rng, &device)?;
        if dc.meaning_init != MeaningInit::Random {
            heads.meaning.weight = Tensor::eye(dim, DType::F32, &device)?;
            heads.meaning.bias = match dc.meaning_init {
                MeaningInit::Centered => mean_row(&table, &train)?.neg()?,
                _ => Tensor::zeros(dim, DType::F32, &device)?,
            };
        }
        let params = heads.make_trainable()?;
        let infer = heads.detached();
        let mut val_rng = Rng::seed_from_u64(cfg.seed ^ 0x7a1);
        let val_negatives = val
            .iter()
            .map(|e| {
                (
                    draw(&val_pools[e.s_lang as usize], e.s, &mut val_rng),
                    draw(&val_pools[e.t_lang as usize], e.t, &mut val_rng),
                )
            })
            .collect();
        Ok(Self {
            digest,
            cfg: dc,
            heads,
            infer,
            params,
            table,
            languages,
            train,
            pools,
            val,
            val_negatives,
            base,
            live,
            overlaps: decontam.overlaps,
        })
    }

    /// The loss terms of examples with their s′, t′, and the number of pairs.
    fn losses(&self, heads: &Heads, ex: &[Example], neg: &[(u32, u32)]) -> Result<Terms> {
        let b = ex.len();
        let idx: Vec<u32> = ex
            .iter()
            .map(|e| e.s)
            .chain(ex.iter().map(|e| e.t))
            .chain(neg.iter().map(|n| n.0))
            .chain(neg.iter().map(|n| n.1))
            .collect();
        let e = self.table.index_select(&Tensor::new(idx, self.table.device())?, 0)?;
        let (m, l) = heads.split(&e)?;
        let part = |x: &Tensor, k: usize| x.narrow(0, k * b, b);
        let d = e.dim(1)? as f64;
        // L_R on s and t.
        let st = e.narrow(0, 0, 2 * b)?;
        let recon = st
            .sub(&m.narrow(0, 0, 2 * b)?.add(&l.narrow(0, 0, 2 * b)?)?)?
            .sqr()?
            .sum(D::Minus1)?
            .affine(1.0 / d, 0.0)?;
        let l_r = (part(&recon, 0)?.mean_all()? + part(&recon, 1)?.mean_all()?)?;
        // L_M.
        let (sm, tm, sm2, tm2) = (part(&m, 0)?, part(&m, 1)?, part(&m, 2)?, part(&m, 3)?);
        let l_m_align = cosine(&sm, &tm)?.affine(-1.0, 1.0)?.mean_all()?;
        let l_m_neg = (cosine(&sm, &sm2)?.relu()?.mean_all()? + cosine(&tm, &tm2)?.relu()?.mean_all()?)?;
        // L_L: similarity of same-language language embeddings, and language identification.
        let (sl, tl, sl2, tl2) = (part(&l, 0)?, part(&l, 1)?, part(&l, 2)?, part(&l, 3)?);
        let l_sim =
            (cosine(&sl, &sl2)?.affine(-1.0, 1.0)?.mean_all()? + cosine(&tl, &tl2)?.affine(-1.0, 1.0)?.mean_all()?)?;
        let logits = heads.langid.forward(&l.narrow(0, 0, 2 * b)?)?;
        let labels: Vec<u32> = ex.iter().map(|e| e.s_lang).chain(ex.iter().map(|e| e.t_lang)).collect();
        let labels = Tensor::new(labels, logits.device())?;
        // Cross-entropy for s plus for t = 2 × the mean over the 2B rows.
        let l_id = candle_nn::loss::cross_entropy(&logits, &labels)?.affine(2.0, 0.0)?;
        let correct = logits.argmax(1)?.eq(&labels)?.to_dtype(DType::F32)?.sum_all()?.to_scalar::<f32>()? as f64;
        Ok(Terms { l_r, l_m_align, l_m_neg, l_sim, l_id, langid_correct: correct, rows: 2 * b })
    }

    fn total(&self, t: &Terms) -> Result<Tensor> {
        let mut total = t.l_r.affine(self.cfg.reconstruction_weight, 0.0)?;
        if self.cfg.meaning_loss {
            total = (total + &t.l_m_align)?;
            if self.cfg.meaning_negatives {
                total = (total + &t.l_m_neg)?;
            }
        }
        if self.cfg.language_loss {
            total = ((total + &t.l_sim)? + &t.l_id)?;
        }
        Ok(total)
    }
}

/// The loss terms of a batch (scalars) and the language-id hits.
struct Terms {
    l_r: Tensor,
    /// L_M's translation term `1 − cos(ŝ_M, t̂_M)`.
    l_m_align: Tensor,
    /// L_M's negative terms `max(0, cos(ŝ_M, ŝ′_M)) + max(0, cos(t̂_M, t̂′_M))`.
    l_m_neg: Tensor,
    l_sim: Tensor,
    l_id: Tensor,
    langid_correct: f64,
    rows: usize,
}

impl Terms {
    fn scalars(&self) -> Result<Vec<(String, f64)>> {
        let v = |t: &Tensor| -> Result<f64> { Ok(t.to_scalar::<f32>()? as f64) };
        Ok(vec![
            ("l_r".into(), v(&self.l_r)?),
            ("l_m".into(), v(&self.l_m_align)? + v(&self.l_m_neg)?),
            ("l_m_align".into(), v(&self.l_m_align)?),
            ("l_m_neg".into(), v(&self.l_m_neg)?),
            ("l_l_sim".into(), v(&self.l_sim)?),
            ("l_l_id".into(), v(&self.l_id)?),
        ])
    }
}

/// Row-wise cosine similarity `[B]` of two `[B, d]` tensors.
fn cosine(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    let dot = a.mul(b)?.sum(D::Minus1)?;
    let na = a.sqr()?.sum(D::Minus1)?.sqrt()?;
    let nb = b.sqr()?.sum(D::Minus1)?.sqrt()?;
    Ok(dot.div(&(na.mul(&nb)? + 1e-8)?)?)
}

/// The distinct sentences of each language among the examples.
fn language_pools(ex: &[Example], languages: usize) -> Vec<Vec<u32>> {
    let mut pools = vec![Vec::new(); languages];
    for e in ex {
        pools[e.s_lang as usize].push(e.s);
        pools[e.t_lang as usize].push(e.t);
    }
    for p in &mut pools {
        p.sort_unstable();
        p.dedup();
    }
    pools
}

/// A sentence of `pool` other than `not` (when the pool has another).
fn draw(pool: &[u32], not: u32, rng: &mut Rng) -> u32 {
    if pool.len() < 2 {
        return pool.first().copied().unwrap_or(not);
    }
    loop {
        let x = pool[rng.random_range(0..pool.len())];
        if x != not {
            return x;
        }
    }
}

impl Recipe for Disentangle {
    fn overlaps(&self) -> &[crate::data::decontam::Overlap] {
        &self.overlaps
    }

    fn data_digest(&self) -> &str {
        &self.digest
    }

    fn num_examples(&self) -> usize {
        self.train.len()
    }

    fn params(&self) -> Params {
        self.params.clone()
    }

    fn lr_scale(&self, param: &str) -> f64 {
        if param.starts_with("meaning.") {
            self.cfg.meaning_lr_scale
        } else {
            1.0
        }
    }

    fn plan(&self) -> StepPlan {
        if self.table.device().is_cpu() {
            StepPlan::Sharded
        } else {
            StepPlan::Whole
        }
    }

    fn loss(&self, batch: &[usize], rng: &mut crate::model::TrainContext) -> Result<StepLoss> {
        let ex: Vec<Example> = batch.iter().map(|&i| self.train[i]).collect();
        let neg: Vec<(u32, u32)> = ex
            .iter()
            .map(|e| (draw(&self.pools[e.s_lang as usize], e.s, rng), draw(&self.pools[e.t_lang as usize], e.t, rng)))
            .collect();
        let t = self.losses(&self.heads, &ex, &neg)?;
        Ok(StepLoss { total: self.total(&t)?, terms: t.scalars()?, later: Vec::new(), sentences: 4 * ex.len() })
    }

    fn validate(&mut self) -> Result<Vec<(String, f64)>> {
        if self.val.is_empty() {
            bail!("no validation pairs: set data.val_size > 0");
        }
        let mut sums: Vec<(String, f64)> = Vec::new();
        let (mut total, mut correct, mut rows) = (0.0, 0.0, 0usize);
        for (ex, neg) in self.val.chunks(1024).zip(self.val_negatives.chunks(1024)) {
            let t = self.losses(&self.infer, ex, neg)?;
            let w = ex.len() as f64;
            total += self.total(&t)?.to_scalar::<f32>()? as f64 * w;
            for (i, (name, v)) in t.scalars()?.into_iter().enumerate() {
                match sums.get_mut(i) {
                    Some(s) => s.1 += v * w,
                    None => sums.push((name, v * w)),
                }
            }
            correct += t.langid_correct;
            rows += t.rows;
        }
        let n = self.val.len() as f64;
        let mut out = vec![("loss".to_string(), total / n)];
        out.extend(sums.into_iter().map(|(k, v)| (k, v / n)));
        out.push(("langid_acc".into(), 100.0 * correct / rows as f64));
        // Translation retrieval with the meaning embeddings, t → s and s → t.
        let rows_of = |f: fn(&Example) -> u32| -> Result<Vec<Vec<f32>>> {
            let idx: Vec<u32> = self.val.iter().map(f).collect();
            let e = self.table.index_select(&Tensor::new(idx, self.table.device())?, 0)?;
            Ok(self.infer.meaning.forward(&e)?.to_vec2()?)
        };
        let (s, t) = (Matrix::normalized(&rows_of(|e| e.s)?), Matrix::normalized(&rows_of(|e| e.t)?));
        let acc = translation_accuracy;
        out.push(("meaning_acc_mean".into(), (acc(&s, &t)? + acc(&t, &s)?) / 2.0));
        Ok(out)
    }

    fn embedder(&self) -> Option<&dyn Embedder> {
        self.live.as_ref().map(|_| self as &dyn Embedder)
    }

    fn default_best(&self) -> (String, BestMode) {
        ("loss".into(), BestMode::Min)
    }

    fn save_model(&self, dir: &Path) -> Result<()> {
        disentangle::save(dir, &self.heads, &self.base, &self.languages)
    }
}

/// The meaning embeddings of the heads being trained (the trainer's `train.val_sts`): what the
/// saved model gives, up to the output normalisation, which cosine does not see.
impl Embedder for Disentangle {
    fn dim(&self) -> usize {
        self.heads.dim()
    }

    fn embed_checked(&self, texts: &[&str], batch_size: usize) -> Result<Embedded> {
        let live = self.live.as_ref().context("the base encoder was not kept: train.val_sts is not set")?;
        let mut seen =
            live.seen.lock().map_err(|_| anyhow::anyhow!("the base-embedding memo was poisoned by a panic"))?;
        let mut new: Vec<&str> = texts.iter().copied().filter(|t| !seen.contains_key(*t)).collect();
        new.sort_unstable();
        new.dedup();
        if !new.is_empty() {
            let e = live.encoder.embed_checked(&new, batch_size)?;
            for ((t, row), cut) in new.iter().zip(e.rows).zip(e.truncated) {
                seen.insert(t.to_string(), (row, cut));
            }
        }
        let rows: Vec<&[f32]> = texts.iter().map(|t| seen[*t].0.as_slice()).collect();
        Ok(Embedded {
            rows: self.infer.apply(Head::Meaning, &rows, false, self.table.device())?,
            truncated: texts.iter().map(|t| seen[*t].1).collect(),
        })
    }

    fn prefix(&self) -> &str {
        &self.base.prefix
    }

    fn max_length(&self) -> Option<usize> {
        Some(self.base.max_length)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::encoder::Linear;

    fn linear(w: Vec<f32>, out: usize, inp: usize) -> Linear {
        Linear::new(
            Tensor::from_vec(w, (out, inp), &Device::Cpu).unwrap(),
            Tensor::zeros(out, DType::F32, &Device::Cpu).unwrap(),
        )
    }

    /// Two-dimensional embeddings, meaning head = identity, language head = zero, langid = zero:
    /// every term can be worked out by hand.
    fn recipe(meaning_loss: bool, language_loss: bool) -> Disentangle {
        // Rows: s = (1, 0), t = (2, 0), s′ = (0, 1), t′ = (−1, 0).
        let table = Tensor::from_vec(vec![1f32, 0., 2., 0., 0., 1., -1., 0.], (4, 2), &Device::Cpu).unwrap();
        let heads = Heads {
            meaning: linear(vec![1., 0., 0., 1.], 2, 2),
            language: linear(vec![0.; 4], 2, 2),
            langid: linear(vec![0.; 6], 3, 2),
        };
        let cfg = DisentangleConfig {
            base: String::new(),
            prefix: String::new(),
            pooling: None,
            max_length: 8,
            normalize_input: false,
            meaning_loss,
            meaning_negatives: true,
            language_loss,
            reconstruction_weight: 1.0,
            meaning_lr_scale: 1.0,
            embed_batch_size: 1,
            meaning_init: MeaningInit::Random,
        };
        let ex = Example { s: 0, t: 1, s_lang: 0, t_lang: 2 };
        Disentangle {
            digest: String::new(),
            cfg,
            infer: heads.clone(),
            heads,
            params: Params::default(),
            table,
            languages: vec!["a".into(), "b".into(), "c".into()],
            train: vec![ex],
            pools: vec![vec![0, 2], vec![], vec![1, 3]],
            val: vec![ex],
            val_negatives: vec![(2, 3)],
            base: BaseSettings {
                model: String::new(),
                resolved: None,
                prefix: String::new(),
                pooling: crate::model::Pooling::Mean,
                max_length: 8,
                normalize: false,
            },
            live: None,
            overlaps: Vec::new(),
        }
    }

    #[test]
    fn loss_terms_match_a_hand_computed_case() {
        let r = recipe(true, true);
        let t = r.losses(&r.heads, &r.train, &[(2, 3)]).unwrap();
        let v: HashMap<String, f64> = t.scalars().unwrap().into_iter().collect();
        // ê_M + ê_L = e: nothing to reconstruct.
        assert!(v["l_r"].abs() < 1e-6, "{v:?}");
        // 1 − cos((1,0),(2,0)) = 0; max(0, cos(s, s′)) = 0; max(0, cos(t, t′)) = max(0, −1) = 0.
        assert!(v["l_m"].abs() < 1e-6, "{v:?}");
        // Zero language embeddings: both cosines are 0, so 2 − 0 − 0.
        assert!((v["l_l_sim"] - 2.0).abs() < 1e-6, "{v:?}");
        // Uniform logits over 3 languages: ln 3 for s plus ln 3 for t.
        assert!((v["l_l_id"] - 2.0 * 3f64.ln()).abs() < 1e-5, "{v:?}");
        let total = r.total(&t).unwrap().to_scalar::<f32>().unwrap() as f64;
        assert!((total - (2.0 + 2.0 * 3f64.ln())).abs() < 1e-5, "{total}");
        // The ablations drop their terms from the total.
        let no_lang = recipe(true, false);
        assert!(no_lang.total(&t).unwrap().to_scalar::<f32>().unwrap().abs() < 1e-6);
        let no_meaning = recipe(false, true);
        let t2 = Terms {
            l_m_align: Tensor::new(5f32, &Device::Cpu).unwrap(),
            l_m_neg: Tensor::new(3f32, &Device::Cpu).unwrap(),
            ..t
        };
        assert!((no_meaning.total(&t2).unwrap().to_scalar::<f32>().unwrap() as f64 - total).abs() < 1e-5);
    }

    #[test]
    fn the_negative_terms_of_l_m_can_be_dropped() {
        // s′ = (2, 0): cos(s, s′) = 1 counts; t′ = (−1, 0): cos(t, t′) = −1 is cut at 0.
        let mut r = recipe(true, true);
        let t = r.losses(&r.heads, &r.train, &[(1, 3)]).unwrap();
        let v: HashMap<String, f64> = t.scalars().unwrap().into_iter().collect();
        assert!(
            v["l_m_align"].abs() < 1e-6 && (v["l_m_neg"] - 1.0).abs() < 1e-6 && (v["l_m"] - 1.0).abs() < 1e-6,
            "{v:?}"
        );
        let with = r.total(&t).unwrap().to_scalar::<f32>().unwrap() as f64;
        assert!((with - (1.0 + 2.0 + 2.0 * 3f64.ln())).abs() < 1e-5, "{with}");
        r.cfg.meaning_negatives = false;
        let without = r.total(&t).unwrap().to_scalar::<f32>().unwrap() as f64;
        assert!((without - (2.0 + 2.0 * 3f64.ln())).abs() < 1e-5, "{without}");
    }

    #[test]
    fn a_reconstruction_error_is_the_mean_squared_residual() {
        let mut r = recipe(true, true);
        // Meaning head ½·I: residual e/2, ‖e/2‖²/d = (¼ + 1)/2 for s = (1,0) and t = (2,0) summed.
        r.heads.meaning = linear(vec![0.5, 0., 0., 0.5], 2, 2);
        let t = r.losses(&r.heads, &r.train, &[(2, 3)]).unwrap();
        let v: HashMap<String, f64> = t.scalars().unwrap().into_iter().collect();
        assert!((v["l_r"] - (0.25 / 2.0 + 1.0 / 2.0)).abs() < 1e-6, "{v:?}");
        // The total counts it with its weight.
        let total = |r: &Disentangle| r.total(&t).unwrap().to_scalar::<f32>().unwrap() as f64;
        let others = total(&r) - v["l_r"];
        r.cfg.reconstruction_weight = 10.0;
        assert!((total(&r) - (others + 10.0 * v["l_r"])).abs() < 1e-5, "{}", total(&r));
        for bad in [-1.0, f64::NAN, f64::INFINITY] {
            r.cfg.reconstruction_weight = bad;
            assert!(r.cfg.validate().unwrap_err().to_string().contains("reconstruction_weight"), "{bad}");
        }
    }

    #[test]
    fn meaning_lr_scale_applies_to_the_meaning_head_alone() {
        let mut r = recipe(true, true);
        r.cfg.meaning_lr_scale = 0.1;
        assert_eq!(r.lr_scale("meaning.weight"), 0.1);
        assert_eq!(r.lr_scale("meaning.bias"), 0.1);
        assert_eq!(r.lr_scale("language.weight"), 1.0);
        assert_eq!(r.lr_scale("langid.bias"), 1.0);
        for bad in [-0.1, f64::NAN, f64::INFINITY] {
            r.cfg.meaning_lr_scale = bad;
            assert!(r.cfg.validate().unwrap_err().to_string().contains("meaning_lr_scale"), "{bad}");
        }
    }

    #[test]
    fn random_sentences_are_of_the_language_and_not_the_sentence_itself() {
        let mut rng = Rng::seed_from_u64(1);
        for _ in 0..100 {
            assert_eq!(draw(&[4, 9], 4, &mut rng), 9);
        }
        assert_eq!(draw(&[4], 4, &mut rng), 4);
        let pools = language_pools(
            &[Example { s: 0, t: 1, s_lang: 0, t_lang: 1 }, Example { s: 2, t: 1, s_lang: 0, t_lang: 1 }],
            2,
        );
        assert_eq!(pools, vec![vec![0, 2], vec![1]]);
    }

    #[test]
    fn validation_reports_the_loss_and_language_id() {
        let mut r = recipe(true, true);
        let v: HashMap<String, f64> = r.validate().unwrap().into_iter().collect();
        assert!((v["loss"] - (2.0 + 2.0 * 3f64.ln())).abs() < 1e-5, "{v:?}");
        // Uniform logits: argmax is class 0, right for s (language 0), wrong for t (language 2).
        assert!((v["langid_acc"] - 50.0).abs() < 1e-9, "{v:?}");
        assert!((v["meaning_acc_mean"] - 100.0).abs() < 1e-9, "{v:?}");
    }

    #[test]
    fn centred_init_subtracts_the_mean_of_the_training_sentences_once_each() {
        // Rows 0..4; the training examples use rows 0, 1 and (twice) 2; row 3 is validation only.
        let table = Tensor::from_vec(vec![1f32, 0., 3., 0., 2., 6., 100., 100.], (4, 2), &Device::Cpu).unwrap();
        let ex = |s, t| Example { s, t, s_lang: 0, t_lang: 1 };
        let mu = mean_row(&table, &[ex(0, 2), ex(1, 2)]).unwrap().to_vec1::<f32>().unwrap();
        assert_eq!(mu, vec![2.0, 2.0]);
    }
}
