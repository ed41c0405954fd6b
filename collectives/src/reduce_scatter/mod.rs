//! Algorithms of `reduce_scatter`, one file each.

pub(crate) mod phases;

use crate::registry::Algorithm;

/// The registry rows of this operation.
pub(crate) const ALGORITHMS: &[Algorithm] = &[];
