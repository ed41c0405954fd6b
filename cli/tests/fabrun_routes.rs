//! Mixed routes under `fabrun -n 4 --nodes 2`: the ranks of an emulated node reach each other over
//! shm and the other node over tcp, in one communicator. Every collective's default algorithm and
//! every hierarchical one runs with `--check`, and its `--stats` lines show traffic on both route
//! classes; a flat ring's node-local steps go over shm, and over tcp once
//! `FABCOLL_NODE_FABRIC=off` turns the node-local route off. Every run has a wall-clock limit.

#[path = "common/child.rs"]
mod child;

use std::collections::BTreeSet;
use std::process::Command;
use std::time::Duration;

const FABRUN: &str = env!("CARGO_BIN_EXE_fabrun");
const FABCOLL: &str = env!("CARGO_BIN_EXE_fabcoll");
const LIMIT: Duration = Duration::from_secs(120);

/// `fabcoll bench` under `fabrun -n 4 --nodes 2` with `--check --stats` and `bench` (more
/// arguments); `env`: extra environment of the ranks. Returns the route counters summed over
/// every rank and size.
fn bench(bench: &[&str], env: &[&str]) -> Routes {
    bench_on("tcp", bench, env)
}

/// [`bench`] over the network fabric `fabric`.
fn bench_on(fabric: &str, bench: &[&str], env: &[&str]) -> Routes {
    let mut args = vec!["-n", "4", "--nodes", "2", "--fabric", fabric];
    for e in env {
        args.extend_from_slice(&["-x", e]);
    }
    args.extend_from_slice(&[FABCOLL, "bench", "--min-size", "8", "--iters", "2"]);
    if !bench.contains(&"--max-size") {
        args.extend_from_slice(&["--max-size", "4096"]);
    }
    args.extend_from_slice(&["--warmup", "0", "--check", "--stats", "--format", "csv"]);
    args.extend_from_slice(bench);
    let what = bench.join(" ");
    let o = child::run_limited(Command::new(FABRUN).args(&args).env("FABCOLL_TIMEOUT", "30"), LIMIT, |_| {});
    assert!(o.status.success(), "{what}: {:?}\n{}\n{}", o.status, o.stdout, o.stderr);
    let rows: Vec<&str> = o.stdout.lines().filter(|l| l.contains(&format!(",{fabric},4,"))).collect();
    assert!(!rows.is_empty() && rows.iter().all(|l| l.split(',').nth(15) == Some("ok")), "{what}: {}", o.stdout);
    Routes::from_stats(&o.stderr)
}

/// Route counters summed over `--stats` lines.
#[derive(Debug, Default)]
struct Routes {
    lines: usize,
    node_msgs: u64,
    node_bytes: u64,
    network_msgs: u64,
    network_bytes: u64,
}

impl Routes {
    fn from_stats(stderr: &str) -> Routes {
        let mut r = Routes::default();
        for line in stderr.lines().filter(|l| l.contains("] stats rank=")) {
            r.lines += 1;
            for (name, v) in line.split_whitespace().filter_map(|w| w.split_once('=')) {
                let v: u64 = v.parse().unwrap_or(0);
                match name {
                    "node_route_msgs" => r.node_msgs += v,
                    "node_route_bytes" => r.node_bytes += v,
                    "network_route_msgs" => r.network_msgs += v,
                    "network_route_bytes" => r.network_bytes += v,
                    _ => {}
                }
            }
        }
        r
    }

    /// Both route classes carried messages, and bytes unless the operation moves none.
    fn assert_both(&self, what: &str, moves_data: bool) {
        assert!(self.lines >= 4, "{what}: no stats lines: {self:?}");
        assert!(self.node_msgs > 0 && self.network_msgs > 0, "{what}: {self:?}");
        if moves_data {
            assert!(self.node_bytes > 0 && self.network_bytes > 0, "{what}: {self:?}");
        }
    }
}

#[test]
fn every_default_algorithm_runs_on_both_routes() {
    let colls: BTreeSet<&str> = fabcoll::collectives::registry::all().map(|a| a.coll.name()).collect();
    assert!(colls.len() >= 12, "{colls:?}");
    for coll in colls {
        bench(&["--op", coll], &[]).assert_both(coll, coll != "barrier");
    }
}

#[test]
fn every_hierarchical_algorithm_runs_on_both_routes() {
    let mut n = 0;
    for a in fabcoll::collectives::registry::all().filter(|a| a.restrictions.two_level) {
        let what = format!("{}:{}", a.coll.name(), a.name);
        bench(&["--op", a.coll.name(), "--algo", a.name], &[]).assert_both(&what, a.coll.name() != "barrier");
        n += 1;
    }
    assert!(n > 0, "no hierarchical algorithm in the registry");
}

/// A flat ring (0 → 1 → 2 → 3 → 0 on nodes {0, 1} and {2, 3}): half its steps stay on a node
/// and go over shm; with the node-local route off there are no routes, everything is tcp.
#[test]
fn a_flat_ring_sends_node_local_steps_over_shm() {
    let ring = ["--op", "allgather", "--algo", "ring"];
    let routed = bench(&ring, &[]);
    routed.assert_both("allgather:ring", true);
    // The same blocks on either kind of link; only control messages (credits, grants) differ.
    let (node, network) = (routed.node_bytes, routed.network_bytes);
    assert!(node.abs_diff(network) * 20 < network, "2 of the ring's 4 links stay on a node: {routed:?}");
    let off = bench(&ring, &["FABCOLL_NODE_FABRIC=off"]);
    assert_eq!((off.node_msgs, off.network_msgs), (0, 0), "no routes, one fabric: {off:?}");
}

/// shm inside the nodes and libfabric's tcp between them, where libfabric is built in.
#[test]
fn shm_and_ofi_tcp_route_together() {
    let info = child::run_limited(Command::new(FABCOLL).args(["info", "--fabric", "ofi:tcp"]), LIMIT, |_| {});
    if !info.stdout.contains("ofi:tcp    available") {
        // Built without libfabric (scripts/install-deps.sh installs it); `info` says why.
        eprintln!("skipping: {}", info.stdout);
        return;
    }
    for op in ["allreduce", "allgather", "bcast", "alltoall"] {
        let mut args = vec!["--op", op, "--max-size", "262144"];
        if op == "allreduce" {
            args.extend_from_slice(&["--algo", "ring"]);
        }
        bench_on("ofi:tcp", &args, &[]).assert_both(&format!("{op} on ofi:tcp"), true);
    }
}
