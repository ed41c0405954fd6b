//! Algorithms of `allgather` and `allgatherv`, one file each; a file whose algorithm handles
//! uneven counts registers one row per op.
//!
//! Cost convention of every file here: n = total bytes gathered on each rank (Σ counts ×
//! elem_size, p·count·elem_size for allgather, as thakur §4.1 uses it); the β term is the bytes
//! the busiest rank receives, n − min_i n_i (= (p−1)/p·n for equal blocks).

use crate::args::CollArgs;
use crate::error::{Error, Result};
use crate::registry::Algorithm;
use crate::schedule::{Buf, Region, ScheduleBuilder, StepId};

mod bruck;
#[cfg(test)]
mod cost_tests;
mod gather_bcast;
mod hier_leader;
mod hier_multi_leader;
pub(crate) mod layout;
mod mesh;
mod mesh_2d;
mod mesh_3d;
pub(crate) mod recursive_doubling;
pub(crate) mod ring;

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
    hier_leader::ALGORITHM,
    hier_multi_leader::ALLGATHER,
    hier_multi_leader::ALLGATHERV,
];

/// Block i (rank i's contribution) of every rank's `Recv`.
pub(crate) fn recv_layout(a: &CollArgs) -> Result<Layout> {
    let d = displs(a)?;
    Ok(Layout::new(Buf::Recv, (0..a.size).map(|i| (d[i as usize], a.block_count(i))).collect()))
}

/// Every block's displacement ([`CollArgs::block_displ`] for all i) in O(p): explicit `displs`,
/// or the prefix sums of the counts.
pub(crate) fn displs(a: &CollArgs) -> Result<Vec<u64>> {
    if a.displs.is_some() {
        return (0..a.size).map(|i| a.block_displ(i)).collect();
    }
    let mut at = 0u64;
    let mut out = Vec::with_capacity(a.size as usize);
    for i in 0..a.size {
        out.push(at);
        at = at
            .checked_add(a.block_count(i))
            .ok_or_else(|| Error::Overflow { coll: a.coll, what: "displacement".into() })?;
    }
    Ok(out)
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

/// Sends blocks `lo..hi` of `lay` to `peer` after `have` — or, when `first` is given (the
/// blocks are this rank's own, and `first` is their place in `Send`), from there right away, so
/// that the copy into place (`copy_own`) is off the critical path. Returns the steps created.
pub(crate) fn send_own(
    b: &mut ScheduleBuilder,
    lay: &Layout,
    peer: u32,
    (lo, hi): (u32, u32),
    have: &[StepId],
    first: Option<Region>,
) -> Vec<StepId> {
    match first.filter(|r| r.len > 0) {
        Some(r) => vec![b.send(peer, r, &[])],
        None => lay.send(b, peer, lo, hi, have),
    }
}

/// (n, n − min_i n_i): total bytes gathered and bytes the busiest rank receives.
pub(crate) fn gathered_bytes(a: &CollArgs) -> (f64, f64) {
    let es = f64::from(a.elem_size);
    let n = a.total_count().unwrap_or(0) as f64 * es;
    let min = (0..a.size).map(|i| a.block_count(i)).min().unwrap_or(0) as f64 * es;
    (n, n - min)
}
