//! Pair alltoall(v) with a full barrier between phases: p − 1 phases exchanging with r XOR k,
//! separated by p − 2 butterfly barriers (r XOR 2^j), so the phases run in lock step.
//!
//! Cost (n = p·count·elem bytes per rank, e = elem): p a power of two: (p − 1)α + n(p − 1)/p·β +
//! (p − 2)·lg p·(α + eβ) for the barriers (faraj-yuan's (p − 2)δ_h with δ_h = lg p·α; our signals
//! carry one element, see `phases::Signals`), γ = 0; other p: not applicable. alltoallv: α = data
//! phases plus barrier rounds, β = Σ over phases of the largest message plus e per round. Restrictions: pow2. Paper: faraj-yuan §3.1 ("pair with MPI barrier").

use super::phases::{phased, phased_cost, Sync, XOR};
use crate::args::{CollArgs, Collective};
use crate::cost::Cost;
use crate::error::Result;
use crate::registry::{Algorithm, Restrictions};
use crate::schedule::Schedule;

pub(super) const ALLTOALL: Algorithm = Algorithm {
    coll: Collective::Alltoall,
    name: "pair_full_barrier",
    summary: "XOR pairs with a full barrier between phases",
    restrictions: Restrictions::POW2,
    params: &[],
    cost,
    build,
};

pub(super) const ALLTOALLV: Algorithm = Algorithm { coll: Collective::Alltoallv, ..ALLTOALL };

fn build(args: &CollArgs) -> Result<Schedule> {
    phased(args, XOR, Sync::Barriers(u64::MAX))
}

fn cost(args: &CollArgs) -> Cost {
    phased_cost(args, XOR, Sync::Barriers(u64::MAX))
}
