//! The executor through its races, on the in-memory pair wire (`fabcoll_fabric::pair`) whose
//! delivery order each test chooses, through the public API only. Each test drives real
//! collectives through one race, then checks the results element by element and what happened
//! (the wire's items, `Stats`, the error and the ranks it blames). Races reached:
//!
//! - a grant for a collective the sender has not started (kept, used by the Send at start);
//! - eager data for a collective the receiver has not started (kept, received at start), a
//!   later collective's write overtaking an earlier one's;
//! - a grant reaching a sender whose Send is not ready yet (its reduction still waits for data),
//!   used when it becomes ready; and a grant reaching a sender that waits for it, whose call
//!   ends only with the write's local completion;
//! - eager data arriving for a Recv whose dependencies are not done (recursive doubling, p = 4:
//!   rank 2's step-2 data before rank 0 has finished step 1 with rank 1);
//! - credit starvation: a sender out of eager slots sends RTS (kept by a receiver that has not
//!   started those collectives), gets grants, writes zero-copy; credits come back late, and
//!   eager resumes after them;
//! - a rendezvous (RTS → grant → write) crossing an eager message of the same pair sent after it
//!   and received before it;
//! - a blocking call that runs straight and is handed over to the engine by an RTS, and one
//!   handed over at its first Send because its peer's ring has no free slot;
//! - `Busy` from the fabric (one item in flight per pair): writes and control messages (credits)
//!   refused and retried while the wire drains;
//! - an abort mid-call: one rank times out while a peer's messages are held; the ranks that
//!   hear each other name the silent rank, every rank returns an error within a bound, and the
//!   communicators are broken afterwards;
//! - a peer killed between the steps of a ring allreduce: the live ranks name it (PeerLost or
//!   Timeout) within a bound;
//! - a peer gone before a call in which the live ranks wait only for each other: the one that
//!   gives up and the one whose grace period its notice opens both name the gone peer.
//! - a peer's notice about a call this rank has finished: from a peer whose grace period began but
//!   which finished the call after all, the next call runs on; from a peer that left the call, the
//!   next call's grace period opens at once and its timeout blames whom that peer waited for.
//! - a late notice that a peer's grace period began, about a call the peer then finished: once a
//!   `GaveUp` would have followed, a later timeout no longer blames whom the peer waited for then.
//!
//! The tests pick messages by the executor's wire format as `src/exec/proto.rs` documents it
//! (module `format` below). Every test runs under a watchdog that fails it instead of hanging.

use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fabcoll::{Collectives, Communicator, Error, ExecConfig, Options, ReduceOp, Request, Stats};
use fabcoll_fabric::pair::{Item, Wire, WireConfig};

/// The executor's wire format (src/exec/proto.rs): control tag = kind (8 bits) | ctx (24) | seq
/// (32); a 64-bit immediate is zero-copy when its top bit is set, else eager: slot (6) | ctx (16)
/// | seq (16) | message index (25).
mod format {
    use fabcoll_fabric::pair::Item;

    pub const CREDIT: u8 = 2;
    pub const GRANT: u8 = 3;
    pub const RTS: u8 = 4;
    pub const ABORT: u8 = 6;

    pub fn ctrl(it: &Item, kind: u8) -> bool {
        it.tag().is_some_and(|t| (t >> 56) as u8 == kind)
    }

    pub fn eager(it: &Item) -> bool {
        it.imm().is_some_and(|i| i >> 63 == 0)
    }

    pub fn zcopy(it: &Item) -> bool {
        it.imm().is_some_and(|i| i >> 63 == 1)
    }

    /// The collective's sequence number of a control message (`kind | ctx | sig | seq mod 2^24`)
    /// or an eager write (`0 | slot | ctx | seq mod 2^16 | sig (8) | idx (17)`).
    pub fn seq(it: &Item) -> Option<u64> {
        match (it.tag(), it.imm()) {
            (Some(t), _) => Some(t & 0xff_ffff),
            (None, Some(i)) if i >> 63 == 0 => Some((i >> 25) & 0xffff),
            _ => None,
        }
    }

    /// The message index of an eager write (k-th message of its pair in its collective).
    pub fn idx(it: &Item) -> Option<u64> {
        it.imm().filter(|i| i >> 63 == 0).map(|i| i & ((1 << 17) - 1))
    }
}

/// Fails the test if `f` has not returned within `bound` (its threads are left behind).
fn watchdog(bound: Duration, f: impl FnOnce() + Send + 'static) {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(catch_unwind(AssertUnwindSafe(f)));
    });
    match rx.recv_timeout(bound) {
        Ok(Ok(())) => {}
        Ok(Err(panic)) => resume_unwind(panic),
        Err(_) => panic!("the test did not finish within {bound:?}: something hangs"),
    }
}

/// Settings of the executor in these tests: messages above 256 B go zero-copy (on any machine:
/// no crowded limit).
fn cfg() -> ExecConfig {
    ExecConfig {
        eager_threshold: 256,
        crowded_eager: 0,
        slot_size: 256,
        slots: 8,
        ring_budget: 0,
        credit_fraction: 4,
        timeout: Duration::from_secs(5),
        ..ExecConfig::default()
    }
}

/// Communicators over a fresh wire, one per settings: set up with the wire in auto mode (the
/// eager-ring announcements), then handed back with it in manual mode.
fn job(wire_cfg: WireConfig, cfgs: Vec<ExecConfig>) -> (Wire, Vec<Communicator>) {
    let wire = Wire::with_config(cfgs.len(), WireConfig { auto: true, ..wire_cfg }).unwrap();
    let eps = wire.endpoints().unwrap();
    let hs: Vec<_> = eps
        .into_iter()
        .zip(cfgs)
        .map(|(ep, cfg)| std::thread::spawn(move || Communicator::from_endpoint(Box::new(ep), cfg)))
        .collect();
    let comms = hs
        .into_iter()
        .map(|h| {
            let mut c = h.join().expect("set-up panicked").expect("set-up failed");
            c.set_checked(false);
            c
        })
        .collect();
    wire.set_auto(false);
    (wire, comms)
}

/// A job of `p` ranks over a wire whose writes complete as they are issued: rank 0 with timeout
/// `first`, the others with `rest`.
fn job_with_timeouts(first: Duration, rest: Duration, p: usize) -> (Wire, Vec<Communicator>) {
    let mut cfgs = vec![ExecConfig { timeout: rest, ..cfg() }; p];
    cfgs[0].timeout = first;
    job(WireConfig { inline_completion: usize::MAX, ..WireConfig::default() }, cfgs)
}

/// Issue 37.3: an engine with a core per rank of its node tells its endpoint never to yield (a
/// yield hands an unrelated busy process a whole time slice); one whose node's ranks outnumber the
/// cores keeps yielding, so the rank it waits for can run.
#[test]
fn an_engine_with_a_core_per_rank_tells_its_endpoint_never_to_yield() {
    watchdog(Duration::from_secs(30), || {
        let own_cores = ExecConfig { local_ranks: Some(2), local_cpus: Some(2), ..cfg() };
        let shared_core = ExecConfig { local_ranks: Some(2), local_cpus: Some(1), ..cfg() };
        let (wire, _comms) = job(WireConfig::default(), vec![own_cores, shared_core]);
        assert!(wire.never_yields(0), "2 ranks on 2 cores: no yields");
        assert!(!wire.never_yields(1), "2 ranks on 1 core: yields");
    });
}

/// An engine whose node's ranks outnumber the cores sends up to 64 KiB eager (a grant would wait
/// for the receiver to be scheduled); with a core per rank, without the crowded limit, or where
/// 16 slots of 64 KiB per peer would pass 16 MiB, the node limit of 8 KiB stays.
#[test]
fn ranks_that_outnumber_the_cores_send_up_to_64_kib_eager() {
    watchdog(Duration::from_secs(60), || {
        let node = ExecConfig { timeout: Duration::from_secs(5), ..ExecConfig::default() };
        let limits = |p: usize, cfg: ExecConfig| -> Vec<usize> {
            let (_wire, comms) = job(WireConfig::default(), vec![cfg; p]);
            comms.iter().map(|c| c.eager_limit()).collect()
        };
        let shared = ExecConfig { local_ranks: Some(4), local_cpus: Some(2), ..node.clone() };
        assert_eq!(limits(4, shared.clone()), [65536; 4], "4 ranks on 2 cores");
        let own = ExecConfig { local_ranks: Some(4), local_cpus: Some(4), ..node.clone() };
        assert_eq!(limits(4, own), [8192; 4], "4 ranks on 4 cores");
        let off = ExecConfig { crowded_eager: 0, ..shared.clone() };
        assert_eq!(limits(4, off), [8192; 4], "no crowded limit");
        let many = ExecConfig { local_ranks: Some(17), local_cpus: Some(2), ..node };
        assert_eq!(limits(17, many), [8192; 17], "17 ranks: 17 MiB of rings each");
    });
}

/// A peer that gave up on a call this rank had finished will not join the next one: its notices
/// arrive for a past call, and the next call blames the rank the peer was waiting for, not the
/// peer. Rank 2 stays silent; rank 0 (timeout 1 s) waits for it in a linear gather that rank 1
/// has left (its part is one send), and rank 1's barrier waits for rank 0. Rank 0's notice that
/// it left the gather opens the barrier's grace period: rank 1 (timeout 10 s) returns within its
/// grace (2 s) of rank 0's failure, not after its own timeout.
#[test]
fn a_later_call_blames_whom_a_peer_gave_up_on_not_the_peer() {
    watchdog(Duration::from_secs(60), || {
        let short = ExecConfig { timeout: Duration::from_secs(1), ..cfg() };
        let long = ExecConfig { timeout: Duration::from_secs(10), ..cfg() };
        let (wire, comms) = job(WireConfig::default(), vec![short.clone(), long, short]);
        wire.set_auto(true);
        let mut comms = comms.into_iter();
        let (c0, c1, _silent) = (comms.next().unwrap(), comms.next().unwrap(), comms.next().unwrap());
        let gather = Options::algorithm("linear");
        let h0 = std::thread::spawn(move || {
            let mut all = [0u8; 3];
            c0.with(&gather).gather(&[0u8], &mut all, 0).unwrap_err()
        });
        let gather = Options::algorithm("linear");
        let h1 = std::thread::spawn(move || {
            c1.with(&gather).gather(&[1u8], &mut [], 0).unwrap();
            let t = Instant::now();
            let e = c1.with(&Options::algorithm("dissemination")).barrier().unwrap_err();
            assert!(t.elapsed() < Duration::from_secs(5), "rank 1 waited {:?}: {e}", t.elapsed());
            e
        });
        let (e0, e1) = (h0.join().unwrap(), h1.join().unwrap());
        for (r, e) in [(0, &e0), (1, &e1)] {
            match e {
                Error::Timeout { waiting_for, .. } => assert_eq!(waiting_for, &[2], "rank {r}: {e}"),
                other => panic!("rank {r}: not a timeout: {other}"),
            }
        }
    });
}

/// Rank 0 (timeout 0.3 s) waits past its timeout for rank 1's data in allreduce #0, opens its
/// grace period (an abort notice to rank 1) and then gets the data and finishes. Rank 1 had
/// finished #0 and waits in #1 when the notice reaches it: a notice for a past call from a peer that
/// was only waiting. Both calls succeed on both ranks (the notice once opened #1's grace period,
/// and rank 1, having heard from every peer, gave up on it at once).
#[test]
fn a_peer_that_finished_in_its_grace_period_does_not_fail_the_next_call() {
    watchdog(Duration::from_secs(30), || {
        let (wire, comms) = job_with_timeouts(Duration::from_millis(300), Duration::from_secs(3), 2);
        let ranks = spawn_ranks(comms, |c| {
            let rd = Options::algorithm("recursive_doubling");
            (0..2)
                .map(|k| {
                    let x = vec![f64::from(c.rank() + 10 * k) + 1.0; 30];
                    let mut y = vec![0f64; 30];
                    c.with(&rd).allreduce(&x, &mut y, &ReduceOp::Sum).map(|()| y)
                })
                .collect::<Vec<_>>()
        });
        let held = |it: &Item| it.from == 1 && format::eager(it) && format::seq(it) == Some(0);
        let notice = |it: &Item| it.from == 0 && format::ctrl(it, format::ABORT) && format::seq(it) == Some(0);
        let t = Instant::now();
        while !wire.in_flight().iter().any(notice) {
            wire.deliver_matching(|it| !held(it) && !notice(it));
            wire.wait_for(Duration::from_millis(2), |it| !held(it));
            assert!(t.elapsed() < Duration::from_secs(5), "no abort notice from rank 0: {:?}", wire.in_flight());
        }
        wire.deliver(find(&wire, "rank 1's data of #0", held).id).unwrap();
        await_item(&wire, "rank 0's data of #1", |it| it.from == 0 && format::eager(it) && format::seq(it) == Some(1));
        wire.deliver(find(&wire, "rank 0's notice", notice).id).unwrap();
        // Time for rank 1 to read the notice (and, wrongly, to answer it with one for #1).
        let answer = wire.wait_for(Duration::from_millis(200), |it| it.from == 1 && format::ctrl(it, format::ABORT));
        wire.set_auto(true);
        let out = ranks.join(Duration::from_secs(10));
        for (r, (calls, _)) in out.iter().enumerate() {
            for (k, y) in calls.iter().enumerate() {
                let y = y.as_ref().unwrap_or_else(|e| panic!("rank {r} call #{k}: {e} (rank 1 answered: {answer:?})"));
                check(&format!("rank {r} call #{k}"), y, &[20.0 * k as f64 + 3.0; 30]);
            }
        }
    });
}

/// A notice that a peer's grace period began stops counting once the peer would have left the
/// call: linear bcast #0 from rank 1, whose data to rank 0 is held until rank 0 (timeout 0.3 s)
/// has sent its notices (waiting for [1]), then delivered (rank 0 finishes). Rank 2 (timeout 1 s)
/// has finished #0 when the notice comes. Half a second later it makes bcast #1 from rank 0, which
/// ranks 0 and 1 (alive) do not make: it must blame rank 0, whom it waits for, not rank 1 on the
/// strength of rank 0's notice about #0.
#[test]
fn a_notice_of_a_call_the_peer_finished_stops_counting() {
    watchdog(Duration::from_secs(30), || {
        let (wire, comms) = job_with_timeouts(Duration::from_millis(300), Duration::from_secs(1), 3);
        let ranks = spawn_ranks(comms, |c| {
            let linear = Options::algorithm("linear");
            let mut b = vec![f64::from(c.rank()); 30];
            let first = c.with(&linear).bcast(&mut b, 1).map(|()| b[0]);
            if c.rank() != 2 {
                // Alive and silent: a dropped communicator would be a lost peer.
                std::thread::sleep(Duration::from_secs(3));
                return (first, None);
            }
            std::thread::sleep(Duration::from_millis(500));
            (first, Some(c.with(&linear).bcast(&mut b, 0)))
        });
        let held = |it: &Item| it.from == 1 && it.to == 0 && format::eager(it);
        let notice = |it: &Item| it.from == 0 && format::ctrl(it, format::ABORT);
        let t = Instant::now();
        while wire.in_flight().iter().filter(|it| notice(it)).count() < 2 {
            wire.deliver_matching(|it| !held(it) && !notice(it));
            wire.wait_for(Duration::from_millis(2), |it| !held(it));
            assert!(t.elapsed() < Duration::from_secs(5), "no abort notices from rank 0: {:?}", wire.in_flight());
        }
        wire.deliver(find(&wire, "rank 1's data to rank 0", held).id).unwrap();
        wire.set_auto(true);
        let out = ranks.join(Duration::from_secs(10));
        for (r, ((first, _), _)) in out.iter().enumerate() {
            assert_eq!(first.as_ref().ok(), Some(&1.0), "rank {r} bcast #0: {first:?}");
        }
        match &out[2].0 .1 {
            Some(Err(Error::Timeout { waiting_for, .. })) => assert_eq!(waiting_for, &[0], "rank 2: {:?}", out[2].0 .1),
            other => panic!("rank 2's bcast #1: expected a timeout, got {other:?}"),
        }
    });
}

/// The item in flight that `pred` picks; panics with the wire's contents if there is none.
fn find(wire: &Wire, what: &str, pred: impl Fn(&Item) -> bool) -> Item {
    let items = wire.in_flight();
    items.iter().copied().find(|it| pred(it)).unwrap_or_else(|| panic!("no {what} in flight: {items:?}"))
}

/// Waits (up to 5 s) for an item that `pred` picks; panics with the wire's contents if none came.
fn await_item(wire: &Wire, what: &str, pred: impl Fn(&Item) -> bool) -> Item {
    wire.wait_for(Duration::from_secs(5), &pred)
        .unwrap_or_else(|| panic!("no {what} came; in flight: {:?}", wire.in_flight()))
}

fn check<T: PartialEq + std::fmt::Debug>(what: &str, got: &[T], want: &[T]) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    if let Some(i) = (0..got.len()).find(|&i| got[i] != want[i]) {
        panic!("{what}: element {i} is {:?}, want {:?}", got[i], want[i]);
    }
}

/// Asserts the named counters of `s` (the others are not looked at).
fn counters(who: &str, s: &Stats, want: &[(&str, u64)]) {
    let all = s.counters();
    for &(name, v) in want {
        let got = all.iter().find(|(n, _)| *n == name).unwrap_or_else(|| panic!("no counter {name}")).1;
        assert_eq!(got, v, "{who}: {name} (all counters: {all:?})");
    }
}

/// A request of a single-threaded test, tested without blocking.
struct Req<'s> {
    name: &'static str,
    r: Request<'s>,
    done: bool,
}

impl<'s> Req<'s> {
    fn new(name: &'static str, r: Request<'s>) -> Req<'s> {
        Req { name, r, done: false }
    }

    /// One `test`: whether the collective has finished (an error fails the test).
    fn poll(&mut self) -> bool {
        if !self.done {
            match self.r.test() {
                None => return false,
                Some(Ok(())) => self.done = true,
                Some(Err(e)) => panic!("{}: {e}", self.name),
            }
        }
        true
    }

    fn pending(&mut self, when: &str) {
        assert!(!self.poll(), "{} finished {when}", self.name);
    }

    fn finished(&mut self, when: &str) {
        assert!(self.poll(), "{} has not finished {when}", self.name);
    }
}

/// Delivers everything and tests through `poll_all` (which tests every request once and says
/// whether all have finished) until all have, for at most 5 s.
fn drive(wire: &Wire, mut poll_all: impl FnMut() -> bool) {
    let t = Instant::now();
    loop {
        wire.deliver_all();
        if poll_all() {
            return;
        }
        assert!(t.elapsed() < Duration::from_secs(5), "requests still pending; in flight: {:?}", wire.in_flight());
    }
}

fn all(done: &[bool]) -> bool {
    done.iter().all(|&d| d)
}

fn binomial() -> Options {
    Options::algorithm("binomial")
}

/// A grant for collective #1 reaches rank 0 (which polls it inside collective #0) before rank 0
/// has started #1: it is kept, and rank 0's Send uses it as #1 starts.
#[test]
fn a_grant_for_a_collective_not_started_yet_is_kept() {
    watchdog(Duration::from_secs(20), || {
        let (wire, comms) = job(WireConfig::default(), vec![cfg(), cfg()]);
        let (c0, c1) = (&comms[0], &comms[1]);
        let small: Vec<u64> = (1..=4).collect();
        let big: Vec<f64> = (0..4096).map(|i| i as f64 * 0.5).collect();
        let (mut small0, mut small1) = (vec![0u64; 4], small.clone());
        let (mut big0, mut big1) = (big.clone(), vec![0f64; 4096]);
        c0.scope(|s0| {
            c1.scope(|s1| {
                s0.set_options(binomial());
                s1.set_options(binomial());
                let mut a1 = Req::new("rank 1 #0", s1.bcast(&mut small1, 1)?);
                let mut b1 = Req::new("rank 1 #1", s1.bcast(&mut big1, 0)?);
                let mut a0 = Req::new("rank 0 #0", s0.bcast(&mut small0, 1)?);
                let e = find(&wire, "eager write of #0", |it| {
                    it.from == 1 && format::eager(it) && format::seq(it) == Some(0)
                });
                let g = find(&wire, "grant of #1", |it| {
                    it.from == 1 && format::ctrl(it, format::GRANT) && format::seq(it) == Some(1)
                });
                wire.deliver(g.id)?;
                a0.pending("without its data (the grant of #1 came instead)");
                wire.deliver(e.id)?;
                a0.finished("after its data came");
                assert!(!wire.in_flight().iter().any(|it| it.from == 0), "rank 0 sent nothing yet");
                let mut b0 = Req::new("rank 0 #1", s0.bcast(&mut big0, 0)?);
                // The kept grant was used as #1 started: its zero-copy write is on the wire.
                find(&wire, "zero-copy write of #1", |it| it.from == 0 && it.to == 1 && format::zcopy(it));
                drive(&wire, || all(&[a1.poll(), b1.poll(), b0.poll()]));
                Ok(())
            })
        })
        .unwrap();
        check("rank 0 small", &small0, &small);
        check("rank 1 big", &big1, &big);
        counters("rank 0", &c0.stats(), &[("zcopy_msgs", 1), ("grants", 0), ("eager_msgs", 0), ("rts_msgs", 0)]);
        counters("rank 1", &c1.stats(), &[("zcopy_msgs", 0), ("grants", 1), ("eager_msgs", 1), ("rts_msgs", 0)]);
    });
}

/// Rank 0 sends the eager data of bcasts #0 and #1; #1's reaches rank 1 first, while rank 1 is
/// in #0: it is kept (its slot held) and received as rank 1 starts #1.
#[test]
fn eager_data_for_a_collective_not_started_yet_is_kept() {
    watchdog(Duration::from_secs(20), || {
        let (wire, comms) = job(WireConfig::default(), vec![cfg(), cfg()]);
        let (c0, c1) = (&comms[0], &comms[1]);
        let x: Vec<i32> = (0..20).map(|i| i * 3 - 7).collect();
        let y: Vec<i32> = (0..20).map(|i| 1000 - i).collect();
        let (mut x0, mut y0, mut x1, mut y1) = (x.clone(), y.clone(), vec![0; 20], vec![0; 20]);
        c0.scope(|s0| {
            c1.scope(|s1| {
                s0.set_options(binomial());
                s1.set_options(binomial());
                let mut a0 = Req::new("rank 0 #0", s0.bcast(&mut x0, 0)?);
                let mut b0 = Req::new("rank 0 #1", s0.bcast(&mut y0, 0)?);
                let mut a1 = Req::new("rank 1 #0", s1.bcast(&mut x1, 0)?);
                let e0 = find(&wire, "eager write of #0", |it| format::eager(it) && format::seq(it) == Some(0));
                let e1 = find(&wire, "eager write of #1", |it| format::eager(it) && format::seq(it) == Some(1));
                wire.deliver(e1.id)?;
                a1.pending("with only #1's data");
                wire.deliver(e0.id)?;
                a1.finished("after its data came");
                let mut b1 = Req::new("rank 1 #1", s1.bcast(&mut y1, 0)?);
                assert!(!wire.in_flight().iter().any(|it| it.to == 1), "#1's data came before: {:?}", wire.in_flight());
                b1.finished("at its first test (its data was kept)");
                drive(&wire, || all(&[a0.poll(), b0.poll()]));
                Ok(())
            })
        })
        .unwrap();
        check("rank 1 #0", &x1, &x);
        check("rank 1 #1", &y1, &y);
        counters("rank 0", &c0.stats(), &[("eager_msgs", 2), ("zcopy_msgs", 0), ("rts_msgs", 0)]);
        counters("rank 1", &c1.stats(), &[("eager_copy_bytes", 2 * 20 * 4), ("grants", 0)]);
    });
}

/// Ring allreduce, p = 2, zero-copy, writes complete on return: rank 1's grant for rank 0's
/// second Send (the reduced block) arrives while that Send still waits for the reduction of
/// rank 1's first block, which is held; rank 0 writes as soon as that data comes.
#[test]
fn a_grant_before_the_senders_step_is_ready_is_used_when_it_is() {
    watchdog(Duration::from_secs(20), || {
        let wire_cfg = WireConfig { inline_completion: usize::MAX, ..WireConfig::default() };
        let (wire, comms) = job(wire_cfg, vec![cfg(), cfg()]);
        let (c0, c1) = (&comms[0], &comms[1]);
        let n = 1024;
        let x0: Vec<f64> = (0..n).map(|i| i as f64).collect();
        let x1: Vec<f64> = (0..n).map(|i| 0.25 * i as f64 + 3.0).collect();
        let (mut y0, mut y1) = (vec![0f64; n], vec![0f64; n]);
        let ring = Options::algorithm("ring");
        c0.scope(|s0| {
            c1.scope(|s1| {
                s0.set_options(ring.clone());
                s1.set_options(ring.clone());
                let mut r0 = Req::new("rank 0", s0.allreduce(&x0, &mut y0, &ReduceOp::Sum)?);
                let mut r1 = Req::new("rank 1", s1.allreduce(&x1, &mut y1, &ReduceOp::Sum)?);
                // The first grants (the reduce-scatter blocks), then the first writes.
                assert_eq!(wire.deliver_matching(|it| format::ctrl(it, format::GRANT)), 2);
                r0.pending("before any data");
                r1.pending("before any data");
                let w10 = find(&wire, "rank 1's first write", |it| it.from == 1 && format::zcopy(it));
                let g10 =
                    await_item(&wire, "rank 1's second grant", |it| it.from == 1 && format::ctrl(it, format::GRANT));
                wire.deliver(g10.id)?;
                r0.pending("without rank 1's first block");
                let writes0 =
                    |wire: &Wire| wire.in_flight().iter().filter(|it| it.from == 0 && format::zcopy(it)).count();
                assert_eq!(writes0(&wire), 1, "rank 0 wrote before its Send was ready: {:?}", wire.in_flight());
                wire.deliver(w10.id)?;
                r0.pending("before its second write");
                assert_eq!(writes0(&wire), 2, "the early grant was not used: {:?}", wire.in_flight());
                drive(&wire, || all(&[r0.poll(), r1.poll()]));
                Ok(())
            })
        })
        .unwrap();
        let want: Vec<f64> = x0.iter().zip(&x1).map(|(a, b)| a + b).collect();
        check("rank 0", &y0, &want);
        check("rank 1", &y1, &want);
        for (r, c) in comms.iter().enumerate() {
            let stats = c.stats();
            counters(
                &format!("rank {r}"),
                &stats,
                &[("zcopy_msgs", 2), ("grants", 2), ("eager_msgs", 0), ("rts_msgs", 0)],
            );
        }
    });
}

/// Bcast, zero-copy, completion on delivery: the root's Send waits for the grant, writes when it
/// comes, and its call ends only with the write's local completion.
#[test]
fn a_grant_after_the_sender_is_ready_and_the_call_ends_with_the_write() {
    watchdog(Duration::from_secs(20), || {
        let (wire, comms) = job(WireConfig::default(), vec![cfg(), cfg()]);
        let (c0, c1) = (&comms[0], &comms[1]);
        let big: Vec<u32> = (0..10_000).map(|i| i * 7 + 1).collect();
        let (mut b0, mut b1) = (big.clone(), vec![0u32; big.len()]);
        c0.scope(|s0| {
            c1.scope(|s1| {
                s0.set_options(binomial());
                s1.set_options(binomial());
                let mut r0 = Req::new("root", s0.bcast(&mut b0, 0)?);
                for _ in 0..3 {
                    r0.pending("without a grant");
                }
                assert!(wire.in_flight().is_empty(), "the root sent without a grant: {:?}", wire.in_flight());
                let mut r1 = Req::new("receiver", s1.bcast(&mut b1, 0)?);
                let g = find(&wire, "grant", |it| it.from == 1 && format::ctrl(it, format::GRANT));
                wire.deliver(g.id)?;
                r0.pending("before its write completed");
                let w = find(&wire, "zero-copy write", |it| it.from == 0 && format::zcopy(it));
                assert_eq!(w.len, big.len() * 4);
                r1.pending("before the data came");
                r0.pending("before its write completed");
                wire.deliver(w.id)?;
                r1.finished("after the data came");
                r0.finished("after its write completed");
                Ok(())
            })
        })
        .unwrap();
        check("receiver", &b1, &big);
        counters("root", &c0.stats(), &[("zcopy_msgs", 1), ("zcopy_bytes", 40_000), ("zcopy_copy_bytes", 0)]);
        counters("receiver", &c1.stats(), &[("grants", 1), ("eager_copy_bytes", 0)]);
    });
}

/// Recursive doubling, p = 4, eager: everything between ranks 0 and 1 is held, so rank 0's
/// step-2 Recv (from rank 2, into the scratch its step-1 reduction still needs) cannot be ready
/// when rank 2's step-2 data arrives; that data waits in its slot until it is.
#[test]
fn eager_data_before_the_receivers_step_is_ready_waits_in_its_slot() {
    watchdog(Duration::from_secs(20), || {
        let (wire, comms) = job(WireConfig::default(), vec![cfg(); 4]);
        let n = 16;
        let xs: Vec<Vec<i64>> = (0..4).map(|r| (0..n).map(|i| (r * 100 + i) as i64).collect()).collect();
        let mut ys: Vec<Vec<i64>> = vec![vec![0; n]; 4];
        let [y0, y1, y2, y3] = &mut ys[..] else { unreachable!() };
        let rd = Options::algorithm("recursive_doubling");
        let held = |it: &Item| it.from < 2 && it.to < 2;
        comms[0]
            .scope(|s0| {
                comms[1].scope(|s1| {
                    comms[2].scope(|s2| {
                        comms[3].scope(|s3| {
                            s0.set_options(rd.clone());
                            s1.set_options(rd.clone());
                            s2.set_options(rd.clone());
                            s3.set_options(rd.clone());
                            let sum = ReduceOp::Sum;
                            let mut reqs = [
                                Req::new("rank 0", s0.allreduce(&xs[0], y0, &sum)?),
                                Req::new("rank 1", s1.allreduce(&xs[1], y1, &sum)?),
                                Req::new("rank 2", s2.allreduce(&xs[2], y2, &sum)?),
                                Req::new("rank 3", s3.allreduce(&xs[3], y3, &sum)?),
                            ];
                            let from2 = |it: &Item| it.from == 2 && it.to == 0 && format::eager(it);
                            let t = Instant::now();
                            while !wire.delivered().iter().any(from2) {
                                wire.deliver_matching(|it| !held(it));
                                reqs.iter_mut().for_each(|r| {
                                    r.poll();
                                });
                                assert!(
                                    t.elapsed() < Duration::from_secs(5),
                                    "rank 2's data never came: {:?}",
                                    wire.in_flight()
                                );
                            }
                            reqs[0].pending("without rank 1's data");
                            reqs[1].pending("without rank 0's data");
                            assert!(wire.in_flight().iter().all(held), "only 0 <-> 1 is held: {:?}", wire.in_flight());
                            drive(&wire, || reqs.iter_mut().map(Req::poll).fold(true, |a, b| a & b));
                            Ok(())
                        })
                    })
                })
            })
            .unwrap();
        let want: Vec<i64> = (0..n).map(|i| (0..4).map(|r| xs[r][i]).sum()).collect();
        for (r, y) in ys.iter().enumerate() {
            check(&format!("rank {r}"), y, &want);
        }
        for (r, c) in comms.iter().enumerate() {
            let s = c.stats();
            counters(&format!("rank {r}"), &s, &[("eager_msgs", 2), ("zcopy_msgs", 0), ("rts_msgs", 0), ("grants", 0)]);
        }
    });
}

/// Rank 0 starts four small bcasts with two eager slots at rank 1: two go eager, two by RTS.
/// Rank 1 gets the RTS before it starts those collectives (kept), grants at their start; its
/// credits reach rank 0 only after it fell back (behind the grants); a fifth bcast goes eager.
#[test]
fn credit_starvation_falls_back_to_rendezvous_and_eager_resumes() {
    watchdog(Duration::from_secs(20), || {
        let starved = ExecConfig { slots: 2, credit_fraction: 1, ..cfg() };
        let (wire, comms) = job(WireConfig::default(), vec![starved.clone(), starved]);
        let (c0, c1) = (&comms[0], &comms[1]);
        let data: Vec<Vec<u16>> = (0..5u16).map(|k| (0..30).map(|i| k * 100 + i).collect()).collect();
        let mut at0 = data.clone();
        let mut at1: Vec<Vec<u16>> = vec![vec![0; 30]; 5];
        c0.scope(|s0| {
            c1.scope(|s1| {
                s0.set_options(binomial());
                s1.set_options(binomial());
                let (first0, last0) = at0.split_at_mut(4);
                let (first1, last1) = at1.split_at_mut(4);
                let mut roots = Vec::new();
                for (k, b) in first0.iter_mut().enumerate() {
                    roots.push(Req::new(["root #0", "root #1", "root #2", "root #3"][k], s0.bcast(b, 0)?));
                }
                let items = wire.in_flight();
                let eager: Vec<Option<u64>> = items.iter().filter(|it| format::eager(it)).map(format::seq).collect();
                let rts: Vec<Option<u64>> =
                    items.iter().filter(|it| format::ctrl(it, format::RTS)).map(format::seq).collect();
                assert_eq!((eager, rts, items.len()), (vec![Some(0), Some(1)], vec![Some(2), Some(3)], 4), "{items:?}");
                assert_eq!(wire.deliver_all(), 4);
                let mut recv = Vec::new();
                let mut bufs = first1.iter_mut();
                recv.push(Req::new("receiver #0", s1.bcast(bufs.next().unwrap(), 0)?));
                recv[0].finished("after its data came");
                recv.push(Req::new("receiver #1", s1.bcast(bufs.next().unwrap(), 0)?));
                recv[1].finished("at its first test (its data came before)");
                recv.push(Req::new("receiver #2", s1.bcast(bufs.next().unwrap(), 0)?));
                recv.push(Req::new("receiver #3", s1.bcast(bufs.next().unwrap(), 0)?));
                let back: Vec<u8> = wire
                    .in_flight()
                    .iter()
                    .map(|it| match () {
                        _ if format::ctrl(it, format::CREDIT) => b'C',
                        _ if format::ctrl(it, format::GRANT) => b'G',
                        _ => b'?',
                    })
                    .collect();
                assert_eq!(back, b"CGG", "credits, then a grant per kept RTS: {:?}", wire.in_flight());
                wire.deliver_all();
                roots.iter_mut().for_each(|r| {
                    r.poll();
                });
                assert_eq!(
                    wire.in_flight().iter().filter(|it| it.from == 0 && format::zcopy(it)).count(),
                    2,
                    "the granted messages go zero-copy: {:?}",
                    wire.in_flight()
                );
                drive(&wire, || roots.iter_mut().chain(recv.iter_mut()).map(Req::poll).fold(true, |a, b| a & b));
                // The credits came back: the next message goes eager again.
                let mut r4 = Req::new("root #4", s0.bcast(&mut last0[0], 0)?);
                find(&wire, "eager write of #4", |it| format::eager(it) && format::seq(it) == Some(4));
                let mut q4 = Req::new("receiver #4", s1.bcast(&mut last1[0], 0)?);
                drive(&wire, || all(&[r4.poll(), q4.poll()]));
                Ok(())
            })
        })
        .unwrap();
        for (k, got) in at1.iter().enumerate() {
            check(&format!("receiver #{k}"), got, &data[k]);
        }
        counters("root", &c0.stats(), &[("eager_msgs", 3), ("rts_msgs", 2), ("zcopy_msgs", 2), ("grants", 0)]);
        counters("receiver", &c1.stats(), &[("grants", 2), ("rts_msgs", 0), ("eager_copy_bytes", 3 * 60)]);
    });
}

/// One eager slot: rank 0's bcast #1 goes by RTS; once the credit of #0 is back, #2 goes eager.
/// #2's data overtakes #1's RTS (same pair, sent after it) and waits at rank 1 until #2 starts
/// there; #1 then completes by grant and zero-copy write.
#[test]
fn a_rendezvous_crossing_an_eager_message_of_the_same_pair() {
    watchdog(Duration::from_secs(20), || {
        let one = ExecConfig { slots: 1, credit_fraction: 1, ..cfg() };
        let (wire, comms) = job(WireConfig::default(), vec![one.clone(), one]);
        let (c0, c1) = (&comms[0], &comms[1]);
        let data: Vec<Vec<u8>> =
            (0..3u8).map(|k| (0..50).map(|i| k.wrapping_mul(77).wrapping_add(i)).collect()).collect();
        let mut at0 = data.clone();
        let mut at1: Vec<Vec<u8>> = vec![vec![0; 50]; 3];
        c0.scope(|s0| {
            c1.scope(|s1| {
                s0.set_options(binomial());
                s1.set_options(binomial());
                let [a0, b0, e0] = &mut at0[..] else { unreachable!() };
                let [a1, b1, e1] = &mut at1[..] else { unreachable!() };
                let mut r0 = [Req::new("root #0", s0.bcast(a0, 0)?), Req::new("root #1", s0.bcast(b0, 0)?)];
                let rts = find(&wire, "RTS of #1", |it| format::ctrl(it, format::RTS) && format::seq(it) == Some(1));
                let mut q0 = Req::new("receiver #0", s1.bcast(a1, 0)?);
                let mut q1 = Req::new("receiver #1", s1.bcast(b1, 0)?);
                let e = find(&wire, "eager write of #0", |it| format::eager(it) && format::seq(it) == Some(0));
                wire.deliver(e.id)?;
                q0.finished("after its data came");
                let credit = find(&wire, "credit", |it| format::ctrl(it, format::CREDIT));
                wire.deliver(credit.id)?;
                r0[0].finished("after its write completed and its credit came");
                let mut r2 = Req::new("root #2", s0.bcast(e0, 0)?);
                let eager2 = find(&wire, "eager write of #2", |it| format::eager(it) && format::seq(it) == Some(2));
                assert!(eager2.id > rts.id, "#2 was sent after #1's RTS");
                wire.deliver(eager2.id)?;
                q1.pending("with #2's data only");
                wire.deliver(rts.id)?;
                q1.pending("before the zero-copy write");
                let g = find(&wire, "grant of #1", |it| format::ctrl(it, format::GRANT) && format::seq(it) == Some(1));
                wire.deliver(g.id)?;
                r0[1].pending("before its write completed");
                let w = find(&wire, "zero-copy write of #1", format::zcopy);
                wire.deliver(w.id)?;
                q1.finished("after the zero-copy write");
                let mut q2 = Req::new("receiver #2", s1.bcast(e1, 0)?);
                q2.finished("at its first test (its data came before)");
                drive(&wire, || all(&[r0[1].poll(), r2.poll()]));
                Ok(())
            })
        })
        .unwrap();
        for (k, got) in at1.iter().enumerate() {
            check(&format!("receiver #{k}"), got, &data[k]);
        }
        counters("root", &c0.stats(), &[("eager_msgs", 2), ("rts_msgs", 1), ("zcopy_msgs", 1)]);
        counters("receiver", &c1.stats(), &[("grants", 1), ("eager_copy_bytes", 100)]);
    });
}

/// Results of rank threads, gathered with a deadline.
struct Ranks<R> {
    rx: mpsc::Receiver<(usize, std::thread::Result<R>, Duration)>,
    got: Vec<Option<(R, Duration)>>,
}

/// Runs `f` on a thread per communicator; each result comes with the time its rank took.
fn spawn_ranks<R: Send + 'static>(
    comms: Vec<Communicator>,
    f: impl Fn(&Communicator) -> R + Send + Sync + 'static,
) -> Ranks<R> {
    let f = Arc::new(f);
    let (tx, rx) = mpsc::channel();
    let n = comms.len();
    for (r, c) in comms.into_iter().enumerate() {
        let (f, tx) = (f.clone(), tx.clone());
        std::thread::spawn(move || {
            let t = Instant::now();
            let out = catch_unwind(AssertUnwindSafe(|| f(&c)));
            let _ = tx.send((r, out, t.elapsed()));
        });
    }
    Ranks { rx, got: (0..n).map(|_| None).collect() }
}

impl<R> Ranks<R> {
    /// Takes the results that came; whether every rank has returned.
    fn all_returned(&mut self) -> bool {
        while let Ok((r, out, t)) = self.rx.try_recv() {
            match out {
                Ok(v) => self.got[r] = Some((v, t)),
                Err(p) => resume_unwind(p),
            }
        }
        self.got.iter().all(Option::is_some)
    }

    /// Every rank's result; fails the test if one has not returned within `bound` from now.
    fn join(mut self, bound: Duration) -> Vec<(R, Duration)> {
        let t = Instant::now();
        while !self.all_returned() {
            let missing: Vec<usize> = (0..self.got.len()).filter(|&r| self.got[r].is_none()).collect();
            assert!(t.elapsed() < bound, "rank(s) {missing:?} did not return within {bound:?}");
            std::thread::sleep(Duration::from_millis(1));
        }
        self.got.into_iter().map(|g| g.expect("all returned")).collect()
    }
}

/// Rank 1 is out of eager slots at rank 0 (its bcast #0's data there is held), so its blocking
/// allreduce #1 starts straight, finds no slot for its first Send and is handed over at once: the
/// op sends an RTS. Rank 0's allreduce #1 runs straight and meets that RTS in its first poll: the
/// call is handed over to the engine, which grants, and the data comes zero-copy.
#[test]
fn an_rts_hands_a_straight_call_over_to_the_engine() {
    watchdog(Duration::from_secs(20), || {
        // No progress thread: with the bcast in flight it could poll the RTS before rank 0's
        // allreduce starts, which then begins in the engine instead of straight (a CI run saw
        // straight_calls 0 on rank 0).
        let one = ExecConfig { slots: 1, credit_fraction: 1, progress_thread: false, ..cfg() };
        let (wire, comms) = job(WireConfig::default(), vec![one.clone(), one]);
        let (go, gate) = mpsc::channel::<()>();
        let gate = std::sync::Mutex::new(gate);
        let ranks = spawn_ranks(comms, move |c| {
            let r = c.rank();
            if r == 0 {
                gate.lock().unwrap().recv_timeout(Duration::from_secs(5)).expect("go");
            }
            let mut b = if r == 1 { vec![5u64, 6, 7] } else { vec![0u64; 3] };
            let x: Vec<u64> = (0..8).map(|i| i * 10 + u64::from(r)).collect();
            let mut y = vec![0u64; 8];
            c.scope(|s| {
                s.set_options(binomial());
                let q = s.bcast(&mut b, 1)?;
                c.with(&Options::algorithm("recursive_doubling")).allreduce(&x, &mut y, &ReduceOp::Sum)?;
                q.wait()
            })
            .unwrap();
            (b, y, c.stats())
        });
        let rts = await_item(&wire, "rank 1's RTS", |it| it.from == 1 && format::ctrl(it, format::RTS));
        assert_eq!(format::seq(&rts), Some(1));
        wire.deliver(rts.id).unwrap();
        go.send(()).unwrap();
        await_item(&wire, "rank 0's straight eager write", |it| {
            it.from == 0 && format::eager(it) && format::seq(it) == Some(1)
        });
        wire.set_auto(true);
        let out = ranks.join(Duration::from_secs(10));
        let want: Vec<u64> = (0..8).map(|i| 2 * i * 10 + 1).collect();
        for (r, ((b, y, _), _)) in out.iter().enumerate() {
            check(&format!("rank {r} bcast"), b, &[5, 6, 7]);
            check(&format!("rank {r} allreduce"), y, &want);
        }
        let (s0, s1) = (&out[0].0 .2, &out[1].0 .2);
        counters("rank 0", s0, &[("straight_calls", 1), ("handovers", 1), ("grants", 1), ("eager_msgs", 1)]);
        counters(
            "rank 1",
            s1,
            &[("straight_calls", 1), ("handovers", 1), ("rts_msgs", 1), ("zcopy_msgs", 1), ("eager_msgs", 1)],
        );
    });
}

/// One item in flight per pair: every second message meets `Busy` and is retried while the wire
/// is drained one item at a time.
#[test]
fn busy_writes_and_control_messages_are_retried() {
    watchdog(Duration::from_secs(30), || {
        // Writes complete on return: a rank reduces (and returns the slot's credit) while its
        // own write may still be on the wire.
        let wire_cfg = WireConfig { max_in_flight: 1, inline_completion: usize::MAX, ..WireConfig::default() };
        let small_slots = ExecConfig { slots: 2, credit_fraction: 2, ..cfg() };
        let (wire, comms) = job(wire_cfg, vec![small_slots.clone(), small_slots]);
        let ranks = spawn_ranks(comms, |c| {
            let rd = Options::algorithm("recursive_doubling");
            let mut out = Vec::new();
            for k in 0..6u32 {
                let x: Vec<u32> = (0..5).map(|i| k * 1000 + i + c.rank() * 7).collect();
                let mut y = vec![0u32; 5];
                c.with(&rd).allreduce(&x, &mut y, &ReduceOp::Sum).unwrap();
                out.push(y);
            }
            (out, c.stats())
        });
        let mut ranks = ranks;
        let t = Instant::now();
        while !ranks.all_returned() {
            // Deliver the oldest item once a sender hit the limit (or after 5 ms).
            let total = || {
                let b = wire.busy_refusals();
                b.writes + b.ctrl
            };
            let seen = total();
            let waited = Instant::now();
            while total() == seen && waited.elapsed() < Duration::from_millis(5) {
                std::thread::sleep(Duration::from_micros(100));
            }
            if let Some(it) = wire.in_flight().first() {
                wire.deliver(it.id).unwrap();
            }
            assert!(
                t.elapsed() < Duration::from_secs(15),
                "the ranks did not finish; in flight {:?}",
                wire.in_flight()
            );
        }
        let out = ranks.join(Duration::ZERO);
        for (r, ((ys, stats), _)) in out.iter().enumerate() {
            for (k, y) in ys.iter().enumerate() {
                let k = k as u32;
                let want: Vec<u32> = (0..5).map(|i| 2 * (k * 1000 + i) + 7).collect();
                check(&format!("rank {r} call {k}"), y, &want);
            }
            // Every message goes eager, or by rendezvous when a credit is still held up.
            let by_rts = stats.rts_msgs;
            counters(&format!("rank {r}"), stats, &[("eager_msgs", 6 - by_rts), ("zcopy_msgs", by_rts)]);
        }
        let busy = wire.busy_refusals();
        assert!(busy.writes > 0 && busy.ctrl > 0, "the in-flight limit was not reached: {busy:?}");
    });
}

/// Ring allreduce, p = 3: rank 1's messages are held after its first one. Rank 0 (timeout
/// 0.3 s) gives up first; its abort notice sets the others' grace periods going. Ranks 0 and 2,
/// which hear each other, name rank 1; rank 1 (heard by nobody) ends with a timeout too; all
/// return long before the others' own 3 s deadline, and the communicators are broken.
#[test]
fn an_abort_mid_call_names_the_silent_rank_everywhere() {
    watchdog(Duration::from_secs(30), || {
        let (wire, comms) = job_with_timeouts(Duration::from_millis(300), Duration::from_secs(3), 3);
        let ranks = spawn_ranks(comms, |c| {
            let x = vec![f64::from(c.rank()) + 1.0; 30];
            let mut y = vec![0f64; 30];
            let first = c.with(&Options::algorithm("ring")).allreduce(&x, &mut y, &ReduceOp::Sum);
            let again = c.allreduce(&x, &mut y, &ReduceOp::Sum);
            (first, again)
        });
        let (stop, stopped) = mpsc::channel::<()>();
        let w = wire.clone();
        let controller = std::thread::spawn(move || {
            let mut passed = 0;
            while stopped.try_recv().is_err() {
                w.deliver_matching(|it| {
                    let pass = it.from != 1 || (it.is_write() && passed == 0);
                    if it.from == 1 && pass {
                        passed += 1;
                    }
                    pass
                });
                w.wait_for(Duration::from_millis(2), |it| it.from != 1);
            }
        });
        let out = ranks.join(Duration::from_secs(10));
        stop.send(()).unwrap();
        controller.join().unwrap();
        for (r, ((first, again), took)) in out.iter().enumerate() {
            match first {
                Err(Error::Timeout { waiting_for, .. }) if r != 1 => {
                    assert_eq!(waiting_for, &[1], "rank {r}: {first:?}")
                }
                // It heard both peers' notices, so it blames whom it waited for itself.
                Err(Error::Timeout { waiting_for, .. }) => {
                    assert!(!waiting_for.is_empty() && !waiting_for.contains(&1), "rank 1: {first:?}")
                }
                other => panic!("rank {r}: expected a timeout, got {other:?}"),
            }
            assert!(
                *took < Duration::from_millis(2900),
                "rank {r} took {took:?}: its own deadline, not the abort, ended it"
            );
            assert!(matches!(again, Err(Error::Broken(_))), "rank {r} after the abort: {again:?}");
        }
        assert!(out[0].1 >= Duration::from_millis(300), "rank 0 gave up before its timeout: {:?}", out[0].1);
    });
}

/// Rank 2 is gone before the call, and ranks 0 and 1 each wait only for the other: recursive
/// doubling at p = 3 first folds rank 0 into rank 1, and rank 0's message is held. Rank 1 (timeout
/// 0.3 s) gives up waiting for rank 0, and its abort notice opens rank 0's grace period; neither
/// has written to rank 2. Both name rank 2, which their endpoints know is gone (`peer_gone`), not
/// each other (the shape of a flake of `fault_procs::tcp_dies_in_zero_copy_calls`).
#[test]
fn ranks_waiting_for_each_other_name_the_peer_their_fabric_knows_is_gone() {
    watchdog(Duration::from_secs(30), || {
        let short = ExecConfig { timeout: Duration::from_millis(300), ..cfg() };
        let long = ExecConfig { timeout: Duration::from_secs(3), ..cfg() };
        let (wire, mut comms) = job(WireConfig::default(), vec![long.clone(), short, long]);
        wire.kill(2).unwrap();
        comms.truncate(2);
        let ranks = spawn_ranks(comms, |c| {
            let x = vec![f64::from(c.rank()) + 1.0; 30];
            let mut y = vec![0f64; 30];
            c.with(&Options::algorithm("recursive_doubling")).allreduce(&x, &mut y, &ReduceOp::Sum)
        });
        let (stop, stopped) = mpsc::channel::<()>();
        let w = wire.clone();
        // Everything but rank 0's data goes through: the abort notices do.
        let controller = std::thread::spawn(move || {
            while stopped.try_recv().is_err() {
                w.deliver_matching(|it| it.from != 0 || it.is_ctrl());
                w.wait_for(Duration::from_millis(2), |it| it.from != 0 || it.is_ctrl());
            }
        });
        let out = ranks.join(Duration::from_secs(10));
        stop.send(()).unwrap();
        controller.join().unwrap();
        for (r, (res, took)) in out.iter().enumerate() {
            match res {
                Err(Error::PeerLost { peers, .. }) => assert_eq!(peers, &[2], "rank {r}: {res:?}"),
                other => panic!("rank {r}: expected PeerLost naming rank 2, got {other:?}"),
            }
            assert!(*took < Duration::from_millis(2900), "rank {r} took {took:?}: its own deadline ended it");
        }
    });
}

/// Ring allreduce, p = 4, eager, completion on delivery: the step-1 messages are delivered,
/// then rank 2 is killed with the step-2 messages in flight. Rank 1's write to it fails
/// (PeerLost); ranks 0 and 3 hear the abort notices and time out; all name rank 2 within a bound.
#[test]
fn a_peer_killed_between_steps_is_named_by_the_live_ranks() {
    watchdog(Duration::from_secs(30), || {
        let cfg = ExecConfig { timeout: Duration::from_secs(1), ..cfg() };
        let (wire, comms) = job(WireConfig::default(), vec![cfg; 4]);
        let ranks = spawn_ranks(comms, |c| {
            let x: Vec<i32> = (0..40).map(|i| i + c.rank() as i32).collect();
            let mut y = vec![0i32; 40];
            c.with(&Options::algorithm("ring")).allreduce(&x, &mut y, &ReduceOp::Sum)
        });
        // Step 1: every rank's first message (index 0), and nothing else.
        let first = |it: &Item| it.is_ctrl() || format::idx(it) == Some(0);
        let t = Instant::now();
        while wire.delivered().iter().filter(|it| format::idx(it) == Some(0)).count() < 4 {
            wire.deliver_matching(first);
            wire.wait_for(Duration::from_millis(2), first);
            assert!(t.elapsed() < Duration::from_secs(5), "step 1 did not happen; in flight {:?}", wire.in_flight());
        }
        await_item(&wire, "rank 1's step-2 message", |it| it.from == 1 && format::idx(it) == Some(1));
        wire.kill(2).unwrap();
        wire.set_auto(true);
        let out = ranks.join(Duration::from_secs(5));
        for (r, (res, took)) in out.iter().enumerate() {
            assert!(*took < Duration::from_secs(4), "rank {r} took {took:?}");
            if r == 2 {
                assert!(res.is_err(), "the killed rank's call cannot succeed");
                continue;
            }
            match res {
                Err(Error::PeerLost { peers, .. }) => assert_eq!(peers, &[2], "rank {r}: {res:?}"),
                Err(Error::Timeout { waiting_for, .. }) => assert_eq!(waiting_for, &[2], "rank {r}: {res:?}"),
                other => panic!("rank {r}: expected PeerLost or Timeout naming rank 2, got {other:?}"),
            }
        }
        assert!(matches!(out[1].0, Err(Error::PeerLost { .. })), "rank 1 wrote to the dead rank: {:?}", out[1].0);
    });
}

/// Receives from any source while peers die: a probe of a killed rank, and one of any rank once
/// every other is killed, end with PeerLost naming them well before the timeout; a message the
/// dead rank sent first is still found and received.
#[test]
fn a_probe_of_ranks_that_are_gone_names_them() {
    watchdog(Duration::from_secs(30), || {
        let (wire, mut comms) = job_with_timeouts(Duration::from_secs(4), Duration::from_secs(4), 3);
        wire.set_auto(true);
        comms[1].send(&[7u32; 4], 0, 5).unwrap();
        wire.kill(1).unwrap();
        wire.kill(2).unwrap();
        let c = comms.swap_remove(0);
        let found = c.probe(None, None).unwrap();
        assert_eq!((found.source, found.tag), (1, 5), "what rank 1 sent before it died");
        let mut got = [0u32; 4];
        c.recv(&mut got, 1, 5).unwrap();
        assert_eq!(got, [7; 4]);
        let t = Instant::now();
        match c.probe(Some(2), None) {
            Err(Error::PeerLost { peers, .. }) => assert_eq!(peers, [2]),
            other => panic!("probing the dead rank 2: {other:?}"),
        }
        match c.probe(None, Some(5)) {
            Err(Error::PeerLost { peers, .. }) => assert_eq!(peers, [1, 2]),
            other => panic!("probing any rank with every other dead: {other:?}"),
        }
        assert!(
            t.elapsed() < Duration::from_secs(2),
            "took {:?}: the timeout, not the deaths, ended them",
            t.elapsed()
        );
    });
}
