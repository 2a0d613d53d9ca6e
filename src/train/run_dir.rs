//! The run directory and its rules:
//! - `config.toml`: the resolved config;
//! - `metrics.jsonl`: one line per logged step (`step`, `loss`, each loss term, `lr`,
//!   `grad_norm`, `sentences_per_s`, …) and one per validation (`"val": {…}`);
//! - `checkpoints/step-N/`: `params.safetensors`, `optimizer.safetensors`, `state.json`
//!   (step, data position, RNG position, best score);
//! - `best/` (keep-best) and `final/`: model directories written by the recipe.
//!
//! It also decides what a new run may do with an existing `--out` (clear a start that stopped
//! before its first checkpoint, refuse anything else) and where a config's run goes by default.

use super::checkpoint::{checkpoint_steps, latest_checkpoint};
use super::config::{Config, ConfigFrom};
use crate::io::atomic::{restore_replaced, write_file_atomically};
use crate::io::lock::LOCK_FILE;
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};

/// Write the resolved config as run directory `out`'s `config.toml` (atomically, with the
/// header that marks it as a run's).
pub fn write_run_config(out: &Path, cfg: &Config) -> Result<()> {
    write_file_atomically(&out.join("config.toml"), run_config_text(cfg)?.as_bytes())
}

/// [`restore_replaced`] for every directory a run writes atomically (`best/`, `final/`,
/// `checkpoints/step-N/`), and the temporary folders of such writes cut short removed. Call it
/// with the run directory locked ([`crate::io::lock::RunLock`]).
pub fn restore_run(out: &Path) -> Result<()> {
    restore_replaced(&out.join("best"))?;
    restore_replaced(&out.join("final"))?;
    for name in [".best.tmp", ".final.tmp"] {
        remove_stale(&out.join(name))?;
    }
    let dir = out.join("checkpoints");
    if dir.is_dir() {
        let newest = checkpoint_steps(&dir)?.last().copied();
        for e in std::fs::read_dir(&dir).with_context(|| format!("cannot read {}", dir.display()))? {
            let e = e.with_context(|| format!("cannot read {}", dir.display()))?;
            let name = e.file_name();
            if name.to_str().is_some_and(|n| n.starts_with(".step-") && n.ends_with(".tmp")) {
                remove_stale(&e.path())?;
                continue;
            }
            let Some(step) =
                name.to_str().and_then(|n| n.strip_prefix(".step-")?.strip_suffix(".old")?.parse::<u64>().ok())
            else {
                continue;
            };
            if newest.is_none_or(|n| step > n) {
                restore_replaced(&dir.join(format!("step-{step}")))?;
            } else {
                // Its checkpoint is in place, or older than one that is: a leftover whose
                // removal was cut short, not a replacement to undo.
                std::fs::remove_dir_all(e.path()).with_context(|| format!("cannot remove {}", e.path().display()))?;
            }
        }
    }
    Ok(())
}

/// Remove the folder of a [`write_atomically`] cut short (the process was killed while it wrote
/// a checkpoint or model), saying so. Only with the run's lock held: another run's write in
/// progress looks the same.
pub(crate) fn remove_stale(tmp: &Path) -> Result<()> {
    if tmp.is_dir() {
        std::fs::remove_dir_all(tmp).with_context(|| format!("cannot remove {}", tmp.display()))?;
        crate::errln!("xsent train: removed {}, left by a write that was cut short", tmp.display());
    }
    Ok(())
}

/// Drop metrics lines of steps after `step` (written after the checkpoint resumed from).
pub(crate) fn truncate_metrics(path: &Path, step: u64) -> Result<()> {
    let Ok(text) = std::fs::read_to_string(path) else { return Ok(()) };
    let kept: Vec<&str> = text
        .lines()
        .filter(|l| {
            serde_json::from_str::<serde_json::Value>(l)
                .ok()
                .and_then(|v| v["step"].as_u64())
                .is_some_and(|s| s <= step)
        })
        .collect();
    let mut out = kept.join("\n");
    if !out.is_empty() {
        out.push('\n');
    }
    write_file_atomically(path, out.as_bytes())
}

/// On resume from a checkpoint older than `best/`, `best/` holds a model of steps after the
/// checkpoint, which the resumed run replays (the same steps again, or others under a changed
/// config) and scores against the checkpoint's best. So that `best/` never holds a model this
/// run did not keep, it is moved aside to `best-step-N-before-resume/` (not deleted; `.1`, `.2`
/// after it where that exists); a replay that scores as well writes it again.
pub(crate) fn set_aside_stale_best(out: &Path, step: u64) -> Result<()> {
    let best = out.join("best");
    let Ok(text) = std::fs::read_to_string(best.join("xsent-best.json")) else { return Ok(()) };
    let Some(at) = serde_json::from_str::<serde_json::Value>(&text).ok().and_then(|v| v["step"].as_u64()) else {
        return Ok(());
    };
    if at <= step {
        return Ok(());
    }
    // A second resume past the same step (a requeued job preempted twice) takes the next free
    // name: `.1`, `.2`, … (it refused before, so every retry failed).
    let aside = super::checkpoint::free_name(out, &format!("best-step-{at}-before-resume"));
    std::fs::rename(&best, &aside).with_context(|| format!("cannot move {} to {}", best.display(), aside.display()))?;
    errln!(
        "xsent train: best/ held step {at}, after the checkpoint resumed (step {step}); moved to {} (the resumed run keeps its own best)",
        aside.display()
    );
    Ok(())
}

/// Whether `metrics.jsonl` holds a validation at `step`.
pub(crate) fn validation_logged(path: &Path, step: u64) -> bool {
    std::fs::read_to_string(path).is_ok_and(|text| {
        text.lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .any(|v| v["step"].as_u64() == Some(step) && v.get("val").is_some())
    })
}

/// The first line of a run directory's `config.toml`: what tells a run's files from a user's
/// own of the same name when a new run may clear a failed start.
pub const RUN_CONFIG_HEADER: &str = "# xsent train: the resolved config of this run, every default written out\n";

/// Whether `path` is a `config.toml` that `xsent train` wrote (it starts with [`RUN_CONFIG_HEADER`]).
pub fn is_run_config(path: &Path) -> bool {
    std::fs::read_to_string(path).is_ok_and(|t| t.starts_with(RUN_CONFIG_HEADER))
}

/// A run directory's `config.toml`: [`RUN_CONFIG_HEADER`], then the config.
pub fn run_config_text(cfg: &Config) -> Result<String> {
    Ok(format!("{RUN_CONFIG_HEADER}{}", cfg.to_toml()?))
}

/// The default run directory of a config: `runs/<file stem>` (a built-in's: `runs/<name>`).
pub fn default_out(config: &ConfigFrom) -> PathBuf {
    match config {
        ConfigFrom::File(p) | ConfigFrom::Run(p) => PathBuf::from("runs").join(p.file_stem().unwrap_or_default()),
        ConfigFrom::BuiltIn(b) => PathBuf::from("runs").join(b.name),
    }
}

/// The names in `out` other than the lock file (None if it cannot be read).
pub fn entries_besides_lock(out: &std::path::Path) -> Option<Vec<String>> {
    let d = std::fs::read_dir(out).ok()?;
    Some(
        d.filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n != LOCK_FILE)
            .collect(),
    )
}

/// Remove the folders this command made for `--out` (itself first), where empty, with the
/// temporary file of a config.toml write cut short.
pub fn remove_made(out: &std::path::Path, made: &[std::path::PathBuf]) {
    if !made.is_empty() {
        let _ = std::fs::remove_file(out.join(".config.toml.tmp"));
    }
    for d in made {
        let _ = std::fs::remove_dir(d);
    }
}

/// What `xsent train` writes into a run directory before its first checkpoint (besides its
/// lock file, which is never cleared).
const START_ENTRIES: &[&str] = &[
    "config.toml",
    "metrics.jsonl",
    "checkpoints",
    "vocab",
    "init",
    ".vocab.tmp",
    ".init.tmp",
    ".vocab.old",
    ".init.old",
    ".best.tmp",
    ".best.old",
    ".config.toml.tmp",
    ".metrics.jsonl.tmp",
];

/// A fresh run into an existing, non-empty directory: allowed only when it holds a run that
/// stopped before its first checkpoint (nothing in it can be resumed or loaded), whose files are
/// then cleared; anything else is refused.
pub fn clear_failed_start(out: &std::path::Path) -> Result<()> {
    // A replacement of best/, final/ or a checkpoint cut short by a crash is undone first, so
    // that none of them is mistaken for a leftover.
    restore_run(out)?;
    if latest_checkpoint(out)?.is_some() {
        bail!("run directory {} already exists: pass --resume to continue it, or --out for a new run", out.display());
    }
    if out.join("final").exists() {
        // Without checkpoints --resume has nothing to continue from: it would send the user back.
        bail!(
            "run directory {} holds a finished run (its final/ model) and no checkpoint: give --out a new directory for a new run",
            out.display()
        );
    }
    if out.join("best").exists() {
        // A validation before the first checkpoint kept a model: never delete it.
        bail!(
            "{} holds best/ (kept by a validation) but no checkpoint to resume from: move {} elsewhere to keep it, \
             or delete it, then run the command again (or give --out a new directory)",
            out.display(),
            out.join("best").display()
        );
    }
    let mut entries = Vec::new();
    for e in std::fs::read_dir(out).with_context(|| format!("cannot read {}", out.display()))? {
        let e = e.with_context(|| format!("cannot read {}", out.display()))?;
        let name = e.file_name().to_string_lossy().into_owned();
        if name == LOCK_FILE {
            continue;
        }
        if !START_ENTRIES.contains(&name.as_str()) {
            bail!(
                "--out {} is not empty and is not an xsent run directory ({name} is in it): give --out a new or empty directory",
                out.display()
            );
        }
        entries.push(e.path());
    }
    // Only files that a start of `xsent train` wrote are cleared: config.toml is written first,
    // with its header, so a directory without it holds nobody's run but a user's own files of
    // these names (a `vocab/` or `checkpoints/` of theirs, say), which are left alone; the one
    // exception is the temporary file of that first write, cut short.
    let cfg_file = out.join("config.toml");
    let ours = if cfg_file.is_file() {
        is_run_config(&cfg_file)
    } else {
        entries.iter().all(|p| p.file_name().is_some_and(|n| n == ".config.toml.tmp"))
    };
    if !ours {
        bail!(
            "--out {} holds files that xsent train did not write (no config.toml of a run, or one an older xsent wrote): \
             move them elsewhere, or give --out a new or empty directory",
            out.display()
        );
    }
    errln!(
        "xsent train: {} holds no checkpoint (a start that stopped before its first one); starting it over",
        out.display()
    );
    // config.toml last: an interruption in between leaves a directory still marked as a run's.
    entries.sort_by_key(|p| p.file_name().is_some_and(|n| n == "config.toml"));
    for p in entries {
        let r = if p.is_dir() { std::fs::remove_dir_all(&p) } else { std::fs::remove_file(&p) };
        r.with_context(|| format!("cannot remove {}", p.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::atomic::write_atomically;
    use anyhow::bail;

    #[test]
    fn atomic_dir_replacement() {
        let d = tempfile::tempdir().unwrap();
        let dst = d.path().join("final");
        write_atomically(&dst, |p| Ok(std::fs::write(p.join("a"), "1")?)).unwrap();
        let e = write_atomically(&dst, |_| bail!("disk full")).unwrap_err();
        assert!(format!("{e:#}").contains("disk full"));
        assert_eq!(std::fs::read_to_string(dst.join("a")).unwrap(), "1", "a failed write leaves the old dir");
        write_atomically(&dst, |p| Ok(std::fs::write(p.join("b"), "2")?)).unwrap();
        assert!(!dst.join("a").exists() && dst.join("b").exists());
        // A replacement cut between its two renames (dst moved to .final.old, the new one
        // still at .final.tmp) is undone: the previous version comes back.
        std::fs::rename(&dst, d.path().join(".final.old")).unwrap();
        std::fs::create_dir(d.path().join(".final.tmp")).unwrap();
        restore_replaced(&dst).unwrap();
        assert_eq!(std::fs::read_to_string(dst.join("b")).unwrap(), "2");
        assert!(!d.path().join(".final.old").exists());
        // The same for a checkpoint, found by `restore_run`.
        let ck = d.path().join("checkpoints");
        std::fs::create_dir_all(ck.join(".step-4.old")).unwrap();
        std::fs::write(ck.join(".step-4.old/state.json"), "{}").unwrap();
        std::fs::create_dir_all(ck.join("step-2")).unwrap();
        restore_run(d.path()).unwrap();
        assert!(ck.join("step-4/state.json").is_file() && ck.join("step-2").is_dir());
        // A leftover older than an existing checkpoint is removed, not brought back.
        std::fs::create_dir_all(ck.join(".step-3.old")).unwrap();
        restore_run(d.path()).unwrap();
        assert!(!ck.join("step-3").exists() && !ck.join(".step-3.old").exists());
    }
}
