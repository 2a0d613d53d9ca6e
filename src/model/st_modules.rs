//! sentence-transformers' files of a model: read (the prompt that becomes the prefix, pooling,
//! `max_seq_length`, `do_lower_case`, a Dense module; [`resolve`]) and written ([`write_st_files`],
//! with the model xsent saves).

use super::config::EncoderConfig;
use super::dense::Dense;
use super::files::ModelFiles;
use super::options::LoadOptions;
use super::pooling::Pooling;
use super::weights::Params;
use anyhow::{bail, Context, Result};
use std::path::Path;

/// `xsent.json` of a model an earlier xsent trained: its prefix, applied when it is loaded. (Models
/// saved now keep the prefix as sentence-transformers' default prompt, which xsent reads too.)
#[derive(Debug, Clone, Default, serde::Deserialize)]
struct SavedSettings {
    #[serde(default)]
    pub prefix: Option<String>,
}

/// What a model's sentence-transformers files (and the options that override them) settle.
pub(crate) struct StSettings {
    pub pooling: Pooling,
    /// `do_lower_case` of `sentence_bert_config.json`.
    pub lowercase: bool,
    pub max_length: usize,
    pub prefix: String,
    pub dense: Option<Dense>,
    /// The Dense module's trainable parameters (when loaded trainable).
    pub dense_params: Option<Params>,
}

/// The pooling, lowercasing, maximum length, prefix and Dense module of the model `files`
/// describe, `opts` overriding what the files say.
pub(crate) fn resolve(files: &ModelFiles, config: &EncoderConfig, opts: &LoadOptions) -> Result<StSettings> {
    let saved: SavedSettings = match &files.xsent {
        Some(p) => {
            serde_json::from_str(&std::fs::read_to_string(p)?).with_context(|| format!("invalid {}", p.display()))?
        }
        None => SavedSettings::default(),
    };
    // Whether the model's own pooling config leaves a prompt's tokens out of the pooling.
    let (pooling, pools_prompt) = match (opts.pooling, &files.pooling) {
        (Some(p), _) => (p, true),
        (None, Some(path)) => Pooling::from_st_config(path, config.hidden_size)?,
        (None, None) => (Pooling::Mean, true),
    };
    let (st_max_length, lowercase) = read_st_config(files.st_config.as_deref())?;
    // Without a max_seq_length, sentence-transformers takes the tokenizer's
    // model_max_length (tokenizer_config.json beside tokenizer.json) up to the model's
    // positions; without either, xsent takes the positions, at most 512.
    let model_max = match read_model_max_length(&files.tokenizer.with_file_name("tokenizer_config.json"))? {
        Some(n) => n.min(config.max_positions()),
        None => config.max_positions().min(512),
    };
    let max_length = match opts.max_length {
        Some(n) => {
            if n < 2 || n > config.max_positions() {
                bail!(
                    "a maximum length of {n} tokens (--max-length, or max_length in a training config): this model takes 2..={}",
                    config.max_positions()
                );
            }
            n
        }
        None => st_max_length.unwrap_or(model_max).min(config.max_positions()),
    };
    let st_prompts = files.st_model_config.as_deref();
    let (prefix, from) = match (opts.prefix.clone(), opts.prompt_name.as_deref(), saved.prefix) {
        (Some(_), Some(_), _) => bail!("give a prefix or a prompt name, not both"),
        (Some(p), None, _) => (p, "the prefix given"),
        (None, Some(name), _) => {
            (st_prompt(st_prompts, Some(name))?.unwrap_or_default(), "the prompt --prompt-name names")
        }
        (None, None, Some(p)) => (p, "xsent.json's prefix"),
        (None, None, None) => (st_prompt(st_prompts, None)?.unwrap_or_default(), "the model's default prompt"),
    };
    // sentence-transformers applies any prompt that is not empty, whitespace included.
    if !pools_prompt && !prefix.is_empty() {
        bail!(
            "{}: include_prompt is false (sentence-transformers leaves the prompt's tokens out of the pooling), \
             but xsent pools the prefix's tokens too, so with {from}, {prefix:?}, it would not give this model's \
             vectors; embed without it (--prefix \"\", and no --prompt-name), or choose the pooling (--pooling) to pool \
             every token on purpose",
            files.pooling.as_ref().map_or(String::new(), |p| p.display().to_string())
        );
    }
    let mut dense = match &files.dense {
        Some(dir) => Some(Dense::load(dir, &opts.device)?),
        None => None,
    };
    if let Some(d) = &dense {
        if d.in_dim() != config.hidden_size {
            bail!(
                "Dense module {} takes {} inputs but the encoder gives {}",
                files.dense.as_ref().unwrap().display(),
                d.in_dim(),
                config.hidden_size
            );
        }
    }
    let dense_params = match (&mut dense, opts.trainable) {
        (Some(d), true) => Some(d.make_trainable()?),
        _ => None,
    };
    Ok(StSettings { pooling, lowercase, max_length, prefix, dense, dense_params })
}

/// A prompt of a sentence-transformers `config_sentence_transformers.json`: the one named, or
/// (`name` None) the default one, `prompts[default_prompt_name]`, which `SentenceTransformer.encode`
/// prepends to every text. As in sentence-transformers, `query` and `document` always exist
/// (empty unless set, with or without the file) and a null prompt is empty. None: no default
/// prompt.
fn st_prompt(path: Option<&Path>, name: Option<&str>) -> Result<Option<String>> {
    let v: serde_json::Value = match path {
        Some(path) => {
            let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
            serde_json::from_str(&text).with_context(|| format!("invalid {}", path.display()))?
        }
        None => serde_json::json!({}),
    };
    let file = path
        .map_or_else(|| "the model (no config_sentence_transformers.json)".to_string(), |p| p.display().to_string());
    if !matches!(v["prompts"], serde_json::Value::Object(_) | serde_json::Value::Null) {
        bail!("{file}: \"prompts\" is {}; expected an object of prompt names to texts (or leave it out)", v["prompts"]);
    }
    let name = match (name, &v["default_prompt_name"]) {
        (Some(n), _) => n,
        (None, serde_json::Value::Null) => return Ok(None),
        (None, serde_json::Value::String(n)) => n.as_str(),
        (None, other) => {
            bail!("{file}: default_prompt_name is {other}; expected the name of one of its prompts, or null")
        }
    };
    match v["prompts"].get(name) {
        Some(serde_json::Value::String(prompt)) => Ok(Some(prompt.clone())),
        Some(serde_json::Value::Null) => Ok(Some(String::new())),
        None if name == "query" || name == "document" => Ok(Some(String::new())),
        Some(other) => bail!("{file}: the prompt {name:?} is {other}, not text"),
        None => {
            let mut names: Vec<&str> =
                v["prompts"].as_object().map(|m| m.keys().map(String::as_str).collect()).unwrap_or_default();
            names.extend(["query", "document"]);
            names.sort_unstable();
            names.dedup();
            bail!("{file}: there is no prompt named {name:?}; its prompts are {}", names.join(", "))
        }
    }
}

/// The settings [`write_st_files`] records besides the pooling.
pub struct StFiles {
    /// `max_seq_length` of sentence_bert_config.json.
    pub max_seq_length: usize,
    /// `do_lower_case` of sentence_bert_config.json.
    pub lowercase: bool,
    /// A Normalize module at the end.
    pub normalize: bool,
    /// A Dense module after the pooling, in `2_Dense`.
    pub dense: bool,
}

/// Write sentence-transformers' modules.json, 1_Pooling/config.json and sentence_bert_config.json
/// (`dim` is the encoder's hidden size).
pub fn write_st_files(dir: &Path, pooling: Pooling, dim: usize, st: &StFiles) -> Result<()> {
    std::fs::create_dir_all(dir.join("1_Pooling"))?;
    let mut modules = vec![
        serde_json::json!({"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"}),
        serde_json::json!({"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}),
    ];
    if st.dense {
        modules.push(
            serde_json::json!({"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"}),
        );
    }
    if st.normalize {
        let (idx, path) = (modules.len(), format!("{}_Normalize", modules.len()));
        std::fs::create_dir_all(dir.join(&path))?;
        modules.push(serde_json::json!({"idx": idx, "name": idx.to_string(), "path": path, "type": "sentence_transformers.models.Normalize"}));
    }
    std::fs::write(dir.join("modules.json"), serde_json::to_string_pretty(&modules)?)?;
    std::fs::write(dir.join("1_Pooling/config.json"), serde_json::to_string_pretty(&pooling.st_config(dim))?)?;
    std::fs::write(
        dir.join("sentence_bert_config.json"),
        serde_json::to_string_pretty(
            &serde_json::json!({"max_seq_length": st.max_seq_length, "do_lower_case": st.lowercase}),
        )?,
    )?;
    Ok(())
}

/// What xsent uses of `sentence_bert_config.json`: `max_seq_length` (if set) and `do_lower_case`.
/// `model_max_length` of a `tokenizer_config.json` (`None` without the file or the key, or
/// with transformers' "no limit" stand-in, a number of 1e29 or more).
fn read_model_max_length(path: &Path) -> Result<Option<usize>> {
    let Some(text) = super::files::read_side_file(path)? else { return Ok(None) };
    let v: serde_json::Value = serde_json::from_str(&text).with_context(|| format!("invalid {}", path.display()))?;
    match &v["model_max_length"] {
        serde_json::Value::Null => Ok(None),
        m => match m.as_f64() {
            Some(x) if x >= 1e29 => Ok(None),
            Some(x) if x >= 2.0 && x.fract() == 0.0 => Ok(Some(x as usize)),
            _ => bail!(
                "{}: model_max_length is {m}; expected a number of tokens of at least 2 (or remove the key)",
                path.display()
            ),
        },
    }
}

fn read_st_config(path: Option<&Path>) -> Result<(Option<usize>, bool)> {
    let Some(path) = path else { return Ok((None, false)) };
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let v: serde_json::Value = serde_json::from_str(&text).with_context(|| format!("invalid {}", path.display()))?;
    let max_seq_length = match &v["max_seq_length"] {
        serde_json::Value::Null => None,
        m => match m.as_u64() {
            Some(n) if n >= 2 => Some(n as usize),
            _ => bail!(
                "{}: max_seq_length is {m}; expected a number of tokens of at least 2 (or remove the key)",
                path.display()
            ),
        },
    };
    let lowercase = match &v["do_lower_case"] {
        serde_json::Value::Null => false,
        serde_json::Value::Bool(b) => *b,
        other => bail!("{}: do_lower_case is {other}; expected true or false", path.display()),
    };
    Ok((max_seq_length, lowercase))
}
