//! Nonblocking collectives: a [`Scope`] lends buffers to collectives started without waiting and
//! finishes all of them before it returns (so a leaked [`Request`] can never leave a peer writing
//! into returned memory); a [`Request`] is tested, waited for, or awaited as a `Future`.
//!
//! A call that did not finish as it started is moved by the engine's progress thread
//! (`exec::progress`) while the program computes; `test` and `wait` move it too. Awaited, a
//! request leaves its waker with the engine and is woken when it has finished (with
//! `FABCOLL_PROGRESS=0`, no thread: it asks to be polled again, and each poll moves it).

use std::cell::RefCell;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use fabcoll_collectives::datatype::Element;

use super::call::{Call, Collectives};
use super::p2p::Transfer;
use super::{Communicator, Options};
use crate::error::{Error, Result};
use crate::exec::{OpKey, Started};

/// Collectives started in a scope run concurrently (several outstanding on one communicator);
/// see [`Communicator::scope`].
pub struct Scope<'scope, 'env: 'scope> {
    comm: &'env Communicator,
    opts: RefCell<Options>,
    keys: RefCell<Vec<OpKey>>,
    _scope: PhantomData<&'scope mut &'scope ()>,
}

/// A collective in flight. Finish it with [`Request::wait`], poll it with [`Request::test`], or
/// `.await` it (each poll drives progress; no runtime needed). Dropping it unfinished is fine:
/// the scope finishes it.
pub struct Request<'scope> {
    comm: &'scope Communicator,
    call: InFlight,
    alg: &'static str,
}

/// A started call as its request sees it (shared with `raw::RawRequest`): the op to wait for,
/// and once finished its outcome, which every later test and the wait report again.
pub(super) struct InFlight {
    /// The op to wait for; `None` when the call ran to its end as it started.
    key: Option<OpKey>,
    /// `None` while in flight; once finished, `Some(None)`: it succeeded, `Some(Some(why))`: it
    /// failed.
    outcome: Option<Option<String>>,
}

impl Communicator {
    /// Starts a nonblocking call; an op left in flight goes to the progress thread. Returns it (if
    /// one is left) and the algorithm.
    pub(super) fn start_nonblocking(&self, call: &Call<'_>, opts: &Options) -> Result<(InFlight, &'static str)> {
        let (started, alg) = self.start(call, opts, false)?;
        Ok((self.in_flight(started), alg))
    }

    /// Starts a nonblocking transfer (`p2p`), as [`Communicator::start_nonblocking`].
    pub(super) fn transfer_in_flight(&self, t: &Transfer) -> Result<InFlight> {
        let started = self.start_transfer(t, false)?;
        Ok(self.in_flight(started))
    }

    /// A started call as its request sees it; an op left in flight goes to the progress thread.
    fn in_flight(&self, started: Started) -> InFlight {
        let key = match started {
            Started::Done => None,
            Started::Pending(key) => {
                self.left_in_flight(key);
                Some(key)
            }
        };
        InFlight { key, outcome: None }
    }
}

impl InFlight {
    /// The op left in flight, if any.
    pub fn key(&self) -> Option<OpKey> {
        self.key
    }

    /// Whether a test or the wait saw the call's end.
    pub fn is_finished(&self) -> bool {
        self.outcome.is_some()
    }

    /// Polls progress once; `Some(result)` when the call has finished. Unfinished, `waker` (if
    /// any) is left with the engine for the progress thread to wake.
    pub fn poll(&mut self, comm: &Communicator, waker: Option<&Waker>) -> Option<Result<()>> {
        if let Some(outcome) = &self.outcome {
            return Some(again(outcome));
        }
        let Some(key) = self.key else {
            self.outcome = Some(None);
            return Some(Ok(()));
        };
        let mut eng = comm.lock();
        if let Err(e) = eng.progress(None) {
            return Some(Err(e));
        }
        eng.check_deadline(key);
        if !eng.is_finished(key) {
            if let Some(w) = waker {
                eng.set_waker(key, w);
                drop(eng);
                comm.progress.urge();
            }
            return None;
        }
        let r = eng.take(key);
        self.outcome = Some(r.as_ref().err().map(ToString::to_string));
        Some(r)
    }

    /// Waits until the call has finished (or failed, or timed out naming the missing ranks).
    pub fn wait(&mut self, comm: &Communicator) -> Result<()> {
        if let Some(outcome) = &self.outcome {
            return again(outcome);
        }
        let r = match self.key {
            Some(key) => comm.wait_key(key),
            None => Ok(()),
        };
        self.outcome = Some(r.as_ref().err().map(ToString::to_string));
        r
    }
}

/// The outcome of a call that finished before.
fn again(outcome: &Option<String>) -> Result<()> {
    match outcome {
        None => Ok(()),
        Some(why) => Err(Error::Protocol(format!("the collective failed earlier: {why}"))),
    }
}

impl<'scope, 'env> Scope<'scope, 'env> {
    /// Options for the collectives started after this call in the scope.
    pub fn set_options(&self, opts: Options) {
        *self.opts.borrow_mut() = opts;
    }

    /// The algorithm a started request runs (for tests and tracing).
    pub fn algorithm_of(&self, r: &Request<'_>) -> Option<&'static str> {
        Some(r.alg)
    }

    /// A receive from any source in the scope: waits until a transfer to this rank with `tag`
    /// announces itself ([`Communicator::probe`]), then starts the receive from its sender, which
    /// goes on in the background; returns the request and the sender. An empty `buf` is refused
    /// (see [`Communicator::recv_any`]).
    pub fn recv_any<T: Element>(&self, buf: &'scope mut [T], tag: u32) -> Result<(Request<'scope>, u32)> {
        if buf.is_empty() {
            return Err(super::p2p::empty_from_any_source());
        }
        let src = self.comm.probe(None, Some(tag))?.source;
        Ok((Collectives::recv(self, buf, src, tag)?, src))
    }
}

impl<'scope> Collectives<'scope> for Scope<'scope, '_> {
    type Out = Request<'scope>;

    fn comm(&self) -> &Communicator {
        self.comm
    }

    fn submit(&self, call: &Call<'scope>) -> Result<Request<'scope>> {
        let (call, alg) = self.comm.start_nonblocking(call, &self.opts.borrow())?;
        self.keys.borrow_mut().extend(call.key());
        Ok(Request { comm: self.comm, call, alg })
    }

    fn submit_transfer(&self, transfer: &Transfer<'scope>) -> Result<Request<'scope>> {
        let call = self.comm.transfer_in_flight(transfer)?;
        self.keys.borrow_mut().extend(call.key());
        Ok(Request { comm: self.comm, call, alg: "p2p" })
    }
}

impl Request<'_> {
    /// Polls progress once; `Some(result)` when the collective has finished.
    /// Once it has finished, every later test (and the wait) reports the same outcome: `Ok`, or
    /// the failure again (as [`Error::Protocol`] naming it).
    pub fn test(&mut self) -> Option<Result<()>> {
        self.call.poll(self.comm, None)
    }

    /// Waits until the collective has finished (or failed, or timed out naming the missing ranks).
    pub fn wait(mut self) -> Result<()> {
        self.call.wait(self.comm)
    }
}

impl Future for Request<'_> {
    type Output = Result<()>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        let this = self.get_mut();
        let thread = this.comm.progress.is_on();
        match this.call.poll(this.comm, thread.then_some(cx.waker())) {
            Some(r) => Poll::Ready(r),
            None if thread => Poll::Pending,
            None => {
                // No progress thread: progress is driven by polling, so ask to be polled again.
                cx.waker().wake_by_ref();
                Poll::Pending
            }
        }
    }
}

/// Finishes every request of the scope, also when the closure panics.
struct Finish<'a> {
    comm: &'a Communicator,
    keys: &'a RefCell<Vec<OpKey>>,
}

impl Finish<'_> {
    fn all(&self) -> Result<()> {
        let keys = std::mem::take(&mut *self.keys.borrow_mut());
        let mut first = Ok(());
        for k in keys {
            // Requests already waited for are gone from the engine.
            if !self.comm.lock().has_op(k) {
                continue;
            }
            if let Err(e) = self.comm.wait_key(k) {
                if first.is_ok() {
                    first = Err(e);
                }
            }
        }
        first
    }
}

impl Drop for Finish<'_> {
    fn drop(&mut self) {
        let _ = self.all();
    }
}

pub(super) fn run_scope<'env, F, R>(comm: &'env Communicator, f: F) -> Result<R>
where
    F: for<'scope> FnOnce(&'scope Scope<'scope, 'env>) -> Result<R>,
{
    let scope =
        Scope { comm, opts: RefCell::new(Options::default()), keys: RefCell::new(Vec::new()), _scope: PhantomData };
    let finish = Finish { comm, keys: &scope.keys };
    let r = f(&scope);
    let rest = finish.all();
    drop(finish);
    let out = r?;
    rest?;
    Ok(out)
}
