//! Default algorithm choice: an embedded decision table (`defaults.txt`, thakur §4 and §5.4
//! cutoffs) parsed and validated at first use, the `FABCOLL_ALGO` override from the environment,
//! and per-call forcing by name. Only registered algorithms whose restrictions hold are chosen.

pub mod file;
pub mod model;

use std::sync::OnceLock;

use fabcoll_collectives::registry::{self, Algorithm};
use fabcoll_collectives::{CollArgs, Collective};

use crate::error::{Error, Result};

const DEFAULTS: &str = include_str!("defaults.txt");

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Cmp {
    Lt,
    Le,
    Gt,
    Ge,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Cond {
    Msg(Cmp, u64),
    Total(Cmp, u64),
    P(Cmp, u64),
    Pow2(bool),
    Commutative(bool),
}

/// One line of the table.
#[derive(Clone, Debug)]
struct Rule {
    coll: Collective,
    conds: Vec<Cond>,
    algs: Vec<String>,
}

/// A parsed decision table.
#[derive(Clone, Debug)]
pub struct Table {
    rules: Vec<Rule>,
}

/// What the table looks at.
#[derive(Copy, Clone, Debug)]
pub struct Features {
    /// Bytes of one block (average block for v-variants).
    pub msg: u64,
    /// Bytes of the whole result.
    pub total: u64,
    pub p: u32,
    pub commutative: bool,
}

fn cmp(c: Cmp, a: u64, b: u64) -> bool {
    match c {
        Cmp::Lt => a < b,
        Cmp::Le => a <= b,
        Cmp::Gt => a > b,
        Cmp::Ge => a >= b,
    }
}

fn parse_num(s: &str) -> Option<u64> {
    let s = s.trim();
    let (digits, mult) = match s.as_bytes().last()? {
        b'K' | b'k' => (&s[..s.len() - 1], 1024),
        b'M' | b'm' => (&s[..s.len() - 1], 1024 * 1024),
        _ => (s, 1),
    };
    digits.parse::<u64>().ok().map(|v| v * mult)
}

fn parse_cond(s: &str) -> Option<Cond> {
    match s {
        "pow2" => return Some(Cond::Pow2(true)),
        "!pow2" => return Some(Cond::Pow2(false)),
        "commutative" => return Some(Cond::Commutative(true)),
        "!commutative" => return Some(Cond::Commutative(false)),
        _ => {}
    }
    for (op, c) in [("<=", Cmp::Le), (">=", Cmp::Ge), ("<", Cmp::Lt), (">", Cmp::Gt)] {
        if let Some((var, num)) = s.split_once(op) {
            let n = parse_num(num)?;
            return match var.trim() {
                "msg" => Some(Cond::Msg(c, n)),
                "total" => Some(Cond::Total(c, n)),
                "p" => Some(Cond::P(c, n)),
                _ => None,
            };
        }
    }
    None
}

impl Table {
    /// Parses the table format documented at the top of `defaults.txt`.
    pub fn parse(text: &str) -> Result<Table> {
        let bad =
            |n: usize, msg: String| Error::InvalidArgument { coll: "decision table", msg: format!("line {n}: {msg}") };
        let mut rules = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let n = i + 1;
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let (lhs, rhs) = line.split_once("->").ok_or_else(|| bad(n, "missing `->`".into()))?;
            let mut lw = lhs.split_whitespace();
            let op = lw.next().ok_or_else(|| bad(n, "missing operation".into()))?;
            let coll = Collective::from_name(op).ok_or_else(|| bad(n, format!("unknown operation {op:?}")))?;
            let conds_s = lw.next().ok_or_else(|| bad(n, "missing conditions (use * for none)".into()))?;
            if lw.next().is_some() {
                return Err(bad(n, "conditions must not contain spaces".into()));
            }
            let conds = if conds_s == "*" {
                Vec::new()
            } else {
                conds_s
                    .split(',')
                    .map(|c| parse_cond(c.trim()).ok_or_else(|| bad(n, format!("bad condition {c:?}"))))
                    .collect::<Result<Vec<_>>>()?
            };
            let algs: Vec<String> = rhs.split_whitespace().map(str::to_owned).collect();
            if algs.is_empty() {
                return Err(bad(n, "no algorithm after `->`".into()));
            }
            rules.push(Rule { coll, conds, algs });
        }
        Ok(Table { rules })
    }

    /// The embedded default table.
    pub fn defaults() -> &'static Table {
        static T: OnceLock<Table> = OnceLock::new();
        T.get_or_init(|| Table::parse(DEFAULTS).unwrap_or(Table { rules: Vec::new() }))
    }

    /// The algorithm for `args`: the first matching rule naming a registered, eligible
    /// algorithm; else the first eligible algorithm of the registry.
    pub fn choose(&self, args: &CollArgs, f: &Features) -> Result<&'static Algorithm> {
        for rule in self.rules.iter().filter(|r| r.coll == args.coll) {
            let holds = rule.conds.iter().all(|c| match *c {
                Cond::Msg(c, n) => cmp(c, f.msg, n),
                Cond::Total(c, n) => cmp(c, f.total, n),
                Cond::P(c, n) => cmp(c, u64::from(f.p), n),
                Cond::Pow2(b) => f.p.is_power_of_two() == b,
                Cond::Commutative(b) => f.commutative == b,
            });
            if !holds {
                continue;
            }
            for name in &rule.algs {
                if let Ok(a) = registry::find(args.coll, name) {
                    if a.restrictions.violated(args).is_none() {
                        return Ok(a);
                    }
                }
            }
        }
        registry::eligible(args)
            .next()
            .ok_or_else(|| Error::invalid(args.coll, "no registered algorithm accepts these arguments"))
    }
}

/// `FABCOLL_ALGO=allreduce:ring,bcast:binomial` parsed (operation names checked).
pub fn parse_overrides(s: &str) -> Result<Vec<(Collective, String)>> {
    let mut out = Vec::new();
    for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let (op, name) = item.split_once(':').ok_or_else(|| Error::InvalidArgument {
            coll: "FABCOLL_ALGO",
            msg: format!("{item:?} is not <operation>:<algorithm>"),
        })?;
        let coll = Collective::from_name(op.trim())
            .ok_or_else(|| Error::InvalidArgument { coll: "FABCOLL_ALGO", msg: format!("unknown operation {op:?}") })?;
        registry::find(coll, name.trim())?;
        out.push((coll, name.trim().to_owned()));
    }
    Ok(out)
}

/// The environment's overrides, read once.
pub fn env_overrides() -> Result<&'static [(Collective, String)]> {
    static O: OnceLock<std::result::Result<Vec<(Collective, String)>, String>> = OnceLock::new();
    let r = O.get_or_init(|| match std::env::var("FABCOLL_ALGO") {
        Ok(s) => parse_overrides(&s).map_err(|e| e.to_string()),
        Err(_) => Ok(Vec::new()),
    });
    r.as_deref().map_err(|e| Error::InvalidArgument { coll: "FABCOLL_ALGO", msg: e.clone() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_table_parses_and_names_real_algorithms() {
        let t = Table::parse(DEFAULTS).unwrap();
        assert!(t.rules.len() > 20);
        for r in &t.rules {
            assert!(
                r.algs.iter().any(|a| registry::find(r.coll, a).is_ok()),
                "rule for {} names no registered algorithm: {:?}",
                r.coll,
                r.algs
            );
        }
        for coll in Collective::ALL {
            assert!(t.rules.iter().any(|r| r.coll == coll), "no rule for {coll}");
        }
    }

    #[test]
    fn thakur_cutoffs() {
        let t = Table::defaults();
        let pick = |coll: Collective, p: u32, count: u64, comm: bool| {
            let args = CollArgs::new(coll, 0, p, count).with_commutative(comm);
            let f = Features { msg: count * 4, total: count * 4 * u64::from(p), p, commutative: comm };
            t.choose(&args, &f).unwrap().name
        };
        assert_eq!(pick(Collective::Allreduce, 8, 256, true), "recursive_doubling");
        assert_eq!(pick(Collective::Allreduce, 8, 1 << 20, true), "rabenseifner");
        assert_eq!(pick(Collective::Bcast, 4, 1 << 20, true), "binomial");
        assert_eq!(pick(Collective::Bcast, 16, 1 << 14, true), "scatter_recursive_doubling_allgather");
        assert_eq!(pick(Collective::Bcast, 12, 1 << 14, true), "scatter_ring_allgather");
        assert_eq!(pick(Collective::Allgather, 8, 16, true), "recursive_doubling");
        assert_eq!(pick(Collective::Allgather, 7, 16, true), "bruck");
        assert_eq!(pick(Collective::Allgather, 7, 1 << 20, true), "ring");
        assert_eq!(pick(Collective::Alltoall, 8, 16, true), "bruck");
        assert_eq!(pick(Collective::Alltoall, 4, 16, true), "simple");
        assert_eq!(pick(Collective::ReduceScatter, 4, 16, false), "recursive_doubling");
    }

    #[test]
    fn bad_tables_and_overrides_are_errors() {
        assert!(Table::parse("allreduce * ring").unwrap_err().to_string().contains("line 1"));
        assert!(Table::parse("nosuch * -> ring").is_err());
        assert!(Table::parse("allreduce q<3 -> ring").is_err());
        assert_eq!(parse_overrides("allreduce:ring, bcast:binomial").unwrap().len(), 2);
        assert!(parse_overrides("allreduce:nosuch").unwrap_err().to_string().contains("nosuch"));
        assert!(parse_overrides("allreduce").is_err());
    }
}
