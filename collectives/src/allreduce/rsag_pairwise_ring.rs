//! Pairwise-exchange reduce-scatter (p−1 steps of one block each) followed by a ring allgather:
//! thakur §5.3's ring allreduce, which is also faraj-yuan's Rabenseifner variation 2 (reduce-
//! scatter through an all-to-all of n/p blocks, then the allgather).
//!
//! Cost (any p): 2(p−1)α + 2(p−1)/p·nβ + (p−1)/p·nγ (thakur §5.3, T_all,ring).
//! Restrictions: none — the pairwise phase folds lower and higher ranks' contributions separately
//! and joins them in rank order, so non-commutative ops are fine (unlike the neighbour `ring`).
//! Paper: thakur §5.3, §4.4; faraj-yuan §3 "Rabenseifner algorithm variation 2" (with the ring
//! as the allgather and the ring all-to-all as the reduce-scatter's exchange).

use crate::args::{CollArgs, Collective};
use crate::cost::Cost;
use crate::error::Result;
use crate::reduce_scatter::phases::{ag_ring, even_segs, rs_pairwise, seg_region, SegDeps};
use crate::registry::{Algorithm, Restrictions};
use crate::schedule::{Buf, Schedule, ScheduleBuilder};

pub(crate) const ALGORITHM: Algorithm = Algorithm {
    coll: Collective::Allreduce,
    name: "rsag_pairwise_ring",
    summary: "pairwise-exchange reduce-scatter + ring allgather (thakur §5.3; faraj-yuan var. 2)",
    restrictions: Restrictions::NONE,
    params: &[],
    cost,
    build,
};

fn cost(a: &CollArgs) -> Cost {
    let n = (a.count * u64::from(a.elem_size)) as f64;
    let p = a.p() as f64;
    let f = (p - 1.0) / p;
    Cost::new(2.0 * (p - 1.0), 2.0 * f * n, f * n)
}

fn build(a: &CollArgs) -> Result<Schedule> {
    let mut b = ScheduleBuilder::for_args(a);
    let n = a.count;
    if n == 0 {
        return Ok(b.finish());
    }
    let (rank, p) = (a.rank, a.size);
    let segs = even_segs(n, p);
    let r = rank as usize;
    let deps = rs_pairwise(&mut b, rank, p, Buf::Send, &segs, seg_region(Buf::Recv, &segs, r, r + 1), &[]);
    let ring: Vec<u32> = (0..p).collect();
    let mut sd = SegDeps::from_lists(deps);
    ag_ring(&mut b, &ring, r, |q| q, &segs, Buf::Recv, &mut sd);
    Ok(b.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verifies_symbolically() {
        crate::verify::sweep::sweep(&ALGORITHM, 17);
    }
}
