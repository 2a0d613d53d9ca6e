//! Checkpoint checksums: a flipped bit must not resume silently.
//!
//! Each checkpoint's files are hashed (SHA-256, read back from disk after they are written) into
//! `checksums.json`, the last file written before the checkpoint is moved into place. A resume
//! verifies them; a checkpoint that fails is set aside and the one before it is used.

use anyhow::{Context, Result};
use std::path::Path;

/// The checksum file's name inside a checkpoint.
pub const CHECKSUMS: &str = "checksums.json";

pub use crate::io::digest::sha256_file;

/// Write `dir/checksums.json` over the files `names` in `dir`.
pub fn write(dir: &Path, names: &[&str]) -> Result<()> {
    let mut m = serde_json::Map::new();
    for n in names {
        m.insert((*n).to_string(), sha256_file(&dir.join(n))?.into());
    }
    let text = serde_json::to_string_pretty(&serde_json::json!({"sha256": m}))?;
    std::fs::write(dir.join(CHECKSUMS), text).with_context(|| format!("cannot write {}", dir.join(CHECKSUMS).display()))
}

/// What is wrong with checkpoint `dir`, if anything: a file missing or unlike its checksum.
/// `Ok(None)` for a checkpoint that passes, and for one without `checksums.json` written by an
/// older xsent (`old` is then set), whose files are only checked to exist.
pub fn problem(dir: &Path, files: &[&str], old: &mut bool) -> Option<String> {
    for f in files {
        if !dir.join(f).is_file() {
            return Some(format!("{f} is missing"));
        }
    }
    let path = dir.join(CHECKSUMS);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            *old = true;
            return None;
        }
        Err(e) => return Some(format!("{CHECKSUMS} cannot be read ({e})")),
    };
    let Some(sums) =
        serde_json::from_str::<serde_json::Value>(&text).ok().and_then(|v| v["sha256"].as_object().cloned())
    else {
        return Some(format!("{CHECKSUMS} is not what xsent writes"));
    };
    for f in files {
        let Some(want) = sums.get(*f).and_then(|v| v.as_str()) else {
            return Some(format!("{CHECKSUMS} has no checksum of {f}"));
        };
        match sha256_file(&dir.join(f)) {
            Ok(got) if got == want => {}
            Ok(_) => return Some(format!("{f} does not match its checksum (it changed after it was written)")),
            Err(e) => return Some(format!("{e:#}")),
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_changed_byte_is_found() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("a"), b"hello").unwrap();
        std::fs::write(d.path().join("b"), b"world").unwrap();
        write(d.path(), &["a", "b"]).unwrap();
        let mut old = false;
        assert_eq!(problem(d.path(), &["a", "b"], &mut old), None);
        assert!(!old);
        // SHA-256 of "hello" (as sha256sum prints it).
        assert_eq!(
            sha256_file(&d.path().join("a")).unwrap(),
            "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
        );
        std::fs::write(d.path().join("b"), b"worle").unwrap();
        assert!(problem(d.path(), &["a", "b"], &mut old).unwrap().contains("b does not match"));
        std::fs::remove_file(d.path().join("a")).unwrap();
        assert!(problem(d.path(), &["a", "b"], &mut old).unwrap().contains("a is missing"));
        std::fs::write(d.path().join("a"), b"hello").unwrap();
        std::fs::remove_file(d.path().join(CHECKSUMS)).unwrap();
        assert_eq!(problem(d.path(), &["a", "b"], &mut old), None);
        assert!(old);
    }
}
