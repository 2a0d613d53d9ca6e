//! `xsent data fetch` against a local HTTP server on 127.0.0.1 that serves, in
//! raw.githubusercontent.com's layout (OWNER/REPO/COMMIT/PATH), the files of ../shared/data
//! (the STS 2017 archives rebuilt from their extracted files). Range requests are honoured, and
//! a transfer can be cut midway, a file damaged or left out.

mod common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::{Arc, Mutex};
use xsent::data::registry::{self, Origin};

/// What the server holds and does.
#[derive(Default)]
struct State {
    files: HashMap<String, Vec<u8>>,
    /// Cut the next full (not ranged) transfer of this path after this many bytes.
    cut: HashMap<String, usize>,
    /// Every request: the path and its Range header.
    log: Vec<(String, Option<String>)>,
}

struct Mirror {
    url: String,
    state: Arc<Mutex<State>>,
}

impl Mirror {
    /// The mirror of every data set's sources, built from ../shared/data.
    fn new() -> Self {
        let data = common::data();
        let mut files = HashMap::new();
        let mut archives: HashMap<String, Vec<(&str, Vec<u8>)>> = HashMap::new();
        for set in registry::SETS {
            for f in set.files {
                let content = || std::fs::read(data.join(f.path)).unwrap_or_else(|e| panic!("{}: {e}", f.path));
                match f.origin {
                    Origin::Raw { repo, path } => {
                        files.insert(format!("/{}/{}/{path}", repo.name, repo.commit), content());
                    }
                    Origin::Zip { repo, archive, member } => {
                        archives
                            .entry(format!("/{}/{}/{archive}", repo.name, repo.commit))
                            .or_default()
                            .push((member, content()));
                    }
                    Origin::Gunzip { .. } => {}
                }
            }
        }
        for (url, members) in archives {
            let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
            let opts = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
            for (name, bytes) in members {
                zip.start_file(name, opts).unwrap();
                zip.write_all(&bytes).unwrap();
            }
            files.insert(url, zip.finish().unwrap().into_inner());
        }
        let state = Arc::new(Mutex::new(State { files, ..State::default() }));
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let s = state.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let s = s.clone();
                std::thread::spawn(move || serve(conn, &s));
            }
        });
        Mirror { url, state }
    }

    /// The URL path of the registry file `path` (a raw one).
    fn source_of(path: &str) -> String {
        let f = registry::SETS.iter().flat_map(|s| s.files.iter()).find(|f| f.path == path).unwrap();
        let Origin::Raw { repo, path } = f.origin else { panic!("{path} is not downloaded as it is") };
        format!("/{}/{}/{path}", repo.name, repo.commit)
    }

    fn fetch(&self, dir: &Path, sets: &[&str]) -> std::process::Output {
        common::xsent()
            .args(["data", "fetch"])
            .args(sets)
            .env("XSENT_DATA", dir)
            .env("XSENT_DATA_MIRROR", &self.url)
            .env_remove("HTTPS_PROXY")
            .env_remove("https_proxy")
            .env_remove("ALL_PROXY")
            .env_remove("all_proxy")
            .env_remove("HTTP_PROXY")
            .env_remove("http_proxy")
            .output()
            .unwrap()
    }

    fn log(&self) -> Vec<(String, Option<String>)> {
        std::mem::take(&mut self.state.lock().unwrap().log)
    }
}

/// Answer one request (then close the connection).
fn serve(conn: TcpStream, state: &Mutex<State>) {
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let mut line = String::new();
    if reader.read_line(&mut line).is_err() {
        return;
    }
    let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
    let mut range = None;
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).unwrap_or(0) == 0 || h.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            if k.eq_ignore_ascii_case("range") {
                range = Some(v.trim().to_string());
            }
        }
    }
    let (body, cut) = {
        let mut s = state.lock().unwrap();
        s.log.push((path.clone(), range.clone()));
        let cut = if range.is_none() { s.cut.remove(&path) } else { None };
        (s.files.get(&path).cloned(), cut)
    };
    let mut w = conn;
    let Some(body) = body else {
        let _ = w.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\nConnection: close\r\n\r\nnot found");
        return;
    };
    let start: usize =
        range.as_deref().and_then(|r| r.strip_prefix("bytes=")?.strip_suffix('-')?.parse().ok()).unwrap_or(0);
    if start >= body.len() && range.is_some() {
        let _ = write!(w, "HTTP/1.1 416 Range Not Satisfiable\r\nContent-Range: bytes */{}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n", body.len());
        return;
    }
    let head = if range.is_some() {
        format!("HTTP/1.1 206 Partial Content\r\nContent-Range: bytes {start}-{}/{}\r\n", body.len() - 1, body.len())
    } else {
        "HTTP/1.1 200 OK\r\n".to_string()
    };
    let _ = write!(w, "{head}Content-Length: {}\r\nConnection: close\r\n\r\n", body.len() - start);
    let end = cut.unwrap_or(body.len());
    let _ = w.write_all(&body[start..end]);
    let _ = w.flush();
    // A cut transfer: the connection closes before Content-Length bytes were sent.
}

/// Every file under `dir` (relative paths), hidden ones included.
fn files_under(dir: &Path) -> Vec<String> {
    fn walk(base: &Path, d: &Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(base, &p, out);
            } else {
                out.push(p.strip_prefix(base).unwrap().display().to_string());
            }
        }
    }
    let mut out = Vec::new();
    if dir.is_dir() {
        walk(dir, dir, &mut out);
    }
    out.sort();
    out
}

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The registry names exactly the files of ../shared/data (its README aside), with their sizes.
#[test]
fn the_registry_lists_the_shared_files() {
    let data = common::data();
    let mut listed: Vec<String> =
        registry::SETS.iter().flat_map(|s| s.files.iter().map(|f| f.path.to_string())).collect();
    listed.sort();
    let shared: Vec<String> = files_under(&data).into_iter().filter(|p| p != "README.md").collect();
    assert_eq!(listed, shared);
    for f in registry::SETS.iter().flat_map(|s| s.files.iter()) {
        assert_eq!(std::fs::metadata(data.join(f.path)).unwrap().len(), f.size, "{}", f.path);
    }
}

/// `fetch all` gives the files of ../shared/data byte for byte (the archives' and the gunzipped
/// ones too); `list` then shows every set present, and a second fetch downloads nothing.
#[test]
fn a_full_fetch_equals_the_shared_files() {
    let m = Mirror::new();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let o = m.fetch(&dir, &["all"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let data = common::data();
    let got = files_under(&dir);
    let want: Vec<String> = files_under(&data).into_iter().filter(|p| p != "README.md").collect();
    assert_eq!(got, want, "no .part file or archive is left behind");
    for p in &got {
        assert!(std::fs::read(dir.join(p)).unwrap() == std::fs::read(data.join(p)).unwrap(), "{p} differs");
    }
    assert!(m.log().iter().any(|(p, _)| p.ends_with("Sts2017.gs.zip")));

    let list = common::xsent().args(["data", "list"]).env("XSENT_DATA", &dir).output().unwrap();
    let table = String::from_utf8_lossy(&list.stdout);
    assert!(list.status.success(), "{}", stderr(&list));
    for s in registry::SETS {
        let row = table
            .lines()
            .find(|l| l.starts_with(&format!("{} ", s.name)))
            .unwrap_or_else(|| panic!("no row {}: {table}", s.name));
        assert!(row.contains("present"), "{row}");
    }

    let again = m.fetch(&dir, &["tatoeba", "sts17"]);
    assert!(again.status.success(), "{}", stderr(&again));
    assert!(stderr(&again).contains("all 181 files in place"), "{}", stderr(&again));
    assert!(m.log().is_empty(), "files in place are not downloaded again");

    // An empty data directory: list says missing.
    let list = common::xsent().args(["data", "list"]).env("XSENT_DATA", tmp.path().join("none")).output().unwrap();
    assert!(String::from_utf8_lossy(&list.stdout).lines().any(|l| l.starts_with("bucc ") && l.contains("missing")));
    // --data-dir: a folder not there yet is where a fetch with the same flag downloads; a file is
    // an error (an outside probe: the hint named XSENT_DATA's folder; a file was "not there yet").
    let none = tmp.path().join("none");
    let list = common::xsent().args(["data", "list", "--data-dir"]).arg(&none).output().unwrap();
    assert!(list.status.success(), "{}", stderr(&list));
    assert!(String::from_utf8_lossy(&list.stdout)
        .contains(&format!("{} (--data-dir; it does not exist yet)", none.display())));
    let hint = format!("`xsent data fetch SET --data-dir {}` (or all) downloads into it", none.display());
    assert!(stderr(&list).contains(&hint), "{}", stderr(&list));
    let file = tmp.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    let list = common::xsent().args(["data", "list", "--data-dir"]).arg(&file).output().unwrap();
    assert_eq!(list.status.code(), Some(1), "{}", stderr(&list));
    assert!(
        stderr(&list).contains(&format!("the data directory {} (--data-dir) is a file: give a folder", file.display()))
    );
}

/// A transfer cut midway resumes with a Range request, within the run and in a later run
/// (from the .part file a killed run left).
#[test]
fn an_interrupted_transfer_resumes() {
    let m = Mirror::new();
    let tmp = tempfile::tempdir().unwrap();
    let en = Mirror::source_of("bucc/zh-en.dev.en");
    let zh = Mirror::source_of("bucc/zh-en.dev.zh");
    m.state.lock().unwrap().cut.insert(en.clone(), 700_000);
    // A run killed while fetching zh-en.dev.zh left its first 12,345 bytes.
    let data = common::data();
    std::fs::create_dir_all(tmp.path().join("bucc")).unwrap();
    let zh_bytes = std::fs::read(data.join("bucc/zh-en.dev.zh")).unwrap();
    std::fs::write(tmp.path().join("bucc/.zh-en.dev.zh.part"), &zh_bytes[..12_345]).unwrap();

    let o = m.fetch(tmp.path(), &["bucc"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("resuming"), "{}", stderr(&o));
    let log = m.log();
    let ranges = |p: &str| log.iter().filter(|(q, _)| q == p).map(|(_, r)| r.clone()).collect::<Vec<_>>();
    assert_eq!(ranges(&en), vec![None, Some("bytes=700000-".to_string())]);
    assert_eq!(ranges(&zh), vec![Some("bytes=12345-".to_string())]);
    for p in ["bucc/zh-en.dev.en", "bucc/zh-en.dev.zh", "bucc/zh-en.dev.gold"] {
        assert!(std::fs::read(tmp.path().join(p)).unwrap() == std::fs::read(data.join(p)).unwrap(), "{p} differs");
    }
    assert_eq!(files_under(tmp.path()), ["bucc/zh-en.dev.en", "bucc/zh-en.dev.gold", "bucc/zh-en.dev.zh"]);
}

/// A file whose checksum is wrong is an error that names it, and nothing of it is kept (the
/// other files are); a file already in place that is not the pinned one is left alone.
#[test]
fn a_wrong_checksum_keeps_nothing_bad() {
    let m = Mirror::new();
    let tmp = tempfile::tempdir().unwrap();
    let src = Mirror::source_of("tatoeba/tatoeba.deu-eng.deu");
    {
        let mut s = m.state.lock().unwrap();
        let body = s.files.get_mut(&src).unwrap();
        body[100] ^= 1;
    }
    let o = m.fetch(tmp.path(), &["tatoeba"]);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(e.contains("tatoeba/tatoeba.deu-eng.deu") && e.contains("sha256") && e.contains("deleted"), "{e}");
    let files = files_under(tmp.path());
    assert!(!files.iter().any(|p| p.contains("deu-eng.deu")), "{files:?}");
    assert!(files.contains(&"tatoeba/tatoeba.ang-eng.ang".to_string()), "{files:?}");

    // A file of one's own in the way: named, kept as it is.
    let own = tmp.path().join("bucc/zh-en.dev.gold");
    std::fs::create_dir_all(own.parent().unwrap()).unwrap();
    std::fs::write(&own, "mine\n").unwrap();
    let o = m.fetch(tmp.path(), &["bucc"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("is not the pinned file"), "{}", stderr(&o));
    assert_eq!(std::fs::read_to_string(&own).unwrap(), "mine\n");
}

/// A file the source does not have (404) is an error naming the URL, and the run stops there
/// with no partial file.
#[test]
fn a_missing_file_is_a_clear_error() {
    let m = Mirror::new();
    let tmp = tempfile::tempdir().unwrap();
    let src = Mirror::source_of("xnli/dev-de.tsv");
    m.state.lock().unwrap().files.remove(&src);
    let o = m.fetch(tmp.path(), &["xnli"]);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(e.contains("404") && e.contains(&format!("{}{src}", m.url)) && e.contains("XSENT_DATA_MIRROR"), "{e}");
    assert!(!files_under(tmp.path()).iter().any(|p| p.contains("dev-de")), "{:?}", files_under(tmp.path()));

    let o = m.fetch(tmp.path(), &["nosuchset"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("tatoeba, sts17, stsb, bucc, xnli, multi30k"), "{}", stderr(&o));
}

/// A fetch that fails before any byte arrives leaves no empty set folder behind, and a mirror that
/// is not an HTTP(S) URL is refused before anything is made.
#[test]
fn a_failed_fetch_leaves_no_empty_folders() {
    let m = Mirror::new();
    m.state.lock().unwrap().files.clear();
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let o = m.fetch(&data, &["tatoeba"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("404"), "{}", stderr(&o));
    assert!(
        !data.exists(),
        "{:?}",
        std::fs::read_dir(&data).map(|d| d.flatten().map(|e| e.path()).collect::<Vec<_>>())
    );
    // A folder that was there already stays.
    std::fs::create_dir_all(data.join("tatoeba")).unwrap();
    assert!(!m.fetch(&data, &["tatoeba"]).status.success());
    assert!(data.join("tatoeba").is_dir());
    let o = common::xsent()
        .args(["data", "fetch", "tatoeba"])
        .env("XSENT_DATA", tmp.path().join("other"))
        .env("XSENT_DATA_MIRROR", "ftp://127.0.0.1/raw")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("is not an http:// or https:// URL"), "{}", stderr(&o));
    assert!(!tmp.path().join("other").exists());
}

/// Without the data, an evaluator says how to fetch it.
#[test]
fn evaluators_name_the_fetch_command() {
    let tmp = tempfile::tempdir().unwrap();
    let o =
        common::xsent().args(["eval", "tatoeba", "--model", "unused"]).env("XSENT_DATA", tmp.path()).output().unwrap();
    assert!(!o.status.success());
    assert!(stderr(&o).contains("xsent data fetch tatoeba"), "{}", stderr(&o));
}

/// Decontamination reads exactly the registry's evaluation files that hold sentences, each with
/// the registry's split (the gold scores and alignments are the only ones it leaves).
#[test]
fn decontamination_reads_the_registry_evaluation_files() {
    use xsent::data::decontam::{standard_sets, Split as DSplit};
    let data = common::data();
    let mut read = std::collections::HashMap::new();
    for set in standard_sets(&data) {
        for (p, _) in &set.files {
            read.insert(p.strip_prefix(&data).unwrap().display().to_string(), set.split);
        }
    }
    for f in registry::SETS.iter().flat_map(|s| s.files.iter()) {
        let want = match f.split {
            registry::Split::Test => Some(DSplit::Test),
            registry::Split::Dev => Some(DSplit::Dev),
            _ => None,
        };
        match (read.remove(f.path), want) {
            (Some(got), Some(want)) => assert_eq!(got, want, "{}", f.path),
            (None, Some(_)) => assert!(
                f.path.ends_with(".gold") || f.path.contains("/STS.gs.") || f.path.ends_with(".txt.gz"),
                "{} is not checked",
                f.path
            ),
            (Some(_), None) => panic!("{} is read as evaluation data but is {:?} in the registry", f.path, f.split),
            (None, None) => {}
        }
    }
    assert!(read.is_empty(), "files not in the registry: {read:?}");
}

/// `data list` calls a set present only when its files have the pinned sha256, not only the
/// size (an outside probe: a file of the right size and other content was "present").
#[test]
fn data_list_checks_the_content() {
    let tmp = tempfile::tempdir().unwrap();
    let bucc = tmp.path().join("bucc");
    std::fs::create_dir(&bucc).unwrap();
    for f in ["zh-en.dev.zh", "zh-en.dev.en", "zh-en.dev.gold"] {
        std::fs::copy(common::data().join("bucc").join(f), bucc.join(f)).unwrap();
    }
    let state = || {
        let o = common::xsent().args(["data", "list", "--data-dir"]).arg(tmp.path()).output().unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        let out = String::from_utf8(o.stdout).unwrap();
        out.lines().find(|l| l.starts_with("bucc ")).unwrap().split_whitespace().nth(4).unwrap().to_string()
    };
    assert_eq!(state(), "present");
    let mut bytes = std::fs::read(bucc.join("zh-en.dev.gold")).unwrap();
    bytes[0] ^= 1;
    std::fs::write(bucc.join("zh-en.dev.gold"), bytes).unwrap();
    assert_eq!(state(), "2"); // "2 of 3"
}
