//! Progress without polling (`exec::progress`): a nonblocking collective finishes while every
//! rank computes without calling fabcoll, and an awaited request is woken when it has finished
//! instead of asking to be polled again and again. With `FABCOLL_PROGRESS=0`
//! (`ExecConfig::progress_thread = false`) neither holds: the control cases.

mod common;

use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use fabcoll::{Collectives, Communicator, ExecConfig, Options, ReduceOp};

fn job<R: Send>(p: usize, cfg: ExecConfig, f: impl Fn(&Communicator) -> R + Sync) -> Vec<R> {
    common::on_ranks(Communicator::local_with(p, cfg).unwrap(), f)
}

fn cfg(progress_thread: bool) -> ExecConfig {
    ExecConfig { progress_thread, ..common::cfg() }
}

/// A ring allreduce large enough to go zero-copy: 2(p − 1) steps, each waiting for a peer.
const N: usize = 1 << 18;

/// Makes `waited` nonblocking calls each waited for at once (they leave the progress thread's
/// alarm set, for a grace), then starts the allreduce, computes (sleeps) without calling fabcoll,
/// and tests once: whether the collective had finished by itself; the result is checked either
/// way.
fn finished_while_computing(progress_thread: bool, waited: usize) -> Vec<bool> {
    job(3, cfg(progress_thread), |c| {
        let a: Vec<i64> = (0..N as i64).map(|i| i + i64::from(c.rank())).collect();
        let mut out = vec![0i64; N];
        for _ in 0..waited {
            c.scope(|s| s.allreduce(&a[..8], &mut out[..8], &ReduceOp::Sum)?.wait()).unwrap();
        }
        let done = c
            .scope(|s| {
                s.set_options(Options::algorithm("ring"));
                let mut q = s.allreduce(&a, &mut out, &ReduceOp::Sum)?;
                std::thread::sleep(Duration::from_millis(400));
                let first = q.test().is_some();
                q.wait()?;
                Ok(first)
            })
            .unwrap();
        assert!(out.iter().enumerate().all(|(i, &x)| x == 3 * i as i64 + 3), "rank {}", c.rank());
        done
    })
}

#[test]
fn a_nonblocking_call_finishes_while_the_program_computes() {
    let with = finished_while_computing(true, 0);
    assert!(with.iter().all(|&d| d), "with the progress thread every rank's call finished: {with:?}");
    let without = finished_while_computing(false, 0);
    assert!(without.iter().all(|&d| !d), "without it nothing moved while the ranks computed: {without:?}");
}

/// The calls waited for at once leave the alarm set: the thread wakes during the first grace of
/// the left call, sees those takes, and must set another grace instead of sleeping for good. A
/// few calls, so that they and the left call's start fit in the first call's grace (fifty, in a
/// debug build, outlasted it now and then, and the thread then woke with nothing left).
#[test]
fn a_call_left_after_calls_waited_for_at_once_still_finishes_while_the_program_computes() {
    let with = finished_while_computing(true, 5);
    assert!(with.iter().all(|&d| d), "every rank's call finished: {with:?}");
}

/// torch's synchronous calls: each request is waited for soon after its start (here after a short
/// sleep, well within the grace, the core given away meanwhile). The progress thread must not poll
/// for them: where ranks share cores a wake-up per call takes a core from a rank the others wait for.
#[test]
fn requests_waited_for_soon_leave_the_progress_thread_asleep() {
    const CALLS: u64 = 100;
    let wakeups = job(2, cfg(true), |c| {
        let a = vec![1i64; N];
        let mut out = vec![0i64; N];
        let before = c.stats();
        for _ in 0..CALLS {
            c.scope(|s| {
                s.set_options(Options::algorithm("ring"));
                let q = s.allreduce(&a, &mut out, &ReduceOp::Sum)?;
                std::thread::sleep(Duration::from_micros(200));
                q.wait()
            })
            .unwrap();
        }
        assert!(out.iter().all(|&x| x == 2));
        c.stats().since(&before).progress_wakeups
    });
    // A rank descheduled for longer than the grace between a start and its wait wakes it a few
    // times.
    assert!(wakeups.iter().all(|&w| w < CALLS / 10), "progress thread wake-ups per rank in {CALLS} calls: {wakeups:?}");
}

/// A waker that counts nothing but whether it was woken; the task parks until it is.
struct Flag {
    woken: AtomicBool,
    task: std::thread::Thread,
}

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        self.task.unpark();
    }
}

/// Runs `f` to its end, parking between polls until woken; returns the output and the polls.
fn block_on_counting<F: Future>(f: F) -> (F::Output, u32) {
    let flag = Arc::new(Flag { woken: AtomicBool::new(false), task: std::thread::current() });
    let waker = Waker::from(flag.clone());
    let mut cx = Context::from_waker(&waker);
    let mut f = pin!(f);
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut polls = 0;
    loop {
        polls += 1;
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return (v, polls);
        }
        while !flag.woken.swap(false, Ordering::AcqRel) {
            assert!(Instant::now() < deadline, "never woken after {polls} polls");
            std::thread::park_timeout(Duration::from_millis(100));
        }
    }
}

#[test]
fn an_awaited_request_is_woken_when_it_has_finished() {
    for thread in [true, false] {
        let polls = job(3, cfg(thread), |c| {
            let a = vec![i64::from(c.rank()) + 1; N];
            let mut out = vec![0i64; N];
            let polls = c
                .scope(|s| {
                    s.set_options(Options::algorithm("ring"));
                    let q = s.allreduce(&a, &mut out, &ReduceOp::Sum)?;
                    let (r, polls) = block_on_counting(q);
                    r.map(|()| polls)
                })
                .unwrap();
            assert!(out.iter().all(|&x| x == 6));
            polls
        });
        if thread {
            // Woken once the op finished (a spurious wake or two at most), never spun.
            assert!(polls.iter().all(|&n| n <= 4), "polls per rank with the thread: {polls:?}");
        } else {
            // The rank that starts last may find its part done by the others' polls; the others poll on.
            assert!(polls.iter().any(|&n| n > 4), "without the thread each poll moves it a little: {polls:?}");
        }
    }
}
