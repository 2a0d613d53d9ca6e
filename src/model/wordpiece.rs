//! BERT's WordPiece tokenizer from a checkpoint's `vocab.txt`, for checkpoints saved without a
//! `tokenizer.json` (transformers' slow `BertTokenizer` files). The settings come from
//! `tokenizer_config.json` (`do_lower_case`, `strip_accents`, `tokenize_chinese_chars`, the
//! special tokens), else `special_tokens_map.json` for the tokens, else `BertTokenizer`'s
//! defaults; `added_tokens.json` adds its tokens. The result is the `tokenizer.json` that
//! transformers' converter (`BertConverter`) makes of the same files.

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
        let json = tokenizer_json(path)?;
        return <Tokenizer as std::str::FromStr>::from_str(&json).map_err(|e| anyhow!("cannot build a tokenizer from {}: {e}", path.display()));
    }
    Tokenizer::from_file(path).map_err(|e| anyhow!("cannot load tokenizer {}: {e}", path.display()))
}

/// A JSON file beside `vocab`, if there is one.
fn beside(vocab: &Path, name: &str) -> Result<Option<Value>> {
    let path = vocab.with_file_name(name);
    if !path.is_file() {
        return Ok(None);
    }
    let text = std::fs::read_to_string(&path).with_context(|| format!("cannot read {}", path.display()))?;
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

/// The `tokenizer.json` text for the WordPiece vocabulary `vocab` (one token per line, the line
/// number its id) and the settings beside it.
pub fn tokenizer_json(vocab: &Path) -> Result<String> {
    let text = std::fs::read_to_string(vocab).with_context(|| format!("cannot read {}", vocab.display()))?;
    // As transformers' `load_vocab`: each line less its newline; a token met twice keeps its
    // last line.
    let mut ids = serde_json::Map::new();
    for (i, line) in text.split_inclusive('\n').enumerate() {
        let token = line.strip_suffix('\n').unwrap_or(line);
        ids.insert(token.to_string(), json!(i));
    }
    if ids.is_empty() {
        bail!("{} is empty: a WordPiece vocabulary has one token per line", vocab.display());
    }
    let config = beside(vocab, "tokenizer_config.json")?.unwrap_or(Value::Null);
    let special_map = beside(vocab, "special_tokens_map.json")?.unwrap_or(Value::Null);
    let flag = |key: &str, default: bool| -> Result<bool> {
        match &config[key] {
            Value::Null => Ok(default),
            Value::Bool(b) => Ok(*b),
            other => bail!("{}: {key} is {other}, not true or false", vocab.with_file_name("tokenizer_config.json").display()),
        }
    };
    let lowercase = flag("do_lower_case", true)?;
    let chinese = flag("tokenize_chinese_chars", true)?;
    let strip_accents = match &config["strip_accents"] {
        Value::Null => Value::Null,
        Value::Bool(b) => json!(b),
        other => bail!("{}: strip_accents is {other}, not true, false or null", vocab.with_file_name("tokenizer_config.json").display()),
    };
    let special = |key: &str, default: &str| -> Result<(String, u64)> {
        let token = token_text(&config[key]).or_else(|| token_text(&special_map[key])).unwrap_or_else(|| default.to_string());
        let id = ids.get(&token).and_then(Value::as_u64).ok_or_else(|| {
            anyhow!("the {key} {token:?} is not in {} (set by tokenizer_config.json or special_tokens_map.json beside it, else BERT's default)", vocab.display())
        })?;
        Ok((token, id))
    };
    let (unk, _) = special("unk_token", "[UNK]")?;
    let (cls, cls_id) = special("cls_token", "[CLS]")?;
    let (sep, sep_id) = special("sep_token", "[SEP]")?;
    let mut added: Vec<(u64, String, bool)> = Vec::new();
    for (key, default) in [("pad_token", "[PAD]"), ("unk_token", "[UNK]"), ("cls_token", "[CLS]"), ("sep_token", "[SEP]"), ("mask_token", "[MASK]")] {
        let (token, id) = special(key, default)?;
        if !added.iter().any(|(i, _, _)| *i == id) {
            added.push((id, token, true));
        }
    }
    // Tokens added after the vocabulary (transformers' added_tokens.json: token → id).
    if let Some(extra) = beside(vocab, "added_tokens.json")? {
        let path = vocab.with_file_name("added_tokens.json");
        let Some(extra) = extra.as_object() else { bail!("{}: expected an object of token → id", path.display()) };
        for (token, id) in extra {
            let Some(id) = id.as_u64() else { bail!("{}: the id of {token:?} is {id}, not a number", path.display()) };
            if let Some(at) = ids.get(token).and_then(Value::as_u64).filter(|&at| at != id) {
                bail!("{}: {token:?} has id {id}, but it is line {} of {}", path.display(), at + 1, vocab.display());
            }
            if !added.iter().any(|(i, _, _)| *i == id) {
                added.push((id, token.clone(), false));
            }
        }
    }
    added.sort();
    let added: Vec<Value> = added
        .into_iter()
        .map(|(id, content, special)| {
            json!({"id": id, "content": content, "single_word": false, "lstrip": false, "rstrip": false, "normalized": !special, "special": special})
        })
        .collect();
    let special_token = |t: &str| json!({"SpecialToken": {"id": t, "type_id": 0}});
    let tokenizer = json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": {"type": "BertNormalizer", "clean_text": true, "handle_chinese_chars": chinese, "strip_accents": strip_accents, "lowercase": lowercase},
        "pre_tokenizer": {"type": "BertPreTokenizer"},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [special_token(&cls), {"Sequence": {"id": "A", "type_id": 0}}, special_token(&sep)],
            "pair": [special_token(&cls), {"Sequence": {"id": "A", "type_id": 0}}, special_token(&sep),
                     {"Sequence": {"id": "B", "type_id": 1}}, {"SpecialToken": {"id": sep, "type_id": 1}}],
            "special_tokens": {
                cls.clone(): {"id": cls, "ids": [cls_id], "tokens": [cls]},
                sep.clone(): {"id": sep, "ids": [sep_id], "tokens": [sep]},
            },
        },
        "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": true},
        "model": {"type": "WordPiece", "unk_token": unk, "continuing_subword_prefix": "##", "max_input_chars_per_word": 100, "vocab": ids},
    });
    Ok(tokenizer.to_string())
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
        std::fs::write(dir.path().join("tokenizer_config.json"), r#"{"do_lower_case": false, "cls_token": {"content": "[CLS]", "__type": "AddedToken"}}"#).unwrap();
        let t = load_tokenizer(&vocab).unwrap();
        assert_eq!(ids(&t, "Hello hello [MASK] xyz"), [2, 6, 5, 4, 1, 3]);
        std::fs::write(dir.path().join("added_tokens.json"), r#"{"<new>": 9}"#).unwrap();
        let t = load_tokenizer(&vocab).unwrap();
        assert_eq!(ids(&t, "hello<new>world"), [2, 5, 9, 7, 3]);
        std::fs::write(dir.path().join("tokenizer_config.json"), r#"{"sep_token": "</s>"}"#).unwrap();
        let err = load_tokenizer(&vocab).unwrap_err().to_string();
        assert!(err.contains("the sep_token \"</s>\" is not in") && err.contains("vocab.txt"), "{err}");
        std::fs::write(dir.path().join("tokenizer_config.json"), r#"{"do_lower_case": "yes"}"#).unwrap();
        let err = load_tokenizer(&vocab).unwrap_err().to_string();
        assert!(err.contains("do_lower_case is \"yes\""), "{err}");
        std::fs::write(&vocab, "").unwrap();
        assert!(load_tokenizer(&vocab).unwrap_err().to_string().contains("is empty"));
    }
}
