//! Encoder throughput on real sentences: the fused inference path against the differentiable
//! training path (dropout off), both on multilingual-e5-small, side by side.
//! `cargo bench --bench encode` (needs scripts/setup.sh first).

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use rand::SeedableRng;
use std::path::PathBuf;
use xsent::model::{LoadOptions, Mode};
use xsent::SentenceEncoder;

fn sentences(n: usize) -> Vec<String> {
    let data = std::env::var("XSENT_DATA").map(PathBuf::from).unwrap_or_else(|_| PathBuf::from("../shared/data"));
    let path = data.join("tatoeba/tatoeba.deu-eng.deu");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e} (set XSENT_DATA)", path.display()));
    text.lines().take(n).map(String::from).collect()
}

fn bench(c: &mut Criterion) {
    xsent::threads::init_data_parallel();
    let models = std::env::var("XSENT_MODELS").map(PathBuf::from).unwrap_or_else(|_| PathBuf::from("models"));
    let dir = models.join("multilingual-e5-small");
    assert!(dir.is_dir(), "{} missing: run scripts/setup.sh", dir.display());
    let mut enc = SentenceEncoder::load(
        dir.to_str().unwrap(),
        &LoadOptions { prefix: Some("query: ".into()), ..Default::default() },
    )
    .unwrap();
    enc.encoder.hidden_dropout = 0.0;
    enc.encoder.attention_dropout = 0.0;
    let texts = sentences(256);
    let encoded = enc.tokenize(&texts).unwrap();
    let mut g = c.benchmark_group("e5-small-256-sentences");
    g.sample_size(10).throughput(Throughput::Elements(texts.len() as u64));
    g.bench_function("inference-path (xsent embed: sorted by length, one batch of 64 per core)", |b| {
        b.iter(|| enc.embed_encoded(&encoded, 64).unwrap())
    });
    let one_thread = |train: bool| {
        let mut rng = xsent::model::TrainContext::new(rand_chacha::ChaCha8Rng::seed_from_u64(0));
        for chunk in encoded.chunks(64) {
            let batch = enc.collate(&chunk.iter().collect::<Vec<_>>()).unwrap();
            let mut mode = if train { Mode::Train(&mut rng) } else { Mode::Infer };
            let h = enc.hidden_states(&batch, &mut mode).unwrap();
            enc.pool(&h, &batch).unwrap();
        }
    };
    g.bench_function("inference-path (one thread, batches of 64)", |b| b.iter(|| one_thread(false)));
    g.bench_function("training-path (one thread, batches of 64, no grad taken)", |b| b.iter(|| one_thread(true)));
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
