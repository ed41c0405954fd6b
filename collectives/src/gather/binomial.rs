//! Binomial-tree gather(v): relative rank v = (r − root) mod p collects the blocks of its subtree
//! v..v+2^k (2^k its lowest set bit) from its children, then sends them to v − 2^k in one message.
//!
//! Cost (n = bytes gathered at the root, n_root its own block): ⌈lg p⌉ α + (n − n_root) β for any
//! p (lg p α + (p−1)/p n β for a power of two and equal blocks). Intermediate ranks hold their
//! subtree's blocks in a packed scratch buffer. Restrictions: none (gatherv: any counts/displs).
//! Paper: thakur §4.2 (binomial tree, used in reverse) and MPICH's binomial gather.

use crate::allgather::layout::{Group, Layout};
use crate::args::{CollArgs, Collective};
use crate::cost::{ceil_log2, Cost};
use crate::error::Result;
use crate::registry::{Algorithm, Restrictions};
use crate::schedule::{Buf, Region, Schedule, ScheduleBuilder, StepId};

pub(crate) const GATHER: Algorithm = Algorithm {
    coll: Collective::Gather,
    name: "binomial",
    summary: "binomial tree towards the root; each rank forwards its whole subtree in one message",
    restrictions: Restrictions::NONE,
    params: &[],
    cost,
    build,
};

pub(crate) const GATHERV: Algorithm = Algorithm { coll: Collective::Gatherv, ..GATHER };

fn cost(a: &CollArgs) -> Cost {
    let es = f64::from(a.elem_size);
    let total = a.total_count().unwrap_or(0) as f64;
    let own = a.block_count(a.root) as f64;
    Cost::new(f64::from(ceil_log2(a.p())), (total - own) * es, 0.0)
}

/// End (exclusive) of position v's subtree in a binomial tree of m positions rooted at 0.
pub(crate) fn subtree_end(v: u32, m: u32) -> u32 {
    if v == 0 {
        m
    } else {
        v.saturating_add(1 << v.trailing_zeros()).min(m)
    }
}

fn build(a: &CollArgs) -> Result<Schedule> {
    let p = a.size;
    let g = Group::rotated(p, a.root, a.rank);
    let mut b = ScheduleBuilder::for_args(a);
    let root_lay = if g.me == 0 {
        let d = crate::allgather::displs(a)?;
        Layout::new(Buf::Recv, (0..p).map(|v| (d[g.rank(v) as usize], a.block_count(g.rank(v)))).collect())
    } else {
        Layout::new(Buf::Recv, Vec::new())
    };
    gather_to(&mut b, &g, root_lay, &|r| a.block_count(r));
    Ok(b.finish())
}

/// Appends a whole binomial gather over group `g` of every rank's `Send[count(rank)]` into
/// `root_lay` (position v's block; used on position 0 only, as the root's own block is copied
/// there from `Send`). Intermediate ranks use a packed scratch buffer for their subtree, leaves
/// send straight from `Send`. Returns the steps created.
pub(crate) fn gather_to(
    b: &mut ScheduleBuilder,
    g: &Group,
    root_lay: Layout,
    count: &dyn Fn(u32) -> u64,
) -> Vec<StepId> {
    let (m, me) = (g.m(), g.me);
    let own = count(g.rank(me));
    let end = subtree_end(me, m);
    let mut own_deps = Vec::new();
    let lay = if me == 0 {
        if own > 0 {
            own_deps.push(b.copy(Region::new(Buf::Send, 0, own), root_lay.region(0), &[]));
        }
        root_lay
    } else if end - me == 1 {
        let mut blocks = vec![(0, 0); m as usize];
        blocks[me as usize] = (0, own);
        Layout::new(Buf::Send, blocks)
    } else {
        let sub: u64 = (me..end).map(|v| count(g.rank(v))).sum();
        let tmp = b.scratch(sub);
        let mut blocks = vec![(0, 0); m as usize];
        let mut at = 0;
        for v in me..end {
            let c = count(g.rank(v));
            blocks[v as usize] = (at, c);
            at += c;
        }
        if own > 0 {
            own_deps.push(b.copy(Region::new(Buf::Send, 0, own), Region::new(tmp, 0, own), &[]));
        }
        Layout::new(tmp, blocks)
    };
    let mut all = own_deps.clone();
    all.extend(phase(b, &lay, g, &own_deps, &[]));
    all
}

/// Appends a binomial-tree gather over group `g` to position 0: `lay` holds (or receives) the
/// blocks of this rank's subtree, one block per position; `own` are the steps that put this
/// rank's own block in place, and every write into `lay` waits for `deps`. Returns the steps
/// created.
pub(crate) fn phase(b: &mut ScheduleBuilder, lay: &Layout, g: &Group, own: &[StepId], deps: &[StepId]) -> Vec<StepId> {
    let (m, me) = (g.m(), g.me);
    let mut have = own.to_vec();
    let mut all = Vec::new();
    let mut mask = 1u32;
    while mask < m {
        if me & mask != 0 {
            all.extend(lay.send(b, g.rank(me - mask), me, subtree_end(me, m), &have));
            break;
        }
        let child = me + mask;
        if child < m {
            let ids = lay.recv(b, g.rank(child), child, subtree_end(child, m), deps);
            have.extend(&ids);
            all.extend(ids);
        }
        mask <<= 1;
    }
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verifies_gather() {
        crate::verify::sweep::sweep(&GATHER, 20);
    }

    #[test]
    fn verifies_gatherv() {
        crate::verify::sweep::sweep(&GATHERV, 12);
    }
}
