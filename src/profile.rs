//! A sampling profile of the CPU side of training steps (`XSENT_PROFILE=FILE xsent train …`),
//! for builds with `--features profile` (`scripts/build-cuda.sh` makes one). On a GPU the step
//! waits on the CPU issuing candle's ops (docs/gpu.md); this says where that CPU time goes, by
//! function, without `perf` or `nsys` on the machine. The trainer profiles its steps only (not
//! loading, not validation) and writes a text report: the functions with the most samples on
//! the stack (inclusive) and at its top (self), sampled at 999 Hz on every thread.

use anyhow::Result;
use std::path::{Path, PathBuf};

/// The environment variable that asks for a profile, and the report's path.
pub const ENV: &str = "XSENT_PROFILE";

/// The report's path, from [`ENV`] (unset or empty: none).
pub fn requested() -> Option<PathBuf> {
    std::env::var_os(ENV).filter(|v| !v.is_empty()).map(PathBuf::from)
}

/// An error unless this build has the profiler (say so before anything is loaded).
pub fn check(out: &Path) -> Result<()> {
    if cfg!(feature = "profile") {
        return Ok(());
    }
    anyhow::bail!(
        "{ENV}={}: this xsent was built without the profiler; build with `--features profile` \
         (scripts/build-cuda.sh does) or unset {ENV}",
        out.display()
    )
}

/// A running profile.
pub struct Profile {
    #[cfg(feature = "profile")]
    guard: pprof::ProfilerGuard<'static>,
    out: PathBuf,
}

impl Profile {
    /// Start sampling; the report goes to `out` at [`Profile::finish`].
    #[cfg(feature = "profile")]
    pub fn start(out: &Path) -> Result<Self> {
        use anyhow::Context;
        let guard = pprof::ProfilerGuardBuilder::default()
            .frequency(999)
            .blocklist(&["libc", "libgcc", "pthread", "vdso"])
            .build()
            .context("starting the profiler")?;
        Ok(Self { guard, out: out.to_path_buf() })
    }

    #[cfg(not(feature = "profile"))]
    pub fn start(out: &Path) -> Result<Self> {
        // Always an error in such a build.
        check(out).map(|()| Self { out: out.to_path_buf() })
    }

    /// Stop and write the report.
    pub fn finish(self) -> Result<()> {
        #[cfg(feature = "profile")]
        {
            use anyhow::Context;
            let report = self.guard.report().build().context("building the profile")?;
            let stacks = report.data.iter().map(|(frames, &n)| {
                let names: Vec<String> = frames.frames.iter().flat_map(|f| f.iter().map(label)).collect();
                (names, n.max(0) as u64)
            });
            let text = summary(stacks, 60);
            crate::io::atomic::write_file_atomically(&self.out, text.as_bytes())
                .with_context(|| format!("{ENV}: writing {}", self.out.display()))?;
            crate::errln!("xsent train: profile of the steps in {}", self.out.display());
        }
        #[cfg(not(feature = "profile"))]
        let _ = &self.out;
        Ok(())
    }
}

/// A frame's function and, when the binary has line tables, the last four parts of its
/// file's path (the names of closures and inlined functions alone say little).
#[cfg(feature = "profile")]
fn label(s: &pprof::Symbol) -> String {
    let name = s.name();
    let Some(file) = &s.filename else { return name };
    let parts: Vec<_> = file.iter().map(|p| p.to_string_lossy()).collect();
    format!("{name} ({})", parts[parts.len().saturating_sub(4)..].join("/"))
}

/// The report of sampled stacks (innermost frame first, with their sample counts): the `top`
/// functions by inclusive samples (on the stack at all, counted once per sample) and by self
/// samples (innermost), with their shares of all samples.
pub fn summary(stacks: impl IntoIterator<Item = (Vec<String>, u64)>, top: usize) -> String {
    use std::collections::HashMap;
    let (mut incl, mut own): (HashMap<String, u64>, HashMap<String, u64>) = Default::default();
    let mut total = 0u64;
    for (frames, n) in stacks {
        total += n;
        if let Some(leaf) = frames.first() {
            *own.entry(leaf.clone()).or_default() += n;
        }
        let mut seen: Vec<&String> = Vec::new();
        for f in &frames {
            if !seen.contains(&f) {
                seen.push(f);
                *incl.entry(f.clone()).or_default() += n;
            }
        }
    }
    let table = |m: HashMap<String, u64>, what: &str| {
        let mut rows: Vec<(String, u64)> = m.into_iter().collect();
        rows.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        let mut s = format!("## {what}\n\nsamples  share  function\n");
        for (name, n) in rows.into_iter().take(top) {
            s += &format!("{n:7}  {:5.1}%  {name}\n", 100.0 * n as f64 / total.max(1) as f64);
        }
        s
    };
    format!(
        "# xsent train: CPU profile of the training steps\n\n{total} samples at 999 Hz on all threads\n\n{}\n{}",
        table(incl, "inclusive (on the stack)"),
        table(own, "self (innermost frame)")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_counts_each_function_once_per_sample() {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        // Innermost first; `rec` twice in one stack counts once.
        let text = summary(
            vec![(s(&["add", "rec", "rec", "main"]), 3), (s(&["mul", "main"]), 1), (s(&["add", "main"]), 2)],
            10,
        );
        assert!(text.contains("6 samples"), "{text}");
        let section = |name: &str| text.split("## ").find(|p| p.starts_with(name)).unwrap().to_string();
        let (incl, own) = (section("inclusive"), section("self"));
        assert!(incl.contains("      6  100.0%  main"), "{incl}");
        assert!(incl.contains("      5   83.3%  add"), "{incl}");
        assert!(incl.contains("      3   50.0%  rec"), "{incl}");
        assert!(own.contains("      5   83.3%  add") && own.contains("      1   16.7%  mul"), "{own}");
        assert!(!own.contains("main"), "{own}");
    }

    #[cfg(not(feature = "profile"))]
    #[test]
    fn without_the_feature_a_request_says_how_to_build() {
        let e = check(Path::new("p.txt")).unwrap_err().to_string();
        assert!(e.contains("--features profile") && e.contains("XSENT_PROFILE=p.txt"), "{e}");
    }
}
