//! Exact k-NN timing for margin mining on random unit vectors: `xsent::index::knn::knn_both`
//! (x→y and y→x in one blocked pass, as `xsent mine` / BUCC scoring use it).
//! Run by `scripts/bench-mine.sh`, which compares it with faiss `IndexFlatIP`.
//!
//! ```text
//! cargo run --release --example bench_knn -- --gen --n 100000 --dim 384 --k 4 \
//!     --x x.npy --y y.npy --out DIR
//! cargo run --release --example bench_knn -- --x x.npy --y y.npy --k 4 --out DIR
//! ```
//!
//! * `--gen`: make `--n` (x) and `--m` (y, default `--n`) random unit vectors of `--dim`
//!   (Gaussian, seeded ChaCha8, L2-normalised in f32); written to `--x` / `--y` as float32
//!   `.npy` when given, so another engine can search exactly the same data. Without `--gen`,
//!   `--x` and `--y` are read (float32, C order, used as they are: they must already be unit rows).
//! * `--out DIR`: writes `x2y_idx.npy`, `y2x_idx.npy` (int32, rows × k) and `x2y_sim.npy`,
//!   `y2x_sim.npy` (float32), best first, from `knn_both`.
//! * `--two-pass`: also time the two one-direction searches `knn(x, y) + knn(y, x)` (the way
//!   before `knn_both`), and check that they give the same lists.
//!
//! Threads: `XSENT_THREADS` (else `RAYON_NUM_THREADS`, else all cores) workers.
//! Prints one JSON line on stdout.

// A report printed for a person: the std print macros are fine here (clippy.toml forbids
// them in xsent itself, where a closed stream must not stop the work).
#![allow(clippy::disallowed_macros)]

use anyhow::{bail, ensure, Context, Result};
use clap::Parser;
use rand::{Rng, SeedableRng};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;
use xsent::index::knn::{knn, knn_both, Matrix, Neighbours};

// Same allocator as the xsent binary (src/main.rs).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser, Debug)]
#[command(about = "Time xsent's exact kNN in both directions (margin mining) on random unit vectors")]
struct Args {
    /// Vectors in x (with --gen).
    #[arg(long, default_value_t = 100_000)]
    n: usize,
    /// Vectors in y (with --gen; default --n).
    #[arg(long)]
    m: Option<usize>,
    /// Dimension (with --gen).
    #[arg(long, default_value_t = 384)]
    dim: usize,
    /// Neighbours per query.
    #[arg(long, default_value_t = 4)]
    k: usize,
    /// Generate the data (and write it to --x / --y when given) instead of reading --x / --y.
    #[arg(long)]
    gen: bool,
    /// Seed for --gen.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Source vectors, float32 .npy [n, dim].
    #[arg(long)]
    x: Option<PathBuf>,
    /// Target vectors, float32 .npy [m, dim].
    #[arg(long)]
    y: Option<PathBuf>,
    /// Directory for the neighbour lists (x2y_idx.npy, x2y_sim.npy, y2x_idx.npy, y2x_sim.npy).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Time the search this many times and report the fastest.
    #[arg(long, default_value_t = 1)]
    repeat: usize,
    /// Also time knn(x, y) + knn(y, x) and check that they give the same lists.
    #[arg(long)]
    two_pass: bool,
}

fn main() -> Result<()> {
    // Before any thread exists: single-threaded candle ops, kNN workers run one block each.
    xsent::threads::init_data_parallel();
    let a = Args::parse();
    ensure!(a.repeat >= 1, "--repeat must be at least 1");

    let t = Instant::now();
    let (x, y) = if a.gen {
        let m = a.m.unwrap_or(a.n);
        ensure!(a.n > 0 && m > 0 && a.dim > 0, "--n, --m and --dim must be positive");
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(a.seed);
        let x = random_unit(&mut rng, a.n, a.dim);
        let y = random_unit(&mut rng, m, a.dim);
        if let Some(p) = &a.x {
            write_npy_f32(p, &x.data, x.rows(), x.dim)?;
        }
        if let Some(p) = &a.y {
            write_npy_f32(p, &y.data, y.rows(), y.dim)?;
        }
        (x, y)
    } else {
        let (Some(px), Some(py)) = (&a.x, &a.y) else { bail!("give --x and --y, or --gen") };
        (read_npy_f32(px)?, read_npy_f32(py)?)
    };
    ensure!(x.dim == y.dim, "dimension mismatch: {} vs {}", x.dim, y.dim);
    let data_s = t.elapsed().as_secs_f64();
    let (n, m, d) = (x.rows(), y.rows(), x.dim);
    let threads = xsent::threads::threads();
    // Multiply-adds of one N×M similarity product, counted as 2 FLOPs each.
    let flop = 2.0 * (n as f64) * (m as f64) * (d as f64);

    let mut best: Option<(f64, Neighbours, Neighbours)> = None;
    for _ in 0..a.repeat {
        let t = Instant::now();
        let (x2y, y2x) = knn_both(&x, &y, a.k)?;
        let s = t.elapsed().as_secs_f64();
        if best.as_ref().is_none_or(|b| s < b.0) {
            best = Some((s, x2y, y2x));
        }
    }
    let (seconds, x2y, y2x) = best.expect("repeat >= 1");
    let mut two_pass = serde_json::Value::Null;
    if a.two_pass {
        let mut fastest = f64::INFINITY;
        for _ in 0..a.repeat {
            let t = Instant::now();
            let (f, b) = (knn(&x, &y, a.k)?, knn(&y, &x, a.k)?);
            fastest = fastest.min(t.elapsed().as_secs_f64());
            ensure!(f == x2y && b == y2x, "knn_both and knn + knn disagree");
        }
        two_pass = serde_json::json!(fastest);
    }
    if let Some(dir) = &a.out {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        for (name, nb, rows) in [("x2y", &x2y, n), ("y2x", &y2x, m)] {
            let idx: Vec<i32> = nb.idx.iter().map(|&i| i as i32).collect();
            write_npy(&dir.join(format!("{name}_idx.npy")), "<i4", bytes_i32(&idx), rows, nb.k)?;
            write_npy_f32(&dir.join(format!("{name}_sim.npy")), &nb.sims, rows, nb.k)?;
        }
    }
    let j = serde_json::json!({
        "mode": "knn_both", "n": n, "m": m, "dim": d, "k": x2y.k, "threads": threads, "repeat": a.repeat,
        "data_s": data_s, "seconds": seconds, "two_pass_s": two_pass,
        "one_product_gflops": flop / seconds / 1e9,
    });
    println!("{j}");
    Ok(())
}

/// `n` Gaussian vectors (Box-Muller) of `dim`, each L2-normalised: uniform on the sphere.
fn random_unit(rng: &mut impl Rng, n: usize, dim: usize) -> Matrix {
    let mut data = Vec::with_capacity(n * dim);
    let mut row = vec![0f32; dim];
    for _ in 0..n {
        let mut j = 0;
        while j < dim {
            // u1 in (0, 1] so ln is finite.
            let u1 = 1.0 - rng.random::<f64>();
            let u2 = rng.random::<f64>();
            let r = (-2.0 * u1.ln()).sqrt();
            let (s, c) = (std::f64::consts::TAU * u2).sin_cos();
            row[j] = (r * c) as f32;
            if j + 1 < dim {
                row[j + 1] = (r * s) as f32;
            }
            j += 2;
        }
        let norm = row.iter().map(|v| (*v as f64) * (*v as f64)).sum::<f64>().sqrt().max(1e-12);
        data.extend(row.iter().map(|v| ((*v as f64) / norm) as f32));
    }
    Matrix { data, dim }
}

fn bytes_i32(v: &[i32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn write_npy_f32(path: &Path, v: &[f32], rows: usize, cols: usize) -> Result<()> {
    write_npy(path, "<f4", v.iter().flat_map(|x| x.to_le_bytes()).collect(), rows, cols)
}

/// NPY format 1.0, C order, 2-D.
fn write_npy(path: &Path, descr: &str, bytes: Vec<u8>, rows: usize, cols: usize) -> Result<()> {
    ensure!(bytes.len() == rows * cols * 4, "{}: {} bytes for {rows}x{cols}", path.display(), bytes.len());
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': ({rows}, {cols}), }}");
    // magic (6) + version (2) + header length (2) + header, padded to 64 with a final '\n'.
    let total = (10 + header.len() + 1).div_ceil(64) * 64;
    header.push_str(&" ".repeat(total - 10 - header.len() - 1));
    header.push('\n');
    ensure!(header.len() <= u16::MAX as usize, "npy header too long");
    let f = std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let mut w = std::io::BufWriter::with_capacity(1 << 20, f);
    w.write_all(b"\x93NUMPY\x01\x00")?;
    w.write_all(&(header.len() as u16).to_le_bytes())?;
    w.write_all(header.as_bytes())?;
    w.write_all(&bytes)?;
    w.flush()?;
    Ok(())
}

/// Reads a 2-D little-endian float32 C-order .npy (versions 1-3).
fn read_npy_f32(path: &Path) -> Result<Matrix> {
    let mut buf = Vec::new();
    std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?.read_to_end(&mut buf)?;
    let p = path.display();
    ensure!(buf.len() >= 10 && &buf[..6] == b"\x93NUMPY", "{p}: not a .npy file");
    let (hlen, hstart) = match buf[6] {
        1 => (u16::from_le_bytes([buf[8], buf[9]]) as usize, 10),
        2 | 3 => {
            ensure!(buf.len() >= 12, "{p}: truncated header");
            (u32::from_le_bytes([buf[8], buf[9], buf[10], buf[11]]) as usize, 12)
        }
        v => bail!("{p}: unsupported npy version {v}"),
    };
    ensure!(buf.len() >= hstart + hlen, "{p}: truncated header");
    let header = std::str::from_utf8(&buf[hstart..hstart + hlen]).context("npy header is not UTF-8")?;
    let compact: String = header.chars().filter(|c| !c.is_whitespace()).collect();
    ensure!(compact.contains("'descr':'<f4'"), "{p}: need dtype '<f4' (float32 little-endian), header {header:?}");
    ensure!(compact.contains("'fortran_order':False"), "{p}: need C order");
    let shape =
        compact.split("'shape':(").nth(1).and_then(|s| s.split(')').next()).context("no shape in npy header")?;
    let dims: Vec<usize> =
        shape.split(',').filter(|s| !s.is_empty()).map(|s| s.parse().context("bad shape")).collect::<Result<_>>()?;
    ensure!(dims.len() == 2, "{p}: need a 2-D array, shape ({shape})");
    let body = &buf[hstart + hlen..];
    ensure!(body.len() == dims[0] * dims[1] * 4, "{p}: {} data bytes for shape ({shape})", body.len());
    let data = body.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
    Ok(Matrix { data, dim: dims[1] })
}
