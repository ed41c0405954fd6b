//! A communicator's calls state: its memo of prepared calls and its node-local mailboxes
//! (`exec::mailboxes`), behind one lock, so that a repeated small call on shared memory takes
//! one lock and no engine.
//!
//! The first mailbox call on a communicator allocates this rank's mailbox region (p inboxes of
//! 64 KiB), exchanges the descriptors with an allgather on the engine, maps the peers' regions
//! and waits in a barrier until every rank has (a rank that went on could otherwise drop its
//! communicator, and with it its region, before a slower peer mapped it).

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use fabcoll_fabric::RemoteMr;

use super::call::{Call, Collectives};
use super::memo::{CallKey, Memo, Path, Prepared};
use super::p2p::{Transfer, TransferKey};
use super::{Communicator, Options};
use crate::error::{Error, Result};
use crate::exec::plan::Plan;
use crate::exec::proto::CallSig;
use crate::exec::runner::{self, Fused};
use crate::exec::wait::Patience;
use crate::exec::{grace, mailboxes, Bound, Bufs, Stats};
use fabcoll_fabric::shm::mailbox::Mailbox;

/// What [`Communicator::run_remembered`] found.
pub(super) enum Remembered {
    /// The call ran on the mailboxes, with this result.
    Ran(Result<()>),
    /// The call was prepared before: run it so.
    Found(Arc<Prepared>),
    /// Not remembered: prepare it.
    Missing,
}

/// How often a long wait asks the endpoint whether a peer died.
const LIVENESS_EVERY: Duration = Duration::from_millis(10);

/// A communicator's calls state (see the module doc).
#[derive(Default)]
pub(crate) struct Calls {
    pub memo: Memo<CallKey, Arc<Prepared>>,
    /// The prepared transfers (`p2p`): a plan and signature per peer, direction, size and tag.
    pub transfers: Memo<TransferKey, (Arc<Plan>, CallSig)>,
    mailbox: MailboxState,
    /// The counters of this communicator's mailbox calls.
    stats: Stats,
}

#[derive(Default)]
enum MailboxState {
    /// No mailbox call yet.
    #[default]
    Unset,
    Ready(Box<Ready>),
    /// A mailbox call failed: the communicator is broken.
    Off,
}

/// The mailboxes, the number of mailbox calls made so far, reused per-call state and how calls
/// wait (the engine's patience, fixed when it was made).
struct Ready {
    mb: Mailbox,
    seq: u64,
    fused: Vec<Fused>,
    words: Vec<u128>,
    scratch: Vec<Bound>,
    /// The plan and element size `scratch` is bound for (held, so that no other plan takes its
    /// address): a repeated call binds nothing.
    bound_for: Option<(Arc<Plan>, usize)>,
    patience: Patience,
    timeout: Duration,
}

// SAFETY: `scratch` points into `words`, owned by the same value; `fused` is empty between calls.
unsafe impl Send for Ready {}

/// A communicator's calls state, shared with its endpoint's [`CallsRegistry`].
pub(crate) type SharedCalls = Arc<Mutex<Calls>>;

/// The mailbox counters of every communicator on one endpoint (dup/split share it): each live
/// communicator's, kept in its own calls state (a call adds to them under the lock it already
/// holds), and the total of those dropped.
#[derive(Default)]
pub(crate) struct CallsRegistry {
    retired: Stats,
    live: Vec<Weak<Mutex<Calls>>>,
}

/// The endpoint's [`CallsRegistry`].
pub(crate) type SharedRegistry = Arc<Mutex<CallsRegistry>>;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl CallsRegistry {
    /// A new communicator's calls state, registered (lock order: the registry, then a state).
    pub(crate) fn register(reg: &SharedRegistry) -> SharedCalls {
        let state = SharedCalls::default();
        let mut r = lock(reg);
        r.live.retain(|w| w.strong_count() > 0);
        r.live.push(Arc::downgrade(&state));
        state
    }

    /// Moves a communicator's counters to the retired total (it is being dropped).
    pub(crate) fn retire(reg: &SharedRegistry, state: &SharedCalls) {
        let mut r = lock(reg);
        let stats = lock(state).stats.clone();
        r.retired.add(&stats);
        r.live.retain(|w| w.strong_count() > 0 && !std::ptr::eq(w.as_ptr(), Arc::as_ptr(state)));
    }

    /// The mailbox counters of every communicator of the endpoint, dropped ones included.
    pub(crate) fn total(reg: &SharedRegistry) -> Stats {
        let r = lock(reg);
        let mut t = r.retired.clone();
        for state in r.live.iter().filter_map(Weak::upgrade) {
            t.add(&lock(&state).stats);
        }
        t
    }
}

/// Runs calls on the engine only (the mailbox set-up itself must not take the mailboxes).
struct EngineOnly<'a>(&'a Communicator);

impl<'b> Collectives<'b> for EngineOnly<'_> {
    type Out = ();

    fn comm(&self) -> &Communicator {
        self.0
    }

    fn submit(&self, call: &Call<'b>) -> Result<()> {
        let p = self.0.prepared(call, &Default::default())?;
        let started = self.0.start_prepared(call, &p, Path::Engine)?;
        self.0.finish(started)
    }

    /// Transfers never take the mailboxes.
    fn submit_transfer(&self, transfer: &Transfer<'b>) -> Result<()> {
        self.0.submit_transfer(transfer)
    }
}

impl Communicator {
    /// The calls state, locked.
    pub(super) fn calls(&self) -> MutexGuard<'_, Calls> {
        lock(&self.calls)
    }

    /// Looks `call` up in the memo and, when it runs on the mailboxes, they are set up and no
    /// communicator of the engine has broken, runs it there under the same lock, without the
    /// engine's.
    pub(super) fn run_remembered(&self, call: &Call<'_>, opts: &Options) -> Remembered {
        let mut calls = self.calls();
        let Calls { memo, mailbox, stats, .. } = &mut *calls;
        let Some(p) = memo.find(|k| k.is(&call.args, opts.algorithm.as_deref(), &opts.params)) else {
            return Remembered::Missing;
        };
        if let (Path::Mailbox, MailboxState::Ready(ready)) = (p.path(true, self.check), mailbox) {
            if self.breaks.load(Ordering::Acquire) == 0 {
                let r = self.mailbox_call(ready, stats, call, p);
                return Remembered::Ran(self.after_mailbox_call(calls, r));
            }
        }
        Remembered::Found(p.clone())
    }

    /// Runs a prepared call on the mailboxes, setting them up on the first one.
    pub(super) fn run_on_mailboxes(&self, call: &Call<'_>, p: &Prepared) -> Result<()> {
        let (patience, timeout) = {
            let eng = self.lock();
            if let Some(why) = eng.broken(self.ctx) {
                return Err(Error::Broken(why));
            }
            eng.mailbox_patience()
        };
        if matches!(self.calls().mailbox, MailboxState::Unset) {
            // The set-up runs collectives on the engine, which prepare calls: not under the lock.
            let ready = self.mailbox_setup().map(|mb| Ready {
                mb,
                seq: 0,
                fused: Vec::new(),
                words: Vec::new(),
                scratch: Vec::new(),
                bound_for: None,
                patience,
                timeout,
            });
            match ready {
                Ok(r) => self.calls().mailbox = MailboxState::Ready(Box::new(r)),
                Err(e) => {
                    self.calls().mailbox = MailboxState::Off;
                    self.lock().break_ctx(self.ctx, e.to_string());
                    return Err(e);
                }
            }
        }
        let mut calls = self.calls();
        let Calls { mailbox, stats, .. } = &mut *calls;
        let MailboxState::Ready(ready) = mailbox else {
            return Err(Error::Broken("an earlier mailbox call failed".into()));
        };
        let r = self.mailbox_call(ready, stats, call, p);
        self.after_mailbox_call(calls, r)
    }

    /// Allocates and exchanges the mailboxes (collective: the first mailbox call of every rank).
    fn mailbox_setup(&self) -> Result<Mailbox> {
        let (rank, p) = (self.rank as usize, self.size as usize);
        let mut mb = Mailbox::new(self.lock().endpoint(), rank, p)?;
        let mine = mb.descriptor();
        let mut all = vec![0u8; mine.len() * p];
        EngineOnly(self).allgather(&mine[..], &mut all)?;
        let descs = all.chunks(mine.len()).map(RemoteMr::from_bytes).collect::<fabcoll_fabric::Result<Vec<_>>>()?;
        mb.connect(self.lock().endpoint(), &descs, &self.members)?;
        // Nobody goes on (and may drop its communicator, deregistering its region) before every
        // rank has mapped every region: a mapping then keeps the pages.
        EngineOnly(self).barrier()?;
        Ok(mb)
    }

    /// One mailbox call on ready mailboxes; its counters go to `stats`.
    fn mailbox_call(&self, ready: &mut Ready, stats: &mut Stats, call: &Call<'_>, p: &Prepared) -> Result<()> {
        let Ready { mb, seq, fused, words, scratch, bound_for, patience, timeout } = ready;
        let elem = call.dtype.size();
        if !bound_for.as_ref().is_some_and(|(plan, e)| Arc::ptr_eq(plan, &p.plan) && *e == elem) {
            mailboxes::bind_scratch(&p.plan.sched.scratch, elem, words, scratch);
            *bound_for = Some((p.plan.clone(), elem));
        }
        let (send, recv) = (Bound::raw(call.send.0, call.send.1), Bound::raw(call.recv.0, call.recv.1));
        let bufs = Bufs { send: &send, recv: &recv, scratch, elem };
        let c = runner::Call { plan: &p.plan, bufs, dtype: call.dtype, rop: call.op.as_ref() };
        let (coll, rank, this_seq, timeout) = (call.args.coll, self.rank, *seq, *timeout);
        let mut last_liveness: Option<Instant> = None;
        let mut check = |peer: u32, t0: Instant| -> Result<()> {
            {
                let mut eng = self.lock();
                eng.progress_others();
                // A peer's mismatch notice that reached the engine (an earlier call did not match).
                if let Some(why) = eng.broken(self.ctx) {
                    return Err(Error::Broken(why));
                }
            }
            let waited = t0.elapsed();
            if waited >= LIVENESS_EVERY && last_liveness.is_none_or(|t| t.elapsed() >= LIVENESS_EVERY) {
                last_liveness = Some(Instant::now());
                let eng = self.lock();
                let gone: Vec<(u32, String)> = (0..self.size)
                    .filter(|&r| r != rank)
                    .filter_map(|r| eng.peer_gone(self.members[r as usize] as usize).map(|why| (r, why)))
                    .collect();
                if !gone.is_empty() {
                    let cause = gone.iter().map(|(_, w)| w.as_str()).collect::<Vec<_>>().join("; ");
                    let peers = gone.into_iter().map(|(r, _)| r).collect();
                    return Err(Error::PeerLost { coll: coll.name(), seq: this_seq, rank, peers, cause });
                }
            }
            if waited >= timeout {
                return Err(Error::Timeout {
                    coll: coll.name(),
                    seq: this_seq,
                    rank,
                    after: waited,
                    waiting_for: vec![peer],
                });
            }
            Ok(())
        };
        let r = mailboxes::run(&c, (coll, p.alg), call.sig(p), mb, this_seq, fused, *patience, stats, &mut check);
        *seq += 1;
        r.map_err(|e| match e {
            Error::Timeout { coll, seq, rank, after, waiting_for } => {
                let waiting_for = mailboxes::blame(mb, seq, rank, self.size, waiting_for, grace(timeout));
                Error::Timeout { coll, seq, rank, after, waiting_for }
            }
            e => e,
        })
    }

    /// After a mailbox call: a failure turns the mailboxes off and breaks the communicator
    /// (records of the failed call may still arrive).
    #[inline]
    fn after_mailbox_call(&self, mut calls: MutexGuard<'_, Calls>, r: Result<()>) -> Result<()> {
        if let Err(e) = r {
            calls.mailbox = MailboxState::Off;
            drop(calls);
            self.lock().break_ctx(self.ctx, e.to_string());
            return Err(e);
        }
        Ok(())
    }
}
