use super::synthetic::Clustered;
use super::*;

fn data(n: usize, side: u64) -> Vec<f32> {
    Clustered { dim: 24, centres: 40, noise: 1.0, seed: 3 }.points(side, n)
}

fn build(x: &[f32], d: usize, p: &BuildParams, threads: usize) -> Ivf {
    let mut src = SliceRows { data: x, dim: d };
    let q = Quantizer::train(&mut src, p, threads).unwrap();
    Ivf::build(q, &mut src, 0, vec![], threads).unwrap()
}

/// Exact top-k in f64, ties to the lower id.
fn brute(q: &[f32], x: &[f32], d: usize, k: usize) -> Vec<Vec<(f64, u64)>> {
    q.chunks_exact(d)
        .map(|qi| {
            let mut all: Vec<(f64, u64)> = x
                .chunks_exact(d)
                .enumerate()
                .map(|(j, xj)| (qi.iter().zip(xj).map(|(&a, &b)| a as f64 * b as f64).sum(), j as u64))
                .collect();
            all.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
            all.truncate(k);
            all
        })
        .collect()
}

/// Probing every list is an exact search: the same neighbours as brute force (a different id
/// only where two similarities tie within rounding).
#[test]
fn probing_every_list_is_exact() {
    let d = 24;
    let (x, q) = (data(700, 0), data(90, 1));
    let p = BuildParams { nlist: Some(13), ..Default::default() };
    let index = build(&x, d, &p, 2);
    let got = index.search(&q, 90, 5, 13, 2).unwrap();
    for (i, want) in brute(&q, &x, d, 5).iter().enumerate() {
        for (r, &(s, id)) in want.iter().enumerate() {
            let (gs, gi) = (got.sims[i * 5 + r] as f64, got.ids[i * 5 + r]);
            assert!((gs - s).abs() < 1e-5, "query {i} rank {r}: {gs} vs {s}");
            assert!(gi == id || (gs - s).abs() < 1e-6, "query {i} rank {r}: id {gi} vs {id}");
        }
    }
    // k above the vectors: the rest is empty.
    let few = build(&x[..40 * d], d, &BuildParams { nlist: Some(3), ..Default::default() }, 1);
    let all = few.search(&q[..d], 1, 50, 3, 1).unwrap();
    assert_eq!(all.ids.iter().filter(|&&i| i != u64::MAX).count(), 40);
    assert!(all.sims[40..].iter().all(|s| *s == f32::NEG_INFINITY));
}

/// The lists do not depend on the thread count, and an index of shards with one quantizer
/// finds what the whole index finds, at any nprobe; indexes with their own quantizers agree
/// with it when every list is probed.
#[test]
fn sharded_search_equals_unsharded_search() {
    let d = 24;
    let (x, q) = (data(1000, 0), data(300, 1));
    let p = BuildParams { nlist: Some(20), seed: 5, ..Default::default() };
    let mut src = SliceRows { data: &x, dim: d };
    let quant = Quantizer::train(&mut src, &p, 2).unwrap();
    let whole = Ivf::build(quant.clone(), &mut src, 0, vec![], 2).unwrap();
    for nprobe in [1, 3, 20] {
        let want = whole.search(&q, 300, 4, nprobe, 2).unwrap();
        assert_eq!(whole.search(&q, 300, 4, nprobe, 1).unwrap(), want, "1 thread vs 2, nprobe {nprobe}");
        let cuts = [0usize, 333, 334, 700, 1000];
        let shards: Vec<Ivf> = cuts
            .windows(2)
            .map(|w| {
                Ivf::build(
                    quant.clone(),
                    &mut SliceRows { data: &x[w[0] * d..w[1] * d], dim: d },
                    w[0] as u64,
                    vec![],
                    2,
                )
                .unwrap()
            })
            .collect();
        let got =
            search_all(shards.len(), |i| Ok(&shards[i]), &mut SliceRows { data: &q, dim: d }, 4, nprobe, 2).unwrap();
        assert_eq!(got, want, "one quantizer, nprobe {nprobe}");
        if nprobe == 20 {
            let own: Vec<Ivf> = cuts
                .windows(2)
                .map(|w| {
                    let mut s = SliceRows { data: &x[w[0] * d..w[1] * d], dim: d };
                    let qz =
                        Quantizer::train(&mut s, &BuildParams { nlist: Some(7.min(w[1] - w[0])), ..p }, 2).unwrap();
                    Ivf::build(qz, &mut s, w[0] as u64, vec![], 2).unwrap()
                })
                .collect();
            let got = search_all(own.len(), |i| Ok(&own[i]), &mut SliceRows { data: &q, dim: d }, 4, 7, 2).unwrap();
            assert_eq!(got, want, "own quantizers, every list probed");
        }
    }
}

fn recall(got: &Knn, want: &[Vec<(f64, u64)>], k: usize) -> f64 {
    let mut hit = 0;
    for (i, w) in want.iter().enumerate() {
        hit += w.iter().filter(|(_, id)| got.ids[i * k..(i + 1) * k].contains(id)).count();
    }
    hit as f64 / (want.len() * k) as f64
}

/// On clustered data a few lists find nearly all neighbours, and int8 codes lose little.
#[test]
fn few_probes_find_most_neighbours_in_f32_and_int8() {
    let d = 24;
    let (x, q) = (data(4000, 0), data(400, 1));
    let want = brute(&q, &x, d, 4);
    let mut last = 0.0;
    for codec in [Codec::F32, Codec::Int8] {
        let index = build(&x, d, &BuildParams { codec, ..Default::default() }, 2);
        assert_eq!(index.meta.nlist, 253, "4 √4000");
        let r = recall(&index.search(&q, 400, 4, 16, 2).unwrap(), &want, 4);
        assert!(r > 0.9, "{codec:?}: recall@4 {r}");
        last = r;
        let exhaustive = recall(&index.search(&q, 400, 4, 253, 2).unwrap(), &want, 4);
        match codec {
            Codec::F32 => assert_eq!(exhaustive, 1.0),
            Codec::Int8 => assert!(exhaustive > 0.95, "int8 exhaustive recall {exhaustive}"),
        }
    }
    assert!(last > 0.0);
}

#[test]
fn files_round_trip_and_damage_is_an_error() {
    let d = 24;
    let x = data(500, 0);
    let dir = tempfile::tempdir().unwrap();
    for codec in [Codec::F32, Codec::Int8] {
        let index = build(&x, d, &BuildParams { nlist: Some(9), codec, ..Default::default() }, 2);
        let path = dir.path().join(format!("{codec:?}.ivf"));
        let mut f = std::fs::File::create(&path).unwrap();
        index.write(&mut f).unwrap();
        drop(f);
        let header = std::fs::metadata(&path).unwrap().len() - index.bytes();
        assert!(header.is_multiple_of(64) && header < 2048, "{codec:?}: a header of {header} bytes");
        let back = Ivf::read(&path).unwrap();
        let q = data(50, 1);
        assert_eq!(back.search(&q, 50, 3, 4, 1).unwrap(), index.search(&q, 50, 3, 4, 1).unwrap());
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() - 1]).unwrap();
        let e = format!("{:#}", Ivf::read(&path).unwrap_err());
        assert!(e.contains("is not an xsent index, or is damaged") && e.contains("needs"), "{e}");
        let mut bad = bytes.clone();
        let at = bytes.len() - 500 * 8 - 500 * if codec == Codec::F32 { 4 * d } else { d } - 10 * 8 - 8;
        bad[at] ^= 0x40;
        std::fs::write(&path, &bad).unwrap();
        assert!(Ivf::read(&path).is_err(), "{codec:?}: damaged centroids or codec accepted");
    }
}

#[test]
fn bad_settings_are_clear_errors() {
    let d = 24;
    let x = data(10, 0);
    let mut src = SliceRows { data: &x, dim: d };
    let e =
        Quantizer::train(&mut src, &BuildParams { nlist: Some(11), ..Default::default() }, 1).unwrap_err().to_string();
    assert!(e.contains("--nlist 11 is more than the 10 vectors"), "{e}");
    let e = Quantizer::train(&mut src, &BuildParams { nlist: Some(2), sample: Some(0), ..Default::default() }, 1)
        .unwrap_err()
        .to_string();
    assert!(e.contains("must be at least 1 vector"), "{e}");
    let mut nan = x.clone();
    nan[5] = f32::NAN;
    let e =
        Quantizer::train(&mut SliceRows { data: &nan, dim: d }, &BuildParams::default(), 1).unwrap_err().to_string();
    assert!(e.contains("NaN"), "{e}");
}

/// A NaN query is an error, not a probe outside the lists (a search panicked on one): through
/// [`Ivf::search`] and [`search_all`], which names the query.
#[test]
fn nan_queries_are_errors() {
    let d = 24;
    let index = build(&data(300, 0), d, &BuildParams::default(), 2);
    let mut q = data(20, 1);
    q[7 * d + 3] = f32::NAN;
    let e = index.search(&q, 20, 4, 4, 2).unwrap_err().to_string();
    assert!(e.contains("NaN or infinite"), "{e}");
    let e = search_all(1, |_| Ok(&index), &mut SliceRows { data: &q, dim: d }, 4, 4, 2).unwrap_err().to_string();
    assert!(e.contains("query 7 (counting from 0) holds NaN"), "{e}");
}
