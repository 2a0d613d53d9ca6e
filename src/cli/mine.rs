use super::ModelArgs;
use crate::eval::bucc::Settings;
use crate::eval::knn::{mine, Margin, Matrix, Retrieval};
use crate::whole_rows::RowWriter;
use anyhow::{ensure, Result};
use std::io::Write;
use std::path::PathBuf;

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
}

impl MiningArgs {
    pub fn settings(&self) -> Result<Settings> {
        ensure!(self.k > 0, "--k must be at least 1");
        Ok(Settings { k: self.k, margin: self.margin, retrieval: self.retrieval })
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
}

/// `score<TAB>src<TAB>tgt` lines, best first (LASER's mine_bitexts output).
pub fn run(a: Args) -> Result<()> {
    super::check_batch_size(a.batch_size)?;
    if let Some(t) = a.threshold {
        ensure!(t.is_finite(), "--threshold {t} is not a finite number: give a margin score such as 1.05");
    }
    let sink = match &a.output {
        Some(out) => {
            super::check_output(out, "-o", &[&a.src_file, &a.tgt_file])?;
            Some(super::OutputFile::open(out, a.force)?)
        }
        None => {
            // Ctrl-C lets a write to standard output end at a line's end.
            super::interrupt_handler()?;
            None
        }
    };
    let s = a.mining.settings()?;
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
    for (distinct, lines, file) in [(src.len(), src_lines.len(), &a.src_file), (tgt.len(), tgt_lines.len(), &a.tgt_file)] {
        if distinct < lines {
            errln!("xsent mine: {} of {} lines of {} repeat an earlier line; each text is mined once", lines - distinct, lines, file.display());
        }
    }
    if let Some(note) = crate::eval::knn::k_note(s.k, src.len(), tgt.len()) {
        errln!("xsent mine: {note}");
    }
    let enc = a.model.load()?;
    let x = Matrix::embed(enc.as_ref(), &src, a.batch_size)?;
    let y = Matrix::embed(enc.as_ref(), &tgt, a.batch_size)?;
    let cands = mine(&x, &y, s.k, s.margin, s.retrieval)?;
    drop((x, y));
    // Lines are passed on whole: an interrupted run never ends its output with a cut line.
    let mut out: RowWriter<Box<dyn Write + '_>> = RowWriter::new(match &sink {
        Some(f) => Box::new(f.file()),
        None => Box::new(std::io::stdout().lock()),
    });
    let mut kept = 0;
    for c in cands.iter().filter(|c| a.threshold.is_none_or(|t| c.score >= t)) {
        out.row(|b| writeln!(b, "{:.6}\t{}\t{}", c.score, src[c.src], tgt[c.tgt]))?;
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
