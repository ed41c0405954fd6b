//! Every collective × every registered algorithm (restrictions respected) through the real
//! executor over the local backend, p ∈ {1,2,3,4,5,7,8}, counts {0, 1, p+1, 100,003}, compared
//! with a reference computation; reductions also with a non-commutative op where allowed. The
//! small counts take the mailboxes; `every_collective_on_the_engine_alone` runs them on the
//! engine as well.

mod common;

use fabcoll::collectives::Collective;
use fabcoll::Communicator;

fn matrix(ps: &[u32], colls: &[Collective]) {
    matrix_with(common::cfg(), ps, colls);
}

fn matrix_with(cfg: fabcoll::ExecConfig, ps: &[u32], colls: &[Collective]) {
    for &p in ps {
        let comms = Communicator::local_with(p as usize, cfg.clone()).unwrap();
        common::local_job(comms, |c| {
            let mut ran = 0;
            for &coll in colls {
                for count in [0usize, 1, p as usize + 1, 100_003] {
                    for noncomm in [false, true] {
                        if noncomm && !coll.is_reduction() {
                            continue;
                        }
                        let args = common::args_for(coll, p, count, !noncomm);
                        for alg in common::algorithms(&args) {
                            common::run_one(c, coll, Some(alg), count, noncomm)?;
                            ran += 1;
                        }
                        common::run_one(c, coll, None, count, noncomm)?;
                    }
                }
            }
            assert!(ran > 0);
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{e}"));
    }
}

const PS: [u32; 7] = [1, 2, 3, 4, 5, 7, 8];

#[test]
fn rooted() {
    matrix(&PS, &[Collective::Barrier, Collective::Bcast, Collective::Reduce, Collective::Gather, Collective::Scatter]);
}

#[test]
fn reductions() {
    matrix(
        &PS,
        &[
            Collective::Allreduce,
            Collective::ReduceScatter,
            Collective::ReduceScatterBlock,
            Collective::Scan,
            Collective::Exscan,
        ],
    );
}

#[test]
fn gathers() {
    matrix(&PS, &[Collective::Allgather, Collective::Gatherv, Collective::Scatterv, Collective::Allgatherv]);
}

#[test]
fn alltoalls() {
    matrix(&PS, &[Collective::Alltoall, Collective::Alltoallv]);
}

/// Small calls take the mailboxes by default (`FABCOLL_MAILBOX`); the engine's eager path
/// keeps its own coverage at the small counts with the mailboxes off.
#[test]
fn every_collective_on_the_engine_alone() {
    let cfg = fabcoll::ExecConfig { mailbox_limit: 0, ..common::cfg() };
    matrix_with(cfg, &[2, 3, 5, 8], &Collective::ALL);
}

/// MPI_IN_PLACE through every algorithm that allows it (restriction `no_in_place` respected).
#[test]
fn in_place_every_algorithm() {
    for p in PS {
        let comms = Communicator::local_with(p as usize, common::cfg()).unwrap();
        common::local_job(comms, |c| {
            let mut ran = 0;
            for coll in common::IN_PLACE {
                for count in [0usize, 1, p as usize + 1, 100_003] {
                    for alg in common::algorithms(&common::in_place_args(coll, p, count)) {
                        common::run_in_place(c, coll, &fabcoll::Options::algorithm(alg), count)?;
                        ran += 1;
                    }
                    common::run_in_place(c, coll, &fabcoll::Options::default(), count)?;
                }
            }
            assert!(ran > 0);
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{e}"));
    }
}

/// The narrow immediate layout of 32-bit backends (5 context, 6 sequence, 14 index bits): every
/// collective with its default algorithm, plus a pipelined allreduce with more than 2^14
/// messages per peer, whose eager messages beyond the index range take the rendezvous path.
#[test]
fn narrow_immediates() {
    use fabcoll::{Collectives, Options, ReduceOp};
    let cfg = fabcoll::ExecConfig { imm_bits: 32, ..common::cfg() };
    for p in [3u32, 4] {
        let comms = Communicator::local_with(p as usize, cfg.clone()).unwrap();
        let stats = std::sync::Mutex::new(Vec::new());
        common::local_job(comms, |c| {
            for coll in Collective::ALL {
                for count in [0usize, 1, p as usize + 1, 100_003] {
                    common::run_one(c, coll, None, count, false)?;
                }
            }
            // ring with segment = 1 element: 2(p-1)·count/p messages to the next rank.
            let opts = Options::algorithm("ring").param("segment", 1);
            let n = 30_000;
            let x = vec![1u32; n];
            let mut y = vec![0u32; n];
            c.with(&opts).allreduce(&x, &mut y, &ReduceOp::Sum).map_err(|e| e.to_string())?;
            if y.iter().any(|&v| v != p) {
                return Err("pipelined allreduce with narrow immediates is wrong".into());
            }
            stats.lock().unwrap().push(c.stats());
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{e}"));
        let s = stats.into_inner().unwrap();
        assert!(s.iter().all(|s| s.rts_msgs > 0 && s.eager_msgs > 0), "{s:?}");
    }
}
