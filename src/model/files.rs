//! The files of a local model directory and the checks every model directory passes, local or
//! from the hub cache: its weights (one file, or shards beside an index), its side files
//! (bounded, regular, UTF-8) and its sentence-transformers modules (Pooling, Dense, Normalize,
//! each inside the model's folder). [`super::source`] and [`super::hub`] both build on it.

use anyhow::{bail, Result};
use std::path::{Path, PathBuf};

/// The files of one model. Optional ones are sentence-transformers metadata.
#[derive(Debug, Clone)]
pub struct ModelFiles {
    /// What the user passed (`models/e5` or `org/name`).
    pub spec: String,
    pub config: PathBuf,
    /// The encoder's weight files: one `model.safetensors` or `pytorch_model.bin`, or the shards
    /// the checkpoint's `*.index.json` lists (each once, in name order).
    pub weights: Vec<PathBuf>,
    pub tokenizer: PathBuf,
    /// `1_Pooling/config.json` (or the Pooling module's path in `modules.json`).
    pub pooling: Option<PathBuf>,
    /// `sentence_bert_config.json` (`max_seq_length`, `do_lower_case`).
    pub st_config: Option<PathBuf>,
    /// `config_sentence_transformers.json` (the default prompt, prepended to every text).
    pub st_model_config: Option<PathBuf>,
    /// `xsent.json`: settings xsent itself saved with a trained model (models saved by earlier
    /// versions keep their prefix here).
    pub xsent: Option<PathBuf>,
    /// A sentence-transformers Dense module's directory (`config.json`, `model.safetensors`)
    /// applied after pooling, when `modules.json` lists one.
    pub dense: Option<PathBuf>,
    /// Whether `modules.json` ends the pipeline with a Normalize module (`None`: no
    /// `modules.json`, a plain Hugging Face checkpoint).
    pub declares_normalize: Option<bool>,
    /// The Transformer module's folder when `modules.json` puts it in one (`0_Transformer`,
    /// as sentence-transformers before 2.0 saved models): `config`, `weights`, `tokenizer` and
    /// `st_config` are read there, the other modules from the model's folder.
    pub transformer_path: Option<String>,
}

impl ModelFiles {
    /// Every file of the model that loading reads (for the digests a report records): config,
    /// weights, tokenizer (and the `tokenizer_config.json` beside it), the sentence-transformers
    /// files and a Dense module's config and weights; each once, those that exist.
    pub fn read_files(&self) -> Vec<PathBuf> {
        let mut files = vec![self.config.clone()];
        if self.weights.len() > 1 {
            // Shards: the index that lists them too.
            let dir = self.weights[0].parent().map(Path::to_path_buf).unwrap_or_default();
            files.extend(
                WEIGHT_FILES.iter().filter(|f| f.ends_with(".index.json")).map(|f| dir.join(f)).find(|p| p.is_file()),
            );
        }
        files.extend(self.weights.iter().cloned());
        files.push(self.tokenizer.clone());
        files.push(self.tokenizer.with_file_name("tokenizer_config.json"));
        if self.tokenizer.file_name().is_some_and(|n| n == "vocab.txt") {
            // A WordPiece vocab.txt's special tokens come from these.
            files.extend(["special_tokens_map.json", "added_tokens.json"].map(|f| self.tokenizer.with_file_name(f)));
        }
        files.push(self.dir().join("modules.json"));
        files.extend(
            [&self.pooling, &self.st_config, &self.st_model_config, &self.xsent].into_iter().flatten().cloned(),
        );
        if let Some(d) = &self.dense {
            files.push(d.join("config.json"));
            // The one Dense::load reads.
            files.extend(
                ["model.safetensors", "pytorch_model.bin"].map(|f| d.join(f)).into_iter().find(|p| p.is_file()),
            );
        }
        let mut seen = std::collections::HashSet::new();
        files.retain(|f| f.is_file() && seen.insert(f.clone()));
        files
    }

    /// The model's folder: the one holding `config.json`, or the folder above the Transformer
    /// module's when `modules.json` puts it in a subfolder.
    pub fn dir(&self) -> PathBuf {
        let mut d = self.config.parent().map(Path::to_path_buf).unwrap_or_default();
        if let Some(p) = &self.transformer_path {
            for _ in Path::new(p).components() {
                d.pop();
            }
        }
        d
    }
}

/// The weight files xsent looks for, in the order transformers' `from_pretrained` prefers them:
/// safetensors (one file, else a sharded checkpoint's index), else PyTorch's.
pub const WEIGHT_FILES: [&str; 4] =
    ["model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json"];

pub(crate) const WEIGHT_FORMATS: &str = "model.safetensors, a sharded model.safetensors.index.json with its shards, \
    pytorch_model.bin (the zip format of PyTorch 1.6 and later) or a sharded pytorch_model.bin.index.json";

pub(crate) fn how_to_get(file: &str) -> &'static str {
    match file {
        "tokenizer.json" => "xsent reads the fast-tokenizer file tokenizer.json, or for BERT a WordPiece vocab.txt (with its tokenizer_config.json); \
            for another tokenizer (e.g. XLM-R's sentencepiece.bpe.model alone), save tokenizer.json with transformers' \
            AutoTokenizer.from_pretrained(dir).save_pretrained(dir)",
        _ => "save the model with transformers' save_pretrained(dir)",
    }
}

/// A sharded checkpoint's shards, as its index (`model.safetensors.index.json`,
/// `pytorch_model.bin.index.json`) lists them in `weight_map`: each file once, in name order.
/// Shards are plain file names beside the index.
pub fn shard_names(index: &Path) -> Result<Vec<String>> {
    let text = std::fs::read_to_string(index).map_err(|e| anyhow::anyhow!("cannot read {}: {e}", index.display()))?;
    let v: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| anyhow::anyhow!("{} is not valid JSON: {e}", index.display()))?;
    let Some(map) = v["weight_map"].as_object() else {
        bail!("{} has no \"weight_map\" object (tensor name → shard file), as transformers writes in a sharded checkpoint's index", index.display());
    };
    let mut shards = std::collections::BTreeSet::new();
    for (tensor, file) in map {
        let Some(file) = file.as_str() else {
            bail!("{}: the weight_map entry of {tensor} is {file}, not a file name", index.display())
        };
        let plain = !file.is_empty() && file != "." && file != ".." && !file.contains(['/', '\\']);
        if !plain {
            bail!(
                "{}: the weight_map entry of {tensor} is {file:?}, not the name of a file beside the index",
                index.display()
            );
        }
        shards.insert(file.to_string());
    }
    if shards.is_empty() {
        bail!("{}: its weight_map lists no shards", index.display());
    }
    Ok(shards.into_iter().collect())
}

/// Whether `path` is a regular file (through symbolic links): `false` when nothing is there, an
/// error when something else is (a folder, a FIFO, a device, a link that leads nowhere or in a
/// loop), which reading would misread or wait on forever (an outside probe: each was reported as
/// "has no config.json" or "has no weights").
pub(crate) fn regular_file(path: &Path) -> Result<bool> {
    use std::os::unix::fs::FileTypeExt;
    match std::fs::metadata(path) {
        Ok(m) if m.is_file() => Ok(true),
        Ok(m) => {
            let t = m.file_type();
            let what = if t.is_dir() {
                "a folder"
            } else if t.is_fifo() {
                "a FIFO"
            } else if t.is_char_device() || t.is_block_device() {
                "a device"
            } else if t.is_socket() {
                "a socket"
            } else {
                "not a regular file"
            };
            bail!("{} is {what}, not a file: put the file itself there", path.display())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => match std::fs::read_link(path) {
            Ok(target) => bail!("{} is a symbolic link to {}, which does not exist", path.display(), target.display()),
            Err(_) => Ok(false),
        },
        Err(e) => bail!("cannot read {}: {e}", path.display()),
    }
}

/// The largest optional model file read as text (a tokenizer's JSON side files, a
/// sentence-transformers config): far above any real one (XLM-R's `tokenizer_config.json` has
/// a few KB), so that a wrong file cannot fill memory.
const MAX_SIDE_FILE: u64 = 64 << 20;

/// The text of the optional model file `path` (`tokenizer_config.json`, `special_tokens_map.json`,
/// `added_tokens.json`): `None` when nothing is there. Anything but a regular file (a FIFO, which
/// would block, a device, a folder, a dangling link), a file above [`MAX_SIDE_FILE`] and text
/// that is not UTF-8 are errors naming it: skipping it would change the model without a word.
pub(crate) fn read_side_file(path: &Path) -> Result<Option<String>> {
    if !regular_file(path)? {
        return Ok(None);
    }
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
    let mut bytes = Vec::new();
    file.take(MAX_SIDE_FILE + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
    if bytes.len() as u64 > MAX_SIDE_FILE {
        bail!(
            "{} is larger than {} MiB; a tokenizer or model config is a few KB: is it the right file?",
            path.display(),
            MAX_SIDE_FILE >> 20
        );
    }
    String::from_utf8(bytes).map(Some).map_err(|e| {
        anyhow::anyhow!(
            "{} is not UTF-8 text (at byte {}): it is damaged, or not this file",
            path.display(),
            e.utf8_error().valid_up_to()
        )
    })
}

/// The weight files of the local directory `dir`, the first of [`WEIGHT_FILES`] it holds.
fn local_weights(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut found = None;
    for f in WEIGHT_FILES {
        if regular_file(&dir.join(f))? {
            found = Some(f);
            break;
        }
    }
    let Some(name) = found else {
        let hint = match stray_shard(dir) {
            Some(shard) => format!(
                "It holds {shard}, a shard of a sharded checkpoint, but not the index that lists the shards \
                 (model.safetensors.index.json or pytorch_model.bin.index.json): copy the index into it too"
            ),
            None => {
                "Save the model with transformers' save_pretrained(dir); TensorFlow or Flax weights must be loaded in \
                 transformers (from_tf=True / from_flax=True) and saved again"
                    .to_string()
            }
        };
        bail!(
            "model directory {} has no weights: xsent reads {WEIGHT_FORMATS}.\n{hint}.\nFor the bundled models run scripts/setup.sh.",
            dir.display()
        );
    };
    let path = dir.join(name);
    if !name.ends_with(".index.json") {
        return Ok(vec![path]);
    }
    shard_names(&path)?
        .into_iter()
        .map(|s| {
            let shard = dir.join(&s);
            if !regular_file(&shard)? {
                bail!("{} lists the shard {s}, which is not in {}", path.display(), dir.display());
            }
            Ok(shard)
        })
        .collect()
}

/// A shard of a sharded checkpoint in `dir` (`model-00001-of-00002.safetensors`,
/// `pytorch_model-00001-of-00002.bin`), if there is one.
fn stray_shard(dir: &Path) -> Option<String> {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let is_shard = |name: &str| {
        [("model-", ".safetensors"), ("pytorch_model-", ".bin")].iter().any(|(pre, suf)| {
            name.strip_prefix(pre)
                .and_then(|n| n.strip_suffix(suf))
                .and_then(|n| n.split_once("-of-"))
                .is_some_and(|(i, n)| digits(i) && digits(n))
        })
    };
    let mut shards: Vec<String> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| is_shard(n))
        .collect();
    shards.sort();
    shards.into_iter().next()
}

/// A local model directory.
pub fn resolve_dir(dir: &Path, spec: &str) -> Result<ModelFiles> {
    // A run directory of `xsent train` (its config.toml, no config.json): its models are inside.
    if !dir.join("config.json").exists() && dir.join("config.toml").is_file() {
        let models: Vec<String> = ["final", "best"]
            .iter()
            .filter(|m| dir.join(m).join("config.json").is_file() || dir.join(m).join("xsent.json").is_file())
            .map(|m| dir.join(m).display().to_string())
            .collect();
        if !models.is_empty() {
            bail!(
                "{} is a run directory of xsent train, not a model: give its model, --model {}",
                dir.display(),
                models.join(" or --model ")
            );
        }
    }
    let modules = dir.join("modules.json");
    let pipeline = pipeline(regular_file(&modules)?.then_some(modules.as_path()))?;
    // The Transformer module's files: in the model's folder, or in the folder modules.json gives.
    let tdir = match &pipeline.transformer {
        Some(p) => dir.join(p),
        None => dir.to_path_buf(),
    };
    let require = |f: &str| {
        if regular_file(&tdir.join(f))? {
            return Ok(());
        }
        let listed = match &pipeline.transformer {
            Some(p) => format!(" (modules.json puts the Transformer module in {p}/)"),
            None => String::new(),
        };
        bail!(
            "model directory {}{listed} has no {f}: xsent needs config.json, the weights and tokenizer.json (or BERT's vocab.txt) there.\n{}.\n\
             For the bundled models run scripts/setup.sh.",
            tdir.display(),
            how_to_get(f)
        )
    };
    require("config.json")?;
    let weights = local_weights(&tdir)?;
    // A BERT checkpoint saved without tokenizer.json: its WordPiece vocab.txt.
    let tokenizer = if !regular_file(&tdir.join("tokenizer.json"))? && regular_file(&tdir.join("vocab.txt"))? {
        tdir.join("vocab.txt")
    } else {
        require("tokenizer.json")?;
        tdir.join("tokenizer.json")
    };
    // Optional files: absent is fine; a folder, FIFO or dangling link there is named, as for the
    // required ones (a FIFO would otherwise be skipped, and a pooling config silently lost).
    let opt_in = |d: &Path, rel: &str| -> Result<Option<PathBuf>> {
        let p = d.join(rel);
        Ok(regular_file(&p)?.then_some(p))
    };
    let opt = |rel: &str| opt_in(dir, rel);
    if let Some(rel) = &pipeline.pooling {
        // A Pooling module listed but absent would silently fall back to mean pooling.
        if !regular_file(&dir.join(rel))? {
            bail!(
                "{} lists a Pooling module whose config {} does not exist",
                dir.join("modules.json").display(),
                dir.join(rel).display()
            );
        }
    }
    let pooling_rel = pipeline.pooling.as_deref().unwrap_or("1_Pooling/config.json");
    let dense = match &pipeline.dense {
        Some(rel) => {
            let d = dir.join(rel);
            if !regular_file(&d.join("config.json"))? {
                bail!(
                    "{} lists a Dense module at {rel}/ but {} does not exist",
                    dir.join("modules.json").display(),
                    d.join("config.json").display()
                );
            }
            check_dense_config(&d.join("config.json"))?;
            Some(d)
        }
        None => None,
    };
    Ok(ModelFiles {
        spec: spec.to_string(),
        config: tdir.join("config.json"),
        weights,
        tokenizer,
        pooling: opt(pooling_rel)?,
        // The Transformer module's own settings, saved in its folder by sentence-transformers.
        st_config: opt_in(&tdir, "sentence_bert_config.json")?,
        st_model_config: opt("config_sentence_transformers.json")?,
        xsent: opt("xsent.json")?,
        dense,
        declares_normalize: pipeline.normalize,
        transformer_path: pipeline.transformer,
    })
}

/// The modules of a sentence-transformers `modules.json` as (type, path), checked to be a
/// pipeline xsent runs as sentence-transformers would.
fn st_modules(modules: Option<&Path>) -> Result<Vec<(String, String)>> {
    let Some(path) = modules else { return Ok(Vec::new()) };
    let text = std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
    let v: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| anyhow::anyhow!("{} is not valid JSON: {e}", path.display()))?;
    let Some(mods) = v.as_array() else { bail!("{}: expected a JSON list of modules", path.display()) };
    let mods: Vec<(String, String)> = mods
        .iter()
        .map(|m| (m["type"].as_str().unwrap_or("").to_string(), m["path"].as_str().unwrap_or("").to_string()))
        .collect();
    // What xsent runs: the transformer, then pooling, an optional Dense layer and normalisation.
    // Any other module would change the vectors sentence-transformers gives.
    for (t, _) in &mods {
        if !["Transformer", "Pooling", "Dense", "Normalize"].contains(&module_kind(t)) {
            bail!(
                "{} lists a module xsent cannot run ({t:?}); xsent runs Transformer, Pooling, Dense and Normalize modules",
                path.display()
            );
        }
    }
    check_pipeline(path, &mods)?;
    Ok(mods)
}

/// `Dense` for `sentence_transformers.models.Dense`.
fn module_kind(module_type: &str) -> &str {
    module_type.rsplit('.').next().unwrap_or(module_type)
}

/// xsent runs the modules in one order, Transformer → Pooling → (Dense) → (Normalize), whatever
/// `modules.json` says: refuse a list in another order (sentence-transformers runs them in the
/// listed order, so a Dense before Pooling works on token vectors), rather than give other vectors.
fn check_pipeline(path: &Path, mods: &[(String, String)]) -> Result<()> {
    const ORDER: &str = "xsent runs Transformer → Pooling → Dense (optional) → Normalize (optional), in that order";
    let name = |i: usize| {
        let (t, p) = &mods[i];
        if p.is_empty() {
            format!("{} (module {})", module_kind(t), i)
        } else {
            format!("{} ({p})", module_kind(t))
        }
    };
    let at = |kind: &str| {
        mods.iter().enumerate().filter(|(_, (t, _))| module_kind(t) == kind).map(|(i, _)| i).collect::<Vec<_>>()
    };
    for kind in ["Transformer", "Pooling", "Normalize"] {
        if at(kind).len() > 1 {
            bail!("{} lists {} {kind} modules; {ORDER}", path.display(), at(kind).len());
        }
    }
    if mods.is_empty() || module_kind(&mods[0].0) != "Transformer" {
        let first = if mods.is_empty() { "nothing".to_string() } else { name(0) };
        bail!("{}: the first module is {first}, not the Transformer; {ORDER}", path.display());
    }
    let pooling = at("Pooling").first().copied();
    for i in at("Dense").into_iter().chain(at("Normalize")) {
        if pooling.is_none_or(|p| i < p) {
            bail!(
                "{} lists {} before any Pooling module: sentence-transformers runs it on each token's vector, \
                 but xsent runs a {} module only after Pooling, on the sentence's vector, so it would not give this model's vectors; {ORDER}",
                path.display(),
                name(i),
                module_kind(&mods[i].0)
            );
        }
    }
    if let Some(i) = pooling.filter(|&i| i != 1) {
        bail!(
            "{}: {} comes right after the Transformer, not the Pooling module {}; {ORDER}",
            path.display(),
            name(1),
            name(i)
        );
    }
    if let Some(i) = at("Normalize").into_iter().find(|&i| i + 1 != mods.len()) {
        bail!("{} lists {} before {}: xsent normalises last; {ORDER}", path.display(), name(i), name(i + 1));
    }
    Ok(())
}

/// A Dense module's `config.json` must read and write the sentence embedding: newer
/// sentence-transformers can point a Dense at other features (`module_input_name`,
/// `module_output_name`), which xsent does not run.
pub(crate) fn check_dense_config(config: &Path) -> Result<()> {
    let text = std::fs::read_to_string(config).map_err(|e| anyhow::anyhow!("cannot read {}: {e}", config.display()))?;
    let v: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| anyhow::anyhow!("{} is not valid JSON: {e}", config.display()))?;
    for key in ["module_input_name", "module_output_name"] {
        match &v[key] {
            serde_json::Value::Null => {}
            serde_json::Value::String(s) if s == "sentence_embedding" => {}
            other => bail!(
                "{}: this Dense module's {key} is {other}, not \"sentence_embedding\": xsent runs a Dense module only on the pooled \
                 sentence vector (after Pooling), so it would not give this model's vectors",
                config.display()
            ),
        }
    }
    Ok(())
}

/// What a `modules.json` says xsent must run, read and checked once.
#[derive(Default)]
pub(crate) struct Pipeline {
    /// The Pooling module's config (relative to the model dir), when one is listed.
    pub(crate) pooling: Option<String>,
    /// The Dense module's directory (relative to the model dir), when one is listed.
    pub(crate) dense: Option<String>,
    /// Whether a Normalize module is listed (`None` without a `modules.json`).
    pub(crate) normalize: Option<bool>,
    /// The Transformer module's folder (relative to the model dir), when it is not the model dir.
    pub(crate) transformer: Option<String>,
}

pub(crate) fn pipeline(modules: Option<&Path>) -> Result<Pipeline> {
    let Some(path) = modules else { return Ok(Pipeline::default()) };
    let mods = st_modules(Some(path))?;
    let of = |kind: &'static str| mods.iter().filter(move |(t, _)| module_kind(t) == kind).map(|(_, p)| p);
    let dense: Vec<&String> = of("Dense").collect();
    if dense.len() > 1 {
        bail!("{}: xsent supports at most one Dense module, this model has {}", path.display(), dense.len());
    }
    // A module's folder is inside the model's (an outside probe: `../x` and absolute paths were
    // read from anywhere, and quantize then wrote a model that depends on a folder outside it).
    for (kind, p) in mods.iter().filter(|(t, _)| matches!(module_kind(t), "Transformer" | "Pooling" | "Dense")) {
        let inside = Path::new(p).components().all(|c| matches!(c, std::path::Component::Normal(_)));
        if !inside {
            bail!(
                "{}: the {} module's path {p:?} leaves the model's folder; its modules must be folders inside it (e.g. 1_Pooling, 2_Dense)",
                path.display(),
                module_kind(kind)
            );
        }
    }
    Ok(Pipeline {
        pooling: of("Pooling").find(|p| !p.is_empty()).map(|p| format!("{p}/config.json")),
        dense: dense.first().map(|p| p.to_string()),
        normalize: Some(of("Normalize").next().is_some()),
        transformer: of("Transformer").find(|p| !p.is_empty()).cloned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a report hashes: the files loading reads, each once; not a second Dense weights
    /// file, nor a WordPiece side file beside a tokenizer.json (an outside review).
    #[test]
    fn read_files_lists_what_loading_reads() {
        let d = tempfile::tempdir().unwrap();
        let p = |f: &str| d.path().join(f);
        for f in [
            "config.json",
            "model.safetensors.index.json",
            "a.safetensors",
            "b.safetensors",
            "vocab.txt",
            "tokenizer_config.json",
            "special_tokens_map.json",
            "modules.json",
            "2_Dense/config.json",
            "2_Dense/model.safetensors",
            "2_Dense/pytorch_model.bin",
        ] {
            std::fs::create_dir_all(p(f).parent().unwrap()).unwrap();
            std::fs::write(p(f), f).unwrap();
        }
        let mut files = ModelFiles {
            spec: "m".into(),
            config: p("config.json"),
            weights: vec![p("a.safetensors"), p("b.safetensors")],
            tokenizer: p("vocab.txt"),
            pooling: None,
            st_config: None,
            st_model_config: None,
            xsent: None,
            dense: Some(p("2_Dense")),
            declares_normalize: Some(true),
            transformer_path: None,
        };
        let names = |f: &ModelFiles| -> Vec<String> {
            f.read_files().iter().map(|x| x.strip_prefix(d.path()).unwrap().display().to_string()).collect()
        };
        assert_eq!(
            names(&files),
            [
                "config.json",
                "model.safetensors.index.json",
                "a.safetensors",
                "b.safetensors",
                "vocab.txt",
                "tokenizer_config.json",
                "special_tokens_map.json",
                "modules.json",
                "2_Dense/config.json",
                "2_Dense/model.safetensors"
            ]
        );
        std::fs::write(p("tokenizer.json"), "{}").unwrap();
        files.tokenizer = p("tokenizer.json");
        files.weights = vec![p("a.safetensors")];
        assert!(
            !names(&files).iter().any(|n| n == "special_tokens_map.json" || n.ends_with("index.json")),
            "{:?}",
            names(&files)
        );
    }

    /// A model file that is a folder, a FIFO, a device or a link leading nowhere is named as
    /// such (an outside probe: each was "has no config.json" or "has no weights"; a FIFO would
    /// block a reader forever).
    #[test]
    fn model_files_that_are_not_files_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let fresh = |name: &str| {
            let d = dir.path().join(name);
            std::fs::create_dir_all(&d).unwrap();
            for f in ["config.json", "model.safetensors", "tokenizer.json"] {
                std::fs::write(d.join(f), "{}").unwrap();
            }
            d
        };
        let err = |d: &Path| format!("{:#}", resolve_dir(d, "m").map(|_| ()).unwrap_err());
        let d = fresh("fifo");
        std::fs::remove_file(d.join("config.json")).unwrap();
        assert!(std::process::Command::new("mkfifo").arg(d.join("config.json")).status().unwrap().success());
        assert!(err(&d).contains("fifo/config.json is a FIFO, not a file"), "{}", err(&d));
        let d = fresh("folder");
        std::fs::remove_file(d.join("model.safetensors")).unwrap();
        std::fs::create_dir(d.join("model.safetensors")).unwrap();
        assert!(err(&d).contains("folder/model.safetensors is a folder, not a file"), "{}", err(&d));
        let d = fresh("device");
        std::fs::remove_file(d.join("tokenizer.json")).unwrap();
        std::os::unix::fs::symlink("/dev/zero", d.join("tokenizer.json")).unwrap();
        assert!(err(&d).contains("device/tokenizer.json is a device, not a file"), "{}", err(&d));
        let d = fresh("loop");
        std::fs::remove_file(d.join("model.safetensors")).unwrap();
        std::os::unix::fs::symlink("model.safetensors", d.join("model.safetensors")).unwrap();
        assert!(err(&d).contains("cannot read") && err(&d).contains("loop/model.safetensors"), "{}", err(&d));
        let d = fresh("dangling");
        std::fs::remove_file(d.join("config.json")).unwrap();
        std::os::unix::fs::symlink("../nowhere.json", d.join("config.json")).unwrap();
        assert!(
            err(&d).contains("dangling/config.json is a symbolic link to ../nowhere.json, which does not exist"),
            "{}",
            err(&d)
        );
        let d = fresh("modules");
        std::fs::create_dir(d.join("modules.json")).unwrap();
        assert!(err(&d).contains("modules/modules.json is a folder, not a file"), "{}", err(&d));
        // Optional files too: before, a FIFO or folder there was skipped as if absent (a pooling
        // config so lost changes the vectors).
        let d = fresh("optional");
        assert!(resolve_dir(&d, "m").is_ok_and(|f| f.pooling.is_none() && f.st_config.is_none()));
        std::fs::create_dir(d.join("1_Pooling")).unwrap();
        assert!(std::process::Command::new("mkfifo").arg(d.join("1_Pooling/config.json")).status().unwrap().success());
        assert!(err(&d).contains("optional/1_Pooling/config.json is a FIFO, not a file"), "{}", err(&d));
        std::fs::remove_file(d.join("1_Pooling/config.json")).unwrap();
        std::fs::create_dir(d.join("sentence_bert_config.json")).unwrap();
        assert!(err(&d).contains("optional/sentence_bert_config.json is a folder, not a file"), "{}", err(&d));
        std::fs::remove_dir(d.join("sentence_bert_config.json")).unwrap();
        std::os::unix::fs::symlink("gone.json", d.join("xsent.json")).unwrap();
        assert!(err(&d).contains("optional/xsent.json is a symbolic link to gone.json"), "{}", err(&d));
        // Nothing there is still "has no".
        let d = fresh("missing");
        std::fs::remove_file(d.join("config.json")).unwrap();
        assert!(err(&d).contains("has no config.json"), "{}", err(&d));
    }

    /// The tokenizer's side files (`tokenizer_config.json`, `special_tokens_map.json`,
    /// `added_tokens.json`) are read only when they are regular UTF-8 files of bounded size (an
    /// outside probe: a FIFO hung `embed`, `/dev/zero` took 15 GB, and a folder, a dangling link
    /// or invalid UTF-8 were skipped without a word, dropping `model_max_length`).
    #[test]
    fn side_files_are_regular_bounded_utf8_or_errors() {
        let dir = tempfile::tempdir().unwrap();
        let p = |name: &str| dir.path().join(name);
        let err = |name: &str| format!("{:#}", read_side_file(&p(name)).unwrap_err());
        assert_eq!(read_side_file(&p("absent.json")).unwrap(), None);
        std::fs::write(p("ok.json"), "{\"model_max_length\": 4}").unwrap();
        assert_eq!(read_side_file(&p("ok.json")).unwrap().as_deref(), Some("{\"model_max_length\": 4}"));
        assert!(std::process::Command::new("mkfifo").arg(p("fifo.json")).status().unwrap().success());
        assert!(err("fifo.json").contains("fifo.json is a FIFO, not a file"), "{}", err("fifo.json"));
        std::os::unix::fs::symlink("/dev/zero", p("zero.json")).unwrap();
        assert!(err("zero.json").contains("zero.json is a device"), "{}", err("zero.json"));
        std::fs::create_dir(p("folder.json")).unwrap();
        assert!(err("folder.json").contains("is a folder"), "{}", err("folder.json"));
        std::os::unix::fs::symlink("gone.json", p("dangling.json")).unwrap();
        assert!(err("dangling.json").contains("which does not exist"), "{}", err("dangling.json"));
        std::fs::write(p("latin1.json"), b"{\"name\": \"caf\xe9\"}").unwrap();
        assert!(err("latin1.json").contains("latin1.json is not UTF-8 text (at byte 13)"), "{}", err("latin1.json"));
        let big = std::fs::File::create(p("big.json")).unwrap();
        big.set_len(MAX_SIDE_FILE + 1).unwrap();
        assert!(err("big.json").contains("is larger than 64 MiB"), "{}", err("big.json"));
    }

    /// A Pooling or Dense module outside the model's folder is refused (an outside probe: both
    /// were read from anywhere).
    #[test]
    fn modules_stay_inside_the_model_folder() {
        let dir = tempfile::tempdir().unwrap();
        let modules = dir.path().join("modules.json");
        let with = |pooling: &str, dense: &str| {
            let m = serde_json::json!([
                {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                {"idx": 1, "name": "1", "path": pooling, "type": "sentence_transformers.models.Pooling"},
                {"idx": 2, "name": "2", "path": dense, "type": "sentence_transformers.models.Dense"},
            ]);
            std::fs::write(&modules, m.to_string()).unwrap();
            pipeline(Some(&modules)).map(|p| (p.pooling, p.dense)).map_err(|e| e.to_string())
        };
        assert_eq!(with("1_Pooling", "2_Dense"), Ok((Some("1_Pooling/config.json".into()), Some("2_Dense".into()))));
        let e = with("../x", "2_Dense").unwrap_err();
        assert!(e.contains("the Pooling module's path \"../x\" leaves the model's folder"), "{e}");
        let e = with("1_Pooling", "/tmp/dense").unwrap_err();
        assert!(e.contains("the Dense module's path \"/tmp/dense\" leaves"), "{e}");
        assert!(with("1_Pooling", "sub/../../d").is_err());
    }

    #[test]
    fn pipeline_order() {
        let check = |kinds: &[(&str, &str)]| {
            let mods: Vec<(String, String)> =
                kinds.iter().map(|(t, p)| (format!("sentence_transformers.models.{t}"), p.to_string())).collect();
            check_pipeline(Path::new("m/modules.json"), &mods).map_err(|e| e.to_string())
        };
        let (t, p, d, n) =
            (("Transformer", ""), ("Pooling", "1_Pooling"), ("Dense", "2_Dense"), ("Normalize", "3_Normalize"));
        for ok in [vec![t], vec![t, p], vec![t, p, d], vec![t, p, n], vec![t, p, d, n]] {
            assert_eq!(check(&ok), Ok(()), "{ok:?}");
        }
        let err = check(&[t, d, p, n]).unwrap_err();
        assert!(
            err.contains("m/modules.json lists Dense (2_Dense) before any Pooling")
                && err.contains("only after Pooling"),
            "{err}"
        );
        let err = check(&[t, p, n, d]).unwrap_err();
        assert!(
            err.contains("Normalize (3_Normalize) before Dense (2_Dense)") && err.contains("normalises last"),
            "{err}"
        );
        let err = check(&[t, n]).unwrap_err();
        assert!(err.contains("Normalize (3_Normalize) before any Pooling"), "{err}");
        let err = check(&[p, t]).unwrap_err();
        assert!(err.contains("the first module is Pooling (1_Pooling), not the Transformer"), "{err}");
        let err = check(&[t, p, p]).unwrap_err();
        assert!(err.contains("2 Pooling modules"), "{err}");
        assert!(check(&[]).unwrap_err().contains("the first module is nothing"));
    }

    #[test]
    fn sharded_checkpoints_are_recognised() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        assert_eq!(stray_shard(dir), None);
        std::fs::write(dir.join("model-00002-of-00002.safetensors"), "").unwrap();
        std::fs::write(dir.join("model-00001-of-00002.safetensors"), "").unwrap();
        std::fs::write(dir.join("model-extra.safetensors"), "").unwrap();
        assert_eq!(stray_shard(dir).as_deref(), Some("model-00001-of-00002.safetensors"));
        let pth = tempfile::tempdir().unwrap();
        std::fs::write(pth.path().join("pytorch_model-00003-of-00012.bin"), "").unwrap();
        assert_eq!(stray_shard(pth.path()).as_deref(), Some("pytorch_model-00003-of-00012.bin"));
    }

    /// An index's shards: each file once, sorted; entries that are not plain file names beside
    /// the index are refused, as is an index without a weight_map.
    #[test]
    fn shard_index() {
        let tmp = tempfile::tempdir().unwrap();
        let index = tmp.path().join("model.safetensors.index.json");
        let names = |text: &str| {
            std::fs::write(&index, text).unwrap();
            shard_names(&index).map_err(|e| e.to_string())
        };
        let two = r#"{"metadata": {"total_size": 8}, "weight_map": {"b.weight": "model-00002-of-00002.safetensors",
            "a.weight": "model-00001-of-00002.safetensors", "a.bias": "model-00001-of-00002.safetensors"}}"#;
        assert_eq!(names(two).unwrap(), ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]);
        for bad in [
            r#"{"weight_map": {"a": "../x.safetensors"}}"#,
            r#"{"weight_map": {"a": "/abs/x.bin"}}"#,
            r#"{"weight_map": {"a": ""}}"#,
        ] {
            let err = names(bad).unwrap_err();
            assert!(err.contains("not the name of a file beside the index"), "{err}");
        }
        assert!(names(r#"{"weight_map": {"a": 3}}"#).unwrap_err().contains("not a file name"));
        assert!(names(r#"{"metadata": {}}"#).unwrap_err().contains("no \"weight_map\""));
        assert!(names(r#"{"weight_map": {}}"#).unwrap_err().contains("lists no shards"));
        assert!(names("{").unwrap_err().contains("is not valid JSON"));
    }
}
