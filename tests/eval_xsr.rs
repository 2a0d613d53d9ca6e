//! `xsent eval xsr --multi30k`: the Multi30k preset end to end with e5-small, and its errors.

mod common;

/// en→de with multilingual-e5-small and "query: ": 1,000 test_2016_flickr queries among 3,014
/// German candidates. Measured 89.70 (README); the bound leaves room for kernel-level noise only.
#[test]
fn multi30k_en_de_e5_small() {
    let (table, r) = common::eval_report(["xsr", "--model", &common::e5_small(), "--prefix", "query: ", "--multi30k", "--langs", "en-de", "--data-dir", &common::data_arg()]);
    println!("{table}");
    let results = r["results"].as_array().unwrap();
    assert_eq!(results.len(), 1, "{r}");
    let e = &results[0];
    assert_eq!((e["task"].as_str(), e["split"].as_str(), e["language"].as_str()), (Some("xsr"), Some("multi30k-test2016"), Some("en-de")));
    assert_eq!(e["scores"]["queries"], 1000);
    assert_eq!(e["scores"]["candidates"], 3014);
    let p1 = e["scores"]["p_at_1"].as_f64().unwrap();
    println!("e5-small Multi30k en→de P@1 {p1:.2}");
    assert_eq!(e["main_score"].as_f64(), Some(p1));
    assert!(p1 >= 87.0, "P@1 {p1} (measured 89.70)");
    assert_eq!(r["extra"]["mean_p_at_1"].as_f64(), Some(p1));
    assert!(table.contains(&format!("| en → de | 1000 | 3014 | {p1:.2} |")), "{table}");
    assert!(table.contains("**mean (1 direction)**") && table.contains("seed 001 Tab. 4 P@1 ×100: en → de 86.3"), "{table}");
}

fn xsr_err<const N: usize>(args: [&str; N]) -> String {
    let out = common::xsent().args(["eval", "xsr", "--model", &common::e5_small()]).args(args).output().unwrap();
    assert!(!out.status.success(), "{args:?} succeeded");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn multi30k_errors_say_what_to_do() {
    let data = common::data_arg();
    // cs has no test_2017_flickr file, so it cannot be a target; the data is read before the model loads.
    let err = xsr_err(["--multi30k", "--langs", "en-cs", "--data-dir", &data]);
    assert!(err.contains("test_2017_flickr.cs.gz is missing"), "{err}");
    assert!(err.contains("Source languages there: cs, de, en, fr") && err.contains("val): de, en, fr"), "{err}");
    let err = xsr_err(["--multi30k", "--langs", "ende", "--data-dir", &data]);
    assert!(err.contains("\"ende\" is not SRC-TGT"), "{err}");
    let err = xsr_err(["--multi30k", "--langs", "en-de,en-de", "--data-dir", &data]);
    assert!(err.contains("lists en-de twice"), "{err}");
    // The preset and explicit files exclude each other.
    let err = xsr_err(["--multi30k", "--src", "x.txt"]);
    assert!(err.contains("'--multi30k' cannot be used with '--src <SRC>'"), "{err}");
    let err = xsr_err(["--multi30k", "--distractors", "x.txt"]);
    assert!(err.contains("cannot be used with '--distractors"), "{err}");
    let err = xsr_err([]);
    assert!(err.contains("--src <SRC>") && err.contains("--tgt <TGT>"), "{err}");
    let err = xsr_err(["--src", "x.txt", "--tgt", "y.txt", "--langs", "en-de"]);
    assert!(err.contains("add --multi30k"), "{err}");
}
