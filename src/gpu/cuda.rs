//! The CUDA side shared by the kernels' files: module sources, launches, views of candle's
//! storage, and the one-tensor AdamW and the dropout ops.

use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::driver::{
    CudaFunction, CudaSlice, CudaStream, CudaView, CudaViewMut, DeviceRepr, LaunchArgs, LaunchConfig, PushKernelArg,
};
use candle_core::cuda_backend::{CudaDType, CudaDevice, CudaStorage, WrapErr};
use candle_core::{Layout, Shape, Storage, Tensor};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use super::launch::{self, Grid};
use super::params::{self, List, Ty, Value};

pub(super) const ADAMW_PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/adamw.ptx"));
/// The module of adamw.cu's kernels (the one-tensor update, and [`optim`]'s two).
pub(super) const ADAMW_MODULE: &str = "xsent_adamw";
const DROPOUT_PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/dropout.ptx"));

/// cudarc's launch of a [`Grid`].
fn config(g: Grid) -> LaunchConfig {
    LaunchConfig { grid_dim: g.blocks, block_dim: g.threads, shared_mem_bytes: 0 }
}

/// A kernel's arguments as cudarc pushes them, from the kernel's parameter list
/// ([`super::params`]: the order, names and scalar values the CPU emulation runs and a test
/// checks against the `.cu` signature); the caller gives the buffers by name. At launch every
/// parameter must have been given, in order, and the types must match the kernel's in its PTX,
/// so that a wrong count, name or type is an error that names the kernel, not a launch that
/// reads its arguments wrongly (`launch::check_args`).
pub(super) struct Args<'a> {
    inner: LaunchArgs<'a>,
    kernel: &'static str,
    ptx: &'static str,
    list: params::Cursor<'a>,
}

/// An element type the kernels have a form for: its [`Ty`] picks the form ([`params`]), so the
/// kernel a typed launch loads is the form of its element type (the buffers' types stay the
/// caller's: [`Args::buf`] takes any).
pub(super) trait Elem: CudaDType + DeviceRepr {
    const TY: Ty;
}

impl Elem for f32 {
    const TY: Ty = Ty::F32;
}

impl Elem for half::bf16 {
    const TY: Ty = Ty::Bf16;
}

/// A device buffer as a kernel argument (a pointer): slices and views, never a scalar (the
/// scalars come from the parameter list).
pub(super) trait DeviceBuf {}
impl<T> DeviceBuf for &CudaSlice<T> {}
impl<T> DeviceBuf for &mut CudaSlice<T> {}
impl<T> DeviceBuf for &CudaView<'_, T> {}
impl<T> DeviceBuf for &mut CudaViewMut<'_, T> {}

/// A kernel loaded by the name its list comes with ([`params`]), holding that list: a launch's
/// arguments are made from it ([`Self::args`]), so the kernel that runs and the list pushed to
/// it are one.
pub(super) struct Loaded<'a> {
    func: CudaFunction,
    stream: Arc<CudaStream>,
    ptx: &'static str,
    list: List<'a>,
}

impl<'a> Loaded<'a> {
    /// `list`'s kernel, from module `module` of PTX `ptx` (loaded once per device).
    pub(super) fn new(dev: &CudaDevice, module: &str, ptx: &'static str, list: List<'a>) -> candle_core::Result<Self> {
        let func = dev.get_or_load_custom_func(list.kernel, module, ptx)?.into_cuda_function();
        // The device's one stream: the one candle's own launch builder uses.
        Ok(Loaded { func, stream: dev.cuda_stream(), ptx, list })
    }

    /// A launch's arguments, to be given their buffers by name.
    pub(super) fn args(&self) -> Args<'_> {
        let (kernel, list) = (self.list.kernel, params::Cursor::new(self.list.params));
        Args { inner: self.stream.launch_builder(&self.func), kernel, ptx: self.ptx, list }
    }
}

impl<'a> Args<'a> {
    /// Pushes the list's scalars up to its next buffer (or its end).
    fn scalars(&mut self) {
        for p in self.list.scalars() {
            match &p.value {
                Value::Buf => continue, // never: `Cursor::scalars` stops before a buffer
                Value::U64(v) => self.inner.arg(v),
                Value::U32(v) => self.inner.arg(v),
                Value::F32(v) => self.inner.arg(v),
            };
        }
    }

    /// The buffer parameter `name` (a slice or a view: a pointer), after the scalars before it:
    /// it must be the list's next buffer (else [`Self::launch`] refuses).
    pub(super) fn buf<A: DeviceBuf>(&mut self, name: &str, a: A) -> &mut Self
    where
        LaunchArgs<'a>: PushKernelArg<A>,
    {
        self.scalars();
        if self.list.buf(name) {
            self.inner.arg(a);
        }
        self
    }

    /// Launches over `g` once the arguments are checked against the kernel's PTX (each
    /// kernel's parameter list is read from its PTX once per process).
    ///
    /// # Safety
    /// The buffers must be the sizes the kernel reads and writes (the caller's duty: this checks
    /// the arguments' names, count and types only).
    pub(super) unsafe fn launch(&mut self, g: Grid) -> candle_core::Result<()> {
        static PARAMS: OnceLock<Mutex<HashMap<&'static str, Option<String>>>> = OnceLock::new();
        let (kernel, ptx) = (self.kernel, self.ptx);
        self.scalars();
        let given = match self.list.finish() {
            Ok(letters) => letters,
            Err(fault) => candle_core::bail!("{kernel}: {fault}: a bug in src/gpu, please report it"),
        };
        let matches = PARAMS
            .get_or_init(Default::default)
            .lock()
            .map_err(|_| candle_core::Error::msg("a thread panicked while reading a kernel's parameters"))?
            .entry(kernel)
            .or_insert_with(|| launch::ptx_params(ptx, kernel))
            .as_deref()
            == Some(given);
        if !matches {
            candle_core::bail!("{}", launch::check_args(ptx, kernel, given).err().unwrap_or_default())
        }
        // SAFETY: the arguments' count and types are the kernel's (above); their sizes are the
        // caller's duty.
        unsafe { self.inner.launch(config(g)) }.w()?;
        Ok(())
    }
}

/// The f32 elements of a contiguous CUDA tensor's storage.
pub(super) fn f32_view<'a>(op: &str, s: &'a CudaStorage, l: &Layout) -> candle_core::Result<CudaView<'a, f32>> {
    view::<f32>(op, s, l)
}

/// The elements of a contiguous CUDA tensor's storage, of type `T`.
pub(super) fn view<'a, T: CudaDType>(op: &str, s: &'a CudaStorage, l: &Layout) -> candle_core::Result<CudaView<'a, T>> {
    let Some((a, b)) = l.contiguous_offsets() else { candle_core::bail!("{op}: contiguous input only") };
    Ok(s.as_cuda_slice::<T>()?.slice(a..b))
}

/// The last dimension of `l` and the number of rows before it (`[…, n]` read as `[rows, n]`).
pub(super) fn rows_and_width(op: &str, l: &Layout) -> candle_core::Result<(usize, usize)> {
    let n = super::launch::row_width(op, *l.dims().last().unwrap_or(&1))?;
    Ok((l.shape().elem_count() / n, n))
}

/// One AdamW step for a CUDA f32 parameter `p` with gradient `g` and moments `m`, `v` (all
/// contiguous, one length): `p`, `m` and `v` are updated in place by one kernel, with learning
/// rate `lr`, weight decay `decay` and the step's scalars.
pub fn adamw_update(
    p: &Tensor,
    g: &Tensor,
    m: &Tensor,
    v: &Tensor,
    lr: f32,
    decay: f32,
    step: &params::AdamWStep,
) -> candle_core::Result<()> {
    // The op sees only the other tensors' storages: one on another GPU would hand that GPU's
    // addresses to this one's kernel (as `optim::adamw` checks for many tensors).
    if ![g, m, v].iter().all(|t| t.device().same_device(p.device())) {
        candle_core::bail!("xsent-adamw-cuda: the gradient and moments must be on the parameter's GPU");
    }
    p.inplace_op1(&AdamW { g, m, v, lr, decay, step: *step })
}

struct AdamW<'a> {
    g: &'a Tensor,
    m: &'a Tensor,
    v: &'a Tensor,
    lr: f32,
    decay: f32,
    step: params::AdamWStep,
}

impl candle_core::InplaceOp1 for AdamW<'_> {
    fn name(&self) -> &'static str {
        "xsent-adamw-cuda"
    }

    fn cpu_fwd(&self, _: &mut candle_core::CpuStorage, _: &Layout) -> candle_core::Result<()> {
        candle_core::bail!("{}: a CUDA parameter was expected (the CPU has its own kernel)", self.name())
    }

    fn cuda_fwd(&self, ps: &mut CudaStorage, pl: &Layout) -> candle_core::Result<()> {
        let name = self.name();
        let n = pl.shape().elem_count();
        for (what, t) in [("gradient", self.g), ("first moment", self.m), ("second moment", self.v)] {
            if t.elem_count() != n || !t.is_contiguous() {
                candle_core::bail!(
                    "{name}: the {what} has shape {:?} (contiguous: {}), the parameter {:?}",
                    t.dims(),
                    t.is_contiguous(),
                    pl.dims()
                );
            }
        }
        if n == 0 {
            return Ok(());
        }
        let dev = ps.device().clone();
        let k = params::adamw(n, self.lr, self.decay, &self.step);
        let kernel = Loaded::new(&dev, ADAMW_MODULE, ADAMW_PTX, k.list())?;
        let Some((a, b)) = pl.contiguous_offsets() else {
            candle_core::bail!("{name}: the parameter is not contiguous")
        };
        let mut p = ps.as_cuda_slice_mut::<f32>()?.slice_mut(a..b);
        let (gs, gl) = self.g.storage_and_layout();
        let (ms, ml) = self.m.storage_and_layout();
        let (vs, vl) = self.v.storage_and_layout();
        let (Storage::Cuda(gs), Storage::Cuda(ms), Storage::Cuda(vs)) = (&*gs, &*ms, &*vs) else {
            candle_core::bail!("{name}: gradient and moments must be on the parameter's GPU")
        };
        let (g, m, v) = (f32_view(name, gs, gl)?, f32_view(name, ms, ml)?, f32_view(name, vs, vl)?);
        let mut args = kernel.args();
        args.buf("p", &mut p).buf("g", &g).buf("m", &m).buf("v", &v);
        // SAFETY: the arguments are the kernel's list (src/gpu/adamw.cu): four pointers to n f32
        // values each (checked above), n, and eight f32 scalars. The kernel writes m and v
        // through views taken for reading: the optimiser owns those tensors alone (nothing else
        // holds them), and all work runs on the device's one stream, in order.
        unsafe { args.launch(launch::elementwise(n)) }?;
        Ok(())
    }
}

/// `x ⊙ mask / (1 − p)` for the counter-based mask of `seed` (src/gpu/dropout.cu) on a
/// contiguous CUDA f32 or bf16 tensor (bf16: scaled in f32, rounded once).
pub fn dropout(
    s: &CudaStorage,
    l: &Layout,
    seed: u64,
    p: f32,
    scale: f32,
) -> candle_core::Result<(CudaStorage, Shape)> {
    let out = match s.dtype() {
        candle_core::DType::F32 => dropout_typed::<f32>(s, l, seed, p, scale)?,
        candle_core::DType::BF16 => dropout_typed::<half::bf16>(s, l, seed, p, scale)?,
        other => candle_core::bail!("xsent-dropout: f32 or bf16 only, got {other:?}"),
    };
    Ok((out, l.shape().clone()))
}

fn dropout_typed<T: Elem>(
    s: &CudaStorage,
    l: &Layout,
    seed: u64,
    p: f32,
    scale: f32,
) -> candle_core::Result<CudaStorage> {
    let x = view::<T>("xsent-dropout", s, l)?;
    let n = l.shape().elem_count();
    let dev: &CudaDevice = s.device();
    // SAFETY: every element is written by the kernel below before the tensor is read.
    let mut out: CudaSlice<T> = unsafe { dev.alloc::<T>(n) }?;
    if n > 0 {
        let k = params::dropout(T::TY, n, seed, p, scale);
        let kernel = Loaded::new(dev, "xsent_dropout", DROPOUT_PTX, k.list())?;
        let mut args = kernel.args();
        args.buf("x", &x).buf("out", &mut out);
        // SAFETY: the arguments are the kernel's list (src/gpu/dropout.cu): an input and an
        // output of n values of T each, n, the seed, p and the scale.
        unsafe { args.launch(launch::elementwise(n)) }?;
    }
    Ok(CudaStorage::wrap_cuda_slice(out, dev.clone()))
}
