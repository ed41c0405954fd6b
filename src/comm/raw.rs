//! Nonblocking collectives for callers outside Rust's borrow rules (the C ABI, `capi/`): MPI's
//! rule instead of a [`Scope`](super::Scope) — the buffers lent to a call stay valid and untouched
//! until its request has finished. [`Communicator::raw_calls`] gives a [`RawCalls`], on which the
//! [`Collectives`] methods return a [`RawRequest`] that owns a handle to its communicator (so the
//! communicator outlives it) and is tested or waited for like a [`Request`](super::Request).
//!
//! Built on the same `start` and `wait_key` as the scoped calls: the engine's progress thread
//! (`exec::progress`) moves a request left in flight while the caller computes.

use std::sync::Arc;

use super::call::{Call, Collectives};
use super::p2p::Transfer;
use super::request::InFlight;
use super::{Communicator, Options};
use crate::error::Result;

/// The collectives of one communicator, started without waiting and without a scope; see
/// [`Communicator::raw_calls`] for the contract its calls rely on.
pub struct RawCalls {
    comm: Arc<Communicator>,
}

/// A collective in flight, started through [`RawCalls`]. Finish it with [`RawRequest::test`] or
/// [`RawRequest::wait`]; dropping it unfinished waits for it (the peers may still write into its
/// buffers until then).
pub struct RawRequest {
    comm: Arc<Communicator>,
    call: InFlight,
    alg: &'static str,
}

impl Communicator {
    /// The nonblocking collectives of this communicator for foreign callers: each call returns a
    /// [`RawRequest`] and lends its buffers beyond the borrow that passed them.
    ///
    /// # Safety
    ///
    /// For every call made through the returned [`RawCalls`], the buffers passed to it must stay
    /// allocated (not freed, not moved) until its [`RawRequest`] has finished — a
    /// [`RawRequest::test`] that returned `Some`, a [`RawRequest::wait`] that returned, or the drop
    /// of the request — and in the meantime the program must not write the send buffer nor read
    /// or write the receive buffer (peers and the progress thread access them). This is MPI's
    /// rule for nonblocking calls.
    pub unsafe fn raw_calls(self: &Arc<Self>) -> RawCalls {
        RawCalls { comm: self.clone() }
    }
}

impl RawCalls {
    /// The communicator the calls run on.
    pub fn communicator(&self) -> &Arc<Communicator> {
        &self.comm
    }
}

impl<'b> Collectives<'b> for RawCalls {
    type Out = RawRequest;

    fn comm(&self) -> &Communicator {
        &self.comm
    }

    fn submit(&self, call: &Call<'b>) -> Result<RawRequest> {
        let (call, alg) = self.comm.start_nonblocking(call, &Options::default())?;
        Ok(RawRequest { comm: self.comm.clone(), call, alg })
    }

    fn submit_transfer(&self, transfer: &Transfer<'b>) -> Result<RawRequest> {
        Ok(RawRequest { comm: self.comm.clone(), call: self.comm.transfer_in_flight(transfer)?, alg: "p2p" })
    }
}

impl RawRequest {
    /// Polls progress once; `Some(result)` when the collective has finished. Once it has
    /// finished, every later test (and the wait) reports the same outcome: `Ok`, or the failure
    /// again (as [`Error::Protocol`](crate::Error::Protocol) naming it).
    pub fn test(&mut self) -> Option<Result<()>> {
        self.call.poll(&self.comm, None)
    }

    /// Waits until the collective has finished (or failed, or timed out naming the missing
    /// ranks). Like [`RawRequest::test`], it reports the same outcome when called again.
    pub fn wait(&mut self) -> Result<()> {
        self.call.wait(&self.comm)
    }

    /// Whether the collective has finished (a test or the wait saw its end).
    pub fn is_finished(&self) -> bool {
        self.call.is_finished()
    }

    /// The algorithm the collective runs.
    pub fn algorithm(&self) -> &'static str {
        self.alg
    }
}

impl Drop for RawRequest {
    fn drop(&mut self) {
        // The buffers stay lent until the op has finished: an abandoned request is finished here.
        if !self.call.is_finished() {
            let _ = self.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::exec::ExecConfig;
    use fabcoll_collectives::op::ReduceOp;

    /// Three local ranks over shared communicators; `f` runs on each in its own thread.
    fn on_ranks(f: impl Fn(Arc<Communicator>) + Sync) {
        let cfg = ExecConfig { timeout: Duration::from_secs(20), ..ExecConfig::default() };
        let comms = Communicator::local_with(3, cfg).unwrap();
        std::thread::scope(|s| {
            for c in comms {
                let f = &f;
                s.spawn(move || f(Arc::new(c)));
            }
        });
    }

    #[test]
    fn a_raw_allreduce_finishes_by_test_then_wait_and_reports_the_same_outcome() {
        on_ranks(|c| {
            let send: Vec<f64> = (0..5000).map(|i| f64::from(i) + f64::from(c.rank())).collect();
            let mut recv = vec![0.0f64; 5000];
            // SAFETY: the buffers outlive the request, which is finished (waited for) below.
            let calls = unsafe { c.raw_calls() };
            let mut req = calls.allreduce(&send, &mut recv, &ReduceOp::Sum).unwrap();
            let mut tests = 0;
            while req.test().is_none() {
                tests += 1;
                assert!(tests < 10_000_000, "never finished");
                std::thread::yield_now();
            }
            assert!(req.is_finished());
            req.wait().unwrap();
            assert!(matches!(req.test(), Some(Ok(()))));
            drop(req);
            let want: Vec<f64> = (0..5000).map(|i| 3.0 * f64::from(i) + 3.0).collect();
            assert_eq!(recv, want);
        });
    }

    #[test]
    fn a_dropped_raw_request_is_finished_before_its_buffers_return() {
        on_ranks(|c| {
            let mut buf = vec![0u32; 100_000];
            if c.rank() == 1 {
                buf.iter_mut().enumerate().for_each(|(i, x)| *x = i as u32);
            }
            // SAFETY: the request is dropped (so finished) before `buf` is read.
            let calls = unsafe { c.raw_calls() };
            let req = calls.bcast(&mut buf, 1).unwrap();
            drop(req);
            assert!(buf.iter().enumerate().all(|(i, &x)| x == i as u32));
        });
    }

    #[test]
    fn a_bad_argument_is_an_error_before_anything_starts() {
        on_ranks(|c| {
            let mut buf = [0u8; 4];
            // SAFETY: nothing starts.
            let calls = unsafe { c.raw_calls() };
            let e = calls.bcast(&mut buf, 7).err().unwrap();
            assert!(e.to_string().contains("root 7 out of range"), "{e}");
        });
    }
}
