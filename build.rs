//! With `--features cuda`: xsent's own CUDA kernels (src/gpu/*.cu) compiled to PTX by nvcc
//! (`NVCC`, else `nvcc` on PATH; scripts/build-cuda.sh provides one), for
//! `compute_$CUDA_COMPUTE_CAP` (default 75, which a newer GPU's driver compiles for itself at
//! load). Without the feature nothing is built.
// Cargo reads a build script's standard output (its directives): println! is the protocol here.
#![allow(clippy::disallowed_macros)]

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-env-changed=CARGO_FEATURE_CUDA");
    git_commit();
    if std::env::var_os("CARGO_FEATURE_CUDA").is_none() {
        return;
    }
    println!("cargo::rerun-if-changed=src/gpu");
    println!("cargo::rerun-if-env-changed=NVCC");
    println!("cargo::rerun-if-env-changed=CUDA_COMPUTE_CAP");
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let nvcc = std::env::var("NVCC").unwrap_or_else(|_| "nvcc".into());
    let cap = std::env::var("CUDA_COMPUTE_CAP").ok().filter(|c| !c.trim().is_empty()).unwrap_or_else(|| "75".into());
    let cap = cap.trim().trim_start_matches("sm_").trim_start_matches("compute_").to_string();
    for name in ["adamw", "dropout", "gelu", "heads", "layer_norm", "linear", "softmax"] {
        let src = format!("src/gpu/{name}.cu");
        let ptx = out.join(format!("{name}.ptx"));
        // -fmad=false: no fused multiply-adds, so the kernels round as the CPU code does.
        let status = Command::new(&nvcc)
            .args(["--ptx", "-O3", "-fmad=false", "-std=c++17", &format!("-arch=compute_{cap}"), "-o"])
            .arg(&ptx)
            .arg(&src)
            .status()
            .unwrap_or_else(|e| panic!("cannot run {nvcc} to compile {src} ({e}): --features cuda needs the CUDA toolkit; scripts/build-cuda.sh fetches one"));
        assert!(status.success(), "{nvcc} failed on {src}");
    }
}

/// `XSENT_GIT_COMMIT`: the commit xsent is built from (for the model cards `xsent quantize`
/// writes), rebuilt when HEAD moves; nothing when git or the repository is missing.
fn git_commit() {
    let git = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let Some(commit) = git(&["rev-parse", "HEAD"]) else { return };
    println!("cargo::rustc-env=XSENT_GIT_COMMIT={commit}");
    if let Some(head) = git(&["rev-parse", "--git-path", "HEAD"]) {
        println!("cargo::rerun-if-changed={head}");
    }
    if let Some(r) = git(&["symbolic-ref", "-q", "HEAD"]) {
        if let Some(p) = git(&["rev-parse", "--git-path", &r]) {
            println!("cargo::rerun-if-changed={p}");
        }
    }
}
