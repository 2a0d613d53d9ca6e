//! Shared test helpers: where fixtures, models and data live.
#![allow(dead_code)]

use std::path::PathBuf;

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `XSENT_FIXTURES`, else `../shared/fixtures`.
pub fn fixtures() -> PathBuf {
    let p = std::env::var("XSENT_FIXTURES").map(PathBuf::from).unwrap_or_else(|_| repo().join("../shared/fixtures"));
    assert!(p.is_dir(), "fixtures not found at {} (set XSENT_FIXTURES)", p.display());
    p
}

/// A model made by scripts/setup.sh (`XSENT_MODELS`, else `models/`). Fails, never skips.
pub fn model(name: &str) -> PathBuf {
    let base = std::env::var("XSENT_MODELS").map(PathBuf::from).unwrap_or_else(|_| repo().join("models"));
    let p = base.join(name);
    assert!(
        p.join("model.safetensors").is_file(),
        "model {} is missing: run scripts/setup.sh first (it downloads the wheels and converts the models)",
        p.display()
    );
    p
}

/// `XSENT_DATA`, else `../shared/data`.
pub fn data() -> PathBuf {
    let p = std::env::var("XSENT_DATA").map(PathBuf::from).unwrap_or_else(|_| repo().join("../shared/data"));
    assert!(p.is_dir(), "data not found at {} (set XSENT_DATA)", p.display());
    p
}

pub fn xsent() -> std::process::Command {
    std::process::Command::new(env!("CARGO_BIN_EXE_xsent"))
}

pub fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| *x as f64 * *y as f64).sum();
    let na: f64 = a.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    dot / (na * nb)
}

pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "length mismatch");
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}
