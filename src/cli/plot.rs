use super::ModelArgs;
use crate::model::kinds::disentangle::{DisentangledEncoder, Head, KIND};
use crate::model::Embedder;
use crate::plot::{pca, read_labelled, scatter_png, Panel};
use anyhow::{ensure, Context, Result};
use std::path::PathBuf;

#[derive(clap::Subcommand)]
#[allow(clippy::large_enum_variant)] // parsed once per process
pub enum Plot {
    /// Scatter the first two principal components of embeddings of parallel sentences, coloured
    /// by language (PNG). A disentangle model gives three panels: base, meaning and language
    /// embeddings, each with its own PCA.
    Pca(PcaArgs),
    /// Draw the training curves of run directories (PNG): the loss and every validation metric
    /// of their metrics.jsonl, one panel per metric, runs overlaid, a filled circle at the step
    /// each run kept as its best model.
    Run(RunArgs),
}

#[derive(clap::Args)]
pub struct RunArgs {
    /// Run directories of `xsent train` (each holds metrics.jsonl).
    #[arg(required = true, num_args = 1..)]
    runs: Vec<PathBuf>,
    /// Output PNG file.
    #[arg(long, short = 'o')]
    output: PathBuf,
    /// Only these metrics (comma-separated: loss, and the validation metrics' names).
    #[arg(long, value_delimiter = ',')]
    metrics: Vec<String>,
    /// Width of each panel in pixels (height: three quarters of it).
    #[arg(long, default_value_t = 500)]
    panel_size: u32,
}

#[derive(clap::Args)]
// --head is refused (the picture shows every head): hidden from --help.
#[command(mut_arg("head", |a| a.hide(true)))]
pub struct PcaArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// Output PNG file.
    #[arg(long, short = 'o')]
    output: PathBuf,
    /// Sentences per language.
    #[arg(long, default_value_t = 200)]
    rows: usize,
    /// XNLI languages to take parallel sentences from (the hypotheses of the first --rows rows of
    /// --split); default: a disentangle model's languages, else all 15.
    #[arg(long, value_delimiter = ',')]
    langs: Vec<String>,
    /// XNLI split (files DATA/xnli/{split}-{lang}.tsv).
    #[arg(long, default_value = "test")]
    split: String,
    /// Sentences of your own instead of XNLI: LANG=FILE, one sentence per line (repeatable).
    #[arg(long = "input", value_name = "LANG=FILE")]
    inputs: Vec<String>,
    /// Benchmark data directory (default: $XSENT_DATA, else ${XSENT_CACHE:-~/.cache/xsent}/data when it exists, else
    /// ../shared/data beside xsent's checkout).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Width and height of each panel in pixels.
    #[arg(long, default_value_t = 600)]
    panel_size: u32,
    #[arg(long, default_value_t = 64)]
    batch_size: usize,
}

const XNLI_LANGS: [&str; 15] =
    ["ar", "bg", "de", "el", "en", "es", "fr", "hi", "ru", "sw", "th", "tr", "ur", "vi", "zh"];

pub fn run(p: Plot) -> Result<()> {
    match p {
        Plot::Pca(a) => pca_plot(a),
        Plot::Run(a) => run_plot(a),
    }
}

fn run_plot(a: RunArgs) -> Result<()> {
    ensure!(
        (200..=4000).contains(&a.panel_size),
        "--panel-size {} is out of range: give 200..=4000 pixels",
        a.panel_size
    );
    let metrics: Vec<std::path::PathBuf> = a.runs.iter().map(|r| r.join("metrics.jsonl")).collect();
    super::check_output(&a.output, "-o", &metrics.iter().map(PathBuf::as_path).collect::<Vec<_>>())?;
    ensure!(
        a.output.extension().and_then(|e| e.to_str()).is_some_and(|e| e.eq_ignore_ascii_case("png")),
        "-o {}: the picture is a PNG; give a file name ending in .png",
        a.output.display()
    );
    let names: Vec<String> = a.runs.iter().map(|r| r.display().to_string()).collect();
    let panels = crate::plot::run_curves(&a.runs, &a.metrics)?;
    crate::plot::curves_png(&a.output, &panels, &names, a.panel_size)?;
    errln!(
        "xsent plot: {} panels ({}) of {} runs in {}",
        panels.len(),
        panels.iter().map(|p| p.title.as_str()).collect::<Vec<_>>().join(", "),
        a.runs.len(),
        a.output.display()
    );
    Ok(())
}

fn pca_plot(a: PcaArgs) -> Result<()> {
    ensure!(a.rows >= 1, "--rows must be at least 1");
    super::check_batch_size(a.batch_size)?;
    ensure!(
        (200..=4000).contains(&a.panel_size),
        "--panel-size {} is out of range: give 200..=4000 pixels",
        a.panel_size
    );
    let files: Vec<&std::path::Path> =
        a.inputs.iter().filter_map(|s| s.split_once('=')).map(|(_, f)| std::path::Path::new(f)).collect();
    super::check_output(&a.output, "-o", &files)?;
    let ext = a.output.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase);
    ensure!(
        matches!(ext.as_deref(), Some("png" | "jpg" | "jpeg" | "bmp")),
        "-o {}: the picture is written as PNG, JPEG or BMP; give a path ending in .png, .jpg, .jpeg or .bmp",
        a.output.display()
    );
    let spec = a.model.spec()?;
    let disentangle = crate::model::embedder::saved_kind(&spec)?.as_deref() == Some(KIND);
    let model = if disentangle {
        ensure!(a.model.head.is_none(), "--head: the picture shows every head of {spec}");
        Some(DisentangledEncoder::load(std::path::Path::new(&spec), &a.model.options()?, Head::Meaning)?)
    } else {
        None
    };
    let groups = if a.inputs.is_empty() {
        for (i, l) in a.langs.iter().enumerate() {
            ensure!(!a.langs[..i].contains(l), "--langs lists {l} twice; give each language once");
        }
        let langs: Vec<String> = match (&model, a.langs.is_empty()) {
            (_, false) => a.langs.clone(),
            (Some(m), true) => m.languages.clone(),
            (None, true) => XNLI_LANGS.iter().map(|s| s.to_string()).collect(),
        };
        let dir = crate::data::set_dir(&crate::data::data_dir(a.data_dir.as_deref())?, "xnli", "xnli")?;
        let refs: Vec<&str> = langs.iter().map(String::as_str).collect();
        let rows = crate::data::bitext::xnli_parallel_rows(&dir, &a.split, &refs)
            .with_context(|| format!("reading XNLI {} for the languages {}", a.split, langs.join(",")))?;
        langs.into_iter().zip(rows).map(|(l, r)| (l, r.into_iter().take(a.rows).map(|(_, h)| h).collect())).collect()
    } else {
        ensure!(a.langs.is_empty(), "--langs picks XNLI languages; with --input the languages come from LANG=FILE");
        read_labelled(&a.inputs, a.rows)?
    };
    let names: Vec<String> = groups.iter().map(|(l, _)| l.clone()).collect();
    // Before the embedding, which is the slow part.
    crate::plot::check_groups(names.len())?;
    let texts: Vec<&str> = groups.iter().flat_map(|(_, s)| s.iter().map(String::as_str)).collect();
    let label: Vec<usize> = groups.iter().enumerate().flat_map(|(g, (_, s))| std::iter::repeat_n(g, s.len())).collect();

    let spaces: Vec<(String, Vec<Vec<f32>>)> = match &model {
        Some(m) => {
            let all = m.embed_all(&texts, a.batch_size)?;
            super::cuts::say(
                "xsent plot",
                "texts",
                &texts,
                &all.truncated,
                a.model.max_line_bytes,
                m.base.max_length(),
            );
            vec![
                (format!("base ({})", m.base.files.spec), all.base),
                ("meaning".to_string(), all.meaning),
                ("language".to_string(), all.language),
            ]
        }
        None => {
            let enc = a.model.load_noting_cuts()?;
            let rows = (&enc as &dyn Embedder).embed(&texts, a.batch_size)?;
            enc.say("xsent plot", "texts");
            vec![(spec.clone(), rows)]
        }
    };
    let mut panels = Vec::new();
    for (name, rows) in spaces {
        let p = pca(&rows, 2).with_context(|| format!("the vectors of {name}"))?;
        let title = format!("{name}: PC1 {:.0}%, PC2 {:.0}%", 100.0 * p.explained[0], 100.0 * p.explained[1]);
        errln!("xsent plot: {title}");
        let points = p.coords.iter().zip(&label).map(|(c, &g)| (c[0], c[1], g)).collect();
        panels.push(Panel { title, points });
    }
    scatter_png(&a.output, &panels, &names, a.panel_size)
        .with_context(|| format!("cannot write the picture {}", a.output.display()))?;
    errln!("xsent plot: {} sentences in {} languages → {}", texts.len(), names.len(), a.output.display());
    Ok(())
}
