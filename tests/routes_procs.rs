//! Mixed routes in multi-process jobs: `FABCOLL_NODE` per rank puts the ranks on several nodes
//! over a network fabric, so each communicator reaches its node peers over shm and the others
//! over the network (`fabric::routes`). Every collective × every flat algorithm (and the default
//! choice, also in place) against the reference on 2 × 2, 3 + 2, interleaved nodes and 1 + 3, on
//! tcp and ofi:tcp; both route classes carry traffic; a killed rank is named by the survivors on
//! either route. Bodies in `tests/common/procs.rs`.

#[path = "../fabric/tests/support/mod.rs"]
mod support;

mod common;

use std::time::Duration;

use common::procs;
use fabcoll::settings::Settings;
use fabcoll::{Collectives, Communicator};

const LIMIT: Duration = Duration::from_secs(300);

/// The communicator of rank `r` on the node `node_of(r)` names, or `None` when this build lacks
/// the network fabric (no libfabric for ofi).
fn connect(r: u32, node_of: fn(u32) -> &'static str) -> Option<Communicator> {
    Settings { node: Some(node_of(r).into()), ..Settings::installed() }.install();
    procs::connect()
}

/// The whole matrix on `p` ranks over `fabric` with mixed routes; rank 0 reports the checks it
/// ran, which must be all of them (no report: the build lacks the fabric).
fn matrix(name: &str, fabric: &str, p: u32, node_of: fn(u32) -> &'static str) {
    let mark = procs::mark_path(name);
    let env = [("FABCOLL_FABRIC", fabric), ("FABCOLL_TIMEOUT", "60"), ("FABCOLL_TEST_MARK", mark.as_str())];
    support::ranks(name, p, LIMIT, &env, |job| {
        let Some(c) = connect(job.rank(), node_of) else { return };
        let ran = procs::matrix(&c).unwrap_or_else(|e| panic!("{e}"));
        let s = c.stats();
        let alone = (0..p).filter(|&q| node_of(q) == node_of(job.rank())).count() == 1;
        assert!(s.network_route_bytes > 0, "rank {}: nothing over the network: {s:?}", c.rank());
        assert!(alone || s.node_route_bytes > 0, "rank {}: nothing over shm: {s:?}", c.rank());
        c.barrier().unwrap();
        if c.rank() == 0 {
            std::fs::write(&mark, ran.to_string()).unwrap();
        }
    });
    if procs::is_parent() {
        match procs::take_mark(&mark) {
            Some(ran) => assert_eq!(ran, procs::matrix_len(p), "{name}: rank 0 did not run every check"),
            None => eprintln!("{name}: skipped, {fabric} not built"),
        }
    }
}

fn two_by_two(r: u32) -> &'static str {
    ["n0", "n1"][r as usize / 2]
}

#[test]
fn tcp_routes_two_nodes_of_two() {
    matrix("tcp_routes_two_nodes_of_two", "tcp", 4, two_by_two);
}

#[test]
fn tcp_routes_three_and_two() {
    matrix("tcp_routes_three_and_two", "tcp", 5, |r| if r < 3 { "n0" } else { "n1" });
}

#[test]
fn tcp_routes_interleaved_nodes() {
    matrix("tcp_routes_interleaved_nodes", "tcp", 4, |r| ["a", "b"][r as usize % 2]);
}

#[test]
fn tcp_routes_one_and_three() {
    matrix("tcp_routes_one_and_three", "tcp", 4, |r| if r == 0 { "x" } else { "y" });
}

#[test]
fn ofi_tcp_routes_two_nodes_of_two() {
    matrix("ofi_tcp_routes_two_nodes_of_two", "ofi:tcp", 4, two_by_two);
}

/// Rank 3 dies between collectives: rank 2 reaches it over shm, ranks 0 and 1 over tcp; every
/// survivor's error names rank 3 (FABCOLL_TIMEOUT 5 s).
#[test]
fn tcp_routes_killed_rank_is_named() {
    let name = "tcp_routes_killed_rank_is_named";
    let env = [("FABCOLL_FABRIC", "tcp"), ("FABCOLL_TIMEOUT", "5")];
    support::ranks(name, 4, LIMIT, &env, |job| {
        let Some(c) = connect(job.rank(), two_by_two) else { return };
        procs::killed_rank(&c, 1000, Duration::from_secs(10), |name, n| {
            fabcoll::fabric::bootstrap::barrier(&*job.store, name, n, Duration::from_secs(30)).unwrap()
        });
    });
}
