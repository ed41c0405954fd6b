//! Ranks that make different calls outside checked mode (issue 37.5): a different root, count,
//! type or collective is found by the call signature every message carries, and reported as a
//! mismatch on every rank — by the call itself, or, on a rank whose own view of the call was
//! complete, by one of its next calls — well before the timeout, on every lane a call can take
//! (mailboxes, straight on the rings, the engine's op, zero-copy grants).

mod common;

use std::time::{Duration, Instant};

use fabcoll::{Collectives, Communicator, Error, ExecConfig, ReduceOp};

/// The timeout every rank runs with: a mismatch must be reported well before it.
const TIMEOUT: Duration = Duration::from_secs(10);

/// The lanes, by configuration.
fn lanes() -> Vec<(&'static str, ExecConfig)> {
    let base = ExecConfig { timeout: TIMEOUT, ..Default::default() };
    vec![
        ("mailbox", base.clone()),
        ("straight", ExecConfig { mailbox_limit: 0, ..base.clone() }),
        ("engine", ExecConfig { mailbox_limit: 0, straight: false, ..base.clone() }),
    ]
}

/// Runs `call` on 4 local ranks with `cfg`; a rank whose call succeeds (its own view of the call
/// may be complete) runs up to three barriers after it. Returns each rank's first error.
fn first_errors(cfg: ExecConfig, call: fn(&Communicator) -> fabcoll::Result<()>) -> Vec<Option<Error>> {
    let comms = Communicator::local_with(4, cfg).unwrap();
    std::thread::scope(|s| {
        let hs: Vec<_> = comms
            .into_iter()
            .map(|c| s.spawn(move || call(&c).and_then(|()| (0..3).try_for_each(|_| c.barrier())).err()))
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// Every rank reports a mismatch, in less than half the timeout.
fn every_rank_reports(what: &str, call: fn(&Communicator) -> fabcoll::Result<()>) {
    for (lane, cfg) in lanes() {
        let t0 = Instant::now();
        let errs = first_errors(cfg, call);
        let took = t0.elapsed();
        for (r, e) in errs.iter().enumerate() {
            let e = e.as_ref().unwrap_or_else(|| panic!("{what}, {lane}: rank {r} saw no error"));
            let named = match e {
                Error::Mismatch(m) | Error::Broken(m) => m.contains("different call"),
                _ => false,
            };
            assert!(named, "{what}, {lane}: rank {r} reported {e}");
        }
        assert!(took < TIMEOUT / 2, "{what}, {lane}: took {took:?}");
    }
}

#[test]
fn a_different_count_is_named_on_every_rank() {
    every_rank_reports("allreduce count", |c| {
        let n = if c.rank() == 2 { 5 } else { 4 };
        c.allreduce(&vec![1u32; n], &mut vec![0u32; n], &ReduceOp::Sum)
    });
}

#[test]
fn a_different_root_is_named_on_every_rank() {
    every_rank_reports("bcast root", |c| {
        let root = if c.rank() < 2 { 0 } else { 2 };
        c.bcast(&mut [7u64; 16], root)
    });
}

#[test]
fn a_different_type_of_the_same_size_is_named_on_every_rank() {
    every_rank_reports("allreduce type", |c| {
        if c.rank() == 1 {
            c.allreduce(&[1i32; 8], &mut [0i32; 8], &ReduceOp::Sum)
        } else {
            c.allreduce(&[1.0f32; 8], &mut [0.0f32; 8], &ReduceOp::Sum)
        }
    });
}

#[test]
fn a_different_reduction_is_named_on_every_rank() {
    every_rank_reports("allreduce op", |c| {
        let op = if c.rank() == 3 { ReduceOp::Max } else { ReduceOp::Sum };
        c.allreduce(&[1u64; 8], &mut [0u64; 8], &op)
    });
}

#[test]
fn a_different_root_of_large_messages_is_named_on_every_rank() {
    // Above the eager threshold: grants and RTS carry the signature.
    every_rank_reports("large bcast root", |c| {
        let root = if c.rank() == 0 { 0 } else { 1 };
        c.bcast(&mut vec![3u8; 1 << 20], root)
    });
}

#[test]
fn matching_calls_are_not_taken_for_mismatches() {
    for (lane, cfg) in lanes() {
        let errs = first_errors(cfg, |c| {
            // In place on some ranks, not on others, and a different root each time: all legal.
            for root in 0..c.size() {
                let mut x = [c.rank() as u64; 8];
                if c.rank() == root {
                    c.reduce_in_place(&mut x, &ReduceOp::Sum, root)?;
                    assert_eq!(x, [6; 8]);
                } else {
                    c.reduce(&x, &mut [], &ReduceOp::Sum, root)?;
                }
                c.bcast(&mut vec![root as u8; 1 << 16], root)?;
            }
            Ok(())
        });
        assert!(errs.iter().all(Option::is_none), "{lane}: {errs:?}");
    }
}
