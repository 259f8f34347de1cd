//! One row of each CSV file.

use std::fmt;
use std::str::FromStr;

use shapes::UnknownValue;
use stats::ModelKind;

use crate::RunError;
use crate::csvio::{Line, opt};
use crate::key::{CaseKey, SeriesKey, Status};

/// One row of `results.csv`: a case and what became of it. Timing fields are `None`
/// (empty) unless `status` is `ok`.
#[derive(Debug, Clone, PartialEq)]
pub struct ResultRow {
    pub run_id: String,
    pub key: CaseKey,
    /// The problem's dims, `key=value` separated by spaces.
    pub dims: String,
    pub status: Status,
    pub samples: Option<usize>,
    pub median_ns: Option<f64>,
    pub mean_ns: Option<f64>,
    pub ci_low_ns: Option<f64>,
    pub ci_high_ns: Option<f64>,
    pub mad_ns: Option<f64>,
    pub flops: u64,
    pub bytes: u64,
    pub gflops: Option<f64>,
    pub gbps: Option<f64>,
    /// The kernel or backend that ran, where the op knows it (SDPA).
    pub kernel: Option<String>,
    pub max_rel_err: Option<f64>,
    /// Device modes: timed chunks whose host enqueue outlasted the lead, so their GPU
    /// events include idle time waiting for the host. Above 0, `median_ns` is an upper
    /// bound. Empty for host-timed modes.
    pub uncovered_chunks: Option<u64>,
    /// The host-speed control next to the case: the dispatch floor's per-call time,
    /// measured right before every sample (median over the samples, ns).
    pub control_ns: Option<f64>,
    /// Executions (separate processes) that measured the case; empty for a single process.
    pub executions: Option<u32>,
    /// Between-execution spread: the coefficient of variation of the executions' medians.
    pub exec_cv: Option<f64>,
    pub note: Option<String>,
    /// Samples taken in an unusual host or GPU state ([`crate::Sample::flags`]; added 2026-12-01,
    /// empty where the samples record no state).
    pub flagged: Option<u32>,
}

impl std::ops::Deref for ResultRow {
    type Target = CaseKey;
    fn deref(&self) -> &CaseKey {
        &self.key
    }
}

/// How many times the host-speed control a host-timed median may be and still be divided by
/// it (or read as dispatch): beyond, the call is compute (a CPU GEMM of 70 µs to 90 ms
/// against a 1.5 µs floor), whose time the dispatch floor does not track.
pub const CONTROL_SPAN: f64 = 20.0;

/// Whether a host-timed case's time (`host` ns a call) is the host's dispatch rather than
/// the device's or the CPU's compute — the one rule `compare` and `opbench ab` share:
///
/// - **device-bound**: the case's `device` time (`device`) is at least half the
///   host-timed median; the time is the GPU's. Measured on the H200: lm_head at B = 64
///   read 1.8× slower at "equal host speed" in a run whose host ran 35% faster;
/// - **compute-bound**: the median is more than [`CONTROL_SPAN`] times the case's torch
///   control (`control`); the time is the work's, not dispatch. Measured on the 2-core
///   CPU: lm_head at B = 8 (88 ms, equal raw medians under torch 2.11 and 2.15) read 1.44×
///   slower when divided.
pub fn bound_by_host(host: f64, device: Option<f64>, control: Option<f64>) -> bool {
    let device_bound = device.is_some_and(|d| d >= 0.5 * host);
    let compute_bound = control.is_some_and(|c| host > CONTROL_SPAN * c);
    !(device_bound || compute_bound)
}

/// The note's words for an upper bound in schema 1, which had no column for it.
const V1_UPPER_BOUND: &str = "upper bound: in ";

impl ResultRow {
    /// `results.csv` columns after `run_id` and the case key, in file order.
    const TAIL: [&'static str; 20] = [
        "dims",
        "status",
        "samples",
        "median_ns",
        "mean_ns",
        "ci_low_ns",
        "ci_high_ns",
        "mad_ns",
        "flops",
        "bytes",
        "gflops",
        "gbps",
        "kernel",
        "max_rel_err",
        "uncovered_chunks",
        "control_ns",
        "executions",
        "exec_cv",
        "note",
        "flagged",
    ];

    /// Columns added after schema 5 that a reader does not require.
    pub(crate) const OPTIONAL: [&'static str; 1] = ["flagged"];

    /// `results.csv` columns, in file order: `run_id`, the case key, the rest.
    pub fn columns() -> Vec<&'static str> {
        let mut out = vec!["run_id"];
        out.extend(CaseKey::COLUMNS);
        out.extend(Self::TAIL);
        out
    }

    /// A row with the case's identity, work counts and status, timing left empty.
    /// The row's timing from its samples, (calls, total ns) each: median, 95% interval of
    /// the median ([`stats::ROW_RESAMPLES`] bootstrap resamples), mean, MAD, and the rates
    /// of the row's own FLOPs and bytes; an `error` row where no sample is usable. The one estimator every
    /// row is made by (the bench binaries', and `opbench ingest`'s for scripts/peer.py).
    pub fn summarize(&mut self, pairs: &[(u64, f64)]) {
        let est = stats::per_call(pairs)
            .and_then(|times| stats::estimate(&times, stats::ROW_LEVEL, stats::ROW_RESAMPLES));
        match est {
            Ok(e) => {
                self.samples = Some(e.n);
                self.median_ns = Some(e.median);
                self.mean_ns = Some(e.mean);
                self.ci_low_ns = Some(e.ci_low);
                self.ci_high_ns = Some(e.ci_high);
                self.mad_ns = Some(e.mad);
                if e.median > 0.0 {
                    // per nanosecond = giga per second
                    self.gflops = Some(self.flops as f64 / e.median);
                    self.gbps = Some(self.bytes as f64 / e.median);
                }
            }
            Err(e) => {
                self.status = Status::Error;
                self.note = Some(format!("no usable samples: {e}"));
            }
        }
    }

    pub fn new(run_id: &str, key: CaseKey, dims: String, status: Status) -> Self {
        ResultRow {
            run_id: run_id.to_string(),
            key,
            dims,
            status,
            samples: None,
            median_ns: None,
            mean_ns: None,
            ci_low_ns: None,
            ci_high_ns: None,
            mad_ns: None,
            flops: 0,
            bytes: 0,
            gflops: None,
            gbps: None,
            kernel: None,
            max_rel_err: None,
            uncovered_chunks: None,
            control_ns: None,
            executions: None,
            exec_cv: None,
            note: None,
            flagged: None,
        }
    }

    /// An `ok` row with a median.
    pub fn is_ok(&self) -> bool {
        self.status == Status::Ok && self.median_ns.is_some()
    }

    /// Its device time is an upper bound: some chunks' GPU events include host gaps.
    pub fn is_upper_bound(&self) -> bool {
        self.uncovered_chunks.is_some_and(|n| n > 0)
    }

    pub(crate) fn record(&self) -> Vec<String> {
        let mut out = vec![self.run_id.clone()];
        out.extend(self.key.fields());
        out.extend([
            self.dims.clone(),
            self.status.to_string(),
            opt(&self.samples),
            opt(&self.median_ns),
            opt(&self.mean_ns),
            opt(&self.ci_low_ns),
            opt(&self.ci_high_ns),
            opt(&self.mad_ns),
            self.flops.to_string(),
            self.bytes.to_string(),
            opt(&self.gflops),
            opt(&self.gbps),
            opt(&self.kernel),
            opt(&self.max_rel_err),
            opt(&self.uncovered_chunks),
            opt(&self.control_ns),
            opt(&self.executions),
            opt(&self.exec_cv),
            opt(&self.note),
            opt(&self.flagged),
        ]);
        out
    }

    /// Read one record; `schema` is the run's version.
    pub(crate) fn read(l: &Line<'_>, schema: u32) -> Result<Self, RunError> {
        let text = |c: &str| Some(l.text(c).to_string()).filter(|s| !s.is_empty());
        let note = text("note");
        let uncovered_chunks = if schema >= 2 {
            l.opt("uncovered_chunks")?
        } else {
            note.as_deref().and_then(v1_uncovered)
        };
        let row = ResultRow {
            run_id: l.text("run_id").to_string(),
            key: CaseKey::read(l)?,
            dims: l.text("dims").to_string(),
            status: l.req("status")?,
            samples: l.opt("samples")?,
            median_ns: l.positive("median_ns", false)?,
            mean_ns: l.positive("mean_ns", false)?,
            ci_low_ns: l.positive("ci_low_ns", false)?,
            ci_high_ns: l.positive("ci_high_ns", false)?,
            mad_ns: l.positive("mad_ns", true)?,
            flops: l.req("flops")?,
            bytes: l.req("bytes")?,
            gflops: l.positive("gflops", true)?,
            gbps: l.positive("gbps", true)?,
            kernel: text("kernel"),
            max_rel_err: l.positive("max_rel_err", true)?,
            uncovered_chunks,
            control_ns: l.positive("control_ns", false)?,
            executions: l.opt("executions")?,
            exec_cv: l.positive("exec_cv", true)?,
            note,
            flagged: l.opt("flagged")?,
        };
        if row.status == Status::Ok {
            for (column, v) in [
                ("median_ns", row.median_ns),
                ("ci_low_ns", row.ci_low_ns),
                ("ci_high_ns", row.ci_high_ns),
            ] {
                if v.is_none() {
                    return Err(l.error(column, "empty in an `ok` row"));
                }
            }
            if let (Some(lo), Some(hi)) = (row.ci_low_ns, row.ci_high_ns) {
                if lo > hi {
                    return Err(l.error("ci_low_ns", format!("{lo} is above ci_high_ns {hi}")));
                }
            }
            if row.samples == Some(0) {
                return Err(l.error("samples", "0 in an `ok` row"));
            }
        }
        if row.uncovered_chunks.is_some_and(|n| n > 0) && !row.key.mode.is_device() {
            return Err(l.error(
                "uncovered_chunks",
                format!(
                    "set in a `{}` row; only device modes have a lead",
                    row.key.mode
                ),
            ));
        }
        Ok(row)
    }
}

/// `k` of a schema-1 note's "upper bound: in k of n chunks …".
fn v1_uncovered(note: &str) -> Option<u64> {
    let rest = &note[note.find(V1_UPPER_BOUND)? + V1_UPPER_BOUND.len()..];
    rest.split_whitespace().next()?.parse().ok()
}

/// What a series' time is fitted against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Work {
    Bytes,
    Flops,
}

impl Work {
    pub fn as_str(self) -> &'static str {
        match self {
            Work::Bytes => "bytes",
            Work::Flops => "flops",
        }
    }
    /// The row's amount of this work.
    pub fn of(self, r: &ResultRow) -> f64 {
        match self {
            Work::Bytes => r.bytes as f64,
            Work::Flops => r.flops as f64,
        }
    }
    /// The unit of a rate in fits.csv, and the factor from work per ns to it.
    pub fn unit(self) -> (&'static str, f64) {
        match self {
            Work::Bytes => ("GB/s", 1.0),
            Work::Flops => ("TFLOP/s", 1e-3),
        }
    }
}

impl fmt::Display for Work {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Work {
    type Err = UnknownValue;
    fn from_str(s: &str) -> Result<Self, UnknownValue> {
        match s {
            "bytes" => Ok(Work::Bytes),
            "flops" => Ok(Work::Flops),
            _ => Err(UnknownValue::new(s, &["bytes", "flops"])),
        }
    }
}

/// One row of `fits.csv`: a series' overhead + work/rate model.
#[derive(Debug, Clone, PartialEq)]
pub struct FitRow {
    pub series: SeriesKey,
    pub work: Work,
    pub n_points: usize,
    pub overhead_us: f64,
    pub overhead_ci_low_us: f64,
    pub overhead_ci_high_us: f64,
    /// In [`Work::unit`]; `None` for a flat model.
    pub rate: Option<f64>,
    pub rate_ci_low: Option<f64>,
    /// `None` also when the interval is unbounded above.
    pub rate_ci_high: Option<f64>,
    pub r2: f64,
    pub crossover_batch: Option<f64>,
    pub model_kind: ModelKind,
}

impl FitRow {
    /// `fits.csv` columns after the series key, in file order.
    const TAIL: [&'static str; 12] = [
        "work",
        "n_points",
        "overhead_us",
        "overhead_ci_low_us",
        "overhead_ci_high_us",
        "rate",
        "rate_ci_low",
        "rate_ci_high",
        "rate_unit",
        "r2",
        "crossover_batch",
        "model_kind",
    ];

    /// `fits.csv` columns, in file order: the series key, then the fit.
    pub fn columns() -> Vec<&'static str> {
        let mut out = SeriesKey::columns();
        out.extend(Self::TAIL);
        out
    }

    pub fn rate_unit(&self) -> &'static str {
        self.work.unit().0
    }

    pub(crate) fn record(&self) -> Vec<String> {
        let mut out = self.series.fields(None);
        out.extend([
            self.work.to_string(),
            self.n_points.to_string(),
            self.overhead_us.to_string(),
            self.overhead_ci_low_us.to_string(),
            self.overhead_ci_high_us.to_string(),
            opt(&self.rate),
            opt(&self.rate_ci_low),
            opt(&self.rate_ci_high),
            self.rate_unit().to_string(),
            self.r2.to_string(),
            opt(&self.crossover_batch),
            self.model_kind.as_str().to_string(),
        ]);
        out
    }
}
