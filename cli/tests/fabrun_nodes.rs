//! `fabrun --nodes`: emulated nodes. Each rank gets `FABCOLL_NODE=node<i>` in contiguous blocks
//! (5 ranks on 2 nodes: 3 + 2), the fabric defaults to tcp, node-only fabrics are refused, and a
//! job's communicator sees the placement: 2 nodes × 2 ranks, the communicator of my node, the
//! leaders {0, 2}, collectives on both; `fabcoll bench` names the topology in its header. Rank
//! programs are this test binary itself (`FABCOLL_TEST_CHILD` names the test). Every run has a
//! wall-clock limit.

#[path = "common/child.rs"]
mod child;

use std::process::Command;
use std::time::Duration;

use fabcoll::{Collectives, Communicator, ReduceOp};

const FABRUN: &str = env!("CARGO_BIN_EXE_fabrun");
const FABCOLL: &str = env!("CARGO_BIN_EXE_fabcoll");
const LIMIT: Duration = Duration::from_secs(120);

fn fabrun(args: &[&str]) -> child::Output {
    child::run_limited(Command::new(FABRUN).args(args).env("FABCOLL_TIMEOUT", "30"), LIMIT, |_| {})
}

/// Whether this process is a rank that `test` started through fabrun.
fn is_rank_of(test: &str) -> bool {
    std::env::var("FABCOLL_TEST_CHILD").as_deref() == Ok(test)
}

#[test]
fn two_nodes_of_two_ranks() {
    const TEST: &str = "two_nodes_of_two_ranks";
    if is_rank_of(TEST) {
        let c = Communicator::from_env().expect("communicator");
        let r = c.rank();
        assert_eq!(c.topology().to_string(), "2 nodes × 2 ranks");
        assert_eq!(c.fabric_name(), "tcp");
        let node = c.split_by_node().unwrap();
        let mut members = [0u32; 2];
        node.allgather(&[r], &mut members).unwrap();
        assert_eq!(members, if r < 2 { [0, 1] } else { [2, 3] });
        let mut x = [f64::from(r); 4];
        node.allreduce_in_place(&mut x, &ReduceOp::Sum).unwrap();
        assert_eq!(x, [if r < 2 { 1.0 } else { 5.0 }; 4]);
        match c.node_leaders().unwrap() {
            Some(l) => {
                let mut leaders = [0u32; 2];
                l.allgather(&[r], &mut leaders).unwrap();
                assert_eq!(leaders, [0, 2]);
            }
            None => assert!(r % 2 == 1, "leader {r} got no leaders"),
        }
        c.barrier().unwrap();
        println!("placement ok");
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let exe = exe.to_str().unwrap();
    let child = format!("FABCOLL_TEST_CHILD={TEST}");
    let o = fabrun(&["-n", "4", "--nodes", "2", "-x", &child, exe, "--exact", TEST, "--nocapture", "--test-threads=1"]);
    assert!(o.status.success(), "{:?}\n{}\n{}", o.status, o.stdout, o.stderr);
    for r in 0..4 {
        let prefix = format!("[{r}] ");
        let ok = o.stdout.lines().any(|l| l.starts_with(&prefix) && l.ends_with("placement ok"));
        assert!(ok, "rank {r}:\n{}", o.stdout);
    }
}

#[test]
fn uneven_nodes_are_contiguous_blocks() {
    let o = fabrun(&["-n", "5", "--nodes", "2", "sh", "-c", "echo node=$FABCOLL_NODE fabric=$FABCOLL_FABRIC"]);
    assert!(o.status.success(), "{}", o.stderr);
    for (r, node) in [(0, 0), (1, 0), (2, 0), (3, 1), (4, 1)] {
        assert!(o.stdout.contains(&format!("[{r}] node=node{node} fabric=tcp\n")), "rank {r}:\n{}", o.stdout);
    }
    // One node needs no network: the fabric stays the ranks' choice.
    let o = fabrun(&["-n", "2", "--nodes", "1", "sh", "-c", "echo node=$FABCOLL_NODE fabric=$FABCOLL_FABRIC."]);
    assert!(o.status.success() && o.stdout.contains("[1] node=node0 fabric=."), "{}{}", o.stdout, o.stderr);
}

#[test]
fn several_nodes_refuse_node_only_fabrics() {
    for fabric in ["shm", "ofi:shm"] {
        let o = fabrun(&["-n", "4", "--nodes", "2", "--fabric", fabric, "true"]);
        assert_eq!(o.status.code(), Some(2), "{fabric}: {}", o.stderr);
        assert!(o.stderr.contains(&format!("--fabric {fabric} reaches only the ranks of one node")), "{}", o.stderr);
    }
    let o = fabrun(&["-n", "2", "--nodes", "3", "true"]);
    assert_eq!(o.status.code(), Some(2), "{}", o.stderr);
    assert!(o.stderr.contains("--nodes 3 is more nodes than the 2 ranks"), "{}", o.stderr);
}

#[test]
fn bench_names_the_topology() {
    let sweep = ["bench", "--op", "allreduce", "--min-size", "4", "--max-size", "64", "--iters", "3", "--check"];
    let mut args = vec!["-n", "4", "--nodes", "2", FABCOLL];
    args.extend_from_slice(&sweep);
    let o = fabrun(&args);
    assert!(o.status.success(), "{}", o.stderr);
    let header = o.stdout.lines().next().unwrap_or_default();
    assert!(header.contains("fabric tcp, 4 ranks, topology 2 nodes × 2 ranks,"), "{header}");
    let o = fabrun(&["-n", "2", "--fabric", "shm", FABCOLL, "bench", "--op", "allreduce", "--max-size", "8"]);
    assert!(o.status.success(), "{}", o.stderr);
    assert!(o.stdout.contains("2 ranks, topology 1 node × 2 ranks,"), "{}", o.stdout);
}

/// Every hierarchical algorithm, forced, runs and checks out on emulated nodes: 2 × 2, and 3 + 2
/// for those that take unequal nodes.
#[test]
fn hierarchical_algorithms_run_on_emulated_nodes() {
    for a in fabcoll::collectives::registry::all().filter(|a| a.restrictions.two_level) {
        let placements: &[&str] = if a.restrictions.equal_nodes { &["4"] } else { &["4", "5"] };
        for &n in placements {
            let args = [
                "-n",
                n,
                "--nodes",
                "2",
                FABCOLL,
                "bench",
                "--op",
                a.coll.name(),
                "--algo",
                a.name,
                "--min-size",
                "8",
                "--max-size",
                "4096",
                "--iters",
                "2",
                "--warmup",
                "0",
                "--check",
                "--format",
                "csv",
            ];
            let o = fabrun(&args);
            assert!(o.status.success(), "{}:{} n={n}: {}", a.coll, a.name, o.stderr);
            let rows: Vec<&str> = o.stdout.lines().filter(|l| l.contains(a.name)).collect();
            assert!(!rows.is_empty(), "{}:{} n={n}: no rows in {}", a.coll, a.name, o.stdout);
            assert!(rows.iter().all(|l| l.contains(",ok")), "{}:{} n={n}: {}", a.coll, a.name, o.stdout);
        }
    }
}
