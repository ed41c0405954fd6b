//! Recursive-doubling reduce-scatter: in step k ranks 2^k apart exchange every block except those
//! of their own 2^k-rank subtree and reduce, so after lg p steps each rank holds its block fully
//! reduced; short messages.
//!
//! Cost: p = 2^k: lg p α + n(lg p − (p−1)/p)(β + γ) (thakur §4.4, T_short). Other p (the first r =
//! p − p' even ranks, p' = 2^⌊lg p⌋, hand their vector to rank + 1 and get their block back):
//! (lg p' + 2)α + n(1 + lg p' − (p'−1)/p' + 1/p)β + n(1 + lg p' − (p'−1)/p')γ.
//! Restrictions: none (partials are contiguous rank ranges, lower range first: non-commutative
//! ops are fine). A step's two block ranges are packed into one message with local copies (MPICH
//! uses a derived datatype). Irregular counts are fine. Paper: thakur §4.4.

use crate::args::{CollArgs, Collective};
use crate::cost::{floor_log2, Cost};
use crate::error::Result;
use crate::reduce_scatter::phases::{copy, input_segs, recv, seg_region, send, union, Fold, Segs};
use crate::registry::{Algorithm, Restrictions};
use crate::schedule::{Buf, Order, Region, Schedule, ScheduleBuilder, StepId};

const SUMMARY: &str = "recursive doubling, all blocks but the own subtree's per step; for very short vectors";

pub(crate) const ALGORITHM: Algorithm = Algorithm {
    coll: Collective::ReduceScatter,
    name: "recursive_doubling",
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
    let pof2 = 1u64 << floor_log2(a.p());
    let lg = f64::from(floor_log2(a.p()));
    let core = n * (lg - (pof2 as f64 - 1.0) / pof2 as f64);
    if a.size.is_power_of_two() {
        Cost::new(lg, core, core)
    } else {
        Cost::new(lg + 2.0, n + core + n / a.p() as f64, n + core)
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
        let partner = rank + 1;
        let s: Vec<StepId> = send(&mut b, partner, input, &[]).into_iter().collect();
        recv(&mut b, partner, out, &s);
        return Ok(b.finish());
    };
    // natural layout, one segment per new rank (its group's blocks)
    let segs: Segs = (0..fold.pof2)
        .map(|g| {
            let (f, l) = fold.group(g);
            let off = blocks[f as usize].0;
            (off, blocks[l as usize].0 + blocks[l as usize].1 - off)
        })
        .collect();
    let acc = b.scratch(total);
    let tmp = b.scratch(total);
    let pack = b.scratch(total);
    let accr = Region::new(acc, 0, total);
    let c: Vec<StepId> = copy(&mut b, input, accr, &[]).into_iter().collect();
    let partner = fold.partner(rank);
    let mut deps = c.clone();
    if let Some(pr) = partner {
        let r = b.recv(pr, Region::new(tmp, 0, total), &[]);
        deps = vec![b.reduce(Region::new(tmp, 0, total), accr, Order::SrcFirst, &union(&[&[r], &c]))];
    }
    let pof2 = fold.pof2 as usize;
    let mut m = 1usize;
    while m < pof2 {
        let me_u = me as usize;
        let peer_new = me_u ^ m;
        let peer = fold.real(peer_new as u32);
        let t = me_u & !(m - 1);
        let tp = peer_new & !(m - 1);
        // send everything outside my subtree, receive everything outside the partner's
        let give = [seg_region(acc, &segs, 0, t), seg_region(acc, &segs, t + m, pof2)];
        let take = [seg_region(acc, &segs, 0, tp), seg_region(acc, &segs, tp + m, pof2)];
        let mut stage: Vec<StepId> = Vec::new();
        let glen: u64 = give.iter().map(|r| r.len).sum();
        let nonempty: Vec<Region> = give.iter().copied().filter(|r| r.len > 0).collect();
        let src = if nonempty.len() == 2 {
            let mut o = 0;
            for g in &nonempty {
                let d = Region::new(pack, o, g.len);
                stage.push(b.copy(*g, d, &deps));
                o += g.len;
            }
            Region::new(pack, 0, glen)
        } else {
            nonempty.first().copied().unwrap_or(Region::new(acc, 0, 0))
        };
        let readers = stage.clone();
        let s = send(&mut b, peer, src, &union(&[&deps, &readers]));
        let tlen: u64 = take.iter().map(|r| r.len).sum();
        let r = recv(&mut b, peer, Region::new(tmp, 0, tlen), &deps);
        let order = if tp < t { Order::SrcFirst } else { Order::DstFirst };
        let sent: Vec<StepId> = s.into_iter().collect();
        let mut out_steps = sent.clone();
        if let Some(r) = r {
            let mut o = 0;
            for tk in take.iter().filter(|r| r.len > 0) {
                // the reduced ranges overlap what was sent (or packed): wait for those reads
                let d = union(&[&[r], &readers, &sent, &deps]);
                out_steps.push(b.reduce(Region::new(tmp, o, tk.len), *tk, order, &d));
                o += tk.len;
            }
        }
        if !out_steps.is_empty() {
            deps = out_steps;
        }
        m <<= 1;
    }
    let (first, _) = fold.group(me);
    let res_off = segs[me as usize].0;
    let own_off = res_off + if rank > first { blocks[first as usize].1 } else { 0 };
    let fin: Vec<StepId> = copy(&mut b, Region::new(acc, own_off, out.len), out, &deps).into_iter().collect();
    if let Some(pr) = partner {
        let poff = res_off + if rank > first { 0 } else { blocks[rank as usize].1 };
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
