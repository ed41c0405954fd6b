//! Binary-blocks allreduce: p is cut into power-of-two blocks (its binary representation); each
//! block reduce-scatters by halving/doubling, smaller blocks feed their partials into the next
//! larger block, and the result flows back while every block allgathers (thakur §5.2, Fig 13).
//!
//! Cost: p = 2^k: identical to rabenseifner, 2 lg p α + 2(p−1)/p·nβ + (p−1)/p·nγ. Other p: no
//! closed form in the paper (it depends on δ_expo,max, the largest gap between consecutive
//! exponents); the registry row gives the critical path along the block chain: part 1 adds
//! 2^(e_{j−1}−e_j) messages of n/2^(e_{j−1}) per step down the chain, part 2 one message per block.
//! Restrictions: none (blocks are contiguous rank ranges, the larger block holds the lower ranks
//! and distance doubling keeps partials contiguous: non-commutative ops are fine).
//! Faithfulness: as the paper — blocks' own reduce-scatter, cascade smallest → largest, then the
//! allgather in each block, where block k's rank i gets its segment from block k−1's rank i as soon
//! as that rank holds a segment of block k's size (one message instead of the paper's pair).
//! Paper: thakur §5.2 (rabenseifner-2004 §3.6).

use crate::args::{CollArgs, Collective};
use crate::cost::Cost;
use crate::error::Result;
use crate::reduce_scatter::phases::{
    ag_doubling_steps, bb_cost, bb_reduce_scatter, binary_blocks, copy, even_segs, masks, recv, seg_region, send, union,
};
use crate::registry::{Algorithm, Restrictions};
use crate::schedule::{Buf, Region, Schedule, ScheduleBuilder};

pub(crate) const ALGORITHM: Algorithm = Algorithm {
    coll: Collective::Allreduce,
    name: "binary_blocks",
    summary: "halving-doubling inside the power-of-two blocks of p, blocks chained; long vectors, p ≠ 2^k",
    restrictions: Restrictions::NONE,
    params: &[],
    cost,
    build,
};

fn cost(a: &CollArgs) -> Cost {
    bb_cost(a.p(), (a.count * u64::from(a.elem_size)) as f64, true, false)
}

fn build(a: &CollArgs) -> Result<Schedule> {
    let mut b = ScheduleBuilder::for_args(a);
    let n = a.count;
    if n == 0 {
        return Ok(b.finish());
    }
    let acc = Region::new(Buf::Recv, 0, n);
    let start: Vec<_> = copy(&mut b, Region::new(Buf::Send, 0, n), acc, &[]).into_iter().collect();
    if a.size == 1 {
        return Ok(b.finish());
    }
    let blocks = binary_blocks(a.size);
    let fine = even_segs(n, 1 << blocks[0].exp);
    let st = bb_reduce_scatter(&mut b, &blocks, a.rank, &fine, Buf::Recv, start);
    let bl = blocks[st.k];
    let mut deps = st.deps;
    if st.k > 0 {
        // the final values of my segment, from the same index in the next larger block
        let from = blocks[st.k - 1].start + st.me;
        let r = recv(&mut b, from, seg_region(Buf::Recv, &st.segs, st.pos, st.pos + 1), &deps);
        deps = union(&[&deps, &r.into_iter().collect::<Vec<_>>()]);
    }
    let mut masks = masks(1 << bl.exp);
    masks.reverse();
    let smaller = blocks.get(st.k + 1).copied();
    let t = smaller.map_or(masks.len(), |sm| (bl.exp - sm.exp) as usize);
    let mut range = (st.pos, st.pos + 1);
    let (d, _) = ag_doubling_steps(&mut b, &bl, st.me, &st.segs, Buf::Recv, &mut range, &masks[..t], None, deps);
    if let Some(sm) = smaller {
        if st.me < 1 << sm.exp {
            send(&mut b, sm.start + st.me, seg_region(Buf::Recv, &st.segs, range.0, range.1), &d);
        }
    }
    ag_doubling_steps(&mut b, &bl, st.me, &st.segs, Buf::Recv, &mut range, &masks[t..], None, d);
    Ok(b.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verifies_symbolically() {
        crate::verify::sweep::sweep(&ALGORITHM, 20);
    }

    #[test]
    fn pow2_cost_is_rabenseifner() {
        let a = CollArgs::new(Collective::Allreduce, 0, 16, 1000);
        assert_eq!(cost(&a), super::super::rabenseifner::cost(&a));
    }
}
