//! GELU (erf) for training on CUDA, f32 and bf16 (`gelu.cu`): the GPU side of
//! [`crate::model::kernels::gelu_erf_train`]'s op and its backward.

use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::driver::PushKernelArg;
use candle_core::cuda_backend::{CudaStorage, WrapErr};
use candle_core::{DType, Layout, Shape};
use half::bf16;

use super::{launch_config, view};

const PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/gelu.ptx"));
const MODULE: &str = "xsent_gelu";

/// `0.5 · x · (1 + erf(x / √2))` of a contiguous f32 or bf16 tensor.
pub fn forward(x: (&CudaStorage, &Layout)) -> candle_core::Result<(CudaStorage, Shape)> {
    const OP: &str = "xsent-gelu-cuda";
    let n = x.1.shape().elem_count();
    let n64 = n as u64;
    let dev = x.0.device();
    let out = match x.0.dtype() {
        DType::F32 => {
            let xv = view::<f32>(OP, x.0, x.1)?;
            // SAFETY: the kernel writes every element.
            let mut out = unsafe { dev.alloc::<f32>(n) }?;
            if n > 0 {
                let func = dev.get_or_load_custom_func("xsent_gelu_f32", MODULE, PTX)?;
                let mut args = func.builder();
                args.arg(&xv).arg(&mut out).arg(&n64);
                // SAFETY: the arguments match `xsent_gelu_f32`: x and out of n f32, n.
                unsafe { args.launch(launch_config(n)) }.w()?;
            }
            CudaStorage::wrap_cuda_slice(out, dev.clone())
        }
        DType::BF16 => {
            let xv = view::<bf16>(OP, x.0, x.1)?;
            // SAFETY: the kernel writes every element.
            let mut out = unsafe { dev.alloc::<bf16>(n) }?;
            if n > 0 {
                let func = dev.get_or_load_custom_func("xsent_gelu_bf16", MODULE, PTX)?;
                let mut args = func.builder();
                args.arg(&xv).arg(&mut out).arg(&n64);
                // SAFETY: the arguments match `xsent_gelu_bf16`: x and out of n bf16, n.
                unsafe { args.launch(launch_config(n)) }.w()?;
            }
            CudaStorage::wrap_cuda_slice(out, dev.clone())
        }
        other => candle_core::bail!("{OP}: f32 or bf16 only, got {other:?}"),
    };
    Ok((out, x.1.shape().clone()))
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
    let n = x.1.shape().elem_count();
    let n64 = n as u64;
    let dev = x.0.device();
    let out = match x.0.dtype() {
        DType::F32 => {
            let (xv, gv) = (view::<f32>(OP, x.0, x.1)?, view::<f32>(OP, g.0, g.1)?);
            // SAFETY: the kernel writes every element.
            let mut out = unsafe { dev.alloc::<f32>(n) }?;
            if n > 0 {
                let func = dev.get_or_load_custom_func("xsent_gelu_grad_f32", MODULE, PTX)?;
                let mut args = func.builder();
                args.arg(&xv).arg(&gv).arg(&mut out).arg(&n64);
                // SAFETY: the arguments match `xsent_gelu_grad_f32`: x, g and out of n f32, n.
                unsafe { args.launch(launch_config(n)) }.w()?;
            }
            CudaStorage::wrap_cuda_slice(out, dev.clone())
        }
        DType::BF16 => {
            let (xv, gv) = (view::<bf16>(OP, x.0, x.1)?, view::<bf16>(OP, g.0, g.1)?);
            // SAFETY: the kernel writes every element.
            let mut out = unsafe { dev.alloc::<bf16>(n) }?;
            if n > 0 {
                let func = dev.get_or_load_custom_func("xsent_gelu_grad_bf16", MODULE, PTX)?;
                let mut args = func.builder();
                args.arg(&xv).arg(&gv).arg(&mut out).arg(&n64);
                // SAFETY: the arguments match `xsent_gelu_grad_bf16`: x, g and out of n bf16, n.
                unsafe { args.launch(launch_config(n)) }.w()?;
            }
            CudaStorage::wrap_cuda_slice(out, dev.clone())
        }
        other => candle_core::bail!("{OP}: f32 or bf16 only, got {other:?}"),
    };
    Ok((out, x.1.shape().clone()))
}
