//! DuEAM: a dual encoder with an anchor and a learner (seed 000 §3, Eq. 1–2).
//!
//! For a pair of sentences (s, t) — not translations: XNLI premise–hypothesis pairs within and
//! across languages (weakly supervised) or random pairs (unsupervised), see [`crate::data::xnli`] —
//! the frozen **anchor** gives contextual token vectors of both sentences and their Word Mover's
//! Distance `d_wmd(s, t)` (a constant, no gradient; [`super::wmd`]); the trainable **learner**
//! gives mean-pooled sentence vectors s′, t′ (not normalised). Over a batch of N pairs
//!
//! - `L_A = 1/N Σ exp(| exp(−‖s′ − t′‖) − exp(−d_wmd(s, t)) |)` (Eq. 1),
//! - `L_B = 1/N Σ cos(s′, t′)` (Eq. 2),
//! - minimise `L = L_A − λ·L_B` (§3.3), or `L_A` alone, or `−L_B` alone (the ablation, Fig. 2).
//!
//! The anchor's token vectors are, by default, the last layer's, L2-normalised, without special
//! tokens (MoverScore-style, §4); padding is never part of a sentence's cloud. WMDs are computed
//! per batch (each shard on its own core) and kept in memory by example, so a later epoch reuses
//! them. Validation: translation retrieval accuracy both ways on held-out parallel sentences.

use super::wmd::{wmd_batch, SinkhornOptions, Solver};
use crate::data::bitext::Pair;
use crate::data::xnli::{unsup_pairs, weak_pairs, PairSet};
use crate::index::knn::{translation_accuracy, Matrix};
use crate::model::weights::Params;
use crate::model::{LoadOptions, Mode, Pooling, SentenceEncoder};
use crate::train::ahead::{distinct, AheadJob, Prepared, StepBatches, TokenMap, TokensAhead};
use crate::train::config::{BestMode, Config, DueamConfig, LossTerms, PairKind, SolverKind};
use crate::train::precision::Compute;
use crate::train::recipe::{Recipe, StepLoss, StepPlan};
use anyhow::{bail, Context, Result};
use candle_core::Tensor;
use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;
use std::time::Instant;

impl DueamConfig {
    fn solver(&self) -> Solver {
        match self.wmd_solver {
            SolverKind::Exact => Solver::Exact,
            SolverKind::Sinkhorn => Solver::Sinkhorn(SinkhornOptions {
                eps: self.sinkhorn_eps,
                tol: self.sinkhorn_tol,
                max_iter: self.sinkhorn_max_iter,
            }),
        }
    }
}

/// One held-out parallel set.
/// [`crate::train::data_digest`] of the training pairs (their sentences, pairs and kinds) and
/// the validation sets.
fn data_digest(data: &PairSet, val: &[ValSet]) -> String {
    let mut d = crate::train::data_digest::DataDigest::new();
    d.number(data.sentences.len() as u64);
    for s in &data.sentences {
        d.text(s);
    }
    d.number(data.pairs.len() as u64);
    for (&(a, b), &mono) in data.pairs.iter().zip(&data.mono) {
        d.number(a as u64).number(b as u64).number(mono as u64);
    }
    for v in val {
        d.text(&v.name).pairs(&v.pairs);
    }
    d.finish()
}

struct ValSet {
    name: String,
    pairs: Vec<Pair>,
}

pub struct Dueam {
    /// [`crate::train::data_digest`] of the training and validation data.
    digest: String,
    learner: SentenceEncoder,
    /// Inference view of the learner (same storage, no autograd).
    infer: SentenceEncoder,
    anchor: Option<SentenceEncoder>,
    data: PairSet,
    val: Vec<ValSet>,
    lambda: f64,
    terms: LossTerms,
    wmd_layer: Option<usize>,
    wmd_normalize: bool,
    wmd_skip_special: bool,
    solver: Solver,
    embed_batch: usize,
    /// WMD of each training example computed so far.
    wmd_cache: Mutex<HashMap<usize, f64>>,
    /// What decontamination dropped.
    overlaps: Vec<crate::data::decontam::Overlap>,
    /// The learner's encoder as the training forward runs it (`train.precision`).
    compute: Compute,
    /// The next step's pairs tokenised ahead for the learner (`train.ahead`).
    tokens: TokensAhead,
}

/// What [`Dueam`]'s job prepares ahead: the learner's tokens and the WMDs of the step's pairs
/// not yet in the cache.
struct DueamAhead {
    tokens: TokenMap,
    wmds: Vec<(usize, f64)>,
}

impl Dueam {
    pub fn new(cfg: &Config, dc: &DueamConfig) -> Result<Self> {
        dc.validate()?;
        // Before the pairs are built: a learner that cannot be trained is refused at once.
        crate::model::quantized::refuse_for_training(&dc.learner).with_context(|| format!("learner {}", dc.learner))?;
        let t0 = Instant::now();
        let data = match dc.pairs {
            PairKind::Weak => weak_pairs(&dc.xnli_dir, &dc.splits, &dc.langs, dc.cross_lingual),
            PairKind::Unsup => unsup_pairs(&dc.xnli_dir, &dc.splits, &dc.langs, dc.unsup_pairs, cfg.seed),
        }
        .with_context(|| format!("dueam: building the {:?} training pairs from {}", dc.pairs, dc.xnli_dir.display()))?;
        let mut decontam = crate::train::decontam::Decontam::new(cfg)?;
        let data = decontam.pair_set("dueam.xnli_dir", data);
        let build_s = t0.elapsed().as_secs_f64();
        let mut val = Vec::new();
        for (i, s) in dc.val_sources.iter().enumerate() {
            let pairs = s.read().with_context(|| format!("dueam.val_sources[{i}]"))?;
            if pairs.is_empty() {
                bail!("dueam.val_sources[{i}] has no pairs");
            }
            let name = format!("{}-{}", pairs[0].src_lang, pairs[0].tgt_lang);
            if val.iter().any(|v: &ValSet| v.name == name) {
                bail!("dueam.val_sources[{i}]: a second validation set named {name:?}; set src_lang/tgt_lang to tell them apart");
            }
            val.push(ValSet { name, pairs });
        }
        let device = crate::device::parse_device(&cfg.train.device)?;
        let anchor = if dc.loss == LossTerms::Cos {
            None
        } else {
            let opts = LoadOptions {
                device: device.clone(),
                prefix: Some(dc.anchor_prefix.clone()),
                max_length: Some(dc.max_length),
                ..Default::default()
            };
            let a =
                SentenceEncoder::load(&dc.anchor, &opts).with_context(|| format!("loading anchor {}", dc.anchor))?;
            if let Some(l) = dc.wmd_layer {
                if l > a.encoder.num_layers() {
                    bail!("dueam.wmd_layer = {l} but the anchor {} has {} layers", dc.anchor, a.encoder.num_layers());
                }
            }
            Some(a)
        };
        let data = match &anchor {
            Some(a) => drop_tokenless(data, a, dc.wmd_skip_special)?,
            None => data,
        };
        // Counted after the pairs without tokens are left out: the pairs that are trained on.
        let mut used = vec![false; data.sentences.len()];
        data.pairs.iter().for_each(|&(a, b)| (used[a as usize], used[b as usize]) = (true, true));
        errln!(
            "xsent train: {} training pairs ({} monolingual, {} cross-lingual) over {} distinct sentences ({:.1} s)",
            data.len(),
            data.monolingual(),
            data.len() - data.monolingual(),
            used.iter().filter(|&&u| u).count(),
            build_s
        );
        let opts = LoadOptions {
            prefix: Some(dc.learner_prefix.clone()),
            layers: dc.learner_layers,
            pooling: Some(Pooling::Mean),
            max_length: Some(dc.max_length),
            normalize: Some(dc.learner_normalize),
            trainable: true,
            device,
            ..Default::default()
        };
        let mut learner =
            SentenceEncoder::load(&dc.learner, &opts).with_context(|| format!("loading learner {}", dc.learner))?;
        if let Some(p) = dc.dropout {
            learner.encoder.hidden_dropout = p;
            learner.encoder.attention_dropout = p;
        }
        let infer = learner.detached();
        let compute = Compute::new(cfg.train.precision, learner.device());
        let digest = data_digest(&data, &val);
        Ok(Self {
            digest,
            learner,
            infer,
            anchor,
            data,
            val,
            lambda: dc.lambda,
            terms: dc.loss,
            wmd_layer: dc.wmd_layer,
            wmd_normalize: dc.wmd_normalize,
            wmd_skip_special: dc.wmd_skip_special,
            solver: dc.solver(),
            embed_batch: dc.embed_batch_size.max(1),
            wmd_cache: Mutex::new(HashMap::new()),
            overlaps: decontam.overlaps,
            compute,
            tokens: TokensAhead::default(),
        })
    }

    /// The texts of examples as the anchor takes them: each pair's two sentences.
    fn pair_texts(&self, examples: &[usize]) -> Vec<&str> {
        examples
            .iter()
            .flat_map(|&i| {
                let (a, b) = self.data.pair(i);
                [a, b]
            })
            .collect()
    }

    /// The anchor's token clouds of examples' pairs ([`anchor_clouds`], two per example).
    fn clouds(&self, examples: &[usize]) -> Result<Vec<Vec<f32>>> {
        let anchor = self.anchor.as_ref().expect("an anchor when L_A is used");
        let texts = self.pair_texts(examples);
        anchor_clouds(anchor, &texts, self.wmd_layer, self.wmd_skip_special, self.wmd_normalize, self.embed_batch)
    }

    /// The WMDs of the next step's pairs that the step would compute (those neither in the cache
    /// nor in this step), grouped as the step would group them (a shard's, per micro-batch):
    /// the anchor's forward here (device work, on the trainer's thread; the groups on separate
    /// cores on the CPU), the solver in the returned job.
    fn wmd_ahead(&self, now: &StepBatches, next: &StepBatches) -> Result<impl FnOnce() -> Result<Vec<(usize, f64)>>> {
        let mut known: std::collections::HashSet<usize> =
            self.wmd_cache.lock().expect("no worker panicked").keys().copied().collect();
        known.extend(now.iter().flatten().flatten());
        let mut groups: Vec<Vec<usize>> = Vec::new();
        for micro in next {
            groups.extend(micro.iter().map(|shard| shard.iter().copied().filter(|i| !known.contains(i)).collect()));
            known.extend(micro.iter().flatten());
        }
        groups.retain(|g| !g.is_empty());
        let clouds: Vec<Vec<Vec<f32>>> = if self.learner.device().is_cpu() {
            crate::train::shards::par_map(groups.len(), |g| self.clouds(&groups[g]))
                .into_iter()
                .collect::<Result<_>>()?
        } else {
            groups.iter().map(|g| self.clouds(g)).collect::<Result<_>>()?
        };
        let dim = self.anchor.as_ref().expect("an anchor when L_A is used").encoder.hidden_size();
        let solver = self.solver;
        Ok(move || {
            let mut out = Vec::new();
            for (g, c) in groups.iter().zip(&clouds) {
                let pairs: Vec<(&[f32], &[f32])> =
                    c.chunks_exact(2).map(|c| (c[0].as_slice(), c[1].as_slice())).collect();
                out.extend(g.iter().copied().zip(wmd_batch(&pairs, dim, &solver)?));
            }
            Ok(out)
        })
    }

    /// The anchor's WMD of each example (from the cache, or computed now).
    fn anchor_wmd(&self, batch: &[usize]) -> Result<Vec<f64>> {
        let anchor = self.anchor.as_ref().expect("an anchor when L_A is used");
        let todo: Vec<usize> = {
            let cache = self.wmd_cache.lock().expect("no worker panicked");
            batch.iter().copied().filter(|i| !cache.contains_key(i)).collect()
        };
        if !todo.is_empty() {
            let clouds = self.clouds(&todo)?;
            let dim = anchor.encoder.hidden_size();
            let pairs: Vec<(&[f32], &[f32])> =
                clouds.chunks_exact(2).map(|c| (c[0].as_slice(), c[1].as_slice())).collect();
            let d = wmd_batch(&pairs, dim, &self.solver)?;
            let mut cache = self.wmd_cache.lock().expect("no worker panicked");
            for (&i, v) in todo.iter().zip(d) {
                cache.insert(i, v);
            }
        }
        let cache = self.wmd_cache.lock().expect("no worker panicked");
        Ok(batch.iter().map(|i| cache[i]).collect())
    }
}

/// Leave out the pairs with a sentence the anchor gives no token vector for (e.g. one made of
/// control characters only, with special tokens left out): its WMD is undefined, and finding
/// it only when a batch reaches it would stop a run midway. Said on stderr when any are.
fn drop_tokenless(mut data: PairSet, anchor: &SentenceEncoder, skip_special: bool) -> Result<PairSet> {
    let t0 = Instant::now();
    let counts = anchor.token_counts(&data.sentences, skip_special)?;
    let Some(first) = counts.iter().position(|&c| c == 0) else { return Ok(data) };
    let before = data.pairs.len();
    data.retain(|&(a, b)| counts[a as usize] > 0 && counts[b as usize] > 0);
    errln!(
        "xsent train: left out {} of the {before} pairs: {} sentence(s) give the anchor no token of their own (special tokens and anchor_prefix left out; the first: {:?}; {:.1} s)",
        before - data.pairs.len(),
        counts.iter().filter(|&&c| c == 0).count(),
        data.sentences[first],
        t0.elapsed().as_secs_f64()
    );
    if data.pairs.is_empty() {
        bail!("dueam: no training pair is left: every pair has a sentence the anchor gives no token for");
    }
    Ok(data)
}

/// The anchor's token clouds of `texts` as the WMD takes them: the output of `layer` (default the
/// last), special tokens left out if `skip_special`, each token vector L2-normalised if
/// `normalize`; one flat `[tokens × hidden]` vector per text. A text left with no token is an error.
pub fn anchor_clouds<S: AsRef<str>>(
    anchor: &SentenceEncoder,
    texts: &[S],
    layer: Option<usize>,
    skip_special: bool,
    normalize: bool,
    batch_size: usize,
) -> Result<Vec<Vec<f32>>> {
    let mut clouds = anchor.token_embeddings(texts, layer, skip_special, batch_size)?;
    let dim = anchor.encoder.hidden_size();
    for (cloud, text) in clouds.iter_mut().zip(texts) {
        if cloud.is_empty() {
            bail!(
                "the anchor gives no token vectors for the sentence {:?} (empty after leaving out special tokens)",
                text.as_ref()
            );
        }
        if normalize {
            cloud.chunks_exact_mut(dim).for_each(crate::model::pooling::l2_normalize_row);
        }
    }
    Ok(clouds)
}

/// The DuEAM loss of one batch from the learner's vectors `s`, `t` (`[N, H]`) and, for L_A, the
/// anchor's WMDs: the total; the terms `l_a`, `d_euc` (mean), `l_b` that were computed, as scalar
/// tensors in `later` (read once the backward is queued: on a GPU a read waits for the device);
/// `d_wmd` (mean) in `terms` when L_A was.
pub fn dueam_loss(s: &Tensor, t: &Tensor, wmd: Option<&[f64]>, lambda: f64, terms: LossTerms) -> Result<StepLoss> {
    let n = s.dim(0)?;
    let (mut later, mut out) = (Vec::new(), Vec::new());
    let l_a = if terms == LossTerms::Cos {
        None
    } else {
        let wmd = wmd.context("L_A needs the anchor's WMDs")?;
        if wmd.len() != n {
            bail!("{} WMDs for a batch of {n} pairs", wmd.len());
        }
        // The small constant keeps the gradient of the square root finite at s′ = t′.
        let d_euc = (s - t)?.sqr()?.sum(1)?.affine(1.0, 1e-12)?.sqrt()?;
        let target: Vec<f32> = wmd.iter().map(|d| (-d).exp() as f32).collect();
        let target = Tensor::from_vec(target, n, s.device())?.to_dtype(s.dtype())?;
        let l_a = d_euc.neg()?.exp()?.sub(&target)?.abs()?.exp()?.mean_all()?;
        later.push(("l_a".to_string(), l_a.clone()));
        later.push(("d_euc".to_string(), d_euc.mean_all()?));
        out.push(("d_wmd".to_string(), wmd.iter().sum::<f64>() / n as f64));
        Some(l_a)
    };
    let l_b = if terms == LossTerms::Wmd {
        None
    } else {
        let dot = (s * t)?.sum(1)?;
        let norms = (s.sqr()?.sum(1)?.sqrt()? * t.sqr()?.sum(1)?.sqrt()?)?.clamp(1e-12, f64::MAX)?;
        let l_b = dot.div(&norms)?.mean_all()?;
        later.push(("l_b".to_string(), l_b.clone()));
        Some(l_b)
    };
    let total = match (l_a, l_b) {
        (Some(a), Some(b)) => (a - (b * lambda)?)?,
        (Some(a), None) => a,
        (None, Some(b)) => b.neg()?,
        (None, None) => unreachable!("one term at least"),
    };
    Ok(StepLoss { total, terms: out, later, sentences: 2 * n })
}

impl Recipe for Dueam {
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
        self.data.len()
    }

    fn params(&self) -> Params {
        self.learner.trainable_params()
    }

    /// The loss is a mean over pairs: on the CPU shards run on separate cores.
    fn plan(&self) -> StepPlan {
        if self.learner.device().is_cpu() {
            StepPlan::Sharded
        } else {
            StepPlan::Whole
        }
    }

    /// Pairs of similar length go into the same shard (less padding).
    fn order_batch(&self, batch: &mut [usize]) {
        batch.sort_by_key(|&i| {
            let (a, b) = self.data.pair(i);
            (a.len() + b.len(), i)
        });
    }

    /// The next step's pairs tokenised for the learner, and their WMDs solved, on a background
    /// thread (the anchor's forward runs here, on the trainer's thread).
    fn ahead(&self, now: &StepBatches, next: &StepBatches) -> Option<AheadJob> {
        let tt = self.learner.text_tokenizer();
        let examples = distinct(next);
        let texts = examples
            .iter()
            .map(|&i| {
                let (a, b) = self.data.pair(i);
                vec![a.to_string(), b.to_string()]
            })
            .collect();
        let wmds = if self.terms == LossTerms::Cos { None } else { Some(self.wmd_ahead(now, next)) };
        Some(Box::new(move || {
            let wmds = match wmds {
                Some(job) => job?(),
                None => Ok(Vec::new()),
            }?;
            let tokens = TokensAhead::tokenize(&tt, examples, texts)?;
            Ok(Box::new(DueamAhead { tokens, wmds }) as Prepared)
        }))
    }

    fn take_ahead(&mut self, prepared: Prepared) -> Result<()> {
        let got = prepared.downcast::<DueamAhead>().map_err(|_| anyhow::anyhow!("dueam: not its batches"))?;
        self.wmd_cache.lock().expect("no worker panicked").extend(got.wmds);
        self.tokens.set(got.tokens);
        Ok(())
    }

    fn loss(&self, batch: &[usize], rng: &mut crate::model::TrainContext) -> Result<StepLoss> {
        let n = batch.len();
        let mut terms = Vec::new();
        let wmd = if self.terms == LossTerms::Cos {
            None
        } else {
            let t0 = Instant::now();
            let d = self.anchor_wmd(batch)?;
            terms.push(("anchor_ms_per_pair".to_string(), 1e3 * t0.elapsed().as_secs_f64() / n as f64));
            Some(d)
        };
        let encoder = self.compute.encoder(&self.learner.encoder)?;
        let ahead = self.tokens.columns(batch);
        terms.push(("ahead".to_string(), if ahead.is_some() { 1.0 } else { 0.0 }));
        let emb = match &ahead {
            Some(enc) => {
                self.learner.forward_encoded(&encoder, &enc.iter().collect::<Vec<_>>(), &mut Mode::Train(rng))?
            }
            None => {
                let texts: Vec<&str> = batch
                    .iter()
                    .map(|&i| self.data.pair(i).0)
                    .chain(batch.iter().map(|&i| self.data.pair(i).1))
                    .collect();
                self.learner.forward_on(&encoder, &texts, &mut Mode::Train(rng))?
            }
        };
        let (s, t) = (emb.narrow(0, 0, n)?, emb.narrow(0, n, n)?);
        let l = dueam_loss(&s, &t, wmd.as_deref(), self.lambda, self.terms)?;
        terms.extend(l.terms);
        Ok(StepLoss { terms, ..l })
    }

    fn begin_step(&mut self) -> Result<()> {
        self.compute.refresh(&self.learner.encoder)
    }

    fn validate(&mut self) -> Result<Vec<(String, f64)>> {
        let mut out = Vec::new();
        let mut sum = 0.0;
        for v in &self.val {
            let src: Vec<&str> = v.pairs.iter().map(|p| p.src.as_str()).collect();
            let tgt: Vec<&str> = v.pairs.iter().map(|p| p.tgt.as_str()).collect();
            let xs = Matrix::normalized(&self.infer.embed_unchecked(&src, self.embed_batch)?);
            let xt = Matrix::normalized(&self.infer.embed_unchecked(&tgt, self.embed_batch)?);
            let (a1, a2) = (translation_accuracy(&xs, &xt)?, translation_accuracy(&xt, &xs)?);
            out.push((format!("acc_{}_src2tgt", v.name), a1));
            out.push((format!("acc_{}_tgt2src", v.name), a2));
            out.push((format!("acc_{}", v.name), (a1 + a2) / 2.0));
            sum += (a1 + a2) / 2.0;
        }
        out.push(("acc_mean".into(), sum / self.val.len() as f64));
        Ok(out)
    }

    fn default_best(&self) -> (String, BestMode) {
        ("acc_mean".into(), BestMode::Max)
    }

    fn save_model(&self, dir: &Path) -> Result<()> {
        self.learner.save(dir)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Var};

    fn t(rows: &[[f32; 2]]) -> Tensor {
        Tensor::from_vec(rows.iter().flatten().copied().collect::<Vec<f32>>(), (rows.len(), 2), &Device::Cpu).unwrap()
    }

    /// `dueam_loss` with its tensor terms read, as the trainer reads them.
    fn loss_terms(
        s: &Tensor,
        t: &Tensor,
        wmd: Option<&[f64]>,
        lambda: f64,
        terms: LossTerms,
    ) -> Result<(Tensor, Vec<(String, f64)>)> {
        let l = dueam_loss(s, t, wmd, lambda, terms)?;
        Ok((l.total, crate::train::shards::read_terms(l.later, l.terms)?))
    }

    fn term(terms: &[(String, f64)], k: &str) -> Option<f64> {
        terms.iter().find(|(n, _)| n == k).map(|(_, v)| *v)
    }

    #[test]
    fn dueam_loss_on_hand_made_numbers() {
        // Pair 1: s′ = (3, 0), t′ = (0, 4): d_euc = 5, cos = 0. Pair 2: s′ = (1, 1), t′ = (2, 2):
        // d_euc = √2, cos = 1. WMDs 0.5 and 1.0.
        let s = t(&[[3.0, 0.0], [1.0, 1.0]]);
        let u = t(&[[0.0, 4.0], [2.0, 2.0]]);
        let wmd = [0.5, 1.0];
        let a1 = ((-5f64).exp() - (-0.5f64).exp()).abs().exp();
        let a2 = ((-(2f64.sqrt())).exp() - (-1f64).exp()).abs().exp();
        let l_a = (a1 + a2) / 2.0;
        let l_b = (0.0 + 1.0) / 2.0;
        let lambda = 0.003;

        let (total, terms) = loss_terms(&s, &u, Some(&wmd), lambda, LossTerms::Both).unwrap();
        let total = total.to_scalar::<f32>().unwrap() as f64;
        assert!((term(&terms, "l_a").unwrap() - l_a).abs() < 1e-6, "{terms:?} vs {l_a}");
        assert!((term(&terms, "l_b").unwrap() - l_b).abs() < 1e-6);
        assert!((term(&terms, "d_euc").unwrap() - (5.0 + 2f64.sqrt()) / 2.0).abs() < 1e-5);
        assert!((term(&terms, "d_wmd").unwrap() - 0.75).abs() < 1e-12);
        assert!((total - (l_a - lambda * l_b)).abs() < 1e-6, "{total} vs {}", l_a - lambda * l_b);

        let (only_a, terms) = loss_terms(&s, &u, Some(&wmd), lambda, LossTerms::Wmd).unwrap();
        assert!((only_a.to_scalar::<f32>().unwrap() as f64 - l_a).abs() < 1e-6);
        assert!(term(&terms, "l_b").is_none());

        let (only_b, terms) = loss_terms(&s, &u, None, lambda, LossTerms::Cos).unwrap();
        assert!((only_b.to_scalar::<f32>().unwrap() as f64 + l_b).abs() < 1e-6, "−L_B alone");
        assert!(term(&terms, "l_a").is_none());

        assert!(loss_terms(&s, &u, None, lambda, LossTerms::Both).is_err(), "L_A needs WMDs");
        assert!(loss_terms(&s, &u, Some(&[0.5]), lambda, LossTerms::Wmd).is_err(), "one WMD per pair");
    }

    #[test]
    fn dueam_loss_gradients_pull_toward_the_anchor_distance() {
        // One pair at d_euc = 2 with WMD 0.5: exp(−2) < exp(−0.5), so L_A shrinks as s′ moves
        // toward t′; the gradient on s′ points away from t′ (descent moves s′ closer).
        let s = Var::from_tensor(&t(&[[2.0, 0.0]])).unwrap();
        let u = t(&[[0.0, 0.0]]);
        let l = dueam_loss(s.as_tensor(), &u, Some(&[0.5]), 0.003, LossTerms::Wmd).unwrap().total;
        let g = l.backward().unwrap().get(s.as_tensor()).unwrap().to_vec2::<f32>().unwrap();
        assert!(g[0][0] > 0.0 && g[0][1].abs() < 1e-7, "{g:?}");
        // d/ds L_A = exp(|x|)·sign(x)·(−exp(−d))·(s − t)/d with x = exp(−d) − exp(−w).
        let x = (-2f64).exp() - (-0.5f64).exp();
        let want = x.abs().exp() * x.signum() * -(-2f64).exp() * 1.0;
        assert!((g[0][0] as f64 - want).abs() < 1e-5, "{} vs {want}", g[0][0]);
        // Identical vectors: finite gradient.
        let l = dueam_loss(s.as_tensor(), s.as_tensor(), Some(&[0.5]), 0.003, LossTerms::Both).unwrap().total;
        let g = l.backward().unwrap().get(s.as_tensor()).unwrap().to_vec2::<f32>().unwrap();
        assert!(g[0].iter().all(|v| v.is_finite()), "{g:?}");
        // −L_B: the gradient turns s′ toward t′.
        let u = t(&[[0.0, 1.0]]);
        let l = dueam_loss(s.as_tensor(), &u, None, 0.003, LossTerms::Cos).unwrap().total;
        let g = l.backward().unwrap().get(s.as_tensor()).unwrap().to_vec2::<f32>().unwrap();
        assert!(g[0][1] < 0.0, "descent raises the t′ component: {g:?}");
    }

    #[test]
    fn translation_accuracy_counts_diagonal_hits() {
        let q = Matrix::normalized(&[vec![1.0, 0.0], vec![0.0, 1.0], vec![1.0, 0.1]]);
        let tg = Matrix::normalized(&[vec![1.0, 0.05], vec![0.0, 1.0], vec![0.0, -1.0]]);
        // Row 0 → 0 (hit), row 1 → 1 (hit), row 2 → 0 (miss).
        assert!((translation_accuracy(&q, &tg).unwrap() - 200.0 / 3.0).abs() < 1e-9);
    }
}
