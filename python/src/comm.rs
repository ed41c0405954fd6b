//! `fabcoll._native.Communicator`: a communicator shared with the requests it starts. Every
//! collective goes through one entry, `_call`, which the Python package wraps in mpi4py-like
//! methods (`fabcoll/__init__.py`): it exports and checks the buffers, resolves the datatype and
//! the op, then runs the call with the GIL released (blocking) or starts it and returns a
//! [`Request`] that holds the buffers until it has finished. `free` lets the communicator go before
//! the Python object does (torch's `destroy_process_group`: a group's object may never be
//! collected); requests in flight keep it until they finish.

use std::sync::{Arc, PoisonError, RwLock};

use fabcoll::Datatype;
use pyo3::prelude::*;

use crate::buffer::{datatype_name, datatype_named, Region, Source, Values};
use crate::call::{reduce_op, start, transfer, Counts, Kind, Spec};
use crate::error::{fail, lib};
use crate::request::Request;

/// A group of ranks that run collectives together (MPI's communicator).
#[pyclass(module = "fabcoll._native", frozen)]
pub struct Communicator {
    /// `None` once freed.
    inner: RwLock<Option<Arc<fabcoll::Communicator>>>,
}

impl Communicator {
    fn new(c: fabcoll::Communicator) -> Communicator {
        Communicator { inner: RwLock::new(Some(Arc::new(c))) }
    }

    /// The communicator, unless it has been freed.
    fn get(&self) -> PyResult<Arc<fabcoll::Communicator>> {
        let inner = self.inner.read().unwrap_or_else(PoisonError::into_inner);
        inner.clone().ok_or_else(|| fail("this communicator has been freed"))
    }
}

/// The datatype of a call: `dtype` when given, else the buffers' formats or dtypes (which must
/// agree).
fn resolve_datatype(dtype: Option<&str>, bufs: &[&Source]) -> PyResult<(Datatype, Values)> {
    if let Some(name) = dtype {
        return Ok((datatype_named(name)?, Values::Plain));
    }
    let mut found: Option<((Datatype, Values), &Source)> = None;
    for b in bufs {
        let dt = b.datatype()?;
        match found {
            Some((first, fb)) if first != dt => {
                let name = |(d, v): (Datatype, Values)| match v {
                    Values::Plain => datatype_name(d),
                    Values::Bool => "bool",
                };
                return Err(fail(format!("{} holds {} but {} holds {}", fb.what(), name(first), b.what(), name(dt))));
            }
            _ => found = Some((dt, b)),
        }
    }
    Ok(found.map_or((Datatype::U8, Values::Plain), |(dt, _)| dt))
}

#[pymethods]
impl Communicator {
    /// Joins the job the environment describes: `fabrun -n 4 python prog.py`, torchrun, Slurm or
    /// the `FABCOLL_*` variables (the library's `Communicator::from_env`).
    #[staticmethod]
    fn from_env(py: Python<'_>) -> PyResult<Communicator> {
        py.detach(fabcoll::Communicator::from_env).map(Communicator::new).map_err(lib)
    }

    /// This process's rank.
    #[getter]
    fn rank(&self) -> PyResult<u32> {
        Ok(self.get()?.rank())
    }

    /// The number of ranks.
    #[getter]
    fn size(&self) -> PyResult<u32> {
        Ok(self.get()?.size())
    }

    /// The fabric this communicator runs over (`shm`, `tcp`, …).
    #[getter]
    fn fabric(&self) -> PyResult<String> {
        Ok(self.get()?.fabric_name())
    }

    /// Lets the communicator go now (MPI's `MPI_Comm_free`): its connections, shared memory and
    /// threads are released once the requests it started have finished (they keep it meanwhile).
    /// Later calls raise; freeing again does nothing.
    fn free(&self, py: Python<'_>) {
        let c = self.inner.write().unwrap_or_else(PoisonError::into_inner).take();
        // Dropping the last handle closes the endpoint: without the GIL, as a blocking call.
        py.detach(|| drop(c));
    }

    /// A communicator over the same ranks with its own traffic (collective).
    fn dup(&self, py: Python<'_>) -> PyResult<Communicator> {
        let comm = self.get()?;
        py.detach(|| comm.dup()).map(Communicator::new).map_err(lib)
    }

    /// Splits by `color` (ranks with equal colors form a communicator, ordered by `key` then
    /// rank); `color=None` takes part without joining any: it returns `None` (collective).
    #[pyo3(signature = (color, key = 0))]
    fn split(&self, py: Python<'_>, color: Option<u32>, key: i32) -> PyResult<Option<Communicator>> {
        let comm = self.get()?;
        let c = py.detach(|| comm.split(color, key)).map_err(lib)?;
        Ok(c.map(Communicator::new))
    }

    /// One collective: `kind` names it, `send`/`recv` are buffer-protocol objects, or torch
    /// tensors when `tensors` (`send=None`: in place for allreduce, reduce and bcast; missing
    /// buffers the rank does not use), `op` a reduction name, `dtype` a datatype name that
    /// overrides the buffers' format; the v-variants' element counts and displacements per rank
    /// (`gatherv`, `allgatherv`: receive side; `scatterv`: send side; `alltoallv`: both). Blocking
    /// returns `None`; otherwise a `Request`.
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (kind, send, recv, op = "sum", root = 0, dtype = None, blocking = true, tensors = false,
                        send_counts = None, send_displs = None, recv_counts = None, recv_displs = None))]
    fn _call(
        &self,
        py: Python<'_>,
        kind: &str,
        send: Option<&Bound<'_, PyAny>>,
        recv: Option<&Bound<'_, PyAny>>,
        op: &str,
        root: u32,
        dtype: Option<&str>,
        blocking: bool,
        tensors: bool,
        send_counts: Option<Vec<usize>>,
        send_displs: Option<Vec<usize>>,
        recv_counts: Option<Vec<usize>>,
        recv_displs: Option<Vec<usize>>,
    ) -> PyResult<Option<Request>> {
        let name = kind;
        let kind = Kind::named(kind)?;
        let (sends_counts, receives_counts) = kind.takes_counts();
        let send_counts = Counts::of(name, "send", sends_counts, send_counts, send_displs)?;
        let recv_counts = Counts::of(name, "recv", receives_counts, recv_counts, recv_displs)?;
        if kind == Kind::ReduceScatterV && recv_counts.displs.is_some() {
            return Err(fail("reduce_scatterv takes no recv_displs (its blocks lie one after the other)"));
        }
        let op = if kind.reduces() { reduce_op(op)? } else { fabcoll::ReduceOp::Sum };
        if kind == Kind::Bcast && send.is_some() {
            return Err(fail("bcast takes one buffer"));
        }
        // In place, off the root of reduce, the buffer is only read.
        let in_place = kind.has_in_place() && send.is_none();
        let comm = self.get()?;
        let reads_only = in_place && kind == Kind::Reduce && comm.rank() != root;
        let (send_what, recv_what) = match (tensors, in_place) {
            (false, _) => ("send buffer", if in_place { "buffer" } else { "receive buffer" }),
            (true, true) => ("the input tensor", "the tensor"),
            (true, false) => ("the input tensor", "the output tensor"),
        };
        let send = send.map(|b| Source::get(b, send_what, false, tensors)).transpose()?;
        let recv = recv.map(|b| Source::get(b, recv_what, !reads_only, tensors)).transpose()?;
        let bufs: Vec<&Source> = send.iter().chain(recv.iter()).collect();
        let (dt, values) = resolve_datatype(dtype, &bufs)?;
        if kind.reduces() {
            values.check_op(&op, bufs.first().map_or("the buffer", |b| b.what()))?;
        }
        let send_region = send.as_ref().map(|b| b.region(dt)).transpose()?;
        let recv_region = recv.as_ref().map(|b| b.region(dt)).transpose()?.unwrap_or(Region::EMPTY);
        if let Some(s) = &send_region {
            s.disjoint(&recv_region)?;
        }
        let spec = Spec { kind, dt, send: send_region, recv: recv_region, op, root, send_counts, recv_counts };
        let held: Vec<Source> = send.into_iter().chain(recv).collect();
        if blocking {
            let comm = &*comm;
            // SAFETY: `held` keeps the buffers exported (in place, unmoved) until the call has
            // returned; Python code that writes them from another thread meanwhile breaks MPI's
            // rule, as with mpi4py.
            py.detach(|| unsafe { start(comm, &spec) }).map_err(lib)?;
            drop(held);
            return Ok(None);
        }
        // SAFETY: the request holds the exported buffers until it has finished (`Request`).
        let calls = unsafe { comm.raw_calls() };
        // SAFETY: as above: `held` moves into the request with the raw request.
        let raw = unsafe { start(&calls, &spec) }.map_err(lib)?;
        Ok(Some(Request::new(raw, held)))
    }

    /// A tagged point-to-point transfer: `kind` "send" (from `buf` to rank `peer`) or "recv"
    /// (into `buf` from rank `peer`, exactly its size); `buf` a torch tensor when `tensors`.
    /// Blocking returns `None`; otherwise a `Request`.
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (kind, buf, peer, tag = 0, dtype = None, blocking = true, tensors = false))]
    fn _transfer(
        &self,
        py: Python<'_>,
        kind: &str,
        buf: &Bound<'_, PyAny>,
        peer: u32,
        tag: u32,
        dtype: Option<&str>,
        blocking: bool,
        tensors: bool,
    ) -> PyResult<Option<Request>> {
        let outgoing = match kind {
            "send" => true,
            "recv" => false,
            _ => return Err(fail(format!("unknown transfer {kind:?} (send or recv)"))),
        };
        let what = match (tensors, outgoing) {
            (false, true) => "send buffer",
            (false, false) => "receive buffer",
            (true, true) => "the send tensor",
            (true, false) => "the recv tensor",
        };
        let b = Source::get(buf, what, !outgoing, tensors)?;
        let (dt, _) = resolve_datatype(dtype, &[&b])?;
        let region = b.region(dt)?;
        let comm = self.get()?;
        if blocking {
            let comm = &*comm;
            // SAFETY: `b` keeps the buffer exported until the call has returned (as `_call`).
            py.detach(|| unsafe { transfer(comm, dt, &region, outgoing, peer, tag) }).map_err(lib)?;
            drop(b);
            return Ok(None);
        }
        // SAFETY: the request holds the exported buffer until it has finished (`Request`).
        let calls = unsafe { comm.raw_calls() };
        // SAFETY: as above.
        let raw = unsafe { transfer(&calls, dt, &region, outgoing, peer, tag) }.map_err(lib)?;
        Ok(Some(Request::new(raw, vec![b])))
    }

    /// The sender and tag of the next transfer to this rank from `source` (any when `None`, the
    /// first to arrive) with `tag` (any when `None`): `fabcoll::Communicator::probe`.
    #[pyo3(signature = (source = None, tag = None))]
    fn _probe(&self, py: Python<'_>, source: Option<u32>, tag: Option<u32>) -> PyResult<(u32, u32)> {
        let comm = self.get()?;
        let found = py.detach(|| comm.probe(source, tag)).map_err(lib)?;
        Ok((found.source, found.tag))
    }

    /// `_probe` that does not wait: `None` while nothing has come (`fabcoll::Communicator::iprobe`).
    #[pyo3(signature = (source = None, tag = None))]
    fn _iprobe(&self, source: Option<u32>, tag: Option<u32>) -> PyResult<Option<(u32, u32)>> {
        let found = self.get()?.iprobe(source, tag).map_err(lib)?;
        Ok(found.map(|f| (f.source, f.tag)))
    }

    fn __repr__(&self) -> String {
        match self.get() {
            Ok(c) => format!("<fabcoll.Communicator rank {} of {} over {}>", c.rank(), c.size(), c.fabric_name()),
            Err(_) => "<fabcoll.Communicator (freed)>".to_owned(),
        }
    }
}
