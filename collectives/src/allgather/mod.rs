//! Algorithms of `allgather` and `allgatherv`, one file each; a file whose algorithm handles
//! uneven counts registers one row per op.
//!
//! Cost convention of every file here: n = total bytes gathered on each rank (Σ counts ×
//! elem_size, p·count·elem_size for allgather, as thakur §4.1 uses it); the β term is the bytes
//! the busiest rank receives, n − min_i n_i (= (p−1)/p·n for equal blocks).

use crate::args::CollArgs;
use crate::error::Result;
use crate::registry::Algorithm;
use crate::schedule::{Buf, Region, ScheduleBuilder, StepId};

mod bruck;
mod gather_bcast;
pub(crate) mod layout;
mod mesh;
mod mesh_2d;
mod mesh_3d;
pub(crate) mod recursive_doubling;
pub(crate) mod ring;
#[cfg(test)]
pub(crate) mod testkit;

use layout::Layout;

/// The registry rows of these operations.
pub(crate) const ALGORITHMS: &[Algorithm] = &[
    ring::ALLGATHER,
    recursive_doubling::ALLGATHER,
    bruck::ALLGATHER,
    gather_bcast::ALLGATHER,
    mesh_2d::ALLGATHER,
    mesh_3d::ALLGATHER,
    ring::ALLGATHERV,
    recursive_doubling::ALLGATHERV,
    bruck::ALLGATHERV,
    gather_bcast::ALLGATHERV,
    mesh_2d::ALLGATHERV,
    mesh_3d::ALLGATHERV,
];

/// Block i (rank i's contribution) of every rank's `Recv`.
pub(crate) fn recv_layout(a: &CollArgs) -> Result<Layout> {
    let blocks = (0..a.size).map(|i| Ok((a.block_displ(i)?, a.block_count(i)))).collect::<Result<_>>()?;
    Ok(Layout::new(Buf::Recv, blocks))
}

/// Copies this rank's `Send` into its block of `Recv` (dropped by the in-place pass); returns
/// the steps after which the own block is in place.
pub(crate) fn copy_own(b: &mut ScheduleBuilder, a: &CollArgs, lay: &Layout) -> Vec<StepId> {
    let own = lay.region(a.rank);
    if own.len == 0 {
        return Vec::new();
    }
    vec![b.copy(Region::new(Buf::Send, 0, own.len), own, &[])]
}

/// (n, n − min_i n_i): total bytes gathered and bytes the busiest rank receives.
pub(crate) fn gathered_bytes(a: &CollArgs) -> (f64, f64) {
    let es = f64::from(a.elem_size);
    let n = a.total_count().unwrap_or(0) as f64 * es;
    let min = (0..a.size).map(|i| a.block_count(i)).min().unwrap_or(0) as f64 * es;
    (n, n - min)
}
