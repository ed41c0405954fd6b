//! 3D mesh alltoall(v): ranks on an X × Y × Z grid (X = largest divisor with X³ ≤ p, then Y × Z as
//! the 2D mesh factors p/X); three phases, each exchanging along one dimension the blocks bound there.
//!
//! Cost (n = p·count·elem bytes per rank): p = X·Y·Z: (X + Y + Z − 3)α + Σ_dims (d − 1)/d·n·β,
//! γ = 0, plus pack/unpack copies; p a cube: 3(∛p − 1)α + 3(∛p − 1)/∛p·n·β; p with few factors
//! degenerates (prime p: 1 × 1 × p = spreading simple). faraj-yuan's (p − 1)pnβ treats each phase
//! as an all-gather; this forwards only the blocks that must move. alltoallv: per phase, the most
//! messages / bytes of any rank. Restrictions: none. Paper: faraj-yuan §3.1 ("3D mesh").

use super::mesh::{self, root_divisor, Grid};
use crate::args::{CollArgs, Collective};
use crate::cost::Cost;
use crate::error::Result;
use crate::registry::{Algorithm, Restrictions};
use crate::schedule::Schedule;

pub(super) const ALLTOALL: Algorithm = Algorithm {
    coll: Collective::Alltoall,
    name: "mesh_3d",
    summary: "three phases on an X x Y x Z grid, one dimension at a time",
    restrictions: Restrictions::NONE,
    params: &[],
    cost,
    build,
};

pub(super) const ALLTOALLV: Algorithm = Algorithm { coll: Collective::Alltoallv, ..ALLTOALL };

/// X × Y × Z: X the largest divisor of p not above ∛p, Y the largest divisor of p/X not above
/// √(p/X).
fn grid(p: u32) -> Grid {
    let x = root_divisor(p, 3);
    let y = root_divisor(p / x, 2);
    Grid::new(&[x, y, p / x / y])
}

fn build(args: &CollArgs) -> Result<Schedule> {
    mesh::build(args, &grid(args.size))
}

fn cost(args: &CollArgs) -> Cost {
    mesh::cost(args, &grid(args.size))
}
