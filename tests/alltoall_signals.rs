//! The synchronization messages of the alltoall barrier families ("ready" handshakes, full
//! barriers between phases) go on the wire, on every way a call runs: counted by the executor
//! (`Stats`) against the registry's cost formula, whose α counts the data phases plus the
//! synchronization messages each rank sends (faraj-yuan §3.1). A zero-length signal used to be
//! completed locally, so these algorithms ran as the plain pairwise ones.

use fabcoll::collectives::{registry, CollArgs, Collective};
use fabcoll::{Collectives, Communicator, ExecConfig, Options, Stats};

/// Messages a rank sent carrying data (eager, zero-copy or mailbox records).
fn sent(s: &Stats) -> u64 {
    s.eager_msgs + s.zcopy_msgs + s.mailbox_msgs
}

/// Runs one alltoall of `count` u32 per block with `alg` on every rank of a local job; returns
/// each rank's messages sent by that call, after checking the result.
fn messages(p: usize, cfg: &ExecConfig, alg: &str, count: usize) -> Vec<u64> {
    let comms = Communicator::local_with(p, cfg.clone()).unwrap();
    std::thread::scope(|s| {
        let hs: Vec<_> = comms
            .into_iter()
            .map(|c| {
                s.spawn(move || {
                    let r = c.rank() as usize;
                    let send: Vec<u32> = (0..p * count).map(|i| (r * 1_000_000 + i) as u32).collect();
                    let mut recv = vec![0u32; p * count];
                    // A first call sets up what later calls reuse (mailboxes, rings).
                    c.with(&Options::algorithm(alg)).alltoall(&send, &mut recv).unwrap();
                    let before = sent(&c.stats());
                    c.with(&Options::algorithm(alg)).alltoall(&send, &mut recv).unwrap();
                    let after = sent(&c.stats());
                    for (j, block) in recv.chunks(count).enumerate() {
                        let want: Vec<u32> = (0..count).map(|i| (j * 1_000_000 + r * count + i) as u32).collect();
                        assert_eq!(block, want, "{alg} p={p}: rank {r}'s block from {j}");
                    }
                    after - before
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().expect("rank panicked")).collect()
    })
}

/// Synchronization messages per rank by the cost formula: its α less the p − 1 data phases.
fn formula_signals(alg: &str, p: u32, count: u64) -> u64 {
    let mut args = CollArgs::new(Collective::Alltoall, 0, p, count);
    args.elem_size = 4;
    let a = registry::find(Collective::Alltoall, alg).unwrap();
    let cost = a.cost_of(&a.prepare(&args).unwrap()).unwrap();
    cost.alpha as u64 - u64::from(p - 1)
}

#[test]
fn barrier_families_send_their_signals_on_every_path() {
    let timeout = std::time::Duration::from_secs(20);
    let mailboxes = ExecConfig { timeout, ..Default::default() };
    let rings = ExecConfig { timeout, mailbox_limit: 0, ..Default::default() };
    // 3 elements: mailbox records (or eager slots without mailboxes); 4,096: zero-copy writes.
    let ways = [("mailboxes", &mailboxes, 3usize), ("eager rings", &rings, 3), ("zero-copy", &rings, 4096)];
    for p in [4usize, 5, 8] {
        for (way, cfg, count) in ways {
            let plain = if p.is_power_of_two() { "pairwise_xor" } else { "pairwise_ring" };
            let base = messages(p, cfg, plain, count);
            assert!(base.iter().all(|&m| m == p as u64 - 1), "{plain} p={p} {way}: {base:?}");
            for alg in [
                "ring_light_barrier",
                "ring_full_barrier",
                "ring_n_barriers",
                "pair_light_barrier",
                "pair_full_barrier",
                "pair_n_barriers",
            ] {
                if alg.starts_with("pair") && !p.is_power_of_two() {
                    continue;
                }
                let signals = formula_signals(alg, p as u32, count as u64);
                assert!(signals > 0, "{alg} p={p}: the formula counts no signals");
                let got = messages(p, cfg, alg, count);
                for (r, &m) in got.iter().enumerate() {
                    assert_eq!(
                        m,
                        p as u64 - 1 + signals,
                        "{alg} p={p} {way}: rank {r} sent {m} messages, the formula's {} data and {signals} signals",
                        p - 1
                    );
                }
            }
        }
    }
}
