//! The blocking collectives: each returns once this rank's part is done (its buffers may be
//! reused), like MPI's. Arguments follow MPI's order with one datatype per call; counts and
//! displacements are in elements (`size_t`). See `coll` for what each call means in the Rust API.
//! Every pointer argument is checked (NULL, alignment, overlap) before use.

use std::ffi::{c_int, c_void};

use crate::coll;
use crate::comm::{comm_ref, fc_comm};
use crate::error::guard;
use crate::types::{fc_datatype, fc_op};

/// Waits until every rank of `comm` has called it.
///
/// # Safety
/// `comm` is a live communicator; buffers and arrays hold what the call reads and writes.
#[no_mangle]
pub unsafe extern "C" fn fc_barrier(comm: *const fc_comm) -> c_int {
    // SAFETY: the caller's contract.
    guard(|| unsafe { coll::barrier(&**comm_ref(comm)?) })
}

/// `count` elements of `buffer` go from `root` to every rank.
///
/// # Safety
/// `comm` is a live communicator; buffers and arrays hold what the call reads and writes.
#[no_mangle]
pub unsafe extern "C" fn fc_bcast(
    buffer: *mut c_void,
    count: usize,
    datatype: fc_datatype,
    root: c_int,
    comm: *const fc_comm,
) -> c_int {
    // SAFETY: the caller's contract.
    guard(|| unsafe { coll::bcast(&**comm_ref(comm)?, buffer, count, datatype, root) })
}

/// Element-wise reduction of every rank's `sendbuf` (`count` elements) with `op` into the root's `recvbuf` (unused
/// elsewhere). In place: `sendbuf` = `FC_IN_PLACE` at the root, whose input is then `recvbuf`.
///
/// # Safety
/// `comm` is a live communicator; buffers and arrays hold what the call reads and writes.
#[no_mangle]
pub unsafe extern "C" fn fc_reduce(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: usize,
    datatype: fc_datatype,
    op: fc_op,
    root: c_int,
    comm: *const fc_comm,
) -> c_int {
    // SAFETY: the caller's contract.
    guard(|| unsafe { coll::reduce(&**comm_ref(comm)?, sendbuf, recvbuf, count, datatype, op, root) })
}

/// Element-wise reduction of every rank's `sendbuf` (`count` elements) with `op` into every rank's `recvbuf`. In
/// place: `sendbuf` = `FC_IN_PLACE`, the input is `recvbuf`.
///
/// # Safety
/// `comm` is a live communicator; buffers and arrays hold what the call reads and writes.
#[no_mangle]
pub unsafe extern "C" fn fc_allreduce(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: usize,
    datatype: fc_datatype,
    op: fc_op,
    comm: *const fc_comm,
) -> c_int {
    // SAFETY: the caller's contract.
    guard(|| unsafe { coll::allreduce(&**comm_ref(comm)?, sendbuf, recvbuf, count, datatype, op) })
}

/// The root's `recvbuf` (p·`count` elements; unused elsewhere) gets block i from rank i's `sendbuf` (`count`
/// elements). In place: `sendbuf` = `FC_IN_PLACE` at the root, whose block is already in place in `recvbuf`.
///
/// # Safety
/// `comm` is a live communicator; buffers and arrays hold what the call reads and writes.
#[no_mangle]
pub unsafe extern "C" fn fc_gather(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: usize,
    datatype: fc_datatype,
    root: c_int,
    comm: *const fc_comm,
) -> c_int {
    // SAFETY: the caller's contract.
    guard(|| unsafe { coll::gather(&**comm_ref(comm)?, sendbuf, recvbuf, count, datatype, root) })
}

/// Rank i's `sendbuf` (`counts[i]` elements) lands at `displs[i]` (packed when `displs` is NULL) of the root's
/// `recvbuf`. `counts` (p entries) is needed on every rank. In place: `sendbuf` = `FC_IN_PLACE` at the root.
///
/// # Safety
/// `comm` is a live communicator; buffers and arrays hold what the call reads and writes.
#[no_mangle]
pub unsafe extern "C" fn fc_gatherv(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    counts: *const usize,
    displs: *const usize,
    datatype: fc_datatype,
    root: c_int,
    comm: *const fc_comm,
) -> c_int {
    // SAFETY: the caller's contract.
    guard(|| unsafe { coll::gatherv(&**comm_ref(comm)?, sendbuf, recvbuf, counts, displs, datatype, root) })
}

/// The root's `sendbuf` (p·`count` elements; unused elsewhere) is cut into p blocks; rank i gets block i in
/// `recvbuf` (`count` elements). No in-place form.
///
/// # Safety
/// `comm` is a live communicator; buffers and arrays hold what the call reads and writes.
#[no_mangle]
pub unsafe extern "C" fn fc_scatter(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: usize,
    datatype: fc_datatype,
    root: c_int,
    comm: *const fc_comm,
) -> c_int {
    // SAFETY: the caller's contract.
    guard(|| unsafe { coll::scatter(&**comm_ref(comm)?, sendbuf, recvbuf, count, datatype, root) })
}

/// Rank i gets `counts[i]` elements from `displs[i]` (packed when NULL) of the root's `sendbuf` in `recvbuf`.
/// `counts` (p entries) is needed on every rank. No in-place form.
///
/// # Safety
/// `comm` is a live communicator; buffers and arrays hold what the call reads and writes.
#[no_mangle]
pub unsafe extern "C" fn fc_scatterv(
    sendbuf: *const c_void,
    counts: *const usize,
    displs: *const usize,
    recvbuf: *mut c_void,
    datatype: fc_datatype,
    root: c_int,
    comm: *const fc_comm,
) -> c_int {
    // SAFETY: the caller's contract.
    guard(|| unsafe { coll::scatterv(&**comm_ref(comm)?, sendbuf, counts, displs, recvbuf, datatype, root) })
}

/// Every rank's `recvbuf` (p·`count` elements) gets block i from rank i's `sendbuf` (`count` elements). In place:
/// `sendbuf` = `FC_IN_PLACE`, this rank's block already in place in `recvbuf`.
///
/// # Safety
/// `comm` is a live communicator; buffers and arrays hold what the call reads and writes.
#[no_mangle]
pub unsafe extern "C" fn fc_allgather(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: usize,
    datatype: fc_datatype,
    comm: *const fc_comm,
) -> c_int {
    // SAFETY: the caller's contract.
    guard(|| unsafe { coll::allgather(&**comm_ref(comm)?, sendbuf, recvbuf, count, datatype) })
}

/// Rank i's `sendbuf` (`counts[i]` elements) lands at `displs[i]` (packed when NULL) of every rank's `recvbuf`. In
/// place: `sendbuf` = `FC_IN_PLACE`.
///
/// # Safety
/// `comm` is a live communicator; buffers and arrays hold what the call reads and writes.
#[no_mangle]
pub unsafe extern "C" fn fc_allgatherv(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    counts: *const usize,
    displs: *const usize,
    datatype: fc_datatype,
    comm: *const fc_comm,
) -> c_int {
    // SAFETY: the caller's contract.
    guard(|| unsafe { coll::allgatherv(&**comm_ref(comm)?, sendbuf, recvbuf, counts, displs, datatype) })
}

/// Block j (`count` elements) of `sendbuf` goes to rank j; block i of `recvbuf` comes from rank i (both p·`count`
/// elements). In place: `sendbuf` = `FC_IN_PLACE`, blocks exchanged within `recvbuf`.
///
/// # Safety
/// `comm` is a live communicator; buffers and arrays hold what the call reads and writes.
#[no_mangle]
pub unsafe extern "C" fn fc_alltoall(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: usize,
    datatype: fc_datatype,
    comm: *const fc_comm,
) -> c_int {
    // SAFETY: the caller's contract.
    guard(|| unsafe { coll::alltoall(&**comm_ref(comm)?, sendbuf, recvbuf, count, datatype) })
}

/// `sendcounts[j]` elements at `sdispls[j]` of `sendbuf` go to rank j; `recvcounts[i]` elements from rank i land at
/// `rdispls[i]` of `recvbuf` (NULL displacements: packed). No in-place form. The count matrix is gathered first
/// with a blocking allgather, so the nonblocking form returns once every rank has started it.
///
/// # Safety
/// `comm` is a live communicator; buffers and arrays hold what the call reads and writes.
#[no_mangle]
pub unsafe extern "C" fn fc_alltoallv(
    sendbuf: *const c_void,
    sendcounts: *const usize,
    sdispls: *const usize,
    recvbuf: *mut c_void,
    recvcounts: *const usize,
    rdispls: *const usize,
    datatype: fc_datatype,
    comm: *const fc_comm,
) -> c_int {
    // SAFETY: the caller's contract.
    guard(|| unsafe {
        coll::alltoallv(&**comm_ref(comm)?, sendbuf, sendcounts, sdispls, recvbuf, recvcounts, rdispls, datatype)
    })
}

/// Element-wise reduction with `op` of every rank's `sendbuf` (Σ `recvcounts` elements); rank i gets block i
/// (`recvcounts[i]` elements) in `recvbuf`. No in-place form.
///
/// # Safety
/// `comm` is a live communicator; buffers and arrays hold what the call reads and writes.
#[no_mangle]
pub unsafe extern "C" fn fc_reduce_scatter(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    recvcounts: *const usize,
    datatype: fc_datatype,
    op: fc_op,
    comm: *const fc_comm,
) -> c_int {
    // SAFETY: the caller's contract.
    guard(|| unsafe { coll::reduce_scatter(&**comm_ref(comm)?, sendbuf, recvbuf, recvcounts, datatype, op) })
}

/// Reduce-scatter with equal blocks: `sendbuf` holds p·`recvcount` elements, `recvbuf` gets `recvcount`. No
/// in-place form.
///
/// # Safety
/// `comm` is a live communicator; buffers and arrays hold what the call reads and writes.
#[no_mangle]
pub unsafe extern "C" fn fc_reduce_scatter_block(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    recvcount: usize,
    datatype: fc_datatype,
    op: fc_op,
    comm: *const fc_comm,
) -> c_int {
    // SAFETY: the caller's contract.
    guard(|| unsafe { coll::reduce_scatter_block(&**comm_ref(comm)?, sendbuf, recvbuf, recvcount, datatype, op) })
}

/// Inclusive prefix reduction: rank r's `recvbuf` gets x₀ ⊕ … ⊕ x_r of the ranks' `sendbuf` (`count` elements). In
/// place: `sendbuf` = `FC_IN_PLACE`.
///
/// # Safety
/// `comm` is a live communicator; buffers and arrays hold what the call reads and writes.
#[no_mangle]
pub unsafe extern "C" fn fc_scan(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: usize,
    datatype: fc_datatype,
    op: fc_op,
    comm: *const fc_comm,
) -> c_int {
    // SAFETY: the caller's contract.
    guard(|| unsafe { coll::scan(&**comm_ref(comm)?, sendbuf, recvbuf, count, datatype, op) })
}

/// Exclusive prefix reduction: rank r > 0 gets x₀ ⊕ … ⊕ x_{r−1}; rank 0's `recvbuf` is left as it was. In place:
/// `sendbuf` = `FC_IN_PLACE`.
///
/// # Safety
/// `comm` is a live communicator; buffers and arrays hold what the call reads and writes.
#[no_mangle]
pub unsafe extern "C" fn fc_exscan(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: usize,
    datatype: fc_datatype,
    op: fc_op,
    comm: *const fc_comm,
) -> c_int {
    // SAFETY: the caller's contract.
    guard(|| unsafe { coll::exscan(&**comm_ref(comm)?, sendbuf, recvbuf, count, datatype, op) })
}
