//! Tests of every alltoall(v) row: the verifier ([`crate::verify::check`]) over small and larger
//! p, parameters and irregular matrices, plus structural, cost and symmetry checks.

use crate::args::{CollArgs, Collective};
use crate::registry::Algorithm;
use crate::schedule::StepKind;

/// A deterministic irregular p×p matrix with zeros.
fn matrix(p: u32, seed: u64) -> Vec<u64> {
    let mut x = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..p * p)
        .map(|_| {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let v = (x >> 33) % 7;
            if v < 2 {
                0
            } else {
                v - 1
            }
        })
        .collect()
}

/// The flat rows: the hierarchical ones need a topology (`two_level::tests` covers them).
fn rows() -> Vec<&'static Algorithm> {
    super::ALGORITHMS.iter().filter(|a| !a.restrictions.two_level).collect()
}

fn applicable(alg: &Algorithm, p: u32) -> bool {
    !alg.restrictions.pow2 || p.is_power_of_two()
}

/// Every row through the shared per-algorithm sweep (counts, in place, segmenting, irregular
/// alltoallv matrices); the power-of-two rows refuse other p.
#[test]
fn every_row_is_correct() {
    for alg in rows() {
        crate::verify::sweep::sweep(alg, 13);
        if alg.restrictions.pow2 {
            let mut args = CollArgs::new(alg.coll, 0, 6, 2);
            if alg.coll == Collective::Alltoallv {
                args = args.with_counts(matrix(6, 1));
            }
            let e = crate::verify::check(alg, &args).expect_err(alg.name);
            assert!(e.to_string().contains("power-of-two"), "{}: {e}", alg.name);
        }
    }
}

#[test]
fn n_barriers_parameter_is_checked() {
    for alg in rows().into_iter().filter(|a| a.name.ends_with("n_barriers")) {
        for n in [1u64, 2, 3, 100] {
            let args = CollArgs::new(alg.coll, 0, 8, 3).with_param("barriers", n);
            let args = if alg.coll == Collective::Alltoallv { args.with_counts(matrix(8, n)) } else { args };
            crate::verify::check(alg, &args).unwrap_or_else(|e| panic!("{}:{} n={n}: {e}", alg.coll, alg.name));
        }
        let bad = CollArgs::new(alg.coll, 0, 8, 3).with_param("barriers", 0);
        assert!(alg.schedule(&bad).is_err());
    }
}

/// Alltoall(v) only moves data: no row's schedule has a Reduce step (the verifier would only
/// notice one whose result reaches `Recv`).
#[test]
fn no_reduce_steps() {
    for alg in rows() {
        for p in (1..=9u32).filter(|&p| applicable(alg, p)) {
            let args = CollArgs::new(alg.coll, 0, p, 3);
            let args = if alg.coll == Collective::Alltoallv { args.with_counts(matrix(p, 3)) } else { args };
            for in_place in [false, alg.coll == Collective::Alltoall] {
                let mut a = args.clone();
                a.in_place = in_place;
                for r in 0..p {
                    let s = alg.schedule(&a.for_rank(r)).unwrap();
                    let reduces = s.iter().filter(|(_, k, _)| matches!(k, StepKind::Reduce { .. })).count();
                    assert_eq!(reduces, 0, "{}:{} p={p} rank {r} in_place={in_place}", alg.coll, alg.name);
                }
            }
        }
    }
}

#[test]
fn message_counts_match_the_cost_alpha_for_uniform_counts() {
    // For alltoall, each rank's messages (data + synchronization) equal the cost's α for the
    // algorithms whose every message is on the critical path.
    for alg in rows().into_iter().filter(|a| a.coll == Collective::Alltoall) {
        for p in (2..=9u32).filter(|&p| applicable(alg, p)) {
            let args = CollArgs::new(Collective::Alltoall, 0, p, 3);
            let s = alg.schedule(&args).unwrap();
            let sends = s.iter().filter(|(_, k, _)| matches!(k, StepKind::Send { .. })).count();
            let cost = alg.cost_of(&args).unwrap();
            match alg.name {
                "simple" | "spreading_simple" | "pairwise_xor" | "pairwise_ring" => {
                    assert_eq!(sends as f64, cost.alpha, "{} p={p}", alg.name)
                }
                _ => assert!(sends as f64 >= cost.alpha * 0.5, "{} p={p}", alg.name),
            }
        }
    }
}

/// The crate verifier over p = 1..=20, counts {0, 1, p − 1, p, p + 1, 997}, in place or not, and
/// alltoallv with irregular matrices (with zeros, an all-zero one and one with a single sender).
#[test]
fn verifier_sweep() {
    use crate::verify::check;
    for alg in rows() {
        for p in (1..=20u32).filter(|&p| applicable(alg, p)) {
            let p64 = u64::from(p);
            if alg.coll == Collective::Alltoall {
                for count in [0, 1, p64 - 1, p64, p64 + 1, 997] {
                    for in_place in [false, true] {
                        let mut args = CollArgs::new(Collective::Alltoall, 0, p, count);
                        args.in_place = in_place;
                        check(alg, &args).unwrap_or_else(|e| panic!("{e}"));
                    }
                }
                let mut seg = CollArgs::new(Collective::Alltoall, 0, p, 5).with_param("segment", 2);
                check(alg, &seg).unwrap_or_else(|e| panic!("{e}"));
                seg.in_place = true;
                check(alg, &seg).unwrap_or_else(|e| panic!("{e}"));
            } else {
                let mut single = vec![0u64; (p * p) as usize];
                single[(p as usize - 1) * p as usize] = 3;
                let mats =
                    [matrix(p, 7), matrix(p, 8).iter().map(|c| c * 50).collect(), vec![0; (p * p) as usize], single];
                for m in mats {
                    let args = CollArgs::new(Collective::Alltoallv, 0, p, 0).with_counts(m);
                    check(alg, &args).unwrap_or_else(|e| panic!("{e}"));
                }
                // Displacements with gaps, send blocks in reverse order (valid for every rank).
                let m = matrix(p, 9);
                let w = m.iter().copied().max().unwrap_or(0) + 1;
                let mut args = CollArgs::new(Collective::Alltoallv, 0, p, 0).with_counts(m);
                args.displs = Some((0..p64).map(|j| (p64 - 1 - j) * w).collect());
                args.rdispls = Some((0..p64).map(|i| i * (w + 1) + 1).collect());
                check(alg, &args).unwrap_or_else(|e| panic!("{e}"));
            }
            if alg.name.ends_with("n_barriers") {
                for n in [1u64, 2, p64 / 2 + 1, 1000] {
                    let args = CollArgs::new(alg.coll, 0, p, 2).with_param("barriers", n);
                    let args = if alg.coll == Collective::Alltoallv { args.with_counts(matrix(p, n)) } else { args };
                    check(alg, &args).unwrap_or_else(|e| panic!("{e}"));
                }
            }
        }
    }
}

/// For alltoall the registry's cost terms are exactly the simulated critical path on the unit
/// machine, except simple's: its rank order makes every rank send to rank 0 first, and the
/// simulator's single-ported receivers serialize that contention (faraj-yuan's γ term).
#[test]
fn alltoall_cost_is_the_simulated_critical_path() {
    use crate::cost::Machine;
    use crate::sim::simulate_alg;
    for alg in rows().into_iter().filter(|a| a.coll == Collective::Alltoall) {
        for p in [1u32, 2, 3, 5, 6, 8, 9, 12, 16] {
            if !applicable(alg, p) {
                continue;
            }
            for count in [0u64, 3] {
                let args = CollArgs::new(alg.coll, 0, p, count);
                let c = alg.cost_of(&args).unwrap();
                let s = simulate_alg(alg, &args, &Machine::UNIT).unwrap().critical_path;
                if alg.name == "simple" && p > 2 && count > 0 {
                    assert!(s.alpha > c.alpha && s.beta > c.beta, "simple p={p}: {c:?} vs {s:?}");
                } else {
                    assert_eq!((c.alpha, c.beta), (s.alpha, s.beta), "{} p={p} count={count}", alg.name);
                }
            }
        }
    }
}

/// Schedule generation stays near-linear in p: one rank's schedule at p = 16,384 for every row.
#[test]
fn large_p_builds_quickly() {
    for alg in rows().into_iter().filter(|a| a.coll == Collective::Alltoall) {
        let t = std::time::Instant::now();
        let s = alg.schedule(&CollArgs::new(Collective::Alltoall, 77, 16_384, 2)).unwrap();
        let dt = t.elapsed();
        assert!(s.len() >= 2, "{}", alg.name);
        assert!(dt.as_secs_f64() < 5.0, "{}: {dt:?}", alg.name);
    }
}

/// In place, the pair family (and the tournament, also one partner per round) replaces block by block (one block of scratch); the others stage
/// the whole input once. The barrier families add their signals' elements (one to send from, one
/// per signal received).
#[test]
fn in_place_scratch() {
    for alg in rows().into_iter().filter(|a| a.coll == Collective::Alltoall) {
        let mut args = CollArgs::new(Collective::Alltoall, 3, 8, 5);
        args.in_place = true;
        let s = alg.schedule(&args).unwrap();
        let data = if alg.restrictions.pow2 || alg.name == "pairwise_matching" { 5 } else { 40 };
        assert_eq!(s.scratch.first(), Some(&data), "{}", alg.name);
        if alg.name.contains("barrier") {
            let received = s.iter().filter(|(_, k, _)| matches!(k, StepKind::Recv { dst, .. } if dst.len == 1)).count();
            assert_eq!(s.scratch[1..], [1, received as u64], "{}", alg.name);
        }
    }
}

/// The verifier at larger p (up to 64: cubes, squares, primes, powers of two).
#[test]
fn verifier_sweep_large_p() {
    use crate::verify::check;
    for alg in rows() {
        for p in [21u32, 24, 27, 30, 31, 32, 33, 36, 48, 60, 64].into_iter().filter(|&p| applicable(alg, p)) {
            let args = if alg.coll == Collective::Alltoall {
                CollArgs::new(Collective::Alltoall, 0, p, 3)
            } else {
                CollArgs::new(Collective::Alltoallv, 0, p, 0).with_counts(matrix(p, u64::from(p)))
            };
            check(alg, &args).unwrap_or_else(|e| panic!("{e}"));
            if alg.coll == Collective::Alltoall {
                let mut args = args.clone();
                args.in_place = true;
                check(alg, &args).unwrap_or_else(|e| panic!("{e}"));
            }
        }
    }
}

/// The ring-like rows are every rank's rank-0 schedule rotated, the pair rows XOR-relabeled, so
/// the simulator can replay them symmetrically at large p.
#[test]
fn schedules_are_symmetric() {
    use crate::sim::{check_symmetry, Symmetry};
    for alg in rows().into_iter().filter(|a| a.coll == Collective::Alltoall) {
        let sym = match alg.name {
            // the tournament's pairing is neither a rotation nor an XOR relabeling
            "simple" | "mesh_2d" | "mesh_3d" | "pairwise_matching" => continue,
            _ if alg.restrictions.pow2 => Symmetry::Xor,
            _ => Symmetry::Rotation,
        };
        for p in [2u32, 4, 5, 6, 8, 12, 16].into_iter().filter(|&p| applicable(alg, p)) {
            let args = CollArgs::new(Collective::Alltoall, 0, p, 3);
            let s0 = alg.schedule(&args).unwrap();
            for r in 1..p {
                let sr = alg.schedule(&args.for_rank(r)).unwrap();
                check_symmetry(&s0, &sr, sym).unwrap_or_else(|e| panic!("{} p={p}: {e}", alg.name));
            }
        }
    }
}

/// Costs and schedules of huge counts neither overflow nor panic.
#[test]
fn huge_counts() {
    for alg in rows().into_iter().filter(|a| a.coll == Collective::Alltoall) {
        let args = CollArgs::new(Collective::Alltoall, 1, 8, u64::MAX / 16);
        let c = alg.cost_of(&args).unwrap();
        assert!(c.beta.is_finite() && c.beta > 0.0, "{}", alg.name);
        alg.schedule(&args).unwrap();
        let too_big = CollArgs::new(Collective::Alltoall, 1, 8, u64::MAX / 4);
        assert!(alg.schedule(&too_big).is_err(), "{}", alg.name);
    }
}
