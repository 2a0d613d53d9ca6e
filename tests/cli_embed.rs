//! `xsent embed` end to end: formats, line alignment and every bad-input case.

mod common;

use std::io::Write;
use std::process::{Output, Stdio};

fn e5() -> String {
    common::model("multilingual-e5-small").to_str().unwrap().to_string()
}

fn embed(args: &[&str], stdin: &[u8]) -> Output {
    let mut child = common::xsent()
        .arg("embed")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    common::feed(&mut child, stdin);
    child.wait_with_output().unwrap()
}

fn rows(out: &Output) -> Vec<Vec<f32>> {
    String::from_utf8(out.stdout.clone()).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).to_string()
}

#[test]
fn jsonl_keeps_line_alignment_with_empty_lines_and_crlf() {
    let out =
        embed(&["--model", &e5(), "--prefix", "query: "], b"Hello world\r\n\nDie Katze.\nlast line without newline");
    assert!(out.status.success(), "{}", stderr(&out));
    let r = rows(&out);
    assert_eq!(r.len(), 4);
    assert!(r.iter().all(|v| v.len() == 384));
    // Line 2 is the empty text; line 1 without its \r equals "Hello world" alone.
    let single = embed(&["--model", &e5(), "--prefix", "query: "], b"Hello world\n");
    assert_eq!(rows(&single)[0], r[0]);
    let empty = embed(&["--model", &e5(), "--prefix", "query: "], b"\n");
    assert_eq!(rows(&empty)[0], r[1]);
    let norm: f64 = r[2].iter().map(|x| (*x as f64).powi(2)).sum();
    assert!((norm - 1.0).abs() < 1e-5, "not normalised: {norm}");
}

#[test]
fn no_normalize_and_pooling_options() {
    let out = embed(&["--model", &e5(), "--no-normalize"], b"Hello world\n");
    let norm: f64 = rows(&out)[0].iter().map(|x| (*x as f64).powi(2)).sum();
    assert!((norm - 1.0).abs() > 1e-3, "--no-normalize still normalised");
    let cls = embed(&["--model", &e5(), "--pooling", "cls"], b"Hello world\n");
    let mean = embed(&["--model", &e5()], b"Hello world\n");
    assert_ne!(rows(&cls)[0], rows(&mean)[0]);
}

#[test]
fn invalid_utf8_stops_with_the_line_number_and_keeps_earlier_lines() {
    let out = embed(&["--model", &e5()], b"one\ntwo\nbad \xff byte\nfour\n");
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.contains("line 3 is not valid UTF-8"), "{err}");
    assert_eq!(rows(&out).len(), 2, "the lines before the bad one must be written");
    // Into a file: an earlier output is left as it was, and the rows before the bad line are
    // kept beside it as FILE.partial (an .npy with its header completed); a run that succeeds
    // replaces the file and leaves no temporary file.
    let dir = tempfile::tempdir().unwrap();
    for fmt in ["jsonl", "npy"] {
        let o = dir.path().join(format!("v.{fmt}"));
        std::fs::write(&o, "earlier").unwrap();
        let out =
            embed(&["--model", &e5(), "--format", fmt, "-o", o.to_str().unwrap()], b"one\ntwo\nbad \xff byte\nfour\n");
        assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
        let err = stderr(&out);
        assert!(
            err.contains("line 3 is not valid UTF-8")
                && err.contains("is left as it was")
                && err.contains(&format!("v.{fmt}.partial")),
            "{err}"
        );
        assert_eq!(std::fs::read_to_string(&o).unwrap(), "earlier");
        let partial = std::fs::read(dir.path().join(format!("v.{fmt}.partial"))).unwrap();
        match fmt {
            "jsonl" => assert_eq!(String::from_utf8(partial).unwrap().lines().count(), 2),
            _ => {
                assert!(String::from_utf8_lossy(&partial[..128]).contains("'shape': (2, 384)"));
                assert_eq!(partial.len(), 128 + 2 * 384 * 4);
            }
        }
        let out = embed(&["--model", &e5(), "--format", fmt, "-o", o.to_str().unwrap()], b"one\ntwo\n");
        assert!(out.status.success(), "{}", stderr(&out));
        assert_ne!(std::fs::read(&o).unwrap(), b"earlier");
    }
    // A failure before any row leaves no partial file.
    let o = dir.path().join("none.jsonl");
    let out = embed(&["--model", &e5(), "-o", o.to_str().unwrap()], b"bad \xff first line\n");
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("stopped before any row; ") && stderr(&out).contains("is not written"),
        "{}",
        stderr(&out)
    );
    assert!(!o.exists() && !dir.path().join("none.jsonl.partial").exists());
    // A replaced file keeps its permissions (a mode no umask gives a new file).
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let o = dir.path().join("v.jsonl");
        std::fs::set_permissions(&o, std::fs::Permissions::from_mode(0o604)).unwrap();
        let out = embed(&["--model", &e5(), "-o", o.to_str().unwrap()], b"one\n");
        assert!(out.status.success(), "{}", stderr(&out));
        assert_eq!(std::fs::metadata(&o).unwrap().permissions().mode() & 0o777, 0o604);
    }
    // `-o /dev/stdout` writes to standard output itself, here a file opened for appending
    // that already holds a line: the rows follow it (a file put in its place would drop it).
    let o = dir.path().join("stdout.jsonl");
    std::fs::write(&o, "header\n").unwrap();
    let mut child = common::xsent()
        .args(["embed", "--model", &e5(), "-o", "/dev/stdout"])
        .stdin(Stdio::piped())
        .stdout(std::fs::OpenOptions::new().append(true).open(&o).unwrap())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    common::feed(&mut child, b"one\ntwo\n");
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let text = std::fs::read_to_string(&o).unwrap();
    assert!(text.starts_with("header\n[") && text.lines().count() == 3, "{text}");
    let names: Vec<String> =
        std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert!(names.iter().all(|n| !n.starts_with(".xsent-out-")), "{names:?}");
}

/// Ctrl-C while `embed -o FILE` runs: exit 130, the temporary file removed, FILE not made.
#[test]
fn an_interrupted_embed_leaves_no_file() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.txt");
    std::fs::write(&input, (0..3000).map(|i| format!("sentence number {i} of a long input\n")).collect::<String>())
        .unwrap();
    let out_dir = dir.path().join("out");
    std::fs::create_dir_all(&out_dir).unwrap();
    let out = out_dir.join("v.jsonl");
    let (status, names) = common::interrupt_once_writing(
        &["embed", "--model", &e5(), "--input", input.to_str().unwrap(), "-o", out.to_str().unwrap()],
        &out_dir,
    );
    assert_eq!(status.code(), Some(130), "{status:?}");
    assert!(names.is_empty(), "{names:?}");
}

#[test]
fn a_corrupt_gzip_input_stops_with_the_file_and_line_and_keeps_earlier_lines() {
    let dir = tempfile::tempdir().unwrap();
    let gz = dir.path().join("in.txt.gz");
    let member = |text: String| {
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        enc.write_all(text.as_bytes()).unwrap();
        enc.finish().unwrap()
    };
    // A whole gzip member of 1,100 lines, then a second member cut in half.
    let mut bytes = member((0..1100).map(|i| format!("line {i}\n")).collect());
    let second = member((0..500).map(|i| format!("more {i}\n")).collect());
    bytes.extend_from_slice(&second[..second.len() / 2]);
    std::fs::write(&gz, &bytes).unwrap();
    let out = embed(&["--model", &e5(), "--batch-size", "8", "--input", gz.to_str().unwrap()], b"");
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains(&format!("embedding {}", gz.display())), "{err}");
    // The decoder hands over what it could inflate of the cut member before it fails.
    let line: usize = err
        .split("caused by: line ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .expect(&err);
    assert!((1101..1600).contains(&line), "{err}");
    assert!(err.contains(&format!("line {line} cannot be read")), "{err}");
    assert!(err.contains(&format!("the {} lines before it were embedded and written", line - 1)), "{err}");
    assert_eq!(rows(&out).len(), line - 1, "the lines before the corrupt part must be written");
}

#[test]
fn long_lines_are_truncated_and_counted() {
    let long = "word ".repeat(700);
    let input = format!("short\n{long}\nshort again\n{long}\n");
    let out = embed(&["--model", &e5(), "--max-length", "16"], input.as_bytes());
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(rows(&out).len(), 4);
    let err = stderr(&out);
    assert!(err.contains("2 of 4 lines were longer than 16 tokens") && err.contains("first: line 2"), "{err}");
}

#[test]
fn tokenizer_config_model_max_length_is_the_default_length() {
    // sentence-transformers 6.x saves the maximum length only as tokenizer_config.json's
    // model_max_length; without a sentence_bert_config.json it is the default, as there.
    let dir = tempfile::tempdir().unwrap();
    let words: Vec<String> = (0..10).map(|i| format!("w{i}")).collect();
    let m = common::tiny_model("tiny-xlm-roberta", dir.path(), &words);
    let long = ["w1 w2 w3 w4 w5 w6 w7 w8 w9 w0 w1 w2 w3 w4 w5 w6 w7 w8 w9 w0"];
    let full = common::embed_cli(&m, &[], &long);
    let cut = common::embed_cli(&m, &["--max-length", "8"], &long);
    assert!(common::max_abs_diff(&full[0], &cut[0]) > 1e-3, "the cut must change the vector");
    std::fs::write(m.join("tokenizer_config.json"), r#"{"model_max_length": 8}"#).unwrap();
    assert_eq!(common::embed_cli(&m, &[], &long), cut);
    // transformers' "no limit" stand-in leaves the model's positions.
    std::fs::write(m.join("tokenizer_config.json"), r#"{"model_max_length": 1000000000000000019884624838656}"#)
        .unwrap();
    assert_eq!(common::embed_cli(&m, &[], &long), full);
    // sentence_bert_config.json's max_seq_length comes first.
    std::fs::write(m.join("tokenizer_config.json"), r#"{"model_max_length": 8}"#).unwrap();
    std::fs::write(m.join("sentence_bert_config.json"), r#"{"max_seq_length": 64}"#).unwrap();
    assert_eq!(common::embed_cli(&m, &[], &long), full);
    std::fs::remove_file(m.join("sentence_bert_config.json")).unwrap();
    std::fs::write(m.join("tokenizer_config.json"), r#"{"model_max_length": "long"}"#).unwrap();
    let out = embed(&["--model", m.to_str().unwrap()], b"w1\n");
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("tokenizer_config.json: model_max_length is \"long\""), "{}", stderr(&out));
}

#[test]
fn npy_and_f32_outputs_hold_the_same_vectors() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.txt");
    std::fs::write(&input, "a\nb b\n\nc c c\n").unwrap();
    let jsonl = embed(&["--model", &e5(), "--input", input.to_str().unwrap()], b"");
    let want: Vec<f32> = rows(&jsonl).concat();
    let npy = dir.path().join("out.npy");
    let f32p = dir.path().join("out.f32");
    for (fmt, p) in [("npy", &npy), ("f32", &f32p)] {
        let out = embed(
            &["--model", &e5(), "--input", input.to_str().unwrap(), "--format", fmt, "-o", p.to_str().unwrap()],
            b"",
        );
        assert!(out.status.success(), "{}", stderr(&out));
    }
    let raw = std::fs::read(&f32p).unwrap();
    let got: Vec<f32> = raw.chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect();
    assert_eq!(got, want);
    // A .gz input is read through gzip, as the other commands read it.
    let gz = dir.path().join("in.txt.gz");
    let mut enc = flate2::write::GzEncoder::new(std::fs::File::create(&gz).unwrap(), flate2::Compression::default());
    enc.write_all(b"a\nb b\n\nc c c\n").unwrap();
    enc.finish().unwrap();
    let out = embed(&["--model", &e5(), "--input", gz.to_str().unwrap()], b"");
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(rows(&out).concat(), want);
    // Plain text under a .gz name is said to be so.
    std::fs::write(&gz, "a\nb b\n").unwrap();
    let out = embed(&["--model", &e5(), "--input", gz.to_str().unwrap()], b"");
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("the name ends in .gz, but the file is not gzip-compressed"), "{}", stderr(&out));
    let raw = std::fs::read(&npy).unwrap();
    assert_eq!(&raw[..6], b"\x93NUMPY");
    let header_len = u16::from_le_bytes([raw[8], raw[9]]) as usize;
    let header = String::from_utf8_lossy(&raw[10..10 + header_len]);
    assert!(header.contains("'shape': (4, 384)") && header.contains("'<f4'"), "{header}");
    let body: Vec<f32> =
        raw[10 + header_len..].chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect();
    assert_eq!(body, want);
    // And numpy itself reads it (.ci/run provides a python with numpy as XSENT_PYTHON).
    let python = std::env::var("XSENT_PYTHON").unwrap_or_else(|_| "python3".into());
    let check = std::process::Command::new(&python)
        .args(["-c", "import sys, numpy as np; a = np.load(sys.argv[1]); assert a.shape == (4, 384) and a.dtype == np.float32; print(float(a[0, 0]))"])
        .arg(&npy)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {python}: {e} (set XSENT_PYTHON to a python with numpy)"));
    assert!(
        check.status.success(),
        "numpy could not load the file (set XSENT_PYTHON to a python with numpy): {}",
        String::from_utf8_lossy(&check.stderr)
    );
    let first: f32 = String::from_utf8_lossy(&check.stdout).trim().parse().unwrap();
    assert_eq!(first, want[0]);
    // A run stopped before its end (killed: the header is written last) leaves a file numpy
    // refuses, not one it loads as an empty array.
    let cut = dir.path().join("cut.npy");
    let mut w = xsent::io::npy::NpyWriter::new(std::fs::File::create(&cut).unwrap(), 384).unwrap();
    w.write_row(&want[..384]).unwrap();
    drop(w);
    assert_eq!(std::fs::metadata(&cut).unwrap().len(), 128 + 384 * 4);
    let check = std::process::Command::new(&python)
        .args(["-c", "import sys, numpy as np; np.load(sys.argv[1])"])
        .arg(&cut)
        .output()
        .unwrap();
    assert!(!check.status.success(), "numpy loaded an unfinished file");
    assert!(
        String::from_utf8_lossy(&check.stderr).contains("UNFINISHED"),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
}

#[test]
fn user_errors_are_clear() {
    let dir = tempfile::tempdir().unwrap();
    let cases: Vec<(Vec<String>, &str)> = vec![
        (vec!["--model".into(), e5(), "--format".into(), "npy".into()], "--format npy needs -o FILE"),
        (vec!["--model".into(), e5(), "--device".into(), "cuda:0".into()], "built without CUDA"),
        (vec!["--model".into(), e5(), "--batch-size".into(), "0".into()], "--batch-size 0 is out of range"),
        (vec!["--model".into(), e5(), "--batch-size".into(), u64::MAX.to_string()], "is out of range: give 1..="),
        (
            vec!["--model".into(), e5(), "-o".into(), "/nonexistent/dir/v.jsonl".into()],
            "the folder /nonexistent/dir does not exist",
        ),
        (
            vec!["--model".into(), e5(), "--input".into(), "/nonexistent/in.txt".into()],
            "cannot open input /nonexistent/in.txt",
        ),
        (
            vec!["--model".into(), e5(), "--max-length".into(), "100000".into()],
            "maximum length of 100000 tokens (--max-length",
        ),
        (vec!["--model".into(), "no/such/dir".into()], "not found"),
        (vec!["--model".into(), format!("{}/config.json", e5())], "is a file: give the model's directory"),
        (vec!["--model".into(), "org/name@".into()], "the revision after @ is empty"),
        (vec!["--model".into(), "/dev/null".into()], "model \"/dev/null\" is a device: give a model directory"),
        (vec!["--model".into(), dir.path().to_str().unwrap().into()], "has no config.json"),
    ];
    for (args, want) in cases {
        let args: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
        let out = embed(&args, b"x\n");
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = stderr(&out);
        assert!(err.contains(want), "{args:?}: expected {want:?} in {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
    // -o naming the input (here through a second path to it) would empty it before it is read.
    let input = dir.path().join("in.txt");
    std::fs::write(&input, "one\ntwo\n").unwrap();
    let alias = format!("{}/../{}/in.txt", dir.path().display(), dir.path().file_name().unwrap().to_str().unwrap());
    let out = embed(&["--model", &e5(), "--input", input.to_str().unwrap(), "-o", &alias], b"");
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("would destroy the input"), "{}", stderr(&out));
    assert_eq!(std::fs::read_to_string(&input).unwrap(), "one\ntwo\n");
    // So would -o naming the file that standard input reads (`-o in.txt < in.txt`).
    let out = common::xsent()
        .args(["embed", "--model", &e5(), "-o", input.to_str().unwrap()])
        .stdin(std::fs::File::open(&input).unwrap())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("would destroy the input"), "{}", stderr(&out));
    assert_eq!(std::fs::read_to_string(&input).unwrap(), "one\ntwo\n");
    let other = dir.path().join("out.jsonl");
    let out = common::xsent()
        .args(["embed", "--model", &e5(), "-o", other.to_str().unwrap()])
        .stdin(std::fs::File::open(&input).unwrap())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(std::fs::read_to_string(&other).unwrap().lines().count(), 2);
    // A model dir with config but no weights names the missing file and how to get it.
    std::fs::copy(common::model("all-MiniLM-L6-v2").join("config.json"), dir.path().join("config.json")).unwrap();
    let out = embed(&["--model", dir.path().to_str().unwrap()], b"x\n");
    let err = stderr(&out);
    assert!(
        err.contains("has no weights") && err.contains("model.safetensors") && err.contains("pytorch_model.bin"),
        "{err}"
    );
}

#[test]
fn broken_model_directories_are_refused_with_the_file_named() {
    let dir = tempfile::tempdir().unwrap();
    let words: Vec<String> = (0..10).map(|i| format!("w{i}")).collect();
    let fresh = |name: &str| {
        let d = dir.path().join(name);
        common::tiny_model("tiny-bert", &d, &words)
    };
    let check = |model: &std::path::Path, want: &[&str]| {
        let out = embed(&["--model", model.to_str().unwrap()], b"w1 w2\n");
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(!err.contains("panicked"), "{err}");
        for w in want {
            assert!(err.contains(w), "expected {w:?} in {err}");
        }
    };
    // The intact copy embeds.
    let ok = fresh("ok");
    assert!(embed(&["--model", ok.to_str().unwrap()], b"w1 w2\n").status.success());
    // `--input -` reads stdin.
    let out = embed(&["--model", ok.to_str().unwrap(), "--input", "-"], b"w1 w2\nw3\n");
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(String::from_utf8(out.stdout).unwrap().lines().count(), 2);
    // A tokenizer whose ids run past the model's 1,000 embeddings.
    let m = fresh("ids");
    let tok = std::fs::read_to_string(m.join("tokenizer.json")).unwrap().replace("\"w9\":13", "\"w9\":5000");
    assert!(tok.contains("5000"));
    std::fs::write(m.join("tokenizer.json"), tok).unwrap();
    check(&m, &["tokenizer.json", "5000", "1000 token embeddings", "does not belong"]);
    // A padding id past the embeddings: refused at load, not when a batch first needs padding.
    let m = fresh("pad");
    let tok = std::fs::read_to_string(m.join("tokenizer.json")).unwrap().replace(
        "\"padding\":null",
        r#""padding":{"strategy":"BatchLongest","direction":"Right","pad_to_multiple_of":null,"pad_id":5000,"pad_type_id":0,"pad_token":"[PAD]"}"#,
    );
    assert!(tok.contains("5000"));
    std::fs::write(m.join("tokenizer.json"), tok).unwrap();
    check(&m, &["tokenizer.json", "padding token id is 5000", "1000 token embeddings"]);
    // A config with no attention heads.
    let m = fresh("heads");
    let cfg = std::fs::read_to_string(m.join("config.json")).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&cfg).unwrap();
    v["num_attention_heads"] = 0.into();
    std::fs::write(m.join("config.json"), v.to_string()).unwrap();
    check(&m, &["config.json", "num_attention_heads is 0"]);
    // An activation the encoder does not have: config.json is named, not the weights.
    let m = fresh("act");
    let cfg = std::fs::read_to_string(m.join("config.json")).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&cfg).unwrap();
    v["hidden_act"] = "quick_gelu".into();
    std::fs::write(m.join("config.json"), v.to_string()).unwrap();
    check(&m, &["config.json", "hidden_act \"quick_gelu\" is not supported"]);
    // A config.json that does not describe the weights: its key is named, with no backtrace
    // (candle adds one to its own errors when RUST_BACKTRACE is set).
    let tiny_layers =
        serde_json::from_str::<serde_json::Value>(&std::fs::read_to_string(ok.join("config.json")).unwrap()).unwrap()
            ["num_hidden_layers"]
            .as_u64()
            .unwrap();
    for (key, value, want) in [
        ("num_hidden_layers", tiny_layers + 1, format!("{} layers are to be loaded (num_hidden_layers in config.json, or --layers), but the weights hold {tiny_layers}", tiny_layers + 1)),
        ("vocab_size", 2000, "config.json's vocab_size, hidden_size give embeddings.word_embeddings.weight the shape [2000,".to_string()),
        ("intermediate_size", 7, "config.json's intermediate_size, hidden_size give encoder.layer.0.intermediate.dense.weight the shape [7,".to_string()),
    ] {
        let m = fresh(&format!("cfg-{key}"));
        let mut v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(m.join("config.json")).unwrap()).unwrap();
        v[key] = value.into();
        std::fs::write(m.join("config.json"), v.to_string()).unwrap();
        let out = common::xsent().args(["embed", "--model", m.to_str().unwrap()]).env("RUST_BACKTRACE", "1").stdin(Stdio::null()).output().unwrap();
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(err.contains(&want) && err.contains("config.json"), "{key}: {err}");
        assert!(!err.contains("candle-core"), "{key}: a backtrace: {err}");
    }
    // A thread count that is no number is said to be ignored.
    let out = common::xsent()
        .args(["embed", "--model", ok.to_str().unwrap()])
        .env("XSENT_THREADS", "two")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("XSENT_THREADS=\"two\" is not a number of threads (1 or more); ignored"),
        "{}",
        stderr(&out)
    );
    // A thread count beyond what xsent starts (a failed spawn panics) is capped, with a word.
    let mut child = common::xsent()
        .args(["embed", "--model", ok.to_str().unwrap(), "--batch-size", "1"])
        .env("XSENT_THREADS", "1000000")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), b"a\nb\nc\n").unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 3);
    assert!(
        stderr(&out).contains("XSENT_THREADS=1000000 is more threads than xsent starts; using 1024"),
        "{}",
        stderr(&out)
    );
    // A run directory of xsent train points to its model.
    let run = dir.path().join("run");
    std::fs::create_dir_all(&run).unwrap();
    std::fs::write(run.join("config.toml"), "recipe = \"distill\"\n").unwrap();
    std::fs::rename(fresh("run-model"), run.join("final")).unwrap();
    check(
        &run,
        &["is a run directory of xsent train, not a model", &format!("--model {}", run.join("final").display())],
    );
    // A max_seq_length that is no length.
    let m = fresh("maxlen");
    std::fs::write(m.join("sentence_bert_config.json"), r#"{"max_seq_length": "abc"}"#).unwrap();
    check(&m, &["sentence_bert_config.json", "max_seq_length"]);
    // A pooling config written for another model.
    let m = fresh("pooling");
    std::fs::create_dir_all(m.join("1_Pooling")).unwrap();
    std::fs::write(
        m.join("1_Pooling/config.json"),
        r#"{"word_embedding_dimension": 999, "pooling_mode_mean_tokens": true}"#,
    )
    .unwrap();
    check(&m, &["1_Pooling/config.json", "word_embedding_dimension is 999", "hidden_size is 32"]);
    // A module xsent cannot run would change the vectors.
    let m = fresh("modules");
    std::fs::write(
        m.join("modules.json"),
        r#"[{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
           {"idx": 1, "name": "1", "path": "1_LSTM", "type": "sentence_transformers.models.LSTM"}]"#,
    )
    .unwrap();
    check(&m, &["modules.json", "LSTM", "cannot run"]);
    // A Pooling module listed at a path that is not there (mean pooling would be used instead
    // of the module's own).
    let m = fresh("pooling-path");
    std::fs::write(
        m.join("modules.json"),
        r#"[{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
           {"idx": 1, "name": "1", "path": "9_Missing", "type": "sentence_transformers.models.Pooling"}]"#,
    )
    .unwrap();
    check(&m, &["modules.json", "lists a Pooling module", "9_Missing/config.json", "does not exist"]);
    // Weights that give NaN vectors: an error naming the text, not rows of null (nor, in
    // `eval`, a correlation computed from NaN cosines).
    let m = fresh("nan");
    let weights = m.join("model.safetensors");
    let mut t = candle_core::safetensors::load(&weights, &candle_core::Device::Cpu).unwrap();
    let name = t.keys().find(|k| k.contains("word_embeddings")).unwrap().clone();
    let nan = (t[&name].ones_like().unwrap() * f64::NAN).unwrap();
    t.insert(name, nan);
    candle_core::safetensors::save(&t, &weights).unwrap();
    check(&m, &["NaN or infinite values", "text 1 of 1", "\"w1 w2\""]);
    let pairs = dir.path().join("g3.tsv");
    std::fs::write(&pairs, "w1\tw2\t1\nw3\tw4\t2\nw5\tw6\t3\n").unwrap();
    let o = common::xsent()
        .args(["eval", "sts", "--model", m.to_str().unwrap(), "--pairs", pairs.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("NaN or infinite values") && !String::from_utf8_lossy(&o.stdout).contains("100.00"),
        "{}",
        stderr(&o)
    );
    // `-o -` is standard output; npy cannot go to a pipe (its header is written last).
    let out = embed(&["--model", ok.to_str().unwrap(), "-o", "-"], b"w1 w2\n");
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(rows(&out).len(), 1);
    let out = embed(&["--model", ok.to_str().unwrap(), "--format", "npy", "-o", "/dev/stdout"], b"w1 w2\n");
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("must be a file it can seek in"), "{}", stderr(&out));
}

#[test]
fn a_reader_that_stops_early_ends_the_run_quietly() {
    // `xsent embed | head -1`: more rows than the 1 MiB output buffer holds, so xsent is still
    // writing when the reader goes away; it stops with exit 0 and nothing on stderr.
    let dir = tempfile::tempdir().unwrap();
    let words: Vec<String> = (0..10).map(|i| format!("w{i}")).collect();
    let model = common::tiny_model("tiny-bert", dir.path(), &words);
    let input = dir.path().join("in.txt");
    std::fs::write(&input, "w1 w2 w3\n".repeat(20_000)).unwrap();
    for format in ["jsonl", "f32"] {
        let mut child = common::xsent()
            .args(["embed", "--model", model.to_str().unwrap(), "--format", format, "--input", input.to_str().unwrap()])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut first = [0u8; 64];
        std::io::Read::read_exact(child.stdout.as_mut().unwrap(), &mut first).unwrap();
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{format}: {:?} {}", out.status, stderr(&out));
        assert_eq!(stderr(&out), "", "{format}");
    }
}

/// sentence-transformers prepends a model's default prompt (`config_sentence_transformers.json`)
/// to every text; xsent does the same, so a model dir gives the same vectors in both.
#[test]
fn a_default_prompt_is_prepended_as_sentence_transformers_does() {
    let dir = tempfile::tempdir().unwrap();
    let words: Vec<String> = (0..10).map(|i| format!("w{i}")).collect();
    let model = |name: &str| common::tiny_model("tiny-bert", &dir.path().join(name), &words);
    let run = |m: &std::path::Path, args: &[&str]| {
        let mut all = vec!["--model", m.to_str().unwrap()];
        all.extend_from_slice(args);
        embed(&all, b"w1 w2\nw3\n")
    };
    let plain = model("plain");
    let with_prefix = rows(&run(&plain, &["--prefix", "w5 "]));
    let without = rows(&run(&plain, &[]));
    assert_ne!(with_prefix, without, "the prefix must change the vectors for this check to mean anything");

    let prompted = model("prompted");
    std::fs::write(
        prompted.join("config_sentence_transformers.json"),
        r#"{"prompts": {"query": "w5 ", "passage": "w6 "}, "default_prompt_name": "query", "similarity_fn_name": "cosine"}"#,
    )
    .unwrap();
    assert_eq!(rows(&run(&prompted, &[])), with_prefix);
    // --prefix wins, an empty one too.
    assert_eq!(rows(&run(&prompted, &["--prefix", ""])), without);
    // --prompt-name picks another prompt (sentence-transformers' prompt_name); document is unset.
    assert_eq!(rows(&run(&prompted, &["--prompt-name", "passage"])), rows(&run(&plain, &["--prefix", "w6 "])));
    assert_eq!(rows(&run(&prompted, &["--prompt-name", "document"])), without);
    let out = run(&prompted, &["--prompt-name", "nope"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("no prompt named \"nope\"; its prompts are document, passage, query"),
        "{}",
        stderr(&out)
    );
    // Without the file, query and document exist and are empty, as in sentence-transformers.
    assert_eq!(rows(&run(&plain, &["--prompt-name", "query"])), without);
    let out = run(&plain, &["--prompt-name", "passage"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("no config_sentence_transformers.json")
            && stderr(&out).contains("its prompts are document, query"),
        "{}",
        stderr(&out)
    );
    let out = run(&prompted, &["--prompt-name", "query", "--prefix", "w5 "]);
    assert_eq!(out.status.code(), Some(2), "one or the other");
    assert!(stderr(&out).contains("cannot be used with"), "{}", stderr(&out));
    // No default prompt, or one that is empty (sentence-transformers' query and document prompts
    // exist even when unset, and a null prompt is empty): nothing is prepended.
    for (name, cfg) in [
        ("none", r#"{"prompts": {"query": "w5 "}, "default_prompt_name": null}"#),
        ("unset", r#"{"prompts": {}, "default_prompt_name": "query"}"#),
        ("null", r#"{"prompts": {"q": null}, "default_prompt_name": "q"}"#),
    ] {
        let m = model(name);
        std::fs::write(m.join("config_sentence_transformers.json"), cfg).unwrap();
        assert_eq!(rows(&run(&m, &[])), without, "{cfg}");
    }
    // A model saved by an earlier xsent keeps its prefix in xsent.json.
    let old = model("old");
    std::fs::write(old.join("xsent.json"), r#"{"prefix": "w5 "}"#).unwrap();
    assert_eq!(rows(&run(&old, &[])), with_prefix);
    // ... and it wins over a default prompt added later.
    std::fs::write(
        old.join("config_sentence_transformers.json"),
        r#"{"prompts": {"query": "w6 "}, "default_prompt_name": "query"}"#,
    )
    .unwrap();
    assert_eq!(rows(&run(&old, &[])), with_prefix);

    // A default prompt that names no prompt, or no text.
    let bad = model("bad");
    std::fs::write(
        bad.join("config_sentence_transformers.json"),
        r#"{"prompts": {"query": "w5 ", "n": 5}, "default_prompt_name": "passage"}"#,
    )
    .unwrap();
    let out = run(&bad, &[]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    for w in ["config_sentence_transformers.json", "no prompt named \"passage\"", "its prompts are document, n, query"]
    {
        assert!(err.contains(w), "expected {w:?} in {err}");
    }
    let err = stderr(&run(&bad, &["--prompt-name", "n"]));
    assert!(err.contains("the prompt \"n\" is 5, not text"), "{err}");
    // "prompts" that is not an object is an error, not silently no prompt.
    std::fs::write(
        bad.join("config_sentence_transformers.json"),
        r#"{"prompts": "w5 ", "default_prompt_name": "query"}"#,
    )
    .unwrap();
    let out = run(&bad, &[]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("config_sentence_transformers.json: \"prompts\" is \"w5 \"; expected an object"), "{err}");
    // Pooling that leaves the prompt out cannot be reproduced with a prompt: refused, not wrong.
    let excl = model("exclude");
    std::fs::create_dir_all(excl.join("1_Pooling")).unwrap();
    std::fs::write(
        excl.join("1_Pooling/config.json"),
        r#"{"pooling_mode_mean_tokens": true, "include_prompt": false}"#,
    )
    .unwrap();
    assert_eq!(rows(&run(&excl, &[])), without, "no prompt: include_prompt does not matter");
    let out = run(&excl, &["--prefix", "w5 "]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    for w in ["1_Pooling/config.json", "include_prompt is false", "\"w5 \"", "--prefix \"\""] {
        assert!(err.contains(w), "expected {w:?} in {err}");
    }
    // sentence-transformers applies a whitespace prompt too (and leaves [CLS] out of the pooling).
    assert_eq!(run(&excl, &["--prefix", " "]).status.code(), Some(1));
    // Choosing the pooling on purpose pools every token, prompt included.
    assert_eq!(rows(&run(&excl, &["--prefix", "w5 ", "--pooling", "mean"])), with_prefix);
}

/// `do_lower_case` in sentence_bert_config.json: sentence-transformers lowercases prefix + text
/// before the tokenizer sees it, and so does xsent.
#[test]
fn do_lower_case_lowercases_prefix_and_text() {
    let dir = tempfile::tempdir().unwrap();
    let words: Vec<String> = (0..10).map(|i| format!("w{i}")).collect();
    let model = |name: &str| common::tiny_model("tiny-bert", &dir.path().join(name), &words);
    let run = |m: &std::path::Path, args: &[&str], input: &[u8]| {
        let mut all = vec!["--model", m.to_str().unwrap()];
        all.extend_from_slice(args);
        embed(&all, input)
    };
    let plain = model("plain");
    let lower = rows(&run(&plain, &["--prefix", "w5 "], b"w1 w2\nw3\n"));
    // The word-level vocabulary has no upper-case words: unlowercased, "W1" is [UNK].
    assert_ne!(rows(&run(&plain, &["--prefix", "W5 "], b"W1 W2\nW3\n")), lower);
    let cased = model("lowercasing");
    std::fs::write(cased.join("sentence_bert_config.json"), r#"{"max_seq_length": 64, "do_lower_case": true}"#)
        .unwrap();
    assert_eq!(rows(&run(&cased, &["--prefix", "W5 "], b"W1 W2\nW3\n")), lower);
    // A model saved after training keeps lowercasing.
    let opts = xsent::model::LoadOptions { trainable: true, ..Default::default() };
    let saved = dir.path().join("saved");
    xsent::SentenceEncoder::load(cased.to_str().unwrap(), &opts).unwrap().save(&saved).unwrap();
    assert_eq!(rows(&run(&saved, &["--prefix", "W5 "], b"W1 W2\nW3\n")), lower);
    let bad = model("bad");
    std::fs::write(bad.join("sentence_bert_config.json"), r#"{"do_lower_case": "yes"}"#).unwrap();
    let out = run(&bad, &[], b"w1\n");
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("sentence_bert_config.json") && err.contains("do_lower_case"), "{err}");
}

/// Normalisation follows the model as sentence-transformers runs it: a `modules.json` without a
/// Normalize module gives the raw pooled vectors, one with it unit vectors, and a plain
/// checkpoint (no `modules.json`) unit vectors; `--normalize` / `--no-normalize` override.
#[test]
fn normalisation_follows_the_models_modules_json() {
    let dir = tempfile::tempdir().unwrap();
    let words: Vec<String> = (0..10).map(|i| format!("w{i}")).collect();
    let model = common::tiny_model("tiny-bert", dir.path(), &words);
    let norms = |extra: &[&str]| -> Vec<f64> {
        let out = embed(&[&["--model", model.to_str().unwrap()], extra].concat(), b"w1 w2\nw3\n");
        assert!(out.status.success(), "{}", stderr(&out));
        rows(&out).iter().map(|r| r.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt()).collect()
    };
    let unit = |n: &[f64]| n.iter().all(|x| (x - 1.0).abs() < 1e-5);
    assert!(unit(&norms(&[])), "no modules.json: normalised");
    let raw = norms(&["--no-normalize"]);
    assert!(!unit(&raw), "the raw pooled vectors of the fixture are not unit vectors: {raw:?}");
    let modules = |normalize: bool| {
        let mut m = vec![
            r#"{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"}"#,
            r#"{"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}"#,
        ];
        if normalize {
            m.push(
                r#"{"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}"#,
            );
        }
        std::fs::write(model.join("modules.json"), format!("[{}]", m.join(","))).unwrap();
    };
    std::fs::create_dir_all(model.join("1_Pooling")).unwrap();
    std::fs::write(
        model.join("1_Pooling/config.json"),
        r#"{"word_embedding_dimension": 32, "pooling_mode_mean_tokens": true}"#,
    )
    .unwrap();
    modules(false);
    assert_eq!(norms(&[]), raw, "modules.json without Normalize: the raw vectors, as sentence-transformers");
    assert!(unit(&norms(&["--normalize"])));
    modules(true);
    assert!(unit(&norms(&[])));
    assert_eq!(norms(&["--no-normalize"]), raw);
}

/// `--model NAME` without a `/` names a model in the models folder (`XSENT_MODELS`), as
/// sentence-transformers takes `all-MiniLM-L6-v2`; a directory of that name where xsent runs
/// comes first, and a name that is neither lists the installed models.
#[test]
fn a_bare_model_name_is_looked_up_in_the_models_folder() {
    let models = tempfile::tempdir().unwrap();
    let installed = common::tiny_model("tiny-bert", models.path(), &["hello".into(), "world".into()]);
    let run = |cwd: &std::path::Path, model: &str| {
        let mut child = common::xsent()
            .args(["embed", "--model", model])
            .env("XSENT_MODELS", models.path())
            .current_dir(cwd)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        common::feed(&mut child, b"hello world\n");
        child.wait_with_output().unwrap()
    };
    let elsewhere = tempfile::tempdir().unwrap();
    let by_path = run(elsewhere.path(), installed.to_str().unwrap());
    let by_name = run(elsewhere.path(), "tiny-bert");
    assert!(by_path.status.success() && by_name.status.success(), "{}{}", stderr(&by_path), stderr(&by_name));
    assert_eq!(by_name.stdout, by_path.stdout);
    // A folder `tiny-bert` where xsent runs is taken first (here one that is not a model).
    std::fs::create_dir(elsewhere.path().join("tiny-bert")).unwrap();
    let local = run(elsewhere.path(), "tiny-bert");
    assert_eq!(local.status.code(), Some(1));
    assert!(stderr(&local).contains("has no config.json"), "{}", stderr(&local));
    // A model of another kind (its xsent.json) is found by its bare name too: here a kind this
    // xsent does not know, which it names.
    let other = models.path().join("other-kind");
    std::fs::create_dir(&other).unwrap();
    std::fs::write(other.join("xsent.json"), r#"{"kind": "future-kind"}"#).unwrap();
    let o = run(elsewhere.path(), "other-kind");
    assert!(stderr(&o).contains("names model kind \"future-kind\""), "{}", stderr(&o));
    let missing = run(elsewhere.path(), "no-such-model");
    assert_eq!(missing.status.code(), Some(1));
    let e = stderr(&missing);
    assert!(e.contains("nor a model installed in") && e.contains("(other-kind, tiny-bert)"), "{e}");
}

/// A special token id of the tokenizer's post-processor past the model's embeddings is refused
/// at load, naming tokenizer.json (an outside probe: 999999 failed mid-embed with "index-select
/// invalid index" naming no file; 4294967295 embedded with exit 0).
#[test]
fn post_processor_ids_past_the_embeddings_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let model = common::tiny_model("tiny-bert", dir.path(), &["hello".into()]);
    let path = model.join("tokenizer.json");
    let good: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    for id in [1000u64, 999_999, u32::MAX as u64] {
        let mut tok = good.clone();
        tok["post_processor"]["cls"] = serde_json::json!(["[CLS]", id]);
        std::fs::write(&path, tok.to_string()).unwrap();
        let out = embed(&["--model", model.to_str().unwrap()], b"hello\n");
        let e = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{id}: {e}");
        assert!(
            e.contains("its post-processor adds the special token \"[CLS]\"")
                && e.contains(&format!("with the id {id}"))
                && e.contains(path.to_str().unwrap()),
            "{id}: {e}"
        );
    }
}

#[test]
fn texts_tokenised_in_several_windows_keep_their_order_and_cut_flags() {
    // `--batch-size 256` reads 8,192 lines a window, which the tokenizer gets 4,096 at a time;
    // `--batch-size 32` reads 1,024, one tokenizer call each. Same rows, same count of cut lines.
    let dir = tempfile::tempdir().unwrap();
    let words: Vec<String> = (0..10).map(|i| format!("w{i}")).collect();
    let model = common::tiny_model("tiny-bert", dir.path(), &words);
    // 5,000 distinct lines of 1 to 4 words; those of 3 or more words are cut at 4 tokens.
    let lines: Vec<String> = (0..5000usize)
        .map(|i| {
            let n = 1 + i % 4;
            (0..n).map(|k| format!("w{}", (i / 4usize.pow(k as u32) + k) % 10)).collect::<Vec<_>>().join(" ")
        })
        .collect();
    let cut = lines.iter().filter(|l| l.split(' ').count() >= 3).count();
    let input = lines.join("\n") + "\n";
    let run = |batch: &str| {
        let out =
            embed(&["--model", model.to_str().unwrap(), "--max-length", "4", "--batch-size", batch], input.as_bytes());
        assert!(out.status.success(), "{}", stderr(&out));
        let err = stderr(&out);
        assert!(err.contains(&format!("{cut} of 5000 lines were longer than 4 tokens")), "{batch}: {err}");
        rows(&out)
    };
    let (big, small) = (run("256"), run("32"));
    assert_eq!((big.len(), small.len()), (5000, 5000));
    for (i, (a, b)) in big.iter().zip(&small).enumerate() {
        assert!(a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-5), "line {}: {a:?} vs {b:?}", i + 1);
    }
}
