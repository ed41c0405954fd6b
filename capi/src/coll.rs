//! What each C collective means in the typed Rust API, written once for both ways of calling:
//! blocking on a [`Communicator`](fabcoll::Communicator) and nonblocking on
//! [`RawCalls`](fabcoll::RawCalls) (both [`Collectives`]). Buffers are checked and typed here
//! (`buffers`), the datatype picks the element type (`with_element!`), and `FC_IN_PLACE` as the
//! send buffer picks the `_in_place` form where the Rust API has one (MPI's in-place rules:
//! at the root only for reduce and gather(v)). Buffers a rank does not use (the receive buffer of
//! reduce and gather(v) off the root, the send buffer of scatter(v) off the root) are not touched
//! and may be NULL.

use std::ffi::{c_int, c_void};

use fabcoll::{with_element, Collectives};

use crate::buffers::{array, extent, is_in_place, optional_array, Region};
use crate::error::{Failure, Result};
use crate::types::{datatype, fc_datatype, fc_op, reduce_op};

type SendPtr = *const c_void;
type RecvPtr = *mut c_void;

/// A root argument, checked against the communicator.
fn root_of<'b, S: Collectives<'b> + ?Sized>(s: &S, root: c_int) -> Result<u32> {
    let size = s.comm().size();
    u32::try_from(root)
        .ok()
        .filter(|&r| r < size)
        .ok_or_else(|| Failure::arg(format!("root {root} out of range 0..{size}")))
}

fn no_in_place(send: SendPtr, what: &str) -> Result<()> {
    if is_in_place(send) {
        return Err(Failure::arg(format!("{what} has no in-place form: FC_IN_PLACE is not allowed")));
    }
    Ok(())
}

/// The p entries of a v-variant's counts (required) and displacements (NULL: packed).
///
/// # Safety
/// The pointers are NULL or point to p readable entries.
unsafe fn vector<'a, 'b, S: Collectives<'b> + ?Sized>(
    s: &S,
    counts: *const usize,
    displs: *const usize,
) -> Result<(&'a [usize], Option<&'a [usize]>)> {
    let p = s.comm().size() as usize;
    // SAFETY: the caller's contract.
    unsafe { Ok((array(counts, p, "counts")?, optional_array(displs, p, "displs")?)) }
}

// Every function below: the buffers hold at least the elements the call needs on this rank
// (MPI's rule) and, for calls through `RawCalls`, stay valid until the request has finished;
// the count and displacement arrays are read before the function returns.

/// # Safety
/// See the comment above.
pub(crate) unsafe fn barrier<'b, S: Collectives<'b>>(s: &S) -> Result<S::Out> {
    Ok(s.barrier()?)
}

/// # Safety
/// See the comment above.
pub(crate) unsafe fn bcast<'b, S: Collectives<'b>>(
    s: &S,
    buf: RecvPtr,
    count: usize,
    dt: fc_datatype,
    root: c_int,
) -> Result<S::Out> {
    let root = root_of(s, root)?;
    with_element!(datatype(dt)?, T => {
        let b = Region::new::<T>(buf, count, "buffer")?;
        // SAFETY: the caller's contract.
        Ok(s.bcast(unsafe { b.output::<T>() }, root)?)
    })
}

/// Send and receive regions, checked disjoint, as slices.
///
/// # Safety
/// The regions were made for `T` and follow the contract above.
unsafe fn pair<'b, T: fabcoll::Element>(send: &Region, recv: &Region) -> Result<(&'b [T], &'b mut [T])> {
    send.disjoint(recv)?;
    // SAFETY: the caller's contract; disjoint, so the shared and the exclusive slice do not alias.
    unsafe { Ok((send.input::<T>(), recv.output::<T>())) }
}

/// The element-wise reductions with an in-place form (allreduce, scan, exscan).
///
/// # Safety
/// See the comment above.
unsafe fn elementwise<'b, S: Collectives<'b>>(
    s: &S,
    which: fabcoll::collectives::Collective,
    sendbuf: SendPtr,
    recvbuf: RecvPtr,
    count: usize,
    dt: fc_datatype,
    op: fc_op,
) -> Result<S::Out> {
    use fabcoll::collectives::Collective as C;
    let op = reduce_op(op)?;
    with_element!(datatype(dt)?, T => {
        let recv = Region::new::<T>(recvbuf, count, "recvbuf")?;
        if is_in_place(sendbuf) {
            // SAFETY: the caller's contract.
            let buf = unsafe { recv.output::<T>() };
            return Ok(match which {
                C::Scan => s.scan_in_place(buf, &op)?,
                C::Exscan => s.exscan_in_place(buf, &op)?,
                _ => s.allreduce_in_place(buf, &op)?,
            });
        }
        let send = Region::new::<T>(sendbuf, count, "sendbuf")?;
        // SAFETY: the caller's contract.
        let (x, y) = unsafe { pair::<T>(&send, &recv)? };
        Ok(match which {
            C::Scan => s.scan(x, y, &op)?,
            C::Exscan => s.exscan(x, y, &op)?,
            _ => s.allreduce(x, y, &op)?,
        })
    })
}

/// # Safety
/// See the comment above.
pub(crate) unsafe fn allreduce<'b, S: Collectives<'b>>(
    s: &S,
    send: SendPtr,
    recv: RecvPtr,
    count: usize,
    dt: fc_datatype,
    op: fc_op,
) -> Result<S::Out> {
    // SAFETY: the caller's contract.
    unsafe { elementwise(s, fabcoll::collectives::Collective::Allreduce, send, recv, count, dt, op) }
}

/// # Safety
/// See the comment above.
pub(crate) unsafe fn scan<'b, S: Collectives<'b>>(
    s: &S,
    send: SendPtr,
    recv: RecvPtr,
    count: usize,
    dt: fc_datatype,
    op: fc_op,
) -> Result<S::Out> {
    // SAFETY: the caller's contract.
    unsafe { elementwise(s, fabcoll::collectives::Collective::Scan, send, recv, count, dt, op) }
}

/// # Safety
/// See the comment above.
pub(crate) unsafe fn exscan<'b, S: Collectives<'b>>(
    s: &S,
    send: SendPtr,
    recv: RecvPtr,
    count: usize,
    dt: fc_datatype,
    op: fc_op,
) -> Result<S::Out> {
    // SAFETY: the caller's contract.
    unsafe { elementwise(s, fabcoll::collectives::Collective::Exscan, send, recv, count, dt, op) }
}

/// # Safety
/// See the comment above.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn reduce<'b, S: Collectives<'b>>(
    s: &S,
    sendbuf: SendPtr,
    recvbuf: RecvPtr,
    count: usize,
    dt: fc_datatype,
    op: fc_op,
    root: c_int,
) -> Result<S::Out> {
    let root = root_of(s, root)?;
    let at_root = s.comm().rank() == root;
    let op = reduce_op(op)?;
    with_element!(datatype(dt)?, T => {
        if at_root && is_in_place(sendbuf) {
            let recv = Region::new::<T>(recvbuf, count, "recvbuf")?;
            // SAFETY: the caller's contract.
            return Ok(s.reduce_in_place(unsafe { recv.output::<T>() }, &op, root)?);
        }
        let send = Region::new::<T>(sendbuf, count, "sendbuf")?;
        let recv = Region::new::<T>(recvbuf, if at_root { count } else { 0 }, "recvbuf")?;
        // SAFETY: the caller's contract.
        let (x, y) = unsafe { pair::<T>(&send, &recv)? };
        Ok(s.reduce(x, y, &op, root)?)
    })
}

/// # Safety
/// See the comment above.
pub(crate) unsafe fn gather<'b, S: Collectives<'b>>(
    s: &S,
    sendbuf: SendPtr,
    recvbuf: RecvPtr,
    count: usize,
    dt: fc_datatype,
    root: c_int,
) -> Result<S::Out> {
    let root = root_of(s, root)?;
    let at_root = s.comm().rank() == root;
    let total = count.checked_mul(s.comm().size() as usize).ok_or_else(|| Failure::arg("gather: count overflows"))?;
    with_element!(datatype(dt)?, T => {
        if at_root && is_in_place(sendbuf) {
            let recv = Region::new::<T>(recvbuf, total, "recvbuf")?;
            // SAFETY: the caller's contract.
            return Ok(s.gather_in_place(unsafe { recv.output::<T>() }, count, root)?);
        }
        let send = Region::new::<T>(sendbuf, count, "sendbuf")?;
        let recv = Region::new::<T>(recvbuf, if at_root { total } else { 0 }, "recvbuf")?;
        // SAFETY: the caller's contract.
        let (x, y) = unsafe { pair::<T>(&send, &recv)? };
        Ok(s.gather(x, y, root)?)
    })
}

/// # Safety
/// See the comment above.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn gatherv<'b, S: Collectives<'b>>(
    s: &S,
    sendbuf: SendPtr,
    recvbuf: RecvPtr,
    counts: *const usize,
    displs: *const usize,
    dt: fc_datatype,
    root: c_int,
) -> Result<S::Out> {
    let root = root_of(s, root)?;
    let (me, at_root) = (s.comm().rank() as usize, s.comm().rank() == root);
    // SAFETY: the caller's contract.
    let (counts, displs) = unsafe { vector(s, counts, displs)? };
    let span = extent(counts, displs, "gatherv")?;
    with_element!(datatype(dt)?, T => {
        if at_root && is_in_place(sendbuf) {
            let recv = Region::new::<T>(recvbuf, span, "recvbuf")?;
            // SAFETY: the caller's contract.
            return Ok(s.gatherv_in_place(unsafe { recv.output::<T>() }, counts, displs, root)?);
        }
        let send = Region::new::<T>(sendbuf, counts[me], "sendbuf")?;
        let recv = Region::new::<T>(recvbuf, if at_root { span } else { 0 }, "recvbuf")?;
        // SAFETY: the caller's contract.
        let (x, y) = unsafe { pair::<T>(&send, &recv)? };
        Ok(s.gatherv(x, y, counts, displs, root)?)
    })
}

/// # Safety
/// See the comment above.
pub(crate) unsafe fn scatter<'b, S: Collectives<'b>>(
    s: &S,
    sendbuf: SendPtr,
    recvbuf: RecvPtr,
    count: usize,
    dt: fc_datatype,
    root: c_int,
) -> Result<S::Out> {
    let root = root_of(s, root)?;
    let at_root = s.comm().rank() == root;
    let total = count.checked_mul(s.comm().size() as usize).ok_or_else(|| Failure::arg("scatter: count overflows"))?;
    no_in_place(recvbuf, "scatter")?;
    with_element!(datatype(dt)?, T => {
        let send = Region::new::<T>(sendbuf, if at_root { total } else { 0 }, "sendbuf")?;
        let recv = Region::new::<T>(recvbuf, count, "recvbuf")?;
        // SAFETY: the caller's contract.
        let (x, y) = unsafe { pair::<T>(&send, &recv)? };
        Ok(s.scatter(x, y, root)?)
    })
}

/// # Safety
/// See the comment above.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn scatterv<'b, S: Collectives<'b>>(
    s: &S,
    sendbuf: SendPtr,
    counts: *const usize,
    displs: *const usize,
    recvbuf: RecvPtr,
    dt: fc_datatype,
    root: c_int,
) -> Result<S::Out> {
    let root = root_of(s, root)?;
    let (me, at_root) = (s.comm().rank() as usize, s.comm().rank() == root);
    // SAFETY: the caller's contract.
    let (counts, displs) = unsafe { vector(s, counts, displs)? };
    let span = extent(counts, displs, "scatterv")?;
    no_in_place(recvbuf, "scatterv")?;
    with_element!(datatype(dt)?, T => {
        let send = Region::new::<T>(sendbuf, if at_root { span } else { 0 }, "sendbuf")?;
        let recv = Region::new::<T>(recvbuf, counts[me], "recvbuf")?;
        // SAFETY: the caller's contract.
        let (x, y) = unsafe { pair::<T>(&send, &recv)? };
        Ok(s.scatterv(x, counts, displs, y, root)?)
    })
}

/// # Safety
/// See the comment above.
pub(crate) unsafe fn allgather<'b, S: Collectives<'b>>(
    s: &S,
    sendbuf: SendPtr,
    recvbuf: RecvPtr,
    count: usize,
    dt: fc_datatype,
) -> Result<S::Out> {
    let total =
        count.checked_mul(s.comm().size() as usize).ok_or_else(|| Failure::arg("allgather: count overflows"))?;
    with_element!(datatype(dt)?, T => {
        let recv = Region::new::<T>(recvbuf, total, "recvbuf")?;
        if is_in_place(sendbuf) {
            // SAFETY: the caller's contract.
            return Ok(s.allgather_in_place(unsafe { recv.output::<T>() })?);
        }
        let send = Region::new::<T>(sendbuf, count, "sendbuf")?;
        // SAFETY: the caller's contract.
        let (x, y) = unsafe { pair::<T>(&send, &recv)? };
        Ok(s.allgather(x, y)?)
    })
}

/// # Safety
/// See the comment above.
pub(crate) unsafe fn allgatherv<'b, S: Collectives<'b>>(
    s: &S,
    sendbuf: SendPtr,
    recvbuf: RecvPtr,
    counts: *const usize,
    displs: *const usize,
    dt: fc_datatype,
) -> Result<S::Out> {
    let me = s.comm().rank() as usize;
    // SAFETY: the caller's contract.
    let (counts, displs) = unsafe { vector(s, counts, displs)? };
    let span = extent(counts, displs, "allgatherv")?;
    with_element!(datatype(dt)?, T => {
        let recv = Region::new::<T>(recvbuf, span, "recvbuf")?;
        if is_in_place(sendbuf) {
            // SAFETY: the caller's contract.
            return Ok(s.allgatherv_in_place(unsafe { recv.output::<T>() }, counts, displs)?);
        }
        let send = Region::new::<T>(sendbuf, counts[me], "sendbuf")?;
        // SAFETY: the caller's contract.
        let (x, y) = unsafe { pair::<T>(&send, &recv)? };
        Ok(s.allgatherv(x, y, counts, displs)?)
    })
}

/// # Safety
/// See the comment above.
pub(crate) unsafe fn alltoall<'b, S: Collectives<'b>>(
    s: &S,
    sendbuf: SendPtr,
    recvbuf: RecvPtr,
    count: usize,
    dt: fc_datatype,
) -> Result<S::Out> {
    let total = count.checked_mul(s.comm().size() as usize).ok_or_else(|| Failure::arg("alltoall: count overflows"))?;
    with_element!(datatype(dt)?, T => {
        let recv = Region::new::<T>(recvbuf, total, "recvbuf")?;
        if is_in_place(sendbuf) {
            // SAFETY: the caller's contract.
            return Ok(s.alltoall_in_place(unsafe { recv.output::<T>() })?);
        }
        let send = Region::new::<T>(sendbuf, total, "sendbuf")?;
        // SAFETY: the caller's contract.
        let (x, y) = unsafe { pair::<T>(&send, &recv)? };
        Ok(s.alltoall(x, y)?)
    })
}

/// # Safety
/// See the comment above.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn alltoallv<'b, S: Collectives<'b>>(
    s: &S,
    sendbuf: SendPtr,
    sendcounts: *const usize,
    sdispls: *const usize,
    recvbuf: RecvPtr,
    recvcounts: *const usize,
    rdispls: *const usize,
    dt: fc_datatype,
) -> Result<S::Out> {
    no_in_place(sendbuf, "alltoallv")?;
    // SAFETY: the caller's contract.
    let (scounts, sdispls) = unsafe { vector(s, sendcounts, sdispls)? };
    // SAFETY: the caller's contract.
    let (rcounts, rdispls) = unsafe { vector(s, recvcounts, rdispls)? };
    let (sspan, rspan) = (extent(scounts, sdispls, "alltoallv send")?, extent(rcounts, rdispls, "alltoallv recv")?);
    with_element!(datatype(dt)?, T => {
        let send = Region::new::<T>(sendbuf, sspan, "sendbuf")?;
        let recv = Region::new::<T>(recvbuf, rspan, "recvbuf")?;
        // SAFETY: the caller's contract.
        let (x, y) = unsafe { pair::<T>(&send, &recv)? };
        Ok(s.alltoallv(x, scounts, sdispls, y, rcounts, rdispls)?)
    })
}

/// # Safety
/// See the comment above.
pub(crate) unsafe fn reduce_scatter<'b, S: Collectives<'b>>(
    s: &S,
    sendbuf: SendPtr,
    recvbuf: RecvPtr,
    recvcounts: *const usize,
    dt: fc_datatype,
    op: fc_op,
) -> Result<S::Out> {
    no_in_place(sendbuf, "reduce_scatter")?;
    let me = s.comm().rank() as usize;
    // SAFETY: the caller's contract.
    let (counts, _) = unsafe { vector(s, recvcounts, std::ptr::null())? };
    let total = extent(counts, None, "reduce_scatter")?;
    let op = reduce_op(op)?;
    with_element!(datatype(dt)?, T => {
        let send = Region::new::<T>(sendbuf, total, "sendbuf")?;
        let recv = Region::new::<T>(recvbuf, counts[me], "recvbuf")?;
        // SAFETY: the caller's contract.
        let (x, y) = unsafe { pair::<T>(&send, &recv)? };
        Ok(s.reduce_scatter(x, y, counts, &op)?)
    })
}

/// # Safety
/// See the comment above.
pub(crate) unsafe fn reduce_scatter_block<'b, S: Collectives<'b>>(
    s: &S,
    sendbuf: SendPtr,
    recvbuf: RecvPtr,
    recvcount: usize,
    dt: fc_datatype,
    op: fc_op,
) -> Result<S::Out> {
    no_in_place(sendbuf, "reduce_scatter_block")?;
    let total = recvcount
        .checked_mul(s.comm().size() as usize)
        .ok_or_else(|| Failure::arg("reduce_scatter_block: count overflows"))?;
    let op = reduce_op(op)?;
    with_element!(datatype(dt)?, T => {
        let send = Region::new::<T>(sendbuf, total, "sendbuf")?;
        let recv = Region::new::<T>(recvbuf, recvcount, "recvbuf")?;
        // SAFETY: the caller's contract.
        let (x, y) = unsafe { pair::<T>(&send, &recv)? };
        Ok(s.reduce_scatter_block(x, y, &op)?)
    })
}
