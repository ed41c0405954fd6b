//! `fabcoll info`: what this build can do — each backend's capabilities (or why it is not
//! available) and every registered algorithm with its restrictions and parameters; with
//! `--settings`, the settings table (`fabcoll::fabric::settings`) and the values set here.

use fabcoll::collectives::registry::{self, Algorithm};
use fabcoll::fabric::{self, settings, Backend, Config};

fn backend_line(spec: &str) -> String {
    let backend: Backend = match spec.parse() {
        Ok(b) => b,
        Err(e) => return format!("{spec:<10} invalid: {e}"),
    };
    let cfg = Config::new(backend, 0, 1, format!("fabcoll-info-{}", std::process::id()));
    match fabric::open(&cfg) {
        Ok(ep) => {
            let c = ep.caps();
            format!(
                "{spec:<10} available: provider {}, inject {}, max write {}, max ctrl {}, imm {} bits, \
                 progress {:?}, ordered writes {}, load/store {}",
                c.provider,
                bytes(c.inject_size),
                bytes(c.max_write),
                bytes(c.max_ctrl),
                c.imm_bits,
                c.progress,
                c.ordered_writes,
                c.load_store
            )
        }
        Err(e) => format!("{spec:<10} not available: {e}"),
    }
}

fn bytes(b: usize) -> String {
    if b >= usize::MAX / 2 {
        "unlimited".into()
    } else {
        format!("{b} B")
    }
}

fn restrictions(a: &Algorithm) -> String {
    let r = &a.restrictions;
    let named = [
        (r.pow2, "pow2"),
        (r.commutative, "commutative"),
        (r.no_in_place, "no_in_place"),
        (r.uniform_counts, "uniform_counts"),
        (r.two_level, "two_level"),
        (r.equal_nodes, "equal_nodes"),
    ];
    let v: Vec<&str> = named.iter().filter(|(on, _)| *on).map(|&(_, name)| name).collect();
    if v.is_empty() {
        "-".into()
    } else {
        v.join(",")
    }
}

fn params(a: &Algorithm) -> String {
    if a.params.is_empty() {
        return "-".into();
    }
    a.params.iter().map(|p| format!("{}={} [{}..={}]", p.name, p.default, p.min, p.max)).collect::<Vec<_>>().join(" ")
}

/// The report; `fabrics` are the backends to probe.
pub fn text(fabrics: &[String]) -> String {
    let mut s = format!("fabcoll {}\n\nBackends (a one-rank endpoint opened on each):\n", env!("CARGO_PKG_VERSION"));
    for f in fabrics {
        s += &format!("  {}\n", backend_line(f));
    }
    s += "\nAlgorithms (force with --algo NAME, Options::algorithm or FABCOLL_ALGO=op:name;\n";
    s += "every algorithm also takes segment=<elements> for pipelining):\n";
    let rows: Vec<[String; 4]> = registry::all()
        .map(|a| [format!("{}:{}", a.coll, a.name), restrictions(a), params(a), a.summary.to_owned()])
        .collect();
    let w0 = rows.iter().map(|r| r[0].chars().count()).max().unwrap_or(0).max(12);
    let w1 = rows.iter().map(|r| r[1].len()).max().unwrap_or(0).max(12);
    let w2 = rows.iter().map(|r| r[2].chars().count()).max().unwrap_or(0).max(10);
    s += &format!("  {:<w0$}  {:<w1$}  {:<w2$}  summary\n", "op:algorithm", "restrictions", "parameters");
    for [a, b, c, d] in rows {
        s += &format!("  {a:<w0$}  {b:<w1$}  {c:<w2$}  {d}\n");
    }
    s
}

/// How `fabcoll info --settings` prints the table.
#[derive(Copy, Clone, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum SettingsFormat {
    /// One line per knob, then the knobs this environment sets.
    Text,
    /// The markdown of `docs/settings.md`.
    Markdown,
}

/// The settings report, and whether every knob this environment sets parses.
pub fn settings(format: SettingsFormat) -> (String, bool) {
    if format == SettingsFormat::Markdown {
        return (settings::markdown(), true);
    }
    let mut s = settings::table_text();
    let set = settings::set_in_env();
    let ok = set.iter().all(|(_, r)| r.is_ok());
    if set.is_empty() {
        s += "\nNo FABCOLL_* knob is set in this environment.\n";
    } else {
        s += "\nSet in this environment:\n";
        for (name, r) in set {
            s += &match r {
                Ok(v) => format!("  {name}={v}\n"),
                Err(e) => format!("  error: {e}\n"),
            };
        }
    }
    (s, ok)
}
