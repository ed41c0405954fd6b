//! Backend `tcp`: the common scenarios among ranks as threads (1–4) and as processes (4), writes
//! the target refuses (deregistered key, out of bounds), a dead peer, a peer that sends bytes that
//! are not frames, and bad arguments.

mod local_common;
mod support;

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use fabcoll_fabric::tcp::{pair_key, SECRET};
use fabcoll_fabric::{open, Access, Backend, Completion, Config, Endpoint, Error, RemoteMr, SILENT_WRITE};

const LIMIT: Duration = Duration::from_secs(60);

fn run_threads(p: usize, job: &str, f: fn(&mut dyn Endpoint) -> Result<(), String>) {
    local_common::run_threads(Backend::Tcp, p, job, f);
}

/// The ring and control scenarios of the other backends (write-to-deregistered differs: below).
fn scenarios(ep: &mut dyn Endpoint) -> Result<(), String> {
    let mut inbox = local_common::Inbox::new();
    for len in local_common::SIZES.into_iter().chain([0, 1, 16 * 1024 + 1]) {
        local_common::ring(ep, &mut inbox, len)?;
        local_common::ring_with(ep, &mut inbox, len, true)?;
    }
    for len in [8, 1024, 64 * 1024] {
        local_common::settled_ring(ep, &mut inbox, len)?;
    }
    local_common::ctrl_both_ways(ep, &mut inbox, 100)
}

#[test]
fn tcp_scenarios_4_threads() {
    run_threads(4, "tcp_scenarios_4", scenarios);
}

#[test]
fn tcp_scenarios_1_2_3_threads() {
    for p in [1, 2, 3] {
        run_threads(p, &format!("tcp_scenarios_{p}"), scenarios);
    }
}

/// Ten ranks: more than 8 connections each, so `poll` asks `ppoll` which sockets to serve.
#[test]
fn tcp_scenarios_10_threads() {
    run_threads(10, "tcp_scenarios_10", |ep| {
        let mut inbox = local_common::Inbox::new();
        for len in [0, 8, 64 * 1024 + 3] {
            local_common::ring(ep, &mut inbox, len)?;
        }
        local_common::ctrl_both_ways(ep, &mut inbox, 20)
    });
}

/// This process's tcp endpoint in `job`, connected to every rank's.
fn connected(job: &support::Job, name: &str) -> Box<dyn Endpoint> {
    let (r, p) = (job.rank() as usize, job.size() as usize);
    let mut ep = open(&Config::new(Backend::Tcp, r, p, name)).expect("open tcp");
    let blobs = job.exchange("addr", &ep.address().expect("address"));
    ep.insert_peers(&blobs).expect("insert_peers");
    ep
}

#[test]
fn tcp_scenarios_4_procs() {
    support::ranks("tcp_scenarios_4_procs", 4, LIMIT, &[], |job| {
        let mut ep = connected(&job, "procs");
        scenarios(&mut *ep).unwrap();
        job.barrier("done");
    });
}

/// The target refuses a write to a deregistered key and one beyond a registration's end (a forged
/// descriptor): the initiator gets `WriteError` for that ctx after its `WriteDone`, naming the
/// target; no byte lands and the target sees no arrival.
#[test]
fn tcp_refused_writes_are_reported_to_the_initiator() {
    run_threads(2, "tcp_refused", |ep| {
        let (r, peer) = (ep.rank(), 1 - ep.rank());
        let mut inbox = local_common::Inbox::new();
        let e = |e: Error| format!("rank {r}: {e}");
        let gone = ep.alloc(4096, Access::REMOTE_WRITE).map_err(e)?;
        let stale = gone.remote();
        drop(gone);
        let fresh = ep.alloc(4096, Access::REMOTE_WRITE).map_err(e)?;
        local_common::send_ctrl(ep, &mut inbox, peer, 1, &stale.to_bytes())?;
        local_common::send_ctrl(ep, &mut inbox, peer, 2, &fresh.remote().to_bytes())?;
        let their_stale = RemoteMr::from_bytes(&inbox.ctrl(ep, peer, 1)?).map_err(e)?;
        let mut their_fresh = RemoteMr::from_bytes(&inbox.ctrl(ep, peer, 2)?).map_err(e)?;
        let src = ep.alloc(8192, Access::LOCAL).map_err(e)?;
        src.write_at(0, &[0xAB; 8192]).map_err(e)?;
        ep.write(peer, src.slice(0, 64).map_err(e)?, their_stale.slice(0, 64).map_err(e)?, Some(7), 99).map_err(e)?;
        // A descriptor that claims twice the length: the initiator's bounds check passes, the target's
        // table refuses.
        their_fresh.len *= 2;
        ep.write(peer, src.range(), their_fresh.slice(0, 8192).map_err(e)?, None, 100).map_err(e)?;
        for (ctx, want) in [(99, Error::InvalidKey { peer, key: their_stale.key }.to_string()), (100, "outside".into())]
        {
            inbox.expect(ep, "WriteDone", |c| *c == Completion::WriteDone { ctx })?;
            match inbox.expect(ep, "WriteError", |c| matches!(c, Completion::WriteError { ctx: x, .. } if *x == ctx))? {
                Completion::WriteError { error, .. }
                    if error.contains(&want) && error.contains(&format!("rank {peer}")) => {}
                other => return Err(format!("rank {r}: write {ctx} gave {other:?}, wanted an error with {want:?}")),
            }
        }
        // Both ranks saw their refusals: every frame of the peer has been read here too.
        local_common::send_ctrl(ep, &mut inbox, peer, 3, &[])?;
        inbox.ctrl(ep, peer, 3)?;
        let mut got = vec![0u8; 4096];
        fresh.read_at(0, &mut got).map_err(e)?;
        if got.iter().any(|&b| b != 0) {
            return Err(format!("rank {r}: a refused write landed"));
        }
        let mut out = Vec::new();
        ep.poll(&mut out).map_err(e)?;
        if out.iter().any(|c| matches!(c, Completion::WriteArrived { .. })) {
            return Err(format!("rank {r}: a refused write was notified: {out:?}"));
        }
        Ok(())
    });
}

/// Writes of at most `Caps::inline_completion` bytes are complete on return: the source may be
/// overwritten at once, also when the socket is full and the write waits in the queue (16 MiB
/// written while the target does not read), and one with ctx `SILENT_WRITE` reports nothing; a
/// larger write reports its `WriteDone`. The target checks every byte.
#[test]
fn tcp_small_writes_complete_on_return() {
    run_threads(2, "tcp_inline", |ep| {
        const N: usize = 256;
        let (r, peer) = (ep.rank(), 1 - ep.rank());
        let e = |e: Error| format!("rank {r}: {e}");
        let len = ep.caps().inline_completion;
        if len == 0 || len > 1 << 20 {
            return Err(format!("tcp completes writes of up to {len} bytes inline; the test expects 1 B to 1 MiB"));
        }
        let byte = |i: usize| (i * 37 + 11) as u8;
        let mut inbox = local_common::Inbox::new();
        if r == 1 {
            let dst = ep.alloc(N * len + len + 1, Access::REMOTE_WRITE).map_err(e)?;
            local_common::send_ctrl(ep, &mut inbox, peer, 1, &dst.remote().to_bytes())?;
            // Rank 0 writes meanwhile: its socket fills and the rest of its writes wait in its queue.
            std::thread::sleep(Duration::from_millis(300));
            let mut got = vec![0u8; len + 1];
            for i in 0..=N {
                inbox.expect(ep, "arrival", |c| *c == Completion::WriteArrived { peer, imm: i as u64 })?;
                let n = if i < N { len } else { len + 1 };
                dst.read_at(i * len, &mut got[..n]).map_err(e)?;
                if let Some(j) = got[..n].iter().position(|&b| b != byte(i)) {
                    return Err(format!("write {i}: byte {j} is {:#x}, wanted {:#x}", got[j], byte(i)));
                }
            }
            return local_common::send_ctrl(ep, &mut inbox, peer, 3, &[]);
        }
        let dst = RemoteMr::from_bytes(&inbox.ctrl(ep, peer, 1)?).map_err(e)?;
        let src = ep.alloc(len + 1, Access::LOCAL).map_err(e)?;
        for i in 0..N {
            src.write_at(0, &vec![byte(i); len]).map_err(e)?;
            let to = dst.slice(i * len, len).map_err(e)?;
            ep.write(peer, src.slice(0, len).map_err(e)?, to, Some(i as u64), SILENT_WRITE).map_err(e)?;
        }
        src.write_at(0, &vec![byte(N); len + 1]).map_err(e)?;
        ep.write(peer, src.range(), dst.slice(N * len, len + 1).map_err(e)?, Some(N as u64), 7).map_err(e)?;
        inbox.expect(ep, "the large write's WriteDone", |c| *c == Completion::WriteDone { ctx: 7 })?;
        inbox.ctrl(ep, peer, 3)?;
        match inbox.rest(ep)?.into_iter().find(|c| matches!(c, Completion::WriteDone { .. })) {
            None => Ok(()),
            Some(c) => Err(format!("a silent inline write reported {c:?}")),
        }
    });
}

/// A peer that dies (exits without closing its endpoint) while we wait: `wait` fails naming it,
/// `peer_gone` says why, and writes to it fail.
#[test]
fn tcp_dead_peer_is_named() {
    support::ranks("tcp_dead_peer_is_named", 2, LIMIT, &[], |job| {
        let r = job.rank() as usize;
        let mut ep = connected(&job, "dead");
        let mut inbox = local_common::Inbox::new();
        local_common::ring(&mut *ep, &mut inbox, 8).unwrap();
        job.barrier("connected");
        if r == 1 {
            std::process::exit(0);
        }
        let t0 = Instant::now();
        let error = loop {
            assert!(t0.elapsed() < Duration::from_secs(30), "no error for a dead peer within 30 s");
            let mut out = Vec::new();
            match ep.wait(&mut out, Some(Duration::from_millis(100))) {
                Err(Error::Timeout { .. }) => {}
                Err(e) => break e,
                Ok(_) => assert!(out.is_empty(), "events from a dead peer: {out:?}"),
            }
        };
        assert!(matches!(error, Error::Peer { peer: 1, .. }), "{error}");
        assert!(error.to_string().contains("without goodbye"), "{error}");
        assert!(ep.peer_gone(1).is_some_and(|w| w.contains("without goodbye")));
        let src = ep.alloc(8, Access::LOCAL).unwrap();
        let dst = ep.alloc(8, Access::REMOTE_WRITE).unwrap();
        let e = ep.write(1, src.range(), dst.remote().range(), None, 1).unwrap_err();
        assert!(matches!(e, Error::Peer { peer: 1, .. }), "{e}");
        eprintln!("dead peer named after {:?}: {error}", t0.elapsed());
    });
}

/// A clean close (the peer drops its endpoint) is not a death.
#[test]
fn tcp_closed_peer_is_not_dead() {
    let mut eps: Vec<Box<dyn Endpoint>> =
        (0..2).map(|r| open(&Config::new(Backend::Tcp, r, 2, "tcp_closed")).unwrap()).collect();
    let all: Vec<Vec<u8>> = eps.iter().map(|ep| ep.address().unwrap()).collect();
    let (mut one, theirs) = (eps.pop().unwrap(), all.clone());
    let t = std::thread::spawn(move || one.insert_peers(&theirs).map(|()| one));
    eps[0].insert_peers(&all).unwrap();
    drop(t.join().unwrap().unwrap());
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_millis(300) {
        let mut out = Vec::new();
        eps[0].poll(&mut out).expect("a closed peer is no error");
        assert!(out.is_empty(), "{out:?}");
    }
    assert_eq!(eps[0].peer_gone(1), None);
    let e = eps[0].send_ctrl(1, 1, b"late").unwrap_err();
    assert!(e.to_string().contains("closed its endpoint"), "{e}");
}

/// A "rank" that sends a valid hello and proves the job's secret (it knows the token and rank
/// 0's secret), then bytes that are not a frame: the endpoint's poll fails with an error naming
/// that rank and saying what was wrong.
#[test]
fn tcp_malformed_stream_is_an_error_naming_the_sender() {
    let job = "tcp_malformed";
    let mut cfg = Config::new(Backend::Tcp, 0, 2, job);
    cfg.token = Some("malformed-token".into());
    let mut ep = open(&cfg).unwrap();
    let mine = ep.address().unwrap();
    let job_hash = fabcoll_fabric::job_hash(job);
    // Rank 1's blob: same layout as the endpoint's own (hello, secret, address), pointing at a
    // port nobody connects to.
    let mut hello = mine[..8].to_vec();
    for v in [job_hash, 1, 2] {
        hello.extend_from_slice(&u64::to_le_bytes(v));
    }
    let their_secret = [5u8; SECRET];
    let mut theirs = hello.clone();
    theirs.extend_from_slice(&their_secret);
    theirs.extend_from_slice(b"127.0.0.1:9");
    let my_secret: [u8; SECRET] = mine[32..32 + SECRET].try_into().unwrap();
    let key = pair_key(b"malformed-token", (0, &my_secret), (1, &their_secret));
    let mut context = Vec::new();
    for v in [job_hash, 2, 1, 0] {
        context.extend_from_slice(&u64::to_le_bytes(v));
    }
    let at = std::str::from_utf8(&mine[32 + SECRET..]).unwrap().to_string();
    let fake = std::thread::spawn(move || {
        let mut s = TcpStream::connect(at).unwrap();
        fabcoll_fabric::auth::open(&mut s, &key, &context, &hello).expect("rank 0 admits the fake");
        s.write_all(&[9u8; 48]).unwrap();
        std::thread::sleep(Duration::from_millis(500));
    });
    ep.insert_peers(&[mine, theirs]).unwrap();
    let t0 = Instant::now();
    let e = loop {
        assert!(t0.elapsed() < Duration::from_secs(10), "no error for a malformed stream");
        let mut out = Vec::new();
        if let Err(e) = ep.poll(&mut out) {
            break e;
        }
    };
    assert!(matches!(e, Error::Peer { peer: 1, .. }), "{e}");
    assert!(e.to_string().contains("malformed frame"), "{e}");
    fake.join().unwrap();
}

#[test]
fn tcp_bad_arguments_are_errors() {
    let mut a = open(&Config::new(Backend::Tcp, 0, 1, "tcp_bad")).unwrap();
    let mr = a.alloc(64, Access::LOCAL).unwrap();
    let e = a.write(0, mr.range(), mr.remote().range(), None, 0).unwrap_err();
    assert!(e.to_string().contains("insert_peers"), "{e}");
    let other = open(&Config::new(Backend::Tcp, 0, 1, "another_job")).unwrap().address().unwrap();
    let e = a.insert_peers(&[other]).unwrap_err();
    assert!(e.to_string().contains("another job"), "{e}");
    let me = a.address().unwrap();
    a.insert_peers(&[me]).unwrap();
    let dst = a.alloc(32, Access::REMOTE_WRITE).unwrap();
    for (e, want) in [
        (a.write(0, mr.range(), dst.remote().range(), None, 0).unwrap_err(), "source bytes"),
        (a.write(1, mr.slice(0, 32).unwrap(), dst.remote().range(), None, 0).unwrap_err(), "not in a group"),
        (
            a.write(0, mr.slice(0, 32).unwrap(), mr.remote().slice(0, 32).unwrap(), None, 0).unwrap_err(),
            "no remote write",
        ),
        (a.send_ctrl(0, 1, &vec![0u8; 64 * 1024 + 1]).unwrap_err(), "at most"),
        (a.map_remote(0, &dst.remote()).unwrap_err(), "unsupported"),
    ] {
        assert!(e.to_string().contains(want), "{e} should say {want}");
    }
}
