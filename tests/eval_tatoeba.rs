//! `xsent eval tatoeba`: e5-small reproduces sentence-transformers' numbers with the same
//! protocol; bad data gives errors that name files and counts.

mod common;

use xsent::data::tatoeba;

/// All 90 languages in ../shared/data (7 to 8 minutes on 2 cores): the average and four languages.
#[test]
fn e5_small_reproduces_reference_numbers() {
    let (table, r) = common::eval_report([
        "tatoeba",
        "--model",
        &common::e5_small(),
        "--prefix",
        "query: ",
        "--data-dir",
        &common::data_arg(),
    ]);
    assert!(table.contains("average (90 languages)"), "{table}");
    assert_eq!(r["extra"]["languages"], 90);
    let avg = r["extra"]["average"].as_f64().unwrap();
    assert!((avg - 69.80).abs() <= 0.1, "average over 90 languages {avg} vs 69.80");
    // Measured with sentence-transformers and the same protocol (issue 3): mean of both directions.
    for (lang, want) in [("deu", 97.10), ("fra", 92.50), ("cmn", 90.45), ("hin", 95.40)] {
        let e = r["results"].as_array().unwrap().iter().find(|e| e["language"] == format!("{lang}-eng")).unwrap();
        let got = e["main_score"].as_f64().unwrap();
        assert!((got - want).abs() <= 0.1, "{lang}: {got} vs {want}");
        let (a, b) = (e["scores"]["xx_to_en"].as_f64().unwrap(), e["scores"]["en_to_xx"].as_f64().unwrap());
        assert!(((a + b) / 2.0 - got).abs() < 1e-9);
        assert_eq!(e["scores"]["pairs"], 1000);
    }
}

#[test]
fn reader_errors_name_files_and_counts() {
    let d = tempfile::tempdir().unwrap();
    let err = tatoeba::languages(d.path()).unwrap_err().to_string();
    assert!(err.contains("no Tatoeba files") && err.contains("tatoeba.xxx-eng.xxx"), "{err}");
    std::fs::write(d.path().join("tatoeba.abc-eng.abc"), "a\nb\nc\n").unwrap();
    let err = tatoeba::read(d.path(), "abc").unwrap_err().to_string();
    assert!(err.contains("tatoeba.abc-eng.eng is missing"), "{err}");
    std::fs::write(d.path().join("tatoeba.abc-eng.eng"), "A\nB\n").unwrap();
    let err = tatoeba::read(d.path(), "abc").unwrap_err().to_string();
    assert!(err.contains("has 3 lines") && err.contains("has 2"), "{err}");
    std::fs::write(d.path().join("tatoeba.abc-eng.eng"), "").unwrap();
    assert!(tatoeba::read(d.path(), "abc").unwrap_err().to_string().contains("is empty"));
    std::fs::write(d.path().join("tatoeba.abc-eng.eng"), "A\nB\nC\n").unwrap();
    assert_eq!(tatoeba::languages(d.path()).unwrap(), vec!["abc"]);
    assert_eq!(tatoeba::read(d.path(), "abc").unwrap().eng, vec!["A", "B", "C"]);
    // A blank line is no sentence: the file and line are named.
    std::fs::write(d.path().join("tatoeba.abc-eng.eng"), "A\n \nC\n").unwrap();
    let err = tatoeba::read(d.path(), "abc").unwrap_err().to_string();
    assert!(err.contains("tatoeba.abc-eng.eng:2 is blank"), "{err}");
}

/// A language given twice would count twice in the average: refused, as `eval xsr` refuses a
/// direction given twice, for every task that takes --langs.
#[test]
fn a_language_given_twice_is_refused() {
    for (task, langs) in [("tatoeba", "deu,fra,deu"), ("bucc", "zh-en,zh-en"), ("sts", "en-en, en-en")] {
        let o = common::xsent()
            .args(["eval", task, "--model", &common::e5_small(), "--data-dir", &common::data_arg(), "--langs", langs])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{task}: {err}");
        assert!(err.contains("--langs lists") && err.contains("twice"), "{task}: {err}");
    }
}

/// Bad arguments and missing data are reported before the model loads (the model here does
/// not exist, so an error naming it would mean the order is wrong).
#[test]
fn bad_arguments_and_missing_data_are_reported_before_the_model_loads() {
    for (args, want) in [
        (&["tatoeba", "--langs", "deu,xyz"][..], "tatoeba.xyz-eng.xyz is missing"),
        (&["tatoeba", "--langs", "deu, fra ,xyz"], "tatoeba.xyz-eng.xyz is missing"),
        (&["tatoeba", "--langs", "deu,,fra"], "--langs has an empty name"),
        (&["bucc", "--langs", "de-en"], "no BUCC gold file for de-en"),
        (&["sts", "--langs", "en-xx"], "unknown STS 2017 set \"en-xx\""),
        (&["tatoeba", "--batch-size", "99999999999"], "--batch-size 99999999999 is out of range"),
        (&["bucc", "--batch-size", "0"], "--batch-size 0 is out of range"),
        (&["xsr", "--multi30k", "--batch-size", "0"], "--batch-size 0 is out of range"),
    ] {
        let o = common::xsent()
            .arg("eval")
            .args(args)
            .args(["--model", "/nonexistent/model", "--data-dir", &common::data_arg()])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains(want) && !err.contains("/nonexistent/model"), "{args:?}: expected {want:?} in {err}");
    }
    // Names are trimmed: " fra " is fra.
    let o = common::xsent()
        .args([
            "eval",
            "tatoeba",
            "--langs",
            "deu, fra",
            "--model",
            &common::e5_small(),
            "--prefix",
            "query: ",
            "--data-dir",
            &common::data_arg(),
        ])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(out.contains("| deu | 1000 |") && out.contains("| fra | 1000 |"), "{out}");
}
