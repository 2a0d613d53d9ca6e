//! `xsent eval sts`: e5-small reproduces sentence-transformers' numbers with the same protocol,
//! and bad data gives errors that name files and counts.

mod common;

use std::path::Path;
use xsent::data::sts::read_sts2017;

#[test]
fn e5_small_reproduces_reference_numbers() {
    let (table, r) = common::eval_report([
        "sts",
        "--model",
        &common::e5_small(),
        "--prefix",
        "query: ",
        "--data-dir",
        &common::data_arg(),
    ]);
    assert!(table.contains("| en-en | 250 |") && table.contains("Language bias"), "{table}");
    assert_eq!(r["prefix"], "query: ");
    assert!(r["date"].as_str().unwrap().ends_with('Z') && r["seconds"].as_f64().unwrap() > 0.0);
    // Measured with sentence-transformers and the same protocol (issue 3).
    let want = [
        ("en-en", 86.56),
        ("es-es", 85.70),
        ("ar-ar", 73.90),
        ("es-en", 72.96),
        ("ar-en", 57.89),
        ("es-en-wmt", 1.51),
        ("en-de", 76.02),
    ];
    let results = r["results"].as_array().unwrap();
    assert_eq!(results.len(), want.len());
    for (lang, score) in want {
        let e = results.iter().find(|e| e["language"] == lang).unwrap_or_else(|| panic!("no {lang}"));
        assert_eq!(e["task"], "sts17");
        let got = e["main_score"].as_f64().unwrap();
        assert!((got - score).abs() <= 0.1, "{lang}: {got} vs {score}");
        assert_eq!(got, e["scores"]["spearman"].as_f64().unwrap());
        // The bootstrap interval holds the score; on 250 pairs it is a few points wide.
        let ci: Vec<f64> =
            e["scores"]["spearman_ci95"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
        assert!(ci[0] < got && got < ci[1] && (1.0..30.0).contains(&(ci[1] - ci[0])), "{lang}: {got} {ci:?}");
        assert_eq!(e["items"]["sim"].as_array().unwrap().len(), 250);
    }
    assert!(table.contains("| en-en | 250 | 86.5") && table.contains("95 % CI: percentile bootstrap"), "{table}");
    // Seed 003 §7 pools its multilingual STS set, which has no WMT track: the other six are pooled.
    let bias = &r["extra"]["language_bias"];
    let pooled: Vec<&str> = bias["sets"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    assert_eq!(pooled, ["ar-ar", "ar-en", "es-es", "es-en", "en-en", "en-de"]);
    assert!(table.contains("es-en-wmt left out"), "{table}");
    let six = results.iter().filter(|e| e["language"] != "es-en-wmt");
    let mean: f64 = six.map(|e| e["main_score"].as_f64().unwrap()).sum::<f64>() / 6.0;
    assert!((bias["expected"].as_f64().unwrap() - mean).abs() < 1e-9);
}

fn write(p: &Path, text: &str) {
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

#[test]
fn reader_errors_name_files_and_counts() {
    let d = tempfile::tempdir().unwrap();
    let sts = d.path();
    let input = sts.join("STS2017.eval.v1.1/STS.input.track5.en-en.txt");
    let gold = sts.join("STS2017.gs/STS.gs.track5.en-en.txt");
    let err = |only: &[&str]| {
        read_sts2017(sts, &only.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap_err().to_string()
    };

    let e = err(&["en-en"]);
    assert!(e.contains("STS.input.track5.en-en.txt is missing") && e.contains("STS.gs.trackN.xx-yy.txt"), "{e}");

    write(&input, "a\tb\nc\td\n");
    write(&gold, "1.0\n");
    let e = err(&["en-en"]);
    assert!(e.contains("has 2 pairs") && e.contains("has 1 scores") && e.contains("STS.gs.track5.en-en.txt"), "{e}");

    write(&gold, "1.0\nhigh\n");
    let e = err(&["en-en"]);
    assert!(e.contains("STS.gs.track5.en-en.txt:2") && e.contains("high"), "{e}");

    write(&input, "no tab here\nc\td\n");
    write(&gold, "1.0\n2.0\n");
    assert!(err(&["en-en"]).contains("STS.input.track5.en-en.txt:1: expected `sentence1<TAB>sentence2`"));

    write(&input, "");
    assert!(err(&["en-en"]).contains("is empty"));

    assert!(err(&["tr-en"]).contains("unusable"));
    assert!(err(&["xx-yy"]).contains("unknown STS 2017 set"));

    // The extended en-de set, `en<TAB>de<TAB>score`.
    let ende = sts.join("STS2017.en-de.txt");
    assert!(err(&["en-de"]).contains("STS2017.en-de.txt is missing"), "{}", err(&["en-de"]));
    write(&ende, "a\tb\t4.0\nc\td\n");
    let e = err(&["en-de"]);
    assert!(e.contains("STS2017.en-de.txt:2: expected `en<TAB>de<TAB>score`, found 2 fields"), "{e}");
    write(&ende, "a\tb\t4.0\nc\td\tsimilar\n");
    let e = err(&["en-de"]);
    assert!(e.contains("STS2017.en-de.txt:2: not a score: \"similar\""), "{e}");
    write(&ende, "a\tb\tinf\n");
    assert!(err(&["en-de"]).contains("STS2017.en-de.txt:1: not a finite score"), "{}", err(&["en-de"]));
    write(&ende, "a\tb\t4.0\nc\td\t0.5\n");
    let sets = read_sts2017(sts, &["en-de".to_string()]).unwrap();
    assert_eq!((sets[0].pairs.len(), sets[0].gold.clone()), (2, vec![4.0, 0.5]));

    write(&input, "a\tb\nc\td\r\n");
    let sets = read_sts2017(sts, &["en-en".to_string()]).unwrap();
    assert_eq!(sets[0].pairs[1], ("c".to_string(), "d".to_string()));
    assert_eq!(sets[0].gold, vec![1.0, 2.0]);
}

#[test]
fn missing_data_dir_is_explained() {
    let out =
        common::xsent().args(["eval", "sts", "--model", "unused", "--data-dir", "/nonexistent/data"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("data directory /nonexistent/data (--data-dir) does not exist")
    );
}

#[test]
fn scored_pair_files_reproduce_sentence_transformers() {
    // all-MiniLM-L6-v2 on the STS benchmark, measured with sentence-transformers 6.2.0 and
    // scipy (cosine of normalised vectors; Spearman, Pearson ×100): dev 86.7163 / 86.9619,
    // test 82.0325 / 82.7406.
    let stsb = common::data().join("sts/stsbenchmark");
    let (dev, test) = (stsb.join("sts-dev.csv"), stsb.join("sts-test.csv"));
    let model = common::model("all-MiniLM-L6-v2");
    let (table, r) = common::eval_report([
        "sts".as_ref(),
        "--model".as_ref(),
        model.as_os_str(),
        "--pairs".as_ref(),
        dev.as_os_str(),
        "--pairs".as_ref(),
        test.as_os_str(),
    ]);
    assert!(table.contains("| sts-dev | 1500 |") && table.contains("| sts-test | 1379 |"), "{table}");
    let results = r["results"].as_array().unwrap();
    for (e, (name, s, p)) in results.iter().zip([("sts-dev", 86.7163, 86.9619), ("sts-test", 82.0325, 82.7406)]) {
        assert_eq!(e["language"], name);
        assert!((e["scores"]["spearman"].as_f64().unwrap() - s).abs() < 0.02, "{e}");
        assert!((e["scores"]["pearson"].as_f64().unwrap() - p).abs() < 0.02, "{e}");
    }
    // A bad file is named with its line, before any model is loaded.
    let d = tempfile::tempdir().unwrap();
    let bad = d.path().join("bad.tsv");
    write(&bad, "a\tb\t1\nc\td\n");
    let out = common::xsent().args(["eval", "sts", "--model", "unused", "--pairs"]).arg(&bad).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("bad.tsv:2"), "{err}");
    // Pairs the model cannot tell apart (all the same two sentences) have no correlation: an
    // error naming the set, not a NaN in the table and a null in the report.
    let same = d.path().join("same.tsv");
    write(&same, "a cat\ta dog\t1\na cat\ta dog\t3\na cat\ta dog\t5\n");
    let out = common::xsent().args(["eval", "sts", "--model"]).arg(&model).arg("--pairs").arg(&same).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("STS set same") && err.contains("all 3 pairs the same cosine"), "{err}");
}

/// `--compare`: the paired difference of each set and of the mean, as the two reports' own
/// scores give it, with an interval that holds it; a model against its own report differs by
/// exactly 0; a report of other sets is refused.
#[test]
fn compare_gives_paired_differences() {
    let d = tempfile::tempdir().unwrap();
    let mini = d.path().join("minilm.json");
    let minilm = common::model("all-MiniLM-L6-v2").display().to_string();
    let args = |model: &str| {
        vec![
            "sts".to_string(),
            "--model".into(),
            model.into(),
            "--data-dir".into(),
            common::data_arg(),
            "--langs".into(),
            "en-en,es-es".into(),
        ]
    };
    let o = common::xsent().arg("eval").args(args(&minilm)).arg("--report").arg(&mini).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let m: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&mini).unwrap()).unwrap();
    let mut e5 = args(&common::e5_small());
    e5.extend(["--prefix".into(), "query: ".into(), "--compare".into(), mini.display().to_string()]);
    let (table, r) = common::eval_report(e5);
    assert!(table.contains("## Compared with"), "{table}");
    let diffs = r["extra"]["compare"]["differences"].as_array().unwrap();
    assert_eq!(diffs.len(), 3, "two sets and their mean: {diffs:?}");
    let score = |rep: &serde_json::Value, lang: &str| {
        rep["results"].as_array().unwrap().iter().find(|e| e["language"] == lang).unwrap()["main_score"]
            .as_f64()
            .unwrap()
    };
    for lang in ["en-en", "es-es"] {
        let diff = diffs.iter().find(|x| x["language"] == lang).unwrap()["difference"].clone();
        let want = score(&r, lang) - score(&m, lang);
        let got = diff["difference"].as_f64().unwrap();
        assert!((got - want).abs() < 1e-9, "{lang}: {got} vs {want}");
        let ci = [diff["ci95"][0].as_f64().unwrap(), diff["ci95"][1].as_f64().unwrap()];
        assert!(ci[0] <= got && got <= ci[1], "{lang}: {got} {ci:?}");
    }
    // Against itself.
    let mut again = args(&minilm);
    again.extend(["--compare".into(), mini.display().to_string()]);
    let (_, a) = common::eval_report(again);
    for x in a["extra"]["compare"]["differences"].as_array().unwrap() {
        assert_eq!(x["difference"]["difference"].as_f64(), Some(0.0), "{x}");
        assert_eq!(x["difference"]["ci95"], serde_json::json!([0.0, 0.0]), "{x}");
    }
    // Other sets: nothing to pair.
    let o = common::xsent()
        .args(["eval", "sts", "--model", &minilm, "--data-dir", &common::data_arg(), "--langs", "ar-ar", "--compare"])
        .arg(&mini)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("has no scores of the sets scored here"), "{err}");
}
