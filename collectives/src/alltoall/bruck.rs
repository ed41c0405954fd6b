//! Bruck's index alltoall(v): ⌈lg p⌉ store-and-forward steps; in step k rank r sends to r + 2^k
//! every block whose (rotated) index j has bit k set, packed into one message, and receives as many.
//!
//! Cost (n = p·count·elem bytes per rank): p a power of two: lg p·α + (n/2)·lg p·β; other p:
//! ⌈lg p⌉α + Σ_k |{1 ≤ j < p : bit k of j}|·(n/p)·β (thakur's n/2·lg p + (n/p)(p − 2^⌊lg p⌋) for the
//! last step), γ = 0; plus local pack/unpack copies. alltoallv: β = Σ over steps of the largest
//! message. Restrictions: none. Paper: thakur §4.3 (Bruck et al. \[7\]); faraj-yuan §3.1.
//!
//! The initial rotation of thakur's figure 7 is only a relabeling here: position j of rank r holds
//! item (src, dst) = (r − (j mod 2^k), src + j) before step k, which both sides of a message
//! compute, so blocks stay where they are until sent (see `forward`) and land in `Recv` directly,
//! with no final inverse rotation. alltoallv works the same with per-item sizes from the matrix.
//! Scratch is not reused (pack and receive buffers per step): ≈ n·lg p elements' worth for p a
//! power of two, against thakur's ≈ 2n — fine for the short messages Bruck is for.

use super::forward::{Forwarder, Item};
use super::phases::{elem, Io};
use crate::args::{CollArgs, Collective};
use crate::cost::{ceil_log2, Cost};
use crate::error::Result;
use crate::registry::{Algorithm, Restrictions};
use crate::schedule::{Schedule, ScheduleBuilder};

pub(super) const ALLTOALL: Algorithm = Algorithm {
    coll: Collective::Alltoall,
    name: "bruck",
    summary: "Bruck index algorithm: ceil(lg p) steps, step k forwards the blocks with bit k set",
    restrictions: Restrictions::NONE,
    params: &[],
    cost,
    build,
};

pub(super) const ALLTOALLV: Algorithm = Algorithm { coll: Collective::Alltoallv, ..ALLTOALL };

/// The items rank `i` sends to rank i + 2^k in step k, in position order.
fn message(i: u32, k: u32, p: u32) -> impl Iterator<Item = Item> {
    let (i, p64, low) = (u64::from(i), u64::from(p), (1u64 << k) - 1);
    (1..p64).filter(move |j| j >> k & 1 == 1).map(move |j| {
        let src = (i + p64 - (j & low)) % p64;
        (src as u32, ((src + j) % p64) as u32)
    })
}

fn build(args: &CollArgs) -> Result<Schedule> {
    let mut b = ScheduleBuilder::for_args(args);
    let io = Io::new(&mut b, args)?;
    io.own_copy(&mut b);
    let (r, p) = (u64::from(args.rank), u64::from(args.size));
    let mut fw = Forwarder::new(io);
    for k in 0..ceil_log2(p) {
        let dist = 1u64 << k;
        let (to, from) = (((r + dist) % p) as u32, ((r + p - dist) % p) as u32);
        let out: Vec<Item> = message(args.rank, k, args.size).collect();
        fw.send(&mut b, to, &out, &[]);
        let inc: Vec<Item> = message(from, k, args.size).collect();
        fw.recv(&mut b, from, &inc, &[]);
    }
    debug_assert_eq!(fw.held(), 0, "bruck left items undelivered");
    Ok(b.finish())
}

/// |{0 ≤ j < p : bit k of j is set}|.
fn with_bit(p: u64, k: u32) -> u64 {
    let period = 1u64 << (k + 1);
    (p / period) * (period / 2) + (p % period).saturating_sub(period / 2)
}

fn cost(args: &CollArgs) -> Cost {
    let (p, steps) = (args.size, ceil_log2(u64::from(args.size)));
    // Bytes summed as f64: Σ over steps may exceed u64 where p·count does not.
    let (mut alpha, mut bytes) = (0u64, 0f64);
    for k in 0..steps {
        let max = match args.coll {
            Collective::Alltoallv => {
                (0..p).map(|i| message(i, k, p).map(|(s, d)| args.pair_count(s, d)).sum::<u64>()).max().unwrap_or(0)
            }
            _ => with_bit(u64::from(p), k) * args.count,
        };
        alpha += u64::from(max > 0);
        bytes += max as f64;
    }
    Cost::new(alpha as f64, bytes * elem(args), 0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bit_counts() {
        for p in 1..40u64 {
            for k in 0..7 {
                assert_eq!(with_bit(p, k), (0..p).filter(|j| j >> k & 1 == 1).count() as u64, "p={p} k={k}");
            }
        }
    }

    #[test]
    fn power_of_two_cost_is_thakurs() {
        let args = CollArgs::new(Collective::Alltoall, 0, 16, 8);
        let n = 16.0 * 8.0 * 4.0;
        assert_eq!(cost(&args), Cost::new(4.0, n / 2.0 * 4.0, 0.0));
    }
}
