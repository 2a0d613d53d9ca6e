//! The xsent side of `scripts/bench-index.sh`: approximate kNN for margin mining (both
//! directions, x among y and y among x) with xsent's IVF index, against the exact search.
//!
//! ```text
//! bench_index gen   --n N --dim D --centres C --noise S --seed S --x x.npy --y y.npy
//! bench_index exact --x x.npy --y y.npy --k 4 --queries Q --seed S --truth DIR
//! bench_index ivf   --x x.npy --y y.npy --k 4 --truth DIR --nprobe 4,8,16 [--nlist --sample --iterations --codec]
//! ```
//!
//! * `gen`: two sides of random-but-clustered unit vectors (`xsent::index::synthetic`), float32 .npy.
//! * `exact`: picks `--queries` random rows of x and of y (seeded), finds their exact top-k in
//!   the other side (`xsent::index::knn::knn`, blocked GEMM), writes them to DIR (`x_rows.npy`,
//!   `x2y.npy`, `y_rows.npy`, `y2x.npy`, int64) and times it. The full exact search
//!   (`knn_both`, one N × M pass for both directions) is estimated as the time of the x sample
//!   scaled by N / queries; with `--full` it is also run and timed whole.
//! * `ivf`: builds the index of y (train + add) and searches all of x in it at each nprobe, then
//!   the same for x and y; recall@k against DIR's exact lists (the share of the exact k ids
//!   found among the k returned, over both directions' sampled queries).
//!
//! Vectors are read from the files as they are needed (an index holds its vectors; queries are
//! read a chunk at a time). Threads: `XSENT_THREADS`. Prints JSON lines; `peak_rss_mb` is the
//! process's VmHWM.
#![allow(clippy::disallowed_macros)] // a benchmark's report on stdout

use anyhow::{ensure, Context, Result};
use clap::{Parser, Subcommand};
use rand::SeedableRng;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;
use xsent::index::vectors::VectorSet;
use xsent::index::{search_all, BuildParams, Codec, Ivf, Quantizer};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    Gen {
        #[arg(long)]
        n: usize,
        #[arg(long, default_value_t = 384)]
        dim: usize,
        #[arg(long, default_value_t = 10_000)]
        centres: usize,
        #[arg(long, default_value_t = 1.0)]
        noise: f32,
        #[arg(long, default_value_t = 0)]
        seed: u64,
        #[arg(long)]
        x: PathBuf,
        #[arg(long)]
        y: PathBuf,
    },
    Exact {
        #[arg(long)]
        x: PathBuf,
        #[arg(long)]
        y: PathBuf,
        #[arg(long, default_value_t = 4)]
        k: usize,
        #[arg(long, default_value_t = 2000)]
        queries: usize,
        #[arg(long, default_value_t = 0)]
        seed: u64,
        #[arg(long)]
        truth: PathBuf,
        #[arg(long)]
        full: bool,
    },
    Ivf {
        #[arg(long)]
        x: PathBuf,
        #[arg(long)]
        y: PathBuf,
        #[arg(long, default_value_t = 4)]
        k: usize,
        #[arg(long)]
        truth: PathBuf,
        #[arg(long, value_delimiter = ',', default_value = "16")]
        nprobe: Vec<usize>,
        #[arg(long)]
        nlist: Option<usize>,
        #[arg(long)]
        sample: Option<usize>,
        #[arg(long, default_value_t = xsent::index::DEFAULT_ITERATIONS)]
        iterations: usize,
        #[arg(long, value_enum, default_value = "f32")]
        codec: Codec,
        #[arg(long, default_value_t = 0)]
        seed: u64,
    },
}

fn peak_rss_mb() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("VmHWM:")).and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

/// Write a 2-D array as .npy (`descr` '<f4' or '<i8').
fn write_npy(path: &Path, descr: &str, rows: usize, cols: usize, bytes: &[u8]) -> Result<()> {
    let dict = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': ({rows}, {cols}), }}");
    let mut h = dict.into_bytes();
    let total = (10 + h.len() + 1).next_multiple_of(64);
    h.resize(total - 10 - 1, b' ');
    h.push(b'\n');
    let mut f = std::io::BufWriter::new(
        std::fs::File::create(path).with_context(|| format!("cannot write {}", path.display()))?,
    );
    f.write_all(b"\x93NUMPY\x01\x00")?;
    f.write_all(&(h.len() as u16).to_le_bytes())?;
    f.write_all(&h)?;
    f.write_all(bytes)?;
    f.flush()?;
    Ok(())
}

fn write_i64(path: &Path, rows: usize, cols: usize, v: impl Iterator<Item = i64>) -> Result<()> {
    let bytes: Vec<u8> = v.flat_map(|x| x.to_le_bytes()).collect();
    write_npy(path, "<i8", rows, cols, &bytes)
}

fn read_i64(path: &Path) -> Result<Vec<i64>> {
    let raw = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    let hl = u16::from_le_bytes([raw[8], raw[9]]) as usize;
    Ok(raw[10 + hl..].chunks_exact(8).map(|b| i64::from_le_bytes(b.try_into().expect("8 bytes"))).collect())
}

fn load_all(path: &Path) -> Result<(Vec<f32>, usize)> {
    let mut s = VectorSet::open(&[path.to_path_buf()], None)?;
    let mut v = Vec::new();
    s.read(0, s.rows() as usize, &mut v)?;
    Ok((v, s.dim()))
}

fn main() -> Result<()> {
    xsent::threads::init_data_parallel();
    let threads = xsent::threads::threads();
    match Cli::parse().cmd {
        Cmd::Gen { n, dim, centres, noise, seed, x, y } => {
            let g = xsent::index::synthetic::Clustered { dim, centres, noise, seed };
            for (side, path) in [(0u64, &x), (1, &y)] {
                let v = g.points(side, n);
                let bytes: Vec<u8> = v.iter().flat_map(|f| f.to_le_bytes()).collect();
                write_npy(path, "<f4", n, dim, &bytes)?;
            }
            println!("{}", serde_json::json!({"gen": n, "dim": dim, "centres": centres, "noise": noise, "seed": seed}));
        }
        Cmd::Exact { x, y, k, queries, seed, truth, full } => {
            std::fs::create_dir_all(&truth)?;
            let (xv, d) = load_all(&x)?;
            let (yv, _) = load_all(&y)?;
            let (nx, ny) = (xv.len() / d, yv.len() / d);
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
            let pick = |n: usize, rng: &mut rand_chacha::ChaCha8Rng| {
                let mut r = rand::seq::index::sample(rng, n, queries.min(n)).into_vec();
                r.sort_unstable();
                r
            };
            let (xs, ys) = (pick(nx, &mut rng), pick(ny, &mut rng));
            let rows_of = |v: &[f32], rows: &[usize]| xsent::index::knn::Matrix {
                data: rows.iter().flat_map(|&r| v[r * d..(r + 1) * d].iter().copied()).collect(),
                dim: d,
            };
            let (xm, ym) = (
                xsent::index::knn::Matrix { data: xv.clone(), dim: d },
                xsent::index::knn::Matrix { data: yv.clone(), dim: d },
            );
            let t = Instant::now();
            let x2y = xsent::index::knn::knn(&rows_of(&xv, &xs), &ym, k)?;
            let t_x = t.elapsed().as_secs_f64();
            let t = Instant::now();
            let y2x = xsent::index::knn::knn(&rows_of(&yv, &ys), &xm, k)?;
            let t_y = t.elapsed().as_secs_f64();
            write_i64(&truth.join("x_rows.npy"), xs.len(), 1, xs.iter().map(|&r| r as i64))?;
            write_i64(&truth.join("y_rows.npy"), ys.len(), 1, ys.iter().map(|&r| r as i64))?;
            write_i64(&truth.join("x2y.npy"), xs.len(), x2y.k, x2y.idx.iter().map(|&i| i as i64))?;
            write_i64(&truth.join("y2x.npy"), ys.len(), y2x.k, y2x.idx.iter().map(|&i| i as i64))?;
            // knn_both makes one nx × ny product for both directions: as the x sample's product
            // scaled to all of x.
            let estimate = t_x * nx as f64 / xs.len() as f64;
            let full_s = if full {
                let t = Instant::now();
                let _ = xsent::index::knn::knn_both(&xm, &ym, k)?;
                Some(t.elapsed().as_secs_f64())
            } else {
                None
            };
            println!(
                "{}",
                serde_json::json!({"engine": "exact", "nx": nx, "ny": ny, "dim": d, "k": k, "queries": xs.len(), "x_sample_s": t_x, "y_sample_s": t_y,
                    "knn_both_estimate_s": estimate, "knn_both_full_s": full_s, "threads": threads, "peak_rss_mb": peak_rss_mb()})
            );
        }
        Cmd::Ivf { x, y, k, truth, nprobe, nlist, sample, iterations, codec, seed } => {
            ensure!(!nprobe.is_empty(), "--nprobe needs at least one value");
            let params = BuildParams { nlist, sample, iterations, seed, codec };
            let truth_rows = |name: &str| read_i64(&truth.join(name));
            // Per nprobe: search seconds and recall hits of both directions.
            let mut search_s = vec![0.0f64; nprobe.len()];
            let mut hits = vec![0usize; nprobe.len()];
            let mut total = 0usize;
            let mut build_s = 0.0;
            let mut train_s = 0.0;
            let mut index_mb = 0.0;
            let mut nlist_used = 0;
            for (db, queries, rows_file, truth_file) in
                [(&y, &x, "x_rows.npy", "x2y.npy"), (&x, &y, "y_rows.npy", "y2x.npy")]
            {
                let t = Instant::now();
                let mut src = VectorSet::open(std::slice::from_ref(db), None)?;
                let q = Quantizer::train(&mut src, &params, threads)?;
                train_s += t.elapsed().as_secs_f64();
                let index = Ivf::build(q, &mut src, 0, vec![], threads)?;
                build_s += t.elapsed().as_secs_f64();
                index_mb += index.bytes() as f64 / (1 << 20) as f64;
                nlist_used = index.meta.nlist;
                let rows = truth_rows(rows_file)?;
                let want = truth_rows(truth_file)?;
                total += rows.len() * k;
                for (i, &np) in nprobe.iter().enumerate() {
                    let mut qs = VectorSet::open(std::slice::from_ref(queries), None)?;
                    let t = Instant::now();
                    let knn = search_all(1, |_| Ok(&index), &mut qs, k, np, threads)?;
                    search_s[i] += t.elapsed().as_secs_f64();
                    for (j, &r) in rows.iter().enumerate() {
                        let got = &knn.ids[r as usize * k..(r as usize + 1) * k];
                        hits[i] += want[j * k..(j + 1) * k].iter().filter(|&&w| got.contains(&(w as u64))).count();
                    }
                }
            }
            for (i, &np) in nprobe.iter().enumerate() {
                println!(
                    "{}",
                    serde_json::json!({"engine": format!("xsent-ivf-{}", match codec { Codec::F32 => "f32", Codec::Int8 => "int8" }), "nlist": nlist_used, "nprobe": np,
                        "sample": params.sample, "iterations": iterations, "train_s": train_s, "build_s": build_s, "search_s": search_s[i],
                        "recall": hits[i] as f64 / total as f64, "index_mb": index_mb, "threads": threads, "peak_rss_mb": peak_rss_mb()})
                );
            }
        }
    }
    Ok(())
}
