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
use crate::reduce_scatter::phases::{
    ag_ring, bitrev, copy, even_segs, fold_halves, recv, rs_halving, send, Fold, SegDeps,
};
use crate::registry::{Algorithm, Restrictions};
use crate::schedule::{Buf, Region, Schedule, ScheduleBuilder};

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
    let mut b = ScheduleBuilder::for_args(a);
    let n = a.count;
    if n == 0 {
        return Ok(b.finish());
    }
    let acc = Region::new(Buf::Recv, 0, n);
    let start: Vec<_> = copy(&mut b, Region::new(Buf::Send, 0, n), acc, &[]).into_iter().collect();
    if a.size == 1 {
        return Ok(b.finish());
    }
    let fold = Fold::new(a.size, false);
    let segs = even_segs(n, fold.pof2);
    let tmp = b.scratch(n);
    let half = segs[fold.pof2 as usize / 2].0;
    let deps = fold_halves(&mut b, &fold, a.rank, acc, Region::new(tmp, 0, n), half, start);
    let partner = fold.partner(a.rank);
    let Some(me) = fold.new_rank(a.rank) else {
        recv(&mut b, partner.expect("removed ranks have a partner"), acc, &deps);
        return Ok(b.finish());
    };
    let (deps, _) = rs_halving(&mut b, &fold, me, &segs, Buf::Recv, tmp, deps);
    let ring: Vec<u32> = (0..fold.pof2).map(|q| fold.real(q)).collect();
    let bits = fold.pof2.trailing_zeros();
    let mut sd = SegDeps::new(fold.pof2 as usize, &deps);
    ag_ring(&mut b, &ring, me as usize, |q| bitrev(q as u32, bits) as usize, &segs, Buf::Recv, &mut sd);
    if let Some(pr) = partner {
        send(&mut b, pr, acc, &sd.all());
    }
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
