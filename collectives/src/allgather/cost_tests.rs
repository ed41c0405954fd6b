//! Tests over every algorithm of the data-movement and scan operations (barrier, bcast, gather(v),
//! scatter(v), allgather(v), scan, exscan): cost formulas against the simulator, the full
//! verification matrix and large-p build times.

use crate::args::{CollArgs, Collective};
use crate::registry::Algorithm;

/// The full matrix (p = 1..=20, count up to 997) through the verifier over every algorithm of
/// these operations; slow in debug builds, so run with `--release --ignored`.
#[test]
#[ignore]
fn full_matrix() {
    use Collective::*;
    let mine = [Barrier, Bcast, Gather, Gatherv, Scatter, Scatterv, Allgather, Allgatherv, Scan, Exscan];
    for alg in crate::registry::all().filter(|a| mine.contains(&a.coll)) {
        let t = std::time::Instant::now();
        crate::verify::sweep::sweep_counts(alg, 20, 997);
        eprintln!("{}:{} ok in {:?}", alg.coll, alg.name, t.elapsed());
    }
}

/// Each algorithm's cost terms equal the simulator's critical path (on α-only, β-only and
/// γ-only machines) for powers of two, where the papers' formulas are exact (hierarchical ones on
/// two nodes of p/2 ranks, where every level's term is on the path); with
/// `--ignored --nocapture`, [`cost_table`] prints the comparison for other p too.
#[test]
fn cost_matches_simulator_for_powers_of_two() {
    for (alg, p, c, s) in cost_rows(&[2, 4, 8, 16]) {
        assert_eq!(c, s, "{}:{} p={p}: formula vs simulator", alg.coll, alg.name);
    }
}

#[test]
#[ignore]
fn cost_table() {
    for (alg, p, c, s) in cost_rows(&[5, 7, 8, 12, 16]) {
        println!("{:>10}:{:<38} p={p:>2} formula {c:?} sim {s:?}", alg.coll.name(), alg.name);
    }
}

/// (algorithm, p, formula terms, simulated terms) for these operations, count 240 of 1 byte.
fn cost_rows(ps: &[u32]) -> Vec<(&'static Algorithm, u32, [f64; 3], [f64; 3])> {
    use crate::cost::Machine;
    use Collective::*;
    let mine = [Barrier, Bcast, Gather, Gatherv, Scatter, Scatterv, Allgather, Allgatherv, Scan, Exscan];
    let unit = |i: usize| Machine {
        alpha: f64::from(u8::from(i == 0)),
        beta: f64::from(u8::from(i == 1)),
        gamma: f64::from(u8::from(i == 2)),
        f_alpha: 1.0,
        f_beta: 1.0,
    };
    let mut rows = Vec::new();
    for alg in crate::registry::all().filter(|a| mine.contains(&a.coll)) {
        for &p in ps {
            let mut a = CollArgs::new(alg.coll, 0, p, 240).with_root(p / 3);
            a.elem_size = 1;
            if alg.coll.is_vector() {
                a = a.with_counts(vec![240u64; p as usize]);
            }
            let a = crate::two_level::test_placement(alg, a);
            if alg.restrictions.violated(&a).is_some() {
                continue;
            }
            let c = alg.cost_of(&a).unwrap();
            let s: Vec<f64> = (0..3).map(|i| crate::sim::simulate_alg(alg, &a, &unit(i)).unwrap().time).collect();
            rows.push((alg, p, [c.alpha, c.beta, c.gamma], [s[0], s[1], s[2]]));
        }
    }
    rows
}

/// Schedule generation time at large p (rank 0 and rank p/2, root 0); `--ignored --nocapture`.
#[test]
#[ignore]
fn large_p_build_times() {
    use Collective::*;
    let mine = [Barrier, Bcast, Gather, Gatherv, Scatter, Scatterv, Allgather, Allgatherv, Scan, Exscan];
    let p = 1u32 << 16;
    for alg in crate::registry::all().filter(|a| mine.contains(&a.coll)) {
        for pp in [p, p - 1] {
            let mut a = CollArgs::new(alg.coll, 0, pp, 4);
            if alg.coll.is_vector() {
                a = a.with_counts(vec![4u64; pp as usize]);
            }
            let a = crate::two_level::test_placement(alg, a);
            if alg.restrictions.violated(&a).is_some() {
                continue;
            }
            let t = std::time::Instant::now();
            let steps: usize = [0, pp / 2].iter().map(|&r| alg.schedule(&a.for_rank(r)).unwrap().len()).sum();
            eprintln!("{}:{} p={pp}: {steps} steps in {:?}", alg.coll, alg.name, t.elapsed());
        }
    }
}
