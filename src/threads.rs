//! Thread use. For inference xsent runs one batch per core with single-threaded candle ops:
//! candle 0.11's intra-op threading (a spin-barrier pool for element-wise ops, and rayon for
//! every per-head attention GEMM) costs more than it gains at sentence lengths, measured on 2
//! cores: 500 sentences took 9.9 s with 2 intra-op threads and 6.9 s with 1.
//!
//! With `RAYON_NUM_THREADS=1`, a candle op that still uses rayon's parallel iterators (its
//! `layer_norm`, broadcast binary ops) hands its work to the global pool's one thread, where the
//! batch workers' calls queue behind each other. The encoder's per-layer inference ops are
//! xsent's own kernels, which run on the calling thread (the fused residual sum and LayerNorm
//! took 15–20 % off `embed`'s wall time; docs/quantization.md "Where the time went").

use std::sync::OnceLock;

static THREADS: OnceLock<usize> = OnceLock::new();

/// The most worker threads xsent starts: a larger setting is a typo (spawning 100,000 threads
/// fails, and a failed spawn panics).
const MAX_THREADS: usize = 1024;

fn from_env() -> usize {
    ["XSENT_THREADS", "RAYON_NUM_THREADS"]
        .iter()
        .find_map(|k| {
            let v = std::env::var(k).ok()?;
            let n = v.trim().parse::<usize>().ok().filter(|n| *n > 0);
            // Empty, or rayon's own 0 ("the default"): nothing to warn about.
            if n.is_none() && !v.trim().is_empty() && v.trim() != "0" {
                errln!("xsent: {k}={v:?} is not a number of threads (1 or more); ignored");
            }
            if n.is_some_and(|n| n > MAX_THREADS) {
                errln!("xsent: {k}={v} is more threads than xsent starts; using {MAX_THREADS}");
                return Some(MAX_THREADS);
            }
            n
        })
        .unwrap_or_else(|| std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1))
}

/// Worker threads for data-parallel work (`XSENT_THREADS`, else `RAYON_NUM_THREADS`, else all cores).
pub fn threads() -> usize {
    *THREADS.get_or_init(from_env)
}

/// Switch candle to single-threaded ops so that [`threads`] workers can each run their own
/// batches. Call at process start, before any other thread exists.
pub fn init_data_parallel() {
    let n = threads();
    // Safe: called from main before any thread is spawned.
    std::env::set_var("RAYON_NUM_THREADS", "1");
    std::env::set_var("CANDLE_NUM_THREADS", "1");
    let _ = n;
}

/// Whether candle ops were made single-threaded by [`init_data_parallel`].
pub fn is_data_parallel() -> bool {
    std::env::var("CANDLE_NUM_THREADS").as_deref() == Ok("1")
}
