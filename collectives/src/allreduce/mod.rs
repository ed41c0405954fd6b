//! Algorithms of `allreduce`, one file each.

mod recursive_doubling;
mod ring;

use crate::registry::Algorithm;

/// The registry rows of this operation.
pub(crate) const ALGORITHMS: &[Algorithm] = &[recursive_doubling::ALGORITHM, ring::ALGORITHM];
