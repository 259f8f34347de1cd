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
    /// Samples taken in an unusual host or GPU state ([`Sample::flags`]; added 2026-12-01,
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
    /// the median (2,000 bootstrap resamples), mean, MAD, and the rates of the row's own
    /// FLOPs and bytes; an `error` row where no sample is usable. The one estimator every
    /// row is made by (the bench binaries', and `opbench ingest`'s for scripts/peer.py).
    pub fn summarize(&mut self, pairs: &[(u64, f64)]) {
        let est = stats::per_call(pairs).and_then(|times| stats::estimate(&times, 0.95, 2000));
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

/// One row of `samples.csv`: one criterion sample of a case, `iters` calls in `total_ns`.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub key: CaseKey,
    /// The execution (process) that took it, from 1.
    pub execution: u32,
    pub iters: u64,
    pub total_ns: f64,
    /// The host-speed control right before this sample: the dispatch floor's per-call
    /// time in ns (empty where it was not measured).
    pub control_ns: Option<f64>,
    /// The build-independent host-speed control right before this sample: a fixed piece
    /// of CPU work that never calls torch, in ns (empty where it was not measured: runs
    /// before it existed). A new build cannot move it; the host's own speed does.
    pub host_ns: Option<f64>,
    /// The host's and GPU's state over the sample, where the platform tells it.
    pub state: SampleState,
    /// In a paired run (`opbench ab`), the pair this sample belongs to: the base's and the
    /// candidate's samples of one case with the same index were taken back to back
    /// (empty in runs of separate executions; added 2026-12-03).
    pub pair: Option<u32>,
}

/// The host's and the GPU's state over one sample (columns added 2026-12-01; empty where
/// the platform does not tell, and in older runs). It travels between a worker and
/// `opbench ab` as JSON (every field optional).
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct SampleState {
    /// The process's CPU time during the sample (ns; user + system, every thread).
    pub cpu_ns: Option<f64>,
    /// The process's involuntary context switches during the sample.
    pub nivcsw: Option<u64>,
    /// The machine's steal ticks during the sample (`/proc/stat`).
    pub steal: Option<u64>,
    /// The GPU right after the sample: SM clock (MHz), utilization (%), temperature (°C)
    /// and the throttling reasons (NVML's bitmask less the benign ones; 0 for none).
    pub sm_mhz: Option<u32>,
    pub gpu_util: Option<u32>,
    pub gpu_temp: Option<u32>,
    pub throttle: Option<u64>,
    /// The build-independent host control again, right after the sample (ns): a slow
    /// burst that begins during the sample shows here, not in `host_ns` before it.
    pub host_after_ns: Option<f64>,
    /// The slowest stretch of the sample's own calls, per call (ns): a host-timed sample's
    /// calls are timed in up to [`STRETCHES`] stretches of equal count (a clock read between
    /// stretches, none inside a call). A burst that begins and ends inside the sample, which
    /// the controls before and after it cannot see, shows here.
    pub slowest_ns: Option<f64>,
    /// The dispatch floor's control again, right after the sample (ns per call; beside
    /// `control_ns` before it; added 2026-12-02). With it, the torch control is what
    /// [`SampleFlag::HostSlow`] reads: a torch call moves with the build, but within one
    /// case and execution it reads the host's state, and on the H200 it caught more of the
    /// slow samples than the build-independent controls (docs/findings.md 9).
    pub control_after_ns: Option<f64>,
    /// The median stretch of the sample's own calls, per call (ns; beside `slowest_ns`,
    /// added 2026-12-02): the sample's own pace, which a burst inside it does not move — a
    /// sample whose time per call runs well over it was slow in part of its calls only.
    /// scripts/peer.py's generate() samples (one call of many new tokens) are timed per
    /// token: a stretch is one token (its forward and generate()'s loop after it).
    pub typical_ns: Option<f64>,
}

/// How many stretches a host-timed sample's calls are timed in ([`SampleState::slowest_ns`]).
pub const STRETCHES: u64 = 32;

/// Why a sample is not of the machine's usual state ([`Sample::flags`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SampleFlag {
    /// The hypervisor took CPU time from the machine (steal).
    Steal,
    /// The process was switched out involuntarily more than once per 4 ms.
    Switched,
    /// The host control around the sample (the mean of its ratios before and after, each to
    /// its median over the case in the execution) ran over [`HOST_SLOW`]: the torch control
    /// (`control_ns`, `control_after_ns`) where the sample records it after too (since
    /// 2026-12-02), else the build-independent one (`host_ns`, `host_after_ns`).
    HostSlow,
    /// The case ran slow through this whole execution and the host control says the host
    /// was why: against the lowest of the case's executions, its host control's median over
    /// the execution ran over [`HOST_SLOW`]× ([`CaseMedians::level`]) and its median time per
    /// call over [`SLOW`]× ([`CaseMedians::per_call_level`]); a run of several executions
    /// only. A host slow through a whole case (gen17's second execution, 2026-12-02: every
    /// HF row at B = 64 at 1.85× the first's, its control 1.85×) leaves
    /// [`SampleFlag::HostSlow`], judged within the execution, nothing to see. Within one run
    /// every execution is the same build, so a level between them is the host's; the
    /// case's fastest execution is never flagged by it.
    HostLevel,
    /// A stretch of the sample's own calls ran slower than [`STALL`]× the case's median
    /// time per call: the host stalled inside the sample. This reads the sample's own
    /// clock, so it tells an uneven sample from an even one; a build whose every call is
    /// slower makes every sample evenly slower and is not flagged by it.
    Stalled,
    /// The GPU held its clock down for power or heat *below its case's median clock* (by
    /// more than [`CLOCK_DROP`]): a throttle reason alone is not a flag, since a case whose
    /// every sample runs at the power cap (a large GEMM on the H200) is in its usual state.
    GpuThrottled,
}

impl SampleFlag {
    pub fn as_str(self) -> &'static str {
        match self {
            SampleFlag::Steal => "steal",
            SampleFlag::Switched => "switched",
            SampleFlag::HostSlow => "host-slow",
            SampleFlag::HostLevel => "host-level",
            SampleFlag::Stalled => "stalled",
            SampleFlag::GpuThrottled => "gpu-throttled",
        }
    }
}

/// How far the host control around a sample (the mean of its ratios before and after to
/// their medians) may run before its sample is flagged. Chosen with [`STALL`] on a probe of
/// the H200's host-bound calls (2026-12-01, docs/findings.md) for the build-independent
/// control, then fixed for the torch control before the runs that judged it (2026-12-02).
pub const HOST_SLOW: f64 = 1.2;

/// A time is slow over this multiple of its case's usual: a sample against its case's median
/// in its fastest execution (`opbench state`, issue 31's bars), an execution's median
/// against the fastest's ([`SampleFlag::HostLevel`]).
pub const SLOW: f64 = 1.3;

/// How much slower than the case's median time per call a stretch of a sample's calls may
/// run before its sample is flagged as stalled.
pub const STALL: f64 = 2.0;

/// How far below its case's median SM clock a throttled sample's clock must read to be
/// flagged ([`SampleFlag::GpuThrottled`]): 2% (two or three 15-MHz steps on the H200), over
/// the jitter of one reading right after the sample.
pub const CLOCK_DROP: f64 = 0.02;

/// The medians a sample's state is judged against: over its case's samples of one
/// execution, the host controls before and after (build-independent and torch), the time
/// per call and the GPU's clock.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CaseMedians {
    pub host: Option<f64>,
    pub host_after: Option<f64>,
    pub control: Option<f64>,
    pub control_after: Option<f64>,
    pub per_call: Option<f64>,
    pub sm_mhz: Option<f64>,
    /// The host control's median over the execution's samples, before and after each
    /// pooled ([`Sample::controls`]): the execution's level.
    pub control_level: Option<f64>,
    /// `control_level` against the lowest of the case's executions ([`case_medians`]);
    /// `None` within one execution.
    pub level: Option<f64>,
    /// `per_call` against the lowest of the case's executions' ([`case_medians`]); `None`
    /// within one execution.
    pub per_call_level: Option<f64>,
}

impl CaseMedians {
    /// The medians of `samples` (one case, one execution).
    pub fn of(samples: &[&Sample]) -> Self {
        let of = |f: &dyn Fn(&Sample) -> Option<f64>| {
            let v: Vec<f64> = samples.iter().filter_map(|s| f(s)).collect();
            (!v.is_empty()).then(|| stats::median(&v))
        };
        CaseMedians {
            host: of(&|s| s.host_ns),
            host_after: of(&|s| s.state.host_after_ns),
            control: of(&|s| s.control_ns),
            control_after: of(&|s| s.state.control_after_ns),
            per_call: of(&|s| Some(s.per_call_ns())),
            sm_mhz: of(&|s| s.state.sm_mhz.map(f64::from)),
            control_level: {
                let torch = Sample::reads_torch_control(samples.iter().copied());
                let v: Vec<f64> = samples.iter().flat_map(|s| s.controls(torch)).collect();
                (!v.is_empty()).then(|| stats::median(&v))
            },
            level: None,
            per_call_level: None,
        }
    }

    /// The case's median time per call in its fastest execution (`per_call` over its
    /// [`CaseMedians::per_call_level`]; within one execution, its own).
    pub fn fastest_per_call(&self) -> Option<f64> {
        self.per_call
            .map(|t| t / self.per_call_level.unwrap_or(1.0))
    }

    /// These medians as judged within their execution alone: without the levels against
    /// the case's other executions (so no [`SampleFlag::HostLevel`]).
    pub fn within_execution(&self) -> Self {
        CaseMedians {
            level: None,
            per_call_level: None,
            ..*self
        }
    }
}

/// How many of a case's samples are flagged ([`Sample::flags`]), each judged against its
/// execution's medians; `None` where no sample records a state.
pub fn flagged(samples: &[Sample]) -> Option<u32> {
    flag_each(samples).map(|f| f.iter().filter(|&&x| x).count() as u32)
}

/// Whether each of a case's samples is flagged, in order (each judged against the medians
/// of its case within its execution, and that execution's level against the case's
/// others: [`case_medians`]); `None` where no sample records a state.
pub fn flag_each(samples: &[Sample]) -> Option<Vec<bool>> {
    if !samples.iter().any(Sample::records_state) {
        return None;
    }
    let medians = case_medians(samples);
    Some(
        samples
            .iter()
            .map(|s| !s.flags(&medians[&s.execution]).is_empty())
            .collect(),
    )
}

/// A case's [`CaseMedians`] per execution, each with its [`CaseMedians::level`]: the
/// execution's host control (its median over the case's samples, before and after each)
/// against the lowest of the case's executions (`None` for a case of one execution).
pub fn case_medians(samples: &[Sample]) -> std::collections::BTreeMap<u32, CaseMedians> {
    let mut out: std::collections::BTreeMap<u32, CaseMedians> = by_execution(samples)
        .into_iter()
        .map(|(e, of)| (e, CaseMedians::of(&of)))
        .collect();
    let lowest = |f: fn(&CaseMedians) -> Option<f64>| {
        out.values().filter_map(f).fold(f64::INFINITY, f64::min)
    };
    let (control, per_call) = (lowest(|m| m.control_level), lowest(|m| m.per_call));
    let compared = out.values().filter(|m| m.control_level.is_some()).count();
    if compared >= 2 && control > 0.0 {
        for m in out.values_mut() {
            m.level = m.control_level.map(|c| c / control);
            m.per_call_level = m.per_call.map(|t| t / per_call);
        }
    }
    out
}

/// A case's samples per execution, in execution order (each execution's in file order): what
/// its state is judged within.
pub fn by_execution(samples: &[Sample]) -> std::collections::BTreeMap<u32, Vec<&Sample>> {
    let mut out: std::collections::BTreeMap<u32, Vec<&Sample>> = Default::default();
    for s in samples {
        out.entry(s.execution).or_default().push(s);
    }
    out
}

impl Sample {
    /// `samples.csv` columns, in file order: the case key, then these.
    const TAIL: [&'static str; 17] = [
        "execution",
        "iters",
        "total_ns",
        "control_ns",
        "host_ns",
        "cpu_ns",
        "nivcsw",
        "steal",
        "sm_mhz",
        "gpu_util",
        "gpu_temp",
        "throttle",
        "host_after_ns",
        "slowest_ns",
        "control_after_ns",
        "typical_ns",
        "pair",
    ];

    /// Columns added after schema 2 that a reader does not require (older runs lack them):
    /// every one after `control_ns`.
    const FIRST_OPTIONAL: usize = 4;

    /// What flags this sample as taken in an unusual state: steal, many involuntary
    /// switches, a slow host control around it, a stalled stretch of its own calls, a GPU
    /// throttled below its usual clock (each against `m`, its case's medians in its
    /// execution; a throttled sample without a clock to compare is flagged). Empty: clean,
    /// or nothing recorded to tell.
    pub fn flags(&self, m: &CaseMedians) -> Vec<SampleFlag> {
        let s = &self.state;
        let mut out = Vec::new();
        if s.steal.is_some_and(|t| t > 0) {
            out.push(SampleFlag::Steal);
        }
        let per_4ms = (self.total_ns / 4e6).max(1.0);
        if s.nivcsw.is_some_and(|n| n as f64 > per_4ms) {
            out.push(SampleFlag::Switched);
        }
        if self.host_control_ratio(m).is_some_and(|r| r > HOST_SLOW) {
            out.push(SampleFlag::HostSlow);
        }
        if m.level.is_some_and(|l| l > HOST_SLOW) && m.per_call_level.is_some_and(|t| t > SLOW) {
            out.push(SampleFlag::HostLevel);
        }
        if s.slowest_ns
            .zip(m.per_call)
            .is_some_and(|(x, p)| x > STALL * p)
        {
            out.push(SampleFlag::Stalled);
        }
        let below_usual = match (s.sm_mhz, m.sm_mhz) {
            (Some(x), Some(usual)) => f64::from(x) < (1.0 - CLOCK_DROP) * usual,
            _ => true,
        };
        if s.throttle.is_some_and(|t| t != 0) && below_usual {
            out.push(SampleFlag::GpuThrottled);
        }
        out
    }

    /// The host control around this sample against its case's medians (`m`): the mean of
    /// its ratios before and after (one where only one was recorded). The torch control
    /// where the sample records it after too (it caught more of the H200's slow samples,
    /// docs/findings.md 9), else the build-independent one; `None`: neither recorded.
    pub fn host_control_ratio(&self, m: &CaseMedians) -> Option<f64> {
        let ratio = |h: Option<f64>, m: Option<f64>| h.zip(m).map(|(h, m)| h / m);
        let (before, after) = if Self::reads_torch_control([self]) {
            (
                ratio(self.control_ns, m.control),
                ratio(self.state.control_after_ns, m.control_after),
            )
        } else {
            (
                ratio(self.host_ns, m.host),
                ratio(self.state.host_after_ns, m.host_after),
            )
        };
        match (before, after) {
            (Some(b), Some(a)) => Some((a + b) / 2.0),
            (b, a) => b.or(a),
        }
    }

    /// Whether the host control read for `samples` is the torch control (`control_ns`,
    /// `control_after_ns`): where any of them records it after too (since 2026-12-02);
    /// else the build-independent one (`host_ns`, `host_after_ns`). The one place that
    /// chooses, for a sample's flag and for a case's level.
    pub fn reads_torch_control<'s>(samples: impl IntoIterator<Item = &'s Sample>) -> bool {
        samples
            .into_iter()
            .any(|s| s.state.control_after_ns.is_some())
    }

    /// The host control's readings before and after this sample: the torch control's with
    /// `torch` ([`Sample::reads_torch_control`]), else the build-independent one's.
    pub fn controls(&self, torch: bool) -> impl Iterator<Item = f64> {
        let pair = if torch {
            [self.control_ns, self.state.control_after_ns]
        } else {
            [self.host_ns, self.state.host_after_ns]
        };
        pair.into_iter().flatten()
    }

    /// The columns a reader of schema ≥ 2 requires.
    pub fn v2_columns() -> Vec<&'static str> {
        Self::columns()
            .into_iter()
            .filter(|c| !Self::TAIL[Self::FIRST_OPTIONAL..].contains(c))
            .collect()
    }

    /// `samples.csv` columns, in file order.
    pub fn columns() -> Vec<&'static str> {
        let mut out = CaseKey::COLUMNS.to_vec();
        out.extend(Self::TAIL);
        out
    }

    /// The columns every schema version has.
    pub fn v1_columns() -> Vec<&'static str> {
        let mut out = CaseKey::COLUMNS.to_vec();
        out.extend(["iters", "total_ns"]);
        out
    }

    /// Whether the sample records the host's or GPU's state (runs before 2026-12-01, and
    /// the peer's difference samples, do not): a case none of whose samples does is not
    /// judged by the flags.
    pub fn records_state(&self) -> bool {
        self.host_ns.is_some() || self.state != SampleState::default()
    }

    /// Time per call.
    pub fn per_call_ns(&self) -> f64 {
        self.total_ns / self.iters as f64
    }

    pub(crate) fn record(&self) -> Vec<String> {
        let mut out = self.key.fields();
        out.extend([
            self.execution.to_string(),
            self.iters.to_string(),
            self.total_ns.to_string(),
            opt(&self.control_ns),
            opt(&self.host_ns),
            opt(&self.state.cpu_ns),
            opt(&self.state.nivcsw),
            opt(&self.state.steal),
            opt(&self.state.sm_mhz),
            opt(&self.state.gpu_util),
            opt(&self.state.gpu_temp),
            opt(&self.state.throttle),
            opt(&self.state.host_after_ns),
            opt(&self.state.slowest_ns),
            opt(&self.state.control_after_ns),
            opt(&self.state.typical_ns),
            opt(&self.pair),
        ]);
        out
    }

    /// Samples of `key` from (calls, total ns) pairs, without host controls.
    pub fn bare(key: &CaseKey, execution: u32, pairs: &[(u64, f64)]) -> Vec<Sample> {
        pairs
            .iter()
            .map(|&(iters, total_ns)| Sample {
                key: key.clone(),
                execution,
                iters,
                total_ns,
                control_ns: None,
                host_ns: None,
                state: SampleState::default(),
                pair: None,
            })
            .collect()
    }

    pub(crate) fn read(l: &Line<'_>) -> Result<Self, RunError> {
        let iters: u64 = l.req("iters")?;
        if iters == 0 {
            return Err(l.error("iters", "0: a sample times at least one call"));
        }
        let total_ns = l
            .positive("total_ns", false)?
            .ok_or_else(|| l.error("total_ns", "empty, a value is required"))?;
        let execution = l.opt("execution")?.unwrap_or(1);
        if execution == 0 {
            return Err(l.error("execution", "0: executions count from 1"));
        }
        Ok(Sample {
            key: CaseKey::read(l)?,
            execution,
            iters,
            total_ns,
            control_ns: l.positive("control_ns", false)?,
            host_ns: l.positive("host_ns", false)?,
            state: SampleState::read(l)?,
            pair: l.opt("pair")?,
        })
    }
}

impl SampleState {
    /// The state's columns of a line (samples.csv, or the peer's file); empty ones `None`.
    pub(crate) fn read(l: &Line<'_>) -> Result<Self, RunError> {
        Ok(SampleState {
            cpu_ns: l.positive("cpu_ns", true)?,
            nivcsw: l.opt("nivcsw")?,
            steal: l.opt("steal")?,
            sm_mhz: l.opt("sm_mhz")?,
            gpu_util: l.opt("gpu_util")?,
            gpu_temp: l.opt("gpu_temp")?,
            throttle: l.opt("throttle")?,
            host_after_ns: l.positive("host_after_ns", false)?,
            slowest_ns: l.positive("slowest_ns", false)?,
            control_after_ns: l.positive("control_after_ns", false)?,
            typical_ns: l.positive("typical_ns", false)?,
        })
    }
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
