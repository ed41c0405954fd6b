//! Backend `local`: the common scenarios among 4 (and 1, 2, 3) ranks running as threads.

mod local_common;

use std::time::Duration;

use fabcoll_fabric::{Access, Backend, Endpoint, Error, LocalFabric, RemoteMr};

fn run_threads(p: usize, job: &str, f: fn(&mut dyn Endpoint) -> Result<(), String>) {
    local_common::run_threads(Backend::Local, p, job, f);
}

#[test]
fn local_scenarios_4_ranks() {
    run_threads(4, "local_scenarios_4", local_common::all);
}

#[test]
fn local_scenarios_odd_and_tiny_groups() {
    for p in [1, 2, 3] {
        run_threads(p, &format!("local_scenarios_{p}"), |ep| {
            let mut inbox = local_common::Inbox::new();
            local_common::ring(ep, &mut inbox, 1000)?;
            local_common::ctrl_both_ways(ep, &mut inbox, 10)?;
            local_common::write_to_deregistered(ep, &mut inbox)
        });
    }
}

#[test]
fn local_bad_arguments_are_errors() {
    let fabric = LocalFabric::new(2).unwrap();
    let mut eps = fabric.endpoints().unwrap();
    assert!(fabric.endpoint(0, Default::default()).is_err(), "a rank can be opened once");
    let blobs: Vec<Vec<u8>> = eps.iter().map(|e| e.address().unwrap()).collect();
    let other = LocalFabric::new(2).unwrap().endpoints().unwrap();
    let foreign: Vec<Vec<u8>> = other.iter().map(|e| e.address().unwrap()).collect();
    let (a, rest) = eps.split_at_mut(1);
    let (a, b) = (&mut a[0], &mut rest[0]);
    let mr = a.alloc(64, Access::LOCAL).unwrap();
    let dst = b.alloc(64, Access::REMOTE_WRITE).unwrap();
    assert!(a.write(1, mr.range(), dst.remote().range(), None, 0).is_err(), "write before insert_peers");
    assert!(matches!(a.insert_peers(&foreign), Err(Error::Address(_))));
    assert!(matches!(a.insert_peers(&blobs[..1]), Err(Error::Address(_))));
    a.insert_peers(&blobs).unwrap();
    b.insert_peers(&blobs).unwrap();
    assert!(a.write(2, mr.range(), dst.remote().range(), None, 0).is_err(), "peer out of range");
    assert!(matches!(
        a.write(1, mr.range(), dst.remote().slice(8, 56).unwrap(), None, 0),
        Err(Error::InvalidArgument(_))
    ));
    let overlong = RemoteMr { len: 128, ..dst.remote() };
    assert!(matches!(
        a.write(1, mr.slice(0, 64).unwrap(), overlong.slice(64, 64).unwrap(), None, 0),
        Err(Error::OutOfBounds { .. })
    ));
    let ro = b.alloc(64, Access::LOCAL).unwrap();
    assert!(matches!(a.write(1, mr.range(), ro.remote().range(), None, 0), Err(Error::Access(_))));
    assert!(a.send_ctrl(1, 0, &vec![0; a.caps().max_ctrl + 1]).is_err());
    let mut out = Vec::new();
    assert!(matches!(a.wait(&mut out, Some(Duration::from_millis(20))), Err(Error::Timeout { .. })));
    // Direct load/store on an allocated peer buffer.
    let shared = b.alloc(64, Access::REMOTE_RW).unwrap();
    let map = a.map_remote(1, &shared.remote()).unwrap();
    // SAFETY: in bounds of a live 64-byte mapping; no concurrent access in this test.
    unsafe { map.as_ptr().add(3).write(42) };
    let mut got = [0u8; 4];
    shared.read_at(0, &mut got).unwrap();
    assert_eq!(got, [0, 0, 0, 42]);
}

/// 8 threads (typically on 2 cores), 300 rounds of a ring of notified 8-byte writes with a wait
/// policy that blocks early (condvar path); must not collapse.
#[test]
fn local_oversubscribed_8_threads() {
    let fabric = LocalFabric::new(8).unwrap();
    let mut eps: Vec<_> =
        (0..8).map(|r| fabric.endpoint(r, fabcoll_fabric::WaitPolicy::oversubscribed()).unwrap()).collect();
    let blobs: Vec<Vec<u8>> = eps.iter().map(|e| e.address().unwrap()).collect();
    let t = std::time::Instant::now();
    std::thread::scope(|s| {
        let hs: Vec<_> = eps
            .iter_mut()
            .map(|ep| {
                let blobs = &blobs;
                s.spawn(move || -> Result<(), String> {
                    ep.insert_peers(blobs).map_err(|e| e.to_string())?;
                    let (r, p) = (ep.rank(), ep.size());
                    let (right, left) = ((r + 1) % p, (r + p - 1) % p);
                    let dst = ep.alloc(8, Access::REMOTE_WRITE).map_err(|e| e.to_string())?;
                    let src = ep.alloc(8, Access::LOCAL).map_err(|e| e.to_string())?;
                    ep.send_ctrl(left, 1, &dst.remote().to_bytes()).map_err(|e| e.to_string())?;
                    let mut inbox = local_common::Inbox::new();
                    let desc = RemoteMr::from_bytes(&inbox.ctrl(ep, right, 1)?).map_err(|e| e.to_string())?;
                    for round in 0..300u64 {
                        src.write_at(0, &(round * 1000 + r as u64).to_le_bytes()).map_err(|e| e.to_string())?;
                        ep.write(right, src.range(), desc.range(), Some(round), round).map_err(|e| e.to_string())?;
                        let want = fabcoll_fabric::Completion::WriteArrived { peer: left, imm: round };
                        inbox.expect(ep, "arrival", |c| *c == want)?;
                        let mut b = [0u8; 8];
                        dst.read_at(0, &mut b).map_err(|e| e.to_string())?;
                        if u64::from_le_bytes(b) != round * 1000 + left as u64 {
                            return Err(format!("rank {r} round {round}: wrong data"));
                        }
                        ep.send_ctrl(left, 2, &[]).map_err(|e| e.to_string())?;
                        inbox.ctrl(ep, right, 2)?;
                    }
                    Ok(())
                })
            })
            .collect();
        let errs: Vec<String> = hs.into_iter().filter_map(|h| h.join().unwrap().err()).collect();
        assert!(errs.is_empty(), "{errs:#?}");
    });
    assert!(t.elapsed() < Duration::from_secs(30), "8 oversubscribed threads took {:?}", t.elapsed());
}
