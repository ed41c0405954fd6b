//! `fabcoll info --settings`: one line per knob of the settings table, the knobs its environment
//! sets (parsed, a secret hidden), exit status 1 when one of them does not parse, and the
//! markdown of docs/settings.md with `--format markdown`.

use std::process::{Command, Output};

use fabcoll::fabric::settings::{self, TABLE};

const FABCOLL: &str = env!("CARGO_BIN_EXE_fabcoll");

/// Runs `fabcoll info --settings args` with exactly the `FABCOLL_*` variables `env`.
fn info(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(FABCOLL);
    cmd.args(["info", "--settings"]).args(args);
    for (k, _) in std::env::vars() {
        if k.starts_with("FABCOLL_") {
            cmd.env_remove(k);
        }
    }
    cmd.envs(env.iter().copied()).output().expect("run fabcoll")
}

#[test]
fn prints_every_knob_on_one_line_and_the_values_set() {
    let o = info(&[], &[("FABCOLL_EAGER", "64K"), ("FABCOLL_TOKEN", "s3cret"), ("FABCOLL_FABRIC", "ofi")]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{out}\n{}", String::from_utf8_lossy(&o.stderr));
    for e in TABLE {
        let lines: Vec<&str> = out.lines().filter(|l| l.starts_with(&format!("{} ", e.name))).collect();
        assert_eq!(lines.len(), 1, "{}: {lines:?}", e.name);
        for part in [e.kind, e.default, &e.layer.to_string(), e.meaning] {
            assert!(lines[0].contains(part), "{}: {part:?} missing from {:?}", e.name, lines[0]);
        }
    }
    assert!(out.contains("  FABCOLL_EAGER=65536\n"), "{out}");
    assert!(out.contains("  FABCOLL_FABRIC=ofi:tcp\n"), "{out}");
    assert!(out.contains("FABCOLL_TOKEN=") && !out.contains("s3cret"), "the token is not printed: {out}");
}

#[test]
fn a_value_that_does_not_parse_fails_naming_it() {
    let o = info(&[], &[("FABCOLL_TIMEOUT", "soon")]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(out.contains("error: FABCOLL_TIMEOUT=\"soon\": expected a non-negative number of seconds"), "{out}");
    let o = info(&[], &[]);
    assert!(o.status.success() && String::from_utf8_lossy(&o.stdout).contains("No FABCOLL_* knob is set"));
}

#[test]
fn markdown_is_the_table_of_docs_settings_md() {
    let o = info(&["--format", "markdown"], &[("FABCOLL_EAGER", "1")]);
    assert!(o.status.success());
    assert_eq!(String::from_utf8_lossy(&o.stdout), settings::markdown());
    let o = Command::new(FABCOLL).args(["info", "--format", "markdown"]).output().unwrap();
    assert!(!o.status.success(), "--format needs --settings");
}
