//! Ring allgather(v): in step k (0 ≤ k < p−1) rank r sends block r−k to r+1 and receives block
//! r−k−1 from r−1, each block going straight into its place in `Recv`. The first step sends this
//! rank's block from `Send`, so it does not wait for the local copy into `Recv` (at p = 2 the whole
//! exchange overlaps that copy; under MPI_IN_PLACE the block is already in `Recv`).
//!
//! Cost (n = total bytes gathered, see the module convention): (p − 1) α + (p−1)/p n β for any p
//! (n − min_i n_i bytes for uneven allgatherv). Restrictions: none.
//! Paper: thakur §4.1 (the ring of MPICH's old allgather).

use crate::allgather::layout::{Group, Layout};
use crate::allgather::{copy_own, gathered_bytes, recv_layout, send_own};
use crate::args::{CollArgs, Collective};
use crate::cost::Cost;
use crate::error::Result;
use crate::registry::{Algorithm, Restrictions};
use crate::schedule::{Buf, Region, Schedule, ScheduleBuilder, StepId};

pub(crate) const ALLGATHER: Algorithm = Algorithm {
    coll: Collective::Allgather,
    name: "ring",
    summary: "p−1 steps around a ring, one block per step, nearest-neighbour traffic",
    restrictions: Restrictions::NONE,
    params: &[],
    cost,
    build,
};

pub(crate) const ALLGATHERV: Algorithm = Algorithm { coll: Collective::Allgatherv, ..ALLGATHER };

fn cost(a: &CollArgs) -> Cost {
    Cost::new(f64::from(a.size - 1), gathered_bytes(a).1, 0.0)
}

fn build(a: &CollArgs) -> Result<Schedule> {
    let mut b = ScheduleBuilder::for_args(a);
    let lay = recv_layout(a)?;
    let own = copy_own(&mut b, a, &lay);
    let from_send = Region::new(Buf::Send, 0, lay.region(a.rank).len);
    phase(&mut b, &lay, &Group::rotated(a.size, 0, a.rank), &own, &[], Some(from_send));
    Ok(b.finish())
}

/// Appends a ring allgather over group `g` where position v contributes block v of `lay`: `own`
/// are the steps that put this rank's block in place, and every write into `lay` waits for
/// `deps`. `first`, when given, is where this rank's own block can be read without waiting for
/// `own` (its place in `Send`): the first step sends from there. Returns the steps created.
pub(crate) fn phase(
    b: &mut ScheduleBuilder,
    lay: &Layout,
    g: &Group,
    own: &[StepId],
    deps: &[StepId],
    first: Option<Region>,
) -> Vec<StepId> {
    let (m, me) = (g.m(), g.me);
    let (right, left) = (g.rank((me + 1) % m), g.rank((me + m - 1) % m));
    let mut all = Vec::new();
    let mut prev = own.to_vec();
    for k in 0..m.saturating_sub(1) {
        let sb = (me + m - k) % m;
        let rb = (me + 2 * m - k - 1) % m;
        all.extend(send_own(b, lay, right, (sb, sb + 1), &prev, first.filter(|_| k == 0)));
        prev = lay.recv(b, left, rb, rb + 1, deps);
        all.extend(&prev);
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
