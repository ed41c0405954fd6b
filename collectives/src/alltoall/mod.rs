//! Algorithms of `alltoall` and `alltoallv`, one file each (each file registers both operations).
//!
//! Cost convention of every file: n = p·count·elem bytes that a rank sends (thakur §4.3); α counts
//! messages on the critical path, β bytes through the busiest port on it; γ = 0 (no reduction;
//! faraj-yuan's γ is contention, which the α–β model leaves out). For alltoallv the terms are a
//! lock-step estimate from the count matrix (busiest rank per step), not a paper formula.
//!
//! The hierarchical rows (`hier_node_pairs`) need a two-level topology; the flat tests (`tests.rs`)
//! skip them and `two_level::tests` covers them.
//!
//! Shared code: `phases` (layout, in-place staging, barriers, the ring/pair phase engine),
//! `forward` (store-and-forward of (src, dst) items for Bruck and the meshes), `mesh` (the grid).
//! In place (alltoall only; alltoallv has no in-place form), the pair family replaces block by
//! block through one block of scratch (MPICH's sendrecv_replace); every other algorithm first
//! copies the input to scratch (n extra bytes) and runs as if out of place.

mod forward;
mod mesh;
mod phases;

mod bruck;
mod hier_node_pairs;
mod mesh_2d;
mod mesh_3d;
mod pair_full_barrier;
mod pair_light_barrier;
mod pair_n_barriers;
mod pairwise_matching;
mod pairwise_ring;
mod pairwise_xor;
mod ring_full_barrier;
mod ring_light_barrier;
mod ring_n_barriers;
mod simple;
mod spreading_simple;

#[cfg(test)]
mod tests;

use crate::registry::Algorithm;

/// The registry rows of this operation.
pub(crate) const ALGORITHMS: &[Algorithm] = &[
    bruck::ALLTOALL,
    bruck::ALLTOALLV,
    mesh_2d::ALLTOALL,
    mesh_2d::ALLTOALLV,
    mesh_3d::ALLTOALL,
    mesh_3d::ALLTOALLV,
    simple::ALLTOALL,
    simple::ALLTOALLV,
    spreading_simple::ALLTOALL,
    spreading_simple::ALLTOALLV,
    pairwise_xor::ALLTOALL,
    pairwise_xor::ALLTOALLV,
    pairwise_ring::ALLTOALL,
    pairwise_ring::ALLTOALLV,
    pairwise_matching::ALLTOALL,
    pairwise_matching::ALLTOALLV,
    ring_light_barrier::ALLTOALL,
    ring_light_barrier::ALLTOALLV,
    pair_light_barrier::ALLTOALL,
    pair_light_barrier::ALLTOALLV,
    ring_full_barrier::ALLTOALL,
    ring_full_barrier::ALLTOALLV,
    pair_full_barrier::ALLTOALL,
    pair_full_barrier::ALLTOALLV,
    ring_n_barriers::ALLTOALL,
    ring_n_barriers::ALLTOALLV,
    pair_n_barriers::ALLTOALL,
    pair_n_barriers::ALLTOALLV,
    hier_node_pairs::LEADER,
    hier_node_pairs::LEADER_V,
    hier_node_pairs::MULTI_LEADER,
    hier_node_pairs::MULTI_LEADER_V,
];
