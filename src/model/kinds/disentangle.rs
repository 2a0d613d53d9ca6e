//! Meaning / language heads over a frozen sentence encoder (Tiyajamorn et al. 2021, seed 004 §3).
//!
//! MLP_M and MLP_L are single linear layers `d → d` that split a sentence embedding `e` into a
//! meaning embedding `ê_M` and a language embedding `ê_L` (trained so that `ê_M + ê_L ≈ e`);
//! MLP_I is a linear language-identification layer on `ê_L`.
//!
//! A trained model directory holds `heads.safetensors` and `xsent.json` with `"kind":
//! "disentangle"`, the base encoder it was trained on (as given and as an absolute path) and that
//! encoder's settings. Loading it loads the base encoder too; the embeddings it gives are the
//! meaning head's by default, the language head's with `--head language`.

use crate::model::embedder::{Embedded, Embedder};
use crate::model::encoder::Linear;
use crate::model::pooling::Pooling;
use crate::model::sentence::{LoadOptions, SentenceEncoder};
use crate::model::weights::{self, Params};
use anyhow::{bail, ensure, Context, Result};
use candle_core::{DType, Device, Tensor};
use std::collections::HashMap;
use std::path::Path;

/// Which head's output a loaded model gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Head {
    Meaning,
    Language,
}

impl Head {
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "meaning" => Ok(Head::Meaning),
            "language" => Ok(Head::Language),
            other => {
                bail!("--head {other:?}: a disentangle model has the heads `meaning` (the default) and `language`")
            }
        }
    }
}

/// The three heads.
#[derive(Debug, Clone)]
pub struct Heads {
    pub meaning: Linear,
    pub language: Linear,
    pub langid: Linear,
}

const NAMES: [&str; 6] =
    ["meaning.weight", "meaning.bias", "language.weight", "language.bias", "langid.weight", "langid.bias"];

impl Heads {
    /// Heads initialised as PyTorch's `nn.Linear` (uniform in ±1/√fan_in) from a seeded RNG.
    pub fn random(dim: usize, langs: usize, rng: &mut impl rand::Rng, device: &Device) -> Result<Self> {
        let mut linear = |out: usize, inp: usize| -> Result<Linear> {
            let bound = 1.0 / (inp as f32).sqrt();
            let w: Vec<f32> = (0..out * inp).map(|_| rng.random_range(-bound..bound)).collect();
            let b: Vec<f32> = (0..out).map(|_| rng.random_range(-bound..bound)).collect();
            Ok(Linear::new(Tensor::from_vec(w, (out, inp), device)?, Tensor::from_vec(b, out, device)?))
        };
        Ok(Self { meaning: linear(dim, dim)?, language: linear(dim, dim)?, langid: linear(langs, dim)? })
    }

    pub fn dim(&self) -> usize {
        self.meaning.weight.dims()[1]
    }

    pub fn tensors(&self) -> HashMap<String, Tensor> {
        let t = [
            &self.meaning.weight,
            &self.meaning.bias,
            &self.language.weight,
            &self.language.bias,
            &self.langid.weight,
            &self.langid.bias,
        ];
        NAMES.iter().zip(t).map(|(n, t)| (n.to_string(), t.clone())).collect()
    }

    fn from_map(t: &HashMap<String, Tensor>, what: &Path) -> Result<Self> {
        let get = |n: &str| -> Result<Tensor> {
            let v = t.get(n).with_context(|| format!("{} has no tensor {n}", what.display()))?;
            weights::check_float_parameter(v, n, what)?;
            Ok(v.to_dtype(DType::F32)?)
        };
        if let Some((n, first)) = weights::unexpected_tensors(t.keys(), |k| NAMES.contains(&k)) {
            bail!(
                "{} holds {n} tensor(s) the heads do not have (first: {first}); it has {}",
                what.display(),
                NAMES.join(", ")
            );
        }
        let heads = Self {
            meaning: Linear::new(get(NAMES[0])?, get(NAMES[1])?),
            language: Linear::new(get(NAMES[2])?, get(NAMES[3])?),
            langid: Linear::new(get(NAMES[4])?, get(NAMES[5])?),
        };
        // Every shape follows from d (meaning.weight's) and the number of languages n (langid's
        // rows): checked here, naming the tensor, not at the first forward (an outside probe).
        let dims = |l: &Linear| (l.weight.dims().to_vec(), l.bias.dims().to_vec());
        let (mw, _) = dims(&heads.meaning);
        let d = match mw[..] {
            [a, b] if a == b && a > 0 => a,
            _ => bail!("{}: meaning.weight has shape {mw:?}, not [d, d]", what.display()),
        };
        let n = match heads.langid.weight.dims() {
            [n, _] if *n > 0 => *n,
            other => bail!(
                "{}: langid.weight has shape {other:?}, not [languages, {d}] with at least one language",
                what.display()
            ),
        };
        for (name, l, rows) in
            [("meaning", &heads.meaning, d), ("language", &heads.language, d), ("langid", &heads.langid, n)]
        {
            let (w, b) = dims(l);
            ensure!(
                w == [rows, d] && b == [rows],
                "{}: {name}.weight is {w:?} and {name}.bias {b:?}; with d = {d} (meaning.weight) and {n} languages (langid.weight) \
                 they must be [{rows}, {d}] and [{rows}]",
                what.display()
            );
        }
        Ok(heads)
    }

    /// Make the weights trainable; returns the parameters under `meaning.*`, `language.*`, `langid.*`.
    pub fn make_trainable(&mut self) -> Result<Params> {
        let (t, params) = Params::from_tensors(self.tensors())?;
        *self = Self::from_map(&t, Path::new("heads"))?;
        Ok(params)
    }

    /// A copy detached from autograd (sharing storage: it follows in-place optimiser updates).
    pub fn detached(&self) -> Self {
        let d = |l: &Linear| Linear::new(l.weight.detach(), l.bias.detach());
        Self { meaning: d(&self.meaning), language: d(&self.language), langid: d(&self.langid) }
    }

    /// `(ê_M, ê_L)` of embeddings `[B, d]`.
    pub fn split(&self, e: &Tensor) -> Result<(Tensor, Tensor)> {
        Ok((self.meaning.forward(e)?, self.language.forward(e)?))
    }

    pub fn head(&self, head: Head) -> &Linear {
        match head {
            Head::Meaning => &self.meaning,
            Head::Language => &self.language,
        }
    }

    /// One head's output for base embeddings (rows of [`dim`](Heads::dim)), L2-normalised with
    /// `normalize`: what a saved model gives, and what training scores with `train.val_sts`.
    pub fn apply<R: AsRef<[f32]>>(
        &self,
        head: Head,
        rows: &[R],
        normalize: bool,
        device: &Device,
    ) -> Result<Vec<Vec<f32>>> {
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        let mut y = self.head(head).forward(&rows_tensor(rows, self.dim(), device)?)?;
        if normalize {
            y = crate::model::pooling::l2_normalize_exact(&y)?;
        }
        Ok(y.to_vec2()?)
    }
}

/// Rows of length `d` as a `[rows, d]` tensor.
fn rows_tensor<R: AsRef<[f32]>>(rows: &[R], d: usize, device: &Device) -> Result<Tensor> {
    let flat: Vec<f32> = rows.iter().flat_map(|r| r.as_ref().iter().copied()).collect();
    Ok(Tensor::from_vec(flat, (rows.len(), d), device)?)
}

/// The base encoder's settings, as the heads were trained on them.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BaseSettings {
    /// The base model as given in the training config (directory or hub id).
    pub model: String,
    /// Its absolute path when it was a local directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved: Option<String>,
    pub prefix: String,
    pub pooling: Pooling,
    pub max_length: usize,
    /// Whether the base embeddings were L2-normalised before the heads.
    pub normalize: bool,
}

/// `xsent.json` of a disentangle model directory.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct SavedModel {
    pub kind: String,
    pub base: BaseSettings,
    /// The language-id classes, in the order of `langid`'s rows.
    pub languages: Vec<String>,
    pub xsent_version: String,
}

pub const KIND: &str = "disentangle";

/// Write a disentangle model directory.
pub fn save(dir: &Path, heads: &Heads, base: &BaseSettings, languages: &[String]) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    weights::save_tensors(&heads.tensors(), &dir.join("heads.safetensors"))?;
    let saved = SavedModel {
        kind: KIND.into(),
        base: base.clone(),
        languages: languages.to_vec(),
        xsent_version: crate::VERSION.into(),
    };
    std::fs::write(dir.join("xsent.json"), serde_json::to_string_pretty(&saved)?)
        .with_context(|| format!("cannot write {}", dir.join("xsent.json").display()))?;
    Ok(())
}

/// A frozen base encoder followed by one head: what `xsent embed/eval/mine` use.
pub struct DisentangledEncoder {
    pub base: SentenceEncoder,
    pub heads: Heads,
    pub head: Head,
    pub languages: Vec<String>,
    /// L2-normalise the head's output.
    pub normalize: bool,
    /// The files it was loaded from: its own, then the base encoder's.
    pub files: Vec<std::path::PathBuf>,
}

impl DisentangledEncoder {
    /// Load a model directory written by [`save`]. `opts` gives the device, the maximum length
    /// and output normalisation; the base encoder's other settings are the saved ones.
    pub fn load(dir: &Path, opts: &LoadOptions, head: Head) -> Result<Self> {
        let json = dir.join("xsent.json");
        let text = std::fs::read_to_string(&json).with_context(|| format!("cannot read {}", json.display()))?;
        let saved: SavedModel = serde_json::from_str(&text).with_context(|| format!("invalid {}", json.display()))?;
        ensure!(saved.kind == KIND, "{} is a {:?} model, not {KIND:?}", json.display(), saved.kind);
        if opts.pooling.is_some() || opts.prefix.is_some() || opts.prompt_name.is_some() || opts.layers.is_some() {
            bail!(
                "{}: the heads were trained on the base encoder with its saved prefix, pooling and layers; drop --prefix/--prompt-name/--pooling/--layers",
                dir.display()
            );
        }
        let b = &saved.base;
        // The absolute path first (the run may be used from another directory), then the spec as given.
        let spec = match &b.resolved {
            Some(p) if Path::new(p).is_dir() => p.clone(),
            _ => b.model.clone(),
        };
        let base_opts = LoadOptions {
            device: opts.device.clone(),
            prefix: Some(b.prefix.clone()),
            pooling: Some(b.pooling),
            max_length: Some(opts.max_length.unwrap_or(b.max_length)),
            normalize: Some(b.normalize),
            allow_unused_weights: opts.allow_unused_weights,
            dtype: opts.dtype,
            ..Default::default()
        };
        let base = SentenceEncoder::load(&spec, &base_opts).with_context(|| {
            format!(
                "loading the base encoder of {} ({:?}); if it moved, set \"resolved\" in {} to its new path",
                dir.display(),
                b.model,
                json.display()
            )
        })?;
        let wpath = dir.join("heads.safetensors");
        let t = weights::load_safetensors(&wpath, &opts.device, "the heads")?;
        let heads = Heads::from_map(&t, &wpath)?;
        ensure!(
            heads.dim() == base.dim(),
            "{}: the heads take {}-dim vectors but the base encoder {} gives {}",
            wpath.display(),
            heads.dim(),
            spec,
            base.dim()
        );
        ensure!(
            heads.langid.weight.dim(0)? == saved.languages.len(),
            "{}: langid has {} classes but xsent.json lists {} languages",
            wpath.display(),
            heads.langid.weight.dim(0)?,
            saved.languages.len()
        );
        let mut files = vec![json, wpath];
        files.extend(base.files.read_files());
        Ok(Self { base, heads, head, languages: saved.languages, normalize: opts.normalize.unwrap_or(true), files })
    }

    /// Base embeddings, meaning and language embeddings of texts, and the predicted language of
    /// each (inference; rows in input order).
    pub fn embed_all(&self, texts: &[&str], batch_size: usize) -> Result<AllEmbeddings> {
        let Embedded { rows: e, truncated } = Embedder::embed_checked(&self.base, texts, batch_size)?;
        let (m, l) = self.heads.split(&rows_tensor(&e, self.base.dim(), self.base.device())?)?;
        let lang: Vec<u32> = self.heads.langid.forward(&l)?.argmax(1)?.to_vec1()?;
        Ok(AllEmbeddings {
            base: e,
            meaning: m.to_vec2()?,
            language: l.to_vec2()?,
            predicted: lang.into_iter().map(|i| self.languages[i as usize].clone()).collect(),
            truncated,
        })
    }
}

/// What [`DisentangledEncoder::embed_all`] gives.
pub struct AllEmbeddings {
    pub base: Vec<Vec<f32>>,
    pub meaning: Vec<Vec<f32>>,
    pub language: Vec<Vec<f32>>,
    pub predicted: Vec<String>,
    /// Per text: it was cut (longer than the base model takes).
    pub truncated: Vec<bool>,
}

impl Embedder for DisentangledEncoder {
    fn dim(&self) -> usize {
        self.heads.dim()
    }

    fn embed_checked(&self, texts: &[&str], batch_size: usize) -> Result<Embedded> {
        let base = self.base.embed_checked(texts, batch_size)?;
        Ok(Embedded {
            rows: self.heads.apply(self.head, &base.rows, self.normalize, self.base.device())?,
            truncated: base.truncated,
        })
    }

    fn prefix(&self) -> &str {
        &self.base.prefix
    }

    fn max_length(&self) -> Option<usize> {
        Some(self.base.max_length)
    }

    fn files(&self) -> Vec<std::path::PathBuf> {
        self.files.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn heads_of_the_wrong_shape_are_an_error() {
        let d = &Device::Cpu;
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let mut t = Heads::random(4, 3, &mut rng, d).unwrap().tensors();
        assert!(Heads::from_map(&t, Path::new("ok")).is_ok());
        // A 1-D meaning.weight (a hand-edited or foreign file): an error naming the file.
        t.insert("meaning.weight".into(), Tensor::zeros(4, DType::F32, d).unwrap());
        let e = Heads::from_map(&t, Path::new("x/heads.safetensors")).err().unwrap();
        assert!(format!("{e}").contains("x/heads.safetensors"), "{e}");
        t.insert("meaning.weight".into(), Tensor::zeros((4, 5), DType::F32, d).unwrap());
        assert!(Heads::from_map(&t, Path::new("y")).is_err());
        // Biases and the language-id head are checked too, naming the tensor (an outside probe:
        // a scalar bias failed at the first batch as "fast-linear: shapes … do not fit", and
        // --head language ran; an empty langid failed in plot as "empty tensor for reduce").
        let good = Heads::random(4, 3, &mut rng, d).unwrap().tensors();
        let err = |name: &str, v: Tensor| {
            let mut t = good.clone();
            t.insert(name.into(), v);
            format!("{:#}", Heads::from_map(&t, Path::new("h/heads.safetensors")).err().unwrap())
        };
        let e = err("meaning.bias", Tensor::zeros(1, DType::F32, d).unwrap());
        assert!(e.contains("h/heads.safetensors: meaning.weight is [4, 4] and meaning.bias [1]"), "{e}");
        let e = err("language.bias", Tensor::zeros((2, 4), DType::F32, d).unwrap());
        assert!(e.contains("language.bias [2, 4]"), "{e}");
        let e = err("langid.weight", Tensor::zeros((0, 4), DType::F32, d).unwrap());
        assert!(e.contains("langid.weight has shape [0, 4]") && e.contains("at least one language"), "{e}");
        let e = err("langid.bias", Tensor::zeros(2, DType::F32, d).unwrap());
        assert!(e.contains("with d = 4 (meaning.weight) and 3 languages") && e.contains("[3, 4] and [3]"), "{e}");
        let e = err("langid.extra", Tensor::zeros(2, DType::F32, d).unwrap());
        assert!(e.contains("1 tensor(s) the heads do not have (first: langid.extra)"), "{e}");
        let e = err("language.weight", Tensor::zeros((4, 4), DType::U8, d).unwrap());
        assert!(e.contains("tensor language.weight of h/heads.safetensors is stored as U8 integers"), "{e}");
    }
}
