//! Where a model's files come from: a local directory, or a hub id (`org/name[@revision]`)
//! resolved through the `hf-hub` cache (`HF_HUB_CACHE`, else `$HF_HOME/hub`, else
//! `~/.cache/huggingface/hub`), downloading when online and `HF_HUB_OFFLINE` is not set (with
//! the token `huggingface_hub` would send: `HF_TOKEN`, else `HUGGING_FACE_HUB_TOKEN`, else
//! `$HF_HOME/token`).

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

const WEIGHT_FORMATS: &str = "model.safetensors, a sharded model.safetensors.index.json with its shards, \
    pytorch_model.bin (the zip format of PyTorch 1.6 and later) or a sharded pytorch_model.bin.index.json";

fn how_to_get(file: &str) -> &'static str {
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

/// Resolve `--model`: an existing directory, else a hub id.
pub fn resolve(spec: &str) -> Result<ModelFiles> {
    let path = Path::new(spec);
    if path.is_dir() {
        return resolve_dir(path, spec);
    }
    if path.is_file() {
        let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
        bail!("model {spec:?} is a file: give the model's directory (--model {})", dir.display());
    }
    if let Ok(m) = std::fs::symlink_metadata(path) {
        // Something is there that is neither a folder nor a file (through links).
        use std::os::unix::fs::FileTypeExt;
        let what = match std::fs::metadata(path).map(|m| m.file_type()) {
            Ok(t) if t.is_fifo() => "a FIFO".to_string(),
            Ok(t) if t.is_char_device() || t.is_block_device() => "a device".to_string(),
            Ok(t) if t.is_socket() => "a socket".to_string(),
            Ok(_) => "not a folder".to_string(),
            Err(_) if m.file_type().is_symlink() => match std::fs::read_link(path) {
                Ok(to) => format!("a symbolic link to {}, which does not exist (or loops)", to.display()),
                Err(_) => "a symbolic link that leads nowhere".to_string(),
            },
            Err(e) => format!("unreadable ({e})"),
        };
        bail!("model {spec:?} is {what}: give a model directory (with config.json, the weights and the tokenizer)");
    }
    if spec.ends_with('@') {
        bail!("model {spec:?}: the revision after @ is empty (org/name@REVISION, e.g. @main)");
    }
    // Nothing is at `spec` where xsent runs (looked at above), so a bare name is looked up in
    // the models folder without a second look.
    if let Some(dir) = in_models_folder(spec) {
        return resolve_dir(&dir, spec);
    }
    let installed = crate::places::models_dir();
    let first = spec.split('/').next().unwrap_or("");
    if looks_like_hub_id(spec) && Path::new(first).is_dir() {
        let rest = &spec[first.len() + 1..];
        let cwd = std::env::current_dir()
            .map(|d| d.join(first).display().to_string())
            .unwrap_or_else(|_| format!("./{first}"));
        bail!(
            "model {spec:?} not found: {cwd} exists as a local directory but has no subdirectory {rest:?}, \
             so {spec:?} was taken as a local path, not as a hub id.\n\
             To load the hub model {spec}, rename or remove the local folder {first:?}, or run xsent from another directory \
             (--model is relative to the directory xsent runs in)."
        );
    }
    if looks_like_hub_id(spec) {
        return hub_cache_dir().and_then(|cache| resolve_hub(spec, &cache, hub_offline())).map_err(|e| {
            let cwd = std::env::current_dir().map(|d| d.display().to_string()).unwrap_or_else(|_| "?".into());
            e.context(format!(
                "model {spec:?}: there is no such directory under {cwd}, so it was looked up as a hub id (--model is relative to the directory xsent runs in)"
            ))
        });
    }
    let names = installed_models(&installed);
    let names = if names.is_empty() { "none yet".to_string() } else { names.join(", ") };
    bail!(
        "model {spec:?} not found: it is not a directory, nor a hub id of the form org/name, nor a model installed in {} ({names}).\n\
         The bundled models are made there by scripts/setup.sh (without --model, xsent uses {}).",
        installed.display(),
        crate::places::DEFAULT_MODEL
    )
}

/// The folder in the models folder that `spec` names, when it is a bare name (`--model
/// all-MiniLM-L6-v2`, as sentence-transformers takes it) and nothing of that name is where xsent
/// runs (a local directory comes first).
fn installed_model(spec: &str) -> Option<PathBuf> {
    std::fs::symlink_metadata(spec).is_err().then(|| in_models_folder(spec)).flatten()
}

/// The folder of the models folder that `spec` names when it is a bare name, whatever is
/// where xsent runs: [`installed_model`] for callers that have not looked there yet.
fn in_models_folder(spec: &str) -> Option<PathBuf> {
    let dir = crate::places::models_dir().join(spec);
    (is_bare_name(spec) && dir.is_dir()).then_some(dir)
}

/// The local directory `spec` names: itself, or a model in the models folder
/// ([`installed_model`]); `spec` as a path otherwise (a hub id, or nothing).
pub fn local_dir(spec: &str) -> PathBuf {
    installed_model(spec).unwrap_or_else(|| PathBuf::from(spec))
}

/// Whether `spec` could name a folder in the models folder: one path component, not `.` or `..`.
fn is_bare_name(spec: &str) -> bool {
    !spec.is_empty() && !spec.contains(['/', '\\', '@']) && spec != "." && spec != ".."
}

/// The models installed in `dir` (folders with a `config.json`, an `xsent.json`, or a
/// `modules.json` for a Transformer module in a subfolder), sorted.
fn installed_models(dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok())
        .filter(|e| ["config.json", "xsent.json", "modules.json"].iter().any(|f| e.path().join(f).is_file()))
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    names.sort();
    names
}

/// Whether `spec` has the form of a hub id, `org/name[@revision]`.
pub fn looks_like_hub_id(spec: &str) -> bool {
    let id = spec.split('@').next().unwrap_or("");
    let parts: Vec<&str> = id.split('/').collect();
    parts.len() == 2
        && parts.iter().all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)))
        && !spec.starts_with('.')
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
fn check_dense_config(config: &Path) -> Result<()> {
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
struct Pipeline {
    /// The Pooling module's config (relative to the model dir), when one is listed.
    pooling: Option<String>,
    /// The Dense module's directory (relative to the model dir), when one is listed.
    dense: Option<String>,
    /// Whether a Normalize module is listed (`None` without a `modules.json`).
    normalize: Option<bool>,
    /// The Transformer module's folder (relative to the model dir), when it is not the model dir.
    transformer: Option<String>,
}

fn pipeline(modules: Option<&Path>) -> Result<Pipeline> {
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

/// The hub cache directory, as `huggingface_hub` chooses it.
pub fn hub_cache_dir() -> Result<PathBuf> {
    if let Ok(dir) = std::env::var("HF_HUB_CACHE") {
        return Ok(PathBuf::from(dir));
    }
    // hf-hub falls back to the home directory and panics when there is none.
    if std::env::var_os("HF_HOME").is_none() && std::env::home_dir().is_none() {
        bail!("no hub cache: there is no home directory; set HF_HUB_CACHE (or HF_HOME) to a directory");
    }
    Ok(hf_hub::Cache::from_env().path().clone())
}

/// `HF_HUB_OFFLINE` set to a true value.
pub fn hub_offline() -> bool {
    std::env::var("HF_HUB_OFFLINE")
        .is_ok_and(|v| matches!(v.to_ascii_lowercase().as_str(), "1" | "true" | "yes" | "on"))
}

/// A hub token: its value, and where it was found (for messages).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubToken {
    pub value: String,
    pub from: String,
}

/// The hub token as `huggingface_hub` finds it: the `HF_TOKEN` variable, else the legacy
/// `HUGGING_FACE_HUB_TOKEN`, else the file
/// `HF_TOKEN_PATH`, else `$HF_HOME/token` (`HF_HOME` defaulting to `~/.cache/huggingface`);
/// empty values count as none. `var` reads an environment variable, `home` is the home
/// directory. (hf-hub itself only reads `<cache>/../token`, which misses `$HF_HOME/token`
/// whenever `HF_HUB_CACHE` points elsewhere.)
pub fn hub_token(var: &dyn Fn(&str) -> Option<String>, home: Option<&Path>) -> Option<HubToken> {
    let clean = |s: &str| Some(s.trim().to_string()).filter(|t| !t.is_empty());
    for name in ["HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"] {
        if let Some(value) = var(name).as_deref().and_then(clean) {
            return Some(HubToken { value, from: name.into() });
        }
    }
    let file = match (var("HF_TOKEN_PATH").filter(|p| !p.is_empty()), var("HF_HOME").filter(|p| !p.is_empty())) {
        (Some(path), _) => PathBuf::from(path),
        (None, Some(hf_home)) => Path::new(&hf_home).join("token"),
        (None, None) => home?.join(".cache/huggingface/token"),
    };
    let value = std::fs::read_to_string(&file).ok().as_deref().and_then(clean)?;
    Some(HubToken { value, from: file.display().to_string() })
}

/// A full commit hash (40 lowercase hex digits), as `huggingface_hub` recognises one.
/// A revision's ref file in the hub cache (`refs/main`), when there is one, must hold a commit
/// hash: the cache reads its files from `snapshots/<what it holds>`, so anything else (an outside
/// probe: `../../../x` loaded a folder outside the cache) is an error naming the file.
fn check_ref(path: &Path) -> Result<Option<String>> {
    let Some(text) = read_side_file(path)? else { return Ok(None) };
    if !is_commit_hash(text.trim()) {
        let shown: String = text.trim().chars().take(80).collect();
        bail!(
            "{} holds {shown:?}, not a commit hash: the hub cache is damaged; remove that file (or the model's folder \
             in the cache) and download the model again",
            path.display()
        );
    }
    Ok(Some(text.trim().to_string()))
}

fn is_commit_hash(revision: &str) -> bool {
    revision.len() == 40 && revision.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// A failed hub request: its message, and the HTTP status and `X-Error-Code` when the hub answered.
struct HubFailure {
    message: String,
    status: Option<u16>,
    error_code: Option<String>,
}

impl HubFailure {
    fn new(e: hf_hub::api::sync::ApiError) -> Self {
        use hf_hub::api::sync::ApiError;
        let message = e.to_string();
        let response = match e {
            ApiError::RequestError(e) => (*e).into_response(),
            ApiError::TooManyRetries(inner) => return Self { message, ..Self::new(*inner) },
            _ => None,
        };
        let status = response.as_ref().map(|r| r.status());
        let error_code = response.as_ref().and_then(|r| r.header("x-error-code")).map(str::to_string);
        Self { message, status, error_code }
    }

    /// The hub answered that the file does not exist: a 404, and not for the whole repo or revision.
    fn file_absent(&self) -> bool {
        self.status == Some(404) && !matches!(self.error_code.as_deref(), Some("RepoNotFound" | "RevisionNotFound"))
    }
}

/// What an optional file sets, for messages.
fn what_it_sets(file: &str) -> &'static str {
    // A Transformer module's files may sit in its folder (0_Transformer/tokenizer_config.json);
    // any other file in a folder is a Pooling config.
    let base = file.rsplit('/').next().unwrap_or(file);
    match if base == "config.json" { file } else { base } {
        "modules.json" => "the model's pipeline (pooling, Dense, normalisation)",
        "sentence_bert_config.json" => "the maximum length and lowercasing",
        "config_sentence_transformers.json" => "the default prompt",
        "tokenizer_config.json" => "the maximum length (model_max_length) and a vocab.txt tokenizer's settings",
        "tokenizer.json" | "vocab.txt" | "special_tokens_map.json" | "added_tokens.json" => "the tokenizer",
        f if WEIGHT_FILES.contains(&f) || f.ends_with("/model.safetensors") => {
            "which weight file is read (xsent goes on to the next of model.safetensors, model.safetensors.index.json, \
             pytorch_model.bin and pytorch_model.bin.index.json only when the hub says the one before does not exist)"
        }
        _ => "the pooling",
    }
}

/// One hub repository at one revision: its files in the cache, downloaded when online.
struct HubRepo {
    id: String,
    revision: String,
    /// Whether the spec named the revision (`org/name@rev`).
    given_revision: bool,
    cache_dir: PathBuf,
    cache: hf_hub::CacheRepo,
    /// `snapshots/<commit>` when the revision is a commit hash: `huggingface_hub` writes no
    /// `refs/<commit>` for one, which hf-hub's cache needs.
    snapshot: Option<PathBuf>,
    /// The revision's ref file and the snapshot folder it names, when that folder is missing.
    lost_snapshot: Option<(PathBuf, PathBuf)>,
    api: Option<hf_hub::api::sync::ApiRepo>,
    token: Option<HubToken>,
}

impl HubRepo {
    fn new(spec: &str, cache_dir: &Path, offline: bool) -> Result<Self> {
        let (id, revision, given_revision) = match spec.split_once('@') {
            Some((id, rev)) => (id.to_string(), rev.to_string(), true),
            None => (spec.to_string(), "main".to_string(), false),
        };
        let repo = hf_hub::Repo::with_revision(id.clone(), hf_hub::RepoType::Model, revision.clone());
        let ref_path = cache_dir.join(repo.folder_name()).join("refs").join(&revision);
        // A ref whose snapshot folder is gone: every file would be "not in the hub cache".
        let lost_snapshot = check_ref(&ref_path)?
            .map(|commit| cache_dir.join(repo.folder_name()).join("snapshots").join(commit))
            .filter(|s| !s.is_dir())
            .map(|s| (ref_path, s));
        let cache = hf_hub::Cache::new(cache_dir.to_path_buf()).repo(repo.clone());
        let snapshot =
            is_commit_hash(&revision).then(|| cache_dir.join(repo.folder_name()).join("snapshots").join(&revision));
        let (api, token) = if offline {
            (None, None)
        } else {
            let token = hub_token(&|k| std::env::var(k).ok(), std::env::home_dir().as_deref());
            let api = hf_hub::api::sync::ApiBuilder::from_cache(hf_hub::Cache::new(cache_dir.to_path_buf()))
                .with_token(token.as_ref().map(|t| t.value.clone()))
                .with_progress(std::io::IsTerminal::is_terminal(&std::io::stderr()));
            let api = match std::env::var("HF_ENDPOINT") {
                Ok(e) => api.with_endpoint(e),
                Err(_) => api,
            };
            (Some(api.build()?.repo(repo)), token)
        };
        Ok(Self {
            id,
            revision,
            given_revision,
            cache_dir: cache_dir.to_path_buf(),
            cache,
            snapshot,
            lost_snapshot,
            api,
            token,
        })
    }

    /// `file` in the cache: under the revision's ref, or in the commit's snapshot.
    fn cached(&self, file: &str) -> Option<PathBuf> {
        self.cache.get(file).or_else(|| self.snapshot.as_ref().map(|s| s.join(file)).filter(|p| p.exists()))
    }

    /// `file` from the cache, else from the hub. An optional file is `None` only when the hub
    /// says it does not exist (or, offline, when the cache lacks it): any other failure would
    /// silently change the model's pooling, length or prompt.
    fn get(&self, file: &str, required: bool) -> Result<Option<PathBuf>> {
        if let Some(p) = self.cached(file) {
            return Ok(Some(p));
        }
        let Some(api) = &self.api else {
            if let Some((ref_path, snapshot)) = &self.lost_snapshot {
                bail!(
                    "{file} of {} (revision {}) is not in the hub cache: {} names the snapshot {}, which does not exist \
                     (the cache is damaged: a snapshot folder was removed or moved). Remove {} and download the model again \
                     (run the same command without HF_HUB_OFFLINE, or `huggingface-cli download {}{}`), or pass a local \
                     model directory to --model.",
                    self.id,
                    self.revision,
                    ref_path.display(),
                    snapshot.display(),
                    ref_path.display(),
                    self.id,
                    self.revision_flag()
                );
            }
            if required {
                bail!(
                    "{file} of {} (revision {}) is not in the hub cache {} and HF_HUB_OFFLINE is set.\n\
                     Download it while online (run the same command without HF_HUB_OFFLINE, or `huggingface-cli download {}{}`), \
                     or pass a local model directory to --model.{}",
                    self.id,
                    self.revision,
                    self.cache_dir.display(),
                    self.id,
                    self.revision_flag(),
                    // What to do with a local copy applies to the tokenizer only, here.
                    if file.ends_with("tokenizer.json") { format!("\n{}.", how_to_get("tokenizer.json")) } else { String::new() }
                );
            }
            return Ok(None);
        };
        match api.get(file) {
            Ok(p) => Ok(Some(p)),
            Err(e) => {
                let failure = HubFailure::new(e);
                if !required && failure.file_absent() {
                    return Ok(None);
                }
                bail!(self.failure_message(file, required, &failure))
            }
        }
    }

    /// The weight files: the first of [`WEIGHT_FILES`] the repo has (in the cache, or on the hub
    /// when online), with the shards its index lists.
    /// `folder` is the Transformer module's folder with a trailing `/`, or empty.
    fn weights(&self, folder: &str) -> Result<Vec<PathBuf>> {
        for name in WEIGHT_FILES {
            let Some(path) = self.get(&format!("{folder}{name}"), false)? else { continue };
            if name != WEIGHT_FILES[0] {
                self.note_fallback(&format!("{folder}{name}"), &format!("{folder}{}", WEIGHT_FILES[0]));
            }
            if !name.ends_with(".index.json") {
                return Ok(vec![path]);
            }
            let shards = shard_names(&path)?;
            return shards.iter().map(|s| Ok(self.get(&format!("{folder}{s}"), true)?.unwrap())).collect();
        }
        if self.api.is_none() {
            bail!(
                "none of the weight files of {} (revision {}){} is in the hub cache {} and HF_HUB_OFFLINE is set; xsent reads {WEIGHT_FORMATS}.\n\
                 Download them while online (run the same command without HF_HUB_OFFLINE, or `huggingface-cli download {}{}`), \
                 or pass a local model directory to --model.",
                self.id,
                self.revision,
                if folder.is_empty() { String::new() } else { format!(" in {folder}") },
                self.cache_dir.display(),
                self.id,
                self.revision_flag()
            );
        }
        bail!(
            "{} (revision {}) has no weights xsent reads: the hub has none of {}.\nxsent reads {WEIGHT_FORMATS}; \
             a repo with only TensorFlow or Flax weights must be loaded in transformers (from_tf=True / from_flax=True), \
             saved with save_pretrained(dir) and given to --model as that directory.",
            self.id,
            self.revision,
            WEIGHT_FILES.map(|w| format!("{folder}{w}")).join(", ")
        )
    }

    /// Offline, a file used in place of a preferred one that is not in the cache may not be what
    /// the hub would give online: say so on stderr.
    fn note_fallback(&self, used: &str, preferred: &str) {
        if self.api.is_none() {
            errln!(
                "xsent: {} (revision {}): {preferred} is not in the hub cache and HF_HUB_OFFLINE is set, so the cached {used} is used \
                 (online, the hub's {preferred} would be read if it has one)",
                self.id, self.revision
            );
        }
    }

    /// ` --revision REV` when the spec named one.
    fn revision_flag(&self) -> String {
        if self.given_revision {
            format!(" --revision {}", self.revision)
        } else {
            String::new()
        }
    }

    fn failure_message(&self, file: &str, required: bool, failure: &HubFailure) -> String {
        let head =
            format!("cannot get {file} of {} (revision {}) from the hub: {}", self.id, self.revision, failure.message);
        if matches!(failure.status, Some(401 | 403)) {
            let sent = match &self.token {
                Some(t) => format!("the token from {} was sent but does not give access to it", t.from),
                None => "no token was sent".to_string(),
            };
            return format!(
                "{head}.\n{} may not exist, or be private or gated ({sent}): check the id, accept a gated model's conditions on its hub page, \
                 and give a token with access in HF_TOKEN or in $HF_HOME/token (`huggingface-cli login` writes it).",
                self.id
            );
        }
        if failure.status == Some(404) {
            return format!(
                "{head}.\nThe cache is {} (set HF_HOME or HF_HUB_CACHE to use another); check the id and revision, or pass a local model directory to --model.\n{}.",
                self.cache_dir.display(),
                how_to_get(file)
            );
        }
        let optional = if required {
            String::new()
        } else {
            format!(
                "{file} is optional, but it sets {}, and only the hub's answer that it does not exist (404) lets xsent go on without it.\n",
                what_it_sets(file)
            )
        };
        format!(
            "{head}.\n{optional}Retry later (the hub may be busy or limiting requests, or the network down); or, if the hub cache {} \
             already holds every file of {} (`huggingface-cli download {}{}` while online), set HF_HUB_OFFLINE=1; \
             or pass a local model directory to --model.",
            self.cache_dir.display(),
            self.id,
            self.id,
            self.revision_flag()
        )
    }
}

/// Resolve a hub id through the cache at `cache_dir`; download missing files unless `offline`.
pub fn resolve_hub(spec: &str, cache_dir: &Path, offline: bool) -> Result<ModelFiles> {
    let hub = HubRepo::new(spec, cache_dir, offline)?;
    let get = |file: &str, required: bool| hub.get(file, required);
    let pipeline = pipeline(get("modules.json", false)?.as_deref())?;
    // The Transformer module's files: at the top, or in the folder modules.json gives.
    let folder = pipeline.transformer.as_ref().map(|p| format!("{p}/")).unwrap_or_default();
    let tget = |file: &str, required: bool| hub.get(&format!("{folder}{file}"), required);
    let config = tget("config.json", true)?.unwrap();
    let weights = hub.weights(&folder)?;
    // tokenizer.json, else (asked only when the hub says there is none) a BERT vocab.txt.
    let tokenizer = match tget("tokenizer.json", false)? {
        Some(t) => t,
        None => match tget("vocab.txt", false)? {
            Some(v) => {
                hub.note_fallback(&format!("{folder}vocab.txt"), &format!("{folder}tokenizer.json"));
                for f in ["special_tokens_map.json", "added_tokens.json"] {
                    tget(f, false)?;
                }
                v
            }
            None => tget("tokenizer.json", true)?.unwrap(),
        },
    };
    // Read from beside tokenizer.json (model_max_length, the default length without a
    // sentence_bert_config.json), so only fetched here.
    tget("tokenizer_config.json", false)?;
    // A Pooling module that modules.json lists is required, as locally.
    let pooling = match &pipeline.pooling {
        Some(rel) => get(rel, true)?,
        None => get("1_Pooling/config.json", false)?,
    };
    let dense = match &pipeline.dense {
        Some(rel) => {
            let cfg = get(&format!("{rel}/config.json"), true)?.unwrap();
            check_dense_config(&cfg)?;
            // As sentence-transformers: model.safetensors, else pytorch_model.bin; neither is
            // an error about the first.
            let (st, bin) = (format!("{rel}/model.safetensors"), format!("{rel}/pytorch_model.bin"));
            if get(&st, false)?.is_none() {
                match get(&bin, false)? {
                    Some(_) => hub.note_fallback(&bin, &st),
                    None => {
                        get(&st, true)?;
                    }
                }
            }
            cfg.parent().map(Path::to_path_buf)
        }
        None => None,
    };
    Ok(ModelFiles {
        spec: spec.to_string(),
        config,
        weights,
        tokenizer,
        pooling,
        st_config: tget("sentence_bert_config.json", false)?,
        st_model_config: get("config_sentence_transformers.json", false)?,
        xsent: None,
        dense,
        declares_normalize: pipeline.normalize,
        transformer_path: pipeline.transformer,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn hub_ids() {
        assert!(looks_like_hub_id("intfloat/multilingual-e5-small"));
        assert!(looks_like_hub_id("org/name@v1.0"));
        assert!(!looks_like_hub_id("models/a/b"));
        assert!(!looks_like_hub_id("./models"));
        assert!(!looks_like_hub_id("name"));
    }

    /// `huggingface_hub`'s order: HF_TOKEN, else HUGGING_FACE_HUB_TOKEN, else HF_TOKEN_PATH, else
    /// $HF_HOME/token, else ~/.cache/huggingface/token; blank values are no token.
    #[test]
    fn hub_token_lookup_order() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let write = |rel: &str, text: &str| {
            let p = dir.join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, text).unwrap();
            p
        };
        let home_file = write("home/.cache/huggingface/token", "from-home\n");
        let hf_home_file = write("hf/token", " from-hf-home \n");
        let path_file = write("elsewhere/tok", "from-token-path");
        write("blank/token", "  \n");
        let home = dir.join("home");
        let hf_home = dir.join("hf").display().to_string();
        let token = |vars: &[(&str, &str)]| {
            let var = |k: &str| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string());
            hub_token(&var, Some(&home)).map(|t| (t.value, t.from))
        };
        let from = |p: &Path| p.display().to_string();
        assert_eq!(token(&[("HF_TOKEN", "hf_env"), ("HF_HOME", &hf_home)]), Some(("hf_env".into(), "HF_TOKEN".into())));
        assert_eq!(
            token(&[("HF_TOKEN", " "), ("HF_HOME", &hf_home)]),
            Some(("from-hf-home".into(), from(&hf_home_file)))
        );
        assert_eq!(token(&[("HF_HOME", &hf_home)]), Some(("from-hf-home".into(), from(&hf_home_file))));
        let legacy = ("HUGGING_FACE_HUB_TOKEN", "hf_legacy");
        assert_eq!(
            token(&[legacy, ("HF_HOME", &hf_home)]),
            Some(("hf_legacy".into(), "HUGGING_FACE_HUB_TOKEN".into()))
        );
        assert_eq!(
            token(&[("HF_TOKEN", "hf_env"), legacy]),
            Some(("hf_env".into(), "HF_TOKEN".into())),
            "HF_TOKEN comes first"
        );
        assert_eq!(token(&[("HF_TOKEN", ""), legacy]), Some(("hf_legacy".into(), "HUGGING_FACE_HUB_TOKEN".into())));
        let path = from(&path_file);
        assert_eq!(
            token(&[("HF_TOKEN_PATH", &path), ("HF_HOME", &hf_home)]),
            Some(("from-token-path".into(), path.clone()))
        );
        assert_eq!(token(&[]), Some(("from-home".into(), from(&home_file))));
        let blank = dir.join("blank").display().to_string();
        assert_eq!(token(&[("HF_HOME", &blank)]), None, "a blank token file is no token");
        let missing = dir.join("missing").display().to_string();
        assert_eq!(token(&[("HF_HOME", &missing)]), None, "$HF_HOME set: ~/.cache/huggingface is not read");
        assert_eq!(hub_token(&|_| None, None), None);
    }

    #[test]
    fn commit_hashes() {
        assert!(is_commit_hash("0123456789abcdef0123456789abcdef01234567"));
        assert!(!is_commit_hash("0123456789ABCDEF0123456789abcdef01234567"));
        assert!(!is_commit_hash("main"));
        assert!(!is_commit_hash("0123456789abcdef"));
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
