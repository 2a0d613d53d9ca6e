//! Where a model's files come from: a local directory, a model installed in the models folder,
//! or a hub id (`org/name[@revision]`, resolved in [`super::hub`]). What a model directory must
//! hold is checked in [`super::files`].

use super::files::{resolve_dir, ModelFiles};
use super::hub::{hub_cache_dir, hub_offline, resolve_hub};
use anyhow::{bail, Result};
use std::path::{Path, PathBuf};

/// Resolve `--model`: an existing directory, else a hub id.
pub fn resolve(spec: &str) -> Result<ModelFiles> {
    let path = Path::new(spec);
    if path.is_dir() {
        return resolve_dir(path, spec);
    }
    if path.is_file() {
        let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
        bail!("model {spec:?} is a file: give the model's directory (--model {})", dir.display());
    }
    if let Ok(m) = std::fs::symlink_metadata(path) {
        // Something is there that is neither a folder nor a file (through links).
        use std::os::unix::fs::FileTypeExt;
        let what = match std::fs::metadata(path).map(|m| m.file_type()) {
            Ok(t) if t.is_fifo() => "a FIFO".to_string(),
            Ok(t) if t.is_char_device() || t.is_block_device() => "a device".to_string(),
            Ok(t) if t.is_socket() => "a socket".to_string(),
            Ok(_) => "not a folder".to_string(),
            Err(_) if m.file_type().is_symlink() => match std::fs::read_link(path) {
                Ok(to) => format!("a symbolic link to {}, which does not exist (or loops)", to.display()),
                Err(_) => "a symbolic link that leads nowhere".to_string(),
            },
            Err(e) => format!("unreadable ({e})"),
        };
        bail!("model {spec:?} is {what}: give a model directory (with config.json, the weights and the tokenizer)");
    }
    if spec.ends_with('@') {
        bail!("model {spec:?}: the revision after @ is empty (org/name@REVISION, e.g. @main)");
    }
    // Nothing is at `spec` where xsent runs (looked at above), so a bare name is looked up in
    // the models folder without a second look.
    if let Some(dir) = in_models_folder(spec) {
        return resolve_dir(&dir, spec);
    }
    let installed = crate::places::models_dir();
    let first = spec.split('/').next().unwrap_or("");
    if looks_like_hub_id(spec) && Path::new(first).is_dir() {
        let rest = &spec[first.len() + 1..];
        let cwd = std::env::current_dir()
            .map(|d| d.join(first).display().to_string())
            .unwrap_or_else(|_| format!("./{first}"));
        bail!(
            "model {spec:?} not found: {cwd} exists as a local directory but has no subdirectory {rest:?}, \
             so {spec:?} was taken as a local path, not as a hub id.\n\
             To load the hub model {spec}, rename or remove the local folder {first:?}, or run xsent from another directory \
             (--model is relative to the directory xsent runs in)."
        );
    }
    if looks_like_hub_id(spec) {
        return hub_cache_dir().and_then(|cache| resolve_hub(spec, &cache, hub_offline())).map_err(|e| {
            let cwd = std::env::current_dir().map(|d| d.display().to_string()).unwrap_or_else(|_| "?".into());
            e.context(format!(
                "model {spec:?}: there is no such directory under {cwd}, so it was looked up as a hub id (--model is relative to the directory xsent runs in)"
            ))
        });
    }
    let names = installed_models(&installed);
    let names = if names.is_empty() { "none yet".to_string() } else { names.join(", ") };
    bail!(
        "model {spec:?} not found: it is not a directory, nor a hub id of the form org/name, nor a model installed in {} ({names}).\n\
         The bundled models are made there by scripts/setup.sh (without --model, xsent uses {}).",
        installed.display(),
        crate::places::DEFAULT_MODEL
    )
}

/// The folder in the models folder that `spec` names, when it is a bare name (`--model
/// all-MiniLM-L6-v2`, as sentence-transformers takes it) and nothing of that name is where xsent
/// runs (a local directory comes first).
fn installed_model(spec: &str) -> Option<PathBuf> {
    std::fs::symlink_metadata(spec).is_err().then(|| in_models_folder(spec)).flatten()
}

/// The folder of the models folder that `spec` names when it is a bare name, whatever is
/// where xsent runs: [`installed_model`] for callers that have not looked there yet.
fn in_models_folder(spec: &str) -> Option<PathBuf> {
    let dir = crate::places::models_dir().join(spec);
    (is_bare_name(spec) && dir.is_dir()).then_some(dir)
}

/// The local directory `spec` names: itself, or a model in the models folder
/// ([`installed_model`]); `spec` as a path otherwise (a hub id, or nothing).
pub fn local_dir(spec: &str) -> PathBuf {
    installed_model(spec).unwrap_or_else(|| PathBuf::from(spec))
}

/// Whether `spec` could name a folder in the models folder: one path component, not `.` or `..`.
fn is_bare_name(spec: &str) -> bool {
    !spec.is_empty() && !spec.contains(['/', '\\', '@']) && spec != "." && spec != ".."
}

/// The models installed in `dir` (folders with a `config.json`, an `xsent.json`, or a
/// `modules.json` for a Transformer module in a subfolder), sorted.
fn installed_models(dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok())
        .filter(|e| ["config.json", "xsent.json", "modules.json"].iter().any(|f| e.path().join(f).is_file()))
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    names.sort();
    names
}

/// Whether `spec` has the form of a hub id, `org/name[@revision]`.
pub fn looks_like_hub_id(spec: &str) -> bool {
    let id = spec.split('@').next().unwrap_or("");
    let parts: Vec<&str> = id.split('/').collect();
    parts.len() == 2
        && parts.iter().all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)))
        && !spec.starts_with('.')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hub_ids() {
        assert!(looks_like_hub_id("intfloat/multilingual-e5-small"));
        assert!(looks_like_hub_id("org/name@v1.0"));
        assert!(!looks_like_hub_id("models/a/b"));
        assert!(!looks_like_hub_id("./models"));
        assert!(!looks_like_hub_id("name"));
    }
}
