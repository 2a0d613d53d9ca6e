//! `xsent data`: the benchmark data (`fetch`, `list`) and the data a config trains on, checked
//! against the evaluation sets (`audit`).

use crate::data::{fetch, registry};
use crate::train::config;
use anyhow::{bail, Result};
use std::path::{Path, PathBuf};

#[derive(clap::Subcommand)]
pub enum Command {
    /// Download data sets from their public sources (pinned commits, checked by sha256) into
    /// the data directory, in the layout the evaluators read. Interrupted downloads resume.
    /// The source is https://raw.githubusercontent.com, or the mirror XSENT_DATA_MIRROR names
    /// (the same OWNER/REPO/COMMIT/PATH layout).
    Fetch {
        /// Data sets: tatoeba, sts17, stsb, bucc, xnli, multi30k, or all.
        #[arg(required = true)]
        sets: Vec<String>,
        /// Where to put them (default: $XSENT_DATA, else ${XSENT_CACHE:-~/.cache/xsent}/data).
        #[arg(long)]
        data_dir: Option<PathBuf>,
    },
    /// List the data sets and which are in the data directory.
    List {
        /// The data directory to look in (default: the one the evaluators read: $XSENT_DATA,
        /// else ${XSENT_CACHE:-~/.cache/xsent}/data when it exists, else ../shared/data beside
        /// xsent's checkout).
        #[arg(long)]
        data_dir: Option<PathBuf>,
    },
    /// Print how a config's training, fitting and validation sources overlap the evaluation sets
    /// (by sentence, lower-cased, spaces collapsed), without training: what `xsent train` drops
    /// with `data.decontaminate = true` (the default).
    Audit(AuditArgs),
}

#[derive(clap::Args)]
pub struct AuditArgs {
    /// The training config: a file, or the name of a built-in config (`xsent config list`).
    #[arg(long, short = 'c')]
    config: PathBuf,
    /// Override a config value, as `xsent train --set` (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    sets: Vec<String>,
    /// Also write the table as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

pub fn run(c: Command) -> Result<()> {
    match c {
        Command::Fetch { sets, data_dir } => fetch_sets(&sets, data_dir),
        Command::List { data_dir } => list(data_dir),
        Command::Audit(a) => audit(a),
    }
}

fn audit(a: AuditArgs) -> Result<()> {
    let config_path = config::find(&a.config)?;
    let mut cfg = config::load_from(config_path, &[], &a.sets, false)?;
    if let Some(p) = &a.json {
        // Before the work, as eval --report: never onto the config, a file the config names (its
        // training data, say), or a benchmark or corpus file, nor inside a folder it reads.
        let mut inputs: Vec<PathBuf> = match config_path {
            config::ConfigFrom::File(f) | config::ConfigFrom::Run(f) => vec![f.to_path_buf()],
            config::ConfigFrom::BuiltIn(_) => Vec::new(),
        };
        let mut folders = Vec::new();
        for f in cfg.paths_mut() {
            let v = PathBuf::from(f.get());
            if f.key == "data.eval_dir" {
                // Its benchmark folders, as the data directory's below.
                super::check_report(p, "--json", &[], Some(&v))?;
            } else if v.is_dir() {
                folders.push((f.key, v));
            } else {
                inputs.push(v);
            }
        }
        let inputs: Vec<&Path> = inputs.iter().map(|p| p.as_path()).collect();
        super::check_report(p, "--json", &inputs, crate::data::data_dir(None).ok().as_deref())?;
        let parent = p.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
        if let Ok(parent) = parent.canonicalize() {
            for (key, dir) in folders {
                if dir.canonicalize().is_ok_and(|d| parent.starts_with(d)) {
                    bail!(
                        "--json {} is inside {} ({key} of the config): write it elsewhere",
                        p.display(),
                        dir.display()
                    );
                }
            }
        }
    }
    let t0 = std::time::Instant::now();
    let overlaps = crate::train::decontam::audit(&cfg)?;
    let seconds = t0.elapsed().as_secs_f64();
    for o in &overlaps {
        outln!("{}", o.markdown());
    }
    outln!("(read and checked in {seconds:.1} s)");
    if let Some(p) = &a.json {
        crate::io::atomic::write_file_atomically(p, (serde_json::to_string_pretty(&overlaps)? + "\n").as_bytes())?;
    }
    Ok(())
}

fn fetch_sets(names: &[String], data_dir: Option<PathBuf>) -> Result<()> {
    let mut sets: Vec<&registry::DataSet> = Vec::new();
    for n in names {
        let n = n.trim();
        let found: Vec<&registry::DataSet> = match n {
            "all" => registry::SETS.iter().collect(),
            _ => match registry::find(n) {
                Some(s) => vec![s],
                None => bail!(
                    "there is no data set {n:?}; the data sets are {}, or all (`xsent data list`)",
                    registry::names()
                ),
            },
        };
        for s in found {
            if !sets.iter().any(|t| t.name == s.name) {
                sets.push(s);
            }
        }
    }
    let dir = data_dir.unwrap_or_else(crate::places::data_home);
    if dir.exists() && !dir.is_dir() {
        bail!("the data directory {} is a file: give a folder (--data-dir or XSENT_DATA)", dir.display());
    }
    let base = fetch::base_url()?;
    if base != fetch::GITHUB_RAW {
        errln!("xsent data fetch: from the mirror {base} (XSENT_DATA_MIRROR)");
    }
    for s in sets {
        let done = fetch::fetch(s, &dir, &base)?;
        let already = if done.present > 0 { format!(" ({} in place already)", done.present) } else { String::new() };
        if done.files == 0 {
            errln!("xsent data fetch: {}: all {} files in place in {}", s.name, s.files.len(), dir.display());
        } else {
            errln!(
                "xsent data fetch: {}: {} files ({}) fetched into {}{already}",
                s.name,
                done.files,
                mb(done.bytes),
                dir.display()
            );
        }
    }
    Ok(())
}

fn list(data_dir: Option<PathBuf>) -> Result<()> {
    let given = data_dir.is_some();
    let (dir, from) = match data_dir {
        Some(d) => (d, "--data-dir"),
        None => crate::places::data_dir(),
    };
    if dir.exists() && !dir.is_dir() {
        bail!("the data directory {} ({from}) is a file: give a folder", dir.display());
    }
    outln!("data directory: {} ({from}{})", dir.display(), if dir.is_dir() { "" } else { "; it does not exist yet" });
    outln!("{:<9} {:>6} {:>9}  {:<11} about", "set", "files", "size", "state");
    for s in registry::SETS {
        let (n, _) = fetch::present(s, &dir);
        let state = match n {
            0 => "missing".to_string(),
            n if n == s.files.len() => "present".to_string(),
            n => format!("{n} of {}", s.files.len()),
        };
        let total: u64 = s.files.iter().map(|f| f.size).sum();
        outln!("{:<9} {:>6} {:>9}  {:<11} {}", s.name, s.files.len(), mb(total), state, s.about);
    }
    if given {
        errln!("xsent data: `xsent data fetch SET --data-dir {}` (or all) downloads into it", dir.display());
        return Ok(());
    }
    let home = crate::places::data_home();
    errln!(
        "xsent data: `xsent data fetch SET` (or all) downloads into {}{}",
        home.display(),
        if home == dir { "" } else { ", which the evaluators read once it exists (XSENT_DATA chooses another folder)" }
    );
    Ok(())
}

fn mb(bytes: u64) -> String {
    format!("{:.1} MB", bytes as f64 / 1e6)
}
