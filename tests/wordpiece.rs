//! A BERT checkpoint without tokenizer.json: its WordPiece vocab.txt, against Hugging Face's own
//! tokenizers of the same vocabulary.

mod common;

use std::path::{Path, PathBuf};
use tokenizers::Tokenizer;
use xsent::model::wordpiece::load_tokenizer;

fn minilm() -> PathBuf {
    common::model("all-MiniLM-L6-v2")
}

fn ids(t: &Tokenizer, text: &str) -> (Vec<u32>, Vec<u32>) {
    let e = t.encode(text, true).unwrap();
    (e.get_ids().to_vec(), e.get_type_ids().to_vec())
}

/// The first `n` lines of every Tatoeba file of both sides (every script of the 90 languages),
/// and edge cases.
fn sentences(n: usize) -> Vec<String> {
    let mut files: Vec<PathBuf> =
        std::fs::read_dir(common::data().join("tatoeba")).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    let mut out: Vec<String> = files
        .iter()
        .flat_map(|f| std::fs::read_to_string(f).unwrap().lines().take(n).map(String::from).collect::<Vec<_>>())
        .collect();
    out.extend(
        [
            "",
            "  ",
            "Hello [CLS] world [SEP] [MASK] [UNK] [PAD]",
            &"x".repeat(101),
            "Tabs\tand\u{0}control\u{7}chars\u{ad}",
            "Café ÜNÏCÖDÉ façade — “q” ½ ﬁ",
            "混合English和中文text",
        ]
        .map(String::from),
    );
    out
}

/// A directory holding only `files` of the MiniLM model (symlinked), as a checkpoint saved
/// with transformers' slow tokenizer files.
fn minilm_without_tokenizer_json(dir: &Path, files: &[&str]) -> PathBuf {
    let out = dir.join("minilm-vocab");
    std::fs::create_dir_all(&out).unwrap();
    for f in files {
        let src = minilm().join(f);
        if src.is_dir() {
            std::fs::create_dir_all(out.join(f)).unwrap();
            for e in std::fs::read_dir(&src).unwrap() {
                let e = e.unwrap();
                std::os::unix::fs::symlink(e.path(), out.join(f).join(e.file_name())).unwrap();
            }
        } else {
            std::os::unix::fs::symlink(src, out.join(f)).unwrap();
        }
    }
    out
}

/// Uncased (MiniLM's tokenizer_config.json: do_lower_case true): the same ids and type ids as
/// the model's own tokenizer.json, which transformers converted from the same vocab.txt, on
/// 20 lines of each of Tatoeba's 180 files and edge cases; for pairs too.
#[test]
fn uncased_vocab_txt_tokenizes_as_the_models_tokenizer_json() {
    let dir = tempfile::tempdir().unwrap();
    let m =
        minilm_without_tokenizer_json(dir.path(), &["vocab.txt", "tokenizer_config.json", "special_tokens_map.json"]);
    let ours = load_tokenizer(&m.join("vocab.txt")).unwrap();
    let mut theirs = Tokenizer::from_file(minilm().join("tokenizer.json")).unwrap();
    theirs.with_padding(None).with_truncation(None).unwrap();
    let all = sentences(20);
    assert!(all.len() > 3000, "{}", all.len());
    for s in &all {
        assert_eq!(ids(&ours, s), ids(&theirs, s), "{s:?}");
    }
    let pair =
        |t: &Tokenizer| t.encode(("Das ist ein Test.", "A second sentence."), true).unwrap().get_type_ids().to_vec();
    assert_eq!(pair(&ours), pair(&theirs));
}

/// Each variant of tests/data/tokenizers (cased; accents kept and Chinese characters not split;
/// transformers 4's special_tokens_map.json overriding the config, additional special tokens
/// and added_tokens.json; transformers 5's extra special tokens; a vocab.txt with CRLF line
/// ends) beside MiniLM's vocab.txt: the ids transformers' Python BertTokenizer gives
/// (scripts/make-wordpiece-fixtures.py).
#[test]
fn vocab_txt_variants_tokenize_as_transformers() {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/tokenizers");
    let want: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(data.join("wordpiece-expected.json")).unwrap()).unwrap();
    let variants = want["variants"].as_object().unwrap();
    assert_eq!(variants.len(), 5);
    let vocab = std::fs::read_to_string(minilm().join("vocab.txt")).unwrap();
    for (name, rows) in variants {
        let dir = tempfile::tempdir().unwrap();
        let text = if name == "crlf" { vocab.replace('\n', "\r\n") } else { vocab.clone() };
        std::fs::write(dir.path().join("vocab.txt"), text).unwrap();
        for e in std::fs::read_dir(data.join(name)).unwrap() {
            let e = e.unwrap();
            std::fs::copy(e.path(), dir.path().join(e.file_name())).unwrap();
        }
        let ours = load_tokenizer(&dir.path().join("vocab.txt")).unwrap_or_else(|e| panic!("{name}: {e:#}"));
        let rows = rows.as_array().unwrap();
        assert!(rows.len() > 250);
        for r in rows {
            let text = r["text"].as_str().unwrap();
            let want: Vec<u32> = serde_json::from_value(r["ids"].clone()).unwrap();
            assert_eq!(ids(&ours, text).0, want, "{name}: {text:?}");
        }
    }
}

/// `xsent embed` of the MiniLM checkpoint without its tokenizer.json gives the model's vectors,
/// and a model saved from it carries the tokenizer.json transformers would make.
#[test]
fn a_checkpoint_with_only_vocab_txt_embeds_and_saves_a_tokenizer_json() {
    let dir = tempfile::tempdir().unwrap();
    let files = [
        "config.json",
        "model.safetensors",
        "vocab.txt",
        "tokenizer_config.json",
        "special_tokens_map.json",
        "modules.json",
        "1_Pooling",
        "sentence_bert_config.json",
        "config_sentence_transformers.json",
    ];
    let m = minilm_without_tokenizer_json(dir.path(), &files);
    let embed = |model: &Path| {
        let out = common::xsent()
            .args(["embed", "--model", model.to_str().unwrap(), "--input"])
            .arg(common::data().join("tatoeba/tatoeba.deu-eng.deu"))
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        out.stdout
    };
    let want = embed(&minilm());
    assert_eq!(embed(&m), want);
    let files = xsent::model::source::resolve(m.to_str().unwrap()).unwrap();
    assert!(files.tokenizer.ends_with("vocab.txt"));

    let opts = xsent::model::LoadOptions { trainable: true, ..Default::default() };
    let saved = dir.path().join("saved");
    xsent::SentenceEncoder::load(m.to_str().unwrap(), &opts).unwrap().save(&saved).unwrap();
    assert!(saved.join("tokenizer.json").is_file() && saved.join("vocab.txt").is_file());
    let reloaded = Tokenizer::from_file(saved.join("tokenizer.json")).unwrap();
    let mut theirs = Tokenizer::from_file(minilm().join("tokenizer.json")).unwrap();
    theirs.with_padding(None).with_truncation(None).unwrap();
    for s in sentences(3) {
        assert_eq!(ids(&reloaded, &s), ids(&theirs, &s), "{s:?}");
    }
    assert_eq!(embed(&saved), want);
}
