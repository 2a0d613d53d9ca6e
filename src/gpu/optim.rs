//! The optimiser's two passes over all parameters in one launch each: the gradients' Σx² (for
//! the global norm) and the AdamW update. One launch per parameter cost the host a launch (and,
//! for Σx², two candle ops and an allocation) per tensor, about 600 per step for a 12-layer BERT;
//! now each pass is a table copied to the GPU and one launch. The kernels are in adamw.cu.

use super::launch::{chunked, chunks, lr_and_decay, table, CHUNK};
use super::params::{self, AdamWStep};
use super::{Loaded, ADAMW_MODULE, ADAMW_PTX};
use candle_core::cuda_backend::cudarc::driver::{CudaSlice, DevicePtr};
use candle_core::cuda_backend::CudaDevice;
use candle_core::{DType, Storage, Tensor};

/// The GPU of `ts` (all on one), and each one's address: contiguous CUDA f32 tensors only.
fn addresses(op: &str, ts: &[&Tensor]) -> candle_core::Result<(CudaDevice, Vec<u64>)> {
    let Some(first) = ts.first() else { candle_core::bail!("{op}: no tensors") };
    let dev = match first.device() {
        candle_core::Device::Cuda(d) => d.clone(),
        other => candle_core::bail!("{op}: a CUDA tensor was expected, not one on {other:?}"),
    };
    let stream = dev.cuda_stream();
    let mut out = Vec::with_capacity(ts.len());
    for t in ts {
        if !t.device().same_device(first.device()) || t.dtype() != DType::F32 {
            candle_core::bail!("{op}: f32 tensors on one GPU were expected ({:?} on {:?})", t.dtype(), t.device());
        }
        let (s, l) = t.storage_and_layout();
        let Storage::Cuda(s) = &*s else { candle_core::bail!("{op}: not a CUDA tensor") };
        let Some((a, _)) = l.contiguous_offsets() else { candle_core::bail!("{op}: contiguous tensors only") };
        let slice: &CudaSlice<f32> = s.as_cuda_slice::<f32>()?;
        // The address only: the kernel runs on the one stream after the work queued so far, and
        // the caller keeps every tensor alive until it is queued (frees are stream-ordered).
        // Writes through it bypass candle's storage lock: sound while one host thread issues
        // the GPU's work (the trainer's: GPU recipes run a step whole on it, and candle's
        // per-thread stream would not order work from other threads anyway).
        let (ptr, _record) = slice.device_ptr(&stream);
        out.push(ptr + (a * std::mem::size_of::<f32>()) as u64);
    }
    Ok((dev, out))
}

/// Σx² over all elements of the gradients `gs` (contiguous f32, one GPU), in f64: each chunk's
/// sum in f64 on the GPU, then the chunks' in order here (one read, one wait for the GPU).
pub fn sum_of_squares(gs: &[&Tensor]) -> candle_core::Result<f64> {
    const OP: &str = "xsent-sumsq-many";
    if gs.is_empty() {
        return Ok(0.0);
    }
    let (dev, ptrs) = addresses(OP, gs)?;
    let lens: Vec<usize> = gs.iter().map(|g| g.elem_count()).collect();
    let chunks = chunks(&lens, CHUNK);
    if chunks.is_empty() {
        return Ok(0.0);
    }
    let tab = dev.clone_htod(&table(&[ptrs, lens.iter().map(|&n| n as u64).collect()], &chunks))?;
    // SAFETY: every partial is written by the kernel (one block per chunk) before it is read.
    let mut partial: CudaSlice<f64> = unsafe { dev.alloc::<f64>(chunks.len()) }?;
    let k = params::sumsq_many(gs.len(), CHUNK);
    let kernel = Loaded::new(&dev, ADAMW_MODULE, ADAMW_PTX, k.list())?;
    let mut args = kernel.args();
    args.buf("table", &tab).buf("partial", &mut partial);
    // SAFETY: the arguments match xsent_sumsq_many_f32 (src/gpu/adamw.cu): the table of 2·T
    // values then 2 per chunk (built above from T tensors and their chunks), T, the chunk
    // length, and one f64 per chunk (one block each). Each address is a live gradient's first
    // element, and each chunk lies within its tensor (`chunks`).
    unsafe { args.launch(chunked(OP, chunks.len())?) }?;
    Ok(dev.clone_dtoh(&partial)?.iter().sum())
}

/// One AdamW update of a parameter: its gradient, moments, learning rate and weight decay.
pub struct Update<'a> {
    pub p: &'a Tensor,
    pub g: &'a Tensor,
    pub m: &'a Tensor,
    pub v: &'a Tensor,
    pub lr: f32,
    pub decay: f32,
}

/// AdamW over all `updates` in one launch (parameters, gradients and moments contiguous f32 on
/// one GPU, each triple of the parameter's length): parameters and moments updated in place,
/// with the step's scalars.
pub fn adamw<'a>(updates: &[Update<'a>], step: &AdamWStep) -> candle_core::Result<()> {
    const OP: &str = "xsent-adamw-many";
    if updates.is_empty() {
        return Ok(());
    }
    for u in updates {
        let n = u.p.elem_count();
        for (what, t) in [("gradient", u.g), ("first moment", u.m), ("second moment", u.v)] {
            if t.elem_count() != n {
                candle_core::bail!("{OP}: the {what} has shape {:?}, the parameter {:?}", t.dims(), u.p.dims());
            }
        }
    }
    let field = |f: for<'u> fn(&'u Update<'a>) -> &'a Tensor| -> candle_core::Result<(CudaDevice, Vec<u64>)> {
        addresses(OP, &updates.iter().map(f).collect::<Vec<_>>())
    };
    let (dev, p) = field(|u| u.p)?;
    // Each field's tensors share a GPU (`addresses`); the fields' first tensors must too.
    let first = &updates[0];
    if ![first.g, first.m, first.v].iter().all(|t| t.device().same_device(first.p.device())) {
        candle_core::bail!("{OP}: parameters, gradients and moments must be on one GPU");
    }
    let (g, m, v) = (field(|u| u.g)?.1, field(|u| u.m)?.1, field(|u| u.v)?.1);
    // One launch updates all at once: a parameter listed twice would race with itself (one
    // kernel per parameter updated it twice, in turn).
    let mut seen = p.clone();
    seen.sort_unstable();
    if seen.windows(2).any(|w| w[0] == w[1]) {
        candle_core::bail!("{OP}: a parameter is listed twice");
    }
    let lens: Vec<usize> = updates.iter().map(|u| u.p.elem_count()).collect();
    let chunks = chunks(&lens, CHUNK);
    if chunks.is_empty() {
        return Ok(());
    }
    let n: Vec<u64> = lens.iter().map(|&n| n as u64).collect();
    let hyper: Vec<u64> = updates.iter().map(|u| lr_and_decay(u.lr, u.decay)).collect();
    let tab = dev.clone_htod(&table(&[p, g, m, v, n, hyper], &chunks))?;
    let k = params::adamw_many(updates.len(), CHUNK, step);
    let kernel = Loaded::new(&dev, ADAMW_MODULE, ADAMW_PTX, k.list())?;
    let mut args = kernel.args();
    args.buf("table", &tab);
    // SAFETY: the arguments match xsent_adamw_many_f32 (src/gpu/adamw.cu): the table of 6·T
    // values then 2 per chunk, T, the chunk length, and six f32 scalars. Each address is a live
    // tensor's first element (checked contiguous f32 on one GPU, each gradient and moment of
    // its parameter's length), and each chunk lies within its tensor. The kernel writes the
    // parameters and moments in place: the optimiser owns the moments alone and updates each
    // parameter once per step, as the one-tensor kernel does; all work runs on the one stream.
    unsafe { args.launch(chunked(OP, chunks.len())?) }?;
    Ok(())
}
