//! BUCC 2018 (seed 000 §6.2, seed 003 §4.2): margin-scored candidates (LASER's mining over
//! distinct sentences), a
//! threshold for best F1 on a training split applied to the test split, or — with one split —
//! the best-F1 threshold on that split itself, reported as an oracle threshold.

use crate::data::bucc::BuccSplit;
use crate::index::knn::{mine, Candidate, Margin, Matrix, Retrieval};
use crate::model::Embedder;
use anyhow::Result;
use serde::Serialize;
use std::collections::HashSet;

#[derive(Debug, Clone, Copy, Serialize)]
pub struct Prf {
    pub precision: f64,
    pub recall: f64,
    pub f1: f64,
    pub threshold: f64,
}

/// Precision, recall and F1 (×100) of the candidates scoring at least `threshold`.
pub fn prf_at(cands: &[Candidate], gold: &HashSet<(usize, usize)>, threshold: f64) -> Prf {
    let kept: Vec<&Candidate> = cands.iter().filter(|c| c.score >= threshold).collect();
    let tp = kept.iter().filter(|c| gold.contains(&(c.src, c.tgt))).count() as f64;
    prf(tp, kept.len() as f64, gold.len() as f64, threshold)
}

fn prf(tp: f64, predicted: f64, gold: f64, threshold: f64) -> Prf {
    let p = if predicted > 0.0 { tp / predicted } else { 0.0 };
    let r = if gold > 0.0 { tp / gold } else { 0.0 };
    let f1 = if p + r > 0.0 { 2.0 * p * r / (p + r) } else { 0.0 };
    Prf { precision: 100.0 * p, recall: 100.0 * r, f1: 100.0 * f1, threshold }
}

/// The threshold with the best F1 over candidates sorted best first: as LASER's `BuccOptimize`,
/// halfway between the last candidate kept and the next (lower) score, so that applied to
/// another split it keeps what scores between the two; the last candidate's own score when all
/// are kept.
pub fn best_threshold(cands: &[Candidate], gold: &HashSet<(usize, usize)>) -> Prf {
    let mut best = prf(0.0, 0.0, gold.len() as f64, f64::INFINITY);
    let mut tp = 0.0;
    for (i, c) in cands.iter().enumerate() {
        if gold.contains(&(c.src, c.tgt)) {
            tp += 1.0;
        }
        // Only cut between different scores: equal scores stand or fall together.
        if cands.get(i + 1).is_some_and(|n| n.score == c.score) {
            continue;
        }
        let threshold = cands.get(i + 1).map_or(c.score, |n| (c.score + n.score) / 2.0);
        let here = prf(tp, (i + 1) as f64, gold.len() as f64, threshold);
        if here.f1 > best.f1 {
            best = here;
        }
    }
    best
}

/// Which split of a BUCC pair gives the threshold (`None`: the scored split's own, an oracle
/// threshold) and which is scored, among the splits that have gold, by the names the data comes
/// with: xsent's `train` + `test`; XTREME's `dev` (BUCC's sample split) + `test` (BUCC's
/// training split); BUCC's own `sample` + `training` (as XTREME maps them), or `training` +
/// `test` (LASER's `bucc.sh`). The scored split is `test`, else `training`; the threshold comes
/// from the first of `train`, `training`, `dev`, `sample` that is another split.
pub fn split_roles(pair: &str, splits: &[String]) -> Result<(Option<String>, String)> {
    if let [only] = splits {
        return Ok((None, only.clone()));
    }
    let has = |name: &str| splits.iter().any(|s| s == name);
    let scored = ["test", "training"].into_iter().find(|n| has(n));
    let threshold = ["train", "training", "dev", "sample"].into_iter().find(|n| has(n) && Some(*n) != scored);
    match (threshold, scored) {
        (Some(t), Some(s)) => Ok((Some(t.to_string()), s.to_string())),
        _ => anyhow::bail!(
            "BUCC {pair}: found splits {splits:?} with gold; with more than one, xsent scores `test` (else `training`) with the threshold \
             of `train`, `training`, `dev` or `sample` (BUCC's names: sample + training; XTREME's: dev + test); \
             rename the files, or keep one split for an oracle threshold"
        ),
    }
}

/// Mining settings.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Settings {
    pub k: usize,
    pub margin: Margin,
    pub retrieval: Retrieval,
    /// Approximate neighbours from IVF indexes (`--index`) instead of the exact search.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub index: Option<crate::index::mine::AnnParams>,
}

/// Candidates of one split, as LASER's `bucc.sh` mines them (`mine_bitexts --unify`, then
/// `bucc.py`): each distinct sentence is embedded and searched once, so that a sentence met twice
/// in a side does not fill two of another sentence's k neighbours (seed 000 §6.2: "excluding
/// duplicates"), and each mined pair of texts stands for every pair of the ids that hold them.
pub fn candidates(enc: &dyn Embedder, split: &BuccSplit, s: Settings, batch_size: usize) -> Result<Vec<Candidate>> {
    let (src, src_ids) = crate::data::group_distinct(split.src.iter().map(String::as_str));
    let (tgt, tgt_ids) = crate::data::group_distinct(split.tgt.iter().map(String::as_str));
    let x = Matrix::embed_normalized(enc, &src, batch_size)?;
    let y = Matrix::embed_normalized(enc, &tgt, batch_size)?;
    let mut out = Vec::new();
    let mined = match &s.index {
        None => mine(&x, &y, s.k, s.margin, s.retrieval)?,
        Some(p) => {
            let (x2y, y2x) = crate::index::mine::knn_both_ivf(&x, &y, s.k, p)?;
            crate::index::knn::mine_neighbours(&x2y, &y2x, s.k, s.margin, s.retrieval)?
        }
    };
    for c in mined {
        for &i in &src_ids[c.src] {
            out.extend(tgt_ids[c.tgt].iter().map(|&j| Candidate { src: i, tgt: j, score: c.score }));
        }
    }
    Ok(out)
}

#[derive(Debug, Clone, Serialize)]
pub struct BuccScore {
    pub pair: String,
    pub split: String,
    /// The split the threshold was chosen on (`train`, `dev`, …), or `oracle` (this split's own gold).
    pub threshold_from: String,
    pub scores: Prf,
    pub candidates: usize,
    /// Distinct gold pairs.
    pub gold: usize,
    /// Bootstrap 95 % interval of F1 ([`super::bootstrap`]: source sentences resampled; an
    /// oracle threshold chosen again on each resample, one from another split kept).
    pub f1_ci95: super::bootstrap::Interval,
    /// The candidates and gold pairs of each source sentence.
    #[serde(skip)]
    pub items: super::bootstrap::Items,
}

/// Evaluate `test` with the threshold chosen on `train` when given, else the oracle threshold.
pub fn evaluate(
    enc: &dyn Embedder,
    train: Option<&BuccSplit>,
    test: &BuccSplit,
    s: Settings,
    batch_size: usize,
) -> Result<BuccScore> {
    let gold_set = |sp: &BuccSplit| sp.gold.iter().copied().collect::<HashSet<_>>();
    let test_c = candidates(enc, test, s, batch_size)?;
    let (scores, from) = match train {
        Some(tr) => {
            let t = best_threshold(&candidates(enc, tr, s, batch_size)?, &gold_set(tr)).threshold;
            (prf_at(&test_c, &gold_set(test), t), tr.split.as_str())
        }
        None => (best_threshold(&test_c, &gold_set(test)), "oracle"),
    };
    let items = mining_items(&test_c, test, (from != "oracle").then_some(scores.threshold));
    Ok(BuccScore {
        pair: test.pair.clone(),
        split: test.split.clone(),
        threshold_from: from.into(),
        scores,
        candidates: test_c.len(),
        gold: gold_set(test).len(),
        f1_ci95: super::bootstrap::intervals(&items)[0],
        items,
    })
}

/// The bootstrap items of a scored split: its candidates (sorted best first, as mined) with
/// their gold flags, and the distinct gold pairs of each source sentence.
fn mining_items(cands: &[Candidate], split: &BuccSplit, threshold: Option<f64>) -> super::bootstrap::Items {
    let gold: HashSet<(usize, usize)> = split.gold.iter().copied().collect();
    let mut per_src = std::collections::BTreeMap::new();
    for &(s, _) in &gold {
        *per_src.entry(s as u32).or_insert(0u32) += 1;
    }
    super::bootstrap::Items::Mining {
        units: split.src.len(),
        candidates: cands.iter().map(|c| (c.src as u32, c.score, gold.contains(&(c.src, c.tgt)))).collect(),
        gold: per_src.into_iter().collect(),
        threshold,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The splits that give the threshold and are scored, under xsent's, XTREME's, BUCC's and
    /// LASER's names; one split is scored with its own (oracle) threshold.
    #[test]
    fn split_roles_by_name() {
        let roles = |names: &[&str]| split_roles("zh-en", &names.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        let ok = |t: Option<&str>, s: &str| (t.map(String::from), s.to_string());
        assert_eq!(roles(&["dev"]).unwrap(), ok(None, "dev"));
        assert_eq!(roles(&["test", "train"]).unwrap(), ok(Some("train"), "test"));
        assert_eq!(roles(&["dev", "test"]).unwrap(), ok(Some("dev"), "test"));
        assert_eq!(roles(&["sample", "training"]).unwrap(), ok(Some("sample"), "training"));
        assert_eq!(roles(&["training", "test"]).unwrap(), ok(Some("training"), "test"));
        assert_eq!(roles(&["sample", "training", "test"]).unwrap(), ok(Some("training"), "test"));
        let err = roles(&["a", "b"]).unwrap_err().to_string();
        assert!(err.contains("found splits [\"a\", \"b\"]") && err.contains("XTREME's: dev + test"), "{err}");
        assert!(roles(&["dev", "sample"]).is_err(), "nothing to score");
    }

    #[test]
    fn precision_recall_f1_by_hand() {
        let c = |s: usize, t: usize, score: f64| Candidate { src: s, tgt: t, score };
        // Sorted best first; gold = {(0,0), (1,1), (2,2), (5,5)}.
        let cands = vec![c(0, 0, 1.3), c(1, 1, 1.2), c(3, 4, 1.1), c(2, 2, 1.0), c(4, 3, 0.9)];
        let gold: HashSet<(usize, usize)> = [(0, 0), (1, 1), (2, 2), (5, 5)].into_iter().collect();
        // Cut after 2: P 2/2, R 2/4 -> F1 2/3. After 4: P 3/4, R 3/4 -> F1 3/4 (best). After 5: P 3/5, R 3/4 -> F1 2/3.
        let b = best_threshold(&cands, &gold);
        assert!(
            (b.f1 - 75.0).abs() < 1e-9 && (b.precision - 75.0).abs() < 1e-9 && (b.recall - 75.0).abs() < 1e-9,
            "{b:?}"
        );
        // Halfway between the last kept score (1.0) and the next (0.9), as LASER's BuccOptimize.
        assert!((b.threshold - 0.95).abs() < 1e-12, "{b:?}");
        let at = prf_at(&cands, &gold, 1.15);
        assert!((at.precision - 100.0).abs() < 1e-9 && (at.recall - 50.0).abs() < 1e-9);
        assert!((at.f1 - 200.0 / 3.0).abs() < 1e-9);
        // Ties: equal scores are kept or dropped together.
        let tied = vec![c(0, 0, 1.0), c(9, 9, 1.0)];
        let b = best_threshold(&tied, &[(0, 0)].into_iter().collect());
        assert!((b.precision - 50.0).abs() < 1e-9);
        assert_eq!(b.threshold, 1.0, "all kept: the last score itself");
    }
}
