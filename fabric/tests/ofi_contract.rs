//! Backend `ofi` through the fabric contract among real processes on loopback: the common scenarios
//! (`local_common`: rings of notified writes of 0 B … 16 MiB from `alloc`ed and `register`ed memory, ordered
//! control messages both ways with `Busy` + retry), writes to a deregistered key, bad arguments, a dead peer.
#![cfg(fabcoll_ofi)]

mod local_common;
mod support;

use std::time::{Duration, Instant};

use fabcoll_fabric::{open, Access, Backend, Completion, Config, Endpoint, Error, RemoteMr, RemoteRange};

const LIMIT: Duration = Duration::from_secs(120);
const TCP_ENV: &[(&str, &str)] = &[("FI_TCP_IFACE", "lo"), ("FABCOLL_OFI_NODE", "127.0.0.1")];
/// libfabric 1.17's layered tcp provider, by name (`tcp` opens `net` where it is there).
const RXM: &str = "tcp;ofi_rxm";

fn connect(job: &support::Job, provider: &str) -> Box<dyn Endpoint> {
    let (r, p) = (job.rank() as usize, job.size() as usize);
    let mut ep = open(&Config::new(Backend::Ofi { provider: provider.into() }, r, p, "ofi")).expect("open ofi");
    let blobs = job.exchange("ofi-addr", &ep.address().expect("address"));
    ep.insert_peers(&blobs).expect("insert_peers");
    ep
}

fn scenarios(job: support::Job, provider: &str) {
    let mut ep = connect(&job, provider);
    let caps = ep.caps().clone();
    assert_eq!((caps.backend, caps.progress), ("ofi", fabcoll_fabric::Progress::Manual), "{caps:?}");
    assert!(caps.imm_bits >= 32 && caps.max_ctrl >= 4096, "{caps:?}");
    let mut inbox = local_common::Inbox::new();
    for len in [0, 1, 8, 64 << 10, 16 << 20] {
        local_common::ring(&mut *ep, &mut inbox, len).unwrap();
        local_common::ring_with(&mut *ep, &mut inbox, len, true).unwrap();
    }
    // Settled writes: an injected one always settles; on net a 1 KiB write is complete as soon
    // as it is posted (the bytes went to the socket), which is what the look is for.
    for len in [8, 1024, 64 << 10] {
        let settled = local_common::settled_ring(&mut *ep, &mut inbox, len).unwrap();
        if len <= caps.inline_completion {
            assert!(settled, "an injected write of {len} B did not settle");
        }
    }
    // Largest immediate that fits travels intact (the initiator's rank rides above it).
    let max_imm = if caps.imm_bits >= 64 { u64::MAX } else { (1u64 << caps.imm_bits) - 1 };
    imm_ring(&mut *ep, &mut inbox, max_imm);
    local_common::ctrl_both_ways(&mut *ep, &mut inbox, 100).unwrap();
    let dc = std::env::var("FABCOLL_OFI_DELIVERY_COMPLETE").is_ok_and(|v| v != "0");
    stale_key(&mut *ep, &mut inbox, dc, &job);
    job.barrier("done");
    // Keep progressing briefly so peers' last messages and acks drain before we close.
    let t = Instant::now();
    let mut sink = Vec::new();
    while t.elapsed() < Duration::from_millis(200) {
        let _ = ep.poll(&mut sink);
    }
}

fn imm_ring(ep: &mut dyn Endpoint, inbox: &mut local_common::Inbox, imm: u64) {
    let (r, p) = (ep.rank(), ep.size());
    let (right, left) = ((r + 1) % p, (r + p - 1) % p);
    let dst = ep.alloc(8, Access::REMOTE_WRITE).unwrap();
    let src = ep.alloc(8, Access::LOCAL).unwrap();
    ep.send_ctrl(left, 40, &dst.remote().to_bytes()).unwrap();
    let desc = RemoteMr::from_bytes(&inbox.ctrl(ep, right, 40).unwrap()).unwrap();
    ep.write(right, src.range(), desc.range(), Some(imm), 41).unwrap();
    inbox.expect(ep, "WriteDone", |c| *c == Completion::WriteDone { ctx: 41 }).unwrap();
    inbox.expect(ep, "max imm", |c| *c == Completion::WriteArrived { peer: left, imm }).unwrap();
    ep.send_ctrl(left, 42, &[]).unwrap();
    inbox.ctrl(ep, right, 42).unwrap();
}

/// Rank r writes into rank r+1's deregistered region. The target's memory and notifications stay untouched on
/// every provider; tcp (delivery-complete) must report the failure, others are printed as not reporting it.
/// Runs last: on tcp the target tears down the pair's connection after a stale-key write (later operations to
/// that peer fail with -ENOTCONN, or are lost silently without delivery-complete), so the ranks synchronize
/// through the harness store afterwards, not through the fabric.
fn stale_key(ep: &mut dyn Endpoint, inbox: &mut local_common::Inbox, must_report: bool, job: &support::Job) {
    let (r, p) = (ep.rank(), ep.size());
    let (right, left) = ((r + 1) % p, (r + p - 1) % p);
    let gone = ep.alloc(4096, Access::REMOTE_WRITE).unwrap();
    let desc = gone.remote();
    drop(gone);
    let fresh = ep.alloc(4096, Access::REMOTE_WRITE).unwrap();
    assert_ne!(fresh.remote().key, desc.key, "a key was reused");
    ep.send_ctrl(left, 50, &desc.to_bytes()).unwrap();
    let stale = RemoteMr::from_bytes(&inbox.ctrl(ep, right, 50).unwrap()).unwrap();
    let src = ep.alloc(4096, Access::LOCAL).unwrap();
    src.write_at(0, &[0xAB; 4096]).unwrap();
    let outcome = match ep.write(right, src.range(), stale.range(), Some(7), 99) {
        Err(e) => format!("Err({e})"),
        Ok(()) => {
            match inbox.expect(ep, "stale write completion", |c| {
                matches!(c, Completion::WriteDone { ctx: 99 } | Completion::WriteError { ctx: 99, .. })
            }) {
                Ok(Completion::WriteError { error, .. }) => {
                    assert!(error.contains(&format!("rank {right}")), "{error}");
                    // The provider says why (tcp: ENOENT from the target): the text is Error::InvalidKey's.
                    let want = Error::InvalidKey { peer: right, key: stale.key }.to_string();
                    assert!(error.contains(&want), "{error}: not reported as {want:?}");
                    format!("WriteError({error})")
                }
                Ok(c) => {
                    assert!(!must_report, "rank {r}: tcp reported {c:?} for a write to a deregistered key");
                    eprintln!(
                        "SKIP rank {r}: {} does not report writes to deregistered keys ({c:?}); memory untouched",
                        ep.caps().provider
                    );
                    String::new()
                }
                Err(e) => panic!("{e}"),
            }
        }
    };
    eprintln!("rank {r}: write to deregistered key -> {outcome}");
    // Barrier through the store that keeps polling the fabric (manual progress: peers' stale writes and their
    // delivery-complete acknowledgements need our progress).
    job.store.add("stale-written", 1).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let _ = ep.poll(&mut Vec::new());
        let n = job.store.add("stale-written", 0).unwrap();
        if n >= p as i64 {
            break;
        }
        assert!(Instant::now() < deadline, "rank {r}: only {n} ranks finished their stale writes");
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut got = vec![0u8; 4096];
    fresh.read_at(0, &mut got).unwrap();
    assert!(got.iter().all(|&b| b == 0), "rank {r}: a stale write landed in a fresh registration");
    let mut more = Vec::new();
    let _ = ep.poll(&mut more);
    assert!(
        !more.iter().any(|c| matches!(c, Completion::WriteArrived { imm: 7, .. })),
        "rank {r}: a failed write was notified"
    );
}

#[test]
fn ofi_tcp_scenarios_4_procs() {
    support::ranks("ofi_tcp_scenarios_4_procs", 4, LIMIT, TCP_ENV, |job| scenarios(job, "tcp"));
}

/// Delivery-complete semantics (`FABCOLL_OFI_DELIVERY_COMPLETE=1`, off by default): `tcp;ofi_rxm` must report a
/// write to a deregistered key to the initiator as `InvalidKey` naming the target (net drops it silently). Three
/// ranks, so that each connection carries one stale write (at two, the target's own stale write may tear the
/// connection down first).
#[test]
fn ofi_tcp_stale_key_delivery_complete_3_procs() {
    let env = [TCP_ENV, &[("FABCOLL_OFI_DELIVERY_COMPLETE", "1")]].concat();
    support::ranks("ofi_tcp_stale_key_delivery_complete_3_procs", 3, LIMIT, &env, |job| {
        let mut ep = connect(&job, RXM);
        let mut inbox = local_common::Inbox::new();
        local_common::ring(&mut *ep, &mut inbox, 8).unwrap();
        stale_key(&mut *ep, &mut inbox, true, &job);
        job.barrier("done");
        let t = Instant::now();
        while t.elapsed() < Duration::from_millis(200) {
            let _ = ep.poll(&mut Vec::new());
        }
    });
}

#[test]
fn ofi_shm_scenarios_4_procs() {
    support::ranks("ofi_shm_scenarios_4_procs", 4, LIMIT, &[], |job| scenarios(job, "shm"));
}

#[test]
fn ofi_net_ring_3_procs() {
    support::ranks("ofi_net_ring_3_procs", 3, LIMIT, TCP_ENV, |job| {
        let mut ep = connect(&job, "net");
        let mut inbox = local_common::Inbox::new();
        for len in [8, 100_003] {
            local_common::ring(&mut *ep, &mut inbox, len).unwrap();
        }
        job.barrier("done");
        let t = Instant::now();
        while t.elapsed() < Duration::from_millis(200) {
            let _ = ep.poll(&mut Vec::new());
        }
    });
}

#[test]
fn ofi_bad_arguments_are_errors() {
    support::ranks("ofi_bad_arguments_are_errors", 2, LIMIT, TCP_ENV, |job| {
        let (r, p) = (job.rank() as usize, job.size() as usize);
        let mut ep = open(&Config::new(Backend::Ofi { provider: "tcp".into() }, r, p, "bad")).unwrap();
        let src = ep.alloc(64, Access::LOCAL).unwrap();
        let dst = ep.alloc(64, Access::REMOTE_WRITE).unwrap();
        assert!(ep.write(0, src.range(), dst.remote().range(), None, 0).is_err(), "write before insert_peers");
        let mine = ep.address().unwrap();
        assert!(matches!(ep.insert_peers(std::slice::from_ref(&mine)), Err(Error::Address(_))));
        let blobs = job.exchange("bad-addr", &mine);
        ep.insert_peers(&blobs).unwrap();
        let peer = 1 - r;
        assert!(ep.write(2, src.range(), dst.remote().range(), None, 0).is_err());
        let ro = ep.alloc(64, Access::LOCAL).unwrap();
        let descs = job.exchange("bad-descs", &[dst.remote().to_bytes(), ro.remote().to_bytes()].concat());
        let theirs = &descs[peer];
        let (pdst, pro) = (
            RemoteMr::from_bytes(&theirs[..RemoteMr::WIRE_LEN]).unwrap(),
            RemoteMr::from_bytes(&theirs[RemoteMr::WIRE_LEN..]).unwrap(),
        );
        assert!(matches!(ep.write(peer, src.range(), pro.range(), Some(1), 0), Err(Error::Access(_))));
        // A range beyond the descriptor is caught locally. (A descriptor that lies about its length cannot be
        // checked by the initiator on ofi: the target's provider rejects the write, as for a stale key.)
        let beyond = RemoteRange { mr: pdst, off: 32, len: 64 };
        assert!(matches!(ep.write(peer, src.range(), beyond, None, 0), Err(Error::OutOfBounds { .. })));
        assert!(matches!(
            ep.write(peer, src.slice(0, 8).unwrap(), pdst.slice(0, 16).unwrap(), None, 0),
            Err(Error::InvalidArgument(_))
        ));
        let bits = ep.caps().imm_bits;
        assert!(matches!(
            ep.write(peer, src.range(), pdst.range(), Some(1 << bits), 0),
            Err(Error::InvalidArgument(_))
        ));
        assert!(ep.send_ctrl(peer, 0, &vec![0; ep.caps().max_ctrl + 1]).is_err());
        assert!(ep.map_remote(peer, &pdst).is_err());
        let mut out = Vec::new();
        assert!(matches!(ep.wait(&mut out, Some(Duration::from_millis(30))), Err(Error::Timeout { .. })));
        assert!(!out.iter().any(|c| matches!(c, Completion::WriteArrived { .. })), "failed writes notified");
        job.barrier("done");
    });
}

/// Transmit-complete semantics (the default) let a writer finish as soon as its bytes are in the socket: it may
/// then exit at once, with the peer's control messages still unread in its socket (so its close may reset the
/// connection). The target must still receive every write intact. Repeated rounds of 8 B … 16 MiB.
#[test]
fn ofi_tcp_writer_exits_right_after_completion() {
    const SIZES: [usize; 3] = [8, 64 << 10, 16 << 20];
    support::ranks("ofi_tcp_writer_exits_right_after_completion", 2, LIMIT, TCP_ENV, |job| {
        let mut ep = connect(&job, "tcp");
        let total: usize = SIZES.iter().sum();
        let peer = 1 - ep.rank();
        let dst = ep.alloc(total, Access::REMOTE_WRITE).unwrap();
        let descs = job.exchange("desc", &dst.remote().to_bytes());
        let desc = RemoteMr::from_bytes(&descs[peer]).unwrap();
        let mut inbox = local_common::Inbox::new();
        if ep.rank() == 0 {
            let src = ep.alloc(total, Access::LOCAL).unwrap();
            let bytes: Vec<u8> = (0..total).map(|i| local_common::pattern(0, total, i)).collect();
            src.write_at(0, &bytes).unwrap();
            // The target sends control messages we never read.
            job.barrier("flood");
            let mut off = 0;
            for (i, len) in SIZES.into_iter().enumerate() {
                let range = RemoteRange { mr: desc, off, len };
                ep.write(peer, src.slice(off, len).unwrap(), range, Some(i as u64), i as u64).unwrap();
                off += len;
            }
            for i in 0..SIZES.len() as u64 {
                inbox.expect(&mut *ep, "write done", |c| *c == Completion::WriteDone { ctx: i }).unwrap();
            }
            std::process::exit(0);
        }
        job.barrier("flood");
        // Keep control messages flowing towards the writer until its last write arrived (some after its exit:
        // those sends may fail, which is fine).
        let t0 = Instant::now();
        let mut arrived = Vec::new();
        let mut events = Vec::new();
        while arrived.len() < SIZES.len() {
            assert!(t0.elapsed() < Duration::from_secs(30), "arrived only {arrived:?} (events {events:?})");
            let _ = ep.send_ctrl(peer, 7, &[0; 64]);
            if let Err(e) = ep.poll(&mut events) {
                eprintln!("poll after the writer's exit: {e}");
            }
            for c in events.drain(..) {
                if let Completion::WriteArrived { imm, .. } = c {
                    arrived.push(imm);
                }
            }
        }
        arrived.sort_unstable();
        assert_eq!(arrived, [0, 1, 2]);
        drop(inbox);
        let mut got = vec![0u8; total];
        dst.read_at(0, &mut got).unwrap();
        assert!(got.iter().enumerate().all(|(i, &b)| b == local_common::pattern(0, total, i)), "data corrupted");
    });
}

/// A peer that dies: writing to it must end in an error naming it, never hang — in the default transmit-complete
/// mode too, where the first writes after the death may still complete (bytes handed to the socket) and a later
/// one fails once the provider saw the connection close (`tcp;ofi_rxm`), or, on net, where they neither fail nor
/// complete, the liveness probes find the peer's address refusing connections. (64 B writes are injected on net
/// and not over rxm: see `OfiConfig::inject`.)
fn dead_peer(name: &str, provider: &str, len: usize) {
    support::ranks(name, 2, LIMIT, TCP_ENV, |job| {
        let mut ep = connect(&job, provider);
        let dst = ep.alloc(len, Access::REMOTE_WRITE).unwrap();
        let src = ep.alloc(len, Access::LOCAL).unwrap();
        let descs = job.exchange("desc", &dst.remote().to_bytes());
        let mut inbox = local_common::Inbox::new();
        // Connect with one round trip of writes.
        let peer = 1 - ep.rank();
        let desc = RemoteMr::from_bytes(&descs[peer]).unwrap();
        ep.write(peer, src.range(), desc.range(), Some(1), 1).unwrap();
        inbox.expect(&mut *ep, "arrival", |c| matches!(c, Completion::WriteArrived { .. })).unwrap();
        inbox.expect(&mut *ep, "done", |c| *c == Completion::WriteDone { ctx: 1 }).unwrap();
        job.barrier("connected");
        if job.rank() == 1 {
            std::process::exit(0);
        }
        std::thread::sleep(Duration::from_millis(200));
        let t0 = Instant::now();
        let mut ctx = 2;
        let error = loop {
            assert!(t0.elapsed() < Duration::from_secs(30), "no error for a dead peer within 30 s");
            if let Err(e) = ep.write(1, src.range(), desc.range(), Some(2), ctx) {
                break format!("write: {e}");
            }
            // Well above the probes' bound (an idle interval, then 1 to 3 intervals of refusals: 2 to 4 s at the
            // default 1 s), so that a loaded machine does not turn a late error into a timeout.
            let mut out = Vec::new();
            match ep.wait(&mut out, Some(Duration::from_secs(12))) {
                Ok(_) => {
                    if let Some(Completion::WriteError { error, .. }) =
                        out.iter().find(|c| matches!(c, Completion::WriteError { .. }))
                    {
                        break format!("completion: {error}");
                    }
                }
                Err(e) => break format!("wait: {e}"),
            }
            ctx += 1;
        };
        eprintln!("{len} B writes to a dead peer: {} writes, then {error} after {:?}", ctx - 1, t0.elapsed());
        assert!(error.contains("rank 1"), "the error does not name the dead peer: {error}");
    });
}

/// A peer that dies while we only wait (nothing written to it, so no write can fail): the liveness probes of an
/// idle endpoint (default 1 s on tcp) must make `wait` fail naming it.
#[test]
fn ofi_tcp_silent_dead_peer_is_found_by_probes() {
    support::ranks("ofi_tcp_silent_dead_peer_is_found_by_probes", 2, LIMIT, TCP_ENV, |job| {
        let mut ep = connect(&job, "tcp");
        let mut inbox = local_common::Inbox::new();
        local_common::ring(&mut *ep, &mut inbox, 8).unwrap();
        job.barrier("connected");
        if job.rank() == 1 {
            std::process::exit(0);
        }
        let t0 = Instant::now();
        let error = loop {
            assert!(t0.elapsed() < Duration::from_secs(30), "no error for a silent dead peer within 30 s");
            let mut out = Vec::new();
            match ep.wait(&mut out, Some(Duration::from_millis(100))) {
                Err(Error::Timeout { .. }) => {}
                Err(e) => break e,
                Ok(_) => assert!(out.is_empty(), "events from a dead peer: {out:?}"),
            }
        };
        eprintln!("silent dead peer: {error} after {:?}", t0.elapsed());
        assert!(matches!(error, Error::Peer { peer: 1, .. }), "the error does not name rank 1: {error}");
    });
}

/// A peer that closes its endpoint and leaves (orderly departure) says goodbye: probes stop and nobody blames it.
#[test]
fn ofi_tcp_departed_peer_is_not_blamed() {
    support::ranks("ofi_tcp_departed_peer_is_not_blamed", 2, LIMIT, TCP_ENV, |job| {
        let mut ep = connect(&job, "tcp");
        let mut inbox = local_common::Inbox::new();
        local_common::ring(&mut *ep, &mut inbox, 8).unwrap();
        job.barrier("connected");
        if job.rank() == 1 {
            drop(ep);
            return;
        }
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(6) {
            let mut out = Vec::new();
            match ep.wait(&mut out, Some(Duration::from_millis(100))) {
                Ok(_) | Err(Error::Timeout { .. }) => {}
                Err(e) => panic!("a departed peer was blamed after {:?}: {e}", t0.elapsed()),
            }
        }
    });
}

#[test]
fn ofi_tcp_dead_peer_is_an_error() {
    dead_peer("ofi_tcp_dead_peer_is_an_error", "tcp", 4096);
}

#[test]
fn ofi_tcp_dead_peer_small_writes_is_an_error() {
    dead_peer("ofi_tcp_dead_peer_small_writes_is_an_error", "tcp", 64);
}

#[test]
fn ofi_rxm_dead_peer_is_an_error() {
    dead_peer("ofi_rxm_dead_peer_is_an_error", RXM, 4096);
}

#[test]
fn ofi_rxm_dead_peer_small_writes_is_an_error() {
    dead_peer("ofi_rxm_dead_peer_small_writes_is_an_error", RXM, 64);
}

/// `ofi:tcp` opens libfabric's TCP transport with native RDM endpoints (`net` on 1.17) where it is there, and the
/// layered provider when asked for by name.
#[test]
fn ofi_tcp_opens_net_where_libfabric_has_it() {
    let open_on = |provider: &str| {
        open(&Config::new(Backend::Ofi { provider: provider.into() }, 0, 1, "resolve"))
            .map(|ep| ep.caps().provider.clone())
    };
    let net = open_on("net");
    let tcp = open_on("tcp").expect("ofi:tcp opens");
    match net {
        Ok(net) => assert_eq!(tcp, net, "ofi:tcp did not open net"),
        Err(e) => assert!(tcp.starts_with("tcp"), "no net ({e}), yet ofi:tcp opened {tcp}"),
    }
    if let Ok(rxm) = open_on(RXM) {
        assert_eq!(rxm, RXM);
    }
}
