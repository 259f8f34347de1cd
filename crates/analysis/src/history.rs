//! Where in a sequence of builds each case changed (`opbench history [DIR...]`).
//!
//! - **Runs** are every run directory under the given folders (a folder that is itself a
//!   run counts as one). A run that cannot be read, or has no env.json, is named and skipped.
//! - **Series** are runs of one machine (backend, device name and arch, host CPU): an H200
//!   run and a CPU run are never one series.
//! - **Points** of a series are builds, in build order: libtorch version, then the CUDA/HIP
//!   runtime and the driver, then the earliest start time. A build is also told apart by
//!   libtorch's git commit (`COMMIT_SHA` in its build configuration) and the settings that
//!   change kernels or timings (the variables env.json records, the SDP switches, CPU
//!   threads, a planted slowdown): a run with `TORCH_BLAS_PREFER_HIPBLASLT=0` is its own
//!   point, marked with what differs. Runs of the same build and settings on the same
//!   machine are replicates: one point — whatever opbench revision made them, since a
//!   history tracks builds, and a lease's or opbench's own shift is the replicates' spread,
//!   not a change of build.
//! - **Values:** per case and point, the mean of its replicates: each execution (process)
//!   of a run is one, its median per-call time; a run without executions gives its median.
//!   Device-timed rows (GPU events) are used by default. Host-timed rows (pipelined, synced)
//!   only from runs with ≥ 2 executions, divided by each execution's host-speed control and
//!   scaled back by the series' median control ("ns at the series' usual host speed"),
//!   because one process of host time says little about the build (docs/findings.md);
//!   device- and compute-bound cases ([`crate::compare::raw_cases`]) are taken raw. A device time that is an upper bound is left out. A case missing at a point is a gap.
//! - **Change points:** [`stats::change_points`] (E-Divisive means with a t-test, as Apache
//!   Otava) over each case's points; a step must also clear the spread runs of one build
//!   show between boots ([`SeriesDrift`]: pooled over the series' replicate runs, at
//!   least what the H200 showed across days), with as many runs on each side as the
//!   segments hold. Status changes (ok to unsupported, say) are listed too.
//!   A change point or status loss at a series' newest point that makes a case slower or
//!   broken is a regression: `opbench history` exits 1.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use rundir::{CaseKey, Env, Mode, Run, Status};
use stats::{CpSettings, change_points};

use crate::AnalysisError;

/// What `history` looks at and how strict it is.
#[derive(Debug, Clone)]
pub struct Settings {
    pub cp: CpSettings,
    /// Timing modes to track (default: device, pipelined).
    pub modes: Vec<Mode>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            cp: CpSettings::default(),
            modes: vec![Mode::Device, Mode::Pipelined],
        }
    }
}

impl Settings {
    /// Checked settings: window ≥ 4, p in (0, 1), magnitude in [0, 1), min size ≥ 1.
    pub fn new(
        window: usize,
        max_p: f64,
        min_magnitude: f64,
        modes: Vec<Mode>,
    ) -> Result<Self, AnalysisError> {
        if window < 4 {
            return Err(AnalysisError::Input(format!(
                "--window {window}: at least 4 runs"
            )));
        }
        if !(max_p > 0.0 && max_p < 1.0) {
            return Err(AnalysisError::Input(format!(
                "--max-p {max_p}: expected a level in (0, 1)"
            )));
        }
        if !(0.0..1.0).contains(&min_magnitude) {
            return Err(AnalysisError::Input(format!(
                "--min-magnitude {}: expected a percentage in [0, 100)",
                min_magnitude * 100.0
            )));
        }
        if modes.is_empty() {
            return Err(AnalysisError::Input(
                "--mode: name at least one mode".into(),
            ));
        }
        Ok(Settings {
            cp: CpSettings {
                window,
                max_p,
                min_magnitude,
                ..CpSettings::default()
            },
            modes,
        })
    }
}

pub use crate::build::{Build, Machine, VersionKey, commit_sha, kernel_settings, method_of};

/// One run of a point.
#[derive(Debug, Clone)]
pub struct RunRef {
    /// The run directory's name (the published name, or the run id).
    pub name: String,
    pub started_at: String,
}

/// A point of a series: one build, its runs (replicates).
#[derive(Debug, Clone)]
pub struct Point {
    pub build: Build,
    pub runs: Vec<RunRef>,
}

impl Point {
    /// The names of its runs, joined.
    pub fn names(&self) -> String {
        self.runs
            .iter()
            .map(|r| r.name.as_str())
            .collect::<Vec<_>>()
            .join(" + ")
    }
}

/// A case at one point.
#[derive(Debug, Clone, PartialEq)]
pub struct Value {
    /// Mean of the replicates (ns); `None` when the case is not ok or not usable here.
    pub ns: Option<f64>,
    /// Each replicate run's own value (the mean of its executions), in run order.
    pub runs: Vec<f64>,
    pub status: Status,
    pub kernel: Option<String>,
}

/// Runs of one machine, in build order.
#[derive(Debug, Clone)]
pub struct Series {
    pub machine: Machine,
    pub points: Vec<Point>,
    /// Per case, one entry per point (`None`: not measured there).
    pub cases: BTreeMap<CaseKey, Vec<Option<Value>>>,
}

impl Series {
    /// `NVIDIA H200 (sm_90, cuda) on Intel Xeon`.
    pub fn label(&self) -> String {
        self.machine.to_string()
    }
}

/// What kind of change a [`Change`] is.
#[derive(Debug, Clone, PartialEq)]
pub enum ChangeKind {
    /// A step in the time, from E-Divisive with the t-test.
    Step { p: f64 },
    /// The status changed (the time, if any, is not compared).
    Status(Status, Status),
}

/// One change of one case.
#[derive(Debug, Clone)]
pub struct Change {
    /// Index into [`History::series`].
    pub series: usize,
    pub key: CaseKey,
    /// Index of the first point after the change.
    pub point: usize,
    pub before_ns: Option<f64>,
    pub after_ns: Option<f64>,
    pub kind: ChangeKind,
    /// The dominant kernel changed at the same point: (before, after).
    pub kernel: Option<(String, String)>,
    /// What differs between the build before and this one.
    pub build_change: Vec<String>,
    /// At the series' newest point.
    pub newest: bool,
}

impl Change {
    /// after / before − 1, when both are known.
    pub fn magnitude(&self) -> Option<f64> {
        Some(self.after_ns? / self.before_ns? - 1.0)
    }

    /// The change in opbench's one vocabulary ([`stats::Verdict`]): a change point is a
    /// discovery beyond the series' noise (E-Divisive with its t-test), so a step up is
    /// `slower` and a step down `faster`; a status change is no speed verdict (`None`).
    pub fn verdict(&self) -> Option<stats::Verdict> {
        match &self.kind {
            ChangeKind::Step { .. } => self.magnitude().map(|m| {
                if m > 0.0 {
                    stats::Verdict::Slower
                } else {
                    stats::Verdict::Faster
                }
            }),
            ChangeKind::Status(..) => None,
        }
    }

    /// A change that makes the case slower or broken.
    pub fn is_regression(&self) -> bool {
        match &self.kind {
            ChangeKind::Step { .. } => self.verdict() == Some(stats::Verdict::Slower),
            ChangeKind::Status(a, b) => *a == Status::Ok && *b != Status::Ok,
        }
    }
}

/// `opbench history`: every series, its change points, and the runs that were skipped.
#[derive(Debug, Clone)]
pub struct History {
    pub series: Vec<Series>,
    pub changes: Vec<Change>,
    /// Runs that could not be used, with why.
    pub skipped: Vec<(PathBuf, String)>,
    pub settings: Settings,
}

impl History {
    /// Changes at a series' newest point that make a case slower or broken.
    pub fn newest_regressions(&self) -> usize {
        self.changes
            .iter()
            .filter(|c| c.newest && c.is_regression())
            .count()
    }
}

/// Run directories under `dirs`: a folder with results.csv is a run; otherwise its
/// subfolders that have one are (and, for an output folder, those of its `runs/`).
pub fn find_runs(dirs: &[PathBuf]) -> Result<Vec<PathBuf>, AnalysisError> {
    let mut out = Vec::new();
    for d in dirs {
        if !d.is_dir() {
            return Err(AnalysisError::Input(format!(
                "{}: not a directory",
                d.display()
            )));
        }
        if rundir::has_file(&d.join(rundir::layout::RESULTS)) {
            out.push(d.clone());
            continue;
        }
        let mut found = Vec::new();
        for parent in [d.clone(), d.join(rundir::layout::RUNS)] {
            let Ok(entries) = std::fs::read_dir(&parent) else {
                continue;
            };
            for e in entries.flatten() {
                let p = e.path();
                let hidden = e.file_name().to_string_lossy().starts_with('.');
                if !hidden && rundir::has_file(&p.join(rundir::layout::RESULTS)) {
                    found.push(p);
                }
            }
        }
        found.sort();
        out.extend(found);
    }
    out.dedup();
    Ok(out)
}

/// Per-execution values of a run's cases: (per-call median, median control) per execution.
type ExecValues = BTreeMap<CaseKey, Vec<(f64, Option<f64>)>>;

fn exec_values(run: &Run) -> Result<ExecValues, AnalysisError> {
    Ok(run
        .samples_by_execution()?
        .into_iter()
        .map(|(key, execs)| {
            let v = execs.iter().map(|e| (e.median_ns(), e.median_control()));
            (key, v.collect())
        })
        .collect())
}

/// One loaded run with what history needs of it.
struct Loaded {
    run: Run,
    env: Env,
    name: String,
    execs: ExecValues,
}

/// Read the runs under `dirs`, build the series and find their change points.
pub fn history(dirs: &[PathBuf], s: &Settings) -> Result<History, AnalysisError> {
    let (loaded, skipped) = load_all(dirs)?;
    if loaded.is_empty() {
        let names: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
        return Err(AnalysisError::Input(format!(
            "{}: no readable run with env.json{}",
            names.join(", "),
            if skipped.is_empty() {
                String::new()
            } else {
                format!(" ({} skipped)", skipped.len())
            }
        )));
    }
    // group into series, then into points (builds) in build order
    let mut groups: BTreeMap<Machine, Vec<Loaded>> = BTreeMap::new();
    for l in loaded {
        groups.entry(Machine::of(&l.env)).or_default().push(l);
    }
    let mut series = Vec::new();
    let mut changes = Vec::new();
    for (machine, runs) in groups {
        // runs of one build are one point; points go in build order: versions first, then
        // the earliest start (commits and revisions have no order of their own)
        let points = points_of(runs);
        let cases = values(&points, &s.modes);
        let one = Series {
            machine,
            points: points.into_iter().map(|(p, _)| p).collect(),
            cases,
        };
        changes.extend(detect(series.len(), &one, &s.cp));
        series.push(one);
    }
    Ok(History {
        series,
        changes,
        skipped,
        settings: s.clone(),
    })
}

/// The runs skipped, each with why.
type Skipped = Vec<(PathBuf, String)>;

/// Every run under `dirs` that can be placed (its machine and build known), and those
/// skipped with why; a run whose env.json is damaged is an error.
fn load_all(dirs: &[PathBuf]) -> Result<(Vec<Loaded>, Skipped), AnalysisError> {
    let mut skipped = Vec::new();
    let mut loaded = Vec::new();
    for dir in find_runs(dirs)? {
        let run = match Run::load(&dir) {
            Ok(r) => r,
            // a damaged fingerprint would place the run under an unknown machine or build
            Err(e @ rundir::RunError::Env { .. }) => return Err(e.into()),
            Err(e) => {
                skipped.push((dir, e.to_string()));
                continue;
            }
        };
        let Some(env) = run.env.clone() else {
            skipped.push((dir, "no env.json: its machine and build are unknown".into()));
            continue;
        };
        // executions are read only where the run has them
        let multi = run
            .results
            .iter()
            .any(|r| r.executions.is_some_and(|e| e >= 2));
        let execs = if multi {
            match exec_values(&run) {
                Ok(v) => v,
                Err(e) => {
                    skipped.push((dir, e.to_string()));
                    continue;
                }
            }
        } else {
            BTreeMap::new()
        };
        let name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| env.run_id.clone());
        loaded.push(Loaded {
            run,
            env,
            name,
            execs,
        });
    }
    Ok((loaded, skipped))
}

/// One machine's runs as points, a build each, in build order: versions first, then the
/// earliest start (commits and revisions have no order of their own).
fn points_of(runs: Vec<Loaded>) -> Vec<(Point, Vec<Loaded>)> {
    let mut by_build: BTreeMap<Build, Vec<Loaded>> = BTreeMap::new();
    for l in runs {
        by_build.entry(Build::of(&l.env)).or_default().push(l);
    }
    let mut points: Vec<(Point, Vec<Loaded>)> = by_build
        .into_iter()
        .map(|(build, mut members)| {
            members.sort_by(|a, b| {
                (a.env.started_at.as_str(), a.name.as_str())
                    .cmp(&(b.env.started_at.as_str(), b.name.as_str()))
            });
            let runs = members
                .iter()
                .map(|l| RunRef {
                    name: l.name.clone(),
                    started_at: l.env.started_at.clone(),
                })
                .collect();
            (Point { build, runs }, members)
        })
        .collect();
    points.sort_by(|(a, _), (b, _)| {
        let first = |p: &Point| {
            p.runs
                .first()
                .map(|r| r.started_at.clone())
                .unwrap_or_default()
        };
        (&a.build.torch, &a.build.runtime, &a.build.driver, first(a)).cmp(&(
            &b.build.torch,
            &b.build.runtime,
            &b.build.driver,
            first(b),
        ))
    });
    points
}

/// A case's values at one point: each member run's (its executions'), its status, kernel.
type RunValues = (Vec<Vec<f64>>, Status, Option<String>);

/// Every case's value at every point of a series.
fn values(
    points: &[(Point, Vec<Loaded>)],
    modes: &[Mode],
) -> BTreeMap<CaseKey, Vec<Option<Value>>> {
    // host-timed values are divided by their execution's control, then scaled by the
    // series' median control, so they read as ns at the series' usual host speed
    let controls: Vec<f64> = points
        .iter()
        .flat_map(|(_, ls)| ls.iter())
        .flat_map(|l| l.execs.values().flatten().filter_map(|(_, c)| *c))
        .collect();
    let reference = (!controls.is_empty()).then(|| stats::median(&controls));
    let mut out: BTreeMap<CaseKey, Vec<Option<Value>>> = BTreeMap::new();
    for (i, (_, members)) in points.iter().enumerate() {
        // per case: each member run's values (its executions'), its status and kernel
        let mut at: BTreeMap<CaseKey, RunValues> = BTreeMap::new();
        for l in members {
            // device- and compute-bound cases are not divided by the control
            let raw_cases = crate::compare::raw_cases(&[&l.run]);
            for row in &l.run.results {
                if !modes.contains(&row.key.mode) {
                    continue;
                }
                let entry = at
                    .entry(row.key.clone())
                    .or_insert_with(|| (Vec::new(), row.status, row.kernel.clone()));
                entry.0.push(Vec::new());
                let mine = entry.0.len() - 1;
                if row.status != Status::Ok {
                    // a replicate that is not ok makes the point not ok
                    entry.1 = row.status;
                    continue;
                }
                let execs = l.execs.get(&row.key).filter(|e| e.len() >= 2);
                if row.key.mode.is_device() {
                    if row.is_upper_bound() {
                        continue;
                    }
                    match execs {
                        Some(e) => entry.0[mine].extend(e.iter().map(|(t, _)| *t)),
                        None => entry.0[mine].extend(row.median_ns),
                    }
                } else if let Some(e) = execs {
                    let raw = raw_cases.contains(&row.key);
                    entry.0[mine].extend(e.iter().map(|(t, c)| match (c, reference) {
                        (Some(c), Some(r)) if !raw => t / c * r,
                        _ => *t,
                    }));
                }
            }
        }
        for (key, (per_run, status, kernel)) in at {
            let reps: Vec<f64> = per_run.iter().flatten().copied().collect();
            let runs: Vec<f64> = per_run
                .iter()
                .filter(|r| !r.is_empty())
                .map(|r| r.iter().sum::<f64>() / r.len() as f64)
                .collect();
            let v = Value {
                ns: (status == Status::Ok && !reps.is_empty())
                    .then(|| reps.iter().sum::<f64>() / reps.len() as f64),
                runs: if status == Status::Ok {
                    runs
                } else {
                    Vec::new()
                },
                status,
                kernel,
            };
            out.entry(key).or_insert_with(|| vec![None; points.len()])[i] = Some(v);
        }
    }
    out
}

/// How far runs of one build spread between boots, per kind of timing: the standard
/// deviation of the log of a run's value about its build's mean, pooled over every case and
/// point of the series that has two or more runs, and never below what same-build runs
/// showed between boots on the H200 ([`crate::compare::DEVICE_DRIFT`],
/// [`crate::compare::HOST_DRIFT`]): replicates of one boot cannot show a day's drift.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SeriesDrift {
    pub device: f64,
    pub host: f64,
}

impl SeriesDrift {
    pub fn of(series: &Series) -> Self {
        let pooled = |device: bool| -> Option<f64> {
            let logs: Vec<Vec<f64>> = series
                .cases
                .iter()
                .filter(|(key, _)| key.mode.is_device() == device)
                .flat_map(|(_, vals)| vals.iter().flatten())
                .filter(|v| v.runs.len() >= 2)
                .map(|v| v.runs.iter().map(|x| x.ln()).collect())
                .collect();
            stats::pooled_sd(logs.iter().map(Vec::as_slice))
        };
        SeriesDrift {
            device: pooled(true)
                .unwrap_or(0.0)
                .max(crate::compare::DEVICE_DRIFT.case),
            host: pooled(false)
                .unwrap_or(0.0)
                .max(crate::compare::HOST_DRIFT.case),
        }
    }

    pub fn of_mode(&self, mode: Mode) -> f64 {
        if mode.is_device() {
            self.device
        } else {
            self.host
        }
    }
}

/// A step of `ratio` between segments of `before` and `after` runs is beyond what runs of
/// one build spread by `tau` (log SD) between boots: two-sided p ≤ `max_p`.
pub fn clears_drift(ratio: f64, tau: f64, before: usize, after: usize, max_p: f64) -> bool {
    let se = tau * (1.0 / before.max(1) as f64 + 1.0 / after.max(1) as f64).sqrt();
    if se.is_nan() || se <= 0.0 {
        return true;
    }
    let z = ratio.ln().abs() / se;
    let p = statrs::distribution::Normal::new(0.0, 1.0).map_or(1.0, |n| {
        2.0 * (1.0 - statrs::distribution::ContinuousCDF::cdf(&n, z))
    });
    p <= max_p
}

/// The change points and status changes of every case of one series.
fn detect(index: usize, series: &Series, cp: &CpSettings) -> Vec<Change> {
    let drift = SeriesDrift::of(series);
    let newest = series.points.len().saturating_sub(1);
    let build_change = |point: usize| {
        point
            .checked_sub(1)
            .map(|p| {
                series.points[point]
                    .build
                    .changes_from(&series.points[p].build)
            })
            .unwrap_or_default()
    };
    let mut out = Vec::new();
    for (key, vals) in &series.cases {
        // the points with a value, and where they sit
        let present: Vec<(usize, f64)> = vals
            .iter()
            .enumerate()
            .filter_map(|(i, v)| v.as_ref().and_then(|v| v.ns).map(|ns| (i, ns)))
            .collect();
        let xs: Vec<f64> = present.iter().map(|p| p.1).collect();
        let runs_at = |i: usize| {
            vals[present[i].0]
                .as_ref()
                .map_or(1, |v| v.runs.len().max(1))
        };
        let tau = drift.of_mode(key.mode);
        for c in change_points(&xs, cp) {
            // the step must also clear the spread runs of one build show between boots
            let rb: usize = (c.index - c.n_before..c.index).map(runs_at).sum();
            let ra: usize = (c.index..c.index + c.n_after).map(runs_at).sum();
            if !clears_drift(c.median_after / c.median_before, tau, rb, ra, cp.max_p) {
                continue;
            }
            let (point, prev) = (present[c.index].0, present[c.index - 1].0);
            let kernel_of = |i: usize| vals[i].as_ref().and_then(|v| v.kernel.clone());
            let kernel = match (kernel_of(prev), kernel_of(point)) {
                (a, b) if a != b => Some((a.unwrap_or_default(), b.unwrap_or_default())),
                _ => None,
            };
            out.push(Change {
                series: index,
                key: key.clone(),
                point,
                before_ns: Some(c.median_before),
                after_ns: Some(c.median_after),
                kind: ChangeKind::Step { p: c.p },
                kernel,
                build_change: build_change(point),
                newest: point == newest,
            });
        }
        // status changes between consecutive points where the case was measured
        let measured: Vec<(usize, &Value)> = vals
            .iter()
            .enumerate()
            .filter_map(|(i, v)| v.as_ref().map(|v| (i, v)))
            .collect();
        for w in measured.windows(2) {
            let ((_, a), (point, b)) = (w[0], w[1]);
            if a.status != b.status {
                out.push(Change {
                    series: index,
                    key: key.clone(),
                    point,
                    before_ns: a.ns,
                    after_ns: b.ns,
                    kind: ChangeKind::Status(a.status, b.status),
                    kernel: None,
                    build_change: build_change(point),
                    newest: point == newest,
                });
            }
        }
    }
    out
}

/// The points at which a case's dominant kernel changed, per series and op: for the plots.
pub fn kernel_changes(series: &Series) -> BTreeSet<(rundir::OpKind, usize)> {
    let mut out = BTreeSet::new();
    for (key, vals) in &series.cases {
        let mut last: Option<&Option<String>> = None;
        for (i, v) in vals.iter().enumerate() {
            let Some(v) = v else { continue };
            if let Some(prev) = last
                && *prev != v.kernel
            {
                out.insert((key.op, i));
            }
            last = Some(&v.kernel);
        }
    }
    out
}
