//! Tests over every reduction row (allreduce, reduce, reduce_scatter_block): cost formulas against
//! the simulator's replay and large-p schedule builds with message counts.

use crate::args::{CollArgs, Collective};

/// For p = 2^k (where the papers' formulas are exact) the cost rows must match the replay's
/// critical path in α and β (γ may be lower in the replay where reductions overlap transfers);
/// hierarchical rows on two nodes of p/2 ranks.
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
                let a = crate::two_level::test_placement(alg, a);
                if alg.restrictions.violated(&a).is_some() {
                    continue;
                }
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
            let a = crate::two_level::test_placement(alg, a);
            let s = alg.schedule(&a).unwrap_or_else(|e| panic!("{op}:{}: {e}", alg.name));
            let sends = s.iter().filter(|(_, k, _)| matches!(k, StepKind::Send { .. })).count() as u64;
            let want = match (op, alg.name) {
                (Collective::Allreduce, "ring" | "rsag_pairwise_ring" | "shmem_parallel" | "shmem_cyclic") => {
                    Some(2 * u64::from(p - 1))
                }
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
