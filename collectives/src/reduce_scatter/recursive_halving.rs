//! Recursive-halving reduce-scatter: in step k ranks exchange half of their current part of the
//! vector with a partner and reduce the half they keep, so after lg p steps each rank holds its
//! own block fully reduced.
//!
//! Cost: p = 2^k: lg p α + (p−1)/p·n(β + γ). Other p (thakur §4.4's approximate formula; the
//! first r = p − 2^⌊lg p⌋ even ranks send their whole vector to rank + 1 and get their block back
//! at the end): (⌊lg p⌋ + 2)α + 2nβ + n(1 + (p−1)/p)γ.
//! Restrictions: none. Thakur §4.4 halves the partner distance (p/2 first), which mixes
//! non-adjacent ranks and needs a commutative op; this file doubles the distance instead (thakur
//! §5.1's "vector halving, distance doubling") on a bit-reversed block layout, so every partial is
//! a contiguous rank range combined in rank order and rank i still ends with block i. Works for
//! irregular counts (reduce_scatter) and reduce_scatter_block. Paper: thakur §4.4, §5.1.

use crate::args::{CollArgs, Collective};
use crate::cost::{floor_log2, Cost};
use crate::error::Result;
use crate::reduce_scatter::phases::{bitrev, copy, input_segs, recv, rs_halving, send, union, Fold, Segs};
use crate::registry::{Algorithm, Restrictions};
use crate::schedule::{Buf, Order, Region, Schedule, ScheduleBuilder, StepId};

const SUMMARY: &str = "recursive vector halving, distance doubling (order-correct); lg p steps, short/medium vectors";

pub(crate) const ALGORITHM: Algorithm = Algorithm {
    coll: Collective::ReduceScatter,
    name: "recursive_halving",
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
    let lg = f64::from(floor_log2(a.p()));
    let f = (p - 1.0) / p;
    if a.size.is_power_of_two() {
        Cost::new(lg, f * n, f * n)
    } else {
        Cost::new(lg + 2.0, 2.0 * n, n * (1.0 + f))
    }
}

fn build(a: &CollArgs) -> Result<Schedule> {
    let mut b = ScheduleBuilder::for_args(a);
    let blocks = input_segs(a);
    let total: u64 = blocks.iter().map(|s| s.1).sum();
    let (rank, p) = (a.rank, a.size);
    let out = Region::new(Buf::Recv, 0, blocks[rank as usize].1);
    if total == 0 {
        return Ok(b.finish());
    }
    let fold = Fold::new(p, true);
    let input = Region::new(Buf::Send, 0, total);
    let Some(me) = fold.new_rank(rank) else {
        // removed even rank: hand the whole input to rank + 1, get the own block back
        let partner = rank + 1;
        let s: Vec<StepId> = send(&mut b, partner, input, &[]).into_iter().collect();
        recv(&mut b, partner, out, &s);
        return Ok(b.finish());
    };
    let bits = fold.pof2.trailing_zeros();
    // group g = the old ranks new rank g stands for; its blocks are contiguous in the input
    let group_span = |g: u32| {
        let (f, l) = fold.group(g);
        let off = blocks[f as usize].0;
        (off, blocks[l as usize].0 + blocks[l as usize].1 - off)
    };
    // bit-reversed layout: position q holds group bitrev(q)
    let mut segs: Segs = Vec::with_capacity(fold.pof2 as usize);
    let mut off = 0;
    for q in 0..fold.pof2 {
        let len = group_span(bitrev(q, bits)).1;
        segs.push((off, len));
        off += len;
    }
    let acc = b.scratch(total);
    let tmp = b.scratch(total);
    let partner = fold.partner(rank);
    let from_partner = partner.and_then(|pr| recv(&mut b, pr, Region::new(tmp, 0, total), &[]));
    let mut start = Vec::new();
    for q in 0..fold.pof2 {
        let (goff, glen) = group_span(bitrev(q, bits));
        let dst = Region::new(acc, segs[q as usize].0, glen);
        let Some(c) = copy(&mut b, Region::new(Buf::Send, goff, glen), dst, &[]) else { continue };
        match from_partner {
            // the partner is the lower rank of the pair
            Some(r) => start.push(b.reduce(Region::new(tmp, goff, glen), dst, Order::SrcFirst, &[r, c])),
            None => start.push(c),
        }
    }
    let (deps, pos) = rs_halving(&mut b, &fold, me, &segs, acc, tmp, start);
    debug_assert_eq!(pos, bitrev(me, bits) as usize);
    let (first, _) = fold.group(me);
    let res_off = segs[pos].0;
    let mine = rank - first; // 0 or 1 within the group
    let own_off = res_off + if mine == 1 { blocks[first as usize].1 } else { 0 };
    let fin: Vec<StepId> = copy(&mut b, Region::new(acc, own_off, out.len), out, &deps).into_iter().collect();
    if let Some(pr) = partner {
        let poff = res_off + if mine == 1 { 0 } else { blocks[rank as usize].1 };
        send(&mut b, pr, Region::new(acc, poff, blocks[pr as usize].1), &union(&[&deps, &fin]));
    }
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
