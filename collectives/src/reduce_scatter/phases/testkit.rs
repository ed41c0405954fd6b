//! Test-only sweep of the reduction algorithms through the shared verifier (`crate::verify`):
//! every rank count up to a bound, every root, edge counts, irregular counts for reduce_scatter,
//! commutative and non-commutative ops, in place where the operation defines it.

use crate::args::{CollArgs, Collective};
use crate::registry::Algorithm;

/// Verifies `alg` over p = 1..=pmax, every root (rooted ops), counts {0, 1, p−1, p, p+1, 97}
/// (irregular counts for reduce_scatter), commutative and (unless restricted) non-commutative,
/// in place where `in_place` is set, and the largest count also pipelined in segments of 16.
pub(crate) fn sweep(alg: &Algorithm, pmax: u32, in_place: bool) {
    sweep_counts(alg, pmax, in_place, 97);
}

/// [`sweep`] with `big` as the largest count.
pub(crate) fn sweep_counts(alg: &Algorithm, pmax: u32, in_place: bool, big: u64) {
    for p in 1..=pmax {
        let roots = if alg.coll == Collective::Reduce { p } else { 1 };
        for root in 0..roots {
            for count in [0, 1, u64::from(p) - 1, u64::from(p), u64::from(p) + 1, big] {
                for comm in [true, false] {
                    if !comm && alg.restrictions.commutative {
                        continue;
                    }
                    for ip in [false, true] {
                        if ip && !in_place {
                            continue;
                        }
                        let mut a = CollArgs::new(alg.coll, 0, p, count).with_root(root).with_commutative(comm);
                        if alg.coll == Collective::ReduceScatter {
                            let c: Vec<u64> = (0..u64::from(p))
                                .map(|i| (i * 7 + count) % 5 * (count % 3) + if i % 3 == 0 { count / 4 } else { 0 })
                                .collect();
                            a = a.with_counts(c);
                        }
                        a.in_place = ip;
                        if alg.restrictions.violated(&a).is_some() {
                            continue;
                        }
                        // the big count also runs pipelined (the registry's segmenting pass)
                        let segs: &[u64] = if count == big { &[0, 16] } else { &[0] };
                        for &seg in segs {
                            let a = if seg > 0 { a.clone().with_param(crate::args::SEGMENT, seg) } else { a.clone() };
                            if let Err(e) = crate::verify::check(alg, &a) {
                                let what = format!("p={p} root={root} count={count} comm={comm} in_place={ip}");
                                panic!("{}:{} {what} segment={seg}: {e}", alg.coll, alg.name);
                            }
                        }
                    }
                }
            }
        }
    }
}

/// For p = 2^k (where the papers' formulas are exact) the cost rows must match the replay's
/// critical path in α and β (γ may be lower in the replay where reductions overlap transfers).
#[test]
fn pow2_cost_rows_match_the_replay() {
    use crate::cost::Machine;
    for op in [Collective::Allreduce, Collective::Reduce, Collective::ReduceScatterBlock] {
        for alg in crate::registry::for_op(op) {
            // the direct sends to the root overlap the last exchange steps
            if op == Collective::Reduce && alg.name == "ring" {
                continue;
            }
            for p in [2u32, 4, 8, 16] {
                let a = CollArgs::new(op, 0, p, 64 * 3).with_root(u32::from(op == Collective::Reduce));
                let c = alg.cost_of(&a).unwrap();
                let cp = crate::sim::simulate_alg(alg, &a, &Machine::UNIT).unwrap().critical_path;
                let close = |x: f64, y: f64| (x - y).abs() <= 1e-6 * x.abs().max(1.0);
                assert!(
                    close(c.alpha, cp.alpha) && close(c.beta, cp.beta) && cp.gamma <= c.gamma + 1e-6,
                    "{op}:{} p={p}: formula {c:?}, replay {cp:?}",
                    alg.name
                );
            }
        }
    }
}

/// Every row builds one rank's schedule at p = 65,536 (no quadratic dep lists), and the ring
/// and pairwise rows send the number of messages their α term counts.
#[test]
fn large_p_schedules_build() {
    use crate::schedule::StepKind;
    let p = 65_536u32;
    for op in [Collective::Allreduce, Collective::Reduce, Collective::ReduceScatterBlock] {
        for alg in crate::registry::for_op(op) {
            let a = CollArgs::new(op, 12_345, p, u64::from(p) * 2).with_root(3);
            let s = alg.schedule(&a).unwrap_or_else(|e| panic!("{op}:{}: {e}", alg.name));
            let sends = s.iter().filter(|(_, k, _)| matches!(k, StepKind::Send { .. })).count() as u64;
            let want = match (op, alg.name) {
                (Collective::Allreduce, "ring" | "rsag_pairwise_ring") => Some(2 * u64::from(p - 1)),
                (Collective::ReduceScatterBlock, "pairwise") => Some(u64::from(p - 1)),
                (Collective::Reduce, "ring") => Some(u64::from(p)),
                _ => None,
            };
            if let Some(w) = want {
                assert_eq!(sends, w, "{op}:{}", alg.name);
            }
        }
    }
}
