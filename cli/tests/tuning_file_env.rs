//! `FABCOLL_TUNING_FILE` steers `fabcoll bench`'s algorithm choice, `FABCOLL_ALGO` still wins over
//! it, and a bad file stops the program with an error naming the variable, the file and the rule
//! (the library side of decision files: tests/decision_files.rs at the workspace root).

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

#[path = "common/child.rs"]
mod child;

const FABCOLL: &str = env!("CARGO_BIN_EXE_fabcoll");
const LIMIT: Duration = Duration::from_secs(120);

fn temp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("fabcoll-tuning-file-env-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

const RING_ALLREDUCE: &str = r#"{
  "format": "fabcoll-decisions",
  "version": 1,
  "provenance": {"tool": "cli/tests/tuning_file_env.rs"},
  "rules": [
    {"op": "allreduce", "algorithm": "ring", "fallbacks": ["recursive_doubling"]}
  ]
}"#;

/// Runs `fabcoll bench --fabric local` for allreduce up to 1 KiB with `env`; (ok, stdout, stderr).
fn bench(env: &[(&str, &str)]) -> (bool, String, String) {
    let args = ["bench", "--fabric", "local", "-n", "4", "--op", "allreduce", "--max-size", "1024"];
    let mut cmd = Command::new(FABCOLL);
    cmd.args(args).args(["--iters", "2", "--check", "--format", "csv"]);
    cmd.env_remove("FABCOLL_ALGO").env_remove("FABCOLL_TUNING_FILE").env("FABCOLL_TIMEOUT", "30");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let o = child::run_limited(&mut cmd, LIMIT, |_| {});
    (o.status.success(), o.stdout, o.stderr)
}

/// The `algorithm` column of a CSV sweep.
fn algorithm_column(csv: &str) -> Vec<String> {
    let mut lines = csv.lines().filter(|l| !l.trim().is_empty());
    let header: Vec<&str> = lines.next().expect("header").split(',').collect();
    let col = header.iter().position(|h| *h == "algorithm").expect("algorithm column");
    let check = header.iter().position(|h| *h == "check").expect("check column");
    lines
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            assert_eq!(f[check], "ok", "{l}");
            f[col].to_owned()
        })
        .collect()
}

#[test]
fn tuning_file_env_steers_fabcoll_bench() {
    let (ok, out, err) = bench(&[]);
    assert!(ok, "{err}");
    let base = algorithm_column(&out);
    assert!(!base.is_empty() && base.iter().all(|a| a == "recursive_doubling"), "{base:?}");

    let path = temp("ring.json");
    std::fs::write(&path, RING_ALLREDUCE).unwrap();
    let (ok, out, err) = bench(&[("FABCOLL_TUNING_FILE", path.to_str().unwrap())]);
    assert!(ok, "{err}");
    let tuned = algorithm_column(&out);
    assert_eq!(tuned.len(), base.len());
    assert!(tuned.iter().all(|a| a == "ring"), "{tuned:?}");

    // FABCOLL_ALGO wins over the file.
    let (ok, out, err) =
        bench(&[("FABCOLL_TUNING_FILE", path.to_str().unwrap()), ("FABCOLL_ALGO", "allreduce:reduce_bcast")]);
    assert!(ok, "{err}");
    assert!(algorithm_column(&out).iter().all(|a| a == "reduce_bcast"), "{out}");

    // A bad file stops the program with an error naming the variable, the file and the rule.
    let bad = temp("bad.json");
    std::fs::write(&bad, RING_ALLREDUCE.replace("\"ring\"", "\"rign\"")).unwrap();
    let (ok, _, err) = bench(&[("FABCOLL_TUNING_FILE", bad.to_str().unwrap())]);
    assert!(!ok);
    for part in ["FABCOLL_TUNING_FILE", "bad.json", "rules[0] (allreduce → rign)", "not registered"] {
        assert!(err.contains(part), "{err:?} does not mention {part:?}");
    }
    let (ok, _, err) = bench(&[("FABCOLL_TUNING_FILE", "/nonexistent/tuning.json")]);
    assert!(!ok && err.contains("/nonexistent/tuning.json"), "{err}");
    std::fs::remove_file(&path).unwrap();
    std::fs::remove_file(&bad).unwrap();
}
