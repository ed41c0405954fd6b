//! Ring allreduce: a ring reduce-scatter (at step s rank r passes its partial of block r−s−1 to
//! r+1) followed by a ring allgather of the p reduced blocks, neighbours only.
//!
//! Cost (any p): 2(p−1)α + 2(p−1)/p·nβ + (p−1)/p·nγ (thakur §5.3, T_all,ring).
//! Restrictions: commutative ops only (a block's partial wraps around from rank p−1 to rank 0).
//! Paper: thakur §5.3 (which uses pairwise exchange for the reduce-scatter; see
//! `rsag_pairwise_ring` for that exact form); the neighbour-only reduce-scatter is the classic ring.

use crate::args::{CollArgs, Collective};
use crate::cost::Cost;
use crate::error::Result;
use crate::reduce_scatter::phases::{ag_ring, copy, even_segs, rs_ring, SegDeps};
use crate::registry::{Algorithm, Restrictions};
use crate::schedule::{Buf, Region, Schedule, ScheduleBuilder};

pub(crate) const ALGORITHM: Algorithm = Algorithm {
    coll: Collective::Allreduce,
    name: "ring",
    summary: "ring reduce-scatter + ring allgather between neighbours; bandwidth-optimal for long vectors",
    restrictions: Restrictions::COMMUTATIVE,
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
    let p = a.size;
    let segs = even_segs(n, p);
    let start: Vec<_> =
        copy(&mut b, Region::new(Buf::Send, 0, n), Region::new(Buf::Recv, 0, n), &[]).into_iter().collect();
    if p == 1 {
        return Ok(b.finish());
    }
    let tmp = b.scratch(n);
    let mut sd = SegDeps::new(p as usize, &start);
    rs_ring(&mut b, a.rank, p, &segs, Buf::Recv, tmp, &mut sd);
    let ring: Vec<u32> = (0..p).collect();
    ag_ring(&mut b, &ring, a.rank as usize, |q| q, &segs, Buf::Recv, &mut sd);
    Ok(b.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verifies_symbolically() {
        crate::verify::sweep::sweep(&ALGORITHM, 13);
    }

    #[test]
    fn refuses_non_commutative() {
        let a = CollArgs::new(Collective::Allreduce, 0, 4, 8).with_commutative(false);
        assert!(ALGORITHM.schedule(&a).is_err());
    }
}
