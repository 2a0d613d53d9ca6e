use crate::io::lock::{RunLock, LOCK_FILE};
use crate::train::run_dir::{clear_failed_start, entries_besides_lock, remove_made};
use crate::train::{self, config, Outcome, RunOptions};
use anyhow::{bail, Context, Result};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

#[derive(clap::Args)]
pub struct Args {
    /// The recipe's TOML config: a file, or the name of a built-in config (dueam, distill, …;
    /// `xsent config list`) when no such file exists. Paths in a file are relative to its
    /// folder. With --resume it may be left out: the run directory's config.toml is used.
    #[arg(long, short = 'c')]
    config: Option<PathBuf>,
    /// Run directory (default: runs/<config name>).
    #[arg(long, short = 'o')]
    out: Option<PathBuf>,
    /// Continue the run in --out from its newest checkpoint.
    #[arg(long)]
    resume: bool,
    /// Override a config value, e.g. --set train.max_steps=20 --set optim.lr=1e-4 (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    sets: Vec<String>,
    /// Remove a key of the config, so that its default applies, e.g. --unset train.val_sts
    /// (repeatable; applied before the --set values).
    #[arg(long = "unset", value_name = "KEY")]
    unsets: Vec<String>,
    /// Checkpoint and stop after this optimiser step (continue later with --resume).
    #[arg(long, value_name = "STEP")]
    stop_after: Option<u64>,
    /// Check the config and stop: print it resolved (every default written out, paths made
    /// absolute) and say whether every model, file and folder it names exists; train nothing.
    #[arg(long, conflicts_with_all = ["resume", "stop_after", "out"])]
    check: bool,
}

/// Returns the process exit code: 0 when done, 130 when interrupted.
pub fn run(a: Args) -> Result<i32> {
    let from = a.config.as_deref().map(config::find).transpose()?;
    if a.check {
        let Some(from) = from else { bail!("--check needs --config FILE (or the name of a built-in config)") };
        return check(from, &a);
    }
    let out = match (&a.out, &from) {
        (Some(o), _) => o.clone(),
        (None, Some(c)) => train::run_dir::default_out(c),
        (None, None) => bail!("give --config FILE (and optionally --out DIR), or --resume --out DIR"),
    };
    if out.exists() && !out.is_dir() {
        bail!("--out {} is a file, not a directory: give --out a directory for the run", out.display());
    }
    let saved = out.join("config.toml");
    // The folders this command made for --out, itself first (a fresh run into a new directory).
    let mut made: Vec<std::path::PathBuf> = Vec::new();
    if a.resume && !out.is_dir() {
        bail!("--resume: {} does not exist; is it a run directory?", out.display());
    }
    if !a.resume && a.config.is_none() {
        bail!("--config FILE is needed (or --resume to continue a run)");
    }
    if !out.exists() {
        made = out
            .ancestors()
            .take_while(|a| !a.as_os_str().is_empty() && !a.exists())
            .map(std::path::Path::to_path_buf)
            .collect();
        std::fs::create_dir_all(&out).with_context(|| format!("cannot create run directory {}", out.display()))?;
    }
    // Held until this command ends: no other run reads or writes the directory meanwhile.
    let created_lock = !out.join(LOCK_FILE).exists();
    let lock = match RunLock::acquire(&out) {
        Ok(l) => l,
        Err(e) => {
            remove_made(&out, &made);
            return Err(e);
        }
    };
    let mut wrote_config = false;
    let result = run_locked(&a, &out, &saved, &mut wrote_config);
    if result.is_err() {
        // Refused before it wrote anything but its config (a bad config, unreadable data, the
        // recipe's settings): the run directory is left as it was before the command.
        if wrote_config {
            let _ = std::fs::remove_file(out.join(".config.toml.tmp"));
            if entries_besides_lock(&out).is_some_and(|e| e == ["config.toml"]) {
                let _ = std::fs::remove_file(&saved);
            }
        }
        if entries_besides_lock(&out).is_some_and(|e| e.is_empty()) || (created_lock && !wrote_config) {
            // Nothing of a run is left, or the command stopped before it started one (the
            // folder is not a run's, say): no lock file of this command's stays behind.
            lock.remove();
            remove_made(&out, &made);
        }
    }
    result
}

/// [`run`] once the run directory `out` exists and is locked.
fn run_locked(a: &Args, out: &std::path::Path, saved: &std::path::Path, wrote_config: &mut bool) -> Result<i32> {
    let out = out.to_path_buf();
    let from = a.config.as_deref().map(config::find).transpose()?;
    let cfg = if a.resume {
        train::restore_run(&out)?;
        if train::checkpoint::latest_checkpoint(&out)?.is_none() {
            if !saved.is_file() {
                bail!("--resume: {} does not exist; is {} a run directory?", saved.display(), out.display());
            }
            if out.join("final").exists() {
                bail!(
                    "--resume: {} has no checkpoint to continue from, and its final/ holds the run's model: the run is finished \
                     (its checkpoints were removed). Use {} as a model, or give --out a new directory for a new run",
                    out.display(),
                    out.join("final").display()
                );
            }
            bail!(
                "--resume: {} has no checkpoint to continue from (the run stopped before its first one); \
                 start it over with --config FILE --out {}",
                out.display(),
                out.display()
            );
        }
        let cfg = if !saved.is_file() {
            // Checkpoints without the run's config: only the config it was started with can go on.
            let Some(c) = from else {
                bail!(
                    "--resume: {} is missing, so the run's config is unknown: give the config it was started with, \
                     --resume --config FILE --out {} (it is written back as {})",
                    saved.display(),
                    out.display(),
                    saved.display()
                );
            };
            errln!("xsent train: {} is missing; resuming with {}", saved.display(), c.name());
            config::load_from(c, &a.unsets, &a.sets, false)?
        } else {
            let run = config::ConfigFrom::Run(saved);
            let cfg = config::load_from(run, &a.unsets, &a.sets, false)?;
            if !a.sets.is_empty() || !a.unsets.is_empty() {
                let changed = config::changed_on_resume(&config::load_from(run, &[], &[], false)?, &cfg)?;
                if !changed.is_empty() {
                    bail!(
                        "--resume cannot change what the checkpoint was trained with (the model, the recipe's settings, the seed, \
                         the data or the batch):\n  {}\nresume without these --set/--unset values, or start a new run with --config FILE --out NEW_DIR",
                        changed.join("\n  ")
                    );
                }
            }
            if let Some(c) = from {
                // The given file need not set what --unset removes from the saved one (which
                // writes out every default).
                let given = config::load_from(c, &a.unsets, &a.sets, true)?;
                let differ = config::differences(&cfg, &given)?;
                if !differ.is_empty() {
                    bail!(
                        "{} differs from the config the run was started with ({}), saved -> given:\n  {}\n\
                         resume without --config to use the saved one, or change single values with --set / --unset",
                        c.name(),
                        saved.display(),
                        differ.join("\n  ")
                    );
                }
            }
            cfg
        };
        train::checkpoint::refuse_other_training_early(&out, &cfg)?;
        cfg
    } else {
        let Some(c) = from else { bail!("--config FILE is needed (or --resume to continue a run)") };
        let cfg = config::load_from(c, &a.unsets, &a.sets, false)?;
        if let config::ConfigFrom::File(file) = c {
            if saved.is_file() && std::fs::canonicalize(file).ok() == std::fs::canonicalize(saved).ok() {
                bail!(
                    "--config {} is the run directory's own config.toml, which a new run in --out {} replaces: \
                     copy it elsewhere and give that as --config, or give --out a new directory (--resume continues the run)",
                    file.display(),
                    out.display()
                );
            }
        }
        if !entries_besides_lock(&out).with_context(|| format!("cannot read {}", out.display()))?.is_empty() {
            clear_failed_start(&out)?;
        }
        // The resolved config, with its header, is the run directory's first file: what marks
        // the files after it (a recipe's vocab/ or init/, written before the first step) as
        // this run's, so that a new run in the same --out may clear them and nothing else.
        *wrote_config = true;
        train::write_run_config(&out, &cfg)?;
        cfg
    };
    let flag = Arc::new(AtomicBool::new(false));
    let started = Arc::new(AtomicBool::new(false));
    let (f, s) = (flag.clone(), started.clone());
    // Before the first step (reading data, embedding, the first validation) there is nothing
    // to checkpoint: Ctrl-C exits at once. Then the first Ctrl-C finishes the step,
    // checkpoints and exits 130; a second exits at once.
    ctrlc::set_handler(move || {
        if !s.load(Ordering::SeqCst) {
            errln!("\nxsent train: interrupted before the first training step; nothing to checkpoint, exiting");
            std::process::exit(130);
        }
        if f.swap(true, Ordering::SeqCst) {
            errln!("\nxsent train: second interrupt, exiting without a checkpoint");
            std::process::exit(130);
        }
        errln!(
            "\nxsent train: interrupted; finishing this step and writing a checkpoint (Ctrl-C again to quit at once)"
        );
    })
    .context("cannot install the Ctrl-C handler")?;
    let profile = crate::profile::requested();
    if let Some(p) = &profile {
        crate::profile::check(p)?;
    }
    let opts = RunOptions { stop_after: a.stop_after, interrupt: Some(flag), started: Some(started), profile };
    let outcome = train::train(&cfg, &out, a.resume, &opts);
    Ok(match outcome? {
        Outcome::Finished | Outcome::EarlyStopped => 0,
        Outcome::Interrupted if opts.interrupt.as_ref().is_some_and(|f| f.load(Ordering::SeqCst)) => 130,
        Outcome::Interrupted => 0,
    })
}

/// The config keys of models a recipe trains (the others are frozen, and may be quantised).
const TRAINED: [&str; 2] = ["distill.student", "dueam.learner"];

/// `--check`: print the resolved config on stdout, and on stderr each path it names with
/// whether it exists; an error when one does not.
fn check(from: config::ConfigFrom, a: &Args) -> Result<i32> {
    let mut cfg = config::load_from(from, &a.unsets, &a.sets, false)?;
    out!("{}", cfg.to_toml()?);
    let mut missing = Vec::new();
    for f in cfg.paths_mut() {
        let v = f.get();
        let p = std::path::Path::new(&v);
        // A model to train is looked for as the run loads it (a bare name in the models folder too).
        let untrainable = (f.kind == config::PathKind::Model && TRAINED.contains(&f.key.as_str()))
            .then(|| crate::model::quantized::refuse_for_training(&v).err())
            .flatten();
        let state = match f.kind {
            _ if let Some(e) = &untrainable => {
                missing.push(format!("{} = {v}: {e:#}", f.key));
                "CANNOT BE TRAINED"
            }
            config::PathKind::Model if p.is_dir() => "model directory",
            config::PathKind::Model if !p.is_absolute() => "hub id (not checked: the hub is asked when the run starts)",
            config::PathKind::File => match file_state(p, wants_folder(&f.key)) {
                Ok(state) => state,
                Err(MISSING) => {
                    missing.push(format!("{} = {v}", f.key));
                    MISSING
                }
                Err(why) => {
                    missing.push(format!("{} = {v}: {why}", f.key));
                    why
                }
            },
            _ => {
                missing.push(format!("{} = {v}", f.key));
                MISSING
            }
        };
        errln!("xsent train --check: {} = {v}: {state}", f.key);
    }
    if !missing.is_empty() {
        bail!(
            "{}: {} of its paths do not exist or cannot serve:\n  {}\n(benchmark data: `xsent data fetch`; models: scripts/setup.sh; \
             paths of your own: edit the config or --set KEY=PATH)",
            from.name(),
            missing.len(),
            missing.join("\n  ")
        );
    }
    errln!("xsent train --check: {}: recipe {}, every path exists", from.name(), cfg.recipe);
    Ok(0)
}

/// What `--check` says of a path that does not exist.
const MISSING: &str = "MISSING";

/// Whether a file-or-folder key of a config names a folder: an xnli source's `dir`,
/// `data.eval_dir`, `dueam.xnli_dir`. Every other such key names a file.
fn wants_folder(key: &str) -> bool {
    key.ends_with(".dir") || key.ends_with("_dir")
}

/// What `--check` says of `p`, a key's file (or folder, with `folder`): `Ok` with what is there
/// when it can serve, else `Err` with why not ([`MISSING`] when nothing is there). Judged by
/// metadata alone: a named pipe is not opened, which would wait for its writer. A file key takes
/// anything the run can read as a file: a regular file, a named pipe, a device.
fn file_state(p: &std::path::Path, folder: bool) -> std::result::Result<&'static str, &'static str> {
    let Ok(meta) = std::fs::metadata(p) else { return Err(MISSING) };
    let t = meta.file_type();
    match (folder, t.is_dir()) {
        (true, true) => Ok("folder"),
        (true, false) => Err("not a folder; a folder is needed"),
        (false, true) => Err("a folder; a file is needed"),
        (false, false) if t.is_file() => Ok("file"),
        (false, false) => special_file(t),
    }
}

/// [`file_state`] of something that is neither a regular file nor a folder.
#[cfg(unix)]
fn special_file(t: std::fs::FileType) -> std::result::Result<&'static str, &'static str> {
    use std::os::unix::fs::FileTypeExt;
    if t.is_fifo() {
        Ok("named pipe (FIFO; read when the run starts)")
    } else if t.is_char_device() || t.is_block_device() {
        Ok("device")
    } else {
        Err("a socket; a file is needed")
    }
}

#[cfg(not(unix))]
fn special_file(_: std::fs::FileType) -> std::result::Result<&'static str, &'static str> {
    Ok("file")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file key takes a regular file, a named pipe or a device, and refuses a folder; a folder
    /// key takes a folder only. Nothing there is MISSING.
    #[test]
    fn check_tells_files_from_folders() {
        let d = tempfile::tempdir().unwrap();
        let file = d.path().join("pairs.tsv");
        std::fs::write(&file, "a\tb\n").unwrap();
        let folder = d.path().join("adir.tsv");
        std::fs::create_dir(&folder).unwrap();
        assert_eq!(file_state(&file, false), Ok("file"));
        assert_eq!(file_state(&folder, false), Err("a folder; a file is needed"));
        assert_eq!(file_state(&folder, true), Ok("folder"));
        assert_eq!(file_state(&file, true), Err("not a folder; a folder is needed"));
        assert_eq!(file_state(&d.path().join("none.tsv"), false), Err(MISSING));
        assert_eq!(file_state(&d.path().join("none"), true), Err(MISSING));
        #[cfg(unix)]
        {
            // A named pipe with no writer: judged without opening it (that would block).
            let fifo = d.path().join("fifo.tsv");
            let made = std::process::Command::new("mkfifo").arg(&fifo).status().unwrap();
            assert!(made.success());
            assert_eq!(file_state(&fifo, false), Ok("named pipe (FIFO; read when the run starts)"));
            assert_eq!(file_state(&fifo, true), Err("not a folder; a folder is needed"));
            assert_eq!(file_state(std::path::Path::new("/dev/null"), false), Ok("device"));
        }
    }

    /// The keys that name folders, as `Config::paths_mut` lists them; the others name files.
    #[test]
    fn folder_keys() {
        let d = tempfile::tempdir().unwrap();
        // Every file-or-folder key: the folders' values start with D, the files' with f.
        let distill = "recipe = \"distill\"\n[train]\nmax_steps = 5\nval_sts = \"f-sts.csv\"\n\
            [distill]\nteacher = \"t\"\nstudent = \"s\"\n\
            [[distill.projection_fit_sources]]\nkind = \"xnli\"\ndir = \"D-proj\"\nlangs = [\"de\"]\n\
            [data]\neval_dir = \"D-eval\"\neval_pairs = [\"f-pairs.tsv\"]\neval_lines = [\"f-lines.txt\"]\n\
            [[data.sources]]\nkind = \"tsv\"\npath = \"f.tsv\"\n\
            [[data.sources]]\nkind = \"aligned\"\nsrc = \"f-a\"\ntgt = \"f-b\"\n\
            [[data.sources]]\nkind = \"xnli\"\ndir = \"D-xnli\"\nlangs = [\"de\"]\n\
            [[data.val_sources]]\nkind = \"xnli\"\ndir = \"D-val\"\nlangs = [\"de\"]\n";
        let dueam = "recipe = \"dueam\"\n[train]\nmax_steps = 5\n\
            [dueam]\nanchor = \"a\"\nlearner = \"l\"\npairs = \"weak\"\nxnli_dir = \"D-dueam\"\nlangs = [\"en\", \"de\"]\n\
            [[dueam.val_sources]]\nkind = \"tsv\"\npath = \"f-val.tsv\"\n";
        let mut seen = 0;
        for (name, text) in [("distill.toml", distill), ("dueam.toml", dueam)] {
            let file = d.path().join(name);
            std::fs::write(&file, text).unwrap();
            let mut cfg = config::load(&file, &[]).unwrap();
            for f in cfg.paths_mut().into_iter().filter(|f| f.kind == config::PathKind::File) {
                let v = f.get();
                let folder = std::path::Path::new(&v).file_name().unwrap().to_string_lossy().starts_with('D');
                assert_eq!(wants_folder(&f.key), folder, "{} = {v}", f.key);
                seen += 1;
            }
        }
        assert_eq!(seen, 12);
        assert!(!wants_folder("lightweight.tokenizer") && !wants_folder("sp.tokenizer"));
    }
}
