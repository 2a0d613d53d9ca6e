//! Attention's head split and merge on CUDA, f32 and bf16 (`heads.cu`): the GPU side of
//! [`crate::model::kernels::split_heads`] and [`crate::model::kernels::merge_heads`] (one kernel
//! each way, where candle takes a reshape, a transpose and a copy, and an affine op for the
//! query's scale).

use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::CudaStorage;
use candle_core::{DType, Layout, Shape};
use half::bf16;

use super::{launch, params, Elem, Loaded};

const PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/heads.ptx"));
const MODULE: &str = "xsent_heads";
const OP: &str = "xsent-heads-cuda";

/// The gather of `x` into `out` (`[B, heads, L, d]` from `[B·L, heads·d]`, or with `merge` the
/// inverse; `dims` = `[B, heads, L, d]`, checked by the caller against `x`'s shape), `x` read
/// through `strides` (elements per sequence, head, token and element of a head, from its
/// layout's start), each value times `scale` where given (`scale` already rounded to `x`'s dtype,
/// as candle's affine op rounds its factor; the product rounded, then `+ 0`, as candle's CPU op).
pub fn forward(
    x: (&CudaStorage, &Layout),
    out: &Shape,
    dims: [usize; 4],
    strides: [usize; 4],
    merge: bool,
    scale: Option<f32>,
) -> candle_core::Result<(CudaStorage, Shape)> {
    let s = match x.0.dtype() {
        DType::F32 => run::<f32>(x, dims, strides, merge, scale)?,
        DType::BF16 => run::<bf16>(x, dims, strides, merge, scale)?,
        other => candle_core::bail!("{OP}: f32 or bf16 only, got {other:?}"),
    };
    Ok((s, out.clone()))
}

fn run<T: Elem>(
    (s, l): (&CudaStorage, &Layout),
    [b, heads, len, d]: [usize; 4],
    strides: [usize; 4],
    merge: bool,
    scale: Option<f32>,
) -> candle_core::Result<CudaStorage> {
    let n = b * heads * len * d;
    if n != l.shape().elem_count() {
        candle_core::bail!("{OP}: {:?} is not [{b}, {heads}, {len}, {d}]'s {n} elements", l.dims());
    }
    let dev = s.device();
    // SAFETY: the kernel writes every element.
    let mut out = unsafe { dev.alloc::<T>(n) }?;
    if n > 0 {
        // The input from its layout's start to the last element it reaches.
        let xv = s.as_cuda_slice::<T>()?;
        let (from, to) = (l.start_offset(), l.start_offset() + launch::heads_span([b, heads, len, d], strides));
        if to > xv.len() {
            candle_core::bail!("{OP}: the layout reaches element {to} of a buffer of {}", xv.len());
        }
        let xv = xv.slice(from..to);
        let k = params::heads(T::TY, [b, heads, len, d], strides, merge, scale);
        let kernel = Loaded::new(dev, MODULE, PTX, k.list())?;
        let mut args = kernel.args();
        args.buf("x", &xv).buf("y", &mut out);
        // SAFETY: the arguments are `xsent_heads_{f32,bf16}`'s list (x, y, n, L, heads, d, the
        // four strides, merge, scaled, scale): the output of n = B·heads·L·d values of T; the input
        // from its layout's start to the furthest element the strides reach (`heads_span`, within
        // the buffer: checked), the furthest any output index reads.
        unsafe { args.launch(launch::elementwise(n)) }?;
    }
    Ok(CudaStorage::wrap_cuda_slice(out, dev.clone()))
}
