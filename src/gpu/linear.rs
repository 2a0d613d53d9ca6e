//! The linear layer for training on CUDA, f32 or (bf16 training) bf16: the GPU side of
//! [`crate::model::kernels::linear`]'s fused op (the product by cuBLAS through candle's CUDA
//! storage, then the bias; one op in the graph where candle's composition records a product, a
//! transpose and a broadcast add) and of its bias gradient (`linear.cu`).

use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::CudaStorage;
use candle_core::{DType, Layout, Shape};
use half::bf16;

use super::{launch, params, rows_and_width, view, Elem, Loaded};

const PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/linear.ptx"));

/// `x·Wᵀ + b` for `x` `[m, k]`, `w` `[n, k]` and `b` `[n]`; the caller has checked that cuBLAS
/// reads `x` and `wᵀ` as laid out (`model::matmul::cublas_reads`).
pub fn forward(
    x: (&CudaStorage, &Layout),
    w: (&CudaStorage, &Layout),
    b: (&CudaStorage, &Layout),
) -> candle_core::Result<(CudaStorage, Shape)> {
    const OP: &str = "xsent-linear-cuda";
    let (&[m, k], &[n, k2]) = (x.1.dims(), w.1.dims()) else {
        candle_core::bail!("{OP}: [rows, in] and [out, in] expected, got {:?} and {:?}", x.1.dims(), w.1.dims())
    };
    if k != k2 || b.1.dims() != [n] {
        candle_core::bail!("{OP}: shapes {:?}, {:?}, {:?} do not fit", x.1.dims(), w.1.dims(), b.1.dims());
    }
    let wt = w.1.transpose(0, 1)?;
    let prod = x.0.matmul(w.0, (1, m, n, k), x.1, &wt)?; // cuBLAS-ready: the caller checks the layouts
    let out = prod.binary_impl::<candle_core::op::Add>(b.0, &Layout::contiguous((m, n)), &b.1.broadcast_as((m, n))?)?;
    Ok((out, Shape::from((m, n))))
}

/// The column sums of a contiguous `[rows, n]` f32 or bf16 tensor (accumulated in f64), a `[n]`
/// vector of its dtype.
pub fn column_sums(a: (&CudaStorage, &Layout)) -> candle_core::Result<(CudaStorage, Shape)> {
    const OP: &str = "xsent-column-sums-cuda";
    let (_, n) = rows_and_width(OP, a.1)?;
    let out = match a.0.dtype() {
        DType::F32 => column_sums_typed::<f32>(a)?,
        DType::BF16 => column_sums_typed::<bf16>(a)?,
        other => candle_core::bail!("{OP}: f32 or bf16 only, got {other:?}"),
    };
    Ok((out, Shape::from(n)))
}

fn column_sums_typed<T: Elem>(a: (&CudaStorage, &Layout)) -> candle_core::Result<CudaStorage> {
    const OP: &str = "xsent-column-sums-cuda";
    let (rows, n) = rows_and_width(OP, a.1)?;
    let av = view::<T>(OP, a.0, a.1)?;
    let dev = a.0.device();
    // SAFETY: the kernel writes every element.
    let mut out = unsafe { dev.alloc::<T>(n) }?;
    let k = params::column_sums(T::TY, rows, n);
    let kernel = Loaded::new(dev, "xsent_linear", PTX, k.list())?;
    let mut args = kernel.args();
    args.buf("a", &av).buf("out", &mut out);
    // SAFETY: the arguments match `xsent_column_sums_{f32,bf16}`: a of rows·n values of T, out of
    // n, rows, n.
    unsafe { args.launch(launch::column_sums(n)) }?;
    Ok(CudaStorage::wrap_cuda_slice(out, dev.clone()))
}
