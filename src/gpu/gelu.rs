//! GELU (erf) for training on CUDA, f32 and bf16 (`gelu.cu`): the GPU side of
//! [`crate::model::kernels::gelu_erf_train`]'s op and its backward.

use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::driver::{DeviceRepr, PushKernelArg};
use candle_core::cuda_backend::{CudaDType, CudaStorage, WrapErr};
use candle_core::{DType, Layout, Shape};
use half::bf16;

use super::{config, launch, view};

const PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/gelu.ptx"));
const MODULE: &str = "xsent_gelu";

/// `0.5 · x · (1 + erf(x / √2))` of a contiguous f32 or bf16 tensor.
pub fn forward(x: (&CudaStorage, &Layout)) -> candle_core::Result<(CudaStorage, Shape)> {
    elementwise("xsent-gelu-cuda", "xsent_gelu", &[x])
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
    elementwise(OP, "xsent_gelu_grad", &[x, g])
}

/// Kernel `{kernel}_f32` or `{kernel}_bf16` (by the first input's dtype) over the inputs' `n`
/// elements: its arguments are the inputs, the output and `n`.
fn elementwise(
    op: &str,
    kernel: &str,
    inputs: &[(&CudaStorage, &Layout)],
) -> candle_core::Result<(CudaStorage, Shape)> {
    let (first, l) = inputs[0];
    let out = match first.dtype() {
        DType::F32 => run::<f32>(op, &format!("{kernel}_f32"), inputs)?,
        DType::BF16 => run::<bf16>(op, &format!("{kernel}_bf16"), inputs)?,
        other => candle_core::bail!("{op}: f32 or bf16 only, got {other:?}"),
    };
    Ok((out, l.shape().clone()))
}

fn run<T: CudaDType + DeviceRepr>(
    op: &str,
    kernel: &str,
    inputs: &[(&CudaStorage, &Layout)],
) -> candle_core::Result<CudaStorage> {
    let n = inputs[0].1.shape().elem_count();
    let views = inputs.iter().map(|(s, l)| view::<T>(op, s, l)).collect::<candle_core::Result<Vec<_>>>()?;
    let dev = inputs[0].0.device();
    // SAFETY: the kernel writes every element.
    let mut out = unsafe { dev.alloc::<T>(n) }?;
    if n > 0 {
        let func = dev.get_or_load_custom_func(kernel, MODULE, PTX)?;
        let n64 = n as u64;
        let mut args = func.builder();
        for v in &views {
            args.arg(v);
        }
        args.arg(&mut out).arg(&n64);
        // SAFETY: the arguments match `xsent_gelu_{f32,bf16}` (x, out, n) and
        // `xsent_gelu_grad_{f32,bf16}` (x, g, out, n): inputs and output of n elements of T (the
        // callers check one shape and dtype), n.
        unsafe { args.launch(config(launch::elementwise(n))) }.w()?;
    }
    Ok(CudaStorage::wrap_cuda_slice(out, dev.clone()))
}
