//! xsent's CUDA kernels (src/gpu/*.cu) run on the CPU, against the CPU kernels they stand in for.
//!
//! No GPU is needed: tests/cuda_emu compiles the `.cu` files, as they are, as C++ with a small
//! header that gives CUDA's built-ins a CPU meaning (a host thread per CUDA thread, barriers for
//! `__syncthreads` and the warp shuffles; tests/cuda_emu/emu.h). The launches take their shapes
//! from `xsent::gpu::launch`, which the CUDA code uses too, and the optimiser's tables from its
//! builders. The bounds are tests/cuda.rs's, which a GPU runs: the emulation computes what the
//! card computes (IEEE f32 and f64, no fused multiply-add, the same order of sums), so these
//! catch indexing, reduction and table errors before a card is lent. The kernels run from
//! `xsent::gpu::params`, the kernels and argument lists the CUDA side launches (the emulation
//! checks their types; params' own tests their order against the `.cu` signatures). What they
//! cannot see: the values and buffers a CUDA call site gives, the PTX nvcc makes, the device's
//! memory handling, and reads of `__shared__` memory no thread wrote (a static here: zeros, or an
//! earlier block's values).
//!
//! Every buffer has guard words on both sides: a write out of bounds fails the test.

use candle_core::{DType, Device, Tensor, Var};
use std::ffi::{c_char, c_void, CStr, CString};
use std::marker::PhantomData;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use xsent::gpu::launch::{self, Grid};
use xsent::gpu::params::{self, Kernel, Ty, Value};

mod common;
use common::rel_diff;

/// The emulation, built once per test run into Cargo's temporary directory.
struct Emu {
    launch: LaunchFn,
    kernels: KernelsFn,
}

/// kernels.cpp's `xsent_emu_launch`: name, argument types, grid, block, arguments, error text.
type LaunchFn = unsafe extern "C" fn(
    *const c_char,
    *const c_char,
    *const u32,
    *const u32,
    *mut *mut c_void,
    *mut c_char,
    usize,
) -> i32;
/// kernels.cpp's `xsent_emu_kernels`: the kernels' names, comma-separated.
type KernelsFn = unsafe extern "C" fn() -> *const c_char;

fn emu() -> &'static Emu {
    static EMU: OnceLock<Emu> = OnceLock::new();
    EMU.get_or_init(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("xsent-cuda-emu-{}.so", std::process::id()));
        let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
        let status = std::process::Command::new(&cxx)
            .args(["-std=c++20", "-O2", "-ffp-contract=off", "-fno-fast-math", "-pthread", "-shared", "-fPIC"])
            .arg("-I")
            .arg(root.join("tests/cuda_emu"))
            .arg("-I")
            .arg(root.join("src/gpu"))
            .arg(root.join("tests/cuda_emu/kernels.cpp"))
            .arg("-o")
            .arg(&out)
            .status()
            .unwrap_or_else(|e| {
                panic!(
                    "these tests compile the CUDA kernels with a C++20 compiler ({cxx}: {e}); install g++ or set CXX"
                )
            });
        assert!(status.success(), "{cxx} could not compile tests/cuda_emu/kernels.cpp (see above)");
        let path = CString::new(out.to_str().unwrap()).unwrap();
        // SAFETY: dlopen/dlsym of the library just built; the symbols' types are kernels.cpp's
        // `extern "C"` functions. The library stays loaded for the process.
        unsafe {
            let lib = libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL);
            assert!(!lib.is_null(), "dlopen {}: {:?}", out.display(), CStr::from_ptr(libc::dlerror()));
            let sym = |name: &CStr| {
                let p = libc::dlsym(lib, name.as_ptr());
                assert!(!p.is_null(), "{name:?} missing from the emulation");
                p
            };
            let launch = std::mem::transmute::<*mut c_void, LaunchFn>(sym(c"xsent_emu_launch"));
            let kernels = std::mem::transmute::<*mut c_void, KernelsFn>(sym(c"xsent_emu_kernels"));
            let _ = std::fs::remove_file(&out);
            Emu { launch, kernels }
        }
    })
}

// Arguments travel as 64-bit words whose low bytes a 32-bit parameter reads.
#[cfg(not(target_endian = "little"))]
compile_error!("the CUDA emulation passes arguments as little-endian words");

/// A kernel argument, as the kernel's parameter types (a device pointer is an address).
#[derive(Clone, Copy)]
enum Arg {
    Ptr(u64),
    U64(u64),
    U32(u32),
    F32(f32),
}

/// Runs `kernel` over `grid` with `args` in the kernel's order.
fn run(kernel: &str, grid: Grid, args: &[Arg]) {
    let sig: String = args
        .iter()
        .map(|a| match a {
            Arg::Ptr(_) => 'p',
            Arg::U64(_) => 'Q',
            Arg::U32(_) => 'I',
            Arg::F32(_) => 'f',
        })
        .collect();
    let mut words: Vec<u64> = args
        .iter()
        .map(|a| match *a {
            Arg::Ptr(x) | Arg::U64(x) => x,
            Arg::U32(x) => x as u64,
            Arg::F32(x) => x.to_bits() as u64,
        })
        .collect();
    let mut params: Vec<*mut c_void> = words.iter_mut().map(|w| w as *mut u64 as *mut c_void).collect();
    let (name, sig) = (CString::new(kernel).unwrap(), CString::new(sig).unwrap());
    let g = [grid.blocks.0, grid.blocks.1, grid.blocks.2];
    let b = [grid.threads.0, grid.threads.1, grid.threads.2];
    let mut err = vec![0 as c_char; 512];
    // SAFETY: `params` points at one word per argument, alive for the call; every pointer
    // argument is the address of a live `Buf` of the size the kernel reads (each test's duty).
    let rc = unsafe {
        (emu().launch)(name.as_ptr(), sig.as_ptr(), g.as_ptr(), b.as_ptr(), params.as_mut_ptr(), err.as_mut_ptr(), 512)
    };
    // SAFETY: the emulation writes a NUL-terminated message into `err` (zeroed before).
    assert_eq!(rc, 0, "{kernel}: {:?}", unsafe { CStr::from_ptr(err.as_ptr()) });
}

/// Runs kernel `k` (from `xsent::gpu::params`: the kernel and list the CUDA side launches, so the
/// order tested here is the order a GPU gets), the buffers given by name.
fn run_list<const N: usize>(grid: Grid, k: Kernel<N>, bufs: &[(&str, Arg)]) {
    let (kernel, list) = (k.name, &k.params);
    for (name, _) in bufs {
        assert!(
            list.iter().any(|p| p.name == *name && p.value == Value::Buf),
            "{kernel}: `{name}` is not one of its buffers"
        );
    }
    let args: Vec<Arg> = list
        .iter()
        .map(|p| match p.value {
            Value::Buf => {
                bufs.iter().find(|(n, _)| *n == p.name).unwrap_or_else(|| panic!("{kernel}: `{}` not given", p.name)).1
            }
            Value::U64(v) => Arg::U64(v),
            Value::U32(v) => Arg::U32(v),
            Value::F32(v) => Arg::F32(v),
        })
        .collect();
    run(kernel, grid, &args);
}

const GUARD: usize = 64;
/// Guard and fill pattern: as f32 and as f64 a NaN.
const SENTINEL: u64 = 0xFFA5_A5A5_FFA5_A5A5;

/// A buffer the kernels read and write, between guard words.
struct Buf<T> {
    words: Vec<u64>,
    len: usize,
    _t: PhantomData<T>,
}

impl<T: Copy> Buf<T> {
    fn new(data: &[T]) -> Self {
        let bytes = std::mem::size_of_val(data);
        let mut words = vec![SENTINEL; 2 * GUARD + bytes.div_ceil(8)];
        // SAFETY: the words hold at least `bytes` bytes after GUARD; T is plain data.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr() as *const u8, words[GUARD..].as_mut_ptr() as *mut u8, bytes)
        };
        Buf { words, len: data.len(), _t: PhantomData }
    }

    /// An output of `len` values, filled with the sentinel (NaN) until the kernel writes them.
    fn out(len: usize) -> Self {
        let words = vec![SENTINEL; 2 * GUARD + (len * std::mem::size_of::<T>()).div_ceil(8)];
        Buf { words, len, _t: PhantomData }
    }

    fn ptr(&mut self) -> Arg {
        Arg::Ptr(self.words[GUARD..].as_mut_ptr() as u64)
    }

    /// The values, after checking the guards (and the bytes past the last value) are untouched.
    fn get(&self, what: &str) -> Vec<T> {
        let bytes = self.len * std::mem::size_of::<T>();
        let data_words = bytes.div_ceil(8);
        let guards = self.words[..GUARD].iter().chain(&self.words[GUARD + data_words..]);
        assert!(guards.into_iter().all(|&w| w == SENTINEL), "{what}: a write outside the buffer");
        // SAFETY: as in `new`.
        let raw = unsafe { std::slice::from_raw_parts(self.words[GUARD..].as_ptr() as *const u8, data_words * 8) };
        assert!(
            raw[bytes..].iter().zip(SENTINEL.to_le_bytes().iter().cycle().skip(bytes % 8)).all(|(a, b)| a == b),
            "{what}: a write past the last value"
        );
        let mut out = Vec::with_capacity(self.len);
        // SAFETY: `bytes` bytes of T values from the start of the data.
        unsafe {
            std::ptr::copy_nonoverlapping(raw.as_ptr(), out.as_mut_ptr() as *mut u8, bytes);
            out.set_len(self.len);
        }
        out
    }
}

fn values(n: usize, seed: usize) -> Vec<f32> {
    (0..n).map(|i| (((i + seed) * 7919) % 211) as f32 / 105.0 - 1.0).collect()
}

fn host(t: &Tensor) -> Vec<f32> {
    t.to_dtype(DType::F32).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap()
}

fn cpu(data: Vec<f32>, shape: &[usize]) -> Tensor {
    Tensor::from_vec(data, shape, &Device::Cpu).unwrap()
}

/// Every kernel in src/gpu is in the emulation, and this file launches each from its list.
#[test]
fn every_kernel_is_emulated_and_launched_here() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/gpu");
    let mut in_sources = Vec::new();
    for e in std::fs::read_dir(&dir).unwrap() {
        let path = e.unwrap().path();
        if path.extension().is_some_and(|x| x == "cu") {
            let text = std::fs::read_to_string(&path).unwrap();
            for part in text.split("extern \"C\" __global__ void ").skip(1) {
                in_sources.push(part.split('(').next().unwrap().trim().to_string());
            }
        }
    }
    in_sources.sort();
    // SAFETY: a NUL-terminated static string.
    let listed = unsafe { CStr::from_ptr((emu().kernels)()) }.to_str().unwrap().to_string();
    let mut emulated: Vec<String> = listed.split(',').map(String::from).collect();
    emulated.sort();
    assert_eq!(in_sources, emulated, "kernels in src/gpu/*.cu against tests/cuda_emu/kernels.cpp's list");
    let me = include_str!("gpu_emulated.rs");
    // A hand-written argument list only where the emulation's own check is tested (a short one).
    assert_eq!(me.matches("run(\"xsent_").count(), 1, "a kernel launched here without its list");
    // The calls below are looked for in this file's code: comments, spaces and the emulation's
    // own check (which runs gelu only to be refused or caught) left out.
    // (Its name split, so that this line is not where it is found.)
    let own =
        me.find(concat!("fn the_emulation_checks", "_arguments_and_bounds()")).expect("the emulation's own check");
    let own_end = own + me[own..].find("\n}\n").expect("its end");
    let code: String = (me[..own].to_string() + &me[own_end..])
        .lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .flat_map(|l| l.chars().filter(|c| !c.is_whitespace()))
        .collect();
    for k in &in_sources {
        // Through its function in src/gpu/params.rs (the kernel and list the CUDA side launches):
        // `xsent_f_bf16` is `params::f(Ty::Bf16, …)`, a kernel of one form `params::f(…)` (the
        // rule `params`' own test checks).
        let (base, form) = k.strip_prefix("xsent_").and_then(|b| b.rsplit_once('_')).expect("xsent_{name}_{form}");
        let forms = ["f32", "bf16"].iter().filter(|f| in_sources.contains(&format!("xsent_{base}_{f}"))).count();
        let call = match (forms, form) {
            (1, _) => format!("params::{base}("),
            (_, "f32") => format!("params::{base}(Ty::F32,"),
            _ => format!("params::{base}(Ty::Bf16,"),
        };
        assert!(code.contains(&call), "{k} is launched from its list by no test here (no `{call}`)");
    }
}

/// The emulation's own rules: a wrong argument list and a launch CUDA refuses are errors, and
/// a kernel that writes past its buffer is caught by the guards.
#[test]
fn the_emulation_checks_arguments_and_bounds() {
    let mut x = Buf::new(&values(40, 1));
    let mut y = Buf::<f32>::out(40);
    // gelu takes (x, y, n): leaving out n is refused, by the emulation's check.
    let err = std::panic::catch_unwind(move || run("xsent_gelu_f32", launch::elementwise(40), &[x.ptr(), y.ptr()]))
        .expect_err("a short argument list was run");
    let msg = err.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(msg.contains("takes arguments (ppQ), given (pp)"), "another failure: {msg}");
    let mut x = Buf::new(&values(40, 1));
    let mut y = Buf::<f32>::out(39);
    // Told n = 40 for an output of 39: the fortieth write lands in the guard.
    run_list(launch::elementwise(40), params::gelu(Ty::F32, 40), &[("x", x.ptr()), ("y", y.ptr())]);
    assert!(std::panic::catch_unwind(|| y.get("y")).is_err(), "a write past the end went unseen");
}

/// LayerNorm forward and both backward kernels against the CPU's fused op and its gradients:
/// rows that do not fill a block, widths not a multiple of 32, a row of large mean.
#[test]
fn layer_norm_kernels_equal_the_cpu() {
    let eps = 1e-12f32;
    for (rows, n, shift) in [(5, 37, 0.0), (64, 384, 0.0), (3, 1000, 0.0), (9, 384, 40.0)] {
        let xs: Vec<f32> = values(rows * n, 5).iter().map(|v| v + shift).collect();
        let (ws, bs, gs) = (values(n, 9), values(n, 2), values(rows * n, 11));
        let [x, w, b] = [(&xs, vec![rows, n]), (&ws, vec![n]), (&bs, vec![n])]
            .map(|(d, s)| Var::from_tensor(&cpu(d.clone(), &s)).unwrap());
        let y = xsent::model::kernels::layer_norm_train(x.as_tensor(), w.as_tensor(), b.as_tensor(), eps).unwrap();
        let grads = (&y * cpu(gs.clone(), &[rows, n])).unwrap().sum_all().unwrap().backward().unwrap();
        let [dx, dw, db] = [&x, &w, &b].map(|v| host(grads.get(v.as_tensor()).unwrap()));
        let grid = launch::rows("layer norm", rows).unwrap();
        let (mut bx, mut bw, mut bb, mut bg) = (Buf::new(&xs), Buf::new(&ws), Buf::new(&bs), Buf::new(&gs));
        let mut out = Buf::<f32>::out(rows * n);
        let bufs = [("x", bx.ptr()), ("w", bw.ptr()), ("b", bb.ptr()), ("y", out.ptr())];
        run_list(grid, params::layer_norm(Ty::F32, rows, n, eps), &bufs);
        let d = rel_diff(&out.get("y"), &host(&y));
        assert!(d < 1e-5, "LayerNorm {rows}×{n}+{shift}: values differ by {d}");
        let mut gx = Buf::<f32>::out(rows * n);
        let bufs = [("x", bx.ptr()), ("w", bw.ptr()), ("g", bg.ptr()), ("dx", gx.ptr())];
        run_list(grid, params::layer_norm_grad_x(Ty::F32, rows, n, eps), &bufs);
        let d = rel_diff(&gx.get("dx"), &dx);
        assert!(d < 1e-4, "LayerNorm {rows}×{n}+{shift}: gradient of x differs by {d}");
        let mut gxhat = Buf::<f32>::out(rows * n);
        let bufs = [("x", bx.ptr()), ("g", bg.ptr()), ("gxhat", gxhat.ptr())];
        run_list(grid, params::layer_norm_g_xhat(Ty::F32, rows, n, eps), &bufs);
        let mut wb = Buf::<f32>::out(2 * n);
        let bufs = [("a", gxhat.ptr()), ("b", bg.ptr()), ("out", wb.ptr())];
        run_list(launch::column_sums(n), params::column_sums2(Ty::F32, rows, n), &bufs);
        let wb = wb.get("dw, db");
        for (name, got, want) in [("w", &wb[..n], &dw), ("b", &wb[n..], &db)] {
            let d = rel_diff(got, want);
            assert!(d < 1e-4, "LayerNorm {rows}×{n}+{shift}: gradient of {name} differs by {d}");
        }
    }
}

/// The linear layer's bias gradient (column sums in f64) against the CPU op's, with more rows
/// than a block's 32 and columns that do not fill the last block; f32 and bf16.
#[test]
fn column_sums_kernel_equals_the_cpu() {
    for (rows, inp, out) in [(37, 70, 45), (64, 40, 1536), (1000, 16, 24), (1, 8, 1)] {
        let x = Var::from_tensor(&cpu(values(rows * inp, 4), &[rows, inp])).unwrap();
        let w = Var::from_tensor(&cpu(values(out * inp, 6), &[out, inp])).unwrap();
        let b = Var::from_tensor(&cpu(values(out, 8), &[out])).unwrap();
        let gs = values(rows * out, 10);
        let y = xsent::model::kernels::linear(x.as_tensor(), w.as_tensor(), b.as_tensor(), true).unwrap();
        let grads = (&y * cpu(gs.clone(), &[rows, out])).unwrap().sum_all().unwrap().backward().unwrap();
        let want = host(grads.get(b.as_tensor()).unwrap());
        let (mut g, mut sums) = (Buf::new(&gs), Buf::<f32>::out(out));
        let bufs = [("a", g.ptr()), ("out", sums.ptr())];
        run_list(launch::column_sums(out), params::column_sums(Ty::F32, rows, out), &bufs);
        let d = rel_diff(&sums.get("bias gradient"), &want);
        assert!(d < 1e-5, "bias gradient over {rows}×{out} differs by {d}");
        // bf16 training (input, weight, bias and gradient bf16): bit for bit, since the f64 sums
        // of these bf16 values (multiples of 1/105 in [-1, 1], rounded) are exact in any order.
        let bf = |t: &Tensor| Var::from_tensor(&t.to_dtype(DType::BF16).unwrap()).unwrap();
        let (x, w, b) = (bf(x.as_tensor()), bf(w.as_tensor()), bf(b.as_tensor()));
        let gb: Vec<half::bf16> = gs.iter().map(|&v| half::bf16::from_f32(v)).collect();
        let up = Tensor::from_vec(gb.clone(), (rows, out), &Device::Cpu).unwrap();
        let y = xsent::model::kernels::linear(x.as_tensor(), w.as_tensor(), b.as_tensor(), true).unwrap();
        let grads = (&y * &up).unwrap().to_dtype(DType::F32).unwrap().sum_all().unwrap().backward().unwrap();
        let want: Vec<half::bf16> = grads.get(b.as_tensor()).unwrap().to_vec1().unwrap();
        let (mut g, mut sums) = (Buf::new(&gb), Buf::<half::bf16>::out(out));
        let bufs = [("a", g.ptr()), ("out", sums.ptr())];
        run_list(launch::column_sums(out), params::column_sums(Ty::Bf16, rows, out), &bufs);
        let got = sums.get("bf16 bias gradient");
        let off = got.iter().zip(&want).filter(|(a, b)| a.to_bits() != b.to_bits()).count();
        assert_eq!(off, 0, "bf16 bias gradient over {rows}×{out}: {off} of {out} differ from the CPU's");
    }
}

/// Attention's masked softmax and its backward against the CPU op: scores [2, 3, 5, lk], the
/// last keys of the second sequence masked (zero weight on the GPU exactly where on the CPU).
#[test]
fn softmax_kernels_equal_the_cpu() {
    for lk in [37, 128, 300] {
        let (bsz, h, lq) = (2, 3, 5);
        let rows = bsz * h * lq;
        let xs: Vec<f32> = values(rows * lk, 3).iter().map(|v| v * 4.0).collect();
        let mut bias = vec![0f32; bsz * lk];
        bias[lk + lk / 2..].iter_mut().for_each(|v| *v = -1e30);
        let gs = values(rows * lk, 7);
        let s = Var::from_tensor(&cpu(xs.clone(), &[bsz, h, lq, lk])).unwrap();
        let p =
            xsent::model::kernels::masked_softmax(s.as_tensor(), &cpu(bias.clone(), &[bsz, 1, 1, lk]), true).unwrap();
        let grads = (&p * cpu(gs.clone(), &[bsz, h, lq, lk])).unwrap().sum_all().unwrap().backward().unwrap();
        let (pc, gc) = (host(&p), host(grads.get(s.as_tensor()).unwrap()));
        let grid = launch::rows("softmax", rows).unwrap();
        let (mut bx, mut bb, mut bg, mut y) =
            (Buf::new(&xs), Buf::new(&bias), Buf::new(&gs), Buf::<f32>::out(rows * lk));
        let bufs = [("x", bx.ptr()), ("bias", bb.ptr()), ("y", y.ptr())];
        run_list(grid, params::masked_softmax(Ty::F32, rows, lk, h * lq), &bufs);
        let pe = y.get("probabilities");
        let d = rel_diff(&pe, &pc);
        assert!(d < 1e-5, "softmax over {lk}: values differ by {d}");
        assert!(pe.iter().zip(&pc).all(|(a, b)| (*a == 0.0) == (*b == 0.0)), "masked keys differ");
        let mut by = Buf::new(&pe);
        let mut dx = Buf::<f32>::out(rows * lk);
        let bufs = [("y", by.ptr()), ("g", bg.ptr()), ("dx", dx.ptr())];
        run_list(grid, params::softmax_grad(rows, lk), &bufs);
        let d = rel_diff(&dx.get("dx"), &gc);
        assert!(d < 1e-4, "softmax over {lk}: gradients differ by {d}");
    }
}

/// bf16 training's masked softmax (bf16 scores, the f32 bias) and its backward, which recomputes
/// the probabilities from the scores: bit for bit the f32 kernels' results on the widened scores
/// and gradient, rounded once (the f32 forward rounded; the f32 backward given those f32
/// probabilities); and within a bf16 step of the CPU's bf16 op (the warp's sums against the CPU's
/// in-order sums, as in f32).
#[test]
fn softmax_bf16_kernels_equal_the_f32_kernels_rounded() {
    use half::bf16;
    for lk in [37, 128, 300] {
        let (bsz, h, lq) = (2, 3, 5);
        let rows = bsz * h * lq;
        let xb: Vec<bf16> = values(rows * lk, 3).iter().map(|v| bf16::from_f32(v * 4.0)).collect();
        let gb: Vec<bf16> = values(rows * lk, 7).iter().map(|&v| bf16::from_f32(v)).collect();
        let mut bias = vec![0f32; bsz * lk];
        bias[lk + lk / 2..].iter_mut().for_each(|v| *v = -1e30);
        let widen = |v: &[bf16]| v.iter().map(|b| b.to_f32()).collect::<Vec<f32>>();
        let (xw, gw) = (widen(&xb), widen(&gb));
        let grid = launch::rows("softmax", rows).unwrap();
        // The f32 kernels on the widened values.
        let (mut bx, mut bb, mut bg, mut y) =
            (Buf::new(&xw), Buf::new(&bias), Buf::new(&gw), Buf::<f32>::out(rows * lk));
        let bufs = [("x", bx.ptr()), ("bias", bb.ptr()), ("y", y.ptr())];
        run_list(grid, params::masked_softmax(Ty::F32, rows, lk, h * lq), &bufs);
        let y32 = y.get("f32 probabilities");
        let (mut by, mut dx) = (Buf::new(&y32), Buf::<f32>::out(rows * lk));
        let bufs = [("y", by.ptr()), ("g", bg.ptr()), ("dx", dx.ptr())];
        run_list(grid, params::softmax_grad(rows, lk), &bufs);
        let dx32 = dx.get("f32 dx");
        // The bf16 kernels.
        let (mut bx, mut bg) = (Buf::new(&xb), Buf::new(&gb));
        let mut y = Buf::<bf16>::out(rows * lk);
        let bufs = [("x", bx.ptr()), ("bias", bb.ptr()), ("y", y.ptr())];
        run_list(grid, params::masked_softmax(Ty::Bf16, rows, lk, h * lq), &bufs);
        let mut dx = Buf::<bf16>::out(rows * lk);
        let bufs = [("x", bx.ptr()), ("bias", bb.ptr()), ("g", bg.ptr()), ("dx", dx.ptr())];
        run_list(grid, params::masked_softmax_grad(rows, lk, h * lq), &bufs);
        let (yb, dxb) = (y.get("bf16 probabilities"), dx.get("bf16 dx"));
        for (what, got, want) in [("values", &yb, &y32), ("gradients", &dxb, &dx32)] {
            let off = got.iter().zip(want.iter()).filter(|(g, w)| g.to_bits() != bf16::from_f32(**w).to_bits()).count();
            assert_eq!(off, 0, "softmax bf16 over {lk}: {off} {what} differ from the f32 kernel's rounded");
        }
        // Against the CPU's bf16 op.
        let s = Var::from_tensor(&Tensor::from_vec(xb.clone(), (bsz, h, lq, lk), &Device::Cpu).unwrap()).unwrap();
        let p =
            xsent::model::kernels::masked_softmax(s.as_tensor(), &cpu(bias.clone(), &[bsz, 1, 1, lk]), true).unwrap();
        assert_eq!(p.dtype(), DType::BF16);
        let up = Tensor::from_vec(gb.clone(), (bsz, h, lq, lk), &Device::Cpu).unwrap();
        let grads = (&p * &up).unwrap().to_dtype(DType::F32).unwrap().sum_all().unwrap().backward().unwrap();
        let (pc, gc) = (host(&p), host(grads.get(s.as_tensor()).unwrap()));
        let d = rel_diff(&widen(&yb), &pc);
        assert!(d <= 1.0 / 128.0, "softmax bf16 over {lk}: values differ from the CPU's by {d}");
        assert!(widen(&yb).iter().zip(&pc).all(|(a, b)| (*a == 0.0) == (*b == 0.0)), "masked keys differ");
        let d = rel_diff(&widen(&dxb), &gc);
        assert!(d <= 1.0 / 128.0, "softmax bf16 over {lk}: gradients differ from the CPU's by {d}");
    }
}

/// GELU forward and backward, f32 and bf16, against the CPU op, bit for bit: math.cuh's erf and
/// exp are the CPU kernel's operations in its order with no multiply-add fused (on the card,
/// tests/cuda.rs allows 1e-6 and prints how many differ). bf16: the CPU's f32 result on the
/// widened bf16 inputs, rounded once to nearest even.
#[test]
fn gelu_kernels_equal_the_cpu() {
    let n = 20_011;
    let xs: Vec<f32> = (0..n).map(|i| (i as f32 / n as f32 - 0.5) * 14.0).collect();
    let gs = values(n, 13);
    let cpu_gelu = |xs: &[f32]| {
        let v = Var::from_tensor(&cpu(xs.to_vec(), &[n])).unwrap();
        let y = xsent::model::kernels::gelu_erf_train(v.as_tensor()).unwrap();
        let grads = (&y * cpu(gs.clone(), &[n])).unwrap().sum_all().unwrap().backward().unwrap();
        (host(&y), host(grads.get(v.as_tensor()).unwrap()))
    };
    let (yc, gc) = cpu_gelu(&xs);
    let grid = launch::elementwise(n);
    let (mut bx, mut bg, mut y, mut dx) = (Buf::new(&xs), Buf::new(&gs), Buf::<f32>::out(n), Buf::<f32>::out(n));
    run_list(grid, params::gelu(Ty::F32, n), &[("x", bx.ptr()), ("y", y.ptr())]);
    run_list(grid, params::gelu_grad(Ty::F32, n), &[("x", bx.ptr()), ("g", bg.ptr()), ("dx", dx.ptr())]);
    let (ye, ge) = (y.get("y"), dx.get("dx"));
    let differ = |a: &[f32], b: &[f32]| a.iter().zip(b).filter(|(a, b)| a.to_bits() != b.to_bits()).count();
    let (dy, dg) = (differ(&ye, &yc), differ(&ge, &gc));
    assert!(dy == 0 && dg == 0, "GELU f32: {dy} of {n} values and {dg} gradients differ from the CPU's in some bit");
    // bf16: inputs and upstream gradients rounded to bf16; the kernel widens, computes in f32,
    // rounds once. The CPU's f32 kernel on the same widened values, rounded, must give it.
    use half::bf16;
    let (xb, gb): (Vec<bf16>, Vec<bf16>) =
        (xs.iter().map(|&v| bf16::from_f32(v)).collect(), gs.iter().map(|&v| bf16::from_f32(v)).collect());
    let widen = |v: &[bf16]| v.iter().map(|b| b.to_f32()).collect::<Vec<_>>();
    let (xw, gw) = (widen(&xb), widen(&gb));
    let yw: Vec<f32> = host(&xsent::model::kernels::gelu_erf_train(&cpu(xw.clone(), &[n])).unwrap());
    let gelu_grad_w = {
        let v = Var::from_tensor(&cpu(xw.clone(), &[n])).unwrap();
        let y = xsent::model::kernels::gelu_erf_train(v.as_tensor()).unwrap();
        // Σ y ⊙ g with g the widened bf16 gradients: the op's backward gets g as it is.
        let grads = (&y * cpu(gw.clone(), &[n])).unwrap().sum_all().unwrap().backward().unwrap();
        host(grads.get(v.as_tensor()).unwrap())
    };
    let (mut bx, mut bg) = (Buf::new(&xb), Buf::new(&gb));
    let (mut y, mut dx) = (Buf::<bf16>::out(n), Buf::<bf16>::out(n));
    run_list(grid, params::gelu(Ty::Bf16, n), &[("x", bx.ptr()), ("y", y.ptr())]);
    let bufs = [("x", bx.ptr()), ("g", bg.ptr()), ("dx", dx.ptr())];
    run_list(grid, params::gelu_grad(Ty::Bf16, n), &bufs);
    for (what, got, want) in [("values", y.get("y"), yw), ("gradients", dx.get("dx"), gelu_grad_w)] {
        let off = got.iter().zip(&want).filter(|(g, w)| g.to_bits() != bf16::from_f32(**w).to_bits()).count();
        assert_eq!(off, 0, "GELU bf16 {what}: {off} of {n} differ from the CPU's f32 result rounded");
    }
}

/// Attention's head split (scaled or not) and merge, f32 and bf16: bit for bit the CPU op's
/// values (zeros of both signs among the inputs), over the launch the GPU makes and over a grid
/// of two blocks (the grid-stride loop); inputs contiguous, a merge of a transposed view and a
/// split of a column slice (its rows wider than the matrix), each given as the CUDA side gives
/// it: the strides by `launch::heads_strides`, the buffer from the layout's start to
/// `launch::heads_span`'s end (a read past it would read the guard's NaN).
#[test]
fn heads_kernels_equal_the_cpu() {
    use half::bf16;
    let (b, l, nh, d) = (3, 7, 4, 24);
    let n = b * l * nh * d;
    // Twice n values: the column slice takes half of each row.
    // Zeros of both signs, and bf16's smallest negative value (its scaled product is −0 in bf16
    // before the `+ 0`).
    let xs: Vec<f32> = values(2 * n, 5)
        .iter()
        .enumerate()
        .map(|(i, v)| match i % 13 {
            0 => -0.0,
            7 => f32::from_bits(0x8001_0000),
            _ => v * 3.0,
        })
        .collect();
    for dt in [DType::F32, DType::BF16] {
        let all = cpu(xs.clone(), &[2 * n]).to_dtype(dt).unwrap();
        let first = all.narrow(0, 0, n).unwrap();
        let inputs = [
            ("split", first.reshape((b * l, nh * d)).unwrap(), false),
            ("merge", first.reshape((b, nh, l, d)).unwrap(), true),
            ("merge of a transposed view", first.reshape((b, nh, d, l)).unwrap().t().unwrap(), true),
            ("split of a column slice", all.reshape((b * l, 2 * nh * d)).unwrap().narrow(1, 5, nh * d).unwrap(), false),
        ];
        for (input, x, merge) in inputs {
            for scale in if merge { vec![None] } else { vec![None, Some(1.0 / (d as f64).sqrt())] } {
                let what = format!("heads {dt:?}, {input}, scale {scale:?}");
                let want = if merge {
                    xsent::model::kernels::merge_heads(&x)
                } else {
                    xsent::model::kernels::split_heads(&x, b, l, nh, scale)
                };
                let want: Vec<u32> = host(&want.unwrap()).iter().map(|v| v.to_bits()).collect();
                let strides = launch::heads_strides(merge, l, d, x.stride()).unwrap();
                let span = launch::heads_span([b, nh, l, d], strides);
                // The factor as the CUDA side passes it: rounded to the dtype (candle's affine op).
                let factor = scale.map(|s| launch::heads_factor(dt, s));
                let from = x.layout().start_offset();
                let two_blocks = Grid { blocks: (2, 1, 1), threads: (launch::ELEMENT_THREADS as u32, 1, 1) };
                for grid in [launch::elementwise(n), two_blocks] {
                    let got: Vec<u32> = if dt == DType::F32 {
                        let (mut bx, mut y) = (Buf::new(&xs[from..from + span]), Buf::<f32>::out(n));
                        let k = params::heads(Ty::F32, [b, nh, l, d], strides, merge, factor);
                        run_list(grid, k, &[("x", bx.ptr()), ("y", y.ptr())]);
                        y.get(&what).iter().map(|v| v.to_bits()).collect()
                    } else {
                        let xb: Vec<bf16> = xs[from..from + span].iter().map(|&v| bf16::from_f32(v)).collect();
                        let (mut bx, mut y) = (Buf::new(&xb), Buf::<bf16>::out(n));
                        let k = params::heads(Ty::Bf16, [b, nh, l, d], strides, merge, factor);
                        run_list(grid, k, &[("x", bx.ptr()), ("y", y.ptr())]);
                        y.get(&what).iter().map(|v| v.to_f32().to_bits()).collect()
                    };
                    let off = got.iter().zip(&want).filter(|(g, w)| g != w).count();
                    assert_eq!(off, 0, "{what}, {} blocks: {off} of {n} values differ from the CPU's", grid.blocks.0);
                }
            }
        }
    }
}

/// The counter-based dropout: the kernel's kept elements and scale are the CPU's, bit for bit.
#[test]
fn dropout_kernel_equals_the_cpu_mask() {
    let (n, p, seed) = (10_007, 0.1f64, 0x5EED_0042u64);
    let xs = values(n, 3);
    let want = host(&xsent::model::dropout::apply(&cpu(xs.clone(), &[n]), p, seed).unwrap().expect("p > 0 drops"));
    let (mut x, mut y) = (Buf::new(&xs), Buf::<f32>::out(n));
    let scale = (1.0 / (1.0 - p)) as f32;
    let k = params::dropout(Ty::F32, n, seed, p as f32, scale);
    run_list(launch::elementwise(n), k, &[("x", x.ptr()), ("out", y.ptr())]);
    let got = y.get("dropped");
    assert!(got.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()), "dropout masks differ");
    // bf16 (bf16 training): the CPU op on the bf16 values, bit for bit.
    use half::bf16;
    let xb: Vec<bf16> = xs.iter().map(|&v| bf16::from_f32(v)).collect();
    let xt = Tensor::from_vec(xb.clone(), n, &Device::Cpu).unwrap();
    let want: Vec<bf16> = xsent::model::dropout::apply(&xt, p, seed).unwrap().unwrap().to_vec1::<bf16>().unwrap();
    let (mut x, mut y) = (Buf::new(&xb), Buf::<bf16>::out(n));
    let k = params::dropout(Ty::Bf16, n, seed, p as f32, scale);
    run_list(launch::elementwise(n), k, &[("x", x.ptr()), ("out", y.ptr())]);
    let got = y.get("dropped, bf16");
    assert!(got.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()), "bf16 dropout differs");
}

/// bf16 training's LayerNorm kernels (a bf16 activation and gradient, f32 weights) against the
/// CPU's op on the same bf16 values: the outputs within a bf16 step of the CPU's (the f32 results
/// agree to rounding, as in f32; rounding to bf16 can then land one step apart), the weights'
/// gradients (f32) to the f32 kernels' bound.
#[test]
fn layer_norm_bf16_kernels_equal_the_cpu() {
    use half::bf16;
    let eps = 1e-12f32;
    for (rows, n, shift) in [(5, 37, 0.0), (64, 384, 0.0), (9, 384, 40.0)] {
        let xb: Vec<bf16> = values(rows * n, 5).iter().map(|v| bf16::from_f32(v + shift)).collect();
        let gb: Vec<bf16> = values(rows * n, 11).iter().map(|&v| bf16::from_f32(v)).collect();
        let (ws, bs) = (values(n, 9), values(n, 2));
        let x = Var::from_tensor(&Tensor::from_vec(xb.clone(), (rows, n), &Device::Cpu).unwrap()).unwrap();
        let [w, b] = [(&ws, n), (&bs, n)].map(|(d, l)| Var::from_tensor(&cpu(d.clone(), &[l])).unwrap());
        let y = xsent::model::kernels::layer_norm_train(x.as_tensor(), w.as_tensor(), b.as_tensor(), eps).unwrap();
        assert_eq!(y.dtype(), DType::BF16);
        let up = Tensor::from_vec(gb.clone(), (rows, n), &Device::Cpu).unwrap();
        let grads = (&y * &up).unwrap().to_dtype(DType::F32).unwrap().sum_all().unwrap().backward().unwrap();
        let [dx, dw, db] = [&x, &w, &b].map(|v| host(grads.get(v.as_tensor()).unwrap()));
        let grid = launch::rows("layer norm", rows).unwrap();
        let (mut bx, mut bw, mut bb, mut bg) = (Buf::new(&xb), Buf::new(&ws), Buf::new(&bs), Buf::new(&gb));
        let widen = |v: Vec<bf16>| v.iter().map(|b| b.to_f32()).collect::<Vec<f32>>();
        let mut out = Buf::<bf16>::out(rows * n);
        let bufs = [("x", bx.ptr()), ("w", bw.ptr()), ("b", bb.ptr()), ("y", out.ptr())];
        run_list(grid, params::layer_norm(Ty::Bf16, rows, n, eps), &bufs);
        let d = rel_diff(&widen(out.get("y")), &host(&y));
        assert!(d <= 1.0 / 128.0, "LayerNorm bf16 {rows}×{n}+{shift}: values differ by {d}");
        let mut gx = Buf::<bf16>::out(rows * n);
        let bufs = [("x", bx.ptr()), ("w", bw.ptr()), ("g", bg.ptr()), ("dx", gx.ptr())];
        run_list(grid, params::layer_norm_grad_x(Ty::Bf16, rows, n, eps), &bufs);
        let d = rel_diff(&widen(gx.get("dx")), &dx);
        assert!(d <= 1.0 / 128.0, "LayerNorm bf16 {rows}×{n}+{shift}: gradient of x differs by {d}");
        let mut gxhat = Buf::<f32>::out(rows * n);
        let bufs = [("x", bx.ptr()), ("g", bg.ptr()), ("gxhat", gxhat.ptr())];
        run_list(grid, params::layer_norm_g_xhat(Ty::Bf16, rows, n, eps), &bufs);
        let mut wb = Buf::<f32>::out(2 * n);
        let bufs = [("a", gxhat.ptr()), ("b", bg.ptr()), ("out", wb.ptr())];
        run_list(launch::column_sums(n), params::column_sums2(Ty::Bf16, rows, n), &bufs);
        let wb = wb.get("dw, db");
        for (name, got, want) in [("w", &wb[..n], &dw), ("b", &wb[n..], &db)] {
            let d = rel_diff(got, want);
            assert!(d < 1e-4, "LayerNorm bf16 {rows}×{n}+{shift}: gradient of {name} differs by {d}");
        }
    }
}

/// The one-tensor AdamW kernel against the CPU optimiser, three steps without clipping, bit for
/// bit; then the one-launch AdamW and Σx² over many tensors (chunk edges, tensors smaller than a
/// warp, with and without decay) against the one-tensor kernel and an f64 sum.
#[test]
fn adamw_kernels_equal_the_cpu_optimiser() {
    use xsent::model::weights::Params;
    use xsent::train::{AdamW, AdamWConfig};
    let cfg = AdamWConfig { max_grad_norm: None, ..Default::default() };
    let (n, lrs) = (70_001, [1e-2, 5e-3, 2e-3]);
    let init = values(n, 1);
    let w = Var::from_tensor(&cpu(init.clone(), &[n])).unwrap();
    let params = Params { vars: vec![("layer.weight".into(), w.clone())] };
    let mut opt = AdamW::new(&params, cfg).unwrap();
    let (mut p, mut m, mut v) = (Buf::new(&init), Buf::new(&vec![0f32; n]), Buf::new(&vec![0f32; n]));
    for (step, lr) in lrs.iter().enumerate() {
        // The loss Σ x²/2 + Σ i·x/n: its gradient x + i/n, taken at the weights before the step.
        let ramp = cpu((0..n).map(|i| i as f32 / n as f32).collect(), &[n]);
        let loss = ((w.as_tensor().sqr().unwrap().sum_all().unwrap() * 0.5).unwrap()
            + (w.as_tensor() * &ramp).unwrap().sum_all().unwrap())
        .unwrap();
        let grads = loss.backward().unwrap();
        let mut g = Buf::new(&host(grads.get(w.as_tensor()).unwrap()));
        opt.step(&grads, *lr).unwrap();
        let t = (step + 1) as i32;
        // The optimiser's scalars as src/train/optim.rs computes them.
        let step = params::AdamWStep {
            b1: cfg.beta1 as f32,
            b2: cfg.beta2 as f32,
            bc1: (1.0 - cfg.beta1.powi(t)) as f32,
            bc2: (1.0 - cfg.beta2.powi(t)) as f32,
            eps: cfg.eps as f32,
            grad_scale: 1.0,
        };
        let k = params::adamw(n, *lr as f32, cfg.weight_decay as f32, &step);
        let bufs = [("p", p.ptr()), ("g", g.ptr()), ("m", m.ptr()), ("v", v.ptr())];
        run_list(launch::elementwise(n), k, &bufs);
    }
    let want = host(w.as_tensor());
    let got = p.get("weights");
    assert!(got.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()), "weights after 3 steps differ");
    let state = opt.state_tensors().unwrap();
    for (name, buf) in [("m.layer.weight", &m), ("v.layer.weight", &v)] {
        let want = host(&state[name]);
        assert!(buf.get(name).iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()), "{name} differs");
    }

    // Many tensors in one launch each, against the one-tensor kernel per tensor.
    let c = launch::CHUNK;
    let lens = [1usize, 31, 33, 1000, c - 1, c, c + 1, 2 * c + 17, 5, 0, 3 * c, 77];
    let (bc1, bc2) = (1.0 - 0.9f32.powi(2), 1.0 - 0.999f32.powi(2));
    let step = params::AdamWStep { b1: 0.9, b2: 0.999, bc1, bc2, eps: 1e-8, grad_scale: 0.75 };
    let mk = |k: usize, salt: usize| -> Vec<Buf<f32>> {
        lens.iter().enumerate().map(|(i, &l)| Buf::new(&values(l, i * 31 + salt + k))).collect()
    };
    let lr_decay: Vec<(f32, f32)> =
        (0..lens.len()).map(|i| (1e-3 * (1 + i % 3) as f32, if i % 2 == 0 { 0.01 } else { 0.0 })).collect();
    // Moments must be non-negative for v: square the values.
    let square = |bufs: &mut Vec<Buf<f32>>| {
        for b in bufs.iter_mut() {
            let sq: Vec<f32> = b.get("v").iter().map(|x| x * x).collect();
            *b = Buf::new(&sq);
        }
    };
    let (mut p1, mut g1, mut m1, mut v1) = (mk(0, 1), mk(0, 2), mk(0, 3), mk(0, 4));
    square(&mut v1);
    let (mut p2, mut g2, mut m2, mut v2) = (mk(0, 1), mk(0, 2), mk(0, 3), mk(0, 4));
    square(&mut v2);
    for (i, &l) in lens.iter().enumerate().filter(|(_, &l)| l > 0) {
        let (lr, decay) = lr_decay[i];
        let bufs = [("p", p1[i].ptr()), ("g", g1[i].ptr()), ("m", m1[i].ptr()), ("v", v1[i].ptr())];
        run_list(launch::elementwise(l), params::adamw(l, lr, decay, &step), &bufs);
    }
    let addr = |bufs: &mut Vec<Buf<f32>>| {
        bufs.iter_mut()
            .map(|b| match b.ptr() {
                Arg::Ptr(a) => a,
                _ => unreachable!(),
            })
            .collect::<Vec<u64>>()
    };
    let chunks = launch::chunks(&lens, c);
    let fields = [
        addr(&mut p2),
        addr(&mut g2),
        addr(&mut m2),
        addr(&mut v2),
        lens.iter().map(|&l| l as u64).collect(),
        lr_decay.iter().map(|&(lr, d)| launch::lr_and_decay(lr, d)).collect(),
    ];
    let mut table = Buf::new(&launch::table(&fields, &chunks));
    let grid = launch::chunked("adamw", chunks.len()).unwrap();
    run_list(grid, params::adamw_many(lens.len(), c, &step), &[("table", table.ptr())]);
    for (i, &l) in lens.iter().enumerate() {
        for (what, a, b) in
            [("parameter", &p1[i], &p2[i]), ("first moment", &m1[i], &m2[i]), ("second moment", &v1[i], &v2[i])]
        {
            let (a, b) = (a.get(what), b.get(what));
            assert!(a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()), "tensor {i} ({l}): {what} differs");
        }
        assert_eq!(g1[i].get("gradient").len(), l);
    }
    // Σx² of the gradients: per chunk in f64, added here in order, against an f64 sum of the f32
    // squares in order (another order of the same f64 terms: within 1e-12 relative).
    let grads: Vec<Vec<f32>> = g2.iter().map(|b| b.get("gradient")).collect();
    let want: f64 = grads.iter().flatten().map(|&x| (x * x) as f64).sum();
    let fields = [addr(&mut g2), lens.iter().map(|&l| l as u64).collect()];
    let mut table = Buf::new(&launch::table(&fields, &chunks));
    let mut partial = Buf::<f64>::out(chunks.len());
    let bufs = [("table", table.ptr()), ("partial", partial.ptr())];
    let grid = launch::chunked("sumsq", chunks.len()).unwrap();
    run_list(grid, params::sumsq_many(lens.len(), c), &bufs);
    let got: f64 = partial.get("partial sums").iter().sum();
    assert!((got - want).abs() <= 1e-12 * want, "Σx² {got} against {want}");
}
