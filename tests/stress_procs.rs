//! Seeded random stress over processes (see `tests/stress`): shm at p = 2, 4 and 5, tcp at p = 3
//! and 4, each rank a process of the test harness (`fabric/tests/support`) with a time limit.
//! The parent draws the seed (or takes `FABCOLL_STRESS_SEED`) and passes it to every rank;
//! `FABCOLL_STRESS_CALLS` makes it a soak run.

#[path = "../fabric/tests/support/mod.rs"]
mod support;

mod common;
mod stress;

use std::time::Duration;

use common::procs;
use fabcoll::{Collectives, Communicator};

/// Room for a soak run; the short default takes seconds.
const LIMIT: Duration = Duration::from_secs(600);

fn on_fabric(name: &str, fabric: &str, p: u32) {
    let mark = procs::mark_path(name);
    // The children read the seed and the length the parent chose.
    let seed = stress::seed().to_string();
    let calls = stress::calls(120).to_string();
    if procs::is_parent() {
        eprintln!("{name}: FABCOLL_STRESS_SEED={seed} FABCOLL_STRESS_CALLS={calls}");
    }
    let env = [
        ("FABCOLL_FABRIC", fabric),
        ("FABCOLL_TIMEOUT", "30"),
        ("FABCOLL_TEST_MARK", mark.as_str()),
        ("FABCOLL_STRESS_SEED", seed.as_str()),
        ("FABCOLL_STRESS_CALLS", calls.as_str()),
    ];
    let t = std::time::Instant::now();
    support::ranks(name, p, LIMIT, &env, |_job| {
        let c = Communicator::from_env().expect("communicator");
        let ran = stress::run(&c, stress::seed(), stress::calls(0)).unwrap_or_else(|e| panic!("{e}"));
        c.barrier().unwrap();
        if c.rank() == 0 {
            std::fs::write(&mark, ran.to_string()).unwrap();
        }
    });
    if procs::is_parent() {
        let ran = procs::take_mark(&mark).expect("the ranks left no mark");
        assert_eq!(ran.to_string(), calls, "{name}: rank 0 verified {ran} calls, want {calls}");
        eprintln!("{name}: {ran} calls verified per rank over {fabric} in {:.1?}", t.elapsed());
    }
}

#[test]
fn stress_shm_p2() {
    on_fabric("stress_shm_p2", "shm", 2);
}

#[test]
fn stress_shm_p4() {
    on_fabric("stress_shm_p4", "shm", 4);
}

#[test]
fn stress_shm_p5() {
    on_fabric("stress_shm_p5", "shm", 5);
}

#[test]
fn stress_tcp_p3() {
    on_fabric("stress_tcp_p3", "tcp", 3);
}

#[test]
fn stress_tcp_p4() {
    on_fabric("stress_tcp_p4", "tcp", 4);
}
