//! The encoder against Hugging Face transformers' own outputs on tiny random checkpoints.

mod common;

use anyhow::Result;
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use rand::SeedableRng;
use xsent::model::{weights, Encoder, EncoderConfig, Mode, Pooling};

struct Expected {
    ids: Tensor,
    mask: Tensor,
    last: Vec<f32>,
    mean: Vec<f32>,
    cls: Vec<f32>,
    max: Vec<f32>,
}

fn flat(v: &serde_json::Value) -> Vec<f32> {
    match v {
        serde_json::Value::Array(a) => a.iter().flat_map(flat).collect(),
        x => vec![x.as_f64().unwrap() as f32],
    }
}

fn load(name: &str) -> Result<(Encoder, Expected)> {
    let dir = common::fixtures().join(name);
    let cfg = EncoderConfig::from_file(&dir.join("config.json"))?;
    let tensors = weights::load_encoder_tensors(&dir.join("model.safetensors"), &Device::Cpu, cfg.num_hidden_layers)?;
    let enc = Encoder::load(VarBuilder::from_tensors(tensors, DType::F32, &Device::Cpu), &cfg)?;
    let e: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join("expected.json"))?)?;
    let ids: Vec<Vec<u32>> = serde_json::from_value(e["input_ids"].clone())?;
    let mask: Vec<Vec<f32>> = serde_json::from_value(e["attention_mask"].clone())?;
    let (b, l) = (ids.len(), ids[0].len());
    Ok((
        enc,
        Expected {
            ids: Tensor::from_vec(ids.concat(), (b, l), &Device::Cpu)?,
            mask: Tensor::from_vec(mask.concat(), (b, l), &Device::Cpu)?,
            last: flat(&e["last_hidden_state"]),
            mean: flat(&e["mean_pooled"]),
            cls: flat(&e["cls"]),
            max: flat(&e["max_pooled"]),
        },
    ))
}

fn check(name: &str) -> Result<()> {
    let (enc, e) = load(name)?;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0);
    let mut train_enc = enc.clone();
    train_enc.hidden_dropout = 0.0;
    train_enc.attention_dropout = 0.0;
    for (label, hidden) in [
        ("inference path", enc.forward(&e.ids, &e.mask, &mut Mode::Infer)?),
        ("training path", train_enc.forward(&e.ids, &e.mask, &mut Mode::Train(&mut rng))?),
    ] {
        let got = hidden.flatten_all()?.to_vec1::<f32>()?;
        let d = common::max_abs_diff(&got, &e.last);
        assert!(d < 1e-4, "{name} {label}: last_hidden_state differs by {d}");
        for (pool, want) in [(Pooling::Mean, &e.mean), (Pooling::Cls, &e.cls), (Pooling::Max, &e.max)] {
            let got = pool.apply(&hidden, &e.mask)?.flatten_all()?.to_vec1::<f32>()?;
            let d = common::max_abs_diff(&got, want);
            assert!(d < 1e-4, "{name} {label}: {pool} pooling differs by {d}");
        }
    }
    Ok(())
}

#[test]
fn tiny_bert_matches_transformers() -> Result<()> {
    check("tiny-bert")
}

#[test]
fn tiny_bert_mlm_matches_transformers() -> Result<()> {
    check("tiny-bert-mlm")
}

#[test]
fn tiny_xlm_roberta_matches_transformers() -> Result<()> {
    check("tiny-xlm-roberta")
}

#[test]
fn tiny_xlm_roberta_mlm_matches_transformers() -> Result<()> {
    check("tiny-xlm-roberta-mlm")
}

/// The pad id must not matter: the mask decides what is attended and pooled.
#[test]
fn padding_id_is_irrelevant() -> Result<()> {
    let (enc, e) = load("tiny-xlm-roberta")?;
    let ids = e.ids.to_vec2::<u32>()?;
    let mask = e.mask.to_vec2::<f32>()?;
    let other: Vec<u32> = ids.iter().zip(&mask).flat_map(|(r, m)| r.iter().zip(m).map(|(&i, &m)| if m > 0.0 { i } else { 999 })).collect();
    let other = Tensor::from_vec(other, e.ids.shape(), &Device::Cpu)?;
    let a = Pooling::Mean.apply(&enc.forward(&e.ids, &e.mask, &mut Mode::Infer)?, &e.mask)?.flatten_all()?.to_vec1::<f32>()?;
    let b = Pooling::Mean.apply(&enc.forward(&other, &e.mask, &mut Mode::Infer)?, &e.mask)?.flatten_all()?.to_vec1::<f32>()?;
    assert!(common::max_abs_diff(&a, &b) < 1e-6);
    Ok(())
}

/// `layers = N` keeps the first N layers: the 1-layer model equals the 2-layer model's first layer.
#[test]
fn truncated_layers_equal_intermediate_states() -> Result<()> {
    let dir = common::fixtures().join("tiny-bert-mlm");
    let full_cfg = EncoderConfig::from_file(&dir.join("config.json"))?;
    let mut cfg = full_cfg.clone();
    cfg.truncate_layers(1)?;
    assert!(cfg.to_json().contains("\"num_hidden_layers\": 1"));
    let t1 = weights::load_encoder_tensors(&dir.join("model.safetensors"), &Device::Cpu, 1)?;
    assert!(t1.keys().all(|k| !k.starts_with("encoder.layer.1.")), "layer 1 tensors were kept");
    let one = Encoder::load(VarBuilder::from_tensors(t1, DType::F32, &Device::Cpu), &cfg)?;
    let (full, e) = load("tiny-bert-mlm")?;
    let a = one.forward(&e.ids, &e.mask, &mut Mode::Infer)?.flatten_all()?.to_vec1::<f32>()?;
    let b = full.forward_layers(&e.ids, &e.mask, 1, &mut Mode::Infer)?.flatten_all()?.to_vec1::<f32>()?;
    assert_eq!(a, b);
    assert!(cfg.truncate_layers(3).is_err());
    Ok(())
}
