//! `xsent quantize MODEL OUT`: a model directory with the encoder's linear layers in int8 or
//! bf16, which `--model OUT` loads directly (see docs/quantization.md).

use crate::model::quant::Dtype;
use anyhow::Result;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The f32 source model: directory or hub id org/name[@revision].
    pub model: String,
    /// Output model directory (must not exist, unless --force).
    pub out: PathBuf,
    /// int8 (per-channel weights, smoothed; the default) or bf16.
    #[arg(long, value_enum, default_value_t = Stored::Int8)]
    pub dtype: Stored,
    /// int8: calibrate the smoothing on this text file (UTF-8, one sentence per line, at most
    /// 16 MB; a few hundred sentences like the ones you will embed) instead of the built-in 64
    /// English sentences.
    #[arg(long, value_name = "FILE")]
    pub calibration: Option<PathBuf>,
    /// Replace OUT if it is a model directory an earlier `xsent quantize` wrote and holds only
    /// the files that run wrote (its config.json lists them).
    #[arg(long)]
    pub force: bool,
}

/// The dtypes `quantize` writes: those of `--dtype` that a model folder can store (f16 and f32
/// are not, so `--help` does not offer them).
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum Stored {
    Int8,
    Bf16,
}

impl From<Stored> for Dtype {
    fn from(s: Stored) -> Self {
        match s {
            Stored::Int8 => Dtype::Int8,
            Stored::Bf16 => Dtype::Bf16,
        }
    }
}

pub fn run(a: Args) -> Result<()> {
    let dtype = Dtype::from(a.dtype);
    let command = std::env::args()
        .map(|s| if s.contains(char::is_whitespace) { format!("'{s}'") } else { s })
        .collect::<Vec<_>>()
        .join(" ");
    let w = crate::model::quantized::quantize(&a.model, &a.out, dtype, a.force, &command, a.calibration.as_deref())?;
    errln!(
        "xsent quantize: wrote {} ({} linear layers in {}; weights {:.1} MB, source {:.1} MB)",
        a.out.display(),
        w.layers,
        dtype,
        w.bytes as f64 / 1e6,
        w.source_bytes as f64 / 1e6
    );
    Ok(())
}
