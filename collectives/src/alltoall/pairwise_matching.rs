//! Pairwise alltoall(v) on a round-robin tournament: in every round each rank exchanges blocks
//! with one partner, both directions at once, for any p (the XOR pairing needs a power of two).
//! Even p: p − 1 rounds; rank p − 1 stays put and rank r < p − 1 meets (k − r) mod (p − 1) in
//! round k, or rank p − 1 when that is r itself. Odd p: p rounds; rank r meets (k − r) mod p in
//! round k and sits out the round where that is itself (k = 2r mod p). Every rank takes its rounds
//! in order, each after its previous exchange, so no wait can go round in a cycle.
//!
//! Cost (n = p·count·elem bytes per rank): even p: (p − 1)α + n(p − 1)/p·β, γ = 0 (one exchange
//! per round, lock step); odd p: (p + 1)α + n(p + 1)/p·β, the simulator's critical path once the
//! ranks sit out different rounds (so at odd p `pairwise_ring` is the better schedule in the α–β
//! model). alltoallv: `pairwise_ring`'s lock-step estimate, scaled alike at odd p.
//! Restrictions: none. Paper: mamidala-2008 §4.3 (a schedule in which data moves in both
//! directions of every pair at all times, for the links between the cores' caches and memories);
//! the rounds are the circle method of a round-robin tournament; thakur §4.3 for the pairwise form.

use super::phases::{phased, phased_cost, Pattern, Sync};
use crate::args::{CollArgs, Collective};
use crate::cost::Cost;
use crate::error::Result;
use crate::registry::{Algorithm, Restrictions};
use crate::schedule::Schedule;

pub(super) const ALLTOALL: Algorithm = Algorithm {
    coll: Collective::Alltoall,
    name: "pairwise_matching",
    summary: "p-1 exchanges, each round a perfect pairing of the ranks (any p; mamidala §4.3)",
    restrictions: Restrictions::NONE,
    params: &[],
    cost,
    build,
};

pub(super) const ALLTOALLV: Algorithm = Algorithm { coll: Collective::Alltoallv, ..ALLTOALL };

/// Rank r's partner in its k-th exchange (1 ≤ k < p).
fn partner(r: u32, k: u32, p: u32) -> u32 {
    let (r, k, p) = (u64::from(r), u64::from(k), u64::from(p));
    let q = if p % 2 == 1 {
        let idle = 2 * r % p;
        let round = if k - 1 < idle { k - 1 } else { k };
        (round + p - r) % p
    } else {
        let m = p - 1;
        let round = k - 1;
        if r == m {
            // the r' with 2r' ≡ round (mod m): p/2 is the inverse of 2 modulo the odd m
            round * (p / 2) % m
        } else {
            let q = (round + m - r) % m;
            if q == r {
                m
            } else {
                q
            }
        }
    };
    q as u32
}

const MATCHING: Pattern = Pattern { send: partner, recv: partner, symmetric: true };

fn build(args: &CollArgs) -> Result<Schedule> {
    phased(args, MATCHING, Sync::Chain)
}

fn cost(args: &CollArgs) -> Cost {
    let c = phased_cost(args, MATCHING, Sync::Chain);
    let p = f64::from(args.size);
    if args.size.is_multiple_of(2) || args.size == 1 {
        return c;
    }
    let stretch = (p + 1.0) / (p - 1.0);
    Cost::new(c.alpha * stretch, c.beta * stretch, 0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every rank meets every other exactly once, each meeting is mutual, and at even p every
    /// round pairs all ranks.
    #[test]
    fn rounds_form_a_tournament() {
        for p in 2..=33u32 {
            for r in 0..p {
                let mut met: Vec<u32> = (1..p).map(|k| partner(r, k, p)).collect();
                for (k, &q) in (1..p).zip(&met) {
                    assert_ne!(q, r, "p={p} r={r} k={k}");
                    // mutual: the partner meets r in the same round (same k at even p)
                    let back = (1..p).find(|&j| partner(q, j, p) == r);
                    assert!(back.is_some(), "p={p}: {q} never meets {r}");
                    if p % 2 == 0 {
                        assert_eq!(back, Some(k), "p={p} r={r} k={k}");
                    }
                }
                met.sort_unstable();
                assert_eq!(met, (0..p).filter(|&q| q != r).collect::<Vec<_>>(), "p={p} r={r}");
            }
        }
    }
}
