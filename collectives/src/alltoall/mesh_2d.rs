//! 2D mesh alltoall(v): ranks on an X × Y grid (X = the largest divisor of p with X² ≤ p); phase 1
//! exchanges along each row the blocks destined to each column, phase 2 along each column.
//!
//! Cost (n = p·count·elem bytes per rank): p = X·Y: (X − 1 + Y − 1)α + ((X − 1)/X + (Y − 1)/Y)·n·β,
//! γ = 0, plus pack/unpack copies; p a square (power of four, …): 2(√p − 1)α + 2(√p − 1)/√p·n·β;
//! prime p: 1 × p, one phase = spreading simple. faraj-yuan's (p − 1)pnβ treats each phase as an
//! all-gather of everything; this forwards only the blocks that must move. alltoallv: per phase,
//! the most messages / bytes of any rank. Restrictions: none. Paper: faraj-yuan §3.1 ("2D mesh").

use super::mesh::{self, root_divisor, Grid};
use crate::args::{CollArgs, Collective};
use crate::cost::Cost;
use crate::error::Result;
use crate::registry::{Algorithm, Restrictions};
use crate::schedule::Schedule;

pub(super) const ALLTOALL: Algorithm = Algorithm {
    coll: Collective::Alltoall,
    name: "mesh_2d",
    summary: "two phases on an X x Y grid: exchange along rows, then along columns",
    restrictions: Restrictions::NONE,
    params: &[],
    cost,
    build,
};

pub(super) const ALLTOALLV: Algorithm = Algorithm { coll: Collective::Alltoallv, ..ALLTOALL };

/// X × Y with X the largest divisor of p not above √p.
fn grid(p: u32) -> Grid {
    let x = root_divisor(p, 2);
    Grid::new(&[x, p / x])
}

fn build(args: &CollArgs) -> Result<Schedule> {
    mesh::build(args, &grid(args.size))
}

fn cost(args: &CollArgs) -> Cost {
    mesh::cost(args, &grid(args.size))
}
