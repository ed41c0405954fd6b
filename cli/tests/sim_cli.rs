//! `fabcoll sim` end to end: winners that can be checked by hand (latency-only and
//! bandwidth-only machines), the CSV of every algorithm's time, the SVG and PNG maps, and the
//! errors for bad input.

use std::process::Command;

const FABCOLL: &str = env!("CARGO_BIN_EXE_fabcoll");

/// Runs `fabcoll sim args`; returns (success, stdout, stderr).
fn sim(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(FABCOLL).arg("sim").args(args).output().expect("run fabcoll");
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into())
}

/// The `p=…:` lines of a `--table`.
fn rows(table: &str) -> Vec<&str> {
    table.lines().filter(|l| l.starts_with("p=")).collect()
}

const TWO: &[&str] = &["--op", "allreduce", "--commutative", "--algos", "recursive_doubling,rabenseifner"];

#[test]
fn latency_only_machine_picks_the_fewest_rounds() {
    // β = γ = 0: time = messages on the critical path. Recursive doubling needs lg p rounds,
    // halving-doubling 2 lg p, so recursive doubling wins at every size.
    let mut args = TWO.to_vec();
    args.extend(["--map", "--table", "--machine", "alpha=1,beta=0,gamma=0", "--ps", "2,4,8", "--sizes", "64..=512"]);
    let (ok, out, err) = sim(&args);
    assert!(ok, "{err}");
    assert_eq!(
        rows(&out),
        ["p=2: 64..512 recursive_doubling", "p=4: 64..512 recursive_doubling", "p=8: 64..512 recursive_doubling"],
        "{out}"
    );
}

#[test]
fn bandwidth_only_machine_picks_halving_doubling() {
    // α = γ = 0, β = 1: recursive doubling moves lg p·n bytes, halving-doubling 2n(p−1)/p; at
    // p = 2 both move n (a tie: the first listed wins), from p = 4 on halving-doubling wins.
    let mut args = TWO.to_vec();
    args.extend(["--map", "--table", "--machine", "alpha=0,beta=1,gamma=0", "--ps", "2,4,8", "--sizes", "64..=512"]);
    let (ok, out, err) = sim(&args);
    assert!(ok, "{err}");
    assert_eq!(
        rows(&out),
        ["p=2: 64..512 recursive_doubling", "p=4: 64..512 rabenseifner", "p=8: 64..512 rabenseifner"],
        "{out}"
    );
}

/// The T3E reproduction of docs/maps (thakur §5.4): recursive doubling for short vectors,
/// halving-doubling at 33 processes below 32 KB, binary blocks at 96 = 2⁶ + 2⁵ (δ_expo,max = 1),
/// ring at a small non-power-of-two p for long vectors.
#[test]
fn t3e_map_reproduces_thakur_section_5_4() {
    let (ok, out, err) = sim(&[
        "--map",
        "--table",
        "--commutative",
        "--machine",
        "t3e",
        "--algos",
        "recursive_doubling,reduce_bcast,rabenseifner,binary_blocks,ring",
        "--ps",
        "7,33,96",
        "--sizes",
        "8..=128K",
    ]);
    assert!(ok, "{err}");
    assert_eq!(
        rows(&out),
        [
            "p=7: 8..1K recursive_doubling, 2K rabenseifner, 4K..128K ring",
            "p=33: 8..512 recursive_doubling, 1K..16K rabenseifner, 32K..64K binary_blocks, 128K ring",
            "p=96: 8..512 recursive_doubling, 1K..128K binary_blocks",
        ],
        "{out}"
    );
}

#[test]
fn csv_lists_every_eligible_algorithm() {
    let (ok, out, err) =
        sim(&["--op", "allreduce", "--commutative", "--machine", "t3e", "--ps", "3,4", "--sizes", "8..=16"]);
    assert!(ok, "{err}");
    let mut lines = out.lines();
    assert_eq!(lines.next(), Some("op,p,bytes,algorithm,time_us"));
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    let eligible = |p: u32| {
        let args = fabcoll::collectives::CollArgs::new(fabcoll::collectives::Collective::Allreduce, 0, p, 1);
        fabcoll::collectives::registry::eligible(&args).count()
    };
    assert_eq!(rows.len(), 2 * (eligible(3) + eligible(4)), "{out}");
    for r in &rows {
        assert_eq!(r.len(), 5);
        let t: f64 = r[4].parse().unwrap();
        // at least one α = 5 µs, at most a few hundred
        assert!((5.0..500.0).contains(&t), "{r:?}");
    }
}

#[test]
fn writes_svg_and_png_maps() {
    let dir = std::env::temp_dir().join(format!("fabcoll-sim-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (svg, png) = (dir.join("m.svg"), dir.join("m.png"));
    let (ok, _, err) = sim(&[
        "--map",
        "--commutative",
        "--ps",
        "2..=9",
        "--sizes",
        "8..=64K",
        "--out",
        svg.to_str().unwrap(),
        "--out",
        png.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.starts_with("<svg") && text.contains("recursive_doubling"), "{}", &text[..200.min(text.len())]);
    let bytes = std::fs::read(&png).unwrap();
    assert!(bytes.len() > 1000 && &bytes[1..4] == b"PNG");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_input_is_a_clear_error() {
    for (args, msg) in [
        (&["--table"][..], "add --map"),
        (&["--map"][..], "--out"),
        (&["--map", "--table", "--machine", "alpha=1"][..], "lacks"),
        (&["--map", "--table", "--sizes", "12", "--dtype-size", "8"][..], "multiple"),
        (&["--map", "--table", "--algos", "no_such_algorithm"][..], "no_such_algorithm"),
        (&["--map", "--out", "/tmp/fabcoll-map.jpg", "--ps", "2", "--sizes", "8"][..], ".svg or .png"),
    ] {
        let (ok, _, err) = sim(args);
        assert!(!ok && err.contains(msg), "{args:?}: {err}");
    }
}

/// The `nodes=…:` lines of a two-level `--table`.
fn node_rows(table: &str) -> Vec<&str> {
    table.lines().filter(|l| l.starts_with("nodes=")).collect()
}

const NET: &[&str] = &["--machine", "alpha=0.5us,beta=0.2ns,gamma=0", "--network", "alpha=50us,beta=8ns"];

#[test]
fn node_map_picks_the_leaders_where_the_network_dominates() {
    // Allgather of 64 KiB per rank, nodes joined at 1 Gbit/s: one rank per node has no leaders
    // (hier_leader is not eligible); with several ranks per node the leaders send each node's
    // blocks across once, where ring crosses p − 1 times.
    let mut args = NET.to_vec();
    args.extend(["--op", "allgather", "--algos", "ring,hier_leader", "--map", "--table"]);
    args.extend(["--nodes", "2,4", "--per-node", "1..=4:*2", "--sizes", "64K"]);
    let (ok, out, err) = sim(&args);
    assert!(ok, "{err}");
    assert_eq!(node_rows(&out), ["nodes=2: 1 ring, 2..4 hier_leader", "nodes=4: 1 ring, 2..4 hier_leader"], "{out}");
    assert!(out.contains("between nodes α = 50.000 µs"), "{out}");
}

#[test]
fn node_csv_and_errors() {
    let mut args = NET.to_vec();
    args.extend(["--op", "bcast", "--nodes", "2", "--per-node", "4", "--sizes", "8,1K"]);
    let (ok, out, err) = sim(&args);
    assert!(ok, "{err}");
    assert!(out.starts_with("op,nodes,per_node,p,bytes,algorithm,time_us\n"), "{out}");
    assert!(out.lines().any(|l| l.starts_with("bcast,2,4,8,1024,hier_leader,")), "{out}");
    // A refused full replay is named, not an error.
    let mut big = NET.to_vec();
    big.extend(["--op", "bcast", "--algos", "binomial", "--nodes", "64", "--per-node", "4", "--sizes", "8"]);
    big.extend(["--max-full-replay", "128"]);
    let (ok, out, err) = sim(&big);
    assert!(ok && err.contains("not simulated") && err.contains("binomial 64×4"), "{out}{err}");
    // No network, a network without nodes, --per-node alone, --ps with --nodes.
    let (ok, _, err) = sim(&["--nodes", "2", "--per-node", "2", "--sizes", "8"]);
    assert!(!ok && err.contains("--network"), "{err}");
    let (ok, _, err) = sim(&["--network", "alpha=1us,beta=1ns", "--sizes", "8", "--ps", "2"]);
    assert!(!ok && err.contains("--nodes"), "{err}");
    let (ok, _, _) = sim(&["--per-node", "2", "--network", "alpha=1us,beta=1ns"]);
    assert!(!ok);
    let (ok, _, _) = sim(&["--ps", "4", "--nodes", "2", "--per-node", "2", "--network", "alpha=1us,beta=1ns"]);
    assert!(!ok);
    let mut two_sizes = NET.to_vec();
    two_sizes.extend(["--map", "--out", "/tmp/x.svg", "--nodes", "2", "--per-node", "2", "--sizes", "8,16"]);
    let (ok, _, err) = sim(&two_sizes);
    assert!(!ok && err.contains("single value"), "{err}");
}

/// At p = 65,536 an algorithm that no symmetry shortens is refused with the memory its full
/// replay would take, and the others are still simulated (the default set was killed by the
/// kernel for want of memory before).
#[test]
fn too_large_to_replay_is_skipped_with_its_memory_and_the_rest_runs() {
    let args = ["--op", "allreduce", "--algos", "allgather_reduce,recursive_doubling", "--ps", "65536", "--sizes", "8"];
    let (ok, out, err) = sim(&args);
    assert!(ok, "{err}");
    assert!(err.contains("allreduce:allgather_reduce on 65536 ranks") && err.contains("GiB"), "{err}");
    assert!(err.contains("1 not simulated"), "{err}");
    let rows: Vec<&str> = out.lines().skip(1).collect();
    assert_eq!(rows.len(), 1, "{out}");
    assert!(rows[0].starts_with("allreduce,65536,8,recursive_doubling,"), "{out}");
}

#[test]
fn calls_back_to_back_favour_the_tree_with_fewer_sends_per_rank() {
    // α = 1, β = γ = 0, p = 8. One call: the binomial tree's 3 dependent sends win over the
    // binary tree's 4. In a loop of 16: the binomial root's 3 sends a call against the binary
    // tree's 2 (and 2 to reach the deepest rank once: 34 / 16).
    let base = ["--op", "bcast", "--algos", "binomial,binary_tree", "--machine", "alpha=1,beta=0,gamma=0", "--ps", "8"];
    let times = |extra: &[&str]| {
        let (ok, out, err) = sim(&[&base[..], &["--sizes", "8"], extra].concat());
        assert!(ok, "{err}");
        out.lines().skip(1).map(|l| l.rsplit(',').next().unwrap().parse::<f64>().unwrap()).collect::<Vec<_>>()
    };
    assert_eq!(times(&[]), [3e6, 4e6]);
    assert_eq!(times(&["--calls", "16"]), [3e6, 34e6 / 16.0]);
    let (ok, _, err) = sim(&[&base[..], &["--sizes", "8", "--calls", "0"]].concat());
    assert!(!ok && err.contains("calls"), "{err}");
    let (ok, _, err) = sim(&["--op", "bcast", "--nodes", "2", "--per-node", "2", "--calls", "4"]);
    assert!(!ok && err.contains("--calls"), "{err}");
}
