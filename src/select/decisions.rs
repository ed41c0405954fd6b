//! [`Decisions`]: a [`DecisionFile`] validated against the registry and compiled for lookup.
//!
//! Validation refuses, naming the file's rule (`rules[i] (op → algorithm)`) and what is wrong:
//! a wrong `format` or unsupported `version`; an unknown operation; an algorithm or fallback not
//! registered for the operation; an unknown parameter or a value outside its `ParamSpec` range; an
//! empty or inverted range; a `fabric` class other than `node` or `network`; a `commutative` condition on an operation that does not reduce; a
//! rule made unreachable by an earlier unconditional rule that always answers; and an operation
//! whose last rule is not an unconditional one with an algorithm (or fallback) free of
//! restrictions — so every call of a covered operation gets an answer from the file. A file may
//! cover a subset of the operations; the embedded defaults answer the others. JSON errors
//! (syntax, missing or unknown fields, numbers out of range) are reported with line and column.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::OnceLock;

use fabcoll_collectives::args::SEGMENT;
use fabcoll_collectives::registry::{self, Algorithm, Restrictions, SEGMENT_SPEC};
use fabcoll_collectives::{CollArgs, Collective, Params};
use serde::Deserialize;

use super::file::{DecisionFile, FabricClass, RuleSpec, FORMAT_NAME, FORMAT_VERSION};
use super::Features;
use crate::error::{Error, Result};

/// The versions of the format this build reads.
pub const SUPPORTED_VERSIONS: &[u32] = &[FORMAT_VERSION];

const EMBEDDED: &str = include_str!("defaults.json");

/// An inclusive range `[lo, hi]`.
type Range = Option<(u64, u64)>;

/// One compiled rule.
#[derive(Clone, Debug)]
struct Rule {
    fabric: Option<FabricClass>,
    p: Range,
    nodes: Range,
    per_node: Range,
    bytes: Range,
    total: Range,
    commutative: Option<bool>,
    pow2: Option<bool>,
    own_cpu: Option<bool>,
    alg: &'static Algorithm,
    /// As in the file (`segment` in bytes).
    params: Vec<(String, u64)>,
    fallbacks: Vec<&'static Algorithm>,
}

fn within(r: Range, v: u64) -> bool {
    r.is_none_or(|(lo, hi)| lo <= v && v <= hi)
}

/// Where a call's ranks sit, as the `nodes` and `per_node` conditions see it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
struct Placement {
    nodes: u64,
    /// The most ranks on one node.
    per_node: u64,
}

impl Placement {
    /// From the call's topology; without one every rank is a node of its own.
    fn of(args: &CollArgs) -> Placement {
        match args.topology.as_deref() {
            Some(t) => Placement { nodes: u64::from(t.nodes()), per_node: u64::from(t.max_per_node()) },
            None => Placement { nodes: u64::from(args.size), per_node: 1 },
        }
    }
}

impl Rule {
    fn unconditional(&self) -> bool {
        self.fabric.is_none()
            && self.p.is_none()
            && self.nodes.is_none()
            && self.per_node.is_none()
            && self.bytes.is_none()
            && self.total.is_none()
            && self.commutative.is_none()
            && self.pow2.is_none()
            && self.own_cpu.is_none()
    }

    fn holds(&self, f: &Features, at: Placement) -> bool {
        self.fabric.is_none_or(|c| c == f.fabric)
            && within(self.p, u64::from(f.p))
            && within(self.nodes, at.nodes)
            && within(self.per_node, at.per_node)
            && within(self.bytes, f.msg)
            && within(self.total, f.total)
            && self.commutative.is_none_or(|c| c == f.commutative)
            && self.pow2.is_none_or(|b| b == f.p.is_power_of_two())
            && self.own_cpu.is_none_or(|b| b == f.own_cpu)
    }

    /// Whether some algorithm of this rule has no restrictions (so the rule answers every call
    /// its conditions admit).
    fn always_answers(&self) -> bool {
        std::iter::once(self.alg).chain(self.fallbacks.iter().copied()).any(|a| a.restrictions == Restrictions::NONE)
    }

    /// The rule's parameters for a call with `elem_size`-byte elements (`segment` bytes → elements,
    /// at least 1 unless 0), overridden by the call's own `args`.
    fn params_for(&self, args: &CollArgs) -> Params {
        let es = u64::from(args.elem_size.max(1));
        let mut out = Params::new();
        for (name, v) in &self.params {
            let v = if name == SEGMENT && *v > 0 { (*v / es).max(1) } else { *v };
            out.set(name, v);
        }
        for (name, v) in args.params.iter() {
            out.set(name, v);
        }
        out
    }
}

/// A validated decision file, compiled for lookup (see the module doc).
#[derive(Clone, Debug)]
pub struct Decisions {
    source: DecisionFile,
    rules: BTreeMap<Collective, Vec<Rule>>,
}

fn err(msg: impl Into<String>) -> Error {
    Error::InvalidArgument { coll: "decision file", msg: msg.into() }
}

/// `rules[i] (op → algorithm)`, how errors name a rule.
fn rule_name(i: usize, r: &RuleSpec) -> String {
    format!("rules[{i}] ({} → {})", r.op, r.algorithm)
}

/// Only the header, read before the full structure so that a file of another version is refused
/// by its version rather than by the fields it does not share with this one.
#[derive(Deserialize)]
struct Header {
    format: Option<serde_json::Value>,
    version: Option<serde_json::Value>,
}

fn check_header(format: &str, version: u32) -> Result<()> {
    if format != FORMAT_NAME {
        return Err(err(format!("format is {format:?}, expected {FORMAT_NAME:?}")));
    }
    if !SUPPORTED_VERSIONS.contains(&version) {
        return Err(err(format!(
            "version {version} is not supported (this build reads version(s) {SUPPORTED_VERSIONS:?})"
        )));
    }
    Ok(())
}

fn range(name: &str, r: Option<[u64; 2]>) -> std::result::Result<Range, String> {
    match r {
        None => Ok(None),
        Some([lo, hi]) if lo > hi => Err(format!("{name} range [{lo}, {hi}] is inverted (min > max)")),
        Some([_, 0]) if matches!(name, "p" | "nodes" | "per_node") => {
            Err(format!("{name} range [0, 0] is empty (a communicator has at least one rank on one node)"))
        }
        Some([lo, hi]) => Ok(Some((lo, hi))),
    }
}

fn compile(spec: &RuleSpec) -> std::result::Result<(Collective, Rule), String> {
    let coll = Collective::from_name(&spec.op).ok_or_else(|| {
        let ops: Vec<&str> = Collective::ALL.iter().map(|c| c.name()).collect();
        format!("unknown operation {:?} (operations: {})", spec.op, ops.join(", "))
    })?;
    let find = |name: &str, role: &str| {
        registry::find(coll, name).map_err(|_| {
            let known: Vec<&str> = registry::for_op(coll).map(|a| a.name).collect();
            format!("{role} {name:?} is not registered for {coll} (registered: {})", known.join(", "))
        })
    };
    let alg = find(&spec.algorithm, "algorithm")?;
    let fallbacks = spec.fallbacks.iter().map(|f| find(f, "fallback")).collect::<std::result::Result<Vec<_>, _>>()?;
    for (name, &v) in &spec.params {
        let specs = || alg.params.iter().chain([&SEGMENT_SPEC]);
        let ps = specs().find(|s| s.name == name).ok_or_else(|| {
            let accepted: Vec<&str> = specs().map(|s| s.name).collect();
            format!("unknown parameter {name:?} for {coll}:{} (accepted: {})", alg.name, accepted.join(", "))
        })?;
        if name != SEGMENT && (v < ps.min || v > ps.max) {
            return Err(format!("parameter {name} = {v} is outside {}..={}", ps.min, ps.max));
        }
    }
    if spec.commutative.is_some() && !coll.is_reduction() {
        return Err(format!("condition `commutative` applies to reductions only, and {coll} does not reduce"));
    }
    let rule = Rule {
        fabric: spec.fabric,
        p: range("p", spec.p)?,
        nodes: range("nodes", spec.nodes)?,
        per_node: range("per_node", spec.per_node)?,
        bytes: range("bytes", spec.bytes)?,
        total: range("total", spec.total)?,
        commutative: spec.commutative,
        pow2: spec.pow2,
        own_cpu: spec.own_cpu,
        alg,
        params: spec.params.iter().map(|(k, v)| (k.clone(), *v)).collect(),
        fallbacks,
    };
    Ok((coll, rule))
}

impl Decisions {
    /// Validates `file` (see the module doc) and compiles it.
    pub fn new(file: DecisionFile) -> Result<Decisions> {
        check_header(&file.format, file.version)?;
        let mut rules: BTreeMap<Collective, Vec<Rule>> = BTreeMap::new();
        // Per operation: the index in the file of its last rule, and of an earlier rule that
        // always answers (which makes every later rule of the operation unreachable).
        let mut last: BTreeMap<Collective, usize> = BTreeMap::new();
        let mut answers: BTreeMap<Collective, usize> = BTreeMap::new();
        for (i, spec) in file.rules.iter().enumerate() {
            let (coll, rule) = compile(spec).map_err(|m| err(format!("{}: {m}", rule_name(i, spec))))?;
            if let Some(&j) = answers.get(&coll) {
                return Err(err(format!(
                    "{}: unreachable, {} has no conditions and always answers {coll} first",
                    rule_name(i, spec),
                    rule_name(j, &file.rules[j])
                )));
            }
            if rule.unconditional() && rule.always_answers() {
                answers.insert(coll, i);
            }
            last.insert(coll, i);
            rules.entry(coll).or_default().push(rule);
        }
        let mut last: Vec<(usize, Collective)> = last.into_iter().map(|(c, i)| (i, c)).collect();
        last.sort_unstable();
        for &(i, coll) in &last {
            let spec = &file.rules[i];
            let rule = rules[&coll].last().filter(|r| r.unconditional() && r.always_answers());
            if rule.is_none() {
                let free: Vec<&str> =
                    registry::for_op(coll).filter(|a| a.restrictions == Restrictions::NONE).map(|a| a.name).collect();
                return Err(err(format!(
                    "{}: the last rule of {coll} must have no conditions and an algorithm or fallback without \
                     restrictions, so that every call gets an answer (unrestricted {coll} algorithms: {})",
                    rule_name(i, spec),
                    free.join(", ")
                )));
            }
        }
        Ok(Decisions { source: file, rules })
    }

    /// Parses and validates a decision file's text.
    pub fn from_json(text: &str) -> Result<Decisions> {
        // The header first: a future version is refused as such, not by its unknown fields.
        if let Ok(h) = serde_json::from_str::<Header>(text) {
            let format = h.format.as_ref().and_then(|v| v.as_str());
            let version = h.version.as_ref().and_then(|v| v.as_u64());
            if let (Some(f), Some(v)) = (format, version) {
                check_header(f, u32::try_from(v).unwrap_or(u32::MAX))?;
            }
        }
        let file: DecisionFile = serde_json::from_str(text).map_err(|e| err(format!("invalid JSON: {e}")))?;
        Decisions::new(file)
    }

    /// Reads, parses and validates the decision file at `path`; errors name the file.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Decisions> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|e| err(format!("{}: {e}", path.display())))?;
        Decisions::from_json(&text).map_err(|e| err(format!("{}: {}", path.display(), strip(&e))))
    }

    /// The embedded default (thakur-rabenseifner-gropp 2005 §4, §5.4 cutoffs, `defaults.json`),
    /// validated at first use. It covers every operation.
    pub fn embedded() -> Result<&'static Decisions> {
        static E: OnceLock<std::result::Result<Decisions, String>> = OnceLock::new();
        E.get_or_init(|| Decisions::from_json(EMBEDDED).map_err(|e| format!("embedded defaults: {}", strip(&e))))
            .as_ref()
            .map_err(|m| err(m.clone()))
    }

    /// The file these decisions were read from.
    pub fn file(&self) -> &DecisionFile {
        &self.source
    }

    /// Whether the file has rules for `coll` (else the embedded defaults answer for it).
    pub fn covers(&self, coll: Collective) -> bool {
        self.rules.contains_key(&coll)
    }

    /// The file as JSON: the header pretty-printed, one rule per line (what the embedded default
    /// looks like); [`Decisions::from_json`] reads it back to the same decisions.
    pub fn to_json(&self) -> Result<String> {
        self.source.to_json()
    }

    /// Writes [`Decisions::to_json`] to `path`.
    pub fn to_file(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        std::fs::write(path, self.to_json()?).map_err(|e| err(format!("{}: {e}", path.display())))
    }

    /// The algorithm and parameters for a call: of `args.coll`'s rules in file order, the first
    /// whose conditions hold for `f` (and, for `nodes` and `per_node`, `args.topology`) and whose algorithm's restrictions hold for `args` gives its
    /// algorithm with the rule's parameters (`segment` converted from bytes to elements), else its
    /// first eligible fallback with default parameters. The call's own `args.params` override the
    /// rule's. Operations the file does not cover are answered by the embedded defaults.
    pub fn choose(&self, args: &CollArgs, f: &Features) -> Result<(&'static Algorithm, Params)> {
        let rules = match self.rules.get(&args.coll) {
            Some(r) => Some(r),
            None => Decisions::embedded().ok().and_then(|d| d.rules.get(&args.coll)),
        };
        let eligible = |a: &Algorithm| a.restrictions.violated(args).is_none();
        let at = Placement::of(args);
        for rule in rules.into_iter().flatten().filter(|r| r.holds(f, at)) {
            if eligible(rule.alg) {
                return Ok((rule.alg, rule.params_for(args)));
            }
            if let Some(&a) = rule.fallbacks.iter().find(|a| eligible(a)) {
                return Ok((a, args.params.clone()));
            }
        }
        // Unreachable with validated rules (each operation ends with a rule that always
        // answers); kept so that a call never fails for want of a rule.
        registry::eligible(args)
            .next()
            .map(|a| (a, args.params.clone()))
            .ok_or_else(|| Error::invalid(args.coll, "no registered algorithm accepts these arguments"))
    }

    /// [`Decisions::choose`] with the features computed from `args` ([`Features::of`]).
    pub fn choose_for(&self, args: &CollArgs) -> Result<(&'static Algorithm, Params)> {
        self.choose(args, &Features::of(args)?)
    }
}

/// The message of a `decision file` error without its `decision file: ` prefix (for rewrapping).
fn strip(e: &Error) -> String {
    match e {
        Error::InvalidArgument { msg, .. } => msg.clone(),
        e => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A version-1 file with `rules` (JSON objects, one per string).
    fn file(rules: &[&str]) -> String {
        format!(r#"{{"format": "fabcoll-decisions", "version": 1, "rules": [{}]}}"#, rules.join(", "))
    }

    fn error(rules: &[&str]) -> String {
        match Decisions::from_json(&file(rules)) {
            Ok(_) => panic!("accepted {rules:?}"),
            Err(e) => e.to_string(),
        }
    }

    fn assert_has(msg: &str, parts: &[&str]) {
        for p in parts {
            assert!(msg.contains(p), "{msg:?} does not mention {p:?}");
        }
    }

    const LAST: &str = r#"{"op": "allreduce", "algorithm": "recursive_doubling"}"#;

    #[test]
    fn header_errors_say_what_is_expected() {
        let e = Decisions::from_json(r#"{"format": "mpich-csel", "version": 1, "rules": []}"#).unwrap_err();
        assert_has(&e.to_string(), &["format is \"mpich-csel\"", "expected \"fabcoll-decisions\""]);
        // A newer version is refused by its version, even if its fields differ from version 1's.
        let e = Decisions::from_json(r#"{"format": "fabcoll-decisions", "version": 2, "trees": {}}"#).unwrap_err();
        assert_has(&e.to_string(), &["version 2 is not supported", "[1]"]);
        let e = Decisions::from_json(r#"{"format": "fabcoll-decisions", "version": 4294967296, "rules": []}"#);
        assert_has(&e.unwrap_err().to_string(), &["not supported"]);
    }

    #[test]
    fn rule_errors_name_the_rule_and_the_problem() {
        let cases: &[(&str, &[&str])] = &[
            (
                r#"{"op": "allreduse", "algorithm": "ring"}"#,
                &["rules[0] (allreduse → ring)", "unknown operation", "allreduce"],
            ),
            (
                r#"{"op": "allreduce", "algorithm": "nosuch"}"#,
                &[
                    "rules[0] (allreduce → nosuch)",
                    "algorithm \"nosuch\" is not registered for allreduce",
                    "ring",
                    "rabenseifner",
                ],
            ),
            (
                r#"{"op": "allreduce", "algorithm": "ring", "fallbacks": ["recursive_doubling", "bruck"]}"#,
                &["rules[0] (allreduce → ring)", "fallback \"bruck\" is not registered"],
            ),
            (
                r#"{"op": "allreduce", "algorithm": "ring", "params": {"radix": 4}}"#,
                &["rules[0] (allreduce → ring)", "unknown parameter \"radix\"", "accepted: segment"],
            ),
            (
                r#"{"op": "alltoall", "algorithm": "ring_n_barriers", "params": {"barriers": 0}}"#,
                &["rules[0] (alltoall → ring_n_barriers)", "barriers = 0 is outside 1..="],
            ),
            (
                r#"{"op": "allreduce", "bytes": [4096, 16], "algorithm": "ring"}"#,
                &["rules[0] (allreduce → ring)", "bytes range [4096, 16] is inverted"],
            ),
            (r#"{"op": "allreduce", "total": [2, 1], "algorithm": "ring"}"#, &["total range [2, 1] is inverted"]),
            (
                r#"{"op": "allreduce", "p": [0, 0], "algorithm": "ring"}"#,
                &["rules[0] (allreduce → ring)", "p range [0, 0] is empty"],
            ),
            (
                r#"{"op": "bcast", "commutative": true, "algorithm": "binomial"}"#,
                &["rules[0] (bcast → binomial)", "bcast does not reduce"],
            ),
        ];
        for (rule, parts) in cases {
            assert_has(&error(&[rule, LAST]), parts);
        }
    }

    #[test]
    fn every_covered_operation_ends_with_a_rule_that_always_answers() {
        // Conditional last rule.
        let e = error(&[r#"{"op": "allreduce", "bytes": [0, 1024], "algorithm": "recursive_doubling"}"#]);
        assert_has(
            &e,
            &["rules[0] (allreduce → recursive_doubling)", "last rule of allreduce must have no conditions"],
        );
        // A rule after one that always answers.
        let e = error(&[LAST, r#"{"op": "allreduce", "bytes": [0, 8], "algorithm": "ring"}"#]);
        assert_has(&e, &["rules[1] (allreduce → ring)", "unreachable", "rules[0] (allreduce → recursive_doubling)"]);
        // Unconditional, but ring needs a commutative op and has no unrestricted fallback.
        let e = error(&[r#"{"op": "allreduce", "algorithm": "ring"}"#]);
        assert_has(
            &e,
            &[
                "rules[0] (allreduce → ring)",
                "without restrictions",
                "unrestricted allreduce algorithms:",
                "recursive_doubling",
            ],
        );
        let d = Decisions::from_json(&file(&[
            r#"{"op": "allreduce", "algorithm": "ring", "fallbacks": ["recursive_doubling"]}"#,
        ]))
        .unwrap();
        assert!(d.covers(Collective::Allreduce) && !d.covers(Collective::Bcast));
        // Interleaved operations: each is checked on its own.
        let e = error(&[
            r#"{"op": "bcast", "p": [1, 3], "algorithm": "binomial"}"#,
            LAST,
            r#"{"op": "alltoall", "algorithm": "pairwise_xor"}"#,
            r#"{"op": "bcast", "algorithm": "scatter_ring_allgather"}"#,
        ]);
        assert_has(&e, &["rules[2] (alltoall → pairwise_xor)", "last rule of alltoall", "pairwise_ring"]);
    }

    #[test]
    fn json_errors_have_line_and_column() {
        let e = Decisions::from_json("{\n  \"format\": \"fabcoll-decisions\",\n  \"version\": 1,\n  \"rules\": [,]\n}")
            .unwrap_err();
        assert_has(&e.to_string(), &["decision file: invalid JSON", "line 4 column"]);
        let e = error(&[r#"{"op": "allreduce", "algo": "ring"}"#]);
        assert_has(&e, &["unknown field `algo`", "line 1 column"]);
        let e = error(&[r#"{"op": "allreduce"}"#]);
        assert_has(&e, &["missing field `algorithm`"]);
        let e = error(&[r#"{"op": "allreduce", "p": [-1, 4], "algorithm": "ring"}"#]);
        assert_has(&e, &["invalid JSON", "line 1"]);
        let e = error(&[r#"{"op": "allreduce", "bytes": [0, 18446744073709551616], "algorithm": "ring"}"#]);
        assert_has(&e, &["invalid JSON"]);
        assert!(Decisions::from_json("").is_err());
        assert!(Decisions::from_json(&"[".repeat(100_000)).is_err());
    }

    #[test]
    fn files_are_named_in_errors() {
        let dir = std::env::temp_dir().join(format!("fabcoll-decisions-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let bad = dir.join("bad.json");
        std::fs::write(&bad, file(&[r#"{"op": "allreduce", "algorithm": "nosuch"}"#])).unwrap();
        let e = Decisions::from_file(&bad).unwrap_err().to_string();
        assert_has(&e, &["decision file: ", "bad.json: rules[0] (allreduce → nosuch)"]);
        assert!(!e.contains("decision file: decision file"), "{e}");
        let e = Decisions::from_file(dir.join("missing.json")).unwrap_err().to_string();
        assert_has(&e, &["missing.json"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn segment_is_converted_from_bytes_and_call_params_win() {
        let d = Decisions::from_json(&file(&[
            r#"{"op": "allreduce", "bytes": [0, 100], "algorithm": "ring", "params": {"segment": 3}, "fallbacks": ["recursive_doubling"]}"#,
            r#"{"op": "allreduce", "algorithm": "ring", "params": {"segment": 4096}, "fallbacks": ["recursive_doubling"]}"#,
        ]))
        .unwrap();
        let mut args = CollArgs::new(Collective::Allreduce, 0, 4, 1000);
        args.elem_size = 8;
        let (a, p) = d.choose_for(&args).unwrap();
        assert_eq!((a.name, p.get(SEGMENT)), ("ring", Some(512)));
        // 3 bytes of 8-byte elements: at least one element.
        let small = CollArgs { count: 10, ..args.clone() };
        assert_eq!(d.choose_for(&small).unwrap().1.get(SEGMENT), Some(1));
        // The call's own parameters override the rule's.
        let own = args.clone().with_param(SEGMENT, 7);
        assert_eq!(d.choose_for(&own).unwrap().1.get(SEGMENT), Some(7));
        // A restriction that fails: the fallback, with default parameters.
        let noncomm = args.clone().with_commutative(false);
        let (a, p) = d.choose_for(&noncomm).unwrap();
        assert_eq!((a.name, p.get(SEGMENT)), ("recursive_doubling", None));
        // Operations the file does not cover: the embedded defaults.
        let bcast = CollArgs::new(Collective::Bcast, 0, 3, 10);
        assert_eq!(d.choose_for(&bcast).unwrap().0.name, "linear");
    }

    #[test]
    fn fabric_condition_selects_by_class() {
        let d = Decisions::from_json(&file(&[
            r#"{"op": "allreduce", "fabric": "network", "bytes": [0, 65536], "algorithm": "recursive_doubling"}"#,
            r#"{"op": "allreduce", "fabric": "node", "algorithm": "ring", "fallbacks": ["rabenseifner"]}"#,
            r#"{"op": "allreduce", "algorithm": "rabenseifner"}"#,
        ]))
        .unwrap();
        let args = CollArgs::new(Collective::Allreduce, 0, 2, 8192);
        let pick = |f: Features| d.choose(&args, &f).unwrap().0.name;
        let f = Features::of(&args).unwrap();
        assert_eq!(f.fabric, FabricClass::Node, "a call without a class is on a node-local fabric");
        assert_eq!(pick(f), "ring");
        assert_eq!(pick(f.on(FabricClass::Network)), "recursive_doubling");
        // Above the network rule's bytes: neither class-specific rule holds on the network.
        let big = CollArgs::new(Collective::Allreduce, 0, 2, 1 << 20);
        assert_eq!(
            d.choose(&big, &Features::of(&big).unwrap().on(FabricClass::Network)).unwrap().0.name,
            "rabenseifner"
        );
        // A rule whose only condition is the class is conditional: the rules after it stay reachable
        // and the operation still needs a final unconditional rule.
        let e = error(&[r#"{"op": "bcast", "fabric": "network", "algorithm": "binomial"}"#]);
        assert_has(&e, &["rules[0] (bcast → binomial)", "last rule of bcast must have no conditions"]);
    }

    #[test]
    fn placement_conditions_read_the_topology() {
        use fabcoll_collectives::Topology;
        let d = Decisions::from_json(&file(&[
            r#"{"op": "allreduce", "nodes": [2, 8], "per_node": [2, 4], "algorithm": "hier_leader"}"#,
            LAST,
        ]))
        .unwrap();
        let args = CollArgs::new(Collective::Allreduce, 0, 8, 100);
        let pick = |t: Option<Topology>| {
            let a = CollArgs { topology: t.map(std::sync::Arc::new), ..args.clone() };
            d.choose_for(&a).unwrap().0.name
        };
        assert_eq!(pick(Some(Topology::regular(2, 4).unwrap())), "hier_leader");
        assert_eq!(pick(Some(Topology::from_sizes(&[1, 3, 4]).unwrap())), "hier_leader", "per_node = the most");
        // Without a topology every rank is a node of its own; one node; too many ranks per node.
        for t in [None, Some(Topology::regular(1, 8).unwrap()), Some(Topology::from_sizes(&[3, 5]).unwrap())] {
            assert_eq!(pick(t.clone()), "recursive_doubling", "{t:?}");
        }
        let e = error(&[r#"{"op": "allreduce", "nodes": [0, 0], "algorithm": "ring"}"#, LAST]);
        assert_has(&e, &["rules[0] (allreduce → ring)", "nodes range [0, 0] is empty"]);
        let e = error(&[r#"{"op": "allreduce", "per_node": [4, 2], "algorithm": "ring"}"#, LAST]);
        assert_has(&e, &["per_node range [4, 2] is inverted"]);
        let json = d.to_json().unwrap();
        assert!(json.contains(r#""nodes": [2, 8], "per_node": [2, 4]"#), "{json}");
        assert_eq!(Decisions::from_json(&json).unwrap().file(), d.file());
    }

    #[test]
    fn unknown_fabric_class_is_refused_with_the_accepted_ones() {
        let e = error(&[r#"{"op": "allreduce", "fabric": "infiniband", "algorithm": "ring"}"#, LAST]);
        assert_has(&e, &["invalid JSON", "unknown variant `infiniband`", "node", "network", "line 1"]);
        let e = error(&[r#"{"op": "allreduce", "fabric": 1, "algorithm": "ring"}"#, LAST]);
        assert_has(&e, &["invalid JSON"]);
    }

    #[test]
    fn fabric_condition_round_trips_and_old_files_load() {
        let text = file(&[
            r#"{"op": "allreduce", "fabric": "network", "p": [1, 2], "algorithm": "recursive_doubling"}"#,
            LAST,
        ]);
        let d = Decisions::from_json(&text).unwrap();
        assert_eq!(d.file().rules[0].fabric, Some(FabricClass::Network));
        assert_eq!(d.file().rules[1].fabric, None);
        let json = d.to_json().unwrap();
        assert!(json.contains(r#"{"op": "allreduce", "fabric": "network", "p": [1, 2], "#), "{json}");
        assert!(!json.contains(r#""fabric": null"#), "absent conditions are not written: {json}");
        assert_eq!(Decisions::from_json(&json).unwrap().file(), d.file());
    }

    #[test]
    fn fabric_classes_of_endpoints_and_names() {
        use fabcoll_fabric::{Caps, Progress};
        let caps = |backend: &'static str, provider: &str| Caps {
            backend,
            provider: provider.into(),
            inject_size: 0,
            max_write: usize::MAX,
            max_ctrl: 4096,
            imm_bits: 64,
            writes_land_without_target_poll: false,
            ordered_writes: false,
            inline_completion: 0,
            progress: Progress::Manual,
            load_store: false,
        };
        assert_eq!(FabricClass::of(&caps("shm", "shm")), FabricClass::Node);
        assert_eq!(FabricClass::of(&caps("local", "local")), FabricClass::Node);
        assert_eq!(FabricClass::of(&caps("ofi", "shm")), FabricClass::Node);
        assert_eq!(FabricClass::of(&caps("ofi", "tcp;ofi_rxm")), FabricClass::Network);
        assert_eq!(FabricClass::of(&caps("ofi", "verbs;ofi_rxm")), FabricClass::Network);
        for (name, class) in
            [("shm", "node"), ("local", "node"), ("ofi:shm", "node"), ("ofi:tcp", "network"), ("ofi", "network")]
        {
            assert_eq!(FabricClass::of_name(name).to_string(), class, "{name}");
        }
    }

    #[test]
    fn zero_segment_stays_zero() {
        let d = Decisions::from_json(&file(&[r#"{"op": "bcast", "algorithm": "binomial", "params": {"segment": 0}}"#]))
            .unwrap();
        let args = CollArgs::new(Collective::Bcast, 0, 4, 10);
        assert_eq!(d.choose_for(&args).unwrap().1.get(SEGMENT), Some(0));
    }

    #[test]
    fn written_json_reads_back_equal() {
        let d = Decisions::embedded().unwrap();
        let text = d.to_json().unwrap();
        assert_eq!(text, EMBEDDED, "defaults.json is laid out as to_json writes it");
        assert_eq!(Decisions::from_json(&text).unwrap().file(), d.file());
    }
}
