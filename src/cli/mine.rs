use super::ModelArgs;
use crate::eval::bucc::Settings;
use crate::index::knn::{mine, Candidate, Margin, Matrix, Retrieval};
use crate::whole_rows::RowWriter;
use anyhow::{ensure, Result};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Margin-mining options, shared by `xsent mine` and `xsent eval bucc|all`.
#[derive(clap::Args, Debug, Clone, Copy)]
pub struct MiningArgs {
    /// How a candidate's cosine is compared with its k nearest neighbours' (ratio: cos / avg).
    #[arg(long, value_enum, default_value = "ratio")]
    pub margin: Margin,
    /// Which candidates are kept.
    #[arg(long, value_enum, default_value = "max")]
    pub retrieval: Retrieval,
    /// Neighbourhood size of the margin.
    #[arg(long, default_value_t = 4)]
    pub k: usize,
    #[command(flatten)]
    pub index: IndexArgs,
}

/// Approximate neighbours from an IVF index of each side (`--index`), built in memory.
#[derive(clap::Args, Debug, Clone, Copy)]
pub struct IndexArgs {
    /// Find the neighbours with an IVF index of each side instead of the exact search: faster
    /// on large sides, and approximate (see --nprobe).
    #[arg(long)]
    pub index: bool,
    /// Lists of each index (default 4 √n).
    #[arg(long, requires = "index")]
    pub nlist: Option<usize>,
    /// Lists searched per sentence: more finds more of the exact neighbours, slower.
    #[arg(long, requires = "index", default_value_t = crate::index::DEFAULT_NPROBE)]
    pub nprobe: usize,
    /// How the indexes store vectors.
    #[arg(long, requires = "index", value_enum, default_value = "f32")]
    pub codec: crate::index::Codec,
    /// Vectors the k-means of each index trains on (default 40 per list).
    #[arg(long, requires = "index")]
    pub index_sample: Option<usize>,
    /// Seed of the training sample and k-means.
    #[arg(long, requires = "index", default_value_t = 0)]
    pub index_seed: u64,
}

impl MiningArgs {
    pub fn settings(&self) -> Result<Settings> {
        ensure!(self.k > 0, "--k must be at least 1");
        let i = &self.index;
        if i.index {
            ensure!(i.nprobe > 0, "--nprobe must be at least 1");
            ensure!(i.nlist != Some(0), "--nlist must be at least 1");
            ensure!(i.index_sample != Some(0), "--index-sample must be at least 1");
        }
        let index = i.index.then_some(crate::index::mine::AnnParams {
            nlist: i.nlist,
            nprobe: i.nprobe,
            sample: i.index_sample,
            iterations: crate::index::DEFAULT_ITERATIONS,
            seed: i.index_seed,
            codec: i.codec,
        });
        Ok(Settings { k: self.k, margin: self.margin, retrieval: self.retrieval, index })
    }
}

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    model: ModelArgs,
    /// Source-language sentences, one per line.
    #[arg(long)]
    src_file: PathBuf,
    /// Target-language sentences, one per line.
    #[arg(long)]
    tgt_file: PathBuf,
    /// Keep only pairs scoring at least this (may be negative, e.g. with `--margin distance`).
    #[arg(long, allow_negative_numbers = true)]
    threshold: Option<f64>,
    #[command(flatten)]
    mining: MiningArgs,
    /// Write the TSV here instead of stdout.
    #[arg(long, short = 'o')]
    output: Option<PathBuf>,
    /// Replace -o FILE even when it is read-only.
    #[arg(long)]
    force: bool,
    #[arg(long, default_value_t = 64)]
    batch_size: usize,
    /// Mine from neighbour lists already found (`xsent index search` of the source vectors in the
    /// targets' index; several files are read in order) instead of a model: line i of
    /// --src-file is row i. Needs --tgt-knn.
    #[arg(long, num_args = 1.., requires = "tgt_knn", conflicts_with_all = ["batch_size"])]
    src_knn: Vec<PathBuf>,
    /// The targets' neighbour lists among the sources (with --src-knn).
    #[arg(long, num_args = 1.., requires = "src_knn")]
    tgt_knn: Vec<PathBuf>,
}

/// `score<TAB>src<TAB>tgt` lines, best first (LASER's mine_bitexts output).
pub fn run(a: Args) -> Result<()> {
    super::check_batch_size(a.batch_size)?;
    if let Some(t) = a.threshold {
        ensure!(t.is_finite(), "--threshold {t} is not a finite number: give a margin score such as 1.05");
    }
    let sink = match &a.output {
        Some(out) => {
            // The neighbour lists are inputs too (--src-knn, --tgt-knn).
            let inputs: Vec<&Path> = [&a.src_file, &a.tgt_file]
                .into_iter()
                .chain(&a.src_knn)
                .chain(&a.tgt_knn)
                .map(PathBuf::as_path)
                .collect();
            super::check_output(out, "-o", &inputs)?;
            Some(crate::io::output::OutputFile::open(out, a.force)?)
        }
        None => {
            // Ctrl-C lets a write to standard output end at a line's end.
            crate::io::output::interrupt_handler()?;
            None
        }
    };
    let s = a.mining.settings()?;
    if !a.src_knn.is_empty() {
        ensure!(a.model.model.is_none(), "--src-knn mines from neighbour lists: it takes no --model");
        ensure!(s.index.is_none(), "--src-knn mines from neighbour lists already found: --index does not apply");
        return mine_knn(&a, s, sink);
    }
    let model = &a.model;
    let src_lines = read_sentences(&a.src_file)?;
    let tgt_lines = read_sentences(&a.tgt_file)?;
    for (lines, file) in [(&src_lines, &a.src_file), (&tgt_lines, &a.tgt_file)] {
        ensure!(!lines.is_empty(), "nothing to mine: {} has no non-blank line", file.display());
    }
    // Each distinct sentence is embedded and searched once (LASER's `mine_bitexts --unify`, as
    // `eval bucc`), so copies of a sentence do not fill another's k neighbours; the output holds
    // each pair of texts once.
    let (src, _) = crate::data::group_distinct(src_lines.iter().map(String::as_str));
    let (tgt, _) = crate::data::group_distinct(tgt_lines.iter().map(String::as_str));
    for (distinct, lines, file) in
        [(src.len(), src_lines.len(), &a.src_file), (tgt.len(), tgt_lines.len(), &a.tgt_file)]
    {
        if distinct < lines {
            errln!(
                "xsent mine: {} of {} lines of {} repeat an earlier line; each text is mined once",
                lines - distinct,
                lines,
                file.display()
            );
        }
    }
    if let Some(note) = crate::index::knn::k_note(s.k, src.len(), tgt.len()) {
        errln!("xsent mine: {note}");
    }
    let enc = model.load_noting_cuts()?;
    let x = Matrix::embed_normalized(&enc, &src, a.batch_size)?;
    enc.say("xsent mine", &format!("distinct lines of {}", a.src_file.display()));
    let y = Matrix::embed_normalized(&enc, &tgt, a.batch_size)?;
    enc.say("xsent mine", &format!("distinct lines of {}", a.tgt_file.display()));
    let cands = match &s.index {
        None => mine(&x, &y, s.k, s.margin, s.retrieval)?,
        Some(p) => {
            let (x2y, y2x) = crate::index::mine::knn_both_ivf(&x, &y, s.k, p)?;
            crate::index::knn::mine_neighbours(&x2y, &y2x, s.k, s.margin, s.retrieval)?
        }
    };
    drop((x, y));
    write_pairs(&cands, &src, &tgt, a.threshold, sink)
}

/// `score<TAB>src<TAB>tgt` lines of the candidates scoring at least `threshold`, into the
/// output (committed) or stdout. Lines are passed on whole: an interrupted run never ends its
/// output with a cut line.
fn write_pairs<S: AsRef<str>>(
    cands: &[Candidate],
    src: &[S],
    tgt: &[S],
    threshold: Option<f64>,
    sink: Option<crate::io::output::OutputFile>,
) -> Result<()> {
    let mut out: RowWriter<Box<dyn Write + '_>> = RowWriter::new(match &sink {
        Some(f) => Box::new(f.file()),
        None => Box::new(std::io::stdout().lock()),
    });
    let mut kept = 0;
    for c in cands.iter().filter(|c| threshold.is_none_or(|t| c.score >= t)) {
        out.row(|b| writeln!(b, "{:.6}\t{}\t{}", c.score, src[c.src].as_ref(), tgt[c.tgt].as_ref()))?;
        kept += 1;
    }
    out.flush()?;
    drop(out);
    if let Some(f) = sink {
        f.commit()?;
    }
    errln!("xsent mine: {kept} pairs written ({} candidates)", cands.len());
    Ok(())
}

/// `--src-knn/--tgt-knn`: margin scores from neighbour lists found by `xsent index search`.
/// Row i is line i, so the files must hold each sentence once and no blank line (the rows of
/// vectors and indexes are the lines as they are).
fn mine_knn(a: &Args, s: Settings, sink: Option<crate::io::output::OutputFile>) -> Result<()> {
    let src = read_rows(&a.src_file)?;
    let tgt = read_rows(&a.tgt_file)?;
    let x2y = crate::cli::index::read_knn(&a.src_knn)?;
    let y2x = crate::cli::index::read_knn(&a.tgt_knn)?;
    for (knn, lines, flag, file, other) in
        [(&x2y, src.len(), "--src-knn", &a.src_file, tgt.len()), (&y2x, tgt.len(), "--tgt-knn", &a.tgt_file, src.len())]
    {
        ensure!(
            knn.rows() == lines,
            "{flag} holds lists for {} rows, but {} has {lines} lines: give the lists of its vectors, in order",
            knn.rows(),
            file.display()
        );
        ensure!(
            knn.k >= s.k.min(other),
            "{flag} holds {} neighbours a row, fewer than --k {}: search with -k {} or more",
            knn.k,
            s.k,
            s.k
        );
        // The first k of each list are used: the padding of a search whose probed lists held
        // fewer vectors, or a similarity that is not a number, would be scored as a neighbour.
        let used = s.k.min(other);
        for r in 0..knn.rows() {
            let row = r * knn.k..r * knn.k + used;
            if let Some(j) = knn.ids[row.clone()].iter().position(|&i| i == u64::MAX) {
                anyhow::bail!(
                    "{flag}: row {r} has {j} neighbours, fewer than --k {used} (`index search` pads such lists with id \
                     18446744073709551615 when its probed lists hold fewer vectors): search again with a larger --nprobe, or mine with a smaller --k"
                );
            }
            if let Some(j) = knn.sims[row].iter().position(|x| !x.is_finite()) {
                anyhow::bail!(
                    "{flag}: row {r}, neighbour {j} has similarity {}: the lists must hold finite similarities",
                    knn.sims[r * knn.k + j]
                );
            }
        }
        if let Some(bad) = knn.ids.iter().find(|&&i| i >= other as u64) {
            anyhow::bail!("{flag} names row {bad}, but the other side has {other} lines (are the files given in the order they were embedded?)");
        }
    }
    let x2y = crate::index::mine::to_neighbours(&x2y)?;
    let y2x = crate::index::mine::to_neighbours(&y2x)?;
    let cands = crate::index::knn::mine_neighbours(&x2y, &y2x, s.k, s.margin, s.retrieval)?;
    write_pairs(&cands, &src, &tgt, a.threshold, sink)
}

/// The lines of a file whose rows were embedded as they are: a blank or repeated line is an
/// error (it would be a neighbour of its own, or fill others' neighbourhoods twice).
fn read_rows(path: &std::path::Path) -> Result<Vec<String>> {
    let lines = crate::data::read_lines(path)?;
    let mut seen = std::collections::HashMap::with_capacity(lines.len());
    for (i, l) in lines.iter().enumerate() {
        if l.contains('\t') {
            anyhow::bail!(
                "{}:{} holds a tab, which the output's columns cannot carry; replace the tabs before embedding",
                path.display(),
                i + 1
            );
        }
        if l.trim().is_empty() {
            anyhow::bail!("{}:{} is blank: with --src-knn every line is a sentence; remove blank and repeated lines before embedding (e.g. awk 'NF && !seen[$0]++')", path.display(), i + 1);
        }
        if let Some(first) = seen.insert(l.as_str(), i) {
            anyhow::bail!("{}:{} repeats line {}: with --src-knn each sentence must appear once; remove repeated lines before embedding (e.g. awk 'NF && !seen[$0]++')", path.display(), i + 1, first + 1);
        }
    }
    drop(seen);
    Ok(lines)
}

/// The sentences of an input file: blank lines are no sentences to pair, so they are left out
/// (and counted on stderr); a tab inside a sentence is an error (the output's columns are
/// tab-separated), with its line number in the file.
fn read_sentences(path: &std::path::Path) -> Result<Vec<String>> {
    let lines = crate::data::read_lines(path)?;
    if let Some(i) = lines.iter().position(|l| l.contains('\t') && !l.trim().is_empty()) {
        anyhow::bail!(
            "{}:{} holds a tab, which the output's score<TAB>src<TAB>tgt columns cannot carry; replace the tabs first, e.g. with `tr '\\t' ' '`",
            path.display(),
            i + 1
        );
    }
    let (kept, blank) = crate::data::drop_blank(lines);
    if blank > 0 {
        errln!("xsent mine: {blank} blank lines of {} left out", path.display());
    }
    Ok(kept)
}
