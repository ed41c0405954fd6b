//! `fabcoll bench` and `fabcoll info` end to end: in-process (`--fabric local -n`) and as processes
//! under fabrun over shm; CSV and JSON parse with the documented columns; `--check` passes for
//! every operation; forced and unknown algorithms; every registered algorithm listed by `info`.

use std::collections::HashMap;
use std::process::Command;
use std::time::Duration;

#[path = "common/child.rs"]
mod child;

use fabcoll::collectives::{registry, Collective};

const FABRUN: &str = env!("CARGO_BIN_EXE_fabrun");
const FABCOLL: &str = env!("CARGO_BIN_EXE_fabcoll");
const LIMIT: Duration = Duration::from_secs(120);

const COLUMNS: &[&str] = &[
    "op",
    "algorithm",
    "fabric",
    "ranks",
    "bytes",
    "count",
    "iters",
    "warmup",
    "avg_us",
    "min_us",
    "max_us",
    "p50_us",
    "p99_us",
    "algbw_gbps",
    "busbw_gbps",
    "check",
    "asked",
];

/// Runs `prog args` with a wall-clock limit; returns (success, stdout, stderr).
fn run(prog: &str, args: &[&str]) -> (bool, String, String) {
    let o = child::run_limited(Command::new(prog).args(args).env("FABCOLL_TIMEOUT", "30"), LIMIT, |_| {});
    (o.status.success(), o.stdout, o.stderr)
}

/// Parses CSV rows into maps, checking the header.
fn parse_csv(text: &str) -> Vec<HashMap<String, String>> {
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let header: Vec<&str> = lines.next().expect("header").split(',').collect();
    assert_eq!(header, COLUMNS);
    lines
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            assert_eq!(f.len(), COLUMNS.len(), "{l}");
            COLUMNS.iter().zip(f).map(|(k, v)| (k.to_string(), v.to_string())).collect()
        })
        .collect()
}

fn num(row: &HashMap<String, String>, k: &str) -> f64 {
    row[k].parse::<f64>().unwrap_or_else(|_| panic!("{k}={:?} is not a number", row[k]))
}

/// Checks the allreduce sweep 8..=1024 bytes.
fn check_allreduce_rows(rows: &[HashMap<String, String>], ranks: u32, fabric: &str) {
    let sizes: Vec<u64> = rows.iter().map(|r| r["bytes"].parse().unwrap()).collect();
    assert_eq!(sizes, vec![8, 16, 32, 64, 128, 256, 512, 1024]);
    for r in rows {
        assert_eq!(r["op"], "allreduce");
        assert_eq!(r["fabric"], fabric);
        assert_eq!(r["ranks"], ranks.to_string());
        assert_eq!(r["check"], "ok");
        assert_eq!(r["iters"], "10");
        assert_eq!(num(r, "count") * 4.0, num(r, "bytes"));
        assert!(registry::find(Collective::Allreduce, &r["algorithm"]).is_ok(), "{}", r["algorithm"]);
        let (avg, lo, hi) = (num(r, "avg_us"), num(r, "min_us"), num(r, "max_us"));
        assert!(avg > 0.0 && lo <= avg + 1e-3 && avg <= hi + 1e-3, "{r:?}");
        assert!(num(r, "p50_us") > 0.0 && num(r, "p50_us") <= num(r, "p99_us") + 1e-9, "{r:?}");
        // nccl-tests: algbw = S/t (GB/s), busbw = algbw · 2(n−1)/n for allreduce.
        let algbw = num(r, "bytes") / (avg * 1e3);
        assert!((num(r, "algbw_gbps") - algbw).abs() <= 1e-4 + algbw * 0.01, "{r:?}");
        let factor = 2.0 * f64::from(ranks - 1) / f64::from(ranks);
        assert!((num(r, "busbw_gbps") - algbw * factor).abs() <= 1e-4 + algbw * 0.01, "{r:?}");
    }
}

const SWEEP: &[&str] = &["--op", "allreduce", "--max-size", "1024", "--iters", "10", "--check", "--format", "csv"];

#[test]
fn local_allreduce_csv() {
    let mut args = vec!["bench", "--fabric", "local", "-n", "3"];
    args.extend_from_slice(SWEEP);
    let (ok, out, err) = run(FABCOLL, &args);
    assert!(ok, "{err}");
    check_allreduce_rows(&parse_csv(&out), 3, "local");
}

/// Back to back (`--sync none`): the mean comes from one block of calls, p50/p99 from a second,
/// per-call timed pass; the rows keep their invariants.
#[test]
fn local_allreduce_csv_back_to_back() {
    let mut args = vec!["bench", "--fabric", "local", "-n", "2", "--sync", "none"];
    args.extend_from_slice(SWEEP);
    let (ok, out, err) = run(FABCOLL, &args);
    assert!(ok, "{err}");
    check_allreduce_rows(&parse_csv(&out), 2, "local");
}

/// Several rows in one launch (`--algo auto,ring,recursive_doubling`): every size has one row
/// per asked algorithm, the forced rows ran what they asked, each checked; the first row of a
/// size moves one further along the list at each size.
#[test]
fn several_algorithms_in_one_launch() {
    let args = ["bench", "--fabric", "local", "-n", "4", "--op", "allreduce", "--algo", "auto,ring,recursive_doubling"];
    let sizes =
        ["--min-size", "64", "--max-size", "256", "--iters", "3", "--warmup", "1", "--check", "--format", "csv"];
    let (ok, out, err) = run(FABCOLL, &[&args[..], &sizes[..]].concat());
    assert!(ok, "{err}");
    let rows = parse_csv(&out);
    let asked: Vec<&str> = rows.iter().map(|r| r["asked"].as_str()).collect();
    #[rustfmt::skip]
    let expected = ["auto", "ring", "recursive_doubling", "ring", "recursive_doubling", "auto",
                    "recursive_doubling", "auto", "ring"];
    assert_eq!(asked, expected);
    for r in &rows {
        assert_eq!(r["check"], "ok", "{r:?}");
        if r["asked"] != "auto" {
            assert_eq!(r["algorithm"], r["asked"], "{r:?}");
        }
    }
    let bytes: Vec<&str> = rows.iter().map(|r| r["bytes"].as_str()).collect();
    assert_eq!(bytes, ["64", "64", "64", "128", "128", "128", "256", "256", "256"]);
}

/// The counters of one `--stats` line (`stats rank=R bytes=B calls=C name=value …`).
fn stats_of(line: &str) -> HashMap<String, u64> {
    let rest = line.split_once("stats ").unwrap_or_else(|| panic!("not a stats line: {line}")).1;
    rest.split_whitespace()
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or_else(|| panic!("{kv:?} in {line}"));
            (k.to_owned(), v.parse().unwrap_or_else(|_| panic!("{kv:?} in {line}")))
        })
        .collect()
}

/// `--stats`: every rank reports, per size, what its engine counted; the root of a bcast sent at
/// least one message per call (whatever path it took) and the receiver copied its bytes once.
#[test]
fn stats_report_each_ranks_counters_per_size() {
    let args = ["bench", "--fabric", "local", "-n", "2", "--op", "bcast", "--min-size", "8", "--max-size", "4K"];
    let (ok, out, err) =
        run(FABCOLL, &[&args[..], &["--sync", "none", "--iters", "20", "--warmup", "5", "--stats"]].concat());
    assert!(ok, "{err}");
    assert!(!out.contains("stats rank="), "the counters go to stderr: {out}");
    let lines: Vec<HashMap<String, u64>> = err.lines().filter(|l| l.starts_with("stats ")).map(stats_of).collect();
    assert_eq!(lines.len(), 2 * 10, "one line per rank and size (8 B to 4 KiB): {err}");
    for l in &lines {
        let bytes = l["bytes"];
        // Back to back: a timed block and a timed per-call pass of 20 calls each, 5 warm-ups.
        assert_eq!(l["calls"], 45, "{l:?}");
        let got = |keys: &[&str]| keys.iter().map(|k| l.get(*k).copied().unwrap_or(0)).sum::<u64>();
        if l["rank"] == 0 {
            // Plus the two barriers before the timed passes: counts are per size, not totals.
            let msgs = got(&["eager_msgs", "zcopy_msgs", "mailbox_msgs"]);
            assert!((45..=55).contains(&msgs), "the root sends one message per call: {l:?}");
        } else {
            let received = got(&["eager_copy_bytes", "eager_fused_bytes", "mailbox_copy_bytes", "mailbox_fused_bytes"]);
            assert!(received >= 45 * bytes, "the receiver takes {bytes} B per call: {l:?}");
        }
    }
    let (ok, _, err) = run(FABCOLL, &args);
    assert!(ok, "{err}");
    assert!(!err.contains("stats rank="), "no counters without --stats: {err}");
}

#[test]
fn shm_allreduce_csv_under_fabrun() {
    let mut args = vec!["-n", "2", "--timeout", "100", "--fabric", "shm", FABCOLL, "bench"];
    args.extend_from_slice(SWEEP);
    let (ok, out, err) = run(FABRUN, &args);
    assert!(ok, "{err}");
    // Only rank 0 prints; its lines carry fabrun's prefix.
    assert!(out.lines().all(|l| l.starts_with("[0] ")), "{out}");
    let csv: String = out.lines().map(|l| format!("{}\n", &l[4..])).collect();
    check_allreduce_rows(&parse_csv(&csv), 2, "shm");
}

#[test]
fn ofi_tcp_allreduce_csv_under_fabrun() {
    let (_, info, _) = run(FABCOLL, &["info", "--fabric", "ofi:tcp"]);
    if !info.contains("ofi:tcp    available") {
        // Built without libfabric (scripts/install-deps.sh installs it); `info` says why.
        eprintln!("skipping: {info}");
        return;
    }
    let mut args = vec!["-n", "2", "--timeout", "100", "--fabric", "ofi:tcp", "--no-prefix", FABCOLL, "bench"];
    args.extend_from_slice(SWEEP);
    let (ok, out, err) = run(FABRUN, &args);
    assert!(ok, "{err}");
    check_allreduce_rows(&parse_csv(&out), 2, "ofi:tcp");
}

#[test]
fn shm_output_file_and_json() {
    let dir = std::env::temp_dir().join(format!("fabcoll-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("a2a.json");
    let f = file.to_str().unwrap();
    let args = [
        "-n",
        "3",
        "--timeout",
        "100",
        FABCOLL,
        "bench",
        "--op",
        "alltoall",
        "--min-size",
        "4",
        "--max-size",
        "64",
        "--iters",
        "5",
        "--check",
        "--format",
        "json",
        "--output",
        f,
    ];
    let (ok, out, err) = run(FABRUN, &args);
    assert!(ok, "{err}");
    assert!(out.trim().is_empty(), "report went to stdout: {out}");
    let doc: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(doc["op"], "alltoall");
    assert_eq!(doc["ranks"], 3);
    assert_eq!(doc["dtype"], "u8");
    assert_eq!(doc["fabric"], "shm");
    let rows = doc["rows"].as_array().unwrap();
    assert_eq!(rows.iter().map(|r| r["bytes"].as_u64().unwrap()).collect::<Vec<_>>(), vec![4, 8, 16, 32, 64]);
    for r in rows {
        assert_eq!(r["check"], "ok");
        // alltoall: S = p × per-peer block, busbw = algbw · (n−1)/n.
        let (algbw, busbw) = (r["algbw_gbps"].as_f64().unwrap(), r["busbw_gbps"].as_f64().unwrap());
        let want = 3.0 * r["bytes"].as_f64().unwrap() / (r["avg_us"].as_f64().unwrap() * 1e3);
        assert!((algbw - want).abs() <= want * 1e-9 + 1e-12, "{r}");
        assert!((busbw - algbw * 2.0 / 3.0).abs() <= algbw * 1e-9 + 1e-12, "{r}");
    }
}

#[test]
fn touch_reads_the_results_between_calls() {
    // --touch: every rank reads its receive buffer after each timed call (untimed); the results
    // still check out and the report says how it was measured.
    let args = [
        "bench",
        "--fabric",
        "local",
        "-n",
        "3",
        "--op",
        "bcast",
        "--min-size",
        "1",
        "--max-size",
        "4K",
        "--iters",
        "3",
        "--warmup",
        "1",
        "--touch",
        "--check",
        "--format",
        "json",
    ];
    let (ok, out, err) = run(FABCOLL, &args);
    assert!(ok, "{err}");
    let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(doc["touch"], true);
    let rows = doc["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 13);
    assert!(rows.iter().all(|r| r["check"] == "ok"), "{rows:?}");
    let (ok, out, err) = run(FABCOLL, &["bench", "--fabric", "local", "-n", "2", "--iters", "2", "--max-size", "8"]);
    assert!(ok, "{err}");
    assert!(!out.contains("receive buffers read"), "untouched by default: {out}");
    let (ok, out, err) =
        run(FABCOLL, &["bench", "--fabric", "local", "-n", "2", "--iters", "2", "--max-size", "8", "--touch"]);
    assert!(ok, "{err}");
    assert!(out.contains("receive buffers read after each call"), "{out}");
}

#[test]
fn heap_buffers_at_a_chosen_page_offset_check_out() {
    // --heap --heap-offset: buffers of the program's own memory, placed past a page boundary as
    // torch's (64) or glibc's (16) are; results check out and the report says where they sat.
    for (op, off) in [("allreduce", "64"), ("allgather", "17"), ("bcast", "4080")] {
        let args = ["bench", "--fabric", "local", "-n", "3", "--op", op, "--min-size", "1", "--max-size", "64K"];
        let mut args = args.to_vec();
        args.extend_from_slice(&["--iters", "2", "--warmup", "1", "--check", "--heap", "--heap-offset", off]);
        args.extend_from_slice(&["--format", "json"]);
        let (ok, out, err) = run(FABCOLL, &args);
        assert!(ok, "{op} at {off}: {err}");
        let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!((doc["heap"].as_bool(), doc["heap_offset"].to_string()), (Some(true), off.to_string()), "{op}");
        let rows = doc["rows"].as_array().unwrap();
        assert!(!rows.is_empty() && rows.iter().all(|r| r["check"] == "ok"), "{op} at {off}: {rows:?}");
    }
    let cases: &[(&[&str], &str)] = &[
        (&["bench", "--fabric", "local", "-n", "2", "--heap", "--heap-offset", "6"], "not a multiple of the 4-byte"),
        (&["bench", "--fabric", "local", "-n", "2", "--heap", "--heap-offset", "4096"], "below 4096"),
        (&["bench", "--fabric", "local", "-n", "2", "--heap-offset", "64"], "--heap"),
    ];
    for (args, want) in cases {
        let (ok, _, err) = run(FABCOLL, args);
        assert!(!ok, "{args:?} succeeded");
        assert!(err.contains(want), "{args:?}: {err:?} lacks {want:?}");
    }
}

#[test]
fn in_place_calls_check_out_and_say_so() {
    // --in-place: the input in the receive buffer, as ML frameworks pass it; with --check a call
    // that ignored it (or left its own block unset) would fail. Other operations are refused.
    for op in ["allreduce", "allgather", "alltoall"] {
        let args = ["bench", "--fabric", "local", "-n", "3", "--op", op, "--min-size", "1", "--max-size", "256K"];
        let mut args = args.to_vec();
        args.extend_from_slice(&[
            "--iters",
            "2",
            "--warmup",
            "1",
            "--check",
            "--in-place",
            "--heap",
            "--format",
            "json",
        ]);
        let (ok, out, err) = run(FABCOLL, &args);
        assert!(ok, "{op}: {err}");
        let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(doc["in_place"].as_bool(), Some(true), "{op}");
        let rows = doc["rows"].as_array().unwrap();
        assert!(rows.len() > 10 && rows.iter().all(|r| r["check"] == "ok"), "{op}: {rows:?}");
    }
    let (ok, _, err) = run(FABCOLL, &["bench", "--fabric", "local", "-n", "2", "--op", "bcast", "--in-place"]);
    assert!(!ok && err.contains("bcast is not measured in place"), "{err}");
}

#[test]
fn every_operation_checks_out_over_local() {
    for coll in Collective::ALL {
        let args =
            ["bench", "--fabric", "local", "-n", "3", "--op", coll.name(), "--min-size", "1", "--max-size", "64"];
        let mut args = args.to_vec();
        args.extend_from_slice(&["--iters", "2", "--warmup", "1", "--check", "--format", "csv"]);
        let (ok, out, err) = run(FABCOLL, &args);
        assert!(ok, "{coll}: {err}");
        let rows = parse_csv(&out);
        assert!(!rows.is_empty(), "{coll}: no rows");
        assert!(rows.iter().all(|r| r["check"] == "ok" && r["op"] == coll.name()), "{coll}: {rows:?}");
    }
}

#[test]
fn every_algorithm_can_be_forced() {
    // At p = 4 (a power of two), every registered algorithm of every op runs and checks out; the
    // hierarchical ones need nodes, which one process's ranks do not have (`fabrun_nodes.rs`).
    for a in registry::all().filter(|a| !a.restrictions.two_level) {
        let args = [
            "bench",
            "--fabric",
            "local",
            "-n",
            "4",
            "--op",
            a.coll.name(),
            "--algo",
            a.name,
            "--min-size",
            "64",
            "--max-size",
            "256",
            "--iters",
            "2",
            "--warmup",
            "0",
            "--check",
            "--format",
            "csv",
        ];
        let (ok, out, err) = run(FABCOLL, &args);
        assert!(ok, "{}:{}: {err}", a.coll, a.name);
        for r in parse_csv(&out) {
            assert_eq!((r["algorithm"].as_str(), r["check"].as_str()), (a.name, "ok"), "{}", a.coll);
        }
    }
}

#[test]
fn bad_bench_arguments_are_clear_errors() {
    let cases: &[(&[&str], &str)] = &[
        (&["bench", "--fabric", "local", "-n", "2", "--algo", "nonsense"], "ring"),
        (&["bench", "--op", "allsum"], "unknown operation"),
        (&["bench", "--max-size", "12X"], "not a size"),
        (&["bench", "--fabric", "local", "--min-size", "4K", "--max-size", "1K"], "larger than --max-size"),
        (&["bench", "-n", "2"], "--fabric local"),
        (&["bench", "--fabric", "local", "-n", "2", "--min-size", "1", "--max-size", "2"], "no size"),
    ];
    for (args, want) in cases {
        let (ok, _, err) = run(FABCOLL, args);
        assert!(!ok, "{args:?} succeeded");
        assert!(err.contains(want), "{args:?}: {err:?} lacks {want:?}");
    }
    // Outside any launcher, the error says how to start a job.
    let (ok, _, err) = run("env", &["-u", "FABCOLL_RANK", "-u", "RANK", "-u", "SLURM_PROCID", FABCOLL, "bench"]);
    assert!(!ok);
    assert!(err.contains("fabrun"), "{err}");
}

#[test]
fn info_lists_backends_and_every_algorithm() {
    let (ok, out, err) = run(FABCOLL, &["info"]);
    assert!(ok, "{err}");
    assert!(out.contains("local      available"), "{out}");
    assert!(out.contains("ofi:tcp"), "{out}");
    for a in registry::all() {
        let name = format!("  {}:{} ", a.coll, a.name);
        assert!(out.contains(&name), "{name} missing");
    }
}

/// `fabcoll overlap` runs its three cases per round and prints the medians and the ratio.
#[test]
fn overlap_reports_rounds_and_the_ratio() {
    let args = [FABCOLL, "overlap", "--size", "64K", "--compute-ms", "5", "--rounds", "3"];
    let (ok, out, err) = run(FABRUN, &[&["-n", "2", "--fabric", "shm"][..], &args[..]].concat());
    assert!(ok, "{err}");
    assert_eq!(out.lines().filter(|l| l.contains("] round ")).count(), 3, "{out}");
    let last = out.lines().last().unwrap_or_default();
    assert!(last.contains("median over 3 rounds") && last.contains("ratio both/max"), "{out}");
}
