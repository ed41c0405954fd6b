//! Block layouts and transfers of block ranges, shared by the gather, scatter, bcast and allgather
//! phases of this crate's tree, ring, recursive-doubling and mesh algorithms.
//!
//! A [`Layout`] says where blocks `0..n` of a collective live in one buffer of one rank (the root's
//! `Recv` with `displs`, an intermediate rank's packed scratch, `Recv` split by
//! [`crate::blocks::block`]). A transfer moves the blocks `lo..hi` as ONE message whose length is
//! the sum of their lengths, so both sides agree on it whatever their own layouts are: a side whose
//! blocks are contiguous in its buffer sends or receives in place, the other packs or unpacks
//! through a scratch buffer of exactly that length. Transfers of zero elements are skipped on both
//! sides (every rank computes the same lengths from the same counts).

use crate::schedule::{Buf, Region, ScheduleBuilder, StepId};

/// Where blocks `0..n` live in one buffer: block i is `len` elements at `off`.
#[derive(Clone, Debug)]
pub(crate) struct Layout {
    pub buf: Buf,
    blocks: Vec<(u64, u64)>,
}

impl Layout {
    pub fn new(buf: Buf, blocks: Vec<(u64, u64)>) -> Layout {
        Layout { buf, blocks }
    }

    /// Blocks of the given lengths packed one after another from offset 0 of `buf`.
    pub fn packed(buf: Buf, lens: impl IntoIterator<Item = u64>) -> Layout {
        let mut off = 0;
        let blocks = lens
            .into_iter()
            .map(|l| {
                let b = (off, l);
                off += l;
                b
            })
            .collect();
        Layout { buf, blocks }
    }

    /// Region of block i.
    pub fn region(&self, i: u32) -> Region {
        let (off, len) = self.blocks[i as usize];
        Region::new(self.buf, off, len)
    }

    /// Total elements of blocks `lo..hi`.
    pub fn len(&self, lo: u32, hi: u32) -> u64 {
        self.blocks[lo as usize..hi as usize].iter().map(|b| b.1).sum()
    }

    /// The single region covering blocks `lo..hi` if they are laid out back to back in order.
    pub fn contiguous(&self, lo: u32, hi: u32) -> Option<Region> {
        let bs = &self.blocks[lo as usize..hi as usize];
        let first = bs.iter().find(|b| b.1 > 0)?;
        let mut end = first.0;
        for &(off, len) in bs.iter().filter(|b| b.1 > 0) {
            if off != end {
                return None;
            }
            end = off + len;
        }
        Some(Region::new(self.buf, first.0, end - first.0))
    }

    /// Sends blocks `lo..hi` to `peer` as one message after `deps`; packs through scratch when
    /// they are not contiguous. Returns the step ids created (empty for a zero-length range).
    pub fn send(&self, b: &mut ScheduleBuilder, peer: u32, lo: u32, hi: u32, deps: &[StepId]) -> Vec<StepId> {
        let total = self.len(lo, hi);
        if total == 0 {
            return Vec::new();
        }
        if let Some(r) = self.contiguous(lo, hi) {
            return vec![b.send(peer, r, deps)];
        }
        let tmp = b.scratch(total);
        let mut ids = Vec::new();
        let mut at = 0;
        for i in lo..hi {
            let r = self.region(i);
            if r.len > 0 {
                ids.push(b.copy(r, Region::new(tmp, at, r.len), deps));
                at += r.len;
            }
        }
        let s = b.send(peer, Region::new(tmp, 0, total), &ids);
        ids.push(s);
        ids
    }

    /// Receives blocks `lo..hi` from `peer` as one message; the writes into this layout wait for
    /// `deps`. Unpacks through scratch when they are not contiguous. Returns the step ids created.
    pub fn recv(&self, b: &mut ScheduleBuilder, peer: u32, lo: u32, hi: u32, deps: &[StepId]) -> Vec<StepId> {
        let total = self.len(lo, hi);
        if total == 0 {
            return Vec::new();
        }
        if let Some(r) = self.contiguous(lo, hi) {
            return vec![b.recv(peer, r, deps)];
        }
        let tmp = b.scratch(total);
        let rv = b.recv(peer, Region::new(tmp, 0, total), &[]);
        let mut cdeps = deps.to_vec();
        cdeps.push(rv);
        let mut ids = vec![rv];
        let mut at = 0;
        for i in lo..hi {
            let r = self.region(i);
            if r.len > 0 {
                ids.push(b.copy(Region::new(tmp, at, r.len), r, &cdeps));
                at += r.len;
            }
        }
        ids
    }
}

/// The ranks taking part in a phase, by position: position v is rank `ranks[v]`, and this rank is
/// position `me` (tree phases use position 0 as the root).
#[derive(Clone, Debug)]
pub(crate) struct Group {
    pub ranks: Vec<u32>,
    pub me: u32,
}

impl Group {
    /// All p ranks in relative order starting at `root`: position v is rank (v + root) mod p.
    pub fn rotated(p: u32, root: u32, rank: u32) -> Group {
        Group { ranks: (0..p).map(|v| (v + root) % p).collect(), me: (rank + p - root) % p }
    }

    /// Number of positions.
    pub fn m(&self) -> u32 {
        self.ranks.len() as u32
    }

    /// Rank at position v.
    pub fn rank(&self, v: u32) -> u32 {
        self.ranks[v as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contiguity_ignores_empty_blocks_and_detects_gaps() {
        let l = Layout::new(Buf::Recv, vec![(0, 2), (2, 0), (9, 0), (2, 3), (6, 1)]);
        assert_eq!(l.contiguous(0, 4), Some(Region::new(Buf::Recv, 0, 5)));
        assert_eq!(l.contiguous(0, 5), None);
        assert_eq!(l.contiguous(1, 3), None);
        assert_eq!(l.len(0, 5), 6);
    }

    #[test]
    fn non_contiguous_send_packs_once() {
        let l = Layout::new(Buf::Recv, vec![(4, 2), (0, 3)]);
        let mut b = ScheduleBuilder::new(0, 2);
        let ids = l.send(&mut b, 1, 0, 2, &[]);
        assert_eq!(ids.len(), 3);
        let s = b.finish();
        assert_eq!(s.scratch, vec![5]);
        assert_eq!(s.step(2).len(), 5);
    }
}
