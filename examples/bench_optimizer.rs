//! How much of a training step the optimiser takes, on an XLM-R-base-sized encoder
//! (vocabulary 250,002, hidden 768, 12 layers, 12 heads, feed-forward 3,072; 278M parameters,
//! randomly initialised): forward + backward of a batch (sharded over the cores as the trainer
//! does) against the global gradient norm + fused in-place AdamW update of all parameters.
//!
//! `cargo run --release --example bench_optimizer -- [batch] [tokens] [steps]` (default 64 32 4);
//! scripts/bench-optimizer.sh runs it.

// A report printed for a person: the std print macros are fine here (clippy.toml forbids
// them in xsent itself, where a closed stream must not stop the work).
#![allow(clippy::disallowed_macros)]

use anyhow::Result;
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use rand::{Rng as _, RngCore, SeedableRng};
use std::time::Instant;
use xsent::model::encoder::{Rng, TrainContext};
use xsent::model::weights::{random_encoder_tensors, Params};
use xsent::model::{Encoder, EncoderConfig, Mode, Pooling};
use xsent::train::config::BestMode;
use xsent::train::shards::run_shards;
use xsent::train::{AdamW, AdamWConfig};
use xsent::train::{Recipe, StepLoss, StepPlan};

/// Mean-pooled sentence vectors regressed onto fixed random targets (an MSE, like distillation).
struct Synthetic {
    enc: Encoder,
    params: Params,
    ids: Vec<Vec<u32>>,
    targets: Vec<Vec<f32>>,
}

impl Recipe for Synthetic {
    fn num_examples(&self) -> usize {
        self.ids.len()
    }
    fn data_digest(&self) -> &str {
        // Generated from a fixed seed: the same examples in every run.
        "synthetic"
    }
    fn params(&self) -> Params {
        self.params.clone()
    }
    fn plan(&self) -> StepPlan {
        StepPlan::Sharded
    }
    fn loss(&self, batch: &[usize], rng: &mut TrainContext) -> Result<StepLoss> {
        let l = self.ids[0].len();
        let ids: Vec<u32> = batch.iter().flat_map(|&i| self.ids[i].clone()).collect();
        let ids = Tensor::from_vec(ids, (batch.len(), l), &Device::Cpu)?;
        let mask = Tensor::ones((batch.len(), l), DType::F32, &Device::Cpu)?;
        let h = self.enc.forward(&ids, &mask, &mut Mode::Train(rng))?;
        let v = Pooling::Mean.apply(&h, &mask)?;
        let t: Vec<f32> = batch.iter().flat_map(|&i| self.targets[i].clone()).collect();
        let t = Tensor::from_vec(t, v.shape(), &Device::Cpu)?;
        let loss = v.sub(&t)?.sqr()?.mean_all()?;
        Ok(StepLoss { total: loss, terms: vec![], later: vec![], sentences: batch.len() })
    }
    fn validate(&mut self) -> Result<Vec<(String, f64)>> {
        anyhow::bail!("not used by this benchmark")
    }
    fn default_best(&self) -> (String, BestMode) {
        ("loss".into(), BestMode::Min)
    }
    fn save_model(&self, _dir: &std::path::Path) -> Result<()> {
        anyhow::bail!("not used by this benchmark")
    }
}

fn main() -> Result<()> {
    xsent::threads::init_data_parallel();
    let args: Vec<usize> = std::env::args().skip(1).map(|a| a.parse().expect("numbers: batch tokens steps")).collect();
    let (batch, tokens, steps) =
        (*args.first().unwrap_or(&64), *args.get(1).unwrap_or(&32), *args.get(2).unwrap_or(&4));
    let cfg = EncoderConfig::from_json(
        r#"{"model_type": "xlm-roberta", "vocab_size": 250002, "hidden_size": 768, "num_hidden_layers": 12,
            "num_attention_heads": 12, "intermediate_size": 3072, "max_position_embeddings": 514,
            "type_vocab_size": 1, "layer_norm_eps": 1e-5, "pad_token_id": 1}"#,
    )?;
    let mut rng = Rng::seed_from_u64(0);
    let t0 = Instant::now();
    let tensors = random_encoder_tensors(&cfg, &mut rng, &Device::Cpu)?;
    let (tensors, params) = Params::from_tensors(tensors)?;
    let enc = Encoder::load(VarBuilder::from_tensors(tensors, DType::F32, &Device::Cpu), &cfg)?;
    eprintln!("init: {} parameters in {:.1} s", params.num_elements(), t0.elapsed().as_secs_f64());
    let ids = (0..batch)
        .map(|_| (0..tokens).map(|j| if j == 0 { 0 } else { rng.random_range(5..250_000) }).collect())
        .collect();
    let targets = (0..batch).map(|_| (0..768).map(|_| rng.random_range(-0.1..0.1)).collect()).collect();
    let recipe = Synthetic { enc, params: params.clone(), ids, targets };
    let mut opt = AdamW::new(&params, AdamWConfig::default())?;
    let batch_idx: Vec<usize> = (0..batch).collect();
    let shards: Vec<&[usize]> = batch_idx.chunks(8).collect();
    println!(
        "XLM-R-base-sized encoder, {} parameters, batch {batch} x {tokens} tokens, {} shards of 8 on {} threads",
        params.num_elements(),
        shards.len(),
        xsent::threads::threads()
    );
    println!("step  fwd+bwd_s  grad_norm_s  update_s  optimizer_share");
    let mut shares = Vec::new();
    for step in 1..=steps {
        let seeds: Vec<u64> = shards.iter().map(|_| rng.next_u64()).collect();
        let t = Instant::now();
        let mb = run_shards(&recipe, &shards, &batch_idx, &seeds, batch, 1, &params)?;
        let fb = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let norm = opt.grad_norm(&mb.grads)?;
        let gn = t.elapsed().as_secs_f64();
        let t = Instant::now();
        opt.step_with_norm(&mb.grads, 1e-5, norm)?;
        let up = t.elapsed().as_secs_f64();
        drop(mb);
        let share = (gn + up) / (fb + gn + up);
        println!("{step:>4}  {fb:>9.3}  {gn:>11.3}  {up:>8.3}  {:>14.1}%", 100.0 * share);
        if step > 1 {
            shares.push(share);
        }
    }
    shares.sort_by(f64::total_cmp);
    if let Some(m) = shares.get(shares.len() / 2) {
        println!("median optimiser share of a step (steps 2..): {:.1}% (target < 10%)", 100.0 * m);
    }
    Ok(())
}
