//! Mamidala's shmem-cyclic allreduce (mamidala-2008 §4.2): `shmem_parallel` with every rank
//! taking the blocks in a cyclic order starting after its own, so that no two ranks touch the
//! same block at once. Here rank r writes its input's blocks to r+1, r+2, … and the reduced
//! block to r+1, r+2, … in turn (so at each position of the order every rank writes to a
//! different peer), and receives from r−1, r−2, … first. In the paper (§5.3) it is the fastest
//! design on a NUMA machine and ties the plain parallel order where cores share caches.
//!
//! Cost (any p): 2(p−1)α + 2(p−1)/p·nβ + (p−1)/p·nγ (two mesh phases, `pairwise_rs_cost`).
//! Restrictions: none — contributions are folded in rank order (`rs_pairwise`), or in arrival order
//! where the op commutes in place.
//! Paper: mamidala-2008 §4.2 ("shmem-cyclic"); the reduce-scatter is thakur §4.4's pairwise.

use crate::allreduce::{mesh_allreduce, pairwise_rs_cost};
use crate::args::{CollArgs, Collective};
use crate::error::Result;
use crate::reduce_scatter::phases::MeshOrder;
use crate::registry::{Algorithm, Restrictions};
use crate::schedule::Schedule;

pub(crate) const ALGORITHM: Algorithm = Algorithm {
    coll: Collective::Allreduce,
    name: "shmem_cyclic",
    summary: "shmem_parallel with each rank's writes in cyclic order from its own (mamidala §4.2)",
    restrictions: Restrictions::NONE,
    params: &[],
    cost: pairwise_rs_cost,
    build,
};

fn build(a: &CollArgs) -> Result<Schedule> {
    mesh_allreduce(a, MeshOrder::Rotated)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verifies_symbolically() {
        crate::verify::sweep::sweep(&ALGORITHM, 17);
    }
}
