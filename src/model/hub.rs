//! Models from the Hugging Face hub: a hub id (`org/name[@revision]`) resolved through the
//! `hf-hub` cache (`HF_HUB_CACHE`, else `$HF_HOME/hub`, else `~/.cache/huggingface/hub`),
//! downloading when online and `HF_HUB_OFFLINE` is not set (with the token `huggingface_hub`
//! would send: `HF_TOKEN`, else `HUGGING_FACE_HUB_TOKEN`, else `$HF_HOME/token`). The files it
//! gets pass [`super::files`]' checks, as a local directory's do.

use super::files::{
    check_dense_config, how_to_get, pipeline, read_side_file, shard_names, ModelFiles, WEIGHT_FILES, WEIGHT_FORMATS,
};
use anyhow::{bail, Result};
use std::path::{Path, PathBuf};

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
}
