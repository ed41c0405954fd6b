//! Recursive-doubling allgather(v): in step k rank r exchanges all blocks of its aligned group of
//! 2^k ranks with r XOR 2^k, doubling what it holds; for p not a power of two, ranks whose partner
//! does not exist get the missing blocks from the holders of their half by recursive halving.
//!
//! Cost (n = total bytes gathered, see the module convention): power of two lg p α + (p−1)/p n β;
//! other p at most 2⌈lg p⌉ α (thakur's bound) and ≈ 2(p−1)/p n β (the
//! fix-up messages re-send blocks to ranks that lacked a partner; the simulator has the exact
//! critical path). Restrictions: none.
//! Paper: thakur §4.1.1 (and MPICH's allgather recursive doubling for the non-power-of-two steps).

use crate::allgather::layout::{Group, Layout};
use crate::allgather::{copy_own, gathered_bytes, recv_layout, send_own};
use crate::args::{CollArgs, Collective};
use crate::cost::{ceil_log2, Cost};
use crate::error::Result;
use crate::registry::{Algorithm, Restrictions};
use crate::schedule::{Buf, Region, Schedule, ScheduleBuilder, StepId};

pub(crate) const ALLGATHER: Algorithm = Algorithm {
    coll: Collective::Allgather,
    name: "recursive_doubling",
    summary: "lg p pairwise exchanges of doubling size; extra halving steps for non-power-of-two p",
    restrictions: Restrictions::NONE,
    params: &[],
    cost,
    build,
};

pub(crate) const ALLGATHERV: Algorithm = Algorithm { coll: Collective::Allgatherv, ..ALLGATHER };

fn cost(a: &CollArgs) -> Cost {
    let p = a.p();
    let busiest = gathered_bytes(a).1;
    if p.is_power_of_two() {
        Cost::new(f64::from(ceil_log2(p)), busiest, 0.0)
    } else {
        // thakur's bound on the steps; the fix-up messages roughly double the bytes
        Cost::new(f64::from(2 * ceil_log2(p)), 2.0 * busiest, 0.0)
    }
}

fn build(a: &CollArgs) -> Result<Schedule> {
    let mut b = ScheduleBuilder::for_args(a);
    let lay = recv_layout(a)?;
    let own = copy_own(&mut b, a, &lay);
    let from_send = Region::new(Buf::Send, 0, lay.region(a.rank).len);
    phase(&mut b, &lay, &Group::rotated(a.size, 0, a.rank), &own, &[], Some(from_send));
    Ok(b.finish())
}

/// Appends a recursive-doubling allgather over group `g` where position v contributes block v of
/// `lay`: `own` are the steps that put this rank's block in place, and every write into `lay`
/// waits for `deps`. `first`, when given, is where this rank's own block can be read without
/// waiting for `own` (its place in `Send`): the first exchange sends from there, so the copy
/// into place is off the critical path (as in `ring::phase`). Returns the steps created.
pub(crate) fn phase(
    b: &mut ScheduleBuilder,
    lay: &Layout,
    g: &Group,
    own: &[StepId],
    deps: &[StepId],
    first: Option<Region>,
) -> Vec<StepId> {
    let (m, me) = (g.m(), g.me);
    let mut have = own.to_vec();
    let mut all = Vec::new();
    let mut mask = 1u32;
    while mask < m {
        let dst = me ^ mask;
        let my_root = me & !(mask - 1);
        let dst_root = dst & !(mask - 1);
        if dst < m {
            let blocks = (my_root, (my_root + mask).min(m));
            all.extend(send_own(b, lay, g.rank(dst), blocks, &have, first.filter(|_| mask == 1)));
            let r = lay.recv(b, g.rank(dst), dst_root, (dst_root + mask).min(m), deps);
            have.extend(&r);
            all.extend(r);
        }
        // Lower half of a group whose upper half is partial: the first `done` ranks of the
        // lower half got the upper half's blocks from their partners; pass them on to the rest
        // by recursive halving (thakur §4.1.1).
        if dst_root > my_root && my_root + mask < m && dst_root + mask > m {
            let done = m - my_root - mask;
            let (lo, hi) = (my_root + mask, m);
            let mut sub = mask >> 1;
            while sub > 0 {
                let peer = me ^ sub;
                let root = me & !(2 * sub - 1);
                if peer > me && me < root + done && peer >= root + done {
                    all.extend(lay.send(b, g.rank(peer), lo, hi, &have));
                } else if peer < me && peer < root + done && me >= root + done {
                    let r = lay.recv(b, g.rank(peer), lo, hi, deps);
                    have.extend(&r);
                    all.extend(r);
                }
                sub >>= 1;
            }
        }
        mask <<= 1;
    }
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verifies_allgather() {
        crate::verify::sweep::sweep(&ALLGATHER, 20);
    }

    #[test]
    fn verifies_allgatherv() {
        crate::verify::sweep::sweep(&ALLGATHERV, 12);
    }
}
