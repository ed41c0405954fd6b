//! Ring alltoall(v) with N full barriers: p − 1 phases (send to r + k, receive from r − k), split
//! into N + 1 nearly equal groups by N dissemination barriers (parameter `barriers`, clamped to p − 2).
//!
//! Cost (n = p·count·elem bytes per rank, e = elem): any p: (p − 1)α + n(p − 1)/p·β +
//! min(N, p − 2)⌈lg p⌉(α + eβ) for the barriers (faraj-yuan's Nδ_h with δ_h = ⌈lg p⌉α; our
//! signals carry one element, see `phases::Signals`), γ = 0; power of two: ⌈lg p⌉ = lg p.
//! alltoallv: α = data phases plus barrier rounds, β = Σ over phases of the largest message plus e
//! per round.
//! Restrictions: none. Paper: faraj-yuan §3.1 ("ring with N MPI barriers").

use super::phases::{n_barriers, phased, phased_cost, Sync, BARRIERS_SPEC, RING};
use crate::args::{CollArgs, Collective};
use crate::cost::Cost;
use crate::error::Result;
use crate::registry::{Algorithm, Restrictions};
use crate::schedule::Schedule;

pub(super) const ALLTOALL: Algorithm = Algorithm {
    coll: Collective::Alltoall,
    name: "ring_n_barriers",
    summary: "ring (send rank+k, recv rank-k) with N full barriers spread over the phases",
    restrictions: Restrictions::NONE,
    params: &[BARRIERS_SPEC],
    cost,
    build,
};

pub(super) const ALLTOALLV: Algorithm = Algorithm { coll: Collective::Alltoallv, ..ALLTOALL };

fn build(args: &CollArgs) -> Result<Schedule> {
    phased(args, RING, Sync::Barriers(n_barriers(args)))
}

fn cost(args: &CollArgs) -> Cost {
    phased_cost(args, RING, Sync::Barriers(n_barriers(args)))
}
