//! Output of `fabcoll bench` on rank 0: an aligned table (rows as they finish), CSV (header and
//! rows as they finish) or one JSON document at the end.

use std::io::Write;

use crate::bench::Row;

#[derive(Copy, Clone, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Table,
    Csv,
    Json,
}

/// What the whole run was.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Meta {
    pub op: String,
    /// The requested algorithm: a name or "auto".
    pub algo: String,
    pub fabric: String,
    /// The fabric the job runs on when the name resolved to another one (`ofi:tcp` opens `ofi:net` on
    /// libfabric 1.17).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runs_on: Option<String>,
    pub ranks: u32,
    /// Where the ranks sit (`Topology`'s display: "2 nodes × 2 ranks", "0,2|1,3").
    pub topology: String,
    pub dtype: String,
    /// "barrier" (OSU) or "none" (back-to-back iterations).
    pub sync: String,
    /// Whether every rank read its receive buffer after each timed call (`--touch`).
    pub touch: bool,
    /// Whether the buffers came from the heap instead of `Communicator::alloc` (`--heap`).
    pub heap: bool,
    /// Where the heap buffers start past a 4 KiB boundary (`--heap-offset`), if placed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub heap_offset: Option<usize>,
    /// Whether the calls were made in place (`--in-place`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub in_place: bool,
}

pub const CSV_HEADER: &str = "op,algorithm,fabric,ranks,bytes,count,iters,warmup,avg_us,min_us,max_us,p50_us,p99_us,\
                              algbw_gbps,busbw_gbps,check,asked";

pub struct Report {
    format: Format,
    meta: Meta,
    out: Box<dyn Write>,
    rows: Vec<Row>,
}

impl Report {
    pub fn new(format: Format, meta: Meta, mut out: Box<dyn Write>) -> std::io::Result<Report> {
        match format {
            Format::Table => {
                writeln!(
                    out,
                    "# fabcoll bench: {} ({} sum for reductions), algorithm {}, fabric {}{}, {} ranks, topology {}, sync {}{}{}{}{}",
                    meta.op,
                    meta.dtype,
                    meta.algo,
                    meta.fabric,
                    meta.runs_on.as_ref().map(|f| format!(" (runs on {f})")).unwrap_or_default(),
                    meta.ranks,
                    meta.topology,
                    meta.sync,
                    if meta.touch { ", receive buffers read after each call" } else { "" },
                    if meta.heap { ", buffers on the heap" } else { "" },
                    meta.heap_offset.map(|o| format!(" {o} bytes past a page")).unwrap_or_default(),
                    if meta.in_place { ", in place" } else { "" }
                )?;
                writeln!(
                    out,
                    "# bytes: OSU size; algbw = S/t and busbw = algbw x factor as nccl-tests define them; \
                     times in us, avg/min/max over ranks of per-rank means, p50/p99 over all iterations"
                )?;
                writeln!(
                    out,
                    "{:>10} {:>6} {:<22} {:>10} {:>10} {:>10} {:>10} {:>10} {:>9} {:>9} {:>6}",
                    "bytes",
                    "iters",
                    "algorithm",
                    "avg_us",
                    "min_us",
                    "max_us",
                    "p50_us",
                    "p99_us",
                    "algbw",
                    "busbw",
                    "check"
                )?;
            }
            Format::Csv => writeln!(out, "{CSV_HEADER}")?,
            Format::Json => {}
        }
        out.flush()?;
        Ok(Report { format, meta, out, rows: Vec::new() })
    }

    pub fn row(&mut self, r: &Row) -> std::io::Result<()> {
        match self.format {
            Format::Table => writeln!(
                self.out,
                "{:>10} {:>6} {:<22} {:>10.2} {:>10.2} {:>10.2} {:>10.2} {:>10.2} {:>9.3} {:>9.3} {:>6}",
                r.bytes,
                r.iters,
                if r.asked == "auto" && self.meta.algo.contains(',') {
                    format!("auto:{}", r.algorithm)
                } else {
                    r.algorithm.clone()
                },
                r.avg_us,
                r.min_us,
                r.max_us,
                r.p50_us,
                r.p99_us,
                r.algbw_gbps,
                r.busbw_gbps,
                r.check
            )?,
            Format::Csv => writeln!(
                self.out,
                "{},{},{},{},{},{},{},{},{:.3},{:.3},{:.3},{:.3},{:.3},{:.4},{:.4},{},{}",
                r.op,
                r.algorithm,
                self.meta.fabric,
                r.ranks,
                r.bytes,
                r.count,
                r.iters,
                r.warmup,
                r.avg_us,
                r.min_us,
                r.max_us,
                r.p50_us,
                r.p99_us,
                r.algbw_gbps,
                r.busbw_gbps,
                r.check,
                r.asked
            )?,
            Format::Json => self.rows.push(r.clone()),
        }
        self.out.flush()
    }

    pub fn finish(mut self) -> std::io::Result<()> {
        if self.format == Format::Json {
            #[derive(serde::Serialize)]
            struct Doc<'a> {
                #[serde(flatten)]
                meta: &'a Meta,
                rows: &'a [Row],
            }
            serde_json::to_writer_pretty(&mut self.out, &Doc { meta: &self.meta, rows: &self.rows })?;
            writeln!(self.out)?;
        }
        self.out.flush()
    }
}
