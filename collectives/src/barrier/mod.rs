//! Algorithms of `barrier`, one file each.

use crate::registry::Algorithm;

mod dissemination;
mod recursive_doubling;

/// The registry rows of this operation.
pub(crate) const ALGORITHMS: &[Algorithm] = &[dissemination::ALGORITHM, recursive_doubling::ALGORITHM];
