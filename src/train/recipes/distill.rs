//! Multilingual knowledge distillation (Reimers & Gurevych 2020, seed 003 §2).
//!
//! A frozen teacher M embeds the source sentences s; a trainable student M̂ learns
//! M̂(s) ≈ M(s) and M̂(t) ≈ M(s) for translations t, minimising over a batch B
//! `MSE(M̂(s), M(s)) + MSE(M̂(t), M(s))` (each MSE the mean over batch and dimensions, as
//! `torch.nn.MSELoss`). Teacher embeddings are computed once and cached on disk, keyed by the
//! teacher's files and the sentences. When the two spaces differ (other dimension, or simply
//! unrelated spaces), a Dense projection follows the student's pooling; `projection = "lstsq"`
//! initialises it in closed form: the affine map that best predicts the teacher's embeddings
//! from the student's pooled vectors (ridge least squares) on training sentences;
//! `projection = "procrustes"` the orthogonal map that best aligns them (keeps the student's
//! cosines at the start). With `targets = "student"` the targets are the student's own
//! embeddings of the source sentences before training (after the projection): the English term
//! starts at zero and the student learns to put each translation where its English already is.

use crate::data::bitext::{read_sources, Pair};
use crate::index::knn::{translation_accuracy, Matrix};
use crate::model::encoder::Rng;
use crate::model::weights::Params;
use crate::model::{Dense, LoadOptions, Mode, SentenceEncoder};
use crate::train::ahead::{distinct, AheadJob, Prepared, StepBatches, TokenMap, TokensAhead};
use crate::train::config::{BestMode, Config, DistillConfig, FitOn, Projection, Targets};
use crate::train::fit::{fit_affine, fit_orthogonal};
use crate::train::precision::Compute;
use crate::train::recipe::{Recipe, StepLoss, StepPlan};
use crate::train::split::{drop_val_sources, split_by_source, train_val_pairs};
use anyhow::{bail, Context, Result};
use candle_core::{DType, Device, Tensor};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use std::collections::HashMap;
use std::path::Path;

/// An internal invariant (`uses_teacher()` holds wherever the teacher's vectors are read), not a
/// user error: `validate` has rejected configs that need a teacher and name none.
const NO_TEACHER: &str = "distill: the teacher's embeddings were not computed";

pub struct Distill {
    /// [`crate::train::data_digest`] of the training and validation data.
    digest: String,
    student: SentenceEncoder,
    /// Inference view of the student (same storage, no autograd).
    infer: SentenceEncoder,
    train: Vec<Pair>,
    val: Vec<Pair>,
    /// Teacher embedding row of each source sentence.
    teacher_rows: HashMap<String, usize>,
    teacher: Tensor,
    dim: usize,
    embed_batch: usize,
    source_weight: f64,
    /// What decontamination dropped.
    overlaps: Vec<crate::data::decontam::Overlap>,
    /// The student's encoder as the training forward runs it (`train.precision`).
    compute: Compute,
    /// The next step's pairs tokenised ahead (`train.ahead`).
    tokens: TokensAhead,
}

impl Distill {
    pub fn new(cfg: &Config, dc: &DistillConfig) -> Result<Self> {
        let mut decontam = crate::train::decontam::Decontam::new(cfg)?;
        let (train, val) = train_val_pairs(cfg, &mut decontam)?;
        let digest = crate::train::data_digest::pairs_digest(&train, &val);

        // Teacher embeddings of every distinct source sentence, cached.
        // Sorted, so that the same sentences give the same cache key whatever the split.
        let mut sources: Vec<String> = train.iter().chain(&val).map(|p| p.src.clone()).collect();
        sources.sort_unstable();
        sources.dedup();
        let teacher_rows: HashMap<String, usize> = sources.iter().enumerate().map(|(i, s)| (s.clone(), i)).collect();
        // The projection's fit examples come from the training pairs, or from their own sources.
        let fit_pool = if dc.projection_fit_sources.is_empty() {
            None
        } else {
            let pairs = decontam.pairs(
                "distill.projection_fit_sources",
                read_sources(&dc.projection_fit_sources, "distill.projection_fit_sources")?,
            );
            // Split as training data is (with [[data.val_sources]] it is not split), but other
            // sources split otherwise: the run's own held-out sentences are taken out too, so
            // that the fit never sees them.
            let mut pool: Vec<Pair> = if cfg.data.val_sources.is_empty() {
                split_by_source(pairs, cfg.data.val_size, cfg.seed).context("distill.projection_fit_sources")?.0
            } else {
                pairs
            };
            let held_back = drop_val_sources(&mut pool, &val);
            errln!(
                "xsent train: the projection is fitted on {} pairs of distill.projection_fit_sources ({held_back} more held out: they hold validation sentences)",
                pool.len()
            );
            if pool.is_empty() {
                bail!("distill.projection_fit_sources: no pair is left once the validation sentences are held out");
            }
            Some(pool)
        };
        // The teacher embeds the sources, and the fit's sources when they are others.
        let mut teacher_sentences = sources.clone();
        if let Some(pool) = &fit_pool {
            teacher_sentences.extend(pool.iter().map(|p| p.src.clone()));
            teacher_sentences.sort_unstable();
            teacher_sentences.dedup();
        }
        let teacher_row: HashMap<&str, usize> =
            teacher_sentences.iter().enumerate().map(|(i, s)| (s.as_str(), i)).collect();
        let device = crate::device::parse_device(&cfg.train.device)?;
        let mut teacher_normalized = None;
        // Before the teacher's pass: a student that cannot be trained is refused at once.
        crate::model::quantized::refuse_for_training(&dc.student).with_context(|| format!("student {}", dc.student))?;
        let teacher = if dc.uses_teacher() {
            let teacher_opts = LoadOptions {
                device: device.clone(),
                prefix: Some(dc.teacher_prefix.clone()),
                max_length: Some(dc.max_length),
                ..Default::default()
            };
            let mut teacher_enc = SentenceEncoder::load(&dc.teacher, &teacher_opts)
                .with_context(|| format!("loading teacher {}", dc.teacher))?;
            // The teacher's output as sentence-transformers gives it (seed 003 regresses onto
            // M(s) itself), unless the config says otherwise; part of the cache key.
            teacher_enc.normalize = dc.teacher_normalize.or(teacher_enc.files.declares_normalize).unwrap_or(true);
            teacher_normalized = Some(teacher_enc.normalize);
            let (rows, dim) =
                crate::train::cache::embeddings(&teacher_enc, &teacher_sentences, dc.embed_batch_size, "teacher")?;
            drop(teacher_enc);
            Some((Tensor::from_vec(rows, (teacher_sentences.len(), dim), &Device::Cpu)?, dim))
        } else {
            errln!("xsent train: targets = \"student\" and projection = \"none\": no teacher is loaded");
            None
        };

        let student_opts = LoadOptions {
            prefix: Some(dc.student_prefix.clone()),
            layers: dc.student_layers,
            max_length: Some(dc.max_length),
            normalize: Some(dc.normalize.or(teacher_normalized).unwrap_or(true)),
            trainable: true,
            device: device.clone(),
            ..Default::default()
        };
        let mut student = SentenceEncoder::load(&dc.student, &student_opts)
            .with_context(|| format!("loading student {}", dc.student))?;
        if let Some(p) = dc.dropout {
            student.encoder.hidden_dropout = p;
            student.encoder.attention_dropout = p;
        }
        let h = student.encoder.hidden_size();
        let mut init_rng = Rng::seed_from_u64(cfg.seed ^ 0xde75e);
        // Loaded whenever `uses_teacher()`, which every branch below that reads it implies.
        let teacher_dim = || teacher.as_ref().map(|t| t.1).context(NO_TEACHER);
        match dc.projection {
            Projection::None => {
                if dc.targets == Targets::Teacher && student.dim() != teacher_dim()? {
                    bail!(
                        "the student gives {}-dim vectors and the teacher {}-dim: set distill.projection = \"lstsq\" (or procrustes/identity/random) to add a Dense layer",
                        student.dim(),
                        teacher_dim()?
                    );
                }
            }
            Projection::Identity => {
                let dim = teacher_dim()?;
                if h != dim {
                    bail!("distill.projection = \"identity\" needs equal dimensions (student {h}, teacher {dim})");
                }
                let w = Tensor::eye(h, DType::F32, &device)?;
                student.set_dense(Dense::new(w, Tensor::zeros(dim, DType::F32, &device)?))?;
            }
            Projection::Random => {
                use rand_distr::{Distribution, Uniform};
                let dim = teacher_dim()?;
                let bound = 1.0 / (h as f32).sqrt();
                let u = Uniform::new(-bound, bound).expect("a valid range");
                let w: Vec<f32> = (0..dim * h).map(|_| u.sample(&mut init_rng)).collect();
                let b: Vec<f32> = (0..dim).map(|_| u.sample(&mut init_rng)).collect();
                student.set_dense(Dense::new(
                    Tensor::from_vec(w, (dim, h), &device)?,
                    Tensor::from_vec(b, dim, &device)?,
                ))?;
            }
            Projection::Lstsq | Projection::Procrustes => {
                let (tvecs, dim) = teacher.as_ref().context(NO_TEACHER)?;
                let dim = *dim;
                let fit = fit_examples(
                    fit_pool.as_deref().unwrap_or(&train),
                    dc.projection_fit,
                    dc.projection_fit_size,
                    &mut init_rng,
                );
                let t0 = std::time::Instant::now();
                let inputs: Vec<&str> = fit.iter().map(|&(_, input)| input).collect();
                let x = student.embed_pooled(&inputs, dc.embed_batch_size)?;
                let y: Vec<Vec<f32>> = fit
                    .iter()
                    .map(|(s, _)| tvecs.get(teacher_row[*s]).and_then(|r| r.to_vec1()))
                    .collect::<candle_core::Result<_>>()?;
                let (w, b, how) = if dc.projection == Projection::Lstsq {
                    let (w, b) = fit_affine(&x, &y, 1e-3)?;
                    (w, b, "least squares")
                } else {
                    (fit_orthogonal(&x, &y)?, vec![0f32; dim], "orthogonal Procrustes")
                };
                student.set_dense(Dense::new(
                    Tensor::from_vec(w, (dim, h), &device)?,
                    Tensor::from_vec(b, dim, &device)?,
                ))?;
                errln!(
                    "xsent train: projection fitted by {how} on {} sentences ({:.1} s)",
                    fit.len(),
                    t0.elapsed().as_secs_f64()
                );
            }
        }
        let infer = student.detached();
        let (teacher, dim) = match (dc.targets, teacher) {
            (Targets::Teacher, Some((t, d))) => {
                // The rows of the training and validation sources, in their order (all the rows
                // unless the fit had sources of its own).
                let idx: Vec<u32> = sources.iter().map(|s| teacher_row[s.as_str()] as u32).collect();
                (t.index_select(&Tensor::new(idx, &Device::Cpu)?, 0)?, d)
            }
            (Targets::Teacher, None) => bail!(NO_TEACHER),
            (Targets::Student, _) => {
                // The frozen start of the student is the teacher from here on.
                let (rows, d) = crate::train::cache::embeddings(&infer, &sources, dc.embed_batch_size, "student")?;
                (Tensor::from_vec(rows, (sources.len(), d), &Device::Cpu)?, d)
            }
        };
        Ok(Self {
            digest,
            student,
            infer,
            train,
            val,
            teacher_rows,
            teacher,
            dim,
            embed_batch: dc.embed_batch_size,
            source_weight: dc.source_weight,
            overlaps: decontam.overlaps,
            compute: Compute::new(cfg.train.precision, &device),
            tokens: TokensAhead::default(),
        })
    }

    fn teacher_batch(&self, pairs: &[&Pair]) -> Result<Tensor> {
        let idx: Vec<u32> = pairs.iter().map(|p| self.teacher_rows[&p.src] as u32).collect();
        Ok(self.teacher.index_select(&Tensor::new(idx, &Device::Cpu)?, 0)?)
    }
}

impl Recipe for Distill {
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
        self.train.len()
    }

    fn params(&self) -> Params {
        self.student.trainable_params()
    }

    /// On the CPU shards run on separate cores; a GPU takes the whole batch at once.
    fn plan(&self) -> StepPlan {
        if self.student.device().is_cpu() {
            StepPlan::Sharded
        } else {
            StepPlan::Whole
        }
    }

    /// Pairs of similar length go into the same shard (less padding).
    fn order_batch(&self, batch: &mut [usize]) {
        batch.sort_by_key(|&i| (self.train[i].src.len() + self.train[i].tgt.len(), i));
    }

    /// The next step's pairs tokenised on a background thread.
    fn ahead(&self, _now: &StepBatches, next: &StepBatches) -> Option<AheadJob> {
        let tt = self.student.text_tokenizer();
        let examples = distinct(next);
        let texts = examples.iter().map(|&i| vec![self.train[i].src.clone(), self.train[i].tgt.clone()]).collect();
        Some(Box::new(move || Ok(Box::new(TokensAhead::tokenize(&tt, examples, texts)?) as Prepared)))
    }

    fn take_ahead(&mut self, prepared: Prepared) -> Result<()> {
        let map = prepared.downcast::<TokenMap>().map_err(|_| anyhow::anyhow!("distill: not its tokens"))?;
        self.tokens.set(*map);
        Ok(())
    }

    fn loss(&self, batch: &[usize], rng: &mut crate::model::TrainContext) -> Result<StepLoss> {
        let pairs: Vec<&Pair> = batch.iter().map(|&i| &self.train[i]).collect();
        let b = pairs.len();
        let encoder = self.compute.encoder(&self.student.encoder)?;
        let ahead = self.tokens.columns(batch);
        let emb = match &ahead {
            Some(enc) => {
                self.student.forward_encoded(&encoder, &enc.iter().collect::<Vec<_>>(), &mut Mode::Train(rng))?
            }
            None => {
                let texts: Vec<&str> =
                    pairs.iter().map(|p| p.src.as_str()).chain(pairs.iter().map(|p| p.tgt.as_str())).collect();
                self.student.forward_on(&encoder, &texts, &mut Mode::Train(rng))?
            }
        };
        let target = self.teacher_batch(&pairs)?.to_device(emb.device())?;
        let mse_src = emb.narrow(0, 0, b)?.sub(&target)?.sqr()?.mean_all()?;
        let mse_tgt = emb.narrow(0, b, b)?.sub(&target)?.sqr()?.mean_all()?;
        let total = (mse_src.affine(self.source_weight, 0.0)? + &mse_tgt)?;
        let later = vec![("mse_src".to_string(), mse_src), ("mse_tgt".to_string(), mse_tgt)];
        let terms = vec![("ahead".to_string(), if ahead.is_some() { 1.0 } else { 0.0 })];
        Ok(StepLoss { total, terms, later, sentences: 2 * b })
    }

    fn begin_step(&mut self) -> Result<()> {
        self.compute.refresh(&self.student.encoder)
    }

    fn validate(&mut self) -> Result<Vec<(String, f64)>> {
        if self.val.is_empty() {
            bail!("no validation pairs: set data.val_size > 0");
        }
        let src: Vec<&str> = self.val.iter().map(|p| p.src.as_str()).collect();
        let tgt: Vec<&str> = self.val.iter().map(|p| p.tgt.as_str()).collect();
        let es = self.infer.embed_unchecked(&src, self.embed_batch)?;
        let et = self.infer.embed_unchecked(&tgt, self.embed_batch)?;
        let teacher = self.teacher_batch(&self.val.iter().collect::<Vec<_>>())?.to_vec2::<f32>()?;
        let mse = |a: &[Vec<f32>]| -> f64 {
            let n = (a.len() * self.dim) as f64;
            a.iter()
                .zip(&teacher)
                .flat_map(|(x, y)| x.iter().zip(y).map(|(u, v)| ((u - v) as f64).powi(2)))
                .sum::<f64>()
                / n
        };
        let (ms, mt) = (mse(&es), mse(&et));
        let (xs, xt) = (Matrix::normalized(&es), Matrix::normalized(&et));
        let acc = translation_accuracy;
        let (a1, a2) = (acc(&xs, &xt)?, acc(&xt, &xs)?);
        Ok(vec![
            ("mse_x100".into(), 100.0 * mt),
            ("mse_src_x100".into(), 100.0 * ms),
            ("acc_src2tgt".into(), a1),
            ("acc_tgt2src".into(), a2),
            ("acc_mean".into(), (a1 + a2) / 2.0),
        ])
    }

    fn default_best(&self) -> (String, BestMode) {
        ("mse_x100".into(), BestMode::Min)
    }

    fn save_model(&self, dir: &Path) -> Result<()> {
        self.student.save(dir)
    }
}

/// The examples of a closed-form projection fit, as (source, input) pairs: the fit predicts the
/// teacher's vector of `source` from the student's vector of `input`. A seeded sample of `size`
/// distinct training source sentences (each its own input), or of `size` training pairs (each
/// giving two rows, its source and its translation as inputs).
fn fit_examples<'a>(train: &'a [Pair], fit_on: FitOn, size: usize, rng: &mut Rng) -> Vec<(&'a str, &'a str)> {
    match fit_on {
        FitOn::Source => {
            let mut fit: Vec<&str> = train.iter().map(|p| p.src.as_str()).collect();
            fit.sort_unstable();
            fit.dedup();
            fit.shuffle(rng);
            fit.truncate(size);
            fit.into_iter().map(|s| (s, s)).collect()
        }
        FitOn::Pairs => {
            let mut fit: Vec<(&str, &str)> = train.iter().map(|p| (p.src.as_str(), p.tgt.as_str())).collect();
            fit.shuffle(rng);
            fit.truncate(size);
            fit.iter().map(|&(s, _)| (s, s)).chain(fit.iter().copied()).collect()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::train::split::tests::de_fr_pairs;

    #[test]
    fn projection_fit_examples_are_sources_or_both_sides_of_pairs() {
        let train = de_fr_pairs(10);
        let src = fit_examples(&train, FitOn::Source, 6, &mut Rng::seed_from_u64(1));
        assert_eq!(src.len(), 6);
        let mut distinct: Vec<&str> = src.iter().map(|e| e.0).collect();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), 6, "distinct sources: {src:?}");
        assert!(src.iter().all(|(s, x)| s == x && s.starts_with('s')));
        let all = fit_examples(&train, FitOn::Source, 100, &mut Rng::seed_from_u64(1));
        assert_eq!(all.len(), 10, "each source once");

        let pairs = fit_examples(&train, FitOn::Pairs, 5, &mut Rng::seed_from_u64(1));
        assert_eq!(pairs.len(), 10);
        let (sources, translations) = pairs.split_at(5);
        for (a, b) in sources.iter().zip(translations) {
            assert_eq!(a.0, a.1, "first half: each source predicts its own teacher vector");
            assert_eq!(a.0, b.0, "second half: the same sources, in the same order");
            assert!(train.iter().any(|p| p.src == b.0 && p.tgt == b.1), "{b:?} is a training pair");
        }
        assert_eq!(pairs, fit_examples(&train, FitOn::Pairs, 5, &mut Rng::seed_from_u64(1)), "seeded");
    }
}
