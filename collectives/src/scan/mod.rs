//! Algorithms of `scan` and `exscan`, one file each; each file registers one row per op.

use crate::registry::Algorithm;

mod linear;
mod recursive_doubling;

/// The registry rows of these operations.
pub(crate) const ALGORITHMS: &[Algorithm] =
    &[recursive_doubling::SCAN, linear::SCAN, recursive_doubling::EXSCAN, linear::EXSCAN];
