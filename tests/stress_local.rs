//! Seeded random stress over the in-process `local` fabric at p = 2, 3, 4, 5 (see `tests/stress`):
//! `FABCOLL_STRESS_SEED` replays a failure, `FABCOLL_STRESS_CALLS` makes it a soak run. Each
//! call is bounded by the executor's timeout, so a hang is an error naming the call.

mod common;
mod stress;

use fabcoll::Communicator;

#[test]
fn random_collectives_on_local_ranks() {
    let seed = stress::seed();
    let calls = stress::calls(150);
    eprintln!("stress on local: FABCOLL_STRESS_SEED={seed} FABCOLL_STRESS_CALLS={calls}");
    for p in 2..=5 {
        let t = std::time::Instant::now();
        let comms = Communicator::local_with(p, common::cfg()).unwrap();
        common::local_job(comms, |c| stress::run(c, seed, calls).map(|_| ())).unwrap_or_else(|e| panic!("{e}"));
        eprintln!("p={p}: {calls} calls verified in {:.1?}", t.elapsed());
    }
}
