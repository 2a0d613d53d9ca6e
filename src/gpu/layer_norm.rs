//! LayerNorm for training on CUDA (`layer_norm.cu`): the GPU side of
//! [`crate::model::kernels::layer_norm_train`]'s forward and backward ops. The activation (and
//! its gradient and the output) is f32, or bf16 in bf16 training; the weights are f32.

use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::CudaStorage;
use candle_core::{DType, Layout, Shape};
use half::bf16;

use super::{f32_view, launch, params, rows_and_width, view, Elem, Loaded};

const PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/layer_norm.ptx"));
const MODULE: &str = "xsent_layer_norm";

/// A `[n]` vector's layout, checked.
fn check_vec(op: &str, what: &str, l: &Layout, n: usize) -> candle_core::Result<()> {
    if l.dims() != [n] {
        candle_core::bail!("{op}: the {what} has shape {:?}, rows have {n} values", l.dims());
    }
    Ok(())
}

/// `x̂ · w + b` for each row of `x` (`[…, n]`, contiguous, f32 or bf16; the output in its dtype),
/// `w` and `b` of `[n]` (f32).
pub fn forward(
    x: (&CudaStorage, &Layout),
    w: (&CudaStorage, &Layout),
    b: (&CudaStorage, &Layout),
    eps: f32,
) -> candle_core::Result<(CudaStorage, Shape)> {
    const OP: &str = "xsent-layer-norm-cuda";
    let (rows, n) = rows_and_width(OP, x.1)?;
    check_vec(OP, "weight", w.1, n)?;
    check_vec(OP, "bias", b.1, n)?;
    let out = match x.0.dtype() {
        DType::F32 => forward_typed::<f32>(x, w, b, eps, rows, n)?,
        DType::BF16 => forward_typed::<bf16>(x, w, b, eps, rows, n)?,
        other => not_f32_or_bf16(OP, other)?,
    };
    Ok((out, x.1.shape().clone()))
}

/// The error for an activation of another dtype.
fn not_f32_or_bf16(op: &str, dtype: DType) -> candle_core::Result<CudaStorage> {
    candle_core::bail!("{op}: f32 or bf16 activations only, got {dtype:?}")
}

fn forward_typed<T: Elem>(
    x: (&CudaStorage, &Layout),
    w: (&CudaStorage, &Layout),
    b: (&CudaStorage, &Layout),
    eps: f32,
    rows: usize,
    n: usize,
) -> candle_core::Result<CudaStorage> {
    const OP: &str = "xsent-layer-norm-cuda";
    let (xv, wv, bv) = (view::<T>(OP, x.0, x.1)?, f32_view(OP, w.0, w.1)?, f32_view(OP, b.0, b.1)?);
    let dev = x.0.device();
    // SAFETY: the kernel writes every element (each row's warp covers its n columns).
    let mut out = unsafe { dev.alloc::<T>(rows * n) }?;
    if rows > 0 {
        let k = params::layer_norm(T::TY, rows, n, eps);
        let kernel = Loaded::new(dev, MODULE, PTX, k.list())?;
        let mut args = kernel.args();
        args.buf("x", &xv).buf("w", &wv).buf("b", &bv).buf("y", &mut out);
        // SAFETY: the arguments match `xsent_layer_norm_{f32,bf16}`: x and out of rows·n values of
        // T, w and b of n f32 (checked by the caller), rows, n, eps.
        unsafe { args.launch(launch::rows(OP, rows)?) }?;
    }
    Ok(CudaStorage::wrap_cuda_slice(out, dev.clone()))
}

/// The input's gradient from `x` (`[…, n]`, f32 or bf16), `w` (`[n]`, f32) and the output's
/// gradient `g` (`x`'s shape and dtype), all contiguous: one warp per row; in `x`'s dtype.
pub fn grad_x(
    x: (&CudaStorage, &Layout),
    w: (&CudaStorage, &Layout),
    g: (&CudaStorage, &Layout),
    eps: f32,
) -> candle_core::Result<(CudaStorage, Shape)> {
    const OP: &str = "xsent-layer-norm-grad-x-cuda";
    let (rows, n) = rows_and_width(OP, x.1)?;
    check_vec(OP, "weight", w.1, n)?;
    check_grad(OP, x, g)?;
    let out = match x.0.dtype() {
        DType::F32 => grad_x_typed::<f32>(x, w, g, eps, rows, n)?,
        DType::BF16 => grad_x_typed::<bf16>(x, w, g, eps, rows, n)?,
        other => not_f32_or_bf16(OP, other)?,
    };
    Ok((out, x.1.shape().clone()))
}

fn grad_x_typed<T: Elem>(
    x: (&CudaStorage, &Layout),
    w: (&CudaStorage, &Layout),
    g: (&CudaStorage, &Layout),
    eps: f32,
    rows: usize,
    n: usize,
) -> candle_core::Result<CudaStorage> {
    const OP: &str = "xsent-layer-norm-grad-x-cuda";
    let (xv, wv, gv) = (view::<T>(OP, x.0, x.1)?, f32_view(OP, w.0, w.1)?, view::<T>(OP, g.0, g.1)?);
    let dev = x.0.device();
    // SAFETY: the kernel writes every element.
    let mut out = unsafe { dev.alloc::<T>(rows * n) }?;
    if rows > 0 {
        let k = params::layer_norm_grad_x(T::TY, rows, n, eps);
        let kernel = Loaded::new(dev, MODULE, PTX, k.list())?;
        let mut args = kernel.args();
        args.buf("x", &xv).buf("w", &wv).buf("g", &gv).buf("dx", &mut out);
        // SAFETY: the arguments match `xsent_layer_norm_grad_x_{f32,bf16}`: x, g and dx of rows·n
        // values of T, w of n f32, rows, n, eps.
        unsafe { args.launch(launch::rows(OP, rows)?) }?;
    }
    Ok(CudaStorage::wrap_cuda_slice(out, dev.clone()))
}

/// The weight's and bias's gradients from `x` (`[…, n]`, f32 or bf16) and the output's gradient
/// `g` (`x`'s shape and dtype), both contiguous: a `[2, n]` f32 tensor of `Σ g ⊙ x̂` and `Σ g` over
/// the rows. Two kernels: `g ⊙ x̂` (one warp per row, f32) into a scratch tensor, then the column
/// sums in f64.
pub fn grad_wb(
    x: (&CudaStorage, &Layout),
    g: (&CudaStorage, &Layout),
    eps: f32,
) -> candle_core::Result<(CudaStorage, Shape)> {
    const OP: &str = "xsent-layer-norm-grad-wb-cuda";
    let (rows, n) = rows_and_width(OP, x.1)?;
    check_grad(OP, x, g)?;
    let out = match x.0.dtype() {
        DType::F32 => grad_wb_typed::<f32>(x, g, eps, rows, n)?,
        DType::BF16 => grad_wb_typed::<bf16>(x, g, eps, rows, n)?,
        other => not_f32_or_bf16(OP, other)?,
    };
    Ok((out, Shape::from((2, n))))
}

/// The `g ⊙ x̂` row kernel and the column sums, in `T`'s forms.
fn grad_wb_typed<T: Elem>(
    x: (&CudaStorage, &Layout),
    g: (&CudaStorage, &Layout),
    eps: f32,
    rows: usize,
    n: usize,
) -> candle_core::Result<CudaStorage> {
    const OP: &str = "xsent-layer-norm-grad-wb-cuda";
    let (xv, gv) = (view::<T>(OP, x.0, x.1)?, view::<T>(OP, g.0, g.1)?);
    let dev = x.0.device();
    // SAFETY: the row kernel writes every element of `gxhat`, the column kernel every one of `out`.
    let mut gxhat = unsafe { dev.alloc::<f32>(rows * n) }?;
    let mut out = unsafe { dev.alloc::<f32>(2 * n) }?;
    if rows > 0 {
        let k = params::layer_norm_g_xhat(T::TY, rows, n, eps);
        let kernel = Loaded::new(dev, MODULE, PTX, k.list())?;
        let mut args = kernel.args();
        args.buf("x", &xv).buf("g", &gv).buf("gxhat", &mut gxhat);
        // SAFETY: the arguments match `xsent_layer_norm_g_xhat_{f32,bf16}`: x and g of rows·n
        // values of T, gxhat of rows·n f32, rows, n, eps.
        unsafe { args.launch(launch::rows(OP, rows)?) }?;
    }
    let k = params::column_sums2(T::TY, rows, n);
    let kernel = Loaded::new(dev, MODULE, PTX, k.list())?;
    let mut args = kernel.args();
    args.buf("a", &gxhat).buf("b", &gv).buf("out", &mut out);
    // SAFETY: the arguments match `xsent_column_sums2_{f32,bf16}`: a (f32) and b (T) of rows·n,
    // out of 2·n f32, rows, n. With no rows the sums are zeros. `gxhat` is freed on the device's
    // stream, after the kernel that reads it.
    unsafe { args.launch(launch::column_sums(n)) }?;
    Ok(CudaStorage::wrap_cuda_slice(out, dev.clone()))
}

fn check_grad(op: &str, x: (&CudaStorage, &Layout), g: (&CudaStorage, &Layout)) -> candle_core::Result<()> {
    if g.1.dims() != x.1.dims() || g.0.dtype() != x.0.dtype() {
        candle_core::bail!(
            "{op}: a gradient of {:?} {:?} for an input of {:?} {:?}",
            g.0.dtype(),
            g.1.dims(),
            x.0.dtype(),
            x.1.dims()
        );
    }
    Ok(())
}
