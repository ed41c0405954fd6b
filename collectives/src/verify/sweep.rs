//! Test-only sweep of one algorithm through the verifier ([`check`](super::check)): the small
//! per-algorithm matrix every algorithm file's tests run (the full matrix over every registry row
//! is `tests/verify_matrix.rs`).

use crate::args::{CollArgs, Collective};
use crate::registry::Algorithm;

/// Verifies `alg` over p = 1..=max_p, every root (rooted ops), counts {0, 1, p−1, p, p+1, 37},
/// commutative and non-commutative (reductions), in place where the operation defines it
/// (root-only for reduce and gather(v)), for v-variants also uneven counts and gapped reversed
/// displacements (alltoallv: an irregular matrix), and counts p+1 and 37 also pipelined in
/// segments of 4. Arguments the algorithm's restrictions rule out are skipped.
pub(crate) fn sweep(alg: &Algorithm, max_p: u32) {
    sweep_counts(alg, max_p, 37);
}

/// [`sweep`] with `big` as the largest count.
pub(crate) fn sweep_counts(alg: &Algorithm, max_p: u32, big: u64) {
    let coll = alg.coll;
    for p in 1..=max_p {
        let pc = u64::from(p);
        let roots: Vec<u32> = if coll.is_rooted() { (0..p).collect() } else { vec![0] };
        for root in roots {
            for count in [0, 1, pc - 1, pc, pc + 1, big] {
                // reduce_scatter has no displacements: its variants 1 and 2 would be the same
                let variants = match coll {
                    Collective::ReduceScatter => 2,
                    c if c.is_vector() => 3,
                    _ => 1,
                };
                for variant in 0..variants {
                    let base = with_variant(CollArgs::new(coll, 0, p, count).with_root(root), count, variant);
                    let ops: &[bool] = if coll.is_reduction() { &[true, false] } else { &[true] };
                    for &commutative in ops {
                        for in_place in [false, true] {
                            let segs: &[u64] = if count == pc + 1 || count == big { &[0, 4] } else { &[0] };
                            for &seg in segs {
                                let mut a = base.clone().with_commutative(commutative);
                                a.in_place = in_place;
                                if seg > 0 {
                                    a = a.with_param(crate::args::SEGMENT, seg);
                                }
                                if (in_place && !in_place_defined(&a)) || alg.restrictions.violated(&a).is_some() {
                                    continue;
                                }
                                if let Err(e) = super::check(alg, &a) {
                                    panic!("{}:{} {}: {e}", coll, alg.name, super::describe_args(&a));
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Whether in-place means something on every rank [`check`](super::check) gives it to (the root
/// only for reduce and gather(v), every rank elsewhere).
fn in_place_defined(a: &CollArgs) -> bool {
    let root_only = matches!(a.coll, Collective::Reduce | Collective::Gather | Collective::Gatherv);
    (0..a.size).filter(|&r| !root_only || r == a.root).all(|r| a.for_rank(r).in_place_offset().ok().flatten().is_some())
}

/// Counts of a v-variant: variant 0 uniform, 1 uneven, 2 uneven with gapped reversed
/// displacements (not for reduce_scatter, which has none; alltoallv: an irregular matrix with
/// zeros for 1 and 2). Other operations unchanged.
fn with_variant(mut a: CollArgs, count: u64, variant: u32) -> CollArgs {
    let p = u64::from(a.size);
    match a.coll {
        Collective::Alltoallv => {
            let m: Vec<u64> = (0..p * p)
                .map(|k| if variant == 0 { count } else { (count + k * 7 + u64::from(variant)) % (count + 3) })
                .collect();
            a.with_counts(m)
        }
        c if c.is_vector() => {
            let counts: Vec<u64> =
                (0..p).map(|i| if variant == 0 { count } else { (count + i * 7) % (count + 3) }).collect();
            if variant == 2 && a.coll != Collective::ReduceScatter {
                let mut d = vec![0u64; p as usize];
                let mut at = 1;
                for i in (0..p as usize).rev() {
                    d[i] = at;
                    at += counts[i] + 2;
                }
                a.displs = Some(d.into());
            }
            a.with_counts(counts)
        }
        _ => a,
    }
}
