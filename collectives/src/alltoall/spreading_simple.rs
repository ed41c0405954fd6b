//! Spreading simple alltoall(v): like simple, all messages posted at once, but rank r sends to
//! r + 1, r + 2, …, r + p − 1 and receives from r − 1, r − 2, … (mod p), spreading the load.
//!
//! Cost (n = p·count·elem bytes per rank): any p: (p − 1)α + n(p − 1)/p·β, γ = 0 — the same as
//! simple (faraj-yuan: only the contention term differs); alltoallv: as simple. Restrictions:
//! none. Paper: faraj-yuan §3.1 ("spreading simple"), thakur §4.3 (MPICH's (rank + i) mod p).

use super::simple::{concurrent, concurrent_cost};
use crate::args::{CollArgs, Collective};
use crate::error::Result;
use crate::registry::{Algorithm, Restrictions};
use crate::schedule::Schedule;

pub(super) const ALLTOALL: Algorithm = Algorithm {
    coll: Collective::Alltoall,
    name: "spreading_simple",
    summary: "post all receives and sends at once, rank r sending to r+1, r+2, … first",
    restrictions: Restrictions::NONE,
    params: &[],
    cost: concurrent_cost,
    build,
};

pub(super) const ALLTOALLV: Algorithm = Algorithm { coll: Collective::Alltoallv, ..ALLTOALL };

fn build(args: &CollArgs) -> Result<Schedule> {
    let (r, p) = (u64::from(args.rank), u64::from(args.size));
    let froms = (1..p).map(move |k| ((r + p - k) % p) as u32);
    let tos = (1..p).map(move |k| ((r + k) % p) as u32);
    concurrent(args, froms, tos)
}
