//! No module of this crate imports one that imports it back (issue 14): reads the `crate::` and
//! `super::` paths of every source file (test modules and comments left out), resolves them to
//! the module that defines the item (through the `pub use` re-exports of a parent), and fails on
//! any cycle, naming it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Module path (`auth::step_up`, `` for the crate root) → file.
fn modules(src: &Path) -> BTreeMap<String, PathBuf> {
    let mut out = BTreeMap::new();
    let mut dirs = vec![src.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("a readable source dir") {
            let path = entry.expect("an entry").path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let rel = path
                .strip_prefix(src)
                .expect("under src")
                .with_extension("");
            let mut parts: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
                parts.pop();
            }
            out.insert(parts.join("::"), path);
        }
    }
    out
}

/// The file's code without its `#[cfg(test)] mod tests` and comment lines.
fn code(path: &Path) -> String {
    let text = std::fs::read_to_string(path).expect("a readable file");
    let lines: Vec<&str> = text.lines().collect();
    let mut out = String::new();
    for (i, line) in lines.iter().enumerate() {
        let next = lines.get(i + 1).map_or("", |l| l.trim_start());
        if line.trim() == "#[cfg(test)]" && next.starts_with("mod tests") {
            break;
        }
        if !line.trim_start().starts_with("//") {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// The paths after each `crate::` / `super::` in `code`, as segments.
fn paths(code: &str) -> Vec<(bool, Vec<String>)> {
    let mut out = Vec::new();
    for (start, base) in [("crate::", true), ("super::", false)] {
        let mut rest = code;
        while let Some(at) = rest.find(start) {
            let before = rest[..at].chars().next_back();
            rest = &rest[at + start.len()..];
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                continue;
            }
            let mut segs = Vec::new();
            let mut tail = rest;
            loop {
                let end = tail
                    .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                    .unwrap_or(tail.len());
                if end == 0 {
                    break;
                }
                segs.push(tail[..end].to_string());
                match tail[end..].strip_prefix("::") {
                    Some(t) => tail = t,
                    None => break,
                }
            }
            out.push((base, segs));
        }
    }
    out
}

/// `(module, name)` → the module `name` is re-exported from, from each file's `pub use`.
fn reexports(mods: &BTreeMap<String, PathBuf>) -> BTreeMap<(String, String), String> {
    let mut out = BTreeMap::new();
    for (module, path) in mods {
        let code = code(path);
        let mut rest = code.as_str();
        while let Some(at) = rest.find("pub use ") {
            rest = &rest[at + "pub use ".len()..];
            let end = rest.find(';').unwrap_or(rest.len());
            let item = rest[..end].replace(char::is_whitespace, "");
            let (base, names) = match item.split_once("::{") {
                Some((base, names)) => (base.to_string(), names.trim_end_matches('}').to_string()),
                None => match item.rsplit_once("::") {
                    Some((base, name)) => (base.to_string(), name.to_string()),
                    None => continue,
                },
            };
            let from = if module.is_empty() {
                base
            } else {
                format!("{module}::{base}")
            };
            for name in names.split(',').filter(|n| !n.is_empty()) {
                out.insert((module.clone(), name.to_string()), from.clone());
            }
        }
    }
    out
}

/// The module that defines what `segs` names.
fn resolve(
    segs: &[String],
    mods: &BTreeMap<String, PathBuf>,
    reexp: &BTreeMap<(String, String), String>,
) -> String {
    let mut module = String::new();
    let mut used = 0;
    for i in (1..=segs.len()).rev() {
        let candidate = segs[..i].join("::");
        if mods.contains_key(&candidate) {
            module = candidate;
            used = i;
            break;
        }
    }
    // Through re-exports: `crate::auth::StepUp` is `auth::step_up`'s.
    let mut guard = 0;
    while let Some(name) = segs.get(used)
        && let Some(from) = reexp.get(&(module.clone(), name.clone()))
        && guard < 8
    {
        guard += 1;
        module = from.clone();
        while !mods.contains_key(&module) && module.contains("::") {
            module = module
                .rsplit_once("::")
                .map(|(m, _)| m.to_string())
                .unwrap_or_default();
        }
        used += 1;
    }
    module
}

fn graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mods = modules(src);
    let reexp = reexports(&mods);
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, path) in &mods {
        // `super::` is the parent of the module, for `x.rs` and `x/mod.rs` alike.
        let parent: Vec<String> = module.split("::").map(str::to_string).collect();
        let parent = &parent[..parent.len().saturating_sub(1)];
        for (from_crate, segs) in paths(&code(path)) {
            let full: Vec<String> = if from_crate {
                segs
            } else {
                parent.iter().cloned().chain(segs).collect()
            };
            let target = resolve(&full, &mods, &reexp);
            // The root and a module's own ancestors only declare and re-export.
            if target.is_empty() || &target == module || module.starts_with(&format!("{target}::"))
            {
                continue;
            }
            edges.entry(module.clone()).or_default().insert(target);
        }
    }
    edges
}

/// A cycle through `start`, if there is one.
fn cycle_from(start: &str, edges: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    let mut stack = vec![(start.to_string(), vec![start.to_string()])];
    let mut seen = BTreeSet::new();
    while let Some((at, path)) = stack.pop() {
        for next in edges.get(&at).into_iter().flatten() {
            if next == start {
                let mut cycle = path.clone();
                cycle.push(start.to_string());
                return Some(cycle);
            }
            if seen.insert(next.clone()) {
                let mut longer = path.clone();
                longer.push(next.clone());
                stack.push((next.clone(), longer));
            }
        }
    }
    None
}

#[test]
fn no_module_imports_one_that_imports_it_back() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let edges = graph(&src);
    // The reading works: known one-way edges are seen.
    assert!(edges["stdio"].contains("process"), "{edges:?}");
    assert!(
        edges["auth::step_up"].contains("auth::browser"),
        "{edges:?}"
    );
    let cycles: Vec<String> = edges
        .keys()
        .filter_map(|m| cycle_from(m, &edges))
        .map(|c| c.join(" → "))
        .collect();
    assert!(cycles.is_empty(), "module cycles: {cycles:#?}");
}
