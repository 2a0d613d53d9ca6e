//! The DuEAM recipe through `xsent train`, on the tiny fixture checkpoints (a word-level
//! tokenizer is written beside them; tiny-bert is the anchor, tiny-xlm-roberta the learner) and
//! a synthetic two-language "XNLI": weakly supervised and unsupervised pairs, the loss switches,
//! the Sinkhorn solver and its fallback to the exact one, raw token vectors, exact resume,
//! validation on held-out aligned files, the final model directory and config errors.

mod common;

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Output;

struct Setup {
    dir: tempfile::TempDir,
    config: PathBuf,
}

fn lcg(x: &mut u64) -> u64 {
    *x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    *x >> 33
}

/// A sentence of 3..8 words and its "translation" (same word ids, other vocabulary).
fn sentence(x: &mut u64, en: &[String], de: &[String]) -> (String, String) {
    let len = 3 + lcg(x) as usize % 6;
    let ids: Vec<usize> = (0..len).map(|_| lcg(x) as usize % en.len()).collect();
    (
        ids.iter().map(|&i| en[i].as_str()).collect::<Vec<_>>().join(" "),
        ids.iter().map(|&i| de[i].as_str()).collect::<Vec<_>>().join(" "),
    )
}

/// Synthetic XNLI (`dev-en.tsv`, `dev-de.tsv`, 40 row-aligned premise/hypothesis rows), held-out
/// aligned validation files, the two tiny models and a DuEAM config.
fn setup(section_extra: &str, extra: &str) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let en: Vec<String> = (0..60).map(|i| format!("e{i}")).collect();
    let de: Vec<String> = (0..60).map(|i| format!("d{i}")).collect();
    let words: Vec<String> = en.iter().chain(&de).cloned().collect();
    let anchor = common::tiny_model("tiny-bert", dir.path(), &words);
    let learner = common::tiny_model("tiny-xlm-roberta", dir.path(), &words);
    let xnli = dir.path().join("xnli");
    std::fs::create_dir_all(&xnli).unwrap();
    let mut x: u64 = 12345;
    let (mut fe, mut fd) = (String::new(), String::new());
    for _ in 0..40 {
        let (pe, pd) = sentence(&mut x, &en, &de);
        let (he, hd) = sentence(&mut x, &en, &de);
        fe.push_str(&format!("{pe}\t{he}\tneutral\n"));
        fd.push_str(&format!("{pd}\t{hd}\tneutral\n"));
    }
    std::fs::write(xnli.join("dev-en.tsv"), fe).unwrap();
    std::fs::write(xnli.join("dev-de.tsv"), fd).unwrap();
    let (mut ve, mut vd) = (String::new(), String::new());
    for _ in 0..30 {
        let (e, d) = sentence(&mut x, &en, &de);
        ve.push_str(&format!("{e}\n"));
        vd.push_str(&format!("{d}\n"));
    }
    std::fs::write(dir.path().join("val.en"), ve).unwrap();
    std::fs::write(dir.path().join("val.de"), vd).unwrap();
    let config = dir.path().join("tiny.toml");
    std::fs::write(
        &config,
        format!(
            r#"recipe = "dueam"
seed = 7
[dueam]
anchor = "{anchor}"
learner = "{learner}"
max_length = 16
pairs = "weak"
xnli_dir = "{xnli}"
splits = ["dev"]
langs = ["en", "de"]
{section_extra}
[[dueam.val_sources]]
kind = "aligned"
src = "{dir}/val.en"
tgt = "{dir}/val.de"
src_lang = "en"
tgt_lang = "de"
[train]
max_steps = 6
batch_size = 8
shard_size = 4
log_every = 1
eval_every = 3
checkpoint_every = 3
keep_last = 2
[optim]
lr = 1e-3
warmup_steps = 2
{extra}"#,
            anchor = anchor.display(),
            learner = learner.display(),
            xnli = xnli.display(),
            dir = dir.path().display(),
        ),
    )
    .unwrap();
    Setup { dir, config }
}

impl Setup {
    fn train(&self, args: &[&str]) -> Output {
        common::xsent()
            .arg("train")
            .arg("--config")
            .arg(&self.config)
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
    common::metrics_lines(run)
}

fn steps(run: &Path) -> Vec<Value> {
    metrics(run).into_iter().filter(|m| m.get("loss").is_some()).collect()
}

#[test]
fn weakly_supervised_run_logs_both_terms_validates_and_saves_a_loadable_model() {
    let s = setup("", "");
    let run = s.run_dir("run");
    let o = s.train(&["--out", run.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    // 40 rows × (2 monolingual + 2 cross-lingual) pairs.
    assert!(stderr(&o).contains("160 training pairs (80 monolingual, 80 cross-lingual)"), "{}", stderr(&o));
    let st = steps(&run);
    assert_eq!(st.len(), 6);
    let lambda = 0.003;
    for m in &st {
        let (l_a, l_b, loss) = (m["l_a"].as_f64().unwrap(), m["l_b"].as_f64().unwrap(), m["loss"].as_f64().unwrap());
        // exp(|·|) of a difference of two numbers in (0, 1]: L_A ∈ [1, e).
        assert!((1.0..std::f64::consts::E).contains(&l_a), "{m}");
        assert!((-1.0..=1.0).contains(&l_b), "{m}");
        assert!((loss - (l_a - lambda * l_b)).abs() < 1e-5, "L = L_A − λ·L_B: {m}");
        assert!(m["d_wmd"].as_f64().unwrap() > 0.0 && m["d_euc"].as_f64().unwrap() > 0.0, "{m}");
    }
    assert!(st.windows(2).any(|w| w[0]["loss"] != w[1]["loss"]), "the learner changes");
    let all = metrics(&run);
    let vals: Vec<&Value> = all.iter().filter(|m| m.get("val").is_some()).collect();
    assert_eq!(vals.len(), 3, "before the first step, at step 3 and at the end");
    for v in &vals {
        let v = &v["val"];
        let a = v["acc_en-de"].as_f64().unwrap();
        assert!(
            (a - (v["acc_en-de_src2tgt"].as_f64().unwrap() + v["acc_en-de_tgt2src"].as_f64().unwrap()) / 2.0).abs()
                < 1e-9
        );
        assert_eq!(v["acc_mean"].as_f64().unwrap(), a, "one validation set");
        assert!((0.0..=100.0).contains(&a));
    }
    assert!(run.join("best/model.safetensors").is_file() && run.join("best/xsent-best.json").is_file());
    // The learner is a normal model directory: mean pooling, no Normalize module.
    let fin = run.join("final");
    let pooling: Value =
        serde_json::from_str(&std::fs::read_to_string(fin.join("1_Pooling/config.json")).unwrap()).unwrap();
    assert_eq!(pooling["pooling_mode_mean_tokens"], Value::Bool(true));
    assert!(!std::fs::read_to_string(fin.join("modules.json")).unwrap().contains("Normalize"));
    let rows = common::embed_cli(&fin, &["--no-normalize"], &["e1 e2 e3", "d1 d2 d3"]);
    let norm = rows[0].iter().map(|x| x * x).sum::<f32>().sqrt();
    assert!((norm - 1.0).abs() > 1e-3, "unnormalised mean pooling: norm {norm}");
}

#[test]
fn pairs_with_a_sentence_the_anchor_gives_no_token_are_left_out_before_training() {
    // An anchor whose normaliser drops control characters (BERT's clean_text): a hypothesis made
    // of one such character has no token once [CLS] and [SEP] are left out, and its WMD is
    // undefined. The pairs it is in are left out when the data is built, not met midway.
    let s = setup("", "");
    let tok = s.dir.path().join("tiny-bert/tokenizer.json");
    let mut t: Value = serde_json::from_str(&std::fs::read_to_string(&tok).unwrap()).unwrap();
    t["normalizer"] = serde_json::json!({"type": "BertNormalizer", "clean_text": true, "handle_chinese_chars": false, "strip_accents": null, "lowercase": false});
    std::fs::write(&tok, t.to_string()).unwrap();
    for lang in ["en", "de"] {
        let f = s.dir.path().join(format!("xnli/dev-{lang}.tsv"));
        let text = std::fs::read_to_string(&f).unwrap();
        let mut rows: Vec<String> = text.lines().map(String::from).collect();
        let cols: Vec<&str> = rows[5].split('\t').collect();
        rows[5] = format!("{}\t\u{1}\t{}", cols[0], cols[2]);
        std::fs::write(&f, rows.join("\n") + "\n").unwrap();
    }
    let run = s.run_dir("run");
    let o = s.train(&["--out", run.to_str().unwrap(), "--set", "train.batch_size=32", "--set", "train.max_steps=8"]);
    assert!(o.status.success(), "{}", stderr(&o));
    // Row 5's hypothesis is now the same text in both languages, so its cross-lingual pairs
    // repeat its monolingual ones (kept once, as monolingual: 158 pairs, 80 of them
    // monolingual), and the two left, with the English and the German premise, are left out;
    // the summary counts the pairs that are trained on.
    assert!(
        stderr(&o).contains("left out 2 of the 158 pairs: 1 sentence(s) give the anchor no token of their own"),
        "{}",
        stderr(&o)
    );
    assert!(stderr(&o).contains("156 training pairs (78 monolingual, 78 cross-lingual)"), "{}", stderr(&o));
    assert_eq!(steps(&run).len(), 8, "every step trained (each pair seen at least once)");
}

#[test]
fn sinkhorn_and_the_token_vector_switches_train() {
    let s = setup("", "");
    let short = ["--set", "train.max_steps=2", "--set", "train.eval_at_start=false"];
    let run = |name: &str, args: &[&str]| {
        let dir = s.run_dir(name);
        let o = s.train(&[&["--out", dir.to_str().unwrap()][..], &short, args].concat());
        assert!(o.status.success(), "{name}: {}", stderr(&o));
        let st = steps(&dir);
        assert_eq!(st.len(), 2, "{name}");
        for m in &st {
            for k in ["loss", "l_a", "l_b", "d_wmd", "d_euc"] {
                assert!(m[k].as_f64().unwrap().is_finite(), "{name}: {k} in {m}");
            }
            assert!(m["d_wmd"].as_f64().unwrap() > 0.0, "{name}: {m}");
        }
        (st, stderr(&o))
    };
    let d_wmd = |st: &[Value]| st.iter().map(|m| m["d_wmd"].as_f64().unwrap()).collect::<Vec<_>>();
    let (exact, _) = run("exact", &[]);
    // Sinkhorn with its defaults: the same batches, WMDs a little above the exact ones.
    let (sk, err) = run("sinkhorn", &["--set", "dueam.wmd_solver=\"sinkhorn\""]);
    assert!(!err.contains("did not converge"), "{err}");
    for (a, e) in d_wmd(&sk).iter().zip(d_wmd(&exact)) {
        assert!(*a >= e * (1.0 - 1e-4) && *a <= e * 1.003, "Sinkhorn {a} vs exact {e}");
    }
    // Sinkhorn that cannot converge: every pair gets its exact WMD, said once, and the run goes on.
    let (fb, err) = run(
        "fallback",
        &[
            "--set",
            "dueam.wmd_solver=\"sinkhorn\"",
            "--set",
            "dueam.sinkhorn_max_iter=1",
            "--set",
            "dueam.sinkhorn_tol=1e-12",
        ],
    );
    assert_eq!(err.matches("Sinkhorn did not converge in 1 iterations").count(), 1, "{err}");
    assert!(err.contains("gets the exact WMD instead"), "{err}");
    for (a, e) in d_wmd(&fb).iter().zip(d_wmd(&exact)) {
        assert!((a - e).abs() <= 1e-12 * e, "fallback {a} vs exact {e}");
    }
    // Raw token vectors with [CLS] and [SEP]: other distances, still a finite loss.
    let (raw, _) = run("raw", &["--set", "dueam.wmd_normalize=false", "--set", "dueam.wmd_skip_special=false"]);
    assert!(
        d_wmd(&raw).iter().zip(d_wmd(&exact)).all(|(a, e)| (a - e).abs() > 1e-3 * e),
        "{:?} vs {:?}",
        d_wmd(&raw),
        d_wmd(&exact)
    );
}

#[test]
fn loss_switches_train_one_term_only() {
    let s = setup("loss = \"wmd\"", "");
    let run = s.run_dir("wmd");
    let o =
        s.train(&["--out", run.to_str().unwrap(), "--set", "train.max_steps=2", "--set", "train.eval_at_start=false"]);
    assert!(o.status.success(), "{}", stderr(&o));
    for m in steps(&run) {
        assert!(m.get("l_b").is_none(), "{m}");
        assert!((m["loss"].as_f64().unwrap() - m["l_a"].as_f64().unwrap()).abs() < 1e-6, "{m}");
    }
    let run = s.run_dir("cos");
    let o = s.train(&[
        "--out",
        run.to_str().unwrap(),
        "--set",
        "train.max_steps=2",
        "--set",
        "train.eval_at_start=false",
        "--set",
        "dueam.loss=cos",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    for m in steps(&run) {
        assert!(m.get("l_a").is_none() && m.get("anchor_ms_per_pair").is_none(), "no anchor work: {m}");
        assert!((m["loss"].as_f64().unwrap() + m["l_b"].as_f64().unwrap()).abs() < 1e-6, "{m}");
    }
    // λ scales the cosine term of the full loss.
    let run = s.run_dir("lambda");
    let o = s.train(&[
        "--out",
        run.to_str().unwrap(),
        "--set",
        "train.max_steps=1",
        "--set",
        "train.eval_at_start=false",
        "--set",
        "dueam.loss=both",
        "--set",
        "dueam.lambda=0.5",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let m = &steps(&run)[0];
    assert!(
        (m["loss"].as_f64().unwrap() - (m["l_a"].as_f64().unwrap() - 0.5 * m["l_b"].as_f64().unwrap())).abs() < 1e-5,
        "{m}"
    );
}

#[test]
fn normalised_learner_puts_unit_vectors_into_the_loss_and_the_model() {
    let s = setup("learner_normalize = true", "");
    let run = s.run_dir("norm");
    // One pair per step: d_euc and l_b are then the pair's own distance and cosine.
    let o = s.train(&[
        "--out",
        run.to_str().unwrap(),
        "--set",
        "train.max_steps=3",
        "--set",
        "train.batch_size=1",
        "--set",
        "train.eval_at_start=false",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    for m in steps(&run) {
        let (d, cos) = (m["d_euc"].as_f64().unwrap(), m["l_b"].as_f64().unwrap());
        assert!((d * d - (2.0 - 2.0 * cos)).abs() < 1e-4, "‖s′ − t′‖² = 2 − 2 cos for unit vectors: {m}");
    }
    let fin = run.join("final");
    assert!(std::fs::read_to_string(fin.join("modules.json")).unwrap().contains("Normalize"));
    assert_eq!(common::embed_cli(&fin, &[], &["e1 e2 e3"])[0].len(), 32);
}

#[test]
fn unsupervised_pairs_and_exact_resume() {
    let s = setup("unsup_pairs = 100", "");
    let unsup = ["--set", "dueam.pairs=unsup"];
    let full = s.run_dir("full");
    let o = s.train(&[&["--out", full.to_str().unwrap()][..], &unsup].concat());
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("100 training pairs"), "{}", stderr(&o));
    let split = s.run_dir("split");
    let o = s.train(&[&["--out", split.to_str().unwrap(), "--stop-after", "3"][..], &unsup].concat());
    assert!(o.status.success(), "{}", stderr(&o));
    let o = s.train(&[&["--out", split.to_str().unwrap(), "--resume"][..], &unsup].concat());
    assert!(o.status.success(), "{}", stderr(&o));
    let (a, b) = (steps(&full), steps(&split));
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(&b) {
        for k in ["loss", "l_a", "l_b", "d_wmd", "d_euc", "grad_norm"] {
            let (u, v) = (x[k].as_f64().unwrap(), y[k].as_f64().unwrap());
            assert!((u - v).abs() <= 1e-6 * u.abs().max(1.0), "step {}: {k} {u} vs {v}", x["step"]);
        }
    }
}

#[test]
fn config_errors_name_the_problem() {
    let s = setup("", "");
    let run = s.run_dir("bad");
    let cases: [(&[&str], &str); 6] = [
        (&["--set", "dueam.lossy=1"], "lossy"),
        (&["--set", "dueam.loss=\"neither\""], "neither"),
        (&["--set", "dueam.val_sources=[]"], "dueam.val_sources is empty"),
        (&["--set", "dueam.langs=[\"en\", \"xx\"]"], "dev-xx.tsv does not exist"),
        (&["--set", "dueam.wmd_layer=9"], "dueam.wmd_layer = 9"),
        (&["--set", "data.sources=[{kind = \"tsv\", path = \"p.tsv\"}]"], "remove [[data.sources]]"),
    ];
    for (args, want) in cases {
        let mut a = vec!["--out", run.to_str().unwrap()];
        a.extend_from_slice(args);
        let o = s.train(&a);
        assert!(!o.status.success(), "{args:?} should fail");
        assert!(stderr(&o).contains(want), "{args:?}: {}", stderr(&o));
    }
    let o = common::xsent()
        .args(["train", "--config"])
        .arg(&s.config)
        .args(["--set", "recipe=nope", "--out", run.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(stderr(&o).contains("distill, disentangle, dueam, lightweight, sp"), "{}", stderr(&o));
}

#[test]
fn anchor_token_embeddings_are_the_hidden_states_without_specials_and_padding() {
    use xsent::model::{LoadOptions, Mode, SentenceEncoder};
    let dir = tempfile::tempdir().unwrap();
    let words: Vec<String> = (0..10).map(|i| format!("e{i}")).collect();
    let m = common::tiny_model("tiny-bert", dir.path(), &words);
    let enc = SentenceEncoder::load(m.to_str().unwrap(), &LoadOptions::default()).unwrap();
    let h = enc.encoder.hidden_size();
    let texts = ["e1 e2 e3", "e4"];
    // Batched together, so "e4" is padded; its cloud must not contain the padding.
    let bare = enc.token_embeddings(&texts, None, true, 2).unwrap();
    let all = enc.token_embeddings(&texts, None, false, 2).unwrap();
    assert_eq!((bare[0].len(), bare[1].len()), (3 * h, h));
    assert_eq!((all[0].len(), all[1].len()), (5 * h, 3 * h), "[CLS] … [SEP]");
    for (i, t) in texts.iter().enumerate() {
        let e = enc.tokenize(&[*t]).unwrap();
        let b = enc.collate(&[&e[0]]).unwrap();
        let want: Vec<f32> = enc.hidden_states(&b, &mut Mode::Infer).unwrap().flatten_all().unwrap().to_vec1().unwrap();
        assert_eq!(want.len(), all[i].len());
        for (x, y) in want.iter().zip(&all[i]) {
            assert!((x - y).abs() < 1e-5, "{t}: {x} vs {y}");
        }
        assert_eq!(&all[i][h..all[i].len() - h], &bare[i][..], "specials left out");
    }
    assert_eq!(enc.token_counts(&texts, true).unwrap(), [3, 1]);
    assert_eq!(enc.token_counts(&texts, false).unwrap(), [5, 3]);
    // A prefix (an instruction such as "query: ") is not part of the sentence: its tokens are
    // left out of the cloud too, specials or not.
    let prefixed = SentenceEncoder::load(
        m.to_str().unwrap(),
        &LoadOptions { prefix: Some("e9 e8 ".into()), ..Default::default() },
    )
    .unwrap();
    assert_eq!(prefixed.token_counts(&texts, true).unwrap(), [3, 1]);
    assert_eq!(prefixed.token_counts(&texts, false).unwrap(), [5, 3]);
    let with_prefix = prefixed.token_embeddings(&texts, None, false, 2).unwrap();
    assert_eq!((with_prefix[0].len(), with_prefix[1].len()), (5 * h, 3 * h));
    let e = prefixed.tokenize(&[texts[0]]).unwrap();
    let b = prefixed.collate(&[&e[0]]).unwrap();
    let hs: Vec<f32> = prefixed.hidden_states(&b, &mut Mode::Infer).unwrap().flatten_all().unwrap().to_vec1().unwrap();
    assert_eq!(hs.len(), 7 * h, "[CLS] e9 e8 e1 e2 e3 [SEP]");
    // (Batched with a shorter text: equal to rounding.)
    let close = |a: &[f32], b: &[f32]| a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-5);
    assert!(close(&with_prefix[0][..h], &hs[..h]), "[CLS] kept");
    assert!(close(&with_prefix[0][h..], &hs[3 * h..]), "e9 e8 left out");
    let first = enc.token_embeddings(&texts, Some(0), true, 2).unwrap();
    assert_eq!(first[0].len(), 3 * h);
    assert_ne!(first[0], bare[0], "layer 0 is the embedding output");
    assert!(enc.token_embeddings(&texts, Some(3), true, 2).is_err(), "the fixture has 2 layers");
}

#[test]
fn val_sts_scores_the_learner_being_trained() {
    // Scored pairs over the val sentences (translations score 5, shifted pairs 0-4): the last
    // validation's Spearman equals the one of the saved learner's vectors.
    let s = setup("", "");
    let en: Vec<String> =
        std::fs::read_to_string(s.dir.path().join("val.en")).unwrap().lines().map(str::to_string).collect();
    let de: Vec<String> =
        std::fs::read_to_string(s.dir.path().join("val.de")).unwrap().lines().map(str::to_string).collect();
    let pairs: Vec<(String, String, f64)> = (0..20)
        .map(|i| {
            if i % 2 == 0 {
                (en[i].clone(), de[i].clone(), 5.0)
            } else {
                (en[i].clone(), de[(i + 7) % 20].clone(), (i % 5) as f64)
            }
        })
        .collect();
    let sts = s.dir.path().join("pairs.sts.tsv");
    common::write_scored_pairs(&sts, &pairs);
    let run = s.run_dir("sts");
    let o = s.train(&["--out", run.to_str().unwrap(), "--set", &format!("train.val_sts={:?}", sts.to_str().unwrap())]);
    assert!(o.status.success(), "{}", stderr(&o));
    let last = metrics(&run).into_iter().rfind(|v| v.get("val").is_some()).unwrap();
    let expected = common::model_spearman(&run.join("final"), &pairs);
    assert_eq!(last["step"].as_u64(), Some(6));
    assert!((last["val"]["sts_spearman"].as_f64().unwrap() - expected).abs() < 1e-3, "{last} vs {expected}");
}
