//! `train.ahead`: the next step's batches prepared on a background thread (tokenised; DuEAM's
//! WMDs solved) give the same training, to the bit, as preparing them in the step: with
//! gradient accumulation, shards, an epoch that wraps, and a resume; the step lines say that
//! every step ran from prepared batches (`ahead` 1) or none did (`ahead` 0).

mod common;

use serde_json::Value;
use std::path::Path;

/// The step lines of a run.
fn steps(run: &Path) -> Vec<Value> {
    common::metrics_lines(run).into_iter().filter(|v| v.get("loss").is_some()).collect()
}

/// Each step line's numbers that must not depend on `train.ahead` (timings and `ahead` left out).
fn curve(run: &Path) -> Vec<Vec<(String, f64)>> {
    steps(run)
        .iter()
        .map(|m| {
            m.as_object()
                .unwrap()
                .iter()
                .filter(|(k, _)| {
                    !k.ends_with("_s") && !k.ends_with("_per_s") && *k != "ahead" && *k != "anchor_ms_per_pair"
                })
                .map(|(k, v)| (k.clone(), v.as_f64().unwrap()))
                .collect()
        })
        .collect()
}

fn ahead_terms(run: &Path) -> Vec<f64> {
    steps(run).iter().map(|m| m["ahead"].as_f64().expect("an ahead term")).collect()
}

fn weights(run: &Path) -> Vec<u8> {
    std::fs::read(run.join("final/model.safetensors")).unwrap()
}

fn ok(o: &std::process::Output, what: &str) {
    assert!(o.status.success(), "{what}: {}", String::from_utf8_lossy(&o.stderr));
}

/// Ahead and in the step, continuous and resumed: the same curve and weights.
fn same_training(s: &common::TrainSetup, steps_total: usize) {
    ok(&s.train("ahead", &[]), "ahead");
    ok(&s.train("in-step", &["--set", "train.ahead=false"]), "in the step");
    ok(&s.train("resumed", &["--stop-after", "5"]), "first part");
    let o = common::xsent().args(["train", "--resume", "--out", s.run("resumed").to_str().unwrap()]).output().unwrap();
    ok(&o, "resume");
    let (a, b, r) = (s.run("ahead"), s.run("in-step"), s.run("resumed"));
    assert_eq!(curve(&a).len(), steps_total);
    assert_eq!(curve(&a), curve(&b), "the same steps ahead and in the step");
    assert_eq!(curve(&a), curve(&r), "the same steps resumed");
    assert_eq!(ahead_terms(&a), vec![1.0; steps_total], "every step from prepared batches");
    assert_eq!(ahead_terms(&b), vec![0.0; steps_total], "none with train.ahead = false");
    assert_eq!(ahead_terms(&r), vec![1.0; steps_total], "the resumed run's first step too");
    assert_eq!(weights(&a), weights(&b), "the same final weights");
    assert_eq!(weights(&a), weights(&r), "the same final weights resumed");
}

fn words() -> Vec<String> {
    (0..40).map(|i| format!("house{i}")).chain((0..40).map(|i| format!("haus{i}"))).collect()
}

/// 200 pairs, 16 held out: 12 steps of 2 × 8 wrap into a second epoch.
const TRAIN: &str = "[train]\nmax_steps = 12\nbatch_size = 8\ngrad_accum = 2\nshard_size = 3\nlog_every = 1\neval_every = 0\ncheckpoint_every = 0\neval_at_start = false\n[optim]\nlr = 3e-3\nwarmup_steps = 2\n[data]\nval_size = 16\n";

#[test]
fn distill_trains_the_same_with_batches_tokenised_ahead() {
    let dir = tempfile::tempdir().unwrap();
    let teacher = common::tiny_model("tiny-bert", dir.path(), &words());
    let student = common::tiny_model("tiny-xlm-roberta", dir.path(), &words());
    let body = format!(
        "recipe = \"distill\"\nseed = 7\n[distill]\nteacher = {:?}\nstudent = {:?}\nmax_length = 16\nprojection_fit_size = 100\n{TRAIN}",
        teacher.to_str().unwrap(),
        student.to_str().unwrap()
    );
    let s = common::TrainSetup::new(&body, &common::word_pairs(200, 3));
    same_training(&s, 12);
}

/// A DuEAM run on synthetic two-language "XNLI" rows (premise, hypothesis), with `shard_size`.
fn dueam_setup(shard_size: usize) -> common::TrainSetup {
    let s = common::TrainSetup::new("", &[]);
    let dir = s.dir.path();
    let anchor = common::tiny_model("tiny-bert", dir, &words());
    let learner = common::tiny_model("tiny-xlm-roberta", dir, &words());
    let pairs = common::word_pairs(60, 11);
    let xnli = dir.join("xnli");
    std::fs::create_dir_all(&xnli).unwrap();
    let (mut en, mut de) = (String::new(), String::new());
    for w in pairs.chunks_exact(2).take(24) {
        en.push_str(&format!("{}\t{}\tneutral\n", w[0].0, w[1].0));
        de.push_str(&format!("{}\t{}\tneutral\n", w[0].1, w[1].1));
    }
    std::fs::write(xnli.join("dev-en.tsv"), en).unwrap();
    std::fs::write(xnli.join("dev-de.tsv"), de).unwrap();
    let val: Vec<&(String, String)> = pairs.iter().skip(48).collect();
    std::fs::write(dir.join("val.en"), val.iter().map(|p| format!("{}\n", p.0)).collect::<String>()).unwrap();
    std::fs::write(dir.join("val.de"), val.iter().map(|p| format!("{}\n", p.1)).collect::<String>()).unwrap();
    let body = format!(
        "recipe = \"dueam\"\nseed = 7\n[dueam]\nanchor = {anchor:?}\nlearner = {learner:?}\nmax_length = 16\npairs = \"weak\"\nxnli_dir = {xnli:?}\nsplits = [\"dev\"]\nlangs = [\"en\", \"de\"]\n\
         [[dueam.val_sources]]\nkind = \"aligned\"\nsrc = {:?}\ntgt = {:?}\nsrc_lang = \"en\"\ntgt_lang = \"de\"\n\
         [train]\nmax_steps = 12\nbatch_size = 8\ngrad_accum = 2\nshard_size = {shard_size}\nlog_every = 1\neval_every = 0\ncheckpoint_every = 0\neval_at_start = false\n[optim]\nlr = 1e-3\nwarmup_steps = 2\n",
        dir.join("val.en"),
        dir.join("val.de"),
    );
    std::fs::write(&s.config, body).unwrap();
    s
}

#[test]
fn dueam_trains_the_same_with_wmds_solved_ahead() {
    // Shards of 3 (as on the CPU) and one shard per micro-batch (the GPU's grouping): the WMDs
    // computed ahead are grouped as the step groups them.
    for shard_size in [3, 8] {
        let s = dueam_setup(shard_size);
        same_training(&s, 12);
        // The step found every WMD ready: its anchor share is small against the in-step run's
        // first steps (the first epoch computes them).
        let ahead: f64 = steps(&s.run("ahead")).iter().map(|m| m["anchor_ms_per_pair"].as_f64().unwrap()).sum();
        let in_step: f64 = steps(&s.run("in-step")).iter().map(|m| m["anchor_ms_per_pair"].as_f64().unwrap()).sum();
        assert!(ahead < in_step, "anchor time in the step: {ahead} ms/pair ahead, {in_step} in the step");
    }
}
