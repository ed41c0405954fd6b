//! Progress without polling: one thread per engine moves the nonblocking collectives in flight
//! while the program computes, and wakes the tasks awaiting them.
//!
//! Why a thread: an op moves only when someone polls the endpoint and runs what arrived (grants,
//! eager data, reductions). Without it a nonblocking call started before a long computation sits
//! still until `test` or `wait`, so nothing overlaps. The alternatives need what the fabrics
//! lack: a completion that runs code (libfabric's `FI_PROGRESS_AUTO` moves data, not our
//! schedules) or an interrupt per message.
//!
//! How it shares the engine: it is started by the first nonblocking call that leaves an op in
//! flight, and sleeps on a bell whenever no op of a nonblocking call is in flight, which it reads
//! without the lock (`Engine::left_count`). The ops of blocking calls are not its work: their
//! own threads move them, and a program that goes on with blocking calls after one nonblocking
//! call does not wake it again, nor take CPU from them. While such ops are in flight it takes
//! the engine's lock only with `try_lock` and only when no thread waits for it
//! (`Engine::lock_waiters`), polls once without blocking (`Engine::progress_others`), and lets
//! the lock go at once; between rounds that brought nothing it spins briefly, then yields, then
//! sleeps (up to [`MAX_NAP`]) without the lock. So a blocking call of the program never waits
//! for the thread longer than one poll, and meets it at all only while a nonblocking call's op
//! is in flight.
//!
//! A `Request` awaited as a `Future` registers its waker with the engine
//! (`Engine::set_waker`); the thread wakes it when the op has finished, and runs the deadline
//! check of awaited ops, whose waiters poll only when woken.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, TryLockError, Weak};
use std::task::Waker;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::Engine;

/// Rounds without news spent spinning, then yielding, before the thread naps.
const SPIN_ROUNDS: u32 = 64;
const YIELD_ROUNDS: u32 = 512;
/// The first and the longest nap between fruitless rounds (doubling from one to the other).
const MIN_NAP: Duration = Duration::from_micros(20);
pub(crate) const MAX_NAP: Duration = Duration::from_micros(500);
/// How often the deadlines of awaited ops are checked.
const DEADLINE_EVERY: Duration = Duration::from_millis(10);

/// The progress thread of one engine, shared by the communicators on it; stopped and joined when
/// the last of them drops it.
pub(crate) struct ProgressThread {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
    /// Off (`FABCOLL_PROGRESS=0`): requests move only when tested or waited for.
    on: bool,
    /// The engine's count of ops left in flight by nonblocking calls (`Engine::left_count`).
    left: Arc<AtomicUsize>,
}

struct Shared {
    /// Set when an op was started for the thread to move; cleared when the thread takes it.
    rung: Mutex<bool>,
    bell: Condvar,
    stop: AtomicBool,
}

impl ProgressThread {
    pub fn new(on: bool, left: Arc<AtomicUsize>) -> ProgressThread {
        let shared = Arc::new(Shared { rung: Mutex::new(false), bell: Condvar::new(), stop: AtomicBool::new(false) });
        ProgressThread { shared, thread: Mutex::new(None), on, left }
    }

    /// Whether the thread moves nonblocking calls (else their requests must be polled).
    pub fn is_on(&self) -> bool {
        self.on
    }

    /// An op was left in flight for the program to collect later: start the thread if it has not
    /// run yet, and wake it.
    pub fn ring(&self, engine: &Arc<Mutex<Engine>>, lock_waiters: &Arc<AtomicU32>) {
        if !self.on {
            return;
        }
        {
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
        *self.shared.rung.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.shared.bell.notify_one();
    }
}

impl Drop for ProgressThread {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        *self.shared.rung.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.shared.bell.notify_one();
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
    /// No nonblocking call's op is in flight: sleep until rung.
    Idle,
    /// Something happened (completions, an op finished).
    News,
    /// Ops in flight, nothing new.
    Quiet,
    /// The engine was busy with another thread.
    Busy,
}

fn run(shared: &Shared, engine: &Weak<Mutex<Engine>>, lock_waiters: &AtomicU32, left: &AtomicUsize) {
    let mut quiet = 0u32;
    let mut nap = MIN_NAP;
    let mut wake = Vec::new();
    let mut deadlines_at = Instant::now();
    while !shared.stop.load(Ordering::Acquire) {
        let Some(engine) = engine.upgrade() else { return };
        let round = one_round(&engine, lock_waiters, left, &mut wake, &mut deadlines_at);
        drop(engine);
        for w in wake.drain(..) {
            w.wake();
        }
        match round {
            Round::Idle => {
                let mut rung = shared.rung.lock().unwrap_or_else(|p| p.into_inner());
                while !*rung && !shared.stop.load(Ordering::Acquire) {
                    rung = shared.bell.wait(rung).unwrap_or_else(|p| p.into_inner());
                }
                *rung = false;
                (quiet, nap) = (0, MIN_NAP);
            }
            Round::News => (quiet, nap) = (0, MIN_NAP),
            Round::Quiet | Round::Busy => {
                quiet = quiet.saturating_add(1);
                if quiet < SPIN_ROUNDS {
                    std::hint::spin_loop();
                } else if quiet < YIELD_ROUNDS {
                    std::thread::yield_now();
                } else {
                    std::thread::sleep(nap);
                    nap = (nap * 2).min(MAX_NAP);
                }
            }
        }
    }
}

/// One poll of the engine, unless another thread wants it.
fn one_round(
    engine: &Mutex<Engine>,
    lock_waiters: &AtomicU32,
    left: &AtomicUsize,
    wake: &mut Vec<Waker>,
    deadlines_at: &mut Instant,
) -> Round {
    if left.load(Ordering::Acquire) == 0 {
        return Round::Idle;
    }
    if lock_waiters.load(Ordering::Relaxed) > 0 {
        return Round::Busy;
    }
    let mut eng = match engine.try_lock() {
        Ok(g) => g,
        Err(TryLockError::WouldBlock) => return Round::Busy,
        Err(TryLockError::Poisoned(p)) => p.into_inner(),
    };
    let events = eng.events;
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
