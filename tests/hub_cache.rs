//! Hub ids resolve through a cache laid out exactly as hf-hub / huggingface_hub lay it out:
//! `models--ORG--NAME/{blobs/<etag>, refs/<revision>, snapshots/<commit>/<file> -> ../../blobs/<etag>}`.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

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
    let mut child = cmd
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The process may exit on an error before reading its input.
    common::feed(&mut child, b"Die Katze sitzt auf der Matte.\n");
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

/// A hub repo in the layout of sentence-transformers before 2.0 (the Transformer module's files
/// in `0_Transformer/`, which `modules.json` names) embeds as the same model on top.
#[test]
fn a_transformer_module_in_a_subfolder_resolves_from_the_hub_cache() {
    let local = embed_stdout(common::model("multilingual-e5-small").to_str().unwrap(), &[], true);
    assert!(local.status.success());
    let hub = tempfile::tempdir().unwrap();
    make_cache(
        hub.path(),
        "org/old",
        "main",
        &["config.json", "model.safetensors", "tokenizer.json", "1_Pooling/config.json"],
    );
    let snap = hub.path().join(format!("models--org--old/snapshots/{COMMIT}"));
    std::fs::create_dir(snap.join("0_Transformer")).unwrap();
    for f in ["config.json", "model.safetensors", "tokenizer.json"] {
        let to = std::fs::read_link(snap.join(f)).unwrap();
        std::fs::remove_file(snap.join(f)).unwrap();
        std::os::unix::fs::symlink(Path::new("..").join(to), snap.join("0_Transformer").join(f)).unwrap();
    }
    let modules = std::fs::read_to_string(common::model("multilingual-e5-small").join("modules.json")).unwrap();
    std::fs::write(snap.join("modules.json"), modules.replacen(r#""path": """#, r#""path": "0_Transformer""#, 1))
        .unwrap();
    let files = xsent::model::hub::resolve_hub("org/old", hub.path(), true).unwrap();
    assert!(files.config.ends_with("0_Transformer/config.json"), "{:?}", files.config);
    assert_eq!(files.dir(), snap);
    let out = embed_stdout("org/old", &[("HF_HUB_CACHE", hub.path())], true);
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
    assert!(
        err.contains("`huggingface-cli download xsent-test/partial`"),
        "no revision given, none in the hint: {err}"
    );
}

/// The download hint keeps the revision the spec named.
#[test]
fn offline_cache_miss_hint_keeps_the_revision() {
    let hub = tempfile::tempdir().unwrap();
    make_cache(hub.path(), "org/partial", "v1.0", &["config.json", "model.safetensors"]);
    let err = xsent::model::hub::resolve_hub("org/partial@v1.0", hub.path(), true).unwrap_err().to_string();
    assert!(err.contains("`huggingface-cli download org/partial --revision v1.0`"), "{err}");
}

/// huggingface_hub stores a commit-hash revision as `snapshots/<commit>/` and writes no
/// `refs/<commit>` (here only `refs/main`): `org/name@<commit>` still resolves offline.
#[test]
fn a_commit_hash_revision_resolves_offline_from_its_snapshot() {
    let hub = tempfile::tempdir().unwrap();
    make_cache(hub.path(), "org/name", "main", &ALL);
    assert!(!hub.path().join(format!("models--org--name/refs/{COMMIT}")).exists());
    let files = xsent::model::hub::resolve_hub(&format!("org/name@{COMMIT}"), hub.path(), true).unwrap();
    assert_eq!(files.weights.len(), 1);
    assert!(
        files.weights[0].ends_with(format!("snapshots/{COMMIT}/model.safetensors")),
        "{}",
        files.weights[0].display()
    );
    assert!(files.pooling.as_ref().unwrap().ends_with(format!("snapshots/{COMMIT}/1_Pooling/config.json")));
    assert_eq!(files.declares_normalize, Some(true), "modules.json of the snapshot (e5's, with Normalize) was read");
    // Another commit is not in the cache: the hint names it.
    let other = "fedcba9876543210fedcba9876543210fedcba98";
    let err = xsent::model::hub::resolve_hub(&format!("org/name@{other}"), hub.path(), true).unwrap_err().to_string();
    assert!(
        err.contains(&format!("config.json of org/name (revision {other})"))
            && err.contains(&format!("--revision {other}")),
        "{err}"
    );
}

#[test]
fn library_resolution_reads_snapshot_paths() {
    let hub = tempfile::tempdir().unwrap();
    make_cache(hub.path(), "org/name", "main", &ALL);
    let files = xsent::model::hub::resolve_hub("org/name", hub.path(), true).unwrap();
    assert!(files.weights[0].ends_with(format!("snapshots/{COMMIT}/model.safetensors")));
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
    std::fs::write(root.join("blobs/etag-st"), r#"{"prompts": {"query": "query: "}, "default_prompt_name": "query"}"#)
        .unwrap();
    std::os::unix::fs::symlink(
        "../../blobs/etag-st",
        root.join("snapshots").join(COMMIT).join("config_sentence_transformers.json"),
    )
    .unwrap();
    let files = xsent::model::hub::resolve_hub("org/prompted", hub.path(), true).unwrap();
    assert!(files.st_model_config.as_ref().unwrap().ends_with("config_sentence_transformers.json"));
    let enc = xsent::SentenceEncoder::from_files(files, &xsent::model::LoadOptions::default()).unwrap();
    assert_eq!(enc.prefix, "query: ");
}

// ---- A hub on 127.0.0.1 ----

/// The requests a [`StubHub`] saw: each file and its Authorization header.
type RequestLog = Arc<Mutex<Vec<(String, Option<String>)>>>;

/// A fake hub: serves `files` of any repo at any revision as huggingface.co does
/// (`/ORG/NAME/resolve/REV/FILE`, byte ranges, `x-repo-commit`, `etag`), answers the files in
/// `status` with that HTTP status, and anything else with 404 `EntryNotFound`. It records each
/// request's file and Authorization header.
struct StubHub {
    url: String,
    requests: RequestLog,
}

impl StubHub {
    fn start(files: Vec<(String, Vec<u8>)>, status: &[(&str, u16)]) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let status: Vec<(String, u16)> = status.iter().map(|(f, c)| (f.to_string(), *c)).collect();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&requests);
        // Serves until the test process ends.
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let _ = serve(stream, &files, &status, &log);
            }
        });
        Self { url, requests }
    }

    fn requests(&self) -> Vec<(String, Option<String>)> {
        self.requests.lock().unwrap().clone()
    }
}

fn serve(
    mut stream: TcpStream,
    files: &[(String, Vec<u8>)],
    status: &[(String, u16)],
    log: &Mutex<Vec<(String, Option<String>)>>,
) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
    let (mut range, mut auth) = (None, None);
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h)? == 0 || h.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            match k.trim().to_ascii_lowercase().as_str() {
                "range" => range = Some(v.trim().to_string()),
                "authorization" => auth = Some(v.trim().to_string()),
                _ => {}
            }
        }
    }
    // "/ORG/NAME/resolve/REV/FILE"
    let file = path.splitn(6, '/').nth(5).unwrap_or("").to_string();
    log.lock().unwrap().push((file.clone(), auth));
    let reply = |head: &str, body: &[u8]| -> Vec<u8> {
        let mut r = format!("{head}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len()).into_bytes();
        r.extend_from_slice(body);
        r
    };
    let response = if let Some((_, code)) = status.iter().find(|(f, _)| *f == file) {
        reply(&format!("HTTP/1.1 {code} Stub Error"), b"stub error")
    } else if let Some((_, data)) = files.iter().find(|(f, _)| *f == file) {
        let spec = range.as_deref().and_then(|r| r.strip_prefix("bytes=")).unwrap_or("0-");
        let (a, b) = spec.split_once('-').unwrap();
        let a: usize = a.parse().unwrap();
        let b: usize = if b.is_empty() { data.len() - 1 } else { b.parse().unwrap() };
        let head = format!(
            "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes {a}-{b}/{}\r\nx-repo-commit: {COMMIT}\r\netag: \"etag-{}\"",
            data.len(),
            file.replace('/', "-")
        );
        reply(&head, &data[a..=b])
    } else {
        reply("HTTP/1.1 404 Not Found\r\nX-Error-Code: EntryNotFound", b"Entry not found")
    };
    stream.write_all(&response)
}

/// A tiny model (tiny-bert with a word-level tokenizer) as a directory and as (file, bytes).
fn tiny_repo(dir: &Path) -> (PathBuf, Vec<(String, Vec<u8>)>) {
    let model = common::tiny_model("tiny-bert", dir, &["hello".to_string(), "world".to_string()]);
    let files = ["config.json", "model.safetensors", "tokenizer.json"]
        .iter()
        .map(|f| (f.to_string(), std::fs::read(model.join(f)).unwrap()))
        .collect();
    (model, files)
}

/// `xsent embed --model MODEL` of one line, downloading from `endpoint` (none: offline), with
/// no token, cache or proxy from this machine's environment unless `envs` sets one.
fn embed_online(
    model: &str,
    endpoint: Option<&str>,
    envs: &[(&str, &Path)],
    cwd: Option<&Path>,
) -> std::process::Output {
    let mut cmd = common::xsent();
    cmd.args(["embed", "--model", model, "--prefix", ""]);
    for k in [
        "HF_HOME",
        "HF_HUB_CACHE",
        "HF_TOKEN",
        "HUGGING_FACE_HUB_TOKEN",
        "HF_TOKEN_PATH",
        "HF_HUB_OFFLINE",
        "HF_ENDPOINT",
    ] {
        cmd.env_remove(k);
    }
    for k in ["http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"] {
        cmd.env_remove(k);
    }
    match endpoint {
        Some(e) => cmd.env("HF_ENDPOINT", e),
        None => cmd.env("HF_HUB_OFFLINE", "1"),
    };
    for (k, v) in envs {
        cmd.env(k, v);
    }
    if let Some(d) = cwd {
        cmd.current_dir(d);
    }
    let mut child = cmd
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    common::feed(&mut child, b"hello world\n");
    child.wait_with_output().unwrap()
}

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Only the hub's 404 means an optional file is absent: a 503 (or a rate limit, a dropped
/// connection) for 1_Pooling/config.json must not silently switch the pooling to the default.
#[test]
fn an_optional_file_the_hub_fails_to_serve_is_an_error_not_absent() {
    let dir = tempfile::tempdir().unwrap();
    let (model, files) = tiny_repo(dir.path());
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();

    let hub = StubHub::start(files.clone(), &[("1_Pooling/config.json", 503)]);
    let cache = dir.path().join("cache-busy");
    let out = embed_online("xsent-test/tiny", Some(&hub.url), &[("HF_HOME", &home), ("HF_HUB_CACHE", &cache)], None);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("cannot get 1_Pooling/config.json of xsent-test/tiny (revision main)") && err.contains("503"),
        "{err}"
    );
    assert!(err.contains("only the hub's answer that it does not exist (404)"), "{err}");
    assert!(
        err.contains("Retry") && err.contains("HF_HUB_OFFLINE=1") && err.contains("local model directory"),
        "{err}"
    );
    // modules.json's 404 before it was taken as absent.
    assert!(hub.requests().iter().any(|(f, _)| f == "modules.json"), "{:?}", hub.requests());

    // The same files from a hub that answers 404 for every optional one: the model loads and
    // embeds as its local directory does.
    let hub = StubHub::start(files, &[]);
    let cache = dir.path().join("cache-ok");
    let out = embed_online("xsent-test/tiny", Some(&hub.url), &[("HF_HOME", &home), ("HF_HUB_CACHE", &cache)], None);
    assert!(out.status.success(), "{}", stderr(&out));
    let local = embed_online(model.to_str().unwrap(), None, &[("HF_HOME", &home)], None);
    assert!(local.status.success(), "{}", stderr(&local));
    assert_eq!(out.stdout, local.stdout);
    assert!(hub.requests().iter().any(|(f, _)| f == "sentence_bert_config.json"), "{:?}", hub.requests());
}

/// The token is found as huggingface_hub finds it: `$HF_HOME/token` even when HF_HUB_CACHE
/// points elsewhere (hf-hub alone reads only `<cache>/../token`), and HF_TOKEN before it.
#[test]
fn the_token_from_hf_home_or_hf_token_is_sent() {
    let dir = tempfile::tempdir().unwrap();
    let (_, files) = tiny_repo(dir.path());
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(home.join("token"), "hf_from_file\n").unwrap();
    let hub = StubHub::start(files.clone(), &[]);
    let cache = dir.path().join("elsewhere/hub");
    let out = embed_online("xsent-test/tiny", Some(&hub.url), &[("HF_HOME", &home), ("HF_HUB_CACHE", &cache)], None);
    assert!(out.status.success(), "{}", stderr(&out));
    let reqs = hub.requests();
    assert!(!reqs.is_empty() && reqs.iter().all(|(_, a)| a.as_deref() == Some("Bearer hf_from_file")), "{reqs:?}");

    let hub = StubHub::start(files, &[]);
    let cache = dir.path().join("elsewhere2/hub");
    let token = Path::new("hf_from_env");
    let out = embed_online(
        "xsent-test/tiny",
        Some(&hub.url),
        &[("HF_HOME", &home), ("HF_HUB_CACHE", &cache), ("HF_TOKEN", token)],
        None,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let reqs = hub.requests();
    assert!(!reqs.is_empty() && reqs.iter().all(|(_, a)| a.as_deref() == Some("Bearer hf_from_env")), "{reqs:?}");
}

/// A 401 or 403 says the repo may be private or gated, and how to give a token.
#[test]
fn a_refused_download_says_how_to_give_a_token() {
    let dir = tempfile::tempdir().unwrap();
    let (_, files) = tiny_repo(dir.path());
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let hub = StubHub::start(files.clone(), &[("config.json", 401)]);
    let out = embed_online(
        "xsent-test/gated",
        Some(&hub.url),
        &[("HF_HOME", &home), ("HF_HUB_CACHE", &dir.path().join("c1"))],
        None,
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("config.json of xsent-test/gated") && err.contains("401"), "{err}");
    assert!(
        err.contains("private or gated (no token was sent)")
            && err.contains("HF_TOKEN")
            && err.contains("huggingface-cli login"),
        "{err}"
    );

    // A token that was sent and refused is named by where it came from.
    let hub = StubHub::start(files, &[("modules.json", 403)]);
    let token = Path::new("hf_no_access");
    let out = embed_online(
        "xsent-test/gated",
        Some(&hub.url),
        &[("HF_HOME", &home), ("HF_HUB_CACHE", &dir.path().join("c2")), ("HF_TOKEN", token)],
        None,
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("modules.json of xsent-test/gated") && err.contains("the token from HF_TOKEN was sent"),
        "{err}"
    );
}

// ---- Local directories ----

/// A sentence-transformers pipeline xsent would run in another order is refused: a Dense
/// listed before Pooling works on token vectors, but xsent runs Dense after pooling.
#[test]
fn a_pipeline_xsent_would_run_in_another_order_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (model, _) = tiny_repo(dir.path());
    let write = |rel: &str, text: &str| {
        let p = model.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    };
    let modules = |mods: &[(&str, &str)]| {
        let list: Vec<serde_json::Value> = mods
            .iter()
            .enumerate()
            .map(|(i, (t, p))| serde_json::json!({"idx": i, "name": i.to_string(), "path": p, "type": format!("sentence_transformers.models.{t}")}))
            .collect();
        write("modules.json", &serde_json::to_string(&list).unwrap());
    };
    let dense = r#"{"in_features": 32, "out_features": 8, "bias": true, "activation_function": "torch.nn.modules.linear.Identity"}"#;
    write("1_Dense/config.json", dense);
    write("2_Dense/config.json", dense);
    write("1_Pooling/config.json", r#"{"word_embedding_dimension": 32, "pooling_mode_mean_tokens": true}"#);
    write("2_Pooling/config.json", r#"{"word_embedding_dimension": 32, "pooling_mode_mean_tokens": true}"#);
    let spec = model.to_str().unwrap();
    let resolve = || xsent::model::source::resolve(spec).map(|_| ()).map_err(|e| format!("{e:#}"));

    modules(&[("Transformer", ""), ("Dense", "1_Dense"), ("Pooling", "2_Pooling")]);
    let err = resolve().unwrap_err();
    assert!(err.contains(&format!("{}/modules.json lists Dense (1_Dense) before any Pooling module", spec)), "{err}");
    assert!(err.contains("only after Pooling"), "{err}");

    modules(&[("Transformer", ""), ("Pooling", "1_Pooling"), ("Normalize", "2_Normalize"), ("Dense", "2_Dense")]);
    let err = resolve().unwrap_err();
    assert!(err.contains("modules.json lists Normalize (2_Normalize) before Dense (2_Dense)"), "{err}");

    // Dense after Pooling but reading the token vectors (newer sentence-transformers).
    modules(&[("Transformer", ""), ("Pooling", "1_Pooling"), ("Dense", "2_Dense")]);
    assert_eq!(resolve(), Ok(()));
    write("2_Dense/config.json", r#"{"in_features": 32, "out_features": 8, "module_input_name": "token_embeddings"}"#);
    let err = resolve().unwrap_err();
    assert!(
        err.contains("2_Dense/config.json: this Dense module's module_input_name is \"token_embeddings\""),
        "{err}"
    );
}

/// `mkdir org; xsent embed -m org/tiny`: the spec is read as a local path, and the message says so.
#[test]
fn a_local_folder_named_like_the_org_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("xsent-test")).unwrap();
    let home = dir.path().join("home");
    let out = embed_online("xsent-test/tiny", None, &[("HF_HOME", &home)], Some(dir.path()));
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("xsent-test exists as a local directory but has no subdirectory \"tiny\""), "{err}");
    assert!(
        err.contains("rename or remove the local folder \"xsent-test\", or run xsent from another directory"),
        "{err}"
    );
}

/// `files`, served by a stub hub as xsent-test/tiny, embed as the local directory `local` does:
/// that output, and the files the hub was asked for, in order.
fn embeds_from_hub_as_locally(
    local: &Path,
    files: Vec<(String, Vec<u8>)>,
    home: &Path,
    cache: &Path,
) -> (Vec<u8>, Vec<String>) {
    let want = embed_online(local.to_str().unwrap(), None, &[], None);
    assert!(want.status.success(), "{}", stderr(&want));
    let hub = StubHub::start(files, &[]);
    let out = embed_online("xsent-test/tiny", Some(&hub.url), &[("HF_HOME", home), ("HF_HUB_CACHE", cache)], None);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(out.stdout, want.stdout, "from the hub, {} embeds differently", local.display());
    (want.stdout, hub.requests().into_iter().map(|(f, _)| f).collect())
}

/// Where `file` is among the requests `reqs`.
fn asked_at(reqs: &[String], file: &str) -> usize {
    reqs.iter().position(|r| r == file).unwrap_or_else(|| panic!("{file} not asked: {reqs:?}"))
}

/// The fixtures re-saved by transformers in other weight layouts (scripts/make-checkpoint-fixtures.py).
fn resaved(dir: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/checkpoints").join(dir)
}

/// `fixture` as a model dir with a word-level tokenizer (`model`), and a copy (`other`) whose
/// weights are the files of `resaved/<layout>` instead of model.safetensors.
fn model_in_layout(dir: &Path, fixture: &str, layout: &str) -> (PathBuf, PathBuf) {
    let model = common::tiny_model(fixture, &dir.join("safetensors"), &["hello".to_string(), "world".to_string()]);
    let other = dir.join(layout);
    std::fs::create_dir_all(&other).unwrap();
    std::fs::copy(model.join("tokenizer.json"), other.join("tokenizer.json")).unwrap();
    for e in std::fs::read_dir(resaved(layout)).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), other.join(e.file_name())).unwrap();
    }
    (model, other)
}

/// A local directory with a sharded safetensors checkpoint, a pytorch_model.bin or sharded
/// PyTorch files embeds as the same checkpoint in one model.safetensors; model.safetensors is
/// read first when both are there, as transformers does.
#[test]
fn other_weight_layouts_embed_as_safetensors() {
    let dir = tempfile::tempdir().unwrap();
    for (fixture, layout) in [("tiny-xlm-roberta-mlm", "xlmr-mlm-sharded"), ("tiny-bert-mlm", "bert-mlm-bin")] {
        let (model, other) = model_in_layout(&dir.path().join(layout), fixture, layout);
        assert!(!other.join("model.safetensors").exists());
        let want = embed_online(model.to_str().unwrap(), None, &[], None);
        assert!(want.status.success(), "{}", stderr(&want));
        let got = embed_online(other.to_str().unwrap(), None, &[], None);
        assert!(got.status.success(), "{layout}: {}", stderr(&got));
        assert_eq!(got.stdout, want.stdout, "{layout} embeds differently");
        let files = xsent::model::source::resolve(other.to_str().unwrap()).unwrap();
        assert!(files.weights.iter().all(|w| w.starts_with(&other)));
        assert_eq!(files.weights.len(), if layout.contains("sharded") { 2 } else { 1 });
    }
    // The float16 shards: read, so the first-listed is model.safetensors when it is there.
    let (model, other) = model_in_layout(&dir.path().join("f16"), "tiny-xlm-roberta", "xlmr-f16-sharded-bin");
    let files = xsent::model::source::resolve(other.to_str().unwrap()).unwrap();
    assert_eq!(files.weights.len(), 3);
    let got = embed_online(other.to_str().unwrap(), None, &[], None);
    assert!(got.status.success(), "{}", stderr(&got));
    std::fs::copy(model.join("model.safetensors"), other.join("model.safetensors")).unwrap();
    let files = xsent::model::source::resolve(other.to_str().unwrap()).unwrap();
    assert_eq!(files.weights, [other.join("model.safetensors")]);
}

/// Shards without their index, an index naming a missing shard, and a directory without weights
/// are refused with what to do.
#[test]
fn incomplete_sharded_checkpoints_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (_, other) = model_in_layout(dir.path(), "tiny-xlm-roberta-mlm", "xlmr-mlm-sharded");
    let resolve = |d: &Path| format!("{:#}", xsent::model::source::resolve(d.to_str().unwrap()).unwrap_err());
    std::fs::remove_file(other.join("model-00002-of-00002.safetensors")).unwrap();
    let err = resolve(&other);
    assert!(err.contains("lists the shard model-00002-of-00002.safetensors, which is not in"), "{err}");
    std::fs::remove_file(other.join("model.safetensors.index.json")).unwrap();
    let err = resolve(&other);
    assert!(err.contains("has no weights") && err.contains("model-00001-of-00002.safetensors"), "{err}");
    assert!(err.contains("copy the index into it too"), "{err}");
    std::fs::remove_file(other.join("model-00001-of-00002.safetensors")).unwrap();
    let err = resolve(&other);
    assert!(
        err.contains("has no weights") && err.contains("pytorch_model.bin") && err.contains("from_tf=True"),
        "{err}"
    );
}

/// On the hub, the weights are the first of model.safetensors, its sharded index,
/// pytorch_model.bin and its index that the hub has: the others' 404s are asked first. A failure
/// other than 404 stops there rather than falling back.
#[test]
fn hub_repos_with_other_weight_layouts_download_and_embed() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    for (fixture, layout, asked) in [
        ("tiny-xlm-roberta-mlm", "xlmr-mlm-sharded", &["model.safetensors", "model.safetensors.index.json"][..]),
        (
            "tiny-bert-mlm",
            "bert-mlm-bin",
            &["model.safetensors", "model.safetensors.index.json", "pytorch_model.bin"][..],
        ),
    ] {
        let (model, other) = model_in_layout(&dir.path().join(layout), fixture, layout);
        let files: Vec<(String, Vec<u8>)> = std::fs::read_dir(&other)
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                (e.file_name().into_string().unwrap(), std::fs::read(e.path()).unwrap())
            })
            .collect();
        let hub = StubHub::start(files.clone(), &[]);
        let cache = dir.path().join(format!("cache-{layout}"));
        let out =
            embed_online("xsent-test/tiny", Some(&hub.url), &[("HF_HOME", &home), ("HF_HUB_CACHE", &cache)], None);
        assert!(out.status.success(), "{layout}: {}", stderr(&out));
        let local = embed_online(model.to_str().unwrap(), None, &[], None);
        assert_eq!(out.stdout, local.stdout, "{layout} from the hub embeds differently");
        let reqs: Vec<String> = hub.requests().into_iter().map(|(f, _)| f).collect();
        let weight_reqs: Vec<&String> =
            reqs.iter().filter(|f| f.starts_with("model") || f.starts_with("pytorch_model")).collect();
        assert!(weight_reqs.iter().take(asked.len()).map(|s| s.as_str()).eq(asked.iter().copied()), "{reqs:?}");
        for (f, _) in &files {
            if f.starts_with("model-") || f.starts_with("pytorch_model") {
                assert!(reqs.contains(f), "{f} was not downloaded: {reqs:?}");
            }
        }
        // Offline, the cache now answers, and says that it reads another file than
        // model.safetensors without asking the hub whether it has one.
        let out = embed_online("xsent-test/tiny", None, &[("HF_HOME", &home), ("HF_HUB_CACHE", &cache)], None);
        assert_eq!(out.stdout, local.stdout, "{layout} from the cache: {}", stderr(&out));
        let used = if layout.contains("sharded") { "model.safetensors.index.json" } else { "pytorch_model.bin" };
        let note = format!(
            "model.safetensors is not in the hub cache and HF_HUB_OFFLINE is set, so the cached {used} is used"
        );
        assert!(stderr(&out).contains(&note), "{}", stderr(&out));

        // A 503 for model.safetensors is an error, not a reason to read another file.
        let hub = StubHub::start(files, &[("model.safetensors", 503)]);
        let cache = dir.path().join(format!("cache-503-{layout}"));
        let out =
            embed_online("xsent-test/tiny", Some(&hub.url), &[("HF_HOME", &home), ("HF_HUB_CACHE", &cache)], None);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(err.contains("cannot get model.safetensors") && err.contains("which weight file is read"), "{err}");
    }
    // A sentence-transformers Dense module whose weights are a pytorch_model.bin (as in older
    // hub models): fetched after the Dense's model.safetensors 404, and run as locally.
    let (model, mut files) = tiny_repo(&dir.path().join("dense"));
    let extra = [
        (
            "modules.json",
            br#"[{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                 {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
                 {"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"}]"#
                .to_vec(),
        ),
        ("1_Pooling/config.json", br#"{"word_embedding_dimension": 32, "pooling_mode_mean_tokens": true}"#.to_vec()),
        ("2_Dense/config.json", std::fs::read(resaved("dense-bin/config.json")).unwrap()),
        ("2_Dense/pytorch_model.bin", std::fs::read(resaved("dense-bin/pytorch_model.bin")).unwrap()),
    ];
    for (f, bytes) in &extra {
        std::fs::create_dir_all(model.join(f).parent().unwrap()).unwrap();
        std::fs::write(model.join(f), bytes).unwrap();
        files.push((f.to_string(), bytes.clone()));
    }
    let (local, reqs) = embeds_from_hub_as_locally(&model, files, &home, &dir.path().join("cache-dense"));
    let row: Vec<f64> = serde_json::from_slice(local.split(|&b| b == b'\n').next().unwrap()).unwrap();
    assert_eq!(row.len(), 8, "the Dense module maps 32 to 8 dims");
    assert!(asked_at(&reqs, "2_Dense/model.safetensors") < asked_at(&reqs, "2_Dense/pytorch_model.bin"), "{reqs:?}");

    // A BERT repo without tokenizer.json: its vocab.txt (asked after tokenizer.json's 404),
    // with the tokenizer_config.json beside it, embeds as the same files locally.
    let local = dir.path().join("vocab-local");
    std::fs::create_dir_all(&local).unwrap();
    let mut vocab: Vec<String> =
        ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello", "world"].map(String::from).to_vec();
    vocab.extend((vocab.len()..1000).map(|i| format!("w{i}")));
    let files: Vec<(String, Vec<u8>)> = vec![
        ("config.json".into(), std::fs::read(common::fixtures().join("tiny-bert/config.json")).unwrap()),
        ("model.safetensors".into(), std::fs::read(common::fixtures().join("tiny-bert/model.safetensors")).unwrap()),
        ("vocab.txt".into(), (vocab.join("\n") + "\n").into_bytes()),
        ("tokenizer_config.json".into(), br#"{"do_lower_case": true, "model_max_length": 64}"#.to_vec()),
    ];
    for (f, bytes) in &files {
        std::fs::write(local.join(f), bytes).unwrap();
    }
    let (_, reqs) = embeds_from_hub_as_locally(&local, files, &home, &dir.path().join("cache-vocab"));
    assert!(
        asked_at(&reqs, "tokenizer.json") < asked_at(&reqs, "vocab.txt")
            && reqs.contains(&"tokenizer_config.json".to_string()),
        "{reqs:?}"
    );

    // A repo with no weights xsent reads.
    let (_, files) = tiny_repo(dir.path());
    let files: Vec<(String, Vec<u8>)> = files.into_iter().filter(|(f, _)| f != "model.safetensors").collect();
    let hub = StubHub::start(files, &[]);
    let cache = dir.path().join("cache-none");
    let out = embed_online("xsent-test/tiny", Some(&hub.url), &[("HF_HOME", &home), ("HF_HUB_CACHE", &cache)], None);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("has no weights xsent reads") && err.contains("pytorch_model.bin.index.json"), "{err}");
    let out = embed_online("xsent-test/tiny", None, &[("HF_HOME", &home), ("HF_HUB_CACHE", &cache)], None);
    let err = stderr(&out);
    assert!(
        err.contains("none of the weight files of xsent-test/tiny") && err.contains("HF_HUB_OFFLINE is set"),
        "{err}"
    );
}

/// A ref file that does not hold a commit hash is an error naming it (an outside probe: a
/// `refs/main` holding `../../…` loaded a model folder outside the cache, and an empty or
/// garbage one was reported as "config.json … is not in the hub cache").
#[test]
fn a_ref_that_is_not_a_commit_hash_is_named() {
    let hub = tempfile::tempdir().unwrap();
    make_cache(hub.path(), "org/name", "main", &ALL);
    let refs = hub.path().join("models--org--name/refs/main");
    let outside = common::model("multilingual-e5-small");
    for text in [format!("../../../../../../../..{}", outside.display()), String::new(), "garbage\n".into()] {
        std::fs::write(&refs, &text).unwrap();
        let out = embed_stdout("org/name", &[("HF_HUB_CACHE", hub.path())], true);
        let e = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{text:?}: {e}");
        assert!(e.contains("refs/main holds") && e.contains("not a commit hash"), "{text:?}: {e}");
    }
    std::fs::write(&refs, COMMIT).unwrap();
    assert!(embed_stdout("org/name", &[("HF_HUB_CACHE", hub.path())], true).status.success());
    // A valid hash whose snapshot folder is gone names the ref and the folder (before: only
    // "config.json … is not in the hub cache").
    let other = "fedcba9876543210fedcba9876543210fedcba98";
    std::fs::write(&refs, other).unwrap();
    let out = embed_stdout("org/name", &[("HF_HUB_CACHE", hub.path())], true);
    let e = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{e}");
    assert!(
        e.contains("refs/main names the snapshot") && e.contains(&format!("snapshots/{other}, which does not exist")),
        "{e}"
    );
}
