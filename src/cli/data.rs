//! `xsent data`: the data a config trains on, checked against the evaluation sets.

use crate::train::config;
use anyhow::Result;
use std::path::PathBuf;

#[derive(clap::Subcommand)]
pub enum Command {
    /// Print how a config's training, fitting and validation sources overlap the evaluation sets
    /// (by sentence, lower-cased, spaces collapsed), without training: what `xsent train` drops
    /// with `data.decontaminate = true` (the default).
    Audit(AuditArgs),
}

#[derive(clap::Args)]
pub struct AuditArgs {
    /// The training config.
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
        Command::Audit(a) => {
            let cfg = config::load(&a.config, &a.sets)?;
            let t0 = std::time::Instant::now();
            let overlaps = crate::train::decontam::audit(&cfg)?;
            let seconds = t0.elapsed().as_secs_f64();
            for o in &overlaps {
                outln!("{}", o.markdown());
            }
            outln!("(read and checked in {seconds:.1} s)");
            if let Some(p) = &a.json {
                std::fs::write(p, serde_json::to_string_pretty(&overlaps)? + "\n").map_err(|e| anyhow::anyhow!("cannot write {}: {e}", p.display()))?;
            }
            Ok(())
        }
    }
}
