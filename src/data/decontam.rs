//! Decontamination: training text is checked against every evaluation set xsent knows, by
//! normalised sentence (lower-cased, whitespace collapsed), and a training pair with a side in
//! an evaluation set is dropped. Test sets (STS 2017, the STS benchmark's test split, Tatoeba,
//! BUCC, Multi30k's test sets) and development sets (the STS benchmark's dev split, Multi30k val,
//! the config's own validation files) are both checked: a choice made on a development set must
//! not have been trained on either.

use super::bitext::Pair;
use super::read_lines;
use anyhow::{Context, Result};
use serde::Serialize;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// What an evaluation set is used for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Split {
    /// Settings are chosen on it.
    Dev,
    /// Reported once, never chosen on.
    Test,
}

/// How to take sentences out of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// One sentence per line.
    Lines,
    /// `sentence<TAB>sentence…`: every tab-separated field.
    Tabs,
    /// `id<TAB>sentence` (BUCC).
    Id,
    /// Scored pairs as `eval sts --pairs` reads them: the STS benchmark's layout (sentences in
    /// fields 6 and 7) or `sentence1<TAB>sentence2<TAB>score`.
    ScoredPairs,
}

/// One evaluation set: its name, what it is for, and its files.
#[derive(Debug, Clone)]
pub struct EvalSet {
    pub name: String,
    pub split: Split,
    pub files: Vec<(PathBuf, Layout)>,
}

/// The sentence key: NFKC (as the models' tokenizers normalise: a decomposed `é`, a full-width
/// `Ａ` or a ligature `ﬁ` is the same text to them), lower-cased, whitespace collapsed to single
/// spaces, trimmed.
pub fn normalize(text: &str) -> String {
    use unicode_normalization::{is_nfkc, is_nfkc_quick, IsNormalized, UnicodeNormalization};
    // Most text is in NFKC already (ASCII always is): checked without a copy.
    let nfkc: std::borrow::Cow<str> = if text.is_ascii() {
        text.into()
    } else {
        match is_nfkc_quick(text.chars()) {
            IsNormalized::Yes => text.into(),
            IsNormalized::Maybe if is_nfkc(text) => text.into(),
            _ => text.nfkc().collect::<String>().into(),
        }
    };
    let mut out = String::with_capacity(nfkc.len());
    for w in nfkc.split_whitespace() {
        if !out.is_empty() {
            out.push(' ');
        }
        out.extend(w.chars().flat_map(char::to_lowercase));
    }
    out
}

/// The evaluation sets found under the benchmark data directory `dir` (the layout of
/// `../shared/data`): each STS 2017 track (6 included: its sentences are test text even though
/// its scores cannot be aligned) and the en-de set, the STS benchmark's dev and test splits,
/// Tatoeba (every language), BUCC (every pair and split), Multi30k val and its test sets. Sets
/// whose files are absent are left out.
pub fn standard_sets(dir: &Path) -> Vec<EvalSet> {
    let mut sets = Vec::new();
    let mut add = |name: String, split: Split, files: Vec<(PathBuf, Layout)>| {
        // A file may be kept gzip-compressed (`data fetch` also keeps STS2017.en-de.txt.gz).
        let files: Vec<(PathBuf, Layout)> =
            files.into_iter().filter_map(|(p, l)| Some((super::plain_or_gz(&p)?, l))).collect();
        if !files.is_empty() {
            sets.push(EvalSet { name, split, files });
        }
    };
    let sts = dir.join("sts");
    for stem in [
        "track1.ar-ar",
        "track2.ar-en",
        "track3.es-es",
        "track4a.es-en",
        "track4b.es-en",
        "track5.en-en",
        "track6.tr-en",
    ] {
        let file = sts.join(format!("STS2017.eval.v1.1/STS.input.{stem}.txt"));
        add(format!("STS 2017 {stem}"), Split::Test, vec![(file, Layout::Tabs)]);
    }
    add("STS 2017 en-de".into(), Split::Test, vec![(sts.join("STS2017.en-de.txt"), Layout::ScoredPairs)]);
    add("STS benchmark dev".into(), Split::Dev, vec![(sts.join("stsbenchmark/sts-dev.csv"), Layout::ScoredPairs)]);
    add("STS benchmark test".into(), Split::Test, vec![(sts.join("stsbenchmark/sts-test.csv"), Layout::ScoredPairs)]);
    add(
        "Tatoeba".into(),
        Split::Test,
        files_where(&dir.join("tatoeba"), |n| n.starts_with("tatoeba."))
            .into_iter()
            .map(|p| (p, Layout::Lines))
            .collect(),
    );
    let bucc: Vec<PathBuf> = files_where(&dir.join("bucc"), |n| {
        let n = n.strip_suffix(".gz").unwrap_or(n);
        !n.ends_with(".gold") && n.split('.').count() == 3
    });
    add("BUCC".into(), Split::Test, bucc.into_iter().map(|p| (p, Layout::Id)).collect());
    let m30k = dir.join("parallel/multi30k");
    add(
        "Multi30k val".into(),
        Split::Dev,
        files_where(&m30k, |n| n.starts_with("val.")).into_iter().map(|p| (p, Layout::Lines)).collect(),
    );
    add(
        "Multi30k test".into(),
        Split::Test,
        files_where(&m30k, |n| n.starts_with("test")).into_iter().map(|p| (p, Layout::Lines)).collect(),
    );
    sets
}

/// The evaluation files of the data registry whose sentences decontamination reads (test and
/// development files, gold scores and pairs aside) that `dir` lacks, compressed or not, as
/// (data set, path in `dir`): a benchmark file absent from the data folder is not checked
/// against, so training could hold its sentences. Empty when `dir` has all of them.
pub fn missing_eval_files(dir: &Path) -> Vec<(&'static str, &'static str)> {
    use super::registry::{Split as Use, SETS};
    let mut missing = Vec::new();
    for set in SETS {
        for f in set.files {
            if !matches!(f.split, Use::Test | Use::Dev) || f.path.contains("/STS.gs.") || f.path.ends_with(".gold") {
                continue;
            }
            let plain = f.path.strip_suffix(".gz").unwrap_or(f.path);
            if super::plain_or_gz(&dir.join(plain)).is_none() {
                missing.push((set.name, f.path));
            }
        }
    }
    // A file listed both plain and compressed (STS2017.en-de.txt and .txt.gz) counts once.
    missing.dedup_by_key(|(_, p)| p.strip_suffix(".gz").unwrap_or(p).to_string());
    missing
}

/// Files directly in `dir` whose names pass `keep`, sorted (none when `dir` is absent).
fn files_where(dir: &Path, keep: impl Fn(&str) -> bool) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_str().is_some_and(&keep))
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}

/// The sentences of one file.
fn sentences(path: &Path, layout: Layout) -> Result<Vec<String>> {
    let lines = read_lines(path)?;
    Ok(match layout {
        Layout::Lines => lines,
        Layout::Tabs => lines.iter().flat_map(|l| l.split('\t').map(str::to_string)).collect(),
        Layout::Id => lines.iter().filter_map(|l| l.split_once('\t').map(|(_, s)| s.to_string())).collect(),
        Layout::ScoredPairs => lines
            .iter()
            .flat_map(|l| {
                let f: Vec<&str> = l.split('\t').collect();
                match f.len() {
                    n if n >= 7 => vec![f[5].to_string(), f[6].to_string()],
                    n if n >= 2 => vec![f[0].to_string(), f[1].to_string()],
                    _ => vec![],
                }
            })
            .collect(),
    })
}

/// The normalised sentences of every evaluation set, each mapped to the sets that hold it.
pub struct Index {
    sets: Vec<(EvalSet, usize)>,
    keys: HashMap<String, Vec<u16>>,
}

impl Index {
    /// Read every set's files.
    pub fn build(sets: Vec<EvalSet>) -> Result<Self> {
        let mut keys: HashMap<String, Vec<u16>> = HashMap::new();
        let mut out = Vec::with_capacity(sets.len());
        for (i, set) in sets.into_iter().enumerate() {
            let id = u16::try_from(i).context("more than 65,535 evaluation sets")?;
            let mut distinct = 0;
            for (file, layout) in &set.files {
                for s in sentences(file, *layout)
                    .with_context(|| format!("evaluation set {} (decontamination)", set.name))?
                {
                    let k = normalize(&s);
                    if k.is_empty() {
                        continue;
                    }
                    let ids = keys.entry(k).or_default();
                    if ids.last() != Some(&id) {
                        ids.push(id);
                        distinct += 1;
                    }
                }
            }
            out.push((set, distinct));
        }
        Ok(Self { sets: out, keys })
    }

    /// The sets checked, with their numbers of distinct normalised sentences.
    pub fn sets(&self) -> impl Iterator<Item = (&EvalSet, usize)> {
        self.sets.iter().map(|(s, n)| (s, *n))
    }

    /// The sets (indices into [`Index::sets`]) that hold `text`.
    pub fn hits(&self, text: &str) -> &[u16] {
        self.keys.get(&normalize(text)).map(Vec::as_slice).unwrap_or(&[])
    }

    /// Count, for a list of texts (e.g. both sides of training pairs), which of them are in
    /// which set, and return a keep flag per item: an item is dropped when any of its texts is
    /// in a set. `texts(i)` gives item i's texts; `shared`: items share their texts (one string
    /// in memory each, as DuEAM's XNLI pairs: each sentence in about 20), so each distinct
    /// string is normalised and looked up once.
    pub fn check<'a>(
        &self,
        what: &str,
        n: usize,
        shared: bool,
        texts: impl Fn(usize) -> [&'a str; 2],
    ) -> (Vec<bool>, Overlap) {
        let mut keep = vec![true; n];
        let mut per_set = vec![0usize; self.sets.len()];
        let mut sentences: Vec<std::collections::HashSet<&str>> = vec![Default::default(); self.sets.len()];
        let mut hit: Vec<u16> = Vec::new();
        // Keyed by where the text is: within this call every text is borrowed, so one place
        // holds one text.
        let mut seen: std::collections::HashMap<(usize, usize), &[u16]> = Default::default();
        for (i, k) in keep.iter_mut().enumerate() {
            hit.clear();
            for t in texts(i) {
                let hits = if shared {
                    *seen.entry((t.as_ptr() as usize, t.len())).or_insert_with(|| self.hits(t))
                } else {
                    self.hits(t)
                };
                for &s in hits {
                    sentences[s as usize].insert(t);
                    if !hit.contains(&s) {
                        hit.push(s);
                    }
                }
            }
            if !hit.is_empty() {
                *k = false;
                for &s in &hit {
                    per_set[s as usize] += 1;
                }
            }
        }
        let dropped = keep.iter().filter(|k| !**k).count();
        let rows = self
            .sets
            .iter()
            .enumerate()
            .map(|(i, (set, size))| OverlapRow {
                set: set.name.clone(),
                split: set.split,
                set_sentences: *size,
                pairs: per_set[i],
                sentences: sentences[i].len(),
            })
            .collect();
        (keep, Overlap { source: what.to_string(), items: n, dropped, validation: false, sets: rows })
    }

    /// Drop the pairs with a side in an evaluation set; the overlap counted per set.
    pub fn filter_pairs(&self, what: &str, pairs: Vec<Pair>) -> (Vec<Pair>, Overlap) {
        let (keep, overlap) = self.check(what, pairs.len(), false, |i| [pairs[i].src.as_str(), pairs[i].tgt.as_str()]);
        let kept = pairs.into_iter().zip(keep).filter(|(_, k)| *k).map(|(p, _)| p).collect();
        (kept, overlap)
    }
}

/// How one training source overlaps the evaluation sets.
#[derive(Debug, Clone, Serialize)]
pub struct Overlap {
    /// The config key of the source, e.g. `data.sources`.
    pub source: String,
    /// Pairs (or sentences) read.
    pub items: usize,
    /// Pairs with a side in some evaluation set: dropped from training data; kept (and only
    /// reported) in validation data.
    pub dropped: usize,
    /// A validation source: checked against the test sets only, and kept.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub validation: bool,
    pub sets: Vec<OverlapRow>,
}

#[derive(Debug, Clone, Serialize)]
pub struct OverlapRow {
    pub set: String,
    pub split: Split,
    /// Distinct normalised sentences of the set.
    pub set_sentences: usize,
    /// Training pairs with a side in the set.
    pub pairs: usize,
    /// Distinct training texts found in the set.
    pub sentences: usize,
}

impl Overlap {
    /// One line for the run log.
    pub fn summary(&self) -> String {
        let hits: Vec<String> =
            self.sets.iter().filter(|r| r.pairs > 0).map(|r| format!("{} {}", r.set, r.pairs)).collect();
        format!(
            "decontamination: {} of {} pairs of {} dropped: a side is in an evaluation set{}",
            self.dropped,
            self.items,
            self.source,
            if hits.is_empty() { String::new() } else { format!(" ({})", hits.join(", ")) }
        )
    }

    /// The overlap table as markdown (`xsent data audit`).
    pub fn markdown(&self) -> String {
        let mut out = if self.validation {
            format!(
                "{} (validation, kept; checked against the test sets): {} pairs, {} with a side in a test set\n\n",
                self.source, self.items, self.dropped
            )
        } else {
            format!("{}: {} pairs, {} dropped\n\n", self.source, self.items, self.dropped)
        };
        out += "| evaluation set | split | its sentences | training pairs hitting it | distinct training texts in it |\n|---|---|---:|---:|---:|\n";
        for r in &self.sets {
            out += &format!("| {} | {:?} | {} | {} | {} |\n", r.set, r.split, r.set_sentences, r.pairs, r.sentences);
        }
        out
    }
}

/// The benchmark data directory for decontamination, when it exists: the one the evaluators
/// read ([`crate::places::data_dir`]: `XSENT_DATA`, else `~/.cache/xsent/data`, else
/// `../shared/data` beside the checkout).
pub fn default_data_dir() -> Option<PathBuf> {
    Some(crate::places::data_dir().0).filter(|p| p.is_dir())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every registry evaluation file whose sentences decontamination reads is listed when
    /// absent, plain or gzip-compressed counting as present; the shared data folder, where it
    /// exists, lacks none (an outside probe: a missing Tatoeba or BUCC file was skipped without
    /// a word, so training kept its sentences).
    #[test]
    fn missing_evaluation_files_are_listed() {
        let dir = tempfile::tempdir().unwrap();
        let all = missing_eval_files(dir.path());
        assert!(all.iter().any(|(s, p)| *s == "tatoeba" && *p == "tatoeba/tatoeba.deu-eng.eng"), "{all:?}");
        assert!(all.iter().any(|(_, p)| *p == "bucc/zh-en.dev.zh"));
        assert!(all.iter().all(|(_, p)| !p.ends_with(".gold") && !p.contains("STS.gs.")), "{all:?}");
        assert_eq!(all.iter().filter(|(_, p)| p.starts_with("sts/STS2017.en-de")).count(), 1, "{all:?}");
        std::fs::create_dir_all(dir.path().join("sts")).unwrap();
        std::fs::write(dir.path().join("sts/STS2017.en-de.txt.gz"), "").unwrap();
        std::fs::create_dir_all(dir.path().join("parallel/multi30k")).unwrap();
        std::fs::write(dir.path().join("parallel/multi30k/val.de.gz"), "").unwrap();
        let now = missing_eval_files(dir.path());
        assert_eq!(now.len(), all.len() - 2, "{now:?}");
        assert!(now.iter().all(|(_, p)| !p.starts_with("sts/STS2017.en-de") && *p != "parallel/multi30k/val.de.gz"));
        // standard_sets reads the compressed en-de file.
        let sets = standard_sets(dir.path());
        assert!(
            sets.iter().any(|s| s.name == "STS 2017 en-de"),
            "{:?}",
            sets.iter().map(|s| &s.name).collect::<Vec<_>>()
        );
        let shared = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/data");
        if shared.join("tatoeba").is_dir() {
            assert_eq!(missing_eval_files(&shared), vec![]);
        }
    }

    #[test]
    fn normalisation_lowercases_and_collapses_spaces() {
        assert_eq!(normalize("  A  dog\truns.\r"), "a dog runs.");
        assert_eq!(normalize("ÄÖÜ İ"), "äöü i̇");
        assert_eq!(normalize(" \t "), "");
        // Canonical and compatibility forms: decomposed, full-width, a ligature, a no-break space.
        assert_eq!(normalize("Dieu cre\u{301}a"), normalize("Dieu créa"));
        assert_eq!(normalize("ＡＢＣ ﬁne"), "abc fine");
        assert_eq!(normalize("a\u{a0}b"), "a b");
    }

    #[test]
    fn pairs_with_a_side_in_a_set_are_dropped_and_counted_per_set() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.txt");
        let b = dir.path().join("b.tsv");
        std::fs::write(&a, "A man is playing a guitar.\nTwo dogs run.\n").unwrap();
        std::fs::write(&b, "x\tx\tx\tx\t3.0\tTwo  DOGS run.\tA cat sleeps.\n").unwrap();
        let index = Index::build(vec![
            EvalSet { name: "lines".into(), split: Split::Test, files: vec![(a, Layout::Lines)] },
            EvalSet { name: "scored".into(), split: Split::Dev, files: vec![(b, Layout::ScoredPairs)] },
        ])
        .unwrap();
        let p = |s: &str, t: &str| Pair { src: s.into(), tgt: t.into(), src_lang: "en".into(), tgt_lang: "de".into() };
        let pairs = vec![
            p("two dogs run.", "Zwei Hunde rennen."),
            p("A house.", "Ein Haus."),
            p("Ein Mann.", "a man is playing a guitar."),
            p("a cat sleeps.", "Eine Katze schläft."),
        ];
        let (kept, o) = index.filter_pairs("data.sources", pairs);
        assert_eq!(kept.len(), 1);
        assert_eq!(kept[0].src, "A house.");
        assert_eq!((o.items, o.dropped), (4, 3));
        let row = |n: &str| o.sets.iter().find(|r| r.set == n).unwrap().clone();
        assert_eq!((row("lines").pairs, row("lines").sentences, row("lines").set_sentences), (2, 2, 2));
        assert_eq!((row("scored").pairs, row("scored").set_sentences), (2, 2));
        assert!(o.summary().contains("3 of 4 pairs of data.sources dropped"), "{}", o.summary());
        // Texts shared between items (one string each, as DuEAM's pairs): the same counts,
        // looked up once per string.
        let texts = ["Two dogs run.", "A house.", "a man is playing a guitar.", "Ein Haus."];
        let items = [[0, 1], [1, 3], [2, 0], [3, 1], [0, 0]];
        let of = |i: usize| [texts[items[i][0]], texts[items[i][1]]];
        let (keep, shared) = index.check("shared", items.len(), true, of);
        assert_eq!(keep, [false, true, false, true, false]);
        let (keep_each, each) = index.check("shared", items.len(), false, of);
        assert_eq!((keep_each, serde_json::to_string(&each).unwrap()), (keep, serde_json::to_string(&shared).unwrap()));
    }
}
