//! Host work ahead of the step (`train.ahead`): while optimiser step k runs, a background thread
//! prepares step k+1's batches ([`crate::train::Recipe::ahead`]): tokenising, DuEAM's WMD solver.
//! Only host work goes to the thread: candle's CUDA device queues work on the calling thread's
//! stream, so a recipe runs what needs the device (a frozen model's forward) before it hands
//! the job over. At most one step is prepared ahead.

use crate::model::sentence::{Encoded, TextTokenizer};
use anyhow::{anyhow, Result};
use std::any::Any;
use std::collections::HashMap;
use std::sync::RwLock;
use std::thread::JoinHandle;

/// What a job prepared, for its recipe's [`crate::train::Recipe::take_ahead`].
pub type Prepared = Box<dyn Any + Send>;

/// Host work for the next step, run on a background thread.
pub type AheadJob = Box<dyn FnOnce() -> Result<Prepared> + Send>;

/// One optimiser step's micro-batches as the trainer runs them: per micro-batch, its shards
/// (example indices, after [`crate::train::Recipe::order_batch`]).
pub type StepBatches = Vec<Vec<Vec<usize>>>;

/// A job running on its thread, for optimiser step `step` (1-based).
pub(crate) struct Pending {
    step: u64,
    handle: JoinHandle<Result<Prepared>>,
}

impl Pending {
    pub(crate) fn start(step: u64, job: AheadJob) -> Result<Self> {
        let handle = std::thread::Builder::new()
            .name("xsent-ahead".into())
            .spawn(job)
            .map_err(|e| anyhow!("cannot start the thread that prepares step {step}'s batches ahead: {e}"))?;
        Ok(Self { step, handle })
    }

    /// The job's result (waits for it); a panic in the job is an error of its step.
    pub(crate) fn join(self) -> Result<Prepared> {
        match self.handle.join() {
            Ok(r) => r,
            Err(p) => {
                let what = p
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| p.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "no message".into());
                Err(anyhow!("step {}: the thread preparing its batches ahead panicked: {what}", self.step))
            }
        }
    }
}

/// Each example's texts tokenised ahead (one step's examples at most), for the step's forward.
#[derive(Default)]
pub struct TokensAhead(RwLock<HashMap<usize, Vec<Encoded>>>);

impl TokensAhead {
    /// Tokenise each example's texts (`texts[k]` of `examples[k]`, the same number per example)
    /// in one call: the job's part.
    pub fn tokenize(tt: &TextTokenizer, examples: Vec<usize>, texts: Vec<Vec<String>>) -> Result<TokenMap> {
        let per = texts.first().map_or(0, Vec::len);
        let flat: Vec<&str> = texts.iter().flatten().map(String::as_str).collect();
        let mut enc = tt.tokenize(&flat)?.into_iter();
        Ok(examples.into_iter().map(|i| (i, enc.by_ref().take(per).collect())).collect())
    }

    /// Replace the examples held by a step's (the previous step's are dropped).
    pub fn set(&self, map: TokenMap) {
        *self.0.write().expect("no reader panicked") = map;
    }

    /// The tokens of `batch`'s texts in the order a recipe lays them out (all examples' first
    /// text, then all their second text, …), if every example was tokenised ahead.
    pub fn columns(&self, batch: &[usize]) -> Option<Vec<Encoded>> {
        let map = self.0.read().expect("no writer panicked");
        let rows: Vec<&Vec<Encoded>> = batch.iter().map(|i| map.get(i)).collect::<Option<_>>()?;
        let per = rows.first().map_or(0, |r| r.len());
        Some((0..per).flat_map(|j| rows.iter().map(move |r| r[j].clone())).collect())
    }
}

/// Examples' tokens by example index.
pub type TokenMap = HashMap<usize, Vec<Encoded>>;

/// The distinct examples of a step, in first-seen order.
pub fn distinct(step: &StepBatches) -> Vec<usize> {
    let mut seen = std::collections::HashSet::new();
    step.iter().flatten().flatten().copied().filter(|i| seen.insert(*i)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_or_panicking_job_is_its_steps_error() {
        let done = Pending::start(3, Box::new(|| Ok(Box::new(7usize) as Prepared))).unwrap().join().unwrap();
        assert_eq!(*done.downcast::<usize>().unwrap(), 7);
        let failed = Pending::start(3, Box::new(|| Err(anyhow!("WMD of pair 2 of the batch: bad cost")))).unwrap();
        assert_eq!(failed.join().err().unwrap().to_string(), "WMD of pair 2 of the batch: bad cost");
        let panicked = Pending::start(4, Box::new(|| panic!("boom"))).unwrap();
        assert_eq!(
            panicked.join().err().unwrap().to_string(),
            "step 4: the thread preparing its batches ahead panicked: boom"
        );
    }

    #[test]
    fn tokens_come_back_by_example_in_the_recipes_layout() {
        let e = |i: u32| Encoded { ids: vec![i], truncated: false };
        let store = TokensAhead::default();
        store.set(TokenMap::from([(4, vec![e(40), e(41)]), (9, vec![e(90), e(91)])]));
        let got: Vec<u32> = store.columns(&[9, 4, 9]).unwrap().iter().map(|x| x.ids[0]).collect();
        assert_eq!(got, vec![90, 40, 90, 91, 41, 91], "first texts, then second texts");
        assert!(store.columns(&[4, 5]).is_none(), "example 5 was not prepared");
        store.set(TokenMap::new());
        assert!(store.columns(&[4]).is_none(), "a step's tokens replace the previous step's");
        let step: StepBatches = vec![vec![vec![3, 1], vec![3]], vec![vec![2, 1]]];
        assert_eq!(distinct(&step), vec![3, 1, 2]);
    }
}
