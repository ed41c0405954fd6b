//! Simple alltoall(v): every rank posts all p − 1 receives and all p − 1 sends at once, with no
//! dependencies among them, in rank order (rank r talks to 0, 1, …, p − 1; faraj-yuan's "simple").
//!
//! Cost (n = p·count·elem bytes per rank, thakur's convention; the own block is a local copy):
//! any p, power of two or not: (p − 1)α + n(p − 1)/p·β, γ = 0 (thakur §4.3 counts it as
//! (p − 1)α + nβ, n including the own block). alltoallv: α = the most non-empty messages of any
//! rank, β = the most bytes any rank sends or receives. Rank order makes all ranks hit rank 0
//! first (faraj-yuan's contention γ): the simulator's single-ported receivers give ≈ (2p − 3)
//! (α + count·elem·β) for it.
//! Restrictions: none. Paper: faraj-yuan §3.1 ("simple", LAM's order); thakur §4.3 describes the
//! same post-everything scheme (MPICH's isend/irecv) with the spreading order.

use super::phases::{elem, Io};
use crate::args::{CollArgs, Collective};
use crate::cost::Cost;
use crate::error::Result;
use crate::registry::{Algorithm, Restrictions};
use crate::schedule::{Schedule, ScheduleBuilder};

const SUMMARY: &str = "post all receives and sends at once, in rank order (isend/irecv)";

pub(super) const ALLTOALL: Algorithm = Algorithm {
    coll: Collective::Alltoall,
    name: "simple",
    summary: SUMMARY,
    restrictions: Restrictions::NONE,
    params: &[],
    cost: concurrent_cost,
    build,
};

pub(super) const ALLTOALLV: Algorithm = Algorithm { coll: Collective::Alltoallv, ..ALLTOALL };

/// Peers in rank order, skipping `r`.
fn build(args: &CollArgs) -> Result<Schedule> {
    let r = args.rank;
    concurrent(args, (0..args.size).filter(|&j| j != r), (0..args.size).filter(|&j| j != r))
}

/// All receives (from `froms`, in that order), then all sends (to `tos`), none waiting for
/// another. Shared with spreading simple, which only changes the order.
pub(super) fn concurrent(
    args: &CollArgs,
    froms: impl Iterator<Item = u32>,
    tos: impl Iterator<Item = u32>,
) -> Result<Schedule> {
    let mut b = ScheduleBuilder::for_args(args);
    let io = Io::new(&mut b, args)?;
    io.own_copy(&mut b);
    for from in froms {
        io.recv_from(&mut b, from, &[]);
    }
    for to in tos {
        io.send_to(&mut b, to, &[]);
    }
    Ok(b.finish())
}

/// Cost of all messages at once: every port carries its p − 1 messages back to back.
pub(super) fn concurrent_cost(args: &CollArgs) -> Cost {
    let p = args.size;
    if args.coll != Collective::Alltoallv {
        if args.count == 0 {
            return Cost::default();
        }
        let m = f64::from(p) - 1.0;
        return Cost::new(m, m * args.count as f64 * elem(args), 0.0);
    }
    let (mut alpha, mut bytes) = (0u64, 0u64);
    for r in 0..p {
        let others = (0..p).filter(|&j| j != r);
        let sends = others.clone().map(|j| args.pair_count(r, j));
        let recvs = others.map(|j| args.pair_count(j, r));
        let (ns, bs) = sends.fold((0u64, 0u64), |(n, s), c| (n + u64::from(c > 0), s + c));
        let (nr, br) = recvs.fold((0u64, 0u64), |(n, s), c| (n + u64::from(c > 0), s + c));
        alpha = alpha.max(ns).max(nr);
        bytes = bytes.max(bs).max(br);
    }
    Cost::new(alpha as f64, bytes as f64 * elem(args), 0.0)
}
