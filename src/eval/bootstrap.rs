//! Bootstrap confidence intervals, and paired differences between two models.
//!
//! Every score of a report is kept with the per-item outcomes it was computed from
//! ([`Items`]): the cosine and gold score of each STS pair, the hit or miss of each retrieval
//! query, the mined candidates of each BUCC source sentence. An interval resamples those items
//! with replacement ([`RESAMPLES`] times, seeded with [`SEED`], so that a report is the same every
//! time) and takes the 2.5th and 97.5th percentiles of the score (the percentile bootstrap).
//! A paired difference draws the same items for both models in every resample (Koehn 2004's
//! paired bootstrap), so what the two sets share cancels out.
//!
//! The unit of resampling is the test item: an STS pair, a retrieval query (a Tatoeba line pair
//! in both directions), a BUCC source sentence with all its candidates and gold pairs. The
//! average over Tatoeba languages resamples within each language (stratified). A BUCC threshold
//! taken from another split stays fixed; an oracle threshold (chosen on the scored split) is
//! chosen again on every resample, as it would be on another sample.

use super::metrics::{pearson, spearman};
use anyhow::{ensure, Result};
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

/// How the tables describe the intervals.
pub const DESCRIPTION: &str =
    "percentile bootstrap over the test items (pairs, queries, source sentences), 1,000 resamples, seed 20261126";

/// Resamples per interval.
pub const RESAMPLES: usize = 1000;
/// The resampling seed.
pub const SEED: u64 = 20_261_126;

/// The per-item outcomes behind a score.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Items {
    /// Scored pairs: the model's cosine and the gold score of each; Spearman (main) and Pearson.
    Correlation { sim: Vec<f64>, gold: Vec<f64> },
    /// Retrieval: per direction, one character per query (`1` hit, `0` miss), all of one length;
    /// the mean accuracy over directions (main) and each direction.
    Hits { directions: Vec<String> },
    /// Mining: `units` source sentences; the candidates (source, margin score, is gold) sorted
    /// best first; the gold pairs of each source (source, count); the threshold (none: the best
    /// one for the items, an oracle threshold). F1 (main), precision, recall.
    Mining { units: usize, candidates: Vec<(u32, f64, bool)>, gold: Vec<(u32, u32)>, threshold: Option<f64> },
}

/// A percentile interval.
pub type Interval = [f64; 2];

/// An interval as the tables print it.
pub fn show(i: Interval) -> String {
    format!("[{:.2}, {:.2}]", i[0], i[1])
}

impl Items {
    /// Items of one Tatoeba or XSR set from its hit flags (one list per direction).
    pub fn hits(directions: &[&[bool]]) -> Self {
        Items::Hits {
            directions: directions.iter().map(|d| d.iter().map(|&h| if h { '1' } else { '0' }).collect()).collect(),
        }
    }

    /// Whether the items are whole, as an evaluator writes them: scored pairs of one length and
    /// finite; at least one direction of hits, all of one length, of `0`/`1` only; candidates
    /// and gold pairs naming sources below `units`, finite scores and threshold. A report read
    /// back (`--compare`) may have been edited or damaged; scoring such items would index out
    /// of bounds or give a wrong number.
    pub fn check(&self) -> Result<()> {
        match self {
            Items::Correlation { sim, gold } => {
                ensure!(sim.len() == gold.len(), "{} similarities but {} gold scores", sim.len(), gold.len());
                ensure!(
                    sim.iter().chain(gold).all(|x| x.is_finite()),
                    "a similarity or gold score is not a finite number"
                );
            }
            Items::Hits { directions } => {
                ensure!(!directions.is_empty(), "no directions of hits");
                let n = directions[0].len();
                ensure!(directions.iter().all(|d| d.len() == n), "directions of hits of different lengths");
                ensure!(
                    directions.iter().all(|d| d.bytes().all(|c| c == b'0' || c == b'1')),
                    "hits other than 0 and 1"
                );
            }
            Items::Mining { units, candidates, gold, threshold } => {
                ensure!(
                    candidates.iter().all(|&(s, score, _)| (s as usize) < *units && score.is_finite()),
                    "a candidate names a source beyond the {units} sources, or has a score that is not a finite number"
                );
                ensure!(
                    gold.iter().all(|&(s, _)| (s as usize) < *units),
                    "a gold pair names a source beyond the {units} sources"
                );
                ensure!(threshold.is_none_or(f64::is_finite), "the threshold is not a finite number");
            }
        }
        Ok(())
    }

    /// Whether `other` was made on the same data as these items: the same kind and count and,
    /// where the items carry it, the same gold (STS gold scores, BUCC gold pairs) and directions.
    fn same_data(&self, other: &Items) -> Result<()> {
        ensure!(std::mem::discriminant(self) == std::mem::discriminant(other), "scores of different kinds");
        ensure!(
            self.units() == other.units(),
            "{} items against {}: the reports were not made on the same data",
            self.units(),
            other.units()
        );
        match (self, other) {
            (Items::Correlation { gold: a, .. }, Items::Correlation { gold: b, .. }) => {
                ensure!(a == b, "the gold scores differ: the reports were not made on the same data")
            }
            (Items::Hits { directions: a }, Items::Hits { directions: b }) => ensure!(
                a.len() == b.len(),
                "{} directions against {}: the reports were not made on the same data",
                a.len(),
                b.len()
            ),
            (Items::Mining { gold: a, threshold: ta, .. }, Items::Mining { gold: b, threshold: tb, .. }) => {
                ensure!(a == b, "the gold pairs differ: the reports were not made on the same data");
                ensure!(
                    ta.is_some() == tb.is_some(),
                    "one threshold is fixed, the other chosen on the scored split: the scores are not comparable"
                );
            }
            _ => {}
        }
        Ok(())
    }

    /// How many items can be drawn.
    pub fn units(&self) -> usize {
        match self {
            Items::Correlation { sim, .. } => sim.len(),
            Items::Hits { directions } => directions.first().map_or(0, String::len),
            Items::Mining { units, .. } => *units,
        }
    }

    /// Names of the scores, main first.
    pub fn names(&self) -> Vec<&'static str> {
        match self {
            Items::Correlation { .. } => vec!["spearman", "pearson"],
            Items::Hits { directions } if directions.len() == 2 => vec!["mean", "dir1", "dir2"],
            Items::Hits { .. } => vec!["mean"],
            Items::Mining { .. } => vec!["f1", "precision", "recall"],
        }
    }

    /// The scores (×100, in the order of [`Items::names`]) when item i is drawn `w[i]` times
    /// (`None`: each once, the reported scores).
    pub fn scores(&self, w: Option<&[u32]>) -> Vec<f64> {
        let weight = |i: usize| w.map_or(1, |w| w[i]);
        match self {
            Items::Correlation { sim, gold } => {
                let (mut x, mut y) = (Vec::with_capacity(sim.len()), Vec::with_capacity(sim.len()));
                for i in 0..sim.len() {
                    for _ in 0..weight(i) {
                        x.push(sim[i]);
                        y.push(gold[i]);
                    }
                }
                vec![100.0 * spearman(&x, &y), 100.0 * pearson(&x, &y)]
            }
            Items::Hits { directions } => {
                let accs: Vec<f64> = directions
                    .iter()
                    .map(|d| {
                        let (mut hit, mut all) = (0u64, 0u64);
                        for (i, c) in d.bytes().enumerate() {
                            let w = weight(i) as u64;
                            all += w;
                            hit += if c == b'1' { w } else { 0 };
                        }
                        100.0 * hit as f64 / all.max(1) as f64
                    })
                    .collect();
                let mean = accs.iter().sum::<f64>() / accs.len().max(1) as f64;
                if accs.len() == 2 {
                    vec![mean, accs[0], accs[1]]
                } else {
                    vec![mean]
                }
            }
            Items::Mining { candidates, gold, threshold, .. } => {
                let gold_n: f64 = gold.iter().map(|&(s, n)| (n * weight(s as usize)) as f64).sum();
                let prf = |tp: f64, pred: f64| {
                    let p = if pred > 0.0 { tp / pred } else { 0.0 };
                    let r = if gold_n > 0.0 { tp / gold_n } else { 0.0 };
                    let f = if p + r > 0.0 { 2.0 * p * r / (p + r) } else { 0.0 };
                    [100.0 * f, 100.0 * p, 100.0 * r]
                };
                let (mut tp, mut pred) = (0.0, 0.0);
                let mut best = prf(0.0, 0.0);
                for (i, &(s, score, is_gold)) in candidates.iter().enumerate() {
                    if threshold.is_some_and(|t| score < t) {
                        break;
                    }
                    let w = weight(s as usize) as f64;
                    pred += w;
                    tp += if is_gold { w } else { 0.0 };
                    // A cut only between different scores: equal scores stand or fall together.
                    if threshold.is_none() && !candidates.get(i + 1).is_some_and(|n| n.1 == score) {
                        let here = prf(tp, pred);
                        if here[0] > best[0] {
                            best = here;
                        }
                    }
                }
                match threshold {
                    Some(_) => prf(tp, pred).to_vec(),
                    None => best.to_vec(),
                }
            }
        }
    }
}

/// One resample's draw counts for `n` items.
fn draw(n: usize, rng: &mut rand_chacha::ChaCha8Rng, w: &mut Vec<u32>) {
    w.clear();
    w.resize(n, 0);
    for _ in 0..n {
        w[rng.random_range(0..n)] += 1;
    }
}

/// The 2.5th and 97.5th percentiles (linear interpolation between order statistics, as numpy's
/// default); NaN values (a correlation on a resample with constant scores) are left out.
pub fn percentiles(mut v: Vec<f64>) -> Interval {
    v.retain(|x| x.is_finite());
    if v.is_empty() {
        return [f64::NAN, f64::NAN];
    }
    v.sort_by(f64::total_cmp);
    let at = |q: f64| {
        let pos = q * (v.len() - 1) as f64;
        let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
        v[lo] + (v[hi] - v[lo]) * (pos - lo as f64)
    };
    [at(0.025), at(0.975)]
}

/// 95 % intervals of every score of `items` (in the order of [`Items::names`]).
pub fn intervals(items: &Items) -> Vec<Interval> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(SEED);
    let names = items.names().len();
    let mut samples = vec![Vec::with_capacity(RESAMPLES); names];
    let mut w = Vec::new();
    for _ in 0..RESAMPLES {
        draw(items.units(), &mut rng, &mut w);
        for (s, v) in samples.iter_mut().zip(items.scores(Some(&w))) {
            s.push(v);
        }
    }
    samples.into_iter().map(percentiles).collect()
}

/// The 95 % interval of the mean main score over several sets (each resampled on its own, the
/// mean taken per resample): the Tatoeba average over languages.
pub fn mean_interval(sets: &[&Items]) -> Interval {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(SEED);
    let mut w = Vec::new();
    let means = (0..RESAMPLES)
        .map(|_| {
            sets.iter()
                .map(|s| {
                    draw(s.units(), &mut rng, &mut w);
                    s.scores(Some(&w))[0]
                })
                .sum::<f64>()
                / sets.len().max(1) as f64
        })
        .collect();
    percentiles(means)
}

/// A paired difference: this model's main score minus the other's, its 95 % interval, and the
/// share of resamples in which the difference has the other sign than the observed one (or is
/// zero): a one-sided bootstrap p-value.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Difference {
    pub this: f64,
    pub other: f64,
    pub difference: f64,
    pub ci95: Interval,
    pub p: f64,
}

/// The paired difference of the mean main score over sets (one set: that set's score); `a[i]`
/// and `b[i]` must hold the same items (same count) in the same order.
pub fn paired(a: &[&Items], b: &[&Items]) -> Result<Difference> {
    ensure!(a.len() == b.len(), "{} sets against {}", a.len(), b.len());
    for (x, y) in a.iter().zip(b) {
        x.check()?;
        y.check()?;
        x.same_data(y)?;
    }
    let mean = |s: &[&Items], w: Option<&[Vec<u32>]>| {
        s.iter().enumerate().map(|(i, x)| x.scores(w.map(|w| w[i].as_slice()))[0]).sum::<f64>() / s.len().max(1) as f64
    };
    let (this, other) = (mean(a, None), mean(b, None));
    ensure!(
        this.is_finite() && other.is_finite(),
        "a score is not a number ({this} against {other}): a correlation of similarities that are all the same"
    );
    let difference = this - other;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(SEED);
    let mut ws: Vec<Vec<u32>> = vec![Vec::new(); a.len()];
    let mut diffs = Vec::with_capacity(RESAMPLES);
    for _ in 0..RESAMPLES {
        for (w, x) in ws.iter_mut().zip(a) {
            draw(x.units(), &mut rng, w);
        }
        diffs.push(mean(a, Some(&ws)) - mean(b, Some(&ws)));
    }
    let against = diffs.iter().filter(|d| if difference >= 0.0 { **d <= 0.0 } else { **d >= 0.0 }).count();
    Ok(Difference { this, other, difference, ci95: percentiles(diffs), p: against as f64 / RESAMPLES as f64 })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_interpolate_as_numpy() {
        // numpy.percentile(range(1, 101), [2.5, 97.5]) = [3.475, 97.525]
        let [lo, hi] = percentiles((1..=100).map(f64::from).collect());
        assert!((lo - 3.475).abs() < 1e-12 && (hi - 97.525).abs() < 1e-12, "{lo} {hi}");
    }

    #[test]
    fn weights_are_draws() {
        // Hits: item 0 hit, item 1 miss; drawing item 0 three times and item 1 once gives 75 %.
        let h = Items::hits(&[&[true, false]]);
        assert_eq!(h.scores(None), vec![50.0]);
        assert_eq!(h.scores(Some(&[3, 1])), vec![75.0]);
        // Correlation: drawing an item twice is the same as listing it twice.
        let c = Items::Correlation { sim: vec![0.1, 0.5, 0.3, 0.9], gold: vec![1.0, 3.0, 2.0, 2.5] };
        let twice = Items::Correlation { sim: vec![0.1, 0.5, 0.5, 0.3, 0.9], gold: vec![1.0, 3.0, 3.0, 2.0, 2.5] };
        assert_eq!(c.scores(Some(&[1, 2, 1, 1])), twice.scores(None));
    }

    /// Damaged items (as an edited report holds them) and items of other data are refused by
    /// `paired`, never scored: before, each of the first four panicked (index out of bounds) and
    /// reversed gold scores gave a difference of +81.87 (an outside probe).
    #[test]
    fn damaged_or_foreign_items_are_refused() {
        let c = |sim: Vec<f64>, gold: Vec<f64>| Items::Correlation { sim, gold };
        let good = c(vec![0.1, 0.5, 0.3, 0.9], vec![1.0, 3.0, 2.0, 2.5]);
        let mining = |units, candidates, gold| Items::Mining { units, candidates, gold, threshold: None };
        let good_m = mining(3, vec![(0, 1.0, true)], vec![(0, 1)]);
        let bad: Vec<(Items, Items, &str)> = vec![
            (good.clone(), c(vec![0.1, 0.5, 0.3, 0.9], vec![1.0, 3.0, 2.0]), "4 similarities but 3 gold scores"),
            (
                Items::hits(&[&[true, false]]),
                Items::Hits { directions: vec!["10".into(), "1000".into()] },
                "different lengths",
            ),
            (good_m.clone(), mining(3, vec![(99999, 1.0, true)], vec![(0, 1)]), "beyond the 3 sources"),
            (good_m.clone(), mining(3, vec![(0, 1.0, true)], vec![(99999, 1)]), "beyond the 3 sources"),
            (good.clone(), c(vec![0.1, 0.5, 0.3, f64::NAN], vec![1.0, 3.0, 2.0, 2.5]), "not a finite number"),
            (Items::hits(&[&[true, false]]), Items::Hits { directions: vec!["1x".into()] }, "other than 0 and 1"),
            (good.clone(), c(vec![0.1, 0.5, 0.3, 0.9], vec![2.5, 2.0, 3.0, 1.0]), "the gold scores differ"),
            (good_m.clone(), mining(3, vec![(0, 1.0, true)], vec![(1, 1)]), "the gold pairs differ"),
            (Items::hits(&[&[true, false], &[true, true]]), Items::hits(&[&[true, true]]), "2 directions against 1"),
            (good.clone(), c(vec![0.5; 4], vec![1.0, 3.0, 2.0, 2.5]), "a score is not a number"),
        ];
        for (a, b, want) in bad {
            let e = paired(&[&a], &[&b]).unwrap_err().to_string();
            assert!(e.contains(want), "{want}: {e}");
        }
        assert_eq!(paired(&[&good], &[&good]).unwrap().difference, 0.0);
    }

    #[test]
    fn mining_scores_by_hand() {
        // Candidates best first: src 0 gold, src 1 not, src 2 gold, src 3 not; 3 gold pairs (src 0, 2, 4).
        let m = |threshold| Items::Mining {
            units: 5,
            candidates: vec![(0, 1.3, true), (1, 1.2, false), (2, 1.1, true), (3, 1.0, false)],
            gold: vec![(0, 1), (2, 1), (4, 1)],
            threshold,
        };
        // Oracle: cut after 3: P 2/3, R 2/3 -> F1 2/3 (after 1: P 1, R 1/3 -> 1/2).
        let s = m(None).scores(None);
        assert!((s[0] - 200.0 / 3.0).abs() < 1e-9, "{s:?}");
        // Fixed threshold 1.25 keeps one candidate: P 1, R 1/3.
        let s = m(Some(1.25)).scores(None);
        assert!((s[1] - 100.0).abs() < 1e-9 && (s[2] - 100.0 / 3.0).abs() < 1e-9, "{s:?}");
        // Source 0 drawn twice, source 2 not at all: tp 2, gold 3 (0 twice, 4 once), the best cut
        // after the first candidate: P 1, R 2/3 -> F1 0.8.
        let s = m(None).scores(Some(&[2, 1, 0, 1, 1]));
        assert!((s[0] - 80.0).abs() < 1e-9, "{s:?}");
    }

    /// The interval covers the score, shrinks with more items, and is the same every time; a
    /// paired difference of a model with itself is exactly 0, and of a clearly better model is
    /// positive with p near 0.
    #[test]
    fn intervals_and_paired_differences() {
        let mut r = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        let hits =
            |n: usize, p: f64, r: &mut rand_chacha::ChaCha8Rng| (0..n).map(|_| r.random_bool(p)).collect::<Vec<bool>>();
        let small = Items::hits(&[&hits(100, 0.7, &mut r)]);
        let large = Items::hits(&[&hits(10_000, 0.7, &mut r)]);
        let [lo, hi] = intervals(&small)[0];
        let s = small.scores(None)[0];
        assert!(lo < s && s < hi, "{lo} {s} {hi}");
        let [llo, lhi] = intervals(&large)[0];
        assert!(lhi - llo < (hi - lo) / 5.0, "{llo} {lhi} vs {lo} {hi}");
        assert_eq!(intervals(&small), intervals(&small));
        let same = paired(&[&small], &[&small]).unwrap();
        assert_eq!((same.difference, same.ci95), (0.0, [0.0, 0.0]));
        let a = hits(2000, 0.8, &mut r);
        // The other model misses every fifth query the first one hits.
        let b: Vec<bool> = a.iter().enumerate().map(|(i, &h)| h && i % 5 != 0).collect();
        let d = paired(&[&Items::hits(&[&a])], &[&Items::hits(&[&b])]).unwrap();
        assert!(d.difference > 10.0 && d.ci95[0] > 0.0 && d.p < 0.01, "{d:?}");
        assert!(paired(&[&small], &[&large]).is_err(), "different item counts");
    }
}
