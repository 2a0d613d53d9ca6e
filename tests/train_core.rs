//! The trainer through `xsent train`, on the tiny fixture checkpoints (a word-level tokenizer is
//! written beside them) and synthetic parallel data: exact resume, Ctrl-C, NaN, checkpoints,
//! config errors, the teacher cache and the final model directory.

mod common;

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

struct Setup {
    dir: tempfile::TempDir,
    config: PathBuf,
}

/// Synthetic parallel data (an "English" word list and its "translation"), two tiny models,
/// and a distillation config.
fn setup(extra: &str) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let en: Vec<String> = (0..60).map(|i| format!("e{i}")).collect();
    let de: Vec<String> = (0..60).map(|i| format!("d{i}")).collect();
    let words: Vec<String> = en.iter().chain(&de).cloned().collect();
    let teacher = common::tiny_model("tiny-bert", dir.path(), &words);
    let student = common::tiny_model("tiny-xlm-roberta", dir.path(), &words);
    let mut tsv = String::new();
    let mut x: u64 = 12345;
    for _ in 0..150 {
        let mut s = Vec::new();
        let mut t = Vec::new();
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let len = 3 + (x >> 60) as usize % 6;
        for _ in 0..len {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let w = (x >> 33) as usize % 60;
            s.push(en[w].clone());
            t.push(de[w].clone());
        }
        t.reverse();
        tsv.push_str(&format!("{}\t{}\n", s.join(" "), t.join(" ")));
    }
    let data = dir.path().join("pairs.tsv");
    std::fs::write(&data, tsv).unwrap();
    let config = dir.path().join("tiny.toml");
    std::fs::write(
        &config,
        format!(
            r#"recipe = "distill"
seed = 7
[distill]
teacher = "{}"
student = "{}"
max_length = 16
projection_fit_size = 100
[train]
max_steps = 12
batch_size = 8
grad_accum = 2
log_every = 1
eval_every = 4
checkpoint_every = 4
keep_last = 2
[optim]
lr = 1e-3
warmup_steps = 3
[data]
val_size = 16
[[data.sources]]
kind = "tsv"
path = "{}"
src_lang = "en"
tgt_lang = "de"
{extra}"#,
            teacher.display(),
            student.display(),
            data.display()
        ),
    )
    .unwrap();
    Setup { dir, config }
}

impl Setup {
    fn train(&self, args: &[&str]) -> Output {
        let out = common::xsent()
            .arg("train")
            .arg("--config")
            .arg(&self.config)
            .args(args)
            .env("XSENT_CACHE", self.dir.path().join("cache"))
            .output()
            .unwrap();
        out
    }

    /// `xsent train --resume --out RUN` (the saved config) with more arguments.
    fn resume(&self, run: &Path, args: &[&str]) -> Output {
        common::xsent()
            .args(["train", "--resume", "--out", run.to_str().unwrap()])
            .args(args)
            .env("XSENT_CACHE", self.dir.path().join("cache"))
            .output()
            .unwrap()
    }

    fn run_dir(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).to_string()
}

fn metrics(run: &Path) -> Vec<Value> {
    // The steps and validations (not the line with what decontamination dropped).
    common::metrics_lines(run).into_iter().filter(|v| v.get("decontamination").is_none()).collect()
}

/// The deterministic part of the metrics (timings dropped).
fn curve(run: &Path) -> Vec<Vec<(String, f64)>> {
    metrics(run)
        .into_iter()
        .map(|m| {
            let mut v: Vec<(String, f64)> = Vec::new();
            let obj = m.as_object().unwrap();
            for (k, x) in obj {
                if k.ends_with("_s") || k == "sentences_per_s" {
                    continue;
                }
                match x {
                    Value::Object(inner) => {
                        v.extend(inner.iter().map(|(k2, y)| (format!("{k}.{k2}"), y.as_f64().unwrap())))
                    }
                    _ => v.push((k.clone(), x.as_f64().unwrap())),
                }
            }
            v.sort_by(|a, b| a.0.cmp(&b.0));
            v
        })
        .collect()
}

#[test]
fn gradient_accumulation_equals_one_batch_of_the_same_examples() {
    // Two micro-batches of 8 per step and one batch of 16 draw the same 16 examples in the same
    // order; with dropout off (the only randomness in a step) they take the same steps: the
    // logged loss and gradient norm (each micro-batch weighted by 1 / grad_accum) and the
    // validations agree up to the order of float sums.
    let s = setup("");
    let (acc, one) = (s.run_dir("acc"), s.run_dir("one"));
    let o = s.train(&["--out", acc.to_str().unwrap(), "--set", "distill.dropout=0"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = s.train(&[
        "--out",
        one.to_str().unwrap(),
        "--set",
        "distill.dropout=0",
        "--set",
        "train.batch_size=16",
        "--set",
        "train.grad_accum=1",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let (a, b) = (curve(&acc), curve(&one));
    assert_eq!(a.len(), b.len());
    let mut compared = 0;
    for (ra, rb) in a.iter().zip(&b) {
        assert_eq!(ra.iter().map(|x| &x.0).collect::<Vec<_>>(), rb.iter().map(|x| &x.0).collect::<Vec<_>>());
        for ((k, x), (_, y)) in ra.iter().zip(rb) {
            assert!(
                (x - y).abs() <= 1e-4 * x.abs().max(y.abs()).max(1e-3),
                "{k}: {x} with grad_accum 2, {y} with one batch"
            );
            compared += usize::from(k == "loss" || k == "grad_norm");
        }
    }
    assert_eq!(compared, 24, "12 steps' loss and grad_norm");
}

#[test]
fn resume_continues_the_same_loss_curve() {
    let s = setup("");
    let full = s.run_dir("full");
    let o = s.train(&["--out", full.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));

    let split = s.run_dir("split");
    let o = s.train(&["--out", split.to_str().unwrap(), "--stop-after", "6"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("stopped after step 6"), "{}", stderr(&o));
    assert!(split.join("checkpoints/step-6/state.json").is_file());
    assert!(!split.join("final").exists());
    // Resuming without --config uses the saved one.
    let o = s.resume(&split, &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("resuming"), "{}", stderr(&o));
    // Resuming a run that has ended changes nothing: no step, no second final validation.
    let before = std::fs::read_to_string(split.join("metrics.jsonl")).unwrap();
    let o = s.resume(&split, &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("already ended at step 12") && stderr(&o).contains("nothing to do"), "{}", stderr(&o));
    assert_eq!(std::fs::read_to_string(split.join("metrics.jsonl")).unwrap(), before);
    // The same for a checkpoint written before state.json recorded `finished`: its final
    // validation is in metrics.jsonl.
    let state_path = split.join("checkpoints/step-12/state.json");
    let mut state: Value = serde_json::from_str(&std::fs::read_to_string(&state_path).unwrap()).unwrap();
    assert_eq!(state["finished"], Value::Bool(true));
    state.as_object_mut().unwrap().remove("finished");
    std::fs::write(&state_path, state.to_string()).unwrap();
    // (Nor did it carry checksums.)
    std::fs::remove_file(split.join("checkpoints/step-12/checksums.json")).unwrap();
    let o = s.resume(&split, &[]);
    assert!(stderr(&o).contains("already ended at step 12"), "{}", stderr(&o));
    assert_eq!(std::fs::read_to_string(split.join("metrics.jsonl")).unwrap(), before);
    // --stop-after the last step is the end of the run: final/ is written.
    let last = s.run_dir("stop-at-end");
    let o = s.train(&["--out", last.to_str().unwrap(), "--stop-after", "12"]);
    assert!(o.status.success() && last.join("final/model.safetensors").is_file(), "{}", stderr(&o));

    let (a, b) = (curve(&full), curve(&split));
    assert_eq!(a.len(), b.len(), "same number of metrics lines");
    assert!(a.len() >= 12 + 4, "12 steps and 4 validations: {}", a.len());
    for (la, lb) in a.iter().zip(&b) {
        assert_eq!(la.len(), lb.len());
        for ((ka, va), (kb, vb)) in la.iter().zip(lb) {
            assert_eq!(ka, kb);
            assert!((va - vb).abs() <= 1e-6 * va.abs().max(1.0), "{ka}: {va} vs {vb}");
        }
    }
    // Training did something: the validation MSE fell.
    let val: Vec<f64> = metrics(&full).iter().filter_map(|m| m["val"]["mse_x100"].as_f64()).collect();
    assert!(val.last().unwrap() < &val[0], "validation MSE did not fall: {val:?}");

    let (wa, wb) = (
        common::load_f32(&full.join("final/model.safetensors")),
        common::load_f32(&split.join("final/model.safetensors")),
    );
    for (k, x) in &wa {
        assert!(common::max_abs_diff(x, &wb[k]) <= 1e-6, "{k} differs");
    }
    // keep-last-2 and keep-best.
    let mut ckpts: Vec<String> = std::fs::read_dir(full.join("checkpoints"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .collect();
    ckpts.sort();
    assert_eq!(ckpts, ["step-12", "step-8"]);
    assert!(full.join("best/model.safetensors").is_file() && full.join("best/xsent-best.json").is_file());
    // The resolved config lists defaults too.
    let cfg = std::fs::read_to_string(full.join("config.toml")).unwrap();
    assert!(cfg.contains("keep_best = true") && cfg.contains("beta2 = 0.999"), "{cfg}");

    // The final directory is a model: files in HF + sentence-transformers layout, loadable.
    let fin = full.join("final");
    for f in [
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "modules.json",
        "1_Pooling/config.json",
        "2_Dense/config.json",
        "2_Dense/model.safetensors",
        "3_Normalize",
    ] {
        assert!(fin.join(f).exists(), "final/{f} missing");
    }
    let mut child = common::xsent()
        .args(["embed", "--model", fin.to_str().unwrap()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(child.stdin.as_mut().unwrap(), b"e1 e2 e3\nd3 d2 d1\n").unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success());
    let rows: Vec<Vec<f32>> =
        String::from_utf8(o.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0].len(), 32);
    let norm: f32 = rows[0].iter().map(|x| x * x).sum::<f32>().sqrt();
    assert!((norm - 1.0).abs() < 1e-5);
}

#[test]
fn resume_refuses_what_would_drop_work_and_a_failed_start_can_be_restarted() {
    let s = setup("");
    let run = s.run_dir("r");
    let o = s.train(&["--out", run.to_str().unwrap(), "--stop-after", "4"]);
    assert!(o.status.success(), "{}", stderr(&o));
    // --stop-after at or before the step the run resumes from would train to the end.
    let o = s.train(&["--out", run.to_str().unwrap(), "--resume", "--stop-after", "4"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("--stop-after 4") && stderr(&o).contains("already at step 4"), "{}", stderr(&o));
    // The data file replaced under the same path, with as many pairs (one word of one pair
    // changed), or with fewer: the checkpoint's data position belongs to other examples, so the
    // resume is refused, naming the counts; with the file put back it resumes.
    let data = s.dir.path().join("pairs.tsv");
    let kept = std::fs::read_to_string(&data).unwrap();
    let one_word = kept.replacen("e1", "e2", 1);
    assert_ne!(one_word, kept);
    for (other, counts) in [
        (one_word, "134 training examples then, 134 now"),
        (kept.lines().take(76).map(|l| format!("{l}\n")).collect(), "then, 60 now"),
    ] {
        std::fs::write(&data, other).unwrap();
        let o = s.resume(&run, &[]);
        assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
        let e = stderr(&o);
        assert!(e.contains("was written for other training data") && e.contains(counts), "{e}");
    }
    std::fs::write(&data, &kept).unwrap();
    // What the checkpoint was trained with cannot change on resume: a smaller model would drop
    // trained layers, another batch size would misplace the data position. Each changed key is
    // named with both values.
    let o = s.train(&[
        "--out",
        run.to_str().unwrap(),
        "--resume",
        "--set",
        "distill.student_layers=1",
        "--set",
        "train.batch_size=3",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(
        e.contains("--resume cannot change")
            && e.contains("distill.student_layers: (unset) -> 1")
            && e.contains("train.batch_size: 8 -> 3"),
        "{e}"
    );
    // So can --unset (the default batch size is not the run's), and a key the config does not
    // set is named.
    let o = s.train(&["--out", run.to_str().unwrap(), "--resume", "--unset", "train.batch_size"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("train.batch_size: 8 -> 32"), "{}", stderr(&o));
    let o = s.train(&["--out", run.to_str().unwrap(), "--resume", "--unset", "train.batch_sise"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("does not set train.batch_sise"), "{}", stderr(&o));
    // With the run's config.toml gone, the config given is the run's (nothing to compare it
    // with): the checkpoint's parameters are still checked against the model's.
    let saved = std::fs::read_to_string(run.join("config.toml")).unwrap();
    std::fs::remove_file(run.join("config.toml")).unwrap();
    let o = s.train(&["--out", run.to_str().unwrap(), "--resume", "--set", "distill.student_layers=1"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("does not have") && stderr(&o).contains("layer.1."), "{}", stderr(&o));
    // The checkpoint's state.json keeps what it was trained with: another batch size or seed
    // is refused by name (it resumed silently, or was named as other data).
    let o = s.train(&["--out", run.to_str().unwrap(), "--resume", "--set", "train.batch_size=4", "--set", "seed=9"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(e.contains("state.json was trained with other values than this config gives"), "{e}");
    assert!(e.contains("seed: 7 -> 9") && e.contains("train.batch_size: 8 -> 4") && !e.contains("data digest"), "{e}");
    assert!(!e.contains("training pairs"), "refused before the data is read: {e}");
    std::fs::write(run.join("config.toml"), &saved).unwrap();
    // Fewer steps than the run has taken: nothing to train, so it is refused, not re-saved, and
    // the metrics are left as they were.
    // (A step logged after the checkpoint, as by a run killed before its next checkpoint: an
    // accepted resume drops it.)
    let metrics = std::fs::read_to_string(run.join("metrics.jsonl")).unwrap() + "{\"step\":5,\"loss\":1.0}\n";
    std::fs::write(run.join("metrics.jsonl"), &metrics).unwrap();
    let o = s.train(&["--out", run.to_str().unwrap(), "--resume", "--set", "train.max_steps=3"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("is at step 4, past the 3 steps this config trains"), "{}", stderr(&o));
    assert_eq!(std::fs::read_to_string(run.join("metrics.jsonl")).unwrap(), metrics);
    assert!(!run.join("final").exists());
    // A --config given with --resume must be the run's: each key that differs is named.
    let other = s.run_dir("other.toml");
    let text = std::fs::read_to_string(&s.config)
        .unwrap()
        .replace("lr = 1e-3", "lr = 2e-3")
        .replace("keep_last = 2", "keep_last = 3");
    std::fs::write(&other, text).unwrap();
    let o = common::xsent()
        .args(["train", "--resume", "--out", run.to_str().unwrap(), "--config", other.to_str().unwrap()])
        .env("XSENT_CACHE", s.dir.path().join("cache"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(e.contains("differs from the config the run was started with"), "{e}");
    assert!(e.contains("optim.lr: 0.001 -> 0.002") && e.contains("train.keep_last: 2 -> 3"), "{e}");
    assert!(!e.contains("train.max_steps"), "{e}");
    // An existing run with a checkpoint is never started over.
    let o = s.train(&["--out", run.to_str().unwrap()]);
    assert!(stderr(&o).contains("already exists") && stderr(&o).contains("--resume"), "{}", stderr(&o));
    assert!(run.join("checkpoints/step-4/state.json").is_file());

    // A start that fails before its first checkpoint (a best_metric that does not exist fails
    // the step-0 validation) leaves config.toml and metrics.jsonl; the same command with the
    // mistake fixed starts it over, and --resume says so.
    let bad = s.run_dir("bad");
    let o = s.train(&[
        "--out",
        bad.to_str().unwrap(),
        "--set",
        "train.best_metric=\"nope\"",
        "--set",
        "train.best_mode=\"max\"",
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(bad.join("config.toml").is_file());
    let o = s.train(&["--out", bad.to_str().unwrap(), "--resume"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("no checkpoint") && stderr(&o).contains("start it over"), "{}", stderr(&o));
    let o = s.train(&["--out", bad.to_str().unwrap(), "--set", "train.max_steps=2"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("starting it over"), "{}", stderr(&o));
    assert!(bad.join("final/model.safetensors").is_file());
    assert!(!std::fs::read_to_string(bad.join("config.toml")).unwrap().contains("nope"));
    // A finished run whose checkpoints were removed: both commands say it is finished, where
    // each sent the user to the other.
    std::fs::remove_dir_all(bad.join("checkpoints")).unwrap();
    let o = s.train(&["--out", bad.to_str().unwrap(), "--resume"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("the run is finished") && !stderr(&o).contains("start it over"), "{}", stderr(&o));
    let o = s.train(&["--out", bad.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("holds a finished run") && !stderr(&o).contains("--resume"), "{}", stderr(&o));
    assert!(bad.join("final/model.safetensors").is_file());
    // A model kept by a validation before the first checkpoint is never deleted: the start-over
    // asks for it to be moved first.
    let kept = s.run_dir("kept");
    std::fs::create_dir_all(kept.join("best")).unwrap();
    std::fs::write(kept.join("best/model.safetensors"), "weights").unwrap();
    std::fs::write(kept.join("config.toml"), "").unwrap();
    let o = s.train(&["--out", kept.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("holds best/") && stderr(&o).contains("move"), "{}", stderr(&o));
    assert!(kept.join("best/model.safetensors").is_file());
}

#[test]
fn a_damaged_run_directory_loses_nothing_and_says_what_to_do() {
    let s = setup("");
    let run = s.run_dir("r");
    let o = s.train(&["--out", run.to_str().unwrap(), "--stop-after", "8"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let (step4, step8) = (run.join("checkpoints/step-4"), run.join("checkpoints/step-8"));
    assert!(step4.join("state.json").is_file() && step8.join("state.json").is_file());
    // A state.json that does not belong to its checkpoint or to the data, in a checkpoint
    // without checksums (an older xsent's; with them, an edit is a damaged checkpoint).
    std::fs::remove_file(step8.join("checksums.json")).unwrap();
    let state8 = std::fs::read_to_string(step8.join("state.json")).unwrap();
    let edited = |key: &str, value: u64| {
        let mut v: Value = serde_json::from_str(&state8).unwrap();
        v[key] = value.into();
        std::fs::write(step8.join("state.json"), v.to_string()).unwrap();
    };
    edited("step", 7);
    let o = s.train(&["--out", run.to_str().unwrap(), "--resume"]);
    assert!(stderr(&o).contains("says step 7, but it is the checkpoint of step 8"), "{}", stderr(&o));
    edited("pos", 99999);
    let o = s.train(&["--out", run.to_str().unwrap(), "--resume"]);
    assert!(
        stderr(&o).contains("data position 99999 is past the") && stderr(&o).contains("state.json"),
        "{}",
        stderr(&o)
    );
    // The newest checkpoint without its state.json: a fresh start is refused, and a resume
    // falls back to the checkpoint before it, keeping the damaged one aside (never deleted).
    std::fs::remove_file(step8.join("state.json")).unwrap();
    let o = s.train(&["--out", run.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("already exists") && stderr(&o).contains("--resume"), "{}", stderr(&o));
    let o = s.train(&["--out", run.to_str().unwrap(), "--resume", "--stop-after", "8"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("checkpoint step-8 is damaged (state.json is missing)")
            && stderr(&o).contains("resumes from step-4"),
        "{}",
        stderr(&o)
    );
    let aside = run.join("checkpoints/damaged-step-8");
    assert!(aside.join("params.safetensors").is_file() && aside.join("optimizer.safetensors").is_file());
    assert!(step8.join("state.json").is_file(), "step 8 trained again from step 4");
    // Without checksums, a newest checkpoint whose files cannot be read is passed over the same
    // way (it stopped the resume, leaving the sound step-4 unused).
    std::fs::remove_file(step8.join("checksums.json")).unwrap();
    let opt8 = step8.join("optimizer.safetensors");
    let len = std::fs::metadata(&opt8).unwrap().len();
    std::fs::OpenOptions::new().write(true).open(&opt8).unwrap().set_len(len / 2).unwrap();
    let o = s.train(&["--out", run.to_str().unwrap(), "--resume", "--stop-after", "8"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("checkpoint step-8 is damaged (optimizer.safetensors:")
            && stderr(&o).contains("damaged-step-8.1")
            && stderr(&o).contains("resumes from step-4"),
        "{}",
        stderr(&o)
    );
    // Checkpoints without config.toml: --resume needs the config the run was started with,
    // then goes on and writes config.toml back.
    std::fs::remove_file(run.join("config.toml")).unwrap();
    let o = s.train(&["--out", run.to_str().unwrap()]);
    assert!(stderr(&o).contains("already exists") && stderr(&o).contains("--resume"), "{}", stderr(&o));
    let o = s.resume(&run, &[]);
    assert!(
        stderr(&o).contains("is missing, so the run's config is unknown")
            && stderr(&o).contains("--resume --config FILE"),
        "{}",
        stderr(&o)
    );
    let o = s.train(&["--out", run.to_str().unwrap(), "--resume"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("resuming with") && run.join("final/model.safetensors").is_file(), "{}", stderr(&o));
    assert!(run.join("config.toml").is_file());
    // --out naming a file fails before any work.
    let file = s.run_dir("afile");
    std::fs::write(&file, "mine").unwrap();
    let o = s.train(&["--out", file.to_str().unwrap()]);
    assert!(
        stderr(&o).contains("is a file, not a directory") && !stderr(&o).contains("training pairs"),
        "{}",
        stderr(&o)
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "mine");
    // A user's own config.toml (or metrics.jsonl) in --out is not taken for a failed start.
    let mine = s.run_dir("mine");
    std::fs::create_dir_all(&mine).unwrap();
    let own = format!("# my notes\n{}", std::fs::read_to_string(&s.config).unwrap());
    std::fs::write(mine.join("config.toml"), &own).unwrap();
    let o = common::xsent()
        .args(["train", "--config", mine.join("config.toml").to_str().unwrap(), "--out", mine.to_str().unwrap()])
        .env("XSENT_CACHE", s.dir.path().join("cache"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("is the run directory's own config.toml"), "{}", stderr(&o));
    let o = s.train(&["--out", mine.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("that xsent train did not write"), "{}", stderr(&o));
    assert_eq!(std::fs::read_to_string(mine.join("config.toml")).unwrap(), own);
    std::fs::remove_file(mine.join("config.toml")).unwrap();
    std::fs::write(mine.join("metrics.jsonl"), "{\"mine\":1}\n").unwrap();
    let o = s.train(&["--out", mine.to_str().unwrap()]);
    assert!(stderr(&o).contains("that xsent train did not write"), "{}", stderr(&o));
    assert_eq!(std::fs::read_to_string(mine.join("metrics.jsonl")).unwrap(), "{\"mine\":1}\n");
    // Nor are folders of a user's that have the names of a run's (vocab/, checkpoints/): only
    // a run's config.toml, its first file, marks them as a run's.
    std::fs::remove_file(mine.join("metrics.jsonl")).unwrap();
    for f in ["vocab/tokenizer.json", "checkpoints/model-epoch3.pt"] {
        std::fs::create_dir_all(mine.join(f).parent().unwrap()).unwrap();
        std::fs::write(mine.join(f), "mine").unwrap();
    }
    let o = s.train(&["--out", mine.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("that xsent train did not write"), "{}", stderr(&o));
    for f in ["vocab/tokenizer.json", "checkpoints/model-epoch3.pt"] {
        assert_eq!(std::fs::read_to_string(mine.join(f)).unwrap(), "mine", "{f}");
    }
}

#[test]
fn teacher_embeddings_are_cached() {
    let s = setup("");
    let o = s.train(&["--out", s.run_dir("a").to_str().unwrap(), "--set", "train.max_steps=1"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("teacher embeddings cached"), "{}", stderr(&o));
    // The cached rows are the teacher's embeddings of the distinct source sentences, sorted
    // (the cache embeds them longest first in chunks and must put each row back in its place).
    let files: Vec<PathBuf> =
        std::fs::read_dir(s.dir.path().join("cache/teacher")).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(files.len(), 2, "the embeddings and the listing of their sentences: {files:?}");
    let files: Vec<PathBuf> = files.into_iter().filter(|p| p.extension().is_some_and(|e| e == "safetensors")).collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let cached = common::load_f32(&files[0])["embeddings"].clone();
    let tsv = std::fs::read_to_string(s.dir.path().join("pairs.tsv")).unwrap();
    let mut sources: Vec<&str> = tsv.lines().map(|l| l.split('\t').next().unwrap()).collect();
    sources.sort_unstable();
    sources.dedup();
    let direct = common::embed_cli(&s.dir.path().join("tiny-bert"), &["--max-length", "16"], &sources);
    let dim = direct[0].len();
    assert_eq!(cached.len(), sources.len() * dim);
    for (i, row) in direct.iter().enumerate() {
        for (a, b) in row.iter().zip(&cached[i * dim..(i + 1) * dim]) {
            assert!((a - b).abs() < 1e-5, "sentence {i} ({}): {a} vs {b}", sources[i]);
        }
    }
    let o = s.train(&["--out", s.run_dir("b").to_str().unwrap(), "--set", "train.max_steps=1"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("teacher embeddings from the cache"), "{}", stderr(&o));
    // One flipped byte in the rows: found by the listing's checksum and embedded again (it was
    // used, and changed the training without a word); the file written again holds the rows.
    let mut bytes = std::fs::read(&files[0]).unwrap();
    let last = bytes.len() - 3;
    bytes[last] ^= 0x10;
    std::fs::write(&files[0], &bytes).unwrap();
    let o = s.train(&["--out", s.run_dir("b2").to_str().unwrap(), "--set", "train.max_steps=1"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("does not match the checksum its listing records")
            && stderr(&o).contains("teacher embeddings cached"),
        "{}",
        stderr(&o)
    );
    assert_eq!(common::load_f32(&files[0])["embeddings"], cached);
    // Other data, other key.
    let o = s.train(&[
        "--out",
        s.run_dir("c").to_str().unwrap(),
        "--set",
        "train.max_steps=1",
        "--set",
        "data.val_size=17",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("teacher embeddings from the cache"), "same sentences, same key: {}", stderr(&o));
    let o = s.train(&[
        "--out",
        s.run_dir("d").to_str().unwrap(),
        "--set",
        "train.max_steps=1",
        "--set",
        "data.sources.0.max_pairs=100",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("teacher embeddings cached"), "fewer sentences, new key: {}", stderr(&o));
    assert!(
        stderr(&o).contains("embeddings of all") && stderr(&o).contains("from other cached sets"),
        "a subset embeds nothing: {}",
        stderr(&o)
    );
    // A teacher that lowercases first (sentence_bert_config.json) tokenises otherwise: another key.
    std::fs::write(
        s.dir.path().join("tiny-bert/sentence_bert_config.json"),
        r#"{"max_seq_length": 16, "do_lower_case": true}"#,
    )
    .unwrap();
    let o = s.train(&["--out", s.run_dir("e").to_str().unwrap(), "--set", "train.max_steps=1"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("teacher embeddings cached") && !stderr(&o).contains("from the cache"),
        "lowercasing, new key: {}",
        stderr(&o)
    );
}

#[test]
fn the_teacher_is_normalised_as_its_modules_json_says() {
    // A teacher whose sentence-transformers pipeline has no Normalize module: its targets are
    // its raw pooled vectors (seed 003 regresses onto M(s) as it is), unless the config says.
    let s = setup("");
    let teacher = s.dir.path().join("tiny-bert");
    std::fs::write(
        teacher.join("modules.json"),
        r#"[{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]"#,
    )
    .unwrap();
    std::fs::create_dir_all(teacher.join("1_Pooling")).unwrap();
    std::fs::write(teacher.join("1_Pooling/config.json"), r#"{"pooling_mode_mean_tokens": true}"#).unwrap();
    let rows = |run: &str, sets: &[&str]| -> Vec<f32> {
        let cache = s.dir.path().join(format!("cache-{run}"));
        let mut args = vec!["train", "--config", s.config.to_str().unwrap(), "--out"];
        let out = s.run_dir(run);
        args.push(out.to_str().unwrap());
        args.extend_from_slice(&["--set", "train.max_steps=1"]);
        args.extend_from_slice(sets);
        let o = common::xsent().args(&args).env("XSENT_CACHE", &cache).output().unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        let f = std::fs::read_dir(cache.join("teacher"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.extension().is_some_and(|e| e == "safetensors"))
            .unwrap();
        common::load_f32(&f)["embeddings"].clone()
    };
    let tsv = std::fs::read_to_string(s.dir.path().join("pairs.tsv")).unwrap();
    let mut sources: Vec<&str> = tsv.lines().map(|l| l.split('\t').next().unwrap()).collect();
    sources.sort_unstable();
    sources.dedup();
    let raw = common::embed_cli(&teacher, &["--max-length", "16", "--no-normalize"], &sources);
    let dim = raw[0].len();
    for (sets, normalised) in [(vec![], false), (vec!["--set", "distill.teacher_normalize=true"], true)] {
        let run = if normalised { "n" } else { "raw" };
        let cached = rows(run, &sets);
        // The student's output is normalised as the teacher's is (distill.normalize unset).
        let modules = std::fs::read_to_string(s.run_dir(run).join("final/modules.json")).unwrap();
        assert_eq!(modules.contains("Normalize"), normalised, "{modules}");
        assert_eq!(cached.len(), sources.len() * dim);
        for (i, r) in raw.iter().enumerate() {
            let norm = r.iter().map(|x| x * x).sum::<f32>().sqrt();
            assert!((norm - 1.0).abs() > 1e-3, "the raw vectors are not unit length");
            for (a, b) in r.iter().zip(&cached[i * dim..(i + 1) * dim]) {
                let want = if normalised { a / norm } else { *a };
                assert!((want - b).abs() < 1e-5, "normalised {normalised}, sentence {i}: {want} vs {b}");
            }
        }
    }
}

#[test]
fn ctrl_c_finishes_the_step_checkpoints_and_exits_130() {
    let s = setup("");
    let run = s.run_dir("int");
    let child = common::xsent()
        .arg("train")
        .arg("--config")
        .arg(&s.config)
        .args(["--out", run.to_str().unwrap(), "--set", "train.max_steps=100000", "--set", "train.eval_every=0"])
        .env("XSENT_CACHE", s.dir.path().join("cache"))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    loop {
        let n = std::fs::read_to_string(run.join("metrics.jsonl"))
            .map(|t| t.lines().filter(|l| l.contains("\"loss\"")).count())
            .unwrap_or(0);
        if n >= 3 {
            break;
        }
        assert!(start.elapsed().as_secs() < 120, "no training progress");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let killed = Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
    assert!(killed.success());
    let o = child.wait_with_output().unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(130), "{err}");
    assert!(err.contains("interrupted") && err.contains("--resume"), "{err}");
    let last = metrics(&run).iter().filter_map(|m| m["step"].as_u64()).max().unwrap();
    let state: Value = serde_json::from_str(
        &std::fs::read_to_string(run.join(format!("checkpoints/step-{last}/state.json"))).unwrap(),
    )
    .unwrap();
    assert_eq!(state["step"].as_u64(), Some(last));
    // It resumes (and finishes two steps later).
    let o = common::xsent()
        .args(["train", "--resume", "--out", run.to_str().unwrap(), "--set", &format!("train.max_steps={}", last + 2)])
        .env("XSENT_CACHE", s.dir.path().join("cache"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(run.join("final/model.safetensors").is_file());
}

/// A Ctrl-C after the last step's check (during the final validation) stops as after any
/// step, with 130: it ran the validation and wrote final/ with exit 0 before. Depending on when
/// the signal lands, the last step is checkpointed without final/ (a resume validates and
/// writes it) or the validation under way is finished and saved; either way the exit is 130.
#[test]
fn ctrl_c_after_the_last_step_exits_130() {
    let s = setup("");
    // A validation set large enough that the final validation takes a while.
    let big = s.dir.path().join("big.tsv");
    let text: String = (0..40_000u64)
        .map(|i| {
            let (a, b, c) = (i % 60, (i / 60) % 60, (i / 3600) % 60);
            format!("e{a} e{b} e{c} e{}\td{a} d{b} d{c}\n", i % 7)
        })
        .collect();
    std::fs::write(&big, text).unwrap();
    let run = s.run_dir("last");
    let mut child = common::xsent()
        .arg("train")
        .arg("--config")
        .arg(&s.config)
        .args(["--out", run.to_str().unwrap(), "--set", "train.max_steps=2", "--set", "data.val_size=38000"])
        .args(["--set", &format!("data.sources.0.path=\"{}\"", big.display()), "--set", "train.eval_at_start=false"])
        .env("XSENT_CACHE", s.dir.path().join("cache"))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    while !std::fs::read_to_string(run.join("metrics.jsonl")).is_ok_and(|t| t.contains("\"step\":2,")) {
        assert!(start.elapsed().as_secs() < 300, "no second step");
        assert!(child.try_wait().unwrap().is_none(), "the run ended before its last step was logged");
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    assert!(Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap().success());
    let o = child.wait_with_output().unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(130), "{err}");
    assert!(run.join("checkpoints/step-2/state.json").is_file(), "{err}");
    if run.join("final").exists() {
        assert!(err.contains("interrupted during the final validation; the run is complete"), "{err}");
    } else {
        assert!(err.contains("stopped after step 2") && err.contains("--resume"), "{err}");
        let o = s.resume(&run, &[]);
        assert!(o.status.success() && run.join("final/model.safetensors").is_file(), "{}", stderr(&o));
    }
}

#[test]
fn ctrl_c_before_the_first_step_exits_at_once() {
    // Enough distinct sentences that the teacher's embeddings take a while (a fresh cache).
    let s = setup("");
    let big = s.dir.path().join("big.tsv");
    let mut text = String::new();
    for i in 0..200_000u64 {
        let (a, b) = (i % 60, (i / 60) % 60);
        text.push_str(&format!("e{a} e{b} e{} e{}\td{a} d{b}\n", (i / 3600) % 60, i % 7));
    }
    std::fs::write(&big, text).unwrap();
    let run = s.run_dir("setup-int");
    let mut child = common::xsent()
        .arg("train")
        .arg("--config")
        .arg(&s.config)
        .args(["--out", run.to_str().unwrap(), "--set", &format!("data.sources.0.path=\"{}\"", big.display())])
        .env("XSENT_CACHE", s.dir.path().join("cache"))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut seen = String::new();
    loop {
        let mut line = String::new();
        assert!(std::io::BufRead::read_line(&mut err, &mut line).unwrap() > 0, "no data line: {seen}");
        seen.push_str(&line);
        if line.contains("training pairs") {
            break;
        }
    }
    let t0 = std::time::Instant::now();
    assert!(Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap().success());
    let status = child.wait().unwrap();
    std::io::Read::read_to_string(&mut err, &mut seen).unwrap();
    assert_eq!(status.code(), Some(130), "{seen}");
    assert!(seen.contains("interrupted before the first training step"), "{seen}");
    assert!(t0.elapsed().as_secs() < 10, "it exits at once");
    assert!(!run.join("checkpoints").exists(), "nothing to checkpoint");
}

#[test]
fn a_nan_loss_stops_with_the_step_and_keeps_the_last_checkpoint() {
    let s = setup("");
    let run = s.run_dir("nan");
    let o = s.train(&[
        "--out",
        run.to_str().unwrap(),
        "--set",
        "optim.lr=1e38",
        "--set",
        "optim.max_grad_norm=0",
        "--set",
        "optim.warmup_steps=0",
        "--set",
        "optim.schedule=\"constant\"",
        "--set",
        "train.checkpoint_every=1",
        "--set",
        "train.max_steps=50",
    ]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("at step") && (err.contains("NaN") || err.contains("inf")), "{err}");
    assert!(!run.join("final").exists());
    let last = metrics(&run).iter().filter_map(|m| m["step"].as_u64()).max().unwrap();
    assert!(err.contains(&format!("at step {}", last + 1)), "{err}");
    assert!(run.join(format!("checkpoints/step-{last}/params.safetensors")).is_file());
    // The NaN comes at the step after the newest checkpoint, whose weights gave it: the
    // message says so instead of calling it good (an earlier checkpoint's wording: unit test
    // `nan_message_names_the_checkpoint_to_use` in src/train/trainer.rs).
    assert!(
        err.contains(&format!("newest checkpoint, {}", run.join(format!("checkpoints/step-{last}")).display())),
        "{err}"
    );
    assert!(err.contains("holds the weights that gave this loss") && !err.contains("last good checkpoint"), "{err}");
    assert_eq!(std::fs::read_dir(run.join("checkpoints")).unwrap().count(), 1, "{err}");
    assert!(err.contains("repeats this step exactly") && err.contains("it is the only checkpoint written"), "{err}");
}

#[test]
fn config_and_data_errors_are_clear() {
    let s = setup("");
    let o = s.train(&["--set", "train.batch_sise=4", "--out", s.run_dir("x").to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("batch_sise"), "{}", stderr(&o));
    let o = s.train(&["--set", "recipe=\"dueam2\"", "--out", s.run_dir("x").to_str().unwrap()]);
    assert!(stderr(&o).contains("dueam2") && stderr(&o).contains("distill"), "{}", stderr(&o));
    let o = s.train(&["--set", "nonsense", "--out", s.run_dir("x").to_str().unwrap()]);
    assert!(stderr(&o).contains("key=value"), "{}", stderr(&o));
    // Values that would wreck training silently are refused before anything runs.
    for (set, want) in [
        ("distill.dropout=1.0", "distill.dropout must be in [0, 1)"),
        ("optim.beta1=1.5", "optim.beta1 must be in [0, 1)"),
        ("optim.eps=0", "optim.eps must be"),
        // Values f32 rounds to 0 or to infinity: the optimiser's eps is an f32.
        ("optim.eps=1e-46", "optim.eps must be a finite number > 0 that f32 holds"),
        ("optim.eps=1e39", "optim.eps must be a finite number > 0 that f32 holds"),
        ("optim.weight_decay=nan", "optim.weight_decay must be"),
        ("optim.max_grad_norm=-1", "optim.max_grad_norm must be"),
        ("distill.projection_fit_size=1", "projection_fit_size must be at least 2"),
        ("distill.source_weight=-1", "distill.source_weight must be a finite number >= 0"),
        ("sp.dim=5", "[sp] is set, but recipe = \"distill\" does not read it"),
        // A section that lacks its own required `base`: named as another recipe's, all the same.
        ("disentangle.prefix=\"x\"", "[disentangle] is set, but recipe = \"distill\" does not read it"),
        ("data.sources.0.max_pairs=0", "max_pairs = 0 reads no pairs"),
        ("data.val_size=0", "data.val_size = 0: the distill recipe validates on held-out pairs"),
        ("train.keep_last=0", "train.keep_last = 0: the last checkpoint is always kept"),
        // Another metric than the recipe's: which way is better must be said.
        ("train.best_metric=\"acc_mean\"", "add --set train.best_mode"),
        // A mode against the known direction of the metric would keep the worst model.
        (
            "train.best_mode=\"max\"",
            "train.best_mode = \"max\" (higher is better) contradicts train.best_metric \"mse_x100\"",
        ),
        ("train.best_metric=\"sts_spearman\"", "is scored only with train.val_sts"),
        // A value of the wrong type names its key (not only in the echo of the --set).
        ("train.batch_size=-1", "in `train.batch_size`"),
    ] {
        let o = s.train(&["--set", set, "--out", s.run_dir("nest/v").to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(1), "{set}");
        assert!(stderr(&o).contains(want), "{set}: {}", stderr(&o));
        assert!(!s.run_dir("nest").exists(), "{set}: no run directory (nor its parent) for a refused config");
    }
    // A key the config does not have: the file, the line and the key in the message's headline.
    let typo = s.dir.path().join("typo.toml");
    let text = std::fs::read_to_string(&s.config).unwrap().replace("keep_last = 2", "keep_lst = 2");
    std::fs::write(&typo, text).unwrap();
    let o = common::xsent()
        .args(["train", "--config", typo.to_str().unwrap(), "--out", s.run_dir("t").to_str().unwrap()])
        .output()
        .unwrap();
    let head = stderr(&o).lines().next().unwrap_or_default().to_string();
    assert!(
        head.contains("typo.toml") && stderr(&o).contains("keep_lst") && stderr(&o).contains("line"),
        "{}",
        stderr(&o)
    );

    // A non-empty directory that is not a run is left alone; --resume without config.toml.
    let run = s.run_dir("r");
    std::fs::create_dir_all(&run).unwrap();
    std::fs::write(run.join("notes.txt"), "mine").unwrap();
    let o = s.train(&["--out", run.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("not an xsent run directory") && stderr(&o).contains("notes.txt"), "{}", stderr(&o));
    assert_eq!(std::fs::read_to_string(run.join("notes.txt")).unwrap(), "mine");
    let o = s.train(&["--out", run.to_str().unwrap(), "--resume"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("config.toml"), "{}", stderr(&o));

    // Misaligned files name both files and counts.
    let a = s.dir.path().join("a.txt");
    let b = s.dir.path().join("b.txt");
    std::fs::write(&a, "e1 e2\ne3\ne4\n").unwrap();
    std::fs::write(&b, "d1 d2\nd3\n").unwrap();
    let o = s.train(&[
        "--out",
        s.run_dir("m").to_str().unwrap(),
        "--set",
        &format!("data.sources=[{{kind=\"aligned\", src=\"{}\", tgt=\"{}\"}}]", a.display(), b.display()),
    ]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("a.txt has 3 lines") && err.contains("b.txt has 2"), "{err}");
    let o =
        s.train(&["--out", s.run_dir("n").to_str().unwrap(), "--set", "data.sources.0.path=\"/nonexistent/p.tsv\""]);
    assert!(stderr(&o).contains("/nonexistent/p.tsv"), "{}", stderr(&o));
    let o = s.train(&["--out", s.run_dir("n").to_str().unwrap(), "--set", "data.val_size=1000"]);
    assert!(stderr(&o).contains("val_size"), "{}", stderr(&o));
    // Sizes beyond the data or beyond counting: errors, not a panic or an allocation failure.
    for (set, want) in [
        ("train.batch_size=4611686018427387904", "larger than the"),
        ("train.grad_accum=4611686018427387904", "too large to count"),
    ] {
        let o = s.train(&["--out", s.run_dir("z").to_str().unwrap(), "--set", set]);
        assert_eq!(o.status.code(), Some(1), "{set}: {}", stderr(&o));
        assert!(stderr(&o).contains(want) && !stderr(&o).contains("panicked"), "{set}: {}", stderr(&o));
    }
}

#[test]
fn early_stopping_ends_the_run_with_a_final_model() {
    // With lr 0 the weights, and so the validation MSE, stay as they are, and only a lower MSE
    // counts as better: patience 1 with a validation every 2 steps stops at step 2 of 12.
    let s = setup("");
    let patience = [
        "--set",
        "train.eval_every=2",
        "--set",
        "train.early_stopping_patience=1",
        "--set",
        "train.best_metric=\"mse_x100\"",
        "--set",
        "optim.lr=0",
    ];
    let run = s.run_dir("early");
    let o = s.train(&[&["--out", run.to_str().unwrap()][..], &patience].concat());
    assert!(o.status.success(), "{}", stderr(&o));
    let last = metrics(&run).iter().filter_map(|m| m["step"].as_u64()).max().unwrap();
    assert_eq!(last, 2, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("stopping early: mse_x100 has not improved") && stderr(&o).contains("(step 0)"),
        "{}",
        stderr(&o)
    );
    assert!(run.join("final/model.safetensors").is_file());
    // --resume of the early-stopped run trains no further.
    let before = std::fs::read_to_string(run.join("metrics.jsonl")).unwrap();
    let o = s.resume(&run, &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("already ended at step 2 (early stopping)"), "{}", stderr(&o));
    assert_eq!(std::fs::read_to_string(run.join("metrics.jsonl")).unwrap(), before);
    // A stop (--stop-after, as Ctrl-C) at the validation where patience runs out ends the run
    // as early stopping, with its final model, not as an interruption to resume.
    let stopped = s.run_dir("early-stop-after");
    let o = s.train(&[&["--out", stopped.to_str().unwrap(), "--stop-after", "2"][..], &patience].concat());
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("stopping early") && !stderr(&o).contains("continue with --resume"), "{}", stderr(&o));
    assert!(stopped.join("final/model.safetensors").is_file());
    assert_eq!(metrics(&stopped).len(), metrics(&run).len(), "the same steps and validations");
    assert!(stopped.join("checkpoints/step-2/state.json").is_file());

    let o = s.train(&[
        "--out",
        s.run_dir("bad").to_str().unwrap(),
        "--set",
        "train.best_metric=\"nope\"",
        "--set",
        "train.best_mode=\"min\"",
    ]);
    assert!(stderr(&o).contains("nope") && stderr(&o).contains("mse_x100"), "{}", stderr(&o));
    // Found only at a later validation (none before the first step): the steps trained so far
    // are checkpointed, and --resume with the metric fixed finishes the run.
    let late = s.run_dir("late");
    let o = s.train(&[
        "--out",
        late.to_str().unwrap(),
        "--set",
        "train.eval_at_start=false",
        "--set",
        "train.best_metric=\"nope\"",
        "--set",
        "train.best_mode=\"min\"",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("step 4 is checkpointed") && late.join("checkpoints/step-4/state.json").is_file(),
        "{}",
        stderr(&o)
    );
    let o = s.resume(&late, &["--set", "train.best_metric=\"mse_x100\""]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(late.join("final/model.safetensors").is_file());
    // The step-4 validation that failed is run on resume, before step 5: one per step.
    let vals: Vec<u64> =
        metrics(&late).iter().filter(|m| m.get("val").is_some()).map(|m| m["step"].as_u64().unwrap()).collect();
    assert_eq!(vals, [4, 8, 12], "{}", stderr(&o));
}

/// A resume keeps a best of its own: one that changes the metric starts the best again, and one
/// from a checkpoint older than best/ moves that best/ aside.
#[test]
fn a_resume_keeps_the_best_of_its_own_metric_and_steps() {
    let s = setup("");
    let run = s.run_dir("r");
    let args = ["--set", "train.eval_at_start=false", "--set", "train.checkpoint_every=2"];
    // Validation at step 4 (the first: the best), checkpoints at 2 and 4.
    let o = s.train(&[&["--out", run.to_str().unwrap(), "--stop-after", "4"][..], &args].concat());
    assert!(o.status.success(), "{}", stderr(&o));
    let best_step = |dir: &Path| -> u64 {
        let v: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("xsent-best.json")).unwrap()).unwrap();
        v["step"].as_u64().unwrap()
    };
    assert_eq!(best_step(&run.join("best")), 4);
    // Back to step 2 (as the NaN advice says: newer checkpoints moved away): best/ holds a step
    // the resumed run has not trained yet.
    std::fs::rename(run.join("checkpoints/step-4"), s.run_dir("step-4-away")).unwrap();
    let o = s.resume(&run, &["--stop-after", "4"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("best/ held step 4, after the checkpoint resumed (step 2)"), "{}", stderr(&o));
    let aside = run.join("best-step-4-before-resume");
    assert_eq!(best_step(&aside), 4, "moved aside, not deleted");
    assert_eq!(best_step(&run.join("best")), 4, "the replayed step 4 is this run's best");
    // The same crash again (a requeued job preempted twice): the next free name, where it
    // refused until the user moved a folder.
    std::fs::remove_dir_all(run.join("checkpoints/step-4")).unwrap();
    let o = s.resume(&run, &["--stop-after", "4"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(best_step(&run.join("best-step-4-before-resume.1")), 4);
    assert_eq!(best_step(&aside), 4, "the first one kept");
    // Another metric: the best so far (mse_x100, lower is better) cannot be compared with it.
    let o = s.resume(
        &run,
        &["--set", "train.best_metric=\"acc_mean\"", "--set", "train.best_mode=\"max\"", "--stop-after", "8"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("is mse_x100/min, and this run keeps the best by acc_mean/max"), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&std::fs::read_to_string(run.join("best/xsent-best.json")).unwrap()).unwrap();
    assert_eq!(v["step"], 8, "the first acc_mean validation is the best: {v}");
    assert!(v.get("acc_mean").is_some(), "{v}");
    // The same metric again: nothing starts over.
    let o = s.resume(&run, &["--set", "train.best_metric=\"acc_mean\"", "--set", "train.best_mode=\"max\""]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!stderr(&o).contains("start again"), "{}", stderr(&o));
}

#[test]
fn projection_variants() {
    let s = setup("");
    for (p, dense) in [("identity", true), ("random", true), ("none", false), ("procrustes", true)] {
        let run = s.run_dir(p);
        let o = s.train(&[
            "--out",
            run.to_str().unwrap(),
            "--set",
            &format!("distill.projection=\"{p}\""),
            "--set",
            "train.max_steps=2",
        ]);
        assert!(o.status.success(), "{p}: {}", stderr(&o));
        assert_eq!(run.join("final/2_Dense/model.safetensors").is_file(), dense, "{p}");
    }
    // identity projection: the untrained student's vectors pass unchanged (step-0 validation
    // equals that of `none`).
    let v = |name: &str| metrics(&s.run_dir(name))[0]["val"]["mse_x100"].as_f64().unwrap();
    assert!((v("identity") - v("none")).abs() < 1e-9, "{} vs {}", v("identity"), v("none"));
    assert!((v("random") - v("none")).abs() > 1e-6);
    // procrustes: a rotation towards the teacher (the MSE changes) that keeps the student's
    // cosines, so translation retrieval at step 0 is that of the bare student.
    assert!((v("procrustes") - v("none")).abs() > 1e-6);
    let acc = |name: &str, k: &str| metrics(&s.run_dir(name))[0]["val"][k].as_f64().unwrap();
    for k in ["acc_src2tgt", "acc_tgt2src"] {
        assert_eq!(acc("procrustes", k), acc("none", k), "{k}");
    }
    // lstsq fitted on sources (the default) or on both sides of pairs: the pairs fit embeds each
    // pair's source and translation (2 × 100 sentences) and gives another map.
    for fit in ["source", "pairs"] {
        let run = s.run_dir(&format!("lstsq-{fit}"));
        let o = s.train(&[
            "--out",
            run.to_str().unwrap(),
            "--set",
            &format!("distill.projection_fit=\"{fit}\""),
            "--set",
            "train.max_steps=2",
        ]);
        assert!(o.status.success(), "{fit}: {}", stderr(&o));
        let want = if fit == "pairs" { "least squares on 200 sentences" } else { "least squares on 100 sentences" };
        assert!(stderr(&o).contains(want), "{fit}: {}", stderr(&o));
    }
    assert!((v("lstsq-pairs") - v("lstsq-source")).abs() > 1e-6, "{} vs {}", v("lstsq-pairs"), v("lstsq-source"));
}

#[test]
fn student_targets_start_at_zero_and_are_cached_per_projection() {
    let s = setup("");
    let run = |name: &str, extra: &[&str]| {
        let mut args = vec![
            "--out",
            name,
            "--set",
            "distill.targets=\"student\"",
            "--set",
            "train.max_steps=4",
            "--set",
            "train.eval_every=4",
        ];
        args.extend_from_slice(extra);
        let o = s.train(&args);
        assert!(o.status.success(), "{name}: {}", stderr(&o));
        stderr(&o)
    };
    let a = s.run_dir("a");
    let err = run(a.to_str().unwrap(), &[]);
    assert!(err.contains("student embeddings cached"), "{err}");
    // Step 0: the targets are the student's own English (projection included), so the English
    // term is zero and the translations' is not; training moves the student off its targets.
    let m = metrics(&a);
    let v0 = &m[0]["val"];
    assert!(v0["mse_src_x100"].as_f64().unwrap() < 1e-9, "{v0}");
    assert!(v0["mse_x100"].as_f64().unwrap() > 1e-4, "{v0}");
    let last = m.iter().rev().find(|r| r.get("val").is_some()).unwrap();
    assert_eq!(last["step"], 4);
    assert!(last["val"]["mse_src_x100"].as_f64().unwrap() > 1e-9, "{last}");
    // The same fit reuses the cached targets; another fit gives another projection, which the
    // key sees although the projection exists only in memory.
    let err = run(s.run_dir("b").to_str().unwrap(), &[]);
    assert!(err.contains("student embeddings from the cache"), "{err}");
    let err = run(s.run_dir("c").to_str().unwrap(), &["--set", "distill.projection_fit=\"pairs\""]);
    assert!(
        err.contains("student embeddings cached")
            && !err.contains("student embeddings from the cache")
            && !err.contains("student embeddings of"),
        "{err}"
    );
    // The run's config records the choice.
    assert!(std::fs::read_to_string(a.join("config.toml")).unwrap().contains("targets = \"student\""));
}

#[test]
fn source_weight_scales_the_source_term_of_the_loss() {
    let s = setup("");
    let run = |name: &str, w: &str| {
        let dir = s.run_dir(name);
        let o = s.train(&[
            "--out",
            dir.to_str().unwrap(),
            "--set",
            &format!("distill.source_weight={w}"),
            "--set",
            "train.max_steps=3",
        ]);
        assert!(o.status.success(), "{name}: {}", stderr(&o));
        dir
    };
    let (one, three) = (run("w1", "1.0"), run("w3", "3.0"));
    let steps = |dir: &Path| -> Vec<(f64, f64, f64)> {
        metrics(dir)
            .iter()
            .filter(|r| r.get("loss").is_some())
            .map(|r| (r["loss"].as_f64().unwrap(), r["mse_src"].as_f64().unwrap(), r["mse_tgt"].as_f64().unwrap()))
            .collect()
    };
    let (a, b) = (steps(&one), steps(&three));
    assert_eq!((a.len(), b.len()), (3, 3));
    for (w, rows) in [(1.0, &a), (3.0, &b)] {
        for &(loss, src, tgt) in rows.iter() {
            assert!(src > 0.0 && tgt > 0.0);
            let want = w * src + tgt;
            assert!((loss - want).abs() <= 1e-5 * want, "weight {w}: loss {loss} vs {want}");
        }
    }
    // The first step sees the same weights and batch; the weight then changes the update.
    assert!((a[0].1 - b[0].1).abs() <= 1e-6 * a[0].1, "{a:?} vs {b:?}");
    assert!((a[2].1 - b[2].1).abs() > 1e-6 * a[2].1, "{a:?} vs {b:?}");
    assert!(std::fs::read_to_string(three.join("config.toml")).unwrap().contains("source_weight = 3.0"));
}

#[test]
fn student_targets_without_projection_need_no_teacher() {
    let s = setup("");
    // The student's own start is the target and no projection is fitted: the teacher is never
    // read, so a path that does not exist (or none at all) trains.
    let a = s.run_dir("a");
    let base = [
        "--set",
        "distill.targets=\"student\"",
        "--set",
        "distill.projection=\"none\"",
        "--set",
        "train.max_steps=4",
        "--set",
        "train.eval_every=4",
    ];
    let mut args = vec!["--out", a.to_str().unwrap(), "--set", "distill.teacher=\"no/such/teacher\""];
    args.extend_from_slice(&base);
    let o = s.train(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("no teacher is loaded") && stderr(&o).contains("student embeddings cached"),
        "{}",
        stderr(&o)
    );
    assert!(!s.dir.path().join("cache/teacher").exists(), "the teacher embedded nothing");
    assert!(metrics(&a)[0]["val"]["mse_src_x100"].as_f64().unwrap() < 1e-9);
    let b = s.run_dir("b");
    let mut args = vec!["--out", b.to_str().unwrap(), "--set", "distill.teacher=\"\""];
    args.extend_from_slice(&base);
    let o = s.train(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        !std::fs::read_to_string(b.join("config.toml")).unwrap().contains("teacher ="),
        "no empty teacher key in the run's config"
    );
    // Every other setting needs the teacher, and says so before anything loads.
    for extra in [["--set", "distill.targets=\"teacher\""], ["--set", "distill.projection=\"lstsq\""]] {
        let c = s.run_dir("c");
        let mut args = vec!["--out", c.to_str().unwrap()];
        args.extend_from_slice(&base);
        args.extend_from_slice(&["--set", "distill.teacher=\"\""]);
        args.extend_from_slice(&extra);
        let o = s.train(&args);
        assert!(!o.status.success() && stderr(&o).contains("distill.teacher is missing"), "{extra:?}: {}", stderr(&o));
        assert!(!c.exists(), "{extra:?}: no run directory for a rejected config");
    }
}

#[test]
fn projection_fit_sources_replace_the_training_pairs_for_the_fit() {
    // The fit sources are the training source itself: the same split, the same fit, the same
    // start as fitting on the training pairs.
    let step0 = |s: &Setup, name: &str| -> (String, Value) {
        let run = s.run_dir(name);
        let o = s.train(&[
            "--out",
            run.to_str().unwrap(),
            "--set",
            "optim.lr=0",
            "--set",
            "train.max_steps=1",
            "--set",
            "train.eval_every=1",
        ]);
        assert!(o.status.success(), "{name}: {}", stderr(&o));
        (stderr(&o), metrics(&run)[0]["val"].clone())
    };
    let plain = setup("");
    let (_, v_plain) = step0(&plain, "plain");
    let tsv = plain.dir.path().join("pairs.tsv");
    let same = setup(&format!(
        "[[distill.projection_fit_sources]]\nkind = \"tsv\"\npath = \"{}\"\nsrc_lang = \"en\"\ntgt_lang = \"de\"\n",
        tsv.display()
    ));
    let (err, v_same) = step0(&same, "same");
    assert!(err.contains("fitted on") && err.contains("projection_fit_sources (0 more held out"), "{err}");
    assert_eq!(v_plain["mse_x100"], v_same["mse_x100"], "{v_plain} {v_same}");
    assert_eq!(v_plain["acc_mean"], v_same["acc_mean"], "{v_plain} {v_same}");
    // Other sentences give another projection (and the teacher embeds them too).
    let rows: Vec<String> = std::fs::read_to_string(&tsv)
        .unwrap()
        .lines()
        .take(60)
        .map(|l| {
            let (en, de) = l.split_once('\t').unwrap();
            let mut e: Vec<&str> = en.split(' ').collect();
            e.rotate_left(1);
            format!("{}\t{de}", e.join(" "))
        })
        .collect();
    let other_tsv = same.dir.path().join("other.tsv");
    std::fs::write(&other_tsv, rows.join("\n") + "\n").unwrap();
    let other = setup(&format!(
        "[[distill.projection_fit_sources]]\nkind = \"tsv\"\npath = \"{}\"\nsrc_lang = \"en\"\ntgt_lang = \"de\"\n",
        other_tsv.display()
    ));
    let (_, v_other) = step0(&other, "other");
    assert_ne!(v_plain["mse_x100"], v_other["mse_x100"], "{v_plain} {v_other}");
    // Fit sources split otherwise than the training data (here: more of them): the run's own
    // validation sentences that land in their training part are held out of the fit too.
    let fit = |p: &Path| {
        format!(
            "[[distill.projection_fit_sources]]\nkind = \"tsv\"\npath = \"{}\"\nsrc_lang = \"en\"\ntgt_lang = \"de\"\n",
            p.display()
        )
    };
    let mixed = setup(&(fit(&tsv) + &fit(&other_tsv)));
    let (err, _) = step0(&mixed, "mixed");
    let held: usize =
        err.split(" more held out").next().and_then(|h| h.rsplit('(').next()).and_then(|n| n.parse().ok()).expect(&err);
    assert!(held > 0, "{err}");
    // The run's config records the fit sources; without a fitted projection they are an error.
    assert!(std::fs::read_to_string(other.run_dir("other").join("config.toml"))
        .unwrap()
        .contains("[[distill.projection_fit_sources]]"));
    let o = other.train(&["--out", other.run_dir("none").to_str().unwrap(), "--set", "distill.projection=\"random\""]);
    assert!(
        !o.status.success() && stderr(&o).contains("projection_fit_sources is only read by a fitted projection"),
        "{}",
        stderr(&o)
    );
    let bad = setup("[[distill.projection_fit_sources]]\nkind = \"tsv\"\npath = \"no/such.tsv\"\nsrc_lang = \"en\"\ntgt_lang = \"de\"\n");
    let o = bad.train(&["--out", bad.run_dir("bad").to_str().unwrap()]);
    // The error names the entry of the list it came from, not [[data.sources]].
    let err = stderr(&o);
    assert!(
        !o.status.success() && err.contains("distill.projection_fit_sources[0]") && err.contains("no/such.tsv"),
        "{err}"
    );
    let error: Vec<&str> =
        err.lines().filter(|l| l.starts_with("xsent: error") || l.trim_start().starts_with("caused by")).collect();
    assert!(!error.is_empty() && !error.iter().any(|l| l.contains("data.sources")), "{err}");
}

#[test]
fn val_sources_give_the_validation_pairs_and_leave_training_their_sentences() {
    let plain = setup("");
    let tsv = plain.dir.path().join("pairs.tsv");
    let lines: Vec<String> = std::fs::read_to_string(&tsv).unwrap().lines().map(String::from).collect();
    // The first 20 training pairs and 5 pairs the training data lacks, one of whose source
    // sentences is given twice (two translations: one validation pair per source sentence).
    let mut val: Vec<String> = lines[..20].to_vec();
    val.extend(
        [
            "e1 e2 e3 e4 e5 e6 e7 e8 e9\td9 d8",
            "e1 e2 e3 e4 e5 e6 e7 e8 e9\td1 d2",
            "e9 e9 e9 e9 e9 e9 e9 e9 e9 e9\td9",
            "e0 e0 e0 e0 e0 e0 e0 e0 e0 e0\td0",
        ]
        .map(String::from),
    );
    let val_tsv = plain.dir.path().join("val.tsv");
    std::fs::write(&val_tsv, val.join("\n") + "\n").unwrap();
    let distinct_sources = |ls: &[String]| {
        ls.iter().map(|l| l.split('\t').next().unwrap().to_string()).collect::<std::collections::HashSet<_>>()
    };
    let held = distinct_sources(&lines[..20]);
    let left_out = lines.iter().filter(|l| held.contains(l.split('\t').next().unwrap())).count();
    let unique: std::collections::HashSet<&String> = lines.iter().collect();
    let s = setup(&format!(
        "[[data.val_sources]]\nkind = \"tsv\"\npath = \"{}\"\nsrc_lang = \"en\"\ntgt_lang = \"de\"\n",
        val_tsv.display()
    ));
    let run = s.run_dir("v");
    // val_size is not read when val_sources are given: 0 is accepted.
    let o = s.train(&["--out", run.to_str().unwrap(), "--set", "train.max_steps=2", "--set", "data.val_size=0"]);
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    let n_val = distinct_sources(&val).len();
    assert_eq!(n_val, 23);
    assert!(err.contains(&format!("{left_out} pairs of data.sources left out of training")), "{err}");
    assert!(err.contains(&format!("{} training pairs, {n_val} validation pairs", unique.len() - left_out)), "{err}");
    assert!(metrics(&run).iter().any(|m| m["val"]["mse_x100"].is_f64()), "validated");
    assert!(std::fs::read_to_string(run.join("config.toml")).unwrap().contains("[[data.val_sources]]"));
    // Without them, val_size = 0 is refused before anything runs; a bad entry is named.
    let o = plain.train(&["--out", plain.run_dir("z").to_str().unwrap(), "--set", "data.val_size=0"]);
    assert!(!o.status.success() && stderr(&o).contains("or give [[data.val_sources]]"), "{}", stderr(&o));
    let o = s.train(&["--out", s.run_dir("b").to_str().unwrap(), "--set", "data.val_sources.0.path=\"no/such.tsv\""]);
    assert!(
        !o.status.success() && stderr(&o).contains("data.val_sources[0]") && stderr(&o).contains("no/such.tsv"),
        "{}",
        stderr(&o)
    );
    // Validation sentences that are all of the training data leave nothing to train on.
    std::fs::write(&val_tsv, lines.join("\n") + "\n").unwrap();
    let o = s.train(&["--out", s.run_dir("all").to_str().unwrap()]);
    assert!(!o.status.success() && stderr(&o).contains("no pair is left to train on"), "{}", stderr(&o));
}

#[test]
fn scored_pairs_are_validated_and_can_pick_the_best_model() {
    let s = setup("");
    // STS-benchmark layout: translations (5), half-translations (2.5), unrelated (0), with ties.
    let mut rows = Vec::new();
    let mut pairs: Vec<(String, String, f64)> = Vec::new();
    for i in 0..12usize {
        let e: Vec<String> = (0..4).map(|k| format!("e{}", (i * 5 + k) % 60)).collect();
        let d: Vec<String> = (0..4).map(|k| format!("d{}", (i * 5 + k) % 60)).collect();
        let other: Vec<String> = (0..4).map(|k| format!("d{}", (i * 5 + 30 + k) % 60)).collect();
        let half: Vec<String> = d[..2].iter().chain(&other[..2]).cloned().collect();
        pairs.push((e.join(" "), d.join(" "), 5.0));
        pairs.push((e.join(" "), half.join(" "), 2.5));
        pairs.push((e.join(" "), other.join(" "), 0.0));
    }
    for (i, (a, b, g)) in pairs.iter().enumerate() {
        rows.push(format!("main-captions\tMSRvid\t2012test\t{i:04}\t{g:.3}\t{a}\t{b}"));
    }
    let sts = s.dir.path().join("sts-dev.csv");
    std::fs::write(&sts, rows.join("\n") + "\n").unwrap();
    let run = s.run_dir("sts");
    let val_sts = format!("train.val_sts=\"{}\"", sts.display());
    let o =
        s.train(&["--out", run.to_str().unwrap(), "--set", &val_sts, "--set", "train.best_metric=\"sts_spearman\""]);
    assert!(o.status.success(), "{}", stderr(&o));
    let vals: Vec<(u64, f64, f64)> = metrics(&run)
        .iter()
        .filter(|m| m.get("val").is_some())
        .map(|m| {
            (
                m["step"].as_u64().unwrap(),
                m["val"]["sts_spearman"].as_f64().unwrap(),
                m["val"]["sts_pearson"].as_f64().unwrap(),
            )
        })
        .collect();
    assert_eq!(vals.iter().map(|v| v.0).collect::<Vec<_>>(), vec![0, 4, 8, 12]);
    assert!(vals.iter().all(|v| v.1.abs() <= 100.0 && v.2.abs() <= 100.0), "{vals:?}");
    // The last validation scored the final weights: the same Spearman from `xsent embed`.
    let texts: Vec<&str> = pairs.iter().flat_map(|(a, b, _)| [a.as_str(), b.as_str()]).collect();
    let vecs = common::embed_cli(&run.join("final"), &[], &texts);
    let sim: Vec<f64> = vecs.chunks(2).map(|p| common::cosine(&p[0], &p[1])).collect();
    let gold: Vec<f64> = pairs.iter().map(|p| p.2).collect();
    let expected = 100.0 * common::spearman(&sim, &gold);
    assert!((vals[3].1 - expected).abs() < 1e-3, "validation {} vs xsent embed {expected}", vals[3].1);
    // A correlation: the best model is the one with the highest score (not the recipe's "min").
    let best: Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("best/xsent-best.json")).unwrap()).unwrap();
    let top = vals.iter().fold(vals[0], |b, v| if v.1 > b.1 { *v } else { b });
    assert_eq!(best["step"].as_u64().unwrap(), top.0, "{best} {vals:?}");
    // Errors name the option and the file, and the line.
    let o = s.train(&["--out", s.run_dir("sts-missing").to_str().unwrap(), "--set", "train.val_sts=\"nope.csv\""]);
    assert!(
        !o.status.success() && stderr(&o).contains("train.val_sts") && stderr(&o).contains("nope.csv"),
        "{}",
        stderr(&o)
    );
    std::fs::write(&sts, "a\tb\t5\nc d\t1\n").unwrap();
    let o = s.train(&["--out", s.run_dir("sts-bad").to_str().unwrap(), "--set", &val_sts]);
    assert!(!o.status.success() && stderr(&o).contains("sts-dev.csv:2"), "{}", stderr(&o));
}

/// Decontamination: training pairs with a side in an evaluation set (here a benchmark folder of
/// our own with an STS 2017 track and Tatoeba files, and a file of `data.eval_lines`) are
/// dropped, counted in the log and in metrics.jsonl, and listed by `xsent data audit`; with
/// `data.decontaminate = false` they are trained on.
#[test]
fn training_pairs_in_evaluation_sets_are_dropped() {
    let s = setup("");
    let pairs: Vec<(String, String)> = std::fs::read_to_string(s.dir.path().join("pairs.tsv"))
        .unwrap()
        .lines()
        .map(|l| l.split_once('\t').map(|(a, b)| (a.to_string(), b.to_string())).unwrap())
        .collect();
    let bench = s.dir.path().join("bench");
    std::fs::create_dir_all(bench.join("sts/STS2017.eval.v1.1")).unwrap();
    std::fs::create_dir_all(bench.join("tatoeba")).unwrap();
    // Pair 0's source (upper-cased, spaces doubled: the same sentence normalised) in an STS
    // track; pair 1's target in Tatoeba, in full-width letters (the same text in NFKC, as the
    // tokenizers see it); pair 2's source in an eval_lines file.
    let shout = pairs[0].0.to_uppercase().replace(' ', "  ");
    std::fs::write(
        bench.join("sts/STS2017.eval.v1.1/STS.input.track5.en-en.txt"),
        format!("{shout}\tsomething else\n"),
    )
    .unwrap();
    let wide: String = pairs[1]
        .1
        .chars()
        .map(|c| if c.is_ascii_graphic() { char::from_u32(c as u32 + 0xfee0).unwrap() } else { c })
        .collect();
    assert_ne!(wide, pairs[1].1);
    std::fs::write(bench.join("tatoeba/tatoeba.deu-eng.deu"), format!("{wide}\n")).unwrap();
    std::fs::write(bench.join("tatoeba/tatoeba.deu-eng.eng"), "unrelated\n").unwrap();
    let lines = s.dir.path().join("mine.txt");
    std::fs::write(&lines, format!("{}\n", pairs[2].0)).unwrap();
    let hits =
        |a: &str| pairs.iter().filter(|(x, y)| [x, y].iter().any(|t| t.to_lowercase() == a.to_lowercase())).count();
    let expected = [hits(&pairs[0].0), hits(&pairs[1].1), hits(&pairs[2].0)];
    let dir = format!("data.eval_dir=\"{}\"", bench.display());
    let extra = format!("data.eval_lines=[\"{}\"]", lines.display());
    let run = s.run_dir("clean");
    let o = s.train(&["--out", run.to_str().unwrap(), "--set", &dir, "--set", &extra, "--set", "train.max_steps=1"]);
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    let dropped: usize = expected.iter().sum();
    assert!(err.contains(&format!("decontamination: {dropped} of 150 pairs of data.sources dropped")), "{err}");
    assert!(
        err.contains(&format!("STS 2017 track5.en-en {}", expected[0]))
            && err.contains(&format!("Tatoeba {}", expected[1])),
        "{err}"
    );
    let first: Value =
        serde_json::from_str(std::fs::read_to_string(run.join("metrics.jsonl")).unwrap().lines().next().unwrap())
            .unwrap();
    let d = &first["decontamination"][0];
    assert_eq!(
        (d["source"].as_str(), d["pairs"].as_u64(), d["dropped"].as_u64()),
        (Some("data.sources"), Some(150), Some(dropped as u64)),
        "{first}"
    );
    assert_eq!(d["by_set"]["Tatoeba"].as_u64(), Some(expected[1] as u64), "{first}");
    assert!(err.contains(&format!("{} training pairs", 150 - dropped - 16)), "{err}");
    // The audit prints the same counts without training.
    let o = common::xsent()
        .args(["data", "audit", "--config"])
        .arg(&s.config)
        .args(["--set", &dir, "--set", &extra])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(out.contains(&format!("data.sources: 150 pairs, {dropped} dropped")), "{out}");
    assert!(out.contains(&format!("| STS 2017 track5.en-en | Test | 2 | {} | 1 |", expected[0])), "{out}");
    // Off: every pair trains.
    let run = s.run_dir("off");
    let o = s.train(&[
        "--out",
        run.to_str().unwrap(),
        "--set",
        &dir,
        "--set",
        "data.decontaminate=false",
        "--set",
        "train.max_steps=1",
    ]);
    assert!(
        o.status.success()
            && stderr(&o).contains("134 training pairs")
            && stderr(&o).contains("decontamination is off"),
        "{}",
        stderr(&o)
    );
    assert!(!std::fs::read_to_string(run.join("metrics.jsonl")).unwrap().contains("decontamination"));
}

/// `xsent plot run`: the loss and validation curves of two runs in one PNG, one panel per
/// metric (or those asked for), an unknown metric named with the ones there are.
#[test]
fn plot_run_draws_the_curves_of_runs() {
    let s = setup("");
    let runs: Vec<PathBuf> = ["a", "b"].iter().map(|n| s.run_dir(n)).collect();
    for (i, run) in runs.iter().enumerate() {
        let o = s.train(&[
            "--out",
            run.to_str().unwrap(),
            "--set",
            "train.max_steps=8",
            "--set",
            &format!("seed={}", 7 + i),
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
    }
    let png = s.run_dir("curves.png");
    let o = common::xsent().args(["plot", "run"]).args(&runs).arg("-o").arg(&png).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("6 panels (loss, acc_mean, acc_src2tgt, acc_tgt2src, mse_src_x100, mse_x100) of 2 runs"),
        "{}",
        stderr(&o)
    );
    let size = |png: &Path| {
        let bytes = std::fs::read(png).unwrap();
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
        (u32::from_be_bytes(bytes[16..20].try_into().unwrap()), u32::from_be_bytes(bytes[20..24].try_into().unwrap()))
    };
    assert_eq!(size(&png), (1500, 2 * 375 + 30 + 22), "three columns of 500 × 375, two rows, one legend row");
    let o = common::xsent()
        .args(["plot", "run"])
        .args(&runs)
        .args(["--metrics", "loss,mse_x100", "-o"])
        .arg(&png)
        .output()
        .unwrap();
    assert!(stderr(&o).contains("2 panels (loss, mse_x100) of 2 runs"), "{}", stderr(&o));
    assert_eq!(size(&png).0, 1000, "two panels side by side");
    let o =
        common::xsent().args(["plot", "run"]).args(&runs).args(["--metrics", "nope", "-o"]).arg(&png).output().unwrap();
    assert!(!o.status.success() && stderr(&o).contains("--metrics nope: no run logged it; these did: loss, acc_mean, acc_src2tgt, acc_tgt2src, mse_src_x100, mse_x100"), "{}", stderr(&o));
    let o = common::xsent().args(["plot", "run"]).arg(s.run_dir("none")).arg("-o").arg(&png).output().unwrap();
    assert!(
        !o.status.success() && stderr(&o).contains("is ") && stderr(&o).contains("a run directory of xsent train?"),
        "{}",
        stderr(&o)
    );
}
