//! GELU (erf) for training on CUDA, f32 and bf16 (`gelu.cu`): the GPU side of
//! [`crate::model::kernels::gelu_erf_train`]'s op and its backward.

use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::CudaStorage;
use candle_core::{DType, Layout, Shape};
use half::bf16;

use super::{launch, params, view, Elem, Loaded};

const PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/gelu.ptx"));
const MODULE: &str = "xsent_gelu";

/// `0.5 · x · (1 + erf(x / √2))` of a contiguous f32 or bf16 tensor.
pub fn forward(x: (&CudaStorage, &Layout)) -> candle_core::Result<(CudaStorage, Shape)> {
    elementwise("xsent-gelu-cuda", &[x])
}

/// `g · (Φ(x) + x·φ(x))` of contiguous `x` and `g` of one shape and dtype (f32 or bf16).
pub fn backward(x: (&CudaStorage, &Layout), g: (&CudaStorage, &Layout)) -> candle_core::Result<(CudaStorage, Shape)> {
    const OP: &str = "xsent-gelu-grad-cuda";
    if x.1.dims() != g.1.dims() || x.0.dtype() != g.0.dtype() {
        candle_core::bail!(
            "{OP}: a gradient of {:?} {:?} for an input of {:?} {:?}",
            g.0.dtype(),
            g.1.dims(),
            x.0.dtype(),
            x.1.dims()
        );
    }
    elementwise(OP, &[x, g])
}

/// GELU (one input) or its gradient (`x` and `g`), in the f32 or bf16 form by the first input's
/// dtype, over the inputs' `n` elements: its arguments are the inputs, the output and `n`.
fn elementwise(op: &str, inputs: &[(&CudaStorage, &Layout)]) -> candle_core::Result<(CudaStorage, Shape)> {
    let (first, l) = inputs[0];
    let out = match first.dtype() {
        DType::F32 => run::<f32>(op, inputs)?,
        DType::BF16 => run::<bf16>(op, inputs)?,
        other => candle_core::bail!("{op}: f32 or bf16 only, got {other:?}"),
    };
    Ok((out, l.shape().clone()))
}

fn run<T: Elem>(op: &str, inputs: &[(&CudaStorage, &Layout)]) -> candle_core::Result<CudaStorage> {
    let n = inputs[0].1.shape().elem_count();
    let views = inputs.iter().map(|(s, l)| view::<T>(op, s, l)).collect::<candle_core::Result<Vec<_>>>()?;
    let dev = inputs[0].0.device();
    // SAFETY: the kernel writes every element.
    let mut out = unsafe { dev.alloc::<T>(n) }?;
    if n > 0 {
        let (forward, backward);
        let (list, output) = if views.len() == 1 {
            forward = params::gelu(T::TY, n);
            (forward.list(), "y")
        } else {
            backward = params::gelu_grad(T::TY, n);
            (backward.list(), "dx")
        };
        let kernel = Loaded::new(dev, MODULE, PTX, list)?;
        let mut args = kernel.args();
        for (v, name) in views.iter().zip(["x", "g"]) {
            args.buf(name, v);
        }
        args.buf(output, &mut out);
        // SAFETY: the arguments are the lists of `xsent_gelu_{f32,bf16}` (x, y, n) and
        // `xsent_gelu_grad_{f32,bf16}` (x, g, dx, n): inputs and output of n elements of T (the
        // callers check one shape and dtype), n.
        unsafe { args.launch(launch::elementwise(n)) }?;
    }
    Ok(CudaStorage::wrap_cuda_slice(out, dev.clone()))
}
