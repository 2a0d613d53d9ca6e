//! Pooling token states into one sentence vector, and L2 normalisation.

use anyhow::{bail, Context, Result};
use candle_core::{DType, Tensor, D};
use std::path::Path;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Pooling {
    /// Mean over the attended tokens (the attention mask).
    Mean,
    /// The first token's state (`[CLS]` / `<s>`).
    Cls,
    /// Element-wise max over the attended tokens.
    Max,
}

impl std::fmt::Display for Pooling {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Pooling::Mean => "mean",
            Pooling::Cls => "cls",
            Pooling::Max => "max",
        })
    }
}

#[derive(serde::Deserialize)]
struct StPoolingConfig {
    #[serde(default)]
    pooling_mode_cls_token: bool,
    #[serde(default)]
    pooling_mode_mean_tokens: bool,
    #[serde(default)]
    pooling_mode_max_tokens: bool,
    #[serde(default)]
    pooling_mode_mean_sqrt_len_tokens: bool,
    #[serde(default)]
    pooling_mode_weightedmean_tokens: bool,
    #[serde(default)]
    pooling_mode_lasttoken: bool,
    #[serde(default)]
    pooling_mode: Option<String>,
    #[serde(default, alias = "embedding_dimension")]
    word_embedding_dimension: Option<usize>,
    #[serde(default = "yes")]
    include_prompt: bool,
}

fn yes() -> bool {
    true
}

impl Pooling {
    /// Read a sentence-transformers `1_Pooling/config.json` of an encoder with `hidden` units: the
    /// pooling mode, and whether the prompt's tokens are pooled too (`include_prompt`, true
    /// unless the file says false).
    pub fn from_st_config(path: &Path, hidden: usize) -> Result<(Self, bool)> {
        let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
        let c: StPoolingConfig =
            serde_json::from_str(&text).with_context(|| format!("invalid pooling config {}", path.display()))?;
        if let Some(d) = c.word_embedding_dimension {
            if d != hidden {
                bail!(
                    "{}: word_embedding_dimension is {d} but the model's hidden_size is {hidden}: the pooling config belongs to another model",
                    path.display()
                );
            }
        }
        if let Some(mode) = c.pooling_mode.as_deref() {
            let pooling = match mode {
                "mean" => Pooling::Mean,
                "cls" => Pooling::Cls,
                "max" => Pooling::Max,
                other => bail!("{}: pooling_mode {other:?} is not supported (mean, cls, max)", path.display()),
            };
            return Ok((pooling, c.include_prompt));
        }
        let modes = [c.pooling_mode_cls_token, c.pooling_mode_mean_tokens, c.pooling_mode_max_tokens];
        let unsupported =
            c.pooling_mode_mean_sqrt_len_tokens || c.pooling_mode_weightedmean_tokens || c.pooling_mode_lasttoken;
        if unsupported || modes.iter().filter(|m| **m).count() != 1 {
            bail!(
                "{}: xsent supports exactly one of cls, mean or max pooling; pass --pooling to choose",
                path.display()
            );
        }
        let pooling = if c.pooling_mode_cls_token {
            Pooling::Cls
        } else if c.pooling_mode_mean_tokens {
            Pooling::Mean
        } else {
            Pooling::Max
        };
        Ok((pooling, c.include_prompt))
    }

    /// The sentence-transformers `1_Pooling/config.json` for this mode.
    pub fn st_config(&self, dim: usize) -> serde_json::Value {
        serde_json::json!({
            "word_embedding_dimension": dim,
            "pooling_mode_cls_token": *self == Pooling::Cls,
            "pooling_mode_mean_tokens": *self == Pooling::Mean,
            "pooling_mode_max_tokens": *self == Pooling::Max,
            "pooling_mode_mean_sqrt_len_tokens": false,
        })
    }

    /// `hidden` `[B, L, H]`, `mask` `[B, L]` → `[B, H]`. Differentiable.
    pub fn apply(&self, hidden: &Tensor, mask: &Tensor) -> Result<Tensor> {
        let mask = mask.to_dtype(hidden.dtype())?;
        Ok(match self {
            Pooling::Cls => hidden.narrow(1, 0, 1)?.squeeze(1)?,
            Pooling::Mean => {
                let summed = hidden.broadcast_mul(&mask.unsqueeze(D::Minus1)?)?.sum(1)?;
                let counts = mask.sum_keepdim(1)?.clamp(1e-9, f64::INFINITY)?;
                summed.broadcast_div(&counts)?
            }
            Pooling::Max => {
                // Padded positions get -1e9 (as sentence-transformers does) before the max.
                let penalty = ((mask - 1.0)? * 1e9)?.unsqueeze(D::Minus1)?;
                hidden.broadcast_add(&penalty)?.max(1)?
            }
        })
    }
}

/// One row in place: `x / max(‖x‖₂, 1e-12)`, as [`l2_normalize`] does on tensors (a zero row
/// stays zero).
#[inline]
pub fn l2_normalize_row(row: &mut [f32]) {
    let mut n = row.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
    if n.is_infinite() {
        // Squares that overflow float32 (values above 1.8e19): the norm itself may not.
        n = norm_f64(row) as f32;
    }
    row.iter_mut().for_each(|x| *x /= n);
}

/// A row's L2 norm summed in float64: finite for any finite float32 row.
pub fn norm_f64(row: &[f32]) -> f64 {
    row.iter().map(|&x| x as f64 * x as f64).sum::<f64>().sqrt()
}

/// [`l2_normalize`] for vectors that leave the device (inference): the same values where the
/// squares fit float32; where a row's do not (values above 1.8e19, which made it all zeros),
/// the row is first divided by its largest magnitude, which leaves its direction as it is.
/// Not differentiable: the norms are read on the host.
pub fn l2_normalize_exact(x: &Tensor) -> Result<Tensor> {
    let x32 = if x.dtype() == DType::F32 { x.clone() } else { x.to_dtype(DType::F32)? };
    let norm = x32.sqr()?.sum_keepdim(D::Minus1)?.sqrt()?;
    let x32 = if norm.flatten_all()?.to_vec1::<f32>()?.iter().all(|n| n.is_finite()) {
        x32.broadcast_div(&norm.clamp(1e-12, f64::INFINITY)?)?
    } else {
        let scaled = x32.broadcast_div(&x32.abs()?.max_keepdim(D::Minus1)?.clamp(f32::MIN_POSITIVE, f64::INFINITY)?)?;
        let norm = scaled.sqr()?.sum_keepdim(D::Minus1)?.sqrt()?.clamp(1e-12, f64::INFINITY)?;
        scaled.broadcast_div(&norm)?
    };
    Ok(x32.to_dtype(x.dtype())?)
}

/// Row-wise `x / max(‖x‖₂, 1e-12)` (as `torch.nn.functional.normalize`). Differentiable.
pub fn l2_normalize(x: &Tensor) -> Result<Tensor> {
    let x32 = if x.dtype() == DType::F32 { x.clone() } else { x.to_dtype(DType::F32)? };
    let norm = x32.sqr()?.sum_keepdim(D::Minus1)?.sqrt()?.clamp(1e-12, f64::INFINITY)?;
    Ok(x32.broadcast_div(&norm)?.to_dtype(x.dtype())?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rows whose squares overflow float32 are normalised to their direction, not to zeros; other
    /// rows give l2_normalize's values exactly.
    #[test]
    fn huge_rows_keep_their_direction() {
        let rows = vec![3e30f32, -4e30, 0.0, 0.6, 0.8, 0.0, 0.0, 0.0, 0.0];
        let x = Tensor::from_vec(rows.clone(), (3, 3), &candle_core::Device::Cpu).unwrap();
        let got = l2_normalize_exact(&x).unwrap().to_vec2::<f32>().unwrap();
        let near = |a: &[f32], b: [f32; 3]| a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-6);
        assert!(near(&got[0], [0.6, -0.8, 0.0]), "{:?}", got[0]);
        let plain = l2_normalize(&x).unwrap().to_vec2::<f32>().unwrap();
        assert_eq!(plain[0], [0.0, -0.0, 0.0], "the overflow this mends");
        assert_eq!(got[1..], plain[1..]);
        let mut row = rows[..3].to_vec();
        l2_normalize_row(&mut row);
        assert!(near(&row, [0.6, -0.8, 0.0]), "{row:?}");
    }

    #[test]
    fn st_pooling_configs() {
        let dir = tempfile::tempdir().unwrap();
        let read = |json: &str| {
            let p = dir.path().join("config.json");
            std::fs::write(&p, json).unwrap();
            Pooling::from_st_config(&p, 8).map_err(|e| format!("{e:#}"))
        };
        assert_eq!(
            read(r#"{"word_embedding_dimension": 8, "pooling_mode_cls_token": true}"#).unwrap(),
            (Pooling::Cls, true)
        );
        assert_eq!(
            read(r#"{"pooling_mode_mean_tokens": true, "include_prompt": false}"#).unwrap(),
            (Pooling::Mean, false)
        );
        assert_eq!(read(r#"{"pooling_mode": "max"}"#).unwrap(), (Pooling::Max, true));
        assert!(read(r#"{"word_embedding_dimension": 9, "pooling_mode_mean_tokens": true}"#)
            .unwrap_err()
            .contains("hidden_size is 8"));
        // sentence-transformers concatenates every mode set: one that xsent cannot run, alone
        // or beside another, is refused, never dropped.
        for extra in [
            "pooling_mode_weightedmean_tokens",
            "pooling_mode_lasttoken",
            "pooling_mode_mean_sqrt_len_tokens",
            "pooling_mode_max_tokens",
        ] {
            let e = read(&format!(r#"{{"pooling_mode_mean_tokens": true, "{extra}": true}}"#)).unwrap_err();
            assert!(e.contains("exactly one of cls, mean or max"), "{extra}: {e}");
        }
        assert!(read(r#"{"pooling_mode": "lasttoken"}"#).unwrap_err().contains("not supported"));
    }
}
