//! Sentence pairs cut from XNLI for DuEAM (seed 000 §5, App. C, Table 9); labels are never read.
//!
//! - weakly supervised ([`weak_pairs`]): per row, the premise and the hypothesis in each language
//!   (monolingual pairs, as XNLI has them) and, across languages, the premise in language A with
//!   the hypothesis in language B for every ordered pair (A, B) — so "EN premise + DE hypothesis"
//!   and "DE premise + EN hypothesis" alike. No pair is a translation pair.
//! - unsupervised ([`unsup_pairs`]): sentences drawn at random from all premises and hypotheses of
//!   the languages and paired at random (same or different languages).
//!
//! Sentences are stored once ([`PairSet::sentences`]) and pairs as indices into them.

use super::bitext::xnli_parallel_rows;
use anyhow::{bail, Result};
use rand::{Rng as _, SeedableRng};
use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};
use std::path::Path;

/// Distinct sentences and pairs of them.
#[derive(Debug, Clone, Default)]
pub struct PairSet {
    pub sentences: Vec<String>,
    /// Indices into `sentences`: (first, second).
    pub pairs: Vec<(u32, u32)>,
    /// Per pair: both sentences are from one language (else the pair is cross-lingual). A text
    /// found in several languages counts for each of them, so a pair is monolingual if some
    /// language holds both of its sentences (weak: if any row and language gave it as a
    /// same-language pair).
    pub mono: Vec<bool>,
}

impl PairSet {
    pub fn len(&self) -> usize {
        self.pairs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pairs.is_empty()
    }

    /// How many pairs are monolingual (the rest are cross-lingual).
    pub fn monolingual(&self) -> usize {
        self.mono.iter().filter(|&&m| m).count()
    }

    /// Keep the pairs `keep` accepts (with their monolingual flags).
    pub fn retain(&mut self, mut keep: impl FnMut(&(u32, u32)) -> bool) {
        let mut mono = self.mono.iter();
        let mut kept = Vec::with_capacity(self.mono.len());
        self.pairs.retain(|p| {
            let m = *mono.next().expect("one flag per pair");
            let k = keep(p);
            if k {
                kept.push(m);
            }
            k
        });
        self.mono = kept;
    }

    /// The texts of pair `i`.
    pub fn pair(&self, i: usize) -> (&str, &str) {
        let (a, b) = self.pairs[i];
        (&self.sentences[a as usize], &self.sentences[b as usize])
    }
}

#[derive(Default)]
struct Interner {
    ids: HashMap<String, u32>,
    sentences: Vec<String>,
}

impl Interner {
    fn id(&mut self, s: &str) -> u32 {
        if let Some(&i) = self.ids.get(s) {
            return i;
        }
        let i = self.sentences.len() as u32;
        self.ids.insert(s.to_string(), i);
        self.sentences.push(s.to_string());
        i
    }
}

fn check_langs(langs: &[String], splits: &[String]) -> Result<()> {
    if langs.is_empty() {
        bail!("no XNLI languages given (e.g. langs = [\"en\", \"de\"])");
    }
    if splits.is_empty() {
        bail!("no XNLI splits given (e.g. splits = [\"dev\", \"test\"])");
    }
    let mut seen = HashSet::new();
    for l in langs {
        if !seen.insert(l) {
            bail!("XNLI language {l:?} is listed twice");
        }
    }
    Ok(())
}

/// Weakly supervised pairs from `{split}-{lang}.tsv` (or `.tsv.gz`) of `dir`: monolingual premise–hypothesis
/// pairs of every language, and with `cross_lingual` the premise of language A with the
/// hypothesis of language B for every ordered pair of different languages. Rows with an empty
/// premise or hypothesis are skipped; exact duplicate pairs are kept once, monolingual if any of
/// their occurrences is (a hypothesis with the same text in A and B gives (premise in B,
/// hypothesis) both across and within B).
pub fn weak_pairs(dir: &Path, splits: &[String], langs: &[String], cross_lingual: bool) -> Result<PairSet> {
    check_langs(langs, splits)?;
    let refs: Vec<&str> = langs.iter().map(String::as_str).collect();
    let mut int = Interner::default();
    let mut seen: HashMap<(u32, u32), usize> = HashMap::new();
    let mut out = PairSet::default();
    for split in splits {
        let rows = xnli_parallel_rows(dir, split, &refs)?;
        for r in 0..rows[0].len() {
            for (a, rows_a) in rows.iter().enumerate() {
                let premise = &rows_a[r].0;
                if premise.trim().is_empty() {
                    continue;
                }
                for (b, rows_b) in rows.iter().enumerate() {
                    if a != b && !cross_lingual {
                        continue;
                    }
                    let hyp = &rows_b[r].1;
                    if hyp.trim().is_empty() {
                        continue;
                    }
                    let pair = (int.id(premise), int.id(hyp));
                    match seen.entry(pair) {
                        Entry::Occupied(k) => out.mono[*k.get()] |= a == b,
                        Entry::Vacant(v) => {
                            v.insert(out.pairs.len());
                            out.pairs.push(pair);
                            out.mono.push(a == b);
                        }
                    }
                }
            }
        }
    }
    out.sentences = int.sentences;
    if out.is_empty() {
        bail!("{}: the XNLI files of {splits:?} in {langs:?} gave no sentence pairs", dir.display());
    }
    Ok(out)
}

/// Unsupervised pairs: `n` pairs of two different sentences drawn uniformly (seeded) from the
/// distinct premises and hypotheses of `langs` in `splits`, so a pair is in one language or in
/// two, at random (monolingual if some language has both texts).
pub fn unsup_pairs(dir: &Path, splits: &[String], langs: &[String], n: usize, seed: u64) -> Result<PairSet> {
    check_langs(langs, splits)?;
    if n == 0 {
        bail!("asked for 0 unsupervised pairs");
    }
    let refs: Vec<&str> = langs.iter().map(String::as_str).collect();
    let mut int = Interner::default();
    // The languages each sentence is found in (ascending; one text can be in several).
    let mut langs_of: Vec<Vec<usize>> = Vec::new();
    for split in splits {
        let rows = xnli_parallel_rows(dir, split, &refs)?;
        for (li, rows_l) in rows.iter().enumerate() {
            for (p, h) in rows_l {
                for s in [p, h] {
                    if !s.trim().is_empty() {
                        let id = int.id(s) as usize;
                        if id == langs_of.len() {
                            langs_of.push(Vec::new());
                        }
                        if langs_of[id].last() != Some(&li) {
                            langs_of[id].push(li);
                        }
                    }
                }
            }
        }
    }
    let m = int.sentences.len();
    if m < 2 {
        bail!(
            "{}: the XNLI files of {splits:?} in {langs:?} have {m} distinct sentence(s); random pairs need at least 2",
            dir.display()
        );
    }
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ 0x0005_a1f5);
    let mut out = PairSet { sentences: int.sentences, ..Default::default() };
    for _ in 0..n {
        let a = rng.random_range(0..m);
        let mut b = rng.random_range(0..m - 1);
        if b >= a {
            b += 1;
        }
        out.mono.push(langs_of[a].iter().any(|l| langs_of[b].contains(l)));
        out.pairs.push((a as u32, b as u32));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) {
        std::fs::write(dir.join(name), text).unwrap();
    }

    fn langs(l: &[&str]) -> Vec<String> {
        l.iter().map(|s| s.to_string()).collect()
    }

    fn fixture() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        write(d.path(), "dev-en.tsv", "P1\tH1\tneutral\nP1\tH2\tcontradiction\nP3\t\tentailment\n");
        write(d.path(), "dev-de.tsv", "p1\th1\tneutral\np1\th2\tcontradiction\np3\th3\tentailment\n");
        write(d.path(), "dev-fr.tsv", "q1\tg1\tneutral\nq1\tg2\tcontradiction\nq3\tg3\tentailment\n");
        d
    }

    fn texts(p: &PairSet) -> HashSet<(String, String)> {
        (0..p.len()).map(|i| p.pair(i)).map(|(a, b)| (a.to_string(), b.to_string())).collect()
    }

    #[test]
    fn dueam_weak_pairs_are_monolingual_and_premise_hypothesis_across_languages() {
        let d = fixture();
        let p = weak_pairs(d.path(), &langs(&["dev"]), &langs(&["en", "de"]), true).unwrap();
        let got = texts(&p);
        let want: HashSet<(String, String)> = [
            ("P1", "H1"),
            ("P1", "H2"),
            ("p1", "h1"),
            ("p1", "h2"),
            ("p3", "h3"), // monolingual
            ("P1", "h1"),
            ("P1", "h2"),
            ("P3", "h3"), // EN premise, DE hypothesis
            ("p1", "H1"),
            ("p1", "H2"), // DE premise, EN hypothesis (row 3's EN hypothesis is empty)
        ]
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
        assert_eq!(got, want);
        assert_eq!(p.len(), want.len(), "no duplicates");
        assert_eq!(p.monolingual(), 5);
        // No translation pair (premise with its own translation) is ever formed.
        assert!(!got.contains(&("P1".into(), "p1".into())));
        // Sentences are stored once.
        assert_eq!(p.sentences.iter().filter(|s| *s == "P1").count(), 1);

        let mono = weak_pairs(d.path(), &langs(&["dev"]), &langs(&["en", "de", "fr"]), false).unwrap();
        assert_eq!(mono.len(), 2 + 3 + 3);
        assert_eq!(mono.monolingual(), mono.len());
        let three = weak_pairs(d.path(), &langs(&["dev"]), &langs(&["en", "de", "fr"]), true).unwrap();
        // 8 monolingual; cross: per ordered pair of languages, rows with a premise and a hypothesis.
        assert!(
            texts(&three).contains(&("q1".into(), "H2".into())) && texts(&three).contains(&("P3".into(), "g3".into()))
        );
        assert_eq!(three.len(), 8 + 2 * (3 + 3 + 2));
    }

    #[test]
    fn dueam_unsup_pairs_are_random_distinct_sentences() {
        let d = fixture();
        let p = unsup_pairs(d.path(), &langs(&["dev"]), &langs(&["en", "de", "fr"]), 500, 1).unwrap();
        assert_eq!(p.len(), 500);
        // P1 H1 H2 P3 | p1 h1 h2 p3 h3 | q1 g1 g2 q3 g3
        assert_eq!(p.sentences.len(), 14);
        assert!(p.pairs.iter().all(|(a, b)| a != b));
        assert!(
            p.monolingual() > 0 && p.monolingual() < p.len(),
            "both same- and cross-language pairs: {}",
            p.monolingual()
        );
        let used: HashSet<u32> = p.pairs.iter().flat_map(|&(a, b)| [a, b]).collect();
        assert_eq!(used.len(), 14, "every sentence is drawn");
        let again = unsup_pairs(d.path(), &langs(&["dev"]), &langs(&["en", "de", "fr"]), 500, 1).unwrap();
        assert_eq!(p.pairs, again.pairs, "seeded");
        let other = unsup_pairs(d.path(), &langs(&["dev"]), &langs(&["en", "de", "fr"]), 500, 2).unwrap();
        assert_ne!(p.pairs, other.pairs);
    }

    #[test]
    fn dueam_a_text_shared_by_two_languages_makes_its_pairs_monolingual() {
        // Row 1's hypothesis is the same text in EN and DE (a name, a number, an untranslated
        // phrase): (p1, H) is met first as DE premise + EN hypothesis, then as DE's own pair.
        let d = tempfile::tempdir().unwrap();
        write(d.path(), "dev-en.tsv", "P1\tH\tneutral\nP2\tX\tneutral\n");
        write(d.path(), "dev-de.tsv", "p1\tH\tneutral\np2\tx\tneutral\n");
        for order in [["en", "de"], ["de", "en"]] {
            let p = weak_pairs(d.path(), &langs(&["dev"]), &langs(&order), true).unwrap();
            let got: HashSet<(String, String, bool)> =
                (0..p.len()).map(|i| (p.pair(i).0.to_string(), p.pair(i).1.to_string(), p.mono[i])).collect();
            let want: HashSet<(String, String, bool)> = [
                ("P1", "H", true),
                ("p1", "H", true), // within EN and within DE (also across)
                ("P2", "X", true),
                ("p2", "x", true),
                ("P2", "x", false),
                ("p2", "X", false),
            ]
            .iter()
            .map(|&(a, b, m)| (a.to_string(), b.to_string(), m))
            .collect();
            assert_eq!(got, want, "{order:?}");
            assert_eq!((p.len(), p.monolingual()), (6, 4), "{order:?}");
            // Leaving pairs out keeps each pair's flag.
            let mut q = p.clone();
            let h = q.sentences.iter().position(|s| s == "H").unwrap() as u32;
            q.retain(|&(_, b)| b != h);
            assert_eq!((q.len(), q.monolingual(), q.mono.len()), (4, 2, 4));
            let kept: HashSet<(String, String, bool)> =
                (0..q.len()).map(|i| (q.pair(i).0.to_string(), q.pair(i).1.to_string(), q.mono[i])).collect();
            assert_eq!(kept, want.iter().filter(|(_, b, _)| b != "H").cloned().collect());
        }
        // Unsupervised: H is an EN and a DE sentence, so only P1/P2/X with p1/p2/x is cross-lingual.
        let u = unsup_pairs(d.path(), &langs(&["dev"]), &langs(&["en", "de"]), 400, 3).unwrap();
        let is_en = |s: &str| ["P1", "P2", "X"].contains(&s);
        let is_de = |s: &str| ["p1", "p2", "x"].contains(&s);
        for i in 0..u.len() {
            let (a, b) = u.pair(i);
            let cross = (is_en(a) && is_de(b)) || (is_de(a) && is_en(b));
            assert_eq!(u.mono[i], !cross, "{a:?} {b:?}");
        }
        assert!(u.pairs.iter().any(|&(a, b)| [a, b].iter().any(|&k| u.sentences[k as usize] == "H")
            && [a, b].iter().any(|&k| is_de(&u.sentences[k as usize]))));
    }

    /// DuEAM reads `{split}-{lang}.tsv.gz` as `.tsv`, and leaves out blank lines at a file's end.
    #[test]
    fn dueam_reads_gzip_files_and_ends_blank_lines() {
        use std::io::Write;
        let d = fixture();
        let plain = weak_pairs(d.path(), &langs(&["dev"]), &langs(&["en", "de"]), true).unwrap();
        let g = tempfile::tempdir().unwrap();
        for l in ["en", "de"] {
            let text = std::fs::read_to_string(d.path().join(format!("dev-{l}.tsv"))).unwrap() + "\n \n";
            let f = std::fs::File::create(g.path().join(format!("dev-{l}.tsv.gz"))).unwrap();
            let mut enc = flate2::write::GzEncoder::new(f, flate2::Compression::fast());
            enc.write_all(text.as_bytes()).unwrap();
            enc.finish().unwrap();
        }
        let gz = weak_pairs(g.path(), &langs(&["dev"]), &langs(&["en", "de"]), true).unwrap();
        assert_eq!((gz.pairs, gz.mono, gz.sentences), (plain.pairs, plain.mono, plain.sentences));
        let u = unsup_pairs(g.path(), &langs(&["dev"]), &langs(&["en", "de"]), 20, 1).unwrap();
        assert_eq!(u.pairs, unsup_pairs(d.path(), &langs(&["dev"]), &langs(&["en", "de"]), 20, 1).unwrap().pairs);
    }

    #[test]
    fn dueam_bad_inputs_name_the_problem() {
        let d = fixture();
        let e = format!("{:#}", weak_pairs(d.path(), &langs(&["dev"]), &langs(&["en", "xx"]), true).unwrap_err());
        assert!(e.contains("dev-xx.tsv does not exist"), "{e}");
        let e = format!("{:#}", weak_pairs(d.path(), &langs(&["dev"]), &langs(&["en", "en"]), true).unwrap_err());
        assert!(e.contains("listed twice"), "{e}");
        assert!(weak_pairs(d.path(), &langs(&["dev"]), &[], true).is_err());
        write(d.path(), "dev-es.tsv", "x\ty\n");
        let e = format!("{:#}", unsup_pairs(d.path(), &langs(&["dev"]), &langs(&["en", "es"]), 5, 1).unwrap_err());
        assert!(e.contains("dev-es.tsv has 1"), "{e}");
        write(d.path(), "test-en.tsv", "same\tsame\n");
        let e = format!("{:#}", unsup_pairs(d.path(), &langs(&["test"]), &langs(&["en"]), 5, 1).unwrap_err());
        assert!(e.contains("at least 2"), "{e}");
    }
}
