//! The real models (made by scripts/setup.sh) against sentence-transformers' embeddings.

mod common;

use anyhow::Result;
use xsent::model::LoadOptions;
use xsent::SentenceEncoder;

fn check_reference(file: &str, model_dir: &str) -> Result<()> {
    check_reference_at(file, common::model(model_dir).to_str().unwrap())
}

fn check_reference_at(file: &str, model_dir: &str) -> Result<()> {
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(common::fixtures().join("reference-embeddings").join(file))?)?;
    let sentences: Vec<String> = serde_json::from_value(r["sentences"].clone())?;
    let want: Vec<Vec<f32>> = serde_json::from_value(r["embeddings"].clone())?;
    let opts = LoadOptions {
        prefix: Some(r["prefix"].as_str().unwrap_or("").to_string()),
        max_length: Some(r["max_seq_length"].as_u64().unwrap() as usize),
        ..Default::default()
    };
    let enc = SentenceEncoder::load(model_dir, &opts)?;
    // Batch size 5 so that batches mix lengths and padding is exercised.
    let got = enc.embed_unchecked(&sentences, 5)?;
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        let c = common::cosine(g, w);
        assert!(
            c >= 0.9999,
            "{model_dir}: sentence {i} {:?}: cosine {c}",
            &sentences[i].chars().take(40).collect::<String>()
        );
    }
    // The defaults read from the model dir (pooling, max_seq_length) give the same vectors.
    let default_enc =
        SentenceEncoder::load(model_dir, &LoadOptions { prefix: opts.prefix.clone(), ..Default::default() })?;
    assert_eq!(default_enc.max_length, opts.max_length.unwrap());
    assert_eq!(default_enc.embed_unchecked(&sentences, 64)?, enc.embed_unchecked(&sentences, 64)?);
    Ok(())
}

#[test]
fn e5_small_matches_sentence_transformers() -> Result<()> {
    check_reference("multilingual-e5-small.json", "multilingual-e5-small")
}

#[test]
fn minilm_matches_sentence_transformers() -> Result<()> {
    check_reference("all-MiniLM-L6-v2.json", "all-MiniLM-L6-v2")
}

/// The layout of sentence-transformers before 2.0: the Transformer module's files in
/// `0_Transformer/`, which `modules.json` names (sentence-transformers 6.2 loads it; xsent read the
/// top folder only and found no config.json). The vectors are sentence-transformers' own, and the
/// module's sentence_bert_config.json is read from its folder.
#[test]
fn the_transformer_module_may_live_in_a_subfolder() -> Result<()> {
    let src = common::model("all-MiniLM-L6-v2");
    let tmp = tempfile::tempdir()?;
    let dir = tmp.path().join("old-layout");
    let t = dir.join("0_Transformer");
    std::fs::create_dir_all(&t)?;
    for f in [
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
        "vocab.txt",
    ] {
        std::os::unix::fs::symlink(src.join(f), t.join(f))?;
    }
    std::fs::copy(src.join("sentence_bert_config.json"), t.join("sentence_bert_config.json"))?;
    std::fs::create_dir(dir.join("1_Pooling"))?;
    std::fs::copy(src.join("1_Pooling/config.json"), dir.join("1_Pooling/config.json"))?;
    let modules =
        std::fs::read_to_string(src.join("modules.json"))?.replacen(r#""path": """#, r#""path": "0_Transformer""#, 1);
    assert!(modules.contains("0_Transformer"));
    std::fs::write(dir.join("modules.json"), modules)?;
    let spec = dir.to_str().unwrap();
    check_reference_at("all-MiniLM-L6-v2.json", spec)?;
    // Its settings file is the module's, in its folder.
    std::fs::write(t.join("sentence_bert_config.json"), r#"{"max_seq_length": 9, "do_lower_case": false}"#)?;
    assert_eq!(SentenceEncoder::load(spec, &LoadOptions::default())?.max_length, 9);
    // A path out of the folder is refused, as for the other modules.
    std::fs::write(
        dir.join("modules.json"),
        r#"[{"idx": 0, "name": "0", "path": "../x", "type": "sentence_transformers.models.Transformer"}]"#,
    )?;
    let e = format!("{:#}", SentenceEncoder::load(spec, &LoadOptions::default()).err().unwrap());
    assert!(e.contains(r#"the Transformer module's path "../x" leaves the model's folder"#), "{e}");
    Ok(())
}

/// A trainable load of a real model, saved as a model dir, loads back to identical embeddings,
/// with the sentence-transformers files and the prefix kept.
#[test]
fn trainable_e5_saves_and_reloads() -> Result<()> {
    let opts = LoadOptions { layers: Some(2), prefix: Some("query: ".into()), trainable: true, ..Default::default() };
    let enc = SentenceEncoder::load(common::model("multilingual-e5-small").to_str().unwrap(), &opts)?;
    let texts = ["Die Katze sitzt auf der Matte.", "", "A much longer sentence, to make the batch padded."];
    let before = enc.embed_unchecked(&texts, 8)?;
    let dir = tempfile::tempdir()?;
    enc.save(dir.path())?;
    for f in [
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        "modules.json",
        "1_Pooling/config.json",
        "sentence_bert_config.json",
    ] {
        assert!(dir.path().join(f).is_file(), "{f} not written");
    }
    let cfg = std::fs::read_to_string(dir.path().join("config.json"))?;
    assert!(cfg.contains("\"num_hidden_layers\": 2"), "{cfg}");
    // The prefix is sentence-transformers' default prompt, so SentenceTransformer(dir) prepends it too.
    let st: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("config_sentence_transformers.json"))?)?;
    assert_eq!(st["prompts"][st["default_prompt_name"].as_str().unwrap()], "query: ", "{st}");
    // encode_query / encode_document read these, not the default.
    assert_eq!((&st["prompts"]["query"], &st["prompts"]["document"]), (&"query: ".into(), &"query: ".into()), "{st}");
    let back = SentenceEncoder::load(dir.path().to_str().unwrap(), &LoadOptions::default())?;
    assert_eq!(back.prefix, "query: ");
    assert_eq!(back.embed_unchecked(&texts, 8)?, before);
    Ok(())
}

/// Long texts many languages, spacings and scripts, for the long-text cut: each over 40 KB.
fn long_texts() -> Vec<String> {
    let xnli = common::data().join("xnli");
    let mut by_lang = Vec::new();
    for lang in ["en", "de", "ru", "hi", "ar", "zh", "th", "el", "sw", "vi"] {
        let text = std::fs::read_to_string(xnli.join(format!("test-{lang}.tsv"))).unwrap();
        let mut s = String::new();
        for line in text.lines() {
            s.push_str(line.split('\t').next().unwrap());
            s.push(' ');
            if s.len() > 40_000 {
                break;
            }
        }
        by_lang.push(s);
    }
    let mixed: String = by_lang.iter().map(|s| &s[..s.floor_char_boundary(5_000)]).collect::<Vec<_>>().join(" ");
    let en = by_lang[0].clone();
    let mut texts = by_lang.clone();
    texts.extend([
        mixed,
        en.replace(' ', "  "),
        en.split(' ').enumerate().map(|(i, w)| if i % 3 == 0 { format!("{w}\t") } else { format!("{w} ") }).collect(),
        // The head falls short of the limit: tokenised whole after all.
        format!("a few words{}{en}", " ".repeat(20_000)),
        format!("a few words {}{en}", "\u{1} ".repeat(20_000)),
        // No space in the budget: never cut.
        format!("{} {en}", "x".repeat(30_000)),
        "1234567890 ".repeat(5_000),
        "e\u{301} ".repeat(20_000),
        format!("{} {}", "ab ".repeat(3_000), "漢字".repeat(10_000)),
    ]);
    texts
}

/// Cutting a long text before tokenising it (model::long_text) leaves the kept tokens as the
/// whole text's: ids, offsets, special tokens and the truncated flag, for both real tokenizers
/// at several maximum lengths; both the cut and its fallback (tokenising the whole text after
/// all) are exercised.
#[test]
fn long_texts_cut_before_tokenising_keep_the_same_tokens() -> Result<()> {
    use xsent::model::long_text;
    let texts = long_texts();
    let (mut cut, mut redone) = (0, 0);
    for (model, prefix) in [("all-MiniLM-L6-v2", ""), ("multilingual-e5-small", "query: ")] {
        for max_length in [8, 61, 512] {
            let opts = LoadOptions {
                prefix: Some(prefix.into()),
                max_length: Some(max_length),
                layers: Some(1),
                ..Default::default()
            };
            let enc = SentenceEncoder::load(common::model(model).to_str().unwrap(), &opts)?;
            let inputs: Vec<String> = texts.iter().map(|t| format!("{prefix}{t}").trim().to_string()).collect();
            let (got, c, r) = long_text::encode_counted(enc.tokenizer(), &inputs)?;
            assert!(c > 0, "{model}, max_length {max_length}: no text was cut");
            // The reference: the tokenizer on the whole texts.
            let want = enc.tokenizer().encode_batch(inputs.clone(), true).map_err(|e| anyhow::anyhow!("{e}"))?;
            (cut, redone) = (cut + c, redone + r);
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                let at = format!("{model}, max_length {max_length}, text {i}");
                assert_eq!(g.get_ids(), w.get_ids(), "{at}");
                assert_eq!(g.get_offsets(), w.get_offsets(), "{at}");
                assert_eq!(g.get_special_tokens_mask(), w.get_special_tokens_mask(), "{at}");
                assert_eq!(g.get_overflowing().is_empty(), w.get_overflowing().is_empty(), "{at}");
            }
            // Through the encoder: the prefix added, cut to max_length, the truncated flag.
            let items = enc.tokenize(&texts)?;
            for (i, (it, w)) in items.iter().zip(&want).enumerate() {
                assert_eq!(
                    it.ids,
                    w.get_ids()[..w.get_ids().len().min(max_length)],
                    "{model}, max_length {max_length}, text {i}"
                );
                assert!(it.truncated, "{model}, max_length {max_length}, text {i}");
            }
        }
    }
    assert!(cut > 50 && redone >= 6, "cut {cut}, tokenised whole after a cut {redone}");
    Ok(())
}
