//! Seeded random stress over the in-memory pair wire (`fabcoll_fabric::pair`) delivered in a
//! random order: the calls of `tests/stress` (every collective, forced algorithms, batches of
//! overlapping nonblocking calls) while a deliverer thread picks which message lands next. Writes
//! land in any order, control messages of a pair in send order (what the wire, like the fabrics,
//! keeps); each job draws its own executor settings (eager limit, slots, credit batch) and wire
//! settings (writes complete on return or on delivery, an in-flight limit that makes the fabric
//! answer `Busy`), so the races of `tests/exec_races.rs` come in orders no test wrote down.
//! Two more runs on such wires: tagged transfers interleaved with collectives on a communicator
//! and its dup, and a rank killed at a random moment of the stress, whom every live rank must
//! name in its error.
//!
//! `FABCOLL_STRESS_SEED` replays a failure (the seed also draws the delivery order, though thread
//! timing makes a replay approximate); `FABCOLL_STRESS_CALLS` makes it a soak run. Each call is
//! bounded by the executor's timeout and each job by a watchdog, so a hang is an error.

mod common;
mod stress;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Duration;

use fabcoll::{Collectives, Communicator, ExecConfig};
use fabcoll_fabric::pair::{Item, Wire, WireConfig};
use stress::Rng;

/// The settings a job draws: small eager slots so that zero-copy, rendezvous and credit
/// starvation all occur, and a wire that completes writes early or late and may refuse work.
fn draw(rng: &mut Rng) -> (ExecConfig, WireConfig, String) {
    let eager = [64, 256, 4096][rng.below(3)];
    let slots = [1, 2, 8][rng.below(3)];
    let credit_fraction = [1, 2, 4][rng.below(3)];
    let cfg = ExecConfig {
        eager_threshold: eager,
        crowded_eager: 0,
        slot_size: eager,
        slots,
        ring_budget: 0,
        credit_fraction,
        timeout: Duration::from_secs(20),
        ..ExecConfig::default()
    };
    let inline_completion = [0, 512, usize::MAX][rng.below(3)];
    let max_in_flight = [usize::MAX, 4, 1][rng.below(3)];
    let wire = WireConfig { inline_completion, max_in_flight, auto: false };
    let what = format!(
        "eager {eager} B, {slots} slots, credit fraction {credit_fraction}, writes complete inline up to \
         {inline_completion} B, {max_in_flight} in flight per pair"
    );
    (cfg, wire, what)
}

/// Communicators over a wire that delivers everything while they set up (the eager rings'
/// announcements), then holds what is issued for the deliverer.
fn job(p: usize, cfg: &ExecConfig, wire_cfg: WireConfig) -> (Wire, Vec<Communicator>) {
    let wire = Wire::with_config(p, WireConfig { auto: true, ..wire_cfg }).unwrap();
    let hs: Vec<_> = wire
        .endpoints()
        .unwrap()
        .into_iter()
        .map(|ep| {
            let cfg = cfg.clone();
            std::thread::spawn(move || Communicator::from_endpoint(Box::new(ep), cfg))
        })
        .collect();
    let comms = hs.into_iter().map(|h| h.join().expect("set-up panicked").expect("set-up failed")).collect();
    wire.set_auto(false);
    (wire, comms)
}

/// The items that may land now: any write, and the oldest control message of each pair.
fn deliverable(flights: &[Item]) -> Vec<Item> {
    let mut held: Vec<(usize, usize)> = Vec::new();
    let mut out = Vec::new();
    for it in flights {
        if it.is_ctrl() {
            if held.contains(&(it.from, it.to)) {
                continue;
            }
            held.push((it.from, it.to));
        }
        out.push(*it);
    }
    out
}

/// Delivers items in a random order until `stop`: one at a time, now and then several at once or
/// the newest first; how many it delivered.
fn deliverer(wire: Wire, seed: u64, stop: Arc<AtomicBool>) -> JoinHandle<u64> {
    std::thread::spawn(move || {
        let mut rng = Rng::new(seed);
        let mut n = 0;
        while !stop.load(Ordering::Relaxed) {
            let ready = deliverable(&wire.in_flight());
            if ready.is_empty() {
                wire.wait_for(Duration::from_millis(2), |_| true);
                continue;
            }
            let burst = if rng.below(8) == 0 { ready.len() } else { 1 };
            let mut ready = ready;
            for _ in 0..burst {
                let pick = match rng.below(4) {
                    0 => ready.len() - 1,
                    _ => rng.below(ready.len()),
                };
                let it = ready.swap_remove(pick);
                // The item may have left the wire meanwhile (a killed rank's messages are dropped).
                if wire.deliver(it.id).is_ok() {
                    n += 1;
                }
                if ready.is_empty() {
                    break;
                }
            }
            if rng.below(16) == 0 {
                std::thread::yield_now();
            }
        }
        n
    })
}

/// Runs `f` on every rank of a job of `p` ranks over a randomly delivering wire whose settings
/// are drawn from `seed` and `salt`: the settings drawn and the items delivered, or every failed
/// rank's error.
fn on_random_wire(
    p: usize,
    seed: u64,
    salt: u64,
    f: impl Fn(&Communicator) -> Result<(), String> + Sync,
) -> Result<(String, u64), String> {
    let mut rng = Rng::new(seed ^ salt ^ (p as u64).wrapping_mul(0x5851_f42d_4c95_7f2d));
    let (cfg, wire_cfg, what) = draw(&mut rng);
    let (wire, comms) = job(p, &cfg, wire_cfg);
    let stop = Arc::new(AtomicBool::new(false));
    let d = deliverer(wire, rng.next(), stop.clone());
    let res = common::local_job(comms, f);
    stop.store(true, Ordering::Relaxed);
    let delivered = d.join().expect("deliverer panicked");
    res.map(|()| (what.clone(), delivered)).map_err(|e| format!("{what}:\n{e}"))
}

/// Element `i` of message `n` from `src` (distinct per message and position).
fn pattern(src: u32, n: usize, i: usize) -> i64 {
    ((src as i64) << 40) ^ ((n as i64) << 24) ^ i as i64
}

/// Tagged transfers and collectives interleaved on a communicator and its dup, every rank drawing
/// the same sequence from `seed`: rounds in which each rank sends `m` messages to the rank `k`
/// places to its right and receives as many from its left (sizes across the eager limit and
/// zero-copy, all nonblocking, finished in a drawn order; or the sends nonblocking and the
/// receives from any source), and runs of the stress calls.
fn transfers_and_collectives(c: &Communicator, seed: u64, rounds: usize) -> Result<(), String> {
    let dup = c.dup().map_err(|e| e.to_string())?;
    let (me, p) = (c.rank(), c.size());
    let mut rng = Rng::new(seed);
    let mut sent = 0;
    for round in 0..rounds {
        let on = if rng.below(2) == 0 { c } else { &dup };
        if rng.below(3) == 0 {
            stress::run(on, rng.next(), 1 + rng.below(4))?;
            continue;
        }
        let k = 1 + rng.below(p as usize - 1) as u32;
        let (right, left) = ((me + k) % p, (me + p - k) % p);
        let mut tag = rng.below(4) as u32;
        let lens: Vec<usize> =
            (0..1 + rng.below(4)).map(|_| [0, 1, 7, 100, 1000, 9000, 100_003][rng.below(7)]).collect();
        let outs: Vec<Vec<i64>> =
            lens.iter().enumerate().map(|(j, &n)| (0..n).map(|i| pattern(me, sent + j, i)).collect()).collect();
        let mut ins: Vec<Vec<i64>> = lens.iter().map(|&n| vec![-1; n]).collect();
        let order = rng.next();
        let any_source = rng.below(3) == 0;
        if any_source {
            // Ranks run ahead into later rounds: a tag of this round's own keeps their messages
            // from matching here.
            tag = 1000 + round as u32;
        }
        on.scope(|s| {
            if any_source {
                // Every send first, then each message received from any source (its sender is
                // the only rank sending to this one with the round's tag).
                let sends: Vec<_> = outs.iter().map(|o| s.send(o, right, tag)).collect::<Result<_, _>>()?;
                for b in ins.iter_mut() {
                    let from = match b.is_empty() {
                        true => s.comm().recv(b, left, tag).map(|()| left)?,
                        false => s.comm().recv_any(b, tag)?,
                    };
                    if from != left {
                        let msg = format!("a receive from any source took rank {from}'s message, not {left}'s");
                        return Err(fabcoll::Error::Protocol(msg));
                    }
                }
                return sends.into_iter().try_for_each(|q| q.wait());
            }
            let mut reqs = Vec::new();
            for (o, b) in outs.iter().zip(ins.iter_mut()) {
                reqs.push(s.recv(b, left, tag)?);
                reqs.push(s.send(o, right, tag)?);
            }
            let turn = (order as usize + me as usize) % reqs.len();
            reqs.rotate_left(turn);
            for q in reqs {
                q.wait()?;
            }
            Ok(())
        })
        .map_err(|e| format!("rank {me}, round {round} (shift {k}, lengths {lens:?}): {e}"))?;
        for (j, b) in ins.iter().enumerate() {
            if let Some((i, v)) = b.iter().enumerate().find(|&(i, &v)| v != pattern(left, sent + j, i)) {
                return Err(format!("rank {me}, round {round}: message {j} from {left}, element {i} is {v:#x}"));
            }
        }
        sent += lens.len();
    }
    Ok(())
}

/// Runs `job(p)` for every `p` of `ps` in turn on a thread of its own; fails the test on an error,
/// or when a job has not finished within 120 s.
fn each_size(seed: u64, ps: &'static [usize], job: impl Fn(usize) -> Result<(), String> + Send + 'static) {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for &p in ps {
            if tx.send(job(p)).is_err() {
                return;
            }
        }
    });
    for &p in ps {
        match rx.recv_timeout(Duration::from_secs(120)) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => panic!("p={p}, FABCOLL_STRESS_SEED={seed}: {e}"),
            Err(_) => panic!("p={p}, FABCOLL_STRESS_SEED={seed}: the job did not finish within 120 s"),
        }
    }
}

#[test]
fn transfers_and_collectives_on_two_communicators_in_random_order() {
    let seed = stress::seed();
    let rounds = stress::calls(40);
    eprintln!("transfers on the pair wire: FABCOLL_STRESS_SEED={seed} FABCOLL_STRESS_CALLS={rounds}");
    each_size(seed, &[2, 3, 4], move |p| {
        on_random_wire(p, seed, 0x7432, |c| transfers_and_collectives(c, seed, rounds)).map(|_| ())
    });
}

#[test]
fn random_collectives_over_a_wire_delivering_in_random_order() {
    let seed = stress::seed();
    let calls = stress::calls(60);
    eprintln!("stress on the pair wire: FABCOLL_STRESS_SEED={seed} FABCOLL_STRESS_CALLS={calls}");
    each_size(seed, &[2, 3, 4], move |p| {
        let t = std::time::Instant::now();
        let (what, n) = on_random_wire(p, seed, 0, |c| stress::run(c, seed, calls).map(|_| ()))?;
        eprintln!("p={p}: {calls} calls verified in {:.1?} ({what}; {n} items delivered)", t.elapsed());
        Ok(())
    });
}

/// Runs stress calls until one fails; the failure.
fn until_error(c: &Communicator, seed: u64) -> String {
    for call in 0..100_000u64 {
        if let Err(e) = stress::run(c, seed ^ call.wrapping_mul(0x9e37_79b9_7f4a_7c15), 1) {
            return e;
        }
    }
    "every call succeeded".into()
}

#[test]
fn a_rank_killed_at_a_random_moment_is_named_by_every_live_rank() {
    let seed = stress::seed();
    eprintln!("kill on the pair wire: FABCOLL_STRESS_SEED={seed}");
    for p in [3usize, 4] {
        let mut rng = Rng::new(seed ^ 0x6b69_6c6c ^ p as u64);
        let (cfg, wire_cfg, what) = draw(&mut rng);
        let cfg = ExecConfig { timeout: Duration::from_secs(2), ..cfg };
        let (wire, comms) = job(p, &cfg, wire_cfg);
        let stop = Arc::new(AtomicBool::new(false));
        let d = deliverer(wire.clone(), rng.next(), stop.clone());
        let (tx, rx) = mpsc::channel();
        for c in comms {
            let tx = tx.clone();
            std::thread::spawn(move || {
                let t = std::time::Instant::now();
                let e = until_error(&c, seed);
                let _ = tx.send((c.rank() as usize, e, t.elapsed()));
            });
        }
        let victim = rng.below(p);
        std::thread::sleep(Duration::from_millis(5 + rng.below(200) as u64));
        wire.kill(victim).unwrap();
        let killed = std::time::Instant::now();
        let mut got = vec![None; p];
        for _ in 0..p {
            let (r, e, _) = rx.recv_timeout(Duration::from_secs(30)).unwrap_or_else(|_| {
                panic!("p={p}, FABCOLL_STRESS_SEED={seed} ({what}): a rank did not return within 30 s of rank {victim}'s death; returned: {got:?}")
            });
            got[r] = Some((e, killed.elapsed()));
        }
        stop.store(true, Ordering::Relaxed);
        d.join().expect("deliverer panicked");
        let named = format!("rank(s) [{victim}]");
        for (r, g) in got.iter().enumerate() {
            let (e, after) = g.as_ref().expect("every rank returned");
            eprintln!("p={p} rank {r} after {after:?}: {e}");
            if r != victim {
                assert!(
                    e.contains(&named),
                    "p={p}, FABCOLL_STRESS_SEED={seed} ({what}): rank {r} does not blame only rank {victim}: {e}"
                );
            }
        }
    }
}
