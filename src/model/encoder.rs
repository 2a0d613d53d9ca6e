//! The BERT / XLM-R encoder, written once for inference and training.
//!
//! Weight names are Hugging Face's (`embeddings.*`, `encoder.layer.N.*`). In [`Mode::Infer`]
//! it uses candle's fused LayerNorm and the masked-softmax kernel of `model::kernels` (no
//! autograd); in [`Mode::Train`] it uses differentiable ops (on the CPU custom ops with fused
//! backward kernels, `model::kernels`; elsewhere `layer_norm_slow` and `softmax`) and draws
//! dropout masks from a seeded RNG.
//! Both paths are tested to agree.

use super::config::{Activation, EncoderConfig, Family};
use anyhow::{bail, Result};
use candle_core::{DType, Device, Module, Tensor};
use candle_nn::VarBuilder;
use rand::Rng as _;

/// The seeded RNG used for dropout masks and everything else random in training.
pub type Rng = rand_chacha::ChaCha8Rng;

/// How a forward pass runs.
pub enum Mode<'a> {
    /// Fused kernels, no dropout, no gradient tracking needed.
    Infer,
    /// Differentiable ops; dropout masks drawn from the context's RNG (probabilities from the
    /// config or the encoder's override); token lookups recorded there when it asks for them.
    Train(&'a mut TrainContext),
}

/// What a training forward draws from and records into: the seeded RNG (dropout masks, and a
/// recipe's own sampling: the context derefs to [`Rng`], so it is an RNG itself) and, made with
/// [`recording`](Self::recording), the list of its row-sparse token lookups.
pub struct TrainContext {
    rng: Rng,
    lookups: Option<Vec<RowLookup>>,
}

impl TrainContext {
    /// Plain token lookups, with candle's dense gradient.
    pub fn new(rng: Rng) -> Self {
        Self { rng, lookups: None }
    }

    /// Row-sparse token lookups, recorded for [`take_lookups`](Self::take_lookups).
    ///
    /// A batch uses a few thousand rows of a token-embedding table (250,002 × 384 for
    /// e5-small), but the gradient candle builds for a lookup is dense: a zeroed table-sized
    /// tensor and a copy of it per lookup. With this context, a training forward on the CPU
    /// instead looks its tokens up in a leaf copy of the rows it uses (same values, so the same
    /// forward) and records it; the caller takes each leaf's gradient after backward and adds it
    /// to the table's gradient row by row (the trainer's shards do). A table that is not
    /// trainable is looked up the plain way.
    pub fn recording(rng: Rng) -> Self {
        Self { rng, lookups: Some(Vec::new()) }
    }

    /// The lookups recorded so far (none without [`recording`](Self::recording)).
    pub fn take_lookups(&mut self) -> Vec<RowLookup> {
        self.lookups.as_mut().map(std::mem::take).unwrap_or_default()
    }
}

impl std::ops::Deref for TrainContext {
    type Target = Rng;
    fn deref(&self) -> &Rng {
        &self.rng
    }
}

impl std::ops::DerefMut for TrainContext {
    fn deref_mut(&mut self) -> &mut Rng {
        &mut self.rng
    }
}

impl Mode<'_> {
    pub fn is_train(&self) -> bool {
        matches!(self, Mode::Train(_))
    }

    /// Inverted dropout with a mask drawn from the seeded RNG; identity in inference. On the CPU
    /// the mask is drawn element by element; on a GPU (and on the CPU under `XSENT_KERNELS=candle`)
    /// one seed is drawn and the device computes the mask from it ([`super::dropout`]).
    pub fn dropout(&mut self, x: &Tensor, p: f64) -> Result<Tensor> {
        match self {
            Mode::Train(rng) if p > 0.0 => {
                if p >= 1.0 {
                    return Ok(x.zeros_like()?);
                }
                let device_mask = !x.device().is_cpu() || super::kernels::candle_ops_forced();
                if device_mask && super::dropout::applies(x) {
                    // f32, or bf16 training's bf16 (the f32 op's scale and bits: the values
                    // widened, scaled in f32, rounded once).
                    if let Some(y) = super::dropout::apply(x, p, rng.random::<u64>())? {
                        return Ok(y);
                    }
                }
                if x.dtype() != DType::F32 {
                    // bf16 training: the f32 path's mask and scale (1/(1 − p) is not exact in bf16).
                    return Ok(self.dropout(&x.to_dtype(DType::F32)?, p)?.to_dtype(x.dtype())?);
                }
                let keep = (1.0 / (1.0 - p)) as f32;
                let p = p as f32;
                let mask: Vec<f32> =
                    (0..x.elem_count()).map(|_| if rng.random::<f32>() < p { 0.0 } else { keep }).collect();
                let mask = Tensor::from_vec(mask, x.shape(), x.device())?.to_dtype(x.dtype())?;
                super::kernels::dropout_mul(x, &mask)
            }
            _ => Ok(x.clone()),
        }
    }
}

/// One training lookup in a token-embedding table, recorded in a
/// [`TrainContext::recording`]: the table, the distinct rows the lookup used (ascending) and the
/// leaf that holds a copy of them.
pub struct RowLookup {
    pub table: Tensor,
    pub rows: Vec<u32>,
    pub leaf: candle_core::Var,
}

/// `table[ids]`, row-sparse in a [`TrainContext::recording`] (see there).
fn token_lookup(table: &Tensor, ids: &Tensor, mode: &mut Mode) -> Result<Tensor> {
    let Mode::Train(TrainContext { lookups: Some(recorded), .. }) = mode else {
        return Ok(table.embedding(ids)?);
    };
    let sparse = table.is_variable()
        && table.device().is_cpu()
        && !super::kernels::candle_ops_forced()
        && table.dtype() == DType::F32
        && ids.dtype() == DType::U32;
    if !sparse {
        return Ok(table.embedding(ids)?);
    }
    let ids: Vec<u32> = ids.to_vec1()?;
    let mut rows = ids.clone();
    rows.sort_unstable();
    rows.dedup();
    let vocab = table.dim(0)?;
    if let Some(&max) = rows.last() {
        if max as usize >= vocab {
            bail!("token id {max} is out of range for an embedding table of {vocab} rows");
        }
    }
    let local: Vec<u32> = ids.iter().map(|id| rows.partition_point(|r| r < id) as u32).collect();
    let dev = table.device();
    let picked = table.detach().index_select(&Tensor::from_slice(&rows, rows.len(), dev)?, 0)?;
    let leaf = candle_core::Var::from_tensor(&picked)?;
    let n = local.len();
    let x = leaf.as_tensor().embedding(&Tensor::from_vec(local, n, dev)?)?;
    recorded.push(RowLookup { table: table.clone(), rows, leaf });
    Ok(x)
}

/// `y = x Wᵀ + b` with Hugging Face's `[out, in]` weight layout; 3-D inputs are flattened so one
/// GEMM covers the whole batch.
#[derive(Clone, Debug)]
pub struct Linear {
    pub weight: Tensor,
    pub bias: Tensor,
    /// The int8 or bf16 copy of the weights that inference uses on the CPU (see
    /// [`super::quant`]); training and other devices use `weight`.
    pub reduced: Option<std::sync::Arc<super::quant::Reduced>>,
    /// While set, inference records the column maxima of this layer's inputs (int8 calibration).
    pub observe: Option<std::sync::Arc<super::quant::calibrate::ColumnMax>>,
}

impl Linear {
    pub fn new(weight: Tensor, bias: Tensor) -> Self {
        Self { weight, bias, reduced: None, observe: None }
    }

    pub fn load(vb: VarBuilder, in_dim: usize, out_dim: usize) -> Result<Self> {
        Ok(Self::new(vb.get((out_dim, in_dim), "weight")?, vb.get(out_dim, "bias")?))
    }

    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        if x.rank() != 2 {
            let dims = x.dims().to_vec();
            let in_dim = *dims.last().expect("linear input has a last dimension");
            let mut out_dims = dims;
            *out_dims.last_mut().unwrap() = self.weight.dim(0)?;
            return Ok(self.forward(&x.reshape((x.elem_count() / in_dim, in_dim))?)?.reshape(out_dims)?);
        }
        // In training (anything tracked) the fused linear op, whose backward gives the weight its
        // gradient in its own layout and the bias its column sums in one pass.
        if x.track_op() || self.weight.track_op() || self.bias.track_op() {
            return super::kernels::linear(x, &self.weight, &self.bias, true);
        }
        if let Some(o) = &self.observe {
            o.record(x)?;
        }
        if let Some(r) = &self.reduced {
            if x.device().is_cpu() && x.dtype() == candle_core::DType::F32 {
                return r.forward(&x.contiguous()?);
            }
        }
        super::kernels::linear(x, &self.weight, &self.bias, false)
    }
}

#[derive(Clone, Debug)]
pub struct LayerNorm {
    pub weight: Tensor,
    pub bias: Tensor,
    eps: f32,
}

impl LayerNorm {
    pub fn load(vb: VarBuilder, dim: usize, eps: f64) -> Result<Self> {
        Ok(Self { weight: vb.get(dim, "weight")?, bias: vb.get(dim, "bias")?, eps: eps as f32 })
    }

    fn forward(&self, x: &Tensor, mode: &Mode) -> Result<Tensor> {
        Ok(if mode.is_train() {
            // In bf16 training ([`Encoder::cast_linears`]) `x` is bf16 and the weights f32: the
            // statistics, scale and shift in f32, the output in bf16 (`layer_norm_train`).
            super::kernels::layer_norm_train(x, &self.weight, &self.bias, self.eps)?
        } else {
            candle_nn::ops::layer_norm(&x.contiguous()?, &self.weight, &self.bias, self.eps)?
        })
    }

    /// `forward(a + x)`; in inference one fused op (same bits).
    fn forward_sum(&self, a: &Tensor, x: &Tensor, mode: &Mode) -> Result<Tensor> {
        if mode.is_train() {
            self.forward(&(a + x)?, mode)
        } else {
            super::kernels::add_layer_norm_infer(a, x, &self.weight, &self.bias, self.eps)
        }
    }
}

impl Activation {
    fn apply(self, x: &Tensor, mode: &Mode) -> Result<Tensor> {
        Ok(match self {
            Self::GeluErf if !mode.is_train() => super::kernels::gelu_erf_infer(x)?,
            Self::GeluErf => super::kernels::gelu_erf_train(x)?,
            Self::GeluTanh => x.gelu()?,
            Self::Relu => x.relu()?,
            Self::Silu => candle_nn::Activation::Silu.forward(x)?,
        })
    }
}

#[derive(Clone, Debug)]
struct Embeddings {
    word: Tensor,
    position: Tensor,
    token_type: Tensor,
    norm: LayerNorm,
}

#[derive(Clone, Debug)]
struct Layer {
    query: Linear,
    key: Linear,
    value: Linear,
    attn_out: Linear,
    attn_norm: LayerNorm,
    intermediate: Linear,
    output: Linear,
    out_norm: LayerNorm,
}

/// A BERT- or XLM-R-family transformer encoder returning the last hidden state.
#[derive(Clone, Debug)]
pub struct Encoder {
    embeddings: Embeddings,
    layers: Vec<Layer>,
    family: Family,
    pad_id: u32,
    heads: usize,
    act: Activation,
    pub hidden_dropout: f64,
    pub attention_dropout: f64,
    hidden: usize,
}

/// Whether `tensors` (canonical names) are the weights `cfg` describes: the number of layers and
/// the shapes that config.json's sizes fix, each named by its key, so that a config.json that
/// does not belong to the weights is said to be so rather than found as a missing tensor.
pub fn check_config(tensors: &std::collections::HashMap<String, Tensor>, cfg: &EncoderConfig) -> Result<()> {
    let found = tensors.keys().filter_map(|k| super::weights::layer_index(k)).max().map_or(0, |m| m + 1);
    if found < cfg.num_hidden_layers {
        bail!(
            "{} layers are to be loaded (num_hidden_layers in config.json, or --layers), but the weights hold {found}: \
             config.json does not belong to these weights, or --layers asks for more than they have",
            cfg.num_hidden_layers
        );
    }
    let (h, i) = (cfg.hidden_size, cfg.intermediate_size);
    let expected: [(&str, [usize; 2], &str); 5] = [
        ("embeddings.word_embeddings.weight", [cfg.vocab_size, h], "vocab_size, hidden_size"),
        (
            "embeddings.position_embeddings.weight",
            [cfg.max_position_embeddings, h],
            "max_position_embeddings, hidden_size",
        ),
        ("embeddings.token_type_embeddings.weight", [cfg.type_vocab_size, h], "type_vocab_size, hidden_size"),
        ("encoder.layer.0.attention.self.query.weight", [h, h], "hidden_size, hidden_size"),
        ("encoder.layer.0.intermediate.dense.weight", [i, h], "intermediate_size, hidden_size"),
    ];
    for (name, want, keys) in expected {
        if let Some(t) = tensors.get(name) {
            if t.dims() != want {
                bail!(
                    "config.json's {keys} give {name} the shape {want:?}, but the weights hold {:?}: \
                     config.json does not belong to these weights (use the model's own)",
                    t.dims()
                );
            }
        }
    }
    Ok(())
}

/// The modules of each encoder layer, by Hugging Face name (`encoder.layer.{i}.{module}.weight`
/// and `.bias`).
pub const LAYER_MODULES: [&str; 8] = [
    "attention.self.query",
    "attention.self.key",
    "attention.self.value",
    "attention.output.dense",
    "attention.output.LayerNorm",
    "intermediate.dense",
    "output.dense",
    "output.LayerNorm",
];

/// The tensors of `tensors` that an encoder of `cfg` does not use (sorted), besides the
/// `embeddings.position_ids` buffer some checkpoints carry: more layers than `cfg` has, or
/// tensors of another architecture.
pub fn unused_tensors(tensors: &std::collections::HashMap<String, Tensor>, cfg: &EncoderConfig) -> Vec<String> {
    const EMBEDDINGS: [&str; 6] = [
        "word_embeddings.weight",
        "position_embeddings.weight",
        "token_type_embeddings.weight",
        "LayerNorm.weight",
        "LayerNorm.bias",
        "position_ids",
    ];
    // Each name is judged by itself: a set of every used name would grow with
    // num_hidden_layers, which config.json may set to anything (10^8 took 6.5 GB before the
    // check that the weights hold that many layers).
    let used = |k: &str| {
        if let Some(n) = k.strip_prefix("embeddings.") {
            return EMBEDDINGS.contains(&n);
        }
        let Some(rest) = k.strip_prefix("encoder.layer.") else { return false };
        let Some((i, rest)) = rest.split_once('.') else { return false };
        // As written by format!("{i}"): "01" is not layer 1.
        i.parse::<usize>().is_ok_and(|n| n < cfg.num_hidden_layers && n.to_string() == i)
            && rest.rsplit_once('.').is_some_and(|(m, p)| LAYER_MODULES.contains(&m) && (p == "weight" || p == "bias"))
    };
    let mut unused: Vec<String> = tensors.keys().filter(|k| !used(k)).cloned().collect();
    unused.sort();
    unused
}

impl Encoder {
    /// Build from a VarBuilder whose names are the canonical Hugging Face ones (no `bert.` prefix).
    pub fn load(vb: VarBuilder, cfg: &EncoderConfig) -> Result<Self> {
        let h = cfg.hidden_size;
        let eps = cfg.layer_norm_eps;
        let e = vb.pp("embeddings");
        let embeddings = Embeddings {
            word: e.get((cfg.vocab_size, h), "word_embeddings.weight")?,
            position: e.get((cfg.max_position_embeddings, h), "position_embeddings.weight")?,
            token_type: e.get((cfg.type_vocab_size, h), "token_type_embeddings.weight")?,
            norm: LayerNorm::load(e.pp("LayerNorm"), h, eps)?,
        };
        let mut layers = Vec::with_capacity(cfg.num_hidden_layers);
        for i in 0..cfg.num_hidden_layers {
            let l = vb.pp(format!("encoder.layer.{i}"));
            let a = l.pp("attention");
            layers.push(Layer {
                query: Linear::load(a.pp("self.query"), h, h)?,
                key: Linear::load(a.pp("self.key"), h, h)?,
                value: Linear::load(a.pp("self.value"), h, h)?,
                attn_out: Linear::load(a.pp("output.dense"), h, h)?,
                attn_norm: LayerNorm::load(a.pp("output.LayerNorm"), h, eps)?,
                intermediate: Linear::load(l.pp("intermediate.dense"), h, cfg.intermediate_size)?,
                output: Linear::load(l.pp("output.dense"), cfg.intermediate_size, h)?,
                out_norm: LayerNorm::load(l.pp("output.LayerNorm"), h, eps)?,
            });
        }
        Ok(Self {
            embeddings,
            layers,
            family: cfg.family()?,
            pad_id: cfg.pad_id(),
            heads: cfg.num_attention_heads,
            act: Activation::parse(&cfg.hidden_act)?,
            hidden_dropout: cfg.hidden_dropout_prob,
            attention_dropout: cfg.attention_probs_dropout_prob,
            hidden: h,
        })
    }

    pub fn hidden_size(&self) -> usize {
        self.hidden
    }

    /// For each of [`Self::linears_mut`], the scale and shift of the LayerNorm whose output it
    /// takes (query, key and value: the previous layer's output norm or the embeddings' norm;
    /// intermediate: the attention norm; the others take no LayerNorm output).
    #[allow(clippy::type_complexity)]
    pub fn linear_inputs(&self) -> Result<Vec<Option<(Vec<f32>, Vec<f32>)>>> {
        let v = |n: &LayerNorm| -> Result<(Vec<f32>, Vec<f32>)> { Ok((n.weight.to_vec1()?, n.bias.to_vec1()?)) };
        let mut out = Vec::new();
        for (i, l) in self.layers.iter().enumerate() {
            let before = v(if i == 0 { &self.embeddings.norm } else { &self.layers[i - 1].out_norm })?;
            out.extend([Some(before.clone()), Some(before.clone()), Some(before), None, Some(v(&l.attn_norm)?), None]);
        }
        Ok(out)
    }

    /// The transformer layers' linear layers (6 per layer), for [`super::quant`].
    pub fn linears_mut(&mut self) -> impl Iterator<Item = &mut Linear> {
        self.layers
            .iter_mut()
            .flat_map(|l| [&mut l.query, &mut l.key, &mut l.value, &mut l.attn_out, &mut l.intermediate, &mut l.output])
    }

    /// A copy whose weights are detached from autograd but share storage with these: inference
    /// on it records no graph, and it sees in-place optimiser updates of the trainable weights.
    pub fn detached(&self) -> Self {
        self.map_tensors(&|t: &Tensor| Ok(t.detach())).expect("detach cannot fail")
    }

    /// A copy with every weight in `dtype` (bf16 or f16 inference off the CPU's kernels: the
    /// matrix products, activations and weights in `dtype`; candle's LayerNorm and softmax
    /// kernels keep their statistics in f32; [`Self::forward`] returns f32). Inference only.
    pub fn to_dtype(&self, dtype: DType) -> Result<Self> {
        let mut e = self.map_tensors(&|t: &Tensor| Ok(t.detach().to_dtype(dtype)?))?;
        for l in e.linears_mut() {
            l.reduced = None;
        }
        Ok(e)
    }

    /// A copy for mixed-precision training: the transformer layers' linear weights and biases
    /// cast to `dtype` by tracked casts (their gradients reach these weights, the f32 masters),
    /// the embeddings and LayerNorms kept as they are. Its forward runs the layers' products
    /// and activations in `dtype`, the embeddings, LayerNorm and softmax in f32, and returns
    /// f32. Make it once per optimiser step: the casts copy the weights as they are then.
    pub fn cast_linears(&self, dtype: DType) -> Result<Self> {
        let mut e = self.clone();
        for l in e.linears_mut() {
            l.weight = l.weight.to_dtype(dtype)?;
            l.bias = l.bias.to_dtype(dtype)?;
            l.reduced = None;
        }
        Ok(e)
    }

    /// The element type of the weights (f32 unless made by [`Self::to_dtype`]).
    pub fn dtype(&self) -> DType {
        self.embeddings.word.dtype()
    }

    /// A copy with `f` applied to every weight (the reduced copies are kept).
    fn map_tensors(&self, f: &dyn Fn(&Tensor) -> Result<Tensor>) -> Result<Self> {
        let lin = |l: &Linear| -> Result<Linear> {
            Ok(Linear {
                weight: f(&l.weight)?,
                bias: f(&l.bias)?,
                reduced: l.reduced.clone(),
                observe: l.observe.clone(),
            })
        };
        let norm = |n: &LayerNorm| -> Result<LayerNorm> {
            Ok(LayerNorm { weight: f(&n.weight)?, bias: f(&n.bias)?, eps: n.eps })
        };
        let e = &self.embeddings;
        Ok(Self {
            embeddings: Embeddings {
                word: f(&e.word)?,
                position: f(&e.position)?,
                token_type: f(&e.token_type)?,
                norm: norm(&e.norm)?,
            },
            layers: self
                .layers
                .iter()
                .map(|l| {
                    Ok(Layer {
                        query: lin(&l.query)?,
                        key: lin(&l.key)?,
                        value: lin(&l.value)?,
                        attn_out: lin(&l.attn_out)?,
                        attn_norm: norm(&l.attn_norm)?,
                        intermediate: lin(&l.intermediate)?,
                        output: lin(&l.output)?,
                        out_norm: norm(&l.out_norm)?,
                    })
                })
                .collect::<Result<_>>()?,
            ..self.clone()
        })
    }

    pub fn num_layers(&self) -> usize {
        self.layers.len()
    }

    pub fn device(&self) -> &Device {
        self.embeddings.word.device()
    }

    /// The token embedding table `[vocab, hidden]` (shared with generative heads that tie to it).
    pub fn word_embeddings(&self) -> &Tensor {
        &self.embeddings.word
    }

    /// Position ids from the attention mask: BERT `0..L`; XLM-R `pad + 1 + cumsum(mask)` on
    /// attended tokens and `pad` elsewhere (as Hugging Face computes them, but from the mask).
    fn position_ids(&self, mask: &Tensor) -> Result<Tensor> {
        if !mask.device().is_cpu() {
            return self.position_ids_on_device(mask);
        }
        let (b, l) = mask.dims2()?;
        let rows = mask.to_dtype(DType::F32)?.to_vec2::<f32>()?;
        let mut pos = Vec::with_capacity(b * l);
        for row in rows {
            let mut count = 0u32;
            for (i, m) in row.into_iter().enumerate() {
                match self.family {
                    Family::Bert => pos.push(i as u32),
                    Family::XlmRoberta => {
                        if m > 0.0 {
                            count += 1;
                            pos.push(self.pad_id + count);
                        } else {
                            pos.push(self.pad_id);
                        }
                    }
                }
            }
        }
        let max_pos = self.embeddings.position.dim(0)?;
        if let Some(&p) = pos.iter().max() {
            if p as usize >= max_pos {
                bail!("input of {l} tokens needs position {p} but the model has {max_pos} position embeddings; lower --max-length");
            }
        }
        Ok(Tensor::from_vec(pos, (b * l,), mask.device())?)
    }

    /// [`Self::position_ids`] computed where the mask lives (a GPU), without reading it back:
    /// BERT `0..L`; XLM-R `pad + cumsum(mask) · mask + pad · (1 − mask)`, the same integers. The
    /// range check uses the longest position the padded length allows.
    fn position_ids_on_device(&self, mask: &Tensor) -> Result<Tensor> {
        let (b, l) = mask.dims2()?;
        let max_pos = self.embeddings.position.dim(0)?;
        let last = match self.family {
            Family::Bert => l.saturating_sub(1),
            Family::XlmRoberta => self.pad_id as usize + l,
        };
        if l > 0 && last >= max_pos {
            bail!("input of {l} tokens needs position {last} but the model has {max_pos} position embeddings; lower --max-length");
        }
        let pos = match self.family {
            Family::Bert => {
                Tensor::arange(0u32, l as u32, mask.device())?.unsqueeze(0)?.broadcast_as((b, l))?.contiguous()?
            }
            Family::XlmRoberta => {
                let m = mask.to_dtype(DType::F32)?;
                (m.cumsum(1)?.mul(&m)? + self.pad_id as f64)?.to_dtype(DType::U32)?
            }
        };
        Ok(pos.flatten_all()?)
    }

    /// `input_ids` `[B, L]` (u32), `attention_mask` `[B, L]` (1 = token, 0 = padding; any dtype).
    /// Returns the last hidden state `[B, L, H]`.
    pub fn forward(&self, input_ids: &Tensor, attention_mask: &Tensor, mode: &mut Mode) -> Result<Tensor> {
        self.forward_layers(input_ids, attention_mask, self.layers.len(), mode)
    }

    /// Like [`forward`](Self::forward) but returns the hidden state after the first `n` layers
    /// (`n = 0`: the embedding output).
    pub fn forward_layers(
        &self,
        input_ids: &Tensor,
        attention_mask: &Tensor,
        n: usize,
        mode: &mut Mode,
    ) -> Result<Tensor> {
        if n > self.layers.len() {
            bail!("asked for layer {n} of an encoder with {} layers", self.layers.len());
        }
        let (b, l) = input_ids.dims2()?;
        let h = self.hidden;
        let mask = attention_mask.to_dtype(DType::F32)?;
        let pos = self.position_ids(&mask)?;
        let e = &self.embeddings;
        let ids = input_ids.flatten_all()?;
        // Activations stay [B·L, H] through the layers (one node less per linear layer in
        // training, no reshapes around the GEMMs); only attention sees [B, heads, L, d].
        let x = token_lookup(&e.word, &ids, mode)?.add(&e.position.embedding(&pos)?)?;
        let x = x.broadcast_add(&e.token_type.get(0)?)?;
        let x = e.norm.forward(&x, mode)?;
        let mut x = mode.dropout(&x, self.hidden_dropout)?;
        // After [`Self::cast_linears`] the layers run in their linears' dtype.
        let compute = self.layers.first().map_or(x.dtype(), |l| l.query.weight.dtype());
        if x.dtype() != compute {
            x = x.to_dtype(compute)?;
        }
        // Additive mask bias [B, 1, 1, L]: 0 where attended, a large negative where padded.
        // (In bf16 -1e30 stays finite; in f16 it becomes -inf, which softmax also maps to 0.)
        let mut bias = ((mask.ones_like()? - &mask)? * -1e30f64)?.reshape((b, 1, 1, l))?;
        let dtype = self.dtype();
        if dtype != DType::F32 {
            bias = bias.to_dtype(dtype)?;
        }
        for layer in &self.layers[..n] {
            x = self.layer_forward(layer, &x, (b, l), &bias, mode)?;
        }
        Ok(x.reshape((b, l, h))?.to_dtype(DType::F32)?)
    }

    /// One layer on `x` `[B·L, H]`.
    fn layer_forward(
        &self,
        layer: &Layer,
        x: &Tensor,
        (b, l): (usize, usize),
        bias: &Tensor,
        mode: &mut Mode,
    ) -> Result<Tensor> {
        let h = self.hidden;
        let (nh, hd) = (self.heads, h / self.heads);
        let split = |t: Tensor, scale| super::kernels::split_heads(&t, b, l, nh, scale);
        // The query's 1/√d is taken in its split (the same bits as a product before it).
        let q = split(layer.query.forward(x)?, Some(1.0 / (hd as f64).sqrt()))?;
        let k = split(layer.key.forward(x)?, None)?;
        let v = split(layer.value.forward(x)?, None)?;
        let scores = super::matmul::matmul(&q, &k.t()?)?;
        // In bf16 training ([`Self::cast_linears`]) the scores are bf16 and the bias f32: the
        // softmax is taken in f32, the probabilities rounded to bf16.
        let probs = super::kernels::masked_softmax(&scores, bias, mode.is_train())?;
        let probs = mode.dropout(&probs, self.attention_dropout)?;
        let ctx = super::kernels::merge_heads(&super::matmul::matmul(&probs, &v)?)?;
        let a = mode.dropout(&layer.attn_out.forward(&ctx)?, self.hidden_dropout)?;
        let x = layer.attn_norm.forward_sum(&a, x, mode)?;
        let mid = self.act.apply(&layer.intermediate.forward(&x)?, mode)?;
        let o = mode.dropout(&layer.output.forward(&mid)?, self.hidden_dropout)?;
        layer.out_norm.forward_sum(&o, &x, mode)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Unused tensors are found by name, in time and memory independent of num_hidden_layers
    /// (an outside probe: 10^8 in config.json took 6.5 GB and aborted before the layer count
    /// was checked against the weights).
    #[test]
    fn unused_tensors_do_not_grow_with_the_configured_layers() {
        let t = Tensor::zeros(1, DType::F32, &Device::Cpu).unwrap();
        let names = [
            "embeddings.word_embeddings.weight",
            "embeddings.position_ids",
            "embeddings.extra.weight",
            "encoder.layer.0.attention.self.query.weight",
            "encoder.layer.1.output.LayerNorm.bias",
            "encoder.layer.01.output.dense.weight",
            "encoder.layer.1.output.dense.scale",
            "encoder.layer.2.intermediate.dense.weight",
            "pooler.dense.weight",
        ];
        let tensors: std::collections::HashMap<String, Tensor> =
            names.iter().map(|n| (n.to_string(), t.clone())).collect();
        let mut cfg: EncoderConfig = serde_json::from_value(serde_json::json!({
            "model_type": "bert", "vocab_size": 50, "hidden_size": 8, "num_hidden_layers": 2,
            "num_attention_heads": 2, "intermediate_size": 16, "max_position_embeddings": 12
        }))
        .unwrap();
        let want = [
            "embeddings.extra.weight",
            "encoder.layer.01.output.dense.weight",
            "encoder.layer.1.output.dense.scale",
            "encoder.layer.2.intermediate.dense.weight",
            "pooler.dense.weight",
        ];
        assert_eq!(unused_tensors(&tensors, &cfg), want);
        cfg.num_hidden_layers = 1 << 60;
        assert_eq!(
            unused_tensors(&tensors, &cfg),
            want.iter().filter(|n| !n.contains("layer.2")).copied().collect::<Vec<_>>()
        );
    }

    fn encoder(model_type: &str) -> Encoder {
        let cfg: EncoderConfig = serde_json::from_value(serde_json::json!({
            "model_type": model_type, "vocab_size": 50, "hidden_size": 8, "num_hidden_layers": 1,
            "num_attention_heads": 2, "intermediate_size": 16, "max_position_embeddings": 12, "pad_token_id": 1
        }))
        .unwrap();
        let vm = candle_nn::VarMap::new();
        Encoder::load(VarBuilder::from_varmap(&vm, DType::F32, &Device::Cpu), &cfg).unwrap()
    }

    /// The GPU's position ids (computed from the mask where it lives) are the CPU's, for both
    /// families, padded rows included; both refuse a length the model has no positions for.
    #[test]
    fn position_ids_on_the_device_equal_the_host_ones() {
        for family in ["bert", "xlm-roberta"] {
            let e = encoder(family);
            let mask = Tensor::from_vec(
                vec![1f32, 1., 1., 0., 0., 1., 1., 1., 1., 1., 1., 0., 0., 0., 0.],
                (3, 5),
                &Device::Cpu,
            )
            .unwrap();
            let host = e.position_ids(&mask).unwrap().to_vec1::<u32>().unwrap();
            let dev = e.position_ids_on_device(&mask).unwrap().to_vec1::<u32>().unwrap();
            assert_eq!(host, dev, "{family}");
            let long = Tensor::ones((1, 12), DType::F32, &Device::Cpu).unwrap();
            assert_eq!(e.position_ids(&long).is_err(), e.position_ids_on_device(&long).is_err(), "{family}");
        }
    }
}
