//! Algorithms of `allreduce`, one file each.

mod allgather_reduce;
mod binary_blocks;
mod hier_leader;
mod hier_multi_leader;
mod hier_recursive_doubling;
mod rabenseifner;
mod recursive_doubling;
mod reduce_bcast;
mod ring;
mod rsag_halving_ring;
mod rsag_pairwise_ring;
mod shmem_cyclic;
mod shmem_parallel;

use crate::args::CollArgs;
use crate::cost::Cost;
use crate::error::Result;
use crate::reduce_scatter::phases::{
    ag_mesh, copy, even_segs, fold_halves, recv, rs_halving_from, rs_pairwise, send, Fold, MeshOrder, PairwiseRs,
};
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
    shmem_parallel::ALGORITHM,
    shmem_cyclic::ALGORITHM,
    hier_leader::ALGORITHM,
    hier_multi_leader::ALGORITHM,
    hier_recursive_doubling::ALGORITHM,
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

/// The allreduces built as "pairwise reduce-scatter + some allgather" (rsag_pairwise_ring,
/// shmem_parallel, shmem_cyclic): [`rs_pairwise`] in `order` (each rank writes block j of its
/// input to rank j, which folds the p contributions in rank order; out of place the result lands
/// in `Recv` directly), then `allgather(b, segs, per_block)` spreads the reduced blocks of `Recv`
/// (`per_block[j]`: the steps block j's writers must wait for).
pub(crate) fn pairwise_rs_allreduce(
    a: &CollArgs,
    order: MeshOrder,
    allgather: impl FnOnce(&mut ScheduleBuilder, &[(u64, u64)], Vec<Vec<StepId>>),
) -> Result<Schedule> {
    let mut b = ScheduleBuilder::for_args(a);
    let n = a.count;
    if n == 0 {
        return Ok(b.finish());
    }
    let (rank, p) = (a.rank, a.size);
    let segs = even_segs(n, p);
    let r = rank as usize;
    let out = Region::new(Buf::Recv, segs[r].0, segs[r].1);
    // In place `out` is this rank's own block of the input: commutative contributions fold into it.
    let how = PairwiseRs { order, land_in_out: !a.in_place, accumulate: a.in_place && a.commutative };
    let mut per_block = rs_pairwise(&mut b, rank, p, Buf::Send, &segs, out, how, &[]);
    if !a.in_place {
        // The allgather writes `Recv`, which the sends of `Send`'s blocks do not read: it need
        // not wait for them, and nothing waits for those sends (a sender with nothing after its
        // Send can lend its buffer to the receiver's reduction: `exec::op`'s pulled reductions).
        for (j, deps) in per_block.iter_mut().enumerate() {
            if j != r {
                deps.clear();
            }
        }
    }
    allgather(&mut b, &segs, per_block);
    Ok(b.finish())
}

/// [`pairwise_rs_allreduce`] with a mesh allgather ([`ag_mesh`]) in the same `order`: every rank
/// sends its reduced block straight to every other (shmem_parallel, shmem_cyclic).
pub(crate) fn mesh_allreduce(a: &CollArgs, order: MeshOrder) -> Result<Schedule> {
    let (rank, p) = (a.rank, a.size);
    pairwise_rs_allreduce(a, order, |b, segs, per_block| ag_mesh(b, rank, p, segs, Buf::Recv, order, &per_block))
}

/// Cost of [`pairwise_rs_allreduce`] with a ring or a cyclic mesh allgather: p−1 messages of n/p
/// per phase through each port (the reduce-scatter's reductions overlap them but the last):
/// 2(p−1)α + 2(p−1)/p·nβ + (p−1)/p·nγ (thakur §5.3, T_all,ring).
pub(crate) fn pairwise_rs_cost(a: &CollArgs) -> Cost {
    let n = (a.count * u64::from(a.elem_size)) as f64;
    let p = a.p() as f64;
    let f = (p - 1.0) / p;
    Cost::new(2.0 * (p - 1.0), 2.0 * f * n, f * n)
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
