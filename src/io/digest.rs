//! SHA-256 as lowercase hex: one implementation for checkpoints, shard manifests, downloads,
//! caches and model cards.

use anyhow::{Context, Result};
use sha2::{Digest, Sha256};
use std::path::Path;

/// Lowercase hex of bytes.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// SHA-256 and length of a file, read in a stream (memory bounded whatever the file's size).
pub fn sha256_file_len(path: &Path) -> Result<(String, u64)> {
    let mut f = std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let mut h = Sha256::new();
    let n = std::io::copy(&mut f, &mut h).with_context(|| format!("cannot read {}", path.display()))?;
    Ok((hex(&h.finalize()), n))
}

/// SHA-256 of a file.
pub fn sha256_file(path: &Path) -> Result<String> {
    sha256_file_len(path).map(|(h, _)| h)
}

#[cfg(test)]
mod tests {
    #[test]
    fn known_digests() {
        // printf abc | sha256sum
        assert_eq!(
            super::hex(&<sha2::Sha256 as sha2::Digest>::digest(b"abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        let dir = std::env::temp_dir().join(format!("xsent-digest-{}", std::process::id()));
        std::fs::write(&dir, b"abc").unwrap();
        assert_eq!(
            super::sha256_file_len(&dir).unwrap(),
            ("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad".into(), 3)
        );
        std::fs::remove_file(&dir).unwrap();
        assert!(super::sha256_file(&dir).unwrap_err().to_string().contains("cannot open"));
    }
}
