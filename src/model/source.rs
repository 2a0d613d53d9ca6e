//! Where a model's files come from: a local directory, or a hub id (`org/name[@revision]`)
//! resolved through the `hf-hub` cache (`HF_HUB_CACHE`, else `$HF_HOME/hub`, else
//! `~/.cache/huggingface/hub`), downloading when online and `HF_HUB_OFFLINE` is not set.

use anyhow::{bail, Result};
use std::path::{Path, PathBuf};

/// The files of one model. Optional ones are sentence-transformers metadata.
#[derive(Debug, Clone)]
pub struct ModelFiles {
    /// What the user passed (`models/e5` or `org/name`).
    pub spec: String,
    pub config: PathBuf,
    pub weights: PathBuf,
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
}

const REQUIRED: [&str; 3] = ["config.json", "model.safetensors", "tokenizer.json"];

fn how_to_get(file: &str) -> &'static str {
    match file {
        "model.safetensors" => "xsent reads weights from model.safetensors; a checkpoint with only pytorch_model.bin must be re-saved with transformers' save_pretrained(..., safe_serialization=True)",
        "tokenizer.json" => "xsent needs the fast-tokenizer file tokenizer.json; save it with transformers' AutoTokenizer.from_pretrained(...).save_pretrained(dir)",
        _ => "save the model with transformers' save_pretrained(dir)",
    }
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
    if spec.ends_with('@') {
        bail!("model {spec:?}: the revision after @ is empty (org/name@REVISION, e.g. @main)");
    }
    let first = spec.split('/').next().unwrap_or("");
    if looks_like_hub_id(spec) && !Path::new(first).is_dir() {
        return hub_cache_dir().and_then(|cache| resolve_hub(spec, &cache, hub_offline())).map_err(|e| {
            let cwd = std::env::current_dir().map(|d| d.display().to_string()).unwrap_or_else(|_| "?".into());
            e.context(format!(
                "model {spec:?}: there is no such directory under {cwd}, so it was looked up as a hub id (paths in configs and --model are relative to the directory xsent runs in)"
            ))
        });
    }
    bail!(
        "model {spec:?} not found: it is not a directory, nor a hub id of the form org/name.\n\
         The bundled models are made by scripts/setup.sh under models/ (e.g. --model models/multilingual-e5-small)."
    )
}

fn looks_like_hub_id(spec: &str) -> bool {
    let id = spec.split('@').next().unwrap_or("");
    let parts: Vec<&str> = id.split('/').collect();
    parts.len() == 2
        && parts.iter().all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)))
        && !spec.starts_with('.')
}

/// A local model directory.
pub fn resolve_dir(dir: &Path, spec: &str) -> Result<ModelFiles> {
    for f in REQUIRED {
        if !dir.join(f).is_file() {
            bail!(
                "model directory {} has no {f}: xsent needs config.json, model.safetensors and tokenizer.json there.\n{}.\n\
                 For the bundled models run scripts/setup.sh.",
                dir.display(),
                how_to_get(f)
            );
        }
    }
    let opt = |rel: &str| Some(dir.join(rel)).filter(|p| p.is_file());
    let modules = opt("modules.json");
    let pooling_rel = pooling_path(modules.as_deref());
    if let Some(rel) = &pooling_rel {
        // A Pooling module listed but absent would silently fall back to mean pooling.
        if !dir.join(rel).is_file() {
            bail!("{} lists a Pooling module whose config {} does not exist", dir.join("modules.json").display(), dir.join(rel).display());
        }
    }
    let pooling_rel = pooling_rel.unwrap_or_else(|| "1_Pooling/config.json".to_string());
    let dense = match dense_path(modules.as_deref())? {
        Some(rel) => {
            let d = dir.join(&rel);
            if !d.join("config.json").is_file() {
                bail!("{} lists a Dense module at {rel}/ but {} does not exist", dir.join("modules.json").display(), d.join("config.json").display());
            }
            Some(d)
        }
        None => None,
    };
    Ok(ModelFiles {
        spec: spec.to_string(),
        config: dir.join("config.json"),
        weights: dir.join("model.safetensors"),
        tokenizer: dir.join("tokenizer.json"),
        pooling: opt(&pooling_rel),
        st_config: opt("sentence_bert_config.json"),
        st_model_config: opt("config_sentence_transformers.json"),
        xsent: opt("xsent.json"),
        dense,
        declares_normalize: declares_normalize(modules.as_deref())?,
    })
}

/// The modules of a sentence-transformers `modules.json` as (type, path).
fn st_modules(modules: Option<&Path>) -> Result<Vec<(String, String)>> {
    let Some(path) = modules else { return Ok(Vec::new()) };
    let text = std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
    let v: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| anyhow::anyhow!("{} is not valid JSON: {e}", path.display()))?;
    let Some(mods) = v.as_array() else { bail!("{}: expected a JSON list of modules", path.display()) };
    let mods: Vec<(String, String)> =
        mods.iter().map(|m| (m["type"].as_str().unwrap_or("").to_string(), m["path"].as_str().unwrap_or("").to_string())).collect();
    // What xsent runs: the transformer, then pooling, an optional Dense layer and normalisation.
    // Any other module would change the vectors sentence-transformers gives.
    for (t, _) in &mods {
        let known = ["Transformer", "Pooling", "Dense", "Normalize"].iter().any(|k| t.rsplit('.').next() == Some(k));
        if !known {
            bail!(
                "{} lists a module xsent cannot run ({t:?}); xsent runs Transformer, Pooling, Dense and Normalize modules",
                path.display()
            );
        }
    }
    Ok(mods)
}

/// Path of the Dense module (relative to the model dir), if `modules.json` lists one.
fn dense_path(modules: Option<&Path>) -> Result<Option<String>> {
    let dense: Vec<String> =
        st_modules(modules)?.into_iter().filter(|(t, _)| t.ends_with(".Dense")).map(|(_, p)| p).collect();
    if dense.len() > 1 {
        bail!("{}: xsent supports at most one Dense module, this model has {}", modules.unwrap().display(), dense.len());
    }
    Ok(dense.into_iter().next())
}

/// Whether `modules.json` lists a Normalize module (`None` without a `modules.json`).
fn declares_normalize(modules: Option<&Path>) -> Result<Option<bool>> {
    if modules.is_none() {
        return Ok(None);
    }
    Ok(Some(st_modules(modules)?.iter().any(|(t, _)| t.ends_with(".Normalize"))))
}

/// Path of the Pooling module's config when `modules.json` lists one.
fn pooling_path(modules: Option<&Path>) -> Option<String> {
    let text = std::fs::read_to_string(modules?).ok()?;
    let serde_json::Value::Array(mods) = serde_json::from_str::<serde_json::Value>(&text).ok()? else { return None };
    mods.iter()
        .find(|m| m["type"].as_str().is_some_and(|t| t.ends_with("Pooling")))
        .and_then(|m| m["path"].as_str())
        .map(|p| format!("{p}/config.json"))
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
    std::env::var("HF_HUB_OFFLINE").is_ok_and(|v| matches!(v.to_ascii_lowercase().as_str(), "1" | "true" | "yes" | "on"))
}

/// Resolve a hub id through the cache at `cache_dir`; download missing files unless `offline`.
pub fn resolve_hub(spec: &str, cache_dir: &Path, offline: bool) -> Result<ModelFiles> {
    let (id, revision) = match spec.split_once('@') {
        Some((id, rev)) => (id.to_string(), rev.to_string()),
        None => (spec.to_string(), "main".to_string()),
    };
    let repo = hf_hub::Repo::with_revision(id.clone(), hf_hub::RepoType::Model, revision.clone());
    let cache = hf_hub::Cache::new(cache_dir.to_path_buf()).repo(repo.clone());
    let api = if offline {
        None
    } else {
        let api = hf_hub::api::sync::ApiBuilder::from_cache(hf_hub::Cache::new(cache_dir.to_path_buf()))
            .with_progress(std::io::IsTerminal::is_terminal(&std::io::stderr()));
        let api = match std::env::var("HF_ENDPOINT") {
            Ok(e) => api.with_endpoint(e),
            Err(_) => api,
        };
        Some(api.build()?.repo(repo))
    };
    let get = |file: &str, required: bool| -> Result<Option<PathBuf>> {
        if let Some(p) = cache.get(file) {
            return Ok(Some(p));
        }
        let Some(api) = &api else {
            if required {
                bail!(
                    "{file} of {id} (revision {revision}) is not in the hub cache {} and HF_HUB_OFFLINE is set.\n\
                     Download it while online (run the same command without HF_HUB_OFFLINE, or `huggingface-cli download {id}`), \
                     or pass a local model directory to --model.\n{}.",
                    cache_dir.display(),
                    how_to_get(file)
                );
            }
            return Ok(None);
        };
        match api.get(file) {
            Ok(p) => Ok(Some(p)),
            Err(e) if required => bail!(
                "cannot get {file} of {id} (revision {revision}) from the hub: {e}.\n\
                 The cache is {} (set HF_HOME or HF_HUB_CACHE to use another); with no network, pass a local model directory to --model.\n{}.",
                cache_dir.display(),
                how_to_get(file)
            ),
            Err(_) => Ok(None),
        }
    };
    let config = get("config.json", true)?.unwrap();
    let weights = get("model.safetensors", true)?.unwrap();
    let tokenizer = get("tokenizer.json", true)?.unwrap();
    let modules = get("modules.json", false)?;
    // A Pooling module that modules.json lists is required, as locally.
    let pooling = match pooling_path(modules.as_deref()) {
        Some(rel) => get(&rel, true)?,
        None => get("1_Pooling/config.json", false)?,
    };
    let dense = match dense_path(modules.as_deref())? {
        Some(rel) => {
            let cfg = get(&format!("{rel}/config.json"), true)?.unwrap();
            get(&format!("{rel}/model.safetensors"), true)?;
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
        st_config: get("sentence_bert_config.json", false)?,
        st_model_config: get("config_sentence_transformers.json", false)?,
        xsent: None,
        dense,
        declares_normalize: declares_normalize(modules.as_deref())?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hub_ids() {
        assert!(looks_like_hub_id("intfloat/multilingual-e5-small"));
        assert!(looks_like_hub_id("org/name@v1.0"));
        assert!(!looks_like_hub_id("models/a/b"));
        assert!(!looks_like_hub_id("./models"));
        assert!(!looks_like_hub_id("name"));
    }
}
