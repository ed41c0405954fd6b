//! Algorithms of `alltoall` and `alltoallv`, one file each (each file registers both operations).
//!
//! Cost convention of every file: n = p·count·elem bytes that a rank sends (thakur §4.3); α counts
//! messages on the critical path, β bytes through the busiest port on it; γ = 0 (no reduction;
//! faraj-yuan's γ is contention, which the α–β model leaves out).

mod forward;
mod phases;

mod bruck;
mod pair_full_barrier;
mod pair_light_barrier;
mod pair_n_barriers;
mod pairwise_ring;
mod pairwise_xor;
mod ring_full_barrier;
mod ring_light_barrier;
mod ring_n_barriers;
mod simple;
mod spreading_simple;

#[cfg(test)]
mod tests;

use crate::registry::Algorithm;

/// The registry rows of this operation.
pub(crate) const ALGORITHMS: &[Algorithm] = &[
    bruck::ALLTOALL,
    bruck::ALLTOALLV,
    simple::ALLTOALL,
    simple::ALLTOALLV,
    spreading_simple::ALLTOALL,
    spreading_simple::ALLTOALLV,
    pairwise_xor::ALLTOALL,
    pairwise_xor::ALLTOALLV,
    pairwise_ring::ALLTOALL,
    pairwise_ring::ALLTOALLV,
    ring_light_barrier::ALLTOALL,
    ring_light_barrier::ALLTOALLV,
    pair_light_barrier::ALLTOALL,
    pair_light_barrier::ALLTOALLV,
    ring_full_barrier::ALLTOALL,
    ring_full_barrier::ALLTOALLV,
    pair_full_barrier::ALLTOALL,
    pair_full_barrier::ALLTOALLV,
    ring_n_barriers::ALLTOALL,
    ring_n_barriers::ALLTOALLV,
    pair_n_barriers::ALLTOALL,
    pair_n_barriers::ALLTOALLV,
];
