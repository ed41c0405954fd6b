//! Seeded random stress over the in-memory pair wire (`fabcoll_fabric::pair`) delivered in a
//! random order: the calls of `tests/stress` (every collective, forced algorithms, batches of
//! overlapping nonblocking calls) while a deliverer thread picks which message lands next. Writes
//! land in any order, control messages of a pair in send order (what the wire, like the fabrics,
//! keeps); each job draws its own executor settings (eager limit, slots, credit batch) and wire
//! settings (writes complete on return or on delivery, an in-flight limit that makes the fabric
//! answer `Busy`), so the races of `tests/exec_races.rs` come in orders no test wrote down.
//! `FABCOLL_STRESS_SEED` replays a failure (the seed also draws the delivery order, though thread
//! timing makes a replay approximate); `FABCOLL_STRESS_CALLS` makes it a soak run. Each call is
//! bounded by the executor's timeout and the whole test by a watchdog, so a hang is an error.

mod common;
mod stress;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Duration;

use fabcoll::{Communicator, ExecConfig};
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
                // A control message behind one delivered in this burst stays for the next round.
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

/// Runs the stress calls on a job of `p` ranks; the error of every rank that failed.
fn stress_job(p: usize, seed: u64, calls: usize) -> Result<(String, u64), String> {
    let mut rng = Rng::new(seed ^ (p as u64).wrapping_mul(0x5851_f42d_4c95_7f2d));
    let (cfg, wire_cfg, what) = draw(&mut rng);
    let (wire, comms) = job(p, &cfg, wire_cfg);
    let stop = Arc::new(AtomicBool::new(false));
    let d = deliverer(wire.clone(), rng.next(), stop.clone());
    let res = common::local_job(comms, |c| stress::run(c, seed, calls).map(|_| ()));
    stop.store(true, Ordering::Relaxed);
    let delivered = d.join().expect("deliverer panicked");
    res.map(|()| (what.clone(), delivered)).map_err(|e| format!("{what}:\n{e}"))
}

#[test]
fn random_collectives_over_a_wire_delivering_in_random_order() {
    let seed = stress::seed();
    let calls = stress::calls(60);
    eprintln!("stress on the pair wire: FABCOLL_STRESS_SEED={seed} FABCOLL_STRESS_CALLS={calls}");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for p in 2..=4 {
            let t = std::time::Instant::now();
            let out = stress_job(p, seed, calls);
            if let Ok((what, n)) = &out {
                eprintln!("p={p}: {calls} calls verified in {:.1?} ({what}; {n} items delivered)", t.elapsed());
            }
            if tx.send(out.map(|_| ())).is_err() {
                return;
            }
        }
    });
    for p in 2..=4 {
        match rx.recv_timeout(Duration::from_secs(120)) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => panic!("p={p}, FABCOLL_STRESS_SEED={seed}: {e}"),
            Err(_) => panic!("p={p}, FABCOLL_STRESS_SEED={seed}: the job did not finish within 120 s"),
        }
    }
}
