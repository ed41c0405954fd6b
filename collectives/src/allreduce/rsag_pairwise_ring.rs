//! Pairwise-exchange reduce-scatter (p−1 steps of one block each) followed by a ring allgather:
//! thakur §5.3's ring allreduce, which is also faraj-yuan's Rabenseifner variation 2 (reduce-
//! scatter through an all-to-all of n/p blocks, then the allgather).
//!
//! Cost (any p): 2(p−1)α + 2(p−1)/p·nβ + (p−1)/p·nγ (thakur §5.3, T_all,ring).
//! Restrictions: none — the pairwise phase folds lower and higher ranks' contributions separately
//! and joins them in rank order, so non-commutative ops are fine (unlike the neighbour `ring`).
//! Paper: thakur §5.3, §4.4; faraj-yuan §3 "Rabenseifner algorithm variation 2" (with the ring
//! as the allgather and the ring all-to-all as the reduce-scatter's exchange).

use crate::allreduce::{pairwise_rs_allreduce, pairwise_rs_cost};
use crate::args::{CollArgs, Collective};
use crate::error::Result;
use crate::reduce_scatter::phases::{ag_ring, MeshOrder, SegDeps};
use crate::registry::{Algorithm, Restrictions};
use crate::schedule::{Buf, Schedule};

pub(crate) const ALGORITHM: Algorithm = Algorithm {
    coll: Collective::Allreduce,
    name: "rsag_pairwise_ring",
    summary: "pairwise-exchange reduce-scatter + ring allgather (thakur §5.3; faraj-yuan var. 2)",
    restrictions: Restrictions::NONE,
    params: &[],
    cost: pairwise_rs_cost,
    build,
};

fn build(a: &CollArgs) -> Result<Schedule> {
    let (r, p) = (a.rank as usize, a.size);
    pairwise_rs_allreduce(a, MeshOrder::Rotated, |b, segs, per_block| {
        let ring: Vec<u32> = (0..p).collect();
        let mut sd = SegDeps::from_lists(per_block);
        ag_ring(b, &ring, r, |q| q, segs, Buf::Recv, &mut sd);
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verifies_symbolically() {
        crate::verify::sweep::sweep(&ALGORITHM, 17);
    }
}
