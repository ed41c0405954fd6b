//! `fabcoll model`: `--compare` on a synthetic tuner log with explicit parameters (no fabric),
//! `--estimate`, and a probe over in-process ranks.

use std::process::Command;

fn fabcoll(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_fabcoll")).args(args).output().expect("run fabcoll");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn compare_scores_a_synthetic_log() {
    let line = |op: &str, alg: &str, bytes: u64, us: f64| {
        format!(r#"{{"op":"{op}","p":8,"fabric":"shm","algorithm":"{alg}","bytes":{bytes},"median_us":{us}}}"#)
    };
    // Short: the model's recursive doubling is also measured best. Long: the model prefers a
    // bandwidth-optimal algorithm but the log says recursive doubling won by 2x (a miss).
    let log = [
        line("allreduce", "recursive_doubling", 64, 10.0),
        line("allreduce", "ring", 64, 30.0),
        line("allreduce", "recursive_doubling", 4 << 20, 1000.0),
        line("allreduce", "ring", 4 << 20, 2000.0),
    ]
    .join("\n");
    let path = std::env::temp_dir().join(format!("fabcoll-model-cli-{}.jsonl", std::process::id()));
    std::fs::write(&path, log).unwrap();
    let (ok, out, err) =
        fabcoll(&["model", "--compare", path.to_str().unwrap(), "--machine", "alpha=2e-6,beta=2e-10,gamma=1e-10"]);
    assert!(ok, "{err}");
    assert!(out.contains("within 10% of the measured best: 1/2 points (50%)"), "{out}");
    assert!(out.lines().any(|l| l.contains("4194304") && l.contains("ring") && l.ends_with(" *")), "{out}");
    let (ok, _, err) = fabcoll(&["model", "--compare", path.to_str().unwrap(), "--machine", "beta=1"]);
    assert!(!ok && err.contains("alpha is required"), "{err}");
    let _ = std::fs::remove_file(&path);
}

#[test]
fn estimate_and_local_probe() {
    let (ok, out, err) =
        fabcoll(&["model", "--estimate", "bcast", "--bytes", "1M", "-p", "16", "--machine", "alpha=2e-6,beta=1e-10"]);
    assert!(ok, "{err}");
    for alg in ["binomial", "scatter_recursive_doubling_allgather", "scatter_ring_allgather"] {
        assert!(out.contains(alg), "{out}");
    }
    let (ok, out, err) = fabcoll(&["model", "--fabric", "local", "-n", "2"]);
    assert!(ok, "{err}");
    for p in ["alpha", "beta", "gamma", "f_alpha", "f_beta", "bcast:binomial", "allgather:ring"] {
        assert!(out.contains(p), "{out}");
    }
}
