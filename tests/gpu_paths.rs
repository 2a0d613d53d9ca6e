//! The code paths a GPU runs, checked on the CPU: every recipe trains a few steps with
//! `XSENT_KERNELS=gpu` (what a GPU runs: operands made contiguous for cuBLAS, dense token-table
//! gradients, the optimiser's device path with its moments in tensors, counter-based dropout
//! masks, sp's negatives by tensor ops, candle's ops where xsent has no CUDA kernel, and the
//! fused training ops whose CUDA kernels a GPU runs) and with `XSENT_KERNELS=candle` (the same
//! with candle's ops for every op: the fallback) and, with dropout off, gives the losses of the
//! default CPU run within 1e-4 relative (the criterion for GPU against CPU).
//! `tests/cuda.rs` compares a real GPU with the CPU.

mod common;

use std::path::Path;

/// (step, loss) of every step line of a run.
fn losses(run: &Path) -> Vec<(u64, f64)> {
    common::metrics_lines(run)
        .into_iter()
        .filter(|v| v.get("loss").is_some())
        .map(|v| (v["step"].as_u64().unwrap(), v["loss"].as_f64().unwrap()))
        .collect()
}

/// The GPU's code paths on the CPU: `XSENT_KERNELS` of each run.
const PATHS: [&str; 2] = ["gpu", "candle"];

/// Train `setup` into `out`, with `XSENT_KERNELS=kernels` when given.
fn train(s: &common::TrainSetup, out: &str, args: &[&str], kernels: Option<&str>) -> Vec<(u64, f64)> {
    let mut cmd = common::xsent();
    cmd.arg("train").arg("--config").arg(&s.config).arg("--out").arg(s.run(out)).args(args);
    match kernels {
        Some(k) => cmd.env("XSENT_KERNELS", k),
        None => cmd.env_remove("XSENT_KERNELS"),
    };
    let o = cmd.output().unwrap();
    assert!(o.status.success(), "{out}: {}", String::from_utf8_lossy(&o.stderr));
    losses(&s.run(out))
}

/// The default run and the GPU's paths, compared step by step.
fn same_losses(s: &common::TrainSetup, args: &[&str], steps: usize) {
    let cpu = train(s, "cpu", args, None);
    assert_eq!(cpu.len(), steps, "{cpu:?}");
    for k in PATHS {
        let gpu = train(s, &format!("paths-{k}"), args, Some(k));
        assert_eq!(gpu.len(), steps, "XSENT_KERNELS={k}: {gpu:?}");
        close(&cpu, &gpu, k);
    }
}

fn close(cpu: &[(u64, f64)], gpu: &[(u64, f64)], kernels: &str) {
    for (a, b) in cpu.iter().zip(gpu) {
        assert_eq!(a.0, b.0);
        assert!(
            (a.1 - b.1).abs() <= 1e-4 * a.1.abs().max(1e-3),
            "step {}: CPU loss {} against {} with XSENT_KERNELS={kernels}",
            a.0,
            a.1,
            b.1
        );
    }
}

const TRAIN: &str = "[train]\nmax_steps = 6\nbatch_size = 8\nlog_every = 1\neval_every = 0\ncheckpoint_every = 0\n[optim]\nlr = 3e-3\nwarmup_steps = 2\n[data]\nval_size = 16\n";

fn words() -> Vec<String> {
    (0..40).map(|i| format!("house{i}")).chain((0..40).map(|i| format!("haus{i}"))).collect()
}

#[test]
fn distill_on_the_gpu_paths_equals_the_cpu() {
    let dir = tempfile::tempdir().unwrap();
    let teacher = common::tiny_model("tiny-bert", dir.path(), &words());
    let student = common::tiny_model("tiny-xlm-roberta", dir.path(), &words());
    let body = format!(
        "recipe = \"distill\"\nseed = 7\n[distill]\nteacher = {:?}\nstudent = {:?}\nmax_length = 16\nprojection_fit_size = 100\ndropout = 0.0\n{TRAIN}",
        teacher.to_str().unwrap(),
        student.to_str().unwrap()
    );
    same_losses(&common::TrainSetup::new(&body, &common::word_pairs(200, 3)), &[], 6);
}

#[test]
fn lightweight_on_the_gpu_paths_equals_the_cpu() {
    // The step that failed on the GPU (`u·vᵀ` of column slices) is in align and sim.
    let body = format!("recipe = \"lightweight\"\nseed = 5\n[lightweight]\nvocab_size = 90\nlayers = 2\nhidden = 32\nheads = 4\nffn = 64\nmax_length = 16\ndropout = 0.0\n{TRAIN}");
    let s = common::TrainSetup::new(&body, &common::word_pairs(300, 7));
    // One vocabulary for both runs: the first run's.
    let cpu = train(&s, "cpu", &[], None);
    let tok = format!("lightweight.tokenizer={:?}", s.run("cpu/init/tokenizer.json").to_str().unwrap());
    let mut gpu = Vec::new();
    for k in PATHS {
        gpu = train(&s, &format!("paths-{k}"), &["--set", &tok], Some(k));
        assert_eq!((cpu.len(), gpu.len()), (6, 6));
        close(&cpu, &gpu, k);
    }
    // With dropout on, the GPU's counter-based masks: seeded, so two runs agree exactly.
    let on = ["--set", &tok, "--set", "lightweight.dropout=0.1"];
    let (a, b) = (train(&s, "drop-a", &on, Some("gpu")), train(&s, "drop-b", &on, Some("gpu")));
    assert_eq!(a, b);
    assert_ne!(a, gpu, "dropout changed nothing");
}

#[test]
fn dueam_on_the_gpu_paths_equals_the_cpu() {
    let dir = tempfile::tempdir().unwrap();
    let anchor = common::tiny_model("tiny-bert", dir.path(), &words());
    let learner = common::tiny_model("tiny-xlm-roberta", dir.path(), &words());
    // A two-language "XNLI" (row i of dev-en.tsv is row i of dev-de.tsv) and aligned validation
    // files, from the synthetic pairs.
    let p = common::word_pairs(120, 5);
    let xnli = dir.path().join("xnli");
    std::fs::create_dir_all(&xnli).unwrap();
    let rows = |side: fn(&(String, String)) -> &String| -> String {
        (0..100).map(|i| format!("{}\t{}\tneutral\n", side(&p[i]), side(&p[i + 1]))).collect()
    };
    std::fs::write(xnli.join("dev-en.tsv"), rows(|x| &x.0)).unwrap();
    std::fs::write(xnli.join("dev-de.tsv"), rows(|x| &x.1)).unwrap();
    std::fs::write(dir.path().join("val.en"), p[100..].iter().map(|x| format!("{}\n", x.0)).collect::<String>())
        .unwrap();
    std::fs::write(dir.path().join("val.de"), p[100..].iter().map(|x| format!("{}\n", x.1)).collect::<String>())
        .unwrap();
    let body = format!(
        "recipe = \"dueam\"\nseed = 7\n[dueam]\nanchor = {:?}\nlearner = {:?}\nmax_length = 16\ndropout = 0.0\npairs = \"weak\"\nxnli_dir = {:?}\nsplits = [\"dev\"]\nlangs = [\"en\", \"de\"]\n\
         [[dueam.val_sources]]\nkind = \"aligned\"\nsrc = {:?}\ntgt = {:?}\nsrc_lang = \"en\"\ntgt_lang = \"de\"\n{}",
        anchor.to_str().unwrap(),
        learner.to_str().unwrap(),
        xnli.to_str().unwrap(),
        dir.path().join("val.en").to_str().unwrap(),
        dir.path().join("val.de").to_str().unwrap(),
        TRAIN.replace("[data]\nval_size = 16\n", "")
    );
    let config = dir.path().join("dueam.toml");
    std::fs::write(&config, body).unwrap();
    let s = common::TrainSetup { dir, config };
    same_losses(&s, &[], 6);
}

#[test]
fn sp_on_the_gpu_paths_equals_the_cpu() {
    let body = format!("recipe = \"sp\"\nseed = 3\n[sp]\nunits = \"word\"\ndim = 16\nmegabatch_max = 3\nanneal_rate = 2\nsymmetric = true\ndropout = 0.0\n{TRAIN}");
    same_losses(&common::TrainSetup::new(&body, &common::word_pairs(240, 9)), &[], 6);
}

#[test]
fn disentangle_on_the_gpu_paths_equals_the_cpu() {
    let dir = tempfile::tempdir().unwrap();
    let base = common::tiny_model("tiny-xlm-roberta", dir.path(), &words());
    let body = format!(
        "recipe = \"disentangle\"\nseed = 3\n[disentangle]\nbase = {:?}\nmax_length = 16\n{TRAIN}",
        base.to_str().unwrap()
    );
    same_losses(&common::TrainSetup::new(&body, &common::word_pairs(200, 11)), &[], 6);
}
