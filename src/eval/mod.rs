//! Evaluation: one file per benchmark, plus metrics, published numbers and reports.

pub mod bootstrap;
pub mod bucc;
pub mod metrics;
pub mod published;
pub mod published_tables;
pub mod report;
pub mod sts;
pub mod tatoeba;
pub mod xsr;

use crate::model::Embedder;
use anyhow::Result;
use std::collections::HashMap;

/// Embed texts, each distinct text once, into a map text → vector.
pub fn embed_unique<'a, I: IntoIterator<Item = &'a str>>(
    enc: &dyn Embedder,
    texts: I,
    batch_size: usize,
) -> Result<HashMap<String, Vec<f32>>> {
    let mut unique: Vec<&str> = texts.into_iter().collect();
    unique.sort_unstable();
    unique.dedup();
    let vecs = enc.embed(&unique, batch_size)?;
    Ok(unique.into_iter().map(String::from).zip(vecs).collect())
}
