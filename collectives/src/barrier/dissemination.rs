//! Dissemination barrier: in round k (0 ≤ k < ⌈lg p⌉) rank r signals r + 2^k and waits for the
//! signal of r − 2^k (mod p); after the last round every rank has transitively heard from all.
//!
//! Cost (any p): ⌈lg p⌉ α, no β or γ term (zero-length messages). Power of two: lg p α.
//! Restrictions: none. Paper: thakur §4.1.2 (the dissemination barrier of Hensgen et al. [10],
//! of which Bruck's allgather is a variant).

use crate::args::{CollArgs, Collective};
use crate::cost::{ceil_log2, Cost};
use crate::error::Result;
use crate::registry::{Algorithm, Restrictions};
use crate::schedule::{Buf, Region, Schedule, ScheduleBuilder, StepId};

pub(crate) const ALGORITHM: Algorithm = Algorithm {
    coll: Collective::Barrier,
    name: "dissemination",
    summary: "⌈lg p⌉ rounds; in round k signal r+2^k, wait for r−2^k",
    restrictions: Restrictions::NONE,
    params: &[],
    cost,
    build,
};

fn cost(a: &CollArgs) -> Cost {
    Cost::new(f64::from(ceil_log2(a.p())), 0.0, 0.0)
}

fn build(a: &CollArgs) -> Result<Schedule> {
    let (p, r) = (u64::from(a.size), u64::from(a.rank));
    let mut b = ScheduleBuilder::for_args(a);
    let signal = Region::new(Buf::Recv, 0, 0);
    let mut prev: Option<StepId> = None;
    let mut dist = 1u64;
    while dist < p {
        let to = ((r + dist) % p) as u32;
        let from = ((r + p - dist) % p) as u32;
        let deps: Vec<StepId> = prev.into_iter().collect();
        b.send(to, signal, &deps);
        prev = Some(b.recv(from, signal, &deps));
        dist *= 2;
    }
    Ok(b.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verifies() {
        crate::verify::sweep::sweep(&ALGORITHM, 20);
    }

    #[test]
    fn rounds() {
        let s = ALGORITHM.schedule(&CollArgs::new(Collective::Barrier, 3, 6, 0)).unwrap();
        assert_eq!(s.len(), 6);
        assert_eq!(s.step(0), &crate::schedule::StepKind::Send { peer: 4, src: Region::new(Buf::Recv, 0, 0) });
    }
}
