//! `xsent embed --shard i/N` and `--merge`: sharded runs equal the single run byte for byte,
//! shards resume, and a merge checks every manifest.

mod common;

use std::path::Path;
use std::process::Output;

/// MiniLM cut to its first layer: a real tokenizer and model, quick to load and run.
fn model_args() -> Vec<String> {
    vec!["--model".into(), common::model("all-MiniLM-L6-v2").to_str().unwrap().into(), "--layers".into(), "1".into()]
}

fn run(args: &[&str]) -> Output {
    let mut all: Vec<String> = vec!["embed".into()];
    all.extend(model_args());
    all.extend(args.iter().map(|s| s.to_string()));
    common::xsent().args(&all).output().expect("xsent runs")
}

fn ok(out: &Output) -> String {
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "xsent failed: {err}");
    err
}

fn fail(out: &Output) -> String {
    assert!(!out.status.success(), "xsent succeeded where it should fail");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Lines of many lengths (so batches pad differently), empty lines, CRLF endings and a last
/// line without a newline.
fn write_input(path: &Path, lines: usize) {
    let data = common::data().join("xnli/dev-en.tsv");
    let text = std::fs::read_to_string(data).unwrap();
    let mut out = String::new();
    for (i, l) in text.lines().take(lines).enumerate() {
        let first = l.split('\t').next().unwrap();
        let cut: String = first.chars().take(20 + (i * 37) % 200).collect();
        match i % 17 {
            3 => out.push('\n'),
            5 => out.push_str(&format!("{first}\r\n")),
            _ => out.push_str(&format!("{cut}\n")),
        }
    }
    out.push_str("the last line has no newline");
    std::fs::write(path, out).unwrap();
}

fn shard_all(input: &Path, dir: &Path, n: u32, extra: &[&str]) {
    for i in 0..n {
        let spec = format!("{i}/{n}");
        let mut args = vec!["--input", input.to_str().unwrap(), "--shard", &spec, "--out-dir", dir.to_str().unwrap()];
        args.extend_from_slice(extra);
        ok(&run(&args));
    }
}

fn merge(dir: &Path, out: &Path) -> Output {
    common::xsent().args(["embed", "--merge"]).arg(dir).arg("-o").arg(out).output().unwrap()
}

#[test]
fn sharded_runs_equal_the_single_run_byte_for_byte() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("in.txt");
    write_input(&input, 150);
    let small = tmp.path().join("small.txt");
    write_input(&small, 10);
    let n_small = std::fs::read_to_string(&small).unwrap().lines().count() as u32;
    // More shards than lines (most are empty) only on the small input: each shard loads the model.
    for (format, window, input, shards) in [
        ("f32", "3000", &input, vec![1u32, 3, 8]),
        ("npy", "1000", &input, vec![2, 5]),
        ("jsonl", "262144", &input, vec![2]),
        ("f32", "100", &small, vec![n_small + 4]),
    ] {
        let single = tmp.path().join(format!("single.{format}"));
        let common_args = ["--format", format, "--batch-size", "4", "--window-bytes", window];
        let mut args = vec!["--input", input.to_str().unwrap(), "-o", single.to_str().unwrap()];
        args.extend_from_slice(&common_args);
        ok(&run(&args));
        let want = std::fs::read(&single).unwrap();
        for n in shards {
            let dir = tmp.path().join(format!("{format}-{n}"));
            shard_all(input, &dir, n, &common_args);
            let merged = tmp.path().join(format!("merged-{format}-{n}"));
            ok(&merge(&dir, &merged));
            assert!(
                std::fs::read(&merged).unwrap() == want,
                "{format}, {n} shards: the merge differs from the single run"
            );
        }
    }
    // A merge to stdout (jsonl).
    let out = common::xsent().args(["embed", "--merge"]).arg(tmp.path().join("jsonl-2")).output().unwrap();
    ok(&out);
    assert!(out.stdout == std::fs::read(tmp.path().join("single.jsonl")).unwrap());
    // A merge onto the text the shards were embedded from is refused, the text kept.
    let text = std::fs::read(&input).unwrap();
    let out = merge(&tmp.path().join("jsonl-2"), &input);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("would destroy the input"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(std::fs::read(&input).unwrap(), text);
}

#[test]
fn shards_resume_and_redo_what_is_unfinished_or_changed() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("in.txt");
    write_input(&input, 60);
    let dir = tmp.path().join("shards");
    let d = dir.to_str().unwrap();
    let inp = input.to_str().unwrap();
    let args = |spec: &'static str| {
        vec!["--input", inp, "--shard", spec, "--out-dir", d, "--format", "f32", "--window-bytes", "500"]
    };
    shard_all(&input, &dir, 3, &["--format", "f32", "--window-bytes", "500"]);
    let out1 = dir.join("shard-00001-of-00003.f32");
    let before = std::fs::metadata(&out1).unwrap().modified().unwrap();
    let err = ok(&run(&args("1/3")));
    assert!(err.contains("shard 1/3 is done already"), "{err}");
    assert_eq!(std::fs::metadata(&out1).unwrap().modified().unwrap(), before, "a finished shard is not rewritten");

    // A changed output is redone.
    let good = std::fs::read(&out1).unwrap();
    let mut bad = good.clone();
    bad[7] ^= 1;
    std::fs::write(&out1, &bad).unwrap();
    let e = fail(&merge(&dir, &tmp.path().join("m.f32")));
    assert!(e.contains("has changed since shard 1/3 wrote it") && e.contains("run that shard again"), "{e}");
    assert!(
        !tmp.path().join("m.f32").exists() && !tmp.path().join("m.f32.partial").exists(),
        "a failed merge leaves no file"
    );
    let err = ok(&run(&args("1/3")));
    assert!(err.contains("no longer matches its manifest"), "{err}");
    assert_eq!(std::fs::read(&out1).unwrap(), good);

    // An interrupted shard (no manifest, a .partial beside it) is redone, and its .partial removed.
    std::fs::remove_file(dir.join("shard-00002-of-00003.manifest.json")).unwrap();
    std::fs::rename(dir.join("shard-00002-of-00003.f32"), dir.join("shard-00002-of-00003.f32.partial")).unwrap();
    let e = fail(&merge(&dir, &tmp.path().join("m.f32")));
    assert!(e.contains("shard 2/3 of 3 not finished"), "{e}");
    ok(&run(&args("2/3")));
    assert!(!dir.join("shard-00002-of-00003.f32.partial").exists());
    ok(&merge(&dir, &tmp.path().join("m.f32")));

    // The same folder with other options, or a changed input, is another run: refused.
    let mut other = args("0/3");
    other.extend(["--batch-size", "7"]);
    let e = fail(&run(&other));
    assert!(
        e.contains("belongs to another run: it was made with other options") && e.contains("another --out-dir"),
        "{e}"
    );
    std::fs::write(&input, "changed\n").unwrap();
    let e = fail(&run(&args("0/3")));
    assert!(e.contains("another input file"), "{e}");
}

#[test]
fn merge_checks_the_manifests() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("in.txt");
    write_input(&input, 40);
    let dir = tmp.path().join("s");
    shard_all(&input, &dir, 2, &["--format", "f32", "--window-bytes", "400"]);
    // A shard of another N in the same folder.
    let d = dir.to_str().unwrap();
    ok(&run(&[
        "--input",
        input.to_str().unwrap(),
        "--shard",
        "0/3",
        "--out-dir",
        d,
        "--format",
        "f32",
        "--window-bytes",
        "400",
    ]));
    let e = fail(&merge(&dir, &tmp.path().join("m.f32")));
    assert!(e.contains("holds shards of different runs"), "{e}");
    std::fs::remove_file(dir.join("shard-00000-of-00003.manifest.json")).unwrap();
    // A manifest whose byte range leaves a gap.
    let mpath = dir.join("shard-00001-of-00002.manifest.json");
    let text = std::fs::read_to_string(&mpath).unwrap();
    let mut m: serde_json::Value = serde_json::from_str(&text).unwrap();
    let start = m["bytes"][0].as_u64().unwrap();
    m["bytes"][0] = (start + 1).into();
    std::fs::write(&mpath, serde_json::to_string(&m).unwrap()).unwrap();
    let e = fail(&merge(&dir, &tmp.path().join("m.f32")));
    assert!(e.contains(&format!("covers bytes {}", start + 1)) && e.contains(&format!("end at byte {start}")), "{e}");
    std::fs::write(&mpath, text).unwrap();
    ok(&merge(&dir, &tmp.path().join("m.f32")));
    let e = fail(&common::xsent().args(["embed", "--merge"]).arg(tmp.path().join("nothing")).output().unwrap());
    assert!(e.contains("no such folder"), "{e}");
}

#[test]
fn shard_refuses_what_it_cannot_seek() {
    let tmp = tempfile::tempdir().unwrap();
    let gz = tmp.path().join("in.txt.gz");
    std::fs::write(&gz, b"\x1f\x8b").unwrap();
    let e = fail(&run(&["--input", gz.to_str().unwrap(), "--shard", "0/2", "--out-dir", tmp.path().to_str().unwrap()]));
    assert!(e.contains("cannot seek in a gzip file") && e.contains("gunzip -k"), "{e}");
    let e = fail(&run(&["--shard", "0/2", "--out-dir", tmp.path().to_str().unwrap()]));
    assert!(e.contains("--input"), "{e}");
    let e = fail(&run(&["--input", gz.to_str().unwrap(), "--shard", "2/2", "--out-dir", "x"]));
    assert!(e.contains("i counts from 0, so it must be 0..=1"), "{e}");
    // --merge joins vectors already made: a model given with it is a mistake, said so.
    let e = fail(&common::xsent().args(["embed", "--model", "m", "--merge"]).arg(tmp.path()).output().unwrap());
    assert!(e.contains("takes no --model"), "{e}");
}

/// A merge of a run of very many shards with few finished lists the first ten missing and
/// counts the rest, in time and memory that follow the manifests found, not the shard count
/// (an outside probe: 10^8 shards took 6 GB and 18 s before the message, 2^32 - 1 was killed
/// for memory). Here under a 1 GiB address-space limit.
#[test]
fn a_merge_of_very_many_shards_lists_ten_missing() {
    use std::os::unix::process::CommandExt;
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("in.txt");
    write_input(&input, 30);
    let dir = tmp.path().join("shards");
    let input_s = input.to_str().unwrap();
    let dir_s = dir.to_str().unwrap();
    for spec in ["3/100000000", "99999999/100000000"] {
        ok(&run(&["--input", input_s, "--out-dir", dir_s, "--format", "f32", "--shard", spec]));
    }
    let mut c = common::xsent();
    c.args(["embed", "--merge"]).arg(&dir).arg("-o").arg(tmp.path().join("m.f32"));
    // SAFETY: async-signal-safe calls only, between fork and exec.
    unsafe {
        c.pre_exec(|| {
            let limit = libc::rlimit { rlim_cur: 1 << 30, rlim_max: 1 << 30 };
            if libc::setrlimit(libc::RLIMIT_AS, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let t0 = std::time::Instant::now();
    let e = fail(&c.output().unwrap());
    let n = "100000000";
    let ten: Vec<String> = [0, 1, 2, 4, 5, 6, 7, 8, 9, 10].iter().map(|i| format!("{i}/{n}")).collect();
    assert!(e.contains(&format!("shard {} … (99999998 in all) of {n} not finished", ten.join(", "))), "{e}");
    assert!(t0.elapsed().as_secs() < 30, "{:?}", t0.elapsed());
}

/// A manifest edited by hand is refused where the output's sha256 cannot catch it: another
/// shard's output file (or one outside the folder), f32 or JSON-lines rows that are not the
/// file's, another manifest version. `-o` onto a manifest is refused, and a merge to stdout
/// checks every shard before it writes (an outside probe: each of these merged with exit 0, or
/// wrote a damaged shard's bytes to stdout before failing).
#[test]
fn merge_refuses_hand_edited_manifests() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("in.txt");
    write_input(&input, 40);
    let out = tmp.path().join("m");
    for format in ["f32", "jsonl"] {
        let dir = tmp.path().join(format);
        shard_all(&input, &dir, 3, &["--format", format]);
        let manifest = dir.join("shard-00001-of-00003.manifest.json");
        let good = std::fs::read_to_string(&manifest).unwrap();
        let edited = |edit: &dyn Fn(&mut serde_json::Value)| {
            let mut v: serde_json::Value = serde_json::from_str(&good).unwrap();
            edit(&mut v);
            std::fs::write(&manifest, v.to_string()).unwrap();
            let e = fail(&merge(&dir, &out));
            assert!(!out.exists(), "a failed merge left {}", out.display());
            e
        };
        let e = edited(&|v| v["output"]["file"] = format!("shard-00000-of-00003.{format}").into());
        assert!(e.contains("but shard 1/3's is \"shard-00001-of-00003"), "{e}");
        let e = edited(&|v| v["output"]["file"] = format!("../{format}/shard-00001-of-00003.{format}").into());
        assert!(e.contains("but shard 1/3's is"), "{e}");
        let e = edited(&|v| v["rows"] = 5.into());
        assert!(
            e.contains(if format == "f32" { "5 rows of 384 floats" } else { "but its manifest says 5 rows" }),
            "{e}"
        );
        let e = edited(&|v| v["xsent_shard_manifest"] = 2.into());
        assert!(e.contains("manifest version 2"), "{e}");
        std::fs::write(&manifest, &good).unwrap();
        // -o onto a shard's manifest.
        let e = fail(&merge(&dir, &manifest));
        assert!(e.contains("is the input file"), "{e}");
        assert_eq!(std::fs::read_to_string(&manifest).unwrap(), good);
        // To stdout: a damaged last shard fails the merge before anything is written.
        let last = dir.join(format!("shard-00002-of-00003.{format}"));
        let bytes = std::fs::read(&last).unwrap();
        let mut bad = bytes.clone();
        bad[3] ^= 1;
        std::fs::write(&last, &bad).unwrap();
        let o = common::xsent().args(["embed", "--merge"]).arg(&dir).output().unwrap();
        let e = fail(&o);
        assert!(e.contains("has changed since shard 2/3 wrote it"), "{e}");
        assert!(o.stdout.is_empty(), "{} bytes written to stdout before the check failed", o.stdout.len());
        std::fs::write(&last, &bytes).unwrap();
        ok(&merge(&dir, &out));
        std::fs::remove_file(&out).unwrap();
    }
}

/// One run of a shard at a time: while another process holds the shard's lock, a second run
/// fails at once naming it and leaves the shard's files alone; other shards of the folder run
/// (an outside probe: two runs of one shard with different options both exited 0, the second
/// replacing the first's output).
#[test]
fn a_shard_runs_once_at_a_time() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("in.txt");
    write_input(&input, 30);
    let dir = tmp.path().join("s");
    std::fs::create_dir(&dir).unwrap();
    let held = std::fs::File::create(dir.join(".shard-00000-of-00002.lock")).unwrap();
    held.try_lock().unwrap();
    let args = |spec| ["--input", input.to_str().unwrap(), "--out-dir", dir.to_str().unwrap(), "--shard", spec];
    let e = fail(&run(&args("0/2")));
    assert!(e.contains("shard 0/2 in") && e.contains("is in use by another xsent embed"), "{e}");
    assert!(
        !dir.join("shard-00000-of-00002.jsonl").exists() && !dir.join("shard-00000-of-00002.manifest.json").exists()
    );
    ok(&run(&args("1/2")));
    drop(held);
    ok(&run(&args("0/2")));
    ok(&merge(&dir, &tmp.path().join("m.jsonl")));
    // The manifest has the mode of the output beside it (it was 0600, a temporary file's).
    use std::os::unix::fs::PermissionsExt;
    let mode = |f: &str| std::fs::metadata(dir.join(f)).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode("shard-00000-of-00002.manifest.json"), mode("shard-00000-of-00002.jsonl"));
}

/// The Ray driver's resume (scripts/ray/xsent_ray.py, steps 2-5): a step is done only while its
/// command and every file it reads are as recorded, so a shard embedded again (another model,
/// as xsent's advice to remove a folder's shards leads to) makes the steps after it run again.
/// Before (an outside probe), the command line alone decided and stale indexes were reused.
/// Ray itself is not needed: the functions are plain Python.
#[test]
fn the_ray_driver_redoes_steps_whose_inputs_changed() {
    let tmp = tempfile::tempdir().unwrap();
    let python = std::env::var("XSENT_PYTHON").unwrap_or_else(|_| "python3".into());
    let script = r#"
import os, sys, time
sys.path.insert(0, sys.argv[1])
import xsent_ray as r
d = sys.argv[2]
vec, out = os.path.join(d, "v.npy"), os.path.join(d, "x.ivf")
open(vec, "w").write("a")
open(out, "w").write("index")
argv = ["xsent", "index", "build", "--vectors", vec, "-o", out]
assert not r.is_done(out, argv)
r.mark_done(out, argv)
assert r.is_done(out, argv)
assert not r.is_done(out, argv + ["--seed", "1"])
os.utime(vec, ns=(time.time_ns(), os.stat(vec).st_mtime_ns + 1_000_000_000))
assert not r.is_done(out, argv), "an input rewritten in place was not noticed"
r.mark_done(out, argv)
open(vec, "w").write("ab")
assert not r.is_done(out, argv), "an input of another size was not noticed"
print("ok")
"#;
    let o = std::process::Command::new(&python)
        .args(["-c", script])
        .arg(common::repo().join("scripts/ray"))
        .arg(tmp.path())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {python}: {e}"));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "ok");
}
