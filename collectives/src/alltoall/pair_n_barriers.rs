//! Pair alltoall(v) with N full barriers: p − 1 phases exchanging with r XOR k, split into N + 1
//! nearly equal groups by N butterfly barriers (r XOR 2^j) (parameter `barriers`, clamped to p − 2).
//!
//! Cost (n = p·count·elem bytes per rank, e = elem): p a power of two: (p − 1)α + n(p − 1)/p·β +
//! min(N, p − 2)·lg p·(α + eβ) for the barriers (faraj-yuan's Nδ_h; our signals carry one element,
//! see `phases::Signals`), γ = 0; other p: not applicable. alltoallv: α = data phases plus barrier
//! rounds, β = Σ over phases of the largest message plus e per round.
//! Restrictions: pow2. Paper: faraj-yuan §3.1 ("pair with N MPI barriers").

use super::phases::{n_barriers, phased, phased_cost, Sync, BARRIERS_SPEC, XOR};
use crate::args::{CollArgs, Collective};
use crate::cost::Cost;
use crate::error::Result;
use crate::registry::{Algorithm, Restrictions};
use crate::schedule::Schedule;

pub(super) const ALLTOALL: Algorithm = Algorithm {
    coll: Collective::Alltoall,
    name: "pair_n_barriers",
    summary: "XOR pairs with N full barriers spread over the phases",
    restrictions: Restrictions::POW2,
    params: &[BARRIERS_SPEC],
    cost,
    build,
};

pub(super) const ALLTOALLV: Algorithm = Algorithm { coll: Collective::Alltoallv, ..ALLTOALL };

fn build(args: &CollArgs) -> Result<Schedule> {
    phased(args, XOR, Sync::Barriers(n_barriers(args)))
}

fn cost(args: &CollArgs) -> Cost {
    phased_cost(args, XOR, Sync::Barriers(n_barriers(args)))
}
