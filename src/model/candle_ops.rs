//! The switch between the CPU's own paths and a GPU's: the fused CPU kernels
//! ([`super::kernels`]), or what a GPU runs (operands made contiguous for cuBLAS
//! ([`super::matmul`]), dense token-table gradients, the optimiser's device path, counter-based
//! dropout, candle's ops where xsent has no CUDA kernel), or candle's ops for every op. The
//! kernels, the matrix products, dropout and the optimiser read it.

thread_local! {
    static FORCED_HERE: std::cell::Cell<Option<Forced>> = const { std::cell::Cell::new(None) };
}

/// What `XSENT_KERNELS` (or a test, on one thread) asks of the CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Forced {
    /// `gpu`: a GPU's code paths; the ops with a CUDA side (training's LayerNorm, softmax, GELU
    /// and linear layer, the head split and merge) run the CPU kernels in place of their CUDA
    /// twins (src/gpu), as a GPU runs those.
    GpuPaths,
    /// `candle`: a GPU's code paths with candle's ops for every op, the fused training ops
    /// included (their fallback for other dtypes and devices, and on a GPU the way back from
    /// xsent's kernels; there the optimiser also runs one kernel per parameter, and the device
    /// is left as candle opens it: src/device.rs).
    CandleOps,
}

fn forced() -> Option<Forced> {
    static FROM_ENV: std::sync::OnceLock<Option<Forced>> = std::sync::OnceLock::new();
    FORCED_HERE.with(|f| f.get()).or(*FROM_ENV.get_or_init(|| match std::env::var("XSENT_KERNELS").as_deref() {
        Ok("candle") => Some(Forced::CandleOps),
        Ok("gpu") => Some(Forced::GpuPaths),
        // avx2 and portable pick the int8/bf16 kernels' path (model::quant) and keep these.
        Ok("") | Ok("fused") | Ok("avx2") | Ok("portable") | Err(_) => None,
        Ok(other) => {
            crate::errln!(
                "xsent: XSENT_KERNELS={other:?} is not \"candle\", \"gpu\", \"fused\", \"avx2\" or \"portable\"; the fused CPU kernels are used"
            );
            None
        }
    }))
}

/// Whether the CPU runs what a GPU runs: candle's ops instead of the fused kernels (except
/// those with a CUDA side, unless [`training_kernels_off`]), operands made
/// contiguous for cuBLAS ([`super::matmul`]), dense token-table gradients and the optimiser's
/// device path. Set for a process by `XSENT_KERNELS=gpu` or `XSENT_KERNELS=candle` (tests of the
/// GPU's code paths on a machine without one), or on one thread by [`with_gpu_paths`] or
/// [`with_candle_ops`].
pub fn candle_ops_forced() -> bool {
    forced().is_some()
}

/// Whether the ops with CUDA kernels as well as CPU ones (training's LayerNorm, masked softmax,
/// GELU and linear layer, the head split and merge) take candle's ops instead, on every device:
/// `XSENT_KERNELS=candle` or [`with_candle_ops`].
pub fn training_kernels_off() -> bool {
    forced() == Some(Forced::CandleOps)
}

/// `f()` with `how` forced on this thread.
fn with_forced<T>(how: Forced, f: impl FnOnce() -> T) -> T {
    struct Reset(Option<Forced>);
    impl Drop for Reset {
        fn drop(&mut self) {
            FORCED_HERE.with(|c| c.set(self.0));
        }
    }
    let _reset = Reset(FORCED_HERE.with(|c| c.replace(Some(how))));
    f()
}

/// `f()` with a GPU's code paths on this thread, as `XSENT_KERNELS=gpu` (for tests).
pub fn with_gpu_paths<T>(f: impl FnOnce() -> T) -> T {
    with_forced(Forced::GpuPaths, f)
}

/// `f()` with candle's ops for every op on this thread, as `XSENT_KERNELS=candle` (for tests).
pub fn with_candle_ops<T>(f: impl FnOnce() -> T) -> T {
    with_forced(Forced::CandleOps, f)
}
