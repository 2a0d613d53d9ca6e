//! Encoding speed of an averaging model (seed 002 Table 4), used by scripts/bench-sp.sh:
//! `cargo run --release --example bench_sp -- MODEL_DIR SENTENCES_FILE [N] [ROUNDS]`.
//! Takes the first N lines (default 128,000; the file's lines repeat when it has fewer) and
//! times, best of ROUNDS (default 5):
//! - ids: averaging from unit ids already in memory (as seed 002 timed it), no normalisation;
//! - tokenize: text → unit ids;
//! - end to end: text → L2-normalised vectors (tokenize + average + normalise), as `embed` does.

// A report printed for a person: the std print macros are fine here (clippy.toml forbids
// them in xsent itself, where a closed stream must not stop the work).
#![allow(clippy::disallowed_macros)]

use std::time::Instant;
use xsent::model::kinds::averaging::{embed_ids_flat, flatten, AveragingModel};

fn best<T>(rounds: usize, mut f: impl FnMut() -> T) -> (f64, T) {
    let mut out = None;
    let mut best = f64::INFINITY;
    for _ in 0..rounds {
        let t = Instant::now();
        let r = f();
        best = best.min(t.elapsed().as_secs_f64());
        out = Some(r);
    }
    (best, out.expect("at least one round"))
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    anyhow::ensure!(args.len() >= 3, "usage: bench_sp MODEL_DIR SENTENCES_FILE [N] [ROUNDS]");
    let n: usize = args.get(3).map_or(Ok(128_000), |s| s.parse())?;
    let rounds: usize = args.get(4).map_or(Ok(5), |s| s.parse())?;
    let model = AveragingModel::load(
        std::path::Path::new(&args[1]),
        true,
        None,
        xsent::model::sentence::DEFAULT_MAX_TEXT_BYTES,
    )?;
    let lines = xsent::data::read_lines(std::path::Path::new(&args[2]))?;
    let lines: Vec<&str> = lines.iter().filter(|l| !l.trim().is_empty()).map(String::as_str).collect();
    anyhow::ensure!(!lines.is_empty(), "{} has no sentences", args[2]);
    let texts: Vec<&str> = lines.iter().cycle().take(n).copied().collect();
    let dim = model.meta.dim;

    let (tok_s, ids) = best(rounds, || model.segmenter.ids_batch(&texts, model.max_text_bytes));
    let (ids, _) = ids?;
    let (flat, off) = flatten(&ids);
    let units = flat.len();
    let (ids_s, out) = best(rounds, || embed_ids_flat(&model.table, dim, &flat, &off, false));
    anyhow::ensure!(out?.len() == n * dim);
    let (e2e_s, out) = best(rounds, || model.embed_flat(&texts));
    anyhow::ensure!(out?.0.len() == n * dim);

    println!(
        "model {} ({} units, vocabulary {}, dim {dim}); {n} sentences, {:.1} units per sentence; threads {}; best of {rounds}",
        args[1],
        model.meta.units,
        model.meta.vocab_size,
        units as f64 / n as f64,
        xsent::threads::threads()
    );
    println!("| measurement | seconds | sentences/s |");
    println!("|---|---:|---:|");
    println!("| from unit ids (averaging only) | {ids_s:.4} | {:.0} |", n as f64 / ids_s);
    println!("| text → unit ids (tokenizing only) | {tok_s:.4} | {:.0} |", n as f64 / tok_s);
    println!("| end to end from text (tokenize + average + normalise) | {e2e_s:.4} | {:.0} |", n as f64 / e2e_s);
    println!("end to end: tokenizing is {:.1}% of the sum of the two parts", 100.0 * tok_s / (tok_s + ids_s));
    Ok(())
}
