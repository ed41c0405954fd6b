//! Pairwise-exchange alltoall(v): p − 1 steps, in step k rank r exchanges blocks with r XOR k;
//! step k starts when step k − 1's send and receive are done (MPICH's long-message algorithm).
//!
//! Cost (n = p·count·elem bytes per rank): p a power of two: (p − 1)α + n(p − 1)/p·β, γ = 0
//! (thakur: (p − 1)α + nβ); other p: not applicable. alltoallv: α = steps that carry data, β = Σ
//! over steps of the largest message. Restrictions: pow2. Paper: thakur §4.3; faraj-yuan §3.1
//! ("pair").

use super::phases::{phased, phased_cost, Sync, XOR};
use crate::args::{CollArgs, Collective};
use crate::cost::Cost;
use crate::error::Result;
use crate::registry::{Algorithm, Restrictions};
use crate::schedule::Schedule;

pub(super) const ALLTOALL: Algorithm = Algorithm {
    coll: Collective::Alltoall,
    name: "pairwise_xor",
    summary: "p-1 sequential exchanges with rank XOR k",
    restrictions: Restrictions::POW2,
    params: &[],
    cost,
    build,
};

pub(super) const ALLTOALLV: Algorithm = Algorithm { coll: Collective::Alltoallv, ..ALLTOALL };

fn build(args: &CollArgs) -> Result<Schedule> {
    phased(args, XOR, Sync::Chain)
}

fn cost(args: &CollArgs) -> Cost {
    phased_cost(args, XOR, Sync::Chain)
}
