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

/// The `count` handles at `requests`, checked: a request that appears twice is refused (it would
/// be freed twice).
///
/// # Safety
/// `requests` points to `count` writable handles when `count` > 0.
unsafe fn handles<'a>(count: c_int, requests: *mut *mut fc_request) -> Result<&'a mut [*mut fc_request]> {
    let n = usize::try_from(count).map_err(|_| Failure::arg(format!("count {count} is negative")))?;
    if n == 0 {
        return Ok(&mut []);
    }
    if requests.is_null() {
        return Err(Failure::arg("requests is NULL"));
    }
    // SAFETY: `count` writable handles at `requests`, by the caller's contract.
    let slots = unsafe { std::slice::from_raw_parts_mut(requests, n) };
    let mut seen = std::collections::HashSet::with_capacity(n);
    if let Some(i) = slots.iter().position(|&r| !r.is_null() && !seen.insert(r)) {
        return Err(Failure::arg(format!("requests[{i}] appears earlier in the array too")));
    }
    Ok(slots)
}

/// Frees the request of `*slot` and sets it to NULL (MPI's deactivation of a finished request).
///
/// # Safety
/// `*slot` is a live request from this library, not used elsewhere after this call.
unsafe fn retire(slot: &mut *mut fc_request) {
    // SAFETY: made by `Box::into_raw` in `start` and not freed before (the caller's contract).
    drop(unsafe { Box::from_raw(std::mem::replace(slot, std::ptr::null_mut())) });
}

/// The outcome of a finished request as a failure to report, keeping the first one.
fn keep_first(first: &mut Option<Failure>, outcome: fabcoll::Result<()>) {
    if let Err(e) = outcome {
        first.get_or_insert(e.into());
    }
}

/// Waits for every request of the array `requests` (`count` handles; NULL ones are skipped, as
/// MPI's `MPI_REQUEST_NULL`), then frees them and sets their handles to NULL, as `MPI_Waitall`
/// does. Every request is waited for even after one failed; the return value is the first
/// failure in array order (its message in `fc_last_error_message`), else `FC_SUCCESS`.
///
/// # Safety
/// `requests` points to `count` handles, each NULL or a live request, not used elsewhere after
/// this call except through the array.
#[no_mangle]
pub unsafe extern "C" fn fc_waitall(count: c_int, requests: *mut *mut fc_request) -> c_int {
    guard(|| {
        // SAFETY: the caller's contract.
        let slots = unsafe { handles(count, requests)? };
        let mut first = None;
        for slot in slots.iter_mut().filter(|s| !s.is_null()) {
            // SAFETY: live, by the caller's contract.
            keep_first(&mut first, unsafe { request_mut(*slot)? }.wait());
            // SAFETY: finished and live; the array is the only user left.
            unsafe { retire(slot) };
        }
        first.map_or(Ok(()), Err)
    })
}

/// Moves every request of the array once; `*done` is 1 when all have finished (NULL handles count
/// as finished), and then they are freed and their handles set to NULL, as `MPI_Testall` does, and
/// the return value is the first failure in array order; else `*done` is 0, nothing is freed, and
/// the return value is `FC_SUCCESS`.
///
/// # Safety
/// As `fc_waitall`; `done` points to writable memory.
#[no_mangle]
pub unsafe extern "C" fn fc_testall(count: c_int, requests: *mut *mut fc_request, done: *mut c_int) -> c_int {
    guard(|| {
        if done.is_null() {
            return Err(Failure::arg("done is NULL"));
        }
        // SAFETY: the caller's contract.
        let slots = unsafe { handles(count, requests)? };
        let mut all = true;
        for &slot in slots.iter().filter(|s| !s.is_null()) {
            // SAFETY: live, by the caller's contract.
            all &= unsafe { request_mut(slot)? }.test().is_some();
        }
        // SAFETY: checked non-NULL, writable by the caller's contract.
        unsafe { *done = c_int::from(all) };
        if !all {
            return Ok(());
        }
        let mut first = None;
        for slot in slots.iter_mut().filter(|s| !s.is_null()) {
            // SAFETY: live and finished (a finished request's test repeats its outcome).
            keep_first(&mut first, unsafe { request_mut(*slot)? }.test().unwrap_or(Ok(())));
            // SAFETY: finished and live; the array is the only user left.
            unsafe { retire(slot) };
        }
        first.map_or(Ok(()), Err)
    })
}

/// Moves the requests of the array until one has finished (each tested in turn; the engine moves
/// all of them meanwhile): `*index` is its position, and it is freed and its handle set to NULL,
/// as `MPI_Waitany` does; the return value is its outcome. With no live request (every handle
/// NULL, or `count` 0) `*index` is `FC_UNDEFINED` at once.
///
/// # Safety
/// As `fc_waitall`; `index` points to writable memory.
#[no_mangle]
pub unsafe extern "C" fn fc_waitany(count: c_int, requests: *mut *mut fc_request, index: *mut c_int) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { any(count, requests, index, true) }
}

/// `fc_waitany` that returns at once: `*index` is the position of the first request found finished
/// (freed, its handle set to NULL; the return value its outcome), or `FC_UNDEFINED` when none has
/// finished yet or none is live.
///
/// # Safety
/// As `fc_waitany`.
#[no_mangle]
pub unsafe extern "C" fn fc_testany(count: c_int, requests: *mut *mut fc_request, index: *mut c_int) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { any(count, requests, index, false) }
}

/// `fc_waitany` (`wait`) and `fc_testany`.
///
/// # Safety
/// As `fc_waitany`.
unsafe fn any(count: c_int, requests: *mut *mut fc_request, index: *mut c_int, wait: bool) -> c_int {
    guard(|| {
        if index.is_null() {
            return Err(Failure::arg("index is NULL"));
        }
        // SAFETY: the caller's contract.
        let slots = unsafe { handles(count, requests)? };
        // SAFETY: checked non-NULL, writable by the caller's contract.
        unsafe { *index = crate::FC_UNDEFINED };
        if slots.iter().all(|s| s.is_null()) {
            return Ok(());
        }
        loop {
            for (i, slot) in slots.iter_mut().enumerate().filter(|(_, s)| !s.is_null()) {
                // SAFETY: live, by the caller's contract.
                if let Some(outcome) = unsafe { request_mut(*slot)? }.test() {
                    // SAFETY: finished and live; the array is the only user left.
                    unsafe { retire(slot) };
                    // SAFETY: as above; `i` < `count`, which is a c_int.
                    unsafe { *index = i as c_int };
                    return Ok(outcome?);
                }
            }
            if !wait {
                return Ok(());
            }
            std::thread::yield_now();
        }
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
