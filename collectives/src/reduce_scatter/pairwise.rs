//! Pairwise-exchange reduce-scatter: in step i = 1..p−1 rank r sends its input block for rank r+i
//! to it and receives its own block's input from rank r−i, reducing as the blocks arrive.
//!
//! Cost (any p): (p−1)α + (p−1)/p·n(β + γ) (thakur §4.4, T_long).
//! Restrictions: none — the contributions of ranks below r and above r are folded into two
//! separate partials in arrival order and joined at the end, so non-commutative ops come out in
//! rank order at no extra message cost. Irregular counts are fine. Paper: thakur §4.4.

use crate::args::{CollArgs, Collective};
use crate::cost::Cost;
use crate::error::Result;
use crate::reduce_scatter::phases::{input_segs, rs_pairwise, MeshOrder, PairwiseRs};
use crate::registry::{Algorithm, Restrictions};
use crate::schedule::{Buf, Region, Schedule, ScheduleBuilder};

const SUMMARY: &str = "pairwise exchange, p−1 steps of one block each; for long vectors";

pub(crate) const ALGORITHM: Algorithm = Algorithm {
    coll: Collective::ReduceScatter,
    name: "pairwise",
    summary: SUMMARY,
    restrictions: Restrictions::NONE,
    params: &[],
    cost,
    build,
};

pub(crate) const ALGORITHM_BLOCK: Algorithm = Algorithm { coll: Collective::ReduceScatterBlock, ..ALGORITHM };

fn cost(a: &CollArgs) -> Cost {
    let total = a.total_count().unwrap_or(0);
    let n = (total * u64::from(a.elem_size)) as f64;
    let p = a.p() as f64;
    let f = (p - 1.0) / p;
    Cost::new(p - 1.0, f * n, f * n)
}

fn build(a: &CollArgs) -> Result<Schedule> {
    let mut b = ScheduleBuilder::for_args(a);
    let segs = input_segs(a);
    let out = Region::new(Buf::Recv, 0, segs[a.rank as usize].1);
    // Out of place the result may be written from the start: the first contribution lands in
    // it, no final copy, and nothing waits for the sends (the executor may then reduce the other
    // contributions straight out of the senders' buffers).
    let how = PairwiseRs { order: MeshOrder::Rotated, land_in_out: !a.in_place, accumulate: false };
    rs_pairwise(&mut b, a.rank, a.size, Buf::Send, &segs, out, how, &[]);
    Ok(b.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verifies_symbolically() {
        crate::verify::sweep::sweep(&ALGORITHM, 13);
        crate::verify::sweep::sweep(&ALGORITHM_BLOCK, 13);
    }
}
