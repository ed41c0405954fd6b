//! Ring alltoall(v) with light barriers: p − 1 phases (send to r + k, receive from r − k), and
//! before sending in phase k a rank waits for a one-element "ready" from its phase-k receiver,
//! sent when that receiver finished its phase k − 1 receive, so no node receives two phases at once.
//!
//! Cost (n = p·count·elem bytes per rank, e = elem): any p: (p − 1)α + n(p − 1)/p·β + (p − 2)(α + eβ)
//! for the ready messages (faraj-yuan's (p − 2)δ_l with δ_l = α; ours carry one element, see
//! `phases::Signals`), γ = 0. alltoallv: α = data phases plus the ready messages between them,
//! β = Σ over phases of the largest message plus e per ready message. Restrictions: none.
//! Paper: faraj-yuan §3.1 ("ring with light barrier").

use super::phases::{phased, phased_cost, Sync, RING};
use crate::args::{CollArgs, Collective};
use crate::cost::Cost;
use crate::error::Result;
use crate::registry::{Algorithm, Restrictions};
use crate::schedule::Schedule;

pub(super) const ALLTOALL: Algorithm = Algorithm {
    coll: Collective::Alltoall,
    name: "ring_light_barrier",
    summary: "ring (send rank+k, recv rank-k) with a one-element ready handshake per phase",
    restrictions: Restrictions::NONE,
    params: &[],
    cost,
    build,
};

pub(super) const ALLTOALLV: Algorithm = Algorithm { coll: Collective::Alltoallv, ..ALLTOALL };

fn build(args: &CollArgs) -> Result<Schedule> {
    phased(args, RING, Sync::Light)
}

fn cost(args: &CollArgs) -> Cost {
    phased_cost(args, RING, Sync::Light)
}
