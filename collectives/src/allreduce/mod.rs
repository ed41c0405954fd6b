//! Algorithms of `allreduce`, one file each.

mod allgather_reduce;
mod binary_blocks;
mod rabenseifner;
mod recursive_doubling;
mod reduce_bcast;
mod ring;
mod rsag_halving_ring;
mod rsag_pairwise_ring;

use crate::registry::Algorithm;

/// The registry rows of this operation.
pub(crate) const ALGORITHMS: &[Algorithm] = &[
    binary_blocks::ALGORITHM,
    recursive_doubling::ALGORITHM,
    reduce_bcast::ALGORITHM,
    allgather_reduce::ALGORITHM,
    rabenseifner::ALGORITHM,
    ring::ALGORITHM,
    rsag_halving_ring::ALGORITHM,
    rsag_pairwise_ring::ALGORITHM,
];
