//! The settings table (`fabcoll::fabric::settings`) is the one place knobs are declared and read:
//! every `FABCOLL_*` name in the sources, scripts and docs is in it (or is a build or test
//! harness variable listed below); outside the settings module no library or CLI source spells a
//! knob's name as a string literal or reads a variable that is not another tool's convention; the
//! executor's defaults in the table are the code's; `docs/settings.md` is the generated table; and
//! every `docs/measurements/` file the sources point to exists.

use std::path::{Path, PathBuf};

use fabcoll::fabric::settings::{self, CONVENTIONS, TABLE};
use fabcoll::select::FabricClass;
use fabcoll::ExecConfig;

/// `FABCOLL_*` names that are not settings: set for or by the build, or by test and benchmark
/// harnesses for their own child processes.
const NOT_SETTINGS: &[(&str, &str)] = &[
    ("FABCOLL_OFI_MISSING", "build.rs hands why libfabric is missing to the compiler (option_env!)"),
    ("FABCOLL_TEST_CHILD", "test harnesses: marks a child process and names its test"),
    ("FABCOLL_TEST_MARK", "test harnesses: a per-test marker in the children's environment"),
    ("FABCOLL_TEST_SHOW", "fabric/tests/support: print every rank's output also when a job succeeds"),
    ("FABCOLL_SHM_BENCH_CHILD", "fabric/benches/shm.rs: marks its child process"),
    ("FABCOLL_BENCH", "tests/shm_bench.rs: runs the measurement, skipped otherwise"),
    ("FABCOLL_EXPLAIN", "collectives/tests/formulas.rs: the case whose critical path is printed"),
    ("FABCOLL_LEAN_MAX", "scripts/check-lean.sh: the most crates a program on the library alone may pull"),
    ("FABCOLL_VENV", "scripts/python-env.sh: the virtualenv of the Python package and its tests"),
    ("FABCOLL_FUZZ_SEED", "fabric/tests/fuzz_bodies.rs, tests/fuzz_bodies.rs: the mutations' seed"),
    ("FABCOLL_FUZZ_ITERS", "fabric/tests/fuzz_bodies.rs, tests/fuzz_bodies.rs: mutated inputs per target"),
    ("FABCOLL_STRESS_SEED", "tests/stress: the seed of the random call sequence"),
    ("FABCOLL_STRESS_CALLS", "tests/stress: calls per rank (a soak run)"),
];

/// Prefixes of names that are not settings.
const NOT_SETTINGS_PREFIXES: &[(&str, &str)] = &[
    ("FABCOLL_BENCH_", "fabric/benches and scripts/tcp-floor.sh: the benchmark harness's own variables"),
    ("FABCOLL_FI_", "fabric/src/ofi/shim.{c,h}: C constants, not variables"),
    ("FABCOLL_OFI_SHIM_H", "fabric/src/ofi/shim.h: the include guard"),
];

/// Directories not scanned: build output, and dated measurement records, which keep the names of
/// their day.
const SKIP_DIRS: &[&str] = &["target", ".git", "docs/measurements", "assets"];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every file under the workspace root with one of `exts`, skipping [`SKIP_DIRS`].
fn files(exts: &[&str]) -> Vec<PathBuf> {
    let root = root();
    let mut out = Vec::new();
    let mut todo = vec![root.clone()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display())) {
            let p = e.unwrap().path();
            let rel = p.strip_prefix(&root).unwrap().to_string_lossy().into_owned();
            if p.is_dir() {
                if !SKIP_DIRS.iter().any(|s| rel == *s || rel.ends_with(&format!("/{s}"))) {
                    todo.push(p);
                }
            } else if p.extension().is_some_and(|x| exts.iter().any(|e| x == *e)) {
                out.push(p);
            }
        }
    }
    out.sort();
    assert!(out.len() > 50, "found only {} files under {}", out.len(), root.display());
    out
}

fn rel(p: &Path) -> String {
    p.strip_prefix(root()).unwrap().display().to_string()
}

/// Every `FABCOLL_…` word in `text`; a family (`FABCOLL_OFI_*`) ends with `_`.
fn fabcoll_names(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    for (i, _) in text.match_indices("FABCOLL_") {
        if text[..i].chars().next_back().is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        let len = text[i..]
            .find(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
            .unwrap_or(text.len() - i);
        let word = &text[i..i + len];
        let name = if text[i + len..].starts_with('*') { word } else { word.trim_end_matches('_') };
        // `FABCOLL_*` (or `FABCOLL_…`) names them all.
        if name != "FABCOLL_" && name != "FABCOLL" {
            out.push(name);
        }
    }
    out
}

fn known(name: &str) -> bool {
    if name.ends_with('_') {
        return TABLE.iter().any(|e| e.name.starts_with(name));
    }
    TABLE.iter().any(|e| e.name == name)
        || CONVENTIONS.iter().any(|c| c.name == name)
        || NOT_SETTINGS.iter().any(|(n, _)| *n == name)
        || NOT_SETTINGS_PREFIXES.iter().any(|(p, _)| name.starts_with(p.trim_end_matches('_')))
}

#[test]
fn every_fabcoll_variable_named_anywhere_is_in_the_table() {
    let mut unknown = Vec::new();
    for f in files(&["rs", "md", "sh", "c", "h", "py", "toml"]) {
        let text = std::fs::read_to_string(&f).unwrap_or_default();
        for name in fabcoll_names(&text) {
            if !known(name) {
                unknown.push(format!("{}: {name}", rel(&f)));
            }
        }
    }
    unknown.dedup();
    assert!(
        unknown.is_empty(),
        "names that are neither settings (fabric/src/settings.rs) nor listed in NOT_SETTINGS:\n{}",
        unknown.join("\n")
    );
}

/// `text` without its `#[cfg(test)] mod tests` (which sets variables for tests, and reads none).
fn without_tests(text: &str) -> &str {
    text.find("#[cfg(test)]\nmod tests").map_or(text, |i| &text[..i])
}

#[test]
fn only_the_settings_module_reads_fabcoll_variables() {
    let mut bad = Vec::new();
    let sources: Vec<PathBuf> = files(&["rs"])
        .into_iter()
        .filter(|f| {
            let r = rel(f);
            r.contains("src/") && !r.starts_with("tests/") && !r.ends_with("build.rs")
        })
        .collect();
    assert!(sources.iter().any(|f| rel(f) == "fabric/src/settings.rs"));
    for f in sources.iter().filter(|f| rel(f) != "fabric/src/settings.rs") {
        let text = std::fs::read_to_string(f).unwrap();
        let code = without_tests(&text);
        for e in TABLE {
            if code.contains(&format!("\"{}\"", e.name)) {
                bad.push(format!("{}: the literal \"{}\" (name it through its knob's `name`)", rel(f), e.name));
            }
        }
        for call in ["env::var(", "env::var_os(", "env::vars("] {
            for (i, _) in code.match_indices(call) {
                let arg = &code[i + call.len()..];
                let name = arg.strip_prefix('"').and_then(|a| a.split('"').next());
                if !name.is_some_and(|n| CONVENTIONS.iter().any(|c| c.name == n && !n.starts_with("FABCOLL_"))) {
                    let line = code[..i].lines().count();
                    bad.push(format!(
                        "{}:{line}: {call}{}) reads what is not another tool's convention",
                        rel(f),
                        &arg[..arg.find(')').unwrap_or(0)]
                    ));
                }
            }
        }
    }
    assert!(bad.is_empty(), "read FABCOLL_* knobs through fabric::settings:\n{}", bad.join("\n"));
}

fn entry(name: &str) -> &'static settings::Entry {
    TABLE.iter().find(|e| e.name == name).unwrap_or_else(|| panic!("{name} is not in the table"))
}

#[test]
fn the_executor_defaults_in_the_table_are_the_code_s() {
    let node = ExecConfig::for_class(FabricClass::Node);
    let net = ExecConfig::for_class(FabricClass::Network);
    let has = |name: &str, v: String| {
        let d = entry(name).default;
        assert!(d.split(|c: char| !c.is_ascii_digit()).any(|w| w == v), "{name}: default {d:?} does not say {v}");
    };
    has("FABCOLL_EAGER", node.eager_threshold.to_string());
    has("FABCOLL_EAGER", net.eager_threshold.to_string());
    has("FABCOLL_SLOTS", node.slots.to_string());
    has("FABCOLL_TIMEOUT", node.timeout.as_secs().to_string());
    has("FABCOLL_MR_CACHE", node.mr_cache.to_string());
    has("FABCOLL_HUGE_PAGES", node.huge_pages_after.to_string());
    has("FABCOLL_STAGED_RECEIVE", node.staged_receive_max.to_string());
    has("FABCOLL_SHARED_COPY", node.shared_copy_min.to_string());
    has("FABCOLL_PULL_REDUCE", node.pull_reduce_min.to_string());
    has("FABCOLL_SPIN_US", node.spin.as_micros().to_string());
    has("FABCOLL_MAILBOX", node.mailbox_limit.to_string());
    has("FABCOLL_STRAIGHT", u8::from(node.straight).to_string());
    has("FABCOLL_STREAM_COPY", fabcoll::fabric::copy::DEFAULT_STREAM_THRESHOLD.to_string());
}

#[test]
fn docs_settings_md_is_the_generated_table() {
    let path = root().join("docs/settings.md");
    let doc = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        doc == settings::markdown(),
        "{} is out of date: regenerate it with `cargo run --bin fabcoll -- info --settings --format markdown > \
         docs/settings.md`",
        path.display()
    );
}

#[test]
fn the_readme_points_to_the_table() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    assert!(readme.contains("docs/settings.md") && readme.contains("fabcoll info --settings"));
}

#[test]
fn every_measurement_file_named_in_the_sources_exists() {
    let mut missing = Vec::new();
    for f in files(&["rs", "md", "sh"]) {
        let text = std::fs::read_to_string(&f).unwrap_or_default();
        for (i, _) in text.match_indices("docs/measurements/") {
            let name: String = text[i..].chars().take_while(|c| c.is_alphanumeric() || "/-_.".contains(*c)).collect();
            let name = name.trim_end_matches('.');
            if name.ends_with(".md") && !root().join(name).is_file() {
                missing.push(format!("{}: {name}", rel(&f)));
            }
        }
    }
    assert!(missing.is_empty(), "measurement files named but missing:\n{}", missing.join("\n"));
}
