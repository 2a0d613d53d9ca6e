//! `--device cpu|cuda|cuda:N`.

use anyhow::{bail, Context, Result};
use candle_core::Device;

/// The machine's memory in bytes (`MemTotal` of `/proc/meminfo`); None where it cannot be read.
pub fn host_memory_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kb = text
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))?
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse::<u64>()
        .ok()?;
    kb.checked_mul(1024)
}

pub fn parse_device(spec: &str) -> Result<Device> {
    let ordinal = match spec {
        "cpu" => return Ok(Device::Cpu),
        "cuda" => 0,
        s => match s.strip_prefix("cuda:") {
            Some(n) => {
                n.parse::<usize>().with_context(|| format!("--device {s}: expected cuda:N with N a GPU index"))?
            }
            None => bail!("--device {s}: expected cpu, cuda or cuda:N"),
        },
    };
    cuda(ordinal)
}

/// One [`Device`] per GPU for the whole process: candle gives every `Device::new_cuda` a new
/// identity (its own context handle, stream and cuBLAS handle), and tensors of two identities
/// cannot meet in one op, so a recipe that parsed the device twice would fail.
#[cfg(feature = "cuda")]
fn cuda(ordinal: usize) -> Result<Device> {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    static OPENED: OnceLock<Mutex<HashMap<usize, Device>>> = OnceLock::new();
    let mut opened = OPENED.get_or_init(Default::default).lock().expect("no thread panicked while opening a GPU");
    if let Some(d) = opened.get(&ordinal) {
        return Ok(d.clone());
    }
    let d = Device::new_cuda(ordinal).with_context(|| {
        format!("cannot open CUDA device {ordinal}: is there an NVIDIA GPU with that index and a driver for CUDA 13 (nvidia-smi lists them)?")
    })?;
    // `XSENT_KERNELS=candle` (src/model/candle_ops.rs) is candle as it comes, the device too.
    if let (Device::Cuda(c), false) = (&d, std::env::var("XSENT_KERNELS").is_ok_and(|k| k == "candle")) {
        tune(c).with_context(|| format!("cannot set up CUDA device {ordinal}"))?;
    }
    opened.insert(ordinal, d.clone());
    Ok(d)
}

/// What xsent changes in a CUDA device it opens, for the host's cost per op. candle runs every
/// op on the per-thread stream, which cudarc does not count as a second stream:
/// 1. **No CUDA events per buffer.** cudarc gives every buffer a read and a write event (two
///    `cuEventCreate` at allocation, two `cuEventDestroy` when freed) and uses them only once a
///    context has several streams (`is_managing_stream_synchronization`), which a candle device
///    never has: four driver calls per op for nothing. Turning tracking off changes no ordering:
///    all work stays on the one stream, in order.
/// 2. **The memory pool keeps what is freed.** candle allocates with `cuMemAllocAsync` from the
///    device's default pool, whose release threshold is 0: at each synchronisation (every read
///    of a loss or a norm) the pool hands its free memory back to the driver, and the next
///    step's allocations map it again. With the threshold at its maximum the pool keeps it for
///    reuse, as PyTorch's caching allocator does; the peak stays what the work needs.
#[cfg(feature = "cuda")]
fn tune(dev: &candle_core::CudaDevice) -> Result<()> {
    use candle_core::cuda_backend::cudarc::driver::{result, sys};
    let ctx = dev.cuda_stream().context().clone();
    // SAFETY: candle's device issues all its work on one stream (the per-thread stream), so
    // cudarc never reads the events it would create (1. above); buffers made before this call
    // keep theirs, which cudarc ignores alike.
    unsafe { dev.disable_event_tracking() };
    if ctx.has_async_alloc() {
        let mut keep = u64::MAX;
        // SAFETY: the device is the context's own; the attribute's value is a u64 (cuda.h:
        // CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, a cuuint64_t).
        unsafe {
            let pool = result::device::get_default_mem_pool(ctx.cu_device())?;
            result::mem_pool::set_attribute(
                pool,
                sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                (&mut keep as *mut u64).cast(),
            )?;
        }
    }
    Ok(())
}

#[cfg(not(feature = "cuda"))]
fn cuda(_ordinal: usize) -> Result<Device> {
    bail!("this xsent was built without CUDA support; rebuild with `cargo build --release --features cuda`, or use --device cpu")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_devices() {
        assert!(parse_device("cpu").unwrap().is_cpu());
        assert!(parse_device("gpu").unwrap_err().to_string().contains("expected cpu"));
        assert!(parse_device("cuda:x").is_err());
        #[cfg(not(feature = "cuda"))]
        assert!(parse_device("cuda:0").unwrap_err().to_string().contains("--features cuda"));
    }
}
