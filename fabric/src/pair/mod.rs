//! Backend `pair` (feature `pair`, tests only): N in-memory endpoints in one process whose
//! traffic waits on a [`Wire`] until the test delivers it, in the order the test chooses — the
//! executor's races (grant before data, credits late, a peer dying between steps) on demand,
//! without processes or timing luck. quinn's `Pair` (`quinn-proto/src/tests/util.rs`) is the model.
//!
//! Every `write` and `send_ctrl` becomes an in-flight [`Item`] with its bytes captured at the
//! call (as RMA hardware reads them); delivery copies a write into the target's registration
//! (key, access and bounds checked there: a deregistered key fails as `Completion::WriteError`
//! at the initiator) and queues `WriteArrived`/`Ctrl` for the target's `poll`. The contract's
//! order holds — control messages of one pair in send order, exactly once — and nothing more:
//! writes overtake each other and control messages (`Caps::ordered_writes` is false).
//! Local completion: a write of at most [`WireConfig::inline_completion`] bytes is complete on
//! return (`WriteDone` at once, none for `SILENT_WRITE`); a larger one reports `WriteDone` when
//! delivered. A write complete on return that its target refuses at delivery still reports
//! `WriteError` (with its `ctx`, `SILENT_WRITE` included), as a NIC reports a remote access error.
//!
//! [`Wire::kill`] makes a rank gone: its in-flight items vanish, the writes of live ranks to it
//! that were not complete fail with `WriteError`, new writes and control messages to it fail
//! with `Error::Peer` naming it, `peer_gone` reports it, and its own endpoint's calls fail.
//! Deregistration race: delivery copies under the wire's lock and deregistration takes it, so
//! after `Mr` drop returns no write lands; keys are never reused.

mod endpoint;
#[cfg(test)]
mod tests;

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

pub use endpoint::PairEndpoint;

use crate::endpoint::{Completion, Endpoint};
use crate::error::{Error, Result};
use crate::mr::{check_bounds, Access};

/// Largest control message (as the local backend).
pub const MAX_CTRL: usize = 64 * 1024;
/// Largest single write.
pub const MAX_WRITE: usize = 1 << 30;

/// Settings of a [`Wire`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WireConfig {
    /// Writes of at most this many bytes are complete when `write` returns
    /// (`Caps::inline_completion`); larger ones complete when delivered. 0: none; `usize::MAX`: all.
    pub inline_completion: usize,
    /// In-flight items per ordered pair of ranks before `write`/`send_ctrl` return `Busy`
    /// (changeable later with [`Wire::set_max_in_flight`]).
    pub max_in_flight: usize,
    /// Deliver everything at once, in issue order (changeable later with [`Wire::set_auto`]).
    pub auto: bool,
}

impl Default for WireConfig {
    /// Completion on delivery, no in-flight limit, manual delivery.
    fn default() -> WireConfig {
        WireConfig { inline_completion: 0, max_in_flight: usize::MAX, auto: false }
    }
}

/// Calls refused with `Busy` ([`Wire::busy_refusals`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Refusals {
    /// `write` calls.
    pub writes: u64,
    /// `send_ctrl` calls.
    pub ctrl: u64,
}

/// What an in-flight item is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ItemKind {
    /// A one-sided write, with its immediate if it has one.
    Write {
        /// The immediate reported at the target.
        imm: Option<u64>,
    },
    /// A control message.
    Ctrl {
        /// The sender's tag.
        tag: u64,
    },
}

/// A write or control message on the wire, as the test sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Item {
    /// Issue number (increasing over the wire's life: issue order).
    pub id: u64,
    /// Initiator rank.
    pub from: usize,
    /// Target rank.
    pub to: usize,
    /// Payload bytes.
    pub len: usize,
    /// Write or control message.
    pub kind: ItemKind,
}

impl Item {
    /// True for a write.
    pub fn is_write(&self) -> bool {
        matches!(self.kind, ItemKind::Write { .. })
    }

    /// True for a control message.
    pub fn is_ctrl(&self) -> bool {
        matches!(self.kind, ItemKind::Ctrl { .. })
    }

    /// A control message's tag.
    pub fn tag(&self) -> Option<u64> {
        match self.kind {
            ItemKind::Ctrl { tag } => Some(tag),
            ItemKind::Write { .. } => None,
        }
    }

    /// A write's immediate.
    pub fn imm(&self) -> Option<u64> {
        match self.kind {
            ItemKind::Write { imm } => imm,
            ItemKind::Ctrl { .. } => None,
        }
    }
}

/// An in-flight item with what delivery needs.
struct Flight {
    item: Item,
    payload: Payload,
}

enum Payload {
    Write {
        /// Target registration key and offset in it.
        key: u64,
        off: usize,
        bytes: Vec<u8>,
        ctx: u64,
        /// Not complete on return: `WriteDone` on delivery.
        done_on_delivery: bool,
    },
    Ctrl {
        data: Vec<u8>,
    },
}

/// A registration of one rank, as delivery sees it.
struct Region {
    addr: usize,
    len: usize,
    access: Access,
}

#[derive(Default)]
struct RankState {
    inbox: VecDeque<Completion>,
    regions: HashMap<u64, Region>,
    next_key: u64,
    claimed: bool,
    dead: bool,
    /// The executor told this rank's endpoint never to yield ([`crate::Endpoint::never_yield`]).
    never_yields: bool,
}

struct State {
    ranks: Vec<RankState>,
    /// In issue order.
    flights: Vec<Flight>,
    next_id: u64,
    auto: bool,
    max_in_flight: usize,
    delivered: Vec<Item>,
    /// Calls refused with `Busy`.
    busy: Refusals,
}

pub(crate) struct Shared {
    id: u64,
    inline_completion: usize,
    state: Mutex<State>,
    /// Per rank: its inbox grew, or it was killed.
    bells: Vec<Condvar>,
    /// An item entered the wire.
    wire_bell: Condvar,
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A test thread that panicked leaves consistent state (every update is done under one lock).
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn push(&self, st: &mut State, rank: usize, c: Completion) {
        st.ranks[rank].inbox.push_back(c);
        self.bells[rank].notify_all();
    }

    /// Delivers one item (taken off the wire) to its target.
    fn land(&self, st: &mut State, f: Flight) {
        let Item { from, to, .. } = f.item;
        st.delivered.push(f.item);
        match f.payload {
            Payload::Ctrl { data } => {
                let tag = f.item.tag().unwrap_or_default();
                self.push(st, to, Completion::Ctrl { peer: from, tag, data });
            }
            Payload::Write { key, off, bytes, ctx, done_on_delivery } => {
                let landed = st.ranks[to].regions.get(&key).ok_or(Error::InvalidKey { peer: to, key }).and_then(|r| {
                    if !r.access.contains(Access::REMOTE_WRITE) {
                        return Err(Error::Access(format!("key {key:#x} on rank {to} is not remotely writable")));
                    }
                    check_bounds("remote destination", off, bytes.len(), r.len)?;
                    if !bytes.is_empty() {
                        // SAFETY: `[off, off+len)` lies inside a registration that cannot be
                        // deregistered while we hold the wire's lock (deregistration takes it);
                        // the source is this item's own buffer, a different allocation.
                        unsafe {
                            std::ptr::copy_nonoverlapping(bytes.as_ptr(), (r.addr as *mut u8).add(off), bytes.len())
                        };
                    }
                    Ok(())
                });
                match landed {
                    Ok(()) => {
                        if let Some(imm) = f.item.imm() {
                            self.push(st, to, Completion::WriteArrived { peer: from, imm });
                        }
                        if done_on_delivery {
                            self.push(st, from, Completion::WriteDone { ctx });
                        }
                    }
                    Err(e) => self.push(st, from, Completion::WriteError { ctx, error: e.to_string() }),
                }
            }
        }
    }

    /// Puts a new item on the wire (delivered at once in auto mode), or `Busy` at the pair's
    /// limit; `done_now`: the `ctx` of a write complete on return, whose `WriteDone` comes first.
    fn issue(&self, from: usize, to: usize, kind: ItemKind, payload: Payload, done_now: Option<u64>) -> Result<()> {
        let mut st = self.lock();
        if st.ranks[from].dead {
            return Err(killed_self(from));
        }
        if st.ranks[to].dead {
            return Err(Error::Peer { peer: to, msg: "the rank was killed on the wire".into() });
        }
        if !st.auto && st.flights.iter().filter(|f| f.item.from == from && f.item.to == to).count() >= st.max_in_flight
        {
            match kind {
                ItemKind::Write { .. } => st.busy.writes += 1,
                ItemKind::Ctrl { .. } => st.busy.ctrl += 1,
            }
            return Err(Error::Busy("pair wire: in-flight limit of the pair reached"));
        }
        if let Some(ctx) = done_now {
            self.push(&mut st, from, Completion::WriteDone { ctx });
        }
        st.next_id += 1;
        let len = match &payload {
            Payload::Write { bytes, .. } => bytes.len(),
            Payload::Ctrl { data } => data.len(),
        };
        let item = Item { id: st.next_id, from, to, len, kind };
        let f = Flight { item, payload };
        if st.auto {
            self.land(&mut st, f);
        } else {
            st.flights.push(f);
            self.wire_bell.notify_all();
        }
        Ok(())
    }
}

fn killed_self(rank: usize) -> Error {
    Error::Peer { peer: rank, msg: "this rank was killed on the wire".into() }
}

/// The test's handle on a group of in-memory endpoints: lists what is in flight and delivers it.
/// Cheap to clone; every clone controls the same wire.
#[derive(Clone)]
pub struct Wire {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Wire {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wire").field("id", &self.shared.id).field("size", &self.size()).finish()
    }
}

impl Wire {
    /// A wire of `size` ranks with the default settings (see [`WireConfig::default`]).
    pub fn new(size: usize) -> Result<Wire> {
        Wire::with_config(size, WireConfig::default())
    }

    /// A wire of `size` ranks.
    pub fn with_config(size: usize, cfg: WireConfig) -> Result<Wire> {
        if size == 0 {
            return Err(Error::invalid("a pair wire needs at least one rank"));
        }
        if cfg.max_in_flight == 0 {
            return Err(Error::invalid("a pair wire's in-flight limit must be at least 1"));
        }
        let state = State {
            ranks: (0..size).map(|_| RankState { next_key: 1, ..RankState::default() }).collect(),
            flights: Vec::new(),
            next_id: 0,
            auto: cfg.auto,
            max_in_flight: cfg.max_in_flight,
            delivered: Vec::new(),
            busy: Refusals::default(),
        };
        let shared = Shared {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            inline_completion: cfg.inline_completion,
            state: Mutex::new(state),
            bells: (0..size).map(|_| Condvar::new()).collect(),
            wire_bell: Condvar::new(),
        };
        Ok(Wire { shared: Arc::new(shared) })
    }

    /// Number of ranks.
    pub fn size(&self) -> usize {
        self.shared.bells.len()
    }

    /// The endpoint of `rank`, not connected yet (exchange [`Endpoint::address`] blobs and call
    /// [`Endpoint::insert_peers`]); each rank can be taken once while its endpoint lives.
    pub fn endpoint(&self, rank: usize) -> Result<PairEndpoint> {
        let mut st = self.shared.lock();
        let size = st.ranks.len();
        let r = st.ranks.get_mut(rank).ok_or_else(|| Error::invalid(format!("rank {rank} not on a wire of {size}")))?;
        if std::mem::replace(&mut r.claimed, true) {
            return Err(Error::invalid(format!("rank {rank} of pair wire {} is already open", self.shared.id)));
        }
        // Completions of an earlier endpoint of this rank are not the new one's.
        r.inbox.clear();
        drop(st);
        Ok(PairEndpoint::new(self.shared.clone(), rank))
    }

    /// Every rank's endpoint, connected to each other (ranks 0..size).
    pub fn endpoints(&self) -> Result<Vec<PairEndpoint>> {
        let mut eps = (0..self.size()).map(|r| self.endpoint(r)).collect::<Result<Vec<_>>>()?;
        let blobs = eps.iter().map(|e| e.address()).collect::<Result<Vec<_>>>()?;
        for e in &mut eps {
            e.insert_peers(&blobs)?;
        }
        Ok(eps)
    }

    /// The items in flight, in issue order.
    pub fn in_flight(&self) -> Vec<Item> {
        self.shared.lock().flights.iter().map(|f| f.item).collect()
    }

    /// The items delivered so far, in delivery order.
    pub fn delivered(&self) -> Vec<Item> {
        self.shared.lock().delivered.clone()
    }

    /// Delivers item `id`. A control message whose pair has an earlier one in flight is refused
    /// (control messages of a pair arrive in send order), as is an id not in flight.
    pub fn deliver(&self, id: u64) -> Result<Item> {
        let mut st = self.shared.lock();
        let i = st
            .flights
            .iter()
            .position(|f| f.item.id == id)
            .ok_or_else(|| Error::invalid(format!("item #{id} is not in flight")))?;
        let it = st.flights[i].item;
        if it.is_ctrl() {
            if let Some(e) =
                st.flights[..i].iter().find(|f| f.item.is_ctrl() && f.item.from == it.from && f.item.to == it.to)
            {
                return Err(Error::invalid(format!(
                    "control message #{id} from rank {} to {} has the earlier #{} in flight: deliver that first",
                    it.from, it.to, e.item.id
                )));
            }
        }
        let f = st.flights.remove(i);
        self.shared.land(&mut st, f);
        Ok(it)
    }

    /// Delivers the oldest item from `from` to `to`, if there is one.
    pub fn deliver_next(&self, from: usize, to: usize) -> Option<Item> {
        let mut st = self.shared.lock();
        let i = st.flights.iter().position(|f| f.item.from == from && f.item.to == to)?;
        let f = st.flights.remove(i);
        let it = f.item;
        self.shared.land(&mut st, f);
        Some(it)
    }

    /// Delivers every item in flight, in issue order; how many.
    pub fn deliver_all(&self) -> usize {
        self.deliver_matching(|_| true)
    }

    /// Delivers the items in flight that `pred` picks, in issue order, except a control message
    /// behind an earlier one of its pair that stays (it keeps its place); how many.
    pub fn deliver_matching(&self, mut pred: impl FnMut(&Item) -> bool) -> usize {
        let mut st = self.shared.lock();
        let flights = std::mem::take(&mut st.flights);
        let mut held_pairs: Vec<(usize, usize)> = Vec::new();
        let mut n = 0;
        for f in flights {
            let it = f.item;
            let blocked = it.is_ctrl() && held_pairs.contains(&(it.from, it.to));
            if !blocked && pred(&it) {
                self.shared.land(&mut st, f);
                n += 1;
            } else {
                if it.is_ctrl() {
                    held_pairs.push((it.from, it.to));
                }
                st.flights.push(f);
            }
        }
        n
    }

    /// Waits until an item that `pred` picks is in flight and returns it; `None` after `timeout`.
    pub fn wait_for(&self, timeout: Duration, mut pred: impl FnMut(&Item) -> bool) -> Option<Item> {
        let deadline = Instant::now() + timeout;
        let mut st = self.shared.lock();
        loop {
            if let Some(f) = st.flights.iter().find(|f| pred(&f.item)) {
                return Some(f.item);
            }
            let left = deadline.checked_duration_since(Instant::now()).filter(|d| !d.is_zero())?;
            st = self.shared.wire_bell.wait_timeout(st, left).unwrap_or_else(|p| p.into_inner()).0;
        }
    }

    /// Auto mode on: everything in flight is delivered now, and every later item as it is issued
    /// (in issue order). Off: items wait on the wire again.
    pub fn set_auto(&self, on: bool) {
        let mut st = self.shared.lock();
        st.auto = on;
        if on {
            for f in std::mem::take(&mut st.flights) {
                self.shared.land(&mut st, f);
            }
        }
    }

    /// In-flight items per ordered pair before `write`/`send_ctrl` return `Busy` (at least 1).
    pub fn set_max_in_flight(&self, n: usize) {
        self.shared.lock().max_in_flight = n.max(1);
    }

    /// How many `write` and `send_ctrl` calls were refused with `Busy` so far.
    pub fn busy_refusals(&self) -> Refusals {
        self.shared.lock().busy
    }

    /// `rank` is gone (see the module doc). Killing a dead rank does nothing.
    pub fn kill(&self, rank: usize) -> Result<()> {
        let mut st = self.shared.lock();
        let size = st.ranks.len();
        let r = st.ranks.get_mut(rank).ok_or_else(|| Error::invalid(format!("rank {rank} not on a wire of {size}")))?;
        if std::mem::replace(&mut r.dead, true) {
            return Ok(());
        }
        r.inbox.clear();
        for f in std::mem::take(&mut st.flights) {
            let it = f.item;
            if it.from == rank {
                continue;
            }
            if it.to != rank {
                st.flights.push(f);
                continue;
            }
            if let Payload::Write { ctx, done_on_delivery: true, .. } = f.payload {
                let error = format!("rank {rank} was killed with this write in flight");
                self.shared.push(&mut st, it.from, Completion::WriteError { ctx, error });
            }
        }
        drop(st);
        self.shared.bells.iter().for_each(Condvar::notify_all);
        Ok(())
    }

    /// Whether `rank` was killed.
    pub fn is_dead(&self, rank: usize) -> bool {
        self.shared.lock().ranks.get(rank).is_some_and(|r| r.dead)
    }

    /// Whether `rank`'s endpoint was told never to yield its core while it waits.
    pub fn never_yields(&self, rank: usize) -> bool {
        self.shared.lock().ranks.get(rank).is_some_and(|r| r.never_yields)
    }
}
