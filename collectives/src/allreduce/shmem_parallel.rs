//! Mamidala's shmem-parallel allreduce (mamidala-2008 §4.2, Fig 4): every core reduces one
//! block of every rank's vector, then every rank copies the p reduced blocks to itself. Here the
//! shared region is each rank's receive side: rank i writes block j of its input straight into
//! rank j (one copy), rank j folds the p contributions of its block in rank order, then writes
//! the reduced block straight into every other rank. Every rank issues its writes in the same
//! order (to rank 0 first, then 1, …), the paper's plain parallel design that the cyclic one
//! (`shmem_cyclic`) improves on.
//!
//! Cost (p ≥ 3): 3(p−1)α + 3(p−1)/p·nβ + (p−1)/p·nγ; p = 2: `pairwise_rs_cost`'s 2α + nβ + n/2·γ.
//! All ranks write to the same peer at once, so in the port model a receiver takes the p−1
//! writes of its turn one after another and each phase is half again as long as the cyclic
//! one's (the simulator's replay; the contention the paper describes for shared caches).
//! Memory: each rank reads its input once, writes (p−1)/p·n into peers, reads its block's p−1
//! contributions, and writes (p−1)/p·n of results into peers. On a fabric where ranks read each
//! other's memory (shm), the executor drops the first write for the contributions folded into a
//! partial: the reducer reads them out of the senders' inputs (`exec::op`'s pulled reductions), so
//! that phase reads each input block once and writes nothing; in place with a commutative op every
//! contribution folds straight into the rank's own block (all of them pulled, no final copy).
//! Restrictions: none — contributions are folded in rank order (`rs_pairwise`), or in arrival order
//! where the op commutes in place.
//! Paper: mamidala-2008 §4.2 ("shmem-parallel"); the reduce-scatter is thakur §4.4's pairwise.

use crate::allreduce::{mesh_allreduce, pairwise_rs_cost};
use crate::args::{CollArgs, Collective};
use crate::cost::Cost;
use crate::error::Result;
use crate::reduce_scatter::phases::MeshOrder;
use crate::registry::{Algorithm, Restrictions};
use crate::schedule::Schedule;

pub(crate) const ALGORITHM: Algorithm = Algorithm {
    coll: Collective::Allreduce,
    name: "shmem_parallel",
    summary: "every rank reduces one block, results written straight to all (mamidala §4.2, same order)",
    restrictions: Restrictions::NONE,
    params: &[],
    cost,
    build,
};

fn cost(a: &CollArgs) -> Cost {
    let c = pairwise_rs_cost(a);
    if a.size < 3 {
        return c;
    }
    Cost::new(1.5 * c.alpha, 1.5 * c.beta, c.gamma)
}

fn build(a: &CollArgs) -> Result<Schedule> {
    mesh_allreduce(a, MeshOrder::Ascending)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verifies_symbolically() {
        crate::verify::sweep::sweep(&ALGORITHM, 17);
    }
}
