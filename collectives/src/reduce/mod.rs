//! Algorithms of `reduce`, one file each.

mod binomial;

use crate::registry::Algorithm;

/// The registry rows of this operation.
pub(crate) const ALGORITHMS: &[Algorithm] = &[binomial::ALGORITHM];
