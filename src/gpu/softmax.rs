//! Attention's masked softmax for training on CUDA (`softmax.cu`): the GPU side of
//! [`crate::model::kernels::masked_softmax`]'s op and its backward. The scores (and the
//! probabilities and their gradients) are f32, or bf16 in bf16 training; the mask bias is f32.

use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::CudaStorage;
use candle_core::{DType, Layout, Shape};
use half::bf16;

use super::{f32_view, launch, params, rows_and_width, view, Elem, Loaded};

const PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/softmax.ptx"));
const MODULE: &str = "xsent_softmax";

/// [`launch::softmax_shapes`] for these kernels, which count a row's keys in 32 bits (no keys:
/// no rows, nothing launched).
fn shapes(op: &str, scores: &Layout, bias: &Layout) -> candle_core::Result<(usize, usize, usize)> {
    let (rows, lk, per_bias) = launch::softmax_shapes(op, scores.dims(), bias.dims())?;
    if rows > 0 {
        launch::row_width(op, lk)?;
    }
    Ok((rows, lk, per_bias))
}

/// `softmax(scores + bias)` over the last dimension: `scores` `[B, H, Lq, Lk]` (f32 or bf16; the
/// output in its dtype), `bias` `[B, 1, 1, Lk]` (f32), both contiguous.
pub fn masked(s: (&CudaStorage, &Layout), bias: (&CudaStorage, &Layout)) -> candle_core::Result<(CudaStorage, Shape)> {
    const OP: &str = "xsent-masked-softmax-cuda";
    let out = match s.0.dtype() {
        DType::F32 => masked_typed::<f32>(s, bias)?,
        DType::BF16 => masked_typed::<bf16>(s, bias)?,
        other => candle_core::bail!("{OP}: f32 or bf16 scores only, got {other:?}"),
    };
    Ok((out, s.1.shape().clone()))
}

fn masked_typed<T: Elem>(
    s: (&CudaStorage, &Layout),
    bias: (&CudaStorage, &Layout),
) -> candle_core::Result<CudaStorage> {
    const OP: &str = "xsent-masked-softmax-cuda";
    let (rows, lk, per_bias) = shapes(OP, s.1, bias.1)?;
    let (sv, bv) = (view::<T>(OP, s.0, s.1)?, f32_view(OP, bias.0, bias.1)?);
    let dev = s.0.device();
    // SAFETY: the kernel writes every element.
    let mut out = unsafe { dev.alloc::<T>(rows * lk) }?;
    if rows > 0 {
        let k = params::masked_softmax(T::TY, rows, lk, per_bias);
        let kernel = Loaded::new(dev, MODULE, PTX, k.list())?;
        let mut args = kernel.args();
        args.buf("x", &sv).buf("bias", &bv).buf("y", &mut out);
        // SAFETY: the arguments match `xsent_masked_softmax_{f32,bf16}`: scores and out of rows·lk
        // values of T, the bias of B·lk f32 (row r reads bias row r / (H·Lq) < B), rows, lk, H·Lq.
        unsafe { args.launch(launch::rows(OP, rows)?) }?;
    }
    Ok(CudaStorage::wrap_cuda_slice(out, dev.clone()))
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
        let k = params::softmax_grad(rows, n);
        let kernel = Loaded::new(dev, MODULE, PTX, k.list())?;
        let mut args = kernel.args();
        args.buf("y", &yv).buf("g", &gv).buf("dx", &mut out);
        // SAFETY: the arguments match `xsent_softmax_grad_f32`: y, g and out of rows·n f32, rows, n.
        unsafe { args.launch(launch::rows(OP, rows)?) }?;
    }
    Ok((CudaStorage::wrap_cuda_slice(out, dev.clone()), y.1.shape().clone()))
}

/// The backward of bf16 scores' softmax from the scores `x` (`[B, H, Lq, Lk]`, bf16), the bias
/// (`[B, 1, 1, Lk]`, f32) and the probabilities' gradient `g` (`x`'s shape, bf16), all
/// contiguous: the f32 probabilities recomputed, `y ⊙ (g − Σ g⊙y)` per row, rounded to bf16.
pub fn backward_bf16(
    x: (&CudaStorage, &Layout),
    bias: (&CudaStorage, &Layout),
    g: (&CudaStorage, &Layout),
) -> candle_core::Result<(CudaStorage, Shape)> {
    const OP: &str = "xsent-masked-softmax-grad-bf16-cuda";
    let (rows, lk, per_bias) = shapes(OP, x.1, bias.1)?;
    if g.1.dims() != x.1.dims() {
        candle_core::bail!("{OP}: a gradient of shape {:?} for scores of {:?}", g.1.dims(), x.1.dims());
    }
    let (xv, bv, gv) = (view::<bf16>(OP, x.0, x.1)?, f32_view(OP, bias.0, bias.1)?, view::<bf16>(OP, g.0, g.1)?);
    let dev = x.0.device();
    // SAFETY: the kernel writes every element.
    let mut out = unsafe { dev.alloc::<bf16>(rows * lk) }?;
    if rows > 0 {
        let k = params::masked_softmax_grad(rows, lk, per_bias);
        let kernel = Loaded::new(dev, MODULE, PTX, k.list())?;
        let mut args = kernel.args();
        args.buf("x", &xv).buf("bias", &bv).buf("g", &gv).buf("dx", &mut out);
        // SAFETY: the arguments match `xsent_masked_softmax_grad_bf16`: x, g and dx of rows·lk
        // bf16, the bias of B·lk f32 (row r reads bias row r / (H·Lq) < B), rows, lk, H·Lq.
        unsafe { args.launch(launch::rows(OP, rows)?) }?;
    }
    Ok((CudaStorage::wrap_cuda_slice(out, dev.clone()), x.1.shape().clone()))
}
