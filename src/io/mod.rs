//! Files: atomic replacement of files and directories, checksums, run locks, `.npy` rows, and
//! the `-o` output files (with the Ctrl-C registry that removes unfinished ones).

pub mod atomic;
pub mod digest;
pub mod lock;
pub mod npy;
pub mod output;

/// This machine's name (for run-directory lock files, and the names of temporary outputs).
pub(crate) fn host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "an unknown host".to_string())
}
