//! Long texts are cut before they are tokenised.
//!
//! An encoder keeps the first `max_length` tokens of a text. The tokenizer stops making tokens
//! there, but it normalises and pre-tokenises all of the text first: an 18 MB line took 25 s
//! and 2 GB to give 256 tokens. A text much longer than it can use is therefore tokenised up to
//! a space near [`BYTES_PER_TOKEN`] bytes per token of the limit. When the tokenizer splits words at spaces, every word
//! before that space is tokenised as in the whole text; the cut stands only when the tokenizer
//! still reached its limit within the head and its last token ends [`MARGIN`] bytes or more
//! before the cut, so that nothing at the cut (a normalisation spanning the space) can reach
//! the tokens kept. Otherwise the whole text is tokenised, as before. The ids, offsets and
//! "truncated" flag of the kept tokens are the same either way.

use anyhow::{anyhow, Result};
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::{Encoding, Tokenizer};

/// Bytes of text per token of `max_length` tokenised at most before a cut is tried: about 4.5
/// bytes per token in English, 8–9 in Cyrillic and Devanagari; a head that falls short is
/// tokenised again whole.
pub const BYTES_PER_TOKEN: usize = 16;

/// Bytes between the end of the last token the tokenizer made and the cut.
pub const MARGIN: usize = 64;

/// The cut's byte budget and the tokenizer's limit (its truncation length), or `None` when it
/// has no truncation or its pre-tokenizer does not split words at a space (a cut could then
/// change the pieces anywhere in a run of unsplit text, and texts are always tokenised whole).
fn budget(tokenizer: &Tokenizer) -> Option<(usize, usize)> {
    let limit = tokenizer.get_truncation()?.max_length;
    tokenizer
        .get_pre_tokenizer()
        .filter(|p| splits_at_spaces(p))
        .map(|_| (limit.saturating_mul(BYTES_PER_TOKEN).max(256), limit))
}

/// Whether every ASCII space of the raw text ends a piece: the text before it is then
/// pre-tokenised as if nothing followed. A sequence splits there when its first member does
/// (later members only split pieces further; an earlier one could have replaced the space).
fn splits_at_spaces(p: &PreTokenizerWrapper) -> bool {
    match p {
        PreTokenizerWrapper::BertPreTokenizer(_)
        | PreTokenizerWrapper::Whitespace(_)
        | PreTokenizerWrapper::WhitespaceSplit(_) => true,
        // The space becomes the first character of the next piece.
        PreTokenizerWrapper::Metaspace(m) => m.get_split(),
        // GPT-2's pattern: a space starts the next word's piece, or a run of spaces of its own.
        PreTokenizerWrapper::ByteLevel(b) => b.use_regex,
        PreTokenizerWrapper::Sequence(s) => s.as_ref().first().is_some_and(splits_at_spaces),
        _ => false,
    }
}

/// Where to cut `text`: the last ASCII space at or before `budget` bytes (the head excludes
/// it), if the text is over twice the budget and that space is in the budget's second half.
fn cut_point(text: &str, budget: usize) -> Option<usize> {
    if text.len() <= budget.saturating_mul(2) {
        return None;
    }
    let at = text.as_bytes()[..=budget].iter().rposition(|&b| b == b' ')?;
    (at >= budget / 2).then_some(at)
}

/// The tokens the tokenizer made that are not special tokens (the overflowing part included),
/// and the byte where the last of them ends.
fn made(e: &Encoding) -> (usize, usize) {
    let mut n = 0;
    let mut end = 0;
    for (&m, &(_, b)) in e.get_special_tokens_mask().iter().zip(e.get_offsets()) {
        if m == 0 {
            n += 1;
            end = end.max(b);
        }
    }
    for o in e.get_overflowing() {
        let (k, b) = made(o);
        n += k;
        end = end.max(b);
    }
    (n, end)
}

/// Bytes of text tokenised in one call (see [`encode_counted`]).
const GROUP_BYTES: usize = 1 << 20;

/// An encoding with its overflowing parts cut to the first, itself without overflow: what
/// [`made`] and the truncated flag read (whether tokens were cut, and the first of them).
fn trim_overflow(mut e: Encoding) -> Encoding {
    let mut over = e.take_overflowing();
    over.truncate(1);
    for o in &mut over {
        o.take_overflowing();
    }
    e.set_overflowing(over);
    e
}

/// Tokenise `inputs` with `tokenizer` (its truncation set), cutting long texts first where
/// the module says it is safe.
pub fn encode(tokenizer: &Tokenizer, inputs: &[String]) -> Result<Vec<Encoding>> {
    Ok(encode_counted(tokenizer, inputs)?.0)
}

/// [`encode`], and how many texts were tokenised cut and how many were cut, then tokenised
/// whole after all (for the tests).
#[doc(hidden)]
pub fn encode_counted(tokenizer: &Tokenizer, inputs: &[String]) -> Result<(Vec<Encoding>, usize, usize)> {
    // Texts are tokenised in groups of about GROUP_BYTES, and each encoding keeps only what is
    // used of the tokens past the limit (whether there are any), so that the encodings of a
    // window of long texts do not all hold every token of their texts at once. What `made`
    // reads is taken before.
    let run = |texts: Vec<&str>| -> Result<Vec<(Encoding, (usize, usize))>> {
        let mut out = Vec::with_capacity(texts.len());
        let mut rest = &texts[..];
        while !rest.is_empty() {
            let mut n = 0;
            let mut bytes = 0;
            while n < rest.len() && (n == 0 || bytes + rest[n].len() <= GROUP_BYTES) {
                bytes += rest[n].len();
                n += 1;
            }
            let encs =
                tokenizer.encode_batch(rest[..n].to_vec(), true).map_err(|e| anyhow!("tokenizer failed: {e}"))?;
            out.extend(encs.into_iter().map(|e| {
                let m = made(&e);
                (trim_overflow(e), m)
            }));
            rest = &rest[n..];
        }
        Ok(out)
    };
    let Some((budget, limit)) = budget(tokenizer) else {
        return Ok((run(inputs.iter().map(String::as_str).collect())?.into_iter().map(|(e, _)| e).collect(), 0, 0));
    };
    let cuts: Vec<Option<usize>> = inputs.iter().map(|t| cut_point(t, budget)).collect();
    let heads = run(inputs.iter().zip(&cuts).map(|(t, c)| &t[..c.unwrap_or(t.len())]).collect())?;
    let redo: Vec<usize> = (0..inputs.len())
        .filter(|&i| cuts[i].is_some_and(|cut| heads[i].1 .0 < limit || heads[i].1 .1 + MARGIN > cut))
        .collect();
    let mut encs: Vec<Encoding> = heads.into_iter().map(|(e, _)| e).collect();
    let cut = cuts.iter().flatten().count() - redo.len();
    let redone = redo.len();
    if !redo.is_empty() {
        let whole = run(redo.iter().map(|&i| inputs[i].as_str()).collect())?;
        for (i, (e, _)) in redo.into_iter().zip(whole) {
            encs[i] = e;
        }
    }
    Ok((encs, cut, redone))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cut_points() {
        let budget = 20;
        // Short texts are never cut.
        assert_eq!(cut_point(&"a ".repeat(20), budget), None);
        // The last space at or before the budget.
        let t = format!("{}{}", "abcd ".repeat(4), "x".repeat(50));
        assert_eq!(cut_point(&t, budget), Some(19));
        // A space exactly at the budget.
        let t = format!("{} {}", "y".repeat(20), "z".repeat(50));
        assert_eq!(cut_point(&t, budget), Some(20));
        // No space in the budget's second half: not cut.
        let t = format!("ab {}", "q".repeat(60));
        assert_eq!(cut_point(&t, budget), None);
        // Multi-byte characters around the budget: the space is always a character boundary.
        let t = format!("{} {}", "é".repeat(7), "ü".repeat(40));
        let at = cut_point(&t, budget).unwrap();
        assert!(t.is_char_boundary(at) && &t[at..at + 1] == " ");
    }
}
