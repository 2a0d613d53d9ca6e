//! The training and validation pairs of a config's `[data]`, shared by the recipes that train
//! on parallel sentences: held-out source sentences, or `[[data.val_sources]]`.

use super::config::Config;
use crate::data::bitext::{read_sources, Pair};
use crate::model::encoder::Rng;
use anyhow::{bail, Result};
use rand::seq::SliceRandom;
use rand::SeedableRng;

/// The training and validation pairs of `[data]`: `val_size` sentences held out of `sources`
/// ([`split_by_source`]), or, with `val_sources`, one pair of each of their distinct source
/// sentences (languages in turn) to validate and every pair of `sources` whose source sentence
/// is not among them to train. Prints the two counts.
pub fn train_val_pairs(cfg: &Config, dc: &mut crate::train::decontam::Decontam) -> Result<(Vec<Pair>, Vec<Pair>)> {
    let data = &cfg.data;
    if data.val_size == 0 && data.val_sources.is_empty() {
        // Every validation (before the first step, at the end) scores held-out pairs.
        bail!(
            "data.val_size = 0: the {} recipe validates on held-out pairs; set data.val_size > 0 (e.g. 500), \
             or give [[data.val_sources]]",
            cfg.recipe
        );
    }
    let pairs = dc.pairs("data.sources", read_sources(&data.sources, "data.sources")?);
    let (train, val) = if data.val_sources.is_empty() {
        split_by_source(pairs, data.val_size, cfg.seed)?
    } else {
        let val = one_pair_per_source(read_sources(&data.val_sources, "data.val_sources")?);
        let mut train = pairs;
        let left_out = drop_val_sources(&mut train, &val);
        if left_out > 0 {
            errln!("xsent train: {left_out} pairs of data.sources left out of training: their source sentences are in data.val_sources");
        }
        if train.is_empty() {
            bail!("data.sources: no pair is left to train on once the sentences of data.val_sources are left out");
        }
        (train, val)
    };
    errln!("xsent train: {} training pairs, {} validation pairs", train.len(), val.len());
    Ok((train, val))
}

/// Removes the pairs whose source sentence is one of `val`'s; returns how many.
pub fn drop_val_sources(pairs: &mut Vec<Pair>, val: &[Pair]) -> usize {
    let held_out: std::collections::HashSet<&str> = val.iter().map(|p| p.src.as_str()).collect();
    let before = pairs.len();
    pairs.retain(|p| !held_out.contains(p.src.as_str()));
    before - pairs.len()
}

/// One pair per distinct source sentence, in the order read, its languages taken in turn.
fn one_pair_per_source(pairs: Vec<Pair>) -> Vec<Pair> {
    let (_, by_src) = crate::data::group_distinct(pairs.iter().map(|p| p.src.as_str()));
    let keep: Vec<usize> = by_src.iter().enumerate().map(|(k, idx)| idx[k % idx.len()]).collect();
    keep.iter().map(|&i| pairs[i].clone()).collect()
}

/// Hold out `val_size` distinct source sentences (seeded choice), one pair each, for
/// validation; every pair of a held-out source sentence leaves the training set.
pub fn split_by_source(pairs: Vec<Pair>, val_size: usize, seed: u64) -> Result<(Vec<Pair>, Vec<Pair>)> {
    // Each distinct source sentence (in the order first read) and the indices of its pairs.
    let (_, by_src) = crate::data::group_distinct(pairs.iter().map(|p| p.src.as_str()));
    let mut order: Vec<usize> = (0..by_src.len()).collect();
    if val_size >= order.len() {
        bail!("data.val_size = {val_size} but the data has only {} distinct source sentences", order.len());
    }
    let mut rng = Rng::seed_from_u64(seed ^ 0x7a1_5e7);
    order.shuffle(&mut rng);
    let mut is_val = vec![false; pairs.len()];
    let mut val_idx = Vec::new();
    for &s in &order[..val_size] {
        let idx = &by_src[s];
        for &i in idx {
            is_val[i] = true;
        }
        // One pair per held-out sentence, languages taken in turn.
        val_idx.push(idx[val_idx.len() % idx.len()]);
    }
    val_idx.sort_unstable();
    let val: Vec<Pair> = val_idx.iter().map(|&i| pairs[i].clone()).collect();
    let train: Vec<Pair> = pairs.into_iter().zip(is_val).filter(|(_, v)| !v).map(|(p, _)| p).collect();
    Ok((train, val))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn pair(s: &str, t: &str, l: &str) -> Pair {
        Pair { src: s.into(), tgt: t.into(), src_lang: "en".into(), tgt_lang: l.into() }
    }

    /// English sentences s0.. each paired with a German (d0..) and a French (f0..) translation.
    pub(crate) fn de_fr_pairs(n: usize) -> Vec<Pair> {
        (0..n)
            .flat_map(|i| {
                [pair(&format!("s{i}"), &format!("d{i}"), "de"), pair(&format!("s{i}"), &format!("f{i}"), "fr")]
            })
            .collect()
    }

    #[test]
    fn one_pair_per_source_takes_languages_in_turn() {
        let p = |s: &str, t: &str, l: &str| Pair {
            src: s.into(),
            tgt: t.into(),
            src_lang: "en".into(),
            tgt_lang: l.into(),
        };
        let pairs = vec![
            p("a", "a-de", "de"),
            p("a", "a-fr", "fr"),
            p("b", "b-de", "de"),
            p("b", "b-fr", "fr"),
            p("c", "c-de", "de"),
        ];
        let got: Vec<String> = one_pair_per_source(pairs).into_iter().map(|q| q.tgt).collect();
        assert_eq!(got, ["a-de", "b-fr", "c-de"]);
    }

    #[test]
    fn validation_split_holds_out_whole_source_sentences() {
        let pairs = de_fr_pairs(20);
        let (train, val) = split_by_source(pairs.clone(), 5, 3).unwrap();
        assert_eq!(val.len(), 5);
        assert_eq!(train.len(), 30);
        for v in &val {
            assert!(train.iter().all(|t| t.src != v.src), "{} leaks into training", v.src);
        }
        let (_, val2) = split_by_source(pairs.clone(), 5, 3).unwrap();
        assert_eq!(val, val2, "seeded");
        assert!(split_by_source(pairs, 20, 3).is_err());
    }
}
