//! Algorithms of `reduce_scatter` (irregular counts) and `reduce_scatter_block`, one file each;
//! every algorithm gives one row per operation.

mod pairwise;
pub(crate) mod phases;
mod recursive_doubling;
mod recursive_halving;

use crate::registry::Algorithm;

/// The registry rows of this operation.
pub(crate) const ALGORITHMS: &[Algorithm] = &[
    recursive_halving::ALGORITHM,
    recursive_halving::ALGORITHM_BLOCK,
    recursive_doubling::ALGORITHM,
    recursive_doubling::ALGORITHM_BLOCK,
    pairwise::ALGORITHM,
    pairwise::ALGORITHM_BLOCK,
];
