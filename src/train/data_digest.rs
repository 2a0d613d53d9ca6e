//! A digest of the examples a run trains and validates on, as the recipe holds them (read,
//! decontaminated, split). Each checkpoint keeps it, and a resume on other examples is refused:
//! a checkpoint's data position (epoch, examples consumed) only means something in the
//! examples it was written for. A data file replaced under the same path, or edited, would
//! otherwise resume silently in other data, with another validation split.

use crate::data::bitext::Pair;
use crate::io::digest::hex;
use sha2::{Digest, Sha256};

/// Builds a [`DataDigest`] from texts and numbers, each length-prefixed (so that `"ab", "c"`
/// and `"a", "bc"` differ).
pub struct DataDigest(Sha256);

impl Default for DataDigest {
    fn default() -> Self {
        Self::new()
    }
}

impl DataDigest {
    pub fn new() -> Self {
        Self(Sha256::new())
    }

    pub fn text(&mut self, s: &str) -> &mut Self {
        self.0.update((s.len() as u64).to_le_bytes());
        self.0.update(s.as_bytes());
        self
    }

    pub fn number(&mut self, n: u64) -> &mut Self {
        self.0.update(n.to_le_bytes());
        self
    }

    /// A list of pairs, its length first: texts and languages.
    pub fn pairs(&mut self, pairs: &[Pair]) -> &mut Self {
        self.number(pairs.len() as u64);
        for p in pairs {
            self.text(&p.src).text(&p.tgt).text(&p.src_lang).text(&p.tgt_lang);
        }
        self
    }

    /// The digest as hex (the first 16 bytes of SHA-256: 32 characters).
    pub fn finish(&mut self) -> String {
        let h = std::mem::take(&mut self.0).finalize();
        hex(&h[..16])
    }
}

/// The digest of a recipe's training and validation pairs.
pub fn pairs_digest(train: &[Pair], val: &[Pair]) -> String {
    DataDigest::new().pairs(train).pairs(val).finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(src: &str, tgt: &str) -> Pair {
        Pair { src: src.into(), tgt: tgt.into(), src_lang: "en".into(), tgt_lang: "de".into() }
    }

    #[test]
    fn the_digest_follows_the_examples() {
        let a = [pair("a b", "c"), pair("d", "e")];
        let same = pairs_digest(&a, &[]);
        assert_eq!(same, pairs_digest(&a.clone(), &[]));
        assert_eq!(same.len(), 32);
        // Another text, the same texts cut elsewhere, another order, a pair moved to validation,
        // another language: each another digest.
        let others = [
            pairs_digest(&[pair("a b", "x"), pair("d", "e")], &[]),
            pairs_digest(&[pair("a", "b c"), pair("d", "e")], &[]),
            pairs_digest(&[pair("d", "e"), pair("a b", "c")], &[]),
            pairs_digest(&a[..1], &a[1..]),
            pairs_digest(&[Pair { tgt_lang: "fr".into(), ..pair("a b", "c") }, pair("d", "e")], &[]),
        ];
        for (i, o) in others.iter().enumerate() {
            assert_ne!(o, &same, "case {i}");
        }
    }
}
