//! Binary-blocks reduce: p is cut into power-of-two blocks (its binary representation); each block
//! reduce-scatters by halving/doubling, smaller blocks feed their partials into the next larger
//! block, and the largest block gathers the result to the root with a binomial tree (thakur §5.2).
//!
//! Cost: p = 2^k: identical to rabenseifner, 2 lg p α + 2(p−1)/p·nβ + (p−1)/p·nγ. Other p: no
//! closed form in the paper (depends on δ_expo,max); the registry row gives the critical path
//! along the block chain (part 1) plus the gather in the largest block, and one more message of
//! n/2^e0 when the root is outside the largest block.
//! Restrictions: none (contiguous blocks, lower ranks in larger blocks, distance doubling:
//! non-commutative ops are fine).
//! Faithfulness: as the paper, including "if the root is outside the largest block, the result
//! segment of rank 0 is sent to the root and the root plays the role of rank 0" in the gather.
//! Paper: thakur §5.2 (rabenseifner-2004 §3.6).

use crate::args::{CollArgs, Collective};
use crate::cost::{pow2_floor, Cost};
use crate::error::Result;
use crate::reduce_scatter::phases::{
    ag_doubling, bb_cost, bb_reduce_scatter, binary_blocks, block_segs, copy, even_segs, recv, seg_region, send, union,
    RankBlock,
};
use crate::registry::{Algorithm, Restrictions};
use crate::schedule::{Buf, Region, Schedule, ScheduleBuilder};

pub(crate) const ALGORITHM: Algorithm = Algorithm {
    coll: Collective::Reduce,
    name: "binary_blocks",
    summary: "halving inside the power-of-two blocks of p, blocks chained, gather to the root; long vectors",
    restrictions: Restrictions::NONE,
    params: &[],
    cost,
    build,
};

fn cost(a: &CollArgs) -> Cost {
    let outside = u64::from(a.root) >= pow2_floor(a.p());
    bb_cost(a.p(), (a.count * u64::from(a.elem_size)) as f64, false, outside)
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
    let blocks = binary_blocks(a.size);
    let big = blocks[0];
    let fine = even_segs(n, 1 << big.exp);
    let st = bb_reduce_scatter(&mut b, &blocks, a.rank, &fine, acc_buf, start);
    let root_inside = a.root < 1 << big.exp;
    // in the gather, new rank 0 of block 0 is the root when the root is outside block 0
    let team = RankBlock { zero: (!root_inside).then_some(a.root), ..big };
    let groot = if root_inside { a.root } else { 0 };
    if st.k == 0 {
        if !root_inside && st.me == 0 {
            send(&mut b, a.root, seg_region(acc_buf, &st.segs, st.pos, st.pos + 1), &st.deps);
        } else {
            ag_doubling(&mut b, &team, st.me, &st.segs, acc_buf, st.pos, Some(groot), st.deps);
        }
    } else if a.rank == a.root {
        let segs0 = block_segs(&fine, big.exp, big.exp);
        let r = recv(&mut b, 0, seg_region(acc_buf, &segs0, 0, 1), &st.deps);
        let deps = union(&[&st.deps, &r.into_iter().collect::<Vec<_>>()]);
        ag_doubling(&mut b, &team, 0, &segs0, acc_buf, 0, Some(0), deps);
    }
    Ok(b.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verifies_symbolically() {
        crate::verify::sweep::sweep(&ALGORITHM, 20);
    }
}
