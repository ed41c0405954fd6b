//! Test-only sweep of the reduction algorithms through the shared verifier (`crate::verify`):
//! every rank count up to a bound, every root, edge counts, irregular counts for reduce_scatter,
//! commutative and non-commutative ops, in place where the operation defines it.

use crate::args::{CollArgs, Collective};
use crate::registry::Algorithm;

/// Verifies `alg` over p = 1..=pmax, every root (rooted ops), counts {0, 1, p−1, p, p+1, 97}
/// (irregular counts for reduce_scatter), commutative and (unless restricted) non-commutative,
/// and in place where `in_place` is set.
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
                            let c: Vec<u64> = (0..u64::from(p)).map(|i| (i * 7 + count) % 5 * (count % 3)).collect();
                            a = a.with_counts(c);
                        }
                        a.in_place = ip;
                        if alg.restrictions.violated(&a).is_some() {
                            continue;
                        }
                        if let Err(e) = crate::verify::check(alg, &a) {
                            panic!(
                                "{}:{} p={p} root={root} count={count} comm={comm} in_place={ip}: {e}",
                                alg.coll, alg.name
                            );
                        }
                    }
                }
            }
        }
    }
}
