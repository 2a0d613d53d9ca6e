//! STS 2017 (seed 003 §4.1): Spearman ×100 of cosine similarity vs gold (main score), Pearson
//! ×100, and the language-bias score of seed 003 §7 (Table 8).

use super::metrics::{cosine, pearson, spearman};
use crate::data::sts::StsSet;
use crate::model::Embedder;
use anyhow::Result;
use serde::Serialize;

#[derive(Debug, Clone, Serialize)]
pub struct SetScore {
    pub name: String,
    pub n: usize,
    /// Spearman ρ × 100.
    pub spearman: f64,
    /// Pearson r × 100.
    pub pearson: f64,
}

/// Seed 003 §7: all pairs pooled into one set. A model whose similarities are comparable across
/// languages loses nothing: `actual` close to `expected`.
#[derive(Debug, Clone, Serialize)]
pub struct LanguageBias {
    /// Mean of the per-set Spearman scores.
    pub expected: f64,
    /// Spearman on the pooled pairs.
    pub actual: f64,
    /// `actual - expected`.
    pub difference: f64,
}

/// Score each set with cosine similarity; each distinct sentence is embedded once.
pub fn evaluate(enc: &dyn Embedder, sets: &[StsSet], batch_size: usize) -> Result<(Vec<SetScore>, Option<LanguageBias>)> {
    let texts = sets.iter().flat_map(|s| s.pairs.iter().flat_map(|(a, b)| [a.as_str(), b.as_str()]));
    let vecs = super::embed_unique(enc, texts, batch_size)?;
    let mut scores = Vec::new();
    let (mut all_sim, mut all_gold) = (Vec::new(), Vec::new());
    for set in sets {
        let sim: Vec<f64> = set.pairs.iter().map(|(a, b)| cosine(&vecs[a], &vecs[b])).collect();
        scores.push(SetScore {
            name: set.name.clone(),
            n: sim.len(),
            spearman: 100.0 * spearman(&sim, &set.gold),
            pearson: 100.0 * pearson(&sim, &set.gold),
        });
        all_sim.extend(sim);
        all_gold.extend(&set.gold);
    }
    let bias = (sets.len() > 1).then(|| {
        let expected = scores.iter().map(|s| s.spearman).sum::<f64>() / scores.len() as f64;
        let actual = 100.0 * spearman(&all_sim, &all_gold);
        LanguageBias { expected, actual, difference: actual - expected }
    });
    Ok((scores, bias))
}

/// The markdown table: our scores and the published ones for the same sets.
pub fn markdown(scores: &[SetScore], bias: Option<&LanguageBias>) -> String {
    use super::published::STS17_SPEARMAN as P;
    let mut out = String::from("| STS 2017 | pairs | Spearman ×100 | Pearson ×100 |");
    for p in P {
        out += &format!(" {} ({}) |", p.system, p.source);
    }
    out += "\n|---|---:|---:|---:|";
    out += &"---:|".repeat(P.len());
    out += "\n";
    for s in scores {
        out += &format!("| {} | {} | {:.2} | {:.2} |", s.name, s.n, s.spearman, s.pearson);
        for p in P {
            out += &match p.get(&s.name) {
                Some(v) => format!(" {v:.1} |"),
                None => " – |".into(),
            };
        }
        out += "\n";
    }
    if let Some(b) = bias {
        out += &format!(
            "\nLanguage bias (seed 003 §7, all {} sets pooled): expected {:.2}, actual {:.2}, difference {:+.2}\n",
            scores.len(),
            b.expected,
            b.actual,
            b.difference
        );
    }
    out += "Published columns: Spearman ×100 as printed in the seeds (EN-ES = es-en track 4a, EN-AR = ar-en); – = not reported.\n";
    out
}
