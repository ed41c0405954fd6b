//! Tagged point-to-point transfers: `fc_send` / `fc_recv` (blocking) and `fc_isend` /
//! `fc_irecv` (nonblocking, finished with `fc_test` / `fc_wait` like the collectives' requests).
//! The n-th send from one rank to another matches the n-th receive there, which must name the
//! same tag, datatype and count (a difference is `FC_ERR_MISMATCH` on both ranks); there is no
//! wildcard source or tag (`fabcoll::Transfer`).

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
    let peer = u32::try_from(peer).map_err(|_| Failure::arg(format!("peer rank {peer} is negative")))?;
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
