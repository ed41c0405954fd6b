//! What each rank's buffers hold before the call and must hold after it, per operation, in the
//! verifier's symbolic values (see [`Collective`]'s docs for the buffer conventions).
//!
//! Input element `i` of rank r's send buffer is `(i, {r})` for every operation; in place, that input
//! lives in `Recv` at [`CollArgs::in_place_offset`] instead. The expected `Recv` starts as the
//! initial `Recv` (so gaps between v-blocks and exscan's rank 0 must stay untouched).

use crate::args::{CollArgs, Collective};
use crate::error::{Error, Result};
use crate::schedule::Schedule;

use super::sets::{Sets, Val};

/// Elements the verifier will hold for one job at most (8 bytes each).
const MAX_ELEMENTS: u64 = 1 << 27;

fn idx(i: u64) -> Result<u32> {
    u32::try_from(i).map_err(|_| Error::Verify(format!("element index {i} too large to verify")))
}

/// Checks that the job's buffers, scratch included, fit the verifier (indices in u32, total
/// memory bounded).
pub(super) fn check_size(args: &[CollArgs], schedules: &[Schedule]) -> Result<()> {
    let mut total = 0u64;
    for (a, s) in args.iter().zip(schedules) {
        let n = a.send_len()?.saturating_add(a.recv_len()?);
        idx(n)?;
        total = total.saturating_add(n);
        for &l in &s.scratch {
            total = total.saturating_add(l);
        }
    }
    if total > MAX_ELEMENTS {
        return Err(Error::Verify(format!("job holds {total} elements, more than the verifier's {MAX_ELEMENTS}")));
    }
    Ok(())
}

/// Initial `(Send, Recv)` of rank `a.rank`.
pub(super) fn initial(a: &CollArgs, sets: &mut Sets) -> Result<(Vec<Val>, Vec<Val>)> {
    let send_len = a.send_len()?;
    let recv_len = a.recv_len()?;
    let me = sets.single(a.rank);
    let mut input = super::alloc(0);
    input.extend((0..idx(send_len)?).map(|i| Val { idx: i, set: me }));
    let mut recv = super::alloc(recv_len as usize);
    if a.in_place {
        let off =
            a.in_place_offset()?.ok_or_else(|| Error::Verify(format!("in-place {} has no input offset", a.coll)))?;
        if off.checked_add(send_len).is_none_or(|e| e > recv_len) {
            return Err(Error::Verify(format!(
                "rank {}: in-place input recv[{off}..{}] does not fit the receive buffer of {recv_len} elements",
                a.rank,
                off.saturating_add(send_len)
            )));
        }
        recv[off as usize..(off + send_len) as usize].copy_from_slice(&input);
        super::release(input);
        return Ok((Vec::new(), recv));
    }
    if a.coll == Collective::Bcast && a.rank == a.root {
        for (i, v) in recv.iter_mut().enumerate() {
            *v = Val { idx: i as u32, set: me };
        }
    }
    Ok((input, recv))
}

/// Fills `out[off..off + n]` with `(first + k, set)`.
fn fill(out: &mut [Val], off: u64, n: u64, first: u64, set: u32) -> Result<()> {
    let end = off.checked_add(n).filter(|&e| e <= out.len() as u64).ok_or_else(|| {
        Error::Verify(format!("expected block [{off}..{}] outside the receive buffer of {}", off + n, out.len()))
    })?;
    for (k, v) in out[off as usize..end as usize].iter_mut().enumerate() {
        *v = Val { idx: idx(first + k as u64)?, set };
    }
    Ok(())
}

/// alltoall(v): `[i][j]` = rank i's send displacement of its block for rank j (empty otherwise).
pub(super) fn send_displs(args: &[CollArgs]) -> Result<Vec<Vec<u64>>> {
    if !matches!(args[0].coll, Collective::Alltoall | Collective::Alltoallv) {
        return Ok(Vec::new());
    }
    let p = args.len();
    let mut out = Vec::with_capacity(p);
    for a in args {
        let row = match &a.displs {
            Some(d) => d.to_vec(),
            None => {
                let mut packed = 0u64;
                (0..a.size)
                    .map(|j| {
                        let d = packed;
                        packed = packed.saturating_add(a.pair_count(a.rank, j));
                        d
                    })
                    .collect()
            }
        };
        out.push(row);
    }
    Ok(out)
}

/// The `Recv` rank `r` must hold after the call, given every rank's arguments, `r`'s initial
/// `Recv` and [`send_displs`].
pub(super) fn expected(
    args: &[CollArgs],
    r: usize,
    init_recv: &[Val],
    send_displs: &[Vec<u64>],
    sets: &mut Sets,
) -> Result<Vec<Val>> {
    let a = &args[r];
    let p = a.size;
    let rank = a.rank;
    let mut out = super::with_pooled(init_recv);
    let n = out.len() as u64;
    match a.coll {
        Collective::Barrier => {}
        Collective::Bcast => {
            let s = sets.single(a.root);
            fill(&mut out, 0, n, 0, s)?;
        }
        Collective::Reduce | Collective::Allreduce => {
            let all = sets.range(0, p);
            fill(&mut out, 0, n, 0, all)?;
        }
        Collective::Scan => {
            let s = sets.range(0, rank + 1);
            fill(&mut out, 0, n, 0, s)?;
        }
        Collective::Exscan => {
            if rank > 0 {
                let s = sets.range(0, rank);
                fill(&mut out, 0, n, 0, s)?;
            }
        }
        Collective::Gather | Collective::Gatherv | Collective::Allgather | Collective::Allgatherv => {
            if n > 0 {
                let mut packed = 0u64;
                for i in 0..p {
                    let s = sets.single(i);
                    let d = match &a.displs {
                        Some(d) => d[i as usize],
                        None => packed,
                    };
                    fill(&mut out, d, a.block_count(i), 0, s)?;
                    packed = packed.saturating_add(a.block_count(i));
                }
            }
        }
        Collective::Scatter | Collective::Scatterv => {
            let s = sets.single(a.root);
            fill(&mut out, 0, a.block_count(rank), a.block_displ(rank)?, s)?;
        }
        Collective::Alltoall | Collective::Alltoallv => {
            let mut packed = 0u64;
            for i in 0..p {
                let s = sets.single(i);
                let n = a.pair_count(i, rank);
                let d = match &a.rdispls {
                    Some(d) => d[i as usize],
                    None => packed,
                };
                packed = packed.saturating_add(n);
                fill(&mut out, d, n, send_displs[i as usize][rank as usize], s)?;
            }
        }
        Collective::ReduceScatter | Collective::ReduceScatterBlock => {
            let all = sets.range(0, p);
            let first: u64 = (0..rank).map(|i| a.block_count(i)).sum();
            fill(&mut out, 0, a.block_count(rank), first, all)?;
        }
    }
    Ok(out)
}
