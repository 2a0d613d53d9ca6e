//! The module graph of src/: no import from a lower layer to a higher one, and no cycle between
//! top-level or second-level modules, beyond the ones listed below (each a known debt: the
//! lists only shrink; an entry that no longer occurs fails the test until it is removed).
//!
//! It reads every `src/**/*.rs`, collects the `crate::…` and `super::…` paths each file names
//! (comments left out; test modules included), and maps them to modules.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The layers, highest first. A module may name modules of its own layer or lower ones.
const LAYERS: &[&[&str]] = &[
    &["main", "cli"],
    &["train"],
    &["eval", "plot"],
    &["index", "shard", "embed"],
    &["model", "gpu"],
    &["data", "profile"],
    &["io", "threads", "log", "places", "device", "whole_rows", "clock"],
];

/// Known upward imports (from, to) still to remove.
const KNOWN_UPWARD: &[(&str, &str)] = &[];

/// Known cycles (the modules of one strongly connected component, sorted) still to break.
const KNOWN_CYCLES: &[&[&str]] = &[];

fn layer(top: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&top))
}

/// The module path of a source file: `src/train/recipes/sp.rs` → `train::recipes::sp`.
fn module_of(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel.iter().map(|c| c.to_string_lossy().into_owned()).collect();
    let last = parts.pop().unwrap();
    let stem = last.trim_end_matches(".rs");
    if !matches!(stem, "mod" | "lib") {
        parts.push(stem.to_string());
    }
    parts
}

/// The text without `//` comments (doc comments included).
fn strip_comments(text: &str) -> String {
    text.lines().map(|l| l.split_once("//").map_or(l, |(code, _)| code)).collect::<Vec<_>>().join("\n")
}

/// Identifier chains after `prefix` (`crate::a::b`, and each path of `crate::{a::b, c}`).
fn paths_after(code: &str, prefix: &str) -> Vec<Vec<String>> {
    let ident = |s: &str| -> Vec<String> {
        // Segments up to the first one that does not end where the next `::` begins.
        let mut out = Vec::new();
        for piece in s.split("::") {
            let seg: String = piece.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            if seg.is_empty() {
                break;
            }
            let whole = seg.len() == piece.len();
            out.push(seg);
            if !whole {
                break;
            }
        }
        out
    };
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find(prefix) {
        let before = rest[..i].chars().last();
        rest = &rest[i + prefix.len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                let p = ident(item.trim());
                if !p.is_empty() {
                    out.push(p);
                }
            }
        } else {
            let p = ident(rest);
            if !p.is_empty() {
                out.push(p);
            }
        }
    }
    out
}

/// Edges (from module, to module path) of every file under src/.
fn edges() -> Vec<(Vec<String>, Vec<String>)> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    let mut stack = vec![src.clone()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                files.push(p);
            }
        }
    }
    assert!(files.len() > 50, "read {} files under {}", files.len(), src.display());
    let mut out = Vec::new();
    for f in files {
        let rel = f.strip_prefix(&src).unwrap();
        let module = module_of(rel);
        let code = strip_comments(&std::fs::read_to_string(&f).unwrap());
        for p in paths_after(&code, "crate::") {
            out.push((module.clone(), p));
        }
        // `super::x` names a sibling of the file's module (of its folder, for a mod.rs).
        let parent: Vec<String> = module[..module.len().saturating_sub(1)].to_vec();
        for p in paths_after(&code, "super::") {
            if p[0] == "super" {
                continue; // super::super: rare, and test modules' `use super::*`
            }
            let mut full = parent.clone();
            full.extend(p);
            out.push((module.clone(), full));
        }
    }
    out
}

/// The first `depth` segments of `path`, if they name modules of the crate (not root items
/// such as `crate::VERSION` or a re-export).
fn prefix(path: &[String], depth: usize, modules: &BTreeSet<Vec<String>>) -> Option<Vec<String>> {
    let p = path.get(..depth)?.to_vec();
    modules.contains(&p).then_some(p)
}

fn all_modules() -> BTreeSet<Vec<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut set = BTreeSet::new();
    let mut stack = vec![src.clone()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                set.insert(module_of(&p.strip_prefix(&src).unwrap().join("mod.rs")));
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                set.insert(module_of(p.strip_prefix(&src).unwrap()));
            }
        }
    }
    set
}

/// Strongly connected components with more than one node (Tarjan).
fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> BTreeSet<Vec<String>> {
    struct T<'a> {
        g: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        next: usize,
        out: BTreeSet<Vec<String>>,
    }
    impl<'a> T<'a> {
        fn visit(&mut self, v: &'a str) {
            self.index.insert(v, self.next);
            self.low.insert(v, self.next);
            self.next += 1;
            self.stack.push(v);
            self.on.insert(v);
            for w in self.g.get(v).into_iter().flatten() {
                let w = w.as_str();
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let l = self.low[v].min(self.low[w]);
                    self.low.insert(v, l);
                } else if self.on.contains(w) {
                    let l = self.low[v].min(self.index[w]);
                    self.low.insert(v, l);
                }
            }
            if self.low[v] == self.index[v] {
                let mut comp = Vec::new();
                loop {
                    let w = self.stack.pop().unwrap();
                    self.on.remove(w);
                    comp.push(w.to_string());
                    if w == v {
                        break;
                    }
                }
                if comp.len() > 1 {
                    comp.sort();
                    self.out.insert(comp);
                }
            }
        }
    }
    let mut t = T {
        g: graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        next: 0,
        out: BTreeSet::new(),
    };
    for v in graph.keys() {
        if !t.index.contains_key(v.as_str()) {
            t.visit(v);
        }
    }
    t.out
}

#[test]
fn every_top_level_module_has_a_layer() {
    for m in all_modules().iter().filter(|m| m.len() == 1) {
        assert!(layer(&m[0]).is_some(), "src/{}: add it to LAYERS in tests/architecture.rs", m[0]);
    }
}

#[test]
fn no_import_goes_up_a_layer() {
    let modules = all_modules();
    let mut found: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for (from, to) in edges() {
        let (Some(a), Some(b)) = (prefix(&from, 1, &modules), prefix(&to, 1, &modules)) else { continue };
        let (la, lb) = (layer(&a[0]).unwrap_or(usize::MAX), layer(&b[0]).unwrap_or(usize::MAX));
        if lb < la {
            found.entry((a[0].clone(), b[0].clone())).or_default().push(format!(
                "{} names crate::{}",
                from.join("::"),
                to.join("::")
            ));
        }
    }
    let known: BTreeSet<(String, String)> = KNOWN_UPWARD.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect();
    let new: Vec<String> = found
        .iter()
        .filter(|(k, _)| !known.contains(*k))
        .map(|((a, b), w)| format!("{a} -> {b}: {}", w.join("; ")))
        .collect();
    assert!(new.is_empty(), "imports from a lower layer to a higher one:\n  {}", new.join("\n  "));
    let gone: Vec<&(String, String)> = known.iter().filter(|k| !found.contains_key(*k)).collect();
    assert!(gone.is_empty(), "KNOWN_UPWARD lists {gone:?}, which no longer occurs: remove it");
}

#[test]
fn no_cycle_between_modules() {
    let modules = all_modules();
    let mut found = BTreeSet::new();
    for depth in [1, 2] {
        let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (from, to) in edges() {
            let (Some(a), Some(b)) = (prefix(&from, depth, &modules), prefix(&to, depth, &modules)) else { continue };
            // Second level: edges within one top-level module.
            if a != b && (depth == 1 || a[0] == b[0]) {
                graph.entry(a.join("::")).or_default().insert(b.join("::"));
            }
        }
        found.extend(cycles(&graph));
    }
    let known: BTreeSet<Vec<String>> = KNOWN_CYCLES.iter().map(|c| c.iter().map(|s| s.to_string()).collect()).collect();
    let new: Vec<&Vec<String>> = found.iter().filter(|c| !known.contains(*c)).collect();
    assert!(new.is_empty(), "import cycles: {new:?}");
    let gone: Vec<&Vec<String>> = known.iter().filter(|c| !found.contains(*c)).collect();
    assert!(gone.is_empty(), "KNOWN_CYCLES lists {gone:?}, which no longer occurs: remove it");
}
