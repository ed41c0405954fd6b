//! Gather + broadcast allgather(v): a binomial gather of every block to rank 0, then a binomial
//! broadcast of the whole gathered buffer from rank 0.
//!
//! Cost (n = total bytes gathered, see the module convention; n_0 = rank 0's block):
//! 2⌈lg p⌉ α + (n − n_0 + ⌈lg p⌉ n) β for any p (2 lg p α + ((p−1)/p + lg p) n β for a power of
//! two and equal blocks). Only for short messages; a baseline. Restrictions: none.
//! Paper: thakur §4.2 (binomial tree) composed as in MPICH's old allgather fallback.

use crate::allgather::layout::Group;
use crate::allgather::{gathered_bytes, recv_layout};
use crate::args::{CollArgs, Collective};
use crate::cost::{ceil_log2, Cost};
use crate::error::Result;
use crate::registry::{Algorithm, Restrictions};
use crate::schedule::{Schedule, ScheduleBuilder};

pub(crate) const ALLGATHER: Algorithm = Algorithm {
    coll: Collective::Allgather,
    name: "gather_bcast",
    summary: "binomial gather to rank 0, then binomial broadcast of everything",
    restrictions: Restrictions::NONE,
    params: &[],
    cost,
    build,
};

pub(crate) const ALLGATHERV: Algorithm = Algorithm { coll: Collective::Allgatherv, ..ALLGATHER };

fn cost(a: &CollArgs) -> Cost {
    let (n, _) = gathered_bytes(a);
    let n0 = (a.block_count(0) * u64::from(a.elem_size)) as f64;
    let k = f64::from(ceil_log2(a.p()));
    Cost::new(2.0 * k, n - n0 + k * n, 0.0)
}

fn build(a: &CollArgs) -> Result<Schedule> {
    let p = a.size;
    let mut b = ScheduleBuilder::for_args(a);
    let lay = recv_layout(a)?;
    let g = Group::rotated(p, 0, a.rank);
    let gathered = crate::gather::binomial::gather_to(&mut b, &g, lay.clone(), &|r| a.block_count(r));
    crate::bcast::binomial::phase(&mut b, &lay, 0..p, &g, &gathered);
    Ok(b.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verifies_allgather() {
        crate::verify::sweep::sweep(&ALLGATHER, 20);
    }

    #[test]
    fn verifies_allgatherv() {
        crate::verify::sweep::sweep(&ALLGATHERV, 12);
    }
}
