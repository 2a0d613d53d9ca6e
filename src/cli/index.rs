//! `xsent index build|search`: IVF indexes of vector files, for approximate kNN at scale.

use crate::index::vectors::VectorSet;
use crate::index::{BuildParams, Codec, Ivf, Quantizer};
use anyhow::{bail, ensure, Context, Result};
use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(clap::Subcommand)]
pub enum Command {
    /// Build an IVF index of vectors (float32 .npy or raw .f32, as `xsent embed` writes them;
    /// several files are read as one, in order: the shards of a sharded run).
    Build(BuildArgs),
    /// Find each query's k nearest vectors (inner product) in an index, or in several (the
    /// shards of one collection: their top-k lists are merged). Writes a .npy of shape
    /// (queries, k) with fields id (uint64) and sim (float32), best first.
    Search(SearchArgs),
}

#[derive(clap::Args)]
pub struct BuildArgs {
    /// Vector files, in order.
    #[arg(long, required = true, num_args = 1..)]
    vectors: Vec<PathBuf>,
    /// Values per vector, for raw .f32 files (.npy files say it themselves).
    #[arg(long)]
    dim: Option<usize>,
    /// The index file to write.
    #[arg(long, short = 'o')]
    out: PathBuf,
    /// Lists (k-means centroids); default 4 √n.
    #[arg(long)]
    nlist: Option<usize>,
    /// Vectors the k-means trains on, drawn at random (default 40 per list, at most all).
    #[arg(long)]
    sample: Option<usize>,
    /// k-means iterations.
    #[arg(long, default_value_t = crate::index::DEFAULT_ITERATIONS)]
    iterations: usize,
    /// How vectors are stored: f32, or int8 (per-dimension 8-bit codes, 4× smaller, approximate
    /// similarities).
    #[arg(long, value_enum, default_value = "f32")]
    codec: Codec,
    /// Seed of the training sample and the k-means.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Use the centroids and codec of this index (or quantizer) instead of training: the indexes
    /// of a collection's shards built with one quantizer find exactly what one index of the
    /// whole collection finds.
    #[arg(long, conflicts_with_all = ["nlist", "sample", "iterations", "codec", "seed"])]
    quantizer: Option<PathBuf>,
    /// Only train: write the quantizer (an index with no vectors) for `--quantizer`.
    #[arg(long, conflicts_with = "quantizer")]
    train_only: bool,
    /// Id of the first vector: its row in the whole collection, for an index of one shard
    /// (sum of the rows of the shards before it).
    #[arg(long, default_value_t = 0)]
    id_offset: u64,
}

#[derive(clap::Args)]
pub struct SearchArgs {
    /// Index files: one, or the shards of one collection.
    #[arg(long, required = true, num_args = 1..)]
    index: Vec<PathBuf>,
    /// Query vector files, in order.
    #[arg(long, required = true, num_args = 1..)]
    queries: Vec<PathBuf>,
    /// Values per vector, for raw .f32 query files.
    #[arg(long)]
    dim: Option<usize>,
    /// Neighbours per query.
    #[arg(short, long, default_value_t = 4)]
    k: usize,
    /// Lists searched per query (of each index).
    #[arg(long, default_value_t = crate::index::DEFAULT_NPROBE)]
    nprobe: usize,
    /// The .npy file of neighbours to write.
    #[arg(long, short = 'o')]
    out: PathBuf,
}

pub fn run(c: Command) -> Result<()> {
    match c {
        Command::Build(a) => build(a),
        Command::Search(a) => search(a),
    }
}

fn names(paths: &[PathBuf]) -> Vec<String> {
    paths.iter().map(|p| std::fs::canonicalize(p).unwrap_or_else(|_| p.clone()).display().to_string()).collect()
}

fn build(a: BuildArgs) -> Result<()> {
    let inputs: Vec<&Path> = a.vectors.iter().map(PathBuf::as_path).chain(a.quantizer.as_deref()).collect();
    super::check_output(&a.out, "-o", &inputs)?;
    let mut src = VectorSet::open(&a.vectors, a.dim)?;
    let threads = crate::threads::threads();
    let start = std::time::Instant::now();
    let q = match &a.quantizer {
        Some(path) => {
            let from = Ivf::read(path)?;
            ensure!(
                src.rows() == 0 || from.meta.dim == src.dim(),
                "--quantizer {} is for vectors of {} values, --vectors have {}",
                path.display(),
                from.meta.dim,
                src.dim()
            );
            from.quantizer
        }
        None => {
            let params = BuildParams {
                nlist: a.nlist,
                sample: a.sample,
                iterations: a.iterations,
                seed: a.seed,
                codec: a.codec,
            };
            Quantizer::train(&mut src, &params, threads)?
        }
    };
    let trained = start.elapsed().as_secs_f64();
    let index = if a.train_only {
        Ivf::build(
            q,
            &mut crate::index::SliceRows { data: &[], dim: src.dim() },
            a.id_offset,
            names(&a.vectors),
            threads,
        )?
    } else {
        Ivf::build(q, &mut src, a.id_offset, names(&a.vectors), threads)?
    };
    let out = crate::io::output::OutputFile::open(&a.out, false)?;
    {
        let mut w = std::io::BufWriter::with_capacity(1 << 20, out.file());
        index
            .write(&mut w)
            .and_then(|()| w.flush().map_err(Into::into))
            .with_context(|| format!("cannot write {}", a.out.display()))?;
    }
    out.commit()?;
    let m = &index.meta;
    errln!(
        "xsent index: {} vectors of {} in {} lists ({:?}, {:.1} MiB), quantizer trained in {trained:.1} s on {} of {} vectors (mean similarity to the centroid {:.4}), {:.1} s in all -> {}",
        m.rows,
        m.dim,
        m.nlist,
        m.codec,
        index.bytes() as f64 / (1 << 20) as f64,
        m.train.sample,
        m.train.rows,
        m.train.objective,
        start.elapsed().as_secs_f64(),
        a.out.display()
    );
    Ok(())
}

fn search(a: SearchArgs) -> Result<()> {
    ensure!(a.k > 0, "-k must be at least 1");
    ensure!(a.nprobe > 0, "--nprobe must be at least 1");
    let inputs: Vec<&Path> = a.index.iter().chain(&a.queries).map(PathBuf::as_path).collect();
    super::check_output(&a.out, "-o", &inputs)?;
    let mut queries = VectorSet::open(&a.queries, a.dim)?;
    // The headers first: the shards' ids must not overlap (a shard built without its
    // --id-offset, or one index given twice, would list neighbours under the same ids), and k
    // is at most the vectors there are (the top-k lists take queries × k × 12 bytes).
    let metas: Vec<_> = a.index.iter().map(|p| Ivf::read_meta(p)).collect::<Result<_>>()?;
    let mut ranges: Vec<(u64, u64, &Path)> = metas
        .iter()
        .zip(&a.index)
        .map(|(m, p)| (m.id_offset, m.id_offset.saturating_add(m.rows), p.as_path()))
        .collect();
    ranges.sort_unstable_by_key(|r| r.0);
    for w in ranges.windows(2) {
        if w[1].0 < w[0].1 {
            bail!(
                "--index {} holds ids {}..{} and {} ids {}..{}: the shards' ids overlap (build each shard with its own --id-offset, \
                 the rows before it; give each index once)",
                w[0].2.display(),
                w[0].0,
                w[0].1,
                w[1].2.display(),
                w[1].0,
                w[1].1
            );
        }
    }
    let total: u64 = metas.iter().map(|m| m.rows).sum();
    let mut k = a.k;
    if k as u64 > total.max(1) {
        k = total.max(1) as usize;
        errln!("xsent index: -k {} is more than the {total} vectors of the index: each query gets at most {k}", a.k);
    }
    let threads = crate::threads::threads();
    let start = std::time::Instant::now();
    let mut rows = 0;
    let knn = crate::index::search_all(
        a.index.len(),
        |i| {
            let index = Ivf::read(&a.index[i])?;
            rows += index.meta.rows;
            Ok(index)
        },
        &mut queries,
        k,
        a.nprobe,
        threads,
    )?;
    let out = crate::io::output::OutputFile::open(&a.out, false)?;
    {
        let mut w = std::io::BufWriter::with_capacity(1 << 20, out.file());
        write_knn(&mut w, &knn)
            .and_then(|()| w.flush().map_err(Into::into))
            .with_context(|| format!("cannot write {}", a.out.display()))?;
    }
    out.commit()?;
    errln!(
        "xsent index: {} queries searched in {} index files ({rows} vectors), k {}, nprobe {}, {:.1} s -> {}",
        knn.rows(),
        a.index.len(),
        k,
        a.nprobe,
        start.elapsed().as_secs_f64(),
        a.out.display()
    );
    if knn.ids.contains(&u64::MAX) {
        errln!("xsent index: some queries have fewer than {} neighbours (id 18446744073709551615, sim -inf): their probed lists held fewer vectors", k);
    }
    Ok(())
}

/// The .npy dtype of neighbour lists.
const KNN_DESCR: &str = "[('id', '<u8'), ('sim', '<f4')]";

/// Write neighbour lists as a structured .npy: shape (queries, k), fields id and sim.
pub fn write_knn(w: &mut dyn Write, knn: &crate::index::Knn) -> Result<()> {
    let dict = format!("{{'descr': {KNN_DESCR}, 'fortran_order': False, 'shape': ({}, {}), }}", knn.rows(), knn.k);
    let mut h = dict.into_bytes();
    h.resize((10 + h.len() + 1).next_multiple_of(64) - 11, b' ');
    h.push(b'\n');
    w.write_all(b"\x93NUMPY\x01\x00")?;
    w.write_all(&(h.len() as u16).to_le_bytes())?;
    w.write_all(&h)?;
    let mut buf = Vec::with_capacity(12 * 4096);
    for (ids, sims) in knn.ids.chunks(4096).zip(knn.sims.chunks(4096)) {
        buf.clear();
        for (i, s) in ids.iter().zip(sims) {
            buf.extend_from_slice(&i.to_le_bytes());
            buf.extend_from_slice(&s.to_le_bytes());
        }
        w.write_all(&buf)?;
    }
    Ok(())
}

/// Read neighbour lists that [`write_knn`] wrote (several files: their rows in order).
pub fn read_knn(paths: &[PathBuf]) -> Result<crate::index::Knn> {
    let mut out: Option<crate::index::Knn> = None;
    for path in paths {
        crate::index::vectors::refuse_gzip(path, "neighbour")?;
        let raw = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
        let bad = || {
            anyhow::anyhow!(
                "{} is not a neighbour file of `xsent index search` (.npy with fields id and sim)",
                path.display()
            )
        };
        ensure!(raw.len() >= 10 && &raw[..8] == b"\x93NUMPY\x01\x00", bad());
        let hl = u16::from_le_bytes([raw[8], raw[9]]) as usize;
        let header = std::str::from_utf8(raw.get(10..10 + hl).ok_or_else(bad)?).map_err(|_| bad())?;
        ensure!(header.contains(KNN_DESCR), bad());
        let shape = header.split("'shape': (").nth(1).and_then(|s| s.split(')').next()).ok_or_else(bad)?;
        let dims: Vec<usize> = shape
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| s.parse().map_err(|_| bad()))
            .collect::<Result<_>>()?;
        let [n, k] = dims[..] else { return Err(bad()) };
        let body = &raw[10 + hl..];
        // Checked: a shape whose product wraps could match the body's length.
        ensure!(
            n.checked_mul(k).and_then(|nk| nk.checked_mul(12)) == Some(body.len()),
            "{}: {} bytes of lists where its header says {n} × {k}",
            path.display(),
            body.len()
        );
        let mut part = crate::index::Knn { k, ids: Vec::with_capacity(n * k), sims: Vec::with_capacity(n * k) };
        for e in body.chunks_exact(12) {
            part.ids.push(u64::from_le_bytes(e[..8].try_into().expect("8 bytes")));
            part.sims.push(f32::from_le_bytes(e[8..].try_into().expect("4 bytes")));
        }
        match &mut out {
            None => out = Some(part),
            Some(o) => {
                ensure!(o.k == k, "{}: k = {k}, the files before it k = {}", path.display(), o.k);
                o.append(part);
            }
        }
    }
    out.context("no neighbour files given")
}
