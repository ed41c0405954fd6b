//! Allgather-based allreduce: every rank gathers all p input vectors with a Bruck (dissemination)
//! allgather into scratch, then reduces them locally in rank order; for tiny vectors.
//!
//! Cost (any p): ⌈lg p⌉α + (p−1)·nβ + (p−1)·nγ (Bruck allgather of n-byte blocks, thakur §4.1.2).
//! Restrictions: none (the local reduction runs in rank order, so non-commutative ops are fine);
//! needs p·count elements of scratch. Paper: faraj-yuan §3 "All-gather based algorithm" (which
//! uses the tuned allgather; here Bruck, since it takes ⌈lg p⌉ steps for every p).

use crate::args::{CollArgs, Collective};
use crate::cost::{ceil_log2, floor_log2, Cost};
use crate::error::Result;
use crate::reduce_scatter::phases::{copy, recv, send, union};
use crate::registry::{Algorithm, Restrictions};
use crate::schedule::{Buf, Order, Region, Schedule, ScheduleBuilder, StepId};

pub(crate) const ALGORITHM: Algorithm = Algorithm {
    coll: Collective::Allreduce,
    name: "allgather_reduce",
    summary: "Bruck allgather of all vectors, then a local reduction in rank order; tiny vectors",
    restrictions: Restrictions::NONE,
    params: &[],
    cost,
    build,
};

fn cost(a: &CollArgs) -> Cost {
    let n = (a.count * u64::from(a.elem_size)) as f64;
    let p1 = (a.p() - 1) as f64;
    Cost::new(f64::from(ceil_log2(a.p())), p1 * n, p1 * n)
}

fn build(a: &CollArgs) -> Result<Schedule> {
    let mut b = ScheduleBuilder::for_args(a);
    let n = a.count;
    let (rank, p) = (a.rank, a.size);
    let out = Region::new(Buf::Recv, 0, n);
    if n == 0 {
        return Ok(b.finish());
    }
    if p == 1 {
        copy(&mut b, Region::new(Buf::Send, 0, n), out, &[]);
        return Ok(b.finish());
    }
    let total = n
        .checked_mul(u64::from(p))
        .ok_or_else(|| crate::error::Error::Overflow { coll: a.coll, what: "count × p scratch".into() })?;
    // position j of `all` holds the vector of rank (rank + j) mod p
    let all = b.scratch(total);
    let pos = |j: u64| Region::new(all, j * n, n);
    let c = b.copy(Region::new(Buf::Send, 0, n), pos(0), &[]);
    let mut recvs: Vec<StepId> = Vec::new();
    let mut d = 1u32;
    while d < p {
        let len = u64::from(d.min(p - d));
        let to = (rank + p - d) % p;
        let from = (rank + d) % p;
        send(&mut b, to, Region::new(all, 0, len * n), &union(&[&[c], &recvs]));
        recvs.extend(recv(&mut b, from, Region::new(all, u64::from(d) * n, len * n), &[]));
        d <<= 1;
    }
    // positions q >= 1 were written by the receive of step floor(lg q)
    let writer = |q: u64| if q == 0 { c } else { recvs[floor_log2(q) as usize] };
    let at = |j: u32| u64::from((j + p - rank) % p);
    let mut last = b.copy(pos(at(0)), out, &[writer(at(0)), c]);
    for j in 1..p {
        last = b.reduce(pos(at(j)), out, Order::DstFirst, &[last, writer(at(j))]);
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
