//! Algorithms of `reduce`, one file each.

mod binary_blocks;
mod binomial;
mod rabenseifner;
mod ring;

use crate::registry::Algorithm;

/// The registry rows of this operation.
pub(crate) const ALGORITHMS: &[Algorithm] =
    &[binary_blocks::ALGORITHM, binomial::ALGORITHM, rabenseifner::ALGORITHM, ring::ALGORITHM];
