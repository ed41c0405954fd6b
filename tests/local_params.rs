//! Algorithm parameters through the real executor over the local backend, p ∈ {1,2,3,4,5,7,8},
//! counts {0, 1, p+1, 100,003}, against the reference: the generic `segment` pipelining on every
//! registered algorithm (also non-commutative reductions and the in-place forms), and alltoall's
//! `barriers` on every algorithm that declares it, over its whole range (1 … clamped above p-2).
//! `local_matrix` runs the same algorithms with default parameters.

mod common;

use fabcoll::collectives::{registry, Collective};
use fabcoll::{Communicator, Options};

const PS: [u32; 7] = [1, 2, 3, 4, 5, 7, 8];

/// A segment size giving several segments with a short last one for each count of the matrix.
fn segment_for(count: usize) -> u64 {
    match count {
        0 | 1 => 1,
        c if c < 100 => 2,
        _ => 7_919,
    }
}

fn on_every_p(f: impl Fn(&Communicator, u32) -> Result<usize, String> + Sync) {
    for p in PS {
        let comms = Communicator::local_with(p as usize, common::cfg()).unwrap();
        let ran = std::sync::atomic::AtomicUsize::new(0);
        common::local_job(comms, |c| {
            let n = f(c, p)?;
            ran.fetch_max(n, std::sync::atomic::Ordering::Relaxed);
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(ran.into_inner() > 0, "p={p}: nothing ran");
    }
}

fn segmented(colls: &[Collective]) {
    on_every_p(|c, p| {
        let mut ran = 0;
        for &coll in colls {
            for count in [0usize, 1, p as usize + 1, 100_003] {
                for noncomm in [false, true] {
                    if noncomm && !coll.is_reduction() {
                        continue;
                    }
                    for alg in common::algorithms(&common::args_for(coll, p, count, !noncomm)) {
                        let opts = Options::algorithm(alg).param("segment", segment_for(count));
                        common::run_with(c, coll, &opts, count, noncomm)?;
                        ran += 1;
                    }
                }
            }
        }
        Ok(ran)
    });
}

#[test]
fn segment_rooted() {
    segmented(&[Collective::Barrier, Collective::Bcast, Collective::Reduce, Collective::Gather, Collective::Scatter]);
}

#[test]
fn segment_reductions() {
    segmented(&[
        Collective::Allreduce,
        Collective::ReduceScatter,
        Collective::ReduceScatterBlock,
        Collective::Scan,
        Collective::Exscan,
    ]);
}

#[test]
fn segment_gathers() {
    segmented(&[Collective::Allgather, Collective::Gatherv, Collective::Scatterv, Collective::Allgatherv]);
}

#[test]
fn segment_alltoalls() {
    segmented(&[Collective::Alltoall, Collective::Alltoallv]);
}

#[test]
fn segment_in_place() {
    on_every_p(|c, p| {
        let mut ran = 0;
        for coll in common::IN_PLACE {
            for count in [0usize, 1, p as usize + 1, 100_003] {
                for alg in common::algorithms(&common::in_place_args(coll, p, count)) {
                    let opts = Options::algorithm(alg).param("segment", segment_for(count));
                    common::run_in_place(c, coll, &opts, count)?;
                    ran += 1;
                }
            }
        }
        Ok(ran)
    });
}

/// The parameter really reaches the executor: at p = 4 and 100,003 elements, no rank sends fewer
/// messages with `segment` than without, and every algorithm that moves data sends more in all
/// (each message of ≥ 25,000 elements splits into several).
#[test]
fn segment_splits_the_messages() {
    let p = 4;
    let count = 100_003;
    let comms = Communicator::local_with(p as usize, common::cfg()).unwrap();
    let totals = std::sync::Mutex::new(std::collections::BTreeMap::<String, (u64, u64)>::new());
    common::local_job(comms, |c| {
        let msgs = |c: &Communicator| {
            let s = c.stats();
            s.eager_msgs + s.zcopy_msgs
        };
        for coll in Collective::ALL.into_iter().filter(|&k| k != Collective::Barrier) {
            for alg in common::algorithms(&common::args_for(coll, p, count, true)) {
                let before = msgs(c);
                common::run_one(c, coll, Some(alg), count, false)?;
                let plain = msgs(c) - before;
                let opts = Options::algorithm(alg).param("segment", segment_for(count));
                common::run_with(c, coll, &opts, count, false)?;
                let segmented = msgs(c) - before - plain;
                if segmented < plain {
                    return Err(format!("{coll}:{alg} rank {}: {segmented} messages segmented, {plain} not", c.rank()));
                }
                let mut t = totals.lock().unwrap();
                let e = t.entry(format!("{coll}:{alg}")).or_default();
                e.0 += plain;
                e.1 += segmented;
            }
        }
        Ok(())
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let totals = totals.into_inner().unwrap();
    assert!(totals.len() > 50, "only {} algorithms ran", totals.len());
    for (alg, (plain, segmented)) in totals {
        assert!(segmented > plain, "{alg}: {segmented} messages with segment={}, {plain} without", segment_for(count));
    }
}

/// Every algorithm parameter other than `segment`, over its range: the default, the minimum, 2,
/// p-2, and far above the clamp.
#[test]
fn every_declared_parameter() {
    let declared: Vec<_> = registry::all().filter(|a| !a.params.is_empty()).collect();
    assert!(declared.iter().any(|a| a.params.iter().any(|s| s.name == "barriers")), "no algorithm declares barriers");
    on_every_p(|c, p| {
        let mut ran = 0;
        for alg in &declared {
            for spec in alg.params {
                let mut values = vec![spec.default, spec.min, 2, u64::from(p.saturating_sub(2)), 1_000];
                values.retain(|&v| v >= spec.min && v <= spec.max);
                values.sort_unstable();
                values.dedup();
                for count in [0usize, 1, p as usize + 1, 100_003] {
                    let args = common::args_for(alg.coll, p, count, true);
                    if alg.restrictions.violated(&args).is_some() {
                        continue;
                    }
                    for &v in &values {
                        let opts = Options::algorithm(alg.name).param(spec.name, v);
                        common::run_with(c, alg.coll, &opts, count, false)?;
                        ran += 1;
                    }
                }
            }
        }
        Ok(ran)
    });
}
