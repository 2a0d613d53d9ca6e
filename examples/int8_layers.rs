//! Which linear layers cost int8 its accuracy: on STS-B dev sentences (a development set, never
//! the test sets), the cosine of int8 vectors to f32 with every layer in int8, then with one
//! layer (or one kind of layer, in every transformer layer) left in f32.
//!
//! `cargo run --release --example int8_layers -- MODEL [N_SENTENCES] [PREFIX] [short]`
//! With `short`, the N shortest sentences of STS-B train and dev (int8's worst cases are short
//! sentences, where few tokens carry the mean); else the first N of dev.
//! Prints a table: configuration, min cosine, mean cosine, sentences below 0.99.
#![allow(clippy::disallowed_macros)]

use anyhow::Result;
use xsent::model::quant::Dtype;
use xsent::model::quantized;
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
    quantized::apply(&mut int8.encoder, Dtype::Int8, &candle_core::Device::Cpu, false)?;
    let all: Vec<_> = int8.encoder.linears_mut().map(|l| l.reduced.clone()).collect();
    let layers = all.len() / 6;
    let score = |m: &SentenceEncoder| -> Result<(f64, f64, usize)> {
        let got = m.embed_unchecked(&texts, 64)?;
        let cos: Vec<f64> = want
            .iter()
            .zip(&got)
            .map(|(a, b)| {
                let dot: f64 = a.iter().zip(b).map(|(x, y)| (*x as f64) * (*y as f64)).sum();
                let na: f64 = a.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
                let nb: f64 = b.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
                dot / (na * nb)
            })
            .collect();
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
