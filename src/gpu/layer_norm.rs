//! LayerNorm for training on CUDA f32 (`layer_norm.cu`): the GPU side of
//! [`crate::model::kernels::layer_norm_train`]'s forward and backward ops.

use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::CudaStorage;
use candle_core::{Layout, Shape};

use super::{f32_view, launch, rows_and_width, Args};

const PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/layer_norm.ptx"));
const MODULE: &str = "xsent_layer_norm";

/// A `[n]` vector's layout, checked.
fn check_vec(op: &str, what: &str, l: &Layout, n: usize) -> candle_core::Result<()> {
    if l.dims() != [n] {
        candle_core::bail!("{op}: the {what} has shape {:?}, rows have {n} values", l.dims());
    }
    Ok(())
}

/// `x̂ · w + b` for each row of `x` (`[…, n]`, contiguous), `w` and `b` of `[n]`.
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
    let (xv, wv, bv) = (f32_view(OP, x.0, x.1)?, f32_view(OP, w.0, w.1)?, f32_view(OP, b.0, b.1)?);
    let dev = x.0.device();
    // SAFETY: the kernel writes every element (each row's warp covers its n columns).
    let mut out = unsafe { dev.alloc::<f32>(rows * n) }?;
    if rows > 0 {
        let func = dev.get_or_load_custom_func("xsent_layer_norm_f32", MODULE, PTX)?;
        let (rows64, n32) = (rows as u64, n as u32);
        let mut args = Args::new(func.builder(), "xsent_layer_norm_f32", PTX);
        args.buf(&xv).buf(&wv).buf(&bv).buf(&mut out).val(&rows64).val(&n32).val(&eps);
        // SAFETY: the arguments match `xsent_layer_norm_f32`: x and out of rows·n f32, w and b of
        // n (checked above), rows, n, eps.
        unsafe { args.launch(launch::rows(OP, rows)?) }?;
    }
    Ok((CudaStorage::wrap_cuda_slice(out, dev.clone()), x.1.shape().clone()))
}

/// The input's gradient from `x` (`[…, n]`), `w` (`[n]`) and the output's gradient `g` (`x`'s
/// shape), all contiguous: one warp per row.
pub fn grad_x(
    x: (&CudaStorage, &Layout),
    w: (&CudaStorage, &Layout),
    g: (&CudaStorage, &Layout),
    eps: f32,
) -> candle_core::Result<(CudaStorage, Shape)> {
    const OP: &str = "xsent-layer-norm-grad-x-cuda";
    let (rows, n) = rows_and_width(OP, x.1)?;
    check_vec(OP, "weight", w.1, n)?;
    check_grad(OP, x.1, g.1)?;
    let (xv, wv, gv) = (f32_view(OP, x.0, x.1)?, f32_view(OP, w.0, w.1)?, f32_view(OP, g.0, g.1)?);
    let dev = x.0.device();
    // SAFETY: the kernel writes every element.
    let mut out = unsafe { dev.alloc::<f32>(rows * n) }?;
    if rows > 0 {
        let func = dev.get_or_load_custom_func("xsent_layer_norm_grad_x_f32", MODULE, PTX)?;
        let (rows64, n32) = (rows as u64, n as u32);
        let mut args = Args::new(func.builder(), "xsent_layer_norm_grad_x_f32", PTX);
        args.buf(&xv).buf(&wv).buf(&gv).buf(&mut out).val(&rows64).val(&n32).val(&eps);
        // SAFETY: the arguments match `xsent_layer_norm_grad_x_f32`: x, g and dx of rows·n f32,
        // w of n, rows, n, eps.
        unsafe { args.launch(launch::rows(OP, rows)?) }?;
    }
    Ok((CudaStorage::wrap_cuda_slice(out, dev.clone()), x.1.shape().clone()))
}

/// The weight's and bias's gradients from `x` (`[…, n]`) and the output's gradient `g`, both
/// contiguous: a `[2, n]` tensor of `Σ g ⊙ x̂` and `Σ g` over the rows. Two kernels: `g ⊙ x̂`
/// (one warp per row) into a scratch tensor, then the column sums in f64.
pub fn grad_wb(
    x: (&CudaStorage, &Layout),
    g: (&CudaStorage, &Layout),
    eps: f32,
) -> candle_core::Result<(CudaStorage, Shape)> {
    const OP: &str = "xsent-layer-norm-grad-wb-cuda";
    let (rows, n) = rows_and_width(OP, x.1)?;
    check_grad(OP, x.1, g.1)?;
    let (xv, gv) = (f32_view(OP, x.0, x.1)?, f32_view(OP, g.0, g.1)?);
    let dev = x.0.device();
    let (rows64, n32) = (rows as u64, n as u32);
    // SAFETY: the row kernel writes every element of `gxhat`, the column kernel every one of `out`.
    let mut gxhat = unsafe { dev.alloc::<f32>(rows * n) }?;
    let mut out = unsafe { dev.alloc::<f32>(2 * n) }?;
    if rows > 0 {
        let func = dev.get_or_load_custom_func("xsent_layer_norm_g_xhat_f32", MODULE, PTX)?;
        let mut args = Args::new(func.builder(), "xsent_layer_norm_g_xhat_f32", PTX);
        args.buf(&xv).buf(&gv).buf(&mut gxhat).val(&rows64).val(&n32).val(&eps);
        // SAFETY: the arguments match `xsent_layer_norm_g_xhat_f32`: x, g and gxhat of rows·n f32,
        // rows, n, eps.
        unsafe { args.launch(launch::rows(OP, rows)?) }?;
    }
    let func = dev.get_or_load_custom_func("xsent_column_sums2_f32", MODULE, PTX)?;
    let mut args = Args::new(func.builder(), "xsent_column_sums2_f32", PTX);
    args.buf(&gxhat).buf(&gv).buf(&mut out).val(&rows64).val(&n32);
    // SAFETY: the arguments match `xsent_column_sums2_f32`: a and b of rows·n f32, out of 2·n,
    // rows, n. With no rows the sums are zeros. `gxhat` is freed on the device's stream, after
    // the kernel that reads it.
    unsafe { args.launch(launch::column_sums(n)) }?;
    Ok((CudaStorage::wrap_cuda_slice(out, dev.clone()), Shape::from((2, n))))
}

fn check_grad(op: &str, x: &Layout, g: &Layout) -> candle_core::Result<()> {
    if g.dims() != x.dims() {
        candle_core::bail!("{op}: a gradient of shape {:?} for an input of {:?}", g.dims(), x.dims());
    }
    Ok(())
}
