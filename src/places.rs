//! The standard places: xsent's cache, its models and the benchmark data, each set by an
//! environment variable or found in its default place.
//!
//! | place | variable | default |
//! |---|---|---|
//! | cache | `XSENT_CACHE` | `~/.cache/xsent` |
//! | models | `XSENT_MODELS` | `<cache>/models` (where `scripts/setup.sh` installs them), else `models/` of the checkout xsent was built from |
//! | data | `XSENT_DATA` | `<cache>/data` (where `xsent data fetch` writes), else `../shared/data` beside the checkout xsent was built from |
//!
//! Training configs name these places as `${XSENT_MODELS}`, `${XSENT_DATA}` and `${XSENT_CACHE}`
//! ([`expand`]).

use anyhow::{bail, Result};
use std::path::{Path, PathBuf};

/// The model that `embed`, `eval`, `mine` and `plot` use without `--model`: its folder name
/// under [`models_dir`].
pub const DEFAULT_MODEL: &str = "multilingual-e5-small";

/// An environment variable's value, unless unset or empty.
fn var(name: &str) -> Option<PathBuf> {
    std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from)
}

/// The home directory (`HOME`), else the current directory.
fn home() -> PathBuf {
    var("HOME").unwrap_or_else(|| PathBuf::from("."))
}

/// xsent's cache directory: `XSENT_CACHE`, else `~/.cache/xsent`.
pub fn cache_dir() -> PathBuf {
    var("XSENT_CACHE").unwrap_or_else(|| home().join(".cache/xsent"))
}

/// Where the models live: `XSENT_MODELS`; else `<cache>/models` when it exists; else the
/// `models/` folder of the checkout xsent was built from, when it exists (an older setup made
/// the models there); else `<cache>/models`.
pub fn models_dir() -> PathBuf {
    if let Some(p) = var("XSENT_MODELS") {
        return p;
    }
    let cache = cache_dir().join("models");
    if cache.is_dir() {
        return cache;
    }
    let checkout = Path::new(env!("CARGO_MANIFEST_DIR")).join("models");
    if checkout.is_dir() {
        return checkout;
    }
    cache
}

/// The default model's directory, checked to hold a model: its path, or an error that says
/// how to install it.
pub fn default_model() -> Result<PathBuf> {
    let dir = models_dir().join(DEFAULT_MODEL);
    if dir.join("config.json").is_file() {
        return Ok(dir);
    }
    let from = if var("XSENT_MODELS").is_some() {
        "XSENT_MODELS"
    } else {
        "the default models folder; set XSENT_MODELS for another"
    };
    bail!(
        "no --model given, and the default model {DEFAULT_MODEL} is not installed in {} ({from}).\n\
         Install it with scripts/setup.sh (in an xsent checkout: it builds xsent and converts the model into {}), \
         or give --model a model directory or a hub id",
        dir.display(),
        models_dir().display()
    )
}

/// Where `xsent data fetch` writes: `XSENT_DATA`, else `<cache>/data`.
pub fn data_home() -> PathBuf {
    var("XSENT_DATA").unwrap_or_else(|| cache_dir().join("data"))
}

/// `../shared/data` beside the checkout this binary was built from, if it exists.
fn checkout_data() -> Option<PathBuf> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/data");
    p.is_dir().then(|| p.canonicalize().unwrap_or(p))
}

/// The benchmark data directory read without `--data-dir`, and what named it: `XSENT_DATA`
/// when set; else `<cache>/data` when it exists; else `../shared/data` beside the checkout
/// xsent was built from, when it exists; else `<cache>/data` (which does not exist).
pub fn data_dir() -> (PathBuf, &'static str) {
    if let Some(p) = var("XSENT_DATA") {
        return (p, "XSENT_DATA");
    }
    let home = data_home();
    if home.is_dir() {
        return (home, "the default data folder");
    }
    match checkout_data() {
        Some(p) => (p, "the checkout's ../shared/data"),
        None => (home, "the default data folder"),
    }
}

/// Expand `${NAME}` and a leading `~/` in a path written in a config. `XSENT_DATA`,
/// `XSENT_MODELS` and `XSENT_CACHE` have their defaults when unset ([`data_dir`],
/// [`models_dir`], [`cache_dir`]); any other variable must be set.
pub fn expand(value: &str) -> Result<String> {
    expand_with(value, &|name| match name {
        "XSENT_DATA" => Some(data_dir().0),
        "XSENT_MODELS" => Some(models_dir()),
        "XSENT_CACHE" => Some(cache_dir()),
        _ => var(name),
    })
}

/// [`expand`] with the variables `lookup` gives (`HOME` among them, for `~/`).
fn expand_with(value: &str, lookup: &dyn Fn(&str) -> Option<PathBuf>) -> Result<String> {
    if let Some(r) = value.strip_prefix("~/") {
        let Some(home) = lookup("HOME") else {
            bail!("{value:?}: ~ stands for the home directory, but HOME is not set")
        };
        return Ok(home.join(r).display().to_string());
    }
    let mut out = String::new();
    let mut rest = value;
    while let Some(at) = rest.find("${") {
        out.push_str(&rest[..at]);
        let Some(end) = rest[at..].find('}') else {
            bail!("{value:?}: \"${{\" without its closing \"}}\" (write ${{XSENT_DATA}}/…)")
        };
        let name = &rest[at + 2..at + end];
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            bail!("{value:?}: ${{{name}}} is not a variable name (the standard ones are ${{XSENT_DATA}}, ${{XSENT_MODELS}} and ${{XSENT_CACHE}})");
        }
        let Some(path) = lookup(name) else { bail!("{value:?}: the environment variable {name} is not set") };
        out.push_str(&path.display().to_string());
        rest = &rest[at + end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variables_expand_and_unknown_ones_are_errors() {
        let lookup = |name: &str| match name {
            "XSENT_DATA" => Some(PathBuf::from("/data")),
            "HOME" => Some(PathBuf::from("/home/u")),
            _ => None,
        };
        let ex = |v: &str| expand_with(v, &lookup).map_err(|e| e.to_string());
        assert_eq!(ex("${XSENT_DATA}/x.gz").unwrap(), "/data/x.gz");
        assert_eq!(ex("a/${XSENT_DATA}/b${XSENT_DATA}").unwrap(), "a//data/b/data");
        assert_eq!(ex("plain/path").unwrap(), "plain/path");
        assert_eq!(ex("~/d").unwrap(), "/home/u/d");
        assert!(ex("${XSENT_MODELS}/m").unwrap_err().contains("XSENT_MODELS is not set"));
        assert!(ex("${XSENT_DATA/x").unwrap_err().contains("without its closing"));
        assert!(ex("${a b}/x").unwrap_err().contains("is not a variable name"));
        assert!(ex("${}/x").unwrap_err().contains("is not a variable name"));
        // The standard places always expand, to their defaults when unset.
        assert_eq!(expand("${XSENT_MODELS}/m").unwrap(), models_dir().join("m").display().to_string());
        assert_eq!(expand("${XSENT_CACHE}").unwrap(), cache_dir().display().to_string());
    }
}
