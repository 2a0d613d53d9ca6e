//! In-place fused AdamW (decoupled weight decay) with clipping by global gradient norm.
//!
//! On the CPU each parameter is updated by one pass over its memory (no temporaries), in
//! parallel for large tensors; `candle_nn::AdamW` allocates a dozen tensors per parameter per
//! step. On a GPU the moments live on the GPU beside the parameter, and one launch updates all
//! parameters and moments in place (`crate::gpu::optim`, the CPU kernel's arithmetic in the same
//! order, without fused multiply-adds), after one launch for the gradients' Σx² whose per-chunk
//! sums are read back once per step; under `XSENT_KERNELS=candle` a GPU runs one kernel per
//! parameter and the norm through candle's ops. Elsewhere (the CPU under `XSENT_KERNELS=gpu` or
//! `candle`) the same arithmetic runs as tensor ops whose results are copied into the
//! parameter's and the moments' own buffers.

use crate::gpu::params::AdamWStep;
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
    /// The moments on the host (the CPU's fused kernel), empty when they are [`Slot::dev`].
    m: Vec<f32>,
    v: Vec<f32>,
    /// The moments on the parameter's device (a GPU, or the CPU under `XSENT_KERNELS=candle`).
    dev: Option<(Var, Var)>,
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

/// One parameter's update on the CPU: its moments, learning rate and weight decay, and the
/// step's scalars.
struct Update<'a> {
    m: RefCell<&'a mut [f32]>,
    v: RefCell<&'a mut [f32]>,
    lr: f32,
    decay: f32,
    step: AdamWStep,
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
        let (AdamWStep { b1, b2, bc1, bc2, eps, grad_scale }, lr, decay) = (self.step, self.lr, self.decay);
        let kernel = |(((p, g), m), v): Chunk| {
            for i in 0..p.len() {
                let gi = g[i] * grad_scale;
                let mi = b1 * m[i] + (1.0 - b1) * gi;
                let vi = b2 * v[i] + (1.0 - b2) * gi * gi;
                m[i] = mi;
                v[i] = vi;
                let update = (mi / bc1) / ((vi / bc2).sqrt() + eps);
                p[i] = p[i] * (1.0 - lr * decay) - lr * update;
            }
        };
        // Large tensors are split into one contiguous part per thread (xsent runs candle's ops
        // single-threaded and parallelises itself; see crate::threads).
        let workers = crate::threads::threads();
        if p.len() > 1 << 17 && workers > 1 {
            let part = p.len().div_ceil(workers);
            std::thread::scope(|s| {
                for (((p, g), m), v) in
                    p.chunks_mut(part).zip(g.chunks(part)).zip(m.chunks_mut(part)).zip(v.chunks_mut(part))
                {
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
            let slot = if on_device(var) {
                let z = || Var::zeros(var.shape(), DType::F32, var.device());
                Slot {
                    var: var.clone(),
                    name: name.clone(),
                    m: Vec::new(),
                    v: Vec::new(),
                    dev: Some((z()?, z()?)),
                    no_decay,
                    lr_scale: 1.0,
                }
            } else {
                Slot {
                    var: var.clone(),
                    name: name.clone(),
                    m: vec![0.0; n],
                    v: vec![0.0; n],
                    dev: None,
                    no_decay,
                    lr_scale: 1.0,
                }
            };
            slots.push(slot);
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
        #[cfg(feature = "cuda")]
        if let Some(gs) = self.on_one_gpu(grads)? {
            let gs: Vec<&Tensor> = gs.iter().map(|(_, g)| g).collect();
            return Ok(crate::gpu::optim::sum_of_squares(&gs)?.sqrt());
        }
        let mut sq = 0f64;
        // Off the host, each gradient's Σg² stays on its device until all are queued: one read
        // (and one wait for the device) per step instead of one per parameter.
        let mut queued: Vec<Tensor> = Vec::new();
        for s in &self.slots {
            if let Some(g) = grads.get(s.var.as_tensor()) {
                if s.dev.is_some() {
                    queued.push(g.to_dtype(DType::F32)?.sqr()?.sum_all()?);
                } else {
                    sq += sum_of_squares(g)?;
                }
            }
        }
        if !queued.is_empty() {
            sq += Tensor::stack(&queued, 0)?.to_dtype(DType::F64)?.to_vec1::<f64>()?.iter().sum::<f64>();
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
        // The scalars every parameter's update shares (the CUDA kernels take them as they are).
        let step = AdamWStep {
            b1: b1 as f32,
            b2: b2 as f32,
            bc1: (1.0 - b1.powi(t)) as f32,
            bc2: (1.0 - b2.powi(t)) as f32,
            eps: self.cfg.eps as f32,
            grad_scale: grad_scale as f32,
        };
        #[cfg(feature = "cuda")]
        if let Some(gs) = self.on_one_gpu(grads)? {
            let updates: Vec<crate::gpu::optim::Update> = gs
                .iter()
                .map(|(s, g)| {
                    let (m, v) = s.dev.as_ref().expect("on_one_gpu takes device slots only");
                    let decay = if s.no_decay { 0.0 } else { self.cfg.weight_decay };
                    let lr = lr * s.lr_scale;
                    crate::gpu::optim::Update {
                        p: s.var.as_tensor(),
                        g,
                        m: m.as_tensor(),
                        v: v.as_tensor(),
                        lr: lr as f32,
                        decay: decay as f32,
                    }
                })
                .collect();
            crate::gpu::optim::adamw(&updates, &step)?;
            return Ok(StepStats { grad_norm });
        }
        for s in &mut self.slots {
            let Some(g) = grads.get(s.var.as_tensor()) else { continue };
            let decay = if s.no_decay { 0.0 } else { self.cfg.weight_decay };
            let (lr, decay) = ((lr * s.lr_scale) as f32, decay as f32);
            let g = g.contiguous()?;
            match &s.dev {
                None => {
                    let op = Update { m: RefCell::new(&mut s.m), v: RefCell::new(&mut s.v), lr, decay, step };
                    s.var.as_tensor().inplace_op2(&g, &op)?;
                }
                #[cfg(feature = "cuda")]
                Some((m, v)) if s.var.device().is_cuda() => {
                    crate::gpu::adamw_update(s.var.as_tensor(), &g, m.as_tensor(), v.as_tensor(), lr, decay, &step)?
                }
                Some((m, v)) => {
                    // The kernel's arithmetic as tensor ops, in f32 and in the same order (so
                    // the same values), each result copied into the buffer it replaces.
                    let scalar = |x: f32| Tensor::new(x, g.device());
                    let g = g.affine(step.grad_scale as f64, 0.0)?;
                    let m_new =
                        (m.as_tensor().affine(step.b1 as f64, 0.0)? + g.affine((1.0 - step.b1) as f64, 0.0)?)?;
                    let v_new = (v.as_tensor().affine(step.b2 as f64, 0.0)?
                        + g.affine((1.0 - step.b2) as f64, 0.0)?.mul(&g)?)?;
                    let denom = v_new.broadcast_div(&scalar(step.bc2)?)?.sqrt()?.affine(1.0, step.eps as f64)?;
                    let upd = m_new.broadcast_div(&scalar(step.bc1)?)?.div(&denom)?;
                    let p =
                        (s.var.as_tensor().affine((1.0 - lr * decay) as f64, 0.0)? - upd.affine(lr as f64, 0.0)?)?;
                    m.set(&m_new)?;
                    v.set(&v_new)?;
                    s.var.set(&p)?;
                }
            }
        }
        Ok(StepStats { grad_norm })
    }

    /// With every parameter that has a gradient an f32 tensor on one GPU, and xsent's training
    /// kernels on (not `XSENT_KERNELS=candle`): those slots with their gradients (contiguous),
    /// for the optimiser's passes over all tensors in one launch each (src/gpu/optim.rs).
    #[cfg(feature = "cuda")]
    fn on_one_gpu(&self, grads: &GradStore) -> Result<Option<Vec<(&Slot, Tensor)>>> {
        if crate::model::candle_ops::training_kernels_off() {
            return Ok(None);
        }
        let mut out = Vec::with_capacity(self.slots.len());
        for s in &self.slots {
            let Some(g) = grads.get(s.var.as_tensor()) else { continue };
            let same_gpu =
                out.first().is_none_or(|(f, _): &(&Slot, Tensor)| f.var.device().same_device(s.var.device()));
            if s.dev.is_none() || !s.var.device().is_cuda() || !same_gpu || g.dtype() != DType::F32 {
                return Ok(None);
            }
            out.push((s, g.contiguous()?));
        }
        Ok((!out.is_empty()).then_some(out))
    }

    /// Moments as tensors (`m.NAME`, `v.NAME`) for a checkpoint.
    pub fn state_tensors(&self) -> Result<HashMap<String, Tensor>> {
        let dev = candle_core::Device::Cpu;
        let mut out = HashMap::new();
        for s in &self.slots {
            let (m, v) = match &s.dev {
                None => {
                    (Tensor::from_slice(&s.m, s.var.shape(), &dev)?, Tensor::from_slice(&s.v, s.var.shape(), &dev)?)
                }
                Some((m, v)) => (m.as_tensor().to_device(&dev)?, v.as_tensor().to_device(&dev)?),
            };
            out.insert(format!("m.{}", s.name), m);
            out.insert(format!("v.{}", s.name), v);
        }
        Ok(out)
    }

    /// Restore moments saved by [`state_tensors`](Self::state_tensors) and the step count.
    pub fn load_state(&mut self, state: &HashMap<String, Tensor>, step: u64) -> Result<()> {
        for s in &mut self.slots {
            let n = s.var.elem_count();
            let get = |key: String| -> Result<Tensor> {
                let t = state.get(&key).ok_or_else(|| anyhow::anyhow!("optimiser state has no {key}"))?;
                ensure!(t.elem_count() == n, "optimiser state {key}: {} values, parameter has {n}", t.elem_count());
                Ok(t.to_dtype(DType::F32)?)
            };
            let (m, v) = (get(format!("m.{}", s.name))?, get(format!("v.{}", s.name))?);
            match &s.dev {
                None => {
                    s.m = m.flatten_all()?.to_vec1::<f32>()?;
                    s.v = v.flatten_all()?.to_vec1::<f32>()?;
                }
                Some((dm, dv)) => {
                    dm.set(&m.reshape(s.var.shape())?.to_device(s.var.device())?)?;
                    dv.set(&v.reshape(s.var.shape())?.to_device(s.var.device())?)?;
                }
            }
        }
        self.step = step;
        Ok(())
    }
}

/// Whether a parameter's moments live on its device ([`Slot::dev`]).
fn on_device(var: &Var) -> bool {
    !var.device().is_cpu() || crate::model::kernels::candle_ops_forced()
}

/// Σx² of a tensor in f64.
fn sum_of_squares(g: &Tensor) -> Result<f64> {
    if g.device().is_cpu() && g.dtype() == DType::F32 {
        let g = g.contiguous()?;
        let (storage, layout) = g.storage_and_layout();
        if let (candle_core::Storage::Cpu(CpuStorage::F32(v)), Some((a, b))) = (&*storage, layout.contiguous_offsets())
        {
            let v = &v[a..b];
            // Blocks of 64 summed in f32, then in f64; parts added in order.
            let chunk = |c: &[f32]| -> f64 {
                // Eight f32 lanes summed in f32 per block of 64, then in f64: fast and accurate.
                c.chunks(64).map(|b| b.iter().map(|x| x * x).sum::<f32>() as f64).sum()
            };
            let workers = crate::threads::threads();
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

    /// The device path (moments in tensors, the update as tensor ops copied into place), forced
    /// on the CPU, gives the CPU kernel's values bit for bit (decay included; without clipping,
    /// whose scale comes from a norm summed in another order); its gradient norms agree to
    /// rounding, and its state round-trips through a checkpoint's tensors.
    #[test]
    fn device_path_equals_the_cpu_kernel() -> Result<()> {
        let dev = Device::Cpu;
        let init: Vec<f32> = (0..5_000).map(|i| ((i * 7919 % 1000) as f32 / 500.0) - 1.0).collect();
        type Run = (Vec<f32>, Vec<f32>, HashMap<String, Tensor>, Vec<f64>);
        let run = |forced: bool| -> Result<Run> {
            let body = || -> Result<_> {
                let w = Var::from_vec(init.clone(), (50, 100), &dev)?;
                let b = Var::from_vec(init[..100].to_vec(), 100, &dev)?;
                let params = Params { vars: vec![("l.weight".into(), w.clone()), ("l.bias".into(), b.clone())] };
                let mut opt = AdamW::new(&params, AdamWConfig { max_grad_norm: None, ..Default::default() })?;
                assert_eq!(opt.slots.iter().all(|s| s.dev.is_some()), forced);
                let mut norms = Vec::new();
                for step in 1..=4 {
                    let loss = (w.as_tensor().sqr()?.sum_all()? * 0.5)?.add(&b.as_tensor().sqr()?.sum_all()?)?;
                    norms.push(opt.step(&loss.backward()?, 1e-2 / step as f64)?.grad_norm);
                }
                let state = opt.state_tensors()?;
                // A fresh optimiser restores the state exactly.
                let mut again = AdamW::new(&params, AdamWConfig::default())?;
                again.load_state(&state, opt.step)?;
                for (k, t) in again.state_tensors()? {
                    assert_eq!(t.flatten_all()?.to_vec1::<f32>()?, state[&k].flatten_all()?.to_vec1::<f32>()?, "{k}");
                }
                Ok((w.as_tensor().flatten_all()?.to_vec1::<f32>()?, b.as_tensor().to_vec1::<f32>()?, state, norms))
            };
            if forced {
                crate::model::kernels::with_candle_ops(body)
            } else {
                body()
            }
        };
        let (w1, b1, s1, n1) = run(false)?;
        let (w2, b2, s2, n2) = run(true)?;
        assert_eq!(w1, w2);
        assert_eq!(b1, b2);
        for (k, t) in &s1 {
            assert_eq!(t.flatten_all()?.to_vec1::<f32>()?, s2[k].flatten_all()?.to_vec1::<f32>()?, "{k}");
        }
        for (a, b) in n1.iter().zip(&n2) {
            assert!((a - b).abs() <= 1e-6 * a, "gradient norms {n1:?} against {n2:?}");
        }
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
        for name in [
            "encoder.layer.0.attention.self.query.bias",
            "head.out_bias",
            "embeddings.LayerNorm.weight",
            "norm.layer_norm.weight",
        ] {
            assert!(decay_exempt(name), "{name}");
        }
        for name in [
            "encoder.layer.0.attention.self.query.weight",
            "embeddings.word_embeddings.weight",
            "head.transform.weight",
            "meaning.weight",
        ] {
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
