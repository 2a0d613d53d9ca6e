use super::mine::MiningArgs;
use super::ModelArgs;
use crate::clock::utc_now;
use crate::data::provenance::DataFile;
use crate::eval::bucc;
use crate::eval::report::{Entry, ModelFile, Report};
use anyhow::{bail, ensure, Result};
use clap::ValueEnum;
use std::path::{Path, PathBuf};
use std::time::Instant;

#[derive(clap::Subcommand)]
pub enum Task {
    /// STS 2017: tracks 1-5 and the extended en-de set; Spearman (main) and Pearson ×100,
    /// seed papers' numbers beside ours, and the language-bias score. With --pairs FILE: those
    /// files of scored pairs instead (e.g. the STS benchmark's sts-dev.csv).
    Sts(StsArgs),
    /// Tatoeba: cosine nearest neighbour both ways for every tatoeba.xxx-eng.{xxx,eng} present
    /// (or --langs deu,fra,...); accuracy xx→en, en→xx and their mean, averaged over languages.
    Tatoeba(Args),
    /// BUCC 2018 bitext mining: margin-scored candidates, precision/recall/F1 at the best-F1
    /// threshold (from the train, training, dev or sample split when a pair has another split to
    /// score, test or training; else the oracle threshold on the one split).
    Bucc(BuccArgs),
    /// Cross-lingual sentence retrieval: P@1 of --src lines retrieving the same line of --tgt
    /// among all --tgt lines plus --distractors, or the Multi30k preset (--multi30k).
    Xsr(XsrArgs),
    /// STS 2017, Tatoeba and BUCC in one run (one model load, one report).
    All(BuccArgs),
}

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    model: ModelArgs,
    /// Benchmark data directory (default: $XSENT_DATA, else ${XSENT_CACHE:-~/.cache/xsent}/data when it exists, else
    /// ../shared/data beside xsent's checkout).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Only these sets / languages / pairs (comma-separated; not with `eval all`); default all present.
    #[arg(long, value_delimiter = ',')]
    langs: Vec<String>,
    /// Write a JSON report here.
    #[arg(long)]
    report: Option<PathBuf>,
    /// Compare with another model's report of the same sets (`--report` of an earlier run): the
    /// paired bootstrap difference of each score and of each task's mean, with its 95 % interval.
    #[arg(long, value_name = "REPORT.json")]
    compare: Option<PathBuf>,
    #[arg(long, default_value_t = 64)]
    batch_size: usize,
}

#[derive(clap::Args)]
pub struct StsArgs {
    #[command(flatten)]
    common: Args,
    /// Score these files of scored pairs instead of STS 2017 (repeatable): the STS benchmark's
    /// csv layout (e.g. stsbenchmark/sts-dev.csv) or `sentence1<TAB>sentence2<TAB>score` lines.
    #[arg(long = "pairs", conflicts_with_all = ["langs", "data_dir"])]
    pairs: Vec<PathBuf>,
}

#[derive(clap::Args)]
pub struct BuccArgs {
    #[command(flatten)]
    common: Args,
    #[command(flatten)]
    mining: MiningArgs,
}

#[derive(clap::Args)]
pub struct XsrArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// Source sentences, one per line (or use --multi30k).
    #[arg(long, required_unless_present = "multi30k")]
    src: Option<PathBuf>,
    /// Their translations, line-aligned with --src.
    #[arg(long, required_unless_present = "multi30k")]
    tgt: Option<PathBuf>,
    /// More target-side sentences to retrieve among.
    #[arg(long, num_args = 1..)]
    distractors: Vec<PathBuf>,
    /// The Multi30k preset instead of --src/--tgt/--distractors: per direction x-y, the 1,000
    /// test_2016_flickr sentences in x retrieve their translations among test_2016_flickr,
    /// test_2017_flickr and val in y (3,014 candidates), from <data dir>/parallel/multi30k.
    #[arg(long, conflicts_with_all = ["src", "tgt", "distractors"])]
    multi30k: bool,
    /// Benchmark data directory for --multi30k (default: $XSENT_DATA, else ${XSENT_CACHE:-~/.cache/xsent}/data when it
    /// exists, else ../shared/data beside xsent's checkout).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Directions for --multi30k, comma-separated (default: en-de,de-en,en-fr,fr-en).
    #[arg(long, value_delimiter = ',')]
    langs: Vec<String>,
    /// Write a JSON report here.
    #[arg(long)]
    report: Option<PathBuf>,
    /// Compare with another model's report of the same sets (as `eval sts --compare`).
    #[arg(long, value_name = "REPORT.json")]
    compare: Option<PathBuf>,
    #[arg(long, default_value_t = 64)]
    batch_size: usize,
}

pub fn run(task: Task) -> Result<()> {
    match task {
        Task::Sts(a) => sts(a),
        Task::Tatoeba(a) => tatoeba(a),
        Task::Bucc(a) => bucc(a),
        Task::Xsr(a) => xsr(a),
        Task::All(a) => all(a),
    }
}

/// The model's files with their digests when a report is to be written, taken right after the
/// model loaded (so that they are the files it read, and an unreadable one fails the run before
/// the evaluation).
fn hashed_model_files(report: Option<&Path>, enc: &dyn crate::model::Embedder) -> Result<Vec<ModelFile>> {
    match report {
        Some(_) => ModelFile::describe(&enc.files()),
        None => Ok(Vec::new()),
    }
}

#[allow(clippy::too_many_arguments)]
fn write_report(
    model: &ModelArgs,
    path: Option<&Path>,
    enc: &dyn crate::model::Embedder,
    model_files: Vec<ModelFile>,
    start: Instant,
    results: Vec<Entry>,
    extra: Option<serde_json::Value>,
    data: Vec<DataFile>,
) -> Result<()> {
    let Some(path) = path else { return Ok(()) };
    let seconds = start.elapsed().as_secs_f64();
    Report {
        model: model.spec()?,
        prefix: enc.prefix().into(),
        xsent_version: crate::VERSION.into(),
        commit: option_env!("XSENT_GIT_COMMIT").map(str::to_string),
        settings: Some(model.recorded()),
        model_files,
        data,
        date: utc_now(),
        seconds,
        results,
        extra,
    }
    .write(path)
}

/// What one task produced: its markdown table, report entries and extra report fields.
struct Outcome {
    table: String,
    results: Vec<Entry>,
    extra: Option<serde_json::Value>,
}

/// `--langs` as given, each name trimmed (`--langs "deu, fra"`).
fn langs(a: &Args) -> Vec<String> {
    a.langs.iter().map(|l| l.trim().to_string()).collect()
}

fn sts_read(a: &Args) -> Result<Vec<crate::data::sts::StsSet>> {
    let dir = crate::data::data_dir(a.data_dir.as_deref())?;
    crate::data::sts::read_sts2017(&crate::data::set_dir(&dir, "sts", "sts17")?, &langs(a))
}

fn sts_task(enc: &dyn crate::model::Embedder, sets: &[crate::data::sts::StsSet], batch_size: usize) -> Result<Outcome> {
    let (scores, bias) = crate::eval::sts::evaluate(enc, sets, batch_size)?;
    let results = scores
        .iter()
        .map(|s| Entry {
            task: "sts17".into(),
            split: "test".into(),
            language: s.name.clone(),
            main_score: s.spearman,
            scores: serde_json::json!({"spearman": s.spearman, "pearson": s.pearson, "pairs": s.n, "spearman_ci95": s.spearman_ci95, "pearson_ci95": s.pearson_ci95}),
            items: Some(s.items.clone()),
        })
        .collect();
    Ok(Outcome {
        table: crate::eval::sts::markdown(&scores, bias.as_ref()),
        results,
        extra: bias.map(|b| serde_json::json!({"language_bias": b})),
    })
}

fn tatoeba_read(a: &Args) -> Result<Vec<crate::data::tatoeba::TatoebaSet>> {
    let dir = crate::data::set_dir(&crate::data::data_dir(a.data_dir.as_deref())?, "tatoeba", "tatoeba")?;
    let langs = if a.langs.is_empty() { crate::data::tatoeba::languages(&dir)? } else { langs(a) };
    langs.iter().map(|l| crate::data::tatoeba::read(&dir, l)).collect()
}

fn tatoeba_task(
    enc: &dyn crate::model::Embedder,
    sets: &[crate::data::tatoeba::TatoebaSet],
    batch_size: usize,
) -> Result<Outcome> {
    let scores = crate::eval::tatoeba::evaluate(enc, sets, batch_size)?;
    let results: Vec<Entry> = scores
        .iter()
        .map(|s| Entry {
            task: "tatoeba".into(),
            split: "test".into(),
            language: format!("{}-eng", s.lang),
            main_score: s.mean,
            scores: serde_json::json!({"xx_to_en": s.xx_to_en, "en_to_xx": s.en_to_xx, "mean": s.mean, "pairs": s.n, "mean_ci95": s.mean_ci95}),
            items: Some(s.items.clone()),
        })
        .collect();
    let average = results.iter().map(|e| e.main_score).sum::<f64>() / results.len().max(1) as f64;
    Ok(Outcome {
        table: crate::eval::tatoeba::markdown(&scores),
        results,
        extra: Some(
            serde_json::json!({"average": average, "average_ci95": crate::eval::tatoeba::average_ci95(&scores), "languages": scores.len()}),
        ),
    })
}

/// One BUCC language pair's splits: a test split, and a train split to take the threshold from
/// when the data has both.
struct BuccPair {
    pair: String,
    train: Option<crate::data::bucc::BuccSplit>,
    test: crate::data::bucc::BuccSplit,
}

fn bucc_read(b: &BuccArgs) -> Result<Vec<BuccPair>> {
    let a = &b.common;
    let settings = b.mining.settings()?;
    let dir = crate::data::set_dir(&crate::data::data_dir(a.data_dir.as_deref())?, "bucc", "bucc")?;
    let pairs = if a.langs.is_empty() { crate::data::bucc::pairs(&dir)? } else { langs(a) };
    let mut out = Vec::new();
    for pair in pairs {
        let splits = crate::data::bucc::splits(&dir, &pair)?;
        let (threshold_split, test_split) = crate::eval::bucc::split_roles(&pair, &splits)?;
        let train = threshold_split.map(|s| crate::data::bucc::read(&dir, &pair, &s)).transpose()?;
        let test = crate::data::bucc::read(&dir, &pair, &test_split)?;
        for split in train.iter().chain([&test]) {
            if let Some(note) = crate::index::knn::k_note(settings.k, split.src.len(), split.tgt.len()) {
                errln!("xsent eval bucc: {pair} {}: {note}", split.split);
            }
        }
        out.push(BuccPair { pair, train, test });
    }
    Ok(out)
}

fn bucc_task(enc: &dyn crate::model::Embedder, b: &BuccArgs, data: &[BuccPair]) -> Result<Outcome> {
    let a = &b.common;
    let settings = b.mining.settings()?;
    let published = crate::eval::published::by_system(crate::eval::published_tables::BUCC_F1);
    let mut table = String::from("| BUCC 2018 | split | threshold | P | R | F1 | 95 % CI |");
    for c in &published {
        table += &format!(" {} |", c.system);
    }
    table += &format!("\n|---|---|---|---:|---:|---:|---:|{}\n", "---:|".repeat(published.len()));
    let mut results = Vec::new();
    for BuccPair { pair, train, test } in data {
        let s = bucc::evaluate(enc, train.as_ref(), test, settings, a.batch_size)?;
        let label = match s.threshold_from.as_str() {
            "oracle" if !s.scores.threshold.is_finite() => "none (no gold pair among the candidates)".to_string(),
            from if !s.scores.threshold.is_finite() => {
                format!("none (no gold pair among the {from} split's candidates)")
            }
            "oracle" => format!("{:.4} (oracle threshold)", s.scores.threshold),
            from => format!("{:.4} (from {from})", s.scores.threshold),
        };
        table += &format!(
            "| {} | {} | {} | {:.2} | {:.2} | {:.2} | {} |",
            s.pair,
            s.split,
            label,
            s.scores.precision,
            s.scores.recall,
            s.scores.f1,
            crate::eval::bootstrap::show(s.f1_ci95)
        );
        for c in &published {
            table += &c.get(pair).map(|(v, _)| format!(" {v:.1} |")).unwrap_or_else(|| " – |".into());
        }
        table += "\n";
        results.push(Entry {
            task: "bucc2018".into(),
            split: s.split.clone(),
            language: s.pair.clone(),
            main_score: s.scores.f1,
            scores: serde_json::json!({
                "f1": s.scores.f1, "precision": s.scores.precision, "recall": s.scores.recall,
                "threshold": s.scores.threshold, "threshold_from": s.threshold_from,
                "oracle_threshold": s.threshold_from == "oracle",
                "candidates": s.candidates, "gold": s.gold, "f1_ci95": s.f1_ci95,
            }),
            items: Some(s.items.clone()),
        });
    }
    table += &format!(
        "\n95 % CI of F1: {}; an oracle threshold is chosen again on each resample.\nMining: {} margin, {} retrieval, k = {}. Published columns: F1 ×100 on the BUCC test sets as printed in the seeds (not comparable to an oracle threshold on the sample split).\n",
        crate::eval::bootstrap::DESCRIPTION,
        settings.margin.to_possible_value().expect("a value").get_name(),
        settings.retrieval.to_possible_value().expect("a value").get_name(),
        settings.k
    );
    if let Some(p) = &settings.index {
        table += &format!(
            "Neighbours from an IVF index of each side (approximate): nlist {}, nprobe {}, {:?} codes.\n",
            p.nlist.map_or("4 √n".into(), |n| n.to_string()),
            p.nprobe,
            p.codec
        );
    }
    for c in &published {
        table += &format!("- {}: {}\n", c.system, c.sources());
    }
    Ok(Outcome { table, results, extra: Some(serde_json::json!({"settings": settings})) })
}

/// Check the arguments and the data directory, read the task's data (so a missing file or an
/// unknown language is reported before the model loads), then [`loaded`].
fn single<D: ReadFiles>(
    a: &Args,
    read: impl FnOnce() -> Result<D>,
    task: impl FnOnce(&dyn crate::model::Embedder, D) -> Result<Outcome>,
) -> Result<()> {
    let dir = crate::data::data_dir(a.data_dir.as_deref())?;
    let compared = check(a, &[], Some(&dir))?;
    let data = read()?;
    let files = described(Some(&dir), &data.files(), "xsent eval", compared.as_ref())?;
    loaded(a, compared, files, |enc| task(enc, data))
}

/// The checks every task makes before any work: batch size, --langs given twice, and the report
/// path against the task's input files and data directory; and the `--compare` report, read.
fn check(a: &Args, inputs: &[&Path], data_dir: Option<&Path>) -> Result<Option<Compared>> {
    super::check_batch_size(a.batch_size)?;
    ensure!(
        !a.langs.iter().any(|l| l.trim().is_empty()),
        "--langs has an empty name ({:?}); give names separated by single commas",
        a.langs.join(",")
    );
    // A set given twice would count twice in the averages.
    for (i, l) in a.langs.iter().enumerate() {
        ensure!(!a.langs[..i].iter().any(|k| k.trim() == l.trim()), "--langs lists {} twice; give each once", l.trim());
    }
    if let Some(r) = &a.report {
        // The report compared against is an input too: writing over it would lose it.
        let inputs: Vec<&Path> = inputs.iter().copied().chain(a.compare.as_deref()).collect();
        super::check_report(r, "--report", &inputs, data_dir)?;
    }
    read_compared(a.compare.as_deref())
}

/// Load the model, run one task, print its table and write its report.
fn loaded(
    a: &Args,
    compared: Option<Compared>,
    data: Vec<DataFile>,
    task: impl FnOnce(&dyn crate::model::Embedder) -> Result<Outcome>,
) -> Result<()> {
    let start = Instant::now();
    let enc = a.model.load_noting_cuts()?;
    let model_files = hashed_model_files(a.report.as_deref(), &enc)?;
    let mut o = task(&enc)?;
    enc.say("xsent eval", "texts");
    out!("{}", o.table);
    compare_with(compared.as_ref(), &o.results, &mut o.extra)?;
    write_report(&a.model, a.report.as_deref(), &enc, model_files, start, o.results, o.extra, data)
}

/// The data files a task read, as a report records them ([`crate::data::provenance`]); a
/// benchmark file that is not the pinned one is warned about, and a `--compare` report that read
/// one of these files with other content is refused (its differences would be the data's).
fn described(
    data_dir: Option<&Path>,
    files: &[PathBuf],
    command: &str,
    compared: Option<&Compared>,
) -> Result<Vec<DataFile>> {
    use crate::data::provenance;
    let described = provenance::describe(data_dir, files)?;
    for w in provenance::warnings(&described, data_dir) {
        errln!("{command}: warning: {w}");
    }
    if let Some(c) = compared {
        let differ = provenance::differences(&described, &c.report.data);
        ensure!(
            differ.is_empty(),
            "--compare {}: that report was made on other data: {}; paired differences would measure the data, not the models",
            c.path.display(),
            differ.join(", ")
        );
    }
    Ok(described)
}

/// The files a task's data was read from.
trait ReadFiles {
    fn files(&self) -> Vec<PathBuf>;
}

impl ReadFiles for crate::data::sts::StsSet {
    fn files(&self) -> Vec<PathBuf> {
        self.files.clone()
    }
}

impl ReadFiles for crate::data::tatoeba::TatoebaSet {
    fn files(&self) -> Vec<PathBuf> {
        self.files.clone()
    }
}

impl ReadFiles for BuccPair {
    fn files(&self) -> Vec<PathBuf> {
        self.train.iter().chain([&self.test]).flat_map(|s| s.files.iter().cloned()).collect()
    }
}

impl<T: ReadFiles> ReadFiles for Vec<T> {
    fn files(&self) -> Vec<PathBuf> {
        self.iter().flat_map(ReadFiles::files).collect()
    }
}

impl<A: ReadFiles, B: ReadFiles, C: ReadFiles> ReadFiles for (A, B, C) {
    fn files(&self) -> Vec<PathBuf> {
        [self.0.files(), self.1.files(), self.2.files()].concat()
    }
}

/// The report `--compare` names and what it holds, read once before any work (a bad report is
/// reported before the model loads, and a FIFO is read once, not waited on a second time).
struct Compared {
    path: PathBuf,
    report: Report,
}

fn read_compared(path: Option<&Path>) -> Result<Option<Compared>> {
    path.map(|p| Ok(Compared { path: p.to_path_buf(), report: Report::read(p)? })).transpose()
}

/// `--compare`: print the paired differences against another report and keep them in this
/// run's report (`extra.compare`).
fn compare_with(compared: Option<&Compared>, results: &[Entry], extra: &mut Option<serde_json::Value>) -> Result<()> {
    let Some(Compared { path, report }) = compared else { return Ok(()) };
    let (table, json) = crate::eval::report::compare(results, report, path)?;
    out!("\n## Compared with {}\n\n{table}", path.display());
    extra.get_or_insert_with(|| serde_json::json!({}))["compare"] = json;
    Ok(())
}

fn sts(s: StsArgs) -> Result<()> {
    let a = &s.common;
    if s.pairs.is_empty() {
        return single(a, || sts_read(a), |enc, sets| sts_task(enc, &sets, a.batch_size));
    }
    let inputs: Vec<&Path> = s.pairs.iter().map(PathBuf::as_path).collect();
    // The benchmark folders stay protected when a data directory is known, though none is read.
    let compared = check(a, &inputs, crate::data::data_dir(a.data_dir.as_deref()).ok().as_deref())?;
    // Read every file before the model loads: a bad file is reported at once.
    let sets = s.pairs.iter().map(|p| crate::data::sts::read_scored_pairs(p)).collect::<Result<Vec<_>>>()?;
    let files = described(
        crate::data::data_dir(a.data_dir.as_deref()).ok().as_deref(),
        &sets.files(),
        "xsent eval sts",
        compared.as_ref(),
    )?;
    loaded(a, compared, files, |enc| scored_pairs_task(enc, &sets, &s.pairs, a.batch_size))
}

/// `--pairs`: one row per file, no published columns.
fn scored_pairs_task(
    enc: &dyn crate::model::Embedder,
    sets: &[crate::data::sts::StsSet],
    paths: &[PathBuf],
    batch_size: usize,
) -> Result<Outcome> {
    let (scores, _) = crate::eval::sts::evaluate(enc, sets, batch_size)?;
    use crate::eval::bootstrap::show;
    let mut table = String::from(
        "| scored pairs | pairs | Spearman ×100 | 95 % CI | Pearson ×100 | 95 % CI |\n|---|---:|---:|---:|---:|---:|\n",
    );
    let mut results = Vec::new();
    for (sc, path) in scores.iter().zip(paths) {
        table += &format!(
            "| {} | {} | {:.2} | {} | {:.2} | {} |\n",
            sc.name,
            sc.n,
            sc.spearman,
            show(sc.spearman_ci95),
            sc.pearson,
            show(sc.pearson_ci95)
        );
        results.push(Entry {
            task: "sts".into(),
            split: path.display().to_string(),
            language: sc.name.clone(),
            main_score: sc.spearman,
            scores: serde_json::json!({"spearman": sc.spearman, "pearson": sc.pearson, "pairs": sc.n, "spearman_ci95": sc.spearman_ci95, "pearson_ci95": sc.pearson_ci95}),
            items: Some(sc.items.clone()),
        });
    }
    table += &format!("\n95 % CI: {}\n", crate::eval::bootstrap::DESCRIPTION);
    Ok(Outcome { table, results, extra: None })
}

fn tatoeba(a: Args) -> Result<()> {
    single(&a, || tatoeba_read(&a), |enc, sets| tatoeba_task(enc, &sets, a.batch_size))
}

fn bucc(b: BuccArgs) -> Result<()> {
    b.mining.settings()?;
    single(&b.common, || bucc_read(&b), |enc, data| bucc_task(enc, &b, &data))
}

/// STS 2017, Tatoeba and BUCC with one loaded model, one report.
fn all(b: BuccArgs) -> Result<()> {
    ensure!(
        b.common.langs.is_empty(),
        "--langs selects sets of one task; run the tasks one by one to choose languages"
    );
    b.mining.settings()?;
    let a = &b.common;
    let read = || Ok((sts_read(a)?, tatoeba_read(a)?, bucc_read(&b)?));
    single(a, read, |enc, (sts, tatoeba, bucc)| {
        let parts = [
            ("sts17", sts_task(enc, &sts, a.batch_size)?),
            ("tatoeba", tatoeba_task(enc, &tatoeba, a.batch_size)?),
            ("bucc2018", bucc_task(enc, &b, &bucc)?),
        ];
        let mut out = Outcome { table: String::new(), results: Vec::new(), extra: Some(serde_json::json!({})) };
        for (name, o) in parts {
            out.table += &format!("## {name}\n\n{}\n", o.table);
            out.results.extend(o.results);
            out.extra.as_mut().expect("set above")[name] = o.extra.unwrap_or_default();
        }
        Ok(out)
    })
}

fn xsr(a: XsrArgs) -> Result<()> {
    super::check_batch_size(a.batch_size)?;
    if a.multi30k {
        if let Some(r) = &a.report {
            let compared: Vec<&Path> = a.compare.as_deref().into_iter().collect();
            super::check_report(r, "--report", &compared, Some(&crate::data::data_dir(a.data_dir.as_deref())?))?;
        }
        let compared = read_compared(a.compare.as_deref())?;
        return xsr_multi30k(&a, compared);
    }
    // (clap's `requires` cannot express this: a flag counts as present through its default.)
    ensure!(
        a.langs.is_empty() && a.data_dir.is_none(),
        "--langs and --data-dir select Multi30k data: add --multi30k, or leave them out with --src/--tgt"
    );
    let start = Instant::now();
    let (Some(src_path), Some(tgt_path)) = (&a.src, &a.tgt) else {
        bail!("pass --src and --tgt (line-aligned files), or --multi30k for the Multi30k preset");
    };
    if let Some(r) = &a.report {
        let inputs: Vec<&Path> =
            [src_path, tgt_path].into_iter().chain(&a.distractors).chain(&a.compare).map(PathBuf::as_path).collect();
        // The benchmark folders stay protected when a data directory is known (XSENT_DATA).
        super::check_report(r, "--report", &inputs, crate::data::data_dir(None).ok().as_deref())?;
    }
    let compared = read_compared(a.compare.as_deref())?;
    let mut src = crate::data::read_lines(src_path)?;
    let mut tgt = crate::data::read_lines(tgt_path)?;
    ensure!(
        src.len() == tgt.len(),
        "{} has {} lines but {} has {}; they must be line-aligned",
        src_path.display(),
        src.len(),
        tgt_path.display(),
        tgt.len()
    );
    // A pair with a blank side is no query (as `mine` leaves blank lines out), nor is a blank
    // distractor a candidate.
    let n = src.len();
    (src, tgt) = src.into_iter().zip(tgt).filter(|(s, t)| !s.trim().is_empty() && !t.trim().is_empty()).unzip();
    if src.len() < n {
        errln!("xsent eval xsr: {} line pairs with a blank side left out", n - src.len());
    }
    ensure!(
        !src.is_empty(),
        "{} and {} have no line pairs with text on both sides",
        src_path.display(),
        tgt_path.display()
    );
    let mut distractors = Vec::new();
    for d in &a.distractors {
        let (lines, blank) = crate::data::drop_blank(crate::data::read_lines(d)?);
        if blank > 0 {
            errln!("xsent eval xsr: {blank} blank lines of {} left out", d.display());
        }
        distractors.extend(lines);
    }
    let read: Vec<PathBuf> = [src_path, tgt_path].into_iter().chain(&a.distractors).cloned().collect();
    let data = described(crate::data::data_dir(None).ok().as_deref(), &read, "xsent eval xsr", compared.as_ref())?;
    let enc = a.model.load_noting_cuts()?;
    let model_files = hashed_model_files(a.report.as_deref(), &enc)?;
    let (items, candidates) = crate::eval::xsr::p_at_1(&enc, &src, &tgt, &distractors, a.batch_size)?;
    enc.say("xsent eval xsr", "texts");
    let (p1, ci) = (items.scores(None)[0], crate::eval::bootstrap::intervals(&items)[0]);
    outln!(
        "| XSR | queries | candidates | P@1 ×100 | 95 % CI |\n|---|---:|---:|---:|---:|\n| {} → {} | {} | {} | {:.2} | {} |\n\n95 % CI: {}",
        src_path.display(),
        tgt_path.display(),
        src.len(),
        candidates,
        p1,
        crate::eval::bootstrap::show(ci),
        crate::eval::bootstrap::DESCRIPTION
    );
    let results = vec![Entry {
        task: "xsr".into(),
        split: "test".into(),
        language: format!("{} -> {}", src_path.display(), tgt_path.display()),
        main_score: p1,
        scores: serde_json::json!({"p_at_1": p1, "queries": src.len(), "candidates": candidates, "p_at_1_ci95": ci}),
        items: Some(items),
    }];
    let mut extra = None;
    compare_with(compared.as_ref(), &results, &mut extra)?;
    write_report(&a.model, a.report.as_deref(), &enc, model_files, start, results, extra, data)
}

/// The Multi30k preset: every direction's files are read (and checked) before the model loads.
fn xsr_multi30k(a: &XsrArgs, compared: Option<Compared>) -> Result<()> {
    use crate::eval::xsr;
    let start = Instant::now();
    let dir = crate::data::set_dir(&crate::data::data_dir(a.data_dir.as_deref())?, "parallel/multi30k", "multi30k")?;
    let directions: Vec<String> = if a.langs.is_empty() {
        xsr::MULTI30K_DIRECTIONS.iter().map(|d| d.to_string()).collect()
    } else {
        a.langs.iter().map(|d| d.trim().to_string()).collect()
    };
    for (i, d) in directions.iter().enumerate() {
        ensure!(!directions[..i].contains(d), "--langs lists {d} twice; give each direction once");
    }
    let sets = directions.iter().map(|d| xsr::read_multi30k(&dir, d)).collect::<Result<Vec<_>>>()?;
    let root = crate::data::data_dir(a.data_dir.as_deref())?;
    let read: Vec<PathBuf> = sets.iter().flat_map(|s| s.files.iter().cloned()).collect();
    let data = described(Some(&root), &read, "xsent eval xsr", compared.as_ref())?;
    let enc = a.model.load_noting_cuts()?;
    let model_files = hashed_model_files(a.report.as_deref(), &enc)?;
    let scores = xsr::evaluate_multi30k(&enc, &sets, a.batch_size)?;
    enc.say("xsent eval xsr", "texts");
    out!("{}", xsr::multi30k_markdown(&scores));
    let results: Vec<Entry> = scores
        .iter()
        .map(|s| Entry {
            task: "xsr".into(),
            split: xsr::MULTI30K_SPLIT.into(),
            language: s.direction.clone(),
            main_score: s.p_at_1,
            scores: serde_json::json!({"p_at_1": s.p_at_1, "queries": s.queries, "candidates": s.candidates, "p_at_1_ci95": s.p_at_1_ci95}),
            items: Some(s.items.clone()),
        })
        .collect();
    let mean = scores.iter().map(|s| s.p_at_1).sum::<f64>() / scores.len().max(1) as f64;
    let mean_ci = crate::eval::bootstrap::mean_interval(&scores.iter().map(|s| &s.items).collect::<Vec<_>>());
    let mut extra =
        Some(serde_json::json!({"mean_p_at_1": mean, "mean_p_at_1_ci95": mean_ci, "directions": scores.len()}));
    compare_with(compared.as_ref(), &results, &mut extra)?;
    write_report(&a.model, a.report.as_deref(), &enc, model_files, start, results, extra, data)
}
