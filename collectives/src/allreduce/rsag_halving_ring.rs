//! Rabenseifner variation 1 of faraj-yuan: reduce-scatter by recursive vector halving (distance
//! doubling) among p' = 2^⌊lg p⌋ ranks, then a ring allgather of the p' reduced segments.
//!
//! Cost: p = 2^k: (lg p + p − 1)α + 2(p−1)/p·nβ + (p−1)/p·nγ. Other p (thakur §5.1's pairwise
//! pre-reduction by halves and final send to the removed ranks, f_α = f_β = 1):
//! (lg p' + p' + 2)α + (2(p'−1)/p' + 2)nβ + ((p'−1)/p' + 1/2)nγ.
//! Restrictions: none (distance-doubling halving is order-correct). Faraj-yuan's version uses
//! their tuned allgather; the ring is the allgather they select for long vectors (the logical
//! ring; topology-unaware here). Paper: faraj-yuan §3 "Rabenseifner algorithm variation 1",
//! thakur §5.1.

use crate::args::{CollArgs, Collective};
use crate::cost::{floor_log2, Cost};
use crate::error::Result;
use crate::reduce_scatter::phases::{ag_ring, bitrev, SegDeps};
use crate::registry::{Algorithm, Restrictions};
use crate::schedule::{Buf, Schedule};

pub(crate) const ALGORITHM: Algorithm = Algorithm {
    coll: Collective::Allreduce,
    name: "rsag_halving_ring",
    summary: "reduce-scatter by recursive halving + ring allgather (faraj-yuan Rabenseifner var. 1)",
    restrictions: Restrictions::NONE,
    params: &[],
    cost,
    build,
};

fn cost(a: &CollArgs) -> Cost {
    let n = (a.count * u64::from(a.elem_size)) as f64;
    let lg = f64::from(floor_log2(a.p()));
    let pp = (1u64 << floor_log2(a.p())) as f64;
    let f = (pp - 1.0) / pp;
    if a.size.is_power_of_two() {
        Cost::new(lg + pp - 1.0, 2.0 * f * n, f * n)
    } else {
        Cost::new(lg + pp + 2.0, (2.0 * f + 2.0) * n, (f + 0.5) * n)
    }
}

fn build(a: &CollArgs) -> Result<Schedule> {
    super::fold_halving_allreduce(a, |b, fold, me, segs, _, deps| {
        let ring: Vec<u32> = (0..fold.pof2).map(|q| fold.real(q)).collect();
        let bits = fold.pof2.trailing_zeros();
        let mut sd = SegDeps::new(fold.pof2 as usize, &deps);
        ag_ring(b, &ring, me as usize, |q| bitrev(q as u32, bits) as usize, segs, Buf::Recv, &mut sd);
        sd.all()
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
