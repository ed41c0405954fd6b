//! Ring reduce: a pairwise-exchange reduce-scatter (p−1 steps of one block each), then every rank
//! sends its reduced block straight to the root (thakur §5.3).
//!
//! Cost (any p, α_uni = α, β_uni = β): 2(p−1)α + 2(p−1)/p·nβ + (p−1)/p·nγ (thakur §5.3,
//! T_red,ring).
//! Restrictions: none — the pairwise reduce-scatter folds lower and higher ranks' contributions
//! separately and joins them in rank order, so non-commutative ops are fine. Paper: thakur §5.3.

use crate::args::{CollArgs, Collective};
use crate::cost::Cost;
use crate::error::Result;
use crate::reduce_scatter::phases::{even_segs, recv, rs_pairwise, seg_region, send, PairwiseRs};
use crate::registry::{Algorithm, Restrictions};
use crate::schedule::{Buf, Region, Schedule, ScheduleBuilder};

pub(crate) const ALGORITHM: Algorithm = Algorithm {
    coll: Collective::Reduce,
    name: "ring",
    summary: "pairwise-exchange reduce-scatter + direct send of each block to the root; long vectors",
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
    let (rank, p) = (a.rank, a.size);
    if n == 0 {
        return Ok(b.finish());
    }
    let segs = even_segs(n, p);
    let r = rank as usize;
    let out = if rank == a.root {
        seg_region(Buf::Recv, &segs, r, r + 1)
    } else {
        Region::new(b.scratch(segs[r].1), 0, segs[r].1)
    };
    let deps = rs_pairwise(&mut b, rank, p, Buf::Send, &segs, out, PairwiseRs::ROTATED, &[]);
    if rank == a.root {
        for j in (0..p).filter(|&j| j != rank) {
            // in place, block j of Recv is the input block this rank sent to j
            recv(&mut b, j, seg_region(Buf::Recv, &segs, j as usize, j as usize + 1), &deps[j as usize]);
        }
    } else {
        send(&mut b, a.root, out, &deps[rank as usize]);
    }
    Ok(b.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verifies_symbolically() {
        crate::verify::sweep::sweep(&ALGORITHM, 12);
    }
}
