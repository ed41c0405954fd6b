//! Waiting without burning the machine: spin a little, then `yield_now`, then block (futex,
//! condvar) or sleep. Shared by the backends so 8 ranks on 2 cores don't collapse. The yields are
//! for ranks that share cores: an executor that finds its node's cores not oversubscribed drops
//! them ([`crate::Endpoint::never_yield`]), since a yield to an unrelated busy process costs the
//! waiter a whole time slice.

use std::time::{Duration, Instant};

use crate::endpoint::Completion;
use crate::error::{Error, Result};

/// How [`crate::Endpoint::wait`] waits for a completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WaitPolicy {
    /// Busy polls before the first yield.
    pub spin: u32,
    /// `yield_now` rounds (each followed by a poll) before blocking; 0: the waiter never yields.
    pub yields: u32,
    /// Longest single block/sleep; the backend re-polls after it (bounds lost-wakeup cost and lets
    /// a manual-progress backend make progress).
    pub max_sleep: Duration,
}

impl Default for WaitPolicy {
    fn default() -> Self {
        WaitPolicy { spin: 200, yields: 20, max_sleep: Duration::from_millis(1) }
    }
}

impl WaitPolicy {
    /// Pure busy polling (dedicated cores).
    pub fn busy() -> Self {
        WaitPolicy { spin: u32::MAX, yields: 0, max_sleep: Duration::from_micros(50) }
    }

    /// Oversubscribed nodes: yield almost at once.
    pub fn oversubscribed() -> Self {
        WaitPolicy { spin: 20, yields: 4, max_sleep: Duration::from_millis(1) }
    }
}

/// What the waiter should do next, as decided by [`Backoff::step`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Spin once (`spin_loop` hint) and poll again.
    Spin,
    /// `yield_now` was done; poll again.
    Yielded,
    /// Block (futex/condvar) or sleep for at most this long, then poll again.
    Block(Duration),
    /// The deadline passed.
    TimedOut,
}

/// Escalating backoff state of one wait call.
#[derive(Debug)]
pub struct Backoff {
    policy: WaitPolicy,
    n: u64,
    deadline: Option<Instant>,
}

impl Backoff {
    /// Starts a wait with an optional overall timeout.
    pub fn new(policy: WaitPolicy, timeout: Option<Duration>) -> Self {
        Backoff { policy, n: 0, deadline: timeout.and_then(|t| Instant::now().checked_add(t)) }
    }

    /// Next step; performs the spin hint or the yield itself, leaves blocking to the caller.
    pub fn step(&mut self) -> Step {
        self.n += 1;
        let spin = u64::from(self.policy.spin);
        if self.n <= spin {
            if self.n & 63 == 0 && self.expired() {
                return Step::TimedOut;
            }
            std::hint::spin_loop();
            return Step::Spin;
        }
        let remaining = match self.deadline {
            Some(d) => match d.checked_duration_since(Instant::now()) {
                Some(r) if !r.is_zero() => Some(r),
                _ => return Step::TimedOut,
            },
            None => None,
        };
        if self.n <= spin + u64::from(self.policy.yields) {
            std::thread::yield_now();
            return Step::Yielded;
        }
        let t = remaining.map_or(self.policy.max_sleep, |r| r.min(self.policy.max_sleep));
        Step::Block(t)
    }

    fn expired(&self) -> bool {
        self.deadline.is_some_and(|d| Instant::now() >= d)
    }
}

/// The `wait` of every backend: `poll` until it appends something, backing off per `policy`
/// between empty polls — `block(ep, d)` is the backend's way to give up the CPU for at most `d`
/// — and failing with `timed_out(ep)` once `timeout` has passed.
pub(crate) fn poll_until<E: ?Sized>(
    ep: &mut E,
    policy: WaitPolicy,
    timeout: Option<Duration>,
    out: &mut Vec<Completion>,
    poll: fn(&mut E, &mut Vec<Completion>) -> Result<usize>,
    block: fn(&mut E, Duration) -> Result<()>,
    timed_out: fn(&mut E, Duration) -> Error,
) -> Result<usize> {
    let mut backoff = Backoff::new(policy, timeout);
    loop {
        let n = poll(ep, out)?;
        if n > 0 {
            return Ok(n);
        }
        match backoff.step() {
            Step::Spin | Step::Yielded => {}
            Step::Block(d) => block(ep, d)?,
            Step::TimedOut => return Err(timed_out(ep, timeout.unwrap_or_default())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escalates_then_times_out() {
        let p = WaitPolicy { spin: 2, yields: 1, max_sleep: Duration::from_millis(5) };
        let mut b = Backoff::new(p, Some(Duration::from_millis(20)));
        assert_eq!(b.step(), Step::Spin);
        assert_eq!(b.step(), Step::Spin);
        assert_eq!(b.step(), Step::Yielded);
        assert!(matches!(b.step(), Step::Block(d) if d <= Duration::from_millis(5)));
        std::thread::sleep(Duration::from_millis(25));
        assert_eq!(b.step(), Step::TimedOut);
    }
}

/// A one-shot timer that one thread sleeps on and others arm (Linux's `timerfd`): a wake-up that
/// happens later, at the cost of a system call to arm it and no thread switch.
#[derive(Debug)]
pub struct Alarm {
    fd: rustix::fd::OwnedFd,
}

impl Alarm {
    /// An alarm not set.
    pub fn new() -> std::io::Result<Alarm> {
        use rustix::time::{timerfd_create, TimerfdClockId, TimerfdFlags};
        let fd = timerfd_create(TimerfdClockId::Monotonic, TimerfdFlags::NONBLOCK | TimerfdFlags::CLOEXEC)?;
        Ok(Alarm { fd })
    }

    /// Rings after `after` (at once for zero), replacing an earlier setting.
    pub fn arm(&self, after: Duration) {
        use rustix::time::{timerfd_settime, Itimerspec, TimerfdTimerFlags, Timespec};
        // A zero setting would disarm it.
        let after = after.max(Duration::from_nanos(1));
        let zero = Timespec { tv_sec: 0, tv_nsec: 0 };
        let value = Timespec { tv_sec: after.as_secs() as i64, tv_nsec: i64::from(after.subsec_nanos()) };
        let spec = Itimerspec { it_interval: zero, it_value: value };
        // Fails only for a bad descriptor or value, neither of which this type makes.
        let r = timerfd_settime(&self.fd, TimerfdTimerFlags::empty(), &spec);
        debug_assert!(r.is_ok(), "timerfd_settime: {r:?}");
    }

    /// Sleeps until the alarm rings (at once if it rang since the last sleep); a signal may end
    /// it early.
    pub fn sleep(&self) {
        use rustix::event::{poll, PollFd, PollFlags};
        let _ = poll(&mut [PollFd::new(&self.fd, PollFlags::IN)], None);
        let mut expirations = [0u8; 8];
        // Clears the ring; nothing to read (woken by a signal) is fine.
        let _ = rustix::io::read(&self.fd, &mut expirations);
    }
}

#[cfg(test)]
mod alarm_tests {
    use super::*;

    #[test]
    fn an_alarm_rings_once_armed_and_a_new_arming_replaces_the_last() {
        let a = Alarm::new().expect("timerfd");
        let t0 = Instant::now();
        a.arm(Duration::from_millis(20));
        a.sleep();
        assert!(t0.elapsed() >= Duration::from_millis(20), "rang early: {:?}", t0.elapsed());
        let t0 = Instant::now();
        a.arm(Duration::from_millis(1));
        a.arm(Duration::from_millis(30));
        a.sleep();
        assert!(t0.elapsed() >= Duration::from_millis(30), "the first arming rang: {:?}", t0.elapsed());
        let t0 = Instant::now();
        a.arm(Duration::ZERO);
        a.sleep();
        assert!(t0.elapsed() < Duration::from_secs(5), "zero rings at once: {:?}", t0.elapsed());
    }
}
