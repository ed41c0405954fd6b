//! The pair wire against the endpoint contract: control messages in order and exactly once
//! whatever the delivery order, write visibility and completion, deregistered keys, kill, busy,
//! wait timeouts.

use std::time::{Duration, Instant};

use super::*;
use crate::endpoint::SILENT_WRITE;
use crate::mr::Mr;

fn two(cfg: WireConfig) -> (Wire, PairEndpoint, PairEndpoint) {
    let wire = Wire::with_config(2, cfg).unwrap();
    let mut eps = wire.endpoints().unwrap();
    let b = eps.pop().unwrap();
    let a = eps.pop().unwrap();
    (wire, a, b)
}

fn polled(ep: &mut PairEndpoint) -> Vec<Completion> {
    let mut out = Vec::new();
    ep.poll(&mut out).unwrap();
    out
}

fn filled(ep: &mut PairEndpoint, bytes: &[u8]) -> Mr {
    let mr = ep.alloc(bytes.len(), Access::LOCAL).unwrap();
    mr.write_at(0, bytes).unwrap();
    mr
}

fn read(mr: &Mr) -> Vec<u8> {
    let mut v = vec![0u8; mr.len()];
    mr.read_at(0, &mut v).unwrap();
    v
}

#[test]
fn control_messages_keep_their_order_while_writes_overtake_them() {
    let (wire, mut a, mut b) = two(WireConfig::default());
    let dst = b.alloc(16, Access::REMOTE_WRITE).unwrap();
    let src = filled(&mut a, &[7u8; 16]);
    a.send_ctrl(1, 10, b"first").unwrap();
    a.write(1, src.slice(0, 8).unwrap(), dst.remote().slice(0, 8).unwrap(), Some(1), 100).unwrap();
    a.send_ctrl(1, 11, b"second").unwrap();
    a.write(1, src.slice(8, 8).unwrap(), dst.remote().slice(8, 8).unwrap(), Some(2), 101).unwrap();
    b.send_ctrl(0, 20, b"other pair").unwrap();
    let items = wire.in_flight();
    assert_eq!(items.len(), 5);
    assert_eq!(items[0].kind, ItemKind::Ctrl { tag: 10 });
    assert_eq!((items[1].from, items[1].to, items[1].len, items[1].imm()), (0, 1, 8, Some(1)));
    assert!(polled(&mut b).is_empty(), "nothing reaches the target before delivery");
    assert_eq!(read(&dst), [0u8; 16]);

    // The second control message cannot pass the first, by id or by predicate.
    let e = wire.deliver(items[2].id).unwrap_err().to_string();
    assert!(e.contains(&format!("#{}", items[0].id)), "{e}");
    assert_eq!(wire.deliver_matching(|it| it.tag() == Some(11)), 0);
    // Writes overtake everything; other pairs are independent.
    wire.deliver(items[3].id).unwrap();
    wire.deliver(items[4].id).unwrap();
    assert_eq!(polled(&mut b), [Completion::WriteArrived { peer: 0, imm: 2 }]);
    assert_eq!(read(&dst), [[0u8; 8], [7u8; 8]].concat());
    let other = Completion::Ctrl { peer: 1, tag: 20, data: b"other pair".to_vec() };
    assert_eq!(polled(&mut a), [Completion::WriteDone { ctx: 101 }, other]);
    assert_eq!(wire.deliver_next(0, 1), Some(items[0]));
    assert_eq!(wire.deliver_all(), 2);
    let got = polled(&mut b);
    assert_eq!(
        got,
        [
            Completion::Ctrl { peer: 0, tag: 10, data: b"first".to_vec() },
            Completion::WriteArrived { peer: 0, imm: 1 },
            Completion::Ctrl { peer: 0, tag: 11, data: b"second".to_vec() },
        ]
    );
    assert_eq!(polled(&mut a), [Completion::WriteDone { ctx: 100 }]);
    assert!(wire.in_flight().is_empty() && wire.deliver(items[0].id).is_err(), "exactly once");
    let order: Vec<u64> = wire.delivered().iter().map(|it| it.id).collect();
    assert_eq!(order, [items[3].id, items[4].id, items[0].id, items[1].id, items[2].id]);
}

#[test]
fn a_write_carries_the_bytes_of_its_call_and_completes_as_configured() {
    // Completion on delivery.
    let (wire, mut a, mut b) = two(WireConfig::default());
    assert!(!a.caps().completes_inline(1) && !a.caps().ordered_writes && !a.caps().load_store);
    let dst = b.alloc(4, Access::REMOTE_WRITE).unwrap();
    let src = filled(&mut a, &[1, 2, 3, 4]);
    a.write(1, src.range(), dst.remote().range(), None, 5).unwrap();
    src.write_at(0, &[9, 9, 9, 9]).unwrap();
    assert!(polled(&mut a).is_empty(), "not complete before delivery");
    wire.deliver_all();
    assert_eq!(read(&dst), [1, 2, 3, 4], "the bytes of the call, not the source's later contents");
    assert_eq!(polled(&mut a), [Completion::WriteDone { ctx: 5 }]);
    assert!(polled(&mut b).is_empty(), "a write without immediate is silent at the target");

    // Complete on return up to the configured size; silent with SILENT_WRITE.
    let (wire, mut a, mut b) = two(WireConfig { inline_completion: 4, ..WireConfig::default() });
    let dst = b.alloc(8, Access::REMOTE_WRITE).unwrap();
    let src = filled(&mut a, &[3u8; 8]);
    a.write(1, src.slice(0, 4).unwrap(), dst.remote().slice(0, 4).unwrap(), Some(1), 6).unwrap();
    a.write(1, src.slice(0, 4).unwrap(), dst.remote().slice(4, 4).unwrap(), Some(2), SILENT_WRITE).unwrap();
    a.write(1, src.slice(0, 8).unwrap(), dst.remote().range(), Some(3), 7).unwrap();
    assert_eq!(polled(&mut a), [Completion::WriteDone { ctx: 6 }]);
    wire.deliver_all();
    assert_eq!(polled(&mut a), [Completion::WriteDone { ctx: 7 }]);
    assert_eq!(polled(&mut b).len(), 3);

    // Bad arguments are errors at the call, with nothing put on the wire.
    assert!(a.write(1, src.slice(0, 4).unwrap(), dst.remote().slice(0, 8).unwrap(), None, 1).is_err());
    let past_end = crate::mr::RemoteRange { mr: dst.remote(), off: 4, len: 8 };
    assert!(matches!(a.write(1, src.range(), past_end, None, 1), Err(Error::OutOfBounds { .. })));
    let local = b.alloc(8, Access::LOCAL).unwrap();
    assert!(matches!(a.write(1, src.range(), local.remote().range(), None, 1), Err(Error::Access(_))));
    assert!(a.send_ctrl(1, 0, &vec![0u8; MAX_CTRL + 1]).is_err());
    assert!(a.send_ctrl(2, 0, b"").is_err());
    assert!(wire.in_flight().is_empty());
}

#[test]
fn a_write_to_a_deregistered_key_fails_at_the_initiator_and_touches_nothing() {
    let (wire, mut a, mut b) = two(WireConfig { inline_completion: usize::MAX, ..WireConfig::default() });
    let dst = b.alloc(8, Access::REMOTE_WRITE).unwrap();
    let remote = dst.remote();
    let src = filled(&mut a, &[5u8; 8]);
    a.write(1, src.range(), remote.range(), Some(9), SILENT_WRITE).unwrap();
    // A second registration of the same memory must not be found by the old key.
    let mut mem = vec![0u8; 8];
    // SAFETY: `mem` outlives `again` (dropped at the end of the test, after it).
    let again = unsafe { b.register(mem.as_mut_ptr(), mem.len(), Access::REMOTE_WRITE).unwrap() };
    assert_ne!(again.remote().key, remote.key, "keys are never reused");
    drop(dst);
    wire.deliver_all();
    match polled(&mut a).as_slice() {
        [Completion::WriteError { ctx: SILENT_WRITE, error }] => {
            assert!(error.contains("not registered on rank 1"), "{error}")
        }
        other => panic!("expected one WriteError, got {other:?}"),
    }
    assert!(polled(&mut b).is_empty(), "no WriteArrived for a refused write");
    drop(again);
    assert_eq!(mem, [0u8; 8]);
}

#[test]
fn a_killed_rank_is_gone_for_everyone() {
    let wire = Wire::new(3).unwrap();
    let mut eps = wire.endpoints().unwrap();
    let dst1 = eps[1].alloc(8, Access::REMOTE_WRITE).unwrap();
    let dst0 = eps[0].alloc(8, Access::REMOTE_WRITE).unwrap();
    let src0 = filled(&mut eps[0], &[1u8; 8]);
    let src1 = filled(&mut eps[1], &[2u8; 8]);
    eps[0].write(1, src0.range(), dst1.remote().range(), Some(1), 40).unwrap();
    eps[1].write(0, src1.range(), dst0.remote().range(), Some(2), 41).unwrap();
    eps[1].send_ctrl(2, 0, b"from the dead").unwrap();
    eps[2].send_ctrl(0, 0, b"unrelated").unwrap();
    assert_eq!(eps[0].peer_gone(1), None);
    wire.kill(1).unwrap();
    assert!(wire.is_dead(1) && !wire.is_dead(0));
    assert_eq!(wire.in_flight().len(), 1, "only the pair 2 -> 0 is left");
    match polled(&mut eps[0]).as_slice() {
        [Completion::WriteError { ctx: 40, error }] => assert!(error.contains("rank 1"), "{error}"),
        other => panic!("expected the write in flight to fail, got {other:?}"),
    }
    let e = eps[0].send_ctrl(1, 0, b"x").unwrap_err();
    assert!(matches!(e, Error::Peer { peer: 1, .. }), "{e}");
    let e = eps[2].write(1, src0.range(), dst1.remote().range(), None, 1).unwrap_err();
    assert!(matches!(e, Error::Peer { peer: 1, .. }), "{e}");
    assert!(eps[2].peer_gone(1).is_some_and(|s| s.contains("rank 1")));
    assert!(matches!(eps[1].poll(&mut Vec::new()), Err(Error::Peer { peer: 1, .. })));
    assert!(eps[1].wait(&mut Vec::new(), None).is_err(), "a dead rank's wait returns at once");
    wire.deliver_all();
    assert_eq!(polled(&mut eps[0]), [Completion::Ctrl { peer: 2, tag: 0, data: b"unrelated".to_vec() }]);
    assert_eq!(read(&dst0), [0u8; 8], "the dead rank's write never landed");
}

#[test]
fn a_full_pair_is_busy_until_something_is_delivered() {
    let (wire, mut a, mut b) = two(WireConfig { max_in_flight: 2, ..WireConfig::default() });
    a.send_ctrl(1, 1, b"").unwrap();
    a.send_ctrl(1, 2, b"").unwrap();
    assert!(a.send_ctrl(1, 3, b"").unwrap_err().is_busy());
    let dst = b.alloc(1, Access::REMOTE_WRITE).unwrap();
    let src = filled(&mut a, &[1]);
    assert!(a.write(1, src.range(), dst.remote().range(), None, 1).unwrap_err().is_busy());
    assert!(polled(&mut a).is_empty(), "a busy call has no side effects");
    assert_eq!(wire.busy_refusals(), Refusals { writes: 1, ctrl: 1 });
    b.send_ctrl(0, 1, b"").unwrap();
    wire.deliver_next(0, 1).unwrap();
    a.send_ctrl(1, 3, b"").unwrap();
    wire.set_max_in_flight(10);
    a.write(1, src.range(), dst.remote().range(), None, 1).unwrap();
    assert_eq!(wire.in_flight().len(), 4);
    // Auto mode delivers what waits, and everything later as it comes.
    wire.set_auto(true);
    assert!(wire.in_flight().is_empty());
    a.send_ctrl(1, 4, b"").unwrap();
    let tags: Vec<u64> = polled(&mut b)
        .iter()
        .filter_map(|c| match c {
            Completion::Ctrl { tag, .. } => Some(*tag),
            _ => None,
        })
        .collect();
    assert_eq!(tags, [1, 2, 3, 4]);
    assert_eq!(read(&dst), [1]);
}

#[test]
fn wait_times_out_or_wakes_on_delivery() {
    let (wire, mut a, mut b) = two(WireConfig::default());
    let t = Instant::now();
    let e = b.wait(&mut Vec::new(), Some(Duration::from_millis(30))).unwrap_err();
    assert!(matches!(e, Error::Timeout { .. }), "{e}");
    assert!(t.elapsed() >= Duration::from_millis(30));
    a.send_ctrl(1, 3, b"hi").unwrap();
    assert!(b.wait(&mut Vec::new(), Some(Duration::from_millis(10))).is_err(), "not delivered yet");
    std::thread::scope(|s| {
        let w = wire.clone();
        s.spawn(move || {
            let it = w.wait_for(Duration::from_secs(10), |it| it.tag() == Some(3)).expect("in flight");
            std::thread::sleep(Duration::from_millis(20));
            w.deliver(it.id).unwrap();
        });
        let mut out = Vec::new();
        assert_eq!(b.wait(&mut out, Some(Duration::from_secs(10))).unwrap(), 1);
        assert_eq!(out, [Completion::Ctrl { peer: 0, tag: 3, data: b"hi".to_vec() }]);
    });
    assert!(wire.wait_for(Duration::from_millis(10), |_| true).is_none());
}

#[test]
fn endpoints_are_taken_once_and_connect_only_to_their_wire() {
    let wire = Wire::new(2).unwrap();
    let other = Wire::new(2).unwrap();
    let mut e0 = wire.endpoint(0).unwrap();
    assert!(wire.endpoint(0).is_err());
    assert!(wire.endpoint(2).is_err());
    let e1 = wire.endpoint(1).unwrap();
    assert!(e0.send_ctrl(1, 0, b"").is_err(), "no data before insert_peers");
    let f1 = other.endpoint(1).unwrap();
    assert!(e0.insert_peers(&[e0.address().unwrap(), f1.address().unwrap()]).is_err());
    assert!(e0.insert_peers(&[e1.address().unwrap(), e0.address().unwrap()]).is_err());
    e0.insert_peers(&[e0.address().unwrap(), e1.address().unwrap()]).unwrap();
    let mr = e0.alloc(8, Access::REMOTE_RW).unwrap();
    assert!(e0.map_remote(1, &mr.remote()).is_err());
    drop(e1);
    assert!(wire.endpoint(1).is_ok(), "a dropped endpoint's rank can be opened again");
    assert!(Wire::new(0).is_err());
}
