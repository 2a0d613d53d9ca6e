//! The paraphrastic averaging models (seed 002): `xsent tokenizer train`, the averaging model
//! directory (save → load → embed), and the `sp` recipe through `xsent train` on synthetic
//! parallel data (mega-batch annealing as the trainer runs it, exact resume, final/ and the
//! untrained variant loading in `xsent embed`).

mod common;

use serde_json::Value;
use std::path::Path;
use std::process::Output;
use xsent::model::kinds::averaging::{AveragingModel, Segmenter, Units};
use xsent::model::kinds::vocab::SubwordModel;

fn corpus(n: usize) -> Vec<(String, String)> {
    common::word_pairs(n, 99)
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).to_string()
}

#[test]
fn tokenizer_train_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let text: String = corpus(300).iter().map(|(s, t)| format!("{s}\n{t}\n")).collect();
    let input = dir.path().join("corpus.txt");
    std::fs::write(&input, text).unwrap();
    for (model, out) in [("unigram", dir.path().join("uni")), ("bpe", dir.path().join("bpe/tok.json"))] {
        let o = common::xsent()
            .args(["tokenizer", "train", "--vocab-size", "80", "--model", model, "--input"])
            .arg(&input)
            .arg("--output")
            .arg(&out)
            .output()
            .unwrap();
        assert!(o.status.success(), "{model}: {}", stderr(&o));
        let path = if out.extension().is_some() { out.clone() } else { out.join("tokenizer.json") };
        let tok = tokenizers::Tokenizer::from_file(&path).unwrap();
        let v = tok.get_vocab_size(true);
        assert!(v > 10 && v <= 80, "{model}: vocabulary of {v}");
        let enc = tok.encode("house3 haus17 unseen", false).unwrap();
        assert!(!enc.get_ids().is_empty());
        assert!(enc.get_ids().iter().all(|&i| (i as usize) < v));
        // Pieces join back to the text (SentencePiece-style word boundaries).
        let back = tok.decode(enc.get_ids(), true).unwrap();
        assert!(back.contains("house3"), "{model}: decoded {back:?}");
    }
    // Bad input: a clear error naming the file.
    let o = common::xsent()
        .args(["tokenizer", "train", "--input", "/nonexistent/x.txt", "--output"])
        .arg(dir.path().join("z"))
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(stderr(&o).contains("/nonexistent/x.txt"), "{}", stderr(&o));
    assert!(!dir.path().join("z").exists(), "a failed read leaves no output folder");
    // A model's tokenizer is never replaced (its vectors would change): refused, left as it was.
    let model = dir.path().join("model");
    std::fs::create_dir_all(&model).unwrap();
    std::fs::write(model.join("config.json"), "{}").unwrap();
    std::fs::write(model.join("tokenizer.json"), "theirs").unwrap();
    let o = common::xsent()
        .args(["tokenizer", "train", "--vocab-size", "80", "--input"])
        .arg(&input)
        .arg("-o")
        .arg(&model)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("holds a model (config.json)"), "{}", stderr(&o));
    assert_eq!(std::fs::read_to_string(model.join("tokenizer.json")).unwrap(), "theirs");
    // Nor the vocabulary a run keeps for its resume (vocab/ beside the run's config.toml).
    let run = dir.path().join("run");
    std::fs::create_dir_all(run.join("vocab")).unwrap();
    std::fs::write(run.join("config.toml"), format!("{}recipe = \"sp\"\n", xsent::train::run_dir::RUN_CONFIG_HEADER))
        .unwrap();
    std::fs::write(run.join("vocab/tokenizer.json"), "the run's").unwrap();
    let o = common::xsent()
        .args(["tokenizer", "train", "--vocab-size", "80", "--input"])
        .arg(&input)
        .arg("-o")
        .arg(run.join("vocab"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("is inside the run directory of"), "{}", stderr(&o));
    assert_eq!(std::fs::read_to_string(run.join("vocab/tokenizer.json")).unwrap(), "the run's");
    // A file of another name in a model directory, or an earlier tokenizer of one's own, is
    // simply written.
    for out in [model.join("other.json"), dir.path().join("uni")] {
        let o = common::xsent()
            .args(["tokenizer", "train", "--vocab-size", "80", "--input"])
            .arg(&input)
            .arg("-o")
            .arg(&out)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}: {}", out.display(), stderr(&o));
    }
}

/// What `tokenizer train` would replace wrongly is kept (an outside probe): a model's files
/// through a link or under another name, a read-only file, and the earlier tokenizer when the
/// new one cannot be written; a large corpus is sampled to `--max-sentences`, reproducibly.
#[test]
fn tokenizer_train_replaces_only_what_it_may() {
    let dir = tempfile::tempdir().unwrap();
    let text: String = corpus(300).iter().map(|(s, t)| format!("{s}\n{t}\n")).collect();
    let input = dir.path().join("corpus.txt");
    std::fs::write(&input, text).unwrap();
    let train = |out: &Path, extra: &[&str]| {
        common::xsent()
            .args(["tokenizer", "train", "--vocab-size", "80", "--input"])
            .arg(&input)
            .arg("-o")
            .arg(out)
            .args(extra)
            .output()
            .unwrap()
    };
    let model = dir.path().join("model");
    std::fs::create_dir_all(&model).unwrap();
    std::fs::write(model.join("config.json"), "{}").unwrap();
    std::fs::write(model.join("tokenizer.json"), "theirs").unwrap();
    let link = dir.path().join("link.json");
    std::os::unix::fs::symlink(model.join("tokenizer.json"), &link).unwrap();
    // A hub snapshot: the model's files are links into blobs/ (the review: the check looked only
    // where the link led, and replaced the snapshot's tokenizer).
    let blobs = dir.path().join("blobs");
    let snapshot = dir.path().join("snapshot");
    std::fs::create_dir_all(&blobs).unwrap();
    std::fs::create_dir_all(&snapshot).unwrap();
    for (name, text) in [("config.json", "{}"), ("tokenizer.json", "the snapshot's")] {
        std::fs::write(blobs.join(format!("blob-{name}")), text).unwrap();
        std::os::unix::fs::symlink(blobs.join(format!("blob-{name}")), snapshot.join(name)).unwrap();
    }
    for (out, want) in [
        (link.clone(), "(a link to"),
        (model.join("config.json"), "whose config.json this would replace"),
        (snapshot.clone(), "holds a model (config.json) whose tokenizer.json"),
        (snapshot.join("tokenizer_config.json"), "whose tokenizer_config.json this would replace"),
    ] {
        let o = train(&out, &[]);
        assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
        assert!(stderr(&o).contains(want), "{want}: {}", stderr(&o));
    }
    assert_eq!(std::fs::read_to_string(model.join("tokenizer.json")).unwrap(), "theirs");
    assert_eq!(std::fs::read_to_string(model.join("config.json")).unwrap(), "{}");
    assert_eq!(std::fs::read_to_string(snapshot.join("tokenizer.json")).unwrap(), "the snapshot's");
    assert!(std::fs::symlink_metadata(snapshot.join("tokenizer.json")).unwrap().file_type().is_symlink());
    let o = train(&snapshot, &["--max-sentences", "0"]);
    assert!(stderr(&o).contains("--max-sentences"), "{}", stderr(&o));
    // A hard link to it is another name of one's own: written anew, the model's name untouched.
    let hard = dir.path().join("hard.json");
    std::fs::hard_link(model.join("tokenizer.json"), &hard).unwrap();
    let o = train(&hard, &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(std::fs::read_to_string(model.join("tokenizer.json")).unwrap(), "theirs");
    assert!(tokenizers::Tokenizer::from_file(&hard).is_ok());
    // A read-only file is refused.
    let ro = dir.path().join("ro.json");
    std::fs::write(&ro, "read-only").unwrap();
    let mut perm = std::fs::metadata(&ro).unwrap().permissions();
    perm.set_readonly(true);
    std::fs::set_permissions(&ro, perm).unwrap();
    let o = train(&ro, &[]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("is read-only"), "{}", stderr(&o));
    assert_eq!(std::fs::read_to_string(&ro).unwrap(), "read-only");
    // A write that fails (its temporary name is taken by a folder) keeps the earlier tokenizer.
    let earlier = std::fs::read(&hard).unwrap();
    std::fs::create_dir(dir.path().join(".hard.json.tmp")).unwrap();
    let o = train(&hard, &["--lowercase"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("cannot write"), "{}", stderr(&o));
    assert_eq!(std::fs::read(&hard).unwrap(), earlier);
    // Sampled to --max-sentences: said, and the same sample each time.
    let sampled: Vec<Vec<u8>> = (0..2)
        .map(|i| {
            let out = dir.path().join(format!("sampled{i}.json"));
            let o = train(&out, &["--max-sentences", "200"]);
            assert!(o.status.success(), "{}", stderr(&o));
            assert!(stderr(&o).contains("learning from 200 of the 600 lines"), "{}", stderr(&o));
            std::fs::read(&out).unwrap()
        })
        .collect();
    assert_eq!(sampled[0], sampled[1]);
    assert_ne!(sampled[0], std::fs::read(&hard).unwrap(), "a sample of a third learns another vocabulary");
}

#[test]
fn averaging_model_save_load_embed() {
    let dir = tempfile::tempdir().unwrap();
    let pairs = corpus(200);
    let texts: Vec<&str> = pairs.iter().flat_map(|(s, t)| [s.as_str(), t.as_str()]).collect();
    let probe = ["house1 house2 haus3", "", "something unseen", "HAUS5"];
    for units in [Units::Sp, Units::Word, Units::Trigram] {
        let seg = Segmenter::train(units, &texts, 60, SubwordModel::Unigram, true).unwrap();
        let v = seg.vocab_size();
        let table = AveragingModel::random_table(v, 8, 1.0, 5).unwrap();
        let d = dir.path().join(units.to_string());
        AveragingModel::save_parts(&d, &seg, 8, &table, false).unwrap();
        // The same vectors by hand: ids from the in-memory segmenter, mean of the rows, unit norm.
        let expected: Vec<Vec<f32>> = probe
            .iter()
            .map(|t| {
                let ids = seg.ids(t).unwrap();
                let mut row = vec![0f32; 8];
                for &i in &ids {
                    for k in 0..8 {
                        row[k] += table[i as usize * 8 + k] / ids.len() as f32;
                    }
                }
                let n = row.iter().map(|x| x * x).sum::<f32>().sqrt();
                if n > 0.0 {
                    row.iter_mut().for_each(|x| *x /= n);
                }
                row
            })
            .collect();
        let opts = xsent::model::LoadOptions::default();
        let m = xsent::model::load_embedder(d.to_str().unwrap(), &opts, None).unwrap();
        assert_eq!(m.dim(), 8);
        let got = m.embed(&probe, 2).unwrap();
        for (g, e) in got.iter().zip(&expected) {
            for (a, b) in g.iter().zip(e) {
                assert!((a - b).abs() < 1e-6, "{units}: {g:?} vs {e:?}");
            }
        }
        assert!(got[1].iter().all(|&x| x == 0.0), "{units}: the empty line has no units: a zero vector");
        assert!(got[0].iter().any(|&x| x != 0.0));
        // Through the CLI too.
        let lines = common::embed_cli(&d, &[], &probe);
        for (a, b) in lines[0].iter().zip(&expected[0]) {
            assert!((a - b).abs() < 1e-6);
        }
        // A text longer than max_text_bytes (--max-line-bytes) is averaged over its first
        // max_text_bytes bytes, cut at a character boundary, and counts as truncated: the cut
        // bounds the memory tokenising takes.
        let opts = xsent::model::LoadOptions { max_text_bytes: 21, ..Default::default() };
        let capped = xsent::model::load_embedder(d.to_str().unwrap(), &opts, None).unwrap();
        let long = "house1 house2 haus3 house4 haus5 house6";
        let wide = "éééééééééééééééé"; // 2 bytes each: byte 21 falls inside a character
        let e = capped.embed_checked(&[long, wide, "house1"], 2).unwrap();
        assert_eq!(e.truncated, [true, true, false], "{units}");
        assert_eq!(e.rows, m.embed(&[&long[..21], &wide[..20], "house1"], 2).unwrap(), "{units}");
    }
    // A damaged model directory: the error names the file.
    let d = dir.path().join("sp");
    // A model saved by an earlier version keeps its table in embeddings.safetensors.
    let before = common::embed_cli(&d, &[], &probe);
    std::fs::rename(d.join("model.safetensors"), d.join("embeddings.safetensors")).unwrap();
    assert_eq!(common::embed_cli(&d, &[], &probe), before);
    std::fs::remove_file(d.join("embeddings.safetensors")).unwrap();
    let e = xsent::model::load_embedder(d.to_str().unwrap(), &Default::default(), None).err().unwrap();
    assert!(format!("{e:#}").contains("model.safetensors"), "{e:#}");
    // sp and word units are sentence-transformers models too (StaticEmbedding + Normalize);
    // scripts/check-st.sh checks that they give the same vectors there.
    for (units, st) in [("sp", true), ("word", true), ("trigram", false)] {
        let modules = std::fs::read_to_string(dir.path().join(units).join("modules.json")).ok();
        assert_eq!(
            modules.as_deref().is_some_and(|m| m.contains("models.StaticEmbedding") && m.contains("models.Normalize")),
            st,
            "{units}: {modules:?}"
        );
    }
    // It has no prompts.
    let opts = xsent::model::LoadOptions { prompt_name: Some("query".into()), ..Default::default() };
    let e = xsent::model::load_embedder(d.to_str().unwrap(), &opts, None).err().unwrap();
    assert!(format!("{e:#}").contains("--prompt-name do not apply"), "{e:#}");
    // It is not a transformer encoder: a recipe that needs one says so.
    let e = xsent::SentenceEncoder::load(dir.path().join("word").to_str().unwrap(), &Default::default()).err().unwrap();
    assert!(
        format!("{e:#}").contains("is an xsent averaging model") && format!("{e:#}").contains("BERT/XLM-R"),
        "{e:#}"
    );
}

fn setup(units: &str) -> common::TrainSetup {
    common::TrainSetup::new(
        &format!(
            r#"recipe = "sp"
seed = 3
[sp]
units = "{units}"
vocab_size = 70
dim = 16
megabatch_max = 3
anneal_rate = 2
symmetric = true
[train]
max_steps = 12
batch_size = 8
log_every = 1
eval_every = 4
checkpoint_every = 4
keep_last = 3
[optim]
lr = 1e-2
schedule = "constant"
weight_decay = 0.0
[data]
val_size = 20
"#
        ),
        &corpus(240),
    )
}

/// Step lines of metrics.jsonl without timings.
fn losses(run: &Path) -> Vec<(u64, f64, f64, f64)> {
    common::metrics_lines(run)
        .into_iter()
        .filter(|v| v.get("loss").is_some())
        .map(|v| {
            (
                v["step"].as_u64().unwrap(),
                v["loss"].as_f64().unwrap(),
                v["grad_norm"].as_f64().unwrap(),
                v["megabatch"].as_f64().unwrap(),
            )
        })
        .collect()
}

fn table(model: &Path) -> Vec<f32> {
    let t = candle_core::safetensors::load(model.join("model.safetensors"), &candle_core::Device::Cpu).unwrap();
    t["embeddings"].flatten_all().unwrap().to_vec1().unwrap()
}

#[test]
fn sp_recipe_trains_resumes_exactly_and_embeds() {
    let s = setup("sp");
    let o = s.train("full", &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let full = losses(&s.run("full"));
    assert_eq!(full.len(), 12);
    // Mega-batch annealing as the trainer ran it: M = 1, 1, 2, 2, 3, 3, ... (anneal_rate 2, M_max 3).
    let m: Vec<f64> = full.iter().map(|r| r.3).collect();
    assert_eq!(m, vec![1.0, 1.0, 2.0, 2.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0]);
    assert!(full.iter().all(|r| r.1.is_finite() && r.2 > 0.0), "{full:?}");
    // Training moved the table away from its initialisation and helps retrieval.
    let val: Vec<f64> = std::fs::read_to_string(s.run("full").join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter_map(|v| v.get("val").map(|x| x["acc_mean"].as_f64().unwrap()))
        .collect();
    assert!(val.last().unwrap() > val.first().unwrap(), "validation accuracy {val:?}");

    // The learned vocabulary is kept in the run directory and is the model's.
    let vocab = s.run("full/vocab/tokenizer.json");
    let json = |p: &Path| -> Value { serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap() };
    assert_eq!(json(&vocab)["model"], json(&s.run("full/final/tokenizer.json"))["model"]);

    // With that vocabulary: 5 steps, stop (mid mega-batch: steps 5..7 are one of M = 3),
    // resume to 12: the same run.
    let tok = format!("sp.tokenizer={:?}", vocab.to_str().unwrap());
    let o = s.train("split", &["--stop-after", "5", "--set", &tok]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = common::xsent().args(["train", "--resume", "--out"]).arg(s.run("split")).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let split = losses(&s.run("split"));
    assert_eq!(split.len(), full.len());
    for (a, b) in full.iter().zip(&split) {
        assert_eq!(a.0, b.0);
        assert!((a.1 - b.1).abs() < 1e-6 && (a.2 - b.2).abs() < 1e-6, "step {}: {a:?} vs {b:?}", a.0);
    }
    let (ta, tb) = (table(&s.run("full/final")), table(&s.run("split/final")));
    assert!(ta.iter().zip(&tb).all(|(a, b)| (a - b).abs() < 1e-6), "final tables differ after resume");

    // A learned vocabulary survives an interruption: the resumed run reads it from vocab/.
    let o = s.train("learned", &["--stop-after", "3"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let before = json(&s.run("learned/vocab/tokenizer.json"));
    let o = common::xsent().args(["train", "--resume", "--out"]).arg(s.run("learned")).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("vocabulary from"), "{}", stderr(&o));
    assert_eq!(json(&s.run("learned/final/tokenizer.json"))["model"], before["model"]);

    // final/ is a model directory that `xsent embed` loads.
    let meta: Value = serde_json::from_str(&std::fs::read_to_string(s.run("full/final/xsent.json")).unwrap()).unwrap();
    assert_eq!(meta["kind"], "averaging");
    assert_eq!(meta["trained"], true);
    let rows = common::embed_cli(&s.run("full/final"), &[], &["house1 house2", "haus1 haus2"]);
    assert_eq!(rows[0].len(), 16);
    // Validation on scored pairs (`train.val_sts`) reads the live table: at the last step it
    // equals the Spearman of the saved model's vectors.
    let pairs = common::scored_pairs(&corpus(31));
    let sts = s.run("pairs.sts.tsv");
    common::write_scored_pairs(&sts, &pairs);
    let o = s.train("sts", &["--set", &tok, "--set", &format!("train.val_sts={:?}", sts.to_str().unwrap())]);
    assert!(o.status.success(), "{}", stderr(&o));
    let last: Value = std::fs::read_to_string(s.run("sts/metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .rfind(|v| v.get("val").is_some())
        .unwrap();
    let expected = common::model_spearman(&s.run("sts/final"), &pairs);
    assert_eq!(last["step"].as_u64(), Some(12));
    assert!((last["val"]["sts_spearman"].as_f64().unwrap() - expected).abs() < 1e-3, "{last} vs {expected}");
}

#[test]
fn random_variants_skip_training() {
    for units in ["sp", "trigram"] {
        let s = setup(units);
        let o = s.train("random", &["--set", "sp.random=true"]);
        assert!(o.status.success(), "{}", stderr(&o));
        assert!(!s.run("random/metrics.jsonl").exists(), "no training step");
        let meta: Value =
            serde_json::from_str(&std::fs::read_to_string(s.run("random/final/xsent.json")).unwrap()).unwrap();
        assert_eq!(meta["trained"], false);
        assert_eq!(meta["units"], units);
        // N(0, 1) rows.
        let t = table(&s.run("random/final"));
        let var = t.iter().map(|x| (x * x) as f64).sum::<f64>() / t.len() as f64;
        assert!((var - 1.0).abs() < 0.2, "variance {var}");
        let m =
            xsent::model::load_embedder(s.run("random/final").to_str().unwrap(), &Default::default(), None).unwrap();
        assert_eq!(m.embed(&["house1 haus2"], 4).unwrap()[0].len(), 16);
        if units == "sp" {
            // sp.init_std scales the same draws (configs/sp.toml uses 0.1); same vocabulary, same seed.
            let tok = s.run("random/final/tokenizer.json");
            let o = s.train(
                "random01",
                &[
                    "--set",
                    "sp.random=true",
                    "--set",
                    "sp.init_std=0.1",
                    "--set",
                    &format!("sp.tokenizer={}", tok.display()),
                ],
            );
            assert!(o.status.success(), "{}", stderr(&o));
            let t01 = table(&s.run("random01/final"));
            assert_eq!(t01.len(), t.len());
            for (a, b) in t01.iter().zip(&t) {
                assert!((a - 0.1 * b).abs() <= 1e-6 * b.abs().max(1.0), "{a} vs 0.1 × {b}");
            }
        }
    }
}

#[test]
fn sp_config_errors() {
    let s = setup("sp");
    let o = s.train("bad", &["--set", "sp.dropout=1.5"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("sp.dropout"), "{}", stderr(&o));
    let o = s.train("bad2", &["--set", "sp.unitz=\"word\""]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("unitz"), "{}", stderr(&o));
    let o = s.train("bad3", &["--set", "sp.units=\"trigram\"", "--set", "sp.tokenizer=\"x.json\""]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("sp.tokenizer"), "{}", stderr(&o));
    // Finite as f64 but infinite as the f32 the table is drawn in: an error, not a panic.
    let o = s.train("bad4", &["--set", "sp.init_std=1e39"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("sp.init_std") && !stderr(&o).contains("panicked"), "{}", stderr(&o));
    // Sizes beyond the data (or beyond counting): errors that say which key, not a panic.
    for (name, set, want) in [
        ("bad5", "sp.megabatch_max=4611686018427387904", "sp.megabatch_max"),
        ("bad6", "train.batch_size=4611686018427387904", "train.batch_size"),
    ] {
        let o = s.train(name, &["--set", set, "--set", "sp.anneal_rate=0"]);
        assert_eq!(o.status.code(), Some(1), "{set}: {}", stderr(&o));
        assert!(
            stderr(&o).contains(want) && stderr(&o).contains("larger than the") && !stderr(&o).contains("panicked"),
            "{set}: {}",
            stderr(&o)
        );
    }
    // A mega-batch that the annealing would grow past the data later in the run is refused
    // before the first step (220 training pairs hold at most 27 batches of 8), not when it is
    // reached.
    let o = s.train("bad7", &["--set", "sp.megabatch_max=100", "--set", "train.max_steps=400"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("set sp.megabatch_max to at most 27") && !s.run("bad7/checkpoints").exists(),
        "{}",
        stderr(&o)
    );
    let o =
        s.train("ok7", &["--set", "sp.megabatch_max=27", "--set", "sp.anneal_rate=0", "--set", "train.max_steps=1"]);
    assert!(o.status.success(), "{}", stderr(&o));
    // A table that cannot be allocated: an error naming the keys, not an abort.
    let o = s.train("bad8", &["--set", "sp.dim=1000000000000"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("sp.dim") && stderr(&o).contains("cannot be allocated"), "{}", stderr(&o));
    let o = s.train("bad9", &["--set", "sp.dropout_kind=\"pieces\""]);
    assert!(!o.status.success() && stderr(&o).contains("dropout_kind"), "{}", stderr(&o));
    // Epochs whose steps a u64 cannot count: wrapped to a run of 4 steps (or none, saving an
    // untrained model as final/) before.
    let o = s.train("bad10", &["--set", "train.max_steps=0", "--set", "train.epochs=4611686018427387905"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("train.epochs = 4611686018427387905 passes of"), "{}", stderr(&o));
    assert!(!s.run("bad10/final").exists());
}

/// A run of 9e18 steps starts at once: the check of its mega-batches walked every micro-batch
/// before the first step (seconds per 1e9, so for ever). `--stop-after 1` ends it after one step.
#[test]
fn a_very_long_run_starts_at_once() {
    let s = setup("word");
    let mut child = common::xsent()
        .args(["train", "--config"])
        .arg(&s.config)
        .arg("--out")
        .arg(s.run("long"))
        .args(["--set", "train.max_steps=9000000000000000000", "--stop-after", "1"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > std::time::Duration::from_secs(120) {
            child.kill().unwrap();
            panic!("a run of 9e18 steps did not get past its first step in 120 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(s.run("long/checkpoints/step-1").exists(), "{}", stderr(&o));
}

/// The same text gives the same unigram tokenizer.json every time (the `tokenizers` trainer
/// orders its words and its re-added characters by hash, a new order in every run). Real text
/// with rare characters (XNLI in six scripts) has both kinds of ties: pieces of equal score, and
/// characters the EM steps dropped that the trainer adds back with scores in hash order.
#[test]
fn unigram_vocabulary_is_reproducible() {
    let mut texts = Vec::new();
    for lang in ["en", "de", "zh", "ar", "th", "hi"] {
        let path = common::data().join(format!("xnli/dev-{lang}.tsv"));
        let t = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        texts.extend(t.lines().take(1500).map(|l| l.split('\t').next().unwrap().to_string()));
    }
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let train = || {
        xsent::model::kinds::vocab::train_subword(&refs, SubwordModel::Unigram, 6000, false)
            .unwrap()
            .to_string(false)
            .unwrap()
    };
    let first = train();
    for _ in 0..2 {
        assert!(train() == first, "two trainings on the same text gave different tokenizer.json");
    }
    // The re-added characters are there: single characters scored m, m + 1e-4, m + 2e-4, … in
    // character order.
    let v: Value = serde_json::from_str(&first).unwrap();
    let singles: Vec<(String, f64)> = v["model"]["vocab"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p[0].as_str().unwrap().to_string(), p[1].as_f64().unwrap()))
        .filter(|(p, _)| p.chars().count() == 1)
        .collect();
    // The longest such run, over the candidates for m.
    let mut run: Vec<String> = Vec::new();
    for (c0, m) in &singles {
        let (mut here, mut penalty) = (vec![c0.clone()], 0.0001);
        while let Some((c, _)) = singles.iter().find(|(_, s)| *s == m + penalty) {
            here.push(c.clone());
            penalty += 0.0001;
        }
        if here.len() > run.len() {
            run = here;
        }
    }
    assert!(run.len() > 10, "expected many re-added characters, found {run:?}");
    assert!(run.windows(2).all(|w| w[0] < w[1]), "re-added characters not in character order: {run:?}");
}
