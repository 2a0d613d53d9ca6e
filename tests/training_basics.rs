//! The encoder trains: gradients reach every parameter, AdamW lowers a contrastive loss,
//! dropout is seeded, and saved weights load back exactly.

mod common;

use anyhow::Result;
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use xsent::model::pooling::l2_normalize;
use xsent::model::weights::{self, Params};
use xsent::model::{Encoder, EncoderConfig, Mode, Pooling, TrainContext};
use xsent::train::{AdamW, AdamWConfig};

fn trainable(name: &str) -> Result<(Encoder, Params, EncoderConfig)> {
    let dir = common::fixtures().join(name);
    let cfg = EncoderConfig::from_file(&dir.join("config.json"))?;
    let t = weights::load_encoder_tensors(&[dir.join("model.safetensors")], &Device::Cpu, cfg.num_hidden_layers)?;
    let (t, params) = Params::from_tensors(t)?;
    let enc = Encoder::load(VarBuilder::from_tensors(t, DType::F32, &Device::Cpu), &cfg)?;
    Ok((enc, params, cfg))
}

/// A batch of pairs: random sentences and the same sentences with their last word changed.
fn pairs(seed: u64, b: usize, l: usize, bos: u32) -> Result<(Tensor, Tensor, Tensor)> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut a = Vec::new();
    let mut p = Vec::new();
    for _ in 0..b {
        let row: Vec<u32> = (0..l).map(|i| if i == 0 { bos } else { rng.random_range(5..1000) }).collect();
        let mut q = row.clone();
        q[l - 1] = rng.random_range(5..1000);
        a.extend(row);
        p.extend(q);
    }
    let mask = Tensor::ones((b, l), DType::F32, &Device::Cpu)?;
    Ok((Tensor::from_vec(a, (b, l), &Device::Cpu)?, Tensor::from_vec(p, (b, l), &Device::Cpu)?, mask))
}

/// In-batch contrastive (InfoNCE) loss between anchors and positives, temperature 0.05.
fn contrastive(enc: &Encoder, batch: &(Tensor, Tensor, Tensor), mode: &mut Mode) -> Result<Tensor> {
    let (a, p, mask) = batch;
    let u = l2_normalize(&Pooling::Mean.apply(&enc.forward(a, mask, mode)?, mask)?)?;
    let v = l2_normalize(&Pooling::Mean.apply(&enc.forward(p, mask, mode)?, mask)?)?;
    let logits = (u.matmul(&v.t()?)? / 0.05)?;
    let labels = Tensor::arange(0u32, u.dim(0)? as u32, &Device::Cpu)?;
    Ok(candle_nn::loss::cross_entropy(&logits, &labels)?)
}

#[test]
fn every_parameter_gets_a_gradient() -> Result<()> {
    for name in ["tiny-bert", "tiny-xlm-roberta-mlm"] {
        let (enc, params, _) = trainable(name)?;
        let batch = pairs(1, 6, 7, 0)?;
        let mut rng = TrainContext::new(ChaCha8Rng::seed_from_u64(3));
        let loss = contrastive(&enc, &batch, &mut Mode::Train(&mut rng))?;
        let grads = loss.backward()?;
        assert!(params.vars.len() >= 2 * 16 + 5, "{name}: only {} parameters", params.vars.len());
        for (n, v) in &params.vars {
            let g = grads.get(v.as_tensor()).unwrap_or_else(|| panic!("{name}: no gradient for {n}"));
            let s = g.abs()?.sum_all()?.to_scalar::<f32>()?;
            assert!(s > 0.0 && s.is_finite(), "{name}: gradient of {n} is {s}");
        }
    }
    Ok(())
}

#[test]
fn twenty_adamw_steps_reduce_the_loss() -> Result<()> {
    let (mut enc, params, _) = trainable("tiny-xlm-roberta")?;
    enc.hidden_dropout = 0.0;
    enc.attention_dropout = 0.0;
    let batch = pairs(2, 8, 9, 0)?;
    let mut opt = AdamW::new(&params, AdamWConfig { weight_decay: 0.0, ..Default::default() })?;
    let mut rng = TrainContext::new(ChaCha8Rng::seed_from_u64(0));
    let mut losses = Vec::new();
    for _ in 0..20 {
        let loss = contrastive(&enc, &batch, &mut Mode::Train(&mut rng))?;
        losses.push(loss.to_scalar::<f32>()?);
        opt.step(&loss.backward()?, 1e-3)?;
    }
    let last = contrastive(&enc, &batch, &mut Mode::Infer)?.to_scalar::<f32>()?;
    assert!(last < 0.5 * losses[0], "loss went from {} to {last}: {losses:?}", losses[0]);
    Ok(())
}

#[test]
fn dropout_is_seeded_and_only_in_training() -> Result<()> {
    let (enc, _, _) = trainable("tiny-bert")?;
    let (ids, _, mask) = pairs(4, 3, 6, 101)?;
    let run = |seed: u64| -> Result<Vec<f32>> {
        let mut rng = TrainContext::new(ChaCha8Rng::seed_from_u64(seed));
        Ok(enc.forward(&ids, &mask, &mut Mode::Train(&mut rng))?.flatten_all()?.to_vec1()?)
    };
    assert_eq!(run(7)?, run(7)?, "same seed, different dropout");
    assert_ne!(run(7)?, run(8)?, "different seeds, same dropout");
    let infer: Vec<f32> = enc.forward(&ids, &mask, &mut Mode::Infer)?.flatten_all()?.to_vec1()?;
    assert_ne!(run(7)?, infer, "dropout had no effect in training");
    let again: Vec<f32> = enc.forward(&ids, &mask, &mut Mode::Infer)?.flatten_all()?.to_vec1()?;
    assert_eq!(infer, again, "inference is not deterministic");
    Ok(())
}

#[test]
fn save_load_round_trip_is_exact() -> Result<()> {
    let (mut enc, params, cfg) = trainable("tiny-bert-mlm")?;
    enc.hidden_dropout = 0.0;
    enc.attention_dropout = 0.0;
    // Train a little so the saved weights differ from the checkpoint.
    let batch = pairs(5, 4, 5, 101)?;
    let mut opt = AdamW::new(&params, AdamWConfig::default())?;
    let mut rng = TrainContext::new(ChaCha8Rng::seed_from_u64(0));
    for _ in 0..3 {
        let loss = contrastive(&enc, &batch, &mut Mode::Train(&mut rng))?;
        opt.step(&loss.backward()?, 1e-2)?;
    }
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("model.safetensors");
    params.save(&path)?;
    let loaded = weights::load_encoder_tensors(std::slice::from_ref(&path), &Device::Cpu, cfg.num_hidden_layers)?;
    for (n, v) in &params.vars {
        let a = v.as_tensor().flatten_all()?.to_vec1::<f32>()?;
        let b = loaded[n].flatten_all()?.to_vec1::<f32>()?;
        assert_eq!(a, b, "{n} changed in the round trip");
    }
    let original =
        weights::load_encoder_tensors(&[common::fixtures().join("tiny-bert-mlm/model.safetensors")], &Device::Cpu, 2)?;
    let w = "encoder.layer.0.attention.self.query.weight";
    assert_ne!(
        original[w].flatten_all()?.to_vec1::<f32>()?,
        loaded[w].flatten_all()?.to_vec1::<f32>()?,
        "training changed nothing"
    );
    let enc2 = Encoder::load(VarBuilder::from_tensors(loaded, DType::F32, &Device::Cpu), &cfg)?;
    let (ids, _, mask) = pairs(6, 2, 5, 101)?;
    let a: Vec<f32> = enc.forward(&ids, &mask, &mut Mode::Infer)?.flatten_all()?.to_vec1()?;
    let b: Vec<f32> = enc2.forward(&ids, &mask, &mut Mode::Infer)?.flatten_all()?.to_vec1()?;
    assert_eq!(a, b);
    Ok(())
}
