//! Faults an operator meets (issue 43): closed output streams, pathological input, concurrent
//! runs, damaged checkpoints, signals and leftovers. Each test fails on a build without the fix.

mod common;

use std::io::{BufRead, Read};
use std::path::Path;
use std::process::{Command, Output, Stdio};

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A distillation run on the tiny fixtures (tiny-bert teaches tiny-xlm-roberta) over synthetic
/// pairs: `steps` steps, a checkpoint every 2.
fn tiny_distill(steps: u64, extra: &str) -> common::TrainSetup {
    let pairs = common::word_pairs(120, 5);
    let words: Vec<String> = (0..40).flat_map(|i| [format!("house{i}"), format!("haus{i}")]).collect();
    let dir = tempfile::tempdir().unwrap();
    let teacher = common::tiny_model("tiny-bert", dir.path(), &words);
    let student = common::tiny_model("tiny-xlm-roberta", dir.path(), &words);
    let body = format!(
        "recipe = \"distill\"\nseed = 3\n[distill]\nteacher = {teacher:?}\nstudent = {student:?}\nmax_length = 16\nprojection_fit_size = 60\n\
         [train]\nmax_steps = {steps}\nbatch_size = 8\nlog_every = 1\neval_every = 0\ncheckpoint_every = 2\nkeep_last = 2\n\
         [optim]\nlr = 1e-3\n[data]\nval_size = 8\n{extra}\n"
    );
    let s = common::TrainSetup::new(&body, &pairs);
    // The models live as long as the setup: keep their folder inside it.
    let keep = s.dir.path().join("models");
    std::fs::rename(dir.path(), &keep).unwrap();
    let text =
        std::fs::read_to_string(&s.config).unwrap().replace(dir.path().to_str().unwrap(), keep.to_str().unwrap());
    std::fs::write(&s.config, text).unwrap();
    s
}

/// `xsent train --resume --out RUN ARGS` (the run's own config).
fn resume(s: &common::TrainSetup, name: &str, args: &[&str]) -> Output {
    common::xsent().arg("train").arg("--resume").arg("--out").arg(s.run(name)).args(args).output().unwrap()
}

fn train_cmd(s: &common::TrainSetup, out: &Path, args: &[&str]) -> Command {
    let mut c = common::xsent();
    c.arg("train").arg("--config").arg(&s.config).arg("--out").arg(out).args(args);
    c
}

// ---- 1. A closed standard error or output never stops the work ----

/// `xsent train … 2>&1 | head -2`: the reader goes away after two lines, and the run still
/// finishes (it used to panic on its next message, exit 101 and leave a run that --resume refused).
#[test]
fn train_finishes_when_its_log_reader_goes_away() {
    let s = tiny_distill(6, "");
    let out = s.run("r");
    let (reader, writer) = std::io::pipe().unwrap();
    let mut cmd = train_cmd(&s, &out, &[]);
    cmd.stdout(writer.try_clone().unwrap()).stderr(writer);
    let mut child = cmd.spawn().unwrap();
    drop(cmd);
    let mut lines = std::io::BufReader::new(reader);
    for _ in 0..2 {
        let mut l = String::new();
        lines.read_line(&mut l).unwrap();
    }
    drop(lines);
    let status = child.wait().unwrap();
    assert!(status.success(), "{status:?}");
    assert!(out.join("final/model.safetensors").is_file());
}

/// `xsent embed` with standard error closed: the vectors are written and the warning about a
/// truncated line (which used to panic) is dropped.
#[test]
fn embed_finishes_with_stderr_closed() {
    let model = common::model("all-MiniLM-L6-v2");
    let long = "word ".repeat(400);
    let mut child = common::xsent()
        .args(["embed", "--model"])
        .arg(&model)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stderr.take());
    let mut stdin = child.stdin.take().unwrap();
    std::io::Write::write_all(&mut stdin, format!("a short line\n{long}\n").as_bytes()).unwrap();
    drop(stdin);
    let mut text = String::new();
    child.stdout.take().unwrap().read_to_string(&mut text).unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "{status:?}");
    assert_eq!(text.lines().count(), 2);
}

/// Tables and configs printed on standard output: a write that fails (a full disk under
/// `xsent config show dueam > my.toml`) ends the command with exit 1 and says so (an outside
/// probe: exit 0 over an empty file); a closed pipe is the reader's wish and stays exit 0.
#[test]
fn a_failed_write_to_standard_output_is_an_error() {
    for args in [&["config", "show", "dueam"][..], &["config", "list"], &["data", "list"]] {
        let full = std::fs::OpenOptions::new().write(true).open("/dev/full").unwrap();
        let o = common::xsent().args(args).stdout(full).output().unwrap();
        assert_eq!(o.status.code(), Some(1), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains("xsent: error: writing to standard output failed"), "{args:?}: {}", stderr(&o));
    }
    let mut child = common::xsent().args(["config", "show", "dueam"]).stdout(Stdio::piped()).spawn().unwrap();
    drop(child.stdout.take());
    assert_eq!(child.wait().unwrap().code(), Some(0));
}

// ---- 3. No silent wrong results ----

/// The lock file of a run directory held by this test process, naming `pid` and `host`.
fn hold_lock(dir: &Path, pid: u32, host: &str) -> std::fs::File {
    std::fs::create_dir_all(dir).unwrap();
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(dir.join(".xsent.lock"))
        .unwrap();
    f.try_lock().unwrap();
    std::fs::write(dir.join(".xsent.lock"), format!("{{\"pid\": {pid}, \"host\": \"{host}\", \"started_unix\": 0}}\n"))
        .unwrap();
    f
}

/// Names and sizes of the files under `dir`, sorted (what a refused command must leave alone).
fn listing(dir: &Path) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p.clone());
            }
            let name = p.strip_prefix(dir).unwrap().display().to_string();
            // The lock file's contents are the holder's (here the test's own).
            let len = if name == ".xsent.lock" { 0 } else { std::fs::metadata(&p).unwrap().len() };
            out.push((name, len));
        }
    }
    out.sort();
    out
}

/// A run directory in use is refused, fresh or resumed, naming the holder, and nothing in it
/// changes; once the holder is gone its lock is taken over with a message. Two real runs on one
/// --out: the second is refused while the first trains, and SIGTERM stops the first as Ctrl-C
/// does (a checkpoint to resume from).
#[test]
fn a_run_directory_is_locked_for_its_whole_run() {
    let s = tiny_distill(4, "");
    let out = s.run("r");
    let o = s.train("r", &["--stop-after", "2"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let before = listing(&out);
    let held = hold_lock(&out, 4242, "elsewhere");
    for resumed in [true, false] {
        let o = if resumed { resume(&s, "r", &[]) } else { s.train("r", &[]) };
        let args = resumed;
        assert_eq!(o.status.code(), Some(1), "{args:?}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("is in use by another xsent train (pid 4242 on host elsewhere"),
            "{args:?}: {}",
            stderr(&o)
        );
        assert_eq!(listing(&out), before, "{args:?}");
    }
    // A new --out is refused too while locked (a directory that does not exist yet cannot be).
    let fresh = s.run("fresh");
    let _f = hold_lock(&fresh, 4243, "elsewhere");
    let o = s.train("fresh", &[]);
    assert!(stderr(&o).contains("pid 4243"), "{}", stderr(&o));
    assert!(!fresh.join("config.toml").exists());
    // The holder dies without releasing the file: the next run takes over, saying so.
    drop(held);
    let o = resume(&s, "r", &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("taking over the lock") && stderr(&o).contains("pid 4242"), "{}", stderr(&o));

    // Two real runs: B is refused while A trains; SIGTERM makes A checkpoint and stop.
    let slow = tiny_distill(100_000, "");
    let a_out = slow.run("a");
    let a_log = slow.run("a.log");
    let mut a = train_cmd(&slow, &a_out, &["--set", "train.checkpoint_every=0"])
        .stderr(std::fs::File::create(&a_log).unwrap())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    while !std::fs::read_to_string(a_out.join("metrics.jsonl")).is_ok_and(|t| t.contains("\"loss\"")) {
        assert!(start.elapsed().as_secs() < 60 && a.try_wait().unwrap().is_none(), "run A did not start training");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let o = slow.train("a", &[]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains(&format!("in use by another xsent train (pid {}", a.id())), "{}", stderr(&o));
    let o = resume(&slow, "a", &[]);
    assert!(stderr(&o).contains(&format!("pid {}", a.id())), "{}", stderr(&o));
    assert!(Command::new("kill").args(["-TERM", &a.id().to_string()]).status().unwrap().success());
    let status = a.wait().unwrap();
    let log = std::fs::read_to_string(&a_log).unwrap();
    assert_eq!(status.code(), Some(130), "SIGTERM finishes the step and checkpoints, as Ctrl-C: {log}");
    assert!(log.contains("interrupted; finishing this step"), "{log}");
    let steps: Vec<String> = std::fs::read_dir(a_out.join("checkpoints"))
        .expect(&log)
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(steps.len() == 1 && steps[0].starts_with("step-"), "{steps:?}");
}

/// A checkpoint whose params changed on disk (one flipped bit) is not resumed from: the run
/// falls back to the checkpoint before it, says so, keeps the damaged one aside, and ends with
/// the weights of an uninterrupted run. keep_last = 1 still keeps that fallback.
#[test]
fn a_damaged_checkpoint_falls_back_to_the_one_before() {
    let s = tiny_distill(8, "");
    let o = s.train("whole", &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let run = s.run("r");
    let o = s.train("r", &["--stop-after", "6", "--set", "train.keep_last=1"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let ck = run.join("checkpoints");
    assert!(ck.join("step-4").is_dir() && ck.join("step-6").is_dir(), "two checkpoints kept with keep_last = 1");
    let params = ck.join("step-6/params.safetensors");
    let mut bytes = std::fs::read(&params).unwrap();
    let at = bytes.len() - 100;
    bytes[at] ^= 0x10;
    std::fs::write(&params, &bytes).unwrap();
    let o = resume(&s, "r", &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(
        e.contains("checkpoint step-6 is damaged (params.safetensors does not match its checksum")
            && e.contains("resumes from step-4"),
        "{e}"
    );
    assert!(
        run.join("checkpoints/damaged-step-6/params.safetensors").is_file(),
        "the damaged checkpoint is kept aside"
    );
    let a = std::fs::read(s.run("whole").join("final/model.safetensors")).unwrap();
    let b = std::fs::read(run.join("final/model.safetensors")).unwrap();
    assert!(a == b, "resumed from step 4, the run ends with the uninterrupted run's weights");
    // Every checkpoint damaged: nothing moved, each named.
    for step in ["step-8", "step-6"] {
        if ck.join(step).is_dir() {
            std::fs::write(ck.join(step).join("state.json"), "{}").unwrap();
        }
    }
    let o = resume(&s, "r", &["--set", "train.max_steps=10"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("no checkpoint in") && stderr(&o).contains("state.json does not match its checksum"),
        "{}",
        stderr(&o)
    );
}

/// A config.json with fewer layers than its weights hold is an error naming the unused
/// tensors; --layers runs fewer layers on purpose and --allow-unused-weights loads them anyway.
#[test]
fn unused_weights_are_an_error_naming_them() {
    let dir = tempfile::tempdir().unwrap();
    let words: Vec<String> = (0..10).map(|i| format!("w{i}")).collect();
    let m = common::tiny_model("tiny-bert", dir.path(), &words);
    let cfg = m.join("config.json");
    let text = std::fs::read_to_string(&cfg).unwrap().replace("\"num_hidden_layers\": 2", "\"num_hidden_layers\": 1");
    std::fs::write(&cfg, text).unwrap();
    let run = |args: &[&str]| {
        let mut c = common::xsent();
        c.args(["embed", "--model"])
            .arg(&m)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = c.spawn().unwrap();
        common::feed(&mut child, b"w1 w2\n");
        child.wait_with_output().unwrap()
    };
    let o = run(&[]);
    assert_eq!(o.status.code(), Some(1));
    let e = stderr(&o);
    assert!(
        e.contains("16 tensor(s)")
            && e.contains("encoder.layer.1.*")
            && e.contains("--layers 1")
            && e.contains("--allow-unused-weights"),
        "{e}"
    );
    let a = run(&["--layers", "1"]);
    let b = run(&["--allow-unused-weights"]);
    assert!(a.status.success() && b.status.success(), "{}{}", stderr(&a), stderr(&b));
    assert_eq!(a.stdout, b.stdout);
    // A tensor that is neither the encoder's nor a known head's (here beside the layer that
    // --layers 1 leaves out) is named too (an outside probe: `foo.bar`, or a second copy under
    // `bert.`, was ignored without a word); a head (`pooler.*`) is not.
    let weights = m.join("model.safetensors");
    let bytes = std::fs::read(&weights).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut tensors: Vec<(String, safetensors::tensor::TensorView)> = st.tensors();
    let word = st.tensor("embeddings.word_embeddings.weight").unwrap();
    let extra = [("bert.embeddings.word_embeddings.weight", word.clone()), ("pooler.dense.bias", word.clone())];
    tensors.extend(extra.iter().map(|(n, v)| (n.to_string(), v.clone())));
    let bytes = safetensors::serialize(tensors, None).unwrap();
    std::fs::write(&weights, bytes).unwrap();
    let o = run(&["--layers", "1"]);
    assert_eq!(o.status.code(), Some(1));
    let e = stderr(&o);
    assert!(
        e.contains("1 tensor(s)")
            && e.contains(
                "1 of them neither the encoder's nor a known head's, e.g. bert.embeddings.word_embeddings.weight"
            )
            && !e.contains("pooler"),
        "{e}"
    );
    assert!(run(&["--layers", "1", "--allow-unused-weights"]).status.success());
}

/// `mine`, `eval` and `plot` embed whole files: a text cut at `--max-line-bytes` or at the model's
/// maximum length scores by its beginning only, and each says so once, with the first such text
/// (an outside probe: a 2 MB line mined silently; `eval sts --max-line-bytes 1` moved Spearman
/// with stderr empty). Nothing cut, nothing said.
#[test]
fn mine_eval_and_plot_say_what_they_cut() {
    let model = common::model("all-MiniLM-L6-v2");
    let dir = tempfile::tempdir().unwrap();
    let long_tokens = "word ".repeat(300); // 1,500 bytes, more than the model's 256 tokens
    let long_bytes = format!("beginning {}", "x".repeat(3000)); // more than --max-line-bytes 2000
    let de = dir.path().join("de.txt");
    let en = dir.path().join("en.txt");
    std::fs::write(&de, format!("hallo welt\n{long_tokens}\n{long_bytes}\nguten tag\n")).unwrap();
    std::fs::write(&en, "hello world\ngood day\nthank you\nsee you\n").unwrap();
    let run = |args: &[&std::ffi::OsStr]| {
        let o =
            common::xsent().args(args).arg("--model").arg(&model).args(["--max-line-bytes", "2000"]).output().unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        stderr(&o)
    };
    let os = |s: &str| std::ffi::OsString::from(s);
    let err = run(&[&os("mine"), &os("--src-file"), de.as_os_str(), &os("--tgt-file"), en.as_os_str()]);
    let src = format!("xsent mine: 1 of 4 distinct lines of {} were longer than 2000 bytes", de.display());
    assert!(err.contains(&src) && err.contains("(first: \"beginning xxx"), "{err}");
    let tok =
        format!("xsent mine: 1 of 4 distinct lines of {} were longer than 256 tokens and were truncated", de.display());
    assert!(err.contains(&tok) && err.contains("(first: \"word word"), "{err}");
    assert!(!err.contains(&format!("of {} were longer", en.display())), "nothing of en.txt was cut: {err}");

    let err = run(&[&os("eval"), &os("xsr"), &os("--src"), de.as_os_str(), &os("--tgt"), en.as_os_str()]);
    assert!(err.contains("xsent eval xsr: 1 of 8 texts were longer than 2000 bytes"), "{err}");
    assert!(err.contains("xsent eval xsr: 1 of 8 texts were longer than 256 tokens"), "{err}");
    let err = run(&[&os("eval"), &os("xsr"), &os("--src"), en.as_os_str(), &os("--tgt"), en.as_os_str()]);
    assert!(!err.contains("were longer"), "{err}");

    let png = dir.path().join("p.png");
    let de_in = format!("de={}", de.display());
    let en_in = format!("en={}", en.display());
    let err = run(&[
        &os("plot"),
        &os("pca"),
        &os("--input"),
        &os(&de_in),
        &os("--input"),
        &os(&en_in),
        &os("-o"),
        png.as_os_str(),
    ]);
    assert!(err.contains("xsent plot: 1 of 8 texts were longer than 2000 bytes"), "{err}");
    assert!(err.contains("xsent plot: 1 of 8 texts were longer than 256 tokens"), "{err}");
}

// ---- 4. Leftovers and small losses ----

/// A checkpoint write cut short (`.step-N.tmp`, `.best.tmp`) is removed on resume, and
/// warmup_steps past the run's steps is warned about.
#[test]
fn leftovers_of_a_killed_run_are_removed_on_resume() {
    let s = tiny_distill(6, "");
    let run = s.run("r");
    let o = s.train("r", &["--stop-after", "2", "--set", "optim.warmup_steps=50"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("optim.warmup_steps = 50 is more than the 6 steps"), "{}", stderr(&o));
    for tmp in ["checkpoints/.step-4.tmp", ".best.tmp"] {
        std::fs::create_dir_all(run.join(tmp)).unwrap();
        std::fs::write(run.join(tmp).join("params.safetensors"), "half").unwrap();
    }
    let o = resume(&s, "r", &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!run.join("checkpoints/.step-4.tmp").exists() && !run.join(".best.tmp").exists());
    assert!(stderr(&o).contains(".step-4.tmp, left by a write that was cut short"), "{}", stderr(&o));
}

/// SIGTERM and SIGHUP end `xsent embed -o FILE` as Ctrl-C does: exit 130, and no temporary
/// `.xsent-out-*` file left beside the output.
#[test]
fn sigterm_and_sighup_leave_no_temporary_output() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.txt");
    std::fs::write(&input, "a sentence to embed, again and again\n".repeat(20_000)).unwrap();
    let model = common::model("all-MiniLM-L6-v2");
    for sig in ["TERM", "HUP"] {
        let out_dir = dir.path().join(sig);
        std::fs::create_dir_all(&out_dir).unwrap();
        let out = out_dir.join("v.jsonl");
        let args = [
            "embed",
            "--model",
            model.to_str().unwrap(),
            "--input",
            input.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
        ];
        let (status, names) = common::signal_once_writing(sig, &args, &out_dir);
        assert_eq!(status.code(), Some(130), "{sig}: {status:?}");
        assert!(names.is_empty(), "{sig}: {names:?}");
    }
}

/// Interrupted while its reader is slow, `xsent embed` to a pipe ends its output at a row
/// boundary: whole f32 rows, whole JSON lines (a buffered writer used to leave a cut row).
#[test]
fn output_to_a_pipe_interrupted_ends_with_a_whole_row() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.txt");
    std::fs::write(&input, (0..6000).map(|i| format!("sentence number {i} of many\n")).collect::<String>()).unwrap();
    let model = common::model("all-MiniLM-L6-v2");
    for format in ["f32", "jsonl"] {
        let mut child = common::xsent()
            .args(["embed", "--format", format, "--model"])
            .arg(&model)
            .arg("--input")
            .arg(&input)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut stdout = child.stdout.take().unwrap();
        let mut got = vec![0u8; 4096];
        stdout.read_exact(&mut got).unwrap();
        // The pipe fills and the writer blocks in the middle of its buffer: interrupt it there.
        std::thread::sleep(std::time::Duration::from_millis(300));
        assert!(Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap().success());
        stdout.read_to_end(&mut got).unwrap();
        let status = child.wait().unwrap();
        assert!(got.len() > 4096);
        match format {
            "f32" => assert_eq!(got.len() % (384 * 4), 0, "{} bytes: a cut row", got.len()),
            _ => {
                assert_eq!(got.last(), Some(&b'\n'), "a cut line");
                for l in String::from_utf8(got).unwrap().lines() {
                    assert_eq!(serde_json::from_str::<Vec<f32>>(l).unwrap().len(), 384);
                }
            }
        }
        assert_eq!(status.code(), Some(130), "{format}: {status:?}");
    }
}

/// A failed run never replaces an earlier run's FILE.partial (its rows go to FILE.partial.1),
/// and a read-only -o file is refused unless --force.
#[test]
fn earlier_partial_files_and_read_only_outputs_are_kept() {
    let dir = tempfile::tempdir().unwrap();
    let model = common::model("all-MiniLM-L6-v2");
    let out = dir.path().join("v.jsonl");
    // -o relative to the working folder, as typed.
    let embed = |args: &[&str], input: &[u8]| {
        let mut child = common::xsent()
            .current_dir(dir.path())
            .args(["embed", "--model"])
            .arg(&model)
            .args(["-o", "v.jsonl"])
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        common::feed(&mut child, input);
        child.wait_with_output().unwrap()
    };
    let o = embed(&[], b"one\ntwo\n\xff\n");
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("v.jsonl.partial") && !stderr(&o).contains("earlier run"), "{}", stderr(&o));
    let first = std::fs::read(dir.path().join("v.jsonl.partial")).unwrap();
    let o = embed(&[], b"three\n\xff\n");
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("v.jsonl.partial.1")
            && stderr(&o).contains("holds an earlier run's rows and is left as it was"),
        "{}",
        stderr(&o)
    );
    assert_eq!(std::fs::read(dir.path().join("v.jsonl.partial")).unwrap(), first);
    assert_eq!(std::fs::read_to_string(dir.path().join("v.jsonl.partial.1")).unwrap().lines().count(), 1);

    std::fs::write(&out, "mine").unwrap();
    let mut perm = std::fs::metadata(&out).unwrap().permissions();
    perm.set_readonly(true);
    std::fs::set_permissions(&out, perm).unwrap();
    let o = embed(&[], b"one\n");
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("is read-only") && stderr(&o).contains("--force"), "{}", stderr(&o));
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "mine");
    let o = embed(&["--force"], b"one\n");
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(std::fs::read_to_string(&out).unwrap().lines().count(), 1);
}

/// A full disk (here a 2 MiB file size limit, whose SIGXFSZ is ignored as a shell's `trap '' XFSZ`
/// does, so that the write fails as on a full disk) stops embed with an error; the rows written
/// before it are kept in FILE.partial and end with a whole row (a cut one before).
#[test]
fn a_full_disk_keeps_whole_rows() {
    use std::os::unix::process::CommandExt;
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.txt");
    std::fs::write(&input, "a sentence to embed, again and again\n".repeat(3000)).unwrap();
    let model = common::model("all-MiniLM-L6-v2");
    let out = dir.path().join("v.f32");
    let mut cmd = common::xsent();
    cmd.args(["embed", "--format", "f32", "--model"]).arg(&model).arg("--input").arg(&input).arg("-o").arg(&out);
    // SAFETY: async-signal-safe calls only, between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            let limit = libc::rlimit { rlim_cur: 2 << 20, rlim_max: 2 << 20 };
            if libc::signal(libc::SIGXFSZ, libc::SIG_IGN) == libc::SIG_ERR
                || libc::setrlimit(libc::RLIMIT_FSIZE, &limit) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let o = cmd.output().unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("File too large") && stderr(&o).contains("v.f32.partial"), "{}", stderr(&o));
    let kept = std::fs::metadata(dir.path().join("v.f32.partial")).unwrap().len();
    assert!(kept > 0 && kept.is_multiple_of(384 * 4), "{kept} bytes kept: not whole rows of 384 floats");
}

// ---- 2. Memory bounded by settings, not by input ----

/// Run `xsent ARGS` with `stdin` as its input and `XSENT_THREADS=2`; return its peak RSS in
/// bytes (wait4's ru_maxrss) and exit status. A run whose RSS passes `kill_above` is killed
/// there (a build without the bounds would otherwise take the machine's memory) and fails.
fn peak_rss(args: &[&str], stdin: &Path, kill_above: u64) -> (u64, std::process::ExitStatus) {
    use std::os::unix::process::ExitStatusExt;
    // Reaped by wait4 below, not by Child::wait.
    #[allow(clippy::zombie_processes)]
    let child = common::xsent()
        .args(args)
        .env("XSENT_THREADS", "2")
        .stdin(std::fs::File::open(stdin).unwrap())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id() as libc::pid_t;
    loop {
        let mut status = 0;
        // SAFETY: plain wait4 on our own child, into locals.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        let r = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut ru) };
        assert!(r >= 0, "wait4 failed");
        if r == pid {
            return (ru.ru_maxrss as u64 * 1024, std::process::ExitStatus::from_raw(status));
        }
        let rss = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("VmRSS:"))
                    .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
            })
            .unwrap_or(0)
            * 1024;
        if rss > kill_above {
            // SAFETY: a signal to our own child.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            panic!(
                "xsent {args:?} passed {} MB of RSS (more than 3 times the formula's bound): memory is not bounded",
                rss >> 20
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// docs/reliability.md's peak-memory formula beyond the loaded model (R0), in bytes: tokenising a
/// text of `text_bytes` (at most --max-line-bytes), the window's text, and `workers` batches of
/// `tokens` tokens of length `len` in flight on a model of `heads`, `hidden`, `inter`.
fn formula(
    text_bytes: u64,
    window_bytes: u64,
    workers: u64,
    tokens: u64,
    len: u64,
    (heads, hidden, inter): (u64, u64, u64),
) -> u64 {
    300 * text_bytes + 3 * window_bytes + workers * 4 * tokens * (2 * heads * len + 12 * hidden + 2 * inter)
}

/// Peak RSS stays within the documented formula whatever the input: a 100 MB line without
/// spaces (letters, NULs and punctuation with MiniLM, CJK with e5: 9–13 GB before), and 2,048 long lines at
/// --batch-size 2048 (one batch of 2,048 texts before), within 10 % of the formula, whose R0 (the
/// loaded model and runtime) is a one-line run of the same model.
#[test]
fn peak_memory_follows_the_formula_on_pathological_input() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.txt");
    const MIB: u64 = 1 << 20;
    let minilm = common::model("all-MiniLM-L6-v2");
    let e5 = common::model("multilingual-e5-small");
    let (minilm, e5) = (minilm.to_str().unwrap(), e5.to_str().unwrap());
    // (model, heads, hidden, intermediate, max_length)
    let dims = |m: &str| if m == minilm { ((12, 384, 1536), 256) } else { ((12, 384, 1536), 512) };
    let base = |m: &str| {
        std::fs::write(&input, "one short line\n").unwrap();
        let (b, status) = peak_rss(&["embed", "--model", m], &input, 8 << 30);
        assert!(status.success());
        b
    };
    let (base_minilm, base_e5) = (base(minilm), base(e5));
    let unit = "字".repeat(1 << 10);
    for (i, m) in [minilm, minilm, minilm, e5].into_iter().enumerate() {
        let mut bytes = match i {
            0 => vec![b'a'; 100_000_000],
            1 => vec![0u8; 100_000_000],
            // Each byte a word of its own to MiniLM's pre-tokenizer: the most memory per byte.
            2 => vec![b'!'; 100_000_000],
            _ => unit.repeat(100_000_000 / unit.len()).into_bytes(),
        };
        bytes.push(b'\n');
        std::fs::write(&input, &bytes).unwrap();
        drop(bytes);
        let (d, len) = dims(m);
        let base = if m == minilm { base_minilm } else { base_e5 };
        // One text of 1 MiB (--max-line-bytes), one batch of at most max_length tokens.
        // Within 10 % (R0 itself varies by that much between runs: e5's by 1.09-1.22 GB).
        let bound = (base + formula(MIB, MIB, 1, len, len, d)) * 11 / 10;
        let (peak, status) = peak_rss(&["embed", "--model", m], &input, 3 * bound);
        assert!(status.success(), "case {i}: {status:?}");
        assert!(
            peak <= bound,
            "case {i}: peak {} MB over the formula's {} MB (base {} MB)",
            peak >> 20,
            bound >> 20,
            base >> 20
        );
    }
    // 2,048 lines of 240 words, all in one window, at --batch-size 2048 (64 tokens each, to
    // keep the test short: the batches' bound is what is checked).
    let words: Vec<String> = (0..240).map(|i| format!("word{}", i * 7919 % 1000)).collect();
    let line = words.join(" ") + "\n";
    std::fs::write(&input, line.repeat(2048)).unwrap();
    let (d, _) = dims(minilm);
    let bound = (base_minilm + formula(line.len() as u64, 2048 * line.len() as u64, 2, 8192, 64, d)) * 11 / 10;
    let (peak, status) =
        peak_rss(&["embed", "--model", minilm, "--batch-size", "2048", "--max-length", "64"], &input, 3 * bound);
    assert!(status.success(), "{status:?}");
    assert!(
        peak <= bound,
        "2,048 long lines: peak {} MB over the formula's {} MB (base {} MB)",
        peak >> 20,
        bound >> 20,
        base_minilm >> 20
    );
}

/// `kill -9` runs no handler and leaves the temporary output behind: the next run into the
/// same folder removes it (its process is gone), saying so, and the earlier output is intact.
#[test]
fn a_killed_runs_temporary_output_is_removed_by_the_next() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.txt");
    std::fs::write(&input, "a sentence to embed, again and again\n".repeat(20_000)).unwrap();
    let model = common::model("all-MiniLM-L6-v2");
    let out_dir = dir.path().join("out");
    std::fs::create_dir_all(&out_dir).unwrap();
    let out = out_dir.join("v.jsonl");
    std::fs::write(&out, "earlier\n").unwrap();
    let args =
        ["embed", "--model", model.to_str().unwrap(), "--input", input.to_str().unwrap(), "-o", out.to_str().unwrap()];
    let (status, names) = common::signal_once_writing("KILL", &args, &out_dir);
    assert_eq!(status.code(), None);
    assert_eq!(names.len(), 2, "{names:?}");
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "earlier\n");
    std::fs::write(&input, "one line\n").unwrap();
    let o = common::xsent().args(args).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("the unfinished output of xsent process") && stderr(&o).contains("which is gone"),
        "{}",
        stderr(&o)
    );
    let names: Vec<String> =
        std::fs::read_dir(&out_dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert_eq!(names, ["v.jsonl"]);
}

/// Reports are written whole or not at all, never onto a read-only file, and never into the
/// data's benchmark folders: `eval --report` on a full disk (a file size limit of 0, SIGXFSZ
/// ignored) keeps the earlier report and leaves no temporary file; a read-only report is
/// refused before the model loads; `data audit --json` refuses a benchmark file and the config
/// it reads (before, an outside probe's audit replaced sts/STS2017.en-de.txt with exit 0, and a
/// failed report write left a cut report in place of the earlier one).
#[test]
fn reports_are_written_whole_and_never_onto_inputs() {
    use std::os::unix::process::CommandExt;
    let dir = tempfile::tempdir().unwrap();
    let pairs = dir.path().join("pairs.tsv");
    std::fs::write(&pairs, "a cat\ta dog\t3\nthe sun\tthe moon\t2\nhello\thi\t4.5\nred car\tblue bike\t1\n").unwrap();
    let report = dir.path().join("r.json");
    let model = common::model("all-MiniLM-L6-v2");
    let eval = |limit: bool| {
        let mut c = common::xsent();
        c.args(["eval", "sts", "--model"]).arg(&model).arg("--pairs").arg(&pairs).arg("--report").arg(&report);
        if limit {
            // SAFETY: async-signal-safe calls only, between fork and exec.
            unsafe {
                c.pre_exec(|| {
                    let zero = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
                    if libc::signal(libc::SIGXFSZ, libc::SIG_IGN) == libc::SIG_ERR
                        || libc::setrlimit(libc::RLIMIT_FSIZE, &zero) != 0
                    {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        c.output().unwrap()
    };
    let o = eval(false);
    assert!(o.status.success(), "{}", stderr(&o));
    let earlier = std::fs::read(&report).unwrap();
    let o = eval(true);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("cannot write report"), "{}", stderr(&o));
    assert_eq!(std::fs::read(&report).unwrap(), earlier, "the earlier report was damaged");
    let names: Vec<String> =
        std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert!(names.iter().all(|n| !n.contains(".tmp")), "{names:?}");

    let mut perm = std::fs::metadata(&report).unwrap().permissions();
    perm.set_readonly(true);
    std::fs::set_permissions(&report, perm).unwrap();
    let o = eval(false);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("is read-only") && !stderr(&o).contains("Spearman"), "{}", stderr(&o));
    assert_eq!(std::fs::read(&report).unwrap(), earlier);

    // data audit --json: a benchmark file of the data folder, and the config file itself.
    let data = dir.path().join("data");
    std::fs::create_dir_all(data.join("sts")).unwrap();
    let bench = data.join("sts/STS2017.en-de.txt");
    std::fs::write(&bench, "keep").unwrap();
    let config = dir.path().join("distill.toml");
    let shown = common::xsent().args(["config", "show", "distill"]).output().unwrap();
    std::fs::write(&config, &shown.stdout).unwrap();
    for (json, want) in [(&bench, "among the benchmark and corpus files"), (&config, "is the input file")] {
        let o = common::xsent()
            .env("XSENT_DATA", &data)
            .args(["data", "audit", "--config"])
            .arg(&config)
            .arg("--json")
            .arg(json)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
        assert!(stderr(&o).contains(want), "{}", stderr(&o));
    }
    assert_eq!(std::fs::read_to_string(&bench).unwrap(), "keep");
    assert_eq!(std::fs::read(&config).unwrap(), shown.stdout);

    // A file the config names (its training data), a benchmark file of its own data.eval_dir and
    // a file inside a folder it reads (an outside probe: the first two were overwritten).
    let train = dir.path().join("train.tsv");
    std::fs::write(&train, "Hallo.\tHello.\n").unwrap();
    let eval_dir = dir.path().join("ev");
    std::fs::create_dir_all(eval_dir.join("tatoeba")).unwrap();
    let test_file = eval_dir.join("tatoeba/tatoeba.fra-eng.fra");
    std::fs::write(&test_file, "keep").unwrap();
    let xnli = dir.path().join("my-xnli");
    std::fs::create_dir_all(&xnli).unwrap();
    let sets = [
        format!("data.sources=[{{kind=\"tsv\", path=\"{}\", src_lang=\"de\", tgt_lang=\"en\"}}]", train.display()),
        format!("data.eval_dir=\"{}\"", eval_dir.display()),
        format!("distill.projection_fit_sources.0.dir=\"{}\"", xnli.display()),
    ];
    for (json, want) in [
        (train.clone(), "is the input file"),
        (test_file.clone(), "among the benchmark and corpus files"),
        (xnli.join("audit.json"), "distill.projection_fit_sources.0.dir of the config"),
    ] {
        let mut c = common::xsent();
        c.env("XSENT_DATA", &data).args(["data", "audit", "--config"]).arg(&config);
        for s in &sets {
            c.args(["--set", s]);
        }
        let o = c.arg("--json").arg(&json).output().unwrap();
        assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
        assert!(stderr(&o).contains(want), "{want}: {}", stderr(&o));
    }
    assert_eq!(std::fs::read_to_string(&train).unwrap(), "Hallo.\tHello.\n");
    assert_eq!(std::fs::read_to_string(&test_file).unwrap(), "keep");
    assert!(!xnli.join("audit.json").exists());
}
