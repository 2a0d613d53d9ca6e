//! In-place fused AdamW (decoupled weight decay) with clipping by global gradient norm.
//!
//! On the CPU each parameter is updated by one pass over its memory (no temporaries), in
//! parallel for large tensors; `candle_nn::AdamW` allocates a dozen tensors per parameter per
//! step. Other devices use the same arithmetic through tensor ops.

use crate::model::weights::Params;
use anyhow::{ensure, Result};
use candle_core::backprop::GradStore;
use candle_core::{CpuStorage, DType, Layout, Tensor, Var};
use std::cell::RefCell;
use std::collections::HashMap;

#[derive(Debug, Clone, Copy, serde::Serialize, serde::Deserialize)]
pub struct AdamWConfig {
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
    /// Clip gradients to this global L2 norm (`None`: no clipping).
    pub max_grad_norm: Option<f64>,
}

impl Default for AdamWConfig {
    fn default() -> Self {
        Self { beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0.01, max_grad_norm: Some(1.0) }
    }
}

/// Optimiser state of one parameter.
struct Slot {
    var: Var,
    name: String,
    m: Vec<f32>,
    v: Vec<f32>,
    /// Excluded from weight decay (biases and LayerNorm weights, as is customary).
    no_decay: bool,
    /// This parameter's learning rate as a multiple of the step's (1 unless a recipe sets it).
    lr_scale: f64,
}

pub struct AdamW {
    pub cfg: AdamWConfig,
    slots: Vec<Slot>,
    /// Number of updates done.
    pub step: u64,
}

/// What one step saw.
#[derive(Debug, Clone, Copy)]
pub struct StepStats {
    /// Global gradient norm before clipping.
    pub grad_norm: f64,
}

struct Update<'a> {
    m: RefCell<&'a mut [f32]>,
    v: RefCell<&'a mut [f32]>,
    h: Hyper,
}

#[derive(Clone, Copy)]
struct Hyper {
    lr: f32,
    b1: f32,
    b2: f32,
    bc1: f32,
    bc2: f32,
    eps: f32,
    decay: f32,
    grad_scale: f32,
}

/// One parallel chunk of the update: parameters, gradients, first and second moments.
type Chunk<'a> = (((&'a mut [f32], &'a [f32]), &'a mut [f32]), &'a mut [f32]);

impl candle_core::InplaceOp2 for Update<'_> {
    fn name(&self) -> &'static str {
        "fused-adamw"
    }

    fn cpu_fwd(&self, s1: &mut CpuStorage, l1: &Layout, s2: &CpuStorage, l2: &Layout) -> candle_core::Result<()> {
        let (CpuStorage::F32(p), CpuStorage::F32(g)) = (s1, s2) else {
            candle_core::bail!("fused-adamw: f32 parameters and gradients only")
        };
        let (Some((p0, p1)), Some((g0, g1))) = (l1.contiguous_offsets(), l2.contiguous_offsets()) else {
            candle_core::bail!("fused-adamw: non-contiguous parameter or gradient")
        };
        let (p, g) = (&mut p[p0..p1], &g[g0..g1]);
        let mut m = self.m.borrow_mut();
        let mut v = self.v.borrow_mut();
        let u = self.h;
        let kernel = |(((p, g), m), v): Chunk| {
            for i in 0..p.len() {
                let gi = g[i] * u.grad_scale;
                let mi = u.b1 * m[i] + (1.0 - u.b1) * gi;
                let vi = u.b2 * v[i] + (1.0 - u.b2) * gi * gi;
                m[i] = mi;
                v[i] = vi;
                let update = (mi / u.bc1) / ((vi / u.bc2).sqrt() + u.eps);
                p[i] = p[i] * (1.0 - u.lr * u.decay) - u.lr * update;
            }
        };
        // Large tensors are split into one contiguous part per thread (xsent runs candle's ops
        // single-threaded and parallelises itself; see crate::parallel).
        let workers = crate::parallel::threads();
        if p.len() > 1 << 17 && workers > 1 {
            let part = p.len().div_ceil(workers);
            std::thread::scope(|s| {
                for (((p, g), m), v) in p.chunks_mut(part).zip(g.chunks(part)).zip(m.chunks_mut(part)).zip(v.chunks_mut(part)) {
                    s.spawn(move || kernel((((p, g), m), v)));
                }
            });
        } else {
            kernel((((p, g), &mut m[..]), &mut v[..]));
        }
        Ok(())
    }
}

/// Parameters without weight decay: biases (`….bias`, and a bias named otherwise such as the
/// lightweight recipe's `head.out_bias`) and LayerNorm weights, as Hugging Face and
/// sentence-transformers group them.
fn decay_exempt(name: &str) -> bool {
    name.ends_with("bias") || name.contains("LayerNorm") || name.contains("layer_norm")
}

impl AdamW {
    pub fn new(params: &Params, cfg: AdamWConfig) -> Result<Self> {
        let mut slots = Vec::new();
        for (name, var) in &params.vars {
            ensure!(var.dtype() == DType::F32, "parameter {name} is {:?}; AdamW needs f32", var.dtype());
            let n = var.elem_count();
            let no_decay = decay_exempt(name);
            slots.push(Slot { var: var.clone(), name: name.clone(), m: vec![0.0; n], v: vec![0.0; n], no_decay, lr_scale: 1.0 });
        }
        Ok(Self { cfg, slots, step: 0 })
    }

    /// Give each parameter its own learning rate, `scale(name)` × the rate passed to
    /// [`step`](Self::step) (weight decay scales with it, as in a PyTorch parameter group).
    /// Not part of the checkpointed state: it comes from the config on every start.
    pub fn set_lr_scales(&mut self, scale: impl Fn(&str) -> f64) {
        for s in &mut self.slots {
            s.lr_scale = scale(&s.name);
        }
    }

    /// Global L2 norm of the gradients of all parameters (accumulated in f64; on the CPU one
    /// pass over each gradient's memory, no temporaries).
    pub fn grad_norm(&self, grads: &GradStore) -> Result<f64> {
        let mut sq = 0f64;
        for s in &self.slots {
            if let Some(g) = grads.get(s.var.as_tensor()) {
                sq += sum_of_squares(g)?;
            }
        }
        Ok(sq.sqrt())
    }

    /// One update with learning rate `lr`. Parameters without a gradient are left alone.
    pub fn step(&mut self, grads: &GradStore, lr: f64) -> Result<StepStats> {
        let grad_norm = self.grad_norm(grads)?;
        self.step_with_norm(grads, lr, grad_norm)
    }

    /// [`step`](Self::step) with the global gradient norm already computed.
    pub fn step_with_norm(&mut self, grads: &GradStore, lr: f64, grad_norm: f64) -> Result<StepStats> {
        let grad_scale = match self.cfg.max_grad_norm {
            Some(max) if grad_norm > max => max / (grad_norm + 1e-6),
            _ => 1.0,
        };
        self.step += 1;
        let t = self.step as i32;
        let (b1, b2) = (self.cfg.beta1, self.cfg.beta2);
        for s in &mut self.slots {
            let Some(g) = grads.get(s.var.as_tensor()) else { continue };
            let decay = if s.no_decay { 0.0 } else { self.cfg.weight_decay };
            let lr = lr * s.lr_scale;
            if s.var.device().is_cpu() {
                let g = g.contiguous()?;
                let h = Hyper {
                    lr: lr as f32,
                    b1: b1 as f32,
                    b2: b2 as f32,
                    bc1: (1.0 - b1.powi(t)) as f32,
                    bc2: (1.0 - b2.powi(t)) as f32,
                    eps: self.cfg.eps as f32,
                    decay: decay as f32,
                    grad_scale: grad_scale as f32,
                };
                let op = Update { m: RefCell::new(&mut s.m), v: RefCell::new(&mut s.v), h };
                s.var.as_tensor().inplace_op2(&g, &op)?;
            } else {
                // Same arithmetic with tensor ops; the moments live on the host between steps.
                let dev = s.var.device();
                let shape = s.var.shape();
                let g = (g * grad_scale)?;
                let m = ((Tensor::from_slice(&s.m, shape, dev)? * b1)? + (&g * (1.0 - b1))?)?;
                let v = ((Tensor::from_slice(&s.v, shape, dev)? * b2)? + (g.sqr()? * (1.0 - b2))?)?;
                let upd = ((&m / (1.0 - b1.powi(t)))? / ((&v / (1.0 - b2.powi(t)))?.sqrt()? + self.cfg.eps)?)?;
                let p = ((s.var.as_tensor() * (1.0 - lr * decay))? - (upd * lr)?)?;
                s.var.set(&p)?;
                s.m = m.flatten_all()?.to_vec1()?;
                s.v = v.flatten_all()?.to_vec1()?;
            }
        }
        Ok(StepStats { grad_norm })
    }

    /// Moments as tensors (`m.NAME`, `v.NAME`) for a checkpoint.
    pub fn state_tensors(&self) -> Result<HashMap<String, Tensor>> {
        let dev = candle_core::Device::Cpu;
        let mut out = HashMap::new();
        for s in &self.slots {
            out.insert(format!("m.{}", s.name), Tensor::from_slice(&s.m, s.var.shape(), &dev)?);
            out.insert(format!("v.{}", s.name), Tensor::from_slice(&s.v, s.var.shape(), &dev)?);
        }
        Ok(out)
    }

    /// Restore moments saved by [`state_tensors`](Self::state_tensors) and the step count.
    pub fn load_state(&mut self, state: &HashMap<String, Tensor>, step: u64) -> Result<()> {
        for s in &mut self.slots {
            for (key, dst) in [(format!("m.{}", s.name), &mut s.m), (format!("v.{}", s.name), &mut s.v)] {
                let t = state.get(&key).ok_or_else(|| anyhow::anyhow!("optimiser state has no {key}"))?;
                let vals = t.flatten_all()?.to_vec1::<f32>()?;
                ensure!(vals.len() == dst.len(), "optimiser state {key}: {} values, parameter has {}", vals.len(), dst.len());
                *dst = vals;
            }
        }
        self.step = step;
        Ok(())
    }
}

/// Σx² of a tensor in f64.
fn sum_of_squares(g: &Tensor) -> Result<f64> {
    if g.device().is_cpu() && g.dtype() == DType::F32 {
        let g = g.contiguous()?;
        let (storage, layout) = g.storage_and_layout();
        if let (candle_core::Storage::Cpu(CpuStorage::F32(v)), Some((a, b))) = (&*storage, layout.contiguous_offsets()) {
            let v = &v[a..b];
            // Blocks of 64 summed in f32, then in f64; parts added in order.
            let chunk = |c: &[f32]| -> f64 {
                // Eight f32 lanes summed in f32 per block of 64, then in f64: fast and accurate.
                c.chunks(64).map(|b| b.iter().map(|x| x * x).sum::<f32>() as f64).sum()
            };
            let workers = crate::parallel::threads();
            if v.len() > 1 << 18 && workers > 1 {
                let part = v.len().div_ceil(workers).div_ceil(64) * 64;
                let sums: Vec<f64> = std::thread::scope(|s| {
                    let hs: Vec<_> = v.chunks(part).map(|c| s.spawn(move || chunk(c))).collect();
                    hs.into_iter().map(|h| h.join().expect("no panic")).collect()
                });
                return Ok(sums.iter().sum());
            }
            return Ok(chunk(v));
        }
    }
    Ok(g.sqr()?.sum_all()?.to_dtype(DType::F64)?.to_scalar::<f64>()?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    /// The fused kernel against the textbook update written with tensor ops.
    #[test]
    fn fused_matches_reference() -> Result<()> {
        let dev = Device::Cpu;
        let init: Vec<f32> = (0..300_000).map(|i| ((i * 7919 % 1000) as f32 / 500.0) - 1.0).collect();
        let var = Var::from_vec(init.clone(), (300, 1000), &dev)?;
        let params = Params { vars: vec![("w.weight".into(), var.clone())] };
        let cfg = AdamWConfig { max_grad_norm: None, ..Default::default() };
        let mut opt = AdamW::new(&params, cfg)?;
        let (mut m, mut v) = (vec![0f64; init.len()], vec![0f64; init.len()]);
        let mut p: Vec<f64> = init.iter().map(|&x| x as f64).collect();
        for step in 1..=3 {
            let loss = (var.as_tensor().sqr()?.sum_all()? * 0.5)?; // grad = w
            let grads = loss.backward()?;
            let g: Vec<f64> = p.clone();
            opt.step(&grads, 1e-2)?;
            for i in 0..p.len() {
                m[i] = 0.9 * m[i] + 0.1 * g[i];
                v[i] = 0.999 * v[i] + 0.001 * g[i] * g[i];
                let upd = (m[i] / (1.0 - 0.9f64.powi(step))) / ((v[i] / (1.0 - 0.999f64.powi(step))).sqrt() + 1e-8);
                p[i] = p[i] * (1.0 - 1e-2 * 0.01) - 1e-2 * upd;
            }
        }
        let got = var.as_tensor().flatten_all()?.to_vec1::<f32>()?;
        let max_err = got.iter().zip(&p).map(|(a, b)| (*a as f64 - b).abs()).fold(0.0, f64::max);
        assert!(max_err < 1e-5, "max error {max_err}");
        Ok(())
    }

    #[test]
    fn clips_by_global_norm() -> Result<()> {
        let dev = Device::Cpu;
        let a = Var::from_vec(vec![3f32, 0.0], 2, &dev)?;
        let b = Var::from_vec(vec![4f32], 1, &dev)?;
        let params = Params { vars: vec![("a.bias".into(), a.clone()), ("b.bias".into(), b.clone())] };
        let opt = AdamW::new(&params, AdamWConfig::default())?;
        let loss = ((a.as_tensor().sqr()?.sum_all()? + b.as_tensor().sqr()?.sum_all()?)? * 0.5)?;
        let grads = loss.backward()?;
        assert!((opt.grad_norm(&grads)? - 5.0).abs() < 1e-6);
        Ok(())
    }

    #[test]
    fn biases_and_layer_norms_are_not_decayed() {
        for name in ["encoder.layer.0.attention.self.query.bias", "head.out_bias", "embeddings.LayerNorm.weight", "norm.layer_norm.weight"] {
            assert!(decay_exempt(name), "{name}");
        }
        for name in ["encoder.layer.0.attention.self.query.weight", "embeddings.word_embeddings.weight", "head.transform.weight", "meaning.weight"] {
            assert!(!decay_exempt(name), "{name}");
        }
    }

    /// A parameter with scale s moves s times as far as one with scale 1 under the same
    /// gradients (Adam's update is scale-free, so the step is lr × s × update), decay included.
    #[test]
    fn lr_scale_multiplies_one_parameters_rate() -> Result<()> {
        let dev = Device::Cpu;
        let a = Var::from_vec(vec![1f32, -2.0, 0.5], 3, &dev)?;
        let b = Var::from_vec(vec![1f32, -2.0, 0.5], 3, &dev)?;
        let params = Params { vars: vec![("meaning.weight".into(), a.clone()), ("language.weight".into(), b.clone())] };
        let mut opt = AdamW::new(&params, AdamWConfig { max_grad_norm: None, ..Default::default() })?;
        opt.set_lr_scales(|name| if name.starts_with("meaning.") { 0.1 } else { 1.0 });
        for _ in 0..3 {
            let loss = (a.as_tensor().sqr()?.sum_all()? + b.as_tensor().sqr()?.sum_all()?)?;
            opt.step(&loss.backward()?, 1e-2)?;
        }
        let start = [1f32, -2.0, 0.5];
        let (ga, gb) = (a.as_tensor().to_vec1::<f32>()?, b.as_tensor().to_vec1::<f32>()?);
        for i in 0..3 {
            let (da, db) = (ga[i] - start[i], gb[i] - start[i]);
            assert!(db.abs() > 1e-3, "the unscaled parameter moved: {db}");
            // Three small steps: the moves are proportional to within second-order terms.
            assert!((da / db - 0.1).abs() < 2e-3, "{i}: moved {da} against {db}");
        }
        Ok(())
    }
}
