//! Every collective × every registered algorithm (restrictions respected) through the real
//! executor over the local backend, p ∈ {1,2,3,4,5,7,8}, counts {0, 1, p+1, 100,003}, compared
//! with a reference computation; reductions also with a non-commutative op where allowed.

mod common;

use fabcoll::collectives::Collective;
use fabcoll::Communicator;

fn matrix(ps: &[u32], colls: &[Collective]) {
    for &p in ps {
        let comms = Communicator::local_with(p as usize, common::cfg()).unwrap();
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
