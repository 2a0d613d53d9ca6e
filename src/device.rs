//! `--device cpu|cuda|cuda:N`.

use anyhow::{bail, Context, Result};
use candle_core::Device;

pub fn parse_device(spec: &str) -> Result<Device> {
    let ordinal = match spec {
        "cpu" => return Ok(Device::Cpu),
        "cuda" => 0,
        s => match s.strip_prefix("cuda:") {
            Some(n) => n.parse::<usize>().with_context(|| format!("--device {s}: expected cuda:N with N a GPU index"))?,
            None => bail!("--device {s}: expected cpu, cuda or cuda:N"),
        },
    };
    cuda(ordinal)
}

#[cfg(feature = "cuda")]
fn cuda(ordinal: usize) -> Result<Device> {
    Device::new_cuda(ordinal).with_context(|| format!("cannot open CUDA device {ordinal}"))
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
