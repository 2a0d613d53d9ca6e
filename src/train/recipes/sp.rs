//! Paraphrastic sentence embeddings by averaging (Wieting et al. 2019, seed 002): a sentence is
//! the mean of its units' embeddings (SentencePiece pieces, words or character trigrams; one
//! table shared by both languages, the only parameters), trained on translation pairs (s, t)
//! with the margin loss
//!
//! `max(0, δ − cos(s, t) + cos(s, t′))`
//!
//! where t′ is the hardest negative: the target-side sentence of the mega-batch most similar to
//! s, other than s's translations (Wieting & Gimpel 2018: M mini-batches are encoded together to
//! pick negatives, then trained as mini-batches). M is annealed from 1 upward by one every
//! `anneal_rate` mini-batches up to `megabatch_max`. `symmetric` adds the same term with the
//! hardest source-side negative s′ for t.
//!
//! Negatives are picked with the parameters of the step that trains on them (the mega-batch is
//! re-encoded at each of its mini-batches, with the current table): Wieting & Gimpel pick them
//! once per mega-batch with the parameters at its start. Doing it per step keeps `--resume`
//! exact without storing negatives in checkpoints, and costs one more averaging pass over the
//! mega-batch per step (a plain loop, cheap next to the update of the table).

use crate::index::knn::{translation_accuracy, Matrix};
use crate::model::encoder::Rng;
use crate::model::kinds::averaging::{embed_ids_flat, flatten, AveragingModel, Segmenter};
use crate::model::sentence::DEFAULT_MAX_TEXT_BYTES as MAX_TEXT_BYTES;
use crate::model::weights::Params;
use crate::train::config::{BestMode, Config, DropoutKind, SpConfig};
use crate::train::recipe::{Recipe, StepLoss, StepPlan};
use crate::train::split::train_val_pairs;
use anyhow::{bail, ensure, Context, Result};
use candle_core::{Device, Storage, Tensor, Var};
use rand::Rng as _;
use std::collections::HashMap;
use std::path::Path;

impl SpConfig {
    /// Mega-batching with M annealed from 1 up to `megabatch_max`.
    pub fn plan(&self) -> StepPlan {
        StepPlan::MegaBatch { anneal_rate: self.anneal_rate, max: self.megabatch_max }
    }
}

/// M at mini-batch `first`: 1 + ⌊first / anneal_rate⌋, at most `max` (`max` when `anneal_rate`
/// is 0).
pub fn megabatch_len(first: u64, anneal_rate: u64, max: usize) -> usize {
    StepPlan::MegaBatch { anneal_rate, max }.megabatch_len(first)
}

/// The mega-batches of the first `micro_batches` mini-batches: `(first, length)` each.
pub fn megabatches(micro_batches: u64, anneal_rate: u64, max: usize) -> Vec<(u64, usize)> {
    let mut out = Vec::new();
    let mut first = 0;
    while first < micro_batches {
        let m = megabatch_len(first, anneal_rate, max);
        out.push((first, m));
        first += m as u64;
    }
    out
}

/// For each query row, the most similar candidate row (inner product of normalised rows) whose
/// key differs from the query's in both parts (a pair's source text and target text: a
/// candidate that shares either is a translation, not a negative). Ties go to the lower index;
/// `None` when every candidate is excluded. Rows are `[n, dim]` row-major.
pub fn hardest_negatives(
    queries: &[f32],
    q_keys: &[(u32, u32)],
    cands: &[f32],
    c_keys: &[(u32, u32)],
    dim: usize,
) -> Result<Vec<Option<usize>>> {
    let (nq, nc) = (q_keys.len(), c_keys.len());
    ensure!(queries.len() == nq * dim && cands.len() == nc * dim, "hardest_negatives: rows and keys disagree");
    if nq == 0 || nc == 0 {
        return Ok(vec![None; nq]);
    }
    let q = Tensor::from_slice(queries, (nq, dim), &Device::Cpu)?;
    let c = Tensor::from_slice(cands, (nc, dim), &Device::Cpu)?;
    hardest_of(&q, q_keys, &c, c_keys)
}

/// [`hardest_negatives`] of query and candidate rows already in tensors (on any device): the
/// similarities are computed there and read back, the choice is made here.
fn hardest_of(q: &Tensor, q_keys: &[(u32, u32)], c: &Tensor, c_keys: &[(u32, u32)]) -> Result<Vec<Option<usize>>> {
    let (nq, nc) = (q_keys.len(), c_keys.len());
    if nq == 0 || nc == 0 {
        return Ok(vec![None; nq]);
    }
    let sims: Vec<f32> = crate::model::matmul::matmul(q, &c.t()?)?.flatten_all()?.to_vec1()?;
    Ok((0..nq)
        .map(|i| {
            let (ks, kt) = q_keys[i];
            let mut best: Option<(usize, f32)> = None;
            for (j, &s) in sims[i * nc..(i + 1) * nc].iter().enumerate() {
                let (cs, ct) = c_keys[j];
                if cs == ks || ct == kt {
                    continue;
                }
                if best.is_none_or(|(_, b)| s > b) {
                    best = Some((j, s));
                }
            }
            best.map(|(j, _)| j)
        })
        .collect())
}

/// Each example's hardest negative (an index into the mega-batch), if it has one.
type Negatives = Vec<Option<usize>>;

/// One side's unit ids of every example.
struct Side {
    ids: Vec<Vec<u32>>,
    /// Interned text: equal keys are equal sentences.
    key: Vec<u32>,
}

pub struct SpRecipe {
    /// [`crate::train::data_digest`] of the training and validation data.
    digest: String,
    cfg: SpConfig,
    segmenter: Segmenter,
    table: Var,
    dim: usize,
    src: Side,
    tgt: Side,
    val_src: Vec<Vec<u32>>,
    val_tgt: Vec<Vec<u32>>,
    /// What decontamination dropped.
    overlaps: Vec<crate::data::decontam::Overlap>,
}

impl SpRecipe {
    /// The recipe for run directory `out`. A vocabulary learned from the data is kept in
    /// `out/vocab/` and reused from there by a resumed run (learning a unigram vocabulary again
    /// gives the same one, [`crate::model::kinds::vocab::train_subword`], but takes time; a BPE one could
    /// number its pieces differently).
    pub fn new(cfg: &Config, sc: &SpConfig, out: &Path) -> Result<Self> {
        let sc = sc.clone();
        sc.validate()?;
        let device = crate::device::parse_device(&cfg.train.device)?;
        let mut decontam = crate::train::decontam::Decontam::new(cfg)?;
        let (train, val) = train_val_pairs(cfg, &mut decontam)?;
        let digest = crate::train::data_digest::pairs_digest(&train, &val);

        let t0 = std::time::Instant::now();
        let vocab_dir = out.join("vocab");
        let segmenter = match &sc.tokenizer {
            Some(p) => {
                let t = tokenizers::Tokenizer::from_file(p)
                    .map_err(|e| anyhow::anyhow!("sp.tokenizer: cannot load {}: {e}", p.display()))?;
                Segmenter::from_tokenizer(sc.units, t, sc.lowercase)?
            }
            None if vocab_dir.is_dir() => {
                errln!("xsent train: vocabulary from {}", vocab_dir.display());
                Segmenter::load(&vocab_dir, sc.units, sc.lowercase)?
            }
            None => {
                // The vocabulary is learned from the training pairs only (never the held-out ones).
                let mut texts: Vec<&str> = train.iter().flat_map(|p| [p.src.as_str(), p.tgt.as_str()]).collect();
                texts.sort_unstable();
                texts.dedup();
                let seg = Segmenter::train(sc.units, &texts, sc.vocab_size(), sc.subword_model, sc.lowercase)?;
                std::fs::create_dir_all(out)
                    .with_context(|| format!("cannot create run directory {}", out.display()))?;
                crate::io::atomic::write_atomically(&vocab_dir, |d| seg.save(d))?;
                seg
            }
        };
        let vocab = segmenter.vocab_size();
        errln!("xsent train: {} vocabulary of {vocab} units ({:.1} s)", sc.units, t0.elapsed().as_secs_f64());

        let mut interner: HashMap<&str, u32> = HashMap::new();
        let mut src_key = Vec::with_capacity(train.len());
        let mut tgt_key = Vec::with_capacity(train.len());
        for p in &train {
            for (text, keys) in [(p.src.as_str(), &mut src_key), (p.tgt.as_str(), &mut tgt_key)] {
                let n = interner.len() as u32;
                keys.push(*interner.entry(text).or_insert(n));
            }
        }
        drop(interner);
        // Each text cut at 1 MiB first, as the other recipes' tokenizers cut theirs: an averaging
        // model has no token limit, so the cut is what bounds tokenising's memory.
        let mut cut = 0;
        let mut ids = |texts: Vec<&str>| -> Result<Vec<Vec<u32>>> {
            let (ids, was_cut) = segmenter.ids_batch(&texts, MAX_TEXT_BYTES)?;
            cut += was_cut.iter().filter(|&&c| c).count();
            Ok(ids)
        };
        let src = Side { ids: ids(train.iter().map(|p| p.src.as_str()).collect())?, key: src_key };
        let tgt = Side { ids: ids(train.iter().map(|p| p.tgt.as_str()).collect())?, key: tgt_key };
        let val_src = ids(val.iter().map(|p| p.src.as_str()).collect())?;
        let val_tgt = ids(val.iter().map(|p| p.tgt.as_str()).collect())?;
        if cut > 0 {
            errln!(
                "xsent train: {cut} training or validation texts are longer than {MAX_TEXT_BYTES} bytes; each is averaged over its first {MAX_TEXT_BYTES} bytes"
            );
        }
        let table = AveragingModel::random_table(vocab, sc.dim, sc.init_std as f32, cfg.seed ^ 0x5ba7_e1ed)
            .with_context(|| format!("sp.dim = {}, {vocab} units (sp.vocab_size)", sc.dim))?;
        let table = Var::from_tensor(&Tensor::from_vec(table, (vocab, sc.dim), &Device::Cpu)?.to_device(&device)?)?;
        Ok(Self {
            digest,
            dim: sc.dim,
            cfg: sc,
            segmenter,
            table,
            src,
            tgt,
            val_src,
            val_tgt,
            overlaps: decontam.overlaps,
        })
    }

    /// The table's current values (a copy read back from a GPU).
    fn with_table<T>(&self, f: impl FnOnce(&[f32]) -> Result<T>) -> Result<T> {
        let t = self.table.as_tensor();
        if !t.device().is_cpu() {
            return f(&t.flatten_all()?.to_vec1::<f32>()?);
        }
        let (storage, layout) = t.storage_and_layout();
        let Storage::Cpu(cpu) = &*storage else { bail!("the sp table is not on the CPU") };
        ensure!(layout.is_contiguous(), "the sp table is not contiguous");
        let s = &cpu.as_slice::<f32>()?[layout.start_offset()..][..t.elem_count()];
        f(s)
    }

    /// Hardest target-side (and, when symmetric, source-side) negatives of `batch` among `mega`
    /// with the current table, on the table's device: on the CPU by averaging loops over its
    /// memory, elsewhere (and on the CPU under `XSENT_KERNELS=candle`) by the gather and sum of
    /// [`average_with_dropout`] there, without dropout.
    fn negatives(
        &self,
        batch: &[usize],
        mega: &[usize],
        bk: &[(u32, u32)],
        mk: &[(u32, u32)],
    ) -> Result<(Negatives, Negatives)> {
        if self.table.device().is_cpu() && !crate::model::kernels::candle_ops_forced() {
            return self.with_table(|table| {
                let qs = self.encode(table, &self.src, batch)?;
                let ct = self.encode(table, &self.tgt, mega)?;
                let nt = hardest_negatives(&qs, bk, &ct, mk, self.dim)?;
                let ns = if self.cfg.symmetric {
                    let qt = self.encode(table, &self.tgt, batch)?;
                    let cs = self.encode(table, &self.src, mega)?;
                    hardest_negatives(&qt, bk, &cs, mk, self.dim)?
                } else {
                    Vec::new()
                };
                Ok((nt, ns))
            });
        }
        let table = self.table.as_tensor().detach();
        let mut no_draws = <Rng as rand::SeedableRng>::seed_from_u64(0);
        let mut vectors = |side: &Side, idx: &[usize]| -> Result<Tensor> {
            let sents: Vec<&[u32]> = idx.iter().map(|&i| side.ids[i].as_slice()).collect();
            crate::model::pooling::l2_normalize(&average_with_dropout(
                &table,
                self.dim,
                &sents,
                0.0,
                DropoutKind::Unit,
                &mut no_draws,
            )?)
        };
        let nt = hardest_of(&vectors(&self.src, batch)?, bk, &vectors(&self.tgt, mega)?, mk)?;
        let ns = if self.cfg.symmetric {
            hardest_of(&vectors(&self.tgt, batch)?, bk, &vectors(&self.src, mega)?, mk)?
        } else {
            Vec::new()
        };
        Ok((nt, ns))
    }

    /// Normalised sentence vectors of the examples `idx` of one side, `[n, dim]`.
    fn encode(&self, table: &[f32], side: &Side, idx: &[usize]) -> Result<Vec<f32>> {
        let rows: Vec<Vec<u32>> = idx.iter().map(|&i| side.ids[i].clone()).collect();
        let (flat, off) = flatten(&rows);
        embed_ids_flat(table, self.dim, &flat, &off, true)
    }

    /// The averaged vectors of `sentences` (unit ids) under the training dropout
    /// (`sp.dropout_kind`), as a differentiable `[n, dim]` tensor.
    fn average(&self, sentences: &[&[u32]], rng: &mut Rng) -> Result<Tensor> {
        average_with_dropout(self.table.as_tensor(), self.dim, sentences, self.cfg.dropout, self.cfg.dropout_kind, rng)
    }

    fn trained_table(&self) -> Result<Vec<f32>> {
        self.with_table(|t| Ok(t.to_vec()))
    }

    /// Write the model directory (the current table).
    pub fn save(&self, dir: &Path, trained: bool) -> Result<()> {
        AveragingModel::save_parts(dir, &self.segmenter, self.dim, &self.trained_table()?, trained)
    }
}

/// The mean of each sentence's rows of `table` (`[vocab, dim]`), under dropout `p` of `kind`
/// drawn from `rng`, as a differentiable `[n, dim]` tensor on the table's device. The units of
/// all sentences are gathered in one unpadded block and summed into their sentences' rows
/// (`index_add`), so the work (and the element mask) scales with the real units, not with the
/// longest sentence. Element dropout off the CPU draws one seed and computes its mask on the
/// device ([`crate::model::dropout`]).
pub fn average_with_dropout(
    table: &Tensor,
    dim: usize,
    sentences: &[&[u32]],
    p: f64,
    kind: DropoutKind,
    rng: &mut Rng,
) -> Result<Tensor> {
    let unit = p > 0.0 && kind == DropoutKind::Unit;
    let n = sentences.len();
    let (mut ids, mut seg, mut w) = (Vec::<u32>::new(), Vec::<u32>::new(), Vec::<f32>::new());
    for (r, s) in sentences.iter().enumerate() {
        let start = ids.len();
        if unit {
            ids.extend(s.iter().copied().filter(|_| rng.random::<f64>() >= p));
        }
        if ids.len() == start {
            // No dropout, or every unit drawn: keep them all.
            ids.extend_from_slice(s);
        }
        let k = ids.len() - start;
        seg.extend(std::iter::repeat_n(r as u32, k));
        w.extend(std::iter::repeat_n(1.0 / k.max(1) as f32, k));
    }
    if ids.is_empty() {
        // Only empty sentences: one weightless row keeps the table in the graph.
        (ids, seg, w) = (vec![0], vec![0], vec![0.0]);
    }
    let t = ids.len();
    let dev = table.device();
    let mut rows = table.index_select(&Tensor::from_vec(ids, t, dev)?, 0)?;
    if p > 0.0 && kind == DropoutKind::Element {
        let on_device = !dev.is_cpu() || crate::model::kernels::candle_ops_forced();
        let hashed = if on_device { crate::model::dropout::apply(&rows, p, rng.random::<u64>())? } else { None };
        rows = match hashed {
            Some(r) => r,
            None => {
                // A value is kept when a uniform u32 is at least p · 2³² (one draw per value).
                let scale = (1.0 / (1.0 - p)) as f32;
                let drop_below = (p * 4_294_967_296.0) as u64;
                let mask: Vec<f32> =
                    (0..t * dim).map(|_| if rng.random::<u32>() as u64 >= drop_below { scale } else { 0.0 }).collect();
                rows.mul(&Tensor::from_vec(mask, (t, dim), dev)?)?
            }
        };
    }
    let rows = rows.broadcast_mul(&Tensor::from_vec(w, (t, 1), dev)?)?;
    Ok(Tensor::zeros((n, dim), candle_core::DType::F32, dev)?.index_add(&Tensor::from_vec(seg, t, dev)?, &rows, 0)?)
}

/// `Σ_i mask_i · max(0, δ − cos(a_i, p_i) + cos(a_i, n_i))` over L2-normalised rows: anchors
/// `a`, their positives `p` and negatives `n` (`[b, dim]` each, `mask` `[b]`).
pub fn margin_hinge(a: &Tensor, p: &Tensor, n: &Tensor, mask: &Tensor, delta: f64) -> Result<Tensor> {
    let pos = (a * p)?.sum(1)?;
    let neg = (a * n)?.sum(1)?;
    Ok((neg - pos)?.affine(1.0, delta)?.relu()?.mul(mask)?.sum_all()?)
}

fn l2_rows(t: &Tensor) -> Result<Tensor> {
    let n = t.sqr()?.sum_keepdim(1)?.affine(1.0, 1e-12)?.sqrt()?;
    Ok(t.broadcast_div(&n)?)
}

impl Recipe for SpRecipe {
    fn embedder(&self) -> Option<&dyn crate::model::Embedder> {
        Some(self)
    }

    fn overlaps(&self) -> &[crate::data::decontam::Overlap] {
        &self.overlaps
    }

    fn data_digest(&self) -> &str {
        &self.digest
    }

    fn num_examples(&self) -> usize {
        self.src.ids.len()
    }

    fn params(&self) -> Params {
        Params { vars: vec![("embeddings".to_string(), self.table.clone())] }
    }

    fn plan(&self) -> StepPlan {
        self.cfg.plan()
    }

    fn loss(&self, batch: &[usize], rng: &mut crate::model::TrainContext) -> Result<StepLoss> {
        self.loss_in_megabatch(batch, batch, rng)
    }

    fn loss_in_megabatch(
        &self,
        batch: &[usize],
        mega: &[usize],
        rng: &mut crate::model::TrainContext,
    ) -> Result<StepLoss> {
        let b = batch.len();
        let keys =
            |idx: &[usize]| -> Vec<(u32, u32)> { idx.iter().map(|&i| (self.src.key[i], self.tgt.key[i])).collect() };
        let (bk, mk) = (keys(batch), keys(mega));
        // Hardest negatives among the mega-batch, with the current table and no dropout.
        let (neg_t, neg_s) = self.negatives(batch, mega, &bk, &mk)?;
        // Sentences: sources, targets, target negatives (and source negatives). An example
        // without a negative uses its own sentence as a stand-in, masked out of the loss.
        let mut sents: Vec<&[u32]> = Vec::with_capacity(4 * b);
        sents.extend(batch.iter().map(|&i| self.src.ids[i].as_slice()));
        sents.extend(batch.iter().map(|&i| self.tgt.ids[i].as_slice()));
        sents.extend(batch.iter().zip(&neg_t).map(|(&i, n)| self.tgt.ids[n.map_or(i, |j| mega[j])].as_slice()));
        if self.cfg.symmetric {
            sents.extend(batch.iter().zip(&neg_s).map(|(&i, n)| self.src.ids[n.map_or(i, |j| mega[j])].as_slice()));
        }
        let v = l2_rows(&self.average(&sents, rng)?)?;
        let (s, t, tn) = (v.narrow(0, 0, b)?, v.narrow(0, b, b)?, v.narrow(0, 2 * b, b)?);
        let mask = |negs: &[Option<usize>]| {
            Tensor::from_vec(
                negs.iter().map(|n| if n.is_some() { 1f32 } else { 0.0 }).collect::<Vec<_>>(),
                b,
                v.device(),
            )
        };
        let delta = self.cfg.margin;
        let h_t = margin_hinge(&s, &t, &tn, &mask(&neg_t)?, delta)?;
        let mut terms = vec![("hinge_tgt".to_string(), h_t.to_scalar::<f32>()? as f64 / b as f64)];
        let mut total = h_t;
        if self.cfg.symmetric {
            let sn = v.narrow(0, 3 * b, b)?;
            let h_s = margin_hinge(&t, &s, &sn, &mask(&neg_s)?, delta)?;
            terms.push(("hinge_src".to_string(), h_s.to_scalar::<f32>()? as f64 / b as f64));
            total = (total + h_s)?;
        }
        terms.push(("megabatch".to_string(), (mega.len() / b.max(1)) as f64));
        Ok(StepLoss { total: (total / b as f64)?, terms, later: Vec::new(), sentences: 2 * b })
    }

    fn validate(&mut self) -> Result<Vec<(String, f64)>> {
        if self.val_src.is_empty() {
            bail!("no validation pairs: set data.val_size > 0");
        }
        let (xs, xt) = self.with_table(|table| {
            let enc = |rows: &[Vec<u32>]| -> Result<Matrix> {
                let (flat, off) = flatten(rows);
                Ok(Matrix { data: embed_ids_flat(table, self.dim, &flat, &off, true)?, dim: self.dim })
            };
            Ok((enc(&self.val_src)?, enc(&self.val_tgt)?))
        })?;
        let acc = translation_accuracy;
        let (a1, a2) = (acc(&xs, &xt)?, acc(&xt, &xs)?);
        Ok(vec![("acc_src2tgt".into(), a1), ("acc_tgt2src".into(), a2), ("acc_mean".into(), (a1 + a2) / 2.0)])
    }

    fn default_best(&self) -> (String, BestMode) {
        ("acc_mean".into(), BestMode::Max)
    }

    fn save_model(&self, dir: &Path) -> Result<()> {
        self.save(dir, true)
    }
}

/// `sp.random = true`: write the untrained encoder (vocabulary learned, table drawn) as `final/`
/// of the run directory, with the resolved config, and no training step.
pub fn write_untrained(cfg: &Config, sc: &SpConfig, out: &Path) -> Result<()> {
    let recipe = SpRecipe::new(cfg, sc, out)?;
    std::fs::create_dir_all(out).with_context(|| format!("cannot create run directory {}", out.display()))?;
    crate::train::write_run_config(out, cfg)?;
    crate::io::atomic::write_atomically(&out.join("final"), |d| recipe.save(d, false))?;
    errln!("xsent train: sp.random = true: untrained encoder written to {}", out.join("final").display());
    Ok(())
}

/// The table being trained, as an embedder (the trainer's `train.val_sts`): the same units and
/// averaging as the saved model, read from the live table.
impl crate::model::Embedder for SpRecipe {
    fn dim(&self) -> usize {
        self.dim
    }

    fn embed_checked(&self, texts: &[&str], _batch_size: usize) -> Result<crate::model::Embedded> {
        let (ids, truncated) = self.segmenter.ids_batch(texts, MAX_TEXT_BYTES)?;
        let (flat, off) = flatten(&ids);
        let rows = self.with_table(|table| embed_ids_flat(table, self.dim, &flat, &off, true))?;
        Ok(crate::model::Embedded { rows: rows.chunks(self.dim).map(<[f32]>::to_vec).collect(), truncated })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    /// The padded implementation of 9eaa89d (every sentence padded to the longest), kept as the
    /// reference of [`average_with_dropout`]: the mean of each sentence's rows of `table` (`[vocab, dim]`), under dropout `p` of `kind`
    /// drawn from `rng`, as a differentiable `[n, dim]` tensor.
    fn padded_average(
        table: &Tensor,
        dim: usize,
        sentences: &[&[u32]],
        p: f64,
        kind: DropoutKind,
        rng: &mut Rng,
    ) -> Result<Tensor> {
        let unit = p > 0.0 && kind == DropoutKind::Unit;
        let mut kept: Vec<Vec<u32>> = Vec::with_capacity(sentences.len());
        for s in sentences {
            let k: Vec<u32> =
                if unit { s.iter().copied().filter(|_| rng.random::<f64>() >= p).collect() } else { s.to_vec() };
            kept.push(if k.is_empty() { s.to_vec() } else { k });
        }
        let len = kept.iter().map(Vec::len).max().unwrap_or(0).max(1);
        let n = kept.len();
        let mut ids = vec![0u32; n * len];
        let mut w = vec![0f32; n * len];
        for (r, k) in kept.iter().enumerate() {
            for (c, &id) in k.iter().enumerate() {
                ids[r * len + c] = id;
                w[r * len + c] = 1.0 / k.len() as f32;
            }
        }
        let idx = Tensor::from_vec(ids, n * len, &Device::Cpu)?;
        let mut rows = table.index_select(&idx, 0)?;
        if p > 0.0 && kind == DropoutKind::Element {
            // Only the values of real units are drawn (padding has weight 0): the same draws
            // whatever the padding of the batch.
            // A value is kept when a uniform u32 is at least p · 2³² (one draw per value).
            let scale = (1.0 / (1.0 - p)) as f32;
            let drop_below = (p * 4_294_967_296.0) as u64;
            let mut mask = vec![0f32; n * len * dim];
            for (r, k) in kept.iter().enumerate() {
                for m in mask[r * len * dim..][..k.len() * dim].iter_mut() {
                    *m = if rng.random::<u32>() as u64 >= drop_below { scale } else { 0.0 };
                }
            }
            rows = rows.mul(&Tensor::from_vec(mask, (n * len, dim), &Device::Cpu)?)?;
        }
        let w = Tensor::from_vec(w, (n, len, 1), &Device::Cpu)?;
        Ok(rows.reshape((n, len, dim))?.broadcast_mul(&w)?.sum(1)?)
    }

    #[test]
    fn unpadded_average_equals_the_padded_one() {
        // Random sentences (one empty), every kind and rate: the same values from the same draws,
        // and the same gradient of the table.
        let mut g = Rng::seed_from_u64(9);
        let (vocab, dim) = (50usize, 7usize);
        let table: Vec<f32> = (0..vocab * dim).map(|_| g.random::<f32>() - 0.5).collect();
        let sents: Vec<Vec<u32>> =
            (0..20).map(|i| (0..(i * 7) % 13).map(|_| g.random_range(0..vocab as u32)).collect()).collect();
        let refs: Vec<&[u32]> = sents.iter().map(Vec::as_slice).collect();
        for (p, kind) in [
            (0.0, DropoutKind::Element),
            (0.3, DropoutKind::Element),
            (0.3, DropoutKind::Unit),
            (0.9, DropoutKind::Unit),
        ] {
            let var = Var::from_tensor(&Tensor::from_vec(table.clone(), (vocab, dim), &Device::Cpu).unwrap()).unwrap();
            let run = |f: &dyn Fn(&Tensor, &mut Rng) -> Result<Tensor>| -> (Vec<f32>, Vec<f32>) {
                let mut rng = Rng::seed_from_u64(4);
                let out = f(var.as_tensor(), &mut rng).unwrap();
                let loss = (out.sqr().unwrap().sum_all().unwrap() + out.sum_all().unwrap()).unwrap();
                let grad =
                    loss.backward().unwrap().get(var.as_tensor()).unwrap().flatten_all().unwrap().to_vec1().unwrap();
                (out.flatten_all().unwrap().to_vec1().unwrap(), grad)
            };
            let (a, ga) = run(&|t, rng| average_with_dropout(t, dim, &refs, p, kind, rng));
            let (b, gb) = run(&|t, rng| padded_average(t, dim, &refs, p, kind, rng));
            let diff = |x: &[f32], y: &[f32]| x.iter().zip(y).map(|(u, v)| (u - v).abs()).fold(0f32, f32::max);
            assert!(
                diff(&a, &b) < 1e-6 && diff(&ga, &gb) < 1e-5,
                "{p} {kind:?}: {} / {}",
                diff(&a, &b),
                diff(&ga, &gb)
            );
        }
    }

    #[test]
    fn dropout_kinds() {
        // Rows 0..4 of a 4 × 2 table; one sentence of all four units.
        let table = Tensor::from_vec(vec![1f32, 0., 0., 1., 2., 2., -1., 3.], (4, 2), &Device::Cpu).unwrap();
        let sent: &[u32] = &[0, 1, 2, 3];
        let mean = [0.5f32, 1.5];
        let avg = |p: f64, kind: DropoutKind, seed: u64| -> Vec<f32> {
            let mut rng = Rng::seed_from_u64(seed);
            average_with_dropout(&table, 2, &[sent], p, kind, &mut rng)
                .unwrap()
                .flatten_all()
                .unwrap()
                .to_vec1()
                .unwrap()
        };
        // No dropout: the plain mean, whatever the kind.
        assert_eq!(avg(0.0, DropoutKind::Element, 1), mean);
        assert_eq!(avg(0.0, DropoutKind::Unit, 1), mean);
        // Unit dropout gives the mean of a non-empty subset of the rows; element dropout zeroes
        // single values and scales the kept ones by 1/(1 − p), so it reaches vectors no subset
        // mean does, and it is unbiased: the mean over many draws is the plain mean.
        let subset_means: Vec<[f32; 2]> = (1u32..16)
            .map(|m| {
                let rows: Vec<usize> = (0..4).filter(|i| m & (1 << i) != 0).collect();
                let k = rows.len() as f32;
                let t = [[1f32, 0.], [0., 1.], [2., 2.], [-1., 3.]];
                [rows.iter().map(|&i| t[i][0]).sum::<f32>() / k, rows.iter().map(|&i| t[i][1]).sum::<f32>() / k]
            })
            .collect();
        let is_subset_mean =
            |v: &[f32]| subset_means.iter().any(|m| (m[0] - v[0]).abs() < 1e-6 && (m[1] - v[1]).abs() < 1e-6);
        let (mut sum, mut outside) = ([0f64; 2], 0);
        for seed in 0..4000 {
            let u = avg(0.5, DropoutKind::Unit, seed);
            assert!(is_subset_mean(&u), "unit dropout gave {u:?}");
            let e = avg(0.5, DropoutKind::Element, seed);
            outside += usize::from(!is_subset_mean(&e));
            sum[0] += e[0] as f64;
            sum[1] += e[1] as f64;
        }
        assert!(outside > 1000, "element dropout mostly gave subset means ({outside} of 4000 did not)");
        for (s, m) in sum.iter().zip(mean) {
            assert!((s / 4000.0 - m as f64).abs() < 0.05, "element dropout mean {} against {m}", s / 4000.0);
        }
    }

    #[test]
    fn annealing_schedule() {
        assert_eq!(megabatches(10, 2, 3), vec![(0, 1), (1, 1), (2, 2), (4, 3), (7, 3)]);
        assert_eq!(megabatch_len(0, 150, 120), 1);
        assert_eq!(megabatch_len(149, 150, 120), 1);
        assert_eq!(megabatch_len(150, 150, 120), 2);
        assert_eq!(megabatch_len(1_000_000, 150, 120), 120);
        assert_eq!(megabatches(7, 0, 3), vec![(0, 3), (3, 3), (6, 3)], "no annealing: M_max throughout");
    }

    fn unit(v: &[f32]) -> Vec<f32> {
        let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.iter().map(|x| x / n).collect()
    }

    #[test]
    fn hardest_negative_skips_translations() {
        // Query 0 (source key 0, target key 10): the closest candidate is its own translation
        // (target key 10), then another pair of the same source sentence (source key 0, e.g. the
        // French of the same English line), then a real negative, then a farther one.
        let q: Vec<f32> = [unit(&[1.0, 0.0]), unit(&[0.0, 1.0])].concat();
        let c: Vec<f32> =
            [unit(&[1.0, 0.01]), unit(&[1.0, 0.02]), unit(&[1.0, 0.3]), unit(&[1.0, 1.0]), unit(&[0.0, 1.0])].concat();
        let q_keys = [(0, 10), (1, 11)];
        let c_keys = [(0, 10), (0, 12), (2, 13), (3, 14), (1, 11)];
        let n = hardest_negatives(&q, &q_keys, &c, &c_keys, 2).unwrap();
        assert_eq!(n[0], Some(2), "not the translation, not the same source's other translation");
        assert_eq!(n[1], Some(3), "query 1's own pair (index 4) is excluded");
        // Everything excluded: no negative.
        let n = hardest_negatives(&q[..2], &[(0, 10)], &c[..8], &[(0, 10), (0, 12), (5, 10), (0, 1)], 2).unwrap();
        assert_eq!(n, vec![None]);
        // Equal similarity: the lower index.
        let n = hardest_negatives(&q[..2], &[(9, 9)], &[0.6, 0.8, 0.6, 0.8], &[(1, 1), (2, 2)], 2).unwrap();
        assert_eq!(n, vec![Some(0)]);
    }

    #[test]
    fn margin_loss_on_a_hand_made_case() {
        // δ = 0.4. Row 0: cos(s, t) = 0.6, cos(s, t′) = 0.8 → 0.4 − 0.6 + 0.8 = 0.6.
        // Row 1: cos(s, t′) = 0 → max(0, 0.4 − 0.6) = 0. Row 2: would give 0.6 but is masked
        // (no negative).
        let d = &Device::Cpu;
        let s = Tensor::new(&[[1f32, 0.0], [1.0, 0.0], [1.0, 0.0]], d).unwrap();
        let t = Tensor::new(&[[0.6f32, 0.8], [0.6, 0.8], [0.6, 0.8]], d).unwrap();
        let tn = Tensor::new(&[[0.8f32, 0.6], [0.0, 1.0], [0.8, 0.6]], d).unwrap();
        let mask = Tensor::new(&[1f32, 1.0, 0.0], d).unwrap();
        let h = margin_hinge(&s, &t, &tn, &mask, 0.4).unwrap().to_scalar::<f32>().unwrap();
        assert!((h - 0.6).abs() < 1e-6, "{h}");
        let all = margin_hinge(&s, &t, &tn, &Tensor::ones(3, candle_core::DType::F32, d).unwrap(), 0.4)
            .unwrap()
            .to_scalar::<f32>()
            .unwrap();
        assert!((all - 1.2).abs() < 1e-6, "{all}");
    }
}
