//! Dissemination barrier: in round k (0 ≤ k < ⌈lg p⌉) rank r signals r + 2^k and waits for the
//! signal of r − 2^k (mod p); after the last round every rank has transitively heard from all.
//!
//! Cost (any p): ⌈lg p⌉ α + ⌈lg p⌉·e β for signals of one element of e bytes (the paper's are
//! empty; ours must carry data, see `signal_regions`), no γ term.
//! Restrictions: none. Paper: thakur §4.1.2 (the dissemination barrier of Hensgen et al. \[10\],
//! of which Bruck's allgather is a variant).

use crate::args::{CollArgs, Collective};
use crate::cost::{ceil_log2, Cost};
use crate::error::Result;
use crate::registry::{Algorithm, Restrictions};
use crate::schedule::{Schedule, ScheduleBuilder, StepId};

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
    let rounds = f64::from(ceil_log2(a.p()));
    Cost::new(rounds, rounds * f64::from(a.elem_size), 0.0)
}

fn build(a: &CollArgs) -> Result<Schedule> {
    let (p, r) = (u64::from(a.size), u64::from(a.rank));
    let mut b = ScheduleBuilder::for_args(a);
    let (signal, landing) = super::signal_regions(&mut b);
    let mut prev: Option<StepId> = None;
    let mut dist = 1u64;
    while dist < p {
        let to = ((r + dist) % p) as u32;
        let from = ((r + p - dist) % p) as u32;
        let deps: Vec<StepId> = prev.into_iter().collect();
        b.send(to, signal, &deps);
        prev = Some(b.recv(from, landing, &deps));
        dist *= 2;
    }
    Ok(b.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::{Buf, Region};

    #[test]
    fn verifies() {
        crate::verify::sweep::sweep(&ALGORITHM, 20);
    }

    #[test]
    fn rounds() {
        let s = ALGORITHM.schedule(&CollArgs::new(Collective::Barrier, 3, 6, 0)).unwrap();
        assert_eq!(s.len(), 6);
        assert_eq!(s.step(0), &crate::schedule::StepKind::Send { peer: 4, src: Region::new(Buf::Scratch(0), 0, 1) });
    }
}
