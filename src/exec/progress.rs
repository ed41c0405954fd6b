//! Progress without polling: one thread per engine moves the nonblocking collectives in flight
//! while the program computes, and wakes the tasks awaiting them.
//!
//! Why a thread: an op moves only when someone polls the endpoint and runs what arrived (grants,
//! eager data, reductions). Without it a nonblocking call started before a long computation sits
//! still until `test` or `wait`, so nothing overlaps. The alternatives need what the fabrics
//! lack: a completion that runs code (libfabric's `FI_PROGRESS_AUTO` moves data, not our
//! schedules) or an interrupt per message.
//!
//! When it moves ops: it is started by the first nonblocking call that leaves an op in flight,
//! and sleeps on an alarm (`fabcoll_fabric::wait::Alarm`). The ops of blocking calls are not its
//! work: their own threads move them. When the program leaves a nonblocking call's op in flight
//! and the alarm is not set, the engine sets it for [`GRACE`] (`LeftOps`). Taking an op does not
//! disarm it: the thread wakes, and moves the ops left only if the program took none since the
//! thread last went to sleep; if it took some, the program is at work and gets another grace,
//! and if none is left the thread sleeps until the next op left sets the alarm. So the thread
//! wakes only for ops the program has left alone for a grace, and at most once per grace while
//! the program starts calls and waits for them soon after (torch's synchronous calls), at the
//! cost of one flag per call: no system call. A wake-up per call would cost more than the call
//! where this node's ranks outnumber its cores: it takes a core from a rank on the critical path
//! (`docs/measurements/2026-11-30-torch-calls.md`), and so do two timer calls per call. Once
//! moving, the thread stops when the program takes an op (another grace). A task that awaits a
//! request as a `Future` rings the alarm at once ([`ProgressThread::urge`]).
//!
//! How it shares the engine: it takes the lock only with `try_lock` and only when no thread waits
//! for it (`Engine::lock_waiters`), polls once without blocking (`Engine::progress_others`), and
//! lets the lock go at once; between rounds that brought nothing it spins briefly, then yields,
//! then sleeps (up to [`MAX_NAP`]) without the lock, and naps from the first such round where
//! ranks outnumber cores. So a blocking call of the program never waits for the thread longer
//! than one poll. While a program thread waits for an op (`Communicator::wait_with`: a blocking
//! call, a request's `wait`), that thread moves every op on the engine, and the progress thread
//! stands by ([`ProgressThread::stand_by`]) for a grace at a time.
//!
//! A `Request` awaited as a `Future` registers its waker with the engine
//! (`Engine::set_waker`); the thread wakes it when the op has finished, and runs the deadline
//! check of awaited ops, whose waiters poll only when woken.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, TryLockError, Weak};
use std::task::Waker;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use fabcoll_fabric::wait::Alarm;

use super::Engine;

/// Rounds without news spent spinning, then yielding, before the thread naps.
const SPIN_ROUNDS: u32 = 64;
const YIELD_ROUNDS: u32 = 512;
/// The first and the longest nap between fruitless rounds (doubling from one to the other).
const MIN_NAP: Duration = Duration::from_micros(20);
pub(crate) const MAX_NAP: Duration = Duration::from_micros(500);
/// How long the program may leave its nonblocking calls' ops alone before the thread moves them:
/// longer than the kernel's scheduler tick, so that arming the alarm never makes it the CPU's next
/// timer event, which would cost a reprogramming of the timer hardware per call
/// (`docs/measurements/2026-11-30-torch-calls.md`).
pub(crate) const GRACE: Duration = Duration::from_millis(5);
/// How often the deadlines of awaited ops are checked.
const DEADLINE_EVERY: Duration = Duration::from_millis(10);

/// The progress thread of one engine, shared by the communicators on it; stopped and joined when
/// the last of them drops it.
pub(crate) struct ProgressThread {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
    /// Off (`FABCOLL_PROGRESS=0`, or no alarm): requests move only when tested or waited for.
    on: bool,
    /// The ops nonblocking calls left in flight, and the alarm (`Engine::left_ops`).
    left: Arc<LeftOps>,
}

/// The ops nonblocking calls left in flight, as the thread reads them without the engine's lock
/// (how many, and how many the program has taken so far), and the thread's alarm, which the
/// engine sets when it leaves an op while the alarm is not set. Only its ring (slept through by
/// the thread, [`LeftOps::sleep`]) unsets it: either the thread finds the ops left, or the engine
/// finds the alarm unset and sets it (`SeqCst` on `count` and `armed` orders the two).
#[derive(Debug)]
pub(crate) struct LeftOps {
    count: AtomicUsize,
    taken: AtomicU64,
    armed: AtomicBool,
    /// A task awaits an op: move at once, whatever the program took.
    urged: AtomicBool,
    alarm: Option<Alarm>,
}

impl Default for LeftOps {
    fn default() -> LeftOps {
        let alarm = Alarm::new().map_err(|e| tracing::warn!("fabcoll: no progress thread (no timer: {e})")).ok();
        let (armed, urged) = (AtomicBool::new(false), AtomicBool::new(false));
        LeftOps { count: AtomicUsize::new(0), taken: AtomicU64::new(0), armed, urged, alarm }
    }
}

impl LeftOps {
    /// The engine left an op in flight; `count` are now (under its lock). Sets the alarm for
    /// [`GRACE`] unless it is set.
    pub fn left(&self, count: usize) {
        self.count.store(count, Ordering::SeqCst);
        if let Some(a) = &self.alarm {
            if !self.armed.swap(true, Ordering::SeqCst) {
                a.arm(GRACE);
            }
        }
    }

    /// The program took a left op; `count` remain (under the engine's lock). The alarm stays
    /// set: the thread, woken, sees the take and sleeps again.
    pub fn taken(&self, count: usize) {
        self.taken.fetch_add(1, Ordering::AcqRel);
        self.count.store(count, Ordering::Release);
    }

    /// Sets the alarm for `after`, replacing its setting.
    fn reset(&self, after: Duration) {
        if let Some(a) = &self.alarm {
            self.armed.store(true, Ordering::SeqCst);
            a.arm(after);
        }
    }

    /// The program is at work: the thread sleeps another grace, unless a task awaits an op (an
    /// `urge` that this setting might have replaced rings at once again).
    fn another_grace(&self) {
        self.reset(GRACE);
        if self.urged.load(Ordering::SeqCst) {
            self.reset(Duration::ZERO);
        }
    }

    /// The thread sleeps until the alarm rings (or a signal); then it is no longer set, and the
    /// next op left sets it. `count` is read after the flag is cleared (`SeqCst`), so that either
    /// the thread sees the ops left or the engine sees the flag clear.
    fn sleep(&self) {
        if let Some(a) = &self.alarm {
            a.sleep();
        }
        self.armed.store(false, Ordering::SeqCst);
    }

    fn count(&self) -> usize {
        self.count.load(Ordering::SeqCst)
    }
}

struct Shared {
    stop: AtomicBool,
    /// Program threads waiting for an op ([`ProgressThread::stand_by`]).
    waiters: AtomicU32,
    /// This node's ranks outnumber its cores: nap at once between fruitless rounds.
    oversubscribed: bool,
}

/// A program thread's wait for an op, during which the progress thread stands by.
pub(crate) struct StandBy<'a> {
    shared: &'a Shared,
}

impl ProgressThread {
    pub fn new(on: bool, oversubscribed: bool, left: Arc<LeftOps>) -> ProgressThread {
        let shared = Arc::new(Shared { stop: AtomicBool::new(false), waiters: AtomicU32::new(0), oversubscribed });
        let on = on && left.alarm.is_some();
        ProgressThread { shared, thread: Mutex::new(None), on, left }
    }

    /// The calling thread is about to wait for an op, and moves the engine meanwhile: the
    /// progress thread stands by until the returned guard drops.
    pub fn stand_by(&self) -> StandBy<'_> {
        self.shared.waiters.fetch_add(1, Ordering::AcqRel);
        StandBy { shared: &self.shared }
    }

    /// A task awaits an op (its waker is with the engine): the thread moves the ops at once,
    /// without their grace, and wakes the task when its op has finished.
    pub fn urge(&self) {
        if self.on {
            self.left.urged.store(true, Ordering::SeqCst);
            self.left.reset(Duration::ZERO);
        }
    }

    /// Whether the thread moves nonblocking calls (else their requests must be polled).
    pub fn is_on(&self) -> bool {
        self.on
    }

    /// An op was left in flight for the program to collect later: start the thread if it has not
    /// run yet (the engine armed the alarm).
    pub fn start(&self, engine: &Arc<Mutex<Engine>>, lock_waiters: &Arc<AtomicU32>) {
        if !self.on {
            return;
        }
        let mut t = self.thread.lock().unwrap_or_else(|p| p.into_inner());
        if t.is_none() {
            let (shared, engine, waiters) = (self.shared.clone(), Arc::downgrade(engine), lock_waiters.clone());
            let left = self.left.clone();
            let spawned = std::thread::Builder::new()
                .name("fabcoll-progress".into())
                .spawn(move || run(&shared, &engine, &waiters, &left));
            match spawned {
                Ok(h) => *t = Some(h),
                // Without a thread the requests still finish when tested or waited for.
                Err(e) => tracing::warn!("fabcoll: no progress thread ({e}); requests move when tested"),
            }
        }
    }
}

impl Drop for StandBy<'_> {
    fn drop(&mut self) {
        self.shared.waiters.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Drop for ProgressThread {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        if let Some(a) = &self.left.alarm {
            a.arm(Duration::ZERO);
        }
        let t = self.thread.get_mut().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(t) = t {
            // Never join from the thread itself (it may drop the last handle of the engine).
            if t.thread().id() != std::thread::current().id() {
                let _ = t.join();
            }
        }
    }
}

/// What one round found.
enum Round {
    /// Something happened (completions, an op finished).
    News,
    /// Ops in flight, nothing new.
    Quiet,
    /// The engine was busy with another thread.
    Busy,
}

fn run(shared: &Shared, engine: &Weak<Mutex<Engine>>, lock_waiters: &AtomicU32, left: &LeftOps) {
    if left.alarm.is_none() {
        return;
    }
    let (mut quiet, mut nap, mut woke) = (0u32, MIN_NAP, true);
    let mut wake = Vec::new();
    let mut deadlines_at = Instant::now();
    // Started for an op just left: the engine set the alarm for its grace. `since`: how many ops
    // the program had taken when the thread went to sleep; a take since means it is at work.
    let mut since = left.taken.load(Ordering::Acquire);
    let mut asleep = true;
    while !shared.stop.load(Ordering::Acquire) {
        if asleep {
            left.sleep();
            (quiet, nap, woke, asleep) = (0, MIN_NAP, true, false);
            if left.urged.swap(false, Ordering::SeqCst) {
                // A task awaits an op: move at once, whatever the program took.
                since = left.taken.load(Ordering::Acquire);
            }
        }
        if left.count() == 0 {
            // The next op left sets the alarm.
            (since, asleep) = (left.taken.load(Ordering::Acquire), true);
            continue;
        }
        let Some(engine) = engine.upgrade() else { return };
        let taken = left.taken.load(Ordering::Acquire);
        if shared.waiters.load(Ordering::Acquire) > 0 || taken != since {
            // A program thread waits and moves the ops, or has taken some since this thread
            // slept: it is at work, and gets another grace. The tasks awaiting ops that finished
            // meanwhile are still this thread's to wake.
            if let Ok(mut eng) = engine.try_lock() {
                eng.take_finished_wakers(&mut wake);
            }
            drop(engine);
            wake.drain(..).for_each(Waker::wake);
            left.another_grace();
            (since, asleep) = (taken, true);
            continue;
        }
        let round = one_round(&engine, lock_waiters, &mut woke, &mut wake, &mut deadlines_at);
        drop(engine);
        wake.drain(..).for_each(Waker::wake);
        match round {
            Round::News => (quiet, nap) = (0, MIN_NAP),
            Round::Quiet | Round::Busy => {
                quiet = quiet.saturating_add(1);
                if shared.oversubscribed || quiet >= YIELD_ROUNDS {
                    std::thread::sleep(nap);
                    nap = (nap * 2).min(MAX_NAP);
                } else if quiet < SPIN_ROUNDS {
                    std::hint::spin_loop();
                } else {
                    std::thread::yield_now();
                }
            }
        }
    }
}

/// One poll of the engine, unless another thread wants it; `woke`: the first since the thread
/// slept (counted, then cleared).
fn one_round(
    engine: &Mutex<Engine>,
    lock_waiters: &AtomicU32,
    woke: &mut bool,
    wake: &mut Vec<Waker>,
    deadlines_at: &mut Instant,
) -> Round {
    if lock_waiters.load(Ordering::Relaxed) > 0 {
        return Round::Busy;
    }
    let mut eng = match engine.try_lock() {
        Ok(g) => g,
        Err(TryLockError::WouldBlock) => return Round::Busy,
        Err(TryLockError::Poisoned(p)) => p.into_inner(),
    };
    let events = eng.events;
    if std::mem::take(woke) {
        eng.core.stats.progress_wakeups += 1;
    }
    eng.progress_others();
    let now = Instant::now();
    if now >= *deadlines_at {
        eng.check_awaited_deadlines();
        *deadlines_at = now + DEADLINE_EVERY;
    }
    let before = wake.len();
    eng.take_finished_wakers(wake);
    if eng.events != events || wake.len() > before {
        Round::News
    } else {
        Round::Quiet
    }
}
