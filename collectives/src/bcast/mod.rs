//! Algorithms of `bcast`, one file each.

use crate::registry::Algorithm;

pub(crate) mod binomial;

/// The registry rows of this operation.
pub(crate) const ALGORITHMS: &[Algorithm] = &[binomial::ALGORITHM];
