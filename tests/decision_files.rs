//! Decision files end to end: random valid files round-trip (file → JSON → load) to the same
//! choices, which match a direct reading of the rules' documented semantics; malformed files —
//! random bytes, mutations of the embedded file, valid JSON with wrong content — are errors,
//! never panics; `Communicator::set_decisions` steers real collectives and per-call options still win
//! over it (`FABCOLL_TUNING_FILE` through `fabcoll bench`: cli/tests/tuning_file_env.rs).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use fabcoll::collectives::args::SEGMENT;
use fabcoll::collectives::registry::{self, Restrictions};
use fabcoll::collectives::{CollArgs, Collective, Params, Topology};
use fabcoll::select::file::{DecisionFile, Provenance, RuleSpec, FORMAT_NAME, FORMAT_VERSION};
use fabcoll::select::{Decisions, FabricClass, Features};
use fabcoll::{Collectives, Communicator, Options, ReduceOp};
use proptest::prelude::*;

// ---------------------------------------------------------------------------------------------
// A direct reading of the file format's semantics (src/select/file.rs module doc), independent of
// the compiled `Decisions`.

fn holds(r: &RuleSpec, f: &Features, args: &CollArgs) -> bool {
    let within = |range: Option<[u64; 2]>, v: u64| range.is_none_or(|[lo, hi]| lo <= v && v <= hi);
    // Without a topology every rank is a node of its own.
    let (nodes, per_node) = match args.topology.as_deref() {
        Some(t) => (t.nodes(), (0..t.nodes()).map(|n| t.ranks_on(n).len() as u32).max().unwrap()),
        None => (args.size, 1),
    };
    r.fabric.is_none_or(|c| c == f.fabric)
        && within(r.p, u64::from(f.p))
        && within(r.nodes, u64::from(nodes))
        && within(r.per_node, u64::from(per_node))
        && within(r.bytes, f.msg)
        && within(r.total, f.total)
        && r.commutative.is_none_or(|c| c == f.commutative)
        && r.pow2.is_none_or(|b| b == f.p.is_power_of_two())
        && r.own_cpu.is_none_or(|b| b == f.own_cpu)
}

/// (algorithm, parameters) by the semantics: first rule of the op whose conditions hold and whose
/// algorithm, else first fallback, is eligible; `segment` bytes → elements (≥ 1 unless 0).
fn reference(rules: &[RuleSpec], args: &CollArgs, fabric: FabricClass, sharing: bool) -> (String, Params) {
    let f = Features::of(args).unwrap().on(fabric).sharing_cpus(sharing);
    let ok = |name: &str| registry::find(args.coll, name).unwrap().restrictions.violated(args).is_none();
    for r in rules.iter().filter(|r| r.op == args.coll.name() && holds(r, &f, args)) {
        if ok(&r.algorithm) {
            let mut p = Params::new();
            for (k, &v) in &r.params {
                let es = u64::from(args.elem_size);
                p.set(k, if k == SEGMENT && v > 0 { (v / es).max(1) } else { v });
            }
            return (r.algorithm.clone(), p);
        }
        if let Some(fb) = r.fallbacks.iter().find(|f| ok(f)) {
            return (fb.clone(), Params::new());
        }
    }
    panic!("no rule answers {args:?}");
}

fn call(coll: Collective, p: u32, count: u64, elem_size: u32, commutative: bool) -> CollArgs {
    let mut a = CollArgs::new(coll, 0, p, count).with_commutative(commutative);
    a.elem_size = elem_size;
    let n = if coll == Collective::Alltoallv { p * p } else { p };
    if coll.is_vector() {
        a = a.with_counts(vec![count; n as usize]);
    }
    a
}

/// Every (op, p, count, element size, commutativity) of the grid, without a topology and, at
/// even p ≥ 4, on two nodes of p/2 ranks and on p/2 nodes of two ranks.
fn grid() -> impl Iterator<Item = CollArgs> {
    Collective::ALL.into_iter().flat_map(|coll| {
        [1u32, 2, 3, 4, 5, 7, 8, 12, 16].into_iter().flat_map(move |p| {
            [0u64, 1, 7, 64, 300, 4096, 20_000, 300_000].into_iter().flat_map(move |count| {
                [(4u32, true), (8, true), (4, false)]
                    .into_iter()
                    .filter(move |&(_, c)| c || coll.is_reduction())
                    .flat_map(move |(es, c)| {
                        let a = call(coll, p, count, es, c);
                        let placed = (p >= 4 && p % 2 == 0)
                            .then(|| [Topology::regular(2, p / 2).unwrap(), Topology::regular(p / 2, 2).unwrap()])
                            .into_iter()
                            .flatten()
                            .map(|t| a.clone().with_topology(t))
                            .collect::<Vec<_>>();
                        std::iter::once(a).chain(placed)
                    })
            })
        })
    })
}

/// The rules that answer `coll` in `d`: its own, else the embedded defaults'.
fn rules_for(d: &Decisions, coll: Collective) -> Vec<RuleSpec> {
    let src = if d.covers(coll) { d.file() } else { Decisions::embedded().unwrap().file() };
    src.rules.iter().filter(|r| r.op == coll.name()).cloned().collect()
}

fn assert_same_choices(a: &Decisions, b: &Decisions) {
    for args in grid() {
        for (fabric, sharing) in
            [FabricClass::Node, FabricClass::Network].into_iter().flat_map(|c| [(c, false), (c, true)])
        {
            let f = Features::of(&args).unwrap().on(fabric).sharing_cpus(sharing);
            let (x, px) = a.choose(&args, &f).unwrap();
            let (y, py) = b.choose(&args, &f).unwrap();
            assert_eq!((x.name, &px), (y.name, &py), "{args:?} on {fabric}, sharing CPUs {sharing}");
            let (name, params) = reference(&rules_for(a, args.coll), &args, fabric, sharing);
            assert_eq!((x.name, &px), (name.as_str(), &params), "{args:?} on {fabric}, sharing CPUs {sharing}");
        }
        // Without a class, a call is on a node-local fabric.
        assert_eq!(
            a.choose_for(&args).unwrap().0.name,
            reference(&rules_for(a, args.coll), &args, FabricClass::Node, false).0
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Random valid files.

fn range(max: u64) -> impl Strategy<Value = Option<[u64; 2]>> {
    prop_oneof![Just(None), (0..=max, 0..=max).prop_map(|(a, b)| Some([a.min(b), a.max(b)]))]
}

/// A node-count range: nodes and ranks per node are at least 1.
fn at_least_1(r: Option<[u64; 2]>) -> Option<[u64; 2]> {
    r.map(|[lo, hi]| [lo.max(1), hi.max(1)])
}

/// A rule for `coll` with at least one condition (conditional rules never make later ones
/// unreachable).
fn conditional_rule(coll: Collective) -> impl Strategy<Value = RuleSpec> {
    let algs: Vec<&'static str> = registry::for_op(coll).map(|a| a.name).collect();
    let commutative = if coll.is_reduction() { any::<Option<bool>>().boxed() } else { Just(None).boxed() };
    (
        range(20).prop_map(|r| r.map(|[lo, hi]| [lo.max(1), hi.max(1)])),
        range(1 << 22),
        range(1 << 24),
        commutative,
        any::<Option<bool>>(),
        proptest::sample::select(algs.clone()),
        proptest::option::of(0u64..100_000),
        proptest::collection::vec(proptest::sample::select(algs), 0..3),
        proptest::option::of(prop_oneof![Just(FabricClass::Node), Just(FabricClass::Network)]),
        (range(16).prop_map(at_least_1), range(8).prop_map(at_least_1), any::<Option<bool>>()),
    )
        .prop_filter("needs a condition", |(p, b, t, c, w, .., f, (n, k, o))| {
            p.is_some()
                || b.is_some()
                || t.is_some()
                || c.is_some()
                || w.is_some()
                || f.is_some()
                || n.is_some()
                || k.is_some()
                || o.is_some()
        })
        .prop_map(
            move |(p, bytes, total, commutative, pow2, alg, segment, fallbacks, fabric, (nodes, per_node, own_cpu))| {
                RuleSpec {
                    op: coll.name().into(),
                    fabric,
                    p,
                    nodes,
                    per_node,
                    bytes,
                    total,
                    commutative,
                    pow2,
                    own_cpu,
                    algorithm: alg.into(),
                    params: segment.map(|s| (SEGMENT.to_owned(), s)).into_iter().collect(),
                    fallbacks: fallbacks.into_iter().map(String::from).collect(),
                }
            },
        )
}

fn final_rule(coll: Collective) -> impl Strategy<Value = RuleSpec> {
    let free: Vec<&'static str> =
        registry::for_op(coll).filter(|a| a.restrictions == Restrictions::NONE).map(|a| a.name).collect();
    let all: Vec<&'static str> = registry::for_op(coll).map(|a| a.name).collect();
    (proptest::sample::select(all), proptest::sample::select(free)).prop_map(move |(alg, free)| RuleSpec {
        op: coll.name().into(),
        fabric: None,
        p: None,
        nodes: None,
        per_node: None,
        own_cpu: None,
        bytes: None,
        total: None,
        commutative: None,
        pow2: None,
        algorithm: alg.into(),
        params: BTreeMap::new(),
        fallbacks: if alg == free { Vec::new() } else { vec![free.into()] },
    })
}

fn op_rules(coll: Collective) -> impl Strategy<Value = Vec<RuleSpec>> {
    (proptest::collection::vec(conditional_rule(coll), 0..4), final_rule(coll)).prop_map(|(mut v, last)| {
        v.push(last);
        v
    })
}

fn valid_file() -> impl Strategy<Value = DecisionFile> {
    let ops = proptest::sample::subsequence(Collective::ALL.to_vec(), 1..=Collective::ALL.len());
    ops.prop_flat_map(|ops| ops.into_iter().map(op_rules).collect::<Vec<_>>()).prop_map(|per_op| DecisionFile {
        format: FORMAT_NAME.into(),
        version: FORMAT_VERSION,
        provenance: Some(Provenance {
            tool: "tests/decision_files.rs".into(),
            fabric: "local".into(),
            ranks: vec![2, 4],
            notes: "random \"valid\" file\nwith a newline".into(),
            ..Provenance::default()
        }),
        rules: per_op.into_iter().flatten().collect(),
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// tune → file → load → same choices, and the choices are the documented semantics.
    #[test]
    fn random_files_round_trip_to_the_same_choices(file in valid_file()) {
        let mem = Decisions::new(file.clone()).unwrap();
        let text = mem.to_json().unwrap();
        let loaded = Decisions::from_json(&text).unwrap();
        prop_assert_eq!(loaded.file(), &file);
        prop_assert_eq!(loaded.to_json().unwrap(), text);
        assert_same_choices(&mem, &loaded);
    }
}

#[test]
fn embedded_defaults_round_trip_through_a_file() {
    let d = Decisions::embedded().unwrap();
    let path = temp("embedded.json");
    d.to_file(&path).unwrap();
    let back = Decisions::from_file(&path).unwrap();
    assert_eq!(back.file(), d.file());
    for coll in Collective::ALL {
        assert!(back.covers(coll), "{coll}");
    }
    assert_same_choices(d, &back);
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn readme_example_validates() {
    let readme = include_str!("../README.md");
    let section = &readme[readme.find("## Decision files").expect("README section")..];
    let start = section.find("```json\n").expect("json example") + "```json\n".len();
    let example = &section[start..start + section[start..].find("```").unwrap()];
    let d = Decisions::from_json(example).unwrap();
    let mut args = call(Collective::Allreduce, 4, 1 << 20, 4, true);
    assert_eq!(d.choose_for(&args).unwrap().0.name, "ring");
    assert_eq!(d.choose_for(&args).unwrap().1.get(SEGMENT), Some(65536 / 4));
    args.commutative = false;
    assert_eq!(d.choose_for(&args).unwrap().0.name, "rabenseifner");
}

// ---------------------------------------------------------------------------------------------
// Fuzzing: never a panic.

/// Loads `text`; if accepted, the decisions must write back and answer every call of the grid.
fn load_without_panic(text: &str) -> bool {
    match Decisions::from_json(text) {
        Ok(d) => {
            let again = Decisions::from_json(&d.to_json().unwrap()).unwrap();
            for args in grid().step_by(7) {
                assert_eq!(d.choose_for(&args).unwrap().0.name, again.choose_for(&args).unwrap().0.name);
            }
            true
        }
        Err(e) => {
            assert!(!e.to_string().is_empty());
            false
        }
    }
}

#[derive(Clone, Debug)]
enum Mutation {
    Delete(usize, usize),
    Duplicate(usize, usize),
    Swap(usize, usize),
    Number(usize, u64),
    Insert(usize, char),
    DropField(usize, usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), 1usize..40).prop_map(|(a, n)| Mutation::Delete(a, n)),
        (any::<usize>(), 1usize..40).prop_map(|(a, n)| Mutation::Duplicate(a, n)),
        (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Mutation::Swap(a, b)),
        (any::<usize>(), prop_oneof![0u64..10, any::<u64>()]).prop_map(|(a, n)| Mutation::Number(a, n)),
        (any::<usize>(), proptest::sample::select(vec!['{', '}', '[', ']', ',', ':', '"', '\\', '-', '1', 'é']))
            .prop_map(|(a, c)| Mutation::Insert(a, c)),
        (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Mutation::DropField(a, b)),
    ]
}

fn apply(text: &str, m: &Mutation) -> String {
    let c: Vec<char> = text.chars().collect();
    let at = |i: usize| i % (c.len() + 1);
    let s = |a: usize, b: usize| c[a.min(c.len())..b.min(c.len())].iter().collect::<String>();
    match *m {
        Mutation::Delete(a, n) => s(0, at(a)) + &s(at(a) + n, c.len()),
        Mutation::Duplicate(a, n) => s(0, at(a) + n) + &s(at(a), c.len()),
        Mutation::Swap(a, b) => {
            let mut c = c.clone();
            if !c.is_empty() {
                let n = c.len();
                c.swap(a % n, b % n);
            }
            c.into_iter().collect()
        }
        Mutation::Number(a, n) => {
            // Replace the digit run at or after position a.
            let Some(start) = (at(a)..c.len()).find(|&i| c[i].is_ascii_digit()) else { return text.to_owned() };
            let end = (start..c.len()).find(|&i| !c[i].is_ascii_digit()).unwrap_or(c.len());
            s(0, start) + &n.to_string() + &s(end, c.len())
        }
        Mutation::Insert(a, ch) => s(0, at(a)) + &ch.to_string() + &s(at(a), c.len()),
        Mutation::DropField(line, field) => {
            // Remove one `"key": value` of one rule line (a missing or now-default field).
            let lines: Vec<&str> = text.lines().collect();
            let rules: Vec<usize> =
                (0..lines.len()).filter(|&i| lines[i].trim_start().starts_with("{\"op\"")).collect();
            if rules.is_empty() {
                return text.to_owned();
            }
            let i = rules[line % rules.len()];
            let Ok(serde_json::Value::Object(mut obj)) =
                serde_json::from_str::<serde_json::Value>(lines[i].trim().trim_end_matches(','))
            else {
                return text.to_owned();
            };
            let keys: Vec<String> = obj.keys().cloned().collect();
            obj.remove(&keys[field % keys.len()]);
            let comma = if lines[i].trim_end().ends_with(',') { "," } else { "" };
            let mut out: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
            out[i] = format!("    {}{comma}", serde_json::Value::Object(obj));
            out.join("\n")
        }
    }
}

fn embedded_text() -> String {
    Decisions::embedded().unwrap().to_json().unwrap()
}

/// A structurally valid file made wrong in one way, and what the error must mention.
#[derive(Clone, Debug)]
enum Wrong {
    Op(usize, String),
    Algorithm(usize, String),
    Fallback(usize, String),
    Param(usize, String),
    Invert(usize, u64, u64),
    DropLast(usize),
    Commutative(usize),
    Format(String),
    Version(u32),
}

fn wrong() -> impl Strategy<Value = Wrong> {
    let name = "[a-z_]{1,12}";
    prop_oneof![
        (any::<usize>(), name).prop_map(|(i, n)| Wrong::Op(i, n)),
        (any::<usize>(), name).prop_map(|(i, n)| Wrong::Algorithm(i, n)),
        (any::<usize>(), name).prop_map(|(i, n)| Wrong::Fallback(i, n)),
        (any::<usize>(), name).prop_map(|(i, n)| Wrong::Param(i, n)),
        (any::<usize>(), 1u64..u64::MAX, any::<u64>()).prop_map(|(i, a, b)| Wrong::Invert(i, a, b)),
        any::<usize>().prop_map(Wrong::DropLast),
        any::<usize>().prop_map(Wrong::Commutative),
        "[a-z-]{0,20}".prop_map(Wrong::Format),
        (2u32..=u32::MAX).prop_map(Wrong::Version),
    ]
}

/// Applies `w` to `f`; returns what the error must contain, or `None` if `w` happened to be
/// harmless (a random name that is registered after all).
fn make_wrong(f: &mut DecisionFile, w: &Wrong) -> Option<String> {
    let n = f.rules.len();
    let tag = |f: &DecisionFile, i: usize| format!("rules[{i}] ({} → {})", f.rules[i].op, f.rules[i].algorithm);
    match w {
        Wrong::Op(i, name) => Collective::from_name(name).is_none().then(|| {
            f.rules[i % n].op = name.clone();
            tag(f, i % n)
        }),
        Wrong::Algorithm(i, name) => {
            let coll = Collective::from_name(&f.rules[i % n].op)?;
            registry::find(coll, name).is_err().then(|| {
                f.rules[i % n].algorithm = name.clone();
                tag(f, i % n)
            })
        }
        Wrong::Fallback(i, name) => {
            let coll = Collective::from_name(&f.rules[i % n].op)?;
            registry::find(coll, name).is_err().then(|| {
                f.rules[i % n].fallbacks.push(name.clone());
                tag(f, i % n)
            })
        }
        Wrong::Param(i, name) => (name != SEGMENT && name != "barriers").then(|| {
            f.rules[i % n].params.insert(name.clone(), 1);
            tag(f, i % n)
        }),
        Wrong::Invert(i, a, b) => {
            let (lo, hi) = (*a.max(b), *a.min(b));
            (lo > hi).then(|| {
                f.rules[i % n].bytes = Some([lo, hi]);
                tag(f, i % n)
            })
        }
        Wrong::DropLast(i) => {
            // Remove the last (unconditional) rule of one op that has a conditional rule before it.
            let op = f.rules[i % n].op.clone();
            let idx: Vec<usize> = (0..n).filter(|&j| f.rules[j].op == op).collect();
            if idx.len() < 2 {
                return None;
            }
            f.rules.remove(*idx.last()?);
            let new_last = idx[idx.len() - 2];
            Some(tag(f, new_last))
        }
        Wrong::Commutative(i) => {
            let coll = Collective::from_name(&f.rules[i % n].op)?;
            (!coll.is_reduction()).then(|| {
                f.rules[i % n].commutative = Some(true);
                tag(f, i % n)
            })
        }
        Wrong::Format(s) => (s != FORMAT_NAME).then(|| {
            f.format = s.clone();
            "expected \"fabcoll-decisions\"".to_owned()
        }),
        Wrong::Version(v) => {
            f.version = *v;
            Some(format!("version {v} is not supported"))
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_are_errors(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        prop_assert!(!load_without_panic(&String::from_utf8_lossy(&bytes)));
    }

    #[test]
    fn mutated_files_load_or_fail_cleanly(ms in proptest::collection::vec(mutation(), 1..4)) {
        let text = ms.iter().fold(embedded_text(), |t, m| apply(&t, m));
        load_without_panic(&text);
    }

    #[test]
    fn wrong_content_is_an_error_naming_the_rule(file in valid_file(), w in wrong()) {
        let mut file = file;
        if let Some(expect) = make_wrong(&mut file, &w) {
            let text = file.to_json().unwrap();
            let e = Decisions::from_json(&text).err().map(|e| e.to_string());
            let e = e.unwrap_or_else(|| panic!("accepted after {w:?}: {text}"));
            prop_assert!(e.contains(&expect), "{e:?} does not mention {expect:?} ({w:?})");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Real communicators.

fn temp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("fabcoll-decision-files-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

const RING_ALLREDUCE: &str = r#"{
  "format": "fabcoll-decisions",
  "version": 1,
  "provenance": {"tool": "tests/decision_files.rs"},
  "rules": [
    {"op": "allreduce", "algorithm": "ring", "fallbacks": ["recursive_doubling"]}
  ]
}"#;

/// The algorithm each rank's allreduce (and, for the defaults, bcast) of `count` f32 runs.
fn algorithms(comms: Vec<Communicator>, count: usize, opts: Options) -> Vec<(&'static str, &'static str)> {
    std::thread::scope(|s| {
        let hs: Vec<_> = comms
            .into_iter()
            .map(|c| {
                let opts = opts.clone();
                s.spawn(move || {
                    let x = vec![1.0f32; count];
                    let mut y = vec![0.0f32; count];
                    let mut b = vec![0.0f32; count];
                    let got = c
                        .scope(|sc| {
                            sc.set_options(opts);
                            let r = sc.allreduce(&x, &mut y, &ReduceOp::Sum)?;
                            let a = sc.algorithm_of(&r).unwrap();
                            r.wait()?;
                            sc.set_options(Options::default());
                            let r = sc.bcast(&mut b, 0)?;
                            let bc = sc.algorithm_of(&r).unwrap();
                            r.wait()?;
                            Ok((a, bc))
                        })
                        .unwrap();
                    assert!(y.iter().all(|&v| v == c.size() as f32), "wrong sum with {got:?}");
                    got
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

#[test]
fn set_decisions_steers_a_communicator_and_options_still_win() {
    let ring = Arc::new(Decisions::from_json(RING_ALLREDUCE).unwrap());
    // The defaults pick recursive doubling for 64 floats.
    let base = algorithms(Communicator::local(4).unwrap(), 64, Options::default());
    assert!(base.iter().all(|&(a, _)| a == "recursive_doubling"), "{base:?}");
    let steered = |opts: Options| {
        let mut comms = Communicator::local(4).unwrap();
        for c in &mut comms {
            c.set_decisions(ring.clone());
        }
        // dup inherits the decisions.
        let dups: Vec<Communicator> = std::thread::scope(|s| {
            let hs: Vec<_> = comms.iter().map(|c| s.spawn(move || c.dup().unwrap())).collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        algorithms(dups, 64, opts)
    };
    // The file's choice for allreduce; bcast (not covered) keeps the embedded default (binomial
    // at p = 4 up to 12 KiB).
    assert!(steered(Options::default()).iter().all(|&a| a == ("ring", "binomial")));
    // A per-call choice wins over the file.
    let forced = steered(Options::algorithm("recursive_doubling"));
    assert!(forced.iter().all(|&(a, _)| a == "recursive_doubling"), "{forced:?}");
}
