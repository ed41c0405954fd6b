//! What `fabcoll bench` runs per operation: buffer lengths for a size (OSU size semantics), the
//! call itself, the reference result for `--check`, and the nccl-tests bandwidth definitions.

use fabcoll::collectives::Collective;
use fabcoll::{Collectives, Element, ReduceOp};

/// Root of rooted operations.
pub const ROOT: u32 = 0;

/// Element types the bench uses: f32 for reductions (sum), u8 for the data movers (as OSU).
pub trait BenchElem: Element {
    const NAME: &'static str;
    fn from_u64(v: u64) -> Self;
}

impl BenchElem for f32 {
    const NAME: &'static str = "f32";
    fn from_u64(v: u64) -> f32 {
        v as f32
    }
}

impl BenchElem for u8 {
    const NAME: &'static str = "u8";
    fn from_u64(v: u64) -> u8 {
        v as u8
    }
}

/// Input element i of rank r. Small integers for reductions, so f32 sums are exact.
pub fn val(coll: Collective, r: u32, i: usize) -> u64 {
    if coll.is_reduction() {
        (u64::from(r) * 3 + i as u64) % 8
    } else {
        u64::from(r) * 37 + i as u64 * 11 + 1
    }
}

/// Receive-buffer filler before a checked call (what "untouched" looks like).
pub const SENTINEL: u64 = 201;

/// The shape of one call at one size.
#[derive(Clone, Debug)]
pub struct Shape {
    pub coll: Collective,
    pub p: u32,
    /// Elements per block: the buffer (bcast, reduce, allreduce, scan, exscan, reduce_scatter
    /// total), a rank's contribution (gather, scatter, allgather) or a pair's block (alltoall).
    pub n: usize,
    /// reduce_scatter: elements of each rank's result block.
    pub counts: Vec<usize>,
    /// The v-forms' counts: `n` for every rank (built once, not inside the timed call).
    pub uniform: Vec<usize>,
    pub send_len: usize,
    pub recv_len: usize,
    /// The size as OSU reports it, in bytes.
    pub bytes: u64,
    /// The size S of nccl-tests' algbw = S / t, in bytes.
    pub nccl_bytes: u64,
    /// The call is made in place ([`IN_PLACE`] operations): the input is in the receive buffer.
    pub in_place: bool,
}

/// The operations `fabcoll bench --in-place` measures in place (the forms ML frameworks call):
/// allreduce's input is the whole buffer, allgather's this rank's block at its place, alltoall's
/// the p blocks it sends.
pub const IN_PLACE: [Collective; 3] = [Collective::Allreduce, Collective::Allgather, Collective::Alltoall];

/// The call shape for `bytes` per OSU semantics (see the module doc), or `None` if the size holds
/// no whole element (or, for reduce_scatter_block, no element per rank).
pub fn shape(coll: Collective, p: u32, rank: u32, bytes: u64, es: usize) -> Option<Shape> {
    let pu = p as usize;
    let mut n = (bytes / es as u64) as usize;
    if n == 0 && coll != Collective::Barrier {
        return None;
    }
    let mut counts = Vec::new();
    let (send_len, recv_len) = match coll {
        Collective::Barrier => {
            n = 0;
            (0, 0)
        }
        Collective::Bcast => (0, n),
        Collective::Reduce => (n, if rank == ROOT { n } else { 0 }),
        Collective::Allreduce | Collective::Scan | Collective::Exscan => (n, n),
        Collective::Gather | Collective::Gatherv => (n, if rank == ROOT { pu * n } else { 0 }),
        Collective::Scatter | Collective::Scatterv => (if rank == ROOT { pu * n } else { 0 }, n),
        Collective::Allgather | Collective::Allgatherv => (n, pu * n),
        Collective::Alltoall | Collective::Alltoallv => (pu * n, pu * n),
        Collective::ReduceScatter => {
            counts = (0..pu).map(|i| n / pu + usize::from(i < n % pu)).collect();
            (n, counts[rank as usize])
        }
        Collective::ReduceScatterBlock => {
            let b = n / pu;
            if b == 0 {
                return None;
            }
            n = b * pu;
            (n, b)
        }
    };
    let block = (n * es) as u64;
    let whole = block * u64::from(p);
    let (osu, nccl) = match coll {
        Collective::Gather
        | Collective::Gatherv
        | Collective::Scatter
        | Collective::Scatterv
        | Collective::Allgather
        | Collective::Allgatherv
        | Collective::Alltoall
        | Collective::Alltoallv => (block, whole),
        _ => (block, block),
    };
    let uniform = vec![n; p as usize];
    Some(Shape { coll, p, n, counts, uniform, send_len, recv_len, bytes: osu, nccl_bytes: nccl, in_place: false })
}

/// nccl-tests' busbw / algbw factor (PERFORMANCE.md): allreduce 2(n−1)/n; allgather,
/// reduce_scatter, alltoall (and gather/scatter) (n−1)/n; bcast, reduce (and scans) 1.
pub fn bus_factor(coll: Collective, p: u32) -> f64 {
    let n = f64::from(p);
    match coll {
        Collective::Barrier => 0.0,
        Collective::Allreduce => 2.0 * (n - 1.0) / n,
        Collective::Allgather
        | Collective::Allgatherv
        | Collective::ReduceScatter
        | Collective::ReduceScatterBlock
        | Collective::Alltoall
        | Collective::Alltoallv
        | Collective::Gather
        | Collective::Gatherv
        | Collective::Scatter
        | Collective::Scatterv => (n - 1.0) / n,
        Collective::Bcast | Collective::Reduce | Collective::Scan | Collective::Exscan => 1.0,
    }
}

/// Issues the call of `s` through `c` (blocking view or nonblocking scope).
pub fn issue<'b, C: Collectives<'b>, T: BenchElem>(
    c: &C,
    s: &Shape,
    send: &'b [T],
    recv: &'b mut [T],
) -> fabcoll::Result<C::Out> {
    let sum = ReduceOp::Sum;
    let uniform = &s.uniform;
    if s.in_place {
        return match s.coll {
            Collective::Allreduce => c.allreduce_in_place(recv, &sum),
            Collective::Allgather => c.allgather_in_place(recv),
            Collective::Alltoall => c.alltoall_in_place(recv),
            coll => Err(fabcoll::Error::InvalidArgument {
                coll: coll.name(),
                msg: "fabcoll bench measures only allreduce, allgather and alltoall in place".into(),
            }),
        };
    }
    match s.coll {
        Collective::Barrier => c.barrier(),
        Collective::Bcast => c.bcast(recv, ROOT),
        Collective::Reduce => c.reduce(send, recv, &sum, ROOT),
        Collective::Allreduce => c.allreduce(send, recv, &sum),
        Collective::Gather => c.gather(send, recv, ROOT),
        Collective::Gatherv => c.gatherv(send, recv, uniform, None, ROOT),
        Collective::Scatter => c.scatter(send, recv, ROOT),
        Collective::Scatterv => c.scatterv(send, uniform, None, recv, ROOT),
        Collective::Allgather => c.allgather(send, recv),
        Collective::Allgatherv => c.allgatherv(send, recv, uniform, None),
        Collective::Alltoall => c.alltoall(send, recv),
        Collective::Alltoallv => c.alltoallv(send, uniform, None, recv, uniform, None),
        Collective::ReduceScatter => c.reduce_scatter(send, recv, &s.counts, &sum),
        Collective::ReduceScatterBlock => c.reduce_scatter_block(send, recv, &sum),
        Collective::Scan => c.scan(send, recv, &sum),
        Collective::Exscan => c.exscan(send, recv, &sum),
    }
}

/// Fills the inputs of rank `r` for a checked call: `send` with the pattern, `recv` with the
/// sentinel (bcast root: the pattern). In place, `recv` holds the input: the pattern (allgather:
/// in this rank's block).
pub fn fill<T: BenchElem>(s: &Shape, r: u32, send: &mut [T], recv: &mut [T]) {
    for (i, x) in send.iter_mut().enumerate() {
        *x = T::from_u64(val(s.coll, r, i));
    }
    let own = if s.coll == Collective::Allgather { r as usize * s.n..(r as usize + 1) * s.n } else { 0..recv.len() };
    for (i, x) in recv.iter_mut().enumerate() {
        *x = match (s.in_place, s.coll) {
            (true, _) if own.contains(&i) => T::from_u64(val(s.coll, r, i - own.start)),
            (false, Collective::Bcast) if r == ROOT => T::from_u64(val(s.coll, ROOT, i)),
            _ => T::from_u64(SENTINEL),
        };
    }
}

/// The reference receive buffer of rank `r`.
pub fn expected<T: BenchElem>(s: &Shape, r: u32) -> Vec<T> {
    let (p, n, c) = (s.p, s.n, s.coll);
    let sum = |ranks: std::ops::Range<u32>, i: usize| T::from_u64(ranks.map(|q| val(c, q, i)).sum());
    let sentinel = || T::from_u64(SENTINEL);
    let ru = r as usize;
    match c {
        Collective::Barrier => Vec::new(),
        Collective::Bcast => (0..n).map(|i| T::from_u64(val(c, ROOT, i))).collect(),
        Collective::Reduce if r != ROOT => Vec::new(),
        Collective::Reduce | Collective::Allreduce => (0..n).map(|i| sum(0..p, i)).collect(),
        Collective::Scan => (0..n).map(|i| sum(0..r + 1, i)).collect(),
        Collective::Exscan if r == 0 => vec![sentinel(); n],
        Collective::Exscan => (0..n).map(|i| sum(0..r, i)).collect(),
        Collective::Gather | Collective::Gatherv if r != ROOT => Vec::new(),
        Collective::Gather | Collective::Gatherv | Collective::Allgather | Collective::Allgatherv => {
            (0..p).flat_map(|q| (0..n).map(move |i| T::from_u64(val(c, q, i)))).collect()
        }
        Collective::Scatter | Collective::Scatterv => (0..n).map(|i| T::from_u64(val(c, ROOT, ru * n + i))).collect(),
        Collective::Alltoall | Collective::Alltoallv => {
            (0..p).flat_map(|q| (0..n).map(move |i| T::from_u64(val(c, q, ru * n + i)))).collect()
        }
        Collective::ReduceScatter => {
            let off: usize = s.counts[..ru].iter().sum();
            (0..s.counts[ru]).map(|i| sum(0..p, off + i)).collect()
        }
        Collective::ReduceScatterBlock => {
            let b = n / p as usize;
            (0..b).map(|i| sum(0..p, ru * b + i)).collect()
        }
    }
}

/// The first mismatch of `got` against the reference, as a message.
pub fn verify<T: BenchElem>(s: &Shape, r: u32, got: &[T]) -> Option<String> {
    let want = expected::<T>(s, r);
    if got.len() != want.len() {
        return Some(format!("rank {r}: result has {} elements, expected {}", got.len(), want.len()));
    }
    let i = (0..want.len()).find(|&i| got[i] != want[i])?;
    Some(format!("rank {r}: element {i} is {:?}, expected {:?}", got[i], want[i]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn osu_and_nccl_sizes() {
        let s = shape(Collective::Allgather, 4, 1, 1024, 1).unwrap();
        assert_eq!((s.send_len, s.recv_len, s.bytes, s.nccl_bytes), (1024, 4096, 1024, 4096));
        let s = shape(Collective::Allreduce, 4, 1, 1024, 4).unwrap();
        assert_eq!((s.n, s.bytes, s.nccl_bytes), (256, 1024, 1024));
        let s = shape(Collective::ReduceScatter, 3, 2, 40, 4).unwrap();
        assert_eq!(s.counts, vec![4, 3, 3]);
        assert!(shape(Collective::Allreduce, 2, 0, 2, 4).is_none());
        assert!(shape(Collective::ReduceScatterBlock, 4, 0, 8, 4).is_none());
        assert_eq!(bus_factor(Collective::Allreduce, 4), 1.5);
    }
}
