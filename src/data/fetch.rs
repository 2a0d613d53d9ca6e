//! Download data sets of [`super::registry`] into a data directory, in the layout the
//! evaluators read: each file from its pinned source (`https://raw.githubusercontent.com/
//! OWNER/REPO/COMMIT/PATH`, or a mirror of that layout named by `XSENT_DATA_MIRROR`), checked
//! against its sha256 before it takes its name.
//!
//! A transfer goes into a hidden `.NAME.part` file beside its destination and resumes from
//! there (an HTTP Range request) when it is cut, within the run or by running the command
//! again. A file whose checksum is wrong is deleted, and the error says so; files already in
//! place are checked and kept.

use super::registry::{DataSet, File, Origin, Repo};
use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// The default source of every file.
pub const GITHUB_RAW: &str = "https://raw.githubusercontent.com";

/// Tries of one transfer (the first and the resumptions after a cut) within a run.
const TRIES: u32 = 5;

/// The largest archive accepted (the STS 2017 zips are under 100 KB).
const MAX_ARCHIVE: u64 = 64 << 20;

/// The base URL files are fetched from: `XSENT_DATA_MIRROR`, else [`GITHUB_RAW`]. A mirror
/// must be an `http://` or `https://` URL, the schemes the HTTP client speaks.
pub fn base_url() -> Result<String> {
    match std::env::var("XSENT_DATA_MIRROR") {
        Ok(m) if !m.trim().is_empty() => {
            let m = m.trim().trim_end_matches('/');
            let scheme = m.split_once("://").map(|(s, _)| s.to_ascii_lowercase());
            if !matches!(scheme.as_deref(), Some("http" | "https")) {
                bail!(
                    "XSENT_DATA_MIRROR={m:?} is not an http:// or https:// URL: xsent data fetch downloads over HTTP(S) only \
                     (e.g. XSENT_DATA_MIRROR=http://mirror.example/raw, laid out as raw.githubusercontent.com)"
                );
            }
            Ok(m.to_string())
        }
        _ => Ok(GITHUB_RAW.to_string()),
    }
}

/// What [`fetch`] did for one data set.
#[derive(Debug, Default)]
pub struct Fetched {
    /// Files downloaded (or made from downloaded ones), and their bytes.
    pub files: usize,
    pub bytes: u64,
    /// Files that were in place already, checked.
    pub present: usize,
}

/// Fetch every file of `set` that `dir` does not hold yet, from `base` (see [`base_url`]). A
/// failed fetch removes the folders it made that are still empty (a cut download's `.part` file
/// keeps its folder, to be resumed).
pub fn fetch(set: &DataSet, dir: &Path, base: &str) -> Result<Fetched> {
    let mut made: Vec<PathBuf> = Vec::new();
    for f in set.files {
        for folder in dir.join(f.path).ancestors().skip(1) {
            if folder.exists() || made.iter().any(|m| m == folder) {
                break;
            }
            made.push(folder.to_path_buf());
        }
    }
    let r = fetch_into(set, dir, base);
    if r.is_err() {
        // Deepest first; `remove_dir` removes only an empty folder.
        made.sort_by_key(|m| std::cmp::Reverse(m.components().count()));
        for folder in made {
            let _ = std::fs::remove_dir(folder);
        }
    }
    r
}

fn fetch_into(set: &DataSet, dir: &Path, base: &str) -> Result<Fetched> {
    let mut done = Fetched::default();
    let mut needed: Vec<&File> = Vec::new();
    for f in set.files {
        let dest = dir.join(f.path);
        if dest.exists() {
            check_present(f, &dest)?;
            done.present += 1;
        } else {
            needed.push(f);
        }
    }
    if needed.is_empty() {
        return Ok(done);
    }
    let http = Http::new(base, set, &needed);
    for f in &needed {
        if let Origin::Raw { repo, path } = f.origin {
            let url = http.url(repo, path);
            let dest = dir.join(f.path);
            let part = part_path(&dest)?;
            http.download(&url, &part, f.path, Some(f.size))?;
            install(f, &part, &dest, &url)?;
            http.transferred(f.size);
            (done.files, done.bytes) = (done.files + 1, done.bytes + f.size);
        }
    }
    // The members of each archive, archive by archive.
    let mut archives: Vec<(&Repo, &str)> = Vec::new();
    for f in &needed {
        if let Origin::Zip { repo, archive, .. } = f.origin {
            if !archives.iter().any(|(r, a)| r.name == repo.name && *a == archive) {
                archives.push((repo, archive));
            }
        }
    }
    for (repo, archive) in archives {
        let members: Vec<&File> = needed
            .iter()
            .copied()
            .filter(|f| matches!(f.origin, Origin::Zip { archive: a, .. } if a == archive))
            .collect();
        let url = http.url(repo, archive);
        let name = archive.rsplit('/').next().unwrap_or(archive);
        // Beside the first member's destination.
        let part = part_path(&dir.join(members[0].path).with_file_name(name))?;
        http.download(&url, &part, name, None)?;
        http.transferred(std::fs::metadata(&part).map(|m| m.len()).unwrap_or(0));
        let r = extract(&part, &members, dir, &url);
        // The archive is not part of the layout: removed once its files are in place, and when
        // it does not give them (it would not give them on a second try either).
        let _ = std::fs::remove_file(&part);
        r?;
        for f in members {
            (done.files, done.bytes) = (done.files + 1, done.bytes + f.size);
        }
    }
    for f in &needed {
        if let Origin::Gunzip { of } = f.origin {
            let src = dir.join(of);
            let dest = dir.join(f.path);
            let part = part_path(&dest)?;
            let from = format!("{} (gunzipped)", src.display());
            let input = std::fs::File::open(&src).with_context(|| format!("cannot read {}", src.display()))?;
            let mut out = std::fs::File::create(&part).with_context(|| format!("cannot create {}", part.display()))?;
            let r = copy_capped(&mut flate2::read::MultiGzDecoder::new(input), &mut out, f.size, &from);
            if let Err(e) = r {
                let _ = std::fs::remove_file(&part);
                return Err(e.context(format!("{}: cannot gunzip {}", f.path, src.display())));
            }
            install(f, &part, &dest, &from)?;
            (done.files, done.bytes) = (done.files + 1, done.bytes + f.size);
        }
    }
    Ok(done)
}

/// The hidden file a download into `dest` is written to: `.NAME.part` beside it (its folder made).
fn part_path(dest: &Path) -> Result<PathBuf> {
    let dir = dest.parent().expect("a file in the data directory");
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let name = dest.file_name().expect("a file name").to_string_lossy();
    Ok(dir.join(format!(".{name}.part")))
}

/// A file in place already must be the pinned one: else it is someone's own, or damaged, and is
/// left for the user to move.
fn check_present(f: &File, dest: &Path) -> Result<()> {
    if !dest.is_file() {
        bail!(
            "{} is in the way of {}: it is not a file; move it away and run the command again",
            dest.display(),
            f.path
        );
    }
    let got = sha256_file(dest)?;
    if got != f.sha256 {
        bail!(
            "{} is there already but is not the pinned file (sha256 {got}, expected {}): xsent leaves it as it is; \
             move it away or delete it, and run the command again to download it",
            dest.display(),
            f.sha256
        );
    }
    Ok(())
}

/// Check the complete `part` against `f` and move it to `dest`; a wrong file is deleted.
fn install(f: &File, part: &Path, dest: &Path, from: &str) -> Result<()> {
    let got = sha256_file(part)?;
    if got != f.sha256 {
        let _ = std::fs::remove_file(part);
        bail!(
            "{}: what {from} gave has sha256 {got}, but the pinned file's is {}; it is deleted and nothing took its place. \
             Run the command again (the transfer may have been damaged); if it fails again, the source no longer serves \
             the file xsent knows{}",
            f.path,
            f.sha256,
            if from.starts_with(GITHUB_RAW) { "" } else { " (with XSENT_DATA_MIRROR set: check the mirror's copy)" }
        );
    }
    std::fs::rename(part, dest).with_context(|| format!("cannot move {} to {}", part.display(), dest.display()))
}

/// Extract `members` of the zip archive `archive` into `dir`, each checked.
fn extract(archive: &Path, members: &[&File], dir: &Path, url: &str) -> Result<()> {
    let file = std::fs::File::open(archive).with_context(|| format!("cannot read {}", archive.display()))?;
    let mut zip = zip::ZipArchive::new(file).with_context(|| format!("{url} is not a zip archive that can be read"))?;
    for f in members {
        let Origin::Zip { member, .. } = f.origin else { continue };
        let dest = dir.join(f.path);
        let part = part_path(&dest)?;
        let from = format!("{member} of {url}");
        let mut entry =
            zip.by_name(member).with_context(|| format!("{}: the archive {url} has no {member}", f.path))?;
        let mut out = std::fs::File::create(&part).with_context(|| format!("cannot create {}", part.display()))?;
        if let Err(e) = copy_capped(&mut entry, &mut out, f.size, &from) {
            let _ = std::fs::remove_file(&part);
            return Err(e.context(format!("{}: cannot extract {member} from {url}", f.path)));
        }
        install(f, &part, &dest, &from)?;
    }
    Ok(())
}

/// Copy `r` into `w`, refusing more than `cap` bytes (the file's pinned size: no source makes
/// xsent write more than it expects).
fn copy_capped(r: &mut dyn Read, w: &mut dyn Write, cap: u64, from: &str) -> Result<u64> {
    let n = std::io::copy(&mut r.take(cap + 1), w)?;
    if n > cap {
        bail!("{from} holds more than the {cap} bytes expected");
    }
    Ok(n)
}

use crate::io::digest::sha256_file;

/// One data set's transfers: the HTTP agent and the progress bar (hidden when stderr is not a
/// terminal).
struct Http {
    agent: ureq::Agent,
    base: String,
    progress: ProgressBar,
    /// Bytes of the files finished so far.
    finished: std::cell::Cell<u64>,
}

impl Http {
    fn new(base: &str, set: &DataSet, needed: &[&File]) -> Self {
        let agent = ureq::AgentBuilder::new()
            .timeout_connect(std::time::Duration::from_secs(30))
            .timeout_read(std::time::Duration::from_secs(60))
            .user_agent(concat!("xsent/", env!("CARGO_PKG_VERSION")))
            .try_proxy_from_env(true)
            .build();
        // The files downloaded as they are; an archive's size is added when its transfer starts.
        let total = needed.iter().filter(|f| matches!(f.origin, Origin::Raw { .. })).map(|f| f.size).sum();
        let progress = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
        progress.set_style(
            ProgressStyle::with_template("{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} {eta}")
                .expect("a valid template")
                .progress_chars("=> "),
        );
        progress.set_message(format!("xsent data fetch {}", set.name));
        Self { agent, base: base.to_string(), progress, finished: std::cell::Cell::new(0) }
    }

    fn url(&self, repo: &Repo, path: &str) -> String {
        format!("{}/{}/{}/{path}", self.base, repo.name, repo.commit)
    }

    /// A download of `size` bytes is complete.
    fn transferred(&self, size: u64) {
        self.finished.set(self.finished.get() + size);
        self.progress.set_position(self.finished.get());
    }

    /// Download `url` into `part`, resuming what it holds. `size`: the file's pinned size (an
    /// archive's is not pinned; it is capped at [`MAX_ARCHIVE`]). A failure that leaves `part`
    /// empty removes it.
    fn download(&self, url: &str, part: &Path, what: &str, size: Option<u64>) -> Result<()> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(part)
            .with_context(|| format!("cannot create {}", part.display()))?;
        if file.try_lock().is_err() {
            bail!(
                "{} is being written by another xsent data fetch: wait for it to finish, then run the command again",
                part.display()
            );
        }
        let r = self.download_into(file, url, part, what, size);
        if r.is_err() && std::fs::metadata(part).is_ok_and(|m| m.len() == 0) {
            let _ = std::fs::remove_file(part);
        }
        r
    }

    fn download_into(
        &self,
        mut file: std::fs::File,
        url: &str,
        part: &Path,
        what: &str,
        size: Option<u64>,
    ) -> Result<()> {
        let cap = size.unwrap_or(MAX_ARCHIVE);
        let mut counted = false;
        for attempt in 1..=TRIES {
            let mut have = file.metadata().with_context(|| format!("cannot read {}", part.display()))?.len();
            if have > 0 && size == Some(have) {
                return Ok(());
            }
            if have > cap {
                file.set_len(0)?;
                have = 0;
            }
            let mut req = self.agent.get(url).set("Accept-Encoding", "identity");
            if have > 0 {
                req = req.set("Range", &format!("bytes={have}-"));
            }
            let resp = match req.call() {
                Ok(r) => r,
                Err(ureq::Error::Status(404, _)) => bail!(
                    "{what}: {url} answered 404 Not Found: the source does not have the file at its pinned commit{}",
                    if self.base == GITHUB_RAW {
                        String::new()
                    } else {
                        format!(" (XSENT_DATA_MIRROR={}: a mirror must serve OWNER/REPO/COMMIT/PATH as raw.githubusercontent.com does)", self.base)
                    }
                ),
                Err(ureq::Error::Status(416, _)) if have > 0 => {
                    // What the part holds does not fit the file the source has: start over.
                    file.set_len(0)?;
                    continue;
                }
                Err(ureq::Error::Status(code, r)) => {
                    bail!("{what}: {url} answered HTTP {code} {}; run the command again later", r.status_text())
                }
                Err(e) if attempt < TRIES => {
                    self.note(what, &e.to_string(), attempt);
                    continue;
                }
                Err(e) => bail!("{what}: cannot download {url}: {e}\n{}", keep_note(part, have)),
            };
            if have > 0 && !(resp.status() == 206 && content_range_start(&resp) == Some(have)) {
                // The whole file (or another range) came back: start over.
                file.set_len(0)?;
                have = 0;
            }
            if size.is_none() && !counted {
                if let Some(n) = resp.header("Content-Length").and_then(|v| v.parse::<u64>().ok()) {
                    self.progress.inc_length(have + n);
                    counted = true;
                }
            }
            let mut body = resp.into_reader().take(cap - have + 1);
            let mut buf = vec![0u8; 64 << 10];
            let mut got = have;
            let cut = loop {
                match body.read(&mut buf) {
                    Ok(0) => break None,
                    Ok(n) => {
                        file.write_all(&buf[..n]).with_context(|| format!("cannot write {}", part.display()))?;
                        got += n as u64;
                        self.progress.set_position(self.finished.get() + got);
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => break Some(e),
                }
            };
            if got > cap {
                drop(file);
                let _ = std::fs::remove_file(part);
                bail!("{what}: {url} sent more than the {cap} bytes expected; nothing was kept");
            }
            match cut {
                None if size.is_none_or(|s| got == s) => return Ok(()),
                None => {
                    self.note(what, &format!("the transfer ended at {got} of {} bytes", size.unwrap_or(0)), attempt)
                }
                Some(e) if attempt < TRIES => {
                    self.note(what, &format!("the transfer was cut at {got} bytes ({e})"), attempt)
                }
                Some(e) => bail!("{what}: the transfer from {url} was cut: {e}\n{}", keep_note(part, got)),
            }
        }
        let have = file.metadata().map(|m| m.len()).unwrap_or(0);
        bail!("{what}: {url} did not give the whole file in {TRIES} tries\n{}", keep_note(part, have))
    }

    /// Say on stderr that a transfer goes on after a failure.
    fn note(&self, what: &str, problem: &str, attempt: u32) {
        self.progress
            .suspend(|| errln!("xsent data fetch: {what}: {problem}; resuming (try {} of {TRIES})", attempt + 1));
        std::thread::sleep(std::time::Duration::from_millis(500 * u64::from(attempt)));
    }
}

impl Drop for Http {
    fn drop(&mut self) {
        self.progress.finish_and_clear();
    }
}

/// What is kept of a failed transfer, and what to do.
fn keep_note(part: &Path, have: u64) -> String {
    if have == 0 {
        return "Check the network connection (a proxy is read from HTTPS_PROXY or ALL_PROXY), then run the command again: \
                nothing of this file was received."
            .to_string();
    }
    format!(
        "Check the network connection (a proxy is read from HTTPS_PROXY or ALL_PROXY), then run the command again: \
         the {have} bytes received are kept in {} and the download resumes from there.",
        part.display()
    )
}

/// The first byte of a 206 response's `Content-Range: bytes FIRST-LAST/TOTAL`.
fn content_range_start(resp: &ureq::Response) -> Option<u64> {
    let v = resp.header("Content-Range")?;
    v.trim().strip_prefix("bytes ")?.split('-').next()?.trim().parse().ok()
}

/// How many files of `set` are in `dir` as pinned (size, then sha256: a file of the right size
/// and other content is not present), and their bytes. The whole registry is about 45 MB, hashed
/// in well under a second.
pub fn present(set: &DataSet, dir: &Path) -> (usize, u64) {
    set.files
        .iter()
        .filter(|f| {
            let p = dir.join(f.path);
            std::fs::metadata(&p).is_ok_and(|m| m.is_file() && m.len() == f.size)
                && crate::io::digest::sha256_file(&p).is_ok_and(|h| h == f.sha256)
        })
        .fold((0, 0), |(n, b), f| (n + 1, b + f.size))
}
