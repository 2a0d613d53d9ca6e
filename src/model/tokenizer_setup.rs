//! A model's tokenizer made ready for it: its padding id found and every id it can give checked
//! against the model's embeddings ([`check_ids`]), then lowercasing and truncation set
//! ([`fit`]). [`super::sentence::SentenceEncoder::from_files`] calls both.

use super::config::EncoderConfig;
use anyhow::{anyhow, bail, Result};
use std::path::Path;
use tokenizers::normalizers::{Lowercase, NormalizerWrapper, Sequence as NormalizerSequence};
use tokenizers::{Tokenizer, TruncationDirection, TruncationParams, TruncationStrategy};

/// The padding id (the tokenizer's own padding is turned off: batches are padded by xsent), after
/// checking that it, the vocabulary and the special tokens the post-processor adds all have an
/// embedding in the model (`path`: the tokenizer's file, `config_path`: the model's config, for
/// messages).
pub(crate) fn check_ids(
    tokenizer: &mut Tokenizer,
    path: &Path,
    config: &EncoderConfig,
    config_path: &Path,
) -> Result<u32> {
    let pad_id = tokenizer
        .get_padding()
        .map(|p| p.pad_id)
        .or_else(|| ["<pad>", "[PAD]"].iter().find_map(|t| tokenizer.token_to_id(t)))
        .unwrap_or(config.pad_id());
    tokenizer.with_padding(None);
    if pad_id as usize >= config.vocab_size {
        bail!(
            "{}: the padding token id is {pad_id}, but the model has only {} token embeddings (vocab_size in {}): \
             fix pad_id in the tokenizer's padding settings",
            path.display(),
            config.vocab_size,
            config_path.display()
        );
    }
    if let Some((token, id)) = tokenizer.get_vocab(true).into_iter().max_by_key(|(_, id)| *id) {
        if id as usize >= config.vocab_size {
            bail!(
                "{} gives token {} the id {id}, but the model has only {} token embeddings (vocab_size in {}): \
                 the tokenizer does not belong to this model",
                path.display(),
                super::embedder::shown(&token),
                config.vocab_size,
                config_path.display()
            );
        }
    }

    // The ids the post-processor adds ([CLS], </s>, …) are not in the vocabulary it was
    // given, so they are checked apart (an outside probe: an id past the embeddings failed
    // mid-embed naming no file, and u32::MAX embedded without a word).
    let specials = tokenizer
        .encode("", true)
        .map_err(|e| anyhow!("{}: cannot add the special tokens to a text: {e}", path.display()))?;
    if let Some(i) = specials.get_ids().iter().position(|&id| id as usize >= config.vocab_size) {
        bail!(
            "{}: its post-processor adds the special token {:?} with the id {}, but the model has only {} token embeddings \
             (vocab_size in {}): fix the id in the post_processor section",
            path.display(),
            specials.get_tokens()[i],
            specials.get_ids()[i],
            config.vocab_size,
            config_path.display()
        );
    }
    Ok(pad_id)
}

/// Lowercase first when `lowercase` (sentence-transformers' `do_lower_case`), and cut texts at
/// `max_length` tokens, so that every cut is seen.
pub(crate) fn fit(tokenizer: &mut Tokenizer, path: &Path, lowercase: bool, max_length: usize) -> Result<()> {
    if lowercase {
        // As sentence-transformers does: a Lowercase normaliser first, unless there is one.
        let current = tokenizer.get_normalizer().cloned();
        let steps: Vec<NormalizerWrapper> = match current {
            Some(NormalizerWrapper::Sequence(seq)) => seq.into_iter().collect(),
            Some(n) => vec![n],
            None => vec![],
        };
        if !steps.iter().any(|n| matches!(n, NormalizerWrapper::Lowercase(_))) {
            let steps = std::iter::once(NormalizerWrapper::Lowercase(Lowercase)).chain(steps).collect();
            tokenizer
                .with_normalizer(Some(NormalizerWrapper::Sequence(NormalizerSequence::new(steps))))
                .map_err(|e| anyhow!("cannot add lowercasing to {}: {e}", path.display()))?;
        }
    }
    // tokenizers stops tokenising a text once it reaches the truncation length, so a text
    // cut exactly there keeps no overflowing part. With special tokens (added after the cut,
    // which leaves room for them) a cut text always overflows; without them, tokenise one
    // token further and cut here, so that every cut is seen (and reported).
    let specials = tokenizer.get_post_processor().map_or(0, |p| tokenizers::PostProcessor::added_tokens(p, false));
    tokenizer
        .with_truncation(Some(TruncationParams {
            max_length: if specials == 0 { max_length + 1 } else { max_length },
            strategy: TruncationStrategy::LongestFirst,
            stride: 0,
            direction: TruncationDirection::Right,
        }))
        .map_err(|e| anyhow!("cannot set truncation on {}: {e}", path.display()))?;
    Ok(())
}
