//! What the DuEAM anchor's Word Mover's Distance says about translations (seed 000 §3.1).
//!
//! L_A trains the learner's Euclidean distances to follow the anchor's WMDs, so a learner that
//! met L_A exactly would retrieve translations only as well as the WMDs themselves rank them.
//! This probe measures that ranking with the settings of `configs/dueam.toml` (last layer,
//! L2-normalised token vectors, special tokens left out, exact solver):
//!
//! * translation retrieval by smallest WMD on the first `--n` lines of two aligned files
//!   (both directions), and the mean WMD of translations, of non-translations across the two
//!   languages and of two different sentences of the source language;
//! * the mean WMD of the XNLI premise–hypothesis pairs the weakly supervised data is made of,
//!   monolingual (premise and hypothesis in `--lang-a`) and cross-lingual (premise in
//!   `--lang-a`, hypothesis in `--lang-b`), on the first `--n` rows of `--split` in `--xnli-dir`.
//!
//! ```text
//! cargo run --release --example dueam_wmd_probe -- --anchor models/multilingual-e5-small \
//!     --src ../shared/data/parallel/multi30k/val.en.gz --tgt ../shared/data/parallel/multi30k/val.de.gz \
//!     --xnli-dir ../shared/data/xnli --split dev --lang-a en --lang-b de --n 300
//! ```

// A report printed for a person: the std print macros are fine here (clippy.toml forbids
// them in xsent itself, where a closed stream must not stop the work).
#![allow(clippy::disallowed_macros)]

use anyhow::{Context, Result};
use clap::Parser;
use std::path::PathBuf;
use xsent::data::bitext::xnli_parallel_rows;
use xsent::data::read_lines;
use xsent::model::{LoadOptions, SentenceEncoder};
use xsent::train::recipes::dueam::anchor_clouds;
use xsent::train::recipes::wmd::{wmd_batch, Solver};

#[derive(Parser)]
struct Args {
    #[arg(long)]
    anchor: PathBuf,
    #[arg(long, default_value = "")]
    anchor_prefix: String,
    /// Aligned files: line i of `--tgt` translates line i of `--src`.
    #[arg(long)]
    src: PathBuf,
    #[arg(long)]
    tgt: PathBuf,
    /// Directory with XNLI's `{split}-{lang}.tsv` (premise, hypothesis, label).
    #[arg(long)]
    xnli_dir: PathBuf,
    #[arg(long, default_value = "dev")]
    split: String,
    #[arg(long, default_value = "en")]
    lang_a: String,
    #[arg(long, default_value = "de")]
    lang_b: String,
    #[arg(long, default_value_t = 300)]
    n: usize,
}

/// Token clouds with the settings of `configs/dueam.toml`: last layer, no specials, L2-normalised.
fn clouds<S: AsRef<str>>(enc: &SentenceEncoder, texts: &[S]) -> Result<Vec<Vec<f32>>> {
    anchor_clouds(enc, texts, None, true, true, 64)
}

fn mean(v: impl Iterator<Item = f64>) -> f64 {
    let (s, n) = v.fold((0.0, 0usize), |(s, n), x| (s + x, n + 1));
    s / n.max(1) as f64
}

fn main() -> Result<()> {
    let a = Args::parse();
    let opts = LoadOptions { prefix: Some(a.anchor_prefix.clone()), max_length: Some(128), ..Default::default() };
    let enc = SentenceEncoder::load(&a.anchor.to_string_lossy(), &opts).context("loading the anchor")?;
    let dim = enc.encoder.hidden_size();

    let src: Vec<String> = read_lines(&a.src)?.into_iter().take(a.n).collect();
    let tgt: Vec<String> = read_lines(&a.tgt)?.into_iter().take(a.n).collect();
    let n = src.len().min(tgt.len());
    let (cs, ct) = (clouds(&enc, &src[..n])?, clouds(&enc, &tgt[..n])?);
    // d[i][j] = WMD(src_i, tgt_j); m[i][j] = WMD(src_i, src_j).
    let matrix = |x: &[Vec<f32>], y: &[Vec<f32>]| -> Result<Vec<Vec<f64>>> {
        let pairs: Vec<(&[f32], &[f32])> =
            (0..n).flat_map(|i| (0..n).map(move |j| (x[i].as_slice(), y[j].as_slice()))).collect();
        Ok(wmd_batch(&pairs, dim, &Solver::Exact)?.chunks(n).map(|r| r.to_vec()).collect())
    };
    let (d, m) = (matrix(&cs, &ct)?, matrix(&cs, &cs)?);
    let argmin = |row: &mut dyn Iterator<Item = (usize, f64)>| row.min_by(|x, y| x.1.total_cmp(&y.1)).map(|x| x.0);
    let s2t = (0..n).filter(|&i| argmin(&mut d[i].iter().copied().enumerate()) == Some(i)).count();
    let t2s = (0..n).filter(|&j| argmin(&mut (0..n).map(|i| (i, d[i][j]))) == Some(j)).count();
    // How often a translation is farther than the nearest other sentence of the source language.
    let mono_closer =
        (0..n).filter(|&i| (0..n).filter(|&j| j != i).map(|j| m[i][j]).fold(f64::INFINITY, f64::min) < d[i][i]).count();
    println!("aligned files, first {n} lines:");
    println!(
        "  WMD retrieval accuracy src→tgt {:.2}%, tgt→src {:.2}%",
        100.0 * s2t as f64 / n as f64,
        100.0 * t2s as f64 / n as f64
    );
    println!("  mean WMD: translations {:.4}", mean((0..n).map(|i| d[i][i])));
    let off_diagonal = |x: &[Vec<f64>]| {
        mean((0..n).flat_map(|i| (0..n).filter(move |&j| j != i).map(move |j| (i, j))).map(|(i, j)| x[i][j]))
    };
    println!("            non-translations across languages {:.4}", off_diagonal(&d));
    println!("            two different source-language sentences {:.4}", off_diagonal(&m));
    println!(
        "  a source-language non-translation is closer than the translation for {:.2}% of sentences",
        100.0 * mono_closer as f64 / n as f64
    );

    let rows = xnli_parallel_rows(&a.xnli_dir, &a.split, &[a.lang_a.as_str(), a.lang_b.as_str()])?;
    let k = rows[0].len().min(a.n);
    let (xa, xb) = (&rows[0][..k], &rows[1][..k]);
    let prem = clouds(&enc, &xa.iter().map(|p| p.0.as_str()).collect::<Vec<_>>())?;
    let hyp_a = clouds(&enc, &xa.iter().map(|p| p.1.as_str()).collect::<Vec<_>>())?;
    let hyp_b = clouds(&enc, &xb.iter().map(|p| p.1.as_str()).collect::<Vec<_>>())?;
    let aligned = |x: &[Vec<f32>], y: &[Vec<f32>]| {
        wmd_batch(&x.iter().zip(y).map(|(a, b)| (a.as_slice(), b.as_slice())).collect::<Vec<_>>(), dim, &Solver::Exact)
    };
    let (mono, cross) = (aligned(&prem, &hyp_a)?, aligned(&prem, &hyp_b)?);
    println!("XNLI {} {} first {k} rows, premise–hypothesis pairs:", a.xnli_dir.display(), a.split);
    println!(
        "  mean WMD: {a}-{a} {:.4}, {a}-{b} {:.4}",
        mean(mono.iter().copied()),
        mean(cross.iter().copied()),
        a = a.lang_a,
        b = a.lang_b
    );
    Ok(())
}
