//! Linear gather(v): every rank sends its block straight to the root, which receives each one
//! into its place in `Recv`.
//!
//! Cost (n = bytes gathered at the root, n_root its own block): (p − 1) α + (n − n_root) β for any
//! p (the root's port is the bottleneck). Restrictions: none (gatherv: any counts/displs).
//! Paper: the flat-tree baseline that thakur §4.2 and faraj-yuan §3.1 ("simple") compare against.

use crate::args::{CollArgs, Collective};
use crate::cost::Cost;
use crate::error::Result;
use crate::registry::{Algorithm, Restrictions};
use crate::schedule::{Buf, Region, Schedule, ScheduleBuilder};

pub(crate) const GATHER: Algorithm = Algorithm {
    coll: Collective::Gather,
    name: "linear",
    summary: "every rank sends its block directly to the root",
    restrictions: Restrictions::NONE,
    params: &[],
    cost,
    build,
};

pub(crate) const GATHERV: Algorithm = Algorithm { coll: Collective::Gatherv, ..GATHER };

fn cost(a: &CollArgs) -> Cost {
    let es = f64::from(a.elem_size);
    let total = a.total_count().unwrap_or(0) as f64;
    let own = a.block_count(a.root) as f64;
    Cost::new(f64::from(a.size - 1), (total - own) * es, 0.0)
}

fn build(a: &CollArgs) -> Result<Schedule> {
    let mut b = ScheduleBuilder::for_args(a);
    let own = a.block_count(a.rank);
    if a.rank != a.root {
        if own > 0 {
            b.send(a.root, Region::new(Buf::Send, 0, own), &[]);
        }
        return Ok(b.finish());
    }
    let d = crate::allgather::displs(a)?;
    for i in 0..a.size {
        let c = a.block_count(i);
        if c == 0 {
            continue;
        }
        let dst = Region::new(Buf::Recv, d[i as usize], c);
        if i == a.rank {
            b.copy(Region::new(Buf::Send, 0, c), dst, &[]);
        } else {
            b.recv(i, dst, &[]);
        }
    }
    Ok(b.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verifies_gather() {
        crate::verify::sweep::sweep(&GATHER, 20);
    }

    #[test]
    fn verifies_gatherv() {
        crate::verify::sweep::sweep(&GATHERV, 12);
    }
}
