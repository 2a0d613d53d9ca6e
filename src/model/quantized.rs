//! Quantised encoders: `--dtype` applied to an encoder's linear layers ([`apply`], with the
//! layers and kernels of [`super::quant`]), and the model directories `xsent quantize` writes
//! and `--model` loads.
//!
//! `model.safetensors` holds every encoder tensor under its canonical name; each linear layer
//! `P` of the encoder is stored reduced:
//! - int8: `P.weight` (I8 `[out, in]`, the per-channel symmetric values), `P.weight_scale`
//!   (F32 `[out]`) and `P.input_smooth` (F32 `[in]`, the smoothing factors `s` from calibration:
//!   the stored weights are `W diag(s)` quantised, and activations are divided by `s`; models an
//!   older xsent wrote may lack it on some layers); `W ≈ q · scale / s` column by column.
//! - bf16: `P.weight` (BF16 `[out, in]`).
//!
//! Everything else stays f32. `config.json` carries a `quantization_config` block with
//! `quant_method: "xsent"` and the `dtype`. Loading gives the layers exactly the weights
//! `--dtype int8|bf16` computes from the source model, so the vectors are the same bit for bit.

use super::quant::calibrate::{self, ColumnMax};
use super::quant::{check_positive, gemm_bf16, int8_weights_of, BLinear, Dtype, QLinear, Reduced};
use crate::model::config::{EncoderConfig, INT8_MODEL_TYPE};
use crate::model::encoder::Encoder;
use crate::model::weights;
use anyhow::{anyhow, bail, Context, Result};
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// `quant_method` in `config.json`'s `quantization_config`.
pub const METHOD: &str = "xsent";

/// The canonical names of the encoder's linear layers, in [`Encoder::linears_mut`]'s order.
pub fn linear_names(layers: usize) -> Vec<String> {
    (0..layers)
        .flat_map(|i| {
            [
                "attention.self.query",
                "attention.self.key",
                "attention.self.value",
                "attention.output.dense",
                "intermediate.dense",
                "output.dense",
            ]
            .map(|n| format!("encoder.layer.{i}.{n}"))
        })
        .collect()
}

/// The dtype a model's `config.json` (`raw`, read from `path`) says its linear layers are stored
/// in, or `None` for an ordinary model.
pub fn saved_dtype(raw: &serde_json::Value, path: &Path) -> Result<Option<Dtype>> {
    let Some(q) = raw.get("quantization_config") else { return Ok(None) };
    let method = q.get("quant_method").and_then(|v| v.as_str()).unwrap_or("");
    if method != METHOD {
        bail!(
            "{}: quantization_config names quant_method {method:?}; xsent loads only the quantised models `xsent quantize` writes \
             (quant_method \"xsent\"): use the unquantised model",
            path.display()
        );
    }
    match q.get("dtype").and_then(|v| v.as_str()) {
        Some("int8") => Ok(Some(Dtype::Int8)),
        Some("bf16") => Ok(Some(Dtype::Bf16)),
        other => bail!(
            "{}: quantization_config has dtype {other:?}; xsent quantize writes \"int8\" or \"bf16\"",
            path.display()
        ),
    }
}

/// Whether an int8 model's activations are asymmetric (a scale and an offset per row):
/// `quantization_config.activations_asymmetric`, absent (false) in directories written before
/// that scheme, which keep their symmetric rows.
/// Another value than true, false or none is an error naming `config` (it was read as false, a
/// silent change of the vectors).
pub fn saved_asymmetric(raw: &serde_json::Value, config: &Path) -> Result<bool> {
    match raw.get("quantization_config").and_then(|q| q.get("activations_asymmetric")) {
        None | Some(serde_json::Value::Null) => Ok(false),
        Some(serde_json::Value::Bool(b)) => Ok(*b),
        Some(other) => bail!(
            "{}: quantization_config.activations_asymmetric is {other}, not true or false; xsent quantize writes true",
            config.display()
        ),
    }
}

/// Refuse, before any work, a model to be trained (a student, a learner) that `xsent quantize`
/// wrote: loading it trainable fails, and in a recipe that load came only after minutes of work
/// (an outside probe: distill's teacher pass, 125 s, then the refusal; `train --check` passed
/// it). A hub id not in a local directory is checked when it loads.
pub fn refuse_for_training(spec: &str) -> Result<()> {
    let config = crate::model::source::local_dir(spec).join("config.json");
    if !config.is_file() {
        return Ok(());
    }
    let raw: serde_json::Value = match std::fs::read_to_string(&config).ok().and_then(|t| serde_json::from_str(&t).ok())
    {
        Some(v) => v,
        // An unreadable config is reported by the load, with its own message.
        None => return Ok(()),
    };
    effective_dtype(saved_dtype(&raw, &config)?, None, true, spec).map(|_| ())
}

/// The dtype to run a model stored in `saved` with, given `--dtype requested`.
pub fn effective_dtype(saved: Option<Dtype>, requested: Option<Dtype>, trainable: bool, spec: &str) -> Result<Dtype> {
    let Some(s) = saved else { return Ok(requested.unwrap_or_default()) };
    if trainable {
        bail!("{spec} holds {s} weights written by `xsent quantize`: it is for inference only; train from the f32 source model (its README.md names it)");
    }
    match requested {
        None => Ok(s),
        Some(r) if r == s => Ok(s),
        Some(r) => bail!(
            "{spec} holds {s} weights written by `xsent quantize`; --dtype {r} cannot run them: leave --dtype out (or pass --dtype {s}), \
             or load the f32 source model (its README.md names it)"
        ),
    }
}

/// The dtypes `--dtype` runs on `device`, for error messages.
fn supported_on(device: &candle_core::Device) -> &'static str {
    if device.is_cpu() {
        "f32, bf16 and int8"
    } else {
        "f32, bf16 and f16"
    }
}

/// Give the encoder's linear layers their `dtype` copies (f32: nothing to do). Inference only:
/// a trainable model, or a dtype the device has no kernels for, is refused with what to use.
/// int8 needs the column maxima of every linear layer's input (`maxima`, from
/// [`crate::model::SentenceEncoder::calibration_maxima`]); the other dtypes ignore them.
pub fn apply(
    encoder: &mut Encoder,
    dtype: Dtype,
    device: &candle_core::Device,
    trainable: bool,
    maxima: Option<&[Vec<f32>]>,
) -> Result<()> {
    check(dtype, device, trainable)?;
    // Off the CPU (or on it when the GPU's code paths are forced, for tests) bf16 and f16 are
    // the whole encoder in that dtype on candle's ops: cuBLAS's bf16/f16 products with f32
    // accumulation, candle's LayerNorm and softmax with f32 statistics, f32 pooling.
    let device_path = !device.is_cpu() || super::kernels::candle_ops_forced();
    match dtype {
        Dtype::F32 => {}
        Dtype::Bf16 | Dtype::F16 if device_path => {
            let dt = if dtype == Dtype::Bf16 { candle_core::DType::BF16 } else { candle_core::DType::F16 };
            *encoder = encoder.to_dtype(dt)?;
        }
        Dtype::Bf16 => {
            for l in encoder.linears_mut() {
                l.reduced = Some(std::sync::Arc::new(Reduced::Bf16(BLinear::from_f32(&l.weight, &l.bias)?)));
            }
        }
        Dtype::Int8 => {
            let maxima = maxima.context("int8 needs calibration (SentenceEncoder::calibration_maxima)")?;
            let layers = int8_layers(encoder, maxima)?;
            for (l, (q, scales, smooth)) in encoder.linears_mut().zip(layers) {
                let (n, k) = l.weight.dims2()?;
                let bias: Vec<f32> = l.bias.to_dtype(candle_core::DType::F32)?.to_vec1()?;
                let mut q = QLinear::from_int8_smoothed(&q, &scales, &bias, n, k, smooth.as_deref())?;
                q.set_asymmetric(true);
                l.reduced = Some(std::sync::Arc::new(Reduced::Int8(q)));
            }
        }
        Dtype::F16 => bail!("--dtype f16 runs on candle's ops only (a GPU): use --dtype f32, bf16 or int8 on the CPU"),
    }
    Ok(())
}

/// Refuse `dtype` where it cannot run: training, or a device without its kernels.
pub fn check(dtype: Dtype, device: &candle_core::Device, trainable: bool) -> Result<()> {
    if dtype == Dtype::F32 {
        return Ok(());
    }
    if trainable {
        bail!("--dtype {dtype} is for inference only: leave --dtype out when training (train.precision = \"bf16\" trains in bf16)");
    }
    // bf16/f16 on candle's ops off the CPU (or forced), and the CPU's own int8/bf16 kernels (int8
    // also when candle's ops are forced: it has no candle path).
    let device_path = !device.is_cpu() || super::kernels::candle_ops_forced();
    let ok = (device_path && matches!(dtype, Dtype::Bf16 | Dtype::F16))
        || (device.is_cpu() && matches!(dtype, Dtype::Int8 | Dtype::Bf16));
    if !ok {
        let on = if device.is_cpu() { "the CPU".to_string() } else { format!("{device:?}") };
        bail!(
            "--dtype {dtype} is not supported on {on}: it runs {} (use --dtype f32{})",
            supported_on(device),
            if device.is_cpu() { ", bf16 or int8" } else { ", bf16 or f16, or --device cpu for int8" }
        );
    }
    Ok(())
}

/// One int8 layer's values `[out, in]`, per-channel scales and smoothing factors (if any).
pub type Int8Parts = (Vec<i8>, Vec<f32>, Option<Vec<f32>>);

/// The int8 values, per-channel scales and smoothing factors of every linear layer of
/// `encoder`, with smoothing from `maxima` (each layer's input column maxima, in
/// [`Encoder::linears_mut`]'s order). Refused, naming the tensor or layer: weights with a NaN or
/// an infinity, maxima with one (the calibration forward met it), and a layer whose maxima are
/// all 0 (nothing reached it).
pub fn int8_layers(encoder: &mut Encoder, maxima: &[Vec<f32>]) -> Result<Vec<Int8Parts>> {
    let n = encoder.linears_mut().count();
    anyhow::ensure!(maxima.len() == n, "int8 calibration: {} layers' maxima for {n} linear layers", maxima.len());
    let mut out = Vec::new();
    for ((l, amax), name) in encoder.linears_mut().zip(maxima).zip(linear_names(n / 6)) {
        let (rows, k) = l.weight.dims2()?;
        let w: Vec<f32> = l.weight.to_dtype(DType::F32)?.flatten_all()?.to_vec1()?;
        // The weights first: broken weights make the maxima of the layers after them NaN too.
        super::quant::check_weights(&w, k).with_context(|| format!("cannot quantise tensor {name}.weight to int8"))?;
        check_maxima(amax, &name)?;
        let smooth = calibrate::smoothing_of(amax, &w, k)?;
        let (q, scales) = int8_weights_of(w, rows, k, Some(&smooth))
            .with_context(|| format!("cannot quantise tensor {name}.weight to int8"))?;
        out.push((q, scales, Some(smooth)));
    }
    Ok(out)
}

/// Refuses the calibration maxima of layer `name` when one is NaN or infinite, or all are 0.
fn check_maxima(amax: &[f32], name: &str) -> Result<()> {
    if let Some(c) = amax.iter().position(|m| !m.is_finite()) {
        bail!(
            "int8 calibration: the input of layer {name} reached {} (column {c}) in the f32 forward over the calibration text: \
             the model's weights before this layer are broken (NaN or infinite values, or values that overflow f32); use a checkpoint without them",
            amax[c]
        );
    }
    if !amax.is_empty() && amax.iter().all(|&m| m == 0.0) {
        bail!(
            "int8 calibration: every input column of layer {name} was 0 over the calibration text: nothing reaches this layer \
             (the model's weights before it are broken, e.g. a LayerNorm of zeros), so its smoothing cannot be calibrated; use intact weights"
        );
    }
    Ok(())
}

/// Make every linear layer of `encoder` record its inputs' column maxima in the f32 forwards
/// that follow (the int8 calibration; run it on a copy, which then is dropped): the recorders,
/// in [`Encoder::linears_mut`]'s order.
pub fn observe_inputs(encoder: &mut Encoder) -> Result<Vec<std::sync::Arc<ColumnMax>>> {
    anyhow::ensure!(
        encoder.linears_mut().all(|l| l.reduced.is_none()),
        "int8 calibration runs the f32 layers: calibrate before quantising"
    );
    Ok(encoder
        .linears_mut()
        .map(|l| {
            let c = std::sync::Arc::new(ColumnMax::default());
            l.observe = Some(c.clone());
            c
        })
        .collect())
}

/// Read an int8 model's weight files: the f32 tensors (each int8 weight dequantised, for the
/// f32 copy every [`crate::model::encoder::Linear`] keeps), the tensors of layers at index
/// `>= keep_layers` left out (their names), and the int8 layers by name. A scale
/// (`P.weight_scale`) or smoothing factor (`P.input_smooth`) that is not finite and positive is
/// refused, naming the file and the tensor.
#[allow(clippy::type_complexity)]
pub fn load_int8(
    paths: &[PathBuf],
    device: &Device,
    keep_layers: usize,
) -> Result<(HashMap<String, Tensor>, Vec<String>, HashMap<String, QLinear>)> {
    let mut f32s: HashMap<String, (Vec<f32>, Vec<usize>)> = HashMap::new();
    let mut ints: HashMap<String, (Vec<i8>, Vec<usize>)> = HashMap::new();
    let mut dropped = Vec::new();
    for path in paths {
        let bytes = std::fs::read(path).with_context(|| format!("cannot read weights {}", path.display()))?;
        let st = safetensors::SafeTensors::deserialize(&bytes).map_err(|e| {
            let why = weights::diagnose_safetensors(path, false).map(|w| format!(": {w}")).unwrap_or_default();
            anyhow::Error::from(e).context(format!("{} is not a readable safetensors file{why}", path.display()))
        })?;
        for (name, view) in st.tensors() {
            if weights::layer_index(&name).is_some_and(|l| l >= keep_layers) {
                dropped.push(name);
                continue;
            }
            let shape = view.shape().to_vec();
            match view.dtype() {
                safetensors::Dtype::F32 => {
                    let v: Vec<f32> =
                        view.data().chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
                    if name.ends_with(".weight_scale") || name.ends_with(".input_smooth") {
                        check_positive(&v, "element").with_context(|| {
                            format!(
                                "{}: tensor {name} (int8 scales and smoothing factors): the file is damaged; {REQUANTIZE}",
                                path.display()
                            )
                        })?;
                    }
                    f32s.insert(name, (v, shape));
                }
                safetensors::Dtype::I8 => {
                    ints.insert(name, (view.data().iter().map(|&b| b as i8).collect(), shape));
                }
                other => bail!("{}: tensor {name} is {other:?}; an int8 model written by xsent quantize holds only F32 and I8 tensors", path.display()),
            }
        }
    }
    let mut layers = HashMap::new();
    // Which layers go without smoothing factors: every xsent quantize stored them for the
    // layers a LayerNorm feeds (query, key, value, intermediate); the two others have them in
    // all layers (calibrated smoothing) or in none (the first scheme). Another pattern is a
    // damaged file, whose vectors would be wrong without a word (an outside probe: cosine 0.2).
    let mut unsmoothed: Vec<String> = Vec::new();
    let mut smoothed_outputs = 0;
    for (wname, (q, shape)) in ints {
        let Some(p) = wname.strip_suffix(".weight").map(str::to_string) else {
            bail!("int8 tensor {wname}: only linear layers' weights are stored in int8")
        };
        let [n, k] = shape[..] else { bail!("int8 tensor {wname} has shape {shape:?}, [out, in] expected") };
        let take = |suffix: &str, f32s: &mut HashMap<String, (Vec<f32>, Vec<usize>)>| {
            f32s.remove(&format!("{p}.{suffix}")).map(|(v, _)| v)
        };
        let scales = take("weight_scale", &mut f32s)
            .with_context(|| format!("int8 weights {wname} without their scales {p}.weight_scale"))?;
        let smooth = take("input_smooth", &mut f32s);
        // Shapes that do not go together: named by tensor (before, the layer's constructor said
        // only "768 smoothing factors expected, got 384").
        let damaged = |what: String| {
            anyhow!(
                "{}: the int8 weight {wname} is [{n}, {k}] but {what}: the file is damaged; {REQUANTIZE}",
                weights::describe(paths)
            )
        };
        if scales.len() != n {
            return Err(damaged(format!(
                "{p}.weight_scale has {} values, one per output row ({n}) expected",
                scales.len()
            )));
        }
        if let Some(sm) = smooth.as_ref().filter(|sm| sm.len() != k) {
            return Err(damaged(format!(
                "{p}.input_smooth has {} values, one per input column ({k}) expected",
                sm.len()
            )));
        }
        match (&smooth, is_output_layer(&p)) {
            (None, _) => unsmoothed.push(p.clone()),
            (Some(_), true) => smoothed_outputs += 1,
            (Some(_), false) => {}
        }
        let bias = f32s
            .get(&format!("{p}.bias"))
            .map(|(v, _)| v.clone())
            .with_context(|| format!("int8 weights {wname} without a bias {p}.bias"))?;
        let layer = QLinear::from_int8_smoothed(&q, &scales, &bias, n, k, smooth.as_deref())
            .with_context(|| format!("int8 layer {p}"))?;
        // The f32 copy: q · scale / s.
        let w: Vec<f32> = q
            .chunks_exact(k)
            .zip(&scales)
            .flat_map(|(row, &sc)| row.iter().enumerate().map(move |(c, &v)| (v as f32 * sc, c)))
            .map(|(v, c)| match &smooth {
                Some(s) => v / s[c],
                None => v,
            })
            .collect();
        f32s.insert(wname, (w, vec![n, k]));
        layers.insert(p, layer);
    }
    // Scales or smoothing factors left without their I8 weight: the weight was replaced (by an F32
    // one, say), which would otherwise be reported as unused tensors of the config.
    let mut orphans: Vec<&String> =
        f32s.keys().filter(|n| n.ends_with(".weight_scale") || n.ends_with(".input_smooth")).collect();
    orphans.sort();
    if let Some(o) = orphans.first() {
        let w = format!("{}.weight", o.rsplit_once('.').map_or(o.as_str(), |(p, _)| p));
        let stored = match f32s.get(&w) {
            Some(_) => "is stored as F32",
            None => "is missing",
        };
        bail!(
            "{}: {o} belongs to the int8 weight {w}, which {stored}: every linear layer's weight of an int8 model is I8; \
             the file is damaged or edited; {REQUANTIZE}",
            weights::describe(paths)
        );
    }
    unsmoothed.sort();
    let missing = unsmoothed.iter().find(|p| !is_output_layer(p) || smoothed_outputs > 0);
    if let Some(p) = missing {
        bail!(
            "{}: the int8 layer {p} has no smoothing factors {p}.input_smooth, which xsent quantize stores for it \
             ({} of the {} int8 layers lack them): the file is damaged; {REQUANTIZE}",
            weights::describe(paths),
            unsmoothed.len(),
            layers.len()
        );
    }
    let tensors = f32s
        .into_iter()
        .map(|(n, (v, s))| Ok((n, Tensor::from_vec(v, s, device)?)))
        .collect::<Result<HashMap<_, _>>>()?;
    Ok((tensors, dropped, layers))
}

/// What to do about a damaged int8 folder, in every message that finds one.
const REQUANTIZE: &str = "quantize the f32 source model again (its README.md names it)";

/// Whether a linear layer (its name without `.weight`) is one of a layer's two output
/// projections (`attention.output.dense`, `output.dense`), which no LayerNorm feeds.
fn is_output_layer(p: &str) -> bool {
    p.ends_with(".output.dense")
}

/// Give `encoder`'s linear layers the int8 layers read by [`load_int8`].
pub fn attach_int8(
    encoder: &mut Encoder,
    mut layers: HashMap<String, QLinear>,
    asymmetric: bool,
    device: &Device,
    spec: &str,
) -> Result<()> {
    if !device.is_cpu() {
        bail!("{spec} holds int8 weights written by `xsent quantize`, which run on the CPU only: use --device cpu, or the f32 source model on {device:?}");
    }
    let n = encoder.linears_mut().count() / 6;
    for (l, name) in encoder.linears_mut().zip(linear_names(n)) {
        let mut q =
            layers.remove(&name).with_context(|| format!("{spec}: the int8 model has no int8 weights for {name}"))?;
        q.set_asymmetric(asymmetric);
        l.reduced = Some(std::sync::Arc::new(Reduced::Int8(q)));
    }
    Ok(())
}

/// What [`quantize`] wrote.
pub struct Written {
    pub layers: usize,
    pub bytes: u64,
    pub source_bytes: u64,
}

/// `xsent quantize`: write `model` (a model directory or hub id) with its linear layers in
/// `dtype` to the directory `out` (see the module doc), with a model card. int8 is calibrated on
/// the sentences of the text file `calibration` (one per line), or on the built-in text.
/// `command` is the command line, for the card.
pub fn quantize(
    model: &str,
    out: &Path,
    dtype: Dtype,
    force: bool,
    command: &str,
    calibration: Option<&Path>,
) -> Result<Written> {
    if !matches!(dtype, Dtype::Int8 | Dtype::Bf16) {
        bail!("xsent quantize writes int8 or bf16 models, not {dtype} (--dtype int8|bf16)");
    }
    if std::fs::symlink_metadata(out).is_ok_and(|m| m.file_type().is_symlink()) {
        let to = std::fs::read_link(out).map(|t| format!(" (to {})", t.display())).unwrap_or_default();
        bail!(
            "{} is a symbolic link{to}; xsent quantize writes OUT as a new directory and neither writes through a link \
             nor replaces one: give a path that is not a link",
            out.display()
        );
    }
    if let Some(kind) = crate::model::embedder::saved_kind(model)?.filter(|k| k != "transformer") {
        bail!("{model} is an xsent {kind} model (its xsent.json says so); xsent quantize takes a BERT/XLM-R encoder model directory or hub id");
    }
    let files = crate::model::source::resolve(model)?;
    let cfg = EncoderConfig::from_file(&files.config)?;
    if let Some(d) = saved_dtype(&cfg.raw, &files.config)? {
        bail!("{model} is already quantised ({d}, its config.json says so): quantize the f32 source model");
    }
    if let Some(p) = &files.transformer_path {
        bail!(
            "{model} keeps its Transformer module in {p}/ (the layout of sentence-transformers before 2.0), which xsent quantize \
             does not write: save the model again with sentence-transformers 2 or later (SentenceTransformer(dir).save(new_dir)), \
             or move the files of {p}/ into the model's folder and set that module's \"path\" to \"\" in modules.json"
        );
    }
    crate::io::atomic::check_dir_name(out)?;
    let src_dir = files.dir();
    let (o, s) = (resolved(out), resolved(&src_dir));
    if o == s {
        bail!("the output directory {} is the source model's directory; choose another", out.display());
    }
    if o.starts_with(&s) {
        bail!(
            "the output directory {} is inside the source model's directory {}: the model's folder would then hold \
             its own quantised copy, which a later quantize of it would copy too; choose a directory outside it",
            out.display(),
            src_dir.display()
        );
    }
    if s.starts_with(&o) {
        bail!(
            "the source model's directory {} is inside the output directory {}, which quantize replaces; \
             choose another output directory",
            src_dir.display(),
            out.display()
        );
    }
    if out.exists() {
        if !force {
            bail!("{} exists; pass --force to replace it, or choose another output directory", out.display());
        }
        if let Err(why) = replaceable(out) {
            bail!(
                "{} exists and {why}; --force replaces only a model directory written by xsent quantize that holds nothing else: \
                 move what you keep there elsewhere, remove the folder yourself, or choose another output directory",
                out.display()
            );
        }
    }

    let tensors = weights::load_encoder_tensors(&files.weights, &Device::Cpu, cfg.num_hidden_layers)?;
    crate::model::encoder::check_config(&tensors, &cfg)
        .with_context(|| format!("{} and {}", files.config.display(), weights::describe(&files.weights)))?;
    check_finite_tensors(&tensors).with_context(|| weights::describe(&files.weights))?;
    if let Some(d) = &files.dense {
        // The Dense module is copied as it is: it must load (int8's calibration loads it too).
        crate::model::Dense::load(d, &Device::Cpu).context("the source model's Dense module")?;
    }
    let names = linear_names(cfg.num_hidden_layers);
    if calibration.is_some() && dtype != Dtype::Int8 {
        bail!("--calibration is for int8 (it sets int8's smoothing); {dtype} needs none");
    }
    // int8's calibration runs the f32 model over the text (tokenizer, encoder), as --dtype int8 does.
    let (calibrated, calibrated_on) = if dtype == Dtype::Int8 {
        let (texts, sha) = match calibration {
            Some(p) => {
                let (lines, sha) = read_calibration(p)?;
                (lines, Some(sha))
            }
            None => (calibrate::builtin().iter().map(|s| s.to_string()).collect(), None),
        };
        let opts = crate::model::LoadOptions { dtype: Some(Dtype::F32), ..Default::default() };
        let sentence_model = crate::model::SentenceEncoder::load(model, &opts)?;
        let (texts, source) = match (calibration, sha) {
            (Some(p), Some(sha)) => {
                let (texts, tokens) = calibration_sentences(&sentence_model, texts, p)?;
                let n = texts.len();
                (texts, format!("{n} sentences ({tokens} tokens) of `{}` (sha256 `{sha}`)", p.display()))
            }
            _ => (texts, calibrate::BUILTIN_SOURCE.to_string()),
        };
        let maxima = sentence_model.calibration_maxima(&texts).with_context(|| match calibration {
            Some(p) => format!("calibrating on {}", p.display()),
            None => "calibrating on the built-in text".to_string(),
        })?;
        (Some((maxima, sentence_model.encoder)), source)
    } else {
        (None, String::new())
    };

    // Every tensor as little-endian bytes, under its canonical name.
    let mut blobs: Vec<(String, safetensors::Dtype, Vec<usize>, Vec<u8>)> = Vec::new();
    let f32_bytes = |t: &Tensor| -> Result<Vec<u8>> {
        Ok(t.flatten_all()?.to_vec1::<f32>()?.iter().flat_map(|v| v.to_le_bytes()).collect())
    };
    let linear_weights: std::collections::HashSet<String> = names.iter().map(|n| format!("{n}.weight")).collect();
    for (name, t) in &tensors {
        if linear_weights.contains(name) || name == "embeddings.position_ids" {
            continue;
        }
        blobs.push((name.clone(), safetensors::Dtype::F32, t.dims().to_vec(), f32_bytes(t)?));
    }
    let mut smoothing_note = String::new();
    match dtype {
        Dtype::Int8 => {
            let (maxima, mut encoder) = calibrated.context("int8 without its calibration")?;
            let layers = int8_layers(&mut encoder, &maxima)?;
            let mut smoothed = 0;
            for (name, (q, scales, smooth)) in names.iter().zip(layers) {
                let (n, k) = (scales.len(), q.len() / scales.len());
                blobs.push((
                    format!("{name}.weight"),
                    safetensors::Dtype::I8,
                    vec![n, k],
                    q.iter().map(|&v| v as u8).collect(),
                ));
                blobs.push((
                    format!("{name}.weight_scale"),
                    safetensors::Dtype::F32,
                    vec![n],
                    scales.iter().flat_map(|v| v.to_le_bytes()).collect(),
                ));
                if let Some(s) = smooth {
                    smoothed += 1;
                    blobs.push((
                        format!("{name}.input_smooth"),
                        safetensors::Dtype::F32,
                        vec![k],
                        s.iter().flat_map(|v| v.to_le_bytes()).collect(),
                    ));
                }
            }
            smoothing_note = format!(
                "{smoothed} of the {} layers are smoothed (SmoothQuant, α = 0.5): s_c = sqrt(a_c / max_j abs(W_jc)), divided by their geometric mean, \
                 with a_c the largest abs(x_c) of the layer's input column c in an f32 forward over the calibration text: {calibrated_on}",
                names.len()
            );
        }
        _ => {
            let mut encoder = Encoder::load(VarBuilder::from_tensors(tensors.clone(), DType::F32, &Device::Cpu), &cfg)?;
            for (name, l) in names.iter().zip(encoder.linears_mut()) {
                let w: Vec<f32> = l.weight.flatten_all()?.to_vec1()?;
                let bits: Vec<u8> = w.iter().flat_map(|&v| gemm_bf16::to_bf16(v).to_le_bytes()).collect();
                blobs.push((format!("{name}.weight"), safetensors::Dtype::BF16, l.weight.dims().to_vec(), bits));
            }
        }
    }
    blobs.sort_by(|a, b| a.0.cmp(&b.0));

    let write = |tmp: &Path| -> Result<u64> {
        let views = blobs
            .iter()
            .map(|(n, d, s, b)| Ok((n.clone(), safetensors::tensor::TensorView::new(*d, s.clone(), b)?)))
            .collect::<Result<Vec<_>>>()?;
        let meta = HashMap::from([("format".to_string(), "pt".to_string())]);
        let wpath = tmp.join("model.safetensors");
        safetensors::serialize_to_file(views, Some(meta), &wpath)
            .with_context(|| format!("cannot write {}", wpath.display()))?;
        let mut raw = cfg.raw.clone();
        let block = serde_json::json!({
            "quant_method": METHOD,
            "dtype": dtype.to_string(),
            "layers": "encoder linear layers (query, key, value, attention output, intermediate, output)",
            "weights": if dtype == Dtype::Int8 { "per output channel, symmetric, [-127, 127], f32 scales (P.weight_scale); smoothing factors P.input_smooth" } else { "bf16, rounded to nearest even from f32" },
            "activations": if dtype == Dtype::Int8 { "per row at run time, asymmetric: a scale and an offset per row, all 256 levels" } else { "rounded to bf16 at run time; f32 sums" },
            "xsent_version": env!("CARGO_PKG_VERSION"),
        });
        let obj = raw.as_object_mut().context("config.json is not a JSON object")?;
        obj.insert("quantization_config".into(), block);
        if dtype == Dtype::Int8 {
            obj["quantization_config"]["calibration"] = calibrated_on.clone().into();
            obj["quantization_config"]["activations_asymmetric"] = true.into();
            // transformers would load the int8 values as weights (it skips an unknown
            // quant_method with a warning): an unknown model_type makes it refuse instead.
            let orig = obj.get("model_type").cloned().unwrap_or_default();
            obj["quantization_config"]["source_model_type"] = orig;
            obj.insert("model_type".into(), INT8_MODEL_TYPE.into());
        }
        let dense = files.dense.as_deref().and_then(|d| d.strip_prefix(&src_dir).ok());
        for note in copy_model_files(&src_dir, tmp, dense)? {
            crate::errln!("xsent quantize: not copied: {note}; only the model's own files and folders are copied");
        }
        if let Some(d) = &files.dense {
            // The loader reads the Dense module's config.json and its weights.
            let copied = dense.map(|r| tmp.join(r)).is_some_and(|c| {
                c.join("config.json").is_file()
                    && ["model.safetensors", "pytorch_model.bin"].iter().any(|f| c.join(f).is_file())
            });
            if !copied {
                bail!(
                    "the Dense module {} (modules.json lists it) was not copied with its config.json and weights: it is not a \
                     real subfolder of the model (xsent quantize does not follow links to folders); make it a subfolder of {}",
                    d.display(),
                    src_dir.display()
                );
            }
        }
        let mut sums = Vec::new();
        for w in &files.weights {
            sums.push(format!("| source weights | `{}` sha256 `{}` |", w.display(), sha256_file(w)?));
        }
        let card = format!(
            "# {name} ({dtype}, xsent quantize)\n\n\
             The encoder of `{src}` with its linear layers stored in {dtype}, written by `xsent quantize`. \
             `xsent embed|eval|mine --model {out}` loads it and runs {dtype} on the CPU; its vectors are those of \
             `--dtype {dtype}` on the source model, bit for bit.\n\n\
             | | |\n|---|---|\n\
             | source model | `{src}` |\n\
             {sums}\n\
             | xsent | {ver} (git commit {commit}) |\n\
             | command | `{command}` |\n\
             | method | {method} |\n\
             | date | {date} |\n\n\
             {loaders}\n",
            name = out.file_name().and_then(|n| n.to_str()).unwrap_or("model"),
            src = files.spec,
            out = out.display(),
            sums = sums.join("\n"),
            ver = env!("CARGO_PKG_VERSION"),
            commit = option_env!("XSENT_GIT_COMMIT").unwrap_or("unknown"),
            method = match dtype {
                Dtype::Int8 => format!(
                    "int8: weights per output channel, symmetric (scale = largest magnitude / 127, round to nearest even, [-127, 127]); activations per row at run time, \
                     asymmetric (a scale and an offset per row: the row's range onto [-128, 127]); \
                     int32 sums; bias and scales in f32. {smoothing_note}. Attention, softmax, LayerNorm and pooling run in f32."
                ),
                _ => "bf16: weights rounded to nearest even from f32; activations rounded to bf16 per call; sums in f32. Attention, softmax, LayerNorm and pooling run in f32."
                    .to_string(),
            },
            date = crate::clock::utc_now(),
            loaders = if dtype == Dtype::Int8 {
                "transformers and sentence-transformers refuse this directory: its config.json's model_type is \"xsent-int8\", \
                 which they do not know (the source's is kept in quantization_config.source_model_type). Load the source model with them."
            } else {
                "transformers and sentence-transformers load this directory as the source model with bf16-rounded linear weights \
                 (widened to f32), warning that they skip the unknown quantization_config."
            },
        );
        std::fs::write(tmp.join("README.md"), card)?;
        // Last, with the list of every file this run wrote (itself included): `--force` later
        // replaces the folder only while it holds nothing else.
        let mut written = files_under(tmp)?;
        written.push("config.json".into());
        written.sort();
        obj_files(&mut raw, written)?;
        std::fs::write(tmp.join("config.json"), serde_json::to_string_pretty(&raw)? + "\n")?;
        Ok(std::fs::metadata(&wpath)?.len())
    };
    // Checked again right before the move: a folder made at OUT while this ran is kept (and this
    // fails), and without --force nothing there is replaced.
    let replace = if force {
        crate::io::atomic::Replace::Only {
            what: "a model directory written by xsent quantize",
            check: &|d: &Path| replaceable(d).is_ok(),
        }
    } else {
        crate::io::atomic::Replace::Nothing
    };
    let bytes = crate::io::atomic::write_new_dir(out, "xsent quantize", replace, write)?;
    let source_bytes = files.weights.iter().filter_map(|w| std::fs::metadata(w).ok()).map(|m| m.len()).sum();
    Ok(Written { layers: names.len(), bytes, source_bytes })
}

/// Fewer sentences or tokens than this in a calibration text bring a warning: int8's smoothing
/// is set from the largest input each column saw, and a text this small leaves most inputs
/// unseen (an outside probe: one line, `a`, cut the lowest cosine to f32 over 300 Tatoeba
/// sentences from 0.992 to 0.72, with no word). The built-in text has 64 sentences.
const CALIBRATION_FEW_SENTENCES: usize = 32;
const CALIBRATION_FEW_TOKENS: usize = 512;

/// The sentences of a calibration text that keep a token once tokenised (a line of NUL bytes or
/// of characters the vocabulary drops is no sentence), and their tokens; none is an error, and
/// few a warning.
fn calibration_sentences(
    model: &crate::model::SentenceEncoder,
    lines: Vec<String>,
    p: &Path,
) -> Result<(Vec<String>, usize)> {
    let lines: Vec<String> = lines.into_iter().filter(|l| !l.trim().is_empty()).collect();
    if lines.is_empty() {
        bail!("the int8 calibration text has no sentences (one per line): {} holds only blank lines", p.display());
    }
    let counts = model.token_counts(&lines, true)?;
    let tokens: usize = counts.iter().sum();
    let kept: Vec<String> = lines.into_iter().zip(&counts).filter(|(_, &c)| c > 0).map(|(l, _)| l).collect();
    if kept.is_empty() {
        bail!(
            "the calibration text {} has no sentences with a token once tokenised ({} lines, each empty to the model's tokenizer): \
             give a few hundred sentences like the ones you will embed",
            p.display(),
            counts.len()
        );
    }
    if kept.len() < CALIBRATION_FEW_SENTENCES || tokens < CALIBRATION_FEW_TOKENS {
        crate::errln!(
            "xsent quantize: warning: the calibration text {} has only {} sentences ({tokens} tokens); int8's smoothing is set from the \
             largest input each column sees, and a text this small leaves most inputs unseen, which can cost much accuracy; \
             give a few hundred sentences like the ones you will embed (the built-in text has 64)",
            p.display(),
            kept.len()
        );
    }
    Ok((kept, tokens))
}

/// Put the list of the files written into the config's `quantization_config.files`.
fn obj_files(raw: &mut serde_json::Value, files: Vec<String>) -> Result<()> {
    let q = raw.get_mut("quantization_config").context("the config has no quantization_config")?;
    q["files"] = files.into();
    Ok(())
}

/// Whether `--force` may replace `dir`: a model directory written by `xsent quantize` (its
/// config.json says so) that holds only the files that run wrote (the list in its config.json),
/// so that nothing a user put there since (a report, notes) is lost. Else why not.
fn replaceable(dir: &Path) -> std::result::Result<(), String> {
    let config = std::fs::read_to_string(dir.join("config.json"))
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .and_then(|v| v.get("quantization_config").cloned())
        .filter(|q| q.get("quant_method").and_then(|m| m.as_str()) == Some(METHOD))
        .ok_or("is not a model directory written by xsent quantize (its config.json does not say so)")?;
    let Some(written) = config.get("files").and_then(|f| f.as_array()) else {
        return Err("was written by an older xsent quantize, which kept no list of its files, so whether it holds \
                    files of yours cannot be told"
            .into());
    };
    let written: std::collections::BTreeSet<&str> = written.iter().filter_map(|f| f.as_str()).collect();
    let present = files_under(dir).map_err(|e| format!("cannot be listed ({e:#})"))?;
    let others: Vec<&String> = present.iter().filter(|f| !written.contains(f.as_str())).collect();
    if !others.is_empty() {
        let shown: Vec<&str> = others.iter().take(5).map(|s| s.as_str()).collect();
        return Err(format!(
            "holds {} file(s) that xsent quantize did not write: {}{}",
            others.len(),
            shown.join(", "),
            if others.len() > shown.len() { ", …" } else { "" }
        ));
    }
    Ok(())
}

/// The files under `dir` (links not followed), as paths relative to it with `/`, sorted;
/// folders count through their files, and an empty folder as itself (`name/`).
fn files_under(dir: &Path) -> Result<Vec<String>> {
    fn walk(dir: &Path, rel: &str, out: &mut Vec<String>) -> Result<()> {
        let list = || format!("cannot list {}", dir.display());
        let mut empty = true;
        for entry in std::fs::read_dir(dir).with_context(list)? {
            let entry = entry.with_context(list)?;
            empty = false;
            let name = entry.file_name().to_string_lossy().into_owned();
            let path = format!("{rel}{name}");
            if entry.file_type().with_context(list)?.is_dir() {
                walk(&entry.path(), &format!("{path}/"), out)?;
            } else {
                out.push(path);
            }
        }
        if empty && !rel.is_empty() {
            out.push(rel.to_string());
        }
        Ok(())
    }
    let mut out = Vec::new();
    walk(dir, "", &mut out)?;
    out.sort();
    Ok(out)
}

/// `p` as an absolute path with links resolved, also when it does not exist yet: its nearest
/// existing ancestor canonicalised, and the rest as written (`.` dropped, `..` taken lexically).
fn resolved(p: &Path) -> PathBuf {
    let abs = std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    let mut rest = Vec::new();
    let mut base = abs.as_path();
    let mut out = loop {
        if let Ok(c) = base.canonicalize() {
            break c;
        }
        match (base.parent(), base.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_os_string());
                base = parent;
            }
            _ => break base.to_path_buf(),
        }
    };
    for c in rest.iter().rev() {
        out.push(c);
    }
    // absolute() keeps `..`; canonicalize() took those of the existing part.
    crate::io::lexical_clean(&out)
}

use crate::io::digest::sha256_file;

/// The most `--calibration` reads.
const CALIBRATION_MAX_BYTES: u64 = 16 << 20;

/// The lines of the calibration text `p` (UTF-8, gzip if its name ends in `.gz`, a BOM and CRs
/// dropped, as [`crate::data::read_lines`] reads them) and the sha256 of its bytes. At most
/// [`CALIBRATION_MAX_BYTES`] and one byte are read, whatever `p` is (a device or a pipe has no
/// size to check first); more is refused.
fn read_calibration(p: &Path) -> Result<(Vec<String>, String)> {
    use sha2::Digest;
    use std::io::Read;
    let too_large = || {
        anyhow::anyhow!(
            "the calibration text {} has more than {} MB; calibration needs a few hundred sentences, take at most {} MB of them",
            p.display(),
            CALIBRATION_MAX_BYTES >> 20,
            CALIBRATION_MAX_BYTES >> 20
        )
    };
    let cannot = || format!("cannot read the calibration text {}", p.display());
    let mut bytes = Vec::new();
    std::fs::File::open(p)
        .with_context(cannot)?
        .take(CALIBRATION_MAX_BYTES + 1)
        .read_to_end(&mut bytes)
        .with_context(cannot)?;
    if bytes.len() as u64 > CALIBRATION_MAX_BYTES {
        return Err(too_large());
    }
    let sha = crate::io::digest::hex(&sha2::Sha256::digest(&bytes));
    if p.extension().is_some_and(|e| e == "gz") {
        let mut text = Vec::new();
        flate2::read::MultiGzDecoder::new(&bytes[..])
            .take(CALIBRATION_MAX_BYTES + 1)
            .read_to_end(&mut text)
            .map_err(|e| anyhow::anyhow!("{} is not valid gzip: {e}", p.display()))?;
        if text.len() as u64 > CALIBRATION_MAX_BYTES {
            return Err(too_large());
        }
        bytes = text;
    }
    let lines = crate::data::text_lines(p, bytes)?;
    if lines.is_empty() {
        bail!("the calibration text {} is empty", p.display());
    }
    Ok((lines, sha))
}

/// Refuses a NaN or an infinity in any float tensor (canonical name; its row and column, or its
/// element): int8 would hide it (NaN quantises to 0) and bf16 would write a model whose vectors
/// are NaN. One pass, a million values at a time (no copy of a whole embedding matrix).
fn check_finite_tensors(tensors: &HashMap<String, Tensor>) -> Result<()> {
    const CHUNK: usize = 1 << 20;
    let mut names: Vec<&String> = tensors.keys().collect();
    names.sort();
    for name in names {
        let t = &tensors[name];
        if !t.dtype().is_float() {
            continue;
        }
        let flat = t.flatten_all()?;
        let n = flat.elem_count();
        for start in (0..n).step_by(CHUNK) {
            let v: Vec<f32> = flat.narrow(0, start, CHUNK.min(n - start))?.to_dtype(DType::F32)?.to_vec1()?;
            if let Some(i) = super::quant::first_non_finite(&v) {
                let at = match t.dims() {
                    [_, k] => format!("row {}, column {}", (start + i) / k, (start + i) % k),
                    _ => format!("element {}", start + i),
                };
                bail!(
                    "tensor {name}: {at} is {}: the weights are broken (e.g. NaN after a diverged training run); \
                     xsent quantize needs finite weights: use a checkpoint without NaN or infinite values",
                    v[i]
                );
            }
        }
    }
    Ok(())
}

/// Copy the tokenizer and sentence-transformers files of the model directory `src` into `dst`:
/// regular files, and symbolic links to regular files as their content (the hub cache's files
/// are links to blobs), in `src` and its real subfolders. Left out: hidden entries; at the top
/// level `config.json`, `README.md`, other formats' folders (onnx, openvino) and weight files
/// (the encoder's are written anew); weight files in subfolders other than the Dense module's
/// (`dense`, relative to `src`), which stay f32. Links to folders, links that lead nowhere and
/// what is not a file (pipes, sockets, devices) are skipped: returned, each with why, for a note.
fn copy_model_files(src: &Path, dst: &Path, dense: Option<&Path>) -> Result<Vec<String>> {
    let mut skipped = Vec::new();
    copy_folder(src, dst, Path::new(""), dense, &mut skipped)?;
    Ok(skipped)
}

/// [`copy_model_files`] of the folder `src` (at `rel` in the model directory).
fn copy_folder(src: &Path, dst: &Path, rel: &Path, dense: Option<&Path>, skipped: &mut Vec<String>) -> Result<()> {
    let top = rel.as_os_str().is_empty();
    let keep_weights = dense == Some(rel);
    let list = || format!("cannot list {}", src.display());
    for entry in std::fs::read_dir(src).with_context(list)? {
        let entry = entry.with_context(list)?;
        let name = entry.file_name();
        let shown = name.to_string_lossy();
        let path = entry.path();
        if shown.starts_with('.')
            || (top && matches!(shown.as_ref(), "config.json" | "README.md" | "onnx" | "openvino"))
        {
            continue;
        }
        // `file_type` does not follow a link; `metadata` does.
        let mut kind = entry.file_type().with_context(|| format!("cannot read {}", path.display()))?;
        if kind.is_symlink() {
            match std::fs::metadata(&path) {
                Ok(m) if m.is_file() => kind = m.file_type(),
                Ok(m) if m.is_dir() => {
                    skipped.push(format!("{} (a symbolic link to a folder)", path.display()));
                    continue;
                }
                Ok(_) => {
                    skipped.push(format!("{} (a symbolic link to something that is not a file)", path.display()));
                    continue;
                }
                Err(e) => {
                    skipped.push(format!("{} (a symbolic link that leads nowhere: {e})", path.display()));
                    continue;
                }
            }
        }
        if kind.is_dir() {
            let sub = dst.join(&name);
            std::fs::create_dir(&sub).with_context(|| format!("cannot create {}", sub.display()))?;
            copy_folder(&path, &sub, &rel.join(&name), dense, skipped)?;
        } else if kind.is_file() {
            let weightish = [".safetensors", ".bin", ".pt", ".pth", ".h5", ".msgpack", ".onnx", ".ot", ".index.json"]
                .iter()
                .any(|s| shown.ends_with(s));
            if weightish && !keep_weights {
                continue;
            }
            std::fs::copy(&path, dst.join(&name))
                .with_context(|| format!("cannot copy {} to {}", path.display(), dst.display()))?;
        } else {
            skipped.push(format!("{} (not a regular file: a pipe, socket or device)", path.display()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `resolved` follows links and `..` of the existing part and keeps the rest as typed.
    #[test]
    fn paths_resolve_whether_or_not_they_exist() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().canonicalize().unwrap();
        std::fs::create_dir(real.join("m")).unwrap();
        std::os::unix::fs::symlink(real.join("m"), real.join("l")).unwrap();
        assert_eq!(resolved(&real.join("m")), real.join("m"));
        assert_eq!(resolved(&real.join("l/x/y")), real.join("m/x/y"));
        assert_eq!(resolved(&real.join("l/../m/./x")), real.join("m/x"));
        assert_eq!(resolved(&real.join("new/../m/x")), real.join("m/x"));
        assert!(resolved(Path::new("rel")).is_absolute());
    }
}
