//! Four processes on loopback (ofi tcp, shm, net): a ring of notified one-sided writes of 8 B, 64 KiB and 16 MiB
//! with data verified, and control messages both ways (region adverts to the left, acks to the left, hellos to
//! the right). Children are this test binary re-executed (`--ignored --exact ring_child`); addresses go through
//! files in a temp dir; the parent kills every child and fails after a timeout.
#![cfg(fabcoll_ofi)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
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

/// Runs `n` children of `ring_child` on `provider`; fails (after killing all) if any fails or time runs out.
fn run_ring(provider: &str, n: usize) {
    let dir = std::env::temp_dir().join(format!("fabcoll-ofi-ring-{provider}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let exe = std::env::current_exe().unwrap();
    let mut children: Vec<(usize, Child)> = (0..n)
        .map(|r| {
            let c = Command::new(&exe)
                .args(["--ignored", "--exact", "ring_child", "--nocapture", "--test-threads=1"])
                .env("FABCOLL_T_DIR", &dir)
                .env("FABCOLL_T_RANK", r.to_string())
                .env("FABCOLL_T_SIZE", n.to_string())
                .env("FABCOLL_T_PROV", provider)
                .env("FI_TCP_IFACE", "lo")
                .spawn()
                .expect("spawn child");
            (r, c)
        })
        .collect();
    let start = Instant::now();
    let mut failed = Vec::new();
    while !children.is_empty() {
        let mut i = 0;
        while i < children.len() {
            match children[i].1.try_wait().unwrap() {
                Some(st) => {
                    let (r, _) = children.remove(i);
                    if !st.success() {
                        failed.push(format!("rank {r}: {st}"));
                    }
                }
                None => i += 1,
            }
        }
        if !failed.is_empty() || start.elapsed() > Duration::from_secs(90) {
            for (r, c) in &mut children {
                let _ = c.kill();
                let _ = c.wait();
                failed.push(format!("rank {r}: killed (timeout or another rank failed)"));
            }
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(failed.is_empty(), "{provider} ring of {n}: {failed:?}");
}

#[test]
fn tcp_ring_of_notified_writes_4_procs() {
    run_ring("tcp", 4);
}

#[test]
fn shm_ring_of_notified_writes_4_procs() {
    run_ring("shm", 4);
}

#[test]
fn net_ring_of_notified_writes_4_procs() {
    run_ring("net", 4);
}

fn publish(dir: &Path, rank: usize, addr: &[u8]) {
    let tmp = dir.join(format!("addr.{rank}.tmp"));
    std::fs::write(&tmp, addr).unwrap();
    std::fs::rename(tmp, dir.join(format!("addr.{rank}"))).unwrap();
}

fn collect(dir: &Path, n: usize) -> Vec<Vec<u8>> {
    let start = Instant::now();
    (0..n)
        .map(|r| loop {
            if let Ok(a) = std::fs::read(dir.join(format!("addr.{r}"))) {
                break a;
            }
            assert!(start.elapsed() < WAIT, "address of rank {r} never published");
            std::thread::sleep(Duration::from_millis(5));
        })
        .collect()
}

fn ctrl_from(ep: &mut OfiEndpoint, from: usize, what: &str) -> Vec<u8> {
    match ep.wait_for(WAIT, |e| matches!(e, OfiEvent::Ctrl { from: f, .. } if *f == from as u64)) {
        Ok(OfiEvent::Ctrl { data, .. }) => data,
        other => panic!("rank {}: waiting for {what} from {from}: {other:?}", ep.rank()),
    }
}

/// One rank of the ring; does nothing unless started by `run_ring`.
#[test]
#[ignore = "child process of the ring tests"]
fn ring_child() {
    let Ok(dir) = std::env::var("FABCOLL_T_DIR") else { return };
    let dir = PathBuf::from(dir);
    let rank: usize = std::env::var("FABCOLL_T_RANK").unwrap().parse().unwrap();
    let n: usize = std::env::var("FABCOLL_T_SIZE").unwrap().parse().unwrap();
    let prov = std::env::var("FABCOLL_T_PROV").unwrap();
    let (left, right) = ((rank + n - 1) % n, (rank + 1) % n);

    let mut cfg = OfiConfig::default().provider(&prov);
    if prov != "shm" {
        cfg.node = Some("127.0.0.1".into());
    }
    cfg.timeout = WAIT;
    let mut ep = OfiEndpoint::open(&cfg, rank as u64, n).expect("open");
    eprintln!("rank {rank}: {} mr_mode {:#x}", ep.attrs().prov_name, ep.attrs().mr_mode);
    publish(&dir, rank, &ep.address().unwrap());
    let addrs = collect(&dir, n);
    ep.insert_peers(&addrs).unwrap();

    let max = *SIZES.iter().max().unwrap();
    let dst = vec![0u8; max];
    let mut src = vec![0u8; max];
    // SAFETY: dst and src outlive the registrations (dropped at the end, after the MRs).
    let dmr = unsafe { ep.register(dst.as_ptr(), max).unwrap() };
    // Control messages both ways: a hello to the right, our region to the left (our writer).
    ep.send_ctrl(right, format!("hello {rank}").as_bytes()).unwrap();
    ep.send_ctrl(left, &dmr.remote().to_bytes()).unwrap();
    assert_eq!(ctrl_from(&mut ep, left, "hello"), format!("hello {left}").as_bytes());
    let remote = RemoteRegion::from_bytes(&ctrl_from(&mut ep, right, "region")).expect("24-byte region");

    for (round, &len) in SIZES.iter().enumerate() {
        for (j, b) in src[..len].iter_mut().enumerate() {
            *b = pattern(rank, round, j);
        }
        // SAFETY: src outlives smr.
        let smr = unsafe { ep.register(src.as_ptr(), len).unwrap() };
        // SAFETY: src stays registered and unmodified until WriteDone below.
        let op = unsafe { ep.write(&smr, 0, len, right, &remote, 0, Some(imm(rank, round))).unwrap() };
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
        ep.send_ctrl(left, &[round as u8]).unwrap();
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
