//! Multi-process runs over the `shm` backend (each rank a process re-executed from this test
//! binary, see `fabric/tests/support`): every collective × algorithm against the reference, and a
//! killed rank turning into an error that names it on every survivor.

#[path = "../fabric/tests/support/mod.rs"]
mod support;

mod common;

use std::time::{Duration, Instant};

use fabcoll::collectives::Collective;
use fabcoll::{Collectives, Communicator, Error, ReduceOp};

const LIMIT: Duration = Duration::from_secs(240);

fn matrix_on(c: &Communicator, counts: &[usize], all_algs: bool) -> Result<usize, String> {
    let p = c.size();
    let mut ran = 0;
    for coll in Collective::ALL {
        for &count in counts {
            for noncomm in [false, true] {
                if noncomm && !coll.is_reduction() {
                    continue;
                }
                let args = common::args_for(coll, p, count, !noncomm);
                if all_algs {
                    for alg in common::algorithms(&args) {
                        common::run_one(c, coll, Some(alg), count, noncomm)?;
                        ran += 1;
                    }
                }
                common::run_one(c, coll, None, count, noncomm)?;
                ran += 1;
            }
        }
    }
    Ok(ran)
}

fn shm_matrix(name: &str, p: u32, all_algs: bool) {
    // Rank 0 leaves a mark so the parent knows the children really ran the matrix.
    let mark = std::env::var("FABCOLL_TEST_MARK")
        .unwrap_or_else(|_| format!("{}/fabcoll-{name}-{}", std::env::temp_dir().display(), std::process::id()));
    let env = [("FABCOLL_FABRIC", "shm"), ("FABCOLL_TIMEOUT", "30"), ("FABCOLL_TEST_MARK", mark.as_str())];
    support::ranks(name, p, LIMIT, &env, |_job| {
        let c = Communicator::from_env().expect("communicator");
        let counts = [0, 1, p as usize + 1, 100_003];
        let ran = matrix_on(&c, &counts, all_algs).unwrap_or_else(|e| panic!("{e}"));
        c.barrier().unwrap(); // nobody leaves while a peer may still write
        if c.rank() == 0 {
            std::fs::write(&mark, ran.to_string()).unwrap();
        }
    });
    if std::env::var("FABCOLL_TEST_CHILD").is_err() {
        let ran: usize = std::fs::read_to_string(&mark).expect("children left no mark").parse().unwrap();
        let _ = std::fs::remove_file(&mark);
        assert!(ran >= 60, "only {ran} collectives ran");
        eprintln!("{name}: {ran} collectives verified per rank");
    }
}

#[test]
fn shm_all_algorithms_p4() {
    shm_matrix("shm_all_algorithms_p4", 4, true);
}

#[test]
fn shm_all_algorithms_p7() {
    shm_matrix("shm_all_algorithms_p7", 7, true);
}

#[test]
fn shm_default_algorithms_p2() {
    shm_matrix("shm_default_algorithms_p2", 2, false);
}

#[test]
fn shm_all_algorithms_p1() {
    shm_matrix("shm_all_algorithms_p1", 1, true);
}

#[test]
fn shm_all_algorithms_p3() {
    shm_matrix("shm_all_algorithms_p3", 3, true);
}

#[test]
fn shm_all_algorithms_p5() {
    shm_matrix("shm_all_algorithms_p5", 5, true);
}

#[test]
fn shm_all_algorithms_p8() {
    shm_matrix("shm_all_algorithms_p8", 8, true);
}

#[test]
fn shm_killed_rank_is_named() {
    support::ranks(
        "shm_killed_rank_is_named",
        4,
        LIMIT,
        &[("FABCOLL_FABRIC", "shm"), ("FABCOLL_TIMEOUT", "5")],
        |job| {
            let c = Communicator::from_env().expect("communicator");
            let mut x = vec![1u64; 1000];
            c.allreduce_in_place(&mut x, &ReduceOp::Sum).unwrap();
            if c.rank() == 3 {
                std::process::exit(0); // dies between collectives
            }
            std::thread::sleep(Duration::from_millis(200));
            let t0 = Instant::now();
            let e = c.allreduce_in_place(&mut x, &ReduceOp::Sum).unwrap_err();
            assert!(t0.elapsed() < Duration::from_secs(10), "took {:?}", t0.elapsed());
            match &e {
                Error::Timeout { waiting_for, .. } => assert_eq!(waiting_for, &[3], "rank {}: {e}", c.rank()),
                Error::PeerLost { peers, .. } => assert_eq!(peers, &[3], "rank {}: {e}", c.rank()),
                other => panic!("rank {}: error does not name rank 3: {other}", c.rank()),
            }
            eprintln!("rank {}: {e}", c.rank());
            // The communicator is now broken, and says so.
            assert!(matches!(c.barrier(), Err(Error::Broken(_))));
            // Survivors leave together (a survivor that exits early would look dead to the others).
            fabcoll::fabric::bootstrap::barrier(&*job.store, "survivors", 3, Duration::from_secs(30)).unwrap();
        },
    );
}

#[test]
fn shm_env_algorithm_override_and_checked_mode() {
    let env =
        [("FABCOLL_FABRIC", "shm"), ("FABCOLL_ALGO", "allreduce:ring,alltoall:pairwise_xor"), ("FABCOLL_CHECK", "1")];
    support::ranks("shm_env_algorithm_override_and_checked_mode", 3, LIMIT, &env, |_job| {
        let c = Communicator::from_env().expect("communicator");
        let x = [c.rank() as i32; 10];
        let mut y = [0i32; 10];
        let send = [c.rank() as i32; 3];
        let mut recv = [0i32; 3];
        c.scope(|s| {
            let a = s.allreduce(&x, &mut y, &ReduceOp::Sum)?;
            assert_eq!(s.algorithm_of(&a), Some("ring"));
            // pairwise_xor needs a power of two: the override does not apply at p = 3.
            let b = s.alltoall(&send, &mut recv)?;
            assert_ne!(s.algorithm_of(&b), Some("pairwise_xor"));
            a.wait()?;
            b.wait()
        })
        .unwrap();
        assert_eq!(y, [3; 10]);
        assert_eq!(recv, [0, 1, 2]);
        // Checked mode is on from the environment: a mismatch is reported, not run.
        let n = if c.rank() == 1 { 2 } else { 1 };
        let e = c.bcast(&mut vec![0u8; n], 0).unwrap_err();
        assert!(matches!(e, Error::Mismatch(_)), "{e}");
        c.barrier().unwrap();
    });
}
