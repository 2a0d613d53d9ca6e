//! Attention's masked softmax for training on CUDA f32 (`softmax.cu`): the GPU side of
//! [`crate::model::kernels::masked_softmax`]'s op and its backward.

use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::CudaStorage;
use candle_core::{Layout, Shape};

use super::{f32_view, launch, rows_and_width, Args};

const PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/softmax.ptx"));
const MODULE: &str = "xsent_softmax";

/// `softmax(scores + bias)` over the last dimension: `scores` `[B, H, Lq, Lk]`, `bias`
/// `[B, 1, 1, Lk]`, both contiguous.
pub fn masked(s: (&CudaStorage, &Layout), bias: (&CudaStorage, &Layout)) -> candle_core::Result<(CudaStorage, Shape)> {
    const OP: &str = "xsent-masked-softmax-cuda";
    let &[b, h, lq, lk] = s.1.dims() else {
        candle_core::bail!("{OP}: scores of rank 4 expected, got {:?}", s.1.dims())
    };
    if bias.1.dims() != [b, 1, 1, lk] {
        candle_core::bail!("{OP}: a mask bias of shape [{b}, 1, 1, {lk}] expected, got {:?}", bias.1.dims());
    }
    let (rows, _) = rows_and_width(OP, s.1)?;
    let (sv, bv) = (f32_view(OP, s.0, s.1)?, f32_view(OP, bias.0, bias.1)?);
    let dev = s.0.device();
    // SAFETY: the kernel writes every element.
    let mut out = unsafe { dev.alloc::<f32>(rows * lk) }?;
    if rows > 0 {
        let kernel = "xsent_masked_softmax_f32";
        let func = dev.get_or_load_custom_func(kernel, MODULE, PTX)?;
        let (rows64, lk32, per_bias) = (rows as u64, lk as u32, (h * lq) as u64);
        let mut args = Args::new(func.builder(), kernel, PTX);
        args.buf(&sv).buf(&bv).buf(&mut out).val(&rows64).val(&lk32).val(&per_bias);
        // SAFETY: the arguments match `xsent_masked_softmax_f32`: scores and out of rows·lk f32,
        // the bias of B·lk (row r reads bias row r / (H·Lq) < B), rows, lk, H·Lq.
        unsafe { args.launch(launch::rows(OP, rows)?) }?;
    }
    Ok((CudaStorage::wrap_cuda_slice(out, dev.clone()), s.1.shape().clone()))
}

/// The softmax's backward `y ⊙ (g − Σ g⊙y)` per row, from its output `y` and the gradient `g`
/// (one shape, contiguous).
pub fn backward(y: (&CudaStorage, &Layout), g: (&CudaStorage, &Layout)) -> candle_core::Result<(CudaStorage, Shape)> {
    const OP: &str = "xsent-softmax-grad-cuda";
    if y.1.dims() != g.1.dims() {
        candle_core::bail!("{OP}: a gradient of shape {:?} for an output of {:?}", g.1.dims(), y.1.dims());
    }
    let (rows, n) = rows_and_width(OP, y.1)?;
    let (yv, gv) = (f32_view(OP, y.0, y.1)?, f32_view(OP, g.0, g.1)?);
    let dev = y.0.device();
    // SAFETY: the kernel writes every element.
    let mut out = unsafe { dev.alloc::<f32>(rows * n) }?;
    if rows > 0 {
        let kernel = "xsent_softmax_grad_f32";
        let func = dev.get_or_load_custom_func(kernel, MODULE, PTX)?;
        let (rows64, n32) = (rows as u64, n as u32);
        let mut args = Args::new(func.builder(), kernel, PTX);
        args.buf(&yv).buf(&gv).buf(&mut out).val(&rows64).val(&n32);
        // SAFETY: the arguments match `xsent_softmax_grad_f32`: y, g and out of rows·n f32, rows, n.
        unsafe { args.launch(launch::rows(OP, rows)?) }?;
    }
    Ok((CudaStorage::wrap_cuda_slice(out, dev.clone()), y.1.shape().clone()))
}
