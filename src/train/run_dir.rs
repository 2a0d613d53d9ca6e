//! The run directory and its rules:
//! - `config.toml`: the resolved config;
//! - `metrics.jsonl`: one line per logged step (`step`, `loss`, each loss term, `lr`,
//!   `grad_norm`, `sentences_per_s`, …) and one per validation (`"val": {…}`);
//! - `checkpoints/step-N/`: `params.safetensors`, `optimizer.safetensors`, `state.json`
//!   (step, data position, RNG position, best score);
//! - `best/` (keep-best) and `final/`: model directories written by the recipe.

use super::checkpoint::checkpoint_steps;
use super::config::{self, Config};
use crate::io::atomic::{restore_replaced, write_file_atomically};
use anyhow::{Context, Result};
use std::path::Path;

/// Write the resolved config as run directory `out`'s `config.toml` (atomically, with the
/// header that marks it as a run's).
pub fn write_run_config(out: &Path, cfg: &Config) -> Result<()> {
    write_file_atomically(&out.join("config.toml"), config::run_config_text(cfg)?.as_bytes())
}

/// [`restore_replaced`] for every directory a run writes atomically (`best/`, `final/`,
/// `checkpoints/step-N/`), and the temporary folders of such writes cut short removed. Call it
/// with the run directory locked ([`super::lock::RunLock`]).
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
/// run did not keep, it is moved aside to `best-step-N-before-resume/` (not deleted); a replay
/// that scores as well writes it again.
pub(crate) fn set_aside_stale_best(out: &Path, step: u64) -> Result<()> {
    let best = out.join("best");
    let Ok(text) = std::fs::read_to_string(best.join("xsent-best.json")) else { return Ok(()) };
    let Some(at) = serde_json::from_str::<serde_json::Value>(&text).ok().and_then(|v| v["step"].as_u64()) else {
        return Ok(());
    };
    if at <= step {
        return Ok(());
    }
    let aside = out.join(format!("best-step-{at}-before-resume"));
    anyhow::ensure!(
        !aside.exists(),
        "--resume: {} holds step {at}, after the checkpoint of step {step}, and {} exists already: move one of them away, then resume",
        best.display(),
        aside.display()
    );
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
