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

/// What [`write_new_dir`] may replace at `out` when it moves the new folder in. Callers check
/// `out` at their start too (to fail before the work); this is checked again at the end, right
/// before the move, so that a folder made at `out` while the command ran (by the user, or by
/// another run) is kept and the command fails, never deleted.
pub enum Replace<'a> {
    /// Nothing: `out` must still be absent; not even an empty folder there is replaced.
    Nothing,
    /// A folder (not a link) that `check` accepts; `what` names those for the error message
    /// ("a model directory written by xsent quantize").
    Only { what: &'a str, check: &'a dyn Fn(&Path) -> bool },
}

/// Write a new directory `out` for `command` (`xsent quantize`, `xsent convert`): into
/// `.NAME.partial-PID-HOST` beside it, synced, then moved into place, replacing what is at `out` only
/// if `replace` allows it (checked again right before the move; the move itself replaces
/// nothing, so a folder that appears at `out` in between is kept too). The hidden names carry the
/// process id, so no folder of the user's or of another run is touched.
/// On any failure nothing is left behind and `out` is as it was.
pub fn write_new_dir<T>(
    out: &Path,
    command: &str,
    replace: Replace<'_>,
    write: impl FnOnce(&Path) -> Result<T>,
) -> Result<T> {
    check_dir_name(out)?;
    let parent = out.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent).with_context(|| format!("cannot create {}", parent.display()))?;
    let tmp = hidden_sibling(out, "partial");
    remove_stale_partials(out, command);
    if tmp.exists() {
        // Left by a process of this id that was killed: no other one can hold it now.
        std::fs::remove_dir_all(&tmp).with_context(|| format!("cannot remove the leftover {}", tmp.display()))?;
    }
    // Ctrl-C (SIGTERM, SIGHUP) removes the folder until it is moved into place.
    super::output::remove_on_interrupt(&tmp)?;
    std::fs::create_dir(&tmp).with_context(|| format!("cannot create {}", tmp.display()))?;
    let written = write(&tmp).and_then(|v| {
        sync_tree(&tmp).with_context(|| format!("cannot sync {} to disk", tmp.display()))?;
        Ok(v)
    });
    // Held while the folder is moved (and an old one removed): an interruption waits for the
    // move to end, so it never stops with the old folder aside and the new one not in place.
    let _held = super::output::unregister(&tmp);
    match written {
        Ok(v) => move_into_place(&tmp, out, command, &replace).map(|()| v),
        Err(e) => {
            let _ = std::fs::remove_dir_all(&tmp);
            Err(e.context(format!("writing {} (nothing was written there)", out.display())))
        }
    }
}

/// Refuse an output folder whose path ends in `.` or `..` (`dir/.`, `.`, `a/..`): the new folder
/// is written beside `out` and renamed to it, which such a name cannot take (an outside probe:
/// each failed only after all the work, with a false "another process changed it", and `a/..`
/// made a folder `a`). Callers check it before their work; [`write_new_dir`] checks it again.
pub fn check_dir_name(out: &Path) -> Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let bytes = out.as_os_str().as_bytes();
    let trimmed = bytes.iter().rposition(|&b| b != b'/').map_or(&bytes[..0], |i| &bytes[..=i]);
    let last = trimmed.rsplit(|&b| b == b'/').next().unwrap_or_default();
    if trimmed.is_empty() || last == b"." || last == b".." {
        anyhow::bail!(
            "the output directory {} ends in `.` or `..` (or is `/`): give the folder's own name, e.g. {}",
            out.display(),
            std::path::absolute(out)
                .ok()
                .map(|a| super::lexical_clean(&a))
                .and_then(|n| n.parent().is_some().then(|| n.display().to_string()))
                .unwrap_or_else(|| "../model".to_string())
        );
    }
    Ok(())
}

/// `.NAME.TAG-PID-HOST` beside `out`: where the new model is written, or the old one is moved
/// aside.
fn hidden_sibling(out: &Path, tag: &str) -> PathBuf {
    let parent = out.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    parent.join(format!(
        ".{}.{tag}-{}-{}",
        out.file_name().and_then(|n| n.to_str()).unwrap_or("model"),
        std::process::id(),
        super::host()
    ))
}

/// Remove the `.NAME.partial-PID-HOST` folders beside `out` left by processes of this machine that
/// are gone (killed with `kill -9`, or by the OOM killer, when no handler runs), saying so; a
/// folder of a process that still runs, or of another machine, is left. Best effort: without
/// /proc nothing is removed. A folder moved aside (`.NAME.old-…`) holds the user's earlier
/// model and is never removed here.
fn remove_stale_partials(out: &Path, command: &str) {
    if !Path::new("/proc/self").exists() {
        return;
    }
    let parent = out.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let Some(name) = out.file_name().and_then(|n| n.to_str()) else { return };
    let Ok(entries) = std::fs::read_dir(parent) else { return };
    let (prefix, host) = (format!(".{name}.partial-"), format!("-{}", super::host()));
    for e in entries.flatten() {
        let file = e.file_name();
        let Some(pid) = file.to_str().and_then(|f| f.strip_prefix(&prefix)).and_then(|r| r.strip_suffix(&host)) else {
            continue;
        };
        if !super::process_gone(pid) {
            continue;
        }
        if e.file_type().is_ok_and(|t| t.is_dir()) && std::fs::remove_dir_all(e.path()).is_ok() {
            crate::errln!(
                "{command}: removed {}, the unfinished output of xsent process {pid}, which is gone",
                e.path().display()
            );
        }
    }
}

/// Whether `replace` lets the folder at `dir` be replaced (a link never is).
fn may_replace(replace: &Replace<'_>, dir: &Path) -> bool {
    match replace {
        Replace::Nothing => false,
        Replace::Only { check, .. } => {
            std::fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir() && !m.file_type().is_symlink()) && check(dir)
        }
    }
}

/// The error when what is at `out` at the end may not be replaced: it appeared (or, where some
/// folders may be replaced, it appeared or changed) while `command` ran.
fn taken_error(out: &Path, command: &str, replace: &Replace<'_>) -> anyhow::Error {
    let happened = match replace {
        // The caller checked at its start that nothing was there.
        Replace::Nothing => format!("appeared while {command} ran (another process made it)"),
        Replace::Only { what, .. } => format!(
            "was made or changed while {command} ran (by another process) and is not {what}, \
             the only folder {command} replaces"
        ),
    };
    anyhow::anyhow!(
        "{} {happened}: it was left as it is; the new model was not written. \
         Remove it or choose another output directory, then run again",
        out.display()
    )
}

/// Move the finished folder `tmp` to `out`, replacing a folder there only if `replace` allows
/// it: that is checked right before the old folder is moved aside, and again once it is aside
/// (what is deleted is what was checked); the old one is put back if the move fails and removed
/// last. The move itself replaces nothing ([`rename_noreplace`]): a folder that appears at `out`
/// meanwhile is kept and the move fails. On any failure `tmp` is removed: nothing is left behind.
fn move_into_place(tmp: &Path, out: &Path, command: &str, replace: &Replace<'_>) -> Result<()> {
    let remove_tmp = || {
        let _ = std::fs::remove_dir_all(tmp);
    };
    let fail = |e: anyhow::Error| -> Result<()> {
        remove_tmp();
        Err(e.context(format!("cannot put the new folder at {}; it was removed", out.display())))
    };
    let old = match std::fs::symlink_metadata(out) {
        Ok(_) => {
            if !may_replace(replace, out) {
                remove_tmp();
                return Err(taken_error(out, command, replace));
            }
            let old = hidden_sibling(out, "old");
            let _ = std::fs::remove_dir_all(&old);
            if let Err(e) = std::fs::rename(out, &old) {
                return fail(anyhow::Error::new(e).context(format!("cannot move the old {} aside", out.display())));
            }
            // No other process uses this name: what is checked here is what is removed below.
            if !may_replace(replace, &old) {
                let e = put_back(&old, out, taken_error(out, command, replace));
                remove_tmp();
                return Err(e);
            }
            Some(old)
        }
        Err(_) => None,
    };
    if let Err(e) = rename_noreplace(tmp, out) {
        if e.kind() == std::io::ErrorKind::AlreadyExists {
            // Something appeared at `out` after the check (or after the old folder was moved
            // aside): it is kept, and the old folder stays aside if it cannot go back.
            let mut e = taken_error(out, command, &Replace::Nothing);
            if let Some(old) = &old {
                e = put_back(old, out, e);
            }
            remove_tmp();
            return Err(e);
        }
        let mut e = anyhow::Error::new(e).context(format!("cannot move {} to {}", tmp.display(), out.display()));
        if let Some(old) = &old {
            e = put_back(old, out, e);
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

/// Put the folder moved aside to `old` back at `out` after a replacement failed with `e`
/// (never over something that appeared there meanwhile); if it cannot go back, the error also
/// says where it is.
fn put_back(old: &Path, out: &Path, e: anyhow::Error) -> anyhow::Error {
    match rename_noreplace(old, out) {
        Ok(()) => e,
        // The first error stays in the chain (its causes, and what callers may look for).
        Err(back) => e.context(format!(
            "the folder that was at {} before could not be put back ({back}): it is in {}",
            out.display(),
            old.display()
        )),
    }
}

/// Rename the folder `from` to `to` only if nothing is at `to`, not even an empty folder (a
/// plain rename(2) of a folder replaces an empty one); if something is, the error's kind is
/// `AlreadyExists` and both are left as they were. On Linux this is one atomic
/// `renameat2(RENAME_NOREPLACE)`; elsewhere, or on a file system without it, see
/// [`rename_claiming`].
fn rename_noreplace(from: &Path, to: &Path) -> std::io::Result<()> {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    match renameat2_noreplace(from, to) {
        // EINVAL / ENOSYS: the file system (or the kernel) has no RENAME_NOREPLACE.
        Err(e) if matches!(e.kind(), std::io::ErrorKind::InvalidInput | std::io::ErrorKind::Unsupported) => {}
        r => return r,
    }
    rename_claiming(from, to)
}

/// `renameat2(AT_FDCWD, from, AT_FDCWD, to, RENAME_NOREPLACE)` (glibc 2.28 and later; Linux 3.15).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn renameat2_noreplace(from: &Path, to: &Path) -> std::io::Result<()> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let c = |p: &Path| {
        CString::new(p.as_os_str().as_bytes())
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "a path with a NUL byte"))
    };
    let (from, to) = (c(from)?, c(to)?);
    // SAFETY: two valid NUL-terminated paths that outlive the call; no other memory is passed.
    let r =
        unsafe { libc::renameat2(libc::AT_FDCWD, from.as_ptr(), libc::AT_FDCWD, to.as_ptr(), libc::RENAME_NOREPLACE) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// The no-replace rename of the folder `from` without `RENAME_NOREPLACE`: claim `to` with
/// mkdir (which fails if anything is there), then rename onto that empty folder (which fails if
/// anything was put in it meanwhile; the claimed folder is then removed only if still empty).
fn rename_claiming(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir(to)?;
    if let Err(e) = std::fs::rename(from, to) {
        return Err(match std::fs::remove_dir(to) {
            Ok(()) => e,
            Err(_) => std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                format!("{} was filled meanwhile ({e})", to.display()),
            ),
        });
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

    /// A folder that cannot be put back is named with where it is, and the error that made it
    /// be put back stays in the chain as itself (it was flattened into one message).
    #[test]
    fn a_folder_that_cannot_go_back_is_named_and_the_first_error_kept() {
        let dir = tempfile::tempdir().unwrap();
        let (old, out) = (dir.path().join(".m.old-1"), dir.path().join("m"));
        std::fs::create_dir(&old).unwrap();
        std::fs::create_dir(&out).unwrap();
        let first = std::io::Error::new(std::io::ErrorKind::PermissionDenied, "the first error");
        let e = put_back(&old, &out, anyhow::Error::new(first).context("moving"));
        let shown = format!("{e:#}");
        assert!(shown.contains("could not be put back") && shown.contains(".m.old-1"), "{shown}");
        assert!(e
            .chain()
            .any(|c| c.downcast_ref::<std::io::Error>().is_some_and(|io| io.to_string() == "the first error")));
        assert!(old.is_dir(), "left where it is");
        // Nothing at `out`: it goes back, and the error is the first one alone.
        std::fs::remove_dir(&out).unwrap();
        let e = put_back(&old, &out, anyhow::anyhow!("first"));
        assert_eq!(format!("{e:#}"), "first");
        assert!(out.is_dir() && !old.exists());
    }

    /// An output folder named by `.` or `..` is refused; other names pass.
    #[test]
    fn output_folders_ending_in_dots_are_refused() {
        for bad in ["dir/.", ".", "./", "a/..", "..", "/", "dir/./", "x/../"] {
            let e = check_dir_name(Path::new(bad)).unwrap_err().to_string();
            assert!(e.contains("ends in `.` or `..`") && e.contains("give the folder's own name"), "{bad}: {e}");
        }
        for good in ["dir", "dir/", "./dir", "../dir", "a/../b", ".hidden", "a/.b", "..x"] {
            check_dir_name(Path::new(good)).unwrap();
        }
    }

    /// A `.NAME.partial-PID-HOST` folder of a process that is gone is removed before a new
    /// write to NAME; one of a live process, another machine's, and a folder moved aside
    /// (`.NAME.old-…`) are left.
    #[test]
    fn stale_partial_folders_of_gone_processes_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        let host = super::super::host();
        let me = std::process::id();
        let gone = 4_000_000_000u32; // above any pid_max
        let names = [
            format!(".m.partial-{gone}-{host}"),
            format!(".m.partial-{me}-{host}"),
            format!(".m.partial-{gone}-another-host"),
            format!(".m.old-{gone}-{host}"),
            format!(".other.partial-{gone}-{host}"),
        ];
        for n in &names {
            std::fs::create_dir(dir.path().join(n)).unwrap();
            std::fs::write(dir.path().join(n).join("model.safetensors"), "x").unwrap();
        }
        remove_stale_partials(&dir.path().join("m"), "test");
        let left: Vec<bool> = names.iter().map(|n| dir.path().join(n).exists()).collect();
        assert_eq!(left, [false, true, true, true, true]);
    }

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
        let any = Replace::Only { what: "any folder", check: &|_| true };
        move_into_place(&made(".out.partial-1", "first"), &out, "xsent test", &any).unwrap();
        assert_eq!(std::fs::read_to_string(out.join("config.json")).unwrap(), "first");
        move_into_place(&made(".out.partial-1", "second"), &out, "xsent test", &any).unwrap();
        assert_eq!(std::fs::read_to_string(out.join("config.json")).unwrap(), "second");
        assert_eq!(names(), ["out"]);
        // A folder that does not exist cannot take it: the new folder is removed.
        let missing = dir.path().join("missing/out");
        let e = move_into_place(&made(".out.partial-1", "third"), &missing, "xsent test", &any).unwrap_err();
        assert!(format!("{e:#}").contains("missing/out"), "{e:#}");
        assert_eq!(names(), ["out"]);
        assert_eq!(std::fs::read_to_string(out.join("config.json")).unwrap(), "second");
    }

    /// The names in `dir`, sorted.
    fn names_in(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> =
            std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into()).collect();
        v.sort();
        v
    }

    /// A write that ends with another process's folder at `out` (made by `other`, as the user
    /// or a second run would while the command runs): `write_new_dir` fails, saying so, keeps
    /// that folder as it is and leaves no folder of its own behind.
    fn raced(
        replace: Replace<'_>,
        before: Option<&str>,
        other: impl FnOnce(&Path),
    ) -> (String, PathBuf, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        if let Some(text) = before {
            std::fs::create_dir(&out).unwrap();
            std::fs::write(out.join("config.json"), text).unwrap();
        }
        let e = write_new_dir(&out, "xsent test", replace, |tmp| {
            std::fs::write(tmp.join("config.json"), "new")?;
            other(&out);
            Ok(())
        })
        .unwrap_err();
        assert_eq!(names_in(dir.path()), ["out"], "{e:#}");
        (format!("{e:#}"), out, dir)
    }

    /// Without leave to replace anything, a folder made at `out` while the new one was written
    /// is kept and the call fails, an empty one too (which a plain rename would replace).
    #[test]
    fn a_folder_made_at_out_meanwhile_is_kept_and_the_call_fails() {
        let (e, out, _dir) = raced(Replace::Nothing, None, |out| {
            std::fs::create_dir(out).unwrap();
            std::fs::write(out.join("notes.txt"), "precious").unwrap();
        });
        assert!(
            e.contains(
                "out appeared while xsent test ran (another process made it): it was left as it is; \
                 the new model was not written. Remove it or choose another output directory, then run again"
            ),
            "{e}"
        );
        assert_eq!(std::fs::read_to_string(out.join("notes.txt")).unwrap(), "precious");
        assert_eq!(names_in(&out), ["notes.txt"]);
        let (e, out, _dir) = raced(Replace::Nothing, None, |out| std::fs::create_dir(out).unwrap());
        assert!(e.contains("out appeared while xsent test ran"), "{e}");
        assert!(names_in(&out).is_empty(), "the new model was moved into the empty folder made meanwhile");
        // A file, and a link, likewise.
        let (e, out, _dir) = raced(Replace::Nothing, None, |out| std::fs::write(out, "a file").unwrap());
        assert!(e.contains("out appeared while"), "{e}");
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "a file");
        let (e, out, _dir) = raced(Replace::Nothing, None, |out| std::os::unix::fs::symlink("elsewhere", out).unwrap());
        assert!(e.contains("out appeared while"), "{e}");
        assert_eq!(std::fs::read_link(&out).unwrap(), Path::new("elsewhere"));
    }

    /// With leave to replace some folders, the check is re-run at the end on what is at `out`
    /// then: a folder that fails it is kept (whether it appeared or replaced an accepted one
    /// meanwhile), one that passes it is replaced.
    #[test]
    fn the_replace_check_is_run_again_on_what_is_at_out_at_the_end() {
        let ours = |d: &Path| std::fs::read_to_string(d.join("config.json")).is_ok_and(|t| t.starts_with("ours"));
        let only = || Replace::Only { what: "a folder of ours", check: &ours };
        let (e, out, _dir) = raced(only(), None, |out| {
            std::fs::create_dir(out).unwrap();
            std::fs::write(out.join("config.json"), "mine").unwrap();
        });
        assert!(
            e.contains(
                "out was made or changed while xsent test ran (by another process) and is not a folder of ours, \
                 the only folder xsent test replaces: it was left as it is"
            ),
            "{e}"
        );
        assert_eq!(std::fs::read_to_string(out.join("config.json")).unwrap(), "mine");
        // Accepted at the start, edited meanwhile: kept.
        let (e, out, _dir) =
            raced(only(), Some("ours"), |out| std::fs::write(out.join("config.json"), "mine").unwrap());
        assert!(
            e.contains("out was made or changed while xsent test ran (by another process) and is not a folder"),
            "{e}"
        );
        assert_eq!(std::fs::read_to_string(out.join("config.json")).unwrap(), "mine");
        // Accepted at the start, still accepted (another run's output): replaced.
        for before in [None, Some("ours, old")] {
            let dir = tempfile::tempdir().unwrap();
            let out = dir.path().join("out");
            if let Some(text) = before {
                std::fs::create_dir(&out).unwrap();
                std::fs::write(out.join("config.json"), text).unwrap();
            }
            write_new_dir(&out, "xsent test", only(), |tmp| {
                std::fs::write(tmp.join("config.json"), "ours, new")?;
                let _ = std::fs::create_dir(&out);
                std::fs::write(out.join("config.json"), "ours, other run")?;
                Ok(())
            })
            .unwrap();
            assert_eq!(std::fs::read_to_string(out.join("config.json")).unwrap(), "ours, new");
            assert_eq!(names_in(dir.path()), ["out"]);
        }
    }

    /// Both ways of renaming without replacing (RENAME_NOREPLACE, and mkdir then rename where it
    /// is missing) refuse an empty folder, a full one and a file at the target, and leave both
    /// sides as they were.
    #[test]
    fn rename_noreplace_replaces_nothing() {
        for rename in [rename_noreplace, rename_claiming] {
            let dir = tempfile::tempdir().unwrap();
            let (from, to) = (dir.path().join("from"), dir.path().join("to"));
            std::fs::create_dir(&from).unwrap();
            std::fs::write(from.join("a"), "new").unwrap();
            std::fs::create_dir(&to).unwrap();
            assert_eq!(rename(&from, &to).unwrap_err().kind(), std::io::ErrorKind::AlreadyExists);
            assert!(names_in(&to).is_empty());
            std::fs::write(to.join("b"), "mine").unwrap();
            assert_eq!(rename(&from, &to).unwrap_err().kind(), std::io::ErrorKind::AlreadyExists);
            assert_eq!(names_in(&to), ["b"]);
            let file = dir.path().join("file");
            std::fs::write(&file, "mine").unwrap();
            assert_eq!(rename(&from, &file).unwrap_err().kind(), std::io::ErrorKind::AlreadyExists);
            assert_eq!(std::fs::read_to_string(&file).unwrap(), "mine");
            assert_eq!(names_in(&from), ["a"]);
            let free = dir.path().join("free");
            rename(&from, &free).unwrap();
            assert_eq!(std::fs::read_to_string(free.join("a")).unwrap(), "new");
            assert_eq!(names_in(dir.path()), ["file", "free", "to"]);
        }
    }
}
