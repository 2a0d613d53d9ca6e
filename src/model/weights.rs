//! Reading and writing encoder weights under Hugging Face names.
//!
//! Checkpoints come with or without the `bert.` / `roberta.` prefix that masked-LM models carry,
//! sometimes with the old `gamma`/`beta` LayerNorm names; heads (`cls.*`, `lm_head.*`,
//! `pooler.*`, `classifier.*`, `qa_outputs.*`) are ignored, and any other tensor is reported. Inside xsent every tensor has its canonical prefix-free name.

use anyhow::{bail, Context, Result};
use candle_core::{DType, Device, Tensor, Var};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The heads of transformers' BERT and XLM-R models (masked LM, pooler, task heads): tensors a
/// checkpoint may carry beside the encoder, which xsent leaves unread.
const HEADS: [&str; 5] = ["cls.", "lm_head.", "pooler.", "classifier.", "qa_outputs."];

/// Whether the checkpoint tensor `name` (the encoder's `prefix` detected) is a known head.
fn is_head(name: &str, prefix: &str) -> bool {
    let rest = name.strip_prefix(prefix).unwrap_or(name);
    HEADS.iter().any(|h| rest.starts_with(h) || name.starts_with(h))
}

/// Canonical name of a checkpoint tensor, or `None` when it is not part of the encoder.
fn canonical_name(name: &str, prefix: &str) -> Option<String> {
    let rest = if prefix.is_empty() { name } else { name.strip_prefix(prefix)? };
    if !(rest.starts_with("embeddings.") || rest.starts_with("encoder.")) {
        return None;
    }
    let rest = if let Some(s) = rest.strip_suffix(".gamma") {
        format!("{s}.weight")
    } else if let Some(s) = rest.strip_suffix(".beta") {
        format!("{s}.bias")
    } else {
        rest.to_string()
    };
    Some(rest)
}

/// The prefixes under which checkpoints store the encoder's tensors (none, or a masked-LM or
/// task model's).
const ENCODER_PREFIXES: [&str; 4] = ["", "bert.", "roberta.", "model."];

/// The prefix under which the encoder's tensors are stored in this checkpoint.
fn detect_prefix<'a, I: IntoIterator<Item = &'a String>>(names: I) -> Result<&'static str> {
    let names: Vec<&String> = names.into_iter().collect();
    for prefix in ENCODER_PREFIXES {
        let probe = format!("{prefix}embeddings.word_embeddings.weight");
        if names.iter().any(|n| **n == probe) {
            return Ok(prefix);
        }
    }
    let sample: Vec<&str> = names.iter().take(5).map(|s| s.as_str()).collect();
    bail!(
        "no `embeddings.word_embeddings.weight` (with or without a `bert.`/`roberta.` prefix) among the tensors; \
         is this a BERT/XLM-R checkpoint? first tensor names: {sample:?}"
    )
}

/// Encoder tensors of a checkpoint as f32 on `device`, under canonical names: its one weight
/// file or all its shards (safetensors, or PyTorch's `.bin`). Layers at index `>= keep_layers`
/// are dropped.
pub fn load_encoder_tensors(paths: &[PathBuf], device: &Device, keep_layers: usize) -> Result<HashMap<String, Tensor>> {
    Ok(load_encoder_tensors_noting(paths, device, keep_layers)?.0)
}

/// [`load_encoder_tensors`], the canonical names of the tensors of the layers it dropped, and
/// the names of the tensors that are neither the encoder's nor a known head's (`foo.bar`, a
/// second copy under another prefix): unused weights the caller refuses.
#[allow(clippy::type_complexity)]
pub fn load_encoder_tensors_noting(
    paths: &[PathBuf],
    device: &Device,
    keep_layers: usize,
) -> Result<(HashMap<String, Tensor>, Vec<String>, Vec<String>)> {
    // Only the encoder's parameters in the layers kept matter: a head, a buffer or a dropped
    // layer's tensor candle cannot read is never read.
    let needed = |n: &str| {
        is_parameter_name(n)
            && ENCODER_PREFIXES
                .iter()
                .any(|p| canonical_name(n, p).is_some_and(|c| layer_index(&c).is_none_or(|layer| layer < keep_layers)))
    };
    let files = paths.iter().map(|p| CheckpointFile::open(p, &needed)).collect::<Result<Vec<_>>>()?;
    let mut dropped = Vec::new();
    let prefix =
        detect_prefix(files.iter().flat_map(|f| f.names())).with_context(|| format!("in {}", describe(paths)))?;
    let mut out = HashMap::new();
    let mut from: HashMap<String, (&Path, &String)> = HashMap::new();
    let mut foreign = Vec::new();
    for (file, path) in files.iter().zip(paths) {
        for name in file.names() {
            let Some(canon) = canonical_name(name, prefix) else {
                if !is_head(name, prefix) {
                    foreign.push(name.clone());
                }
                continue;
            };
            if let Some(layer) = layer_index(&canon) {
                if layer >= keep_layers {
                    dropped.push(canon);
                    continue;
                }
            }
            if let Some((first, first_name)) = from.insert(canon.clone(), (path, name)) {
                if first == path.as_path() && first_name != name {
                    // Two names for one tensor in one file: an old LayerNorm name beside the new.
                    bail!("{} holds {canon} twice, as {first_name} and as {name}: keep one of them", path.display());
                }
                bail!(
                    "tensor {name} is in two weight files of one checkpoint, {} and {}",
                    first.display(),
                    path.display()
                );
            }
            let t = file.get(name)?;
            check_float_parameter(&t, name, path)?;
            let t = if t.dtype() == DType::F32 { t } else { t.to_dtype(DType::F32)? };
            out.insert(canon, t.to_device(device)?);
        }
    }
    foreign.sort();
    Ok((out, dropped, foreign))
}

/// Refuses a weight or bias (a name ending in `.weight` or `.bias`, or LayerNorm's old `.gamma`
/// and `.beta`) stored as integers: a float
/// parameter saved as I32 or U8 is a broken or foreign file (a quantised checkpoint of another
/// tool, say), and casting it to f32 would give a model whose vectors are silently wrong. Integer
/// buffers (`embeddings.position_ids`) pass.
pub(crate) fn check_float_parameter(t: &Tensor, name: &str, path: &Path) -> Result<()> {
    if !t.dtype().is_float() && is_parameter_name(name) {
        bail!(
            "tensor {name} of {} is stored as {:?} integers; xsent reads float weights (F32, F16, BF16, F64): \
             is this a quantised checkpoint of another tool? Use the model's float weights \
             (xsent quantize makes int8 from them)",
            path.display(),
            t.dtype()
        );
    }
    Ok(())
}

/// Every tensor of one weight file (safetensors, or PyTorch's `.bin`), as stored.
pub fn read_weight_file(path: &Path) -> Result<HashMap<String, Tensor>> {
    let file = CheckpointFile::open(path, &is_parameter_name)?;
    file.names().map(|n| Ok((n.clone(), file.get(n)?))).collect()
}

/// A safetensors file's tensors on `device`; an error names the file as `what` (weights, a
/// checkpoint's parameters) and, for a damaged file, the tensor at fault.
pub fn load_safetensors(path: &Path, device: &Device, what: &str) -> Result<HashMap<String, Tensor>> {
    candle_core::safetensors::load(path, device).map_err(|e| {
        // The crate's words name no tensor (or, for an offset past the end, another): the
        // header is read again to say which tensor is at fault, and how.
        let dtype_refused = e.to_string().contains("unsupported safetensor dtype");
        let e = anyhow::Error::from(e);
        match diagnose_safetensors(path, dtype_refused) {
            Some(why) => e.context(format!("cannot read {what} {}: {why}", path.display())),
            None => e.context(format!("cannot read {what} {}", path.display())),
        }
    })
}

/// Why a safetensors file that failed to load is damaged, in words that name the tensor: read
/// from its header alone (at most 100 MB, the format's limit). `dtype_refused`: the reader
/// refused a data type it does not read (candle reads no I8), which names the first I8 tensor
/// when nothing else is wrong. `None` when the header shows nothing wrong.
pub(crate) fn diagnose_safetensors(path: &Path, dtype_refused: bool) -> Option<String> {
    use std::io::Read;
    let mut f = std::fs::File::open(path).ok()?;
    let size = f.metadata().ok()?.len();
    let mut head = [0u8; 8];
    if f.read_exact(&mut head).is_err() {
        return Some(format!("it has {size} bytes, fewer than the 8 of a safetensors header's length"));
    }
    let n = u64::from_le_bytes(head);
    if n > size - 8 {
        // The first bytes are the header's length; a length the file cannot hold says what the
        // file is, when it is JSON or a zip.
        return Some(match head {
            [b'{', ..] => {
                "it is JSON, not safetensors (an index such as model.safetensors.index.json listed as a shard of itself?)"
                    .to_string()
            }
            [0x50, 0x4b, ..] => "it is a zip file (PyTorch's format), not safetensors: name it pytorch_model.bin".to_string(),
            _ => format!(
                "its first 8 bytes give a header of {n} bytes, but the file has {} after them: it was cut short, or it is not safetensors",
                size - 8
            ),
        });
    }
    if n > 100_000_000 {
        return Some(format!("its header would be {n} bytes, more than safetensors' 100 MB: it is not safetensors"));
    }
    let mut json = vec![0u8; n as usize];
    f.read_exact(&mut json).ok()?;
    let header: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(&json).ok()?;
    let data = size - 8 - n;
    let mut spans = Vec::new();
    for (name, t) in header.iter().filter(|(k, _)| *k != "__metadata__") {
        let shown = t["dtype"].to_string();
        let Ok(dtype) = serde_json::from_value::<safetensors::Dtype>(t["dtype"].clone()) else {
            return Some(format!("tensor {name} has the data type {shown}, which safetensors does not define"));
        };
        let shape: Option<Vec<u64>> = t["shape"].as_array().and_then(|a| a.iter().map(|d| d.as_u64()).collect());
        let offsets: Option<Vec<u64>> =
            t["data_offsets"].as_array().and_then(|a| a.iter().map(|d| d.as_u64()).collect());
        let (Some(shape), Some([begin, end])) = (shape, offsets.as_deref().and_then(|o| <[u64; 2]>::try_from(o).ok()))
        else {
            return Some(format!("tensor {name} has no valid shape or data_offsets [begin, end]"));
        };
        // Bytes: elements × bits / 8 (sub-byte types pack several elements in a byte).
        let bits = shape.iter().try_fold(dtype.bitsize() as u64, |a, &d| a.checked_mul(d));
        let need = bits.map(|b| b.div_ceil(8));
        if end < begin || need != Some(end - begin) {
            return Some(format!(
                "tensor {name} is {dtype:?} of shape {shape:?}, {} bytes, but its data_offsets [{begin}, {end}] give it {} bytes",
                need.map_or("too many".to_string(), |b| b.to_string()),
                end as i128 - begin as i128
            ));
        }
        if end > data {
            return Some(format!(
                "tensor {name}'s data ends at byte {end} of the data, but the file holds {data} bytes of data: it was cut short"
            ));
        }
        spans.push((begin, end, name));
    }
    spans.sort();
    let mut at = 0;
    for (begin, end, name) in &spans {
        if *begin != at {
            return Some(format!(
                "tensor {name}'s data starts at byte {begin} of the data, where {at} was expected: \
                 tensors must follow one another without gaps or overlaps"
            ));
        }
        at = *end;
    }
    if at != data {
        return Some(format!(
            "its tensors' data ends at byte {at}, but {data} bytes follow the header: bytes were added after it"
        ));
    }
    if dtype_refused {
        if let Some((name, _)) = header.iter().find(|(k, t)| *k != "__metadata__" && t["dtype"] == "I8") {
            return Some(format!(
                "tensor {name} is I8, which xsent reads only in the int8 models of xsent quantize \
                 (their config.json has a quantization_config with dtype \"int8\"; was it edited?)"
            ));
        }
    }
    None
}

/// `path`, or for shards the first and how many.
pub(crate) fn describe(paths: &[PathBuf]) -> String {
    match paths {
        [one] => one.display().to_string(),
        [first, ..] => format!("{} and its {} other shards", first.display(), paths.len() - 1),
        [] => "no weight files".to_string(),
    }
}

/// Whether `path` is a PyTorch checkpoint (`pytorch_model.bin`, its shards, `*.pt`, `*.pth`)
/// rather than safetensors.
fn is_pytorch_file(path: &Path) -> bool {
    matches!(path.extension().and_then(|e| e.to_str()), Some("bin" | "pt" | "pth"))
}

/// One weight file: safetensors, read whole, or a PyTorch checkpoint in the zip format
/// `torch.save` writes (its pickle is interpreted, never run), read tensor by tensor so that
/// heads and dropped layers are never read.
enum CheckpointFile {
    Safetensors(HashMap<String, Tensor>),
    Pytorch { path: PathBuf, tensors: candle_core::pickle::PthTensors, names: Vec<String> },
}

impl CheckpointFile {
    /// Opens `path`; a tensor for which `needed(name)` holds that candle cannot read (stored as
    /// integers) is refused by name.
    fn open(path: &Path, needed: &dyn Fn(&str) -> bool) -> Result<Self> {
        if !is_pytorch_file(path) {
            return Ok(Self::Safetensors(load_safetensors(path, &Device::Cpu, "weights")?));
        }
        // candle skips tensors of storage types it does not read (int32, bool), saying only
        // "skipping: …" on stderr; the encoder then "cannot find" them. A weight so stored is
        // named here instead, before candle reads the file.
        let mut unreadable = unreadable_pth_tensors(path);
        unreadable.sort();
        if let Some((name, why)) = unreadable.iter().find(|(n, _)| needed(n)) {
            bail!(
                "{}: tensor {name} is stored as {why}, not as floats: xsent reads weights stored as float16, bfloat16, \
                 float32 or float64 (a weight stored as integers would give wrong vectors); save the model's float weights again",
                path.display()
            );
        }
        let tensors = candle_core::pickle::PthTensors::new(path, None).map_err(|e| {
            anyhow::anyhow!(
                "cannot read the PyTorch checkpoint {}: {e}.\nxsent reads the zip format torch.save has written since PyTorch 1.6 \
                 (a dict of tensors, as transformers saves pytorch_model.bin); re-save other files with transformers' \
                 save_pretrained(dir), which writes model.safetensors",
                path.display()
            )
        })?;
        let mut names: Vec<String> = tensors.tensor_infos().keys().cloned().collect();
        names.sort();
        if names.is_empty() {
            bail!(
                "the PyTorch checkpoint {} holds no tensors xsent can read: xsent reads a state dict (a dict of tensors), \
                 as transformers saves pytorch_model.bin",
                path.display()
            );
        }
        Ok(Self::Pytorch { path: path.to_path_buf(), tensors, names })
    }

    fn names(&self) -> Box<dyn Iterator<Item = &String> + '_> {
        match self {
            Self::Safetensors(t) => Box::new(t.keys()),
            Self::Pytorch { names, .. } => Box::new(names.iter()),
        }
    }

    fn get(&self, name: &str) -> Result<Tensor> {
        match self {
            Self::Safetensors(t) => Ok(t[name].clone()),
            Self::Pytorch { path, tensors, .. } => {
                if let Some(info) = tensors.tensor_infos().get(name) {
                    strided_view_check(path, name, &info.layout)?;
                }
                tensors
                    .get(name)
                    .with_context(|| format!("cannot read tensor {name} of {}", path.display()))?
                    .with_context(|| format!("tensor {name} of {} is not stored where its index says", path.display()))
            }
        }
    }
}

/// Refuses a tensor of a PyTorch checkpoint that is a strided view (`big[:, ::2]`): torch.save
/// stores a view as its storage and strides, which candle does not read (it said only "cannot
/// retrieve non-contiguous tensors Layout { … }", an outside probe). A tensor stored whole, with
/// an offset into its storage, or transposed (Fortran order) is read.
fn strided_view_check(path: &Path, name: &str, layout: &candle_core::Layout) -> Result<()> {
    if layout.is_contiguous() || layout.is_fortran_contiguous() {
        return Ok(());
    }
    bail!(
        "{}: tensor {name} is a strided view (shape {:?}, strides {:?} into a larger storage), as torch.save stores a \
         slice such as w[:, ::2] without copying it; xsent reads tensors stored whole: load the model in transformers and \
         save it again with save_pretrained(dir, safe_serialization=True), which writes model.safetensors, or call \
         .contiguous() on such tensors before torch.save",
        path.display(),
        layout.dims(),
        layout.stride()
    )
}

/// Whether a tensor name is a learned parameter's (a weight or bias, LayerNorm's old names too),
/// rather than a buffer such as `position_ids`.
fn is_parameter_name(name: &str) -> bool {
    [".weight", ".bias", ".gamma", ".beta"].iter().any(|s| name.ends_with(s))
}

/// The tensors of a PyTorch zip checkpoint's state dict that candle's reader skips for a storage
/// type it does not read, with that type (`IntStorage`). Empty when the pickle cannot be read here: candle's
/// own reader then says what is wrong.
fn unreadable_pth_tensors(path: &Path) -> Vec<(String, String)> {
    use candle_core::pickle::{Object, Stack};
    let read = || -> Option<Vec<(String, String)>> {
        let mut zip = zip::ZipArchive::new(std::io::BufReader::new(std::fs::File::open(path).ok()?)).ok()?;
        let name = zip.file_names().filter_map(|f| f.ok()).find(|f| f.ends_with("data.pkl"))?.into_owned();
        let dir = std::path::PathBuf::from(name.strip_suffix(".pkl")?);
        let mut stack = Stack::empty();
        stack.read_loop(&mut std::io::BufReader::new(zip.by_name(&name).ok()?)).ok()?;
        let Object::Dict(entries) = stack.finalize().ok()? else { return Some(Vec::new()) };
        Some(
            entries
                .into_iter()
                .filter_map(|(k, v)| {
                    let key = k.clone().unicode().ok()?;
                    // candle's message, without the backtrace it may carry.
                    let why = v.into_tensor_info(k, &dir).err()?.to_string();
                    let why = why.lines().next().unwrap_or("");
                    // Other errors (a damaged entry) are left to candle's reader to report.
                    let storage = why.split("unsupported storage type ").nth(1)?;
                    Some((key, storage.trim_end_matches(['"', ')']).to_string()))
                })
                .collect(),
        )
    };
    read().unwrap_or_default()
}

/// Freshly initialised encoder tensors under canonical names, as Hugging Face's BERT
/// `_init_weights` draws them: linear and embedding weights from N(0, 0.02²) (the padding row of
/// the word embeddings zero), biases zero, LayerNorm weight one and bias zero. Drawn from `rng`,
/// so the same seed gives the same model.
pub fn random_encoder_tensors(
    cfg: &super::EncoderConfig,
    rng: &mut rand_chacha::ChaCha8Rng,
    device: &Device,
) -> Result<HashMap<String, Tensor>> {
    use rand_distr::{Distribution, Normal};
    let normal = Normal::new(0f32, 0.02).expect("a valid normal distribution");
    let h = cfg.hidden_size;
    let mut out = HashMap::new();
    let mut put = |name: String, shape: Vec<usize>, kind: u8, rng: &mut rand_chacha::ChaCha8Rng| -> Result<()> {
        let n: usize = shape.iter().product();
        let data: Vec<f32> = match kind {
            b'n' => (0..n).map(|_| normal.sample(rng)).collect(),
            b'1' => vec![1.0; n],
            _ => vec![0.0; n],
        };
        out.insert(name, Tensor::from_vec(data, shape, device)?);
        Ok(())
    };
    // Sorted order of creation fixes what each draw is used for.
    put("embeddings.word_embeddings.weight".into(), vec![cfg.vocab_size, h], b'n', rng)?;
    put("embeddings.position_embeddings.weight".into(), vec![cfg.max_position_embeddings, h], b'n', rng)?;
    put("embeddings.token_type_embeddings.weight".into(), vec![cfg.type_vocab_size, h], b'n', rng)?;
    put("embeddings.LayerNorm.weight".into(), vec![h], b'1', rng)?;
    put("embeddings.LayerNorm.bias".into(), vec![h], b'0', rng)?;
    for i in 0..cfg.num_hidden_layers {
        let p = format!("encoder.layer.{i}");
        let linears = [
            ("attention.self.query", h, h),
            ("attention.self.key", h, h),
            ("attention.self.value", h, h),
            ("attention.output.dense", h, h),
            ("intermediate.dense", h, cfg.intermediate_size),
            ("output.dense", cfg.intermediate_size, h),
        ];
        for (name, i_dim, o_dim) in linears {
            put(format!("{p}.{name}.weight"), vec![o_dim, i_dim], b'n', rng)?;
            put(format!("{p}.{name}.bias"), vec![o_dim], b'0', rng)?;
        }
        for ln in ["attention.output.LayerNorm", "output.LayerNorm"] {
            put(format!("{p}.{ln}.weight"), vec![h], b'1', rng)?;
            put(format!("{p}.{ln}.bias"), vec![h], b'0', rng)?;
        }
    }
    // Hugging Face zeroes the padding row of the word embeddings.
    let pad = cfg.pad_id() as usize;
    if pad < cfg.vocab_size {
        let w = &out["embeddings.word_embeddings.weight"];
        let mut rows = w.to_vec2::<f32>()?;
        rows[pad].iter_mut().for_each(|x| *x = 0.0);
        let rows: Vec<f32> = rows.into_iter().flatten().collect();
        out.insert("embeddings.word_embeddings.weight".into(), Tensor::from_vec(rows, (cfg.vocab_size, h), device)?);
    }
    Ok(out)
}

/// The tensor names that `allowed` refuses: how many there are, and the first in sorted order
/// (for an error that names one). `None` when every name is allowed.
pub fn unexpected_tensors<'a>(
    names: impl IntoIterator<Item = &'a String>,
    allowed: impl Fn(&str) -> bool,
) -> Option<(usize, &'a str)> {
    let mut extra: Vec<&String> = names.into_iter().filter(|n| !allowed(n)).collect();
    extra.sort();
    extra.first().map(|first| (extra.len(), first.as_str()))
}

/// `encoder.layer.7.attention...` → `Some(7)`.
pub fn layer_index(name: &str) -> Option<usize> {
    name.strip_prefix("encoder.layer.")?.split('.').next()?.parse().ok()
}

/// Trainable parameters: every encoder (or head) tensor as a [`Var`], by canonical name.
#[derive(Clone, Default)]
pub struct Params {
    pub vars: Vec<(String, Var)>,
}

impl Params {
    /// Turn tensors into variables; returns the map of their tensor views (which track gradients)
    /// for building the model, and the parameter list for the optimiser.
    pub fn from_tensors(tensors: HashMap<String, Tensor>) -> Result<(HashMap<String, Tensor>, Params)> {
        let mut names: Vec<String> = tensors.keys().cloned().collect();
        names.sort();
        let mut map = HashMap::new();
        let mut vars = Vec::new();
        for name in names {
            let var = Var::from_tensor(&tensors[&name])?;
            map.insert(name.clone(), var.as_tensor().clone());
            vars.push((name, var));
        }
        Ok((map, Params { vars }))
    }

    pub fn extend(&mut self, prefix: &str, other: Params) {
        for (n, v) in other.vars {
            self.vars.push((format!("{prefix}{n}"), v));
        }
    }

    pub fn num_elements(&self) -> usize {
        self.vars.iter().map(|(_, v)| v.elem_count()).sum()
    }

    pub fn tensors(&self) -> HashMap<String, Tensor> {
        self.vars.iter().map(|(n, v)| (n.clone(), v.as_tensor().clone())).collect()
    }

    /// Write all parameters to one safetensors file (atomically: temp file + rename).
    pub fn save(&self, path: &Path) -> Result<()> {
        save_tensors(&self.tensors(), path)
    }
}

/// Write tensors to a safetensors file via a temporary file and a rename.
pub fn save_tensors(tensors: &HashMap<String, Tensor>, path: &Path) -> Result<()> {
    let tmp = path.with_extension("safetensors.tmp");
    // Detach from any autograd graph and bring to the CPU before writing.
    let cpu: HashMap<String, Tensor> =
        tensors.iter().map(|(k, v)| Ok((k.clone(), v.detach().to_device(&Device::Cpu)?))).collect::<Result<_>>()?;
    candle_core::safetensors::save(&cpu, &tmp).with_context(|| format!("cannot write {}", tmp.display()))?;
    // The safetensors crate writes through a temporary file made with mode 0600: the weights
    // would be the one file of a model folder others cannot read (an outside probe). They get
    // the mode any new file gets here (0644 under the usual umask 022).
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o666 & !umask()))
            .with_context(|| format!("cannot set the permissions of {}", tmp.display()))?;
    }
    std::fs::rename(&tmp, path).with_context(|| format!("cannot move {} into place", path.display()))?;
    Ok(())
}

/// The process's file mode creation mask, read from /proc/self/status (setting it to read it
/// would race with other threads creating files); 0o022 where that cannot be read.
fn umask() -> u32 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| l.strip_prefix("Umask:").and_then(|m| u32::from_str_radix(m.trim(), 8).ok()))
        })
        .unwrap_or(0o022)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (name, storage key, storage size, offset, size, stride) of one tensor of [`torch_zip`].
    type PthEntry<'a> = (&'a str, &'a str, usize, usize, &'a [usize], &'a [usize]);

    /// A protocol-2 pickle of a state dict as torch.save writes it, in a zip at `path`: per
    /// tensor a [`PthEntry`], float32 storages under `archive/data/KEY` holding 0, 1, 2, ….
    fn torch_zip(path: &Path, tensors: &[PthEntry]) {
        use std::io::Write;
        let mut p = b"\x80\x02}(".to_vec();
        let unicode = |p: &mut Vec<u8>, s: &str| {
            p.push(b'X');
            p.extend((s.len() as u32).to_le_bytes());
            p.extend(s.as_bytes());
        };
        let int = |p: &mut Vec<u8>, v: usize| p.extend([b'K', v as u8]);
        for &(name, key, storage, offset, size, stride) in tensors {
            unicode(&mut p, name);
            p.extend(b"ctorch._utils\n_rebuild_tensor_v2\n((");
            unicode(&mut p, "storage");
            p.extend(b"ctorch\nFloatStorage\n");
            unicode(&mut p, key);
            unicode(&mut p, "cpu");
            int(&mut p, storage);
            p.extend(b"tQ");
            int(&mut p, offset);
            for dims in [size, stride] {
                p.push(b'(');
                dims.iter().for_each(|&d| int(&mut p, d));
                p.push(b't');
            }
            p.extend(b"\x89ccollections\nOrderedDict\n)RtR");
        }
        p.extend(b"u.");
        let mut zip = zip::ZipWriter::new(std::fs::File::create(path).unwrap());
        let opts = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
        zip.start_file("archive/data.pkl", opts).unwrap();
        zip.write_all(&p).unwrap();
        for &(_, key, storage, ..) in tensors {
            zip.start_file(format!("archive/data/{key}"), opts).unwrap();
            let data: Vec<u8> = (0..storage).flat_map(|i| (i as f32).to_le_bytes()).collect();
            zip.write_all(&data).unwrap();
        }
        zip.finish().unwrap();
    }

    /// A strided view stored by torch.save (`big[:, ::2]`) is refused by file and tensor, with
    /// what to do; before, candle's "cannot retrieve non-contiguous tensors Layout { … }" was all
    /// (an outside probe). An offset view and a transposed tensor read their values.
    #[test]
    fn a_strided_view_in_a_pytorch_checkpoint_is_named_with_a_way_out() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pytorch_model.bin");
        torch_zip(
            &path,
            &[
                ("strided.weight", "0", 8, 0, &[2, 2], &[4, 2]),
                ("offset.weight", "1", 6, 2, &[2, 2], &[2, 1]),
                ("transposed.weight", "2", 6, 0, &[2, 3], &[1, 2]),
            ],
        );
        let file = CheckpointFile::open(&path, &|_| true).unwrap();
        let e = format!("{:#}", file.get("strided.weight").unwrap_err());
        assert!(
            e.contains(&format!(
                "{}: tensor strided.weight is a strided view (shape [2, 2], strides [4, 2]",
                path.display()
            )) && e.contains("save_pretrained(dir, safe_serialization=True)")
                && e.contains(".contiguous()"),
            "{e}"
        );
        assert!(!e.contains("Layout"), "{e}");
        let got = file.get("offset.weight").unwrap().to_vec2::<f32>().unwrap();
        assert_eq!(got, [[2.0, 3.0], [4.0, 5.0]]);
        let got = file.get("transposed.weight").unwrap().to_vec2::<f32>().unwrap();
        assert_eq!(got, [[0.0, 2.0, 4.0], [1.0, 3.0, 5.0]]);
    }

    /// Saved weights get the mode any new file gets (the crate's temporary file is 0600).
    #[test]
    fn saved_weights_have_the_mode_of_new_files() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let t = HashMap::from([("w".to_string(), Tensor::zeros(2, candle_core::DType::F32, &Device::Cpu).unwrap())]);
        save_tensors(&t, &dir.path().join("model.safetensors")).unwrap();
        std::fs::write(dir.path().join("plain.txt"), "x").unwrap();
        let mode = |f: &str| std::fs::metadata(dir.path().join(f)).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode("model.safetensors"), mode("plain.txt"));
    }

    /// A weight stored as integers is refused, naming the tensor, its file and its type; an
    /// integer position_ids buffer and float weights of any width load.
    #[test]
    fn integer_weights_are_refused_naming_the_tensor() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.safetensors");
        let cpu = &Device::Cpu;
        let base = || {
            HashMap::from([
                ("embeddings.word_embeddings.weight".to_string(), Tensor::zeros((4, 2), DType::F32, cpu).unwrap()),
                ("embeddings.position_ids".to_string(), Tensor::zeros((1, 4), DType::I64, cpu).unwrap()),
                ("encoder.layer.0.output.dense.bias".to_string(), Tensor::zeros(2, DType::BF16, cpu).unwrap()),
            ])
        };
        save_tensors(&base(), &path).unwrap();
        let t = load_encoder_tensors(std::slice::from_ref(&path), cpu, 1).unwrap();
        assert_eq!(t.len(), 3);
        assert!(t.values().all(|t| t.dtype() == DType::F32));
        for (name, dtype) in [
            ("encoder.layer.0.output.dense.bias", DType::I32),
            ("embeddings.word_embeddings.weight", DType::U8),
            ("embeddings.word_embeddings.weight", DType::I64),
        ] {
            let mut t = base();
            let shape = t[name].shape().clone();
            t.insert(name.to_string(), Tensor::zeros(shape, dtype, cpu).unwrap());
            save_tensors(&t, &path).unwrap();
            let e = load_encoder_tensors(std::slice::from_ref(&path), cpu, 1).unwrap_err().to_string();
            assert!(
                e.contains(name) && e.contains(&format!("{dtype:?}")) && e.contains("model.safetensors"),
                "{name} {dtype:?}: {e}"
            );
        }
    }

    #[test]
    fn canonical_names() {
        assert_eq!(canonical_name("bert.embeddings.LayerNorm.gamma", "bert.").unwrap(), "embeddings.LayerNorm.weight");
        assert_eq!(canonical_name("bert.embeddings.LayerNorm.beta", "bert.").unwrap(), "embeddings.LayerNorm.bias");
        assert_eq!(
            canonical_name("roberta.encoder.layer.0.output.dense.weight", "roberta.").unwrap(),
            "encoder.layer.0.output.dense.weight"
        );
        assert!(canonical_name("lm_head.dense.weight", "roberta.").is_none());
        assert!(canonical_name("cls.predictions.bias", "bert.").is_none());
        assert!(canonical_name("pooler.dense.weight", "").is_none());
        assert_eq!(layer_index("encoder.layer.11.output.LayerNorm.bias"), Some(11));
        assert_eq!(layer_index("embeddings.word_embeddings.weight"), None);
    }

    #[test]
    fn prefix_detection() {
        let names = vec!["lm_head.bias".to_string(), "roberta.embeddings.word_embeddings.weight".to_string()];
        assert_eq!(detect_prefix(&names).unwrap(), "roberta.");
        let names = vec!["embeddings.word_embeddings.weight".to_string()];
        assert_eq!(detect_prefix(&names).unwrap(), "");
        let err = detect_prefix(&vec!["foo.weight".to_string()]).unwrap_err().to_string();
        assert!(err.contains("word_embeddings"), "{err}");
    }

    /// A tensor under its old and its new LayerNorm name in one file is named as such (an
    /// outside probe: "in two weight files of one checkpoint, m/model.safetensors and
    /// m/model.safetensors"); heads are not returned, other tensors are (as foreign).
    #[test]
    fn one_tensor_under_two_names_and_foreign_tensors() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.safetensors");
        let t = |n: usize| Tensor::zeros(n, DType::F32, &Device::Cpu).unwrap();
        let mut m: HashMap<String, Tensor> = HashMap::from([
            ("embeddings.word_embeddings.weight".to_string(), t(4)),
            ("embeddings.LayerNorm.weight".to_string(), t(2)),
            ("pooler.dense.bias".to_string(), t(2)),
            ("foo.bar".to_string(), t(1)),
        ]);
        save_tensors(&m, &path).unwrap();
        let (tensors, _, foreign) = load_encoder_tensors_noting(std::slice::from_ref(&path), &Device::Cpu, 1).unwrap();
        assert_eq!((tensors.len(), foreign), (2, vec!["foo.bar".to_string()]));
        m.insert("embeddings.LayerNorm.gamma".to_string(), t(2));
        save_tensors(&m, &path).unwrap();
        let e = format!("{:#}", load_encoder_tensors_noting(std::slice::from_ref(&path), &Device::Cpu, 1).unwrap_err());
        assert!(e.contains("holds embeddings.LayerNorm.weight twice, as embeddings.LayerNorm."), "{e}");
    }

    /// A damaged safetensors file is named with the tensor at fault (the crate said "invalid
    /// shape, data type, or offset for tensor", or named another tensor for an offset past the
    /// end; an outside probe).
    #[test]
    fn damaged_safetensors_name_the_tensor() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.safetensors");
        let write = |header: &str, data: usize| {
            let mut b = (header.len() as u64).to_le_bytes().to_vec();
            b.extend_from_slice(header.as_bytes());
            b.extend(std::iter::repeat_n(0u8, data));
            std::fs::write(&path, b).unwrap();
        };
        let err = || format!("{:#}", read_weight_file(&path).unwrap_err());
        write(
            r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[3],"data_offsets":[8,20]}}"#,
            20,
        );
        assert_eq!(read_weight_file(&path).unwrap().len(), 2, "the well-formed file loads");
        write(
            r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[4],"data_offsets":[8,20]}}"#,
            20,
        );
        assert!(
            err().contains("tensor b is F32 of shape [4], 16 bytes, but its data_offsets [8, 20] give it 12 bytes"),
            "{}",
            err()
        );
        write(
            r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[3],"data_offsets":[8,20]}}"#,
            16,
        );
        assert!(
            err().contains("tensor b's data ends at byte 20 of the data, but the file holds 16 bytes"),
            "{}",
            err()
        );
        write(r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}"#, 12);
        assert!(err().contains("tensor a's data starts at byte 4 of the data, where 0 was expected"), "{}", err());
        // Bytes after the last tensor's data.
        write(r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#, 9);
        assert!(err().contains("its tensors' data ends at byte 8, but 9 bytes follow the header"), "{}", err());
        std::fs::write(&path, r#"{"metadata": {}, "weight_map": {"a": "model.safetensors"}}"#).unwrap();
        assert!(err().contains("it is JSON, not safetensors"), "{}", err());
        // A header whose length's low byte is `{` (123) is not taken for JSON: a cut file is
        // said to be cut. Padded with spaces to 123 bytes, as safetensors pads headers.
        let h = r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#;
        let header = format!("{h:<123}");
        write(&header, 8);
        assert_eq!(read_weight_file(&path).unwrap().len(), 1);
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() - 4]).unwrap();
        assert!(err().contains("tensor a's data ends at byte 8 of the data, but the file holds 4 bytes"), "{}", err());
        // I8 tensors are named only when the reader refused their data type.
        write(r#"{"q":{"dtype":"I8","shape":[2],"data_offsets":[0,2]}}"#, 2);
        assert!(err().contains("tensor q is I8, which xsent reads only in the int8 models"), "{}", err());
        write(r#"{"q":{"dtype":"I8","shape":[2],"data_offsets":[0,2]}}"#, 3);
        assert!(err().contains("bytes were added after it") && !err().contains("is I8"), "{}", err());
        assert_eq!(diagnose_safetensors(&path, false).unwrap(), diagnose_safetensors(&path, true).unwrap());
    }
}
