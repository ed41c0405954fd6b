//! Algorithms of `bcast`, one file each.

use crate::registry::Algorithm;

mod binary_tree;
pub(crate) mod binomial;
mod hier_leader;
mod hier_scatter_ring;
mod linear;
mod scatter_recursive_doubling_allgather;
mod scatter_ring_allgather;

/// The registry rows of this operation.
pub(crate) const ALGORITHMS: &[Algorithm] = &[
    binomial::ALGORITHM,
    scatter_recursive_doubling_allgather::ALGORITHM,
    scatter_ring_allgather::ALGORITHM,
    linear::ALGORITHM,
    binary_tree::ALGORITHM,
    hier_leader::ALGORITHM,
    hier_scatter_ring::ALGORITHM,
];
