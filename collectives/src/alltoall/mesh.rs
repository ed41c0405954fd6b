//! The d-dimensional mesh alltoall(v) shared by `mesh_2d` and `mesh_3d` (faraj-yuan §3.1): ranks
//! sit on a d_0 × d_1 × … grid (rank = Σ c_i·stride_i, stride_0 = 1); phase i exchanges, among the
//! ranks that differ only in coordinate i, the blocks whose destination has that coordinate.
//!
//! Invariant: before phase i, rank c holds the items (src, dst) with dst's coordinates < i equal
//! to c's and src's coordinates ≥ i equal to c's; after the last phase, exactly (·, c). A message
//! of phase i from q to t carries p/d_i items: src's low coordinates a (outer), dst's high
//! coordinates h (inner). In the last phase these sources are consecutive ranks, so a packed
//! `Recv` takes the message without unpacking. Scratch (pack and receive buffers per message,
//! not reused) is at most 2·Σ_i (d_i − 1)/d_i·n.

use super::forward::{Forwarder, Item};
use super::phases::{elem, Io};
use crate::args::{CollArgs, Collective};
use crate::cost::Cost;
use crate::error::Result;
use crate::schedule::{Schedule, ScheduleBuilder};

/// A grid of `dims` (product p).
pub(super) struct Grid {
    dims: Vec<u32>,
    stride: Vec<u64>,
}

impl Grid {
    pub fn new(dims: &[u32]) -> Grid {
        let mut stride = Vec::with_capacity(dims.len() + 1);
        let mut s = 1u64;
        for &d in dims {
            stride.push(s);
            s *= u64::from(d);
        }
        stride.push(s);
        Grid { dims: dims.to_vec(), stride }
    }

    fn coord(&self, r: u32, i: usize) -> u32 {
        ((u64::from(r) / self.stride[i]) % u64::from(self.dims[i])) as u32
    }

    /// `r` with coordinate i replaced by `c`.
    fn with(&self, r: u32, i: usize, c: u32) -> u32 {
        let base = u64::from(r) - u64::from(self.coord(r, i)) * self.stride[i];
        (base + u64::from(c) * self.stride[i]) as u32
    }

    /// The items `q` sends in phase i to the rank whose coordinate i is `t`, in message order.
    fn message(&self, q: u32, i: usize, t: u32) -> impl Iterator<Item = Item> + '_ {
        let q = u64::from(q);
        let low = self.stride[i];
        let high = self.stride[self.dims.len()] / self.stride[i + 1];
        let src_base = q - q % low; // q's coordinates ≥ i
        let dst_base = q % low + u64::from(t) * self.stride[i]; // q's coordinates < i, then t
        let step = self.stride[i + 1];
        (0..low).flat_map(move |a| (0..high).map(move |h| ((src_base + a) as u32, (dst_base + h * step) as u32)))
    }
}

/// Pairs (peer coordinate to send to, peer coordinate to receive from) of phase i, spreading
/// order: c + s and c − s for s = 1..d_i.
fn partners(grid: &Grid, r: u32, i: usize) -> impl Iterator<Item = (u32, u32)> {
    let (c, d) = (grid.coord(r, i), grid.dims[i]);
    (1..d).map(move |s| ((c + s) % d, (c + d - s) % d))
}

/// This rank's schedule on `grid`.
pub(super) fn build(args: &CollArgs, grid: &Grid) -> Result<Schedule> {
    let mut b = ScheduleBuilder::for_args(args);
    let io = Io::new(&mut b, args)?;
    io.own_copy(&mut b);
    let r = args.rank;
    let mut fw = Forwarder::new(io);
    for i in 0..grid.dims.len() {
        for (to, from) in partners(grid, r, i) {
            let out: Vec<Item> = grid.message(r, i, to).collect();
            fw.send(&mut b, grid.with(r, i, to), &out, &[]);
            let q = grid.with(r, i, from);
            let inc: Vec<Item> = grid.message(q, i, grid.coord(r, i)).collect();
            fw.recv(&mut b, q, &inc, &[]);
        }
    }
    debug_assert_eq!(fw.held(), 0, "mesh left items undelivered");
    Ok(b.finish())
}

/// Phases run one after the other; within a phase a rank's d_i − 1 messages share its port.
pub(super) fn cost(args: &CollArgs, grid: &Grid) -> Cost {
    let p = args.size;
    // Bytes summed as f64: Σ over phases may exceed u64 where p·count does not.
    let (mut alpha, mut bytes) = (0u64, 0f64);
    for (i, &d) in grid.dims.iter().enumerate() {
        if args.coll != Collective::Alltoallv {
            if args.count > 0 {
                alpha += u64::from(d - 1);
                bytes += f64::from(d - 1) * f64::from(p / d) * args.count as f64;
            }
            continue;
        }
        let (mut sent, mut msgs) = (vec![0u64; p as usize], vec![0u64; p as usize]);
        let (mut got, mut msgs_in) = (vec![0u64; p as usize], vec![0u64; p as usize]);
        for q in 0..p {
            for (to, _) in partners(grid, q, i) {
                let len: u64 = grid.message(q, i, to).map(|(s, t)| args.pair_count(s, t)).sum();
                let t = grid.with(q, i, to) as usize;
                sent[q as usize] += len;
                got[t] += len;
                msgs[q as usize] += u64::from(len > 0);
                msgs_in[t] += u64::from(len > 0);
            }
        }
        let max = |v: &[u64]| v.iter().copied().max().unwrap_or(0);
        alpha += max(&msgs).max(max(&msgs_in));
        bytes += max(&sent).max(max(&got)) as f64;
    }
    Cost::new(alpha as f64, bytes * elem(args), 0.0)
}

/// The largest divisor of `n` whose `k`-th power is ≤ n (1 for prime n).
pub(super) fn root_divisor(n: u32, k: u32) -> u32 {
    let n64 = u64::from(n);
    (1..=n)
        .take_while(|&x| u64::from(x).checked_pow(k).is_some_and(|v| v <= n64))
        .filter(|&x| n.is_multiple_of(x))
        .last()
        .unwrap_or(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_the_items_with_the_right_coordinates() {
        let g = Grid::new(&[2, 3, 2]);
        for q in 0..12u32 {
            for i in 0..3 {
                for t in 0..g.dims[i] {
                    let items: Vec<Item> = g.message(q, i, t).collect();
                    assert_eq!(items.len() as u32, 12 / g.dims[i]);
                    for (s, d) in items {
                        assert!((i..3).all(|j| g.coord(s, j) == g.coord(q, j)));
                        assert!((0..i).all(|j| g.coord(d, j) == g.coord(q, j)));
                        assert_eq!(g.coord(d, i), t);
                    }
                }
            }
        }
    }

    #[test]
    fn divisors() {
        assert_eq!(root_divisor(12, 2), 3);
        assert_eq!(root_divisor(16, 2), 4);
        assert_eq!(root_divisor(13, 2), 1);
        assert_eq!(root_divisor(1, 2), 1);
        assert_eq!(root_divisor(64, 3), 4);
        assert_eq!(root_divisor(30, 3), 3);
    }
}
