//! Did the candidate build make it worse? A verdict per shared case and per family of cases
//! between two runs (`opbench compare BASE CAND`).
//!
//! **Per case.** For each case both runs have ok: the ratio of medians (candidate / base)
//! and its standard error from a hierarchical bootstrap over executions (separate
//! processes) and samples ([`stats::decide::case_test`]), widened for the few executions a
//! side and, when the runs are of two boots ([`same_boot`]: another boot, lease or
//! day), by the drift same-build runs show between boots ([`DEVICE_DRIFT`],
//! [`HOST_DRIFT`]). From it a p-value, an interval, and the case's minimum detectable effect
//! (`mde`, 80% power). Then:
//!
//! - `slower` / `faster`: a discovery of the Benjamini–Hochberg procedure over every tested
//!   case of the comparison (false-discovery rate `alpha`) **and** a ratio beyond
//!   1 ± `threshold`;
//! - `same`: equivalence shown — the 1 − 2·alpha interval inside 1 ± max(threshold, mde)
//!   (a case cannot be called the same more finely than its noise resolves; the `mde`
//!   column says how finely it was);
//! - `ambiguous`: neither.
//!
//! A host-timed case with one execution on a side gets no speed verdict (flag
//! `single-execution`): the noise between processes is unknown. A device case with one
//! execution a side must also move beyond what two processes' terms make
//! ([`single_process_floor`]).
//!
//! **Host speed.** Host-timed, host-bound cases are divided by their execution's median
//! host control before the test: by default the build-independent one (`host_ns`, plain
//! CPU work timed before every sample, [`Control::Host`]), so a build whose every torch call
//! is dearer shows as slower; runs without it fall back to the dispatch floor's `add`
//! (`control_ns`, [`Control::Torch`]), which cancels such a build. Device-bound and
//! compute-bound cases ([`raw_cases`]) and GPU-event times are compared raw.
//!
//! **Families.** The shared shift of every host-bound case, of every device case, of each op
//! in each mode, and the dispatch floor at equal host speed (the torch control against the
//! host control over the processes, [`stats::decide::covariate_test`]: the build's own
//! per-call cost, so that processes whose host state differs by 1.4× cancel): a
//! geometric-mean ratio whose standard error is the process term measured in the runs (the
//! spread of executions, pooled over the family's op crates of one kind;
//! [`stats::family::shared_shift`]), judged like a case with `family_threshold` and
//! Benjamini–Hochberg over the families. A host-bound family carries the host's drift
//! between boots once, through the dispatch's test. A change of a few
//! percent in every case, invisible case by case, is found here. The exit code counts
//! slower families with the failing cases.
//!
//! Flags: `kernel-changed` (the `kernel` column differs, or where both runs have a trace
//! pass, the case's dominant kernel in traces.csv), `status-changed` (ok became
//! unsupported/oom/mismatch/error, or back), `new`, `gone`. A line `fails` (the CLI's exit
//! code 1) when a case is `slower`, fell back to the `math` kernel from another, or lost
//! its `ok` status.

use std::collections::{BTreeMap, BTreeSet};

use rundir::{CaseKey, Env, ExecSamples, ResultRow, Run, Status};

use crate::AnalysisError;

mod answer;
mod case;
mod env;
mod family;

pub use answer::Moved;
use case::*;
pub use env::*;
pub use family::*;

/// The verdict vocabulary and rule of every comparison ([`stats::verdict`]); a case line
/// holds `None` where it has no speed verdict (see its flags).
pub use stats::Verdict;

/// A case line's verdict as a word: `-` where it has none.
pub fn word(v: Option<Verdict>) -> &'static str {
    v.map_or("-", Verdict::as_str)
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
    /// The comparison gives no speed verdict ([`Comparison::withheld`]: one run on both
    /// sides, two kinds of machine or two timing methods).
    Withheld,
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
            Flag::Withheld => f.write_str("withheld"),
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
    /// p-value of "no change" (before Benjamini–Hochberg).
    pub p: Option<f64>,
    /// The smallest change this case's noise resolves (fraction, 80% power). `same` means
    /// within ± threshold; a case whose noise cannot resolve that is `ambiguous (± mde)`.
    pub mde: Option<f64>,
    pub verdict: Option<Verdict>,
    pub flags: Vec<Flag>,
    /// A regression the exit code reports.
    pub fails: bool,
    /// Both runs have the case ok, and it is comparable (not an upper bound).
    pub both_ok: bool,
    /// What its per-call times were divided by before the test: a control, or `Raw` (device
    /// time, device- or compute-bound, or no control measured); `None` where not tested.
    pub divided_by: Option<Control>,
}

impl Line {
    fn no_samples(&mut self) {
        self.verdict = Some(Verdict::Ambiguous);
        self.ratio = self.cand.zip(self.base).map(|(c, b)| c / b);
        self.flags.push(Flag::NoSamples);
    }
}

/// The smallest change a device case of one execution a side may be called slower or
/// faster by: what two processes' terms alone can make (one a side, each of sd `sd`, the
/// kind's process term the runs carry: stored by `opbench ab`, else the project's measured
/// figure, [`process_terms`]), as the mde of that spread at `alpha` with the prior's df
/// ([`PROCESS_TERM_DF`]). One process's own samples cannot see it. With the device term's
/// 3% it is ~16%; ~2 µs kernels' device rows moved by up to 15.2% between processes of one
/// build in four A/A pairs on the H200 (2026-11-30).
pub fn single_process_floor(sd: f64, alpha: f64) -> f64 {
    stats::decide::mde(std::f64::consts::SQRT_2 * sd, PROCESS_TERM_DF, alpha)
}

/// Which host-speed control host-timed, host-bound cases are divided by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    /// The build-independent host work (`host_ns`, the default): a build whose every
    /// torch call is dearer shows as slower; falls back to [`Control::Torch`] where a run
    /// lacks it.
    Host,
    /// The dispatch floor's `add` (`control_ns`): cancels the host's speed *and* any change
    /// of the build's dispatch, which then only the `dispatch` family shows.
    Torch,
    /// No division: raw per-call times.
    Raw,
}

impl Control {
    pub fn as_str(self) -> &'static str {
        match self {
            Control::Host => "host",
            Control::Torch => "torch",
            Control::Raw => "raw",
        }
    }
}

/// The standard deviations (of the log ratio) of what moves between boots — another
/// lease, another boot, another day — with the build unchanged: `case`, one case's own
/// scatter; `shared`, a whole mode's common shift. Measured on the H200 from same-build
/// runs a day apart (docs/findings.md, "Across days").
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Drift {
    pub case: f64,
    pub shared: f64,
}

impl Drift {
    pub const NONE: Drift = Drift {
        case: 0.0,
        shared: 0.0,
    };
}

/// Drift between boots of GPU-event (device) times, H200 (docs/findings.md, "Across
/// boots"): runs of 2026-12-01 (two leases) against the published `-calibration-a1`/`-a2`
/// (in git history at 869b19c, crates/analysis/tests/fixtures/published/results/)
/// of 2026-11-30, same torch: the per-case spread of log ratios was 1.1–2.0% against 1.4%
/// within one lease (≈ 1.3% more), the shared shift −0.8 to +0.3%; rounded up.
pub const DEVICE_DRIFT: Drift = Drift {
    case: 0.015,
    shared: 0.010,
};
/// Drift between boots of host-timed times against the torch control, H200, likewise:
/// no per-case spread beyond the 4–6% seen within one lease, a shared shift of −0.9 to
/// −2.1%.
pub const HOST_DRIFT: Drift = Drift {
    case: 0.010,
    shared: 0.020,
};

/// Whether the between-boot drift is added to the intervals.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum DriftChoice {
    /// Added when the runs are from different boots ([`same_boot`]).
    Auto,
    /// Never (the runs are known to be of one boot).
    Off,
    /// Always, these values for every mode.
    Given(Drift),
}

/// The settings of a comparison.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// Smallest change of one case that counts, as a fraction (0.03 = 3%).
    pub threshold: f64,
    /// Smallest shared shift of a family that counts, as a fraction.
    pub family_threshold: f64,
    /// The false-discovery rate over the cases (and over the families) of a comparison,
    /// and 1 − level of the intervals.
    pub alpha: f64,
    /// What host-timed, host-bound cases are divided by.
    pub control: Control,
    pub drift: DriftChoice,
    /// Bootstrap resamples per case and family.
    pub resamples: usize,
}

impl Settings {
    /// Checked settings: thresholds in [0, 1), alpha in (0, 0.5); the host control, drift
    /// between boots when the runs are of two, 1,000 resamples.
    pub fn new(threshold: f64, alpha: f64) -> Result<Self, AnalysisError> {
        if !(0.0..1.0).contains(&threshold) {
            return Err(AnalysisError::Input(format!(
                "--threshold {}: expected a percentage in [0, 100)",
                threshold * 100.0
            )));
        }
        if !(alpha > 0.0 && alpha < 0.5) {
            return Err(AnalysisError::Input(format!(
                "--alpha {alpha}: expected a level in (0, 0.5)"
            )));
        }
        Ok(Settings {
            threshold,
            family_threshold: DEFAULT_FAMILY_THRESHOLD,
            alpha,
            control: Control::Host,
            drift: DriftChoice::Auto,
            resamples: 1000,
        })
    }

    /// With a family threshold (fraction in [0, 1)).
    pub fn with_family_threshold(mut self, t: f64) -> Result<Self, AnalysisError> {
        if !(0.0..1.0).contains(&t) {
            return Err(AnalysisError::Input(format!(
                "--family-threshold {}: expected a percentage in [0, 100)",
                t * 100.0
            )));
        }
        self.family_threshold = t;
        Ok(self)
    }
}

/// The per-case threshold `opbench compare` uses unless told (3%).
pub const DEFAULT_THRESHOLD: f64 = 0.03;
/// The family threshold `opbench compare` uses unless told (1.5%).
pub const DEFAULT_FAMILY_THRESHOLD: f64 = 0.015;
/// The false-discovery rate `opbench compare` uses unless told.
pub const DEFAULT_ALPHA: f64 = 0.05;

/// A run's per-call times, grouped by execution, and what they were divided by.
struct PerCall {
    times: BTreeMap<CaseKey, Vec<Vec<f64>>>,
    /// Per execution, the torch control over the host control of every sample that has
    /// both (the dispatch floor at equal host speed).
    dispatch: Vec<Vec<f64>>,
    /// Per execution, the logs of its median host control and its median torch control,
    /// over every sample that has both ([`dispatch_test`]).
    controls: Vec<(f64, f64)>,
    /// The control the host-bound cases were divided by (`Raw` where the samples had none).
    used: Control,
    /// The median of every sample's host speed: its host control where the run has one,
    /// else its torch control (`None` without either).
    host_speed: Option<f64>,
}

/// Host-timed cases of `runs` that are compared raw, not divided by the host-speed control:
/// those not bound by the host's dispatch ([`rundir::bound_by_host`], the one rule).
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
            let dev = medians.get(&key.in_mode(rundir::Mode::Device)).copied();
            if !rundir::bound_by_host(host, dev, row.control_ns) {
                out.insert(key.clone());
            }
        }
    }
    out
}

/// Per-call times of each case from a run's samples (`Run::samples_by_execution`), grouped
/// by execution. A host-bound, host-timed case's times are divided by its execution's median
/// torch control (labelled `Host` where both runs have the host control, `use_host`, since
/// the dispatch's own change is then added back: [`dispatch_test`]); GPU-event times never
/// are (the host's speed is not in them), nor are the host-timed times of [`raw_cases`].
fn per_call(
    execs: BTreeMap<CaseKey, Vec<ExecSamples>>,
    control: Control,
    use_host: bool,
    raw: &BTreeSet<CaseKey>,
) -> PerCall {
    let mut out = BTreeMap::new();
    let mut used = Control::Raw;
    let mut dispatch: BTreeMap<usize, Vec<f64>> = BTreeMap::new();
    let mut both: BTreeMap<usize, (Vec<f64>, Vec<f64>)> = BTreeMap::new();
    let mut speeds = Vec::new();
    let label = match control {
        Control::Host if use_host => Some(Control::Host),
        Control::Host | Control::Torch => Some(Control::Torch),
        Control::Raw => None,
    };
    for (k, by_process) in execs {
        let host_timed = !k.mode.is_device() && !raw.contains(&k);
        let mut by_exec = Vec::with_capacity(by_process.len());
        for (i, e) in by_process.into_iter().enumerate() {
            if !e.host_ns.is_empty() && e.control_ns.len() == e.host_ns.len() {
                let d = dispatch.entry(i).or_default();
                d.extend(e.control_ns.iter().zip(&e.host_ns).map(|(t, h)| t / h));
                let b = both.entry(i).or_default();
                b.0.extend(&e.host_ns);
                b.1.extend(&e.control_ns);
            }
            speeds.extend(if use_host { &e.host_ns } else { &e.control_ns });
            let by = label.zip(e.median_control()).filter(|_| host_timed);
            match by {
                Some((which, c)) => {
                    used = which;
                    by_exec.push(e.per_call_ns.iter().map(|t| t / c).collect());
                }
                None => by_exec.push(e.per_call_ns),
            }
        }
        out.insert(k, by_exec);
    }
    PerCall {
        times: out,
        dispatch: dispatch.into_values().collect(),
        controls: both
            .into_values()
            .map(|(h, t)| (stats::median(&h).ln(), stats::median(&t).ln()))
            .collect(),
        used,
        host_speed: (!speeds.is_empty()).then(|| stats::median(&speeds)),
    }
}

/// The change of the dispatch floor at equal host speed: each execution's median torch
/// control against its median host control, by the analysis of covariance over the
/// processes of both runs ([`stats::decide::covariate_test`]), so that a host whose state
/// moves torch's dispatch and the plain CPU work unequally (processes of one build 1.4×
/// apart) cancels; where the host control does not spread within a run, the logs of each
/// execution's torch / host ratio, compared as a case with no prior. Drift added.
/// `None` unless both runs have the host control in two or more executions.
fn dispatch_test(bs: &PerCall, cs: &PerCall, drift: f64) -> Option<stats::decide::CaseTest> {
    if bs.used != Control::Host || cs.used != Control::Host {
        return None;
    }
    stats::decide::covariate_test(&bs.controls, &cs.controls, drift).or_else(|| {
        let x = stats::decide::ExecLogs::from_groups(&bs.dispatch, &cs.dispatch)?;
        Some(stats::decide::moderated_test(&x, None, drift))
    })
}

/// The run's samples have the build-independent host control.
fn has_host_control(execs: &BTreeMap<CaseKey, Vec<ExecSamples>>) -> bool {
    execs.values().flatten().any(|e| !e.host_ns.is_empty())
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
    /// The families' shared shifts: the global ones first, then per op and mode.
    pub families: Vec<FamilyLine>,
    /// env.json fields that differ and can change kernels or timings.
    pub env_diff: Vec<String>,
    /// Executions (processes) in each run: base, candidate.
    pub executions: (usize, usize),
    /// What host-bound, host-timed cases were divided by.
    pub control: Control,
    /// The runs are of one boot ([`same_boot`]).
    pub same_boot: bool,
    /// The drift added to device and host-timed intervals (none in one boot).
    pub drift: (Drift, Drift),
    /// What a process shares among its cases, per kind of timing: every family's interval
    /// carries it.
    pub process_terms: Vec<ProcessTermLine>,
    /// The runs are the two sides of one paired run ([`paired_sides`]): compared raw, the
    /// families round by round.
    pub paired: bool,
    /// Why no speed verdict was given ([`method_changed`]); `None`: they were.
    pub withheld: Option<String>,
    pub settings: Settings,
}

impl Comparison {
    /// The change a device-timed (`device`) case of one execution a side must exceed to
    /// be called slower or faster ([`single_process_floor`] of this comparison's device
    /// process term).
    pub fn single_floor(&self) -> f64 {
        let kind = rundir::noise::TermKind::Device;
        let sd = self
            .process_terms
            .iter()
            .find(|t| t.kind == kind)
            .map_or(kind.fallback(), |t| t.sd);
        single_process_floor(sd, self.settings.alpha)
    }
}

impl Comparison {
    /// Lines with verdict `v` (`None`: without a speed verdict).
    pub fn count(&self, v: Option<Verdict>) -> usize {
        self.lines.iter().filter(|l| l.verdict == v).count()
    }
    /// Lines with a flag `pred` accepts.
    pub fn flagged(&self, pred: impl Fn(&Flag) -> bool) -> usize {
        self.lines
            .iter()
            .filter(|l| l.flags.iter().any(&pred))
            .count()
    }
    /// Regressions the exit code reports: failing cases and slower families.
    pub fn fails(&self) -> usize {
        self.lines.iter().filter(|l| l.fails).count()
            + self
                .families
                .iter()
                .filter(|f| f.verdict == Verdict::Slower)
                .count()
    }
    /// The family of `scope`, if the comparison has one.
    pub fn family(&self, scope: &FamilyScope) -> Option<&FamilyLine> {
        self.families.iter().find(|f| &f.scope == scope)
    }
}

/// Compare two runs case by case, then by family.
///
/// A run with no ok row, or two runs with no case in common (a CPU run against a GPU run,
/// say), is an [`AnalysisError::Input`]: there is nothing to compare.
pub fn compare(base: &Run, cand: &Run, s: Settings) -> Result<Comparison, AnalysisError> {
    check_comparable(base, cand)?;
    let raw = raw_cases(&[base, cand]);
    let (bx, cx) = (base.samples_by_execution()?, cand.samples_by_execution()?);
    let use_host = has_host_control(&bx) && has_host_control(&cx);
    // the two sides of one paired run share each round's host: their times are compared
    // raw, round by round, as `opbench ab` compares them
    let paired = paired_sides(base.env.as_ref(), cand.env.as_ref());
    let control = if paired { Control::Raw } else { s.control };
    let bs = per_call(bx, control, use_host, &raw);
    let cs = per_call(cx, control, use_host, &raw);
    let same = same_boot(base.env.as_ref(), cand.env.as_ref());
    let drift = match s.drift {
        DriftChoice::Off => (Drift::NONE, Drift::NONE),
        DriftChoice::Auto if same => (Drift::NONE, Drift::NONE),
        DriftChoice::Auto => (DEVICE_DRIFT, HOST_DRIFT),
        DriftChoice::Given(d) => (d, d),
    };
    let mut lines = identity_lines(base, cand)?;
    let dispatch = dispatch_test(&bs, &cs, drift.1.shared);
    // host-timed cases compared raw (device- or compute-bound) carry the host's speed: across
    // boots, its change between the runs is added to their uncertainty
    let host_moved = match (bs.host_speed, cs.host_speed) {
        (Some(b), Some(c)) if !same && s.drift != DriftChoice::Off => (c / b).ln().abs(),
        _ => 0.0,
    };
    let raw_drift = (drift.1.case.powi(2) + host_moved.powi(2)).sqrt();
    let tests = case_tests(&mut lines, &bs, &cs, &raw, (drift.0, drift.1), raw_drift, s);
    let terms = process_terms(base.env.as_ref(), cand.env.as_ref());
    let judged = Judged {
        dispatch: dispatch.as_ref(),
        raw: &raw,
        used: bs.used,
        terms: &terms,
    };
    decide_cases(&mut lines, &tests, judged, s);
    let sides = Sides {
        base: &bs,
        cand: &cs,
        paired,
    };
    let mut families = families(&lines, sides, &raw, drift, dispatch, &terms, s);
    let withheld = same_run(base, cand)
        .or_else(|| machine_changed(base.env.as_ref(), cand.env.as_ref()))
        .or_else(|| method_changed(base.env.as_ref(), cand.env.as_ref()));
    if withheld.is_some() {
        withhold(&mut lines, &mut families);
    }
    Ok(Comparison {
        lines,
        families,
        env_diff: env_diff(base.env.as_ref(), cand.env.as_ref()),
        executions: (bs.executions(), cs.executions()),
        control: if bs.used == cs.used {
            bs.used
        } else {
            Control::Raw
        },
        same_boot: same,
        drift,
        process_terms: terms,
        paired,
        withheld,
        settings: s,
    })
}
