//! Where the ranks of a multi-process job sit, learned at bootstrap: `FABCOLL_NODE` per rank (set
//! here through the settings table, as a launcher would through the environment) gives
//! non-contiguous and irregular placements over tcp; without it, ranks of one host are one node
//! over tcp too, and shm is one node. On each: `split_by_node` and `node_leaders` hold the right
//! ranks and run collectives correctly; the rules' `own_cpu` counts each node's ranks against its
//! machine's CPUs, alike on every rank. `fabrun --nodes` is tested in `cli/tests/fabrun_nodes.rs`.

#[path = "../fabric/tests/support/mod.rs"]
mod support;

mod common;

use std::time::Duration;

use common::procs;
use fabcoll::settings::Settings;
use fabcoll::{Collectives, Communicator, ReduceOp, Topology};

const LIMIT: Duration = Duration::from_secs(120);

/// The world ranks of each member of `c`, by rank of `c` (`world` is this rank's world rank).
fn world_ranks(c: &Communicator, world: u32) -> Result<Vec<u32>, String> {
    let mut all = vec![0u32; c.size() as usize];
    c.allgather(&[world], &mut all).map_err(|e| e.to_string())?;
    Ok(all)
}

/// Sum, broadcast and gather over `c`, whose members are the world ranks `members`.
fn collectives_work(c: &Communicator, members: &[u32], world: u32) -> Result<(), String> {
    let mut sum = [f64::from(world) + 1.0; 3];
    c.allreduce_in_place(&mut sum, &ReduceOp::Sum).map_err(|e| e.to_string())?;
    let want: f64 = members.iter().map(|&r| f64::from(r) + 1.0).sum();
    if sum != [want; 3] {
        return Err(format!("allreduce over {members:?}: {sum:?}, want {want}"));
    }
    let root = c.size() - 1;
    let mut b: Vec<u32> = if c.rank() == root { (0..1000).map(|i| i * 3 + world).collect() } else { vec![0; 1000] };
    c.bcast(&mut b, root).map_err(|e| e.to_string())?;
    let from = members[root as usize];
    if b.iter().enumerate().any(|(i, &x)| x != i as u32 * 3 + from) {
        return Err(format!("bcast from world rank {from} over {members:?} delivered wrong data"));
    }
    Ok(())
}

/// Checks `c`'s topology against `nodes` (the world ranks of each node, in node order) and the
/// communicators of my node and of the leaders, with collectives on both. Returns the checks made.
fn check_placement(c: &Communicator, nodes: &[&[u32]]) -> Result<usize, String> {
    let t = c.topology();
    let got: Vec<&[u32]> = (0..t.nodes()).map(|n| t.ranks_on(n)).collect();
    if got != nodes {
        return Err(format!("rank {}: topology {t} has nodes {got:?}, want {nodes:?}", c.rank()));
    }
    let mine = nodes.iter().find(|n| n.contains(&c.rank())).expect("every rank is on a node");
    let local = c.split_by_node().map_err(|e| e.to_string())?;
    let members = world_ranks(&local, c.rank())?;
    if members != *mine || local.topology().nodes() != 1 {
        return Err(format!("rank {}: my node's communicator holds {members:?}, want {mine:?}", c.rank()));
    }
    collectives_work(&local, &members, c.rank())?;
    let leaders: Vec<u32> = nodes.iter().map(|n| n[0]).collect();
    match c.node_leaders().map_err(|e| e.to_string())? {
        Some(l) => {
            let members = world_ranks(&l, c.rank())?;
            if members != leaders || l.topology().nodes() != l.size() {
                return Err(format!("rank {}: leaders {members:?} on {}, want {leaders:?}", c.rank(), l.topology()));
            }
            collectives_work(&l, &members, c.rank())?;
        }
        None if leaders.contains(&c.rank()) => {
            return Err(format!("rank {} leads a node but got no leaders", c.rank()))
        }
        None => {}
    }
    // A dup keeps the placement; a split of the odd and even ranks keeps theirs.
    if c.dup().map_err(|e| e.to_string())?.topology() != t {
        return Err("dup changed the topology".into());
    }
    let half = c.split(Some(c.rank() % 2), 0).map_err(|e| e.to_string())?.expect("every rank has a color");
    let ranks: Vec<u32> = (0..c.size()).filter(|r| r % 2 == c.rank() % 2).collect();
    let want = Topology::from_nodes(&ranks.iter().map(|&r| t.node_of(r)).collect::<Vec<_>>()).unwrap();
    if **half.topology() != want {
        return Err(format!(
            "rank {}: the ranks of parity {} sit as {}, want {want}",
            c.rank(),
            c.rank() % 2,
            half.topology()
        ));
    }
    Ok(4)
}

/// Runs `check_placement` on `p` ranks over `fabric`, rank r on the node `node_of(r)` names
/// (`None`: FABCOLL_NODE unset), and checks rank 0 ran it.
fn placement(name: &str, fabric: &str, p: u32, node_of: fn(u32) -> Option<&'static str>, nodes: &[&[u32]]) {
    let mark = procs::mark_path(name);
    let env = [("FABCOLL_FABRIC", fabric), ("FABCOLL_TIMEOUT", "30"), ("FABCOLL_TEST_MARK", mark.as_str())];
    support::ranks(name, p, LIMIT, &env, |job| {
        if let Some(node) = node_of(job.rank()) {
            Settings { node: Some(node.into()), ..Settings::installed() }.install();
        }
        let c = Communicator::from_env().unwrap_or_else(|e| panic!("communicator: {e}"));
        let ran = check_placement(&c, nodes).unwrap_or_else(|e| panic!("{e}"));
        c.barrier().unwrap();
        if c.rank() == 0 {
            std::fs::write(&mark, ran.to_string()).unwrap();
        }
    });
    if procs::is_parent() {
        assert_eq!(procs::take_mark(&mark), Some(4), "{name}: rank 0 did not finish its checks");
    }
}

#[test]
fn tcp_nodes_named_per_rank_may_interleave() {
    placement(
        "tcp_nodes_named_per_rank_may_interleave",
        "tcp",
        4,
        |r| Some(["a", "b"][r as usize % 2]),
        &[&[0, 2], &[1, 3]],
    );
}

#[test]
fn tcp_nodes_may_differ_in_size() {
    placement("tcp_nodes_may_differ_in_size", "tcp", 4, |r| Some(if r == 0 { "x" } else { "y" }), &[&[0], &[1, 2, 3]]);
}

#[test]
fn tcp_ranks_of_one_host_are_one_node() {
    placement("tcp_ranks_of_one_host_are_one_node", "tcp", 3, |_| None, &[&[0, 1, 2]]);
}

#[test]
fn shm_is_one_node() {
    placement("shm_is_one_node", "shm", 3, |_| None, &[&[0, 1, 2]]);
}

#[test]
fn shm_honours_named_nodes() {
    placement("shm_honours_named_nodes", "shm", 3, |r| Some(if r < 2 { "n0" } else { "n1" }), &[&[0, 1], &[2]]);
}

/// The decision rules' `own_cpu` (`Communicator::shares_cpus`) counts each node's ranks against
/// its machine's CPUs, alike on every rank: four ranks bound two to a CPU, as two nodes of two,
/// have a CPU each; as nodes of three and one, the larger shares them. Skipped where this process
/// may run on fewer than two CPUs.
fn own_cpu_by_node(name: &str, node_of: fn(u32) -> &'static str, shares: bool) {
    let cpus = procs::own_cpus();
    if cpus.len() < 2 {
        eprintln!("{name}: skipped, this process may run on {cpus:?} only");
        return;
    }
    let mark = procs::mark_path(name);
    let env = [("FABCOLL_FABRIC", "tcp"), ("FABCOLL_TIMEOUT", "30"), ("FABCOLL_TEST_MARK", mark.as_str())];
    support::ranks(name, 4, LIMIT, &env, |job| {
        procs::bind_to(cpus[job.rank() as usize % 2]);
        Settings { node: Some(node_of(job.rank()).into()), ..Settings::installed() }.install();
        let c = Communicator::from_env().unwrap_or_else(|e| panic!("communicator: {e}"));
        assert_eq!(c.shares_cpus(), shares, "rank {}: shares the CPUs", c.rank());
        collectives_work(&c, &[0, 1, 2, 3], c.rank()).unwrap_or_else(|e| panic!("{e}"));
        c.barrier().unwrap();
        if c.rank() == 0 {
            std::fs::write(&mark, "1").unwrap();
        }
    });
    if procs::is_parent() {
        assert_eq!(procs::take_mark(&mark), Some(1), "{name}: rank 0 did not finish its checks");
    }
}

#[test]
fn nodes_of_two_on_two_cpus_have_a_cpu_each() {
    own_cpu_by_node("nodes_of_two_on_two_cpus_have_a_cpu_each", |r| if r < 2 { "n0" } else { "n1" }, false);
}

#[test]
fn a_node_of_three_on_two_cpus_makes_every_rank_share() {
    own_cpu_by_node("a_node_of_three_on_two_cpus_makes_every_rank_share", |r| if r < 3 { "n0" } else { "n1" }, true);
}
