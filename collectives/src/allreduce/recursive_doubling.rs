//! Recursive-doubling allreduce: in step k ranks 2^k apart exchange their whole partial vectors and
//! reduce, so after lg p steps every rank holds the full reduction (thakur §4.5).
//!
//! Cost: p = 2^k: lg p (α + nβ + nγ). Other p: the first r = p − 2^⌊lg p⌋ even ranks first send
//! their vector to rank + 1 and get the result back at the end (thakur §4.4's pre/post steps):
//! (⌊lg p⌋ + 2)α + (⌊lg p⌋ + 2)nβ + (⌊lg p⌋ + 1)nγ.
//! Restrictions: none — every partial covers a contiguous range of ranks and is combined with the
//! lower range first, so non-commutative ops are fine. Paper: thakur §4.5 (and §4.4 for the fold).

use crate::args::{CollArgs, Collective};
use crate::cost::{floor_log2, Cost};
use crate::error::Result;
use crate::reduce_scatter::phases::{copy, recv, send, union, Fold};
use crate::registry::{Algorithm, Restrictions};
use crate::schedule::{Buf, Order, Region, Schedule, ScheduleBuilder};

pub(crate) const ALGORITHM: Algorithm = Algorithm {
    coll: Collective::Allreduce,
    name: "recursive_doubling",
    summary: "exchange whole vectors with partners 1, 2, 4, … apart; lg p steps, for short vectors",
    restrictions: Restrictions::NONE,
    params: &[],
    cost,
    build,
};

fn cost(a: &CollArgs) -> Cost {
    let n = (a.count * u64::from(a.elem_size)) as f64;
    let (msgs, reduces) = rounds(a.p());
    Cost::new(msgs, msgs * n, reduces * n)
}

/// (messages, reductions) on the critical path of recursive doubling among `m` ranks: lg m each
/// for m = 2^k, else ⌊lg m⌋ + 2 and ⌊lg m⌋ + 1 (the fold's steps before and after); the
/// hierarchical allreduces' phases among nodes cost the same.
pub(crate) fn rounds(m: u64) -> (f64, f64) {
    let lg = f64::from(floor_log2(m));
    if m.is_power_of_two() {
        (lg, lg)
    } else {
        (lg + 2.0, lg + 1.0)
    }
}

fn build(a: &CollArgs) -> Result<Schedule> {
    let mut b = ScheduleBuilder::for_args(a);
    let n = a.count;
    if n == 0 {
        return Ok(b.finish());
    }
    let acc = Region::new(Buf::Recv, 0, n);
    let tmp = Region::new(b.scratch(n), 0, n);
    let start: Vec<_> = copy(&mut b, Region::new(Buf::Send, 0, n), acc, &[]).into_iter().collect();
    // fold: even ranks 2i < 2r send to 2i + 1, which survives as new rank i
    let fold = Fold::new(a.size, true);
    let rank = a.rank;
    let Some(me) = fold.new_rank(rank) else {
        let partner = rank + 1;
        let s = send(&mut b, partner, acc, &start).into_iter().collect::<Vec<_>>();
        recv(&mut b, partner, acc, &union(&[&s, &start]));
        return Ok(b.finish());
    };
    let mut deps = start.clone();
    // Without a folded-in partner, the first exchange sends the input straight from `Send` (and
    // receives into the untouched scratch): the copy into `acc` runs while the message travels.
    let mut from_send = fold.partner(rank).is_none();
    if let Some(partner) = fold.partner(rank) {
        let r = b.recv(partner, tmp, &[]);
        deps = vec![b.reduce(tmp, acc, Order::SrcFirst, &union(&[&[r], &start]))];
    }
    let mut m = 1;
    while m < fold.pof2 {
        let peer_new = me ^ m;
        let order = if peer_new < me { Order::SrcFirst } else { Order::DstFirst };
        // send and reduce touch the whole vector: send first, then reduce after it
        let (s, r) = if from_send {
            (b.send(fold.real(peer_new), Region::new(Buf::Send, 0, n), &[]), b.recv(fold.real(peer_new), tmp, &[]))
        } else {
            (b.send(fold.real(peer_new), acc, &deps), b.recv(fold.real(peer_new), tmp, &deps))
        };
        deps = vec![b.reduce(tmp, acc, order, &union(&[&[s, r], &deps]))];
        from_send = false;
        m <<= 1;
    }
    if let Some(partner) = fold.partner(rank) {
        b.send(partner, acc, &deps);
    }
    Ok(b.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verifies_symbolically() {
        crate::verify::sweep::sweep(&ALGORITHM, 13);
    }

    #[test]
    fn message_count_pow2() {
        let a = CollArgs::new(Collective::Allreduce, 3, 8, 10);
        let s = ALGORITHM.schedule(&a).unwrap();
        let sends = s.iter().filter(|(_, k, _)| matches!(k, crate::schedule::StepKind::Send { .. })).count();
        assert_eq!(sends, 3);
    }
}
