//! Algorithms of `gather` and `gatherv`, one file each; each file registers one row per op.

use crate::registry::Algorithm;

pub(crate) mod binomial;
mod hier_leader;
mod linear;

/// The registry rows of these operations.
pub(crate) const ALGORITHMS: &[Algorithm] =
    &[binomial::GATHER, linear::GATHER, binomial::GATHERV, linear::GATHERV, hier_leader::ALGORITHM];
