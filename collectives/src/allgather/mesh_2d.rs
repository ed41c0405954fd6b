//! 2D-mesh allgather(v): ranks on an X × Y grid (X = the largest divisor of p that is ≤ √p,
//! Y = p/X); allgather directly among the X ranks of each row, then among the Y ranks of each
//! column, exchanging whole rows.
//!
//! Cost (n = total bytes gathered, see the module convention): (X + Y − 2) α + (p−1)/p n β
//! (2(√p − 1) α for a square p, e.g. a power of four). Prime p gives a 1 × p grid: one phase
//! in which every rank sends its block to every other rank directly (p − 1 messages, the
//! "spreading simple" pattern). Restrictions: none. Paper: faraj-yuan §3.1 (2D mesh).

use crate::allgather::gathered_bytes;
use crate::allgather::mesh::{self, root_divisor};
use crate::args::{CollArgs, Collective};
use crate::cost::Cost;
use crate::error::Result;
use crate::registry::{Algorithm, Restrictions};
use crate::schedule::Schedule;

pub(crate) const ALLGATHER: Algorithm = Algorithm {
    coll: Collective::Allgather,
    name: "mesh_2d",
    summary: "X × Y grid near √p × √p: direct allgather along rows, then along columns",
    restrictions: Restrictions::NONE,
    params: &[],
    cost,
    build,
};

pub(crate) const ALLGATHERV: Algorithm = Algorithm { coll: Collective::Allgatherv, ..ALLGATHER };

/// The grid [X, Y] for p ranks.
fn dims(p: u32) -> [u32; 2] {
    let x = root_divisor(p, 2);
    [x, p / x]
}

fn cost(a: &CollArgs) -> Cost {
    let [x, y] = dims(a.size);
    Cost::new(f64::from(x + y - 2), gathered_bytes(a).1, 0.0)
}

fn build(a: &CollArgs) -> Result<Schedule> {
    mesh::build(a, &dims(a.size))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verifies_allgather() {
        crate::verify::sweep::sweep(&ALLGATHER, 20);
    }

    #[test]
    fn verifies_allgatherv() {
        crate::verify::sweep::sweep(&ALLGATHERV, 12);
    }
}
