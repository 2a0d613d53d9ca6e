//! One run at a time: one `xsent train` per run directory, one `xsent embed --shard` per shard.
//!
//! Two runs on one `--out` would both report success while one replaced the other's
//! checkpoints. A run therefore holds an advisory lock (`flock`, through std's
//! [`std::fs::File::try_lock`]) on `RUN/.xsent.lock` from before it reads the directory until it
//! exits; the file says who holds it (pid, host, start time), for the message a second run gets.
//! The kernel releases the lock when its holder exits, however it exits (a `kill -9` included),
//! so a lock is never left behind: a file still naming a holder that is gone is taken over, and
//! the message says so.

use crate::io::host;
use anyhow::{bail, Context, Result};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};

/// The lock file's name inside a run directory.
pub const LOCK_FILE: &str = ".xsent.lock";

/// A held lock on a run directory, released when dropped (or when the process ends).
pub struct RunLock {
    file: std::fs::File,
    path: PathBuf,
}

/// Who the lock file says holds it: "pid P on host H, started N s ago" (None when it is empty).
fn holder(text: &str) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(text.trim()).ok()?;
    let since = v["started_unix"]
        .as_u64()
        .map_or(String::new(), |t| format!(", started {} s ago", unix_now().saturating_sub(t)));
    Some(format!("pid {} on host {}{since}", v["pid"].as_u64()?, v["host"].as_str().unwrap_or("?")))
}

/// Whether `file` is still the file at `path` (not unlinked or replaced since it was opened).
#[cfg(unix)]
fn still_at(file: &std::fs::File, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (file.metadata(), std::fs::metadata(path)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

#[cfg(not(unix))]
fn still_at(_file: &std::fs::File, path: &Path) -> bool {
    path.exists()
}

impl RunLock {
    /// Lock run directory `dir` (which must exist), or fail at once naming the holder.
    pub fn acquire(dir: &Path) -> Result<Self> {
        let thing = format!("run directory {}", dir.display());
        Self::acquire_file(&dir.join(LOCK_FILE), &thing, "xsent train", "give --out another directory")
    }

    /// Lock the file `path` (its folder must exist) for `command`'s work on `thing` (as messages
    /// name it), or fail at once naming the holder and saying what else to do (`otherwise`).
    /// `xsent embed --shard` locks each shard this way.
    pub fn acquire_file(path: &Path, thing: &str, command: &str, otherwise: &str) -> Result<Self> {
        let path = path.to_path_buf();
        loop {
            let mut file = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(&path)
                .with_context(|| format!("cannot open the lock file {}", path.display()))?;
            match file.try_lock() {
                Ok(()) => {}
                Err(std::fs::TryLockError::WouldBlock) => {
                    let mut text = String::new();
                    let _ = file.read_to_string(&mut text);
                    let who = holder(&text).unwrap_or_else(|| "a process that is starting".to_string());
                    bail!("{thing} is in use by another {command} ({who}): wait for it to end (or stop it), or {otherwise}");
                }
                Err(std::fs::TryLockError::Error(e)) => {
                    return Err(e)
                        .with_context(|| format!("cannot lock {} (is the file system read-only?)", path.display()))
                }
            }
            // The holder before us may have removed the file between our open and our lock:
            // then the lock guards nothing, and we start again.
            if !still_at(&file, &path) {
                continue;
            }
            let mut text = String::new();
            let _ = file.read_to_string(&mut text);
            if let Some(who) = holder(&text) {
                crate::errln!(
                    "{command}: taking over the lock of {thing}: its holder ({who}) ended without releasing it (killed, or its machine went down)"
                );
            }
            let me = serde_json::json!({"pid": std::process::id(), "host": host(), "started_unix": unix_now()});
            file.set_len(0)
                .and_then(|()| file.rewind())
                .and_then(|()| file.write_all(format!("{me}\n").as_bytes()))
                .with_context(|| format!("cannot write the lock file {}", path.display()))?;
            return Ok(Self { file, path });
        }
    }

    /// Remove the lock file (with the run directory about to go), releasing the lock.
    pub fn remove(self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

impl Drop for RunLock {
    /// An orderly end empties the file (the next run has no holder to take over from); the
    /// kernel drops the lock when the file closes.
    fn drop(&mut self) {
        let _ = self.file.set_len(0);
    }
}

/// Seconds since the Unix epoch.
fn unix_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_names_the_first_and_a_released_one_is_taken() {
        let d = tempfile::tempdir().unwrap();
        let first = RunLock::acquire(d.path()).unwrap();
        let e = RunLock::acquire(d.path()).err().unwrap().to_string();
        assert!(
            e.contains("in use by another xsent train") && e.contains(&format!("pid {}", std::process::id())),
            "{e}"
        );
        drop(first);
        let again = RunLock::acquire(d.path()).unwrap();
        again.remove();
        assert!(!d.path().join(LOCK_FILE).exists());
    }
}
