//! Running top-k lists: best similarity first, equal similarities by lower id, so that the
//! lists do not depend on the order candidates arrive in.

/// Offer `(v, id)` to a list sorted best first; it enters when it beats the last entry.
#[inline(always)]
pub fn offer<T: Copy + Ord>(sims: &mut [f32], ids: &mut [T], v: f32, id: T) {
    let last = sims.len() - 1;
    if !(v > sims[last] || (v == sims[last] && id < ids[last])) {
        return;
    }
    let mut p = last;
    while p > 0 && (sims[p - 1] < v || (sims[p - 1] == v && ids[p - 1] > id)) {
        sims[p] = sims[p - 1];
        ids[p] = ids[p - 1];
        p -= 1;
    }
    sims[p] = v;
    ids[p] = id;
}

/// Offer a row of similarities (`row[j]` for id `id0 + j`) to one list, testing 16 at a time
/// against the list's last entry (most chunks hold no candidate).
#[inline]
pub fn offer_row<T: Copy + Ord>(sims: &mut [f32], ids: &mut [T], row: &[f32], id_of: impl Fn(usize) -> T) {
    const LANES: usize = 16;
    let last = sims.len() - 1;
    let mut j = 0;
    while j + LANES <= row.len() {
        let v = &row[j..j + LANES];
        let min = sims[last];
        let mut hit = false;
        for &x in v {
            hit |= x >= min;
        }
        if hit {
            for (l, &x) in v.iter().enumerate() {
                offer(sims, ids, x, id_of(j + l));
            }
        }
        j += LANES;
    }
    for (l, &x) in row[j..].iter().enumerate() {
        offer(sims, ids, x, id_of(j + l));
    }
}

/// Run `f(state, item)` for items `0..items` on `workers` threads (each with its own state from
/// `init`), items taken in increasing order; returns the states. The first error stops the
/// other workers.
pub fn for_each_item<S: Send>(
    workers: usize,
    items: usize,
    init: impl Fn() -> S + Sync,
    f: impl Fn(&mut S, usize) -> anyhow::Result<()> + Sync,
) -> anyhow::Result<Vec<S>> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let next = AtomicUsize::new(0);
    let workers = workers.clamp(1, items.max(1));
    let work = || -> anyhow::Result<S> {
        let mut s = init();
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            if i >= items {
                return Ok(s);
            }
            if let Err(e) = f(&mut s, i) {
                next.store(items, Ordering::Relaxed);
                return Err(e);
            }
        }
    };
    if workers == 1 {
        return Ok(vec![work()?]);
    }
    std::thread::scope(|sc| {
        let handles: Vec<_> = (0..workers).map(|_| sc.spawn(work)).collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err(anyhow::anyhow!("an index worker panicked"))))
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_do_not_depend_on_arrival_order() {
        let cands = [(0.5f32, 7u64), (0.9, 3), (0.5, 2), (0.9, 1), (0.1, 0), (0.5, 9), (0.7, 4)];
        let want = vec![(0.9, 1), (0.9, 3), (0.7, 4), (0.5, 2)];
        for rot in 0..cands.len() {
            let (mut s, mut i) = (vec![f32::NEG_INFINITY; 4], vec![u64::MAX; 4]);
            for c in cands.iter().cycle().skip(rot).take(cands.len()) {
                offer(&mut s, &mut i, c.0, c.1);
            }
            assert_eq!(s.iter().copied().zip(i.iter().copied()).collect::<Vec<_>>(), want, "rotation {rot}");
        }
        let row: Vec<f32> = (0..40).map(|j| ((j * 7) % 13) as f32).collect();
        let (mut s, mut i) = (vec![f32::NEG_INFINITY; 3], vec![u64::MAX; 3]);
        offer_row(&mut s, &mut i, &row, |j| 100 + j as u64);
        assert_eq!(s, [12.0, 12.0, 12.0]);
        assert_eq!(i, [111, 124, 137], "(7 j) mod 13 = 12 at j = 11, 24, 37");
    }
}
