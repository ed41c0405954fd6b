//! Four processes on loopback (ofi tcp, shm, net): a ring of notified one-sided writes of 8 B, 64 KiB and 16 MiB
//! with data verified, and control messages both ways (region adverts to the left, acks to the left, hellos to
//! the right). Ranks run through the multi-process harness (`tests/support`), which kills all and fails on a
//! timeout; endpoint addresses go through its store.
#![cfg(fabcoll_ofi)]

mod support;

use std::time::{Duration, Instant};

use fabcoll_fabric::ofi::{OfiConfig, OfiEndpoint, OfiEvent, RemoteRegion};

const SIZES: [usize; 3] = [8, 64 << 10, 16 << 20];
const WAIT: Duration = Duration::from_secs(30);

fn pattern(rank: usize, round: usize, j: usize) -> u8 {
    (j.wrapping_mul(131) ^ (j >> 8) ^ (rank * 17 + round * 29 + 1)) as u8
}

fn imm(rank: usize, round: usize) -> u64 {
    0x5eed_0000 | ((rank as u64) << 8) | round as u64
}

const LOOPBACK: &[(&str, &str)] = &[("FI_TCP_IFACE", "lo")];

#[test]
fn tcp_ring_of_notified_writes_4_procs() {
    support::ranks("tcp_ring_of_notified_writes_4_procs", 4, Duration::from_secs(90), LOOPBACK, |j| ring(j, "tcp"));
}

#[test]
fn shm_ring_of_notified_writes_4_procs() {
    support::ranks("shm_ring_of_notified_writes_4_procs", 4, Duration::from_secs(90), LOOPBACK, |j| ring(j, "shm"));
}

#[test]
fn net_ring_of_notified_writes_4_procs() {
    support::ranks("net_ring_of_notified_writes_4_procs", 4, Duration::from_secs(90), LOOPBACK, |j| ring(j, "net"));
}

fn ctrl_from(ep: &mut OfiEndpoint, from: usize, what: &str) -> Vec<u8> {
    match ep.wait_for(WAIT, |e| matches!(e, OfiEvent::Ctrl { from: f, .. } if *f == from as u64)) {
        Ok(OfiEvent::Ctrl { data, .. }) => data,
        other => panic!("rank {}: waiting for {what} from {from}: {other:?}", ep.rank()),
    }
}

/// One rank of the ring.
fn ring(job: support::Job, prov: &str) {
    let (rank, n) = (job.rank() as usize, job.size() as usize);
    let (left, right) = ((rank + n - 1) % n, (rank + 1) % n);

    let mut cfg = OfiConfig::default().provider(prov);
    if prov != "shm" {
        cfg.node = Some("127.0.0.1".into());
    }
    cfg.timeout = WAIT;
    let mut ep = OfiEndpoint::open(&cfg, rank as u64, n).expect("open");
    eprintln!("rank {rank}: {} mr_mode {:#x}", ep.attrs().prov_name, ep.attrs().mr_mode);
    let addrs = job.exchange("ofi-addr", &ep.address().unwrap());
    ep.insert_peers(&addrs).unwrap();

    let max = *SIZES.iter().max().unwrap();
    let dst = vec![0u8; max];
    let mut src = vec![0u8; max];
    // SAFETY: dst and src outlive the registrations (dropped at the end, after the MRs).
    let dmr = unsafe { ep.register(dst.as_ptr(), max).unwrap() };
    // Control messages both ways: a hello to the right, our region to the left (our writer).
    ep.send_ctrl(right, 0, format!("hello {rank}").as_bytes()).unwrap();
    ep.send_ctrl(left, 0, &dmr.remote().to_bytes()).unwrap();
    assert_eq!(ctrl_from(&mut ep, left, "hello"), format!("hello {left}").as_bytes());
    let remote = RemoteRegion::from_bytes(&ctrl_from(&mut ep, right, "region")).expect("24-byte region");

    for (round, &len) in SIZES.iter().enumerate() {
        for (j, b) in src[..len].iter_mut().enumerate() {
            *b = pattern(rank, round, j);
        }
        // SAFETY: src outlives smr.
        let smr = unsafe { ep.register(src.as_ptr(), len).unwrap() };
        // SAFETY: src stays registered and unmodified until WriteDone below.
        let op = unsafe { ep.write(&smr, 0, len, right, &remote, 0, Some(imm(rank, round)), true).unwrap() };
        let want = imm(left, round);
        match ep.wait_for(WAIT, |e| matches!(e, OfiEvent::RemoteWrite { .. })) {
            Ok(OfiEvent::RemoteWrite { imm, .. }) => assert_eq!(imm, want, "rank {rank} round {round}: immediate"),
            other => panic!("rank {rank} round {round}: {other:?}"),
        }
        if let Some(j) = (0..len).find(|&j| dst[j] != pattern(left, round, j)) {
            panic!("rank {rank}: {len} B write from {left} differs at byte {j}");
        }
        match ep.wait_for(WAIT, |e| matches!(e, OfiEvent::WriteDone(o) | OfiEvent::WriteFailed(o, _) if *o == op)) {
            Ok(OfiEvent::WriteDone(_)) => {}
            other => panic!("rank {rank} round {round}: own write: {other:?}"),
        }
        // Ack to the writer (left): it may overwrite our buffer in the next round; wait for the right's ack.
        ep.send_ctrl(left, 0, &[round as u8]).unwrap();
        assert_eq!(ctrl_from(&mut ep, right, "ack"), [round as u8]);
        drop(smr);
        eprintln!("rank {rank}: {len} B from {left} verified");
    }
    // Linger so that our last ack is delivered before the endpoint closes (tcp needs our progress).
    let t = Instant::now();
    let mut sink = Vec::new();
    while t.elapsed() < Duration::from_millis(200) {
        ep.poll(&mut sink).unwrap();
    }
    drop(dmr);
}
