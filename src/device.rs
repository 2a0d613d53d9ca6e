//! `--device cpu|cuda|cuda:N`.

use anyhow::{bail, Context, Result};
use candle_core::Device;

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
    opened.insert(ordinal, d.clone());
    Ok(d)
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
