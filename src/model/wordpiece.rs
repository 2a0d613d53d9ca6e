//! BERT's WordPiece tokenizer from a checkpoint's `vocab.txt`, for checkpoints saved without a
//! `tokenizer.json` (transformers' slow `BertTokenizer` files). The settings come from
//! `tokenizer_config.json` (`do_lower_case`, `strip_accents`, `tokenize_chinese_chars`, the
//! special tokens, `added_tokens_decoder`), `special_tokens_map.json` and `added_tokens.json`,
//! read as transformers reads them, else `BertTokenizer`'s defaults. The result is the
//! `tokenizer.json` that transformers' converter (`BertConverter`) makes of the same files.

use anyhow::{anyhow, bail, Context, Result};
use serde_json::{json, Value};
use std::path::Path;
use tokenizers::Tokenizer;

/// Whether `path` names a WordPiece vocabulary rather than a `tokenizer.json`.
pub fn is_vocab_file(path: &Path) -> bool {
    path.file_name().is_some_and(|n| n == "vocab.txt")
}

/// The tokenizer of `path`: a `tokenizer.json`, or a `vocab.txt` with the files beside it.
pub fn load_tokenizer(path: &Path) -> Result<Tokenizer> {
    if is_vocab_file(path) {
        return Ok(checked(path)?.1);
    }
    Tokenizer::from_file(path).map_err(|e| anyhow!("cannot load tokenizer {}: {e}", path.display()))
}

/// A JSON file beside `vocab`, if there is one.
fn beside(vocab: &Path, name: &str) -> Result<Option<Value>> {
    let path = vocab.with_file_name(name);
    let Some(text) = super::files::read_side_file(&path)? else { return Ok(None) };
    let v = serde_json::from_str(&text).map_err(|e| anyhow!("{} is not valid JSON: {e}", path.display()))?;
    Ok(Some(v))
}

/// A special token's text: a string, or an `AddedToken` object's `content`.
fn token_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => o.get("content").and_then(Value::as_str).map(str::to_string),
        _ => None,
    }
}

/// transformers' tokenizer classes that are BERT's WordPiece tokenizer with BERT's basic
/// tokenisation (subclasses that change nothing else); any other `tokenizer_class` beside a
/// vocab.txt (e.g. `BertJapaneseTokenizer`, which splits words with MeCab) is refused.
const WORDPIECE_CLASSES: [&str; 5] =
    ["BertTokenizer", "DistilBertTokenizer", "ElectraTokenizer", "MobileBertTokenizer", "SqueezeBertTokenizer"];

/// The `tokenizer.json` text for the WordPiece vocabulary `vocab` (one token per line, the line
/// number its id) and the settings beside it, checked to give every added token the id the
/// files give it.
pub fn tokenizer_json(vocab: &Path) -> Result<String> {
    Ok(checked(vocab)?.0)
}

/// The tokenizer.json text of `vocab` and the tokenizer it makes, checked as [`tokenizer_json`]
/// says.
fn checked(vocab: &Path) -> Result<(String, Tokenizer)> {
    let (json, added) = build(vocab)?;
    let t = <Tokenizer as std::str::FromStr>::from_str(&json)
        .map_err(|e| anyhow!("cannot build a tokenizer from {}: {e}", vocab.display()))?;
    for (token, id, file) in added {
        if t.token_to_id(&token) != Some(id) {
            bail!(
                "{}: the token {} is given the id {id}, but the tokenizer would give it {} \
                 (added tokens take the ids right after the vocabulary, in order); save the tokenizer.json with transformers",
                vocab.with_file_name(file).display(),
                super::embedder::shown(&token),
                t.token_to_id(&token).map_or("no id".to_string(), |i| format!("the id {i}"))
            );
        }
    }
    Ok((json, t))
}

/// An added token, the id a file gives it, and that file's name.
type GivenId = (String, u32, &'static str);

/// The tokenizer.json text, and each added token with the id the files give it and the file.
fn build(vocab: &Path) -> Result<(String, Vec<GivenId>)> {
    let text = std::fs::read_to_string(vocab).with_context(|| format!("cannot read {}", vocab.display()))?;
    // As transformers' `load_vocab`, which reads the file with Python's universal newlines:
    // each line less its line break; a token met twice keeps its last line.
    let text = text.replace("\r\n", "\n").replace('\r', "\n");
    let mut ids = serde_json::Map::new();
    for (i, line) in text.split_inclusive('\n').enumerate() {
        ids.insert(line.strip_suffix('\n').unwrap_or(line).to_string(), json!(i));
    }
    if ids.is_empty() {
        bail!("{} is empty: a WordPiece vocabulary has one token per line", vocab.display());
    }
    let config_path = vocab.with_file_name("tokenizer_config.json");
    let config = beside(vocab, "tokenizer_config.json")?.unwrap_or(Value::Null);
    let special_map = beside(vocab, "special_tokens_map.json")?.unwrap_or(Value::Null);
    if let Some(class) = config["tokenizer_class"].as_str() {
        let base = class.strip_suffix("Fast").unwrap_or(class);
        if !WORDPIECE_CLASSES.contains(&base) {
            bail!(
                "{}: tokenizer_class is {class:?}, but without a tokenizer.json xsent builds only BERT's WordPiece tokenizer \
                 ({}); save this model's tokenizer.json with transformers' AutoTokenizer.from_pretrained(dir).save_pretrained(dir)",
                config_path.display(),
                WORDPIECE_CLASSES.join(", ")
            );
        }
    }
    let flag = |key: &str, default: bool| -> Result<bool> {
        match &config[key] {
            Value::Null => Ok(default),
            Value::Bool(b) => Ok(*b),
            other => bail!("{}: {key} is {other}, not true or false", config_path.display()),
        }
    };
    let lowercase = flag("do_lower_case", true)?;
    let chinese = flag("tokenize_chinese_chars", true)?;
    if !flag("do_basic_tokenize", true)? {
        bail!("{}: do_basic_tokenize is false, which xsent's WordPiece tokenizer does not do; save this model's tokenizer.json with transformers", config_path.display());
    }
    if config["never_split"].as_array().is_some_and(|a| !a.is_empty()) {
        bail!("{}: never_split lists tokens, which xsent's WordPiece tokenizer does not keep whole; save this model's tokenizer.json with transformers", config_path.display());
    }
    let strip_accents = match &config["strip_accents"] {
        Value::Null => Value::Null,
        Value::Bool(b) => json!(b),
        other => bail!("{}: strip_accents is {other}, not true, false or null", config_path.display()),
    };
    // As transformers: with `added_tokens_decoder` in tokenizer_config.json, it gives the added
    // tokens and special_tokens_map.json is not read; without it, special_tokens_map.json
    // overrides the config's tokens, and added_tokens.json adds tokens.
    let decoder = config["added_tokens_decoder"].as_object();
    // A setting and the file it comes from.
    let setting = |key: &str| -> Option<(&Value, &str)> {
        let from_map = if decoder.is_none() { Some(&special_map[key]).filter(|v| !v.is_null()) } else { None };
        from_map
            .map(|v| (v, "special_tokens_map.json"))
            .or(Some(&config[key]).filter(|v| !v.is_null()).map(|v| (v, "tokenizer_config.json")))
    };
    // A token setting must be a token (a string, or an object with its "content"): another value
    // would silently give BERT's default token instead.
    let not_a_token = |key: &str, v: &Value, file: &str| {
        let shown: String = v.to_string().chars().take(60).collect();
        anyhow!(
            "{}: {key} is {shown}, not a token (a string such as \"[CLS]\", or an object with its \"content\")",
            vocab.with_file_name(file).display()
        )
    };
    let token_of = |key: &str, default: &str| -> Result<String> {
        match setting(key) {
            None => Ok(default.to_string()),
            Some((v, file)) => token_text(v).ok_or_else(|| not_a_token(key, v, file)),
        }
    };
    let mut added: Vec<AddedEntry> = Vec::new();
    let mut next_id = ids.len() as u64;
    // Each added token with the id its file gives it: the tokenizer must give it that id.
    let mut expected: Vec<GivenId> = Vec::new();
    if let Some(decoder) = decoder {
        for (id, t) in decoder {
            let id: u64 = id.parse().map_err(|_| {
                anyhow!("{}: added_tokens_decoder has the key {id:?}, not an id", config_path.display())
            })?;
            let Some(content) = token_text(t) else {
                bail!("{}: added_tokens_decoder {id} has no content", config_path.display())
            };
            let b = |k: &str, d: bool| t[k].as_bool().unwrap_or(d);
            let Ok(id32) = u32::try_from(id) else {
                bail!(
                    "{}: added_tokens_decoder gives {content:?} the id {id}, beyond any vocabulary",
                    config_path.display()
                )
            };
            expected.push((content.clone(), id32, "tokenizer_config.json"));
            added.push(AddedEntry {
                id,
                content,
                special: b("special", false),
                normalized: b("normalized", true),
                lstrip: b("lstrip", false),
                rstrip: b("rstrip", false),
                single_word: b("single_word", false),
            });
        }
    }
    let id_of = |added: &[AddedEntry], token: &str| {
        ids.get(token).and_then(Value::as_u64).or_else(|| added.iter().find(|a| a.content == token).map(|a| a.id))
    };
    // unk, cls and sep must be tokens of the vocabulary (or added ones); pad and mask are
    // added as special tokens when they are.
    let mut named = Vec::new();
    for (key, default, required) in [
        ("unk_token", "[UNK]", true),
        ("cls_token", "[CLS]", true),
        ("sep_token", "[SEP]", true),
        ("pad_token", "[PAD]", false),
        ("mask_token", "[MASK]", false),
    ] {
        let token = token_of(key, default)?;
        match id_of(&added, &token) {
            Some(id) => named.push((key, token, id)),
            None if required => bail!(
                "the {key} {token:?} is not in {} (set by tokenizer_config.json or special_tokens_map.json beside it, else BERT's default)",
                vocab.display()
            ),
            None => {}
        }
    }
    // Extra special tokens (transformers 4's `additional_special_tokens`, 5's
    // `extra_special_tokens`): added as special, after the vocabulary when not in it.
    let mut extra: Vec<String> = Vec::new();
    for key in ["additional_special_tokens", "extra_special_tokens"] {
        let Some((v, file)) = setting(key) else { continue };
        // A list of tokens; transformers 4.47 and later write `extra_special_tokens` as an object
        // of named tokens (`{}` when there are none), whose values are the tokens.
        let tokens: Vec<&Value> = match v {
            Value::Array(list) => list.iter().collect(),
            Value::Object(named) => named.values().collect(),
            other => return Err(not_a_token(key, other, file).context("a list of tokens is expected")),
        };
        for t in tokens {
            extra.push(token_text(t).ok_or_else(|| not_a_token(key, t, file))?);
        }
    }
    if decoder.is_none() {
        if let Some(file) = beside(vocab, "added_tokens.json")? {
            let path = vocab.with_file_name("added_tokens.json");
            let Some(file) = file.as_object() else { bail!("{}: expected an object of token → id", path.display()) };
            let mut entries: Vec<(u64, &String)> = Vec::new();
            for (token, id) in file {
                let Some(id) = id.as_u64() else {
                    bail!("{}: the id of {} is {id}, not a number", path.display(), super::embedder::shown(token))
                };
                entries.push((id, token));
            }
            entries.sort();
            for (id, token) in entries {
                let special = named.iter().any(|(_, t, _)| t == token) || extra.contains(token);
                added.push(AddedEntry {
                    id,
                    content: token.clone(),
                    special,
                    normalized: !special,
                    lstrip: false,
                    rstrip: false,
                    single_word: false,
                });
                let Ok(id32) = u32::try_from(id) else {
                    bail!(
                        "{}: {} has the id {id}, beyond any vocabulary",
                        path.display(),
                        super::embedder::shown(token)
                    )
                };
                expected.push((token.clone(), id32, "added_tokens.json"));
                next_id = next_id.max(id + 1);
            }
        }
    }
    for (_, token, id) in &named {
        if !added.iter().any(|a| a.id == *id) {
            added.push(AddedEntry {
                id: *id,
                content: token.clone(),
                special: true,
                normalized: false,
                lstrip: false,
                rstrip: false,
                single_word: false,
            });
        }
    }
    for token in extra {
        match added.iter_mut().find(|a| a.content == token) {
            Some(a) => a.special = true,
            None => {
                let id = match ids.get(&token).and_then(Value::as_u64) {
                    Some(id) => id,
                    None => {
                        next_id += 1;
                        next_id - 1
                    }
                };
                added.push(AddedEntry {
                    id,
                    content: token,
                    special: true,
                    normalized: false,
                    lstrip: false,
                    rstrip: false,
                    single_word: false,
                });
            }
        }
    }
    added.sort_by_key(|a| a.id);
    let added_json: Vec<Value> = added
        .iter()
        .map(|a| {
            json!({"id": a.id, "content": a.content, "single_word": a.single_word, "lstrip": a.lstrip, "rstrip": a.rstrip, "normalized": a.normalized, "special": a.special})
        })
        .collect();
    let token_named = |key: &str| {
        named.iter().find(|(k, _, _)| *k == key).map(|(_, t, id)| (t.clone(), *id)).expect("a required token")
    };
    let (unk, _) = token_named("unk_token");
    let (cls, cls_id) = token_named("cls_token");
    let (sep, sep_id) = token_named("sep_token");
    let special_token = |t: &str, type_id: u32| json!({"SpecialToken": {"id": t, "type_id": type_id}});
    let tokenizer = json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added_json,
        "normalizer": {"type": "BertNormalizer", "clean_text": true, "handle_chinese_chars": chinese, "strip_accents": strip_accents, "lowercase": lowercase},
        "pre_tokenizer": {"type": "BertPreTokenizer"},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [special_token(&cls, 0), {"Sequence": {"id": "A", "type_id": 0}}, special_token(&sep, 0)],
            "pair": [special_token(&cls, 0), {"Sequence": {"id": "A", "type_id": 0}}, special_token(&sep, 0),
                     {"Sequence": {"id": "B", "type_id": 1}}, special_token(&sep, 1)],
            "special_tokens": {
                cls.clone(): {"id": cls, "ids": [cls_id], "tokens": [cls]},
                sep.clone(): {"id": sep, "ids": [sep_id], "tokens": [sep]},
            },
        },
        "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": true},
        "model": {"type": "WordPiece", "unk_token": unk, "continuing_subword_prefix": "##", "max_input_chars_per_word": 100, "vocab": ids},
    });
    Ok((tokenizer.to_string(), expected))
}

/// One entry of the tokenizer's added tokens.
struct AddedEntry {
    id: u64,
    content: String,
    special: bool,
    normalized: bool,
    lstrip: bool,
    rstrip: bool,
    single_word: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(t: &Tokenizer, text: &str) -> Vec<u32> {
        t.encode(text, true).unwrap().get_ids().to_vec()
    }

    /// A vocabulary with its settings beside it: lowercasing and the special tokens are read
    /// from tokenizer_config.json, added tokens from added_tokens.json, and a special token
    /// missing from the vocabulary is an error naming it.
    #[test]
    fn settings_come_from_the_files_beside_the_vocabulary() {
        let dir = tempfile::tempdir().unwrap();
        let vocab = dir.path().join("vocab.txt");
        std::fs::write(&vocab, "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\nHello\nworld\n##s\n").unwrap();
        let t = load_tokenizer(&vocab).unwrap();
        assert_eq!(ids(&t, "Hello worlds"), [2, 5, 7, 8, 3], "lowercased by default, as BertTokenizer");
        std::fs::write(
            dir.path().join("tokenizer_config.json"),
            r#"{"do_lower_case": false, "cls_token": {"content": "[CLS]", "__type": "AddedToken"}}"#,
        )
        .unwrap();
        let t = load_tokenizer(&vocab).unwrap();
        assert_eq!(ids(&t, "Hello hello [MASK] xyz"), [2, 6, 5, 4, 1, 3]);
        std::fs::write(dir.path().join("added_tokens.json"), r#"{"<new>": 9}"#).unwrap();
        let t = load_tokenizer(&vocab).unwrap();
        assert_eq!(ids(&t, "hello<new>world"), [2, 5, 9, 7, 3]);
        std::fs::write(dir.path().join("tokenizer_config.json"), r#"{"sep_token": "</s>"}"#).unwrap();
        let err = load_tokenizer(&vocab).unwrap_err().to_string();
        assert!(err.contains("the sep_token \"</s>\" is not in") && err.contains("vocab.txt"), "{err}");
        // A special token that is not a token (transformers raises a TypeError): before, BERT's
        // default token was used without a word.
        std::fs::write(dir.path().join("tokenizer_config.json"), r#"{"cls_token": 5}"#).unwrap();
        let err = load_tokenizer(&vocab).unwrap_err().to_string();
        assert!(err.contains("tokenizer_config.json: cls_token is 5, not a token"), "{err}");
        std::fs::write(dir.path().join("tokenizer_config.json"), "{}").unwrap();
        std::fs::write(dir.path().join("special_tokens_map.json"), r#"{"unk_token": [1]}"#).unwrap();
        let err = load_tokenizer(&vocab).unwrap_err().to_string();
        assert!(err.contains("special_tokens_map.json: unk_token is [1], not a token"), "{err}");
        std::fs::write(dir.path().join("special_tokens_map.json"), r#"{"additional_special_tokens": ["[MASK]", 7]}"#)
            .unwrap();
        let err = load_tokenizer(&vocab).unwrap_err().to_string();
        assert!(err.contains("special_tokens_map.json: additional_special_tokens is 7, not a token"), "{err}");
        std::fs::remove_file(dir.path().join("special_tokens_map.json")).unwrap();
        // transformers 4.47+ writes extra_special_tokens as an object of named tokens ({} for
        // none): read, its values as tokens.
        std::fs::write(dir.path().join("tokenizer_config.json"), r#"{"extra_special_tokens": {}}"#).unwrap();
        assert_eq!(ids(&load_tokenizer(&vocab).unwrap(), "hello"), [2, 5, 3]);
        std::fs::write(dir.path().join("tokenizer_config.json"), r#"{"extra_special_tokens": {"img": "<img>"}}"#)
            .unwrap();
        // (added_tokens.json still gives <new> the id 9.)
        assert_eq!(ids(&load_tokenizer(&vocab).unwrap(), "hello<img>"), [2, 5, 10, 3]);
        std::fs::write(dir.path().join("tokenizer_config.json"), r#"{"extra_special_tokens": {"img": 3}}"#).unwrap();
        let err = load_tokenizer(&vocab).unwrap_err().to_string();
        assert!(err.contains("extra_special_tokens is 3, not a token"), "{err}");
        std::fs::write(dir.path().join("tokenizer_config.json"), r#"{"do_lower_case": "yes"}"#).unwrap();
        let err = load_tokenizer(&vocab).unwrap_err().to_string();
        assert!(err.contains("do_lower_case is \"yes\""), "{err}");
        // Another tokenizer class, and settings xsent does not build, are refused.
        std::fs::write(dir.path().join("tokenizer_config.json"), r#"{"tokenizer_class": "BertJapaneseTokenizer"}"#)
            .unwrap();
        let err = load_tokenizer(&vocab).unwrap_err().to_string();
        assert!(err.contains("tokenizer_class is \"BertJapaneseTokenizer\""), "{err}");
        std::fs::write(
            dir.path().join("tokenizer_config.json"),
            r#"{"tokenizer_class": "DistilBertTokenizerFast", "never_split": ["hello"]}"#,
        )
        .unwrap();
        assert!(load_tokenizer(&vocab).unwrap_err().to_string().contains("never_split"));
        std::fs::write(dir.path().join("tokenizer_config.json"), r#"{"do_basic_tokenize": false}"#).unwrap();
        assert!(load_tokenizer(&vocab).unwrap_err().to_string().contains("do_basic_tokenize"));
        // An added token whose id leaves a gap after the vocabulary.
        std::fs::write(dir.path().join("tokenizer_config.json"), "{}").unwrap();
        std::fs::write(dir.path().join("added_tokens.json"), r#"{"<new>": 12}"#).unwrap();
        let err = load_tokenizer(&vocab).unwrap_err().to_string();
        assert!(err.contains("\"<new>\" is given the id 12") && err.contains("would give it the id 9"), "{err}");
        // The same gap given by tokenizer_config.json's added_tokens_decoder (an outside probe:
        // it was renumbered silently), named there.
        std::fs::remove_file(dir.path().join("added_tokens.json")).unwrap();
        std::fs::write(
            dir.path().join("tokenizer_config.json"),
            r#"{"added_tokens_decoder": {"5000": {"content": "<new>", "special": true}}}"#,
        )
        .unwrap();
        let err = load_tokenizer(&vocab).unwrap_err().to_string();
        assert!(
            err.contains("tokenizer_config.json: the token \"<new>\" is given the id 5000")
                && err.contains("would give it the id 9"),
            "{err}"
        );
        std::fs::write(&vocab, "").unwrap();
        assert!(load_tokenizer(&vocab).unwrap_err().to_string().contains("is empty"));
    }
}
