//! Files and directories written so that an interruption leaves the old version or the new one,
//! never a part: through a temporary name, synced, then renamed into place.

use anyhow::{Context, Result};
use std::io::Write;
use std::path::Path;

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
