//! Linear scatter(v): the root sends every rank its block straight from its `Send` buffer; each
//! other rank receives one message into `Recv`.
//!
//! Cost (n = bytes scattered by the root, n_root its own block): (p − 1) α + (n − n_root) β for
//! any p (the root's port is the bottleneck). Restrictions: none (scatterv: any counts/displs).
//! Paper: the flat-tree baseline that thakur §4.2 and faraj-yuan §3.1 ("simple") compare against.

use crate::args::{CollArgs, Collective};
use crate::cost::Cost;
use crate::error::Result;
use crate::registry::{Algorithm, Restrictions};
use crate::schedule::{Buf, Region, Schedule, ScheduleBuilder};

pub(crate) const SCATTER: Algorithm = Algorithm {
    coll: Collective::Scatter,
    name: "linear",
    summary: "the root sends each rank its block directly",
    restrictions: Restrictions::NONE,
    params: &[],
    cost,
    build,
};

pub(crate) const SCATTERV: Algorithm = Algorithm { coll: Collective::Scatterv, ..SCATTER };

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
            b.recv(a.root, Region::new(Buf::Recv, 0, own), &[]);
        }
        return Ok(b.finish());
    }
    let d = crate::allgather::displs(a)?;
    for k in 1..=a.size {
        // start with the next rank so the root's own copy overlaps the sends
        let i = (a.root + k) % a.size;
        let c = a.block_count(i);
        if c == 0 {
            continue;
        }
        let src = Region::new(Buf::Send, d[i as usize], c);
        if i == a.rank {
            b.copy(src, Region::new(Buf::Recv, 0, c), &[]);
        } else {
            b.send(i, src, &[]);
        }
    }
    Ok(b.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verifies_scatter() {
        crate::verify::sweep::sweep(&SCATTER, 20);
    }

    #[test]
    fn verifies_scatterv() {
        crate::verify::sweep::sweep(&SCATTERV, 12);
    }
}
