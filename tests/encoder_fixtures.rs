//! The encoder against Hugging Face transformers' own outputs on tiny random checkpoints.

mod common;

use anyhow::Result;
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use rand::SeedableRng;
use std::collections::HashMap;
use std::path::PathBuf;
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
    load_with(name, &[common::fixtures().join(name).join("model.safetensors")])
}

/// The fixture `name`'s encoder read from `weights` (the fixture's own model.safetensors, or
/// the same checkpoint in another layout), and its expected outputs.
fn load_with(name: &str, weights: &[PathBuf]) -> Result<(Encoder, Expected)> {
    let dir = common::fixtures().join(name);
    let cfg = EncoderConfig::from_file(&dir.join("config.json"))?;
    let tensors = weights::load_encoder_tensors(weights, &Device::Cpu, cfg.num_hidden_layers)?;
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
    check_with(name, &[common::fixtures().join(name).join("model.safetensors")])
}

fn check_with(name: &str, weights: &[PathBuf]) -> Result<()> {
    let (enc, e) = load_with(name, weights)?;
    let mut rng = xsent::model::TrainContext::new(rand_chacha::ChaCha8Rng::seed_from_u64(0));
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
    let other: Vec<u32> = ids
        .iter()
        .zip(&mask)
        .flat_map(|(r, m)| r.iter().zip(m).map(|(&i, &m)| if m > 0.0 { i } else { 999 }))
        .collect();
    let other = Tensor::from_vec(other, e.ids.shape(), &Device::Cpu)?;
    let a = Pooling::Mean
        .apply(&enc.forward(&e.ids, &e.mask, &mut Mode::Infer)?, &e.mask)?
        .flatten_all()?
        .to_vec1::<f32>()?;
    let b = Pooling::Mean
        .apply(&enc.forward(&other, &e.mask, &mut Mode::Infer)?, &e.mask)?
        .flatten_all()?
        .to_vec1::<f32>()?;
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
    let t1 = weights::load_encoder_tensors(&[dir.join("model.safetensors")], &Device::Cpu, 1)?;
    assert!(t1.keys().all(|k| !k.starts_with("encoder.layer.1.")), "layer 1 tensors were kept");
    let one = Encoder::load(VarBuilder::from_tensors(t1, DType::F32, &Device::Cpu), &cfg)?;
    let (full, e) = load("tiny-bert-mlm")?;
    let a = one.forward(&e.ids, &e.mask, &mut Mode::Infer)?.flatten_all()?.to_vec1::<f32>()?;
    let b = full.forward_layers(&e.ids, &e.mask, 1, &mut Mode::Infer)?.flatten_all()?.to_vec1::<f32>()?;
    assert_eq!(a, b);
    assert!(cfg.truncate_layers(3).is_err());
    Ok(())
}

/// The fixtures re-saved by transformers and sentence-transformers in the other weight layouts
/// xsent reads (scripts/make-checkpoint-fixtures.py).
fn resaved(dir: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/checkpoints").join(dir)
}

/// The shards a checkpoint's index lists, as paths.
fn shards(index: &std::path::Path) -> Result<Vec<PathBuf>> {
    let names = xsent::model::files::shard_names(index)?;
    Ok(names.iter().map(|n| index.parent().unwrap().join(n)).collect())
}

/// Both tensor maps hold the same names; `want` turns the reference tensor into the one expected.
fn assert_same_tensors(
    got: &HashMap<String, Tensor>,
    reference: &HashMap<String, Tensor>,
    want: impl Fn(&Tensor) -> Result<Tensor>,
) -> Result<()> {
    let mut a: Vec<&String> = got.keys().collect();
    let mut b: Vec<&String> = reference.keys().collect();
    a.sort();
    b.sort();
    assert_eq!(a, b);
    for (name, t) in got {
        assert_eq!(t.dtype(), DType::F32, "{name}");
        let want = want(&reference[name])?;
        assert_eq!(t.dims(), want.dims(), "{name}");
        assert_eq!(t.flatten_all()?.to_vec1::<f32>()?, want.flatten_all()?.to_vec1::<f32>()?, "{name} differs");
    }
    Ok(())
}

/// A BertForMaskedLM saved by torch.save as transformers 4 wrote pytorch_model.bin (`bert.`
/// names, heads, the decoder sharing the word embeddings' storage): the same tensors as the
/// fixture's safetensors, and transformers' outputs.
#[test]
fn pytorch_bin_matches_transformers() -> Result<()> {
    let bin = [resaved("bert-mlm-bin").join("pytorch_model.bin")];
    check_with("tiny-bert-mlm", &bin)?;
    let reference =
        weights::load_encoder_tensors(&[common::fixtures().join("tiny-bert-mlm/model.safetensors")], &Device::Cpu, 2)?;
    assert_same_tensors(&weights::load_encoder_tensors(&bin, &Device::Cpu, 2)?, &reference, |t| Ok(t.clone()))?;
    // Dropped layers are left out of a PyTorch file as of a safetensors one.
    let one = weights::load_encoder_tensors(&bin, &Device::Cpu, 1)?;
    assert!(!one.is_empty() && one.keys().all(|k| !k.starts_with("encoder.layer.1.")));
    Ok(())
}

/// A weight of a PyTorch checkpoint stored as int32 is named with its storage type. Before,
/// candle skipped it with a bare "skipping" line and the load failed on "cannot find tensor" (an
/// outside probe). A head stored so is never read, and the checkpoint still loads.
#[test]
fn pytorch_weights_stored_as_integers_are_named() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let query = "bert.encoder.layer.0.attention.self.query.weight";
    let bin = int_storage_copy(&dir.path().join("query"), query)?;
    let e = format!("{:#}", weights::load_encoder_tensors(&[bin], &Device::Cpu, 2).unwrap_err());
    assert!(e.contains(&format!("tensor {query} is stored as IntStorage, not as floats")), "{e}");
    let bin = int_storage_copy(&dir.path().join("head"), "cls.predictions.bias")?;
    let loaded = weights::load_encoder_tensors(&[bin], &Device::Cpu, 2)?;
    assert!(loaded.contains_key("encoder.layer.0.attention.self.query.weight"));
    // A layer that `--layers 1` drops is never read, so its storage does not matter.
    let bin = int_storage_copy(&dir.path().join("dropped"), "bert.encoder.layer.1.attention.self.query.weight")?;
    assert!(format!("{:#}", weights::load_encoder_tensors(std::slice::from_ref(&bin), &Device::Cpu, 2).unwrap_err())
        .contains("is stored as IntStorage"));
    let loaded = weights::load_encoder_tensors(&[bin], &Device::Cpu, 1)?;
    assert!(loaded.contains_key("encoder.layer.0.attention.self.query.weight"));
    assert!(!loaded.keys().any(|k| k.starts_with("encoder.layer.1.")));
    Ok(())
}

/// A LayerNorm parameter under its old name (`gamma`, `beta`) stored as integers in safetensors
/// is refused as a `.weight` is: casting it would give wrong vectors without a word.
#[test]
fn safetensors_parameters_stored_as_integers_are_named_under_old_names_too() -> Result<()> {
    let path = common::fixtures().join("tiny-bert-mlm/model.safetensors");
    let mut raw = candle_core::safetensors::load(&path, &Device::Cpu)?;
    let ln = raw.keys().find(|k| k.ends_with("embeddings.LayerNorm.weight")).expect("a LayerNorm weight").clone();
    let t = raw.remove(&ln).unwrap();
    let dir = tempfile::tempdir()?;
    for (suffix, dtype) in [("gamma", DType::I64), ("gamma", DType::F32), ("weight", DType::U8)] {
        let mut edited = raw.clone();
        let name = format!("{}.{suffix}", ln.strip_suffix(".weight").unwrap());
        edited.insert(name.clone(), t.to_dtype(dtype)?);
        let out = dir.path().join(format!("{suffix}-{dtype:?}.safetensors"));
        candle_core::safetensors::save(&edited, &out)?;
        let got = weights::load_encoder_tensors(&[out], &Device::Cpu, 2);
        if dtype.is_float() {
            assert!(got?.contains_key("embeddings.LayerNorm.weight"), "the old name is read");
        } else {
            let e = format!("{:#}", got.unwrap_err());
            assert!(e.contains(&format!("tensor {name} of")) && e.contains("integers"), "{e}");
        }
    }
    Ok(())
}

/// bert-mlm-bin's pytorch_model.bin in `dir` with the tensor `name` stored as IntStorage: its
/// storage class in the pickle (protocol 2, read in sequence, so bytes may be inserted) becomes
/// `torch.IntStorage` where the others keep the memoised `torch.FloatStorage`.
fn int_storage_copy(dir: &std::path::Path, name: &str) -> Result<PathBuf> {
    use std::io::{Read, Write};
    std::fs::create_dir_all(dir)?;
    let bin = dir.join("pytorch_model.bin");
    let mut zin = zip::ZipArchive::new(std::fs::File::open(resaved("bert-mlm-bin").join("pytorch_model.bin"))?)?;
    let mut zout = zip::ZipWriter::new(std::fs::File::create(&bin)?);
    for i in 0..zin.len() {
        let mut f = zin.by_index(i)?;
        let entry = f.name()?.to_string();
        let mut data = Vec::new();
        f.read_to_end(&mut data)?;
        if entry.ends_with("data.pkl") {
            let key = data.windows(name.len()).position(|w| w == name.as_bytes()).expect("the tensor's key");
            // `((h\x04h\x05`: the storage tuple, whose class is memo 5 (FloatStorage).
            let pat = b"((h\x04h\x05";
            let at = key + data[key..].windows(pat.len()).position(|w| w == pat).expect("its storage tuple") + 4;
            data.splice(at..at + 2, b"ctorch\nIntStorage\n".iter().copied());
        }
        zout.start_file(
            entry,
            zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored),
        )?;
        zout.write_all(&data)?;
    }
    zout.finish()?;
    Ok(bin)
}

/// A sharded safetensors checkpoint as transformers' save_pretrained(max_shard_size=…) writes it.
#[test]
fn sharded_safetensors_match_transformers() -> Result<()> {
    let files = shards(&resaved("xlmr-mlm-sharded").join("model.safetensors.index.json"))?;
    assert_eq!(files.len(), 2);
    check_with("tiny-xlm-roberta-mlm", &files)?;
    let reference = weights::load_encoder_tensors(
        &[common::fixtures().join("tiny-xlm-roberta-mlm/model.safetensors")],
        &Device::Cpu,
        2,
    )?;
    assert_same_tensors(&weights::load_encoder_tensors(&files, &Device::Cpu, 2)?, &reference, |t| Ok(t.clone()))
}

/// A float16 checkpoint in PyTorch shards: every tensor is read as the fixture's float32 value
/// rounded to float16, and widened back to float32.
#[test]
fn sharded_float16_pytorch_checkpoint_reads_its_values() -> Result<()> {
    let files = shards(&resaved("xlmr-f16-sharded-bin").join("pytorch_model.bin.index.json"))?;
    assert_eq!(files.len(), 3);
    assert!(files.iter().all(|f| f.extension().unwrap() == "bin"));
    let reference = weights::load_encoder_tensors(
        &[common::fixtures().join("tiny-xlm-roberta/model.safetensors")],
        &Device::Cpu,
        2,
    )?;
    let got = weights::load_encoder_tensors(&files, &Device::Cpu, 2)?;
    assert_same_tensors(&got, &reference, |t| Ok(t.to_dtype(DType::F16)?.to_dtype(DType::F32)?))
}

/// A bfloat16 safetensors checkpoint: each tensor is read as its bfloat16 value in float32.
#[test]
fn bfloat16_safetensors_read_their_values() -> Result<()> {
    let path = common::fixtures().join("tiny-bert-mlm/model.safetensors");
    let raw = candle_core::safetensors::load(&path, &Device::Cpu)?;
    let bf16: HashMap<String, Tensor> =
        raw.iter().map(|(k, t)| Ok((k.clone(), t.to_dtype(DType::BF16)?))).collect::<Result<_>>()?;
    let dir = tempfile::tempdir()?;
    let out = dir.path().join("model.safetensors");
    candle_core::safetensors::save(&bf16, &out)?;
    let reference = weights::load_encoder_tensors(&[path], &Device::Cpu, 2)?;
    assert_same_tensors(&weights::load_encoder_tensors(&[out], &Device::Cpu, 2)?, &reference, |t| {
        Ok(t.to_dtype(DType::BF16)?.to_dtype(DType::F32)?)
    })
}

/// A sentence-transformers Dense module saved as pytorch_model.bin gives sentence-transformers'
/// output on the same input.
#[test]
fn dense_from_pytorch_bin_matches_sentence_transformers() -> Result<()> {
    let dense = xsent::model::Dense::load(&resaved("dense-bin"), &Device::Cpu)?;
    let e: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(common::fixtures().join("tiny-bert/expected.json"))?)?;
    let input = Tensor::from_vec(flat(&e["mean_pooled"]), (3, 32), &Device::Cpu)?;
    let want: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(resaved("dense-expected.json"))?)?;
    let got = dense.forward(&input)?.flatten_all()?.to_vec1::<f32>()?;
    let d = common::max_abs_diff(&got, &flat(&want["output"]));
    assert!(d < 1e-6, "Dense output differs by {d}");
    Ok(())
}

/// Broken weight files are errors that name the file: a `.bin` that is not PyTorch's zip format
/// (e.g. the legacy format before PyTorch 1.6), and one tensor in two shards.
#[test]
fn broken_weight_files_are_named() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let legacy = dir.path().join("pytorch_model.bin");
    std::fs::write(&legacy, b"\x80\x02\x8a\x0alegacy pickle, not a zip archive")?;
    let err =
        format!("{:#}", weights::load_encoder_tensors(std::slice::from_ref(&legacy), &Device::Cpu, 2).unwrap_err());
    assert!(
        err.contains(&legacy.display().to_string()) && err.contains("zip format") && err.contains("save_pretrained"),
        "{err}"
    );
    let sharded = shards(&resaved("xlmr-mlm-sharded").join("model.safetensors.index.json"))?;
    let twice = [sharded[0].clone(), sharded[1].clone(), sharded[0].clone()];
    let err = format!("{:#}", weights::load_encoder_tensors(&twice, &Device::Cpu, 2).unwrap_err());
    assert!(err.contains("is in two weight files"), "{err}");
    Ok(())
}
