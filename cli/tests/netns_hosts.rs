//! Several "hosts" on this machine: `scripts/netns-hosts.sh` starts each rank in its own network
//! namespace, with its own interface on a bridge, the way a cluster launcher starts ranks (no
//! fabrun, one rank per host, rank 0 serves the store). The ranks pick the default fabric across
//! hosts (tcp) and their listen addresses by the route to the store; `fabcoll bench --check`
//! verifies every result. Skipped, with a note, where namespaces cannot be made (not root, no
//! iproute2, or a sandbox without CAP_SYS_ADMIN).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

#[path = "common/child.rs"]
mod child;

const FABCOLL: &str = env!("CARGO_BIN_EXE_fabcoll");
const LIMIT: Duration = Duration::from_secs(240);

/// Why this machine cannot host the test (a namespace holding a bridge and a veth pair, what the
/// script builds), or `None` when it can.
fn no_namespaces() -> Option<String> {
    let probe = format!("fcprobe{}", std::process::id());
    let steps: [&[&str]; 3] = [
        &["netns", "add", &probe],
        &["-n", &probe, "link", "add", "br0", "type", "bridge"],
        &["-n", &probe, "link", "add", "a0", "type", "veth", "peer", "name", "b0"],
    ];
    let mut why = None;
    for args in steps {
        match Command::new("ip").args(args).output() {
            Err(e) => why = Some(format!("cannot run ip (iproute2): {e}")),
            Ok(o) if !o.status.success() => {
                why = Some(format!("ip {} failed: {}", args.join(" "), String::from_utf8_lossy(&o.stderr).trim()))
            }
            Ok(_) => continue,
        }
        break;
    }
    let _ = Command::new("ip").args(["netns", "del", &probe]).output();
    why
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/netns-hosts.sh")
}

/// Runs `fabcoll bench --check` for `op` on `n` hosts; returns rank 0's CSV rows.
fn bench_on_hosts(n: u32, op: &str) -> Vec<Vec<String>> {
    let out = std::env::temp_dir().join(format!("fabcoll-netns-{}-{op}.csv", std::process::id()));
    let bench = format!("bench --op {op} --min-size 8 --max-size 256K --iters 20 --warmup 2 --check --format csv");
    let mut cmd = Command::new("bash");
    cmd.arg(script()).args(["-n", &n.to_string(), "--timeout", "200", "--", FABCOLL]);
    cmd.args(bench.split_whitespace()).arg("--output").arg(&out);
    let o = child::run_limited(&mut cmd, LIMIT, |_| {});
    assert!(o.status.success(), "{op} on {n} hosts failed ({:?}):\n{}\n{}", o.status, o.stdout, o.stderr);
    let csv = std::fs::read_to_string(&out).unwrap_or_else(|e| panic!("{op}: no CSV from rank 0: {e}"));
    let _ = std::fs::remove_file(&out);
    csv.lines().skip(1).map(|l| l.split(',').map(str::to_string).collect()).collect()
}

#[test]
fn collectives_across_namespaces_use_tcp_and_check_out() {
    if let Some(why) = no_namespaces() {
        eprintln!("skipped: {why}");
        return;
    }
    for op in ["allreduce", "bcast", "allgather", "alltoall", "reduce_scatter"] {
        let rows = bench_on_hosts(3, op);
        assert!(rows.len() >= 10, "{op}: {} rows, want one per size from 8 B to 256 KiB", rows.len());
        for r in &rows {
            // Columns: op, algorithm, fabric, ranks, bytes, ..., check (last).
            assert_eq!(r[2], "tcp", "{op}: default fabric across hosts: {r:?}");
            assert_eq!(r[3], "3", "{op}: {r:?}");
            assert_eq!(r.last().map(String::as_str), Some("ok"), "{op}: result check failed: {r:?}");
        }
    }
}
