//! Binomial-tree scatter(v): relative rank v = (r − root) mod p receives the blocks of its subtree
//! v..v+2^k (2^k its lowest set bit) from v − 2^k in one message and passes each child its part.
//!
//! Cost (n = bytes scattered by the root, n_root its own block): ⌈lg p⌉ α + (n − n_root) β for
//! any p (lg p α + (p−1)/p n β for a power of two and equal blocks). Intermediate ranks hold their
//! subtree's blocks in a packed scratch buffer. Restrictions: none (scatterv: any counts/displs).
//! Paper: thakur §4.2 (the binomial scatter of Van de Geijn's broadcast) and MPICH's scatter.

use crate::allgather::layout::{Group, Layout};
use crate::args::{CollArgs, Collective};
use crate::cost::{ceil_log2, Cost};
use crate::error::Result;
use crate::gather::binomial::subtree_end;
use crate::registry::{Algorithm, Restrictions};
use crate::schedule::{Buf, Region, Schedule, ScheduleBuilder, StepId};

pub(crate) const SCATTER: Algorithm = Algorithm {
    coll: Collective::Scatter,
    name: "binomial",
    summary: "binomial tree from the root; each rank receives its whole subtree in one message",
    restrictions: Restrictions::NONE,
    params: &[],
    cost,
    build,
};

pub(crate) const SCATTERV: Algorithm = Algorithm { coll: Collective::Scatterv, ..SCATTER };

fn cost(a: &CollArgs) -> Cost {
    let es = f64::from(a.elem_size);
    let total = a.total_count().unwrap_or(0) as f64;
    let own = a.block_count(a.root) as f64;
    Cost::new(f64::from(ceil_log2(a.p())), (total - own) * es, 0.0)
}

fn build(a: &CollArgs) -> Result<Schedule> {
    let p = a.size;
    let g = Group::rotated(p, a.root, a.rank);
    let mut b = ScheduleBuilder::for_args(a);
    let own = a.block_count(a.rank);
    let end = subtree_end(g.me, p);
    let mut blocks = vec![(0, 0); p as usize];
    let lay = if g.me == 0 {
        let d = crate::allgather::displs(a)?;
        for (v, blk) in blocks.iter_mut().enumerate() {
            let r = g.rank(v as u32);
            *blk = (d[r as usize], a.block_count(r));
        }
        Layout::new(Buf::Send, blocks)
    } else if end - g.me == 1 {
        blocks[g.me as usize] = (0, own);
        Layout::new(Buf::Recv, blocks)
    } else {
        let sub: u64 = (g.me..end).map(|v| a.block_count(g.rank(v))).sum();
        let tmp = b.scratch(sub);
        let mut at = 0;
        for v in g.me..end {
            let c = a.block_count(g.rank(v));
            blocks[v as usize] = (at, c);
            at += c;
        }
        Layout::new(tmp, blocks)
    };
    let (got, _) = phase(&mut b, &lay, &g, &[]);
    let mine = lay.region(g.me);
    if mine.buf != Buf::Recv && own > 0 {
        b.copy(mine, Region::new(Buf::Recv, 0, own), &got);
    }
    Ok(b.finish())
}

/// Appends a binomial-tree scatter over group `g` from position 0: `lay` holds (root) or
/// receives the blocks of this rank's subtree, one block per position; the receive waits for
/// `deps`. Returns the steps after which this rank's subtree blocks are in `lay` (`deps` and the
/// receive), and all steps created.
pub(crate) fn phase(b: &mut ScheduleBuilder, lay: &Layout, g: &Group, deps: &[StepId]) -> (Vec<StepId>, Vec<StepId>) {
    let (m, me) = (g.m(), g.me);
    let mut have = deps.to_vec();
    let mut mask = 1u32;
    while mask < m {
        if me & mask != 0 {
            have.extend(lay.recv(b, g.rank(me - mask), me, subtree_end(me, m), deps));
            break;
        }
        mask <<= 1;
    }
    let mut all: Vec<StepId> = have[deps.len()..].to_vec();
    // largest subtree first, each send after the previous one: a send that packs through scratch
    // must not fall behind the smaller ones on a single-ported NIC
    let mut after = have.clone();
    mask >>= 1;
    while mask > 0 {
        let child = me + mask;
        if child < m {
            let ids = lay.send(b, g.rank(child), child, subtree_end(child, m), &after);
            if let Some(&s) = ids.last() {
                after = have.clone();
                after.push(s);
            }
            all.extend(ids);
        }
        mask >>= 1;
    }
    (have, all)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verifies_scatter() {
        crate::verify::sweep::sweep(&SCATTER, 20);
    }

    #[test]
    fn verifies_scatterv() {
        crate::verify::sweep::sweep(&SCATTERV, 12);
    }
}
