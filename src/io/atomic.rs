//! Files and directories written so that an interruption leaves the old version or the new one,
//! never a part: through a temporary name, synced, then renamed into place.

use anyhow::{Context, Result};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Write a directory via `.NAME.tmp` and a rename, replacing any older one only once the new
/// one is complete and on disk (its files are synced before the rename).
pub fn write_atomically(dst: &Path, write: impl FnOnce(&Path) -> Result<()>) -> Result<()> {
    restore_replaced(dst)?;
    let name = dst.file_name().and_then(|n| n.to_str()).unwrap_or("dir");
    let tmp = dst.with_file_name(format!(".{name}.tmp"));
    let old = dst.with_file_name(format!(".{name}.old"));
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp)?;
    }
    std::fs::create_dir_all(&tmp).with_context(|| format!("cannot create {}", tmp.display()))?;
    write(&tmp).with_context(|| format!("writing {}", dst.display()))?;
    sync_tree(&tmp).with_context(|| format!("cannot sync {} to disk", tmp.display()))?;
    if dst.exists() {
        if old.exists() {
            std::fs::remove_dir_all(&old)?;
        }
        // Between this rename and the next, the previous version is only at `old`:
        // `restore_replaced` puts it back if the process dies here.
        std::fs::rename(dst, &old)?;
    }
    std::fs::rename(&tmp, dst).with_context(|| format!("cannot move {} into place", dst.display()))?;
    if let Some(parent) = dst.parent() {
        sync_dir(parent);
    }
    if old.exists() {
        std::fs::remove_dir_all(&old)?;
    }
    Ok(())
}

/// Undo a replacement by [`write_atomically`] that was cut between its two renames: `dst` is
/// missing and its previous version is `.NAME.old`, which is moved back.
pub fn restore_replaced(dst: &Path) -> Result<()> {
    let name = dst.file_name().and_then(|n| n.to_str()).unwrap_or("dir");
    let old = dst.with_file_name(format!(".{name}.old"));
    if !dst.exists() && old.is_dir() {
        std::fs::rename(&old, dst)
            .with_context(|| format!("cannot restore {} from {}", dst.display(), old.display()))?;
    }
    Ok(())
}

/// Write a new directory `out` for `command` (`xsent quantize`, `xsent convert`): into
/// `.NAME.partial-PID` beside it, synced, then moved into place, replacing what is at `out` (the
/// caller checked that it may: a new path, an empty folder, or one of its own outputs). The
/// hidden names carry the process id, so no folder of the user's or of another run is touched.
/// On any failure nothing is left behind and `out` is as it was.
pub fn write_new_dir<T>(out: &Path, command: &str, write: impl FnOnce(&Path) -> Result<T>) -> Result<T> {
    let parent = out.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent).with_context(|| format!("cannot create {}", parent.display()))?;
    let tmp = hidden_sibling(out, "partial");
    if tmp.exists() {
        // Left by a process of this id that was killed: no other one can hold it now.
        std::fs::remove_dir_all(&tmp).with_context(|| format!("cannot remove the leftover {}", tmp.display()))?;
    }
    std::fs::create_dir(&tmp).with_context(|| format!("cannot create {}", tmp.display()))?;
    let written = write(&tmp).and_then(|v| {
        sync_tree(&tmp).with_context(|| format!("cannot sync {} to disk", tmp.display()))?;
        Ok(v)
    });
    match written {
        Ok(v) => move_into_place(&tmp, out, command).map(|()| v),
        Err(e) => {
            let _ = std::fs::remove_dir_all(&tmp);
            Err(e.context(format!("writing {} (nothing was written there)", out.display())))
        }
    }
}

/// `.NAME.TAG-PID` beside `out`: where the new model is written, or the old one is moved aside.
fn hidden_sibling(out: &Path, tag: &str) -> PathBuf {
    let parent = out.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    parent.join(format!(
        ".{}.{tag}-{}",
        out.file_name().and_then(|n| n.to_str()).unwrap_or("model"),
        std::process::id()
    ))
}

/// Move the finished folder `tmp` to `out`, replacing a folder there (the caller checked that it
/// may): the old one is moved aside first, put back if the move fails and removed last. On any
/// failure `tmp` is removed: nothing is left behind.
fn move_into_place(tmp: &Path, out: &Path, command: &str) -> Result<()> {
    let fail = |e: anyhow::Error| -> Result<()> {
        let _ = std::fs::remove_dir_all(tmp);
        Err(e.context(format!("cannot put the new folder at {}; it was removed", out.display())))
    };
    let old = match std::fs::symlink_metadata(out) {
        Ok(_) => {
            let old = hidden_sibling(out, "old");
            let _ = std::fs::remove_dir_all(&old);
            if let Err(e) = std::fs::rename(out, &old) {
                return fail(anyhow::Error::new(e).context(format!("cannot move the old {} aside", out.display())));
            }
            Some(old)
        }
        Err(_) => None,
    };
    if let Err(e) = std::fs::rename(tmp, out) {
        let mut e = anyhow::Error::new(e).context(format!("cannot move {} to {}", tmp.display(), out.display()));
        if let Some(old) = &old {
            if let Err(back) = std::fs::rename(old, out) {
                e = e.context(format!("the old folder could not be put back: it is in {} ({back})", old.display()));
            }
        }
        return fail(e);
    }
    if let Some(old) = old {
        if let Err(e) = std::fs::remove_dir_all(&old) {
            crate::errln!(
                "{command}: note: cannot remove the replaced folder, moved to {}: {e}; remove it yourself",
                old.display()
            );
        }
    }
    Ok(())
}

/// Flush every file under `dir` (and the directories themselves) to disk.
pub fn sync_tree(dir: &Path) -> Result<()> {
    for e in std::fs::read_dir(dir)? {
        let p = e?.path();
        if p.is_dir() {
            sync_tree(&p)?;
        } else {
            std::fs::File::open(&p)?.sync_all()?;
        }
    }
    sync_dir(dir);
    Ok(())
}

/// Flush a directory's entries (best effort: not every platform can open a directory).
pub fn sync_dir(dir: &Path) {
    if let Ok(f) = std::fs::File::open(dir) {
        let _ = f.sync_all();
    }
}

/// Replace a file through `.NAME.tmp` and a rename: an interruption leaves the old file or the
/// new one, never a truncated one.
/// On failure the temporary file is removed and `path` is as it was.
pub fn write_file_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    let tmp = path.with_file_name(format!(".{name}.tmp"));
    let written = (|| {
        let mut f = std::fs::File::create(&tmp).with_context(|| format!("cannot write {}", tmp.display()))?;
        f.write_all(bytes).and_then(|_| f.sync_all()).with_context(|| format!("cannot write {}", tmp.display()))?;
        std::fs::rename(&tmp, path).with_context(|| format!("cannot move {} into place", path.display()))
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The finished folder replaces an old one; a move that fails takes the new folder away and
    /// puts the old one back, so no `.NAME.partial-PID` (nor `.NAME.old-PID`) is left.
    #[test]
    fn move_into_place_replaces_or_leaves_nothing_behind() {
        let dir = tempfile::tempdir().unwrap();
        let made = |name: &str, text: &str| {
            let p = dir.path().join(name);
            std::fs::create_dir(&p).unwrap();
            std::fs::write(p.join("config.json"), text).unwrap();
            p
        };
        let names = || {
            let mut v: Vec<String> = std::fs::read_dir(dir.path())
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into())
                .collect();
            v.sort();
            v
        };
        let out = dir.path().join("out");
        move_into_place(&made(".out.partial-1", "first"), &out, "xsent test").unwrap();
        assert_eq!(std::fs::read_to_string(out.join("config.json")).unwrap(), "first");
        move_into_place(&made(".out.partial-1", "second"), &out, "xsent test").unwrap();
        assert_eq!(std::fs::read_to_string(out.join("config.json")).unwrap(), "second");
        assert_eq!(names(), ["out"]);
        // A folder that does not exist cannot take it: the new folder is removed.
        let e = move_into_place(&made(".out.partial-1", "third"), &dir.path().join("missing/out"), "xsent test")
            .unwrap_err();
        assert!(format!("{e:#}").contains("missing/out"), "{e:#}");
        assert_eq!(names(), ["out"]);
        assert_eq!(std::fs::read_to_string(out.join("config.json")).unwrap(), "second");
    }
}
