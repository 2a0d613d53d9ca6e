//! Hub ids resolve through a cache laid out exactly as hf-hub / huggingface_hub lay it out:
//! `models--ORG--NAME/{blobs/<etag>, refs/<revision>, snapshots/<commit>/<file> -> ../../blobs/<etag>}`.

mod common;

use std::path::Path;

const COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";

/// Lay out `org/name` under `hub` with the real e5 files as blobs (symlinked, as the files are big).
fn make_cache(hub: &Path, repo: &str, revision: &str, files: &[&str]) {
    let src = common::model("multilingual-e5-small");
    let root = hub.join(format!("models--{}", repo.replace('/', "--")));
    std::fs::create_dir_all(root.join("blobs")).unwrap();
    std::fs::create_dir_all(root.join("refs")).unwrap();
    let snap = root.join("snapshots").join(COMMIT);
    for f in files {
        let etag = format!("etag-{}", f.replace('/', "-"));
        let blob = root.join("blobs").join(&etag);
        if !blob.exists() {
            std::os::unix::fs::symlink(src.join(f), &blob).unwrap();
        }
        let link = snap.join(f);
        std::fs::create_dir_all(link.parent().unwrap()).unwrap();
        let depth = f.matches('/').count() + 2;
        let rel = format!("{}blobs/{etag}", "../".repeat(depth));
        std::os::unix::fs::symlink(rel, &link).unwrap();
    }
    std::fs::write(root.join("refs").join(revision), COMMIT).unwrap();
}

const ALL: [&str; 5] = ["config.json", "model.safetensors", "tokenizer.json", "modules.json", "1_Pooling/config.json"];

fn embed_stdout(model: &str, envs: &[(&str, &Path)], offline: bool) -> std::process::Output {
    let mut cmd = common::xsent();
    cmd.args(["embed", "--model", model, "--prefix", "query: "]).env_remove("HF_HOME").env_remove("HF_HUB_CACHE");
    for (k, v) in envs {
        cmd.env(k, v);
    }
    if offline {
        cmd.env("HF_HUB_OFFLINE", "1");
    }
    let mut child = cmd.stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().unwrap();
    use std::io::Write;
    // The process may exit on an error before reading its input.
    let _ = child.stdin.take().unwrap().write_all(b"Die Katze sitzt auf der Matte.\n");
    child.wait_with_output().unwrap()
}

#[test]
fn hub_id_resolves_from_hf_home_and_hf_hub_cache() {
    let local = embed_stdout(common::model("multilingual-e5-small").to_str().unwrap(), &[], true);
    assert!(local.status.success());

    let home = tempfile::tempdir().unwrap();
    make_cache(&home.path().join("hub"), "xsent-test/e5-small", "main", &ALL);
    let out = embed_stdout("xsent-test/e5-small", &[("HF_HOME", home.path())], true);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.stdout, local.stdout, "hub copy embeds differently from the local dir");

    // HF_HUB_CACHE points straight at the hub dir; revisions other than main via @rev.
    let cache = tempfile::tempdir().unwrap();
    make_cache(cache.path(), "xsent-test/e5-small", "v1.0", &ALL);
    let out = embed_stdout("xsent-test/e5-small@v1.0", &[("HF_HUB_CACHE", cache.path())], true);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.stdout, local.stdout);
}

#[test]
fn offline_cache_miss_names_the_file_and_what_to_do() {
    let home = tempfile::tempdir().unwrap();
    make_cache(&home.path().join("hub"), "xsent-test/partial", "main", &["config.json", "model.safetensors"]);
    let out = embed_stdout("xsent-test/partial", &[("HF_HOME", home.path())], true);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("tokenizer.json of xsent-test/partial"), "{err}");
    assert!(err.contains("HF_HUB_OFFLINE") && err.contains("local model directory"), "{err}");
}

#[test]
fn library_resolution_reads_snapshot_paths() {
    let hub = tempfile::tempdir().unwrap();
    make_cache(hub.path(), "org/name", "main", &ALL);
    let files = xsent::model::source::resolve_hub("org/name", hub.path(), true).unwrap();
    assert!(files.weights.ends_with(format!("snapshots/{COMMIT}/model.safetensors")));
    assert!(files.pooling.as_ref().unwrap().ends_with("1_Pooling/config.json"));
    assert!(files.st_config.is_none(), "sentence_bert_config.json was not in this cache");
}

/// A hub model's default prompt (`config_sentence_transformers.json`) is found in the cache and
/// used when no prefix is given, as sentence-transformers does.
#[test]
fn a_hub_models_default_prompt_is_read_from_the_cache() {
    let hub = tempfile::tempdir().unwrap();
    make_cache(hub.path(), "org/prompted", "main", &ALL);
    let root = hub.path().join("models--org--prompted");
    std::fs::write(root.join("blobs/etag-st"), r#"{"prompts": {"query": "query: "}, "default_prompt_name": "query"}"#).unwrap();
    std::os::unix::fs::symlink("../../blobs/etag-st", root.join("snapshots").join(COMMIT).join("config_sentence_transformers.json")).unwrap();
    let files = xsent::model::source::resolve_hub("org/prompted", hub.path(), true).unwrap();
    assert!(files.st_model_config.as_ref().unwrap().ends_with("config_sentence_transformers.json"));
    let enc = xsent::SentenceEncoder::from_files(files, &xsent::model::LoadOptions::default()).unwrap();
    assert_eq!(enc.prefix, "query: ");
}
