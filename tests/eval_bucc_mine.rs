//! `xsent eval bucc`, `xsent eval xsr` and `xsent mine` end to end.

mod common;

use std::path::Path;
use xsent::data::bucc;

#[test]
fn bucc_zh_en_reproduces_reference_numbers() {
    let (table, r) = common::eval_report([
        "bucc",
        "--model",
        &common::e5_small(),
        "--prefix",
        "query: ",
        "--data-dir",
        &common::data_arg(),
    ]);
    assert!(table.contains("(oracle threshold)"), "{table}");
    let e = &r["results"][0];
    assert_eq!(e["language"], "zh-en");
    assert_eq!(e["scores"]["oracle_threshold"], true);
    assert_eq!(e["scores"]["gold"], 257);
    // Measured with sentence-transformers and the same protocol (issue 3).
    for (k, want) in [("f1", 87.45), ("precision", 91.14), ("recall", 84.05)] {
        let got = e["scores"][k].as_f64().unwrap();
        assert!((got - want).abs() <= 0.1, "{k}: {got} vs {want}");
    }
}

fn write(p: &Path, s: &str) {
    std::fs::write(p, s).unwrap();
}

#[test]
fn bucc_reader_errors_name_files() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path();
    assert!(bucc::splits(p, "zh-en").unwrap_err().to_string().contains("zh-en.SPLIT.gold"));
    write(&p.join("zh-en.dev.gold"), "zh-1\ten-1\n");
    assert_eq!(bucc::splits(p, "zh-en").unwrap(), vec!["dev"]);
    let e = bucc::read(p, "zh-en", "dev").unwrap_err().to_string();
    assert!(e.contains("zh-en.dev.zh is missing"), "{e}");
    write(&p.join("zh-en.dev.zh"), "zh-1\t你好\n");
    write(&p.join("zh-en.dev.en"), "en-1 hello without tab\n");
    let e = bucc::read(p, "zh-en", "dev").unwrap_err().to_string();
    assert!(e.contains("zh-en.dev.en:1: expected `id<TAB>sentence`"), "{e}");
    write(&p.join("zh-en.dev.en"), "en-2\thello\n");
    let e = bucc::read(p, "zh-en", "dev").unwrap_err().to_string();
    assert!(e.contains("zh-en.dev.gold:1") && e.contains("en-1"), "{e}");
    write(&p.join("zh-en.dev.gold"), "zh-1\ten-2\n");
    let s = bucc::read(p, "zh-en", "dev").unwrap();
    assert_eq!(s.gold, vec![(0, 0)]);
    assert_eq!(bucc::pairs(p).unwrap(), vec!["zh-en"]);
    write(&p.join("zh-en.dev.zh"), "zh-1\t你好\nzh-1\t再见\n");
    let e = bucc::read(p, "zh-en", "dev").unwrap_err().to_string();
    assert!(e.contains("zh-en.dev.zh:2: the id zh-1 is already on line 1"), "{e}");
    // Empty files (a download cut short) are errors, not an F1 of 0.
    write(&p.join("zh-en.dev.zh"), "zh-1\t你好\n");
    write(&p.join("zh-en.dev.gold"), "");
    let e = bucc::read(p, "zh-en", "dev").unwrap_err().to_string();
    assert!(e.contains("zh-en.dev.gold is empty"), "{e}");
    write(&p.join("zh-en.dev.gold"), "zh-1\ten-2\n");
    write(&p.join("zh-en.dev.en"), "");
    let e = bucc::read(p, "zh-en", "dev").unwrap_err().to_string();
    assert!(e.contains("zh-en.dev.en is empty"), "{e}");
}

/// Split `split` of the BUCC pair de-en under `bucc`: ids `de-i` / `en-i` for the texts, and the
/// gold lines as given.
fn write_de_en_split(bucc: &Path, split: &str, de: &[&str], en: &[&str], gold: &str) {
    let lines = |ids: &str, texts: &[&str]| {
        texts.iter().enumerate().map(|(i, t)| format!("{ids}-{i}\t{t}\n")).collect::<String>()
    };
    std::fs::create_dir_all(bucc).unwrap();
    write(&bucc.join(format!("de-en.{split}.de")), &lines("de", de));
    write(&bucc.join(format!("de-en.{split}.en")), &lines("en", en));
    write(&bucc.join(format!("de-en.{split}.gold")), gold);
}

/// A sentence met twice on one side (two ids, one text) is mined once, as LASER's `--unify`,
/// and the mined pair stands for both ids: both gold pairs are found. Mined line by line, the
/// greedy `max` retrieval would give the English sentence to one of the two ids only.
#[test]
fn bucc_mines_distinct_sentences_and_credits_every_id() {
    let d = tempfile::tempdir().unwrap();
    let de = [
        "Der Hund schläft im Garten.",
        "Ich trinke jeden Morgen Kaffee.",
        "Der Hund schläft im Garten.",
        "Das Wetter ist heute schön.",
    ];
    let en = ["The weather is nice today.", "The dog is sleeping in the garden.", "I drink coffee every morning."];
    write_de_en_split(&d.path().join("bucc"), "dev", &de, &en, "de-0\ten-1\nde-1\ten-2\nde-2\ten-1\nde-3\ten-0\n");
    let (_, r) = common::eval_report([
        "bucc",
        "--model",
        &common::e5_small(),
        "--prefix",
        "query: ",
        "--k",
        "2",
        "--data-dir",
        d.path().to_str().unwrap(),
    ]);
    let e = &r["results"][0];
    assert_eq!(e["language"], "de-en");
    assert_eq!(e["scores"]["gold"], 4);
    assert_eq!(e["scores"]["candidates"], 4, "{e}");
    for k in ["precision", "recall", "f1"] {
        assert_eq!(e["scores"][k].as_f64().unwrap(), 100.0, "{k}: {e}");
    }
}

/// XTREME's layout (`dev`: the threshold; `test`: scored): the threshold comes from dev and is
/// named so; a gold line given twice counts once.
#[test]
fn bucc_takes_the_threshold_from_dev_in_xtremes_layout() {
    let d = tempfile::tempdir().unwrap();
    let de = [
        "Der Hund schläft im Garten.",
        "Ich trinke jeden Morgen Kaffee.",
        "Das Wetter ist heute schön.",
        "Er liest ein Buch.",
    ];
    let en = [
        "The weather is nice today.",
        "The dog is sleeping in the garden.",
        "I drink coffee every morning.",
        "Cats like fish.",
    ];
    let b = d.path().join("bucc");
    write_de_en_split(&b, "dev", &de, &en, "de-0\ten-1\nde-1\ten-2\nde-2\ten-0\n");
    write_de_en_split(&b, "test", &de, &en, "de-0\ten-1\nde-1\ten-2\nde-2\ten-0\nde-0\ten-1\n");
    let (table, r) = common::eval_report([
        "bucc",
        "--model",
        &common::e5_small(),
        "--prefix",
        "query: ",
        "--k",
        "2",
        "--data-dir",
        d.path().to_str().unwrap(),
    ]);
    assert!(table.contains("(from dev)"), "{table}");
    let e = &r["results"][0];
    assert_eq!(e["split"], "test");
    assert_eq!(e["scores"]["threshold_from"], "dev");
    assert_eq!(e["scores"]["oracle_threshold"], false);
    assert_eq!(e["scores"]["gold"], 3, "the repeated gold line counts once: {e}");
    assert_eq!(e["scores"]["recall"].as_f64().unwrap(), 100.0, "{e}");
}

/// 300 Tatoeba deu-eng pairs: src = German, tgt = English shuffled by a fixed rotation.
fn corpus(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf, Vec<String>, Vec<String>) {
    let t = common::data().join("tatoeba");
    let de: Vec<String> =
        std::fs::read_to_string(t.join("tatoeba.deu-eng.deu")).unwrap().lines().take(300).map(String::from).collect();
    let en: Vec<String> =
        std::fs::read_to_string(t.join("tatoeba.deu-eng.eng")).unwrap().lines().take(300).map(String::from).collect();
    let (s, g) = (dir.join("src.txt"), dir.join("tgt.txt"));
    write(&s, &(de.join("\n") + "\n"));
    write(&g, &(en.join("\n") + "\n"));
    (s, g, de, en)
}

/// Ctrl-C while `mine -o FILE` embeds: exit 130, the temporary file removed, FILE not made.
#[test]
fn an_interrupted_mine_leaves_no_temporary_file() {
    let dir = tempfile::tempdir().unwrap();
    let (s, t, _, _) = corpus(dir.path());
    let out_dir = dir.path().join("out");
    std::fs::create_dir_all(&out_dir).unwrap();
    let out = out_dir.join("mined.tsv");
    let (status, names) = common::interrupt_once_writing(
        &[
            "mine",
            "--model",
            &common::e5_small(),
            "--prefix",
            "query: ",
            "--src-file",
            s.to_str().unwrap(),
            "--tgt-file",
            t.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
        ],
        &out_dir,
    );
    assert_eq!(status.code(), Some(130), "{status:?}");
    assert!(names.is_empty(), "the temporary file (or an output) is left: {names:?}");
}

#[test]
fn mine_writes_sorted_tsv_of_mostly_true_pairs() {
    let dir = tempfile::tempdir().unwrap();
    let (s, t, de, en) = corpus(dir.path());
    let out = common::xsent()
        .args(["mine", "--model", &common::e5_small(), "--prefix", "query: ", "--src-file"])
        .arg(&s)
        .arg("--tgt-file")
        .arg(&t)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let rows: Vec<(f64, String, String)> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            assert_eq!(f.len(), 3, "{l}");
            (f[0].parse().unwrap(), f[1].to_string(), f[2].to_string())
        })
        .collect();
    assert!(rows.windows(2).all(|w| w[0].0 >= w[1].0), "not sorted by score");
    // Max retrieval: each sentence at most once, so at most 300 pairs.
    assert!(rows.len() <= 300 && rows.len() >= 280, "{}", rows.len());
    let correct =
        rows.iter().filter(|(_, a, b)| de.iter().position(|x| x == a) == en.iter().position(|x| x == b)).count();
    assert!(correct as f64 >= 0.9 * rows.len() as f64, "{correct} of {} mined pairs are true translations", rows.len());
    // A threshold keeps exactly the pairs scoring at least it.
    let t0 = rows[rows.len() / 2].0;
    let out = common::xsent()
        .args([
            "mine",
            "--model",
            &common::e5_small(),
            "--prefix",
            "query: ",
            "--threshold",
            &t0.to_string(),
            "--src-file",
        ])
        .arg(&s)
        .arg("--tgt-file")
        .arg(&t)
        .output()
        .unwrap();
    let n = String::from_utf8(out.stdout).unwrap().lines().count();
    assert_eq!(n, rows.iter().filter(|r| r.0 >= t0).count());
}

#[test]
fn xsr_p_at_1_with_and_without_distractors() {
    let dir = tempfile::tempdir().unwrap();
    let (s, t, _, _) = corpus(dir.path());
    let distract = dir.path().join("more.txt");
    let fra = std::fs::read_to_string(common::data().join("tatoeba/tatoeba.fra-eng.eng")).unwrap();
    write(&distract, &fra.lines().take(500).collect::<Vec<_>>().join("\n"));
    let p1 = |extra: bool| -> (f64, u64) {
        let mut args =
            vec!["xsr".into(), "--model".into(), common::e5_small().into(), "--prefix".into(), "query: ".into()];
        args.extend(["--src".into(), s.clone().into_os_string(), "--tgt".into(), t.clone().into_os_string()]);
        if extra {
            args.extend(["--distractors".into(), distract.clone().into_os_string()]);
        }
        let (_, r) = common::eval_report::<_, std::ffi::OsString>(args);
        (r["results"][0]["main_score"].as_f64().unwrap(), r["results"][0]["scores"]["candidates"].as_u64().unwrap())
    };
    let (plain, n0) = p1(false);
    let (hard, n1) = p1(true);
    assert_eq!((n0, n1), (300, 800));
    assert!(plain >= 95.0, "P@1 {plain}");
    assert!(hard <= plain, "distractors cannot help: {hard} > {plain}");

    // Misaligned files are refused with both names and counts.
    let short = dir.path().join("short.txt");
    write(&short, "one\ntwo\n");
    let out = common::xsent()
        .args(["eval", "xsr", "--model", &common::e5_small(), "--src"])
        .arg(&s)
        .arg("--tgt")
        .arg(&short)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("has 300 lines") && err.contains("short.txt has 2"), "{err}");
}

/// `eval all` runs STS, Tatoeba and BUCC with one model load into one report. A small data dir:
/// the real STS files, Tatoeba deu only, and a BUCC-format split made of Tatoeba fra-eng lines
/// (150 French, 200 English, the first 100 of each translations of each other).
#[test]
fn eval_all_runs_every_task_into_one_report() {
    let d = tempfile::tempdir().unwrap();
    let data = d.path();
    std::os::unix::fs::symlink(common::data().join("sts"), data.join("sts")).unwrap();
    std::fs::create_dir_all(data.join("tatoeba")).unwrap();
    for f in ["tatoeba.deu-eng.deu", "tatoeba.deu-eng.eng"] {
        std::os::unix::fs::symlink(common::data().join("tatoeba").join(f), data.join("tatoeba").join(f)).unwrap();
    }
    std::fs::create_dir_all(data.join("bucc")).unwrap();
    let t = common::data().join("tatoeba");
    let fra: Vec<String> =
        std::fs::read_to_string(t.join("tatoeba.fra-eng.fra")).unwrap().lines().map(String::from).collect();
    let eng: Vec<String> =
        std::fs::read_to_string(t.join("tatoeba.fra-eng.eng")).unwrap().lines().map(String::from).collect();
    // English lines 100..200 come from the far end of the file: not translations of the French 100..150.
    let fr: Vec<String> = (0..150).map(|i| format!("fr-{i}\t{}", fra[i])).collect();
    let en: Vec<String> =
        (0..200).map(|i| format!("en-{i}\t{}", if i < 100 { &eng[i] } else { &eng[eng.len() - 1 - i] })).collect();
    let gold: Vec<String> = (0..100).map(|i| format!("fr-{i}\ten-{i}")).collect();
    write(&data.join("bucc/fr-en.sample.fr"), &fr.join("\n"));
    write(&data.join("bucc/fr-en.sample.en"), &en.join("\n"));
    write(&data.join("bucc/fr-en.sample.gold"), &gold.join("\n"));
    // `all` evaluates the default BUCC pair zh-en, so name the file set zh-en here.
    for ext in ["fr", "en", "gold"] {
        let from = data.join(format!("bucc/fr-en.sample.{ext}"));
        let to_ext = if ext == "fr" { "zh" } else { ext };
        let text = std::fs::read_to_string(&from).unwrap().replace("fr-", "zh-");
        write(&data.join(format!("bucc/zh-en.sample.{to_ext}")), &text);
        std::fs::remove_file(from).unwrap();
    }
    let (table, r) = common::eval_report([
        "all",
        "--model",
        &common::e5_small(),
        "--prefix",
        "query: ",
        "--data-dir",
        data.to_str().unwrap(),
    ]);
    assert!(table.contains("## sts17") && table.contains("## tatoeba") && table.contains("## bucc2018"), "{table}");
    let results = r["results"].as_array().unwrap();
    let tasks: Vec<&str> = results.iter().map(|e| e["task"].as_str().unwrap()).collect();
    assert_eq!(tasks.iter().filter(|t| **t == "sts17").count(), 7);
    assert_eq!(tasks.iter().filter(|t| **t == "tatoeba").count(), 1);
    let b = results.iter().find(|e| e["task"] == "bucc2018").unwrap();
    assert_eq!(b["split"], "sample");
    // Mining works on this small split (measured 88.2; chance is near 0).
    assert!(b["scores"]["f1"].as_f64().unwrap() > 80.0, "{b}");
    assert!(r["extra"]["sts17"]["language_bias"].is_object() && r["extra"]["tatoeba"]["languages"] == 1);
    // Same numbers as the single task.
    let en_en = results.iter().find(|e| e["language"] == "en-en").unwrap()["main_score"].as_f64().unwrap();
    assert!((en_en - 86.56).abs() <= 0.1);
    let deu = results.iter().find(|e| e["language"] == "deu-eng").unwrap()["main_score"].as_f64().unwrap();
    assert!((deu - 97.10).abs() <= 0.1);
    // --langs is refused for `all`.
    let out = common::xsent()
        .args(["eval", "all", "--model", &common::e5_small(), "--langs", "deu", "--data-dir"])
        .arg(data)
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("run the tasks one by one"));
}

#[test]
fn mine_leaves_blank_lines_out_and_outputs_are_checked_first() {
    let dir = tempfile::tempdir().unwrap();
    let words: Vec<String> = (0..10).map(|i| format!("w{i}")).collect();
    let model = common::tiny_model("tiny-bert", dir.path(), &words);
    let src = dir.path().join("src.txt");
    let tgt = dir.path().join("tgt.txt");
    write(&src, "w1 w2\n\nw3 w4\n  \nw5\n");
    write(&tgt, "w5\nw3 w4\n\nw1 w2\n");
    let mine = |extra: &[&str]| {
        common::xsent()
            .args([
                "mine",
                "--model",
                model.to_str().unwrap(),
                "--src-file",
                src.to_str().unwrap(),
                "--tgt-file",
                tgt.to_str().unwrap(),
            ])
            .args(extra)
            .output()
            .unwrap()
    };
    let out = mine(&[]);
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{err}");
    assert!(err.contains("2 blank lines of") && err.contains("1 blank lines of"), "{err}");
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(!text.is_empty());
    for l in text.lines() {
        let f: Vec<&str> = l.split('\t').collect();
        assert!(f.len() == 3 && !f[1].trim().is_empty() && !f[2].trim().is_empty(), "{l:?}");
    }
    // A line given twice is embedded and mined once, and its pair written once (LASER's --unify).
    let dup = dir.path().join("dup.txt");
    write(&dup, "w5\nw3 w4\nw5\nw1 w2\nw5\n");
    let out = common::xsent()
        .args([
            "mine",
            "--model",
            model.to_str().unwrap(),
            "--src-file",
            src.to_str().unwrap(),
            "--tgt-file",
            dup.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{err}");
    assert!(err.contains("2 of 5 lines of") && err.contains("each text is mined once"), "{err}");
    let dup_text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(dup_text.lines().filter(|l| l.ends_with("\tw5")).count(), 1, "{dup_text}");
    assert_eq!(dup_text, text, "the same pairs as with the target given once each");
    // -o is written whole at the end, readable as a file the shell makes.
    let tsv = dir.path().join("mined.tsv");
    let out = mine(&["-o", tsv.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(std::fs::read_to_string(&tsv).unwrap(), text);
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    let made = dir.path().join("made-by-create.txt");
    std::fs::File::create(&made).unwrap();
    assert_eq!(mode(&tsv), mode(&made), "the mode of a file made by create, not a private temporary file's");
    assert!(std::fs::read_dir(dir.path()).unwrap().all(|e| !e
        .unwrap()
        .file_name()
        .to_string_lossy()
        .starts_with(".xsent-out-")));
    // Through a symlink: its target is written, the link stays.
    let link = dir.path().join("link.tsv");
    std::os::unix::fs::symlink(&made, &link).unwrap();
    assert!(mine(&["-o", link.to_str().unwrap()]).status.success());
    assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
    assert_eq!(std::fs::read_to_string(&made).unwrap(), text);
    // Not a regular file: written directly, never replaced (/dev/null stays a device).
    let out = mine(&["-o", "/dev/null"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(std::fs::metadata("/dev/null").unwrap().file_type().is_char_device());
    // Output paths that cannot be written, and -o naming an input, are refused before any work.
    for (args, want) in [
        (vec!["-o", "/nonexistent/dir/out.tsv"], "the folder /nonexistent/dir does not exist"),
        (vec!["-o", "/proc/xsent-mined.tsv"], "-o /proc/xsent-mined.tsv: cannot create a file in /proc"),
        (vec!["-o", src.to_str().unwrap()], "would destroy the input"),
        (vec!["--threshold", "nan"], "--threshold NaN is not a finite number"),
    ] {
        let out = mine(&args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(out.stdout.is_empty());
    }
    assert_eq!(std::fs::read_to_string(&src).unwrap(), "w1 w2\n\nw3 w4\n  \nw5\n");
    // eval --report into a missing folder fails before the model is loaded and scored.
    let pairs = dir.path().join("p.tsv");
    write(&pairs, "w1\tw1\t5\nw1\tw2\t1\n");
    let out = common::xsent()
        .args([
            "eval",
            "sts",
            "--model",
            model.to_str().unwrap(),
            "--pairs",
            pairs.to_str().unwrap(),
            "--report",
            "/nonexistent/r.json",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr)
        .contains("--report /nonexistent/r.json: the folder /nonexistent does not exist"));
    assert!(out.stdout.is_empty(), "no table printed before the error");
}

#[test]
fn reports_and_outputs_never_replace_an_input_or_a_benchmark_file() {
    let dir = tempfile::tempdir().unwrap();
    let words: Vec<String> = (0..10).map(|i| format!("w{i}")).collect();
    let model = common::tiny_model("tiny-bert", dir.path(), &words);
    let model = model.to_str().unwrap();
    let p = |name: &str| dir.path().join(name).to_str().unwrap().to_string();
    let (pairs, src, tgt) = (p("pairs.tsv"), p("src.txt"), p("tgt.txt"));
    write(Path::new(&pairs), "w1\tw1\t5\nw1\tw2\t1\n");
    write(Path::new(&src), "w1 w2\nw3\n");
    write(Path::new(&tgt), "w2 w1\nw3\n");
    let bucc = dir.path().join("data/bucc");
    std::fs::create_dir_all(&bucc).unwrap();
    let data = p("data");
    let in_bucc = format!("{}/report.json", bucc.display());
    let (en, de, txt) = (format!("en={src}"), format!("de={tgt}"), p("pca.txt"));
    // A corpus whose name ends in .json: `-o` naming it would be taken as the tokenizer's path.
    let corpus = p("corpus.json");
    let png_out = p("x.png");
    write(Path::new(&corpus), "w1 w2 w3\n");
    // Inputs that are not text: a report compared against, neighbour lists.
    let (cmp, knn) = (p("cmp.json"), p("src.knn.npy"));
    write(Path::new(&cmp), "{}");
    write(Path::new(&knn), "not read");
    let cases: Vec<(Vec<&str>, String)> = vec![
        (
            vec!["eval", "sts", "--model", model, "--pairs", &pairs, "--compare", &cmp, "--report", &cmp],
            format!("--report {cmp} is the input file {cmp}"),
        ),
        (
            vec!["eval", "xsr", "--model", model, "--src", &src, "--tgt", &tgt, "--compare", &cmp, "--report", &cmp],
            format!("--report {cmp} is the input file {cmp}"),
        ),
        (
            vec![
                "mine",
                "--model",
                model,
                "--src-file",
                &src,
                "--tgt-file",
                &tgt,
                "--src-knn",
                &knn,
                "--tgt-knn",
                &knn,
                "-o",
                &knn,
            ],
            format!("-o {knn} is the input file {knn}"),
        ),
        (
            vec!["eval", "sts", "--model", model, "--pairs", &pairs, "--report", &pairs],
            format!("--report {pairs} is the input file {pairs}"),
        ),
        (
            vec!["eval", "xsr", "--model", model, "--src", &src, "--tgt", &tgt, "--report", &tgt],
            format!("--report {tgt} is the input file {tgt}"),
        ),
        (
            vec!["eval", "bucc", "--model", model, "--data-dir", &data, "--report", &in_bucc],
            format!("is inside {data}/bucc, among the benchmark and corpus files"),
        ),
        (
            vec!["tokenizer", "train", "--input", &corpus, "-o", &corpus, "--vocab-size", "20"],
            format!("-o {corpus} is the input file {corpus}"),
        ),
        (
            vec!["plot", "pca", "--model", model, "--input", &en, "--input", &de, "-o", &tgt],
            format!("-o {tgt} is the input file {tgt}"),
        ),
        (
            vec!["plot", "pca", "--model", model, "--input", &en, "--input", &de, "-o", &txt],
            "give a path ending in .png".to_string(),
        ),
        (
            vec!["plot", "pca", "--model", model, "--langs", "de,en,de", "-o", &png_out],
            "--langs lists de twice".to_string(),
        ),
    ];
    for (args, want) in &cases {
        let out = common::xsent().args(args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains(want.as_str()), "{args:?}: {err}");
    }
    assert_eq!(std::fs::read_to_string(&pairs).unwrap(), "w1\tw1\t5\nw1\tw2\t1\n");
    assert_eq!(std::fs::read_to_string(&src).unwrap(), "w1 w2\nw3\n");
    assert_eq!(std::fs::read_to_string(&tgt).unwrap(), "w2 w1\nw3\n");
    assert_eq!(std::fs::read_to_string(&corpus).unwrap(), "w1 w2 w3\n");
    assert_eq!(std::fs::read_to_string(&cmp).unwrap(), "{}");
    assert_eq!(std::fs::read_to_string(&knn).unwrap(), "not read");
    // With files of the user's own (--pairs, --src/--tgt) the benchmark folders of the data
    // directory (XSENT_DATA) are still protected.
    for args in [
        vec!["eval", "sts", "--model", model, "--pairs", &pairs, "--report", &in_bucc],
        vec!["eval", "xsr", "--model", model, "--src", &src, "--tgt", &tgt, "--report", &in_bucc],
    ] {
        let out = common::xsent().args(&args).env("XSENT_DATA", &data).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(
            err.contains(&format!("is inside {data}/bucc, among the benchmark and corpus files")),
            "{args:?}: {err}"
        );
    }
    assert!(!Path::new(&in_bucc).exists() && !Path::new(&txt).exists());
    // eval bucc says when k exceeds a side's sentences, as mine does.
    write(&bucc.join("de-en.dev.de"), "d1\tw1 w2\nd2\tw3\n");
    write(&bucc.join("de-en.dev.en"), "e1\tw2 w1\ne2\tw3\ne3\tw4\n");
    write(&bucc.join("de-en.dev.gold"), "d1\te1\n");
    let out =
        common::xsent().args(["eval", "bucc", "--model", model, "--data-dir", &data, "--k", "3"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("de-en dev: k = 3 is more than the 2 sources or 3 targets"), "{err}");
    // mine: a tab inside a sentence would break the output's columns, so it is refused with
    // the line; a k beyond the lines is said; a negative threshold is a value, not a flag.
    let tabbed = p("tabbed.txt");
    write(Path::new(&tabbed), "w1\nw2\tw3\n");
    let out =
        common::xsent().args(["mine", "--model", model, "--src-file", &tabbed, "--tgt-file", &tgt]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(&format!("{tabbed}:2 holds a tab")),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A line of whitespace and tabs is blank, left out like any blank line.
    write(Path::new(&tabbed), "w1\n\t \nw2\n");
    let out =
        common::xsent().args(["mine", "--model", model, "--src-file", &tabbed, "--tgt-file", &tgt]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && err.contains(&format!("1 blank lines of {tabbed} left out")), "{err}");
    let out = common::xsent()
        .args([
            "mine",
            "--model",
            model,
            "--src-file",
            &src,
            "--tgt-file",
            &tgt,
            "--k",
            "5",
            "--margin",
            "distance",
            "--threshold",
            "-0.5",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("k = 5 is more than the 2 sources or 2 targets"), "{err}");
    // Blank lines are no sentences for the picture: left out, and said so.
    write(Path::new(&src), "w1 w2\n\nw3\n  \n");
    let png = p("pca.png");
    let out = common::xsent()
        .args(["plot", "pca", "--model", model, "--input", &en, "--input", &de, "-o", &png])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains(&format!("2 blank lines of {src} left out")) && err.contains("4 sentences in 2 languages"),
        "{err}"
    );
}

/// The output of `child`, killed and failed if it has not ended within 60 s (a second read of a
/// FIFO waits for ever).
fn finish_within_a_minute(mut child: std::process::Child, what: &str) -> std::process::Output {
    let start = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > std::time::Duration::from_secs(60) {
            child.kill().unwrap();
            panic!("{what} did not finish in 60 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

/// `--compare` is read once, before the model loads: a report given through a FIFO (as
/// `<(cat r.json)` does) is not waited on a second time (it blocked forever), and a bad report
/// stops `eval xsr --multi30k` before any work (it was read only after the evaluation).
#[test]
fn the_compared_report_is_read_once_before_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let words: Vec<String> = (0..10).map(|i| format!("w{i}")).collect();
    let model = common::tiny_model("tiny-bert", dir.path(), &words);
    let p = |name: &str| dir.path().join(name);
    std::fs::write(p("pairs.tsv"), "w1\tw1\t5\nw1\tw2\t1\nw3\tw4\t2\n").unwrap();
    let sts = |extra: &[&std::ffi::OsStr]| {
        let mut c = common::xsent();
        c.arg("eval").arg("sts").arg("--model").arg(&model).arg("--pairs").arg(p("pairs.tsv")).args(extra);
        c
    };
    let report = p("r.json");
    let o = sts(&["--report".as_ref(), report.as_os_str()]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = std::fs::read(&report).unwrap();

    let fifo = p("cmp.fifo");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    let writer = {
        let fifo = fifo.clone();
        // One writer, once: a second read of the FIFO would wait for ever.
        std::thread::spawn(move || std::fs::write(fifo, text).unwrap())
    };
    let child = sts(&["--compare".as_ref(), fifo.as_os_str()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let o = finish_within_a_minute(child, "eval sts --compare FIFO");
    writer.join().unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(out.contains("## Compared with"), "{out}");

    // Files of one's own through pipes (`--src <(…)`) are read once: the report records them
    // without a digest instead of opening them again (which would wait for ever).
    let (src, tgt) = (p("src.fifo"), p("tgt.fifo"));
    for f in [&src, &tgt] {
        assert!(std::process::Command::new("mkfifo").arg(f).status().unwrap().success());
    }
    let writers: Vec<_> = [(src.clone(), "w1 w2\nw3\n"), (tgt.clone(), "w2 w1\nw3\n")]
        .into_iter()
        .map(|(f, text)| std::thread::spawn(move || std::fs::write(f, text).unwrap()))
        .collect();
    let xsr_report = p("xsr.json");
    let child = common::xsent()
        .args(["eval", "xsr", "--model"])
        .arg(&model)
        .arg("--src")
        .arg(&src)
        .arg("--tgt")
        .arg(&tgt)
        .arg("--report")
        .arg(&xsr_report)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let o = finish_within_a_minute(child, "eval xsr --src FIFO");
    writers.into_iter().for_each(|w| w.join().unwrap());
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&xsr_report).unwrap()).unwrap();
    assert_eq!(r["data"].as_array().unwrap().len(), 2);
    assert!(r["data"][0].get("sha256").is_none(), "{r}");

    // A bad report stops the Multi30k preset before the model loads (here a model that does
    // not exist, which would be the first error otherwise).
    std::fs::write(p("bad.json"), "{").unwrap();
    let o = common::xsent()
        .args(["eval", "xsr", "--multi30k", "--model", "/nonexistent/model", "--compare"])
        .arg(p("bad.json"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("is not a report of xsent eval --report"), "{err}");
}

/// A report records the model options, the commit and every data file with its sha256 and
/// whether it is the pinned benchmark file; an edited benchmark file is warned about, and
/// `--compare` refuses a report made on other data (an outside probe: 300 edited Tatoeba lines
/// were scored without a word, and compared with a report of the real files they showed a
/// "significant" difference for one and the same model).
#[test]
fn reports_record_their_data_and_settings_and_edited_benchmarks_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let words: Vec<String> = (0..10).map(|i| format!("w{i}")).collect();
    let model = common::tiny_model("tiny-bert", dir.path(), &words);
    let data = dir.path().join("data");
    std::fs::create_dir_all(data.join("tatoeba")).unwrap();
    for side in ["deu", "eng"] {
        let name = format!("tatoeba/tatoeba.deu-eng.{side}");
        std::fs::copy(common::data().join(&name), data.join(&name)).unwrap();
    }
    let eval = |report: &std::path::Path, extra: &[&str]| {
        common::xsent()
            .args(["eval", "tatoeba", "--langs", "deu", "--layers", "1", "--model"])
            .arg(&model)
            .arg("--data-dir")
            .arg(&data)
            .arg("--report")
            .arg(report)
            .args(extra)
            .output()
            .unwrap()
    };
    let read =
        |p: &std::path::Path| -> serde_json::Value { serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap() };
    let first = dir.path().join("r1.json");
    let o = eval(&first, &[]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success() && !err.contains("warning"), "{err}");
    let r = read(&first);
    assert_eq!(r["settings"]["layers"], 1);
    assert_eq!(r["settings"]["dtype"], serde_json::Value::Null);
    // The commit build.rs found (none outside a git checkout).
    assert_eq!(r["commit"].as_str(), option_env!("XSENT_GIT_COMMIT"), "{r}");
    // The model's files, each with its size and a digest equal to one computed here.
    let loaded = r["model_files"].as_array().unwrap();
    for name in ["config.json", "model.safetensors", "tokenizer.json"] {
        let path = std::path::Path::new(&model).join(name);
        let entry = loaded
            .iter()
            .find(|f| f["path"].as_str().is_some_and(|p| std::path::Path::new(p) == path))
            .unwrap_or_else(|| panic!("{name} is not in {loaded:?}"));
        let bytes = std::fs::read(&path).unwrap();
        let want: String =
            sha2::Digest::finalize(sha2::Digest::chain_update(<sha2::Sha256 as sha2::Digest>::new(), &bytes))
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
        assert_eq!(entry["sha256"].as_str(), Some(want.as_str()), "{name}");
        assert_eq!(entry["bytes"].as_u64(), Some(bytes.len() as u64), "{name}");
    }
    let files = r["data"].as_array().unwrap();
    assert_eq!(files.len(), 2, "{files:?}");
    assert_eq!(files[0]["path"], "tatoeba/tatoeba.deu-eng.deu");
    assert_eq!(files[0]["pinned"], true);
    assert_eq!(files[0]["sha256"].as_str().unwrap().len(), 64);

    // One line edited: scored, with a warning naming the file, and recorded as not pinned.
    let deu = data.join("tatoeba/tatoeba.deu-eng.deu");
    let text = std::fs::read_to_string(&deu).unwrap().replacen('\n', " xxx\n", 1);
    std::fs::write(&deu, text).unwrap();
    let second = dir.path().join("r2.json");
    let o = eval(&second, &[]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("tatoeba.deu-eng.deu is not the file xsent pins for its benchmark"), "{err}");
    assert_eq!(read(&second)["data"][0]["pinned"], false);
    // Compared with the report of the pinned file: refused before the model loads.
    let o = eval(&dir.path().join("r3.json"), &["--compare", first.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("that report was made on other data: tatoeba/tatoeba.deu-eng.deu"),
        "{err}"
    );
    assert!(!dir.path().join("r3.json").exists());
}
