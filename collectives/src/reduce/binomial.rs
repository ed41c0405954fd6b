//! Binomial-tree reduce: in step k a rank whose (relative) rank has bit k set sends its partial to
//! the rank 2^k below and stops; the others receive and combine, so the root has the result after
//! ⌈lg p⌉ steps.
//!
//! Cost (any p): ⌈lg p⌉(α + nβ + nγ) (thakur §4.5, T_tree); with a non-commutative op and a root
//! ≠ 0 the tree is rooted at rank 0 (so every partial is a contiguous rank range in rank order)
//! and rank 0 sends the result to the root: one more α + nβ.
//! Restrictions: none. Paper: thakur §4.5 (MPICH's binomial reduce).

use crate::args::{CollArgs, Collective};
use crate::cost::{ceil_log2, Cost};
use crate::error::Result;
use crate::reduce_scatter::phases::{binomial_reduce, recv, send};
use crate::registry::{Algorithm, Restrictions};
use crate::schedule::{Buf, Region, Schedule, ScheduleBuilder};

pub(crate) const ALGORITHM: Algorithm = Algorithm {
    coll: Collective::Reduce,
    name: "binomial",
    summary: "binomial tree to the root; ⌈lg p⌉ steps of the whole vector, for short vectors",
    restrictions: Restrictions::NONE,
    params: &[],
    cost,
    build,
};

fn cost(a: &CollArgs) -> Cost {
    let n = (a.count * u64::from(a.elem_size)) as f64;
    let lg = f64::from(ceil_log2(a.p()));
    let extra = if !a.commutative && a.root != 0 { 1.0 } else { 0.0 };
    Cost::new(lg + extra, (lg + extra) * n, lg * n)
}

fn build(a: &CollArgs) -> Result<Schedule> {
    let mut b = ScheduleBuilder::for_args(a);
    let n = a.count;
    if n == 0 {
        return Ok(b.finish());
    }
    let out = Region::new(Buf::Recv, 0, n);
    if a.commutative || a.root == 0 {
        let is_root = a.rank == a.root;
        binomial_reduce(&mut b, a.rank, a.size, a.root, n, is_root.then_some(out), &[]);
        return Ok(b.finish());
    }
    // non-commutative, root != 0: tree rooted at rank 0, then rank 0 -> root
    let (last, acc) = binomial_reduce(&mut b, a.rank, a.size, 0, n, None, &[]);
    if a.rank == 0 {
        send(&mut b, a.root, acc, &last);
    } else if a.rank == a.root {
        recv(&mut b, 0, out, &last);
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
