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
    // The build script reruns on any change under src/ (for the commit's "+dirty" below), so the
    // kernels are compiled again only when a file of src/gpu (a kernel or a header they include),
    // nvcc (its path or version) or the target changed since their PTX.
    let args = |ptx: &PathBuf, src: &str| -> Vec<String> {
        vec![
            "--ptx".into(),
            "-O3".into(),
            "-fmad=false".into(),
            "-std=c++17".into(),
            format!("-arch=compute_{cap}"),
            "-o".into(),
            ptx.display().to_string(),
            src.into(),
        ]
    };
    let version = Command::new(&nvcc)
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    let modified = |p: &std::path::Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let newest_source =
        std::fs::read_dir("src/gpu").map(|d| d.flatten().filter_map(|e| modified(&e.path())).max()).ok().flatten();
    for name in ["adamw", "dropout", "gelu", "heads", "layer_norm", "linear", "softmax"] {
        let src = format!("src/gpu/{name}.cu");
        let ptx = out.join(format!("{name}.ptx"));
        let stamp = out.join(format!("{name}.ptx.args"));
        let line = format!("{version}\n{nvcc} {}", args(&ptx, &src).join(" "));
        let current = std::fs::read_to_string(&stamp).is_ok_and(|s| s == line)
            && matches!((modified(&ptx), newest_source), (Some(p), Some(s)) if p >= s);
        if current {
            continue;
        }
        // The stamp goes first: a compile that fails or is killed leaves none, so it runs again.
        let _ = std::fs::remove_file(&stamp);
        // -fmad=false: no fused multiply-adds, so the kernels round as the CPU code does.
        let status = Command::new(&nvcc)
            .args(args(&ptx, &src))
            .status()
            .unwrap_or_else(|e| panic!("cannot run {nvcc} to compile {src} ({e}): --features cuda needs the CUDA toolkit; scripts/build-cuda.sh fetches one"));
        assert!(status.success(), "{nvcc} failed on {src}");
        std::fs::write(&stamp, line).unwrap_or_else(|e| panic!("cannot write {} ({e})", stamp.display()));
    }
}

/// `XSENT_GIT_COMMIT`: the commit xsent is built from (for the model cards `xsent quantize`
/// writes and the reports `xsent eval` writes), with "+dirty" when tracked files differ from it
/// in what the binary is built from (src/, the files it includes from assets/ and configs/, the
/// patched candle in vendor/, build.rs, Cargo.toml, Cargo.lock); rebuilt when HEAD moves or one
/// of those changes; nothing when git or the repository is missing.
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
    // Tracked files only (an untracked file is compiled only when a tracked one names it), and
    // only those the binary is made of: an edited README does not make another binary.
    let built_from = ["src", "assets", "configs", "vendor", "build.rs", "Cargo.toml", "Cargo.lock"];
    let mut status = vec!["--no-optional-locks", "status", "--porcelain", "--untracked-files=no", "--"];
    status.extend(built_from);
    let dirty = git(&status).is_some_and(|s| !s.is_empty());
    println!("cargo::rustc-env=XSENT_GIT_COMMIT={commit}{}", if dirty { "+dirty" } else { "" });
    for path in built_from {
        println!("cargo::rerun-if-changed={path}");
    }
    if let Some(head) = git(&["rev-parse", "--git-path", "HEAD"]) {
        println!("cargo::rerun-if-changed={head}");
    }
    if let Some(r) = git(&["symbolic-ref", "-q", "HEAD"]) {
        if let Some(p) = git(&["rev-parse", "--git-path", &r]) {
            println!("cargo::rerun-if-changed={p}");
        }
    }
}
