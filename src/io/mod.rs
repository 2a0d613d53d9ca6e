//! Files: atomic replacement of files and directories, checksums, run locks, `.npy` rows, and
//! the `-o` output files (with the Ctrl-C registry that removes unfinished ones).

pub mod atomic;
pub mod digest;
pub mod lock;
pub mod npy;
pub mod output;

/// Whether `pid` (as written in a temporary output's name) is a process of this machine that is
/// gone: a number with no `/proc/PID`. Callers check first that /proc exists.
pub(crate) fn process_gone(pid: &str) -> bool {
    pid.parse::<u32>().is_ok() && !std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// `p` with `.` dropped and each `..` taking away the component before it, lexically (no link
/// is followed).
pub(crate) fn lexical_clean(p: &std::path::Path) -> std::path::PathBuf {
    let mut clean = std::path::PathBuf::new();
    for c in p.components() {
        match c {
            std::path::Component::ParentDir => {
                clean.pop();
            }
            std::path::Component::CurDir => {}
            c => clean.push(c),
        }
    }
    clean
}

/// This machine's name (for run-directory lock files, and the names of temporary outputs).
pub(crate) fn host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "an unknown host".to_string())
}
