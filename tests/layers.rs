//! Layering (ARCHITECTURE.md: dependencies point down only), checked on the source text through
//! `crate::` and `super::` paths (`use`, a path in code or a doc link): no file under `src/select/`
//! names a module above selection (the communicator, the executor, the tuner, the probe or the
//! job); no file under `src/exec/` names the communicator or what sits above it; and the plan
//! (`src/exec/plan.rs`; the straight-line order it compiles comes from the pure crate) names none
//! of the ways a plan is run.

use std::path::{Path, PathBuf};

/// The first segment of every `crate::` path in `text`, a `crate::{a, b::c}` group giving each
/// of its members (`a`, `b`).
fn crate_paths(text: &str) -> Vec<String> {
    paths(text, "crate::")
}

/// The first segment of every path in `text` that starts with `prefix` (`crate::`, `super::`).
fn paths(text: &str, prefix: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (i, _) in text.match_indices(prefix) {
        // `fabcoll_collectives::...` and friends are other crates, not this one.
        let before = text[..i].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let rest = &text[i + prefix.len()..];
        let ident = |s: &str| s.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect::<String>();
        match rest.strip_prefix('{') {
            Some(group) => {
                let inner = &group[..group.find('}').unwrap_or(group.len())];
                out.extend(inner.split(',').map(|m| ident(m.trim())).filter(|m| !m.is_empty()));
            }
            None => out.push(ident(rest)),
        }
    }
    out.retain(|s| !s.is_empty());
    out
}

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display())) {
            let p = e.unwrap().path();
            if p.is_dir() {
                todo.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// What `src/select` may reach through `crate::`: itself, the error type, and the lower crates
/// and their items that the crate root re-exports.
const SELECT_MAY_USE: &[&str] = &[
    "select",
    "error",
    "Error",
    "Result",
    "collectives",
    "fabric",
    "Datatype",
    "Element",
    "ValueIndex",
    "ReduceOp",
    "UserOp",
    "Params",
];

/// The `crate::` paths of the sources under `src/<dir>` whose first segment `bad` refuses, as
/// "file: crate::segment" lines.
fn crate_paths_under(dir: &str, bad: impl Fn(&str) -> bool) -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src").join(dir);
    let files = rust_files(&root);
    assert!(files.len() > 5, "no sources under {}", root.display());
    let mut found = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        found.extend(crate_paths(&text).into_iter().filter(|s| bad(s)).map(|s| format!("{}: crate::{s}", f.display())));
    }
    found
}

#[test]
fn selection_imports_nothing_above_it() {
    let bad = crate_paths_under("select", |seg| !SELECT_MAY_USE.contains(&seg));
    assert!(bad.is_empty(), "src/select reaches above itself:\n{}", bad.join("\n"));
}

/// What the executor must not reach: the communicator and the layers above it.
const ABOVE_EXEC: &[&str] = &["comm", "probe", "job", "tune", "Communicator"];

#[test]
fn the_executor_imports_nothing_above_it() {
    let bad = crate_paths_under("exec", |seg| ABOVE_EXEC.contains(&seg));
    assert!(bad.is_empty(), "src/exec reaches above itself:\n{}", bad.join("\n"));
}

/// What the plan may reach in the executor: itself and the executor's maps. (Its straight-line
/// order is computed in the pure crate, `fabcoll_collectives::straight`, which cannot name the
/// executor at all.)
const PLAN_MAY_USE: &[&str] = &["plan", "fasthash"];

#[test]
fn the_plan_names_none_of_the_ways_it_is_run() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/exec");
    let mut bad = Vec::new();
    for f in ["plan.rs"] {
        let text = std::fs::read_to_string(root.join(f)).unwrap();
        // The unit tests below the code may use anything.
        let text = &text[..text.find("#[cfg(test)]").unwrap_or(text.len())];
        let exec_paths = crate_paths(text).into_iter().filter(|s| s == "exec");
        assert_eq!(exec_paths.count(), 0, "{f}: the plan names the executor through crate::exec");
        for seg in paths(text, "super::") {
            if !PLAN_MAY_USE.contains(&seg.as_str()) {
                bad.push(format!("{f}: super::{seg}"));
            }
        }
    }
    assert!(bad.is_empty(), "the plan reaches the paths that run it:\n{}", bad.join("\n"));
}

#[test]
fn crate_paths_are_found() {
    let text = "use crate::comm::Communicator;\nuse crate::{error::Result, select};\n\
                use fabcoll_collectives::registry; // my_crate::x is another crate\n[`crate::exec`]";
    assert_eq!(crate_paths(text), ["comm", "error", "select", "exec"]);
    assert_eq!(paths("use super::{op::Op, plan};\n`super::ring`", "super::"), ["op", "plan", "ring"]);
}
