//! The switch between the fused CPU kernels ([`super::kernels`]) and candle's ops, the GPU's
//! code path: the kernels, the matrix products ([`super::matmul`]), dropout and the optimiser
//! read it.

thread_local! {
    static FORCED_HERE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether the CPU runs what a GPU runs: candle's ops instead of the fused kernels, operands made
/// contiguous for cuBLAS ([`super::matmul`]), dense token-table gradients and the optimiser's
/// device path. Set for a process by `XSENT_KERNELS=candle` (tests of the GPU's code paths on a
/// machine without one), or on one thread by [`with_candle_ops`].
pub fn candle_ops_forced() -> bool {
    static FROM_ENV: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    FORCED_HERE.with(|f| f.get())
        || *FROM_ENV.get_or_init(|| match std::env::var("XSENT_KERNELS").as_deref() {
            Ok("candle") => true,
            // avx2 and portable pick the int8/bf16 kernels' path (model::quant) and keep these.
            Ok("") | Ok("fused") | Ok("avx2") | Ok("portable") | Err(_) => false,
            Ok(other) => {
                crate::errln!("xsent: XSENT_KERNELS={other:?} is not \"candle\", \"fused\", \"avx2\" or \"portable\"; the fused CPU kernels are used");
                false
            }
        })
}

/// `f()` with [`candle_ops_forced`] on this thread (for tests).
pub fn with_candle_ops<T>(f: impl FnOnce() -> T) -> T {
    struct Reset(bool);
    impl Drop for Reset {
        fn drop(&mut self) {
            FORCED_HERE.with(|c| c.set(self.0));
        }
    }
    let _reset = Reset(FORCED_HERE.with(|c| c.replace(true)));
    f()
}
