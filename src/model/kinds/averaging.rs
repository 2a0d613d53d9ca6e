//! Averaging encoders (seed 002 §2): a sentence is the mean of its units' embeddings, and the
//! embedding table is the model's only parameter, one table shared by all languages.
//! - `sp`: SentencePiece-style subword pieces (a `tokenizer.json`, see [`super::vocab`]);
//! - `word`: words, the most frequent types plus `<unk>` (a `WordLevel` `tokenizer.json`);
//! - `trigram`: character trigrams (`trigrams.txt`, one per line; unknown trigrams are skipped).
//!
//! Model directory: `xsent.json` (`"kind": "averaging"`, units, dim, …), `model.safetensors`
//! (`embeddings`, `[vocab, dim]` f32; `embeddings.safetensors` in models saved by earlier
//! versions) and the vocabulary file. With sp or word units it is also a sentence-transformers
//! model: `modules.json` lists a `StaticEmbedding` (the same tokenizer, the mean of the rows)
//! and a `Normalize`. Inference is a plain loop over the f32 table, sentences spread over
//! [`crate::threads::threads`] workers.

use super::vocab;
use crate::model::embedder::{Embedded, Embedder};
use crate::model::pooling::l2_normalize_row;
use anyhow::{bail, ensure, Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::Path;
use tokenizers::normalizers::NormalizerWrapper;
use tokenizers::Tokenizer;

/// What a sentence is cut into.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Units {
    Sp,
    Word,
    Trigram,
}

impl std::fmt::Display for Units {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Units::Sp => "sp",
            Units::Word => "word",
            Units::Trigram => "trigram",
        })
    }
}

/// `xsent.json` of an averaging model directory.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Meta {
    pub kind: String,
    pub units: Units,
    pub dim: usize,
    pub vocab_size: usize,
    /// Inputs are lowercased (trigram units; sp/word record it in their tokenizer.json too).
    pub lowercase: bool,
    /// False for the untrained ("random") encoders of seed 002 Table 2.
    pub trained: bool,
    #[serde(default)]
    pub xsent_version: String,
}

/// Text → unit ids.
pub struct Segmenter {
    pub units: Units,
    pub lowercase: bool,
    tokenizer: Option<Tokenizer>,
    trigrams: Option<(Vec<String>, HashMap<String, u32>)>,
    norm: NormalizerWrapper,
}

impl Segmenter {
    /// Subword or word units from a tokenizer.
    pub fn from_tokenizer(units: Units, tokenizer: Tokenizer, lowercase: bool) -> Result<Self> {
        ensure!(units != Units::Trigram, "trigram units have no tokenizer");
        Ok(Self { units, lowercase, tokenizer: Some(tokenizer), trigrams: None, norm: vocab::normalizer(lowercase) })
    }

    /// Character-trigram units from a trigram list (id = position).
    pub fn from_trigrams(list: Vec<String>, lowercase: bool) -> Result<Self> {
        let mut map = HashMap::with_capacity(list.len());
        for (i, g) in list.iter().enumerate() {
            if map.insert(g.clone(), i as u32).is_some() {
                bail!("trigram {g:?} is listed twice");
            }
        }
        Ok(Self {
            units: Units::Trigram,
            lowercase,
            tokenizer: None,
            trigrams: Some((list, map)),
            norm: vocab::normalizer(lowercase),
        })
    }

    /// Learn the vocabulary from `texts`: `size` pieces (sp), the `size` most frequent words
    /// (word) or trigrams (trigram).
    pub fn train(
        units: Units,
        texts: &[&str],
        size: usize,
        subword: vocab::SubwordModel,
        lowercase: bool,
    ) -> Result<Self> {
        match units {
            Units::Sp => Self::from_tokenizer(units, vocab::train_subword(texts, subword, size, lowercase)?, lowercase),
            Units::Word => Self::from_tokenizer(units, vocab::train_words(texts, size, lowercase)?, lowercase),
            Units::Trigram => Self::from_trigrams(vocab::train_trigrams(texts, size, lowercase)?, lowercase),
        }
    }

    pub fn vocab_size(&self) -> usize {
        match (&self.tokenizer, &self.trigrams) {
            (Some(t), _) => t.get_vocab_size(true),
            (_, Some((list, _))) => list.len(),
            _ => 0,
        }
    }

    /// Unit ids of one text.
    pub fn ids(&self, text: &str) -> Result<Vec<u32>> {
        if let Some(t) = &self.tokenizer {
            let enc = t.encode_fast(text, false).map_err(|e| anyhow::anyhow!("tokenizing {text:?}: {e}"))?;
            return Ok(enc.get_ids().to_vec());
        }
        let (_, map) = self.trigrams.as_ref().expect("a segmenter has a tokenizer or trigrams");
        let mut out = Vec::new();
        vocab::trigrams(&vocab::normalize(&self.norm, text)?, |g| {
            if let Some(&i) = map.get(g) {
                out.push(i);
            }
        });
        Ok(out)
    }

    /// Unit ids of many texts, on [`crate::threads::threads`] workers, each text cut first at
    /// `max_bytes` bytes (at a character boundary), and which texts were cut. An averaging model
    /// has no token limit: the cut is what bounds the memory tokenising takes (about 85 bytes
    /// per byte of text), as `--max-line-bytes` does for the transformer models.
    pub fn ids_batch<S: AsRef<str> + Sync>(&self, texts: &[S], max_bytes: usize) -> Result<(Vec<Vec<u32>>, Vec<bool>)> {
        let head = |t: &str| -> (usize, bool) {
            if t.len() <= max_bytes {
                (t.len(), false)
            } else {
                (t.floor_char_boundary(max_bytes), true)
            }
        };
        let chunks = par_chunks(texts.len(), |range| {
            range
                .map(|i| {
                    let t = texts[i].as_ref();
                    let (end, cut) = head(t);
                    Ok((self.ids(&t[..end])?, cut))
                })
                .collect::<Result<Vec<_>>>()
        });
        let (mut out, mut cut) = (Vec::with_capacity(texts.len()), Vec::with_capacity(texts.len()));
        for c in chunks {
            for (ids, was_cut) in c? {
                out.push(ids);
                cut.push(was_cut);
            }
        }
        Ok((out, cut))
    }

    /// Write the vocabulary file into `dir`.
    pub fn save(&self, dir: &Path) -> Result<()> {
        if let Some(t) = &self.tokenizer {
            t.save(dir.join("tokenizer.json"), false)
                .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", dir.join("tokenizer.json").display()))?;
        }
        if let Some((list, _)) = &self.trigrams {
            let mut text = list.join("\n");
            text.push('\n');
            std::fs::write(dir.join("trigrams.txt"), text)
                .with_context(|| format!("cannot write {}", dir.join("trigrams.txt").display()))?;
        }
        Ok(())
    }

    pub fn load(dir: &Path, units: Units, lowercase: bool) -> Result<Self> {
        match units {
            Units::Sp | Units::Word => {
                let p = dir.join("tokenizer.json");
                crate::data::require_file(
                    &p,
                    "vocabulary",
                    "an averaging model with sp or word units keeps its vocabulary in tokenizer.json",
                )?;
                let t = Tokenizer::from_file(&p).map_err(|e| anyhow::anyhow!("cannot load {}: {e}", p.display()))?;
                Self::from_tokenizer(units, t, lowercase)
            }
            Units::Trigram => {
                let p = dir.join("trigrams.txt");
                crate::data::require_file(
                    &p,
                    "vocabulary",
                    "an averaging model with trigram units keeps its trigrams in trigrams.txt, one per line",
                )?;
                let text = std::fs::read_to_string(&p).with_context(|| format!("cannot read {}", p.display()))?;
                let list: Vec<String> = text.split('\n').filter(|l| !l.is_empty()).map(str::to_string).collect();
                Self::from_trigrams(list, lowercase).with_context(|| format!("in {}", p.display()))
            }
        }
    }
}

/// Run `f` over `0..n` cut into one contiguous range per worker; results in order.
pub fn par_chunks<T: Send>(n: usize, f: impl Fn(std::ops::Range<usize>) -> T + Sync) -> Vec<T> {
    let workers = crate::threads::threads().min(n.div_ceil(64)).max(1);
    if workers == 1 {
        return vec![f(0..n)];
    }
    let per = n.div_ceil(workers);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers)
            .map(|w| {
                let f = &f;
                s.spawn(move || f(w * per..((w + 1) * per).min(n)))
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("an averaging worker panicked")).collect()
    })
}

/// `out` = mean of the rows `ids` of `table` (`dim` columns); zero when `ids` is empty.
/// Ids must be below the table's rows (checked by the callers once per batch). On x86-64 CPUs
/// with AVX2 the same loop runs compiled for AVX2 (8 floats per add instead of SSE2's 4).
#[inline]
pub fn average_into(table: &[f32], dim: usize, ids: &[u32], out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU supports AVX2 (checked just above).
            unsafe { average_into_avx2(table, dim, ids, out) };
            return;
        }
    }
    average_into_portable(table, dim, ids, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn average_into_avx2(table: &[f32], dim: usize, ids: &[u32], out: &mut [f32]) {
    average_into_portable(table, dim, ids, out)
}

#[inline(always)]
fn average_into_portable(table: &[f32], dim: usize, ids: &[u32], out: &mut [f32]) {
    out.fill(0.0);
    for &i in ids {
        let row = &table[i as usize * dim..][..dim];
        for (o, e) in out.iter_mut().zip(row) {
            *o += e;
        }
    }
    if !ids.is_empty() {
        let s = 1.0 / ids.len() as f32;
        out.iter_mut().for_each(|o| *o *= s);
    }
}

/// Sentence vectors `[n, dim]` (row-major) of sentences given as unit ids, `offsets[i]..offsets[i+1]`
/// of `ids` for sentence i, on [`crate::threads::threads`] workers.
pub fn embed_ids_flat(table: &[f32], dim: usize, ids: &[u32], offsets: &[usize], normalize: bool) -> Result<Vec<f32>> {
    let rows = table.len() / dim.max(1);
    if let Some(&bad) = ids.iter().find(|&&i| i as usize >= rows) {
        bail!("unit id {bad} is out of range: the table has {rows} rows");
    }
    ensure!(
        offsets.first() == Some(&0) && offsets.last() == Some(&ids.len()),
        "offsets must run from 0 to the number of ids"
    );
    let n = offsets.len() - 1;
    let mut out = vec![0f32; n * dim];
    let workers = crate::threads::threads().min(n.div_ceil(256)).max(1);
    let per = n.div_ceil(workers).max(1);
    std::thread::scope(|s| {
        for (w, chunk) in out.chunks_mut(per * dim).enumerate() {
            s.spawn(move || {
                for (k, row) in chunk.chunks_mut(dim).enumerate() {
                    let i = w * per + k;
                    average_into(table, dim, &ids[offsets[i]..offsets[i + 1]], row);
                    if normalize {
                        l2_normalize_row(row);
                    }
                }
            });
        }
    });
    Ok(out)
}

/// Flatten per-sentence ids into `(ids, offsets)` for [`embed_ids_flat`].
pub fn flatten(ids: &[Vec<u32>]) -> (Vec<u32>, Vec<usize>) {
    let mut flat = Vec::with_capacity(ids.iter().map(Vec::len).sum());
    let mut off = Vec::with_capacity(ids.len() + 1);
    off.push(0);
    for s in ids {
        flat.extend_from_slice(s);
        off.push(flat.len());
    }
    (flat, off)
}

/// A loaded averaging encoder.
pub struct AveragingModel {
    pub meta: Meta,
    pub segmenter: Segmenter,
    /// `[vocab, dim]`, row-major.
    pub table: Vec<f32>,
    pub normalize: bool,
    pub prefix: String,
    /// Bytes of a text (its prefix included) averaged at most: a longer one is cut there first
    /// and counts as truncated (`--max-line-bytes`, [`crate::model::sentence::DEFAULT_MAX_TEXT_BYTES`]).
    pub max_text_bytes: usize,
    /// The files it was loaded from (xsent.json, the table, the vocabulary).
    pub files: Vec<std::path::PathBuf>,
}

impl AveragingModel {
    /// Embedding rows drawn from N(0, std²) (seed 002 §3.3: the random encoders use N(0, 1)).
    /// An error, not an abort, when the table cannot be allocated.
    pub fn random_table(vocab: usize, dim: usize, std: f32, seed: u64) -> Result<Vec<f32>> {
        use rand::SeedableRng;
        use rand_distr::{Distribution, Normal};
        let mut rng = crate::model::encoder::Rng::seed_from_u64(seed);
        let normal = Normal::new(0f32, std).map_err(|e| anyhow::anyhow!("init std {std}: {e}"))?;
        let len = vocab.checked_mul(dim).filter(|&l| l <= isize::MAX as usize / 4);
        let mut table = Vec::new();
        if len.is_none_or(|l| table.try_reserve_exact(l).is_err()) {
            bail!(
                "an embedding table of {vocab} units × {dim} dimensions ({:.1} GB) cannot be allocated: lower the dimension or the vocabulary size",
                vocab as f64 * dim as f64 * 4.0 / 1e9
            );
        }
        table.extend((0..vocab * dim).map(|_| normal.sample(&mut rng)));
        Ok(table)
    }

    /// Write a model directory: xsent.json, model.safetensors, the vocabulary and, for sp and
    /// word units, the sentence-transformers modules.
    pub fn save_parts(dir: &Path, segmenter: &Segmenter, dim: usize, table: &[f32], trained: bool) -> Result<()> {
        let vocab_size = segmenter.vocab_size();
        ensure!(table.len() == vocab_size * dim, "the table has {} values, expected {vocab_size} × {dim}", table.len());
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let meta = Meta {
            kind: "averaging".into(),
            units: segmenter.units,
            dim,
            vocab_size,
            lowercase: segmenter.lowercase,
            trained,
            xsent_version: crate::VERSION.into(),
        };
        std::fs::write(dir.join("xsent.json"), serde_json::to_string_pretty(&meta)?)?;
        let t = candle_core::Tensor::from_slice(table, (vocab_size, dim), &candle_core::Device::Cpu)?;
        crate::model::weights::save_tensors(
            &HashMap::from([("embeddings".to_string(), t)]),
            &dir.join("model.safetensors"),
        )?;
        if segmenter.units != Units::Trigram {
            // sentence-transformers' StaticEmbedding encodes with this tokenizer.json (no special
            // tokens) and averages the rows (it reads model2vec's `embeddings` key): this model.
            std::fs::create_dir_all(dir.join("1_Normalize"))?;
            let modules = serde_json::json!([
                {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.StaticEmbedding"},
                {"idx": 1, "name": "1", "path": "1_Normalize", "type": "sentence_transformers.models.Normalize"},
            ]);
            std::fs::write(dir.join("modules.json"), serde_json::to_string_pretty(&modules)?)?;
        }
        segmenter.save(dir)
    }

    pub fn save(&self, dir: &Path) -> Result<()> {
        Self::save_parts(dir, &self.segmenter, self.meta.dim, &self.table, self.meta.trained)
    }

    /// Load a model directory written by [`save_parts`](Self::save_parts).
    pub fn load(dir: &Path, normalize: bool, prefix: Option<&str>, max_text_bytes: usize) -> Result<Self> {
        let mp = dir.join("xsent.json");
        let meta: Meta = serde_json::from_str(
            &std::fs::read_to_string(&mp).with_context(|| format!("cannot read {}", mp.display()))?,
        )
        .with_context(|| format!("invalid {}", mp.display()))?;
        ensure!(meta.kind == "averaging", "{} names kind {:?}, not \"averaging\"", mp.display(), meta.kind);
        ensure!(meta.dim > 0, "{}: dim must be positive", mp.display());
        let segmenter = Segmenter::load(dir, meta.units, meta.lowercase)?;
        let mut ep = dir.join("model.safetensors");
        if !ep.is_file() && dir.join("embeddings.safetensors").is_file() {
            ep = dir.join("embeddings.safetensors"); // saved by an earlier version
        }
        crate::data::require_file(&ep, "embeddings", "an averaging model keeps its table in model.safetensors")?;
        let tensors = crate::model::weights::load_safetensors(&ep, &candle_core::Device::Cpu, "the embeddings")?;
        let t = tensors.get("embeddings").with_context(|| format!("{} has no tensor `embeddings`", ep.display()))?;
        let (v, d) = t.dims2().with_context(|| format!("{}: `embeddings` must be 2-D", ep.display()))?;
        if d != meta.dim || v != segmenter.vocab_size() {
            bail!(
                "{}: `embeddings` is {v} × {d}, but xsent.json says dim {} and the vocabulary has {} units",
                ep.display(),
                meta.dim,
                segmenter.vocab_size()
            );
        }
        let table: Vec<f32> = t.to_dtype(candle_core::DType::F32)?.flatten_all()?.to_vec1()?;
        let max_text_bytes = max_text_bytes.max(1);
        let vocabulary = dir.join(if meta.units == Units::Trigram { "trigrams.txt" } else { "tokenizer.json" });
        let files = vec![mp, ep, vocabulary];
        Ok(Self { meta, segmenter, table, normalize, prefix: prefix.unwrap_or("").to_string(), max_text_bytes, files })
    }

    /// Sentence vectors of texts, flattened `[n, dim]`, and which texts were cut at
    /// `max_text_bytes`.
    pub fn embed_flat(&self, texts: &[&str]) -> Result<(Vec<f32>, Vec<bool>)> {
        let (ids, cut) = if self.prefix.is_empty() {
            self.segmenter.ids_batch(texts, self.max_text_bytes)?
        } else {
            let with: Vec<String> = texts.iter().map(|t| format!("{}{t}", self.prefix)).collect();
            self.segmenter.ids_batch(&with, self.max_text_bytes)?
        };
        let (flat, off) = flatten(&ids);
        Ok((embed_ids_flat(&self.table, self.meta.dim, &flat, &off, self.normalize)?, cut))
    }
}

impl Embedder for AveragingModel {
    fn dim(&self) -> usize {
        self.meta.dim
    }

    fn embed_checked(&self, texts: &[&str], _batch_size: usize) -> Result<Embedded> {
        let (flat, truncated) = self.embed_flat(texts)?;
        Ok(Embedded { rows: flat.chunks(self.meta.dim).map(<[f32]>::to_vec).collect(), truncated })
    }

    fn prefix(&self) -> &str {
        &self.prefix
    }

    fn files(&self) -> Vec<std::path::PathBuf> {
        self.files.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dispatched_average_equals_the_portable_loop() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
        let (rows, dim) = (50, 300);
        let table: Vec<f32> = (0..rows * dim).map(|_| rng.random_range(-1.0..1.0)).collect();
        for len in [1usize, 7, 33] {
            let ids: Vec<u32> = (0..len).map(|_| rng.random_range(0..rows as u32)).collect();
            let (mut a, mut b) = (vec![0f32; dim], vec![0f32; dim]);
            average_into(&table, dim, &ids, &mut a);
            average_into_portable(&table, dim, &ids, &mut b);
            assert_eq!(a, b);
            let manual: Vec<f32> =
                (0..dim).map(|j| ids.iter().map(|&i| table[i as usize * dim + j]).sum::<f32>() / len as f32).collect();
            assert!(a.iter().zip(&manual).all(|(x, y)| (x - y).abs() < 1e-5));
        }
    }

    #[test]
    fn average_and_normalize() {
        let table = [1.0, 0.0, 3.0, 4.0, 0.0, 2.0];
        let mut out = [9.0; 2];
        average_into(&table, 2, &[0, 1], &mut out);
        assert_eq!(out, [2.0, 2.0]);
        average_into(&table, 2, &[], &mut out);
        assert_eq!(out, [0.0, 0.0], "no units: a zero vector");
        let e = embed_ids_flat(&table, 2, &[1, 2, 2], &[0, 1, 1, 3], true).unwrap();
        assert_eq!(e, vec![0.6, 0.8, 0.0, 0.0, 0.0, 1.0]);
        assert!(embed_ids_flat(&table, 2, &[3], &[0, 1], false).unwrap_err().to_string().contains("out of range"));
    }
}
