//! Approximate nearest neighbours by inner product: an inverted-file index (IVF).
//!
//! A coarse quantizer of `nlist` unit centroids (spherical k-means on a sample) cuts the vectors
//! into lists; a query searches the `nprobe` lists whose centroids are nearest to it. Vectors are
//! stored as float32 or as 8-bit codes per dimension (min and step of each dimension from the
//! sample, as faiss's `SQ8`), decoded a list at a time.
//!
//! The search is batched by list, not by query: the queries that probe a list are gathered and
//! multiplied with the list's vectors in one GEMM ([`dot::dot_block`]), so every list is read
//! once per batch of queries instead of once per query. Top-k lists keep the best similarity
//! first and equal similarities by lower id ([`topk::offer`]), and a similarity does not depend
//! on the block it was computed in, so the neighbours depend on neither the thread count, nor
//! the query batches, nor how the database is cut into index shards (with a shared quantizer:
//! `xsent index build --quantizer`).
//!
//! File format (`.ivf`, little-endian): `XSENTIVF`, a u64 length and a JSON header ([`Meta`]),
//! zero bytes up to a multiple of 64, then the centroids (f32, `nlist × dim`), for int8 the
//! per-dimension min and step (f32, `dim` each), the list offsets (u64, `nlist + 1`), the ids
//! (u64, one per vector, list by list) and the codes (f32 or u8, `rows × dim`, list by list).

pub mod dot;
pub mod kmeans;
pub mod knn;
pub mod knn_gpu;
pub mod matrix;
pub mod mine;
pub mod synthetic;
pub mod topk;
pub mod vectors;

use anyhow::{bail, ensure, Context, Result};
use serde::{Deserialize, Serialize};
use std::io::{Read, Write};
use std::path::Path;

/// How vectors are stored in an index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Codec {
    /// float32: 4 bytes a value, exact inner products.
    F32,
    /// 8 bits a value (per-dimension min and step): 4× smaller, inner products within about
    /// 0.2% of the range of each dimension.
    Int8,
}

/// Index-building settings.
#[derive(Debug, Clone, Copy)]
pub struct BuildParams {
    /// Lists (default [`default_nlist`]).
    pub nlist: Option<usize>,
    /// Training vectors (default [`SAMPLE_PER_LIST`] per list, at most all).
    pub sample: Option<usize>,
    pub iterations: usize,
    pub seed: u64,
    pub codec: Codec,
}

impl Default for BuildParams {
    fn default() -> Self {
        Self { nlist: None, sample: None, iterations: DEFAULT_ITERATIONS, seed: 0, codec: Codec::F32 }
    }
}

/// Default k-means iterations.
pub const DEFAULT_ITERATIONS: usize = 10;
/// Default training vectors per list (faiss warns below 39).
pub const SAMPLE_PER_LIST: usize = 40;
/// Default lists probed per query: the smallest power of two whose recall@4 reached 0.95 on
/// multilingual-e5-small vectors of XNLI (zh queries in an index of en, 10k a side, 400 lists:
/// 0.92 at 32, 0.96 at 64; docs/scale.md). Chosen on XNLI, not on the test sets.
pub const DEFAULT_NPROBE: usize = 64;
/// Queries searched at a time: their rows, and per thread their top-k lists, are held.
pub const QUERY_CHUNK: usize = 131_072;

/// `4 √n` lists: this balances the coarse search (`nlist` products a query) against the list
/// scan (`nprobe × n / nlist`) at nprobe 16.
pub fn default_nlist(n: u64) -> usize {
    ((4.0 * (n as f64).sqrt()).round() as usize).clamp(1, n.max(1) as usize)
}

/// A source of rows: a file set ([`vectors::VectorSet`]) or a matrix in memory ([`SliceRows`]).
pub trait Rows {
    fn rows(&self) -> u64;
    fn dim(&self) -> usize;
    /// Append rows `start .. start + count` to `out`.
    fn read(&mut self, start: u64, count: usize, out: &mut Vec<f32>) -> Result<()>;
}

impl Rows for vectors::VectorSet {
    fn rows(&self) -> u64 {
        vectors::VectorSet::rows(self)
    }
    fn dim(&self) -> usize {
        vectors::VectorSet::dim(self)
    }
    fn read(&mut self, start: u64, count: usize, out: &mut Vec<f32>) -> Result<()> {
        vectors::VectorSet::read(self, start, count, out)
    }
}

/// Rows of a row-major matrix in memory.
pub struct SliceRows<'a> {
    pub data: &'a [f32],
    pub dim: usize,
}

impl Rows for SliceRows<'_> {
    fn rows(&self) -> u64 {
        (self.data.len() / self.dim.max(1)) as u64
    }
    fn dim(&self) -> usize {
        self.dim
    }
    fn read(&mut self, start: u64, count: usize, out: &mut Vec<f32>) -> Result<()> {
        let (s, d) = (start as usize, self.dim);
        ensure!((s + count) * d <= self.data.len(), "rows {s}..{} asked of {}", s + count, self.rows());
        out.extend_from_slice(&self.data[s * d..(s + count) * d]);
        Ok(())
    }
}

/// How the quantizer was trained.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TrainInfo {
    /// Rows of the vectors it was trained on, and how many of them were sampled.
    pub rows: u64,
    pub sample: usize,
    pub iterations: usize,
    pub seed: u64,
    /// Mean inner product of the sample with its nearest centroid.
    pub objective: f64,
}

/// The header of an index file.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Meta {
    pub xsent_index: u32,
    pub xsent_version: String,
    pub dim: usize,
    pub nlist: usize,
    /// Vectors in the index.
    pub rows: u64,
    pub codec: Codec,
    /// Id of the first vector (its row in the whole collection, for an index of one shard).
    pub id_offset: u64,
    /// sha256 of the centroids and codec parameters: indexes that share it share lists.
    pub quantizer: String,
    pub train: TrainInfo,
    /// The vector files it was built from.
    pub vectors: Vec<String>,
}

/// Per-dimension 8-bit codes: `x ≈ min + code × step`.
#[derive(Debug, Clone, PartialEq)]
struct Int8Codec {
    min: Vec<f32>,
    step: Vec<f32>,
}

impl Int8Codec {
    /// From the range of each dimension over `sample` rows.
    fn fit(sample: &[f32], d: usize) -> Self {
        let mut lo = vec![f32::INFINITY; d];
        let mut hi = vec![f32::NEG_INFINITY; d];
        for row in sample.chunks_exact(d) {
            for j in 0..d {
                lo[j] = lo[j].min(row[j]);
                hi[j] = hi[j].max(row[j]);
            }
        }
        let step = lo.iter().zip(&hi).map(|(&l, &h)| if h > l { (h - l) / 255.0 } else { 0.0 }).collect();
        let min = lo.into_iter().map(|l| if l.is_finite() { l } else { 0.0 }).collect();
        Self { min, step }
    }

    fn encode(&self, row: &[f32], out: &mut [u8]) {
        for (j, (&x, o)) in row.iter().zip(out.iter_mut()).enumerate() {
            let s = self.step[j];
            *o = if s > 0.0 { ((x - self.min[j]) / s).round().clamp(0.0, 255.0) as u8 } else { 0 };
        }
    }

    fn decode(&self, codes: &[u8], out: &mut Vec<f32>) {
        let d = self.min.len();
        out.clear();
        out.reserve(codes.len());
        for row in codes.chunks_exact(d) {
            out.extend(row.iter().zip(self.min.iter().zip(&self.step)).map(|(&c, (&m, &s))| m + c as f32 * s));
        }
    }
}

/// A trained coarse quantizer (and codec), to build indexes with.
#[derive(Debug, Clone)]
pub struct Quantizer {
    pub dim: usize,
    pub nlist: usize,
    pub codec: Codec,
    pub train: TrainInfo,
    centroids: Vec<f32>,
    int8: Option<Int8Codec>,
}

impl Quantizer {
    /// Train on a sample of `src` (rows chosen by `params.seed` among all rows, so the same rows
    /// whether `src` is one file or its shards).
    pub fn train(src: &mut dyn Rows, params: &BuildParams, threads: usize) -> Result<Self> {
        let (n, d) = (src.rows(), src.dim());
        ensure!(n > 0, "no vectors to train an index on");
        let nlist = params.nlist.unwrap_or_else(|| default_nlist(n));
        ensure!(nlist >= 1, "--nlist must be at least 1");
        ensure!(params.sample != Some(0), "the training sample (--sample, --index-sample) must be at least 1 vector");
        ensure!(
            nlist as u64 <= n,
            "--nlist {nlist} is more than the {n} vectors: give at most {n} (default 4 √n = {})",
            default_nlist(n)
        );
        let s = params.sample.unwrap_or(SAMPLE_PER_LIST * nlist).min(n as usize).max(nlist);
        use rand::SeedableRng;
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(params.seed);
        let mut rows: Vec<usize> =
            if s as u64 == n { (0..s).collect() } else { rand::seq::index::sample(&mut rng, n as usize, s).into_vec() };
        rows.sort_unstable();
        let mut sample = Vec::with_capacity(s * d);
        let mut i = 0;
        while i < rows.len() {
            // Runs of consecutive rows are read at once.
            let mut j = i + 1;
            while j < rows.len() && rows[j] == rows[j - 1] + 1 {
                j += 1;
            }
            src.read(rows[i] as u64, j - i, &mut sample)?;
            i = j;
        }
        ensure!(sample.iter().all(|x| x.is_finite()), "the vectors hold NaN or infinite values");
        let t = kmeans::train(&sample, d, nlist, params.iterations, params.seed ^ 0x5eed, threads)?;
        let int8 = (params.codec == Codec::Int8).then(|| Int8Codec::fit(&sample, d));
        Ok(Self {
            dim: d,
            nlist,
            codec: params.codec,
            train: TrainInfo {
                rows: n,
                sample: s,
                iterations: params.iterations,
                seed: params.seed,
                objective: t.objective,
            },
            centroids: t.centroids,
            int8,
        })
    }

    /// sha256 of the centroids and the codec's parameters.
    pub fn hash(&self) -> String {
        use sha2::{Digest, Sha256};
        let mut h = Sha256::new();
        h.update((self.dim as u64).to_le_bytes());
        h.update((self.nlist as u64).to_le_bytes());
        h.update([self.codec as u8]);
        for x in self.centroids.iter().chain(self.int8.iter().flat_map(|c| c.min.iter().chain(&c.step))) {
            h.update(x.to_le_bytes());
        }
        crate::io::digest::hex(&h.finalize())
    }

    /// The `nprobe` nearest lists of each query (`nq × min(nprobe, nlist)`).
    pub fn probes(&self, queries: &[f32], nq: usize, nprobe: usize, threads: usize) -> Result<Vec<u32>> {
        // A NaN has no nearest list: its probe would lie outside the lists.
        ensure!(
            queries.iter().all(|x| x.is_finite()),
            "a vector to place in the index's lists holds NaN or infinite values"
        );
        Ok(kmeans::nearest(queries, nq, &self.centroids, self.nlist, self.dim, nprobe, threads)?.0)
    }
}

/// Vectors as stored.
#[derive(Debug, Clone)]
enum Codes {
    F32(Vec<f32>),
    Int8(Vec<u8>),
}

/// An inverted-file index.
#[derive(Debug, Clone)]
pub struct Ivf {
    pub meta: Meta,
    pub quantizer: Quantizer,
    /// List `l` holds entries `offsets[l] .. offsets[l + 1]`.
    offsets: Vec<u64>,
    ids: Vec<u64>,
    codes: Codes,
}

/// Rows assigned or encoded at a time while building.
const BUILD_CHUNK: usize = 65_536;
/// Queries per GEMM of a list scan.
const QUERY_BLOCK: usize = 512;
/// Vectors per GEMM of a list scan.
const VECTOR_TILE: usize = 4096;

/// For each query, its `k` best ids and similarities (`n × k`, best first; `u64::MAX` and −∞
/// where fewer than `k` vectors were seen).
#[derive(Debug, Clone, PartialEq)]
pub struct Knn {
    pub k: usize,
    pub ids: Vec<u64>,
    pub sims: Vec<f32>,
}

impl Knn {
    pub fn empty(n: usize, k: usize) -> Self {
        Self { k, ids: vec![u64::MAX; n * k], sims: vec![f32::NEG_INFINITY; n * k] }
    }

    pub fn rows(&self) -> usize {
        self.ids.len().checked_div(self.k).unwrap_or(0)
    }

    /// Merge `other`'s lists (same queries) into these.
    pub fn merge(&mut self, other: &Knn) {
        let k = self.k;
        for q in 0..self.rows() {
            for r in 0..other.k {
                let (s, id) = (other.sims[q * other.k + r], other.ids[q * other.k + r]);
                if id == u64::MAX {
                    break;
                }
                topk::offer(&mut self.sims[q * k..(q + 1) * k], &mut self.ids[q * k..(q + 1) * k], s, id);
            }
        }
    }

    /// Append `other`'s rows (the next queries).
    pub fn append(&mut self, other: Knn) {
        debug_assert_eq!(self.k, other.k);
        self.ids.extend(other.ids);
        self.sims.extend(other.sims);
    }
}

impl Ivf {
    /// Add the rows of `src` to an index of quantizer `q`; their ids start at `id_offset`.
    pub fn build(
        q: Quantizer,
        src: &mut dyn Rows,
        id_offset: u64,
        vectors: Vec<String>,
        threads: usize,
    ) -> Result<Self> {
        let (n, d) = (src.rows(), src.dim());
        ensure!(n == 0 || d == q.dim, "the vectors have {d} values a row, the quantizer {}", q.dim);
        ensure!(
            id_offset.checked_add(n).is_some_and(|e| e < u64::MAX),
            "--id-offset {id_offset} leaves no room for {n} ids"
        );
        let mut list_of = Vec::with_capacity(n as usize);
        let mut buf = Vec::new();
        for start in (0..n).step_by(BUILD_CHUNK) {
            let m = (BUILD_CHUNK as u64).min(n - start) as usize;
            buf.clear();
            src.read(start, m, &mut buf)?;
            ensure!(
                buf.iter().all(|x| x.is_finite()),
                "vectors {start}..{} hold NaN or infinite values",
                start + m as u64
            );
            list_of.extend(q.probes(&buf, m, 1, threads)?);
        }
        let mut offsets = vec![0u64; q.nlist + 1];
        for &l in &list_of {
            offsets[l as usize + 1] += 1;
        }
        for l in 0..q.nlist {
            offsets[l + 1] += offsets[l];
        }
        let mut cursor = offsets.clone();
        let mut ids = vec![0u64; n as usize];
        let mut codes = match q.codec {
            Codec::F32 => Codes::F32(vec![0.0; n as usize * d]),
            Codec::Int8 => Codes::Int8(vec![0; n as usize * d]),
        };
        for start in (0..n).step_by(BUILD_CHUNK) {
            let m = (BUILD_CHUNK as u64).min(n - start) as usize;
            buf.clear();
            src.read(start, m, &mut buf)?;
            for (i, row) in buf.chunks_exact(d).enumerate() {
                let r = start as usize + i;
                let l = list_of[r] as usize;
                let at = cursor[l] as usize;
                cursor[l] += 1;
                ids[at] = id_offset + r as u64;
                match &mut codes {
                    Codes::F32(c) => c[at * d..(at + 1) * d].copy_from_slice(row),
                    Codes::Int8(c) => q
                        .int8
                        .as_ref()
                        .expect("an int8 quantizer has its codec")
                        .encode(row, &mut c[at * d..(at + 1) * d]),
                }
            }
        }
        let meta = Meta {
            xsent_index: 1,
            xsent_version: crate::VERSION.to_string(),
            dim: q.dim,
            nlist: q.nlist,
            rows: n,
            codec: q.codec,
            id_offset,
            quantizer: q.hash(),
            train: q.train.clone(),
            vectors,
        };
        Ok(Self { meta, quantizer: q, offsets, ids, codes })
    }

    /// Vectors in list `l`.
    pub fn list_len(&self, l: usize) -> usize {
        (self.offsets[l + 1] - self.offsets[l]) as usize
    }

    /// The `k` best vectors of each of the `nq` queries among the lists `probes` names
    /// (`nq × p` list ids, from [`Quantizer::probes`]).
    pub fn search_probed(&self, queries: &[f32], nq: usize, probes: &[u32], k: usize, threads: usize) -> Result<Knn> {
        let d = self.meta.dim;
        ensure!(queries.len() == nq * d, "{} query values are not {nq} rows of {d}", queries.len());
        let p = probes.len().checked_div(nq).unwrap_or(0);
        let nlist = self.meta.nlist;
        // The queries of each list, in query order.
        let mut qoff = vec![0usize; nlist + 1];
        for &l in probes {
            qoff[l as usize + 1] += 1;
        }
        for l in 0..nlist {
            qoff[l + 1] += qoff[l];
        }
        let mut fill = qoff.clone();
        let mut qlist = vec![0u32; probes.len()];
        for (i, &l) in probes.iter().enumerate() {
            qlist[fill[l as usize]] = (i / p.max(1)) as u32;
            fill[l as usize] += 1;
        }
        // Biggest products first, for an even spread over the threads.
        let mut work: Vec<usize> = (0..nlist).filter(|&l| qoff[l + 1] > qoff[l] && self.list_len(l) > 0).collect();
        work.sort_by_key(|&l| (std::cmp::Reverse((qoff[l + 1] - qoff[l]) * self.list_len(l)), l));
        struct State {
            knn: Knn,
            scratch: dot::Scratch,
            qbuf: Vec<f32>,
            vbuf: Vec<f32>,
            prod: Vec<f32>,
        }
        let states = topk::for_each_item(
            threads,
            work.len(),
            || State {
                knn: Knn::empty(nq, k),
                scratch: dot::Scratch::default(),
                qbuf: Vec::new(),
                vbuf: Vec::new(),
                prod: Vec::new(),
            },
            |st, w| {
                let l = work[w];
                let (start, len) = (self.offsets[l] as usize, self.list_len(l));
                let vecs: &[f32] = match &self.codes {
                    Codes::F32(c) => &c[start * d..(start + len) * d],
                    Codes::Int8(c) => {
                        self.quantizer
                            .int8
                            .as_ref()
                            .expect("int8 codec")
                            .decode(&c[start * d..(start + len) * d], &mut st.vbuf);
                        &st.vbuf
                    }
                };
                let ids = &self.ids[start..start + len];
                for qs in qlist[qoff[l]..qoff[l + 1]].chunks(QUERY_BLOCK) {
                    st.qbuf.clear();
                    for &q in qs {
                        st.qbuf.extend_from_slice(&queries[q as usize * d..(q as usize + 1) * d]);
                    }
                    for t0 in (0..len).step_by(VECTOR_TILE) {
                        let w = VECTOR_TILE.min(len - t0);
                        dot::dot_block(&st.qbuf, qs.len(), &vecs[t0 * d..], w, d, &mut st.prod, &mut st.scratch);
                        for (i, &q) in qs.iter().enumerate() {
                            let q = q as usize;
                            topk::offer_row(
                                &mut st.knn.sims[q * k..(q + 1) * k],
                                &mut st.knn.ids[q * k..(q + 1) * k],
                                &st.prod[i * w..(i + 1) * w],
                                |j| ids[t0 + j],
                            );
                        }
                    }
                }
                Ok(())
            },
        )?;
        let mut states = states.into_iter();
        let mut out = states.next().map_or_else(|| Knn::empty(nq, k), |s| s.knn);
        for s in states {
            out.merge(&s.knn);
        }
        Ok(out)
    }

    /// The `k` best vectors of each of the `nq` queries, probing `nprobe` lists each.
    pub fn search(&self, queries: &[f32], nq: usize, k: usize, nprobe: usize, threads: usize) -> Result<Knn> {
        let d = self.meta.dim;
        let mut out = Knn::empty(0, k);
        for c0 in (0..nq).step_by(QUERY_CHUNK) {
            let m = QUERY_CHUNK.min(nq - c0);
            let q = &queries[c0 * d..(c0 + m) * d];
            let probes = self.quantizer.probes(q, m, nprobe, threads)?;
            out.append(self.search_probed(q, m, &probes, k, threads)?);
        }
        Ok(out)
    }

    /// Bytes the index holds in memory (and on disk, less the header): per vector its codes
    /// (`4 × dim` in f32, `dim` in int8) and an 8-byte id; per list a centroid (`4 × dim`) and an
    /// 8-byte offset; for int8 `8 × dim` of codec.
    pub fn bytes(&self) -> u64 {
        let d = self.meta.dim as u64;
        let (per, codec) = match self.meta.codec {
            Codec::F32 => (4 * d, 0),
            Codec::Int8 => (d, 8 * d),
        };
        self.meta.rows * (per + 8) + self.meta.nlist as u64 * 4 * d + 8 * (self.meta.nlist as u64 + 1) + codec
    }

    /// Write the index to `w`.
    pub fn write(&self, w: &mut dyn Write) -> Result<()> {
        let json = serde_json::to_vec(&self.meta)?;
        w.write_all(MAGIC)?;
        w.write_all(&(json.len() as u64).to_le_bytes())?;
        w.write_all(&json)?;
        let used = MAGIC.len() + 8 + json.len();
        w.write_all(&vec![0u8; used.next_multiple_of(64) - used])?;
        write_f32s(w, &self.quantizer.centroids)?;
        if let Some(c) = &self.quantizer.int8 {
            write_f32s(w, &c.min)?;
            write_f32s(w, &c.step)?;
        }
        for &o in &self.offsets {
            w.write_all(&o.to_le_bytes())?;
        }
        let mut buf = Vec::with_capacity(1 << 16);
        for ids in self.ids.chunks(8192) {
            buf.clear();
            ids.iter().for_each(|i| buf.extend_from_slice(&i.to_le_bytes()));
            w.write_all(&buf)?;
        }
        match &self.codes {
            Codes::F32(c) => write_f32s(w, c)?,
            Codes::Int8(c) => w.write_all(c)?,
        }
        Ok(())
    }

    /// Read an index file.
    pub fn read(path: &Path) -> Result<Self> {
        let f = std::fs::File::open(path).with_context(|| format!("cannot open index {}", path.display()))?;
        let size = f.metadata()?.len();
        let mut r = std::io::BufReader::with_capacity(1 << 20, f);
        Self::read_from(&mut r, size)
            .with_context(|| format!("{} is not an xsent index, or is damaged", path.display()))
    }

    /// The header of an index file, without its lists.
    pub fn read_meta(path: &Path) -> Result<Meta> {
        let f = std::fs::File::open(path).with_context(|| format!("cannot open index {}", path.display()))?;
        let size = f.metadata()?.len();
        let mut r = std::io::BufReader::with_capacity(1 << 16, f);
        Self::read_header(&mut r, size)
            .map(|(meta, _)| meta)
            .with_context(|| format!("{} is not an xsent index, or is damaged", path.display()))
    }

    /// The magic, the JSON header and its padding: the header and the bytes read.
    fn read_header(r: &mut dyn Read, size: u64) -> Result<(Meta, usize)> {
        let mut magic = [0u8; 8];
        r.read_exact(&mut magic)?;
        ensure!(&magic == MAGIC, "it does not start with {:?}", std::str::from_utf8(MAGIC).unwrap_or_default());
        let mut len = [0u8; 8];
        r.read_exact(&mut len)?;
        let len = u64::from_le_bytes(len);
        ensure!(len < 1 << 30 && len < size, "a header of {len} bytes");
        let mut json = vec![0u8; len as usize];
        r.read_exact(&mut json)?;
        let meta: Meta = serde_json::from_slice(&json)?;
        ensure!(meta.xsent_index == 1, "index format {} is not known to this xsent", meta.xsent_index);
        ensure!(meta.dim >= 1 && meta.nlist >= 1, "its header says {} dimensions and {} lists", meta.dim, meta.nlist);
        let used = 16 + len as usize;
        let mut pad = vec![0u8; used.next_multiple_of(64) - used];
        r.read_exact(&mut pad)?;
        Ok((meta, used))
    }

    fn read_from(r: &mut dyn Read, size: u64) -> Result<Self> {
        let (meta, used) = Self::read_header(r, size)?;
        let (d, nlist, n) = (meta.dim as u64, meta.nlist as u64, meta.rows);
        // Checked: a header's sizes may be anything, and a product that wraps could match the file.
        let expect = (|| {
            let per = if meta.codec == Codec::F32 { d.checked_mul(4)? } else { d };
            let codec_bytes = if meta.codec == Codec::Int8 { d.checked_mul(8)? } else { 0 };
            (used.next_multiple_of(64) as u64)
                .checked_add(nlist.checked_mul(d)?.checked_mul(4)?)?
                .checked_add(codec_bytes)?
                .checked_add(nlist.checked_add(1)?.checked_mul(8)?)?
                .checked_add(n.checked_mul(per.checked_add(8)?)?)
        })();
        ensure!(
            expect == Some(size),
            "{size} bytes where its header ({} vectors of {d}, {nlist} lists, {:?}) needs {}",
            n,
            meta.codec,
            expect.map_or("more than 2^64".to_string(), |e| e.to_string())
        );
        let centroids = read_f32s(r, (nlist * d) as usize)?;
        let int8 = if meta.codec == Codec::Int8 {
            Some(Int8Codec { min: read_f32s(r, d as usize)?, step: read_f32s(r, d as usize)? })
        } else {
            None
        };
        let offsets = read_u64s(r, nlist as usize + 1)?;
        ensure!(
            offsets[0] == 0 && offsets.windows(2).all(|w| w[0] <= w[1]) && offsets[nlist as usize] == n,
            "its list offsets are not in order"
        );
        let ids = read_u64s(r, n as usize)?;
        let codes = match meta.codec {
            Codec::F32 => Codes::F32(read_f32s(r, (n * d) as usize)?),
            Codec::Int8 => {
                let mut c = vec![0u8; (n * d) as usize];
                r.read_exact(&mut c)?;
                Codes::Int8(c)
            }
        };
        let quantizer = Quantizer {
            dim: meta.dim,
            nlist: meta.nlist,
            codec: meta.codec,
            train: meta.train.clone(),
            centroids,
            int8,
        };
        ensure!(quantizer.hash() == meta.quantizer, "its centroids do not match the hash in its header");
        Ok(Self { meta, quantizer, offsets, ids, codes })
    }
}

const MAGIC: &[u8; 8] = b"XSENTIVF";

fn write_f32s(w: &mut dyn Write, x: &[f32]) -> Result<()> {
    let mut buf = Vec::with_capacity(1 << 16);
    for c in x.chunks(16384) {
        buf.clear();
        c.iter().for_each(|v| buf.extend_from_slice(&v.to_le_bytes()));
        w.write_all(&buf)?;
    }
    Ok(())
}

fn read_f32s(r: &mut dyn Read, n: usize) -> Result<Vec<f32>> {
    let mut out = Vec::with_capacity(n);
    let mut buf = vec![0u8; 1 << 16];
    while out.len() < n {
        let take = ((n - out.len()) * 4).min(buf.len());
        r.read_exact(&mut buf[..take])?;
        out.extend(buf[..take].chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])));
    }
    Ok(out)
}

fn read_u64s(r: &mut dyn Read, n: usize) -> Result<Vec<u64>> {
    let mut out = Vec::with_capacity(n);
    let mut buf = vec![0u8; 1 << 16];
    while out.len() < n {
        let take = ((n - out.len()) * 8).min(buf.len());
        r.read_exact(&mut buf[..take])?;
        out.extend(buf[..take].chunks_exact(8).map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes"))));
    }
    Ok(out)
}

/// Probe lists kept across index shards: at most this many bytes (`queries × nprobe × 4`).
pub const PROBE_CACHE_BYTES: usize = 1 << 30;

/// Search `queries` (all of them, [`QUERY_CHUNK`] at a time) in every index of `indexes`
/// (loaded one at a time by `load`), merging their top-k lists. The lists probed are computed
/// once for indexes that share a quantizer, when they fit in [`PROBE_CACHE_BYTES`].
pub fn search_all<I: std::borrow::Borrow<Ivf>>(
    count: usize,
    mut load: impl FnMut(usize) -> Result<I>,
    queries: &mut dyn Rows,
    k: usize,
    nprobe: usize,
    threads: usize,
) -> Result<Knn> {
    let nq = queries.rows() as usize;
    let mut out = Knn::empty(nq, k);
    let cacheable = (nq as u128) * (nprobe as u128) * 4 <= PROBE_CACHE_BYTES as u128;
    // The quantizer's hash and the probes of each query chunk.
    let mut cache: Option<(String, Vec<Vec<u32>>)> = None;
    let mut dim = None;
    for i in 0..count {
        let loaded = load(i)?;
        let index: &Ivf = loaded.borrow();
        if *dim.get_or_insert(index.meta.dim) != index.meta.dim {
            bail!("the indexes have vectors of {} and {} values", dim.unwrap_or(0), index.meta.dim);
        }
        ensure!(
            nq == 0 || queries.dim() == index.meta.dim,
            "the queries have {} values a row, the index {}",
            queries.dim(),
            index.meta.dim
        );
        let reuse = matches!(&cache, Some((h, _)) if *h == index.meta.quantizer);
        if cacheable && !reuse {
            cache = Some((index.meta.quantizer.clone(), Vec::new()));
        }
        let mut buf = Vec::new();
        for (ci, c0) in (0..nq).step_by(QUERY_CHUNK).enumerate() {
            let m = QUERY_CHUNK.min(nq - c0);
            buf.clear();
            queries.read(c0 as u64, m, &mut buf)?;
            // A NaN query has no nearest list (its probe would be out of range).
            if let Some(at) = buf.iter().position(|x| !x.is_finite()) {
                bail!("query {} (counting from 0) holds {}: queries must be finite", c0 + at / queries.dim(), buf[at]);
            }
            let computed;
            let p: &[u32] = match &mut cache {
                Some((_, chunks)) if reuse => &chunks[ci],
                Some((_, chunks)) => {
                    chunks.push(index.quantizer.probes(&buf, m, nprobe, threads)?);
                    &chunks[ci]
                }
                None => {
                    computed = index.quantizer.probes(&buf, m, nprobe, threads)?;
                    &computed
                }
            };
            let part = index.search_probed(&buf, m, p, k, threads)?;
            let mut slice =
                Knn { k, ids: out.ids[c0 * k..(c0 + m) * k].to_vec(), sims: out.sims[c0 * k..(c0 + m) * k].to_vec() };
            slice.merge(&part);
            out.ids[c0 * k..(c0 + m) * k].copy_from_slice(&slice.ids);
            out.sims[c0 * k..(c0 + m) * k].copy_from_slice(&slice.sims);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
