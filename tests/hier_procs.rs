//! The hierarchical algorithms in multi-process jobs on mixed routes (shm inside a node, the
//! network fabric across): every hierarchical row of the registry × counts {0, 1, p + 1, 100 003}
//! (the non-commutative op too where a row takes one; the in-place forms it serves), forced by
//! name and checked against the reference, on 2 × 2, 3 × 2, 2 × 3 and the irregular 1 + 3 over
//! tcp, and 2 × 2 and 1 + 3 over ofi:tcp. A row whose restrictions refuse the placement (the
//! multi-leader designs on unequal nodes) is skipped, as selection skips it. Issue 35's
//! correctness matrix; the flat rows run on the same placements in `tests/routes_procs.rs`.

#[path = "../fabric/tests/support/mod.rs"]
mod support;

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::procs;
use fabcoll::collectives::registry::{self, Algorithm};
use fabcoll::collectives::{Collective, Topology};
use fabcoll::settings::Settings;
use fabcoll::{Collectives, Communicator, Options};

const LIMIT: Duration = Duration::from_secs(300);

/// One check of the matrix: a hierarchical row, a count, and the form (non-commutative op,
/// in place).
struct Case {
    alg: &'static Algorithm,
    count: usize,
    noncomm: bool,
    in_place: bool,
}

/// Every check on the placement `t`, in the order the ranks run them.
fn cases(t: &Arc<Topology>) -> Vec<Case> {
    let p = t.size();
    let mut out = Vec::new();
    for alg in registry::all().filter(|a| a.restrictions.two_level) {
        for count in procs::counts(p) {
            for noncomm in [false, true].into_iter().filter(|&n| !n || alg.coll.is_reduction()) {
                let args = common::args_for(alg.coll, p, count, !noncomm).with_topology(t.clone());
                if alg.restrictions.violated(&args).is_none() {
                    out.push(Case { alg, count, noncomm, in_place: false });
                }
            }
            if common::IN_PLACE.contains(&alg.coll) {
                let args = common::in_place_args(alg.coll, p, count).with_topology(t.clone());
                if alg.restrictions.violated(&args).is_none() {
                    out.push(Case { alg, count, noncomm: false, in_place: true });
                }
            }
        }
    }
    out
}

/// The whole matrix on the placement `nodes` (rank r on node `nodes[r]`) over `fabric`; rank 0
/// reports the checks it ran, which must be all of them (no report: the build lacks the fabric).
fn matrix(name: &str, fabric: &str, nodes: &'static [u32]) {
    let p = nodes.len() as u32;
    let t = Arc::new(Topology::from_nodes(nodes).unwrap());
    let mark = procs::mark_path(name);
    let env = [("FABCOLL_FABRIC", fabric), ("FABCOLL_TIMEOUT", "60"), ("FABCOLL_TEST_MARK", mark.as_str())];
    support::ranks(name, p, LIMIT, &env, |job| {
        let node = format!("n{}", nodes[job.rank() as usize]);
        Settings { node: Some(node), ..Settings::installed() }.install();
        let Some(c) = procs::connect() else { return };
        assert_eq!(c.topology().to_string(), t.to_string(), "rank {}: the placement it sees", c.rank());
        let cases = cases(&t);
        for k in &cases {
            run(&c, k).unwrap_or_else(|e| panic!("{e}"));
        }
        let s = c.stats();
        let alone = t.local_size(c.rank()) == 1;
        assert!(s.network_route_bytes > 0, "rank {}: nothing over the network: {s:?}", c.rank());
        assert!(alone || s.node_route_bytes > 0, "rank {}: nothing over shm: {s:?}", c.rank());
        c.barrier().unwrap();
        if c.rank() == 0 {
            std::fs::write(&mark, cases.len().to_string()).unwrap();
        }
    });
    if procs::is_parent() {
        match procs::take_mark(&mark) {
            Some(ran) => {
                assert_eq!(ran, cases(&t).len(), "{name}: rank 0 did not run every check");
                eprintln!("{name}: {ran} checks");
            }
            None => eprintln!("{name}: skipped, {fabric} not built"),
        }
    }
}

fn run(c: &Communicator, k: &Case) -> Result<(), String> {
    if k.in_place {
        let opts = Options { algorithm: Some(k.alg.name.to_owned()), ..Default::default() };
        return common::run_in_place(c, k.alg.coll, &opts, k.count).map_err(|e| format!("in place: {e}"));
    }
    common::run_one(c, k.alg.coll, Some(k.alg.name), k.count, k.noncomm)
}

const TWO_BY_TWO: &[u32] = &[0, 0, 1, 1];
const ONE_AND_THREE: &[u32] = &[0, 1, 1, 1];

#[test]
fn every_row_covers_its_collective() {
    let t = Arc::new(Topology::from_nodes(TWO_BY_TWO).unwrap());
    let colls: std::collections::BTreeSet<Collective> = cases(&t).iter().map(|k| k.alg.coll).collect();
    for c in
        [Collective::Barrier, Collective::Bcast, Collective::Allreduce, Collective::Allgather, Collective::Alltoall]
    {
        assert!(colls.contains(&c), "no hierarchical {c} on 2 × 2");
    }
    assert!(cases(&t).iter().any(|k| k.in_place), "no in-place case");
}

#[test]
fn tcp_two_nodes_of_two() {
    matrix("tcp_two_nodes_of_two", "tcp", TWO_BY_TWO);
}

#[test]
fn tcp_three_nodes_of_two() {
    matrix("tcp_three_nodes_of_two", "tcp", &[0, 0, 1, 1, 2, 2]);
}

#[test]
fn tcp_two_nodes_of_three() {
    matrix("tcp_two_nodes_of_three", "tcp", &[0, 0, 0, 1, 1, 1]);
}

#[test]
fn tcp_one_and_three() {
    matrix("tcp_one_and_three", "tcp", ONE_AND_THREE);
}

#[test]
fn ofi_tcp_two_nodes_of_two() {
    matrix("ofi_tcp_two_nodes_of_two", "ofi:tcp", TWO_BY_TWO);
}

#[test]
fn ofi_tcp_one_and_three() {
    matrix("ofi_tcp_one_and_three", "ofi:tcp", ONE_AND_THREE);
}
