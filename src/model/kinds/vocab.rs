//! Vocabularies for the averaging models (seed 002 §2), learned from text:
//! - a shared SentencePiece-style subword vocabulary (unigram, or BPE) with the `tokenizers`
//!   crate's trainers, saved as a `tokenizer.json` (NFKC, optional lowercasing, `▁` metaspace
//!   pre-tokenisation as SentencePiece does);
//! - a word vocabulary (the most frequent types, `WordLevel` in a `tokenizer.json`);
//! - a character-trigram vocabulary (the most frequent trigrams, a plain list).

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use tokenizers::models::bpe::{BpeTrainer, BPE};
use tokenizers::models::unigram::{Unigram, UnigramTrainer};
use tokenizers::models::wordlevel::{WordLevel, WordLevelTrainer};
use tokenizers::models::{ModelWrapper, TrainerWrapper};
use tokenizers::normalizers::{Lowercase, NormalizerWrapper, Sequence, NFKC};
use tokenizers::pre_tokenizers::metaspace::{Metaspace, PrependScheme};
use tokenizers::pre_tokenizers::whitespace::Whitespace;
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::{AddedToken, DecoderWrapper, NormalizedString, Normalizer, Tokenizer, TokenizerImpl};

/// The unknown-unit token of the vocabularies xsent trains.
pub const UNK: &str = "<unk>";

/// The largest vocabulary xsent learns (XLM-R has 250,002 pieces): larger sizes would only
/// exhaust memory in the trainers' tables.
pub const MAX_VOCAB: usize = 2_000_000;

/// A vocabulary size (`what` names it in the error) must be in 2..=[`MAX_VOCAB`].
pub fn check_size(what: &str, n: usize) -> Result<()> {
    if !(2..=MAX_VOCAB).contains(&n) {
        bail!("{what} must be in 2..={MAX_VOCAB}, got {n}");
    }
    Ok(())
}

/// Lines longer than this (bytes) are left out when a vocabulary is learned: SentencePiece's
/// `max_sentence_length` default.
pub const MAX_LINE_BYTES: usize = 4192;

/// Subword model of a SentencePiece-style vocabulary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum SubwordModel {
    Unigram,
    Bpe,
}

/// The normaliser of every vocabulary here: NFKC, then lowercasing when asked.
pub fn normalizer(lowercase: bool) -> NormalizerWrapper {
    let mut parts: Vec<NormalizerWrapper> = vec![NFKC.into()];
    if lowercase {
        parts.push(Lowercase.into());
    }
    NormalizerWrapper::Sequence(Sequence::new(parts))
}

fn train_with(
    model: ModelWrapper,
    pre: PreTokenizerWrapper,
    decoder: Option<DecoderWrapper>,
    mut trainer: TrainerWrapper,
    lowercase: bool,
    texts: &[&str],
) -> Result<Tokenizer> {
    if texts.iter().all(|t| t.trim().is_empty()) {
        bail!("cannot learn a vocabulary from no text (all {} lines are empty)", texts.len());
    }
    // As SentencePiece (`max_sentence_length`): very long lines are left out of the learning. A
    // line of 200,000 characters without a space overflows the unigram trainer's stack (an abort,
    // not an error).
    let kept: Vec<&str> = texts.iter().copied().filter(|t| t.len() <= MAX_LINE_BYTES).collect();
    if kept.len() < texts.len() {
        if kept.iter().all(|t| t.trim().is_empty()) {
            bail!("cannot learn a vocabulary: every non-empty line is longer than {MAX_LINE_BYTES} bytes (split the text into sentences)");
        }
        errln!(
            "xsent: {} of {} lines are longer than {MAX_LINE_BYTES} bytes and left out of the vocabulary learning (as SentencePiece)",
            texts.len() - kept.len(),
            texts.len()
        );
    }
    let mut tk: TokenizerImpl<
        ModelWrapper,
        NormalizerWrapper,
        PreTokenizerWrapper,
        tokenizers::PostProcessorWrapper,
        DecoderWrapper,
    > = TokenizerImpl::new(model);
    tk.with_normalizer(Some(normalizer(lowercase))).map_err(|e| anyhow::anyhow!("normaliser: {e}"))?;
    tk.with_pre_tokenizer(Some(pre.clone()));
    tk.with_decoder(decoder);
    let trained = match &mut trainer {
        // The crate's unigram trainer takes its words from a hash map (a new random order in every
        // process), and ties in its scores follow that order; its E-step sums per-thread partial
        // counts in an order that depends on work stealing. Words are counted here and handed over
        // sorted, and the trainer runs on one thread, so that the same text gives the same
        // tokenizer.json, byte for byte.
        TrainerWrapper::UnigramTrainer(ut) => {
            let words = word_counts(&normalizer(lowercase), &pre, &kept)?;
            // Every character of the (normalised, pre-tokenised) text is a piece, and <unk> one
            // more. Asked for exactly as many pieces as characters, the crate's trainer loops
            // without end (an outside probe: 8 pieces for "hello world" with its ▁, 2 for "a");
            // asked for one more, it keeps every piece it found (84 for 62 asked on 200 Tatoeba
            // lines of 61 characters); fewer, it fails with a message this one replaces. From
            // characters + 2 on it gives the size asked for.
            check_alphabet("unigram", ut.vocab_size as usize, &words, 2)?;
            let mut model = Unigram::default();
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(1)
                .build()
                .context("a one-thread pool for the unigram trainer")?;
            pool.install(|| ut.do_train(words, &mut model)).and_then(|special| {
                tk.with_model(canonical_unigram(&model)?);
                tk.add_special_tokens(special)?;
                Ok(())
            })
        }
        TrainerWrapper::BpeTrainer(bt) => {
            // The BPE trainer keeps every character too, and silently writes more pieces than
            // asked when they do not fit (62 for 2 asked on the same 200 lines).
            check_alphabet("BPE", bt.vocab_size, &word_counts(&normalizer(lowercase), &pre, &kept)?, 1)?;
            tk.train(&mut trainer, kept.iter()).map(|_| ())
        }
        _ => tk.train(&mut trainer, kept.iter()).map(|_| ()),
    };
    trained.map_err(|e| {
        let e = e.to_string();
        if e.contains("not large enough") {
            let chars: std::collections::HashSet<char> = kept.iter().flat_map(|t| t.chars()).filter(|c| !c.is_whitespace()).collect();
            anyhow::anyhow!(
                "training the vocabulary failed: {e}: give a vocabulary size above the number of distinct characters in the text ({} here, before normalisation)",
                chars.len()
            )
        } else {
            anyhow::anyhow!("training the vocabulary failed: {e}")
        }
    })?;
    Ok(tk.into())
}

/// Refuse a subword vocabulary size below what the `kind` trainer needs for `words`: each distinct
/// character is a piece, `<unk>` one more, and the unigram trainer one learned piece beyond
/// (`extra` counts `<unk>` and that piece).
fn check_alphabet(kind: &str, vocab_size: usize, words: &[(String, u32)], extra: usize) -> Result<()> {
    let chars: std::collections::HashSet<char> = words.iter().flat_map(|(w, _)| w.chars()).collect();
    let need = chars.len() + extra;
    if vocab_size < need {
        bail!(
            "cannot learn a {kind} vocabulary of {vocab_size} pieces: the text has {} distinct characters (after normalisation, \
             the word-start mark ▁ included), each of which is a piece, and <unk> is one more{}; give a vocabulary size of at least {need}",
            chars.len(),
            if extra > 1 { ", and the trainer needs room for one learned piece" } else { "" }
        );
    }
    Ok(())
}

/// Words of `texts` (normalised and pre-tokenised as the tokenizer will) with their counts,
/// sorted by word: the unigram trainer's input in a fixed order.
fn word_counts(norm: &NormalizerWrapper, pre: &PreTokenizerWrapper, texts: &[&str]) -> Result<Vec<(String, u32)>> {
    use tokenizers::{OffsetReferential, OffsetType, PreTokenizedString, PreTokenizer};
    let mut counts: std::collections::BTreeMap<String, u32> = std::collections::BTreeMap::new();
    for t in texts {
        let mut n = NormalizedString::from(*t);
        norm.normalize(&mut n).map_err(|e| anyhow::anyhow!("normalising {t:?}: {e}"))?;
        let mut p = PreTokenizedString::from(n);
        pre.pre_tokenize(&mut p).map_err(|e| anyhow::anyhow!("pre-tokenising {t:?}: {e}"))?;
        for (w, _, _) in p.get_splits(OffsetReferential::Original, OffsetType::Byte) {
            *counts.entry(w.to_owned()).or_insert(0) += 1;
        }
    }
    Ok(counts.into_iter().collect())
}

/// The trained unigram model with the two orders its trainer leaves to a hash set made fixed
/// (tokenizers 0.23, `UnigramTrainer::finalize`): every character of the text is kept, and those
/// the EM steps dropped come back with the scores `m`, `m + 1e-4`, `m + 2e-4`, … (`m` the lowest
/// score of the EM model) in hash order; then the pieces are sorted by score, ties in insertion
/// order. Here the returned characters get those scores in character order, and ties are broken
/// by the piece's text. The special tokens in front (`<unk>`, id 0) stay where they are.
fn canonical_unigram(model: &Unigram) -> tokenizers::Result<Unigram> {
    let all: Vec<(String, f64)> = model.iter().cloned().collect();
    let specials = all.iter().take_while(|(p, _)| p == UNK).count();
    let (head, rest) = all.split_at(specials);
    let mut rest = rest.to_vec();
    // The re-added characters: the longest run of single characters scored exactly m + penalty_k,
    // k = 0, 1, 2, …, accumulated as the trainer does, over the candidates for m.
    let single = |p: &str| p.chars().nth(1).is_none() && !p.is_empty();
    let mut by_score: HashMap<u64, Vec<usize>> = HashMap::new();
    for (i, (p, s)) in rest.iter().enumerate() {
        if single(p) {
            by_score.entry(s.to_bits()).or_default().push(i);
        }
    }
    // The run starts at `m`, the EM model's lowest score, which the first returned character shares
    // with the pieces the EM model itself scored lowest: every single character at `m` joins the
    // run (which of them the trainer returned is not known), then exactly one per step.
    let mut best: (usize, Vec<usize>) = (0, Vec::new());
    for (&bits, start) in &by_score {
        let m = f64::from_bits(bits);
        let mut run = start.clone();
        let mut steps = 0;
        let mut penalty = 0.0001;
        while let Some([j]) = by_score.get(&(m + penalty).to_bits()).map(Vec::as_slice) {
            run.push(*j);
            steps += 1;
            penalty += 0.0001;
        }
        // The longest run; equal lengths by the lowest start score, for a fixed choice.
        let (best_steps, best_run) = &best;
        if steps > *best_steps
            || (steps == *best_steps && steps > 0 && best_run.first().is_some_and(|&b| m < rest[b].1))
        {
            best = (steps, run);
        }
    }
    let best = best.1;
    if best.len() > 1 {
        let mut scores: Vec<f64> = best.iter().map(|&i| rest[i].1).collect();
        scores.sort_by(f64::total_cmp);
        let mut chars: Vec<String> = best.iter().map(|&i| rest[i].0.clone()).collect();
        chars.sort_unstable();
        for (&i, (c, s)) in best.iter().zip(chars.into_iter().zip(scores)) {
            rest[i] = (c, s);
        }
    }
    rest.sort_by(|(p, a), (q, b)| b.total_cmp(a).then_with(|| p.cmp(q)));
    let unk = (specials > 0).then_some(0);
    Unigram::from(head.iter().cloned().chain(rest).collect(), unk, model.byte_fallback())
}

/// Learn a shared SentencePiece-style vocabulary of about `vocab_size` pieces from `texts`.
/// A unigram vocabulary is the same for the same text, byte for byte (its trainer runs on one
/// thread, on words in a fixed order, [`canonical_unigram`]). A BPE one is not: the `tokenizers`
/// BPE trainer numbers words in hash order, and merges of equal count follow those numbers.
pub fn train_subword(texts: &[&str], kind: SubwordModel, vocab_size: usize, lowercase: bool) -> Result<Tokenizer> {
    check_size("the vocabulary size", vocab_size)?;
    let meta = Metaspace::new('▁', PrependScheme::Always, true);
    let special = vec![AddedToken::from(UNK, true)];
    let (model, trainer): (ModelWrapper, TrainerWrapper) = match kind {
        SubwordModel::Unigram => (
            Unigram::default().into(),
            UnigramTrainer::builder()
                .vocab_size(vocab_size as u32)
                .unk_token(Some(UNK.into()))
                .special_tokens(special)
                .show_progress(false)
                .build()
                .context("unigram trainer")?
                .into(),
        ),
        SubwordModel::Bpe => (
            BPE::builder().unk_token(UNK.into()).build().map_err(|e| anyhow::anyhow!("BPE model: {e}"))?.into(),
            BpeTrainer::builder().vocab_size(vocab_size).special_tokens(special).show_progress(false).build().into(),
        ),
    };
    train_with(model, meta.clone().into(), Some(meta.into()), trainer, lowercase, texts)
}

/// The `max_words` most frequent words of `texts` (split at whitespace and punctuation) and
/// `<unk>`, as a `WordLevel` tokenizer.
pub fn train_words(texts: &[&str], max_words: usize, lowercase: bool) -> Result<Tokenizer> {
    let model = WordLevel::builder().unk_token(UNK.into()).build().map_err(|e| anyhow::anyhow!("word model: {e}"))?;
    let trainer = WordLevelTrainer::builder()
        .vocab_size(max_words + 1)
        .special_tokens(vec![AddedToken::from(UNK, true)])
        .show_progress(false)
        .build()
        .context("word trainer")?;
    train_with(model.into(), Whitespace {}.into(), None, trainer.into(), lowercase, texts)
}

/// Normalised text of a sentence (NFKC, lowercased when asked, whitespace collapsed).
pub fn normalize(norm: &NormalizerWrapper, text: &str) -> Result<String> {
    let mut n = NormalizedString::from(text);
    norm.normalize(&mut n).map_err(|e| anyhow::anyhow!("normalising {text:?}: {e}"))?;
    Ok(n.get().split_whitespace().collect::<Vec<_>>().join(" "))
}

/// Character trigrams of normalised text, with a space marking each end (`" ab"`, `"abc"`,
/// `"bc "` for "abc"); nothing for empty text.
pub fn trigrams(normalized: &str, mut each: impl FnMut(&str)) {
    if normalized.is_empty() {
        return;
    }
    let padded = format!(" {normalized} ");
    let idx: Vec<usize> = padded.char_indices().map(|(i, _)| i).chain([padded.len()]).collect();
    for w in 0..idx.len().saturating_sub(3) {
        each(&padded[idx[w]..idx[w + 3]]);
    }
}

/// The `max` most frequent character trigrams of `texts` (ties in text order of the trigram),
/// most frequent first.
pub fn train_trigrams(texts: &[&str], max: usize, lowercase: bool) -> Result<Vec<String>> {
    let norm = normalizer(lowercase);
    let mut counts: HashMap<String, u64> = HashMap::new();
    for t in texts {
        trigrams(&normalize(&norm, t)?, |g| *counts.entry(g.to_string()).or_insert(0) += 1);
    }
    if counts.is_empty() {
        bail!("cannot learn a trigram vocabulary from no text");
    }
    let mut all: Vec<(String, u64)> = counts.into_iter().collect();
    all.sort_unstable_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    all.truncate(max);
    Ok(all.into_iter().map(|(g, _)| g).collect())
}

/// The text a vocabulary is learned from: the non-blank lines of some files, at most
/// `max_sentences` of them.
pub struct Corpus {
    /// The lines kept, in the files' order.
    pub lines: Vec<String>,
    /// Non-blank lines of at most [`MAX_LINE_BYTES`] bytes in the files (more than `lines` when
    /// they were sampled).
    pub usable: usize,
    /// Per file, the lines longer than [`MAX_LINE_BYTES`] bytes, left out.
    pub too_long: Vec<(std::path::PathBuf, usize)>,
}

/// The non-blank lines of the given files (`.gz` read through gzip), streamed: lines longer
/// than [`MAX_LINE_BYTES`] bytes are left out (as SentencePiece's `max_sentence_length`), and
/// when more than `max_sentences` remain, a uniform sample of that many is kept (reservoir
/// sampling with a fixed seed, in the files' order; as SentencePiece's `input_sentence_size`), so
/// memory is bounded by `max_sentences` × [`MAX_LINE_BYTES`] whatever the files hold.
pub fn read_corpus(files: &[std::path::PathBuf], max_sentences: usize) -> Result<Corpus> {
    use rand::{Rng, SeedableRng};
    anyhow::ensure!(max_sentences >= 1, "the number of sentences to learn from must be at least 1");
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0x5e17_ece5);
    let (mut kept, mut usable, mut too_long) = (Vec::<(usize, String)>::new(), 0usize, Vec::new());
    for f in files {
        let (mut lines, mut long) = (0usize, 0usize);
        crate::data::each_line(f, MAX_LINE_BYTES, |_, line| {
            lines += 1;
            match line {
                None => long += 1,
                Some(t) if t.trim().is_empty() => {}
                Some(t) => {
                    if kept.len() < max_sentences {
                        kept.push((usable, t.to_string()));
                    } else {
                        let j = rng.random_range(0..=usable);
                        if j < max_sentences {
                            kept[j] = (usable, t.to_string());
                        }
                    }
                    usable += 1;
                }
            }
            Ok(())
        })?;
        if lines == 0 {
            bail!("{} is empty", f.display());
        }
        if long > 0 {
            too_long.push((f.clone(), long));
        }
    }
    let names: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
    let (has, names) = (if names.len() == 1 { "has" } else { "have" }, names.join(", "));
    if usable == 0 && !too_long.is_empty() {
        bail!(
            "cannot learn a vocabulary: every non-empty line of {names} is longer than {MAX_LINE_BYTES} bytes \
             (split the text into sentences)"
        );
    }
    if usable == 0 {
        bail!("no text to train on: {names} {has} no non-blank line");
    }
    kept.sort_unstable_by_key(|(i, _)| *i);
    Ok(Corpus { lines: kept.into_iter().map(|(_, t)| t).collect(), usable, too_long })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trigrams_mark_both_ends() {
        let mut g = Vec::new();
        trigrams("ab cd", |t| g.push(t.to_string()));
        assert_eq!(g, [" ab", "ab ", "b c", " cd", "cd "]);
        let mut none = 0;
        trigrams("", |_| none += 1);
        assert_eq!(none, 0);
        let mut u = Vec::new();
        trigrams("äß", |t| u.push(t.to_string()));
        assert_eq!(u, [" äß", "äß "]);
    }

    /// More lines than `max_sentences`: a uniform sample, in the files' order, the same each
    /// time; blank and too-long lines are not counted.
    #[test]
    fn a_large_corpus_is_sampled_uniformly_and_reproducibly() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a.txt"), dir.path().join("b.txt"));
        let line = |i: usize| format!("line {i}\n");
        std::fs::write(&a, (0..500).map(line).collect::<String>() + "\n   \n" + &"x".repeat(5000)).unwrap();
        std::fs::write(&b, (500..1000).map(line).collect::<String>()).unwrap();
        let files = [a.clone(), b.clone()];
        let c = read_corpus(&files, 100).unwrap();
        assert_eq!((c.lines.len(), c.usable), (100, 1000));
        assert_eq!(c.too_long, [(a.clone(), 1)]);
        let at: Vec<usize> = c.lines.iter().map(|l| l[5..].parse().unwrap()).collect();
        assert!(at.windows(2).all(|w| w[0] < w[1]), "in the files' order: {at:?}");
        assert!(at.iter().filter(|&&i| i >= 500).count() > 30, "both files sampled: {at:?}");
        let mean = at.iter().sum::<usize>() as f64 / at.len() as f64;
        assert!((400.0..600.0).contains(&mean), "uniform: mean index {mean}");
        assert_eq!(read_corpus(&files, 100).unwrap().lines, c.lines);
        assert_eq!(read_corpus(&files, 1000).unwrap().lines.len(), 1000);
    }

    #[test]
    fn very_long_lines_are_left_out_of_vocabulary_learning() {
        // 200,000 characters and no space: the unigram trainer aborts the process on it (stack
        // overflow) when it is given.
        let long: String = (0..200_000u32).map(|i| char::from_u32(0x4e00 + (i * 7919) % 50).unwrap()).collect();
        let texts = ["a short line", long.as_str(), "another short line"];
        for kind in [SubwordModel::Unigram, SubwordModel::Bpe] {
            let tk = train_subword(&texts, kind, 100, false).unwrap();
            let v = tk.get_vocab(false);
            // Learned from the short lines only: their letters are there, none of the long
            // line's characters is.
            assert!(v.contains_key("s") && v.contains_key("h"), "{kind:?}: {v:?}");
            assert!(!v.keys().any(|p| p.chars().any(|c| ('\u{4e00}'..'\u{4e32}').contains(&c))), "{kind:?}: {v:?}");
        }
        let e = train_subword(&[long.as_str(), ""], SubwordModel::Unigram, 100, false).unwrap_err();
        assert!(format!("{e}").contains("longer than 4192 bytes"), "{e}");
    }

    #[test]
    fn a_vocabulary_smaller_than_the_characters_says_how_many_there_are() {
        let e = format!("{:#}", train_subword(&["abc def", "ghi"], SubwordModel::Unigram, 2, false).unwrap_err());
        assert!(e.contains("the text has 10 distinct characters") && e.contains("at least 12"), "{e}");
        let e = format!("{:#}", train_subword(&["abc def", "ghi"], SubwordModel::Bpe, 2, false).unwrap_err());
        assert!(e.contains("the text has 10 distinct characters") && e.contains("at least 11"), "{e}");
        // The sizes at which the crate's unigram trainer looped without end (characters + 0, an
        // outside probe) or wrote more pieces than asked (characters + 1) are errors; from the
        // smallest size the message gives on, no vocabulary is larger than asked, in either model.
        let lines = [
            "the quick brown fox jumps over the lazy dog",
            "der schnelle braune fuchs springt über den faulen hund",
            "we went there and then they went home",
            "hello world, hello again",
        ];
        for (text, chars) in [(&["hello", "world"][..], 8), (&["a"][..], 2), (&lines[..], 29)] {
            for (kind, need) in [(SubwordModel::Unigram, chars + 2), (SubwordModel::Bpe, chars + 1)] {
                for size in 2..need {
                    let e = format!("{:#}", train_subword(text, kind, size, false).unwrap_err());
                    assert!(
                        e.contains(&format!("has {chars} distinct")) && e.contains(&format!("at least {need}")),
                        "{kind:?} {size}: {e}"
                    );
                }
                for size in need..need + 12 {
                    let n = train_subword(text, kind, size, false).unwrap().get_vocab_size(true);
                    assert!(n <= size, "{kind:?}: {n} pieces for {size} asked");
                }
            }
        }
    }

    /// The same text gives the same unigram tokenizer.json, byte for byte, however the crate's
    /// hash maps are seeded: words with equal counts (here every word appears as often as its
    /// twin with the letters swapped) must not be ordered by hash.
    #[test]
    fn unigram_vocabulary_is_the_same_every_time() {
        let words: Vec<String> = (0..400u32)
            .map(|i| {
                let a = char::from(b'a' + (i % 26) as u8);
                let b = char::from(b'a' + (i / 26 % 26) as u8);
                format!("{a}{b}{a}x{b}{a} {b}{a}{b}x{a}{b}")
            })
            .collect();
        let texts: Vec<&str> = words.iter().map(String::as_str).collect();
        let train = || train_subword(&texts, SubwordModel::Unigram, 120, false).unwrap().to_string(false).unwrap();
        let first = train();
        for _ in 0..6 {
            assert!(train() == first, "two trainings on the same text gave different tokenizer.json");
        }
    }

    /// The trainer's two hash orders, as in a 16k vocabulary of the lightweight config: the lowest
    /// EM score `m` is shared by EM pieces and the first returned character, then one character per
    /// step of 1e-4. Two assignments of the same characters to those scores give one model.
    #[test]
    fn returned_characters_get_their_scores_in_one_order() {
        let m = -15.078912236482179;
        let model = |chars: [&str; 5]| {
            let mut v: Vec<(String, f64)> = vec![(UNK.into(), 0.0), ("ab".into(), -3.0), ("«".into(), -15.06)];
            let scores = [m + 0.0001 + 0.0001, m + 0.0001, m, m, m];
            v.extend(chars.iter().zip(scores).map(|(c, s)| (c.to_string(), s)));
            v.push(("§x".into(), m));
            Unigram::from(v, Some(0), false).unwrap()
        };
        let a = canonical_unigram(&model(["„", "–", "\t", "§", "Â"])).unwrap();
        let b = canonical_unigram(&model(["Â", "„", "§", "–", "\t"])).unwrap();
        let pieces = |u: &Unigram| u.iter().cloned().collect::<Vec<_>>();
        assert_eq!(pieces(&a), pieces(&b));
        // The scores are kept; only which character has which changed.
        let mut scores: Vec<f64> = pieces(&a).iter().map(|p| p.1).collect();
        scores.sort_by(f64::total_cmp);
        assert_eq!(scores.iter().filter(|&&s| s == m).count(), 4);
        assert_eq!(pieces(&a)[0].0, UNK);
    }

    #[test]
    fn trigram_vocabulary_is_by_frequency() {
        // " aa", "aaa", "aa " twice each (lowercased), "a b" and " b " once; ties by text.
        let v = train_trigrams(&["aaa", "AAA b"], 4, true).unwrap();
        assert_eq!(v, [" aa", "aa ", "aaa", " b "]);
    }
}
