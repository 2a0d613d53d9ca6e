//! Shared test helpers: where fixtures, models and data live.
#![allow(dead_code)]

use std::path::PathBuf;

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `XSENT_FIXTURES`, else `../shared/fixtures`.
pub fn fixtures() -> PathBuf {
    let p = std::env::var("XSENT_FIXTURES").map(PathBuf::from).unwrap_or_else(|_| repo().join("../shared/fixtures"));
    assert!(p.is_dir(), "fixtures not found at {} (set XSENT_FIXTURES)", p.display());
    p
}

/// A model made by scripts/setup.sh (`XSENT_MODELS`, else `models/`). Fails, never skips.
pub fn model(name: &str) -> PathBuf {
    let base = std::env::var("XSENT_MODELS").map(PathBuf::from).unwrap_or_else(|_| repo().join("models"));
    let p = base.join(name);
    assert!(
        p.join("model.safetensors").is_file(),
        "model {} is missing: run scripts/setup.sh first (it downloads the wheels and converts the models)",
        p.display()
    );
    p
}

/// `XSENT_DATA`, else `../shared/data`.
pub fn data() -> PathBuf {
    let p = std::env::var("XSENT_DATA").map(PathBuf::from).unwrap_or_else(|_| repo().join("../shared/data"));
    assert!(p.is_dir(), "data not found at {} (set XSENT_DATA)", p.display());
    p
}

pub fn xsent() -> std::process::Command {
    // XSENT_TEST_BIN: run the CLI tests against another build (e.g. to see a test fail on an
    // older one).
    let bin = std::env::var_os("XSENT_TEST_BIN").unwrap_or_else(|| env!("CARGO_BIN_EXE_xsent").into());
    std::process::Command::new(bin)
}

/// The multilingual-e5-small directory made by setup.sh, as a command-line argument.
pub fn e5_small() -> String {
    model("multilingual-e5-small").to_str().expect("a UTF-8 model path").to_string()
}

/// `XSENT_DATA` (see [`data`]) as a command-line argument.
pub fn data_arg() -> String {
    data().to_str().expect("a UTF-8 data path").to_string()
}

/// Run `xsent eval ARGS --report R` (R in a fresh temporary directory), assert that it
/// succeeded, and return its stdout (the table) and the parsed JSON report.
pub fn eval_report<I, S>(args: I) -> (String, serde_json::Value)
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    let dir = tempfile::tempdir().expect("a temporary directory");
    let report = dir.path().join("report.json");
    let out = xsent().arg("eval").args(args).arg("--report").arg(&report).output().expect("xsent runs");
    assert!(out.status.success(), "xsent eval failed: {}", String::from_utf8_lossy(&out.stderr));
    let text = std::fs::read_to_string(&report).unwrap_or_else(|e| panic!("no report at {}: {e}", report.display()));
    let json = serde_json::from_str(&text).unwrap_or_else(|e| panic!("report is not JSON ({e}): {text}"));
    (String::from_utf8_lossy(&out.stdout).into_owned(), json)
}

/// Write `input` to the child's standard input and close it. A process may stop on an error
/// before it reads its input (a refused output file, a model that fails to load): the write then
/// fails with a broken pipe, which is not the test's failure, so that one error is let pass and
/// the caller's check of the exit status and stderr says what happened. Any other error panics.
pub fn feed(child: &mut std::process::Child, input: &[u8]) {
    use std::io::Write;
    let mut stdin = child.stdin.take().expect("a stdin pipe");
    match stdin.write_all(input) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => panic!("writing the child's stdin: {e}"),
        _ => {}
    }
}

/// Pipe `lines` into `xsent embed --model MODEL ARGS` (default JSON-lines output), assert that
/// it succeeded, and return one vector per input line.
pub fn embed_cli(model: &std::path::Path, args: &[&str], lines: &[&str]) -> Vec<Vec<f32>> {
    use std::process::Stdio;
    let mut child = xsent()
        .args(["embed", "--model"])
        .arg(model)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("xsent runs");
    feed(&mut child, lines.join("\n").as_bytes());
    let o = child.wait_with_output().expect("xsent finishes");
    assert!(o.status.success(), "xsent embed failed: {}", String::from_utf8_lossy(&o.stderr));
    let rows: Vec<Vec<f32>> = String::from_utf8(o.stdout)
        .expect("UTF-8 output")
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON array per line"))
        .collect();
    assert_eq!(rows.len(), lines.len(), "one vector per input line");
    rows
}

/// Every line of a training run's `metrics.jsonl`, parsed (steps, validations, the data line).
pub fn metrics_lines(run: &std::path::Path) -> Vec<serde_json::Value> {
    let path = run.join("metrics.jsonl");
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{}: not JSON ({e}): {l}", path.display())))
        .collect()
}

pub fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| *x as f64 * *y as f64).sum();
    let na: f64 = a.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    dot / (na * nb)
}

pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "length mismatch");
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

/// A model dir: a fixture checkpoint plus a word-level tokenizer over `words`.
pub fn tiny_model(fixture: &str, dir: &std::path::Path, words: &[String]) -> PathBuf {
    let out = dir.join(fixture);
    std::fs::create_dir_all(&out).unwrap();
    for f in ["config.json", "model.safetensors"] {
        std::fs::copy(fixtures().join(fixture).join(f), out.join(f)).unwrap();
    }
    let mut vocab = serde_json::Map::new();
    for (i, t) in ["[PAD]", "[UNK]", "[CLS]", "[SEP]"].iter().enumerate() {
        vocab.insert(t.to_string(), i.into());
    }
    for (i, w) in words.iter().enumerate() {
        vocab.insert(w.clone(), (i + 4).into());
    }
    assert!(vocab.len() <= 1000, "the fixtures have 1,000 embeddings");
    let tok = serde_json::json!({
        "version": "1.0", "truncation": null, "padding": null,
        "added_tokens": [],
        "normalizer": null,
        "pre_tokenizer": {"type": "Whitespace"},
        "post_processor": {"type": "BertProcessing", "sep": ["[SEP]", 3], "cls": ["[CLS]", 2]},
        "decoder": null,
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "[UNK]"}
    });
    std::fs::write(out.join("tokenizer.json"), tok.to_string()).unwrap();
    out
}

/// Synthetic parallel "English" / "German" sentences over 40 words each (`house7` ↔ `haus7`),
/// 3 to 7 words long, deterministic for a seed.
pub fn word_pairs(n: usize, seed: u64) -> Vec<(String, String)> {
    let en: Vec<String> = (0..40).map(|i| format!("house{i}")).collect();
    let de: Vec<String> = (0..40).map(|i| format!("haus{i}")).collect();
    let mut x: u64 = seed;
    (0..n)
        .map(|_| {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let len = 3 + (x >> 60) as usize % 5;
            let (mut s, mut t) = (Vec::new(), Vec::new());
            for _ in 0..len {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let w = (x >> 33) as usize % 40;
                s.push(en[w].clone());
                t.push(de[w].clone());
            }
            (s.join(" "), t.join(" "))
        })
        .collect()
}

/// A temporary run area for `xsent train`: `pairs.tsv` of parallel pairs and a config made of
/// `body` plus a `[[data.sources]]` entry reading that file (en → de).
pub struct TrainSetup {
    pub dir: tempfile::TempDir,
    pub config: PathBuf,
}

impl TrainSetup {
    pub fn new(body: &str, pairs: &[(String, String)]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let tsv: String = pairs.iter().map(|(s, t)| format!("{s}\t{t}\n")).collect();
        let data = dir.path().join("pairs.tsv");
        std::fs::write(&data, tsv).unwrap();
        let config = dir.path().join("config.toml");
        let source = format!(
            "[[data.sources]]\nkind = \"tsv\"\npath = {:?}\nsrc_lang = \"en\"\ntgt_lang = \"de\"\n",
            data.to_str().unwrap()
        );
        std::fs::write(&config, format!("{body}\n{source}")).unwrap();
        Self { dir, config }
    }

    /// `xsent train --config CONFIG --out DIR/out ARGS...`
    pub fn train(&self, out: &str, args: &[&str]) -> std::process::Output {
        xsent()
            .arg("train")
            .arg("--config")
            .arg(&self.config)
            .arg("--out")
            .arg(self.dir.path().join(out))
            .args(args)
            .output()
            .unwrap()
    }

    pub fn run(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

/// Spearman's ρ with average ranks for ties (written here, apart from the library's).
pub fn spearman(x: &[f64], y: &[f64]) -> f64 {
    fn ranks(v: &[f64]) -> Vec<f64> {
        let mut idx: Vec<usize> = (0..v.len()).collect();
        idx.sort_by(|&a, &b| v[a].partial_cmp(&v[b]).unwrap());
        let mut r = vec![0.0; v.len()];
        let mut i = 0;
        while i < idx.len() {
            let mut j = i;
            while j + 1 < idx.len() && v[idx[j + 1]] == v[idx[i]] {
                j += 1;
            }
            for k in i..=j {
                r[idx[k]] = (i + j) as f64 / 2.0;
            }
            i = j + 1;
        }
        r
    }
    let (a, b) = (ranks(x), ranks(y));
    let n = a.len() as f64;
    let (ma, mb) = (a.iter().sum::<f64>() / n, b.iter().sum::<f64>() / n);
    let cov: f64 = a.iter().zip(&b).map(|(p, q)| (p - ma) * (q - mb)).sum();
    let va: f64 = a.iter().map(|p| (p - ma).powi(2)).sum();
    let vb: f64 = b.iter().map(|q| (q - mb).powi(2)).sum();
    cov / (va * vb).sqrt()
}

/// Write scored pairs as a TSV that `train.val_sts` and `eval sts --pairs` read.
pub fn write_scored_pairs(path: &std::path::Path, pairs: &[(String, String, f64)]) {
    std::fs::write(path, pairs.iter().map(|(a, b, g)| format!("{a}\t{b}\t{g}\n")).collect::<String>()).unwrap();
}

/// Spearman ×100 of the cosines `xsent embed` gives the pairs with `model` against their scores.
pub fn model_spearman(model: &std::path::Path, pairs: &[(String, String, f64)]) -> f64 {
    let texts: Vec<&str> = pairs.iter().flat_map(|(a, b, _)| [a.as_str(), b.as_str()]).collect();
    let vecs = embed_cli(model, &[], &texts);
    let sim: Vec<f64> = vecs.chunks(2).map(|p| cosine(&p[0], &p[1])).collect();
    100.0 * spearman(&sim, &pairs.iter().map(|p| p.2).collect::<Vec<_>>())
}

/// Scored pairs from `pairs`: even ones (translations) score 5, odd ones pair a sentence with
/// another's translation and score 0–4.
pub fn scored_pairs(pairs: &[(String, String)]) -> Vec<(String, String, f64)> {
    let n = pairs.len();
    pairs
        .iter()
        .enumerate()
        .map(|(i, (en, de))| {
            if i % 2 == 0 {
                (en.clone(), de.clone(), 5.0)
            } else {
                (en.clone(), pairs[n - i].1.clone(), (i % 5) as f64)
            }
        })
        .collect()
}

/// Run `xsent ARGS` whose `-o` file is in `out_dir`, interrupt it (SIGINT) once its temporary
/// output file appears there (it is made before the model loads), and return its exit status
/// and what is left in `out_dir`.
#[allow(dead_code)]
pub fn interrupt_once_writing(args: &[&str], out_dir: &std::path::Path) -> (std::process::ExitStatus, Vec<String>) {
    signal_once_writing("INT", args, out_dir)
}

/// [`interrupt_once_writing`] with another signal (`TERM`, `HUP`).
#[allow(dead_code)]
pub fn signal_once_writing(
    signal: &str,
    args: &[&str],
    out_dir: &std::path::Path,
) -> (std::process::ExitStatus, Vec<String>) {
    let mut child = xsent().args(args).stderr(std::process::Stdio::null()).spawn().unwrap();
    let names = || -> Vec<String> {
        std::fs::read_dir(out_dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect()
    };
    let start = std::time::Instant::now();
    while !names().iter().any(|n| n.starts_with(".xsent-out-")) {
        assert!(start.elapsed().as_secs() < 60, "no temporary file appeared");
        assert!(child.try_wait().unwrap().is_none(), "{args:?} ended before it was interrupted");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    std::thread::sleep(std::time::Duration::from_millis(200));
    let killed =
        std::process::Command::new("kill").args([&format!("-{signal}"), &child.id().to_string()]).status().unwrap();
    assert!(killed.success());
    let status = child.wait().unwrap();
    (status, names())
}

/// Every tensor of a safetensors file as f32 values, by name.
pub fn load_f32(path: &std::path::Path) -> std::collections::HashMap<String, Vec<f32>> {
    candle_core::safetensors::load(path, &candle_core::Device::Cpu)
        .unwrap()
        .into_iter()
        .map(|(k, t)| (k, t.flatten_all().unwrap().to_vec1::<f32>().unwrap()))
        .collect()
}

/// Largest |a − b| / max(|b|, 1) over two slices of one length; a NaN anywhere gives NaN (which
/// fails every `<` bound; f32::max would drop it). The GPU tests' measure of agreement.
pub fn rel_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs() / y.abs().max(1.0)).fold(0f32, |m, d| {
        if d.is_nan() || m.is_nan() {
            f32::NAN
        } else {
            m.max(d)
        }
    })
}
