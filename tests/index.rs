//! `xsent index build|search` and `xsent mine --index / --src-knn`: sharded indexes find what one
//! index finds, and mining from index neighbours agrees with the exact mine.

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;

fn ok(out: &Output) -> String {
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "xsent failed: {err}");
    err
}

fn fail(out: &Output) -> String {
    assert!(!out.status.success(), "xsent succeeded where it should fail");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn xsent(args: &[&str]) -> Output {
    common::xsent().args(args).output().expect("xsent runs")
}

/// Rows as a float32 .npy file.
fn write_npy(path: &Path, rows: &[f32], dim: usize) {
    let n = rows.len() / dim;
    let mut h = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': ({n}, {dim}), }}").into_bytes();
    h.resize((10 + h.len() + 1).next_multiple_of(64) - 11, b' ');
    h.push(b'\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(h.len() as u16).to_le_bytes());
    out.extend_from_slice(&h);
    out.extend(rows.iter().flat_map(|x| x.to_le_bytes()));
    std::fs::write(path, out).unwrap();
}

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// Shards of a collection indexed with one quantizer and searched together give the same file
/// as one index of the whole collection, at a small nprobe; the raw .f32 form reads the same.
#[test]
fn sharded_indexes_find_what_one_index_finds() {
    let tmp = tempfile::tempdir().unwrap();
    let d = 32;
    let g = xsent::index::synthetic::Clustered { dim: d, centres: 50, noise: 0.8, seed: 1 };
    let (db, q) = (g.points(0, 3000), g.points(1, 500));
    let all = tmp.path().join("db.npy");
    write_npy(&all, &db, d);
    let cuts = [0usize, 1000, 1001, 3000];
    let mut shards: Vec<PathBuf> = Vec::new();
    for (i, w) in cuts.windows(2).enumerate() {
        let s = tmp.path().join(format!("db-{i}.npy"));
        write_npy(&s, &db[w[0] * d..w[1] * d], d);
        shards.push(s);
    }
    let queries = tmp.path().join("q.f32");
    std::fs::write(&queries, q.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>()).unwrap();

    let whole = tmp.path().join("whole.ivf");
    ok(&xsent(&["index", "build", "--vectors", p(&all), "-o", p(&whole), "--nlist", "40", "--seed", "3"]));
    // The quantizer from the shards' files read as one: the same sample rows, the same centroids.
    let quant = tmp.path().join("q.ivf");
    let mut args = vec!["index", "build", "--train-only", "--nlist", "40", "--seed", "3", "-o", p(&quant), "--vectors"];
    args.extend(shards.iter().map(|s| p(s)));
    ok(&xsent(&args));
    let mut parts = Vec::new();
    for (i, s) in shards.iter().enumerate() {
        let out = tmp.path().join(format!("part-{i}.ivf"));
        let offset = cuts[i].to_string();
        ok(&xsent(&[
            "index",
            "build",
            "--vectors",
            p(s),
            "--quantizer",
            p(&quant),
            "--id-offset",
            &offset,
            "-o",
            p(&out),
        ]));
        parts.push(out);
    }
    for nprobe in ["2", "40"] {
        let one = tmp.path().join(format!("one-{nprobe}.npy"));
        let err = ok(&xsent(&[
            "index",
            "search",
            "--index",
            p(&whole),
            "--queries",
            p(&queries),
            "--dim",
            "32",
            "-k",
            "5",
            "--nprobe",
            nprobe,
            "-o",
            p(&one),
        ]));
        assert!(err.contains("500 queries searched"), "{err}");
        let many = tmp.path().join(format!("many-{nprobe}.npy"));
        let mut args = vec![
            "index",
            "search",
            "--queries",
            p(&queries),
            "--dim",
            "32",
            "-k",
            "5",
            "--nprobe",
            nprobe,
            "-o",
            p(&many),
            "--index",
        ];
        args.extend(parts.iter().map(|s| p(s)));
        ok(&xsent(&args));
        let (a, b) = (std::fs::read(&one).unwrap(), std::fs::read(&many).unwrap());
        assert!(a == b, "nprobe {nprobe}: the shards' merged lists differ from one index's");
        assert_eq!(a.len(), 128 + 500 * 5 * 12, "a (500, 5) array of 12-byte records");
    }
    // numpy reads the lists (when a python with numpy is at hand).
    if let Ok(python) = std::env::var("XSENT_PYTHON") {
        let check = std::process::Command::new(python)
            .args(["-c", "import sys, numpy as np; a = np.load(sys.argv[1]); assert a.shape == (500, 5) and a['id'].max() < 3000 and (np.diff(a['sim'], axis=1) <= 0).all()"])
            .arg(tmp.path().join("one-2.npy"))
            .output()
            .unwrap();
        assert!(check.status.success(), "{}", String::from_utf8_lossy(&check.stderr));
    }
}

#[test]
fn index_errors_are_clear() {
    let tmp = tempfile::tempdir().unwrap();
    let v = tmp.path().join("v.f32");
    std::fs::write(&v, vec![0u8; 4 * 10]).unwrap();
    let out = tmp.path().join("i.ivf");
    let e = fail(&xsent(&["index", "build", "--vectors", p(&v), "-o", p(&out)]));
    assert!(e.contains("give --dim"), "{e}");
    let e = fail(&xsent(&["index", "build", "--vectors", p(&v), "--dim", "3", "-o", p(&out)]));
    assert!(e.contains("40 bytes are not whole rows of 3"), "{e}");
    let e = fail(&xsent(&["index", "build", "--vectors", p(&v), "--dim", "5", "--nlist", "3", "-o", p(&out)]));
    assert!(e.contains("--nlist 3 is more than the 2 vectors"), "{e}");
    let j = tmp.path().join("v.jsonl");
    std::fs::write(&j, "[1.0]\n").unwrap();
    let e = fail(&xsent(&["index", "build", "--vectors", p(&j), "-o", p(&out)]));
    assert!(e.contains("--format f32 or --format npy"), "{e}");
    let e = fail(&xsent(&["index", "search", "--index", p(&v), "--queries", p(&v), "--dim", "5", "-o", p(&out)]));
    assert!(e.contains("is not an xsent index"), "{e}");
    // Gzipped vectors: named as such (before: "give --dim", or their compressed bytes as rows).
    let gz = tmp.path().join("v.npy.gz");
    std::fs::write(&gz, [0x1f, 0x8b, 8, 0]).unwrap();
    let e = fail(&xsent(&["index", "build", "--vectors", p(&gz), "-o", p(&out)]));
    assert!(e.contains("v.npy.gz: vector files are read uncompressed") && e.contains("gunzip -k"), "{e}");
    // A NaN or an infinity: the file, the row and the value's place are named, whether the row
    // falls in the quantizer's sample or only in the build's pass over all rows.
    let mut rows: Vec<f32> = (0..40 * 4).map(|i| (i % 7) as f32).collect();
    rows[3 * 4 + 2] = f32::NAN;
    let bad = tmp.path().join("bad.npy");
    write_npy(&bad, &rows, 4);
    let e = fail(&xsent(&["index", "build", "--vectors", p(&bad), "-o", p(&out)]));
    assert!(e.contains("bad.npy: row 3 (counting from 0) holds NaN, at value 2"), "{e}");
    rows[3 * 4 + 2] = 1.0;
    rows[39 * 4] = f32::INFINITY;
    write_npy(&bad, &rows, 4);
    let e = fail(&xsent(&["index", "build", "--vectors", p(&bad), "--sample", "8", "--nlist", "2", "-o", p(&out)]));
    assert!(e.contains("bad.npy: row 39 (counting from 0) holds inf, at value 0"), "{e}");
    assert!(!out.exists());
    // NaN queries (a search panicked on them, out of the lists' range): an error naming them.
    rows[39 * 4] = 1.0;
    let good = tmp.path().join("good.npy");
    write_npy(&good, &rows, 4);
    ok(&xsent(&["index", "build", "--vectors", p(&good), "--nlist", "2", "-o", p(&out)]));
    rows[5 * 4 + 1] = f32::NAN;
    write_npy(&bad, &rows, 4);
    let knn = tmp.path().join("knn.npy");
    let e = fail(&xsent(&["index", "search", "--index", p(&out), "--queries", p(&bad), "-o", p(&knn)]));
    assert!(e.contains("bad.npy: row 5 (counting from 0) holds NaN, at value 1"), "{e}");
    assert!(!knn.exists());
    // One index twice (or shards without their --id-offset): overlapping ids are refused.
    let e = fail(&xsent(&["index", "search", "--index", p(&out), p(&out), "--queries", p(&good), "-o", p(&knn)]));
    assert!(e.contains("the shards' ids overlap") && e.contains("ids 0..40"), "{e}");
    // A k beyond the vectors there are (a huge one overflowed the top-k lists' allocation):
    // each query gets every vector.
    let e = ok(&xsent(&[
        "index",
        "search",
        "--index",
        p(&out),
        "--queries",
        p(&good),
        "-k",
        "18446744073709551615",
        "-o",
        p(&knn),
    ]));
    assert!(e.contains("is more than the 40 vectors of the index: each query gets at most 40"), "{e}");
    let raw = std::fs::read(&knn).unwrap();
    assert!(
        String::from_utf8_lossy(&raw[..128]).contains("'shape': (40, 40)"),
        "{}",
        String::from_utf8_lossy(&raw[..128])
    );
    // A --dim whose row size overflows.
    let e = fail(&xsent(&["index", "build", "--vectors", p(&v), "--dim", "4611686018427387904", "-o", p(&out)]));
    assert!(e.contains("--dim 4611686018427387904 is too large"), "{e}");
}

/// `path`'s index header edited by `edit` (its JSON as text), the lists after it kept.
fn edit_index_header(path: &Path, to: &Path, edit: impl Fn(String) -> String) {
    let raw = std::fs::read(path).unwrap();
    let len = u64::from_le_bytes(raw[8..16].try_into().unwrap()) as usize;
    let body = &raw[(16 + len).next_multiple_of(64)..];
    let json = edit(String::from_utf8(raw[16..16 + len].to_vec()).unwrap());
    let mut out = raw[..8].to_vec();
    out.extend_from_slice(&(json.len() as u64).to_le_bytes());
    out.extend_from_slice(json.as_bytes());
    out.resize(out.len().next_multiple_of(64), 0);
    out.extend_from_slice(body);
    std::fs::write(to, out).unwrap();
}

/// Headers whose sizes overflow, or say 0 lists or 0 values, and vectors whose inner products
/// would overflow float32: errors, where they panicked (capacity overflow, index out of range)
/// or gave neighbours at similarity inf.
#[test]
fn damaged_headers_and_huge_vectors_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let rows: Vec<f32> = (0..40 * 4).map(|i| ((i * 7) % 11) as f32 - 5.0).collect();
    let good = tmp.path().join("good.npy");
    write_npy(&good, &rows, 4);
    let ivf = tmp.path().join("good.ivf");
    ok(&xsent(&["index", "build", "--vectors", p(&good), "--nlist", "2", "-o", p(&ivf)]));
    let out = tmp.path().join("o.ivf");
    let knn = tmp.path().join("knn.npy");
    let nlist0 = tmp.path().join("nlist0.ivf");
    edit_index_header(&ivf, &nlist0, |j| j.replace("\"nlist\":2", "\"nlist\":0"));
    let e = fail(&xsent(&["index", "build", "--vectors", p(&good), "--quantizer", p(&nlist0), "-o", p(&out)]));
    assert!(e.contains("nlist0.ivf is not an xsent index") && e.contains("4 dimensions and 0 lists"), "{e}");
    // dim × 4 wraps to a size the file could have.
    let huge = tmp.path().join("huge.ivf");
    edit_index_header(&ivf, &huge, |j| j.replace("\"dim\":4", "\"dim\":4611686018427387905"));
    let e = fail(&xsent(&["index", "search", "--index", p(&huge), "--queries", p(&good), "-o", p(&knn)]));
    assert!(e.contains("huge.ivf is not an xsent index") && e.contains("needs more than 2^64"), "{e}");
    // A .npy of rows of no values.
    let empty_rows = tmp.path().join("dim0.npy");
    write_npy(&empty_rows, &[], 1);
    let mut raw = std::fs::read(&empty_rows).unwrap();
    let at = raw.windows(6).position(|w| w == b"(0, 1)").unwrap();
    raw[at..at + 6].copy_from_slice(b"(3, 0)");
    std::fs::write(&empty_rows, raw).unwrap();
    let e = fail(&xsent(&["index", "build", "--vectors", p(&empty_rows), "-o", p(&out)]));
    assert!(e.contains("dim0.npy: its header says rows of 0 values"), "{e}");
    // Finite vectors whose squares overflow float32: named, in the build and as queries.
    let mut big = rows.clone();
    big[7 * 4 + 3] = 3e38;
    let bad = tmp.path().join("big.npy");
    write_npy(&bad, &big, 4);
    let e = fail(&xsent(&["index", "build", "--vectors", p(&bad), "--nlist", "2", "-o", p(&out)]));
    assert!(e.contains("big.npy: row 7 (counting from 0) has norm 3.000e38") && e.contains("at most 1e9"), "{e}");
    let e = fail(&xsent(&["index", "search", "--index", p(&ivf), "--queries", p(&bad), "-o", p(&knn)]));
    assert!(e.contains("big.npy: row 7 (counting from 0) has norm"), "{e}");
    assert!(!out.exists() && !knn.exists());
    // A neighbour file whose shape × 12 wraps to its body's length (0).
    let mut h =
        b"{'descr': [('id', '<u8'), ('sim', '<f4')], 'fortran_order': False, 'shape': (4611686018427387904, 1), }"
            .to_vec();
    h.resize((10 + h.len() + 1).next_multiple_of(64) - 11, b' ');
    h.push(b'\n');
    let mut lists = b"\x93NUMPY\x01\x00".to_vec();
    lists.extend_from_slice(&(h.len() as u16).to_le_bytes());
    lists.extend_from_slice(&h);
    let wrap = tmp.path().join("wrap.knn.npy");
    std::fs::write(&wrap, lists).unwrap();
    let (src, tgt) = (tmp.path().join("s.txt"), tmp.path().join("t.txt"));
    std::fs::write(&src, "a\nb\n").unwrap();
    std::fs::write(&tgt, "c\nd\n").unwrap();
    let e = fail(&xsent(&[
        "mine",
        "--src-file",
        p(&src),
        "--tgt-file",
        p(&tgt),
        "--src-knn",
        p(&wrap),
        "--tgt-knn",
        p(&wrap),
        "-o",
        p(&tmp.path().join("pairs.tsv")),
    ]));
    assert!(e.contains("0 bytes of lists where its header says 4611686018427387904 × 1"), "{e}");
}

/// Pairs of a mine from `xsent index search` lists (probing every list: exact neighbours) are
/// the exact mine's pairs, with the same scores to rounding; `mine --index` finds them too.
#[test]
fn mining_from_index_neighbours_agrees_with_the_exact_mine() {
    let tmp = tempfile::tempdir().unwrap();
    let text = {
        use std::io::Read;
        let mut s = String::new();
        flate2::read::GzDecoder::new(std::fs::File::open(common::data().join("parallel/xnli-en-de.txt.gz")).unwrap())
            .read_to_string(&mut s)
            .unwrap();
        s
    };
    let (mut en, mut de) = (Vec::new(), Vec::new());
    let (mut seen_en, mut seen_de) = (std::collections::HashSet::new(), std::collections::HashSet::new());
    for line in text.lines().take(400) {
        let Some((e, g)) = line.split_once('\t') else { continue };
        if seen_en.insert(e.to_string()) && en.len() < 120 {
            en.push(e.to_string());
        }
        if seen_de.insert(g.to_string()) && de.len() < 100 {
            de.push(g.to_string());
        }
    }
    let (src, tgt) = (tmp.path().join("de.txt"), tmp.path().join("en.txt"));
    std::fs::write(&src, de.join("\n") + "\n").unwrap();
    std::fs::write(&tgt, en.join("\n") + "\n").unwrap();
    let model = common::e5_small();
    let exact = tmp.path().join("exact.tsv");
    ok(&xsent(&["mine", "-m", &model, "--src-file", p(&src), "--tgt-file", p(&tgt), "-o", p(&exact)]));

    // The pipeline of scripts/ray: embed, index each side, search each in the other, mine.
    let mut knn = Vec::new();
    for (side, other) in [(&src, &tgt), (&tgt, &src)] {
        let (vq, vd) = (side.with_extension("npy"), other.with_extension("npy"));
        for (t, v) in [(side, &vq), (other, &vd)] {
            if !v.exists() {
                ok(&xsent(&["embed", "-m", &model, "-i", p(t), "--format", "npy", "-o", p(v)]));
            }
        }
        let index = other.with_extension("ivf");
        ok(&xsent(&["index", "build", "--vectors", p(&vd), "--nlist", "8", "-o", p(&index)]));
        let out = side.with_extension("knn.npy");
        ok(&xsent(&[
            "index",
            "search",
            "--index",
            p(&index),
            "--queries",
            p(&vq),
            "-k",
            "4",
            "--nprobe",
            "8",
            "-o",
            p(&out),
        ]));
        knn.push(out);
    }
    // `mine` from neighbour lists: the source file, the source side's list, more arguments.
    let mine_knn = |src: &Path, src_knn: &Path, more: &[&str]| {
        let args = [
            &["mine", "--src-file", p(src), "--tgt-file", p(&tgt)][..],
            &["--src-knn", p(src_knn), "--tgt-knn", p(&knn[1])],
            more,
        ];
        xsent(&args.concat())
    };
    let from_knn = tmp.path().join("knn.tsv");
    ok(&mine_knn(&src, &knn[0], &["-o", p(&from_knn)]));
    let approx = tmp.path().join("index.tsv");
    ok(&xsent(&[
        "mine",
        "-m",
        &model,
        "--src-file",
        p(&src),
        "--tgt-file",
        p(&tgt),
        "--index",
        "--nlist",
        "8",
        "--nprobe",
        "8",
        "-o",
        p(&approx),
    ]));
    let read = |f: &Path| -> Vec<(f64, String, String)> {
        let mut v: Vec<(f64, String, String)> = std::fs::read_to_string(f)
            .unwrap()
            .lines()
            .map(|l| {
                let mut c = l.split('\t');
                (c.next().unwrap().parse().unwrap(), c.next().unwrap().to_string(), c.next().unwrap().to_string())
            })
            .collect();
        v.sort_by(|a, b| (&a.1, &a.2).cmp(&(&b.1, &b.2)));
        v
    };
    let want = read(&exact);
    assert!(want.len() >= 90, "{} pairs", want.len());
    for got in [read(&from_knn), read(&approx)] {
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(&want) {
            assert_eq!((&g.1, &g.2), (&w.1, &w.2));
            assert!((g.0 - w.0).abs() < 1e-4, "{g:?} vs {w:?}");
        }
    }

    // Lines that are not distinct rows are refused, and lists of another length.
    let dup = tmp.path().join("dup.txt");
    std::fs::write(&dup, format!("{}\n{}\n", de[0], de[0])).unwrap();
    let e = fail(&mine_knn(&dup, &knn[0], &[]));
    assert!(e.contains("dup.txt:2 repeats line 1") && e.contains("awk"), "{e}");
    let short = tmp.path().join("short.txt");
    std::fs::write(&short, format!("{}\n", de[0])).unwrap();
    let e = fail(&mine_knn(&short, &knn[0], &[]));
    assert!(e.contains("--src-knn holds lists for 100 rows, but") && e.contains("has 1 lines"), "{e}");
    let e = fail(&mine_knn(&src, &knn[0], &["--k", "9"]));
    assert!(e.contains("fewer than --k 9"), "{e}");
    let gz = tmp.path().join("knn.npy.gz");
    std::fs::write(&gz, [0x1f, 0x8b, 8, 0]).unwrap();
    let e = fail(&mine_knn(&src, &gz, &[]));
    assert!(e.contains("knn.npy.gz: neighbour files are read uncompressed"), "{e}");
    // A list padded by a search whose probed lists held fewer vectors, and a NaN similarity:
    // each named by its row, not scored (nor reported as a row of the other side).
    let raw = std::fs::read(&knn[0]).unwrap();
    let hl = u16::from_le_bytes([raw[8], raw[9]]) as usize;
    let header = String::from_utf8_lossy(&raw[10..10 + hl]).to_string();
    let k: usize = header.split("(100, ").nth(1).unwrap().split(')').next().unwrap().trim().parse().unwrap();
    let at = |r: usize, j: usize| 10 + hl + (r * k + j) * 12;
    for (patch, want) in [
        ((u64::MAX, f32::NEG_INFINITY), "--src-knn: row 3 has 1 neighbours, fewer than --k 4"),
        ((0u64, f32::NAN), "--src-knn: row 3, neighbour 1 has similarity NaN"),
    ] {
        let mut bad = raw.clone();
        bad[at(3, 1)..at(3, 1) + 8].copy_from_slice(&patch.0.to_le_bytes());
        bad[at(3, 1) + 8..at(3, 1) + 12].copy_from_slice(&patch.1.to_le_bytes());
        let f = tmp.path().join("patched.knn.npy");
        std::fs::write(&f, bad).unwrap();
        let e = fail(&mine_knn(&src, &f, &[]));
        assert!(e.contains(want), "{e}");
    }
}
