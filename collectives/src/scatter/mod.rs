//! Algorithms of `scatter` and `scatterv`, one file each; each file registers one row per op.

use crate::registry::Algorithm;

pub(crate) mod binomial;
mod hier_leader;
mod linear;

/// The registry rows of these operations.
pub(crate) const ALGORITHMS: &[Algorithm] =
    &[binomial::SCATTER, linear::SCATTER, binomial::SCATTERV, linear::SCATTERV, hier_leader::ALGORITHM];
