//! The disentangle recipe end to end on the real multilingual-e5-small and a small slice of
//! XNLI: training, the model directory, `xsent embed --head`, and `xsent plot pca`.

mod common;

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Output;

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn config(dir: &Path, extra: &str) -> PathBuf {
    let xnli = common::data().join("xnli");
    let mut sources = String::new();
    for lang in ["de", "fr"] {
        sources += &format!(
            "[[data.sources]]\nkind = \"xnli\"\ndir = \"{}\"\nsplits = [\"dev\"]\npivot = \"en\"\nlangs = [\"{lang}\"]\nmax_pairs = 90\n\n",
            xnli.display()
        );
    }
    let text = format!(
        r#"recipe = "disentangle"
seed = 3
[disentangle]
base = "{}"
prefix = "query: "
max_length = 64
{extra}
[train]
epochs = 30
batch_size = 32
shard_size = 16
eval_every = 10
eval_at_start = true
log_every = 10
checkpoint_every = 1000
[optim]
lr = 1e-3
weight_decay = 0.0
schedule = "constant"
[data]
val_size = 20

{sources}"#,
        common::e5_small()
    );
    let path = dir.join("tiny.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// `xsent train --config CONFIG --out OUT ARGS…` with its cache in `dir/cache`.
fn train(dir: &Path, config: &Path, out: &Path, args: &[&str]) -> Output {
    common::xsent()
        .args(["train", "--config", config.to_str().unwrap(), "--out", out.to_str().unwrap()])
        .args(args)
        .env("XSENT_CACHE", dir.join("cache"))
        .output()
        .unwrap()
}

fn validations(run: &Path) -> Vec<Value> {
    common::metrics_lines(run).into_iter().filter(|v| v.get("val").is_some()).collect()
}

/// The heads a run saved in `final/`.
fn final_heads(run: &Path) -> std::collections::HashMap<String, candle_core::Tensor> {
    candle_core::safetensors::load(run.join("final/heads.safetensors"), &candle_core::Device::Cpu).unwrap()
}

fn embed(model: &Path, extra: &[&str], input: &Path) -> Result<Vec<Vec<f32>>, String> {
    let o = common::xsent()
        .args(["embed", "--model", model.to_str().unwrap(), "--input", input.to_str().unwrap()])
        .args(extra)
        .output()
        .unwrap();
    if !o.status.success() {
        return Err(stderr(&o));
    }
    Ok(String::from_utf8(o.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect())
}

#[test]
fn disentangle_trains_saves_heads_and_embeds_with_each_head() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), "");
    let run = dir.path().join("run");
    let o = train(dir.path(), &cfg, &run, &[]);
    assert!(o.status.success(), "{}", stderr(&o));

    // The validation loss falls and language identification is learnt.
    let vals = validations(&run);
    assert!(vals.len() >= 3, "{vals:?}");
    let first = &vals[0]["val"];
    let last = &vals[vals.len() - 1]["val"];
    assert!(last["loss"].as_f64().unwrap() < 0.8 * first["loss"].as_f64().unwrap(), "{first} → {last}");
    assert!(last["langid_acc"].as_f64().unwrap() > 90.0, "{last}");

    let model = run.join("final");
    let saved: Value = serde_json::from_str(&std::fs::read_to_string(model.join("xsent.json")).unwrap()).unwrap();
    assert_eq!(saved["kind"], "disentangle");
    assert_eq!(saved["languages"], serde_json::json!(["de", "en", "fr"]));
    assert_eq!(saved["base"]["prefix"], "query: ");

    let input = dir.path().join("in.txt");
    std::fs::write(&input, "A man is playing a guitar.\nEin Mann spielt Gitarre.\n").unwrap();
    let meaning = embed(&model, &[], &input).unwrap();
    let language = embed(&model, &["--head", "language"], &input).unwrap();
    assert_eq!(meaning.len(), 2);
    assert_eq!(meaning[0].len(), 384);
    assert!(common::max_abs_diff(&meaning[0], &language[0]) > 1e-3);

    // The meaning vectors are the head applied to the base encoder's vectors, normalised.
    let base = embed(Path::new(&common::e5_small()), &["--prefix", "query: ", "--max-length", "64"], &input).unwrap();
    let heads = final_heads(&run);
    let w = heads["meaning.weight"].to_vec2::<f32>().unwrap();
    let b = heads["meaning.bias"].to_vec1::<f32>().unwrap();
    for (e, m) in base.iter().zip(&meaning) {
        let y: Vec<f32> =
            w.iter().zip(&b).map(|(row, bi)| row.iter().zip(e).map(|(a, x)| a * x).sum::<f32>() + bi).collect();
        let n = y.iter().map(|v| v * v).sum::<f32>().sqrt();
        let y: Vec<f32> = y.iter().map(|v| v / n).collect();
        assert!(common::max_abs_diff(&y, m) < 1e-4, "{}", common::max_abs_diff(&y, m));
    }

    // Heads: a wrong name, or a model without heads, are errors that say so.
    let e = embed(&model, &["--head", "style"], &input).unwrap_err();
    assert!(e.contains("meaning") && e.contains("language"), "{e}");
    let e = embed(Path::new(&common::e5_small()), &["--head", "language"], &input).unwrap_err();
    assert!(e.contains("disentangle"), "{e}");
    let e = embed(&model, &["--pooling", "cls"], &input).unwrap_err();
    assert!(e.contains("--pooling"), "{e}");
    let e = embed(&model, &["--prompt-name", "query"], &input).unwrap_err();
    assert!(e.contains("drop --prefix/--prompt-name"), "{e}");

    // A picture of the three spaces: three panels side by side.
    let png = dir.path().join("pca.png");
    let o = common::xsent()
        .args([
            "plot",
            "pca",
            "--model",
            model.to_str().unwrap(),
            "--rows",
            "30",
            "--panel-size",
            "300",
            "-o",
            png.to_str().unwrap(),
        ])
        .args(["--data-dir", &common::data_arg()])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let bytes = std::fs::read(&png).unwrap();
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    assert_eq!(u32::from_be_bytes(bytes[16..20].try_into().unwrap()), 900);
    let log = stderr(&o);
    assert!(log.contains("base (") && log.contains("meaning: PC1") && log.contains("language: PC1"), "{log}");
}

#[test]
fn a_picture_of_more_languages_than_colours_is_refused_before_embedding() {
    let dir = tempfile::tempdir().unwrap();
    let mut args: Vec<String> = Vec::new();
    for i in 0..21 {
        let f = dir.path().join(format!("l{i}.txt"));
        std::fs::write(&f, "A sentence.\nAnother one.\n").unwrap();
        args.extend(["--input".to_string(), format!("l{i}={}", f.display())]);
    }
    let png = dir.path().join("pca.png");
    let o = common::xsent()
        .args(["plot", "pca", "--model", &common::e5_small(), "-o", png.to_str().unwrap()])
        .args(&args)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("21 languages, but at most 20"), "{}", stderr(&o));
    assert!(!stderr(&o).contains("PC1"), "refused before any embedding: {}", stderr(&o));
    assert!(!png.exists());
}

#[test]
fn the_ablation_switches_drop_their_terms() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), "meaning_loss = false");
    let run = dir.path().join("run");
    let o = train(dir.path(), &cfg, &run, &["--set", "train.epochs=1"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v = &validations(&run)[0]["val"];
    let sum = v["l_r"].as_f64().unwrap() + v["l_l_sim"].as_f64().unwrap() + v["l_l_id"].as_f64().unwrap();
    assert!((v["loss"].as_f64().unwrap() - sum).abs() < 1e-4, "{v}");
    assert!(v["l_m"].as_f64().unwrap() > 1e-3, "L_M is still reported: {v}");
    // Without its negatives, L_M's translation term alone counts; both parts are reported.
    let cfg = config(dir.path(), "meaning_negatives = false");
    let run = dir.path().join("run-noneg");
    let o = train(dir.path(), &cfg, &run, &["--set", "train.epochs=1"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v = &validations(&run)[0]["val"];
    let part = |k: &str| v[k].as_f64().unwrap();
    assert!((part("l_m") - part("l_m_align") - part("l_m_neg")).abs() < 1e-4 && part("l_m_neg") > 1e-3, "{v}");
    let sum = part("l_r") + part("l_m_align") + part("l_l_sim") + part("l_l_id");
    assert!((part("loss") - sum).abs() < 1e-4, "{v}");
}

#[test]
fn meaning_lr_scale_zero_freezes_the_meaning_head_alone() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), "meaning_init = \"identity\"\nmeaning_lr_scale = 0.0");
    let run = dir.path().join("run");
    let o = train(dir.path(), &cfg, &run, &["--set", "train.epochs=1"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let heads = final_heads(&run);
    let w = heads["meaning.weight"].to_vec2::<f32>().unwrap();
    for (i, row) in w.iter().enumerate() {
        for (j, x) in row.iter().enumerate() {
            assert_eq!(*x, if i == j { 1.0 } else { 0.0 }, "meaning.weight[{i}][{j}]");
        }
    }
    assert!(heads["meaning.bias"].to_vec1::<f32>().unwrap().iter().all(|x| *x == 0.0));
    // The other heads trained at the full rate: the run's copy of the config has the scale.
    let resolved = std::fs::read_to_string(run.join("config.toml")).unwrap();
    assert!(resolved.contains("meaning_lr_scale = 0.0"), "{resolved}");
    let vals = validations(&run);
    let (first, last) = (&vals[0]["val"], &vals[vals.len() - 1]["val"]);
    assert!(last["l_l_id"].as_f64().unwrap() < first["l_l_id"].as_f64().unwrap(), "{first} → {last}");
    // A negative scale is refused when the config is loaded.
    let o = train(dir.path(), &cfg, &dir.path().join("bad"), &["--set", "disentangle.meaning_lr_scale=-1"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("meaning_lr_scale"), "{}", stderr(&o));
}

#[test]
fn a_resumed_run_keeps_meaning_lr_scale_and_ends_where_an_uninterrupted_one_does() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), "meaning_init = \"identity\"\nmeaning_lr_scale = 0.1");
    let steps = ["--set", "train.max_steps=12", "--set", "train.checkpoint_every=3"];
    let full = dir.path().join("full");
    let o = train(dir.path(), &cfg, &full, &steps);
    assert!(o.status.success(), "{}", stderr(&o));
    let split = dir.path().join("split");
    let o = train(dir.path(), &cfg, &split, &[&steps[..], &["--stop-after", "6"]].concat());
    assert!(o.status.success(), "{}", stderr(&o));
    let o = common::xsent()
        .args(["train", "--resume", "--out", split.to_str().unwrap()])
        .env("XSENT_CACHE", dir.path().join("cache"))
        .output()
        .unwrap();
    assert!(o.status.success() && stderr(&o).contains("resuming"), "{}", stderr(&o));
    let (a, b) = (final_heads(&full), final_heads(&split));
    for (name, t) in &a {
        let (x, y) = (
            t.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
            b[name].flatten_all().unwrap().to_vec1::<f32>().unwrap(),
        );
        assert!(common::max_abs_diff(&x, &y) <= 1e-6, "{name} differs after resume");
    }
    // The scale mattered: at one rate MLP_M ends elsewhere.
    let one = dir.path().join("one");
    let o = train(dir.path(), &cfg, &one, &[&steps[..], &["--set", "disentangle.meaning_lr_scale=1"]].concat());
    assert!(o.status.success(), "{}", stderr(&o));
    let w = |h: &std::collections::HashMap<String, candle_core::Tensor>| {
        h["meaning.weight"].flatten_all().unwrap().to_vec1::<f32>().unwrap()
    };
    assert!(common::max_abs_diff(&w(&a), &w(&final_heads(&one))) > 1e-4);
}

/// Pearson ×100 of `xsent eval sts --pairs PAIRS --model MODEL ARGS…`.
fn sts_pearson(model: &str, pairs: &Path, args: &[&str]) -> f64 {
    let mut a = vec!["sts", "--model", model, "--pairs", pairs.to_str().unwrap()];
    a.extend(args);
    let (_, r) = common::eval_report(a);
    r["results"][0]["scores"]["pearson"].as_f64().unwrap()
}

#[test]
fn validation_on_scored_pairs_scores_the_meaning_embeddings_being_trained() {
    let dir = tempfile::tempdir().unwrap();
    let stsb = std::fs::read_to_string(common::data().join("sts/stsbenchmark/sts-dev.csv")).unwrap();
    let pairs = dir.path().join("sts-dev.csv");
    std::fs::write(&pairs, stsb.lines().take(40).map(|l| format!("{l}\n")).collect::<String>()).unwrap();
    let cfg = config(dir.path(), "meaning_init = \"identity\"");
    let run = dir.path().join("run");
    let val_sts = format!("train.val_sts={:?}", pairs.to_str().unwrap());
    let o = train(
        dir.path(),
        &cfg,
        &run,
        &["--set", &val_sts, "--set", "train.epochs=3", "--set", "train.best_metric=\"sts_pearson\""],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let vals = validations(&run);
    let score = |v: &Value| v["val"]["sts_pearson"].as_f64().unwrap();
    // Before any step the meaning head is the identity: the base encoder's own score.
    let base = sts_pearson(&common::e5_small(), &pairs, &["--prefix", "query: ", "--max-length", "64"]);
    assert_eq!(vals[0]["step"], 0);
    assert!((score(&vals[0]) - base).abs() < 1e-3, "step 0 {} vs base {base}", score(&vals[0]));
    // The last validation scored the final heads: the saved model's score.
    let last = vals.last().unwrap();
    let saved = sts_pearson(run.join("final").to_str().unwrap(), &pairs, &[]);
    assert!((score(last) - saved).abs() < 1e-3, "last validation {} vs final/ {saved}", score(last));
    assert!((score(last) - score(&vals[0])).abs() > 1e-3, "the heads moved: {vals:?}");
}

#[test]
fn centred_init_starts_the_meaning_head_at_identity_minus_the_mean_embedding() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), "meaning_init = \"centered\"");
    let run = dir.path().join("run");
    let o = train(dir.path(), &cfg, &run, &["--set", "optim.lr=0", "--set", "train.max_steps=1"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let heads = final_heads(&run);
    let w = heads["meaning.weight"].to_vec2::<f32>().unwrap();
    for (i, row) in w.iter().enumerate() {
        for (j, &x) in row.iter().enumerate() {
            assert_eq!(x, if i == j { 1.0 } else { 0.0 }, "identity weight at ({i}, {j})");
        }
    }
    // The cached base embeddings hold the training and the 20 validation sentences: their mean is
    // close to, not equal to, the training sentences' mean (exact value: the unit test of mean_row).
    let cache = std::fs::read_dir(dir.path().join("cache/base"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "safetensors"))
        .unwrap();
    let all = candle_core::safetensors::load(&cache, &candle_core::Device::Cpu).unwrap()["embeddings"]
        .mean(0)
        .unwrap()
        .to_vec1::<f32>()
        .unwrap();
    let b = heads["meaning.bias"].to_vec1::<f32>().unwrap();
    let minus_all: Vec<f32> = all.iter().map(|x| -x).collect();
    assert!(common::max_abs_diff(&b, &minus_all) < 0.02, "bias vs −mean: {}", common::max_abs_diff(&b, &minus_all));
    assert!(b.iter().map(|x| x * x).sum::<f32>().sqrt() > 0.5, "a real offset, not a zero bias");
}

#[test]
fn another_sentence_set_reuses_the_cached_base_embeddings_it_shares() {
    let (dir, fresh) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let cfg = config(dir.path(), "");
    let one_step = ["--set", "train.max_steps=1"];
    let o = train(dir.path(), &cfg, &dir.path().join("a"), &one_step);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("xsent train: embedding"), "{}", stderr(&o));
    // Another seed holds out other sentences: most rows come from the first run's cache file.
    let args = ["--set", "train.max_steps=1", "--set", "seed=4"];
    let o = train(dir.path(), &cfg, &dir.path().join("b"), &args);
    assert!(o.status.success(), "{}", stderr(&o));
    let log = stderr(&o);
    let line =
        log.lines().find(|l| l.contains("from the cache; embedding the other")).unwrap_or_else(|| panic!("{log}"));
    let n: Vec<usize> = line.split(' ').filter_map(|w| w.parse().ok()).collect();
    assert!(n.len() == 3 && n[0] + n[2] == n[1] && n[2] > 0 && n[0] > n[2], "{line}");
    // The same run with an empty cache embeds everything and validates the same.
    let o = train(fresh.path(), &cfg, &fresh.path().join("b"), &args);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!stderr(&o).contains("from the cache"), "{}", stderr(&o));
    let (shared, alone) =
        (&validations(&dir.path().join("b"))[0]["val"], &validations(&fresh.path().join("b"))[0]["val"]);
    for k in ["loss", "l_r", "l_m", "meaning_acc_mean"] {
        assert!((shared[k].as_f64().unwrap() - alone[k].as_f64().unwrap()).abs() < 1e-4, "{k}: {shared} vs {alone}");
    }
    // A third run of the same set is an exact hit.
    let o = train(dir.path(), &cfg, &dir.path().join("b2"), &args);
    assert!(stderr(&o).contains("base embeddings from the cache"), "{}", stderr(&o));
}
