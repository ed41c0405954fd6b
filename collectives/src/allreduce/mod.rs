//! Algorithms of `allreduce`, one file each.

mod allgather_reduce;
mod binary_blocks;
mod hier_leader;
mod hier_multi_leader;
mod rabenseifner;
mod recursive_doubling;
mod reduce_bcast;
mod ring;
mod rsag_halving_ring;
mod rsag_pairwise_ring;

use crate::args::CollArgs;
use crate::error::Result;
use crate::reduce_scatter::phases::{copy, even_segs, fold_halves, recv, rs_halving_from, send, Fold};
use crate::registry::Algorithm;
use crate::schedule::{Buf, Region, Schedule, ScheduleBuilder, StepId};

/// The registry rows of this operation.
pub(crate) const ALGORITHMS: &[Algorithm] = &[
    binary_blocks::ALGORITHM,
    recursive_doubling::ALGORITHM,
    reduce_bcast::ALGORITHM,
    allgather_reduce::ALGORITHM,
    rabenseifner::ALGORITHM,
    ring::ALGORITHM,
    rsag_halving_ring::ALGORITHM,
    rsag_pairwise_ring::ALGORITHM,
    hier_leader::ALGORITHM,
    hier_multi_leader::ALGORITHM,
];

/// The allreduces built as "2r fold + vector-halving reduce-scatter + some allgather + unfold"
/// (rabenseifner, rsag_halving_ring): everything but the allgather phase. `allgather(b, fold,
/// me, segs, pos, deps)` appends the allgather of the reduced segments held in `Recv` (this new
/// rank `me` owns segment `pos`) after `deps` and returns the steps it ends with.
pub(crate) fn fold_halving_allreduce(
    a: &CollArgs,
    allgather: impl FnOnce(&mut ScheduleBuilder, &Fold, u32, &[(u64, u64)], usize, Vec<StepId>) -> Vec<StepId>,
) -> Result<Schedule> {
    let mut b = ScheduleBuilder::for_args(a);
    let n = a.count;
    if n == 0 {
        return Ok(b.finish());
    }
    let acc = Region::new(Buf::Recv, 0, n);
    let fold = Fold::new(a.size, false);
    // A rank outside the fold (all of them at p = 2^k) reads its input straight from `Send` in the
    // first halving round instead of copying it to `Recv` first (in place, `Send` is `Recv`).
    let direct = a.size > 1 && !a.in_place && fold.partner(a.rank).is_none();
    let start: Vec<_> =
        if direct { Vec::new() } else { copy(&mut b, Region::new(Buf::Send, 0, n), acc, &[]).into_iter().collect() };
    if a.size == 1 {
        return Ok(b.finish());
    }
    let segs = even_segs(n, fold.pof2);
    let tmp = b.scratch(n);
    let half = segs[fold.pof2 as usize / 2].0;
    let deps = fold_halves(&mut b, &fold, a.rank, acc, Region::new(tmp, 0, n), half, start);
    let partner = fold.partner(a.rank);
    let Some(me) = fold.new_rank(a.rank) else {
        recv(&mut b, partner.expect("removed ranks have a partner"), acc, &deps);
        return Ok(b.finish());
    };
    let input = direct.then_some(Buf::Send);
    let (deps, pos) = rs_halving_from(&mut b, &fold, me, &segs, input, Buf::Recv, tmp, deps);
    let deps = allgather(&mut b, &fold, me, &segs, pos, deps);
    if let Some(pr) = partner {
        send(&mut b, pr, acc, &deps);
    }
    Ok(b.finish())
}

#[cfg(test)]
mod tests {
    /// The full matrix (p = 1..=20, every root, counts up to 997, both op kinds, in place where
    /// defined) through the verifier; run with `cargo test --release -- --ignored`.
    #[test]
    #[ignore = "slow: full verification matrix"]
    fn full_verification_matrix() {
        for alg in super::ALGORITHMS {
            crate::verify::sweep::sweep_counts(alg, 20, 997);
        }
    }
}
