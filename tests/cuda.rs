//! A GPU against the CPU (built with `--features cuda`; run where a GPU is, by
//! scripts/gpu-check.sh): the encoder's inference and training passes on the tiny fixtures,
//! the lightweight losses on column slices (the step that failed with "matmul is only supported
//! for contiguous tensors"), the device's settings (no events per buffer, a pool that keeps
//! freed memory), the in-place AdamW kernel (and its refusal of tensors on another device) and its one-launch form over many tensors, the counter-based dropout, the exact kNN,
//! sp's averaging, the one-op LayerNorm and softmax of training, the CUDA side of training's
//! LayerNorm, linear layer, softmax and GELU, attention's head split and merge, bf16 LayerNorm and softmax, and bf16 training. Without a GPU every test fails, saying so.
#![cfg(feature = "cuda")]

mod common;

use candle_core::{DType, Device, Tensor, Var};
use xsent::model::{LoadOptions, Mode, SentenceEncoder};

fn gpu() -> Device {
    xsent::device::parse_device("cuda")
        .expect("these tests need an NVIDIA GPU and its driver (run them through scripts/gpu-check.sh)")
}

/// Largest |a − b| / max(|b|, 1) over two tensors of one shape (on any devices).
fn rel_diff(a: &Tensor, b: &Tensor) -> f32 {
    assert_eq!(a.dims(), b.dims());
    let a = a
        .to_device(&Device::Cpu)
        .unwrap()
        .to_dtype(DType::F32)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1::<f32>()
        .unwrap();
    let b = b
        .to_device(&Device::Cpu)
        .unwrap()
        .to_dtype(DType::F32)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1::<f32>()
        .unwrap();
    common::rel_diff(&a, &b)
}

fn values(n: usize, seed: usize) -> Vec<f32> {
    (0..n).map(|i| (((i + seed) * 7919) % 211) as f32 / 105.0 - 1.0).collect()
}

#[test]
fn one_device_per_gpu() {
    let (a, b) = (gpu(), gpu());
    assert!(a.same_device(&b), "two parses of cuda gave two devices: their tensors could not meet");
    let x = Tensor::ones(3, DType::F32, &a).unwrap();
    let y = Tensor::ones(3, DType::F32, &b).unwrap();
    assert_eq!((x + y).unwrap().to_vec1::<f32>().unwrap(), vec![2.0; 3]);
}

#[test]
fn the_device_keeps_freed_memory_and_makes_no_events() {
    use candle_core::cuda_backend::cudarc::driver::{result, sys};
    let Device::Cuda(c) = gpu() else { unreachable!("parse_device(\"cuda\") gives a CUDA device") };
    assert!(
        !c.is_event_tracking(),
        "buffers would get two CUDA events each (src/device.rs, tune; XSENT_KERNELS=candle leaves the device as candle opens it)"
    );
    let ctx = c.cuda_stream().context().clone();
    if ctx.has_async_alloc() {
        let mut threshold = 0u64;
        // SAFETY: the context's own device; the attribute is a u64.
        unsafe {
            let pool = result::device::get_default_mem_pool(ctx.cu_device()).unwrap();
            result::mem_pool::get_attribute(
                pool,
                sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                (&mut threshold as *mut u64).cast(),
            )
            .unwrap();
        }
        assert_eq!(threshold, u64::MAX, "the pool would hand freed memory back at every synchronisation");
    }
    // Work after the change: allocate, free, synchronise, allocate again.
    for n in [1usize << 20, 1 << 10, 1 << 20] {
        let x = Tensor::ones(n, DType::F32, &Device::Cuda(c.clone())).unwrap();
        assert_eq!(x.sum_all().unwrap().to_scalar::<f32>().unwrap(), n as f32);
    }
}

#[test]
fn lightweight_losses_on_column_slices_equal_the_cpu() {
    let dev = gpu();
    let (b, h) = (128, 512);
    let base = Tensor::from_vec(values(b * 2 * h, 3), (b, 2 * h), &Device::Cpu).unwrap();
    let run = |d: &Device| {
        let v = Var::from_tensor(&base.to_device(d).unwrap()).unwrap();
        let (u, w) = (v.as_tensor().narrow(1, 0, h).unwrap(), v.as_tensor().narrow(1, h, h).unwrap());
        let loss = (xsent::train::recipes::lightweight::align_loss(&u, &w).unwrap()
            + xsent::train::recipes::lightweight::sim_loss(&u, &w).unwrap())
        .unwrap();
        let g = loss.backward().unwrap();
        (loss, g.get(v.as_tensor()).unwrap().clone())
    };
    let (lc, gc) = run(&Device::Cpu);
    let (lg, gg) = run(&dev);
    assert!(rel_diff(&lg, &lc) < 1e-5, "loss {lg} vs {lc}");
    assert!(rel_diff(&gg, &gc) < 1e-4, "gradients differ by {}", rel_diff(&gg, &gc));
}

#[test]
fn encoder_inference_and_training_equal_the_cpu() {
    let dir = tempfile::tempdir().unwrap();
    let words: Vec<String> = (0..50).map(|i| format!("w{i}")).collect();
    let texts: Vec<String> = (0..40)
        .map(|i| (0..(3 + i % 9)).map(|j| words[(i * 7 + j * 3) % 50].as_str()).collect::<Vec<_>>().join(" "))
        .collect();
    for fixture in ["tiny-bert", "tiny-xlm-roberta"] {
        let path = common::tiny_model(fixture, dir.path(), &words);
        let load = |d: Device, trainable: bool| {
            SentenceEncoder::load(path.to_str().unwrap(), &LoadOptions { device: d, trainable, ..Default::default() })
                .unwrap()
        };
        // Inference: min cosine ≥ 0.99999 (the bar), and close values.
        let (cpu, cuda) = (load(Device::Cpu, false), load(gpu(), false));
        let (a, b) = (cpu.embed_unchecked(&texts, 16).unwrap(), cuda.embed_unchecked(&texts, 16).unwrap());
        for (x, y) in a.iter().zip(&b) {
            assert!(common::cosine(x, y) >= 0.99999, "{fixture}: cosine {}", common::cosine(x, y));
        }
        // Training forward and backward, dropout off: the loss and every gradient.
        let (mut cpu, mut cuda) = (load(Device::Cpu, true), load(gpu(), true));
        for e in [&mut cpu, &mut cuda] {
            e.encoder.hidden_dropout = 0.0;
            e.encoder.attention_dropout = 0.0;
        }
        let step = |e: &SentenceEncoder| {
            let mut rng =
                xsent::model::TrainContext::new(<xsent::model::encoder::Rng as rand::SeedableRng>::seed_from_u64(1));
            let emb = e.forward(&texts, &mut Mode::Train(&mut rng)).unwrap();
            let loss = emb.sqr().unwrap().sum_all().unwrap();
            let g = loss.backward().unwrap();
            let params = e.trainable_params();
            (
                loss,
                params
                    .vars
                    .iter()
                    .map(|(n, v)| (n.clone(), g.get(v.as_tensor()).map(|t| t.to_device(&Device::Cpu).unwrap())))
                    .collect::<Vec<_>>(),
            )
        };
        let ((lc, gc), (lg, gg)) = (step(&cpu), step(&cuda));
        assert!(rel_diff(&lg, &lc) < 1e-5, "{fixture}: loss {lg} vs {lc}");
        for ((name, a), (_, b)) in gc.iter().zip(&gg) {
            let (Some(a), Some(b)) = (a, b) else { panic!("{fixture}: {name} has a gradient on one device only") };
            let d = rel_diff(b, a);
            assert!(d < 1e-4, "{fixture}: gradient of {name} differs by {d}");
        }
    }
}

/// The AdamW kernel's arithmetic is the CPU kernel's: without clipping, weights and moments
/// after 4 steps are equal bit for bit. With clipping, the GPU sums the gradient norm in another
/// order (f32 on the device, f64 on the host), so the clipping scale, and with it the moments,
/// may differ in the last bits (measured on an H100: v off by 1–2 ulp, weights equal); they are
/// compared to 1e-6 relative there, and the norms to 1e-5.
#[test]
fn adamw_kernel_equals_the_cpu_kernel_bit_for_bit() {
    use xsent::model::weights::Params;
    use xsent::train::{AdamW, AdamWConfig};
    let dev = gpu();
    let init = values(300_001, 1);
    let run = |d: &Device, max_grad_norm: Option<f64>| {
        let w =
            Var::from_tensor(&Tensor::from_vec(init.clone(), (300_001,), &Device::Cpu).unwrap().to_device(d).unwrap())
                .unwrap();
        let b = Var::from_tensor(&Tensor::from_vec(values(17, 2), 17, &Device::Cpu).unwrap().to_device(d).unwrap())
            .unwrap();
        let params = Params { vars: vec![("layer.weight".into(), w.clone()), ("layer.bias".into(), b.clone())] };
        let mut opt = AdamW::new(&params, AdamWConfig { max_grad_norm, ..Default::default() }).unwrap();
        let mut norms = Vec::new();
        for step in 0..4 {
            let loss = ((w.as_tensor().sqr().unwrap().sum_all().unwrap() * 0.5).unwrap()
                + b.as_tensor().sum_all().unwrap())
            .unwrap();
            let grads = loss.backward().unwrap();
            norms.push(opt.step(&grads, 1e-2 / (step + 1) as f64).unwrap().grad_norm);
        }
        let mut state: Vec<(String, Tensor)> = opt.state_tensors().unwrap().into_iter().collect();
        state.sort_by(|a, b| a.0.cmp(&b.0));
        (w.as_tensor().to_device(&Device::Cpu).unwrap(), b.as_tensor().to_device(&Device::Cpu).unwrap(), state, norms)
    };
    let flat = |t: &Tensor| t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
    // Without clipping: bit for bit.
    let (wc, bc, sc, _) = run(&Device::Cpu, None);
    let (wg, bg, sg, _) = run(&dev, None);
    assert_eq!(flat(&wc), flat(&wg), "weights after 4 steps");
    assert_eq!(flat(&bc), flat(&bg), "biases after 4 steps");
    assert_eq!(sc.len(), sg.len());
    for ((k, a), (_, b)) in sc.iter().zip(&sg) {
        assert_eq!(flat(a), flat(b), "optimiser state {k}");
    }
    // With clipping (the norm summed in another order): close.
    let (wc, bc, sc, nc) = run(&Device::Cpu, Some(0.5));
    let (wg, bg, sg, ng) = run(&dev, Some(0.5));
    for (name, a, b) in [("weights", &wc, &wg), ("biases", &bc, &bg)] {
        let d = rel_diff(b, a);
        assert!(d < 1e-6, "{name} after 4 clipped steps differ by {d}");
    }
    for ((k, a), (_, b)) in sc.iter().zip(&sg) {
        let (a, b) = (flat(a), flat(b));
        let worst = a.iter().zip(&b).map(|(x, y)| ((x - y).abs() / x.abs().max(1e-30)) as f64).fold(0f64, f64::max);
        assert!(worst < 1e-6, "optimiser state {k} after 4 clipped steps: largest relative difference {worst}");
    }
    for (a, b) in nc.iter().zip(&ng) {
        assert!((a - b).abs() < 1e-5 * a, "gradient norms {nc:?} vs {ng:?}");
    }
}

/// The one-tensor AdamW refuses a gradient or moment that is not on the parameter's GPU (its op
/// sees their storages only; an address of another device would reach the kernel) and leaves
/// the parameter as it was.
#[test]
fn adamw_refuses_a_gradient_or_moment_off_the_parameters_gpu() {
    use xsent::gpu::params::AdamWStep;
    let dev = gpu();
    let p = Tensor::ones(8, DType::F32, &dev).unwrap();
    let here = Tensor::ones(8, DType::F32, &dev).unwrap();
    let cpu = Tensor::ones(8, DType::F32, &Device::Cpu).unwrap();
    let step = AdamWStep { b1: 0.9, b2: 0.999, bc1: 0.1, bc2: 0.001, eps: 1e-8, grad_scale: 1.0 };
    for (what, g, m, v) in
        [("gradient", &cpu, &here, &here), ("first moment", &here, &cpu, &here), ("second moment", &here, &here, &cpu)]
    {
        let err = xsent::gpu::adamw_update(&p, g, m, v, 0.1, 0.0, &step).expect_err(what).to_string();
        assert!(err.contains("must be on the parameter's GPU"), "{what}: {err}");
    }
    assert_eq!(p.to_vec1::<f32>().unwrap(), vec![1.0; 8], "the parameter changed");
    xsent::gpu::adamw_update(&p, &here, &here.zeros_like().unwrap(), &here.zeros_like().unwrap(), 0.1, 0.0, &step)
        .expect("all on one GPU");
    assert_ne!(p.to_vec1::<f32>().unwrap(), vec![1.0; 8], "the update did not run");
}

/// The optimiser's one-launch passes (src/gpu/optim.rs) against its one-kernel-per-parameter
/// path (`XSENT_KERNELS=candle`, here on this thread), on many tensors of mixed lengths: chunk
/// edges, a partial last chunk, tensors smaller than a warp, weights with and without decay, and
/// two parameters used only through a concatenation, whose gradients are views into one buffer
/// (the second at an offset).
#[test]
fn adamw_over_many_tensors_equals_one_kernel_per_tensor() {
    use xsent::model::weights::Params;
    use xsent::train::{AdamW, AdamWConfig};
    let dev = gpu();
    assert!(
        !xsent::model::kernels::training_kernels_off(),
        "XSENT_KERNELS=candle is set: both runs would take the one-kernel path"
    );
    let lens = [1usize, 17, 31, 32, 33, 65_535, 65_536, 65_537, 200_003, 3, 4_096, 131_072];
    let run = |max_grad_norm: Option<f64>| {
        let vars: Vec<(String, Var)> = lens
            .iter()
            .enumerate()
            .map(|(i, &n)| {
                let name = if i % 3 == 0 { format!("p{i}.bias") } else { format!("p{i}.weight") };
                let t = Tensor::from_vec(values(n, i), n, &Device::Cpu).unwrap().to_device(&dev).unwrap();
                (name, Var::from_tensor(&t).unwrap())
            })
            .collect();
        let params = Params { vars: vars.clone() };
        let mut opt = AdamW::new(&params, AdamWConfig { max_grad_norm, ..Default::default() }).unwrap();
        opt.set_lr_scales(|name| if name.starts_with("p4") { 0.5 } else { 1.0 });
        let mut norms = Vec::new();
        for step in 0..3 {
            let mut loss = Tensor::zeros((), DType::F32, &dev).unwrap();
            let k = vars.len() - 2;
            for (i, (_, v)) in vars[..k].iter().enumerate() {
                let term = (v.as_tensor().sqr().unwrap().sum_all().unwrap() * (0.5 + i as f64)).unwrap();
                loss = (loss + term + v.as_tensor().sum_all().unwrap()).unwrap();
            }
            let both = Tensor::cat(&[vars[k].1.as_tensor(), vars[k + 1].1.as_tensor()], 0).unwrap();
            loss = (loss + (both.sqr().unwrap() * 1.5).unwrap().sum_all().unwrap()).unwrap();
            let grads = loss.backward().unwrap();
            if step == 0 {
                let g = grads.get(vars[k + 1].1.as_tensor()).unwrap();
                let offset = g.storage_and_layout().1.start_offset();
                xsent::errln!("the last parameter's gradient starts at offset {offset} of its buffer");
            }
            norms.push(opt.step(&grads, 1e-2 / (step + 1) as f64).unwrap().grad_norm);
        }
        let host: Vec<Vec<f32>> = vars
            .iter()
            .map(|(_, v)| v.as_tensor().to_device(&Device::Cpu).unwrap().to_vec1::<f32>().unwrap())
            .collect();
        let mut state: Vec<(String, Vec<f32>)> = opt
            .state_tensors()
            .unwrap()
            .into_iter()
            .map(|(k, t)| (k, t.flatten_all().unwrap().to_vec1::<f32>().unwrap()))
            .collect();
        state.sort_by(|a, b| a.0.cmp(&b.0));
        (host, state, norms)
    };
    // Without clipping the norm only feeds the metrics: parameters and moments bit for bit.
    let (pm, sm, nm) = run(None);
    let (pk, sk, nk) = xsent::model::kernels::with_candle_ops(|| run(None));
    assert_eq!(pm, pk, "parameters after 3 steps: one launch vs one kernel per tensor");
    assert_eq!(sm, sk, "optimiser state after 3 steps");
    for (a, b) in nm.iter().zip(&nk) {
        // f64 chunk sums against candle's f32 sum per tensor: 1e-5 leaves room for the latter.
        assert!((a - b).abs() <= 1e-5 * b, "gradient norms {nm:?} (one launch) vs {nk:?} (candle's ops)");
    }
    // Clipped (the norms summed in another order): close.
    let (pm, _, _) = run(Some(1.0));
    let (pk, _, _) = xsent::model::kernels::with_candle_ops(|| run(Some(1.0)));
    for (i, (a, b)) in pm.iter().zip(&pk).enumerate() {
        let worst = a.iter().zip(b).map(|(x, y)| (x - y).abs() / y.abs().max(1e-3)).fold(0f32, |m, d| {
            if d.is_nan() || m.is_nan() {
                f32::NAN
            } else {
                m.max(d)
            }
        });
        assert!(worst < 1e-5, "tensor {i} of {} after 3 clipped steps differs by {worst}", lens[i]);
    }
}

#[test]
fn dropout_masks_equal_the_cpu_and_backward_reuses_them() {
    let x = Tensor::from_vec(values(100_003, 5), 100_003, &Device::Cpu).unwrap();
    let on = |d: &Device| {
        let v = Var::from_tensor(&x.to_device(d).unwrap()).unwrap();
        let y = xsent::model::dropout::apply(v.as_tensor(), 0.1, 99).unwrap().expect("CPU and CUDA run it");
        let g = y.sum_all().unwrap().backward().unwrap().get(v.as_tensor()).unwrap().to_device(&Device::Cpu).unwrap();
        (y.to_device(&Device::Cpu).unwrap().to_vec1::<f32>().unwrap(), g.to_vec1::<f32>().unwrap())
    };
    let (yc, gc) = on(&Device::Cpu);
    let (yg, gg) = on(&gpu());
    assert_eq!(yc, yg);
    assert_eq!(gc, gg);
    // bf16 (bf16 training): the same op on bf16 values, equal to the CPU's bit for bit.
    let on = |d: &Device| {
        let v = Var::from_tensor(&x.to_dtype(DType::BF16).unwrap().to_device(d).unwrap()).unwrap();
        let y = xsent::model::dropout::apply(v.as_tensor(), 0.1, 99).unwrap().expect("bf16 runs");
        let g = y.to_dtype(DType::F32).unwrap().sum_all().unwrap().backward().unwrap();
        (host(&y), host(g.get(v.as_tensor()).unwrap()))
    };
    let ((yc, gc), (yg, gg)) = (on(&Device::Cpu), on(&gpu()));
    assert!(yc.iter().zip(&yg).all(|(a, b)| a.to_bits() == b.to_bits()), "bf16 dropout values");
    assert!(gc.iter().zip(&gg).all(|(a, b)| a.to_bits() == b.to_bits()), "bf16 dropout gradients");
}

/// bf16 training's LayerNorm (a bf16 activation, f32 weights: `layer_norm.cu`'s bf16 kernels)
/// against the CPU's op on the same values: outputs and the input's gradient within a bf16 step
/// (the f32 results agree to rounding, then each is rounded to bf16), the weights' gradients to
/// the f32 bound.
#[test]
fn bf16_layer_norm_equals_the_cpu() {
    assert!(
        !xsent::model::kernels::training_kernels_off(),
        "XSENT_KERNELS=candle is set: the CUDA kernels would not run"
    );
    for (rows, n, shift) in [(5, 37, 0.0), (64, 384, 0.0), (9, 384, 40.0)] {
        let x = (Tensor::from_vec(values(rows * n, 5), (rows, n), &Device::Cpu).unwrap() + shift).unwrap();
        let x = x.to_dtype(DType::BF16).unwrap();
        let w = Tensor::from_vec(values(n, 9), n, &Device::Cpu).unwrap();
        let b = Tensor::from_vec(values(n, 2), n, &Device::Cpu).unwrap();
        let wts =
            Tensor::from_vec(values(rows * n, 11), (rows, n), &Device::Cpu).unwrap().to_dtype(DType::BF16).unwrap();
        let run = |d: &Device| {
            let [x, w, b] = [&x, &w, &b].map(|t| Var::from_tensor(&t.to_device(d).unwrap()).unwrap());
            let y =
                xsent::model::kernels::layer_norm_train(x.as_tensor(), w.as_tensor(), b.as_tensor(), 1e-12).unwrap();
            assert_eq!(y.dtype(), DType::BF16);
            let g = (&y * wts.to_device(d).unwrap())
                .unwrap()
                .to_dtype(DType::F32)
                .unwrap()
                .sum_all()
                .unwrap()
                .backward()
                .unwrap();
            let grads = [&x, &w, &b].map(|v| g.get(v.as_tensor()).unwrap().to_device(&Device::Cpu).unwrap());
            (y.to_device(&Device::Cpu).unwrap(), grads)
        };
        let ((yc, gc), (yg, gg)) = (run(&Device::Cpu), run(&gpu()));
        let d = rel_diff(&yg, &yc);
        assert!(d <= 1.0 / 128.0, "LayerNorm bf16 {rows}×{n}+{shift}: values differ by {d}");
        for (name, bound, (a, b)) in
            [("x", 1.0 / 128.0, (&gc[0], &gg[0])), ("w", 1e-4, (&gc[1], &gg[1])), ("b", 1e-4, (&gc[2], &gg[2]))]
        {
            let d = rel_diff(b, a);
            assert!(d <= bound, "LayerNorm bf16 {rows}×{n}+{shift}: gradient of {name} differs by {d}");
        }
    }
}

/// bf16 training's masked softmax (bf16 scores, the f32 bias) on the GPU, whose backward
/// recomputes the probabilities from the scores: bit for bit the GPU's cast path (the f32
/// kernels on the widened scores, rounded), and against the CPU's op on the same values, the
/// probabilities and the scores' gradient within a bf16 step, masked keys zero on both.
#[test]
fn bf16_softmax_equals_the_cpu() {
    assert!(
        !xsent::model::kernels::training_kernels_off(),
        "XSENT_KERNELS=candle is set: the CUDA kernels would not run"
    );
    for lk in [37, 128, 300] {
        let (bsz, h, lq) = (2, 3, 5);
        let n = bsz * h * lq * lk;
        let shape = (bsz, h, lq, lk);
        let s = (Tensor::from_vec(values(n, 3), shape, &Device::Cpu).unwrap() * 4.0).unwrap();
        let s = s.to_dtype(DType::BF16).unwrap();
        let mut bias = vec![0f32; bsz * lk];
        bias[lk + lk / 2..].iter_mut().for_each(|v| *v = -1e30);
        let bias = Tensor::from_vec(bias, (bsz, 1, 1, lk), &Device::Cpu).unwrap();
        let up = Tensor::from_vec(values(n, 7), shape, &Device::Cpu).unwrap().to_dtype(DType::BF16).unwrap();
        let run_on = |d: &Device, cast: bool| {
            let sv = Var::from_tensor(&s.to_device(d).unwrap()).unwrap();
            let bias = bias.to_device(d).unwrap();
            let p = if cast {
                let s32 = sv.as_tensor().to_dtype(DType::F32).unwrap();
                xsent::model::kernels::masked_softmax(&s32, &bias, true).unwrap().to_dtype(DType::BF16).unwrap()
            } else {
                xsent::model::kernels::masked_softmax(sv.as_tensor(), &bias, true).unwrap()
            };
            assert_eq!(p.dtype(), DType::BF16);
            let g = (&p * up.to_device(d).unwrap()).unwrap().to_dtype(DType::F32).unwrap().sum_all().unwrap();
            let g = g.backward().unwrap().get(sv.as_tensor()).unwrap().to_device(&Device::Cpu).unwrap();
            (p.to_device(&Device::Cpu).unwrap(), g)
        };
        let ((pc, gc), (pg, gg)) = (run_on(&Device::Cpu, false), run_on(&gpu(), false));
        // On the GPU the op's kernels are the f32 kernels' arithmetic on the widened values: the
        // cast path's bits there (the f32 kernels between two casts).
        let (pw, gw) = run_on(&gpu(), true);
        let bits = |t: &Tensor| t.to_dtype(DType::F32).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
        assert!(
            bits(&pg).iter().zip(bits(&pw)).all(|(a, b)| a.to_bits() == b.to_bits()),
            "softmax bf16 over {lk}: values differ from the cast path's"
        );
        assert!(
            bits(&gg).iter().zip(bits(&gw)).all(|(a, b)| a.to_bits() == b.to_bits()),
            "softmax bf16 over {lk}: gradients differ from the cast path's"
        );
        let d = rel_diff(&pg, &pc);
        assert!(d <= 1.0 / 128.0, "softmax bf16 over {lk}: values differ by {d}");
        let zeros = |t: &Tensor| host(t).iter().map(|&v| v == 0.0).collect::<Vec<_>>();
        assert_eq!(zeros(&pg), zeros(&pc), "softmax bf16 over {lk}: masked keys differ");
        let d = rel_diff(&gg, &gc);
        assert!(d <= 1.0 / 128.0, "softmax bf16 over {lk}: gradients differ by {d}");
    }
}

/// Attention's head split (the query's scale in it) and merge on the GPU (src/gpu/heads.cu)
/// against the CPU op, f32 and bf16: values and gradients bit for bit (a gather, and the scale's
/// one product), the split's gradient arriving contiguous (through the merge); and the key's path
/// (`w·kᵀ`, a transposed view's gradient on the way to the split) within the products' rounding.
#[test]
fn head_split_and_merge_equal_the_cpu() {
    assert!(
        !xsent::model::kernels::training_kernels_off(),
        "XSENT_KERNELS=candle is set: the CUDA kernels would not run"
    );
    let (b, l, nh, d) = (3, 37, 12, 32);
    let n = b * l * nh * d;
    for dt in [DType::F32, DType::BF16] {
        // The op runs on the GPU (candle's ops would give the same bits): a shape it refuses is
        // its error, where candle's reshape would give another.
        let wrong = Tensor::zeros((b * l, nh * d + 1), dt, &gpu()).unwrap();
        let err = xsent::model::kernels::split_heads(&wrong, b, l, nh, None).unwrap_err().to_string();
        assert!(err.contains("fast-split-heads"), "heads {dt:?}: not the op's error: {err}");
        // No sequences: an empty result.
        let empty = Tensor::zeros((0, nh * d), dt, &gpu()).unwrap();
        let e = xsent::model::kernels::split_heads(&empty, 0, l, nh, Some(0.5)).unwrap();
        assert_eq!(xsent::model::kernels::merge_heads(&e).unwrap().dims(), &[0, nh * d]);
        let x = Tensor::from_vec(values(n, 3), (b * l, nh * d), &Device::Cpu).unwrap().to_dtype(dt).unwrap();
        let w = Tensor::from_vec(values(n, 9), (b, nh, l, d), &Device::Cpu).unwrap().to_dtype(dt).unwrap();
        let run = |dev: &Device, key: bool| {
            let v = Var::from_tensor(&x.to_device(dev).unwrap()).unwrap();
            let scale = if key { None } else { Some(1.0 / (d as f64).sqrt()) };
            let s = xsent::model::kernels::split_heads(v.as_tensor(), b, l, nh, scale).unwrap();
            let wd = w.to_device(dev).unwrap();
            let m = if key {
                xsent::model::matmul::matmul(&wd, &s.t().unwrap()).unwrap()
            } else {
                xsent::model::kernels::merge_heads(&(&s * &wd).unwrap()).unwrap()
            };
            let g = m.to_dtype(DType::F32).unwrap().sum_all().unwrap().backward().unwrap();
            let g = g.get(v.as_tensor()).unwrap().to_device(&Device::Cpu).unwrap();
            [s, m].map(|t| t.to_device(&Device::Cpu).unwrap()).into_iter().chain([g]).collect::<Vec<_>>()
        };
        for key in [false, true] {
            let (c, g) = (run(&Device::Cpu, key), run(&gpu(), key));
            let outputs = if key { ["split", "w·kᵀ", "key's gradient"] } else { ["split", "merge", "gradient"] };
            for (i, what) in outputs.iter().enumerate() {
                if key && i > 0 {
                    // Products: cuBLAS's sums against the CPU's, close, not equal.
                    let (r, bound) = (rel_diff(&g[i], &c[i]), if dt == DType::F32 { 1e-5 } else { 1.0 / 128.0 });
                    assert!(r <= bound, "heads {dt:?}: {what} differs by {r}");
                    continue;
                }
                let bits = |t: &Tensor| host(t).iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&g[i]), bits(&c[i]), "heads {dt:?}: the {what} differs from the CPU's");
            }
        }
    }
}

/// bf16 training's linear layer (input, weight and bias bf16) on the GPU against the CPU's op:
/// values and the input's and weight's gradients within bf16 rounding (cuBLAS's bf16 product
/// against the CPU's); the bias gradient, the f64 column sums of the same bf16 values, bit for bit.
#[test]
fn bf16_linear_equals_the_cpu() {
    assert!(
        !xsent::model::kernels::training_kernels_off(),
        "XSENT_KERNELS=candle is set: the CUDA kernels would not run"
    );
    for (rows, inp, out) in [(37, 70, 45), (4096, 384, 1536)] {
        let bf = |n: usize, seed: usize, shape: (usize, usize)| {
            Tensor::from_vec(values(n, seed), shape, &Device::Cpu).unwrap().to_dtype(DType::BF16).unwrap()
        };
        let (x, w) = (bf(rows * inp, 4, (rows, inp)), bf(out * inp, 6, (out, inp)));
        let b = bf(out, 8, (1, out)).squeeze(0).unwrap();
        let up = bf(rows * out, 10, (rows, out));
        let run = |d: &Device| {
            let [x, w, b] = [&x, &w, &b].map(|t| Var::from_tensor(&t.to_device(d).unwrap()).unwrap());
            let y = xsent::model::kernels::linear(x.as_tensor(), w.as_tensor(), b.as_tensor(), true).unwrap();
            assert_eq!(y.dtype(), DType::BF16);
            let g = (&y * up.to_device(d).unwrap()).unwrap().to_dtype(DType::F32).unwrap().sum_all().unwrap();
            let g = g.backward().unwrap();
            let grads = [&x, &w, &b].map(|v| g.get(v.as_tensor()).unwrap().to_device(&Device::Cpu).unwrap());
            (y.to_device(&Device::Cpu).unwrap(), grads)
        };
        let ((yc, gc), (yg, gg)) = (run(&Device::Cpu), run(&gpu()));
        for (what, a, b) in [("values", &yg, &yc), ("x's gradient", &gg[0], &gc[0]), ("w's gradient", &gg[1], &gc[1])] {
            // The products' f32 sums differ in order, then each is rounded to bf16: a step apart.
            let d = rel_diff(a, b);
            assert!(d <= 1.0 / 128.0, "linear bf16 {rows}×{inp}→{out}: {what} differ by {d}");
        }
        assert_eq!(host(&gg[2]), host(&gc[2]), "linear bf16 {rows}×{inp}→{out}: bias gradients differ");
    }
}

#[test]
fn exact_knn_on_the_gpu_equals_the_cpu() {
    use xsent::index::knn::{knn_both, Matrix};
    // Small integers: exact products in any order, so the lists must be equal, ties included.
    let m =
        |n: usize, s: usize| Matrix { data: (0..n * 8).map(|i| (((i + s) * 7919) % 5) as f32 - 2.0).collect(), dim: 8 };
    let (x, y) = (m(3000, 1), m(20_000, 2));
    let want = knn_both(&x, &y, 4).unwrap();
    let got = xsent::index::knn_gpu::search(&x, &y, 4, true, &gpu()).unwrap();
    assert_eq!(got.0, want.0);
    assert_eq!(got.1.unwrap(), want.1);
}

#[test]
fn sp_averaging_on_the_gpu_equals_the_cpu() {
    use xsent::train::config::DropoutKind;
    use xsent::train::recipes::sp::average_with_dropout;
    let (vocab, dim) = (500, 32);
    let table = Tensor::from_vec(values(vocab * dim, 4), (vocab, dim), &Device::Cpu).unwrap();
    let sents: Vec<Vec<u32>> =
        (0..64).map(|i| (0..(1 + i % 13)).map(|j| ((i * 31 + j * 17) % vocab) as u32).collect()).collect();
    let refs: Vec<&[u32]> = sents.iter().map(Vec::as_slice).collect();
    let run = |d: &Device| {
        let v = Var::from_tensor(&table.to_device(d).unwrap()).unwrap();
        let mut rng = <xsent::model::encoder::Rng as rand::SeedableRng>::seed_from_u64(3);
        let y = average_with_dropout(v.as_tensor(), dim, &refs, 0.0, DropoutKind::Unit, &mut rng).unwrap();
        let g = y.sqr().unwrap().sum_all().unwrap().backward().unwrap().get(v.as_tensor()).unwrap().clone();
        (y, g)
    };
    let ((yc, gc), (yg, gg)) = (run(&Device::Cpu), run(&gpu()));
    assert!(rel_diff(&yg, &yc) < 1e-6 && rel_diff(&gg, &gc) < 1e-5);
}

/// `train.precision = "bf16"` on the GPU (cuBLAS's bf16 products): the training forward and
/// backward of the bf16 copy against the f32 CPU pass, dropout off. Close (bf16 keeps 8 bits of
/// mantissa; on the CPU the same comparison measured 0.007 for hidden states and 0.014 for
/// gradients, src/train/precision.rs), not equal, and every master gets an f32 gradient.
#[test]
fn bf16_training_on_the_gpu_follows_f32_on_the_cpu() {
    use xsent::train::config::Precision;
    use xsent::train::precision::Compute;
    let dir = tempfile::tempdir().unwrap();
    let words: Vec<String> = (0..50).map(|i| format!("w{i}")).collect();
    let texts: Vec<String> = (0..24)
        .map(|i| (0..(3 + i % 9)).map(|j| words[(i * 7 + j * 3) % 50].as_str()).collect::<Vec<_>>().join(" "))
        .collect();
    let path = common::tiny_model("tiny-bert", dir.path(), &words);
    let load = |d: Device| {
        let mut e = SentenceEncoder::load(
            path.to_str().unwrap(),
            &LoadOptions { device: d, trainable: true, ..Default::default() },
        )
        .unwrap();
        e.encoder.hidden_dropout = 0.0;
        e.encoder.attention_dropout = 0.0;
        e
    };
    let (cpu, cuda) = (load(Device::Cpu), load(gpu()));
    let step = |e: &SentenceEncoder, precision: Precision| {
        let mut compute = Compute::new(precision, e.device());
        compute.refresh(&e.encoder).unwrap();
        let enc = compute.encoder(&e.encoder).unwrap();
        let mut rng =
            xsent::model::TrainContext::new(<xsent::model::encoder::Rng as rand::SeedableRng>::seed_from_u64(1));
        let emb = e.forward_on(&enc, &texts, &mut Mode::Train(&mut rng)).unwrap();
        assert_eq!(emb.dtype(), DType::F32);
        // The vectors are normalised: a weighted sum, not the sum of squares (always 24).
        let wts = Tensor::from_vec(values(emb.elem_count(), 7), emb.shape(), emb.device()).unwrap();
        let loss = (&emb * &wts).unwrap().sum_all().unwrap();
        let g = loss.backward().unwrap();
        let grads: Vec<(String, Tensor)> = e
            .trainable_params()
            .vars
            .iter()
            .map(|(n, v)| {
                let t = g.get(v.as_tensor()).unwrap_or_else(|| panic!("{n}: no gradient ({precision:?})"));
                assert_eq!(t.dtype(), DType::F32, "{n}");
                (n.clone(), t.to_device(&Device::Cpu).unwrap())
            })
            .collect();
        (loss.to_device(&Device::Cpu).unwrap(), grads)
    };
    let ((lc, gc), (lg, gg)) = (step(&cpu, Precision::F32), step(&cuda, Precision::Bf16));
    let d = rel_diff(&lg, &lc);
    assert!(d > 0.0 && d < 0.03, "loss: bf16 on the GPU {lg} against f32 on the CPU {lc}");
    let largest = |t: &Tensor| t.abs().unwrap().flatten_all().unwrap().max(0).unwrap().to_scalar::<f32>().unwrap();
    let floor = gc.iter().map(|(_, t)| largest(t)).fold(0f32, f32::max) / 100.0;
    for ((name, a), (_, b)) in gc.iter().zip(&gg) {
        let diff = (b - a).unwrap();
        let d = largest(&diff) / largest(a).max(floor);
        assert!(d < 0.05, "gradient of {name}: bf16 on the GPU differs by {d} of the largest");
    }
}

/// LayerNorm and softmax for training on the GPU (candle's one-kernel forward copied into a
/// custom op, the backward in closed form, src/model/kernels/given_value.rs) give the values and
/// gradients of the CPU's fused kernels.
#[test]
fn one_op_layer_norm_and_softmax_equal_the_cpu() {
    let dev = gpu();
    let (rows, n) = (64, 384);
    let x = Tensor::from_vec(values(rows * n, 5), (rows, n), &Device::Cpu).unwrap();
    let w = Tensor::from_vec(values(n, 9), n, &Device::Cpu).unwrap();
    let b = Tensor::from_vec(values(n, 2), n, &Device::Cpu).unwrap();
    let wts = Tensor::from_vec(values(rows * n, 11), (rows, n), &Device::Cpu).unwrap();
    // The CPU's reference is its fused kernels (another implementation); the GPU runs the one-op ones.
    let run = |d: &Device| {
        let (x, w, b) =
            (Var::from_tensor(&x.to_device(d).unwrap()).unwrap(), w.to_device(d).unwrap(), b.to_device(d).unwrap());
        let (w, b) = (Var::from_tensor(&w).unwrap(), Var::from_tensor(&b).unwrap());
        let y = xsent::model::kernels::layer_norm_train(x.as_tensor(), w.as_tensor(), b.as_tensor(), 1e-12).unwrap();
        let bias = Tensor::zeros((rows, 1, 1, n), DType::F32, d).unwrap();
        let p = xsent::model::kernels::masked_softmax(&y.reshape((rows, 1, 1, n)).unwrap(), &bias, true).unwrap();
        let loss = (p.reshape((rows, n)).unwrap() * wts.to_device(d).unwrap()).unwrap().sum_all().unwrap();
        let g = loss.backward().unwrap();
        let cpu = |t: &Tensor| t.to_device(&Device::Cpu).unwrap();
        (cpu(&y), [&x, &w, &b].map(|v| cpu(g.get(v.as_tensor()).unwrap())))
    };
    // On a GPU, f32 training runs the CUDA kernels (the test below); the one-op path is what
    // `XSENT_KERNELS=candle` (here: `with_candle_ops` on this thread) keeps.
    let ((yc, gc), (yg, gg)) = (run(&Device::Cpu), xsent::model::kernels::with_candle_ops(|| run(&dev)));
    assert!(rel_diff(&yg, &yc) < 1e-5, "values differ by {}", rel_diff(&yg, &yc));
    for (name, (a, b)) in ["x", "w", "b"].iter().zip(gc.iter().zip(&gg)) {
        assert!(rel_diff(b, a) < 1e-4, "gradient of {name} differs by {}", rel_diff(b, a));
    }
}

/// A tensor's values on the CPU as f32.
fn host(t: &Tensor) -> Vec<f32> {
    t.to_device(&Device::Cpu).unwrap().to_dtype(DType::F32).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap()
}

/// The CUDA side of training's LayerNorm, linear layer, masked softmax and GELU (src/gpu) gives
/// the CPU kernels' values and gradients: the same ops run on both devices. Shapes with rows that do
/// not fill a block and widths that are not multiples of 32; a row of large mean; masked keys.
/// LayerNorm and softmax sum a row as a warp's tree where the CPU sums in order (bounds 1e-5
/// relative for values, 1e-4 for gradients); GELU's arithmetic is the CPU's, operation for
/// operation (bound 1e-6; how many values differ in any bit is printed).
#[test]
fn fused_training_kernels_equal_the_cpu() {
    assert!(
        !xsent::model::kernels::training_kernels_off(),
        "XSENT_KERNELS=candle is set: the CUDA kernels would not run"
    );
    let dev = gpu();
    // LayerNorm: values and the three gradients; the input a view at an offset (its first row
    // left out), which the op reads in place.
    for (rows, n, shift) in [(5, 37, 0.0), (64, 384, 0.0), (3, 1000, 0.0), (9, 384, 40.0)] {
        let x = (Tensor::from_vec(values((rows + 1) * n, 5), (rows + 1, n), &Device::Cpu).unwrap() + shift).unwrap();
        let w = Tensor::from_vec(values(n, 9), n, &Device::Cpu).unwrap();
        let b = Tensor::from_vec(values(n, 2), n, &Device::Cpu).unwrap();
        let wts = Tensor::from_vec(values(rows * n, 11), (rows, n), &Device::Cpu).unwrap();
        let run = |d: &Device| {
            let [x, w, b] = [&x, &w, &b].map(|t| Var::from_tensor(&t.to_device(d).unwrap()).unwrap());
            let view = x.as_tensor().narrow(0, 1, rows).unwrap();
            let y = xsent::model::kernels::layer_norm_train(&view, w.as_tensor(), b.as_tensor(), 1e-12).unwrap();
            let g = (&y * wts.to_device(d).unwrap()).unwrap().sum_all().unwrap().backward().unwrap();
            let grads = [&x, &w, &b].map(|v| g.get(v.as_tensor()).unwrap().to_device(&Device::Cpu).unwrap());
            (y.to_device(&Device::Cpu).unwrap(), grads)
        };
        let ((yc, gc), (yg, gg)) = (run(&Device::Cpu), run(&dev));
        assert!(rel_diff(&yg, &yc) < 1e-5, "LayerNorm {rows}×{n}+{shift}: values differ by {}", rel_diff(&yg, &yc));
        for (name, (a, b)) in ["x", "w", "b"].iter().zip(gc.iter().zip(&gg)) {
            let d = rel_diff(b, a);
            assert!(d < 1e-4, "LayerNorm {rows}×{n}+{shift}: gradient of {name} differs by {d}");
        }
    }
    // The linear layer: values and the three gradients, for a contiguous input and for a column
    // slice (rows wider than the matrix: made contiguous for cuBLAS first).
    for (rows, inp, out, wide) in [(37, 70, 45, 0), (64, 384, 1536, 0), (33, 40, 24, 9)] {
        let x = Tensor::from_vec(values(rows * (inp + wide), 4), (rows, inp + wide), &Device::Cpu).unwrap();
        let w = Tensor::from_vec(values(out * inp, 6), (out, inp), &Device::Cpu).unwrap();
        let b = Tensor::from_vec(values(out, 8), out, &Device::Cpu).unwrap();
        let wts = Tensor::from_vec(values(rows * out, 10), (rows, out), &Device::Cpu).unwrap();
        let run = |d: &Device| {
            let [x, w, b] = [&x, &w, &b].map(|t| Var::from_tensor(&t.to_device(d).unwrap()).unwrap());
            let view = x.as_tensor().narrow(1, wide, inp).unwrap();
            let y = xsent::model::kernels::linear(&view, w.as_tensor(), b.as_tensor(), true).unwrap();
            let g = (&y * wts.to_device(d).unwrap()).unwrap().sum_all().unwrap().backward().unwrap();
            let grads = [&x, &w, &b].map(|v| g.get(v.as_tensor()).unwrap().to_device(&Device::Cpu).unwrap());
            (y.to_device(&Device::Cpu).unwrap(), grads)
        };
        let ((yc, gc), (yg, gg)) = (run(&Device::Cpu), run(&dev));
        assert!(rel_diff(&yg, &yc) < 1e-5, "linear {rows}×{inp}→{out}: values differ by {}", rel_diff(&yg, &yc));
        for (name, (a, b)) in ["x", "w", "b"].iter().zip(gc.iter().zip(&gg)) {
            let d = rel_diff(b, a);
            assert!(d < 1e-4, "linear {rows}×{inp}→{out}: gradient of {name} differs by {d}");
        }
    }
    // Masked softmax: scores [2, 3, 5, lk], the last keys of the second sequence masked.
    for lk in [37, 128, 300] {
        let (bsz, h, lq) = (2, 3, 5);
        let scores =
            (Tensor::from_vec(values(bsz * h * lq * lk, 3), (bsz, h, lq, lk), &Device::Cpu).unwrap() * 4.0).unwrap();
        let mut bias = vec![0f32; bsz * lk];
        bias[lk + lk / 2..].iter_mut().for_each(|v| *v = -1e30);
        let bias = Tensor::from_vec(bias, (bsz, 1, 1, lk), &Device::Cpu).unwrap();
        let wts = Tensor::from_vec(values(bsz * h * lq * lk, 7), (bsz, h, lq, lk), &Device::Cpu).unwrap();
        let run = |d: &Device| {
            let s = Var::from_tensor(&scores.to_device(d).unwrap()).unwrap();
            let p = xsent::model::kernels::masked_softmax(s.as_tensor(), &bias.to_device(d).unwrap(), true).unwrap();
            let g = (&p * wts.to_device(d).unwrap()).unwrap().sum_all().unwrap().backward().unwrap();
            (p.to_device(&Device::Cpu).unwrap(), g.get(s.as_tensor()).unwrap().to_device(&Device::Cpu).unwrap())
        };
        let ((pc, gc), (pg, gg)) = (run(&Device::Cpu), run(&dev));
        assert!(rel_diff(&pg, &pc) < 1e-5, "softmax over {lk}: values differ by {}", rel_diff(&pg, &pc));
        assert!(host(&pg).iter().zip(host(&pc)).all(|(a, b)| (*a == 0.0) == (b == 0.0)), "masked keys differ");
        assert!(rel_diff(&gg, &gc) < 1e-4, "softmax over {lk}: gradients differ by {}", rel_diff(&gg, &gc));
    }
    // GELU, f32: values and gradients.
    let n = 100_003;
    let xs: Vec<f32> = (0..n).map(|i| (i as f32 / n as f32 - 0.5) * 14.0).collect();
    let x = Tensor::from_vec(xs, n, &Device::Cpu).unwrap();
    let wts = Tensor::from_vec(values(n, 13), n, &Device::Cpu).unwrap();
    let run = |d: &Device, dtype: DType| {
        let v = Var::from_tensor(&x.to_device(d).unwrap().to_dtype(dtype).unwrap()).unwrap();
        let y = xsent::model::kernels::gelu_erf_train(v.as_tensor()).unwrap();
        let w = wts.to_device(d).unwrap().to_dtype(dtype).unwrap();
        let g = (&y * w).unwrap().sum_all().unwrap().backward().unwrap();
        (host(&y), host(g.get(v.as_tensor()).unwrap()))
    };
    let ((yc, gc), (yg, gg)) = (run(&Device::Cpu, DType::F32), run(&dev, DType::F32));
    let differ = |a: &[f32], b: &[f32]| a.iter().zip(b).filter(|(a, b)| a.to_bits() != b.to_bits()).count();
    let worst = |a: &[f32], b: &[f32]| {
        a.iter().zip(b).map(|(a, b)| (a - b).abs() / b.abs().max(1.0)).fold(0f32, |m, d| {
            if d.is_nan() || m.is_nan() {
                f32::NAN
            } else {
                m.max(d)
            }
        })
    };
    xsent::errln!(
        "GELU f32 on the GPU against the CPU: {} of {n} values and {} gradients differ in any bit",
        differ(&yg, &yc),
        differ(&gg, &gc)
    );
    assert!(worst(&yg, &yc) <= 1e-6 && worst(&gg, &gc) <= 1e-6, "GELU: {} / {}", worst(&yg, &yc), worst(&gg, &gc));
    // bf16 on the GPU: the f32 results of the same bf16 inputs, rounded once (within a bf16 step).
    let (yb, gb) = run(&dev, DType::BF16);
    let xb = host(&x.to_dtype(DType::BF16).unwrap());
    let wb = host(&wts.to_dtype(DType::BF16).unwrap());
    let xb = Tensor::from_vec(xb, n, &Device::Cpu).unwrap();
    let v = Var::from_tensor(&xb).unwrap();
    let y = xsent::model::kernels::gelu_erf_train(v.as_tensor()).unwrap();
    let g = (&y * Tensor::from_vec(wb, n, &Device::Cpu).unwrap()).unwrap().sum_all().unwrap().backward().unwrap();
    let (yr, gr) = (host(&y), host(g.get(v.as_tensor()).unwrap()));
    assert!(worst(&yb, &yr) <= 8e-3 && worst(&gb, &gr) <= 8e-3, "GELU bf16: {} / {}", worst(&yb, &yr), worst(&gb, &gr));
}
