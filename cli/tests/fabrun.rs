//! `fabrun` end to end: environment and prefixed output of every rank, a failing rank stopping the
//! job with its exit code, the timeout naming the ranks still running, signal forwarding, and
//! bad arguments as clear errors. Every run has a wall-clock limit, so nothing can hang.

#[path = "common/child.rs"]
mod child;

use std::process::Command;
use std::time::Duration;

const FABRUN: &str = env!("CARGO_BIN_EXE_fabrun");

use child::Output as Out;

/// Runs fabrun with `args`; kills it and fails the test after `limit`. `during` runs with the
/// child's pid once it has started (for signal tests).
fn fabrun_with(args: &[&str], limit: Duration, during: impl FnOnce(u32)) -> Out {
    child::run_limited(Command::new(FABRUN).args(args), limit, during)
}

fn fabrun(args: &[&str], limit: Duration) -> Out {
    fabrun_with(args, limit, |_| {})
}

const LIMIT: Duration = Duration::from_secs(60);

#[test]
fn every_rank_gets_the_job_environment_and_a_prefix() {
    let o = fabrun(
        &[
            "-n",
            "3",
            "--fabric",
            "shm",
            "sh",
            "-c",
            "echo rank=$FABCOLL_RANK size=$FABCOLL_SIZE local=$FABCOLL_LOCAL_RANK/$FABCOLL_LOCAL_SIZE \
             store=$FABCOLL_STORE server=$FABCOLL_STORE_SERVER fabric=$FABCOLL_FABRIC token=$FABCOLL_TOKEN",
        ],
        LIMIT,
    );
    assert!(o.status.success(), "{:?}\n{}", o.status, o.stderr);
    let lines: Vec<&str> = o.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{}", o.stdout);
    let mut tokens = Vec::new();
    for r in 0..3 {
        let l =
            lines.iter().find(|l| l.starts_with(&format!("[{r}] "))).unwrap_or_else(|| panic!("rank {r}: {lines:?}"));
        assert!(l.contains(&format!("rank={r} size=3 local={r}/3 store=tcp://127.0.0.1:")), "{l}");
        assert!(l.contains("server=launcher fabric=shm token="), "{l}");
        let token = l.rsplit("token=").next().unwrap();
        assert_eq!(token.len(), 32, "{l}");
        tokens.push(token.to_owned());
    }
    assert!(tokens.iter().all(|t| t == &tokens[0]), "one token per job: {tokens:?}");
    // A new job gets a new token.
    let o2 = fabrun(&["-n", "1", "sh", "-c", "echo $FABCOLL_TOKEN"], LIMIT);
    assert_ne!(o2.stdout.trim().trim_start_matches("[0] "), tokens[0]);
}

#[test]
fn lines_are_never_interleaved() {
    // 4 ranks each write 300 lines of 3000 bytes as fast as they can.
    let o = fabrun(
        &["-n", "4", "sh", "-c", "l=$(printf \"%03000d\" $FABCOLL_RANK); for i in $(seq 300); do echo \"$l\"; done"],
        LIMIT,
    );
    assert!(o.status.success(), "{}", o.stderr);
    let mut per_rank = [0usize; 4];
    for l in o.stdout.lines() {
        let r: usize = l[1..2].parse().unwrap_or_else(|_| panic!("bad line start {:?}", &l[..10.min(l.len())]));
        assert_eq!(l.len(), 4 + 3000, "rank {r}: line of {} bytes", l.len());
        assert!(l[4..].ends_with(&r.to_string()) && l[4..l.len() - 1].bytes().all(|b| b == b'0'), "mixed line");
        per_rank[r] += 1;
    }
    assert_eq!(per_rank, [300; 4]);
}

#[test]
fn a_failing_rank_stops_the_job_with_its_code() {
    let o = fabrun(
        &[
            "-n",
            "4",
            "--timeout",
            "50",
            "sh",
            "-c",
            "if [ \"$FABCOLL_RANK\" = 2 ]; then sleep 0.2; exit 3; fi; sleep 40; echo survived",
        ],
        LIMIT,
    );
    assert_eq!(o.status.code(), Some(3), "{}", o.stderr);
    assert!(o.took < Duration::from_secs(20), "took {:?}", o.took);
    assert!(o.stderr.contains("fabrun: rank 2 exited with code 3"), "{}", o.stderr);
    assert!(o.stderr.contains("rank(s) 0, 1, 3 get 2.0 s to report"), "{}", o.stderr);
    assert!(!o.stdout.contains("survived"), "{}", o.stdout);
    assert!(
        o.stderr.contains("fabrun: rank 1 was stopped by fabrun (SIGTERM) after the failure above"),
        "{}",
        o.stderr
    );
}

/// The other ranks' last lines reach the user: after a failure they get the grace period to
/// notice it and report before fabrun stops them (a rank stopped at once lost its error).
#[test]
fn the_other_ranks_report_before_they_are_stopped() {
    let script = "if [ $FABCOLL_RANK = 0 ]; then echo 'rank 0: broken' >&2; exit 4; fi; \
                  sleep 0.5; echo \"rank $FABCOLL_RANK: peer 0 is gone\" >&2; exit 1";
    let o = fabrun(&["-n", "3", "--timeout", "50", "sh", "-c", script], LIMIT);
    assert_eq!(o.status.code(), Some(4), "{}", o.stderr);
    for r in 0..3 {
        let words = if r == 0 { "[0] rank 0: broken".to_owned() } else { format!("[{r}] rank {r}: peer 0 is gone") };
        assert!(o.stderr.contains(&words), "{words:?} lost:\n{}", o.stderr);
    }
    assert!(!o.stderr.contains("stopped by fabrun"), "they ended on their own:\n{}", o.stderr);
}

#[test]
fn ranks_ignoring_sigterm_are_killed_and_the_first_code_stays() {
    // Rank 0 fails (once the others have set their trap); they ignore SIGTERM, so the timeout
    // (before the grace ends) kills them.
    let script = "if [ $FABCOLL_RANK = 0 ]; then sleep 0.3; exit 5; fi; trap '' TERM; sleep 40";
    let o = fabrun(&["-n", "3", "--timeout", "1.5", "--grace", "30", "sh", "-c", script], LIMIT);
    assert_eq!(o.status.code(), Some(5), "{}", o.stderr);
    assert!(o.took < Duration::from_secs(15), "took {:?}", o.took);
    assert!(o.stderr.contains("rank 0 exited with code 5; rank(s) 1, 2 get 30.0 s"), "{}", o.stderr);
    assert!(o.stderr.contains("rank(s) still running: 1, 2"), "{}", o.stderr);
}

#[test]
fn a_rank_killed_by_a_signal_gives_128_plus_the_signal() {
    let o = fabrun(&["-n", "2", "sh", "-c", "if [ $FABCOLL_RANK = 1 ]; then kill -9 $$; fi; sleep 40"], LIMIT);
    assert_eq!(o.status.code(), Some(128 + 9), "{}", o.stderr);
    assert!(o.stderr.contains("rank 1 was killed by signal 9"), "{}", o.stderr);
}

#[test]
fn the_timeout_names_the_ranks_still_running() {
    let o = fabrun(
        &["-n", "3", "--timeout", "1", "sh", "-c", "if [ $FABCOLL_RANK = 1 ]; then exit 0; fi; sleep 40"],
        LIMIT,
    );
    assert_eq!(o.status.code(), Some(124), "{}", o.stderr);
    assert!(o.took < Duration::from_secs(15), "took {:?}", o.took);
    assert!(o.stderr.contains("timed out after 1.0 s; rank(s) still running: 0, 2"), "{}", o.stderr);
}

#[test]
fn sigterm_is_forwarded_to_every_rank() {
    let script = "trap 'echo got TERM; exit 7' TERM; echo ready; sleep 40 & wait";
    let o = fabrun_with(&["-n", "2", "--timeout", "50", "sh", "-c", script], LIMIT, |pid| {
        std::thread::sleep(Duration::from_millis(700));
        let pid = rustix::process::Pid::from_raw(pid as i32).expect("pid");
        rustix::process::kill_process(pid, rustix::process::Signal::TERM).expect("kill");
    });
    assert_eq!(o.status.code(), Some(7), "{}\n{}", o.stdout, o.stderr);
    assert!(o.stderr.contains("SIGTERM received; forwarding to rank(s) 0, 1"), "{}", o.stderr);
    assert!(o.stdout.contains("[0] got TERM") || o.stdout.contains("[1] got TERM"), "{}", o.stdout);
}

#[test]
fn bad_arguments_are_clear_errors() {
    let cases: &[(&[&str], &str)] = &[
        (&["-n", "0", "true"], "0 is not in 1..=4096"),
        (&["-n", "2", "--fabric", "infiniband", "true"], "unknown backend `infiniband`"),
        (&["-n", "2", "--fabric", "local", "true"], "threads of one process"),
        (&["-n", "2", "--timeout=-1", "true"], "--timeout -1"),
        (&["-n", "2"], "PROG"),
        (&["true"], "--np"),
    ];
    for (args, want) in cases {
        let o = fabrun(args, LIMIT);
        assert!(!o.status.success(), "{args:?} succeeded");
        assert!(o.stderr.contains(want), "{args:?}: stderr {:?} lacks {want:?}", o.stderr);
    }
    let o = fabrun(&["-n", "2", "/nonexistent/prog"], LIMIT);
    assert_eq!(o.status.code(), Some(127));
    assert!(o.stderr.contains("cannot start /nonexistent/prog"), "{}", o.stderr);
}

#[test]
fn program_arguments_are_not_taken_by_fabrun() {
    let o = fabrun(&["-n", "1", "--no-prefix", "echo", "-n", "5", "--fabric", "x"], LIMIT);
    assert!(o.status.success(), "{}", o.stderr);
    assert_eq!(o.stdout.trim(), "5 --fabric x");
}

#[test]
fn pinned_ranks_learn_how_many_cpus_they_share() {
    // fabrun pins rank r to one CPU of its own set, so a rank's own CPU set says 1; the job's
    // count comes in FABCOLL_LOCAL_CPUS (what decides the oversubscribed wait policy).
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    for n in [2usize, 3] {
        let o = fabrun(&["-n", &n.to_string(), "sh", "-c", "echo cpus=$FABCOLL_LOCAL_CPUS"], LIMIT);
        assert!(o.status.success(), "{:?}\n{}", o.status, o.stderr);
        let want = format!("cpus={}", n.min(cpus));
        assert!(o.stdout.lines().all(|l| l.ends_with(&want)), "n={n}, want {want}: {}", o.stdout);
    }
    let o = fabrun(&["-n", "2", "--bind", "none", "sh", "-c", "echo cpus=$FABCOLL_LOCAL_CPUS."], LIMIT);
    assert!(o.status.success(), "{:?}\n{}", o.status, o.stderr);
    assert!(o.stdout.lines().all(|l| l.ends_with("cpus=.")), "not pinned, not set: {}", o.stdout);
}

#[test]
fn ranks_are_pinned_before_their_program_starts() {
    // A rank's very first instruction already runs on its own CPU: library constructors that save
    // and restore the mask at load time (libpsm2, libinfinipath under Debian's libfabric) would
    // otherwise put back the unpinned mask of a pin that landed after `exec`.
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cpus < 2 {
        return; // fabrun pins nothing when all ranks share one CPU set of one
    }
    for _ in 0..5 {
        let o = fabrun(&["-n", "2", "sh", "-c", "grep Cpus_allowed_list /proc/self/status"], LIMIT);
        assert!(o.status.success(), "{:?}\n{}", o.status, o.stderr);
        let masks: Vec<&str> = o.stdout.lines().map(|l| l.rsplit(['\t', ' ']).next().unwrap_or("")).collect();
        assert_eq!(masks.len(), 2, "{}", o.stdout);
        assert!(masks.iter().all(|m| !m.is_empty() && m.chars().all(|c| c.is_ascii_digit())), "{}", o.stdout);
        assert_ne!(masks[0], masks[1], "{}", o.stdout);
    }
}
