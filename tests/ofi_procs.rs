//! Multi-process runs over libfabric (`ofi:tcp`, `ofi:shm`): every collective × algorithm
//! against the reference at p = 3, defaults at p = 4, and a killed rank named by the survivors.
//! Skipped (with a note) when the build has no libfabric.

#[path = "../fabric/tests/support/mod.rs"]
mod support;

mod common;

use std::time::{Duration, Instant};

use fabcoll::collectives::Collective;
use fabcoll::{Collectives, Communicator, Error, ReduceOp};

const LIMIT: Duration = Duration::from_secs(300);

/// The communicator, or `None` when this build has no ofi backend.
fn connect() -> Option<Communicator> {
    match Communicator::from_env() {
        Ok(c) => Some(c),
        Err(Error::Fabric(fabcoll::fabric::Error::Unavailable { reason, .. })) => {
            eprintln!("skipped: {reason}");
            None
        }
        Err(e) => panic!("communicator: {e}"),
    }
}

fn matrix(name: &str, provider: &str, p: u32, all_algs: bool) {
    let fabric = format!("ofi:{provider}");
    let mark = std::env::var("FABCOLL_TEST_MARK")
        .unwrap_or_else(|_| format!("{}/fabcoll-{name}-{}", std::env::temp_dir().display(), std::process::id()));
    let env = [("FABCOLL_FABRIC", fabric.as_str()), ("FABCOLL_TIMEOUT", "60"), ("FABCOLL_TEST_MARK", mark.as_str())];
    support::ranks(name, p, LIMIT, &env, |_job| {
        let Some(c) = connect() else { return };
        let mut ran = 0;
        for coll in Collective::ALL {
            for count in [0, 1, p as usize + 1, 100_003] {
                for noncomm in [false, true] {
                    if noncomm && !coll.is_reduction() {
                        continue;
                    }
                    let args = common::args_for(coll, p, count, !noncomm);
                    let algs: Vec<Option<&str>> = if all_algs {
                        common::algorithms(&args).into_iter().map(Some).chain([None]).collect()
                    } else {
                        vec![None]
                    };
                    for alg in algs {
                        common::run_one(&c, coll, alg, count, noncomm).unwrap_or_else(|e| panic!("{e}"));
                        ran += 1;
                    }
                }
            }
        }
        c.barrier().unwrap();
        if c.rank() == 0 {
            std::fs::write(&mark, ran.to_string()).unwrap();
        }
    });
    if std::env::var("FABCOLL_TEST_CHILD").is_err() {
        match std::fs::read_to_string(&mark) {
            Ok(ran) => {
                let _ = std::fs::remove_file(&mark);
                let ran: usize = ran.parse().unwrap();
                assert!(ran >= 60, "only {ran} collectives ran");
                eprintln!("{name}: {ran} collectives verified per rank over {fabric}");
            }
            // No mark: the children skipped (no libfabric in this build) and said so.
            Err(_) => eprintln!("{name}: skipped, ofi backend not built"),
        }
    }
}

#[test]
fn ofi_tcp_all_algorithms_p3() {
    matrix("ofi_tcp_all_algorithms_p3", "tcp", 3, true);
}

#[test]
fn ofi_tcp_defaults_p4() {
    matrix("ofi_tcp_defaults_p4", "tcp", 4, false);
}

#[test]
fn ofi_tcp_defaults_p2() {
    matrix("ofi_tcp_defaults_p2", "tcp", 2, false);
}

#[test]
fn ofi_tcp_defaults_p5() {
    matrix("ofi_tcp_defaults_p5", "tcp", 5, false);
}

#[test]
fn ofi_shm_defaults_p4() {
    matrix("ofi_shm_defaults_p4", "shm", 4, false);
}

#[test]
fn ofi_shm_all_algorithms_p3() {
    matrix("ofi_shm_all_algorithms_p3", "shm", 3, true);
}

#[test]
fn ofi_tcp_killed_rank_is_named() {
    let env = [("FABCOLL_FABRIC", "ofi:tcp"), ("FABCOLL_TIMEOUT", "5")];
    support::ranks("ofi_tcp_killed_rank_is_named", 4, LIMIT, &env, |job| {
        let Some(c) = connect() else { return };
        let mut x = vec![1u64; 1000];
        c.allreduce_in_place(&mut x, &ReduceOp::Sum).unwrap();
        if c.rank() == 3 {
            std::process::exit(0);
        }
        std::thread::sleep(Duration::from_millis(200));
        let t0 = Instant::now();
        let e = c.allreduce_in_place(&mut x, &ReduceOp::Sum).unwrap_err();
        assert!(t0.elapsed() < Duration::from_secs(10), "took {:?}", t0.elapsed());
        let named = match &e {
            Error::Timeout { waiting_for, .. } => waiting_for == &[3],
            Error::PeerLost { peers, .. } => peers == &[3],
            _ => false,
        };
        assert!(named, "rank {}: error does not name rank 3: {e}", c.rank());
        fabcoll::fabric::bootstrap::barrier(&*job.store, "survivors", 3, Duration::from_secs(30)).unwrap();
    });
}
