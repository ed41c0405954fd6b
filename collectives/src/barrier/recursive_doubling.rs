//! Recursive-doubling (pairwise-exchange) barrier: in round k rank r exchanges a signal with
//! r XOR 2^k; for p not a power of two the p − 2^⌊lg p⌋ extra ranks first signal a partner below
//! 2^⌊lg p⌋ and are released by it at the end.
//!
//! Cost: power of two lg p α; other p (⌊lg p⌋ + 2) α; plus one element of e bytes per signal
//! (k rounds: k·e β; the paper's signals are empty, ours must carry data). No γ term.
//! Restrictions: none. Paper: thakur §4.1.1 (recursive doubling) with the fold of §5 for
//! non-power-of-two p.

use crate::args::{CollArgs, Collective};
use crate::cost::{floor_log2, pow2_floor, Cost};
use crate::error::Result;
use crate::registry::{Algorithm, Restrictions};
use crate::schedule::{Schedule, ScheduleBuilder, StepId};

pub(crate) const ALGORITHM: Algorithm = Algorithm {
    coll: Collective::Barrier,
    name: "recursive_doubling",
    summary: "pairwise exchange with r XOR 2^k; extra ranks of non-power-of-two p fold in and out",
    restrictions: Restrictions::NONE,
    params: &[],
    cost,
    build,
};

fn cost(a: &CollArgs) -> Cost {
    let p = a.p();
    let extra = if p.is_power_of_two() { 0 } else { 2 };
    let rounds = f64::from(floor_log2(p) + extra);
    // One element per signal (see `signal_regions`).
    Cost::new(rounds, rounds * f64::from(a.elem_size), 0.0)
}

fn build(a: &CollArgs) -> Result<Schedule> {
    let (p, r) = (a.size, a.rank);
    let pof2 = pow2_floor(u64::from(p)) as u32;
    let mut b = ScheduleBuilder::for_args(a);
    let (signal, landing) = super::signal_regions(&mut b);
    if r >= pof2 {
        let s = b.send(r - pof2, signal, &[]);
        b.recv(r - pof2, landing, &[s]);
        return Ok(b.finish());
    }
    let mut prev: Vec<StepId> = Vec::new();
    if r + pof2 < p {
        prev = vec![b.recv(r + pof2, landing, &[])];
    }
    let mut mask = 1;
    while mask < pof2 {
        b.send(r ^ mask, signal, &prev);
        prev = vec![b.recv(r ^ mask, landing, &prev)];
        mask <<= 1;
    }
    if r + pof2 < p {
        b.send(r + pof2, signal, &prev);
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
}
