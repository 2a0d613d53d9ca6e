//! The `-o` output files of commands: written under a temporary name beside the target and
//! moved into place when the command succeeds, kept as `FILE.partial` when it fails part-way, and
//! removed by the process's one Ctrl-C (SIGTERM, SIGHUP) handler when it is interrupted.

/// Where an `-o` file goes, opened before any work, so that a path that cannot be written fails
/// at once. A regular file (or a new one; through a symlink, its target) is written as a
/// temporary file beside it, with the permissions of the file it replaces, and moved into place
/// by [`OutputFile::commit`] when the command succeeds, so a failed or interrupted run leaves an
/// earlier file as it was. `/dev/stdout` and `/dev/stderr` (and their `/dev/fd/N` and
/// `/proc/self/fd/N` names) write to the process's own standard output or error, whatever file
/// that is; anything else that is not a regular file (a named pipe, a process substitution, a
/// device) is written directly.
pub(crate) enum OutputFile {
    Temp(tempfile::NamedTempFile, std::path::PathBuf),
    Direct(std::fs::File),
}

/// Temporary output files to remove on Ctrl-C, which ends the process without running
/// destructors. The handler holds the lock until the process exits, and [`OutputFile::commit`]
/// and [`OutputFile::keep_partial`] hold it while they move a file, so each file is dealt with
/// once.
static ON_INTERRUPT: std::sync::Mutex<Vec<std::path::PathBuf>> = std::sync::Mutex::new(Vec::new());

/// The list of [`ON_INTERRUPT`], locked (a panic elsewhere leaves it usable).
fn pending() -> std::sync::MutexGuard<'static, Vec<std::path::PathBuf>> {
    ON_INTERRUPT.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Take `tmp` off the Ctrl-C list, returning the lock for the caller to hold while it moves the file.
pub(crate) fn unregister(tmp: &std::path::Path) -> std::sync::MutexGuard<'static, Vec<std::path::PathBuf>> {
    let mut p = pending();
    p.retain(|f| f != tmp);
    p
}

/// Install the process's one handler of Ctrl-C, SIGTERM and SIGHUP for outputs (on first use):
/// it removes every registered temporary file, lets a write of whole rows in progress end
/// ([`crate::whole_rows`]), and exits as an interrupted command does (130).
pub(crate) fn interrupt_handler() -> anyhow::Result<()> {
    static HANDLER: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    HANDLER
        .get_or_init(|| {
            ctrlc::set_handler(|| {
                let files = pending();
                for tmp in files.iter() {
                    // A temporary folder ([`super::atomic::write_new_dir`]) or file.
                    if std::fs::remove_file(tmp).is_err() {
                        let _ = std::fs::remove_dir_all(tmp);
                    }
                }
                // Rows being passed to a pipe or terminal are let through whole.
                if !crate::whole_rows::close_gate() {
                    errln!(
                        "xsent: interrupted while the output's reader took nothing for {} s: the output may end in a cut row",
                        crate::whole_rows::GATE_WAIT.as_secs()
                    );
                }
                std::process::exit(130);
            })
            .map_err(|e| e.to_string())
        })
        .clone()
        .map_err(|e| anyhow::anyhow!("cannot set the Ctrl-C handler: {e}"))
}

/// Remove the temporary file or folder `tmp` if the process is interrupted (installing the
/// handler on first use), until [`unregister`] takes it off.
pub(crate) fn remove_on_interrupt(tmp: &std::path::Path) -> anyhow::Result<()> {
    interrupt_handler()?;
    pending().push(tmp.to_path_buf());
    Ok(())
}

/// How the temporary files of outputs begin: `.xsent-out-PID-HOST.RANDOM`.
const TEMP_PREFIX: &str = ".xsent-out-";

/// Remove the temporary outputs in `dir` left by xsent processes of this machine that are gone
/// (killed with `kill -9`, or by the OOM killer), saying so. Best effort: on systems without
/// /proc nothing is removed.
fn remove_stale_temporaries(dir: &std::path::Path) {
    if !std::path::Path::new("/proc/self").exists() {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let host = super::host();
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(TEMP_PREFIX)) else { continue };
        let Some((pid, rest)) = rest.split_once('-') else { continue };
        let Some((their_host, _)) = rest.rsplit_once('.') else { continue };
        if their_host != host || !super::process_gone(pid) {
            continue;
        }
        if std::fs::remove_file(e.path()).is_ok() {
            errln!(
                "xsent: removed {}, the unfinished output of xsent process {pid}, which is gone",
                e.path().display()
            );
        }
    }
}

/// `FILE.partial` beside `path`.
pub(crate) fn partial_path(path: &std::path::Path) -> std::path::PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".partial");
    path.with_file_name(name)
}

/// The standard stream (1 or 2) that `out` names, if it names one.
fn std_stream(out: &std::path::Path) -> Option<i32> {
    let s = out.to_str()?;
    match s {
        "/dev/stdout" | "/dev/fd/1" | "/proc/self/fd/1" => Some(1),
        "/dev/stderr" | "/dev/fd/2" | "/proc/self/fd/2" => Some(2),
        _ => None,
    }
}

impl OutputFile {
    /// Open `-o out`; a read-only file (no write permission for anyone) is refused unless
    /// `force` (`--force`): its mode says it is not to be replaced, and root's writes ignore it.
    pub(crate) fn open(out: &std::path::Path, force: bool) -> anyhow::Result<Self> {
        use anyhow::Context;
        #[cfg(unix)]
        if let Some(fd) = std_stream(out) {
            // The same open file as the stream (its offset, its append mode), not a new one.
            use std::os::fd::AsFd;
            let owned = match fd {
                1 => std::io::stdout().as_fd().try_clone_to_owned(),
                _ => std::io::stderr().as_fd().try_clone_to_owned(),
            }
            .with_context(|| format!("-o {}: cannot open it for writing", out.display()))?;
            return Ok(Self::Direct(std::fs::File::from(owned)));
        }
        // Through symlinks to the file they name (a dangling link: where it points).
        let target = match std::fs::canonicalize(out) {
            Ok(t) => t,
            Err(_) => match std::fs::read_link(out) {
                Ok(link) => out.parent().unwrap_or(std::path::Path::new(".")).join(link),
                Err(_) => out.to_path_buf(),
            },
        };
        if !force {
            refuse_read_only(&target, out, "-o", true)?;
        }
        if target.exists() && !target.is_file() {
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(out)
                .with_context(|| format!("-o {}: cannot open it for writing", out.display()))?;
            return Ok(Self::Direct(f));
        }
        let dir = target.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
        // Before the file exists: a Ctrl-C after it is made finds the handler in place.
        interrupt_handler()?;
        remove_stale_temporaries(dir);
        let mut builder = tempfile::Builder::new();
        // Named by the process and machine that write it, so that a later run can tell a file
        // left by a killed one (`kill -9` runs no handler) from one being written.
        let prefix = format!("{TEMP_PREFIX}{}-{}.", std::process::id(), super::host());
        builder.prefix(&prefix);
        // As a file the shell creates (0666 less the umask), not a temporary file's 0600.
        #[cfg(unix)]
        builder.permissions(std::os::unix::fs::PermissionsExt::from_mode(0o666));
        let tmp = builder
            .tempfile_in(dir)
            .with_context(|| format!("-o {}: cannot create a file in {}", out.display(), dir.display()))?;
        pending().push(tmp.path().to_path_buf());
        // A replaced file's own permissions, where the file system lets us (best effort).
        if let Ok(m) = std::fs::metadata(&target) {
            let _ = std::fs::set_permissions(tmp.path(), m.permissions());
        }
        Ok(Self::Temp(tmp, target))
    }

    /// The open file to write.
    pub(crate) fn file(&self) -> &std::fs::File {
        match self {
            Self::Temp(t, _) => t.as_file(),
            Self::Direct(f) => f,
        }
    }

    /// Whether the output is written under a temporary name (and so can be kept apart).
    pub(crate) fn is_temporary(&self) -> bool {
        matches!(self, Self::Temp(..))
    }

    /// The command succeeded: move what was written into place. Where that rename fails (a
    /// bind-mounted file, a sticky directory), what was written is kept as `FILE.partial`, FILE
    /// is left as it was, and the error says so.
    pub(crate) fn commit(self) -> anyhow::Result<()> {
        let Self::Temp(t, path) = self else { return Ok(()) };
        let _held = unregister(t.path());
        let e = match t.persist(&path) {
            Ok(_) => return Ok(()),
            Err(e) => e,
        };
        let kept = keep(e.file, &partial_path(&path))?;
        anyhow::bail!(
            "cannot move the output into place at {} ({}): it is left as it was, and the output is in {}",
            path.display(),
            e.error,
            kept.display()
        )
    }

    /// The command failed part-way: keep what was written as `FILE.partial` beside the output,
    /// which is left as it was, and return where it is; when nothing was written, remove it and
    /// return None. (A direct output has nothing to keep apart: None.)
    pub(crate) fn keep_partial(self, written: bool) -> anyhow::Result<Option<std::path::PathBuf>> {
        let Self::Temp(t, path) = self else { return Ok(None) };
        let _held = unregister(t.path());
        if !written {
            return Ok(None);
        }
        keep(t, &partial_path(&path)).map(Some)
    }
}

/// Keep a temporary file as `partial`, or where that exists (an earlier run's rows) as the first
/// free `partial.1`, `partial.2`, …, or where that fails under its own name: never delete it,
/// nor replace anything.
fn keep(t: tempfile::NamedTempFile, partial: &std::path::Path) -> anyhow::Result<std::path::PathBuf> {
    let mut t = t;
    for i in 0u32.. {
        let name = if i == 0 {
            partial.to_path_buf()
        } else {
            let mut n = partial.as_os_str().to_os_string();
            n.push(format!(".{i}"));
            n.into()
        };
        match t.persist_noclobber(&name) {
            Ok(_) => return Ok(name),
            Err(e) if e.error.kind() == std::io::ErrorKind::AlreadyExists => t = e.file,
            Err(e) => {
                t = e.file;
                break;
            }
        }
    }
    t.into_temp_path().keep().map_err(|e| anyhow::anyhow!("cannot keep the output: {}", e.error))
}

/// Refuse to replace `path` when it is a read-only file (no write permission for anyone): its
/// mode says it is not to be replaced, and root's writes would ignore it. `shown` is the path as
/// the user gave it with `flag` (`-o`, `--report`); `forceable`: the command takes `--force`.
pub(crate) fn refuse_read_only(
    path: &std::path::Path,
    shown: &std::path::Path,
    flag: &str,
    forceable: bool,
) -> anyhow::Result<()> {
    if std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().readonly()) {
        anyhow::bail!(
            "{flag} {} is read-only: xsent does not replace a read-only file; give another path, or make it writable \
             (chmod u+w) if it is yours to replace{}",
            shown.display(),
            if forceable { ", or pass --force to replace it" } else { "" }
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::OutputFile;
    use std::io::Write;

    /// What was written is never lost: committed into place, kept as FILE.partial when the
    /// file cannot take it (here a folder put in its place), dropped only when nothing was
    /// written.
    #[test]
    fn an_output_file_is_committed_or_kept() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("v.txt");
        std::fs::write(&out, "earlier").unwrap();
        let f = OutputFile::open(&out, false).unwrap();
        assert!(f.is_temporary());
        f.file().write_all(b"new").unwrap();
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "earlier", "replaced only at the end");
        f.commit().unwrap();
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "new");

        let blocked = dir.path().join("w.txt");
        let f = OutputFile::open(&blocked, false).unwrap();
        f.file().write_all(b"rows").unwrap();
        std::fs::create_dir_all(blocked.join("in-the-way")).unwrap();
        let e = format!("{:#}", f.commit().unwrap_err());
        assert!(e.contains("it is left as it was, and the output is in") && e.contains("w.txt.partial"), "{e}");
        assert_eq!(std::fs::read_to_string(dir.path().join("w.txt.partial")).unwrap(), "rows");

        let f = OutputFile::open(&dir.path().join("x.txt"), false).unwrap();
        assert_eq!(f.keep_partial(false).unwrap(), None);
        let f = OutputFile::open(&dir.path().join("y.txt"), false).unwrap();
        f.file().write_all(b"some").unwrap();
        assert_eq!(f.keep_partial(true).unwrap(), Some(dir.path().join("y.txt.partial")));
        let names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(names.iter().all(|n| !n.starts_with(".xsent-out-")), "{names:?}");
        assert!(!dir.path().join("x.txt").exists() && !dir.path().join("x.txt.partial").exists());
        assert!(
            super::ON_INTERRUPT.lock().unwrap().is_empty(),
            "every file dealt with is forgotten by the Ctrl-C handler"
        );
        // A named pipe or device is written directly.
        assert!(!OutputFile::open(std::path::Path::new("/dev/null"), false).unwrap().is_temporary());
    }
}
