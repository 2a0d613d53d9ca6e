//! What a run tells its user while it trains: the progress bar and step lines, and the message
//! that names the checkpoint to resume from when a loss turns NaN.

use super::checkpoint::checkpoint_steps;
use anyhow::Result;
use std::path::Path;
use std::time::Instant;

pub(crate) fn nan_message(step: u64, value: f64, terms: &[(String, f64)], out: &Path) -> Result<String> {
    let dir = out.join("checkpoints");
    let kept = checkpoint_steps(&dir)?;
    let terms: Vec<String> = terms.iter().map(|(k, v)| format!("{k} = {v}")).collect();
    let advice = match kept.last() {
        None => "No checkpoint was written yet; lower optim.lr or check the data.".to_string(),
        // The newest checkpoint holds the very weights that gave this loss (on this step's
        // batch): resuming from it repeats the failure unless the batch is the cause.
        Some(&last) if last + 1 == step => {
            let earlier = match kept.len() {
                1 => "it is the only checkpoint written".to_string(),
                _ => format!(
                    "an earlier one is {} (move the newer ones away to --resume from it with --set optim.lr=LOWER)",
                    dir.join(format!("step-{}", kept[kept.len() - 2])).display()
                ),
            };
            format!(
                "The newest checkpoint, {}, holds the weights that gave this loss, and --resume from it repeats this step exactly; {earlier}. \
                 Or start a new run (another --out) with a lower optim.lr.",
                dir.join(format!("step-{last}")).display()
            )
        }
        Some(&last) => format!(
            "The last good checkpoint is {} (continue from it with --resume, perhaps with a lower optim.lr).",
            dir.join(format!("step-{last}")).display()
        ),
    };
    Ok(format!(
        "the loss is {value} at step {step} ({}); stopped before updating the weights. {advice}",
        terms.join(", ")
    ))
}

/// Progress on stderr: a bar on a terminal, else a line every `log_every` steps.
pub(crate) struct Progress {
    bar: Option<indicatif::ProgressBar>,
    total: u64,
    start: Instant,
    start_step: u64,
}

impl Progress {
    pub(crate) fn new(total: u64, step: u64) -> Self {
        let bar = std::io::IsTerminal::is_terminal(&std::io::stderr()).then(|| {
            let b = indicatif::ProgressBar::new(total);
            b.set_style(
                indicatif::ProgressStyle::with_template(
                    "{elapsed_precise} [{bar:30}] step {pos}/{len} {msg} ETA {eta}",
                )
                .expect("a valid template")
                .progress_chars("=> "),
            );
            b.set_position(step);
            b
        });
        Self { bar, total, start: Instant::now(), start_step: step }
    }

    pub(crate) fn set(&self, step: u64, loss: f64) {
        if let Some(b) = &self.bar {
            b.set_position(step);
            b.set_message(format!("loss {loss:.5}"));
        }
    }

    pub(crate) fn log(&self, step: u64, loss: f64, sps: f64) {
        match &self.bar {
            Some(b) => b.set_message(format!("loss {loss:.5}, {sps:.1} sent/s")),
            None => {
                let done = (step - self.start_step) as f64;
                let secs = self.start.elapsed().as_secs_f64();
                let eta = if done > 0.0 { secs / done * (self.total - step) as f64 } else { 0.0 };
                errln!("step {step}/{} loss {loss:.5} {sps:.1} sent/s ETA {}", self.total, fmt_secs(eta));
            }
        }
    }

    pub(crate) fn println(&self, msg: &str) {
        match &self.bar {
            Some(b) => b.println(msg),
            None => errln!("{msg}"),
        }
    }

    pub(crate) fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}

pub(crate) fn fmt_secs(s: f64) -> String {
    let s = s.round() as u64;
    format!("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    pub(crate) fn nan_message_names_the_checkpoint_to_use() {
        let d = tempfile::tempdir().unwrap();
        let m = nan_message(3, f64::NAN, &[("mse".into(), f64::NAN)], d.path()).unwrap();
        assert!(m.contains("at step 3 (mse = NaN)") && m.contains("No checkpoint was written yet"), "{m}");
        let ck = d.path().join("checkpoints");
        for s in [2, 4] {
            std::fs::create_dir_all(ck.join(format!("step-{s}"))).unwrap();
        }
        // The step after the newest checkpoint: that checkpoint gave the NaN; the one before is named.
        let m = nan_message(5, f64::NAN, &[], d.path()).unwrap();
        assert!(m.contains(&format!("newest checkpoint, {}", ck.join("step-4").display())), "{m}");
        assert!(m.contains("repeats this step exactly"), "{m}");
        assert!(m.contains(&format!("an earlier one is {}", ck.join("step-2").display())), "{m}");
        // One checkpoint: the first (at least two are kept).
        std::fs::remove_dir_all(ck.join("step-2")).unwrap();
        assert!(nan_message(5, f64::NAN, &[], d.path()).unwrap().contains("it is the only checkpoint written"));
        // Later: the newest checkpoint predates the trouble.
        let m = nan_message(7, f64::INFINITY, &[], d.path()).unwrap();
        assert!(m.contains(&format!("last good checkpoint is {}", ck.join("step-4").display())), "{m}");
    }
}
