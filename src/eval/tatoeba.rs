//! Tatoeba (seed 003 §4.3, seed 000 App. E): cosine nearest neighbour among the other side's
//! sentences, in both directions; accuracy ×100 of xx→en, en→xx and their mean.

use crate::data::tatoeba::TatoebaSet;
use crate::model::Embedder;
use anyhow::Result;
use candle_core::{Device, Tensor};
use serde::Serialize;
use std::collections::HashMap;

#[derive(Debug, Clone, Serialize)]
pub struct LangScore {
    pub lang: String,
    pub n: usize,
    pub xx_to_en: f64,
    pub en_to_xx: f64,
    pub mean: f64,
    /// Bootstrap 95 % interval of `mean` ([`super::bootstrap`]).
    pub mean_ci95: super::bootstrap::Interval,
    /// Hit or miss of each query, xx→en then en→xx.
    #[serde(skip)]
    pub items: super::bootstrap::Items,
}

/// Rows L2-normalised, as one `[n, d]` tensor.
fn matrix(rows: &[&Vec<f32>]) -> Result<Tensor> {
    let d = rows.first().map(|r| r.len()).unwrap_or(0);
    let mut flat = Vec::with_capacity(rows.len() * d);
    for r in rows {
        let norm = r.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
        flat.extend(r.iter().map(|x| x / norm));
    }
    Ok(Tensor::from_vec(flat, (rows.len(), d), &Device::Cpu)?)
}

/// Whether each row of `sim` has its maximum on the diagonal (first maximum on ties).
fn diagonal_hits(sim: &Tensor) -> Result<Vec<bool>> {
    let best = sim.argmax(1)?.to_vec1::<u32>()?;
    Ok(best.iter().enumerate().map(|(i, &j)| i as u32 == j).collect())
}

/// Score one language pair from precomputed embeddings.
pub fn score(set: &TatoebaSet, vecs: &HashMap<String, Vec<f32>>) -> Result<LangScore> {
    let x = matrix(&set.xx.iter().map(|s| &vecs[s]).collect::<Vec<_>>())?;
    let e = matrix(&set.eng.iter().map(|s| &vecs[s]).collect::<Vec<_>>())?;
    let sim = crate::model::matmul::matmul(&x, &e.t()?)?;
    let items = super::bootstrap::Items::hits(&[&diagonal_hits(&sim)?, &diagonal_hits(&sim.t()?.contiguous()?)?]);
    let [mean, xx_to_en, en_to_xx] = items.scores(None)[..] else { unreachable!("two directions give three scores") };
    let mean_ci95 = super::bootstrap::intervals(&items)[0];
    Ok(LangScore { lang: set.lang.clone(), n: set.xx.len(), xx_to_en, en_to_xx, mean, mean_ci95, items })
}

/// Evaluate every set; sentences met again anywhere in the run are embedded once.
pub fn evaluate(enc: &dyn Embedder, sets: &[TatoebaSet], batch_size: usize) -> Result<Vec<LangScore>> {
    let texts = sets.iter().flat_map(|s| s.xx.iter().chain(&s.eng).map(String::as_str));
    let vecs = super::embed_unique(enc, texts, batch_size)?;
    sets.iter().map(|s| score(s, &vecs)).collect()
}

/// The bootstrap interval of the average over languages (each language resampled on its own).
pub fn average_ci95(scores: &[LangScore]) -> super::bootstrap::Interval {
    super::bootstrap::mean_interval(&scores.iter().map(|s| &s.items).collect::<Vec<_>>())
}

/// Markdown table with the published numbers beside ours (one column per system, each value
/// from the first seed table that reports the language), and the average over languages.
pub fn markdown(scores: &[LangScore]) -> String {
    let cols = super::published::by_system(super::published_tables::TATOEBA);
    let mut out = String::from("| Tatoeba | pairs | xx→en | en→xx | mean | 95 % CI |");
    for c in &cols {
        out += &format!(" {} |", c.system);
    }
    out += "\n|---|---:|---:|---:|---:|---:|";
    out += &"---:|".repeat(cols.len());
    out += "\n";
    for s in scores {
        out += &format!(
            "| {} | {} | {:.2} | {:.2} | {:.2} | {} |",
            s.lang,
            s.n,
            s.xx_to_en,
            s.en_to_xx,
            s.mean,
            super::bootstrap::show(s.mean_ci95)
        );
        for c in &cols {
            out += &c.get(&s.lang).map(|(v, _)| format!(" {v:.1} |")).unwrap_or_else(|| " – |".into());
        }
        out += "\n";
    }
    let n = scores.len().max(1) as f64;
    let avg = |f: fn(&LangScore) -> f64| scores.iter().map(f).sum::<f64>() / n;
    out += &format!(
        "| **average ({} languages)** | | {:.2} | {:.2} | **{:.2}** | {} |{}\n",
        scores.len(),
        avg(|s| s.xx_to_en),
        avg(|s| s.en_to_xx),
        avg(|s| s.mean),
        super::bootstrap::show(average_ci95(scores)),
        " |".repeat(cols.len())
    );
    out += &format!("\n95 % CI: {} (the average: within each language).\n", super::bootstrap::DESCRIPTION);
    out += "Published columns: accuracy ×100 (mean of both directions) as printed in the seeds, from the first table listing the language; – = not reported.\n";
    for c in &cols {
        out += &format!("- {}: {}\n", c.system, c.sources());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accuracy_both_directions_by_hand() -> Result<()> {
        // xx sentence 0 is nearest to en 0, xx 1 nearest to en 0 (wrong), xx 2 nearest to en 2.
        // en 0 -> xx 0 (cos 1 vs 0.8), en 1 -> xx 1 (only one close), en 2 -> xx 2.
        let set = TatoebaSet {
            lang: "xxx".into(),
            xx: vec!["a".into(), "b".into(), "c".into()],
            eng: vec!["A".into(), "B".into(), "C".into()],
            files: Vec::new(),
        };
        let v = |x: &[f32]| x.to_vec();
        let vecs: HashMap<String, Vec<f32>> = [
            ("a", v(&[1.0, 0.0, 0.0])),
            ("b", v(&[0.8, 0.6, 0.0])),
            ("c", v(&[0.0, 0.0, 1.0])),
            ("A", v(&[1.0, 0.0, 0.0])),
            ("B", v(&[0.0, 1.0, 0.0])),
            ("C", v(&[0.0, 0.0, 1.0])),
        ]
        .into_iter()
        .map(|(k, x)| (k.to_string(), x))
        .collect();
        let s = score(&set, &vecs)?;
        assert!((s.xx_to_en - 200.0 / 3.0).abs() < 1e-9, "{s:?}");
        assert!((s.en_to_xx - 100.0).abs() < 1e-9, "{s:?}");
        assert!((s.mean - 250.0 / 3.0).abs() < 1e-9);
        Ok(())
    }
}
