//! Which linear layers cost int8 its accuracy: on STS-B dev sentences (a development set, never
//! the test sets), the cosine of int8 vectors to f32 with every layer in int8, then with one
//! layer (or one kind of layer, in every transformer layer) left in f32.
//!
//! `cargo run --release --example int8_layers -- MODEL [N_SENTENCES] [PREFIX] [short]`
//! With `short`, the N shortest sentences of STS-B train and dev (int8's worst cases are short
//! sentences, where few tokens carry the mean); else the first N of dev.
//! Prints a table: configuration, min cosine, mean cosine, sentences below 0.99.
//!
//! `… MODEL N PREFIX short variants`: the smoothing schemes of docs/quantization.md's second
//! rule side by side (the first LayerNorm estimate; calibrated on 512 STS-B train sentences
//! outside the N, on all layers or on the two unsmoothed kinds; the data-free estimate; the
//! shipped built-in calibration), each with min, 10th lowest and mean cosine to f32 and the
//! STS-B dev Spearman difference to f32.
#![allow(clippy::disallowed_macros)]

use anyhow::Result;
use xsent::eval::metrics::{cosine, spearman};
use xsent::model::quant::calibrate;
use xsent::model::quant::Dtype;
use xsent::model::LoadOptions;
use xsent::SentenceEncoder;

const KINDS: [&str; 6] = ["query", "key", "value", "attn_out", "intermediate", "output"];

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let model = args.get(1).expect("usage: int8_layers MODEL [N] [PREFIX]");
    let n: usize = args.get(2).map(|s| s.parse().unwrap()).unwrap_or(500);
    let prefix = args.get(3).cloned().unwrap_or_default();
    let data = std::env::var("XSENT_DATA").unwrap_or_else(|_| "/work/shared/data".into());
    let short = args.get(4).is_some_and(|a| a == "short");
    let mut text = std::fs::read_to_string(format!("{data}/sts/stsbenchmark/sts-dev.csv"))?;
    if short {
        text += &std::fs::read_to_string(format!("{data}/sts/stsbenchmark/sts-train.csv"))?;
    }
    let mut seen = std::collections::HashSet::new();
    let mut texts: Vec<String> = text
        .lines()
        .flat_map(|l| l.split('\t').skip(5).take(2).map(String::from).collect::<Vec<_>>())
        .filter(|s| seen.insert(s.clone()))
        .collect();
    if short {
        texts.sort_by_key(|s| (s.len(), s.clone()));
    }
    texts.truncate(n);
    let opts = LoadOptions { prefix: Some(prefix), dtype: Some(Dtype::F32), ..Default::default() };
    let f32m = SentenceEncoder::load(model, &opts)?;
    let want = f32m.embed_unchecked(&texts, 64)?;
    let mut int8 = f32m.clone();
    int8.quantize_int8(&calibrate::builtin())?;
    let all: Vec<_> = int8.encoder.linears_mut().map(|l| l.reduced.clone()).collect();
    let layers = all.len() / 6;
    let score = |m: &SentenceEncoder| -> Result<(f64, f64, usize)> {
        let got = m.embed_unchecked(&texts, 64)?;
        let cos = cosines(&want, &got);
        let min = cos.iter().cloned().fold(f64::INFINITY, f64::min);
        Ok((min, cos.iter().sum::<f64>() / cos.len() as f64, cos.iter().filter(|&&c| c < 0.99).count()))
    };
    let run = |name: String, keep_f32: &dyn Fn(usize) -> bool| -> Result<()> {
        let mut m = int8.clone();
        for (i, l) in m.encoder.linears_mut().enumerate() {
            l.reduced = if keep_f32(i) { None } else { all[i].clone() };
        }
        let (min, mean, below) = score(&m)?;
        println!("{name}\t{min:.4}\t{mean:.4}\t{below}");
        Ok(())
    };
    if args.get(5).is_some_and(|a| a == "variants") {
        return variants(&f32m, &texts, &want, &data);
    }
    println!(
        "# {model}, {} STS-B {} sentences; configuration, min cosine to f32, mean, sentences < 0.99",
        texts.len(),
        if short { "train+dev shortest" } else { "dev" }
    );
    run("all int8".into(), &|_| false)?;
    for (k, kind) in KINDS.iter().enumerate() {
        run(format!("{kind} (every layer) in f32"), &|i| i % 6 == k)?;
    }
    for i in 0..layers * 6 {
        run(format!("layer {} {} in f32", i / 6, KINDS[i % 6]), &|j| j == i)?;
    }
    Ok(())
}

/// Cosine of each pair of vectors.
fn cosines(want: &[Vec<f32>], got: &[Vec<f32>]) -> Vec<f64> {
    want.iter().zip(got).map(|(a, b)| cosine(a, b)).collect()
}

/// Candidate (d): per output column of `x Wᵀ + b` fed by LayerNorm(γ, β): mean and spread.
fn mu_sigma(g: &[f32], b: &[f32], w: &candle_core::Tensor, bias: &candle_core::Tensor) -> Result<(Vec<f32>, Vec<f32>)> {
    let (n, k) = w.dims2()?;
    let w: Vec<f32> = w.flatten_all()?.to_vec1()?;
    let bias: Vec<f32> = bias.to_vec1()?;
    let mut mu = vec![0f32; n];
    let mut sd = vec![0f32; n];
    for c in 0..n {
        let row = &w[c * k..(c + 1) * k];
        mu[c] = bias[c] + row.iter().zip(b).map(|(x, y)| x * y).sum::<f32>();
        sd[c] = row.iter().zip(g).map(|(x, y)| (x * y).powi(2)).sum::<f32>().sqrt();
    }
    Ok((mu, sd))
}

fn variants(f32m: &SentenceEncoder, texts: &[String], want: &[Vec<f32>], data: &str) -> Result<()> {
    use xsent::model::quant::{QLinear, Reduced};
    // STS-B dev pairs (development set).
    let dev = std::fs::read_to_string(format!("{data}/sts/stsbenchmark/sts-dev.csv"))?;
    let mut gold = Vec::new();
    let (mut s1, mut s2) = (Vec::new(), Vec::new());
    for l in dev.lines() {
        let f: Vec<&str> = l.split('\t').collect();
        if f.len() < 7 {
            continue;
        }
        gold.push(f[4].parse::<f64>()?);
        s1.push(f[5].to_string());
        s2.push(f[6].to_string());
    }
    let sts = |m: &SentenceEncoder| -> Result<f64> {
        let a = m.embed_unchecked(&s1, 64)?;
        let b = m.embed_unchecked(&s2, 64)?;
        Ok(100.0 * spearman(&cosines(&a, &b), &gold))
    };
    let sts_f32 = sts(f32m)?;
    // Calibration: the first 512 STS-B train sentences not among the evaluation sentences.
    let train = std::fs::read_to_string(format!("{data}/sts/stsbenchmark/sts-train.csv"))?;
    let eval: std::collections::HashSet<&String> = texts.iter().collect();
    let mut seen = std::collections::HashSet::new();
    let calib: Vec<String> = train
        .lines()
        .flat_map(|l| l.split('\t').skip(5).take(2).map(String::from).collect::<Vec<_>>())
        .filter(|s| !eval.contains(s) && seen.insert(s.clone()))
        .take(512)
        .collect();
    let calib_max = f32m.calibration_maxima(&calib)?;
    let mut m0 = f32m.clone();
    let inputs = m0.encoder.linear_inputs()?;
    let lin: Vec<(candle_core::Tensor, candle_core::Tensor)> =
        m0.encoder.linears_mut().map(|l| (l.weight.clone(), l.bias.clone())).collect();
    let gelu = |v: f32| -> f32 { 0.5 * v * (1.0 + libm_erf(v / std::f32::consts::SQRT_2)) };
    // Data-free (d) ranges for the attention-output and FFN-output inputs.
    let mut free: Vec<Option<Vec<f32>>> = vec![None; lin.len()];
    for l in 0..lin.len() / 6 {
        let (g, b) = inputs[l * 6 + 2].clone().unwrap();
        let (mu, sd) = mu_sigma(&g, &b, &lin[l * 6 + 2].0, &lin[l * 6 + 2].1)?;
        free[l * 6 + 3] = Some(mu.iter().zip(&sd).map(|(m, s)| m.abs() + 3.0 * s).collect());
        let (g, b) = inputs[l * 6 + 4].clone().unwrap();
        let (mu, sd) = mu_sigma(&g, &b, &lin[l * 6 + 4].0, &lin[l * 6 + 4].1)?;
        free[l * 6 + 5] = Some(mu.iter().zip(&sd).map(|(m, s)| gelu(m + 3.0 * s).max(0.17)).collect());
    }
    // `asym`: which layers quantise their activations asymmetrically (the third rule).
    let build = |pick: &dyn Fn(usize) -> Option<Vec<f32>>, asym: &dyn Fn(usize) -> bool| -> Result<SentenceEncoder> {
        let mut m = f32m.clone();
        for (i, l) in m.encoder.linears_mut().enumerate() {
            let s = pick(i);
            let mut q = QLinear::from_f32(&l.weight, &l.bias, s.as_deref())?;
            q.set_asymmetric(asym(i));
            l.reduced = Some(std::sync::Arc::new(Reduced::Int8(q)));
        }
        Ok(m)
    };
    // The first scheme: `a_c = 3|γ_c| + |β_c|` from the LayerNorm before the layer, if any.
    let ln = |i: usize| -> Option<Vec<f32>> {
        inputs[i].as_ref().map(|(g, b)| {
            let a: Vec<f32> = g.iter().zip(b).map(|(g, b)| 3.0 * g.abs() + b.abs()).collect();
            calibrate::smoothing(&a, &lin[i].0).unwrap()
        })
    };
    let builtin_max = f32m.calibration_maxima(&calibrate::builtin())?;
    let unsmoothed = |i: usize| i % 6 == 3 || i % 6 == 5;
    println!("# calibration: {} sentences; STS-B dev f32 Spearman {sts_f32:.2}", calib.len());
    println!("variant\tmin\t10th lowest\tmean\t< 0.99\tSTS-B dev - f32");
    type Pick<'a> = Box<dyn Fn(usize) -> Option<Vec<f32>> + 'a>;
    let mut cases: Vec<(&str, Pick)> = vec![
        ("LayerNorm estimate, four kinds (first scheme)", Box::new(ln)),
        (
            "c1 calibrated (512 sentences), all",
            Box::new(|i| Some(calibrate::smoothing(&calib_max[i], &lin[i].0).unwrap())),
        ),
        (
            "c2 calibrated, attn-out + FFN-out",
            Box::new(
                |i| if unsmoothed(i) { Some(calibrate::smoothing(&calib_max[i], &lin[i].0).unwrap()) } else { ln(i) },
            ),
        ),
        (
            "d data-free, attn-out + FFN-out",
            Box::new(|i| {
                if unsmoothed(i) {
                    Some(calibrate::smoothing(free[i].as_ref().unwrap(), &lin[i].0).unwrap())
                } else {
                    ln(i)
                }
            }),
        ),
    ];
    cases.push((
        "c1 calibrated, built-in 64 sentences (shipped)",
        Box::new(|i| Some(calibrate::smoothing(&builtin_max[i], &lin[i].0).unwrap())),
    ));
    let shipped = |i: usize| Some(calibrate::smoothing(&builtin_max[i], &lin[i].0).unwrap());
    let never = |_: usize| false;
    type Run<'a> = (&'a str, &'a dyn Fn(usize) -> Option<Vec<f32>>, &'a dyn Fn(usize) -> bool);
    let mut runs: Vec<Run> = Vec::new();
    for (n, p) in &cases {
        runs.push((n, &**p, &never));
    }
    runs.push(("b1 shipped + asymmetric FFN output", &shipped, &|i| i % 6 == 5));
    runs.push(("b2 shipped + asymmetric everywhere", &shipped, &|_| true));
    for (name, pick, asym) in runs {
        let m = build(pick, asym)?;
        let mut cos = cosines(want, &m.embed_unchecked(texts, 64)?);
        cos.sort_by(|a, b| a.total_cmp(b));
        let mean = cos.iter().sum::<f64>() / cos.len() as f64;
        let below = cos.iter().filter(|&&c| c < 0.99).count();
        println!("{name}\t{:.6}\t{:.6}\t{mean:.6}\t{below}\t{:+.2}", cos[0], cos[9], sts(&m)? - sts_f32);
    }
    Ok(())
}

/// erf (Abramowitz–Stegun 7.1.26 is too coarse; use candle's).
fn libm_erf(x: f32) -> f32 {
    candle_core::Tensor::new(&[x], &candle_core::Device::Cpu)
        .and_then(|t| t.erf())
        .and_then(|t| t.to_vec1::<f32>())
        .map(|v| v[0])
        .unwrap()
}
