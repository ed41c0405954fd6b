//! Tagged point-to-point transfers (issue 36.2) on local ranks: every size across the eager limit
//! and zero-copy, the non-overtaking order per pair, transfers crossing in both directions,
//! many in flight, dups kept apart, receives from any source, and bad calls (a different tag, a
//! missing sender, a peer out of range) reported as clear errors that leave the collectives usable.

mod common;

use std::time::{Duration, Instant};

use common::{cfg, local_job, on_ranks};
use fabcoll::{Collectives, Communicator, Error, ExecConfig};

/// Element `i` of the `n`-th message from `src` (distinct per message and position).
fn pattern(src: u32, n: usize, i: usize) -> i64 {
    ((src as i64) << 40) ^ ((n as i64) << 24) ^ i as i64
}

fn message(src: u32, n: usize, len: usize) -> Vec<i64> {
    (0..len).map(|i| pattern(src, n, i)).collect()
}

fn check(got: &[i64], src: u32, n: usize) -> Result<(), String> {
    match got.iter().enumerate().find(|&(i, &v)| v != pattern(src, n, i)) {
        None => Ok(()),
        Some((i, v)) => Err(format!("message {n} from {src}: element {i} is {v:#x}, not {:#x}", pattern(src, n, i))),
    }
}

/// Sizes below, at and above the eager limit, up to 8 MiB (zero-copy in several grants).
const SIZES: [usize; 8] = [0, 1, 7, 100, 1000, 9000, 100_003, 1 << 20];

#[test]
fn every_size_arrives_whole_and_in_order() {
    let comms = Communicator::local_with(3, cfg()).unwrap();
    local_job(comms, |c| {
        let me = c.rank();
        let e = |e: Error| e.to_string();
        if me == 0 {
            for (n, &len) in SIZES.iter().enumerate() {
                for dst in [1, 2] {
                    c.send(&message(0, n, len), dst, n as u32).map_err(e)?;
                }
            }
            for (n, &len) in SIZES.iter().enumerate() {
                let mut got = vec![0i64; len];
                c.recv(&mut got, 1, 7).map_err(e)?;
                check(&got, 1, n)?;
            }
        } else {
            // Rank 0 receives only after its sends: a zero-copy send here before then would wait
            // for it (as MPI's rendezvous does) while it waits for this rank's receives.
            for (n, &len) in SIZES.iter().enumerate() {
                let mut got = vec![-1i64; len];
                c.recv(&mut got, 0, n as u32).map_err(e)?;
                check(&got, 0, n)?;
            }
            if me == 1 {
                for (n, &len) in SIZES.iter().enumerate() {
                    c.send(&message(1, n, len), 0, 7).map_err(e)?;
                }
            }
        }
        Ok(())
    })
    .unwrap();
}

#[test]
fn tags_too_large_for_an_eager_immediate_go_by_rts() {
    // A transfer's tag is its message index: one above the immediate's index bits (17 here) sends
    // even a small message by RTS and grant. Rank 1 receives each blocking as rank 0 sends.
    let comms = Communicator::local_with(2, cfg()).unwrap();
    local_job(comms, |c| {
        let e = |e: Error| e.to_string();
        for (n, &len) in SIZES.iter().enumerate() {
            let tag = u32::MAX - n as u32;
            if c.rank() == 0 {
                c.send(&message(0, n, len), 1, tag).map_err(e)?;
            } else {
                let mut got = vec![-1i64; len];
                c.recv(&mut got, 0, tag).map_err(e)?;
                check(&got, 0, n)?;
            }
        }
        let eager = c.stats().eager_msgs;
        if c.rank() == 0 && eager != 0 {
            return Err(format!("{eager} eager messages with tags beyond the immediate"));
        }
        Ok(())
    })
    .unwrap();
}

#[test]
fn transfers_cross_in_both_directions_without_deadlock() {
    // A halo exchange on a ring of 4: every rank sends to both neighbours and receives from both,
    // all at once, small and zero-copy sizes, several rounds.
    let comms = Communicator::local_with(4, cfg()).unwrap();
    local_job(comms, |c| {
        let (me, p) = (c.rank(), c.size());
        let (left, right) = ((me + p - 1) % p, (me + 1) % p);
        for (round, &len) in [1usize, 5000, 300_000, 64].iter().cycle().take(12).enumerate() {
            let to_right = message(me, 2 * round, len);
            let to_left = message(me, 2 * round + 1, len);
            let mut from_left = vec![0i64; len];
            let mut from_right = vec![0i64; len];
            c.scope(|s| {
                let a = s.recv(&mut from_left, left, 1)?;
                let b = s.send(&to_right, right, 1)?;
                let d = s.send(&to_left, left, 2)?;
                let e = s.recv(&mut from_right, right, 2)?;
                for r in [b, d, a, e] {
                    r.wait()?;
                }
                Ok(())
            })
            .map_err(|e| format!("rank {me} round {round}: {e}"))?;
            check(&from_left, left, 2 * round)?;
            check(&from_right, right, 2 * round + 1)?;
        }
        Ok(())
    })
    .unwrap();
}

#[test]
fn many_in_flight_match_in_order() {
    // More sends in flight than eager slots: some wait for credits or go by rendezvous, and the
    // receives, posted in one scope, still take them in order.
    const N: usize = 150;
    let comms = Communicator::local_with(2, cfg()).unwrap();
    local_job(comms, |c| {
        let e = |e: Error| e.to_string();
        if c.rank() == 0 {
            let msgs: Vec<Vec<i64>> = (0..N).map(|n| message(0, n, 1 + n % 5 * 300)).collect();
            c.scope(|s| {
                for m in &msgs {
                    s.send(m, 1, 3)?;
                }
                Ok(())
            })
            .map_err(e)?;
        } else {
            let mut bufs: Vec<Vec<i64>> = (0..N).map(|n| vec![0; 1 + n % 5 * 300]).collect();
            c.scope(|s| {
                for b in bufs.iter_mut() {
                    s.recv(b, 0, 3)?;
                }
                Ok(())
            })
            .map_err(e)?;
            for (n, b) in bufs.iter().enumerate() {
                check(b, 0, n)?;
            }
        }
        Ok(())
    })
    .unwrap();
}

#[test]
fn dups_and_collectives_keep_their_messages_apart() {
    let comms = Communicator::local_with(2, cfg()).unwrap();
    local_job(comms, |c| {
        let e = |e: Error| e.to_string();
        let d = c.dup().map_err(e)?;
        if c.rank() == 0 {
            // Eager sends complete without their receives: the order here is not rank 1's.
            d.send(&message(0, 1, 10), 1, 0).map_err(e)?;
            c.send(&message(0, 2, 10), 1, 0).map_err(e)?;
        }
        let mut sum = [c.rank() as i64 + 1];
        c.allreduce_in_place(&mut sum, &fabcoll::ReduceOp::Sum).map_err(e)?;
        if sum[0] != 3 {
            return Err(format!("allreduce between transfers gave {}", sum[0]));
        }
        if c.rank() == 1 {
            let mut got = vec![0i64; 10];
            c.recv(&mut got, 0, 0).map_err(e)?;
            check(&got, 0, 2)?;
            d.recv(&mut got, 0, 0).map_err(e)?;
            check(&got, 0, 1)?;
        }
        c.barrier().map_err(e)
    })
    .unwrap();
}

#[test]
fn a_different_tag_is_a_mismatch_and_collectives_go_on() {
    for len in [4usize, 200_000] {
        let timeout = Duration::from_secs(10);
        let comms = Communicator::local_with(2, ExecConfig { timeout, ..cfg() }).unwrap();
        let t0 = Instant::now();
        let errs = on_ranks(comms, |c| {
            let mut buf = vec![0i64; len];
            // A matching transfer of the same size first: the one that differs only by its tag
            // must not take the remembered plan and signature of this one.
            match c.rank() {
                0 => c.send(&buf, 1, 1),
                _ => c.recv(&mut buf, 0, 1),
            }
            .map_err(|e| e.to_string())?;
            let r = match c.rank() {
                0 => c.send(&buf, 1, 1),
                _ => c.recv(&mut buf, 0, 2),
            };
            let barrier = c.barrier();
            // An eager send may complete before the receiver sees it: the receiver's notice
            // then breaks the sender's transfers, and a later one reports it.
            let r = match (r, c.rank()) {
                (Ok(()), 0) => (0..100).find_map(|_| {
                    std::thread::sleep(Duration::from_millis(10));
                    c.send(&buf, 1, 1).err()
                }),
                (r, _) => r.err(),
            };
            barrier.map(|()| r).map_err(|e| e.to_string())
        });
        for (r, e) in errs.into_iter().enumerate() {
            let e = e.unwrap_or_else(|e| panic!("len {len}: rank {r}'s barrier after the mismatch failed: {e}"));
            let e = e.unwrap_or_else(|| panic!("len {len}: rank {r} saw no error"));
            let named = match &e {
                Error::Mismatch(m) | Error::Broken(m) => m.contains("same tag"),
                _ => false,
            };
            assert!(named, "len {len}: rank {r} reported {e}");
        }
        assert!(t0.elapsed() < timeout / 2, "len {len}: took {:?}", t0.elapsed());
    }
}

#[test]
fn a_receive_without_a_sender_times_out_naming_it() {
    let timeout = Duration::from_secs(2);
    let comms = Communicator::local_with(3, ExecConfig { timeout, ..cfg() }).unwrap();
    let errs = on_ranks(comms, |c| {
        let r = match c.rank() {
            2 => {
                let mut buf = [0u8; 16];
                c.recv(&mut buf, 1, 0).err()
            }
            // Until rank 2 has given up (timeout and grace), so that the barrier finds it.
            _ => {
                std::thread::sleep(timeout * 2);
                None
            }
        };
        c.barrier().unwrap();
        r
    });
    match &errs[2] {
        Some(Error::Timeout { coll: "recv", waiting_for, .. }) => assert_eq!(waiting_for, &[1]),
        e => panic!("rank 2 reported {e:?}"),
    }
}

#[test]
fn bad_peers_are_refused() {
    let comms = Communicator::local_with(2, cfg()).unwrap();
    let c = &comms[0];
    let refused = |r: fabcoll::Result<()>, what: &str| match r {
        Err(Error::InvalidArgument { msg, .. }) if msg.contains(what) => {}
        r => panic!("expected an error naming {what:?}, got {r:?}"),
    };
    refused(c.send(&[1u32], 2, 0), "out of range");
    refused(c.send(&[1u32], 0, 0), "itself");
    let mut b = [0u32];
    refused(c.recv(&mut b, 5, 0), "out of range");
    refused(c.recv(&mut b, 0, 0), "itself");
}

#[test]
fn a_receive_from_any_source_takes_each_senders_message_once_at_every_size() {
    // A sender waiting for a grant asks after a quarter of the timeout whether its receiver makes
    // the call (an empty RTS): the receives must not have waited for that.
    let timeout = Duration::from_secs(60);
    let comms = Communicator::local_with(4, ExecConfig { timeout, ..cfg() }).unwrap();
    local_job(comms, |c| {
        let e = |e: Error| e.to_string();
        let me = c.rank();
        for (n, &len) in SIZES.iter().enumerate().skip(1) {
            if me == 0 {
                let t0 = Instant::now();
                let mut seen = Vec::new();
                for _ in 1..4 {
                    let mut got = vec![-1i64; len];
                    let src = c.recv_any(&mut got, n as u32).map_err(e)?;
                    check(&got, src, n)?;
                    seen.push(src);
                }
                seen.sort_unstable();
                if seen != [1, 2, 3] {
                    return Err(format!("size {len}: senders {seen:?}"));
                }
                if t0.elapsed() >= timeout / 4 {
                    return Err(format!("size {len}: the senders were found only by their timeout's probe"));
                }
            } else {
                c.send(&message(me, n, len), 0, n as u32).map_err(e)?;
            }
        }
        Ok(())
    })
    .unwrap();
}

/// Ranks 1 and 2 of a job of 3 send rank 0 a message of `len` elements in turn: rank 1's with
/// tag `a` first, then, once rank 1 has told it so, rank 2's with tag `b`.
fn send_in_turn(c: &Communicator, len: usize, a: u32, b: u32) -> Result<(), String> {
    let e = |e: Error| e.to_string();
    if c.rank() == 1 {
        let m = message(1, 0, len);
        return c
            .scope(|s| {
                s.send(&m, 0, a)?;
                s.comm().send(&[1u8], 2, 0)
            })
            .map_err(e);
    }
    c.recv(&mut [0u8], 1, 0).map_err(e)?;
    c.send(&message(2, 0, len), 0, b).map_err(e)
}

#[test]
fn sendrecv_exchanges_along_a_ring_at_every_size_from_a_named_or_any_source() {
    let comms = Communicator::local_with(3, cfg()).unwrap();
    local_job(comms, |c| {
        let e = |e: Error| e.to_string();
        let (me, p) = (c.rank(), c.size());
        let (right, left) = ((me + 1) % p, (me + p - 1) % p);
        for (n, &len) in SIZES.iter().enumerate() {
            let mut got = vec![-1i64; len];
            let source = (len == 0 || n % 2 == 0).then_some(left);
            let from = c.sendrecv(&message(me, n, len), right, n as u32, &mut got, source, n as u32).map_err(e)?;
            check(&got, left, n)?;
            if from != left {
                return Err(format!("len {len}: received from {from}, not {left}"));
            }
        }
        Ok(())
    })
    .unwrap();
}

#[test]
fn a_receive_from_any_source_skips_a_message_with_another_tag() {
    // Rank 1's message (tag a) is sent first; rank 2 sends its own (tag b) only after rank 1 has
    // told it so. A receive from any source with tag b must take rank 2's, then one with tag a
    // rank 1's: below and above the eager limit, with tags that fit an eager immediate and tags
    // that do not (sent by RTS).
    for (len, (a, b)) in [10, 100_003].into_iter().flat_map(|l| [(l, (5, 6)), (l, (1 << 30, (1 << 30) + 1))]) {
        let comms = Communicator::local_with(3, cfg()).unwrap();
        local_job(comms, |c| {
            let e = |e: Error| e.to_string();
            match c.rank() {
                0 => {
                    let mut got = vec![0i64; len];
                    let first = c.recv_any(&mut got, b).map_err(e)?;
                    check(&got, 2, 0)?;
                    let second = c.recv_any(&mut got, a).map_err(e)?;
                    check(&got, 1, 0)?;
                    if (first, second) != (2, 1) {
                        return Err(format!("len {len}: took tag {b} from {first}, tag {a} from {second}"));
                    }
                }
                _ => send_in_turn(c, len, a, b)?,
            }
            Ok(())
        })
        .unwrap();
    }
}

#[test]
fn a_send_already_waiting_for_its_grant_is_announced_when_its_receiver_asks() {
    // Rank 1 starts a large send to rank 0 (it waits for a grant), then tells rank 2, which tells
    // rank 0: only then does rank 0 receive from any source. Rank 1 learns of it while waiting
    // and announces the send at once, not after a quarter of the timeout (its probe).
    let timeout = Duration::from_secs(60);
    let comms = Communicator::local_with(3, ExecConfig { timeout, ..cfg() }).unwrap();
    let len = 100_003;
    local_job(comms, |c| {
        let e = |e: Error| e.to_string();
        match c.rank() {
            0 => {
                c.recv(&mut [0u8], 2, 99).map_err(e)?;
                let t0 = Instant::now();
                let mut got = vec![0i64; len];
                let src = c.recv_any(&mut got, 7).map_err(e)?;
                check(&got, 1, 0)?;
                if (src, t0.elapsed() < timeout / 4) != (1, true) {
                    return Err(format!("rank {src}'s message, after {:?}", t0.elapsed()));
                }
            }
            1 => {
                let m = message(1, 0, len);
                c.scope(|s| {
                    s.send(&m, 0, 7)?;
                    s.comm().send(&[1u8], 2, 98)
                })
                .map_err(e)?;
            }
            _ => {
                c.recv(&mut [0u8], 1, 98).map_err(e)?;
                c.send(&[1u8], 0, 99).map_err(e)?;
            }
        }
        Ok(())
    })
    .unwrap();
}

#[test]
fn a_probe_names_the_sender_and_tag_of_a_message_it_may_pick_by_either() {
    // Rank 1 sends tag 40, then tells rank 2, which sends tag 50 (small, then large). Rank 0
    // probes rank 2 for any tag, then any rank for any tag, and receives what they named.
    for len in [10, 100_003] {
        let comms = Communicator::local_with(3, cfg()).unwrap();
        local_job(comms, |c| {
            let e = |e: Error| e.to_string();
            match c.rank() {
                0 => {
                    let mut got = vec![0i64; len];
                    let p = c.probe(Some(2), None).map_err(e)?;
                    if (p.source, p.tag) != (2, 50) {
                        return Err(format!("len {len}: probing rank 2 found {p:?}"));
                    }
                    c.recv(&mut got, 2, 50).map_err(e)?;
                    check(&got, 2, 0)?;
                    let p = c.probe(None, None).map_err(e)?;
                    if (p.source, p.tag) != (1, 40) {
                        return Err(format!("len {len}: probing any rank found {p:?}"));
                    }
                    c.recv(&mut got, 1, 40).map_err(e)?;
                    check(&got, 1, 0)?;
                }
                _ => send_in_turn(c, len, 40, 50)?,
            }
            Ok(())
        })
        .unwrap();
    }
}

#[test]
fn iprobe_finds_nothing_before_the_send_and_the_message_after_it() {
    for len in [10, 100_003] {
        let comms = Communicator::local_with(2, cfg()).unwrap();
        local_job(comms, |c| {
            let e = |e: Error| e.to_string();
            if c.rank() == 1 {
                c.recv(&mut [0u8], 0, 1).map_err(e)?;
                return c.send(&message(1, 0, len), 0, 3).map_err(e);
            }
            if let Some(p) = c.iprobe(None, None).map_err(e)? {
                return Err(format!("len {len}: found {p:?} before anything was sent"));
            }
            c.send(&[1u8], 1, 1).map_err(e)?;
            let t0 = Instant::now();
            let found = loop {
                match c.iprobe(None, Some(3)).map_err(e)? {
                    Some(p) => break p,
                    None if t0.elapsed() > Duration::from_secs(20) => return Err(format!("len {len}: nothing came")),
                    None => std::thread::yield_now(),
                }
            };
            if (found.source, found.tag) != (1, 3) {
                return Err(format!("len {len}: found {found:?}"));
            }
            let mut got = vec![0i64; len];
            c.recv(&mut got, 1, 3).map_err(e)?;
            check(&got, 1, 0)
        })
        .unwrap();
    }
}

#[test]
fn a_receive_from_any_source_comes_after_the_receives_posted_before_it() {
    // Rank 0 posts a receive from rank 1, then receives from any source: rank 1's first message
    // is the posted receive's, its second the any-source one's.
    for len in [10, 100_003] {
        let comms = Communicator::local_with(2, cfg()).unwrap();
        local_job(comms, |c| {
            let e = |e: Error| e.to_string();
            if c.rank() == 1 {
                let (m0, m1) = (message(1, 0, len), message(1, 1, len));
                c.scope(|s| {
                    s.send(&m0, 0, 3)?;
                    s.send(&m1, 0, 3)?;
                    Ok(())
                })
                .map_err(e)?;
                return Ok(());
            }
            let (mut first, mut second) = (vec![0i64; len], vec![0i64; len]);
            let src = c
                .scope(|s| {
                    s.recv(&mut first, 1, 3)?;
                    let (second, src) = s.recv_any(&mut second, 3)?;
                    second.wait()?;
                    Ok(src)
                })
                .map_err(e)?;
            check(&first, 1, 0)?;
            check(&second, 1, 1)?;
            if src != 1 {
                return Err(format!("any source gave {src}"));
            }
            Ok(())
        })
        .unwrap();
    }
}

#[test]
fn a_receive_from_any_source_without_a_sender_times_out_and_bad_ones_are_refused() {
    let timeout = Duration::from_millis(600);
    let comms = Communicator::local_with(3, ExecConfig { timeout, ..cfg() }).unwrap();
    let c = &comms[1];
    let mut buf = [0u16; 4];
    let t0 = Instant::now();
    match c.recv_any(&mut buf, 0) {
        Err(Error::Timeout { coll: "recv", waiting_for, .. }) => assert_eq!(waiting_for, [0, 2]),
        r => panic!("expected a timeout, got {r:?}"),
    }
    assert!(t0.elapsed() >= timeout && t0.elapsed() < timeout * 4, "took {:?}", t0.elapsed());
    match c.recv_any(&mut buf[..0], 0) {
        Err(Error::InvalidArgument { msg, .. }) if msg.contains("at least one element") => {}
        r => panic!("expected a refusal, got {r:?}"),
    }
    match c.sendrecv(&[1u16], 0, 0, &mut buf[..0], None, 0) {
        Err(Error::InvalidArgument { msg, .. }) if msg.contains("at least one element") => {}
        r => panic!("expected a refusal, got {r:?}"),
    }
    assert_eq!(c.stats().eager_msgs, 0, "the refused sendrecv sent nothing");
    match c.probe(Some(0), None) {
        Err(Error::Timeout { coll: "recv", waiting_for, .. }) => assert_eq!(waiting_for, [0]),
        r => panic!("expected a timeout, got {r:?}"),
    }
    for (source, what) in [(1, "itself"), (3, "out of range")] {
        match c.probe(Some(source), Some(0)) {
            Err(Error::InvalidArgument { msg, .. }) if msg.contains(what) => {}
            r => panic!("expected a refusal naming {what:?}, got {r:?}"),
        }
    }
}
