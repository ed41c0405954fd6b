//! Binary-tree broadcast: the root's subtree is every rank; a rank heading ranks [v, v + n) of
//! the rotated order (v = (r − root) mod p) sends the whole message to v + 1, head of the next
//! ⌊n / 2⌋ ranks, and then to the head of the ⌊(n − 1) / 2⌋ after them. Subtrees are runs of
//! consecutive ranks, as the binomial tree's are, so ranks placed in blocks (a node's, a core's)
//! keep most messages inside their block.
//!
//! Cost (n = count·elem_size bytes, one port per rank): the head of n ranks is done after
//! T(n) = max(1 + T(⌊n / 2⌋), 2 + T(⌊(n − 1) / 2⌋)) sends of α + nβ, T(1) = 0 (about 2 lg p;
//! 4 at p = 8, 6 at p = 16), more than the binomial tree's ⌈lg p⌉
//! (α + nβ) on one port. What it saves is sends per rank: none sends more than 2, where the
//! binomial root sends ⌈lg p⌉ and its children nearly as many. When calls follow each other (a
//! loop of small broadcasts, and the back-to-back average every MPI benchmark reports), a
//! broadcast ends for a rank once its own sends are out, so the rank with the most sends sets the
//! pace: 2 sends (α each) against ⌈lg p⌉. Restrictions: none. Source: the binary tree of Open
//! MPI's tuned `bcast` (`ompi_coll_base_bcast_intra_bintree`; Pješivac-Grbović et al.,
//! "Performance analysis of MPI collective operations", Cluster Computing 10(2), 2007), which
//! numbers its tree level by level; thakur §4.2 has the binomial tree it is measured against.

use crate::allgather::layout::{Group, Layout};
use crate::args::{CollArgs, Collective};
use crate::cost::Cost;
use crate::error::Result;
use crate::registry::{Algorithm, Restrictions};
use crate::schedule::{Buf, Schedule, ScheduleBuilder};

pub(crate) const ALGORITHM: Algorithm = Algorithm {
    coll: Collective::Bcast,
    name: "binary_tree",
    summary: "binary tree rooted at root; at most 2 sends per rank, about 2 lg p dependent sends",
    restrictions: Restrictions::NONE,
    params: &[],
    cost,
    build,
};

fn cost(a: &CollArgs) -> Cost {
    let n = (a.count * u64::from(a.elem_size)) as f64;
    let k = f64::from(sends_until_last(a.size));
    Cost::new(k, k * n, 0.0)
}

/// The module doc's T(p): sends of the whole message until the last of p ranks has it, one port
/// per rank. Each level of the tree holds subtrees of at most two sizes, so remembering them keeps
/// this at O(lg p) instead of a visit per rank.
fn sends_until_last(p: u32) -> u32 {
    fn t(n: u32, known: &mut Vec<(u32, u32)>) -> u32 {
        match n {
            0 | 1 => 0,
            2 => 1,
            n => match known.iter().find(|&&(m, _)| m == n) {
                Some(&(_, v)) => v,
                None => {
                    let v = (1 + t(n / 2, known)).max(2 + t((n - 1) / 2, known));
                    known.push((n, v));
                    v
                }
            },
        }
    }
    t(p, &mut Vec::new())
}

/// Where relative rank `me` of `m` sits: its parent (none for the root) and its children, first
/// the head of the larger subtree.
fn place(me: u32, m: u32) -> (Option<u32>, [Option<u32>; 2]) {
    let (mut lo, mut hi, mut parent) = (0, m, None);
    while lo != me {
        let mid = lo + 1 + (hi - lo) / 2;
        parent = Some(lo);
        (lo, hi) = if me < mid { (lo + 1, mid) } else { (mid, hi) };
    }
    let n = hi - lo;
    let first = (n >= 2).then_some(lo + 1);
    let second = (n >= 3).then_some(lo + 1 + n / 2);
    (parent, [first, second])
}

fn build(a: &CollArgs) -> Result<Schedule> {
    let mut b = ScheduleBuilder::for_args(a);
    let lay = Layout::new(Buf::Recv, vec![(0, a.count)]);
    let g = Group::rotated(a.size, a.root, a.rank);
    let (parent, children) = place(g.me, g.m());
    let have = match parent {
        Some(v) => lay.recv(&mut b, g.rank(v), 0, 1, &[]),
        None => Vec::new(),
    };
    for child in children.into_iter().flatten() {
        lay.send(&mut b, g.rank(child), 0, 1, &have);
    }
    Ok(b.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::StepKind;

    #[test]
    fn verifies() {
        crate::verify::sweep::sweep(&ALGORITHM, 20);
    }

    #[test]
    fn subtrees_are_runs_of_consecutive_ranks() {
        // p = 8: 0 -> 1 (ranks 1-4) and 5 (5-7); 1 -> 2 (2-3) and 4; 2 -> 3; 5 -> 6 and 7.
        let tree: Vec<_> = (0..8).map(|v| place(v, 8)).collect();
        assert_eq!(tree[0], (None, [Some(1), Some(5)]));
        assert_eq!(tree[1], (Some(0), [Some(2), Some(4)]));
        assert_eq!(tree[2], (Some(1), [Some(3), None]));
        assert_eq!(tree[5], (Some(0), [Some(6), Some(7)]));
        assert_eq!(tree[7], (Some(5), [None, None]));
        assert_eq!([1, 2, 3, 4, 7, 8, 15, 16].map(sends_until_last), [0, 1, 2, 2, 4, 4, 6, 6]);
        assert!((62..=64).contains(&sends_until_last(u32::MAX)), "{}", sends_until_last(u32::MAX));
    }

    #[test]
    fn the_cost_is_the_built_trees_longest_wait() {
        for m in 1..300u32 {
            let mut when = vec![0u32; m as usize];
            for v in 0..m {
                for (i, c) in place(v, m).1.into_iter().enumerate() {
                    if let Some(c) = c {
                        when[c as usize] = when[v as usize] + 1 + i as u32;
                    }
                }
            }
            assert_eq!(sends_until_last(m), when.into_iter().max().unwrap(), "m = {m}");
        }
    }

    #[test]
    fn parents_and_children_agree() {
        for m in 1..70 {
            for v in 0..m {
                for c in place(v, m).1.into_iter().flatten() {
                    assert_eq!(place(c, m).0, Some(v), "m = {m}, child {c} of {v}");
                }
            }
        }
    }

    #[test]
    fn no_rank_sends_more_than_twice() {
        for p in [1, 2, 3, 8, 13, 64] {
            for rank in 0..p {
                let a = CollArgs::new(Collective::Bcast, rank, p, 16).with_root(p / 3);
                let s = build(&a).unwrap();
                let sends = s.steps().iter().filter(|st| matches!(st.kind, StepKind::Send { .. })).count();
                assert!(sends <= 2, "p = {p}, rank {rank}: {sends} sends");
            }
        }
    }
}
