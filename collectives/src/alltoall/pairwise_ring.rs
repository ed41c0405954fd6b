//! Pairwise ring alltoall(v): p − 1 steps, in step k rank r sends to r + k and receives from
//! r − k (mod p); step k starts when step k − 1's send and receive are done.
//!
//! Cost (n = p·count·elem bytes per rank): any p, power of two or not: (p − 1)α + n(p − 1)/p·β,
//! γ = 0 (thakur: (p − 1)α + nβ; faraj-yuan adds (p − 2)θ of sequentialization). alltoallv: α =
//! steps that carry data, β = Σ over steps of the largest message. Restrictions: none.
//! Paper: thakur §4.3 (non-power-of-two long messages); faraj-yuan §3.1 ("ring").

use super::phases::{phased, phased_cost, Sync, RING};
use crate::args::{CollArgs, Collective};
use crate::cost::Cost;
use crate::error::Result;
use crate::registry::{Algorithm, Restrictions};
use crate::schedule::Schedule;

pub(super) const ALLTOALL: Algorithm = Algorithm {
    coll: Collective::Alltoall,
    name: "pairwise_ring",
    summary: "p-1 sequential steps: send to rank+k, receive from rank-k",
    restrictions: Restrictions::NONE,
    params: &[],
    cost,
    build,
};

pub(super) const ALLTOALLV: Algorithm = Algorithm { coll: Collective::Alltoallv, ..ALLTOALL };

fn build(args: &CollArgs) -> Result<Schedule> {
    phased(args, RING, Sync::Chain)
}

fn cost(args: &CollArgs) -> Cost {
    phased_cost(args, RING, Sync::Chain)
}
