//! Reading a config: from a file, a built-in config or a run directory, with `--unset` and
//! `--set` applied and every path made absolute.

use super::{other_recipes_section, Config, ConfigFile, PathKind, RecipeConfig};
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};

/// Where a config's text comes from, which decides what its relative paths are relative to
/// ([`Config::paths_mut`] lists them). Paths given by `--set` are relative to the current
/// directory.
#[derive(Clone, Copy)]
pub enum ConfigFrom<'a> {
    /// A file: relative paths in it are relative to its folder.
    File(&'a Path),
    /// A config of `configs/` compiled into xsent: it names places by variables, and a relative
    /// path in it is relative to the current directory.
    BuiltIn(&'static super::super::builtin::BuiltIn),
    /// A run directory's `config.toml`: written with absolute paths; a relative one (written by
    /// an older xsent) is relative to the current directory, as it was then.
    Run(&'a Path),
}

impl ConfigFrom<'_> {
    /// The config as messages name it: its path, or `built-in config NAME`.
    pub fn name(&self) -> String {
        match self {
            Self::File(p) | Self::Run(p) => p.display().to_string(),
            Self::BuiltIn(b) => format!("built-in config {}", b.name),
        }
    }

    fn text(&self) -> Result<String> {
        match self {
            Self::File(p) | Self::Run(p) => {
                std::fs::read_to_string(p).with_context(|| format!("cannot read config {}", p.display()))
            }
            Self::BuiltIn(b) => Ok(b.text.to_string()),
        }
    }

    /// The folder relative paths of the config are relative to.
    fn base(&self) -> Result<PathBuf> {
        let cwd = std::env::current_dir().context("cannot read the current directory")?;
        Ok(match self {
            Self::File(p) => cwd.join(p.parent().unwrap_or(Path::new(""))),
            Self::BuiltIn(_) | Self::Run(_) => cwd,
        })
    }
}

/// Read a config file and apply `--set key=value` overrides.
pub fn load(path: &Path, sets: &[String]) -> Result<Config> {
    load_with(path, &[], sets, false)
}

/// Read a config file, remove the `--unset` keys (their defaults apply), then apply the `--set`
/// overrides. A key to remove that the file does not set is an error, unless `missing_ok`
/// (a file compared with a run's saved config, which writes out every default).
pub fn load_with(path: &Path, unsets: &[String], sets: &[String], missing_ok: bool) -> Result<Config> {
    load_from(ConfigFrom::File(path), unsets, sets, missing_ok)
}

/// [`load_with`] for a config from anywhere: its paths made absolute ([`ConfigFrom`]) with
/// `${XSENT_DATA}`-style variables expanded ([`crate::places::expand`]).
pub fn load_from(from: ConfigFrom, unsets: &[String], sets: &[String], missing_ok: bool) -> Result<Config> {
    let name = from.name();
    let text = from.text()?;
    let mut value: toml::Value = toml::from_str(&text).with_context(|| format!("{name} is not valid TOML"))?;
    for k in unsets {
        apply_unset(&mut value, k, missing_ok).with_context(|| format!("in config {name}"))?;
    }
    for s in sets {
        apply_set(&mut value, s)?;
    }
    // Before the sections' own fields are read: a half-filled section of another recipe (made
    // by `--set distill.teacher=…` on an sp config) is named as such, not as a missing field.
    let names = RecipeConfig::NAMES;
    if let Some(recipe) = value.get("recipe").and_then(toml::Value::as_str).filter(|r| names.contains(r)) {
        if let Some(name) = names.iter().find(|n| **n != recipe && value.get(**n).is_some()) {
            return Err(other_recipes_section(name, recipe));
        }
    }
    check_sources(&value)?;
    let file: ConfigFile = if sets.is_empty() && unsets.is_empty() {
        // Straight from the text, so that the error shows the line and column.
        toml::from_str(&text).map_err(|e| anyhow::anyhow!("invalid config {name}: {}", e.to_string().trim_end()))?
    } else {
        value.try_into().map_err(|e: toml::de::Error| {
            let changes: Vec<String> = unsets
                .iter()
                .map(|k| format!("--unset {k}"))
                .chain(sets.iter().map(|s| format!("--set {s}")))
                .collect();
            anyhow::anyhow!("invalid config {name} after {}: {}", changes.join(" "), e.to_string().trim_end())
        })?
    };
    let mut cfg = Config::try_from(file)?;
    cfg.validate()?;
    let base = from.base()?;
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    let set_keys: Vec<&str> = sets.iter().filter_map(|s| s.split_once('=')).map(|(k, _)| k.trim()).collect();
    for mut f in cfg.paths_mut() {
        let by_set = set_keys.iter().any(|k| f.key == *k || f.key.strip_prefix(k).is_some_and(|r| r.starts_with('.')));
        let (base, said) = if by_set { (cwd.as_path(), "--set") } else { (base.as_path(), "config") };
        let v = resolve_path(&f.get(), f.kind, base, &cwd)
            .with_context(|| format!("{name}: {} = {:?} ({said})", f.key, f.get()))?;
        f.set(v);
    }
    Ok(cfg)
}

/// Every data source of the config read on its own, so that a source's error names its list
/// and entry (`data.sources[0]: kind = "tsv" needs `path``).
fn check_sources(value: &toml::Value) -> Result<()> {
    for key in ["data.sources", "data.val_sources", "distill.projection_fit_sources", "dueam.val_sources"] {
        let (section, list) = key.split_once('.').expect("a dotted key");
        let Some(entries) = value.get(section).and_then(|t| t.get(list)).and_then(toml::Value::as_array) else {
            continue;
        };
        for (i, entry) in entries.iter().enumerate() {
            entry
                .clone()
                .try_into::<crate::data::bitext::Source>()
                .map_err(|e| anyhow::anyhow!("{}", e.to_string().trim_end()))
                .with_context(|| format!("{key}[{i}]"))?;
        }
    }
    Ok(())
}

/// A path of a config made absolute: variables expanded, then a relative path joined to `base`
/// (a model path that is no directory there but has the form `org/name` stays a hub id). A
/// relative path that exists only relative to `cwd` is refused with a hint: older xsent read
/// config paths relative to the current directory.
fn resolve_path(value: &str, kind: PathKind, base: &Path, cwd: &Path) -> Result<String> {
    let expanded = crate::places::expand(value)?;
    let p = Path::new(&expanded);
    if p.is_absolute() {
        return Ok(expanded);
    }
    let rel = p.strip_prefix(".").unwrap_or(p);
    let joined = base.join(rel);
    if kind == PathKind::Model && !joined.is_dir() && crate::model::source::looks_like_hub_id(&expanded) {
        if base != cwd && cwd.join(rel).is_dir() {
            bail!(
                "no model directory {} (paths in a config are relative to its folder), but {} is one; \
                 write \"${{XSENT_MODELS}}/NAME\" for a model that scripts/setup.sh installed, a path relative to the config's folder, \
                 or an absolute path (older xsent read config paths relative to the current directory)",
                joined.display(),
                cwd.join(rel).display()
            );
        }
        return Ok(expanded);
    }
    if base != cwd && !joined.exists() && cwd.join(rel).exists() {
        bail!(
            "{} does not exist (paths in a config are relative to its folder), but {} does; \
             write \"${{XSENT_DATA}}/…\" for the benchmark data, a path relative to the config's folder, \
             or an absolute path (older xsent read config paths relative to the current directory)",
            joined.display(),
            cwd.join(rel).display()
        );
    }
    Ok(joined.display().to_string())
}

/// `a.b.c=value`: the value is TOML (`20`, `2e-5`, `true`, `"text"`, `["de", "fr"]`); anything
/// that does not parse as TOML is taken as a string. Array elements are addressed by index.
pub fn apply_set(root: &mut toml::Value, set: &str) -> Result<()> {
    let Some((key, raw)) = set.split_once('=') else {
        bail!("--set {set:?}: expected key=value, e.g. --set train.max_steps=20")
    };
    let key = key.trim();
    let parsed: toml::Value = match toml::from_str::<toml::Table>(&format!("v = {raw}")) {
        // More than one key: the value held a line break and a second `key = value`.
        Ok(t) if t.len() != 1 => {
            bail!(
                "--set {key}: the value {raw:?} is not one TOML value (it holds a line break); give one --set per key"
            )
        }
        Ok(mut t) => t.remove("v").expect("the key just written"),
        // A number TOML does not read (`.5`, `1.`, an integer beyond i64) would become a string
        // and be refused later as one, with no word about why.
        Err(_) if looks_numeric(raw) => bail!(
            "--set {key}={raw}: not a number TOML reads: a decimal point needs a digit on both sides (0.5, 1.0), \
             there are no leading zeros (7, not 007), integers go up to 9223372036854775807 and other numbers to \
             about 1.8e308; text is quoted: --set '{key}=\"{raw}\"'"
        ),
        Err(_) => toml::Value::String(raw.to_string()),
    };
    let parts: Vec<&str> = key.split('.').collect();
    if parts.iter().any(|p| p.is_empty()) {
        bail!("--set {set:?}: empty key part in {key:?}");
    }
    let mut cur = root;
    for (i, part) in parts.iter().enumerate() {
        let last = i + 1 == parts.len();
        cur = match cur {
            toml::Value::Table(t) => {
                if last {
                    // `--set train={max_steps=5}` would drop every other key of [train].
                    if parsed.is_table() && t.get(*part).is_some_and(toml::Value::is_table) {
                        let first = parsed.as_table().and_then(|p| p.keys().next().cloned()).unwrap_or("KEY".into());
                        bail!(
                            "--set {key}={raw}: {key} is a section of the config, and this would replace all of it; \
                             set its keys one by one (--set {key}.{first}=…)"
                        );
                    }
                    t.insert(part.to_string(), parsed);
                    return Ok(());
                }
                t.entry(part.to_string()).or_insert_with(|| toml::Value::Table(toml::Table::new()))
            }
            toml::Value::Array(a) => {
                let idx: usize = part
                    .parse()
                    .map_err(|_| anyhow::anyhow!("--set {key}: {part:?} indexes a list and must be a number"))?;
                let len = a.len();
                let slot = a
                    .get_mut(idx)
                    .ok_or_else(|| anyhow::anyhow!("--set {key}: index {idx} but the list has {len} entries"))?;
                if last {
                    *slot = parsed;
                    return Ok(());
                }
                slot
            }
            _ => bail!("--set {key}: {} is not a table", parts[..i].join(".")),
        };
    }
    unreachable!("the loop returns at the last key part")
}

/// Digits with a sign, point or exponent that Rust reads as a number (`.5`, `1.`, `1e400`), not
/// a word such as `nan` or `Inf`.
fn looks_numeric(raw: &str) -> bool {
    let raw = raw.trim();
    raw.bytes().any(|b| b.is_ascii_digit())
        && raw.bytes().all(|b| b.is_ascii_digit() || b"+-.eE".contains(&b))
        && raw.parse::<f64>().is_ok()
}

/// `a.b.c`: remove the key, so that its default applies (an optional setting such as
/// `train.val_sts` is then off). A key the config does not set is an error (a typo would
/// otherwise change nothing), unless `missing_ok`. Entries of a list are not removed one by one:
/// `--set` the list.
pub fn apply_unset(root: &mut toml::Value, key: &str, missing_ok: bool) -> Result<()> {
    let key = key.trim();
    if key.contains('=') {
        bail!("--unset {key}: --unset takes a key alone (e.g. --unset train.val_sts); to give a value use --set KEY=VALUE");
    }
    let parts: Vec<&str> = key.split('.').collect();
    if parts.iter().any(|p| p.is_empty()) {
        bail!("--unset {key}: empty key part");
    }
    let (last, path) = parts.split_last().expect("split gives at least one part");
    let mut cur = root;
    for (i, part) in path.iter().enumerate() {
        let here = parts[..=i].join(".");
        cur = match cur {
            toml::Value::Table(t) => match t.get_mut(*part) {
                Some(v) => v,
                None if missing_ok => return Ok(()),
                None => bail!("--unset {key}: the config does not set {here} (nothing to remove)"),
            },
            toml::Value::Array(a) => {
                let len = a.len();
                let idx: usize = part
                    .parse()
                    .map_err(|_| anyhow::anyhow!("--unset {key}: {part:?} indexes a list and must be a number"))?;
                match a.get_mut(idx) {
                    Some(v) => v,
                    None if missing_ok => return Ok(()),
                    None => bail!("--unset {key}: index {idx} but the list has {len} entries"),
                }
            }
            _ => bail!("--unset {key}: {} is a value, not a table", parts[..i].join(".")),
        };
    }
    match cur {
        toml::Value::Table(t) => {
            if t.remove(*last).is_none() && !missing_ok {
                bail!("--unset {key}: the config does not set {key} (nothing to remove)");
            }
            Ok(())
        }
        toml::Value::Array(_) => bail!(
            "--unset {key}: {} is a list, whose entries are not removed one by one; give the whole list with --set {}=[...]",
            path.join("."),
            path.join(".")
        ),
        _ => bail!("--unset {key}: {} is a value, not a table", path.join(".")),
    }
}

/// The config `--config ARG` names: the file ARG when it exists, else the built-in config of
/// that name (`dueam` or `dueam.toml`), saying on stderr which one is used.
pub fn find(arg: &Path) -> Result<ConfigFrom<'_>> {
    let builtin = arg.to_str().and_then(super::super::builtin::find);
    if arg.is_file() {
        if builtin.is_some() {
            errln!(
                "{}: config {} (the file; the built-in config of that name is not used)",
                crate::log::command(),
                arg.display()
            );
        }
        return Ok(ConfigFrom::File(arg));
    }
    if arg.exists() {
        bail!(
            "--config {} is not a file: give a config file, or the name of a built-in config ({})",
            arg.display(),
            super::super::builtin::names()
        );
    }
    match builtin {
        Some(b) => {
            errln!("{}: config {} (built in; no file {} here; `xsent config show {}` prints it)", crate::log::command(), b.name, arg.display(), b.name);
            Ok(ConfigFrom::BuiltIn(b))
        }
        None => bail!(
            "--config {}: no such file, and no built-in config of that name; the built-in ones are {} (`xsent config list`)",
            arg.display(),
            super::super::builtin::names()
        ),
    }
}
