//! Exact k-NN timing for margin mining: `xsent::eval::knn::knn` in both directions
//! (x→y and y→x, as `xsent mine` / BUCC scoring do) on random unit vectors.
//! Run by `scripts/bench-mine.sh`, which compares it with faiss `IndexFlatIP`.
//!
//! ```text
//! cargo run --release --example bench_knn -- --gen --n 100000 --dim 384 --k 4 \
//!     --x x.npy --y y.npy --out DIR
//! cargo run --release --example bench_knn -- --x x.npy --y y.npy --k 4 --out DIR
//! ```
//!
//! * `--gen`: make two sets of `--n` random unit vectors of `--dim` (Gaussian, seeded
//!   ChaCha8, L2-normalised in f32); written to `--x` / `--y` as float32 `.npy` when given, so
//!   another engine can search exactly the same data. Without `--gen`, `--x` and `--y` are read
//!   (float32, C order, used as they are: they must already be unit rows).
//! * `--out DIR`: writes `x2y_idx.npy`, `y2x_idx.npy` (int32, rows × k) and `x2y_sim.npy`,
//!   `y2x_sim.npy` (float32), best first.
//! * `--gemm-probe`: instead of `knn`, time only the block GEMMs `knn` runs (1024 queries ×
//!   8192 targets, one block per worker, single-threaded candle ops), once without and once with
//!   copying each product out (`to_vec1`), to see how much of `knn`'s time is GEMM.
//!
//! Threads: `XSENT_THREADS` (else `RAYON_NUM_THREADS`, else all cores) workers.
//! Prints one JSON line on stdout.

use anyhow::{bail, ensure, Context, Result};
use candle_core::{Device, Tensor};
use clap::Parser;
use rand::{Rng, SeedableRng};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;
use xsent::eval::knn::{knn, Matrix, Neighbours};

// Same allocator as the xsent binary (src/main.rs).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser, Debug)]
#[command(about = "Time xsent's exact kNN in both directions (margin mining) on random unit vectors")]
struct Args {
    /// Vectors per side (with --gen).
    #[arg(long, default_value_t = 100_000)]
    n: usize,
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
    /// Time only the block GEMMs that knn runs (see the file's doc).
    #[arg(long)]
    gemm_probe: bool,
}

fn main() -> Result<()> {
    // Before any thread exists: single-threaded candle ops, kNN workers run one block each.
    xsent::parallel::init_data_parallel();
    let a = Args::parse();
    ensure!(a.repeat >= 1, "--repeat must be at least 1");

    let t = Instant::now();
    let (x, y) = if a.gen {
        ensure!(a.n > 0 && a.dim > 0, "--n and --dim must be positive");
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(a.seed);
        let x = random_unit(&mut rng, a.n, a.dim);
        let y = random_unit(&mut rng, a.n, a.dim);
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
    let threads = xsent::parallel::threads();
    // Multiply-adds of the two similarity products, counted as 2 FLOPs each.
    let flop = 2.0 * (n as f64) * (m as f64) * (d as f64) * 2.0;

    if a.gemm_probe {
        let mut best = (f64::INFINITY, f64::INFINITY);
        for _ in 0..a.repeat {
            let g = gemm_probe(&x, &y, false)? + gemm_probe(&y, &x, false)?;
            let c = gemm_probe(&x, &y, true)? + gemm_probe(&y, &x, true)?;
            best = (best.0.min(g), best.1.min(c));
        }
        let j = serde_json::json!({
            "mode": "gemm-probe", "n": n, "m": m, "dim": d, "threads": threads, "repeat": a.repeat,
            "gemm_s": best.0, "gemm_gflops": flop / best.0 / 1e9,
            "gemm_copy_s": best.1, "gemm_copy_gflops": flop / best.1 / 1e9,
        });
        println!("{j}");
        return Ok(());
    }

    let mut best: Option<(f64, f64, Neighbours, Neighbours)> = None;
    for _ in 0..a.repeat {
        let t = Instant::now();
        let x2y = knn(&x, &y, a.k)?;
        let t_x2y = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let y2x = knn(&y, &x, a.k)?;
        let t_y2x = t.elapsed().as_secs_f64();
        if best.as_ref().is_none_or(|b| t_x2y + t_y2x < b.0 + b.1) {
            best = Some((t_x2y, t_y2x, x2y, y2x));
        }
    }
    let (t_x2y, t_y2x, x2y, y2x) = best.expect("repeat >= 1");
    if let Some(dir) = &a.out {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        for (name, nb, rows) in [("x2y", &x2y, n), ("y2x", &y2x, m)] {
            let idx: Vec<i32> = nb.idx.iter().map(|&i| i as i32).collect();
            write_npy(&dir.join(format!("{name}_idx.npy")), "<i4", bytes_i32(&idx), rows, nb.k)?;
            write_npy_f32(&dir.join(format!("{name}_sim.npy")), &nb.sims, rows, nb.k)?;
        }
    }
    let total = t_x2y + t_y2x;
    let j = serde_json::json!({
        "mode": "knn", "n": n, "m": m, "dim": d, "k": x2y.k, "threads": threads, "repeat": a.repeat,
        "data_s": data_s, "x2y_s": t_x2y, "y2x_s": t_y2x, "seconds": total,
        "gemm_flop_per_s_equiv_gflops": flop / total / 1e9,
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

/// The block GEMMs of `knn(q, t, _)`: targets pre-transposed in blocks of 8192, query blocks of
/// 1024 spread over the same number of workers; `copy` adds the product's copy-out.
/// Mirrors QUERY_BLOCK / TARGET_BLOCK in src/eval/knn.rs.
fn gemm_probe(q: &Matrix, t: &Matrix, copy: bool) -> Result<f64> {
    const QB: usize = 1024;
    const TB: usize = 8192;
    let start = Instant::now();
    let (n, m, d) = (q.rows(), t.rows(), q.dim);
    let block = |a: &Matrix, s: usize, len: usize| Tensor::from_slice(&a.data[s * d..(s + len) * d], (len, d), &Device::Cpu);
    let tblocks: Vec<Tensor> =
        (0..m).step_by(TB).map(|s| Ok(block(t, s, TB.min(m - s))?.t()?.contiguous()?)).collect::<Result<_>>()?;
    let qstarts: Vec<usize> = (0..n).step_by(QB).collect();
    let next = AtomicUsize::new(0);
    let sink = AtomicUsize::new(0);
    let work = || -> Result<()> {
        loop {
            let b = next.fetch_add(1, Ordering::Relaxed);
            let Some(&s) = qstarts.get(b) else { return Ok(()) };
            let qb = block(q, s, QB.min(n - s))?;
            for tb in &tblocks {
                let p = qb.matmul(tb)?;
                if copy {
                    let v = p.flatten_all()?.to_vec1::<f32>()?;
                    sink.fetch_add(v.len() + (v[0] > 2.0) as usize, Ordering::Relaxed);
                } else {
                    sink.fetch_add(p.elem_count(), Ordering::Relaxed);
                }
            }
        }
    };
    let workers = xsent::parallel::threads().min(qstarts.len()).max(1);
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..workers).map(|_| s.spawn(work)).collect();
        hs.into_iter().try_for_each(|h| h.join().expect("worker panicked"))
    })?;
    ensure!(sink.load(Ordering::Relaxed) >= n * m, "probe did not run every block");
    Ok(start.elapsed().as_secs_f64())
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
    let shape = compact.split("'shape':(").nth(1).and_then(|s| s.split(')').next()).context("no shape in npy header")?;
    let dims: Vec<usize> =
        shape.split(',').filter(|s| !s.is_empty()).map(|s| s.parse().context("bad shape")).collect::<Result<_>>()?;
    ensure!(dims.len() == 2, "{p}: need a 2-D array, shape ({shape})");
    let body = &buf[hstart + hlen..];
    ensure!(body.len() == dims[0] * dims[1] * 4, "{p}: {} data bytes for shape ({shape})", body.len());
    let data = body.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
    Ok(Matrix { data, dim: dims[1] })
}
