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
        eprintln!(
            "xsent: {} of {} lines are longer than {MAX_LINE_BYTES} bytes and left out of the vocabulary learning (as SentencePiece)",
            texts.len() - kept.len(),
            texts.len()
        );
    }
    let mut tk: TokenizerImpl<ModelWrapper, NormalizerWrapper, PreTokenizerWrapper, tokenizers::PostProcessorWrapper, DecoderWrapper> =
        TokenizerImpl::new(model);
    tk.with_normalizer(Some(normalizer(lowercase))).map_err(|e| anyhow::anyhow!("normaliser: {e}"))?;
    tk.with_pre_tokenizer(Some(pre));
    tk.with_decoder(decoder);
    tk.train(&mut trainer, kept.iter()).map_err(|e| {
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

/// Learn a shared SentencePiece-style vocabulary of about `vocab_size` pieces from `texts`.
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

/// Lines of the given files (`.gz` read through gzip), empty lines dropped.
pub fn read_corpus(files: &[std::path::PathBuf]) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for f in files {
        out.extend(crate::data::read_lines(f)?.into_iter().filter(|l| !l.trim().is_empty()));
    }
    if out.is_empty() {
        let names: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
        bail!("no text to train on: {} {} no non-blank line", names.join(", "), if names.len() == 1 { "has" } else { "have" });
    }
    Ok(out)
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
        assert!(e.contains("above the number of distinct characters in the text (9 here"), "{e}");
    }

    #[test]
    fn trigram_vocabulary_is_by_frequency() {
        // " aa", "aaa", "aa " twice each (lowercased), "a b" and " b " once; ties by text.
        let v = train_trigrams(&["aaa", "AAA b"], 4, true).unwrap();
        assert_eq!(v, [" aa", "aa ", "aaa", " b "]);
    }
}
