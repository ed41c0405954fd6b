//! One collective call from Python, checked and typed: the operation, the datatype, the regions
//! of its buffers and its op and root ([`Spec`]), started on any [`Collectives`] — blocking on a
//! `Communicator`, nonblocking on `RawCalls`. Mirrors the C ABI's choices (`capi/src/coll.rs`):
//! a missing send buffer picks the `_in_place` form where the Rust API has one, and buffers a
//! rank does not use (gather's receive buffer off the root, scatter's send buffer off the root)
//! may be missing.

use fabcoll::{with_element, Collectives, Datatype, ReduceOp};
use pyo3::PyResult;

use crate::buffer::Region;
use crate::error::fail;

/// The collectives the binding offers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Barrier,
    Bcast,
    Reduce,
    Allreduce,
    Gather,
    Scatter,
    Allgather,
    Alltoall,
    ReduceScatter,
    Gatherv,
    Scatterv,
    Allgatherv,
    Alltoallv,
    ReduceScatterV,
    Scan,
    Exscan,
}

impl Kind {
    const ALL: [(&'static str, Kind); 16] = [
        ("barrier", Kind::Barrier),
        ("bcast", Kind::Bcast),
        ("reduce", Kind::Reduce),
        ("allreduce", Kind::Allreduce),
        ("gather", Kind::Gather),
        ("scatter", Kind::Scatter),
        ("allgather", Kind::Allgather),
        ("alltoall", Kind::Alltoall),
        ("reduce_scatter", Kind::ReduceScatter),
        ("gatherv", Kind::Gatherv),
        ("scatterv", Kind::Scatterv),
        ("allgatherv", Kind::Allgatherv),
        ("alltoallv", Kind::Alltoallv),
        ("reduce_scatterv", Kind::ReduceScatterV),
        ("scan", Kind::Scan),
        ("exscan", Kind::Exscan),
    ];

    pub fn named(name: &str) -> PyResult<Kind> {
        Kind::ALL
            .iter()
            .find(|(n, _)| *n == name)
            .map(|&(_, k)| k)
            .ok_or_else(|| fail(format!("unknown collective {name:?}")))
    }

    /// Whether it reduces (takes an op).
    pub fn reduces(self) -> bool {
        matches!(
            self,
            Kind::Reduce | Kind::Allreduce | Kind::ReduceScatter | Kind::ReduceScatterV | Kind::Scan | Kind::Exscan
        )
    }

    /// Whether a missing send buffer means in place (the receive buffer is the input too; for
    /// allgather, this rank's block of it).
    pub fn has_in_place(self) -> bool {
        matches!(self, Kind::Reduce | Kind::Allreduce | Kind::Bcast | Kind::Allgather | Kind::Scan | Kind::Exscan)
    }

    /// Which counts (element counts per rank, MPI's v-variants) it takes: (send side, receive side).
    pub fn takes_counts(self) -> (bool, bool) {
        match self {
            Kind::Gatherv | Kind::Allgatherv | Kind::ReduceScatterV => (false, true),
            Kind::Scatterv => (true, false),
            Kind::Alltoallv => (true, true),
            _ => (false, false),
        }
    }
}

/// One side's counts of a v-variant: `counts[i]` elements for rank i at `displs[i]` (packed if `None`).
#[derive(Clone, Debug, Default)]
pub struct Counts {
    pub counts: Vec<usize>,
    pub displs: Option<Vec<usize>>,
}

impl Counts {
    /// `counts` and `displs` as the caller gave them for one side (`what`: "send" or "recv") of
    /// `kind`, which takes them there when `takes` (required then; refused otherwise).
    pub fn of(
        kind: &str,
        what: &str,
        takes: bool,
        counts: Option<Vec<usize>>,
        displs: Option<Vec<usize>>,
    ) -> PyResult<Counts> {
        match (takes, counts) {
            (true, Some(counts)) => Ok(Counts { counts, displs }),
            (true, None) => Err(fail(format!("{kind} needs {what}_counts"))),
            (false, None) if displs.is_none() => Ok(Counts::default()),
            (false, _) => Err(fail(format!("{kind} takes no {what}_counts or {what}_displs"))),
        }
    }

    fn displs(&self) -> Option<&[usize]> {
        self.displs.as_deref()
    }
}

/// The reduction named `name`, as MPI and torch spell them (`"sum"`, `"prod"`/`"product"`, …).
pub fn reduce_op(name: &str) -> PyResult<ReduceOp> {
    Ok(match name {
        "sum" => ReduceOp::Sum,
        "prod" | "product" => ReduceOp::Prod,
        "min" => ReduceOp::Min,
        "max" => ReduceOp::Max,
        "band" => ReduceOp::Band,
        "bor" => ReduceOp::Bor,
        "bxor" => ReduceOp::Bxor,
        "land" => ReduceOp::Land,
        "lor" => ReduceOp::Lor,
        "lxor" => ReduceOp::Lxor,
        _ => return Err(fail(format!("unknown op {name:?} (sum, prod, min, max, band, bor, bxor, land, lor, lxor)"))),
    })
}

/// A checked call: its regions hold whole elements of `dt`, aligned, and do not overlap.
pub struct Spec {
    pub kind: Kind,
    pub dt: Datatype,
    /// `None`: the in-place form (see [`Kind::has_in_place`]) or, for scatter off the root, no buffer.
    pub send: Option<Region>,
    pub recv: Region,
    pub op: ReduceOp,
    pub root: u32,
    /// The v-variants' counts, per side (empty for the others).
    pub send_counts: Counts,
    pub recv_counts: Counts,
}

/// The region as a shared slice of `T`.
///
/// # Safety
/// The region holds initialised `T`s, aligned (checked by `Buffer::region`), that stay valid and
/// unwritten by others than fabcoll for `'b`.
unsafe fn input<'b, T>(r: &Region) -> &'b [T] {
    if r.bytes == 0 {
        return &[];
    }
    // SAFETY: the caller's contract; non-NULL since a buffer of nonzero length has an address.
    unsafe { std::slice::from_raw_parts(r.addr as *const T, r.bytes / std::mem::size_of::<T>()) }
}

/// The region as an exclusive slice of `T`.
///
/// # Safety
/// As [`input`], and nothing else reads or writes it for `'b`.
unsafe fn output<'b, T>(r: &Region) -> &'b mut [T] {
    if r.bytes == 0 {
        return &mut [];
    }
    // SAFETY: the caller's contract.
    unsafe { std::slice::from_raw_parts_mut(r.addr as *mut T, r.bytes / std::mem::size_of::<T>()) }
}

/// Starts a transfer of `r` (a send when `outgoing`, else a receive) with rank `peer` on `s`
/// (blocking: runs it).
///
/// # Safety
/// As [`start`], for the one region.
pub unsafe fn transfer<'b, S: Collectives<'b>>(
    s: &S,
    dt: Datatype,
    r: &Region,
    outgoing: bool,
    peer: u32,
    tag: u32,
) -> fabcoll::Result<S::Out> {
    with_element!(dt, T => {
        match outgoing {
            // SAFETY: the caller's contract.
            true => s.send(unsafe { input::<T>(r) }, peer, tag),
            // SAFETY: the caller's contract.
            false => s.recv(unsafe { output::<T>(r) }, peer, tag),
        }
    })
}

/// Starts the call on `s` (blocking: runs it).
///
/// # Safety
/// The regions stay valid for `'b` and, while the call runs, the program neither writes the
/// send region nor reads or writes the receive region (MPI's rule; the binding holds the
/// buffers' exports and the GIL-free wait in between).
pub unsafe fn start<'b, S: Collectives<'b>>(s: &S, c: &Spec) -> fabcoll::Result<S::Out> {
    with_element!(c.dt, T => {
        // SAFETY: the caller's contract; `Spec`'s regions do not overlap.
        let recv = unsafe { output::<T>(&c.recv) };
        // SAFETY: the caller's contract.
        let send = c.send.as_ref().map(|r| unsafe { input::<T>(r) });
        match (c.kind, send) {
            (Kind::Barrier, _) => s.barrier(),
            (Kind::Bcast, _) => s.bcast(recv, c.root),
            (Kind::Reduce, None) => s.reduce_in_place(recv, &c.op, c.root),
            (Kind::Reduce, Some(x)) => s.reduce(x, recv, &c.op, c.root),
            (Kind::Allreduce, None) => s.allreduce_in_place(recv, &c.op),
            (Kind::Allreduce, Some(x)) => s.allreduce(x, recv, &c.op),
            (Kind::Gather, x) => s.gather(x.unwrap_or(&[]), recv, c.root),
            (Kind::Scatter, x) => s.scatter(x.unwrap_or(&[]), recv, c.root),
            (Kind::Allgather, None) => s.allgather_in_place(recv),
            (Kind::Allgather, Some(x)) => s.allgather(x, recv),
            (Kind::Alltoall, x) => s.alltoall(x.unwrap_or(&[]), recv),
            (Kind::ReduceScatter, x) => s.reduce_scatter_block(x.unwrap_or(&[]), recv, &c.op),
            (Kind::ReduceScatterV, x) => s.reduce_scatter(x.unwrap_or(&[]), recv, &c.recv_counts.counts, &c.op),
            (Kind::Scan, None) => s.scan_in_place(recv, &c.op),
            (Kind::Scan, Some(x)) => s.scan(x, recv, &c.op),
            (Kind::Exscan, None) => s.exscan_in_place(recv, &c.op),
            (Kind::Exscan, Some(x)) => s.exscan(x, recv, &c.op),
            (Kind::Gatherv, x) => {
                let r = &c.recv_counts;
                s.gatherv(x.unwrap_or(&[]), recv, &r.counts, r.displs(), c.root)
            }
            (Kind::Scatterv, x) => {
                let sc = &c.send_counts;
                s.scatterv(x.unwrap_or(&[]), &sc.counts, sc.displs(), recv, c.root)
            }
            (Kind::Allgatherv, x) => {
                let r = &c.recv_counts;
                s.allgatherv(x.unwrap_or(&[]), recv, &r.counts, r.displs())
            }
            (Kind::Alltoallv, x) => {
                let (sc, r) = (&c.send_counts, &c.recv_counts);
                s.alltoallv(x.unwrap_or(&[]), &sc.counts, sc.displs(), recv, &r.counts, r.displs())
            }
        }
    })
}
