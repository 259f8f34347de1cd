//! A verdict per shared case between two runs (`opbench compare BASE CAND`).
//!
//! For each case key in both runs, both `ok`, the ratio of medians (candidate / base) and
//! an interval of it at level 1 − alpha, from the per-call times of samples.csv:
//!
//! - **Both runs with ≥ 2 executions** (separate processes): a hierarchical bootstrap
//!   (executions resampled, then samples within them), so the spread between processes is
//!   in the interval. `slower` / `faster` need the whole interval beyond 1 ± threshold;
//!   `same` the whole interval within it; anything else is `ambiguous`.
//! - **A side with one execution, device modes** (GPU events, which move far less between
//!   processes than host time, but not nothing): the interval of one process's samples and
//!   a two-sided Mann-Whitney U test; `slower` needs ratio > 1 + threshold, p < alpha, the
//!   interval above 1 (`faster` alike) and a change beyond [`DEVICE_PROCESS_SPREAD`] (else
//!   `ambiguous`, flagged `single-execution`); `same` the interval within 1 ± threshold.
//! - **A side with one execution, host-timed modes** (pipelined, synced): the
//!   between-process noise is unknown, and on a noisy host it is far larger than one
//!   process's samples show, so no speed verdict is given: `ambiguous`, flagged
//!   `single-execution`, with the ratio and the one-process interval for information.
//! - A device-mode row that is an upper bound (`uncovered_chunks` > 0) on either side is not
//!   compared as a device time (flag `upper-bound`).
//!
//! With `normalize` (the CLI's default), every per-call time of a host-bound, host-timed
//! case is first divided by the host-speed control of its execution (the dispatch floor,
//! measured right before every sample; its median over the execution), so a host that is
//! slower in one process than in another is compared at equal speed. Cases whose time is
//! not the host's dispatch are compared raw ([`raw_cases`]): device-bound ones (their
//! `device` row, in either run, at least half the host-timed median) and compute-bound ones
//! (a median over [`CONTROL_SPAN`] times the control). Measured on the H200 (docs/findings.md): with 5 executions a side, it kept A/A false
//! flags at 0 of 189 and found a planted +20% host slowdown in 97% of host-bound cases,
//! where the raw times found 1%. Samples without a control (runs before it existed) are
//! compared raw.
//!
//! Flags: `kernel-changed` (the `kernel` column differs, or where both runs have a trace
//! pass, the case's dominant kernel in traces.csv), `status-changed` (ok became
//! unsupported/oom/mismatch/error, or back), `new`, `gone`. A line `fails` (the CLI's exit
//! code 1) when a case is `slower`, fell back to the `math` kernel from another, or lost
//! its `ok` status.

use std::collections::{BTreeMap, BTreeSet};

use rundir::{CaseKey, Env, ResultRow, Run, Status};

use crate::AnalysisError;

/// The verdict on one case.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Verdict {
    Slower,
    Faster,
    Ambiguous,
    Same,
    /// Not both ok: no speed verdict (see the flags).
    None,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Slower => "slower",
            Verdict::Faster => "faster",
            Verdict::Ambiguous => "ambiguous",
            Verdict::Same => "same",
            Verdict::None => "-",
        }
    }
}

/// What changed about a case besides its speed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Flag {
    New,
    Gone,
    StatusChanged(Status, Status),
    KernelChanged(String, String),
    /// Both ok, but a side has fewer than two samples.
    NoSamples,
    /// A host-timed case with one execution on a side: no speed verdict.
    SingleExecution,
    /// A device time that is an upper bound on a side: not compared.
    UpperBound,
}

impl std::fmt::Display for Flag {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Flag::New => f.write_str("new"),
            Flag::Gone => f.write_str("gone"),
            Flag::StatusChanged(a, b) => write!(f, "status-changed ({a} -> {b})"),
            Flag::KernelChanged(a, b) => write!(f, "kernel-changed ({a} -> {b})"),
            Flag::NoSamples => f.write_str("no samples"),
            Flag::SingleExecution => f.write_str("single-execution"),
            Flag::UpperBound => f.write_str("upper-bound"),
        }
    }
}

/// One line of the comparison.
#[derive(Debug, Clone)]
pub struct Line {
    pub key: CaseKey,
    pub base: Option<f64>,
    pub cand: Option<f64>,
    pub ratio: Option<f64>,
    pub ratio_ci: Option<(f64, f64)>,
    pub p: Option<f64>,
    pub verdict: Verdict,
    pub flags: Vec<Flag>,
    /// A regression the exit code reports.
    pub fails: bool,
}

/// How far a GPU-event time may move between processes of one build. In four A/A pairs
/// of executions on the H200 (sixth session, two leases; 283 GPU-event rows each) ~2 µs
/// kernels' `device` rows moved by up to 15.2% (a residual add 1.70 against 1.96 µs), with
/// one-process intervals of ±0.1%, and at the default 5% threshold one execution a side
/// gave 43 slower/faster verdicts over the four pairs (the fourth session saw 0.935–1.123).
/// With one execution a side, a device row is called slower or faster only beyond this:
/// none of those 43 is.
pub const DEVICE_PROCESS_SPREAD: f64 = 0.2;

/// The settings of a comparison.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// Smallest change that counts, as a fraction (0.05 = 5%).
    pub threshold: f64,
    /// Significance level of the test (and 1 − level of the ratio's interval).
    pub alpha: f64,
    /// Divide each host-timed per-call time by its sample's host-speed control (default).
    pub normalize: bool,
}

impl Settings {
    /// Checked settings: threshold in [0, 1), alpha in (0, 1).
    pub fn new(threshold: f64, alpha: f64) -> Result<Self, AnalysisError> {
        if !(0.0..1.0).contains(&threshold) {
            return Err(AnalysisError::Input(format!(
                "--threshold {}: expected a percentage in [0, 100)",
                threshold * 100.0
            )));
        }
        if !(alpha > 0.0 && alpha < 1.0) {
            return Err(AnalysisError::Input(format!(
                "--alpha {alpha}: expected a level in (0, 1)"
            )));
        }
        Ok(Settings {
            threshold,
            alpha,
            normalize: true,
        })
    }
}

/// The verdict from per-call times of both runs: (verdict, ratio, interval, p).
pub fn verdict(base: &[f64], cand: &[f64], s: Settings) -> (Verdict, f64, (f64, f64), f64) {
    let ratio = stats::median(cand) / stats::median(base);
    let ci = stats::ratio_ci(base, cand, 1.0 - s.alpha, 2000);
    let p = stats::mann_whitney(base, cand);
    let t = s.threshold;
    let v = if ratio > 1.0 + t && p < s.alpha && ci.0 > 1.0 {
        Verdict::Slower
    } else if ratio < 1.0 - t && p < s.alpha && ci.1 < 1.0 {
        Verdict::Faster
    } else if ci.0 >= 1.0 - t && ci.1 <= 1.0 + t {
        Verdict::Same
    } else {
        Verdict::Ambiguous
    };
    (v, ratio, ci, p)
}

/// The verdict from per-call times grouped by execution: (verdict, ratio, interval).
pub fn hier_verdict(
    base: &[Vec<f64>],
    cand: &[Vec<f64>],
    s: Settings,
) -> (Verdict, f64, (f64, f64)) {
    let pooled = |g: &[Vec<f64>]| -> Vec<f64> { g.iter().flatten().copied().collect() };
    let ratio = stats::median(&pooled(cand)) / stats::median(&pooled(base));
    let ci = stats::hier_ratio_ci(base, cand, 1.0 - s.alpha, 2000);
    let t = s.threshold;
    let v = if ci.0 > 1.0 + t {
        Verdict::Slower
    } else if ci.1 < 1.0 - t {
        Verdict::Faster
    } else if ci.0 >= 1.0 - t && ci.1 <= 1.0 + t {
        Verdict::Same
    } else {
        Verdict::Ambiguous
    };
    (v, ratio, ci)
}

/// A run's per-call times, grouped by execution, and whether any sample had a control.
struct PerCall {
    times: BTreeMap<CaseKey, Vec<Vec<f64>>>,
    controlled: bool,
}

/// How many times the host-speed control a host-timed median may be and still be divided by
/// it: beyond, the call is compute (a CPU GEMM of 70 µs to 90 ms against a 1.5 µs floor),
/// whose time the dispatch floor does not track.
pub const CONTROL_SPAN: f64 = 20.0;

/// Host-timed cases of `runs` that are compared raw, not divided by the host-speed control:
///
/// - **device-bound**: the run has the case's `device` row too and it is at least half the
///   host-timed median; the time is the GPU's. Measured on the H200: lm_head at B = 64
///   read 1.8× slower at "equal host speed" in a session whose host ran 35% faster;
/// - **compute-bound**: the median is more than [`CONTROL_SPAN`] times the case's control;
///   the time is the work's, not dispatch. Measured on the 2-core CPU: lm_head at B = 8
///   (88 ms, equal raw medians under torch 2.11 and 2.15) read 1.44× slower when divided.
pub fn raw_cases(runs: &[&Run]) -> BTreeSet<CaseKey> {
    let mut out = BTreeSet::new();
    for run in runs {
        let medians: BTreeMap<&CaseKey, f64> = run
            .ok_rows()
            .filter_map(|r| r.median_ns.map(|m| (&r.key, m)))
            .collect();
        for row in run.ok_rows() {
            let (key, Some(host)) = (&row.key, row.median_ns) else {
                continue;
            };
            if key.mode.is_device() {
                continue;
            }
            let mut dev = key.clone();
            dev.series.mode = rundir::Mode::Device;
            let device_bound = medians.get(&dev).is_some_and(|&d| d >= 0.5 * host);
            let compute_bound = row.control_ns.is_some_and(|c| host > CONTROL_SPAN * c);
            if device_bound || compute_bound {
                out.insert(key.clone());
            }
        }
    }
    out
}

/// Per-call times of each case from a run's samples.csv, grouped by execution. With
/// `normalize`, a host-bound, host-timed case's times are divided by its execution's median
/// control, where the samples have one; GPU-event times never are (the host's speed is not
/// in them), nor are the host-timed times of [`raw_cases`].
fn per_call(run: &Run, normalize: bool, raw: &BTreeSet<CaseKey>) -> Result<PerCall, AnalysisError> {
    let mut out = BTreeMap::new();
    let mut controlled = false;
    for (k, execs) in run.samples_by_execution()? {
        let host_timed = !k.mode.is_device() && !raw.contains(&k);
        let by_exec = execs.into_iter().map(|e| {
            let control = e.median_control();
            controlled |= control.is_some();
            match control.filter(|_| normalize && host_timed) {
                Some(c) => e.per_call_ns.iter().map(|t| t / c).collect(),
                None => e.per_call_ns,
            }
        });
        out.insert(k, by_exec.collect());
    }
    Ok(PerCall {
        times: out,
        controlled,
    })
}

impl PerCall {
    /// Executions in the run: the most executions any one case has samples from.
    fn executions(&self) -> usize {
        self.times.values().map(Vec::len).max().unwrap_or(0)
    }
}

/// The comparison of two runs.
#[derive(Debug, Clone)]
pub struct Comparison {
    /// One line per case in either run, in case order.
    pub lines: Vec<Line>,
    /// env.json fields that differ and can change kernels or timings.
    pub env_diff: Vec<String>,
    /// Executions (processes) in each run: base, candidate.
    pub executions: (usize, usize),
    /// Host-timed per-call times were divided by the host-speed control (asked for, and
    /// the samples had one).
    pub normalized: bool,
}

impl Comparison {
    pub fn count(&self, v: Verdict) -> usize {
        self.lines.iter().filter(|l| l.verdict == v).count()
    }
    /// Lines with a flag `pred` accepts.
    pub fn flagged(&self, pred: impl Fn(&Flag) -> bool) -> usize {
        self.lines
            .iter()
            .filter(|l| l.flags.iter().any(&pred))
            .count()
    }
    pub fn fails(&self) -> usize {
        self.lines.iter().filter(|l| l.fails).count()
    }
}

/// Compare two runs case by case.
///
/// A run with no ok row, or two runs with no case in common (a CPU run against a GPU run,
/// say), is an [`AnalysisError::Input`]: there is nothing to compare.
pub fn compare(base: &Run, cand: &Run, s: Settings) -> Result<Comparison, AnalysisError> {
    for run in [base, cand] {
        if run.ok_rows().next().is_none() {
            return Err(AnalysisError::Input(format!(
                "{}: no ok row to compare",
                run.dir.display()
            )));
        }
    }
    let base_keys: BTreeSet<&CaseKey> = base.results.iter().map(|r| &r.key).collect();
    if !cand.results.iter().any(|r| base_keys.contains(&r.key)) {
        let devices = |run: &Run| {
            let d: BTreeSet<String> = run.results.iter().map(|r| r.device.to_string()).collect();
            d.into_iter().collect::<Vec<_>>().join(", ")
        };
        return Err(AnalysisError::Input(format!(
            "{} and {}: no case in common (devices {} against {}): nothing to compare",
            base.dir.display(),
            cand.dir.display(),
            devices(base),
            devices(cand)
        )));
    }
    let raw = raw_cases(&[base, cand]);
    let bs = per_call(base, s.normalize, &raw)?;
    let cs = per_call(cand, s.normalize, &raw)?;
    let index = |run: &Run| -> BTreeMap<CaseKey, ResultRow> {
        run.results
            .iter()
            .map(|r| (r.key.clone(), r.clone()))
            .collect()
    };
    let (bi, ci) = (index(base), index(cand));
    // the trace pass's dominant kernel of each case (traces are keyed in pipelined mode)
    let dominant = |run: &Run| -> Result<BTreeMap<CaseKey, String>, AnalysisError> {
        Ok(run
            .traces()?
            .into_iter()
            .filter_map(|t| Some((t.key, t.dominant_kernel?)))
            .collect())
    };
    let (bd, cd) = (dominant(base)?, dominant(cand)?);
    let keys: BTreeSet<&CaseKey> = bi.keys().chain(ci.keys()).collect();
    let mut lines = Vec::new();
    for key in keys {
        let (b, c) = (bi.get(key), ci.get(key));
        let mut line = Line {
            key: key.clone(),
            base: b.and_then(|r| r.median_ns),
            cand: c.and_then(|r| r.median_ns),
            ratio: None,
            ratio_ci: None,
            p: None,
            verdict: Verdict::None,
            flags: Vec::new(),
            fails: false,
        };
        match (b, c) {
            (Some(_), None) => line.flags.push(Flag::Gone),
            (None, Some(_)) => line.flags.push(Flag::New),
            (Some(b), Some(c)) => {
                if b.status != c.status {
                    line.flags.push(Flag::StatusChanged(b.status, c.status));
                    line.fails |= b.status == Status::Ok;
                }
                if b.kernel != c.kernel {
                    let (bk, ck) = (
                        b.kernel.clone().unwrap_or_default(),
                        c.kernel.clone().unwrap_or_default(),
                    );
                    // falling back to the composite kernel is the regression users must see
                    line.fails |= ck == "math" && bk != "math";
                    line.flags.push(Flag::KernelChanged(bk, ck));
                } else {
                    let traced = key.in_mode(rundir::Mode::Pipelined);
                    if let (Some(bk), Some(ck)) = (bd.get(&traced), cd.get(&traced)) {
                        if bk != ck {
                            line.flags.push(Flag::KernelChanged(bk.clone(), ck.clone()));
                        }
                    }
                }
                let bound = key.mode.is_device() && (b.is_upper_bound() || c.is_upper_bound());
                if b.status == Status::Ok && c.status == Status::Ok && bound {
                    line.flags.push(Flag::UpperBound);
                } else if b.status == Status::Ok && c.status == Status::Ok {
                    let n = |g: &Vec<Vec<f64>>| g.iter().filter(|e| !e.is_empty()).count();
                    let total = |g: &Vec<Vec<f64>>| g.iter().map(Vec::len).sum::<usize>();
                    match (bs.times.get(key), cs.times.get(key)) {
                        (Some(x), Some(y)) if n(x) >= 2 && n(y) >= 2 => {
                            let (v, ratio, ci) = hier_verdict(x, y, s);
                            line.verdict = v;
                            line.ratio = Some(ratio);
                            line.ratio_ci = Some(ci);
                            line.fails |= v == Verdict::Slower;
                        }
                        (Some(x), Some(y)) if total(x) >= 2 && total(y) >= 2 => {
                            let (x, y): (Vec<f64>, Vec<f64>) = (x.concat(), y.concat());
                            let (v, ratio, ci, p) = verdict(&x, &y, s);
                            line.ratio = Some(ratio);
                            line.ratio_ci = Some(ci);
                            line.p = Some(p);
                            // one process a side: a device time is slower or faster only
                            // beyond the spread device times show between processes
                            let within_spread = (ratio - 1.0).abs() <= DEVICE_PROCESS_SPREAD;
                            let moved = matches!(v, Verdict::Slower | Verdict::Faster);
                            if key.mode.is_device() && moved && within_spread {
                                line.verdict = Verdict::Ambiguous;
                                line.flags.push(Flag::SingleExecution);
                            } else if key.mode.is_device() {
                                line.verdict = v;
                                line.fails |= v == Verdict::Slower;
                            } else {
                                line.verdict = Verdict::Ambiguous;
                                line.flags.push(Flag::SingleExecution);
                            }
                        }
                        _ => {
                            line.verdict = Verdict::Ambiguous;
                            line.ratio = line.cand.zip(line.base).map(|(c, b)| c / b);
                            line.flags.push(Flag::NoSamples);
                        }
                    }
                }
            }
            (None, None) => {}
        }
        lines.push(line);
    }
    Ok(Comparison {
        lines,
        env_diff: env_diff(base.env.as_ref(), cand.env.as_ref()),
        executions: (bs.executions(), cs.executions()),
        normalized: s.normalize && bs.controlled && cs.controlled,
    })
}

/// env.json fields whose difference can change kernels or timings, as `field: a -> b`.
pub fn env_diff(base: Option<&Env>, cand: Option<&Env>) -> Vec<String> {
    let (Some(b), Some(c)) = (base, cand) else {
        return vec!["env.json missing in one run: environments not compared".into()];
    };
    let json = |e: &Env| serde_json::to_value(e).unwrap_or_default();
    let (b, c) = (json(b), json(c));
    let mut out = Vec::new();
    for f in ENV_FIELDS {
        let (x, y) = (&b[*f], &c[*f]);
        if x != y {
            out.push(format!("{f}: {x} -> {y}"));
        }
    }
    if b["build_config"] != c["build_config"] {
        out.push("build_config: differs (see env.json of each run)".into());
    }
    out
}

/// env.json fields whose difference can change kernels or timings.
const ENV_FIELDS: &[&str] = &[
    "libtorch_version",
    "tch_version",
    "backend",
    "runtime_version",
    "device_name",
    "arch",
    "driver_version",
    "cudnn_version",
    "miopen_version",
    "hipblaslt_version",
    "sdp_enabled",
    "env",
    "threads",
    "cpu_model",
    "os",
    "git_revision",
];
