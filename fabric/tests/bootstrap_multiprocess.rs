//! The bootstrap store across real processes: address exchange, barrier and atomic add.

mod support;

use std::time::Duration;

#[test]
fn processes_exchange_blobs_through_the_store() {
    support::ranks("processes_exchange_blobs_through_the_store", 4, Duration::from_secs(60), &[], |job| {
        let mine = format!("blob of rank {}", job.rank());
        let all = job.exchange("addr", mine.as_bytes());
        for (r, b) in all.iter().enumerate() {
            assert_eq!(b, format!("blob of rank {r}").as_bytes());
        }
        let n = job.store.add("arrivals", 1).unwrap();
        assert!((1..=4).contains(&n));
        job.barrier("after-add");
        assert_eq!(job.store.add("arrivals", 0).unwrap(), 4);
    });
}

#[test]
fn a_failing_rank_fails_the_job_with_its_output() {
    // The harness itself must report a failing child (and kill the rest) instead of hanging.
    if std::env::var("FABCOLL_TEST_CHILD").is_ok() {
        support::ranks("a_failing_rank_fails_the_job_with_its_output", 3, Duration::from_secs(30), &[], |job| {
            if job.rank() == 1 {
                panic!("rank one gives up");
            }
            // The others wait for a key that never comes; the parent must kill them.
            let _ = job.store.wait("never", Duration::from_secs(60));
        });
        return;
    }
    let r = std::panic::catch_unwind(|| {
        support::ranks("a_failing_rank_fails_the_job_with_its_output", 3, Duration::from_secs(30), &[], |_| {})
    });
    let msg = *r.expect_err("the job must fail").downcast::<String>().unwrap();
    assert!(msg.contains("rank 1 failed") && msg.contains("rank one gives up"), "{msg}");
}

#[test]
fn a_silent_peer_is_a_timeout_naming_it() {
    support::ranks("a_silent_peer_is_a_timeout_naming_it", 3, Duration::from_secs(60), &[], |job| {
        if job.rank() == 2 {
            return; // never publishes
        }
        let e = fabcoll_fabric::bootstrap::exchange(
            &*job.store,
            "addr",
            job.rank(),
            job.size(),
            b"x",
            Duration::from_millis(500),
        )
        .unwrap_err();
        assert!(e.to_string().contains("[2]"), "{e}");
    });
}
