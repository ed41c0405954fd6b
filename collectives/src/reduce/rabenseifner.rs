//! Rabenseifner's reduce: a reduce-scatter by recursive vector halving and distance doubling,
//! then a binomial gather of the reduced segments to the root (thakur §4.5, §5.1).
//!
//! Cost: p = 2^k: 2 lg p α + 2(p−1)/p·nβ + (p−1)/p·nγ. Other p (p' = 2^⌊lg p⌋; the first 2r
//! ranks pre-reduce in pairs by exchanging halves and one of each pair drops out; f_α = f_β = 1):
//! (2 lg p' + 2)α + (3 − 2/p')nβ + (3/2 − 1/p')nγ.
//! Restrictions: none. A root among the removed ranks swaps roles with its partner after the first
//! exchange (thakur §5.1), at no extra cost; distance doubling keeps partials contiguous rank
//! ranges, so non-commutative ops are fine. Paper: thakur §4.5, §5.1 (rabenseifner-2004 §3.2).

use crate::args::{CollArgs, Collective};
use crate::cost::{floor_log2, Cost};
use crate::error::Result;
use crate::reduce_scatter::phases::{ag_doubling, copy, even_segs, fold_halves, rs_halving, Fold};
use crate::registry::{Algorithm, Restrictions};
use crate::schedule::{Buf, Region, Schedule, ScheduleBuilder};

pub(crate) const ALGORITHM: Algorithm = Algorithm {
    coll: Collective::Reduce,
    name: "rabenseifner",
    summary: "reduce-scatter by recursive halving + binomial gather to the root; long vectors",
    restrictions: Restrictions::NONE,
    params: &[],
    cost,
    build,
};

fn cost(a: &CollArgs) -> Cost {
    let n = (a.count * u64::from(a.elem_size)) as f64;
    let lg = f64::from(floor_log2(a.p()));
    let pp = (1u64 << floor_log2(a.p())) as f64;
    if a.size.is_power_of_two() {
        let f = (pp - 1.0) / pp;
        Cost::new(2.0 * lg, 2.0 * f * n, f * n)
    } else {
        Cost::new(2.0 * lg + 2.0, (3.0 - 2.0 / pp) * n, (1.5 - 1.0 / pp) * n)
    }
}

fn build(a: &CollArgs) -> Result<Schedule> {
    let mut b = ScheduleBuilder::for_args(a);
    let n = a.count;
    if n == 0 {
        return Ok(b.finish());
    }
    let acc_buf = if a.rank == a.root { Buf::Recv } else { b.scratch(n) };
    let acc = Region::new(acc_buf, 0, n);
    let start: Vec<_> = copy(&mut b, Region::new(Buf::Send, 0, n), acc, &[]).into_iter().collect();
    if a.size == 1 {
        return Ok(b.finish());
    }
    let fold = Fold::new(a.size, false).keeping(a.root);
    let segs = even_segs(n, fold.pof2);
    let tmp = b.scratch(n);
    let half = segs[fold.pof2 as usize / 2].0;
    let deps = fold_halves(&mut b, &fold, a.rank, acc, Region::new(tmp, 0, n), half, start);
    let Some(me) = fold.new_rank(a.rank) else {
        return Ok(b.finish());
    };
    let root = fold.new_rank(a.root).expect("the fold keeps the root");
    let (deps, pos) = rs_halving(&mut b, &fold, me, &segs, acc_buf, tmp, deps);
    ag_doubling(&mut b, &fold, me, &segs, acc_buf, pos, Some(root), deps);
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
