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

/// MPI_IN_PLACE through every algorithm that allows it (restriction `no_in_place` respected).
#[test]
fn in_place_every_algorithm() {
    use fabcoll::{Collectives, Options, ReduceOp};
    for p in PS {
        let comms = Communicator::local_with(p as usize, common::cfg()).unwrap();
        common::local_job(comms, |c| {
            let r = c.rank();
            let root = p / 2;
            for coll in [
                Collective::Allreduce,
                Collective::Scan,
                Collective::Exscan,
                Collective::Reduce,
                Collective::Allgather,
                Collective::Gather,
            ] {
                for count in [0usize, 1, p as usize + 1, 100_003] {
                    let mut args = common::args_for(coll, p, count, true).with_root(root);
                    args.in_place = true;
                    for alg in common::algorithms(&args) {
                        let ctx = format!("{coll}:{alg} in place p={p} count={count} rank={r}");
                        let opts = Options::algorithm(alg);
                        let w = c.with(&opts);
                        let sum = |ranks: std::ops::Range<u32>, i: usize| ranks.map(|q| common::val(q, i)).sum::<i64>();
                        let mine: Vec<i64> = (0..count).map(|i| common::val(r, i)).collect();
                        let (got, want): (Vec<i64>, Vec<i64>) = match coll {
                            Collective::Allgather | Collective::Gather => {
                                let n = p as usize * count;
                                let mut buf = vec![common::UNTOUCHED; n];
                                let all: Vec<i64> =
                                    (0..p).flat_map(|q| (0..count).map(move |i| common::val(q, i))).collect();
                                if coll == Collective::Gather && r != root {
                                    let mut b = mine.clone();
                                    w.gather_in_place(&mut b, count, root).map_err(|e| format!("{ctx}: {e}"))?;
                                    continue;
                                }
                                buf[r as usize * count..(r as usize + 1) * count].copy_from_slice(&mine);
                                if coll == Collective::Gather {
                                    w.gather_in_place(&mut buf, count, root)
                                } else {
                                    w.allgather_in_place(&mut buf)
                                }
                                .map_err(|e| format!("{ctx}: {e}"))?;
                                (buf, all)
                            }
                            _ => {
                                let mut buf = mine.clone();
                                let op = ReduceOp::Sum;
                                match coll {
                                    Collective::Allreduce => w.allreduce_in_place(&mut buf, &op),
                                    Collective::Scan => w.scan_in_place(&mut buf, &op),
                                    Collective::Exscan => w.exscan_in_place(&mut buf, &op),
                                    _ => w.reduce_in_place(&mut buf, &op, root),
                                }
                                .map_err(|e| format!("{ctx}: {e}"))?;
                                let want: Vec<i64> = match coll {
                                    Collective::Allreduce => (0..count).map(|i| sum(0..p, i)).collect(),
                                    Collective::Scan => (0..count).map(|i| sum(0..r + 1, i)).collect(),
                                    Collective::Exscan if r == 0 => mine.clone(),
                                    Collective::Exscan => (0..count).map(|i| sum(0..r, i)).collect(),
                                    _ if r == root => (0..count).map(|i| sum(0..p, i)).collect(),
                                    _ => mine.clone(),
                                };
                                (buf, want)
                            }
                        };
                        if let Some(i) = (0..got.len()).find(|&i| got[i] != want[i]) {
                            return Err(format!("{ctx}: element {i}: got {}, want {}", got[i], want[i]));
                        }
                    }
                }
            }
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
