//! Texts a model cut (longer than `--max-line-bytes`, or than its maximum length in tokens),
//! counted for the commands that embed whole files or benchmark sets (`eval`, `mine`, `plot`) and
//! said once on stderr: their scores come from the beginnings of such texts only. `embed` says
//! it in the same words ([`Cut`]), naming the first by its line number.

use crate::model::embedder::shown;
use crate::model::{Embedded, Embedder};
use anyhow::Result;
use std::sync::Mutex;

/// A loaded model that counts what it cut.
pub struct NotingCuts {
    inner: Box<dyn Embedder>,
    max_line_bytes: usize,
    seen: Mutex<Cuts>,
}

#[derive(Default)]
struct Cuts {
    texts: u64,
    bytes: u64,
    tokens: u64,
    first_bytes: Option<String>,
    first_tokens: Option<String>,
}

impl NotingCuts {
    pub fn new(inner: Box<dyn Embedder>, max_line_bytes: usize) -> Self {
        Self { inner, max_line_bytes, seen: Mutex::new(Cuts::default()) }
    }

    /// Say on stderr what was cut since the last call (`command` the message's head, `what` the
    /// texts: "texts", "lines of de.txt"), and start counting again.
    pub fn say(&self, command: &str, what: &str) {
        let c = std::mem::take(&mut *self.seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
        for line in c.lines(command, what, self.max_line_bytes, self.inner.max_length()) {
            errln!("{line}");
        }
    }
}

/// Say on stderr which of `texts` were cut, as [`NotingCuts::say`] does, for a model used
/// without the wrapper.
pub fn say(
    command: &str,
    what: &str,
    texts: &[&str],
    truncated: &[bool],
    max_line_bytes: usize,
    max_length: Option<usize>,
) {
    let mut c = Cuts::default();
    c.add(texts, truncated, max_line_bytes);
    for line in c.lines(command, what, max_line_bytes, max_length) {
        errln!("{line}");
    }
}

impl Cuts {
    fn add(&mut self, texts: &[&str], truncated: &[bool], max_line_bytes: usize) {
        self.texts += texts.len() as u64;
        for (t, _) in texts.iter().zip(truncated).filter(|(_, &cut)| cut) {
            if t.len() > max_line_bytes {
                self.bytes += 1;
                self.first_bytes.get_or_insert_with(|| shown(t));
            } else {
                self.tokens += 1;
                self.first_tokens.get_or_insert_with(|| shown(t));
            }
        }
    }

    fn lines(&self, command: &str, what: &str, max_line_bytes: usize, max_length: Option<usize>) -> Vec<String> {
        let cut = Cut { command, what, texts: self.texts, max_line_bytes, max_length };
        cut.messages(
            self.first_bytes.as_ref().map(|f| (self.bytes, f.as_str())),
            self.first_tokens.as_ref().map(|f| (self.tokens, f.as_str())),
        )
    }
}

/// The words every command uses to say what it cut: `texts` texts ("lines", "texts", "distinct
/// lines of de.txt") of which some were longer than `max_line_bytes` bytes or `max_length`
/// tokens. `embed` names the first by its line number, the others by its beginning.
pub struct Cut<'a> {
    pub command: &'a str,
    pub what: &'a str,
    pub texts: u64,
    pub max_line_bytes: usize,
    pub max_length: Option<usize>,
}

impl Cut<'_> {
    /// One line per kind of cut that happened: (how many, the first, as shown).
    pub fn messages(&self, bytes: Option<(u64, &str)>, tokens: Option<(u64, &str)>) -> Vec<String> {
        let Self { command, what, texts, max_line_bytes, .. } = self;
        let mut out = Vec::new();
        if let Some((n, first)) = bytes.filter(|(n, _)| *n > 0) {
            out.push(format!(
                "{command}: {n} of {texts} {what} were longer than {max_line_bytes} bytes and only their first {max_line_bytes} bytes \
                 were embedded (first: {first}); --max-line-bytes reads more of them"
            ));
        }
        if let Some((n, first)) = tokens.filter(|(n, _)| *n > 0) {
            let limit = self.max_length.map_or_else(|| "the model's maximum".to_string(), |n| n.to_string());
            out.push(format!(
                "{command}: {n} of {texts} {what} were longer than {limit} tokens and were truncated: their vectors are of their \
                 beginnings (first: {first})"
            ));
        }
        out
    }
}

impl Embedder for NotingCuts {
    fn dim(&self) -> usize {
        self.inner.dim()
    }

    fn embed_checked(&self, texts: &[&str], batch_size: usize) -> Result<Embedded> {
        let e = self.inner.embed_checked(texts, batch_size)?;
        self.seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner).add(
            texts,
            &e.truncated,
            self.max_line_bytes,
        );
        Ok(e)
    }

    fn prefix(&self) -> &str {
        self.inner.prefix()
    }

    fn max_length(&self) -> Option<usize> {
        self.inner.max_length()
    }

    fn files(&self) -> Vec<std::path::PathBuf> {
        self.inner.files()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Cuts every text longer than 4 bytes, as a model of 4 tokens of one byte would.
    struct Short;
    impl Embedder for Short {
        fn dim(&self) -> usize {
            1
        }
        fn embed_checked(&self, texts: &[&str], _: usize) -> Result<Embedded> {
            Ok(Embedded {
                rows: texts.iter().map(|_| vec![1.0]).collect(),
                truncated: texts.iter().map(|t| t.len() > 4).collect(),
            })
        }
        fn max_length(&self) -> Option<usize> {
            Some(4)
        }
    }

    #[test]
    fn cuts_are_counted_by_kind_and_the_first_is_named() {
        let m = NotingCuts::new(Box::new(Short), 8);
        m.embed_checked(&["ab", "abcdef", "abcdefghij", "abcdefg"], 2).unwrap();
        m.embed_checked(&["a", "abcdefghijklmnop"], 2).unwrap();
        let c = std::mem::take(&mut *m.seen.lock().unwrap());
        let lines = c.lines("xsent eval", "texts", 8, Some(4));
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(
            lines[0].starts_with("xsent eval: 2 of 6 texts were longer than 8 bytes")
                && lines[0].contains("\"abcdefghij\""),
            "{lines:?}"
        );
        assert!(
            lines[1].starts_with("xsent eval: 2 of 6 texts were longer than 4 tokens")
                && lines[1].contains("\"abcdef\""),
            "{lines:?}"
        );
        // Nothing cut, nothing said; `say` starts the count again.
        m.embed_checked(&["ab"], 1).unwrap();
        m.say("xsent eval", "texts");
        assert!(m.seen.lock().unwrap().lines("x", "texts", 8, Some(4)).is_empty());
        assert_eq!(m.seen.lock().unwrap().texts, 0);
        assert_eq!(shown(&"é".repeat(70)), format!("{:?}… of 140 bytes", "é".repeat(60)));
    }
}
