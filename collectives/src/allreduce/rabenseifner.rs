//! Rabenseifner's allreduce: a reduce-scatter by recursive vector halving and distance doubling,
//! then an allgather by recursive vector doubling and distance halving (thakur §5.1, Fig 12).
//!
//! Cost: p = 2^k: 2 lg p α + 2(p−1)/p·nβ + (p−1)/p·nγ. Other p (p' = 2^⌊lg p⌋; the first 2r
//! ranks, r = p − p', pre-reduce in pairs by exchanging halves, the odd rank drops out and gets
//! the result at the end; f_α = f_β = 1): (2 lg p' + 3)α + (4 − 2/p')nβ + (3/2 − 1/p')nγ.
//! Restrictions: none — distance doubling keeps every partial a contiguous rank range, combined
//! lower-first, so non-commutative ops are fine (MPICH uses it for commutative ops only).
//! Paper: thakur §4.5, §5.1 (rabenseifner-2004 §3.2).

use crate::args::{CollArgs, Collective};
use crate::cost::{floor_log2, Cost};
use crate::error::Result;
use crate::reduce_scatter::phases::ag_doubling;
use crate::registry::{Algorithm, Restrictions};
use crate::schedule::{Buf, Schedule};

pub(crate) const ALGORITHM: Algorithm = Algorithm {
    coll: Collective::Allreduce,
    name: "rabenseifner",
    summary: "reduce-scatter by recursive halving + allgather by recursive doubling; long vectors",
    restrictions: Restrictions::NONE,
    params: &[],
    cost,
    build,
};

pub(crate) fn cost(a: &CollArgs) -> Cost {
    let n = (a.count * u64::from(a.elem_size)) as f64;
    let lg = f64::from(floor_log2(a.p()));
    let pp = (1u64 << floor_log2(a.p())) as f64;
    if a.size.is_power_of_two() {
        let f = (pp - 1.0) / pp;
        Cost::new(2.0 * lg, 2.0 * f * n, f * n)
    } else {
        Cost::new(2.0 * lg + 3.0, (4.0 - 2.0 / pp) * n, (1.5 - 1.0 / pp) * n)
    }
}

fn build(a: &CollArgs) -> Result<Schedule> {
    super::fold_halving_allreduce(a, |b, fold, me, segs, pos, deps| {
        ag_doubling(b, fold, me, segs, Buf::Recv, pos, None, deps)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verifies_symbolically() {
        crate::verify::sweep::sweep(&ALGORITHM, 20);
    }

    #[test]
    fn pow2_sends_2_lg_p_messages() {
        let s = ALGORITHM.schedule(&CollArgs::new(Collective::Allreduce, 5, 8, 64)).unwrap();
        let sends = s.iter().filter(|(_, k, _)| matches!(k, crate::schedule::StepKind::Send { .. })).count();
        assert_eq!(sends, 6);
    }
}
