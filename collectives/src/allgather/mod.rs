//! Algorithms of `allgather` and `allgatherv`, one file each; a file whose algorithm handles
//! uneven counts registers one row per op.

use crate::registry::Algorithm;

pub(crate) mod layout;
#[cfg(test)]
pub(crate) mod testkit;

/// The registry rows of these operations.
pub(crate) const ALGORITHMS: &[Algorithm] = &[];
