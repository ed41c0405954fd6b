//! Reduce + broadcast: a binomial-tree reduce to rank 0 followed by a binomial-tree broadcast of
//! the result (MPICH's old allreduce; thakur §5 "binomial tree" for allreduce).
//!
//! Cost (any p): 2⌈lg p⌉α + 2⌈lg p⌉·nβ + ⌈lg p⌉·nγ.
//! Restrictions: none (the tree is rooted at rank 0, so each partial is a contiguous rank range
//! combined lower-first; non-commutative ops are fine). Paper: thakur §4.5, §5; faraj-yuan
//! "Reduce-Bcast".

use crate::args::{CollArgs, Collective};
use crate::cost::{ceil_log2, Cost};
use crate::error::Result;
use crate::reduce_scatter::phases::{binomial_bcast, binomial_reduce};
use crate::registry::{Algorithm, Restrictions};
use crate::schedule::{Buf, Region, Schedule, ScheduleBuilder};

pub(crate) const ALGORITHM: Algorithm = Algorithm {
    coll: Collective::Allreduce,
    name: "reduce_bcast",
    summary: "binomial reduce to rank 0 + binomial broadcast; short vectors, any op",
    restrictions: Restrictions::NONE,
    params: &[],
    cost,
    build,
};

fn cost(a: &CollArgs) -> Cost {
    let n = (a.count * u64::from(a.elem_size)) as f64;
    let lg = f64::from(ceil_log2(a.p()));
    Cost::new(2.0 * lg, 2.0 * lg * n, lg * n)
}

fn build(a: &CollArgs) -> Result<Schedule> {
    let mut b = ScheduleBuilder::for_args(a);
    let n = a.count;
    if n == 0 {
        return Ok(b.finish());
    }
    let out = Region::new(Buf::Recv, 0, n);
    let (deps, _) = binomial_reduce(&mut b, a.rank, a.size, 0, n, (a.rank == 0).then_some(out), &[]);
    binomial_bcast(&mut b, a.rank, a.size, out, &deps);
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
