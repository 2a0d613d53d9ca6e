//! Readers for the benchmark and corpus files. Every error names the file (and line).

pub mod bitext;
pub mod bucc;
pub mod decontam;
pub mod fetch;
pub mod provenance;
pub mod registry;
pub mod sts;
pub mod tatoeba;
pub mod xnli;

use anyhow::{bail, Result};
use std::path::{Path, PathBuf};

/// The data directory: `--data-dir`, else `XSENT_DATA`, else the default places
/// ([`crate::places::data_dir`]).
pub fn data_dir(arg: Option<&Path>) -> Result<PathBuf> {
    let (dir, from) = match arg {
        Some(p) => (p.to_path_buf(), "--data-dir"),
        None => crate::places::data_dir(),
    };
    if dir.is_file() {
        bail!(
            "data directory {} ({from}) is a file: give the folder that holds sts/, tatoeba/, bucc/ …",
            dir.display()
        );
    }
    if !dir.is_dir() {
        if arg.is_none() && std::env::var_os("XSENT_DATA").is_none_or(|v| v.is_empty()) {
            bail!(
                "no benchmark data: {} does not exist. Download the benchmarks with `xsent data fetch all` \
                 (or one set: `xsent data fetch tatoeba`; `xsent data list` shows them), \
                 or name a folder that holds them with --data-dir DIR or XSENT_DATA",
                dir.display()
            );
        }
        bail!(
            "data directory {} ({from}) does not exist; `xsent data fetch all` downloads the benchmarks into it",
            dir.display()
        );
    }
    Ok(dir)
}

/// `dir/sub`, the folder of one benchmark in the data directory `dir`, or an error that says how
/// to fetch it (`set`, the name `xsent data fetch` takes).
pub fn set_dir(dir: &Path, sub: &str, set: &str) -> Result<PathBuf> {
    let p = dir.join(sub);
    if !p.is_dir() {
        let what = if p.exists() { "is not a folder" } else { "does not exist" };
        bail!(
            "{} {what}: the data directory {} has no {set} data; download it with `xsent data fetch {set}`",
            p.display(),
            dir.display()
        );
    }
    Ok(p)
}

/// The distinct strings of `keys` in order of first appearance, and for each the positions in
/// `keys` where it occurs.
pub fn group_distinct<'a, I: IntoIterator<Item = &'a str>>(keys: I) -> (Vec<&'a str>, Vec<Vec<usize>>) {
    let mut first: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    let (mut distinct, mut at): (Vec<&str>, Vec<Vec<usize>>) = (Vec::new(), Vec::new());
    for (i, k) in keys.into_iter().enumerate() {
        let g = *first.entry(k).or_insert_with(|| {
            distinct.push(k);
            at.push(Vec::new());
            distinct.len() - 1
        });
        at[g].push(i);
    }
    (distinct, at)
}

/// Leave blank (empty or whitespace-only) lines out: the other lines, and how many were blank.
pub fn drop_blank(lines: Vec<String>) -> (Vec<String>, usize) {
    let n = lines.len();
    let kept: Vec<String> = lines.into_iter().filter(|l| !l.trim().is_empty()).collect();
    let blank = n - kept.len();
    (kept, blank)
}

/// Read a UTF-8 text file (gzip-compressed when its name ends in `.gz`) into lines (`\n` or
/// `\r\n`; a leading byte-order mark dropped), with errors that name the file.
pub fn read_lines(path: &Path) -> Result<Vec<String>> {
    let mut lines = Vec::new();
    each_line(path, usize::MAX, |_, line| {
        lines.push(line.unwrap_or_default().to_string());
        Ok(())
    })?;
    if lines.is_empty() {
        bail!("{} is empty", path.display());
    }
    Ok(lines)
}

/// Stream the lines of a UTF-8 text file (gzip-compressed when its name ends in `.gz`), as
/// [`read_lines`] splits them, never holding more than one line of at most `max_bytes` bytes:
/// `each(number, Some(line))` for each line (1-based numbers), `each(number, None)` for a line
/// longer than `max_bytes` (not read into memory). Errors name the file (and the line that is
/// not UTF-8, with a hint when a file not named `.gz` starts as gzip does).
pub fn each_line(path: &Path, max_bytes: usize, each: impl FnMut(usize, Option<&str>) -> Result<()>) -> Result<()> {
    let gz = path.extension().is_some_and(|e| e == "gz");
    let file = std::fs::File::open(path).map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
    let raw: Box<dyn std::io::Read> =
        if gz { Box::new(flate2::read::MultiGzDecoder::new(std::io::BufReader::new(file))) } else { Box::new(file) };
    lines_of(path, raw, gz, max_bytes, each)
}

/// The first two bytes of a gzip stream.
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// [`each_line`] over the bytes `raw` gives (decompressed already); `path` and `gz` are for
/// the messages.
fn lines_of(
    path: &Path,
    raw: impl std::io::Read,
    gz: bool,
    max_bytes: usize,
    mut each: impl FnMut(usize, Option<&str>) -> Result<()>,
) -> Result<()> {
    use std::io::BufRead;
    let mut r = std::io::BufReader::with_capacity(1 << 16, raw);
    let failed = |e: std::io::Error| {
        if gz {
            anyhow::anyhow!("{} is not valid gzip (or cannot be read): {e}", path.display())
        } else {
            anyhow::anyhow!("cannot read {}: {e}", path.display())
        }
    };
    // Two more bytes than `max_bytes` for `\r`s before the `\n`, and three for a first line's
    // byte-order mark.
    let keep = max_bytes.saturating_add(5);
    // A line too long to keep is still checked to be UTF-8, as it streams past: `carry` holds
    // an incomplete character at the end of what was checked (at most 3 bytes).
    struct Skipped {
        carry: Vec<u8>,
        valid: bool,
    }
    impl Skipped {
        fn check(&mut self, part: &[u8]) {
            let joined;
            let data: &[u8] = if self.carry.is_empty() {
                part
            } else {
                joined = [self.carry.as_slice(), part].concat();
                &joined
            };
            match std::str::from_utf8(data) {
                Ok(_) => self.carry.clear(),
                Err(e) if e.error_len().is_none() => self.carry = data[e.valid_up_to()..].to_vec(),
                Err(_) => self.valid = false,
            }
        }
    }
    let (mut line, mut skipped, mut number) = (Vec::new(), None::<Skipped>, 0usize);
    // The first two bytes, for a hint when a gzip file's name lacks `.gz`.
    let mut head: Vec<u8> = Vec::with_capacity(2);
    let not_utf8 = |head: &[u8], number: usize| {
        let hint = if !gz && head == GZIP_MAGIC {
            format!(
                "; it looks gzip-compressed (it starts with the bytes 1f 8b): name it {}.gz to have it read through gzip",
                path.display()
            )
        } else {
            String::new()
        };
        anyhow::anyhow!("{}: line {number} is not valid UTF-8{hint}", path.display())
    };
    // `newline`: the line ended with `\n`. As `read_lines`: `str::lines` takes `\n` or `\r\n`
    // off, then one `\r` more is taken off.
    let mut emit =
        |line: &mut Vec<u8>, skipped: &mut Option<Skipped>, head: &[u8], number: usize, newline: bool| -> Result<()> {
            let mut bytes: &[u8] = line;
            if number == 1 {
                bytes = bytes.strip_prefix("\u{feff}".as_bytes()).unwrap_or(bytes);
            }
            for _ in 0..if newline { 2 } else { 1 } {
                bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
            }
            let r = match skipped.take() {
                Some(s) if !s.valid || !s.carry.is_empty() => return Err(not_utf8(head, number)),
                Some(_) => each(number, None),
                None => match std::str::from_utf8(bytes) {
                    Err(_) => return Err(not_utf8(head, number)),
                    Ok(_) if bytes.len() > max_bytes => each(number, None),
                    Ok(t) => each(number, Some(t)),
                },
            };
            line.clear();
            r
        };
    loop {
        let chunk = r.fill_buf().map_err(failed)?;
        if head.len() < 2 {
            head.extend(chunk.iter().take(2 - head.len()));
        }
        if chunk.is_empty() {
            // A file of only a byte-order mark has no line.
            let only_bom = number == 0 && line == "\u{feff}".as_bytes();
            if (!line.is_empty() && !only_bom) || skipped.is_some() {
                number += 1;
                emit(&mut line, &mut skipped, &head, number, false)?;
            }
            return Ok(());
        }
        let (part, end) = match chunk.iter().position(|&b| b == b'\n') {
            Some(i) => (&chunk[..i], Some(i + 1)),
            None => (chunk, None),
        };
        match &mut skipped {
            Some(s) => s.check(part),
            None if line.len() + part.len() > keep => {
                let mut s = Skipped { carry: Vec::new(), valid: true };
                s.check(&line);
                s.check(part);
                skipped = Some(s);
                line.clear();
            }
            None => line.extend_from_slice(part),
        }
        let used = end.unwrap_or(chunk.len());
        r.consume(used);
        if end.is_some() {
            number += 1;
            emit(&mut line, &mut skipped, &head, number, true)?;
        }
    }
}

/// The lines (`\n` or `\r\n`; a leading byte-order mark dropped) of a file's bytes, which must be
/// UTF-8: an error names `path` and the first line that is not. Empty for no bytes.
pub fn text_lines(path: &Path, bytes: Vec<u8>) -> Result<Vec<String>> {
    let mut lines = Vec::new();
    lines_of(path, &bytes[..], false, usize::MAX, |_, line| {
        lines.push(line.unwrap_or_default().to_string());
        Ok(())
    })?;
    Ok(lines)
}

/// Fail unless `path` is a file: "`what` file PATH is missing; `expected`" (or "is not a
/// file" when something else is there), so a reader's error says which names it looks for.
pub fn require_file(path: &Path, what: &str, expected: &str) -> Result<()> {
    if path.is_file() {
        return Ok(());
    }
    let problem = if path.exists() { "is not a file" } else { "is missing" };
    bail!("{what} file {} {problem}; {expected}", path.display())
}

/// `path` if it is a file, else `path.gz` if that is one: a benchmark file may be kept
/// gzip-compressed under its name plus `.gz`.
pub fn plain_or_gz(path: &Path) -> Option<std::path::PathBuf> {
    if path.is_file() {
        return Some(path.to_path_buf());
    }
    let mut gz = path.as_os_str().to_owned();
    gz.push(".gz");
    Some(std::path::PathBuf::from(gz)).filter(|p| p.is_file())
}

/// The benchmark file `path`, or `path.gz` ([`plain_or_gz`]); an error as [`require_file`]'s,
/// naming the plain name, when neither is a file.
pub fn require_plain_or_gz(path: &Path, what: &str, expected: &str) -> Result<std::path::PathBuf> {
    match plain_or_gz(path) {
        Some(p) => Ok(p),
        None => require_file(path, what, expected).map(|()| path.to_path_buf()),
    }
}

#[cfg(test)]
mod tests {
    /// `each_line` splits as `read_lines` does (a BOM, `\r\n`, no final newline, blank lines),
    /// plain or gzip, and gives a line longer than the bound as `None`.
    #[test]
    fn each_line_splits_as_read_lines_and_bounds_lines() {
        let dir = tempfile::tempdir().unwrap();
        let long = "x".repeat(200_000);
        let text = format!("\u{feff}first\r\n\n  \n{long}\nfünf\r\n{}\ntwo\r\r\nlast\r", "y".repeat(10));
        let plain = dir.path().join("t.txt");
        std::fs::write(&plain, &text).unwrap();
        let gz = dir.path().join("t.txt.gz");
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut e, text.as_bytes()).unwrap();
        std::fs::write(&gz, e.finish().unwrap()).unwrap();
        // As `str::lines` splits (then one `\r` more off), after the byte-order mark.
        let y = "y".repeat(10);
        let whole: Vec<&str> = vec!["first", "", "  ", &long, "fünf", &y, "two", "last"];
        assert_eq!(super::read_lines(&plain).unwrap(), whole);
        assert_eq!(super::read_lines(&gz).unwrap(), whole);
        assert_eq!(super::text_lines(&plain, text.clone().into_bytes()).unwrap(), whole);
        for path in [&plain, &gz] {
            let mut got = Vec::new();
            super::each_line(path, 10, |n, l| {
                got.push((n, l.map(str::to_string)));
                Ok(())
            })
            .unwrap();
            let want: Vec<(usize, Option<String>)> =
                whole.iter().enumerate().map(|(i, l)| (i + 1, (l.len() <= 10).then(|| l.to_string()))).collect();
            assert_eq!(got, want, "{}", path.display());
            assert_eq!(got[4], (5, Some("fünf".to_string())));
        }
        std::fs::write(&plain, b"ok\n\xff\n").unwrap();
        let e = super::each_line(&plain, 10, |_, _| Ok(())).unwrap_err().to_string();
        assert!(e.contains("t.txt: line 2 is not valid UTF-8"), "{e}");
        // In a line too long to keep, too: a bad byte far in, and a character cut at the end.
        let mut bad = b"ok\n".to_vec();
        bad.extend(std::iter::repeat_n(b'x', 100_000));
        bad.push(0xff);
        bad.extend(std::iter::repeat_n(b'x', 100_000));
        bad.extend_from_slice(b"\nok\n");
        let mut cut = "ü".repeat(50_000).into_bytes();
        cut.push(0xc3);
        for (name, bytes) in [("bad", bad), ("cut", cut)] {
            std::fs::write(&plain, &bytes).unwrap();
            let e = super::each_line(&plain, 10, |_, _| Ok(())).unwrap_err().to_string();
            assert!(e.contains("is not valid UTF-8"), "{name}: {e}");
            assert!(super::read_lines(&plain).is_err(), "{name}");
        }
        // A file of only a byte-order mark is empty; an invalid byte in memory names its line.
        std::fs::write(&plain, "\u{feff}").unwrap();
        assert!(super::read_lines(&plain).unwrap_err().to_string().contains("is empty"));
        assert!(super::text_lines(&plain, b"\xef\xbb\xbf".to_vec()).unwrap().is_empty());
        let e = super::text_lines(&plain, b"a\nb\n\xff".to_vec()).unwrap_err().to_string();
        assert!(e.contains("t.txt: line 3 is not valid UTF-8"), "{e}");
        // Multi-byte characters across the reader's 64 KiB chunks are no error.
        std::fs::write(&plain, "ü".repeat(100_000) + "\nok").unwrap();
        let mut got = Vec::new();
        super::each_line(&plain, 10, |n, l| {
            got.push((n, l.map(str::to_string)));
            Ok(())
        })
        .unwrap();
        assert_eq!(got, [(1, None), (2, Some("ok".to_string()))]);
    }

    /// Gzip bytes under a name without `.gz` are not UTF-8; the error says they look
    /// gzip-compressed and how to have them read. Other bad bytes, or a `.gz` name, get no hint.
    #[test]
    fn gzip_bytes_without_a_gz_name_get_a_hint() {
        let dir = tempfile::tempdir().unwrap();
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut e, b"a\tb\nc\td\n").unwrap();
        let gz = e.finish().unwrap();
        assert_eq!(gz[..2], [0x1f, 0x8b]);
        let p = dir.path().join("pairs.tsv");
        std::fs::write(&p, &gz).unwrap();
        let e = super::read_lines(&p).unwrap_err().to_string();
        assert!(e.contains("pairs.tsv: line 1 is not valid UTF-8; it looks gzip-compressed"), "{e}");
        assert!(e.contains(&format!("name it {}.gz", p.display())), "{e}");
        // So does a first line too long to keep, and the bytes given in memory.
        let e = super::each_line(&p, 1, |_, _| Ok(())).unwrap_err().to_string();
        assert!(e.contains("looks gzip-compressed"), "{e}");
        let e = super::text_lines(&p, gz.clone()).unwrap_err().to_string();
        assert!(e.contains("looks gzip-compressed"), "{e}");
        // Named `.gz`, the same bytes read.
        let named = dir.path().join("pairs.tsv.gz");
        std::fs::write(&named, &gz).unwrap();
        assert_eq!(super::read_lines(&named).unwrap(), ["a\tb", "c\td"]);
        // Other bytes that are not UTF-8: no hint.
        std::fs::write(&p, b"\x1f\x8a\n").unwrap();
        let e = super::read_lines(&p).unwrap_err().to_string();
        assert!(e.ends_with("line 1 is not valid UTF-8"), "{e}");
        std::fs::write(&p, b"ok\n\x1f\x8b\n").unwrap();
        let e = super::read_lines(&p).unwrap_err().to_string();
        assert!(e.ends_with("line 2 is not valid UTF-8"), "{e}");
    }

    #[test]
    fn group_distinct_keeps_first_appearance_order_and_every_position() {
        let (distinct, at) = super::group_distinct(["a", "b", "a", "c", "b"]);
        assert_eq!(distinct, ["a", "b", "c"]);
        assert_eq!(at, [vec![0, 2], vec![1, 4], vec![3]]);
    }

    /// A benchmark folder that is a file is named as such, not as missing.
    #[test]
    fn a_set_folder_that_is_a_file_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let e = super::set_dir(dir.path(), "sts", "sts17").unwrap_err().to_string();
        assert!(e.contains("sts does not exist"), "{e}");
        std::fs::write(dir.path().join("sts"), "").unwrap();
        let e = super::set_dir(dir.path(), "sts", "sts17").unwrap_err().to_string();
        assert!(e.contains("sts is not a folder") && e.contains("xsent data fetch sts17"), "{e}");
    }

    /// A UTF-8 byte-order mark is dropped from the first line, and only there.
    #[test]
    fn a_byte_order_mark_is_not_part_of_the_first_line() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("bom.txt");
        std::fs::write(&p, "\u{feff}zh-1\tni hao\r\n\u{feff}x\n").unwrap();
        assert_eq!(super::read_lines(&p).unwrap(), ["zh-1\tni hao", "\u{feff}x"]);
    }

    /// Every benchmark reader takes a file kept as `NAME.gz` as it takes `NAME`: STS 2017 (input,
    /// gold, en-de), BUCC (both sides and the gold, which also names the split), Tatoeba, and
    /// decontamination's list of evaluation files.
    #[test]
    fn benchmark_files_may_be_kept_gzip_compressed() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let files = [
            ("sts/STS2017.eval.v1.1/STS.input.track5.en-en.txt", "a b\tc d\ne f\tg h\n"),
            ("sts/STS2017.gs/STS.gs.track5.en-en.txt", "4.5\n1\n"),
            ("sts/STS2017.en-de.txt", "a b\tein b\t3\n"),
            ("tatoeba/tatoeba.deu-eng.deu", "hallo\n"),
            ("tatoeba/tatoeba.deu-eng.eng", "hello\n"),
            ("bucc/zh-en.dev.zh", "zh-1\tni hao\n"),
            ("bucc/zh-en.dev.en", "en-1\thello\n"),
            ("bucc/zh-en.dev.gold", "zh-1\ten-1\n"),
        ];
        for (name, text) in files {
            let path = d.join(format!("{name}.gz"));
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            let mut gz =
                flate2::write::GzEncoder::new(std::fs::File::create(path).unwrap(), flate2::Compression::fast());
            gz.write_all(text.as_bytes()).unwrap();
            gz.finish().unwrap();
        }
        let sts = super::sts::read_sts2017(&d.join("sts"), &["en-en".into(), "en-de".into()]).unwrap();
        assert_eq!(sts.len(), 2);
        assert_eq!((sts[0].gold.clone(), sts[1].pairs[0].1.as_str()), (vec![4.5, 1.0], "ein b"));
        let bucc = d.join("bucc");
        assert_eq!(
            (super::bucc::pairs(&bucc).unwrap(), super::bucc::splits(&bucc, "zh-en").unwrap()),
            (vec!["zh-en".into()], vec!["dev".into()])
        );
        // Both forms present: the split is listed once, and the plain file is read.
        std::fs::write(bucc.join("zh-en.dev.gold"), "zh-1\ten-1\n").unwrap();
        assert_eq!(super::bucc::splits(&bucc, "zh-en").unwrap(), ["dev"]);
        let split = super::bucc::read(&bucc, "zh-en", "dev").unwrap();
        assert_eq!(
            (split.src, split.tgt, split.gold),
            (vec!["ni hao".to_string()], vec!["hello".to_string()], vec![(0, 0)])
        );
        assert_eq!(super::tatoeba::read(&d.join("tatoeba"), "deu").unwrap().eng, ["hello"]);
        let sets = super::decontam::standard_sets(d);
        let bucc_set = sets.iter().find(|s| s.name == "BUCC").expect("BUCC's .gz sides are evaluation files");
        assert_eq!(bucc_set.files.len(), 2, "{:?}", bucc_set.files);
        // A missing file is named by its plain name.
        std::fs::remove_file(bucc.join("zh-en.dev.en.gz")).unwrap();
        let e = super::bucc::read(&bucc, "zh-en", "dev").unwrap_err().to_string();
        assert!(e.contains("zh-en.dev.en is missing"), "{e}");
    }
}
