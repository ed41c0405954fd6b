//! Algorithms of `barrier`, one file each.

use crate::registry::Algorithm;
use crate::schedule::{Region, ScheduleBuilder};

mod dissemination;
mod hier_leader;
mod recursive_doubling;

/// The registry rows of this operation.
pub(crate) const ALGORITHMS: &[Algorithm] =
    &[dissemination::ALGORITHM, recursive_doubling::ALGORITHM, hier_leader::ALGORITHM];

/// Where a barrier's signals come from and land: one scratch element each (sent from one never
/// written, received into another). A signal must carry at least one element: an executor
/// completes an empty Send or Recv at once, as a count-0 collective needs no message, so a
/// zero-length signal would synchronise nothing.
pub(crate) fn signal_regions(b: &mut ScheduleBuilder) -> (Region, Region) {
    let out = b.scratch(1);
    let inp = b.scratch(1);
    (Region::new(out, 0, 1), Region::new(inp, 0, 1))
}
