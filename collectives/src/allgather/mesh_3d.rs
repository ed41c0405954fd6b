//! 3D-mesh allgather(v): ranks on an X × Y × Z grid (X = the largest divisor of p that is ≤ ∛p,
//! then Y = the largest divisor of p/X that is ≤ √(p/X), Z = p/(XY)); allgather directly along
//! x, then y (exchanging rows), then z (exchanging planes).
//!
//! Cost (n = total bytes gathered, see the module convention): (X + Y + Z − 3) α + (p−1)/p n β
//! (3(∛p − 1) α for a cube p). p without small factors degenerates gracefully: a prime p is a
//! 1 × 1 × p grid, i.e. one direct exchange with everyone (p − 1 messages); p = 2q (q prime) is
//! 1 × 2 × q. Restrictions: none. Paper: faraj-yuan §3.1 (3D mesh).

use crate::allgather::gathered_bytes;
use crate::allgather::mesh::{self, root_divisor};
use crate::args::{CollArgs, Collective};
use crate::cost::Cost;
use crate::error::Result;
use crate::registry::{Algorithm, Restrictions};
use crate::schedule::Schedule;

pub(crate) const ALLGATHER: Algorithm = Algorithm {
    coll: Collective::Allgather,
    name: "mesh_3d",
    summary: "X × Y × Z grid near ∛p on a side: direct allgather along x, then y, then z",
    restrictions: Restrictions::NONE,
    params: &[],
    cost,
    build,
};

pub(crate) const ALLGATHERV: Algorithm = Algorithm { coll: Collective::Allgatherv, ..ALLGATHER };

/// The grid [X, Y, Z] for p ranks.
fn dims(p: u32) -> [u32; 3] {
    let x = root_divisor(p, 3);
    let y = root_divisor(p / x, 2);
    [x, y, p / x / y]
}

fn cost(a: &CollArgs) -> Cost {
    let [x, y, z] = dims(a.size);
    Cost::new(f64::from(x + y + z - 3), gathered_bytes(a).1, 0.0)
}

fn build(a: &CollArgs) -> Result<Schedule> {
    mesh::build(a, &dims(a.size))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grids() {
        assert_eq!(dims(64), [4, 4, 4]);
        assert_eq!(dims(24), [2, 3, 4]);
        assert_eq!(dims(7), [1, 1, 7]);
        assert_eq!(dims(1), [1, 1, 1]);
    }

    #[test]
    fn verifies_allgather() {
        crate::verify::sweep::sweep(&ALLGATHER, 20);
    }

    #[test]
    fn verifies_allgatherv() {
        crate::verify::sweep::sweep(&ALLGATHERV, 12);
    }
}
