//! Linear (flat) broadcast: the root sends the whole message to every other rank, in rank order
//! after itself; every other rank receives it straight from the root.
//!
//! Cost (n = count·elem_size bytes, one port at the root): (p − 1)(α + nβ). More than the
//! binomial tree's ⌈lg p⌉(α + nβ) from p = 4 on a model with concurrent ranks, but one round of
//! latency instead of ⌈lg p⌉ dependent ones: no rank relays, so nobody waits for a forwarder
//! that is not running. That is what matters when ranks outnumber cores (a relay costs a
//! context switch) and for tiny messages at small
//! p, where the root's extra sends cost less than a second round. Restrictions: none.
//! Source: the flat tree of MPICH's and Open MPI's `bcast` ("linear", Open MPI's
//! `ompi_coll_base_bcast_intra_basic_linear`); thakur §4.2 names it as the naive baseline.

use crate::allgather::layout::{Group, Layout};
use crate::args::{CollArgs, Collective};
use crate::cost::Cost;
use crate::error::Result;
use crate::registry::{Algorithm, Restrictions};
use crate::schedule::{Buf, Schedule, ScheduleBuilder};

pub(crate) const ALGORITHM: Algorithm = Algorithm {
    coll: Collective::Bcast,
    name: "linear",
    summary: "root sends the whole message to every rank (flat tree); 1 round, p − 1 sends at the root",
    restrictions: Restrictions::NONE,
    params: &[],
    cost,
    build,
};

fn cost(a: &CollArgs) -> Cost {
    let n = (a.count * u64::from(a.elem_size)) as f64;
    let k = f64::from(a.size.saturating_sub(1));
    Cost::new(k, k * n, 0.0)
}

fn build(a: &CollArgs) -> Result<Schedule> {
    let mut b = ScheduleBuilder::for_args(a);
    let lay = Layout::new(Buf::Recv, vec![(0, a.count)]);
    let g = Group::rotated(a.size, a.root, a.rank);
    if g.me == 0 {
        for v in 1..g.m() {
            lay.send(&mut b, g.rank(v), 0, 1, &[]);
        }
    } else {
        lay.recv(&mut b, g.rank(0), 0, 1, &[]);
    }
    Ok(b.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verifies() {
        crate::verify::sweep::sweep(&ALGORITHM, 20);
    }
}
