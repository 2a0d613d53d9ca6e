//! The lightweight dual transformer (seed 001) through `xsent train` on synthetic parallel data:
//! the vocabulary and seeded initial model in `init/`, loss terms per task switch, exact resume,
//! and `final/` as an ordinary BERT-family model directory that `xsent embed` loads.

mod common;

use serde_json::Value;
use std::path::Path;
use std::process::Output;

fn corpus(n: usize) -> Vec<(String, String)> {
    common::word_pairs(n, 7)
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).to_string()
}

fn setup() -> common::TrainSetup {
    common::TrainSetup::new(
        r#"recipe = "lightweight"
seed = 5
[lightweight]
vocab_size = 90
layers = 2
hidden = 32
heads = 4
ffn = 64
max_length = 16
[train]
max_steps = 12
batch_size = 16
log_every = 1
eval_every = 4
checkpoint_every = 4
keep_last = 3
[optim]
lr = 3e-3
warmup_steps = 2
weight_decay = 0.0
[data]
val_size = 40
"#,
        &corpus(300),
    )
}

fn lines(run: &Path) -> Vec<Value> {
    common::metrics_lines(run)
}

/// (step, loss, grad norm) of each step line.
fn losses(run: &Path) -> Vec<(u64, f64, f64)> {
    lines(run)
        .into_iter()
        .filter(|v| v.get("loss").is_some())
        .map(|v| (v["step"].as_u64().unwrap(), v["loss"].as_f64().unwrap(), v["grad_norm"].as_f64().unwrap()))
        .collect()
}

fn weights(model: &Path) -> std::collections::HashMap<String, candle_core::Tensor> {
    candle_core::safetensors::load(model.join("model.safetensors"), &candle_core::Device::Cpu).unwrap()
}

#[test]
fn lightweight_trains_resumes_exactly_and_saves_a_bert_model() {
    let s = setup();
    let o = s.train("full", &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let full = losses(&s.run("full"));
    assert_eq!(full.len(), 12);
    assert!(full.iter().all(|r| r.1.is_finite() && r.2 > 0.0), "{full:?}");
    let first = lines(&s.run("full")).into_iter().find(|v| v.get("loss").is_some()).unwrap();
    for term in ["kl", "align", "sim"] {
        assert!(first[term].as_f64().is_some_and(f64::is_finite), "term {term} missing: {first}");
    }
    assert!(first.get("mlm").is_none() && first.get("smlm").is_none());
    // UGT + align + sim: L = kl + 2 align + 2 sim.
    let sum =
        first["kl"].as_f64().unwrap() + 2.0 * first["align"].as_f64().unwrap() + 2.0 * first["sim"].as_f64().unwrap();
    assert!((first["loss"].as_f64().unwrap() - sum).abs() < 1e-3 * sum.abs().max(1.0), "{first}");
    // Training helps held-out retrieval.
    let val: Vec<f64> =
        lines(&s.run("full")).iter().filter_map(|v| v.get("val").map(|x| x["acc_mean"].as_f64().unwrap())).collect();
    assert!(val.last().unwrap() > val.first().unwrap(), "validation accuracy {val:?}");

    // init/: the learned vocabulary with <pad> and <mask>, a BERT config of the asked shape.
    let tok = tokenizers::Tokenizer::from_file(s.run("full/init/tokenizer.json")).unwrap();
    let (pad, mask) = (tok.token_to_id("<pad>").unwrap(), tok.token_to_id("<mask>").unwrap());
    let cfg: Value = serde_json::from_str(&std::fs::read_to_string(s.run("full/final/config.json")).unwrap()).unwrap();
    assert_eq!(cfg["model_type"], "bert");
    assert_eq!(
        (cfg["num_hidden_layers"].as_u64(), cfg["hidden_size"].as_u64(), cfg["intermediate_size"].as_u64()),
        (Some(2), Some(32), Some(64))
    );
    assert_eq!(cfg["vocab_size"].as_u64().unwrap() as usize, tok.get_vocab_size(true));
    assert_eq!(cfg["pad_token_id"].as_u64(), Some(pad as u64));
    assert!((mask as usize) < tok.get_vocab_size(true));
    // transformers (and so sentence-transformers, scripts/check-st.sh) must use tokenizer.json as
    // it is: for a `bert` config it would otherwise rebuild a WordPiece tokenizer.
    let tc: Value =
        serde_json::from_str(&std::fs::read_to_string(s.run("full/final/tokenizer_config.json")).unwrap()).unwrap();
    assert_eq!(
        (tc["tokenizer_class"].as_str(), tc["pad_token"].as_str()),
        (Some("PreTrainedTokenizerFast"), Some("<pad>")),
        "{tc}"
    );

    // Stop after 5 steps, resume to 12: the same run (masks, dropout and data order included).
    // The same vocabulary: the unigram trainer breaks ties in hash-map order, so a vocabulary
    // learned again may number its pieces differently.
    let tok = format!("lightweight.tokenizer={:?}", s.run("full/init/tokenizer.json").to_str().unwrap());
    let o = s.train("split", &["--stop-after", "5", "--set", &tok]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = common::xsent().args(["train", "--resume", "--out"]).arg(s.run("split")).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("initial model and vocabulary from"), "{}", stderr(&o));
    let split = losses(&s.run("split"));
    assert_eq!(split.len(), full.len());
    for (a, b) in full.iter().zip(&split) {
        assert_eq!(a.0, b.0);
        assert!(
            (a.1 - b.1).abs() < 1e-5 * a.1.abs().max(1.0) && (a.2 - b.2).abs() < 1e-4 * a.2.max(1.0),
            "step {}: {a:?} vs {b:?}",
            a.0
        );
    }
    let (wa, wb) = (weights(&s.run("full/final")), weights(&s.run("split/final")));
    assert_eq!(wa.len(), wb.len());
    for (name, a) in &wa {
        let d =
            a.sub(&wb[name]).unwrap().abs().unwrap().flatten_all().unwrap().max(0).unwrap().to_scalar::<f32>().unwrap();
        assert!(d < 1e-5, "{name} differs by {d} after resume");
    }
    // The generative head is training-only: not in the model, but in the checkpoints.
    assert!(wa.keys().all(|k| !k.starts_with("head.")), "{:?}", wa.keys().collect::<Vec<_>>());

    // final/: `xsent embed` loads it (mean pooling, normalised 32-dim vectors).
    let rows = common::embed_cli(&s.run("full/final"), &[], &["house1 house2", "haus1 haus2"]);
    assert_eq!(rows[0].len(), 32);
    assert!((common::cosine(&rows[0], &rows[0]) - 1.0).abs() < 1e-5);
    let norm = rows[0].iter().map(|x| x * x).sum::<f32>().sqrt();
    assert!((norm - 1.0).abs() < 1e-4, "norm {norm}");

    // Its tokenizer adds no special tokens: a line cut exactly at a word boundary is still
    // reported as cut, and embeds as the words that were kept.
    let tok = tokenizers::Tokenizer::from_file(s.run("full/final/tokenizer.json")).unwrap();
    let count = |t: &str| tok.encode(t, true).unwrap().len();
    let (kept, line) = ("house1 house2 haus3", "house1 house2 haus3 house4 haus5");
    let (m, n) = (count(kept), count(line));
    assert!(m >= 2 && n > m, "{m} {n}");
    let embed = |max: usize, text: &str| {
        let o = common::xsent()
            .args(["embed", "--model", s.run("full/final").to_str().unwrap(), "--max-length", &max.to_string()])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .and_then(|mut c| {
                common::feed(&mut c, text.as_bytes());
                c.wait_with_output()
            })
            .unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        (serde_json::from_slice::<Vec<f32>>(&o.stdout).unwrap(), stderr(&o))
    };
    let (cut, err) = embed(m, line);
    assert!(err.contains(&format!("1 of 1 lines were longer than {m} tokens")), "{err}");
    let (whole, err) = embed(m, kept);
    assert!(err.is_empty(), "{err}");
    assert!(common::max_abs_diff(&cut, &whole) < 1e-6);
    let (_, err) = embed(n, line);
    assert!(err.is_empty(), "{err}");
}

#[test]
fn task_switches_select_the_loss_terms() {
    let s = setup();
    let cases: [(&[&str], &[&str], &[&str]); 6] = [
        (&["lightweight.generative=smlm"], &["smlm", "align", "sim"], &["kl", "mlm"]),
        (&["lightweight.generative=xtr", "lightweight.sim=false"], &["kl", "align"], &["smlm", "mlm", "sim"]),
        (
            &["lightweight.generative=mlm", "lightweight.align=false", "lightweight.sim=false"],
            &["mlm"],
            &["kl", "smlm", "align", "sim"],
        ),
        (&["lightweight.generative=mlm+xtr"], &["mlm", "kl", "align", "sim"], &["smlm"]),
        (&["lightweight.generative=none"], &["align", "sim"], &["kl", "smlm", "mlm"]),
        (&["lightweight.align=false", "lightweight.sim=false"], &["kl"], &["align", "sim", "mlm"]),
    ];
    for (i, (sets, has, lacks)) in cases.iter().enumerate() {
        let mut args = vec!["--set", "train.max_steps=2", "--set", "train.eval_every=0"];
        for set in *sets {
            args.extend(["--set", set]);
        }
        let out = format!("case{i}");
        let o = s.train(&out, &args);
        assert!(o.status.success(), "{sets:?}: {}", stderr(&o));
        let step = lines(&s.run(&out)).into_iter().find(|v| v.get("loss").is_some()).unwrap();
        for t in *has {
            assert!(step[*t].as_f64().is_some_and(f64::is_finite), "{sets:?}: {t} missing in {step}");
        }
        for t in *lacks {
            assert!(step.get(*t).is_none(), "{sets:?}: {t} present in {step}");
        }
    }
    // No task at all, and a bad task name: config errors that say what to set.
    let o = s.train(
        "bad1",
        &["--set", "lightweight.generative=none", "--set", "lightweight.align=false", "--set", "lightweight.sim=false"],
    );
    assert!(!o.status.success());
    assert!(stderr(&o).contains("no training task"), "{}", stderr(&o));
    let o = s.train("bad2", &["--set", "lightweight.generative=tlm"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("tlm"), "{}", stderr(&o));
    let o = s.train("bad3", &["--set", "lightweight.heads=5"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("multiple of lightweight.heads"), "{}", stderr(&o));
    let o = s.train("bad4", &["--set", "lightweight.hidden=0"]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("lightweight.hidden (0) and lightweight.heads (4) must be at least 1"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn a_vocabulary_from_xsent_tokenizer_train_gets_mask_and_pad() {
    let s = setup();
    let text: String = corpus(300).iter().map(|(a, b)| format!("{a}\n{b}\n")).collect();
    let input = s.run("corpus.txt");
    std::fs::write(&input, text).unwrap();
    let tok = s.run("tok/tokenizer.json");
    let o = common::xsent()
        .args(["tokenizer", "train", "--vocab-size", "80", "--input"])
        .arg(&input)
        .arg("--output")
        .arg(&tok)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let given = tokenizers::Tokenizer::from_file(&tok).unwrap();
    assert!(given.token_to_id("<mask>").is_none());
    let set = format!("lightweight.tokenizer={:?}", tok.to_str().unwrap());
    let o = s.train("given", &["--set", &set, "--set", "train.max_steps=1", "--set", "train.eval_every=0"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let used = tokenizers::Tokenizer::from_file(s.run("given/final/tokenizer.json")).unwrap();
    assert_eq!(used.get_vocab_size(true), given.get_vocab_size(true) + 2, "<pad> and <mask> appended");
    let enc = |t: &tokenizers::Tokenizer| t.encode("house3 haus17", false).unwrap().get_ids().to_vec();
    assert_eq!(enc(&used), enc(&given), "the given pieces keep their ids");
}

/// The two-stage (gradient cache) step on shards equals one backward over the whole batch:
/// with no dropout and no masks (align + sim only) the RNG plays no part, so one shard of 16
/// and four of 4 must give the same losses, gradient norms and weights.
#[test]
fn sharded_coupled_step_equals_the_whole_batch() {
    let s = setup();
    let common = [
        "--set",
        "lightweight.generative=none",
        "--set",
        "lightweight.dropout=0.0",
        "--set",
        "train.max_steps=4",
        "--set",
        "train.eval_every=0",
    ];
    let mut runs: Vec<String> = Vec::new();
    for shard in ["16", "4"] {
        let out = format!("shard{shard}");
        let set = format!("train.shard_size={shard}");
        let mut args = common.to_vec();
        args.extend(["--set", &set]);
        // One vocabulary for both (see above).
        let tok = runs.first().map(|r| {
            format!("lightweight.tokenizer={:?}", s.run(&format!("{r}/init/tokenizer.json")).to_str().unwrap())
        });
        if let Some(t) = &tok {
            args.extend(["--set", t]);
        }
        let o = s.train(&out, &args);
        assert!(o.status.success(), "{}", stderr(&o));
        runs.push(out);
    }
    let (a, b) = (losses(&s.run(&runs[0])), losses(&s.run(&runs[1])));
    assert_eq!(a.len(), 4);
    for (x, y) in a.iter().zip(&b) {
        assert!((x.1 - y.1).abs() < 1e-4 * x.1.abs().max(1.0), "loss {x:?} vs {y:?}");
        assert!((x.2 - y.2).abs() < 1e-3 * x.2.max(1.0), "grad norm {x:?} vs {y:?}");
    }
    let (wa, wb) = (weights(&s.run(&format!("{}/final", runs[0]))), weights(&s.run(&format!("{}/final", runs[1]))));
    for (name, t) in &wa {
        let d =
            t.sub(&wb[name]).unwrap().abs().unwrap().flatten_all().unwrap().max(0).unwrap().to_scalar::<f32>().unwrap();
        assert!(d < 1e-4, "{name} differs by {d}");
    }
}

/// The gradient of the trainer's two-stage step (shards, coupled loss on a leaf copy, per-shard
/// backward) equals the gradient of the recipe's one-graph loss over the whole batch, with
/// dropout and masks on (each shard drawing from its own RNG, so the one-graph loss is built from
/// the same shards).
#[test]
fn gradient_cache_step_equals_one_backward() {
    use xsent::train::Recipe;
    let s = setup();
    let cfg = xsent::train::config::load(&s.config, &[]).unwrap();
    let xsent::train::RecipeConfig::Lightweight(lc) = &cfg.recipe else { panic!("{}", cfg.recipe) };
    let recipe = xsent::train::recipes::lightweight::Lightweight::new(&cfg, lc, &s.run("lib")).unwrap();
    let params = recipe.params();
    let batch: Vec<usize> = (0..12).collect();
    let shards: Vec<&[usize]> = batch.chunks(5).collect();
    let seeds = [11u64, 12, 13];
    let mb = xsent::train::shards::run_coupled(&recipe, &batch, &shards, &seeds, 1, &params).unwrap();
    // The same computation as one graph: each shard's forward with its seed, the coupled loss on
    // the concatenated (not detached) vectors.
    let mut sep = Vec::new();
    let mut vecs = Vec::new();
    for (sh, seed) in shards.iter().zip(seeds) {
        let mut rng =
            xsent::model::TrainContext::new(<xsent::model::encoder::Rng as rand::SeedableRng>::seed_from_u64(seed));
        let (l, v) = recipe.shard_forward(sh, &mut rng).unwrap();
        sep.push((l.total * (sh.len() as f64 / batch.len() as f64)).unwrap());
        vecs.push(v);
    }
    let c = recipe.coupled_loss(&batch, &candle_core::Tensor::cat(&vecs, 0).unwrap()).unwrap();
    let mut total = c.total;
    for t in sep {
        total = (total + t).unwrap();
    }
    let value = total.to_scalar::<f32>().unwrap() as f64;
    assert!((value - mb.loss).abs() < 1e-4 * value.abs().max(1.0), "{value} vs {}", mb.loss);
    let grads = total.backward().unwrap();
    let mut checked = 0;
    for (name, var) in &params.vars {
        let (Some(a), Some(b)) = (grads.get(var.as_tensor()), mb.grads.get(var.as_tensor())) else {
            panic!("{name}: no gradient in one of the two");
        };
        let scale = a.abs().unwrap().flatten_all().unwrap().max(0).unwrap().to_scalar::<f32>().unwrap().max(1e-6);
        let d = a.sub(b).unwrap().abs().unwrap().flatten_all().unwrap().max(0).unwrap().to_scalar::<f32>().unwrap();
        assert!(d <= 1e-4 * scale.max(1.0), "{name}: gradients differ by {d} (scale {scale})");
        checked += 1;
    }
    assert!(checked > 20, "every parameter has a gradient: {checked}");
}

#[test]
fn val_sts_scores_the_model_being_trained() {
    // The last validation's Spearman on scored pairs equals the one of the saved model's vectors.
    let s = setup();
    let pairs = common::scored_pairs(&corpus(31));
    let sts = s.run("pairs.sts.tsv");
    common::write_scored_pairs(&sts, &pairs);
    let o =
        s.train("sts", &["--set", "train.max_steps=4", "--set", &format!("train.val_sts={:?}", sts.to_str().unwrap())]);
    assert!(o.status.success(), "{}", stderr(&o));
    let last = lines(&s.run("sts")).into_iter().rfind(|v| v.get("val").is_some()).unwrap();
    let expected = common::model_spearman(&s.run("sts/final"), &pairs);
    assert_eq!(last["step"].as_u64(), Some(4));
    assert!((last["val"]["sts_spearman"].as_f64().unwrap() - expected).abs() < 1e-3, "{last} vs {expected}");
}
