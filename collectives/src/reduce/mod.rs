//! Algorithms of `reduce`, one file each.

mod binomial;
mod rabenseifner;
mod ring;

use crate::registry::Algorithm;

/// The registry rows of this operation.
pub(crate) const ALGORITHMS: &[Algorithm] = &[binomial::ALGORITHM, rabenseifner::ALGORITHM, ring::ALGORITHM];
