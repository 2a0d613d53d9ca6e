//! Faults an operator meets (issue 43): closed output streams, pathological input, concurrent
//! runs, damaged checkpoints, signals and leftovers. Each test fails on a build without the fix.

mod common;

use std::io::{BufRead, Read};
use std::path::Path;
use std::process::{Command, Output, Stdio};

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A distillation run on the tiny fixtures (tiny-bert teaches tiny-xlm-roberta) over synthetic
/// pairs: `steps` steps, a checkpoint every 2.
fn tiny_distill(steps: u64, extra: &str) -> common::TrainSetup {
    let pairs = common::word_pairs(120, 5);
    let words: Vec<String> = (0..40).flat_map(|i| [format!("house{i}"), format!("haus{i}")]).collect();
    let dir = tempfile::tempdir().unwrap();
    let teacher = common::tiny_model("tiny-bert", dir.path(), &words);
    let student = common::tiny_model("tiny-xlm-roberta", dir.path(), &words);
    let body = format!(
        "recipe = \"distill\"\nseed = 3\n[distill]\nteacher = {teacher:?}\nstudent = {student:?}\nmax_length = 16\nprojection_fit_size = 60\n\
         [train]\nmax_steps = {steps}\nbatch_size = 8\nlog_every = 1\neval_every = 0\ncheckpoint_every = 2\nkeep_last = 2\n\
         [optim]\nlr = 1e-3\n[data]\nval_size = 8\n{extra}\n"
    );
    let s = common::TrainSetup::new(&body, &pairs);
    // The models live as long as the setup: keep their folder inside it.
    let keep = s.dir.path().join("models");
    std::fs::rename(dir.path(), &keep).unwrap();
    let text = std::fs::read_to_string(&s.config).unwrap().replace(dir.path().to_str().unwrap(), keep.to_str().unwrap());
    std::fs::write(&s.config, text).unwrap();
    s
}

fn train_cmd(s: &common::TrainSetup, out: &Path, args: &[&str]) -> Command {
    let mut c = common::xsent();
    c.arg("train").arg("--config").arg(&s.config).arg("--out").arg(out).args(args);
    c
}

// ---- 1. A closed standard error or output never stops the work ----

/// `xsent train … 2>&1 | head -2`: the reader goes away after two lines, and the run still
/// finishes (it used to panic on its next message, exit 101 and leave a run that --resume refused).
#[test]
fn train_finishes_when_its_log_reader_goes_away() {
    let s = tiny_distill(6, "");
    let out = s.run("r");
    let (reader, writer) = std::io::pipe().unwrap();
    let mut cmd = train_cmd(&s, &out, &[]);
    cmd.stdout(writer.try_clone().unwrap()).stderr(writer);
    let mut child = cmd.spawn().unwrap();
    drop(cmd);
    let mut lines = std::io::BufReader::new(reader);
    for _ in 0..2 {
        let mut l = String::new();
        lines.read_line(&mut l).unwrap();
    }
    drop(lines);
    let status = child.wait().unwrap();
    assert!(status.success(), "{status:?}");
    assert!(out.join("final/model.safetensors").is_file());
}

/// `xsent embed` with standard error closed: the vectors are written and the warning about a
/// truncated line (which used to panic) is dropped.
#[test]
fn embed_finishes_with_stderr_closed() {
    let model = common::model("all-MiniLM-L6-v2");
    let long = "word ".repeat(400);
    let mut child = common::xsent()
        .args(["embed", "--model"])
        .arg(&model)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stderr.take());
    let mut stdin = child.stdin.take().unwrap();
    std::io::Write::write_all(&mut stdin, format!("a short line\n{long}\n").as_bytes()).unwrap();
    drop(stdin);
    let mut text = String::new();
    child.stdout.take().unwrap().read_to_string(&mut text).unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "{status:?}");
    assert_eq!(text.lines().count(), 2);
}
