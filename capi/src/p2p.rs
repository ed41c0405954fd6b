//! Tagged point-to-point transfers: `fc_send` / `fc_recv` (blocking) and `fc_isend` /
//! `fc_irecv` (nonblocking, finished with `fc_test` / `fc_wait` like the collectives' requests).
//! The n-th send from one rank to another matches the n-th receive there, which must name the
//! same tag, datatype and count (a difference is `FC_ERR_MISMATCH` on both ranks). A receive from
//! any source is `fc_probe` (the rank whose message with the tag comes first), then a receive from
//! that rank, as MPI_Probe and MPI_Recv; there is no wildcard tag (`fabcoll::Transfer`).

use std::ffi::{c_int, c_void};

use fabcoll::{with_element, Collectives};

use crate::buffers::Region;
use crate::comm::{comm_ref, fc_comm};
use crate::error::{guard, Failure, Result};
use crate::nonblocking::{fc_request, start};
use crate::types::{datatype as datatype_of, fc_datatype};

/// A transfer of `count` elements of `datatype` at `buf` with rank `peer` on `s` (a
/// [`Communicator`](fabcoll::Communicator): blocking, or [`RawCalls`](fabcoll::RawCalls)): a send
/// when `outgoing`, else a receive.
///
/// # Safety
/// `buf` holds `count` elements (writable for a receive), lent as the call's contract says.
unsafe fn transfer<'b, S: Collectives<'b>>(
    s: &S,
    buf: *const c_void,
    count: usize,
    datatype: fc_datatype,
    peer: c_int,
    tag: c_int,
    outgoing: bool,
) -> Result<S::Out> {
    let peer = u32::try_from(peer).map_err(|_| {
        Failure::arg(format!("peer rank {peer} is negative (from any source: fc_probe names the sender first)"))
    })?;
    let tag = u32::try_from(tag).map_err(|_| Failure::arg(format!("tag {tag} is negative")))?;
    with_element!(datatype_of(datatype)?, T => {
        let b = Region::new::<T>(buf, count, "buf")?;
        Ok(match outgoing {
            // SAFETY: the caller's contract.
            true => s.send(unsafe { b.input::<T>() }, peer, tag)?,
            // SAFETY: the caller's contract.
            false => s.recv(unsafe { b.output::<T>() }, peer, tag)?,
        })
    })
}

/// Sends `count` elements of `buf` to rank `dest` with `tag`; returns once `buf` may be reused.
///
/// # Safety
/// `comm` is a live communicator; `buf` holds `count` elements of `datatype`.
#[no_mangle]
pub unsafe extern "C" fn fc_send(
    buf: *const c_void,
    count: usize,
    datatype: fc_datatype,
    dest: c_int,
    tag: c_int,
    comm: *const fc_comm,
) -> c_int {
    // SAFETY: the caller's contract.
    guard(|| unsafe { transfer(&**comm_ref(comm)?, buf, count, datatype, dest, tag, true) })
}

/// Receives into `buf` (`count` elements of `datatype`) the message rank `source` sends with
/// `tag`; it must have exactly `count` elements.
///
/// # Safety
/// `comm` is a live communicator; `buf` holds `count` writable elements of `datatype`.
#[no_mangle]
pub unsafe extern "C" fn fc_recv(
    buf: *mut c_void,
    count: usize,
    datatype: fc_datatype,
    source: c_int,
    tag: c_int,
    comm: *const fc_comm,
) -> c_int {
    // SAFETY: the caller's contract.
    guard(|| unsafe { transfer(&**comm_ref(comm)?, buf, count, datatype, source, tag, false) })
}

/// Nonblocking `fc_send`: `*request` gets the request (NULL on failure).
///
/// # Safety
/// As `fc_send`, `buf` lent until the request has finished; `request` is writable.
#[no_mangle]
pub unsafe extern "C" fn fc_isend(
    buf: *const c_void,
    count: usize,
    datatype: fc_datatype,
    dest: c_int,
    tag: c_int,
    comm: *const fc_comm,
    request: *mut *mut fc_request,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { start(comm, request, |s| transfer(s, buf, count, datatype, dest, tag, true)) }
}

/// Nonblocking `fc_recv`: `*request` gets the request (NULL on failure).
///
/// # Safety
/// As `fc_recv`, `buf` lent until the request has finished; `request` is writable.
#[no_mangle]
pub unsafe extern "C" fn fc_irecv(
    buf: *mut c_void,
    count: usize,
    datatype: fc_datatype,
    source: c_int,
    tag: c_int,
    comm: *const fc_comm,
    request: *mut *mut fc_request,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { start(comm, request, |s| transfer(s, buf, count, datatype, source, tag, false)) }
}

/// Sends `sendcount` elements of `sendbuf` to rank `dest` with `sendtag` while receiving
/// `recvcount` elements into `recvbuf` from rank `source` (`FC_ANY_SOURCE`: the first to arrive)
/// with `recvtag` (MPI_Sendrecv); `*out_source` (unless NULL) gets the sender. Both are in flight
/// at once, so ranks exchanging along a ring or in pairs do not wait for each other.
///
/// # Safety
/// `comm` is a live communicator; the buffers hold their counts of elements (`recvbuf`
/// writable); `out_source` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn fc_sendrecv(
    sendbuf: *const c_void,
    sendcount: usize,
    sendtype: fc_datatype,
    dest: c_int,
    sendtag: c_int,
    recvbuf: *mut c_void,
    recvcount: usize,
    recvtype: fc_datatype,
    source: c_int,
    recvtag: c_int,
    comm: *const fc_comm,
    out_source: *mut c_int,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's contract.
        let c = unsafe { comm_ref(comm)? };
        // The receive's source and tag are checked before the send starts: a bad call moves nothing.
        let (source, tag) = (source_of(source)?, tag_of(recvtag)?);
        if source.is_none() && recvcount == 0 {
            return Err(Failure::arg("a receive from any source needs recvcount > 0"));
        }
        // SAFETY: the send buffer stays lent until `sent` has finished: it is waited for (or,
        // dropped on an error, finished) before this function returns.
        let mut sent = unsafe { transfer(&c.raw_calls(), sendbuf, sendcount, sendtype, dest, sendtag, true)? };
        let from = match source {
            Some(r) => r,
            None => c.probe(None, tag)?.source,
        };
        // SAFETY: the caller's contract; a blocking receive.
        unsafe { transfer(&**c, recvbuf, recvcount, recvtype, from as c_int, recvtag, false)? };
        sent.wait()?;
        // SAFETY: NULL or writable, by the caller's contract.
        if let Some(s) = unsafe { out_source.as_mut() } {
            *s = from as c_int;
        }
        Ok(())
    })
}

/// `fc_probe`'s source matching any rank.
pub const FC_ANY_SOURCE: c_int = -1;
/// `fc_probe`'s tag matching any tag.
pub const FC_ANY_TAG: c_int = -1;

/// Waits until the next message to this rank from `source` (`FC_ANY_SOURCE`: any rank, the
/// first to arrive) has `tag` (`FC_ANY_TAG`: any), and sets `*out_source` and `*out_tag` (either
/// may be NULL) to its sender and tag, as MPI_Probe: the next `fc_recv` or `fc_irecv` from that
/// rank takes that message. A sender whose next message has another tag is passed over. A
/// zero-length message is not announced, so it is never found; `FC_ERR_TIMEOUT` after the
/// communicator's timeout.
///
/// # Safety
/// `comm` is a live communicator; `out_source` and `out_tag` are NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn fc_probe(
    source: c_int,
    tag: c_int,
    comm: *const fc_comm,
    out_source: *mut c_int,
    out_tag: *mut c_int,
) -> c_int {
    guard(|| {
        let (source, tag) = (source_of(source)?, tag_of(tag)?);
        // SAFETY: the caller's contract.
        let found = unsafe { comm_ref(comm)? }.probe(source, tag)?;
        // SAFETY: the caller's contract.
        unsafe { tell(found, out_source, out_tag) }
    })
}

/// `fc_probe` that does not wait (MPI_Iprobe): `*flag` is 1 and the outputs are set when such a
/// message has announced itself, else `*flag` is 0.
///
/// # Safety
/// As `fc_probe`; `flag` is writable.
#[no_mangle]
pub unsafe extern "C" fn fc_iprobe(
    source: c_int,
    tag: c_int,
    comm: *const fc_comm,
    flag: *mut c_int,
    out_source: *mut c_int,
    out_tag: *mut c_int,
) -> c_int {
    guard(|| {
        if flag.is_null() {
            return Err(Failure::arg("flag is NULL"));
        }
        let (source, tag) = (source_of(source)?, tag_of(tag)?);
        // SAFETY: the caller's contract.
        let found = unsafe { comm_ref(comm)? }.iprobe(source, tag)?;
        // SAFETY: checked non-NULL, writable by the caller's contract.
        unsafe { *flag = c_int::from(found.is_some()) };
        match found {
            // SAFETY: the caller's contract.
            Some(found) => unsafe { tell(found, out_source, out_tag) },
            None => Ok(()),
        }
    })
}

/// A probe's source: `FC_ANY_SOURCE` is any.
fn source_of(source: c_int) -> Result<Option<u32>> {
    match source {
        FC_ANY_SOURCE => Ok(None),
        s => Ok(Some(u32::try_from(s).map_err(|_| Failure::arg(format!("source rank {s} is negative")))?)),
    }
}

/// A probe's tag: `FC_ANY_TAG` is any.
fn tag_of(tag: c_int) -> Result<Option<u32>> {
    match tag {
        FC_ANY_TAG => Ok(None),
        t => Ok(Some(u32::try_from(t).map_err(|_| Failure::arg(format!("tag {t} is negative")))?)),
    }
}

/// Writes what a probe found to the outputs that are not NULL.
///
/// # Safety
/// `out_source` and `out_tag` are NULL or writable.
unsafe fn tell(found: fabcoll::Probed, out_source: *mut c_int, out_tag: *mut c_int) -> Result<()> {
    let tag = c_int::try_from(found.tag)
        .map_err(|_| Failure::arg(format!("the message's tag {} does not fit an int", found.tag)))?;
    // SAFETY: NULL or writable, by the caller's contract.
    unsafe {
        if let Some(s) = out_source.as_mut() {
            *s = found.source as c_int;
        }
        if let Some(t) = out_tag.as_mut() {
            *t = tag;
        }
    }
    Ok(())
}
