//! Ring alltoall(v) with a full barrier between phases: p − 1 phases (send to r + k, receive from
//! r − k), separated by p − 2 dissemination barriers, so the phases run in lock step.
//!
//! Cost (n = p·count·elem bytes per rank, e = elem): any p: (p − 1)α + n(p − 1)/p·β +
//! (p − 2)⌈lg p⌉(α + eβ) for the barriers (faraj-yuan's (p − 2)δ_h with δ_h = ⌈lg p⌉α; our signals
//! carry one element, see `phases::Signals`), γ = 0; power of two: ⌈lg p⌉ = lg p. alltoallv:
//! α = data phases plus barrier rounds, β = Σ over phases of the largest message plus e per round.
//! Restrictions: none. Paper: faraj-yuan §3.1 ("ring with MPI barrier"); barrier: thakur §2.

use super::phases::{phased, phased_cost, Sync, RING};
use crate::args::{CollArgs, Collective};
use crate::cost::Cost;
use crate::error::Result;
use crate::registry::{Algorithm, Restrictions};
use crate::schedule::Schedule;

pub(super) const ALLTOALL: Algorithm = Algorithm {
    coll: Collective::Alltoall,
    name: "ring_full_barrier",
    summary: "ring (send rank+k, recv rank-k) with a full barrier between phases",
    restrictions: Restrictions::NONE,
    params: &[],
    cost,
    build,
};

pub(super) const ALLTOALLV: Algorithm = Algorithm { coll: Collective::Alltoallv, ..ALLTOALL };

fn build(args: &CollArgs) -> Result<Schedule> {
    phased(args, RING, Sync::Barriers(u64::MAX))
}

fn cost(args: &CollArgs) -> Cost {
    phased_cost(args, RING, Sync::Barriers(u64::MAX))
}
