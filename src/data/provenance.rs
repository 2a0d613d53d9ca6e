//! Which data an evaluation read: each file with its sha256, and whether it is the file xsent
//! pins for its benchmark ([`super::registry`]). Reports keep the list, so that two reports can
//! be told apart by their data and `--compare` refuses reports of other data; a benchmark file
//! that is not the pinned one is warned about, since its scores are not the benchmark's (an
//! outside probe: 300 edited Tatoeba lines were scored without a word, and `--compare` against
//! a report of the real files showed a "significant" difference for the same model).

use anyhow::Result;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// One file an evaluation read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DataFile {
    /// Its path: relative to the data directory for the benchmark files there, else as given.
    pub path: String,
    /// Absent for what is not a regular file (a pipe, `<(cat a.txt)`): it was read once, as the
    /// data, and cannot be read again to be hashed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// `true`: the pinned file of its benchmark; `false`: a benchmark file with other content;
    /// absent: a file the registry does not list (the user's own, `--pairs`, `--src`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pinned: Option<bool>,
}

/// The files `files` (each once, in order), described against the registry: a file under
/// `data_dir` is looked up by its path there: as written (so that a benchmark folder that is a
/// link to elsewhere, as data directories assembled from shared storage have, is still the
/// benchmark's), else with links and `..` resolved on both sides.
pub fn describe(data_dir: Option<&Path>, files: &[PathBuf]) -> Result<Vec<DataFile>> {
    let mut out: Vec<DataFile> = Vec::new();
    for f in files {
        let rel = data_dir.and_then(|d| relative_to(d, f));
        let path = rel.clone().unwrap_or_else(|| f.display().to_string());
        if out.iter().any(|d| d.path == path) {
            continue;
        }
        let sha256 = match std::fs::metadata(f) {
            Ok(m) if m.is_file() => Some(crate::io::digest::sha256_file(f)?),
            _ => None,
        };
        let pinned = match (rel.as_deref().and_then(pinned_sha256), &sha256) {
            (Some(want), Some(got)) => Some(want == got),
            _ => None,
        };
        out.push(DataFile { path, sha256, pinned });
    }
    Ok(out)
}

/// `file`'s path inside `dir`: lexically (both made absolute, `.` and `..` taken away), else
/// with links resolved on both sides.
fn relative_to(dir: &Path, file: &Path) -> Option<String> {
    let absolute =
        |p: &Path| crate::io::lexical_clean(&std::env::current_dir().map(|c| c.join(p)).unwrap_or_else(|_| p.into()));
    let inside = |d: &Path, f: &Path| f.strip_prefix(d).ok().and_then(|r| r.to_str()).map(str::to_string);
    inside(&absolute(dir), &absolute(file))
        .or_else(|| inside(&dir.canonicalize().ok()?, &file.canonicalize().ok()?))
        .filter(|r| !r.is_empty())
}

/// The first 12 characters of a digest, for messages (a report's may be anything).
fn short(sha: &str) -> &str {
    sha.char_indices().nth(12).map_or(sha, |(i, _)| &sha[..i])
}

/// The sha256 the registry pins for the file at `rel` in the data directory.
fn pinned_sha256(rel: &str) -> Option<&'static str> {
    super::registry::SETS.iter().flat_map(|s| s.files).find(|f| f.path == rel).map(|f| f.sha256)
}

/// A warning for each benchmark file that is not the pinned one.
pub fn warnings(files: &[DataFile], data_dir: Option<&Path>) -> Vec<String> {
    files
        .iter()
        .filter(|f| f.pinned == Some(false))
        .map(|f| {
            let full = data_dir.map_or_else(|| PathBuf::from(&f.path), |d| d.join(&f.path));
            format!(
                "{} is not the file xsent pins for its benchmark (sha256 {}, pinned {}): its scores are not the benchmark's, \
                 nor comparable with published numbers or with reports of the pinned file; `xsent data fetch` restores it",
                full.display(),
                short(f.sha256.as_deref().unwrap_or("?")),
                pinned_sha256(&f.path).map_or("?", short)
            )
        })
        .collect()
}

/// The files two reports both read with different content, as `path (sha256 a… here, b… there)`.
pub fn differences(this: &[DataFile], other: &[DataFile]) -> Vec<String> {
    this.iter()
        .filter_map(|a| {
            let b = other.iter().find(|b| b.path == a.path)?;
            let (x, y) = (a.sha256.as_deref()?, b.sha256.as_deref()?);
            (x != y).then(|| format!("{} (sha256 {}… here, {}… there)", a.path, short(x), short(y)))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pinned file is recognised by its path in the data directory and its digest; edited, it
    /// is not, and is warned about; a file outside the registry is neither.
    #[test]
    fn benchmark_files_are_checked_against_the_pins() {
        let set = super::super::registry::find("tatoeba").unwrap();
        let pinned = &set.files[0];
        let dir = tempfile::tempdir().unwrap();
        // The shared data, as the integration tests find it (XSENT_DATA, else ../shared/data).
        let data = std::env::var_os("XSENT_DATA")
            .map(PathBuf::from)
            .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/data"));
        let real = data.join(pinned.path);
        assert!(real.is_file(), "{} not found (set XSENT_DATA)", real.display());
        let copy = dir.path().join(pinned.path);
        std::fs::create_dir_all(copy.parent().unwrap()).unwrap();
        std::fs::copy(&real, &copy).unwrap();
        let own = dir.path().join("mine.txt");
        std::fs::write(&own, "a\n").unwrap();
        let d = describe(Some(dir.path()), &[copy.clone(), own.clone(), copy.clone()]).unwrap();
        assert_eq!(d.len(), 2, "each file once");
        assert_eq!((d[0].path.as_str(), d[0].pinned), (pinned.path, Some(true)));
        assert_eq!(d[1].pinned, None);
        assert!(warnings(&d, Some(dir.path())).is_empty());
        let mut text = std::fs::read(&copy).unwrap();
        text[0] ^= 1;
        std::fs::write(&copy, text).unwrap();
        let edited = describe(Some(dir.path()), std::slice::from_ref(&copy)).unwrap();
        assert_eq!(edited[0].pinned, Some(false));
        let w = warnings(&edited, Some(dir.path()));
        assert!(w.len() == 1 && w[0].contains("is not the file xsent pins"), "{w:?}");
        let diff = differences(&edited, &d);
        assert!(diff.len() == 1 && diff[0].starts_with(pinned.path), "{diff:?}");
        assert!(differences(&d, &d).is_empty());
        // A report's digest may be anything: short or not ASCII, it is shown, not sliced.
        let odd = vec![DataFile { path: pinned.path.into(), sha256: Some("é".into()), pinned: None }];
        assert!(differences(&edited, &odd)[0].contains("é… there"));
        // The data directory given through a link and `..`: the file is still found as pinned.
        std::fs::write(&copy, std::fs::read(&real).unwrap()).unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(dir.path(), &link).unwrap();
        std::fs::create_dir(dir.path().join("x")).unwrap();
        let via = link.join("x/..").join(pinned.path);
        assert_eq!(describe(Some(&link), std::slice::from_ref(&via)).unwrap()[0].pinned, Some(true));
        // A benchmark folder that is a link to elsewhere (an outside probe: the pin check was
        // lost, and with it the warning and --compare's refusal): still named by its path in
        // the data directory, and pinned.
        let (assembled, shared) = (dir.path().join("assembled"), dir.path().join("shared"));
        let top = Path::new(pinned.path).components().next().unwrap().as_os_str();
        let inner = Path::new(pinned.path).strip_prefix(top).unwrap();
        std::fs::create_dir_all(shared.join(inner).parent().unwrap()).unwrap();
        std::fs::copy(&real, shared.join(inner)).unwrap();
        std::fs::create_dir(&assembled).unwrap();
        std::os::unix::fs::symlink(&shared, assembled.join(top)).unwrap();
        let linked = describe(Some(&assembled), &[assembled.join(pinned.path)]).unwrap();
        assert_eq!((linked[0].path.as_str(), linked[0].pinned), (pinned.path, Some(true)));
        let mut text = std::fs::read(shared.join(inner)).unwrap();
        text[0] ^= 1;
        std::fs::write(shared.join(inner), text).unwrap();
        let linked = describe(Some(&assembled), &[assembled.join(pinned.path)]).unwrap();
        assert_eq!((linked[0].path.as_str(), linked[0].pinned), (pinned.path, Some(false)));
        assert_eq!(warnings(&linked, Some(&assembled)).len(), 1);
        // A pipe is not read a second time: recorded without a digest.
        let fifo = dir.path().join("fifo");
        assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
        let p = describe(None, &[fifo]).unwrap();
        assert_eq!((p[0].sha256.as_deref(), p[0].pinned), (None, None));
    }
}
