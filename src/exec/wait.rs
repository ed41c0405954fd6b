//! How the executor waits: one back-off for every loop that polls for something to happen (an
//! op's wait, a straight-line call's wait for its next message, a mailbox call's wait), and one
//! retry for a fabric queue that is full.
//!
//! A waiter polls without pause while polls bring news. Once it has waited `spin` and polled
//! `min_polls` times, it stops spinning: the caller blocks on the fabric, naps, or hands the call
//! to the engine. It yields its core only when this node's ranks outnumber its cores (the rank it
//! waits for may need that core): then after 2 fruitless polls in a row, unless every rank it
//! waits for runs on another CPU (their message can come any moment, and a yield would give the
//! core to a co-located rank that usually waits for us): then after [`BUSY_PEER_SPIN`]. With a
//! core of its own a waiter never yields: the only taker would be an unrelated busy process, and
//! under the kernel's EEVDF scheduler a yield hands it a whole time slice (milliseconds) that
//! the waiter, and every rank waiting for it, then lose (issue 37.3; the figures are in
//! `docs/measurements/2026-11-28-contention.md`).
//! The clock is read every [`CLOCK_EVERY`] polls only.

use std::time::{Duration, Instant};

use fabcoll_fabric::Endpoint;

use crate::error::{Error, Result};

/// Fruitless polls in a row before a waiter yields, when this node's ranks outnumber its cores.
const YIELD_AFTER_OVERSUBSCRIBED: u32 = 2;
/// Polls before a waiter may stop spinning, whatever the spin budget.
const MIN_POLLS: u32 = 64;
/// Fruitless polls an oversubscribed waiter spins while every rank it waits for runs elsewhere.
pub(crate) const BUSY_PEER_SPIN: u32 = 64;
/// Polls between two readings of the clock.
pub(crate) const CLOCK_EVERY: u32 = 16;

/// When a waiter yields and when it stops spinning (per engine, from its settings).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Patience {
    /// `u32::MAX` (never) unless `oversubscribed`.
    pub yield_after: u32,
    pub min_polls: u32,
    pub spin: Duration,
    pub oversubscribed: bool,
}

impl Patience {
    /// The patience of an engine: `spin` applies on load/store fabrics only (ofi endpoints block
    /// in their own wait, driven by the provider's file descriptors).
    pub fn new(oversubscribed: bool, load_store: bool, spin: Duration) -> Patience {
        Patience {
            yield_after: if oversubscribed { YIELD_AFTER_OVERSUBSCRIBED } else { u32::MAX },
            min_polls: if oversubscribed { CLOCK_EVERY } else { MIN_POLLS },
            spin: if load_store { spin } else { Duration::ZERO },
            oversubscribed,
        }
    }
}

/// What a waiter does before its next poll.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Pause {
    /// Poll again at once.
    Poll,
    /// Yield the core, then poll.
    Yield,
    /// The spin budget is spent: block, nap or hand over (the caller's choice).
    Stop,
}

/// The state of one wait.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Backoff {
    /// When the wait began: the clock's first reading, at the first of every [`CLOCK_EVERY`]
    /// polls.
    pub since: Option<Instant>,
    /// Polls so far, and those in a row that brought nothing.
    pub rounds: u32,
    pub idle: u32,
}

impl Backoff {
    /// A poll brought something (or a step completed).
    #[inline]
    pub fn news(&mut self) {
        self.rounds = self.rounds.wrapping_add(1);
        self.idle = 0;
    }

    /// A poll brought nothing: what to do next. `peers_busy` tells whether every rank the
    /// waiter waits for runs on another CPU (asked only when it matters).
    #[inline]
    pub fn fruitless(&mut self, p: &Patience, peers_busy: impl FnOnce() -> bool) -> Pause {
        self.rounds = self.rounds.wrapping_add(1);
        self.idle = self.idle.saturating_add(1);
        if self.rounds.is_multiple_of(CLOCK_EVERY) {
            // The wait's clock starts at its first reading: a short wait reads none.
            match self.since {
                None => self.since = Some(Instant::now()),
                Some(t) if self.rounds > p.min_polls && t.elapsed() >= p.spin => return Pause::Stop,
                Some(_) => {}
            }
        }
        if self.idle < p.yield_after || p.oversubscribed && self.idle < BUSY_PEER_SPIN && peers_busy() {
            Pause::Poll
        } else {
            Pause::Yield
        }
    }
}

/// Gives the core away once, telling node-local peers that this rank does not run meanwhile.
pub(crate) fn yield_core(ep: &dyn Endpoint) {
    ep.set_idle(true);
    std::thread::yield_now();
    ep.set_idle(false);
}

/// Runs `op` until the fabric accepts it, polling `ep` into `backlog` between tries (peers drain
/// meanwhile) and yielding; `what` names the queue in the error after `timeout`. The first try is
/// inline (it is nearly always accepted); the retries are not.
#[inline]
pub(crate) fn retry_busy<T>(
    ep: &mut dyn Endpoint,
    backlog: &mut Vec<fabcoll_fabric::Completion>,
    timeout: Duration,
    peer: usize,
    what: &str,
    mut op: impl FnMut(&mut dyn Endpoint) -> fabcoll_fabric::Result<T>,
) -> Result<T> {
    match op(ep) {
        Err(e) if e.is_busy() => retry_while_busy(ep, backlog, timeout, peer, what, op),
        r => Ok(r?),
    }
}

/// [`retry_busy`] once the fabric said busy.
#[cold]
#[inline(never)]
fn retry_while_busy<T>(
    ep: &mut dyn Endpoint,
    backlog: &mut Vec<fabcoll_fabric::Completion>,
    timeout: Duration,
    peer: usize,
    what: &str,
    mut op: impl FnMut(&mut dyn Endpoint) -> fabcoll_fabric::Result<T>,
) -> Result<T> {
    let deadline = Instant::now() + timeout;
    loop {
        ep.poll(backlog)?;
        if Instant::now() > deadline {
            let msg = format!("{what} stayed full for {timeout:?}");
            return Err(Error::Fabric(fabcoll_fabric::Error::Peer { peer, msg }));
        }
        std::thread::yield_now();
        match op(ep) {
            Err(e) if e.is_busy() => {}
            r => return Ok(r?),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_waiter_with_a_core_of_its_own_spins_without_yielding_then_stops_once_its_budget_is_spent() {
        for load_store in [true, false] {
            let p = Patience::new(false, load_store, Duration::ZERO);
            let mut b = Backoff::default();
            let pauses: Vec<Pause> = (0..MIN_POLLS + CLOCK_EVERY).map(|_| b.fruitless(&p, || false)).collect();
            let first_stop = pauses.iter().position(|&x| x == Pause::Stop).expect("stops");
            assert!(pauses[..first_stop].iter().all(|&x| x == Pause::Poll), "never a yield: {pauses:?}");
            assert!(first_stop as u32 >= MIN_POLLS, "never before min_polls: {first_stop}");
        }
    }

    #[test]
    fn an_oversubscribed_waiter_yields_at_once_unless_its_peers_run_elsewhere() {
        let p = Patience::new(true, true, Duration::from_secs(60));
        let mut b = Backoff::default();
        assert_eq!(b.fruitless(&p, || false), Pause::Poll);
        assert_eq!(b.fruitless(&p, || false), Pause::Yield);
        assert_eq!(b.fruitless(&p, || true), Pause::Poll, "peers busy elsewhere: spin");
        b.idle = BUSY_PEER_SPIN;
        assert_eq!(b.fruitless(&p, || true), Pause::Yield, "but not forever");
        b.news();
        assert_eq!(b.idle, 0);
        assert_eq!(b.fruitless(&p, || false), Pause::Poll, "news restarts the count before a yield");
    }
}
