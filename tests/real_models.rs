//! The real models (made by scripts/setup.sh) against sentence-transformers' embeddings.

mod common;

use anyhow::Result;
use xsent::model::LoadOptions;
use xsent::SentenceEncoder;

fn check_reference(file: &str, model_dir: &str) -> Result<()> {
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(common::fixtures().join("reference-embeddings").join(file))?)?;
    let sentences: Vec<String> = serde_json::from_value(r["sentences"].clone())?;
    let want: Vec<Vec<f32>> = serde_json::from_value(r["embeddings"].clone())?;
    let opts = LoadOptions {
        prefix: Some(r["prefix"].as_str().unwrap_or("").to_string()),
        max_length: Some(r["max_seq_length"].as_u64().unwrap() as usize),
        ..Default::default()
    };
    let enc = SentenceEncoder::load(common::model(model_dir).to_str().unwrap(), &opts)?;
    // Batch size 5 so that batches mix lengths and padding is exercised.
    let got = enc.embed(&sentences, 5)?;
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        let c = common::cosine(g, w);
        assert!(c >= 0.9999, "{model_dir}: sentence {i} {:?}: cosine {c}", &sentences[i].chars().take(40).collect::<String>());
    }
    // The defaults read from the model dir (pooling, max_seq_length) give the same vectors.
    let default_enc = SentenceEncoder::load(
        common::model(model_dir).to_str().unwrap(),
        &LoadOptions { prefix: opts.prefix.clone(), ..Default::default() },
    )?;
    assert_eq!(default_enc.max_length, opts.max_length.unwrap());
    assert_eq!(default_enc.embed(&sentences, 64)?, enc.embed(&sentences, 64)?);
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

/// A trainable load of a real model, saved as a model dir, loads back to identical embeddings,
/// with the sentence-transformers files and the prefix kept.
#[test]
fn trainable_e5_saves_and_reloads() -> Result<()> {
    let opts = LoadOptions { layers: Some(2), prefix: Some("query: ".into()), trainable: true, ..Default::default() };
    let enc = SentenceEncoder::load(common::model("multilingual-e5-small").to_str().unwrap(), &opts)?;
    let texts = ["Die Katze sitzt auf der Matte.", "", "A much longer sentence, to make the batch padded."];
    let before = enc.embed(&texts, 8)?;
    let dir = tempfile::tempdir()?;
    enc.save(dir.path())?;
    for f in ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "modules.json", "1_Pooling/config.json", "sentence_bert_config.json"] {
        assert!(dir.path().join(f).is_file(), "{f} not written");
    }
    let cfg = std::fs::read_to_string(dir.path().join("config.json"))?;
    assert!(cfg.contains("\"num_hidden_layers\": 2"), "{cfg}");
    // The prefix is sentence-transformers' default prompt, so SentenceTransformer(dir) prepends it too.
    let st: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.path().join("config_sentence_transformers.json"))?)?;
    assert_eq!(st["prompts"][st["default_prompt_name"].as_str().unwrap()], "query: ", "{st}");
    // encode_query / encode_document read these, not the default.
    assert_eq!((&st["prompts"]["query"], &st["prompts"]["document"]), (&"query: ".into(), &"query: ".into()), "{st}");
    let back = SentenceEncoder::load(dir.path().to_str().unwrap(), &LoadOptions::default())?;
    assert_eq!(back.prefix, "query: ");
    assert_eq!(back.embed(&texts, 8)?, before);
    Ok(())
}
