//! Linear (chain) scan and exscan: rank r receives the prefix of ranks 0..r from r − 1, folds it
//! in front of its own input and passes the new prefix to r + 1.
//!
//! Cost (n = count·elem_size bytes): (p − 1)(α + nβ + nγ) for any p (exscan: (p − 2) nγ).
//! Restrictions: none (the simplest order-exact baseline for non-commutative ops).
//! Paper: the sequential baseline that MPICH's recursive-doubling scan (thakur §4.1.1's
//! pattern) improves on.

use crate::args::{CollArgs, Collective};
use crate::cost::Cost;
use crate::error::Result;
use crate::registry::{Algorithm, Restrictions};
use crate::schedule::{Buf, Order, Region, Schedule, ScheduleBuilder};

pub(crate) const SCAN: Algorithm = Algorithm {
    coll: Collective::Scan,
    name: "linear",
    summary: "chain r−1 → r: receive the prefix, fold own input in after it, pass it on",
    restrictions: Restrictions::NONE,
    params: &[],
    cost,
    build,
};

pub(crate) const EXSCAN: Algorithm = Algorithm { coll: Collective::Exscan, ..SCAN };

fn cost(a: &CollArgs) -> Cost {
    let n = (a.count * u64::from(a.elem_size)) as f64;
    let k = f64::from(a.size - 1);
    // exscan: the last rank only stores what it receives
    let reductions = if a.coll == Collective::Exscan { (k - 1.0).max(0.0) } else { k };
    Cost::new(k, k * n, reductions * n)
}

fn build(a: &CollArgs) -> Result<Schedule> {
    let (p, r, count) = (a.size, a.rank, a.count);
    let mut b = ScheduleBuilder::for_args(a);
    if count == 0 {
        return Ok(b.finish());
    }
    let input = Region::new(Buf::Send, 0, count);
    let out = Region::new(Buf::Recv, 0, count);
    let last = r + 1 == p;
    if a.coll == Collective::Scan {
        let c = b.copy(input, out, &[]);
        let mut ready = vec![c];
        if r > 0 {
            let tmp = Region::new(b.scratch(count), 0, count);
            let rv = b.recv(r - 1, tmp, &[]);
            ready = vec![b.reduce(tmp, out, Order::SrcFirst, &[rv, c])];
        }
        if !last {
            b.send(r + 1, out, &ready);
        }
        return Ok(b.finish());
    }
    // exscan: rank 0 only sends its input; rank r > 0 keeps the received prefix and (unless it
    // is the last rank) forwards prefix ⊕ own input, built in scratch so in-place works too
    if r == 0 {
        if !last {
            b.send(1, input, &[]);
        }
        return Ok(b.finish());
    }
    if last {
        b.recv(r - 1, out, &[]);
        return Ok(b.finish());
    }
    let prefix = Region::new(b.scratch(count), 0, count);
    let next = Region::new(b.scratch(count), 0, count);
    let rv = b.recv(r - 1, prefix, &[]);
    let c = b.copy(input, next, &[]);
    let red = b.reduce(prefix, next, Order::SrcFirst, &[rv, c]);
    b.send(r + 1, next, &[red]);
    b.copy(prefix, out, &[rv, c]);
    Ok(b.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verifies_scan() {
        crate::verify::sweep::sweep(&SCAN, 20);
    }

    #[test]
    fn verifies_exscan() {
        crate::verify::sweep::sweep(&EXSCAN, 20);
    }
}
