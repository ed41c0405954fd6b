//! The nonblocking collectives (`fc_i*`) and their requests: each starts the call and gives a
//! `fc_request` in `*request`; the engine's progress thread moves it while the program computes.
//! MPI's rule holds: the buffers stay valid and untouched until the request has finished
//! (`fc_test` set `*done`, `fc_wait` returned, or `fc_request_free` returned). Built on
//! [`RawCalls`]; the arguments are those of the blocking calls.

use std::ffi::{c_int, c_void};

use fabcoll::{RawCalls, RawRequest};

use crate::coll;
use crate::comm::{clear_out, comm_ref, fc_comm};
use crate::error::{guard, Failure, Result};
use crate::types::{fc_datatype, fc_op};

/// A nonblocking collective in flight (opaque).
#[allow(non_camel_case_types)]
pub struct fc_request {
    req: RawRequest,
}

/// Starts a call on `comm` through `f` and puts its request in `*request`.
///
/// # Safety
/// `comm` is a live communicator, `request` writable, and `f`'s buffers follow the module's rule.
pub(crate) unsafe fn start(
    comm: *const fc_comm,
    request: *mut *mut fc_request,
    f: impl FnOnce(&RawCalls) -> Result<RawRequest>,
) -> c_int {
    guard(|| {
        // SAFETY: the caller's contract.
        unsafe { clear_out(request, "request")? };
        // SAFETY: the caller's contract.
        let c = unsafe { comm_ref(comm)? };
        // SAFETY: the buffers stay lent until the request has finished: the rule the caller
        // accepted (module doc), and a request freed unfinished is waited for first.
        let calls = unsafe { c.raw_calls() };
        let req = f(&calls)?;
        // SAFETY: checked by `clear_out`.
        unsafe { *request = Box::into_raw(Box::new(fc_request { req })) };
        Ok(())
    })
}

/// The request behind a C handle.
///
/// # Safety
/// `request` is NULL or a live request from this library.
unsafe fn request_mut<'a>(request: *mut fc_request) -> Result<&'a mut RawRequest> {
    // SAFETY: NULL or live, by the caller's contract.
    match unsafe { request.as_mut() } {
        Some(r) => Ok(&mut r.req),
        None => Err(Failure::arg("request is NULL")),
    }
}

/// Moves the request once: `*done` is 1 when it has finished (the return value is then its
/// outcome, every later test and wait report the same), else 0.
///
/// # Safety
/// `request` is a live request; `done` points to writable memory.
#[no_mangle]
pub unsafe extern "C" fn fc_test(request: *mut fc_request, done: *mut c_int) -> c_int {
    guard(|| {
        if done.is_null() {
            return Err(Failure::arg("done is NULL"));
        }
        // SAFETY: the caller's contract.
        let r = unsafe { request_mut(request)? };
        let outcome = r.test();
        // SAFETY: checked non-NULL, writable by the caller's contract.
        unsafe { *done = c_int::from(outcome.is_some()) };
        if let Some(r) = outcome {
            r?;
        }
        Ok(())
    })
}

/// Waits until the request has finished and returns its outcome (a timeout names the ranks
/// still awaited). The request stays valid: free it with `fc_request_free`.
///
/// # Safety
/// `request` is a live request.
#[no_mangle]
pub unsafe extern "C" fn fc_wait(request: *mut fc_request) -> c_int {
    // SAFETY: the caller's contract.
    guard(|| Ok(unsafe { request_mut(request)? }.wait()?))
}

/// Frees `*request` and sets it to NULL (a NULL `*request` is left alone); an unfinished request
/// is waited for first, so its buffers are free to reuse when this returns.
///
/// # Safety
/// `request` points to NULL or to a live request, not used after this call.
#[no_mangle]
pub unsafe extern "C" fn fc_request_free(request: *mut *mut fc_request) -> c_int {
    guard(|| {
        if request.is_null() {
            return Err(Failure::arg("fc_request_free: request is NULL"));
        }
        // SAFETY: checked non-NULL, readable and writable by the caller's contract.
        let r = unsafe { std::mem::replace(&mut *request, std::ptr::null_mut()) };
        if !r.is_null() {
            // SAFETY: made by `Box::into_raw` in `start` and not freed before (contract).
            drop(unsafe { Box::from_raw(r) });
        }
        Ok(())
    })
}

/// Nonblocking `fc_barrier`: `*request` gets the request (NULL on failure).
///
/// # Safety
/// As `fc_barrier`, the buffers lent until the request has finished; `request` is writable.
#[no_mangle]
pub unsafe extern "C" fn fc_ibarrier(comm: *const fc_comm, request: *mut *mut fc_request) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { start(comm, request, |s| coll::barrier(s)) }
}

/// Nonblocking `fc_bcast`: `*request` gets the request (NULL on failure).
///
/// # Safety
/// As `fc_bcast`, the buffers lent until the request has finished; `request` is writable.
#[no_mangle]
pub unsafe extern "C" fn fc_ibcast(
    buffer: *mut c_void,
    count: usize,
    datatype: fc_datatype,
    root: c_int,
    comm: *const fc_comm,
    request: *mut *mut fc_request,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { start(comm, request, |s| coll::bcast(s, buffer, count, datatype, root)) }
}

/// Nonblocking `fc_reduce`: `*request` gets the request (NULL on failure).
///
/// # Safety
/// As `fc_reduce`, the buffers lent until the request has finished; `request` is writable.
#[no_mangle]
pub unsafe extern "C" fn fc_ireduce(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: usize,
    datatype: fc_datatype,
    op: fc_op,
    root: c_int,
    comm: *const fc_comm,
    request: *mut *mut fc_request,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { start(comm, request, |s| coll::reduce(s, sendbuf, recvbuf, count, datatype, op, root)) }
}

/// Nonblocking `fc_allreduce`: `*request` gets the request (NULL on failure).
///
/// # Safety
/// As `fc_allreduce`, the buffers lent until the request has finished; `request` is writable.
#[no_mangle]
pub unsafe extern "C" fn fc_iallreduce(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: usize,
    datatype: fc_datatype,
    op: fc_op,
    comm: *const fc_comm,
    request: *mut *mut fc_request,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { start(comm, request, |s| coll::allreduce(s, sendbuf, recvbuf, count, datatype, op)) }
}

/// Nonblocking `fc_gather`: `*request` gets the request (NULL on failure).
///
/// # Safety
/// As `fc_gather`, the buffers lent until the request has finished; `request` is writable.
#[no_mangle]
pub unsafe extern "C" fn fc_igather(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: usize,
    datatype: fc_datatype,
    root: c_int,
    comm: *const fc_comm,
    request: *mut *mut fc_request,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { start(comm, request, |s| coll::gather(s, sendbuf, recvbuf, count, datatype, root)) }
}

/// Nonblocking `fc_gatherv`: `*request` gets the request (NULL on failure).
///
/// # Safety
/// As `fc_gatherv`, the buffers lent until the request has finished; `request` is writable.
#[no_mangle]
pub unsafe extern "C" fn fc_igatherv(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    counts: *const usize,
    displs: *const usize,
    datatype: fc_datatype,
    root: c_int,
    comm: *const fc_comm,
    request: *mut *mut fc_request,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { start(comm, request, |s| coll::gatherv(s, sendbuf, recvbuf, counts, displs, datatype, root)) }
}

/// Nonblocking `fc_scatter`: `*request` gets the request (NULL on failure).
///
/// # Safety
/// As `fc_scatter`, the buffers lent until the request has finished; `request` is writable.
#[no_mangle]
pub unsafe extern "C" fn fc_iscatter(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: usize,
    datatype: fc_datatype,
    root: c_int,
    comm: *const fc_comm,
    request: *mut *mut fc_request,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { start(comm, request, |s| coll::scatter(s, sendbuf, recvbuf, count, datatype, root)) }
}

/// Nonblocking `fc_scatterv`: `*request` gets the request (NULL on failure).
///
/// # Safety
/// As `fc_scatterv`, the buffers lent until the request has finished; `request` is writable.
#[no_mangle]
pub unsafe extern "C" fn fc_iscatterv(
    sendbuf: *const c_void,
    counts: *const usize,
    displs: *const usize,
    recvbuf: *mut c_void,
    datatype: fc_datatype,
    root: c_int,
    comm: *const fc_comm,
    request: *mut *mut fc_request,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { start(comm, request, |s| coll::scatterv(s, sendbuf, counts, displs, recvbuf, datatype, root)) }
}

/// Nonblocking `fc_allgather`: `*request` gets the request (NULL on failure).
///
/// # Safety
/// As `fc_allgather`, the buffers lent until the request has finished; `request` is writable.
#[no_mangle]
pub unsafe extern "C" fn fc_iallgather(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: usize,
    datatype: fc_datatype,
    comm: *const fc_comm,
    request: *mut *mut fc_request,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { start(comm, request, |s| coll::allgather(s, sendbuf, recvbuf, count, datatype)) }
}

/// Nonblocking `fc_allgatherv`: `*request` gets the request (NULL on failure).
///
/// # Safety
/// As `fc_allgatherv`, the buffers lent until the request has finished; `request` is writable.
#[no_mangle]
pub unsafe extern "C" fn fc_iallgatherv(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    counts: *const usize,
    displs: *const usize,
    datatype: fc_datatype,
    comm: *const fc_comm,
    request: *mut *mut fc_request,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { start(comm, request, |s| coll::allgatherv(s, sendbuf, recvbuf, counts, displs, datatype)) }
}

/// Nonblocking `fc_alltoall`: `*request` gets the request (NULL on failure).
///
/// # Safety
/// As `fc_alltoall`, the buffers lent until the request has finished; `request` is writable.
#[no_mangle]
pub unsafe extern "C" fn fc_ialltoall(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: usize,
    datatype: fc_datatype,
    comm: *const fc_comm,
    request: *mut *mut fc_request,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { start(comm, request, |s| coll::alltoall(s, sendbuf, recvbuf, count, datatype)) }
}

/// Nonblocking `fc_alltoallv`: `*request` gets the request (NULL on failure).
///
/// # Safety
/// As `fc_alltoallv`, the buffers lent until the request has finished; `request` is writable.
#[no_mangle]
pub unsafe extern "C" fn fc_ialltoallv(
    sendbuf: *const c_void,
    sendcounts: *const usize,
    sdispls: *const usize,
    recvbuf: *mut c_void,
    recvcounts: *const usize,
    rdispls: *const usize,
    datatype: fc_datatype,
    comm: *const fc_comm,
    request: *mut *mut fc_request,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        start(comm, request, |s| {
            coll::alltoallv(s, sendbuf, sendcounts, sdispls, recvbuf, recvcounts, rdispls, datatype)
        })
    }
}

/// Nonblocking `fc_reduce_scatter`: `*request` gets the request (NULL on failure).
///
/// # Safety
/// As `fc_reduce_scatter`, the buffers lent until the request has finished; `request` is writable.
#[no_mangle]
pub unsafe extern "C" fn fc_ireduce_scatter(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    recvcounts: *const usize,
    datatype: fc_datatype,
    op: fc_op,
    comm: *const fc_comm,
    request: *mut *mut fc_request,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { start(comm, request, |s| coll::reduce_scatter(s, sendbuf, recvbuf, recvcounts, datatype, op)) }
}

/// Nonblocking `fc_reduce_scatter_block`: `*request` gets the request (NULL on failure).
///
/// # Safety
/// As `fc_reduce_scatter_block`, the buffers lent until the request has finished; `request` is writable.
#[no_mangle]
pub unsafe extern "C" fn fc_ireduce_scatter_block(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    recvcount: usize,
    datatype: fc_datatype,
    op: fc_op,
    comm: *const fc_comm,
    request: *mut *mut fc_request,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { start(comm, request, |s| coll::reduce_scatter_block(s, sendbuf, recvbuf, recvcount, datatype, op)) }
}

/// Nonblocking `fc_scan`: `*request` gets the request (NULL on failure).
///
/// # Safety
/// As `fc_scan`, the buffers lent until the request has finished; `request` is writable.
#[no_mangle]
pub unsafe extern "C" fn fc_iscan(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: usize,
    datatype: fc_datatype,
    op: fc_op,
    comm: *const fc_comm,
    request: *mut *mut fc_request,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { start(comm, request, |s| coll::scan(s, sendbuf, recvbuf, count, datatype, op)) }
}

/// Nonblocking `fc_exscan`: `*request` gets the request (NULL on failure).
///
/// # Safety
/// As `fc_exscan`, the buffers lent until the request has finished; `request` is writable.
#[no_mangle]
pub unsafe extern "C" fn fc_iexscan(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: usize,
    datatype: fc_datatype,
    op: fc_op,
    comm: *const fc_comm,
    request: *mut *mut fc_request,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { start(comm, request, |s| coll::exscan(s, sendbuf, recvbuf, count, datatype, op)) }
}
