use super::ModelArgs;
use crate::eval::report::{utc_now, Entry, Report};
use anyhow::Result;
use std::path::PathBuf;

#[derive(clap::Subcommand)]
pub enum Task {
    /// STS 2017: tracks 1-5 and the extended en-de set; Spearman (main) and Pearson ×100,
    /// seed papers' numbers beside ours, and the language-bias score.
    Sts(Args),
}

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    model: ModelArgs,
    /// Benchmark data directory (default: $XSENT_DATA).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Only these sets (e.g. en-en,ar-en); default all.
    #[arg(long, value_delimiter = ',')]
    langs: Vec<String>,
    /// Write a JSON report here.
    #[arg(long)]
    report: Option<PathBuf>,
    #[arg(long, default_value_t = 64)]
    batch_size: usize,
}

pub fn run(task: Task) -> Result<()> {
    match task {
        Task::Sts(a) => sts(a),
    }
}

fn sts(a: Args) -> Result<()> {
    anyhow::ensure!(a.batch_size > 0, "--batch-size must be at least 1");
    let start = std::time::Instant::now();
    let dir = crate::data::data_dir(a.data_dir.as_deref())?;
    let sets = crate::data::sts::read_sts2017(&dir.join("sts"), &a.langs)?;
    let enc = a.model.load()?;
    let (scores, bias) = crate::eval::sts::evaluate(&enc, &sets, a.batch_size)?;
    print!("{}", crate::eval::sts::markdown(&scores, bias.as_ref()));
    if let Some(path) = &a.report {
        let results = scores
            .iter()
            .map(|s| Entry {
                task: "sts17".into(),
                split: "test".into(),
                language: s.name.clone(),
                main_score: s.spearman,
                scores: serde_json::json!({"spearman": s.spearman, "pearson": s.pearson, "pairs": s.n}),
            })
            .collect();
        Report {
            model: a.model.model.clone(),
            prefix: enc.prefix.clone(),
            xsent_version: crate::VERSION.into(),
            date: utc_now(),
            seconds: start.elapsed().as_secs_f64(),
            results,
            extra: bias.map(|b| serde_json::json!({"language_bias": b})),
        }
        .write(path)?;
    }
    Ok(())
}
