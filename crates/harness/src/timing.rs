//! Timing modes and the criterion glue that runs an [`Op`]'s grid.
//!
//! Each case is prepared and checked against its float64 reference once (preflight), then
//! timed in every configured mode with criterion's `iter_custom`: criterion picks the
//! iteration counts (flat sampling, budgets from [`Config`]), we time the calls and keep
//! the raw `(iters, total_ns)` of every sample for `samples.csv`. A case that fails at any
//! point becomes a row with its status and reason; the sweep goes on.

use std::cell::RefCell;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::rc::Rc;
use std::time::{Duration, Instant};

use criterion::{Criterion, SamplingMode, Throughput};
use shapes::Problem;
use tch::TchError;

use crate::devtime::DeviceClock;
use crate::op::{Failure, Op, Prepared, Status, first_line, rel_err};
use crate::record::{CaseKey, ResultRow, RunWriter, Sample, SeriesKey, default_run_id};
use crate::select::{RunMode, Selection};
use crate::{Config, DType, Device, dtype, select_devices};

pub use rundir::Mode;

/// The criterion of a bench target's `main` ([`opbench_bench!`](crate::opbench_bench)):
/// [`criterion_config`] with the command line applied.
///
/// One verdict voice: criterion compares each case with its previous result in
/// target/criterion and prints "Performance has regressed" from one process's samples, which
/// on a noisy host contradicts `opbench compare`. Unless the command line names a baseline
/// (`--save-baseline`, `--baseline`, `--baseline-lenient`, `--discard-baseline`), the
/// results are compared with a baseline name that is never saved, so criterion prints no
/// verdict of its own.
pub fn criterion_for_main() -> Criterion {
    let c = criterion_config().configure_from_args();
    let named = std::env::args().any(|a| {
        [
            "--save-baseline",
            "-s",
            "--baseline",
            "-b",
            "--baseline-lenient",
            "--discard-baseline",
        ]
        .iter()
        .any(|f| a == *f || a.starts_with(&format!("{f}=")))
    });
    if named {
        c
    } else {
        c.retain_baseline("opbench-never-saved".into(), false)
    }
}

/// Criterion settings for op benches: flat sampling and the per-case budget from the
/// `OPBENCH_*` variables (criterion's own 3 s + 5 s per case would make a full sweep take
/// hours). Command-line options such as `--sample-size` still override these.
pub fn criterion_config() -> Criterion {
    let (samples, warmup, measure) = match Config::from_env() {
        Ok(c) => (c.samples, c.warmup, c.measure),
        // bench_op reports the error and exits; keep criterion's defaults meanwhile
        Err(_) => (20, Duration::from_millis(100), Duration::from_millis(400)),
    };
    Criterion::default()
        .sample_size(samples)
        .warm_up_time(warmup)
        .measurement_time(measure)
        .nresamples(10_000)
        .without_plots()
}

/// Time `iters` calls of `p` on `device` in `mode`.
///
/// The synchronize calls sit inside the timed region on purpose: without them a GPU bench
/// measures how fast the host can queue work, not the work.
pub fn time_calls(
    p: &mut dyn Prepared,
    device: Device,
    mode: Mode,
    iters: u64,
    clock: Option<&mut DeviceClock>,
) -> Result<Duration, TchError> {
    time_sample(p, device, mode, iters, clock).map(|t| t.total)
}

/// One sample's time: the whole, and in the host-timed modes the slowest and the median
/// stretch of its calls, per call ([`rundir::SampleState::slowest_ns`] and
/// [`rundir::SampleState::typical_ns`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SampleTime {
    pub total: Duration,
    /// `None` in the device-timed modes and for samples of fewer than 4 calls.
    pub stretches: Option<Stretches>,
}

/// The stretches of one host-timed sample's calls, per call (ns).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stretches {
    pub slowest_ns: f64,
    /// The median stretch: the sample's own pace, which a burst inside it does not move.
    pub typical_ns: f64,
}

impl Stretches {
    /// The slowest and the median of a sample's stretches `paces` (per call), where the
    /// sample had at least 4 calls (`iters`).
    fn of(paces: &[f64], iters: u64) -> Option<Self> {
        (iters >= 4 && !paces.is_empty()).then(|| Stretches {
            slowest_ns: paces.iter().copied().fold(0.0, f64::max),
            typical_ns: stats::median(paces),
        })
    }

    /// Per call where one timed call is `calls` calls (a graph replay).
    pub fn per(self, calls: u64) -> Self {
        let k = calls.max(1) as f64;
        Stretches {
            slowest_ns: self.slowest_ns / k,
            typical_ns: self.typical_ns / k,
        }
    }
}

/// [`time_calls`], with the stretches of the calls of a host-timed sample.
pub fn time_sample(
    p: &mut dyn Prepared,
    device: Device,
    mode: Mode,
    iters: u64,
    clock: Option<&mut DeviceClock>,
) -> Result<SampleTime, TchError> {
    if mode.is_device() {
        let clock = clock.ok_or_else(|| TchError::Kind("device-side timing needs a GPU".into()))?;
        let total = if mode == Mode::DeviceCold {
            clock.time_cold(p, iters)
        } else {
            // device, and the graph modes, whose `p` is a replay
            clock.time(p, iters)
        }?;
        return Ok(SampleTime {
            total,
            stretches: None,
        });
    }
    // the stretches' clock readings go here, allocated before the timed region and read
    // after it
    let mut paces = Vec::with_capacity(rundir::STRETCHES as usize);
    device.sync();
    let t0 = Instant::now();
    match mode {
        Mode::Device | Mode::DeviceCold | Mode::Graph | Mode::GraphCold => {
            unreachable!("handled above")
        }
        // pipelined_cold's `p` takes its copies of the state in turn
        Mode::Pipelined | Mode::PipelinedCold => {
            run_in_stretches(p, iters, None, &mut paces)?;
            device.sync();
        }
        Mode::Synced => run_in_stretches(p, iters, Some(device), &mut paces)?,
    }
    let total = t0.elapsed();
    Ok(SampleTime {
        total,
        stretches: Stretches::of(&paces, iters),
    })
}

/// Run `iters` calls of `p` (each followed by a synchronize of `sync_each`) in up to
/// [`rundir::STRETCHES`] stretches of equal count, the clock read between stretches and
/// never inside a call; each stretch's time per call pushed onto `paces`.
fn run_in_stretches(
    p: &mut dyn Prepared,
    iters: u64,
    sync_each: Option<Device>,
    paces: &mut Vec<f64>,
) -> Result<(), TchError> {
    let per = iters.div_ceil(rundir::STRETCHES).max(1);
    let mut done = 0;
    let mut at = Instant::now();
    while done < iters {
        let n = per.min(iters - done);
        for _ in 0..n {
            p.run()?;
            if let Some(d) = sync_each {
                d.sync();
            }
        }
        let now = Instant::now();
        paces.push((now - at).as_nanos() as f64 / n as f64);
        (at, done) = (now, done + n);
    }
    Ok(())
}

/// A planted host slowdown (`OPBENCH_PLANT_NS`, `OPBENCH_PLANT_PCT`): calibration knobs
/// that spin on the host after every call. Zero plants nothing.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Plant {
    /// A fixed spin per call.
    pub ns: u64,
    /// A spin of this percentage of the call's own host time.
    pub pct: f64,
    /// Which calls are planted (`OPBENCH_PLANT_SCOPE`).
    pub scope: PlantScope,
}

/// Which torch calls a host plant slows down.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum PlantScope {
    /// The timed case's own calls: a slower op.
    #[default]
    Op,
    /// Every torch call the process times, the dispatch floor's control included: a build
    /// whose every call is dearer. The build-independent host control is never planted.
    Torch,
}

impl PlantScope {
    /// `op` (or empty) or `torch`; anything else is a one-line error naming the variable.
    pub fn parse(s: &str) -> Result<Self, String> {
        match s.trim() {
            "" | "op" => Ok(PlantScope::Op),
            "torch" => Ok(PlantScope::Torch),
            other => Err(format!("OPBENCH_PLANT_SCOPE={other}: expected op or torch")),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            PlantScope::Op => "op",
            PlantScope::Torch => "torch",
        }
    }
}

impl Plant {
    /// The plant `OPBENCH_PLANT_NS`, `OPBENCH_PLANT_PCT` and `OPBENCH_PLANT_SCOPE` ask for.
    pub fn from_config(c: &Config) -> Self {
        Plant {
            ns: c.plant_ns,
            pct: c.plant_pct,
            scope: c.plant_scope,
        }
    }

    /// Whether it spins at all.
    pub fn is_active(self) -> bool {
        self.ns > 0 || self.pct > 0.0
    }

    /// The plant for the process's other torch calls (the control, the case beside): the
    /// same spin with a `torch` scope, none with `op`.
    pub fn for_other_calls(self) -> Plant {
        match self.scope {
            PlantScope::Torch => self,
            PlantScope::Op => Plant::default(),
        }
    }
}

/// [`time_calls`] with a [`Plant`] after every call in the host-timed modes.
pub fn time_calls_planted(
    p: &mut dyn Prepared,
    device: Device,
    mode: Mode,
    iters: u64,
    clock: Option<&mut DeviceClock>,
    plant: Plant,
) -> Result<SampleTime, TchError> {
    if !plant.is_active() || mode.is_device() {
        return time_sample(p, device, mode, iters, clock);
    }
    let mut planted = Planted { inner: p, plant };
    time_sample(&mut planted, device, mode, iters, clock)
}

/// A case whose every call is followed by a host spin.
struct Planted<'a> {
    inner: &'a mut dyn Prepared,
    plant: Plant,
}

impl Prepared for Planted<'_> {
    fn run(&mut self) -> Result<(), TchError> {
        let t0 = Instant::now();
        self.inner.run()?;
        let took = t0.elapsed();
        let spin = Duration::from_nanos(self.plant.ns) + took.mul_f64(self.plant.pct / 100.0);
        let t1 = Instant::now();
        while t1.elapsed() < spin {
            std::hint::spin_loop();
        }
        Ok(())
    }
    fn output(&mut self) -> Result<tch::Tensor, TchError> {
        self.inner.output()
    }
    fn reference(&mut self) -> Result<tch::Tensor, TchError> {
        self.inner.reference()
    }
}

/// Why preflight refused a case, with the reference error where one was measured.
#[derive(Debug)]
pub struct Refused {
    pub failure: Failure,
    pub rel_err: Option<f64>,
}

/// Prepare one case and check one call against the float64 reference: the prepared case
/// and its relative error, or why it cannot be timed. A panic inside the op is caught and
/// becomes an `error`.
pub fn preflight(
    op: &dyn Op,
    variant: &str,
    problem: &Problem,
    dt: DType,
    device: Device,
    cap: Option<Duration>,
) -> Result<(Box<dyn Prepared>, f64), Refused> {
    catch_unwind(AssertUnwindSafe(|| {
        preflight_inner(op, variant, problem, dt, device, cap)
    }))
    .unwrap_or_else(|panic| {
        Err(Refused {
            failure: Failure::error(format!("panicked: {}", panic_message(&panic))),
            rel_err: None,
        })
    })
}

fn preflight_inner(
    op: &dyn Op,
    variant: &str,
    problem: &Problem,
    dt: DType,
    device: Device,
    cap: Option<Duration>,
) -> Result<(Box<dyn Prepared>, f64), Refused> {
    let refuse = |failure: Failure| Refused {
        failure,
        rel_err: None,
    };
    let mut p = op.prepare(variant, problem, dt, device).map_err(refuse)?;
    if let Some(cap) = cap {
        // before the float64 reference (which costs more than the call): a case whose
        // single call is over the cap would hold the run for samples × that long. A first
        // call may pay one-time setup (a kernel module loaded, a cuDNN plan built: 1.1 s
        // for SDPA at B = 64 on the H200), so only a second call over the cap skips it
        let mut one_call = || -> Result<Duration, Refused> {
            let t0 = Instant::now();
            p.run().map_err(|e| refuse(e.into()))?;
            device.sync();
            Ok(t0.elapsed())
        };
        let first = one_call()?;
        if first > cap {
            let second = one_call()?;
            if second > cap {
                let ms = |t: Duration| t.as_secs_f64() * 1e3;
                return Err(refuse(Failure {
                    status: Status::Skipped,
                    reason: format!(
                        "two calls took {:.0} ms and {:.0} ms, over the {} ms cap (OPBENCH_CALL_CAP_MS; 0 measures it)",
                        ms(first),
                        ms(second),
                        cap.as_millis()
                    ),
                }));
            }
        }
    }
    let check = p.check().map_err(|e| refuse(e.into()))?;
    let err = rel_err(&check).map_err(|e| refuse(e.into()))?;
    drop(check);
    let tol = p.tolerance().unwrap_or_else(|| dtype::tolerance(dt));
    // NaN (a kernel that produced NaN) is a mismatch too
    if err.is_nan() || err > tol {
        return Err(Refused {
            failure: Failure {
                status: Status::Mismatch,
                reason: format!(
                    "relative error {err:.3e} against the float64 reference exceeds {tol:e}"
                ),
            },
            rel_err: Some(err),
        });
    }
    device.sync();
    Ok((p, err))
}

/// A row with the case's identity, work counts and status, timing left empty.
fn base_row(
    run_id: &str,
    key: &CaseKey,
    problem: &Problem,
    dt: DType,
    status: Status,
) -> ResultRow {
    let mut row = ResultRow::new(run_id, key.clone(), problem.dims.to_string(), status);
    row.flops = problem.flops();
    row.bytes = problem.bytes(dt.size());
    row
}

/// The row of a case that does not run: its status, why, and its error where it has one.
fn failure_row(
    run_id: &str,
    key: &CaseKey,
    problem: &Problem,
    dt: DType,
    failure: Failure,
    rel_err: Option<f64>,
) -> ResultRow {
    let mut row = base_row(run_id, key, problem, dt, failure.status);
    row.max_rel_err = rel_err;
    row.note = Some(failure.reason);
    row
}

/// The copy of a case a cold mode times: prepared afresh and, for `pipelined_cold`, given its
/// copies of the state against a last-level cache of `llc` bytes now (`graph_cold`'s capture
/// spreads them itself); with the spread's note.
fn cold_copy(
    op: &dyn Op,
    (variant, problem, dt, device): (&str, &Problem, DType, Device),
    mode: Mode,
    llc: u64,
) -> Result<(Box<dyn Prepared>, Option<String>), Failure> {
    let mut copy = op.prepare(variant, problem, dt, device)?;
    let note = match mode {
        Mode::PipelinedCold => Some(
            crate::cold::spread(copy.as_mut(), llc, 1)
                .map_err(|e| crate::classify(&e))?
                .note,
        ),
        _ => None,
    };
    Ok((copy, note))
}

/// Whether `mode` on `device` times copies of a case's model state (`pipelined_cold`;
/// `graph_cold` on a GPU — on the CPU it stays an `unsupported` row, as `graph` is).
fn copies_state(mode: Mode, device: Device) -> bool {
    match mode {
        Mode::PipelinedCold => true,
        Mode::GraphCold => device.is_gpu(),
        _ => false,
    }
}

pub(crate) fn key_for(
    op: &dyn Op,
    variant: &str,
    p: &Problem,
    dt: DType,
    device: Device,
    mode: Mode,
) -> CaseKey {
    SeriesKey {
        op: op.kind(),
        variant: variant.to_string(),
        site: p.site.to_string(),
        model: p.model.clone(),
        phase: p.phase,
        q_len: p.q_len,
        kv_len: p.kv_len,
        dtype: dt,
        device: device.id(),
        mode,
    }
    .at(p.batch)
}

/// Why a bench could not run at all (a case that fails is a row, never this).
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// An `OPBENCH_*` variable or a bench argument is off.
    #[error("{0}")]
    Config(String),
    /// The device asked for is not there.
    #[error("{0}")]
    Device(String),
    /// The run directory could not be written.
    #[error(transparent)]
    Run(#[from] rundir::RunError),
}

/// Where rows go: nowhere in test/list mode, else the run directory (opened on first use).
struct Sink {
    mode: RunMode,
    config: Config,
    devices: Vec<Device>,
    run: Option<RunWriter>,
    run_id: String,
    written: usize,
    /// Set by scripts/bench: print case i of N with an ETA after each case.
    progress: Option<crate::plan::Progress>,
}

impl Sink {
    /// Open the run directory (bench mode only), describing the run if it is new.
    fn open(&mut self) -> Result<(), BenchError> {
        if self.mode != RunMode::Bench || self.run.is_some() {
            return Ok(());
        }
        let mut env = crate::env::collect(&self.run_id, &self.devices);
        let c = &self.config;
        for (k, v) in [
            ("profile", c.profile_name.clone()),
            ("samples", c.samples.to_string()),
            ("warmup_ms", c.warmup.as_millis().to_string()),
            ("measure_ms", c.measure.as_millis().to_string()),
            (
                "models",
                c.models
                    .iter()
                    .map(|m| m.name.clone())
                    .collect::<Vec<_>>()
                    .join(","),
            ),
        ] {
            env.settings.insert(k.to_string(), v);
        }
        env.settings.insert("seed".into(), c.seed.to_string());
        if let Some(i) = c.execution {
            env.settings.insert("execution".into(), i.to_string());
        }
        if c.plant_ns > 0 {
            env.settings
                .insert("plant_ns".into(), c.plant_ns.to_string());
        }
        if c.plant_pct > 0.0 {
            env.settings
                .insert("plant_pct".into(), c.plant_pct.to_string());
        }
        if c.plant_ns > 0 || c.plant_pct > 0.0 {
            env.settings
                .insert("plant_scope".into(), c.plant_scope.as_str().into());
        }
        if c.plant_device_pct > 0.0 {
            env.settings
                .insert("plant_device_pct".into(), c.plant_device_pct.to_string());
        }
        self.run = Some(RunWriter::open(&c.out, &self.run_id, c.execution, &env)?);
        Ok(())
    }

    /// The run already holds this case (a resumed run): it is not measured again.
    fn has(&self, key: &CaseKey) -> bool {
        self.run.as_ref().is_some_and(|r| r.contains(key))
    }

    fn write(&mut self, row: &ResultRow, samples: &[Sample]) -> Result<(), BenchError> {
        if self.mode != RunMode::Bench {
            if row.status != Status::Ok {
                eprintln!(
                    "opbench: {} {} {}: {} ({})",
                    row.op,
                    row.variant,
                    row.site,
                    row.status,
                    row.note.as_deref().unwrap_or("")
                );
            }
            return Ok(());
        }
        self.open()?;
        if let Some(run) = self.run.as_mut() {
            run.write_case(row, samples)?;
            if let Some(p) = &self.progress {
                eprintln!(
                    "opbench: {} · {} {}",
                    p.line(run.cases()),
                    row.key,
                    row.status
                );
            }
        }
        self.written += 1;
        Ok(())
    }
}

/// Run every case of `op` over the configured models, devices, dtypes and modes.
///
/// Call this from a criterion target through [`opbench_bench!`](crate::opbench_bench),
/// which turns an error into a one-line message and exit code 2 in the bench's `main`.
pub fn bench_op(c: &mut Criterion, op: &dyn Op) -> Result<RunSummary, BenchError> {
    let selection = Selection::from_args().map_err(BenchError::Config)?;
    let config = Config::from_env().map_err(BenchError::Config)?;
    if let Some(t) = config.threads {
        tch::set_num_threads(t as i32);
    }
    let devices = select_devices(config.device, config.gpu_index).map_err(BenchError::Device)?;
    let summary = run_op(c, op, &selection, &config, &devices)?;
    if let Some(path) = &summary.path {
        println!(
            "opbench: {} rows for {} in {}",
            summary.rows,
            op.kind(),
            path.display()
        );
    }
    Ok(summary)
}

/// What [`run_op`] wrote.
#[derive(Debug, Clone, PartialEq)]
pub struct RunSummary {
    /// Rows appended to results.csv.
    pub rows: usize,
    /// The run directory; `None` in criterion's test and list modes, which write nothing.
    pub path: Option<std::path::PathBuf>,
}

/// [`bench_op`] with the selection, configuration and devices given rather than read from
/// the command line and the environment.
pub fn run_op(
    c: &mut Criterion,
    op: &dyn Op,
    selection: &Selection,
    config: &Config,
    devices: &[Device],
) -> Result<RunSummary, BenchError> {
    let run_id = config.run_id.clone().unwrap_or_else(default_run_id);
    let mut sink = Sink {
        mode: selection.mode,
        config: config.clone(),
        devices: devices.to_vec(),
        run: None,
        run_id: run_id.clone(),
        written: 0,
        progress: crate::plan::Progress::from_env(),
    };

    if let Some(mode) = config.trace.filter(|_| selection.mode == RunMode::Bench) {
        return trace_op(op, selection, config, devices, &mut sink, mode);
    }
    sink.open()?;
    let mut skipped = 0usize;
    let mut group = c.benchmark_group(op.kind().as_str());
    group.sampling_mode(SamplingMode::Flat);
    let problems = op.problems(config);
    let mut per_device = PerDevice::new(config, selection, devices);
    let mut rates: Option<crate::plan::Rates> = None;
    let mut plan_lines: Vec<String> = Vec::new();
    for (d, dt, problem, variant) in grid_cases(
        op,
        config,
        selection.mode == RunMode::Bench,
        devices,
        &problems,
    ) {
        let device = devices[d];
        let keys: Vec<(Mode, CaseKey)> = config
            .modes_for(device.is_gpu())
            .into_iter()
            // a cold mode of a case without model state: its warm row holds ([`Op::holds_state`])
            .filter(|&m| op.holds_state(variant, problem) || !copies_state(m, device))
            .map(|m| (m, key_for(op, variant, problem, dt, device, m)))
            .filter(|(_, k)| selection.matches(&k.to_string()))
            .filter(|(_, k)| {
                let had = sink.has(k);
                skipped += usize::from(had);
                !had
            })
            .collect();
        if keys.is_empty() {
            continue;
        }
        let case = GridCase {
            op,
            variant,
            problem,
            dt,
            device,
            cache: per_device.caches[d],
            probe: per_device.probes[d].as_ref(),
            run_id: &run_id,
            config,
        };
        if selection.mode == RunMode::List {
            plan_lines.extend(case.list(&mut group, &keys, &mut rates));
            continue;
        }
        let (mut prepared, err) = match preflight(
            op,
            variant,
            problem,
            dt,
            device,
            crate::plan::cap_for(config, problem),
        ) {
            Ok(x) => x,
            Err(refused) => {
                for (_, key) in &keys {
                    let row = failure_row(
                        &run_id,
                        key,
                        problem,
                        dt,
                        refused.failure.clone(),
                        refused.rel_err,
                    );
                    sink.write(&row, &[])?;
                }
                if selection.mode == RunMode::Bench {
                    case.beside_not_timed(&keys, &mut sink, &refused.failure)?;
                }
                continue;
            }
        };
        let mut beside = if selection.mode == RunMode::Bench {
            case.beside(&keys, &mut sink)?
        } else {
            None
        };
        let samples_per_case = selection.sample_size.unwrap_or(config.samples);
        for (mode, key) in &keys {
            case.time_mode(
                (*mode, key),
                &mut group,
                &mut sink,
                (&mut prepared, err),
                samples_per_case,
                &mut per_device.clocks[d],
                per_device.controls[d]
                    .as_mut()
                    .map(|c| &mut **c as &mut dyn Prepared),
                beside.as_mut(),
            )?;
        }
    }
    group.finish();
    crate::plan::write_plan(&plan_lines);
    // the GPU's state at this process's end beside its start in env.json
    if let (Some(run), Some(probe)) = (sink.run.as_ref(), per_device.probes.iter().flatten().next())
    {
        run.note_state(&machine::state::state_entries("end", Some(probe)))?;
    }
    if skipped > 0 {
        eprintln!(
            "opbench: {skipped} {} cases were already in run {run_id} and were kept, not measured again",
            op.kind()
        );
    }
    Ok(RunSummary {
        rows: sink.written,
        path: sink.run.as_ref().map(|r| r.path.clone()),
    })
}

/// What each device of a run needs once: its clock (where a device mode is asked for),
/// its host-speed control (the dispatch floor's add) and the last-level cache the cold
/// modes' copies of the state pass.
struct PerDevice {
    clocks: Vec<Result<DeviceClock, String>>,
    controls: Vec<Option<Box<dyn Prepared>>>,
    caches: Vec<u64>,
    /// Where each GPU's state is read after every sample (machine::state).
    probes: Vec<Option<machine::state::GpuProbe>>,
}

impl PerDevice {
    fn new(config: &Config, selection: &Selection, devices: &[Device]) -> Self {
        let wants_clock =
            config.modes.iter().any(|m| m.is_device()) && selection.mode != RunMode::List;
        let mut out = PerDevice {
            clocks: Vec::new(),
            controls: Vec::new(),
            caches: Vec::new(),
            probes: Vec::new(),
        };
        for &device in devices {
            let wants_cache = config
                .modes_for(device.is_gpu())
                .iter()
                .any(|m| matches!(m, Mode::GraphCold | Mode::PipelinedCold));
            out.caches.push(if wants_cache {
                crate::devtime::last_level_cache(device, config.l2_bytes)
            } else {
                0
            });
            // one clock per GPU, made only when a device mode is asked for
            out.clocks.push(if !device.is_gpu() {
                Err(
                    "device-side timing needs a GPU: CPU calls complete before they return \
                     (the pipelined time is the device time)"
                        .into(),
                )
            } else if wants_clock {
                DeviceClock::new(device, config.l2_bytes)
                    .and_then(|mut c| c.set_plant(config.plant_device_pct).map(|()| c))
                    .map_err(|e| first_line(&e.to_string()))
            } else {
                Err("no device mode asked for".into())
            });
            // the host-speed control: the dispatch floor's add on this device
            let control = (config.control && selection.mode == RunMode::Bench)
                .then(|| {
                    let dt = config.dtypes_for(device.is_gpu()).first().copied()?;
                    crate::Floor
                        .prepare("add", &Problem::floor(), dt, device)
                        .ok()
                })
                .flatten();
            out.controls.push(control);
            let timing = selection.mode == RunMode::Bench;
            out.probes
                .push(machine::state::probe_for(device).filter(|_| timing));
        }
        out
    }
}

/// Every case of the grid (device index, dtype, problem, variant), in an order shuffled
/// from the recorded seed with `shuffle` (when timing), so that a host that drifts within the run does not
/// line up with the order of the cases.
pub(crate) fn grid_cases<'p>(
    op: &dyn Op,
    config: &Config,
    shuffle: bool,
    devices: &[Device],
    problems: &'p [Problem],
) -> Vec<(usize, DType, &'p Problem, &'static str)> {
    let mut cases = Vec::new();
    for (d, &device) in devices.iter().enumerate() {
        for dt in config.dtypes_for(device.is_gpu()) {
            for problem in problems {
                for variant in op.variants() {
                    if op.applies(variant, problem) {
                        cases.push((d, dt, problem, variant));
                    }
                }
            }
        }
    }
    if shuffle {
        use rand::SeedableRng;
        use rand::seq::SliceRandom;
        cases.shuffle(&mut rand::rngs::StdRng::seed_from_u64(config.seed));
    }
    cases
}

/// One case of the grid: what all its modes share.
struct GridCase<'a> {
    op: &'a dyn Op,
    variant: &'static str,
    problem: &'a Problem,
    dt: DType,
    device: Device,
    /// The device's last-level cache (for the cold modes).
    cache: u64,
    /// Where the device's state is read after each sample.
    probe: Option<&'a machine::state::GpuProbe>,
    run_id: &'a str,
    config: &'a Config,
}

impl GridCase<'_> {
    /// List mode: the case's keys for criterion's list, and the plan's lines (with the case
    /// timed beside the pipelined samples) where a plan file is asked for.
    fn list(
        &self,
        group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
        keys: &[(Mode, CaseKey)],
        rates: &mut Option<crate::plan::Rates>,
    ) -> Vec<String> {
        let (op, config) = (self.op, self.config);
        for (_, k) in keys {
            group.bench_function(id_in_group(k), |b| b.iter(|| ()));
        }
        let mut lines = Vec::new();
        if crate::plan::plan_file().is_none() {
            return lines;
        }
        let rates = *rates.get_or_insert_with(crate::plan::probe);
        let (secs, skip) = crate::plan::estimate(
            config,
            &rates,
            self.problem,
            self.dt,
            self.device,
            keys.len(),
        );
        lines.extend(
            keys.iter()
                .map(|(_, k)| format!("{},{k},{secs:.4},{}\n", op.kind(), u8::from(skip))),
        );
        if let Some(bp) = beside_problem(op, self.variant, self.problem, keys).filter(|_| !skip) {
            let key = key_for(op, self.variant, &bp, self.dt, self.device, Mode::Pipelined);
            let secs = crate::plan::estimate_beside(config, &rates, &bp, self.dt, self.device);
            lines.push(format!("{},{key},{secs:.4},0\n", op.kind()));
        }
        lines
    }

    /// The row of the case timed beside this one's pipelined samples ([`Op::beside`]) where
    /// this one was refused before any timing (its preflight: a call over the cap, a
    /// failed prepare or check): nothing was timed beside it, and the plan counted it.
    fn beside_not_timed(
        &self,
        keys: &[(Mode, CaseKey)],
        sink: &mut Sink,
        failure: &Failure,
    ) -> Result<(), BenchError> {
        let Some((bp, key)) = self.beside_case(keys) else {
            return Ok(());
        };
        let Some((_, main)) = keys.iter().find(|(m, _)| *m == Mode::Pipelined) else {
            return Ok(());
        };
        if sink.has(&key) {
            return Ok(());
        }
        let why = not_timed_beside(main, failure.status, &failure.reason);
        sink.write(
            &failure_row(self.run_id, &key, &bp, self.dt, why, None),
            &[],
        )?;
        Ok(())
    }

    /// The problem and pipelined key of the case timed beside this one ([`Op::beside`]),
    /// where it has one.
    fn beside_case(&self, keys: &[(Mode, CaseKey)]) -> Option<(Problem, CaseKey)> {
        let bp = beside_problem(self.op, self.variant, self.problem, keys)?;
        let key = key_for(
            self.op,
            self.variant,
            &bp,
            self.dt,
            self.device,
            Mode::Pipelined,
        );
        Some((bp, key))
    }

    /// The case's own control, timed before each of its pipelined samples
    /// ([`Op::beside`]); a refused one is its failure row, and `None`.
    fn beside(
        &self,
        keys: &[(Mode, CaseKey)],
        sink: &mut Sink,
    ) -> Result<Option<Beside>, BenchError> {
        let Some((bp, key)) = self.beside_case(keys) else {
            return Ok(None);
        };
        if sink.has(&key) {
            return Ok(None);
        }
        let cap = crate::plan::cap_for(self.config, &bp);
        match preflight(self.op, self.variant, &bp, self.dt, self.device, cap) {
            Ok((prepared, rel_err)) => Ok(Some(Beside {
                key,
                problem: bp,
                prepared,
                rel_err,
            })),
            Err(refused) => {
                let row = failure_row(
                    self.run_id,
                    &key,
                    &bp,
                    self.dt,
                    refused.failure,
                    refused.rel_err,
                );
                sink.write(&row, &[])?;
                Ok(None)
            }
        }
    }

    /// Time the case in one mode and write its row (and, in `pipelined`, the row of the
    /// case timed beside it). A cold mode times a copy of its own, a graph mode replays a
    /// capture; what a mode cannot do here is an `unsupported` row.
    #[allow(clippy::too_many_arguments)]
    fn time_mode(
        &self,
        (mode, key): (Mode, &CaseKey),
        group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
        sink: &mut Sink,
        (prepared, err): (&mut Box<dyn Prepared>, f64),
        samples_per_case: usize,
        clock: &mut Result<DeviceClock, String>,
        control: Option<&mut dyn Prepared>,
        beside: Option<&mut Beside>,
    ) -> Result<(), BenchError> {
        let (problem, dt, device, run_id) = (self.problem, self.dt, self.device, self.run_id);
        // a case without model state has no cold key ([`Op::holds_state`]); one whose op
        // says it has state and whose prepared case holds none is an error row
        let cold_copy = copies_state(mode, device);
        if cold_copy && prepared.state_bytes() == 0 {
            let why = format!(
                "{} says its {} cases hold model state, but the prepared case holds none: \
                 nothing to make cold",
                self.op.kind(),
                self.variant
            );
            let row = failure_row(run_id, key, problem, dt, Failure::error(why), None);
            return sink.write(&row, &[]);
        }
        // graphs need their capture API, device and graph modes the device's clock and a
        // call that does not wait for the device: decided before any cold copy is made
        let graph_api = if mode.is_graph() {
            crate::graph::available(device).err()
        } else {
            None
        };
        let unavailable = graph_api
            .or_else(|| match &*clock {
                Err(why) if mode.is_device() => Some(why.clone()),
                _ => None,
            })
            .or_else(|| {
                (mode.is_device() || mode.is_graph())
                    .then(|| prepared.waits_for_device())
                    .flatten()
                    .map(|why| {
                        format!("{why}: no {mode} time (its pipelined time holds its kernels)")
                    })
            });
        if let Some(why) = unavailable {
            let row = failure_row(run_id, key, problem, dt, Failure::unsupported(why), None);
            return sink.write(&row, &[]);
        }
        let (mut fresh, spread) = if cold_copy {
            match self::cold_copy(
                self.op,
                (self.variant, problem, dt, device),
                mode,
                self.cache,
            ) {
                Ok((copy, note)) => (Some(copy), note),
                Err(failure) => {
                    return sink.write(&failure_row(run_id, key, problem, dt, failure, None), &[]);
                }
            }
        } else {
            (None, None)
        };
        // graph mode times replays of a captured copy of the case
        let mut graphed = None;
        let mut err = err;
        if mode.is_graph() {
            // graph_cold: the graph then owns the copy with its copies of the state
            let captured = match fresh.take() {
                Some(f) => crate::graph::capture_cold(f, device, dt, self.cache),
                None => crate::graph::capture(prepared.as_mut(), device, dt),
            };
            match captured {
                Ok((g, e)) => {
                    graphed = Some(g);
                    err = e;
                }
                Err((failure, rel)) => {
                    return sink.write(&failure_row(run_id, key, problem, dt, failure, rel), &[]);
                }
            }
        }
        let timed: &mut dyn Prepared = match (graphed.as_mut(), fresh.as_mut()) {
            (Some(g), _) => g,
            (None, Some(f)) => f.as_mut(),
            (None, None) => prepared.as_mut(),
        };
        let mut beside = beside.filter(|_| mode == Mode::Pipelined);
        let config = self.config;
        let execution = config.execution.unwrap_or(1);
        let (mut row, samples, beside_samples) = time_case(
            group,
            timed,
            Timed {
                problem,
                dt,
                device,
                mode,
                plant: Plant::from_config(config),
                execution,
                probe: self.probe,
            },
            key,
            run_id,
            samples_per_case,
            clock.as_mut().ok(),
            control,
            beside
                .as_mut()
                .map(|b| &mut *b.prepared as &mut dyn Prepared),
        );
        if let Some(what) = spread {
            row.note = Some(match row.note.take() {
                Some(n) => format!("{n}; {what}"),
                None => what,
            });
        }
        row.max_rel_err = Some(err);
        sink.write(&row, &samples)?;
        if let Some(b) = beside {
            let (brow, bsamples) = if row.status == Status::Ok {
                b.row(run_id, dt, execution, &beside_samples)
            } else {
                // nothing was timed beside a case that failed
                let why = not_timed_beside(key, row.status, row.note.as_deref().unwrap_or("-"));
                (
                    failure_row(run_id, &b.key, &b.problem, dt, why, None),
                    Vec::new(),
                )
            };
            sink.write(&brow, &bsamples)?;
        }
        Ok(())
    }
}

/// The trace pass of `op` (`OPBENCH_TRACE`): every selected case traced, nothing timed.
fn trace_op(
    op: &dyn Op,
    selection: &Selection,
    config: &Config,
    devices: &[Device],
    sink: &mut Sink,
    mode: crate::trace::TraceMode,
) -> Result<RunSummary, BenchError> {
    use crate::trace::{self, TraceMode};
    use rundir::{TraceRow, TraceSource, TraceStatus};
    let problems = op.problems(config);
    let child = mode == TraceMode::Child;
    if !child {
        sink.open()?;
    }
    let mut written = 0usize;
    for &device in devices {
        for dt in config.dtypes_for(device.is_gpu()) {
            // Kineto's first trace records initialisation; it also shows whether device
            // activity is visible at all
            let kineto = match mode {
                TraceMode::Kineto => trace::probe(device, dt),
                TraceMode::Logs => Err("OPBENCH_TRACE=logs".to_string()),
                TraceMode::Child => Err(String::new()),
            };
            for problem in &problems {
                for variant in op.variants() {
                    if !op.applies(variant, problem) {
                        continue;
                    }
                    let key = key_for(op, variant, problem, dt, device, Mode::Pipelined);
                    if !selection.matches(&key.to_string())
                        || sink.run.as_ref().is_some_and(|r| r.has_trace(&key))
                    {
                        continue;
                    }
                    let cap = crate::plan::cap_for(config, problem);
                    let prepared = preflight(op, variant, problem, dt, device, cap);
                    if child {
                        // the logs' child: a few calls for the libraries to log, nothing written
                        if let Ok((mut p, _)) = prepared {
                            for _ in 0..3 {
                                let _ = p.run();
                            }
                            device.sync();
                        }
                        continue;
                    }
                    let (row, kernels) = match prepared {
                        Err(refused) => {
                            let mut row = TraceRow::unavailable(
                                key.clone(),
                                TraceSource::Kineto,
                                format!(
                                    "the case is {}: {}",
                                    refused.failure.status, refused.failure.reason
                                ),
                            );
                            // a case this build does not provide has nothing to trace; one
                            // that failed is an error
                            if refused.failure.status != Status::Unsupported {
                                row.status = TraceStatus::Error;
                            }
                            (row, Vec::new())
                        }
                        Ok((mut p, _)) => match &kineto {
                            Ok(()) => {
                                let calls = trace::calls_for(p.graph_calls());
                                match trace::trace_kineto(p.as_mut(), device, calls) {
                                    Ok(events) => trace::summarize(
                                        &key,
                                        &events,
                                        calls,
                                        device.is_gpu(),
                                        trace::TRACER_SYNCS,
                                    ),
                                    Err(why) => {
                                        let mut row = TraceRow::unavailable(
                                            key.clone(),
                                            TraceSource::Kineto,
                                            why,
                                        );
                                        row.status = TraceStatus::Error;
                                        (row, Vec::new())
                                    }
                                }
                            }
                            Err(why) if device.is_gpu() => {
                                drop(p);
                                let (mut row, k) = trace::trace_logs(&key);
                                if mode == TraceMode::Kineto {
                                    let n = format!("no Kineto trace: {why}");
                                    row.note = Some(match row.note.take() {
                                        Some(x) => format!("{x}; {n}"),
                                        None => n,
                                    });
                                }
                                (row, k)
                            }
                            Err(why) => (
                                TraceRow::unavailable(
                                    key.clone(),
                                    TraceSource::Kineto,
                                    why.clone(),
                                ),
                                Vec::new(),
                            ),
                        },
                    };
                    if let Some(run) = sink.run.as_mut() {
                        run.write_trace(&row, &kernels)?;
                        written += 1;
                        eprintln!(
                            "opbench: traced {key}: {} kernels/call{}",
                            row.kernels,
                            row.dominant_kernel
                                .as_deref()
                                .map_or(String::new(), |k| format!(", mostly {k}"))
                        );
                    }
                }
            }
        }
    }
    Ok(RunSummary {
        rows: written,
        path: sink.run.as_ref().map(|r| r.path.clone()),
    })
}

/// The id inside the op's criterion group: the case key without its leading op name.
fn id_in_group(key: &CaseKey) -> String {
    let full = key.to_string();
    full.split_once('/')
        .map_or(full.clone(), |(_, rest)| rest.to_string())
}

/// The host-speed controls timed right before a sample: the dispatch floor's per-call time
/// (moves with the build and the host) and the build-independent host work (moves with the
/// host alone, [`crate::hostspeed`]).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Controls {
    pub(crate) torch: Option<f64>,
    pub(crate) host: Option<f64>,
    /// The host's and GPU's state over the sample.
    state: rundir::SampleState,
}

/// What a case is timed as.
struct Timed<'a> {
    problem: &'a Problem,
    dt: DType,
    device: Device,
    mode: Mode,
    plant: Plant,
    execution: u32,
    /// Where the GPU's state is read after each sample (none on the CPU, or where neither
    /// NVML nor amdgpu's sysfs is there).
    probe: Option<&'a machine::state::GpuProbe>,
}

/// The sample's state: the host's counters since `before`, the GPU's now.
fn sample_state(
    before: &machine::state::HostCounters,
    probe: Option<&machine::state::GpuProbe>,
) -> rundir::SampleState {
    let h = machine::state::HostCounters::read().since(before);
    let g = probe.map(|p| p.read()).unwrap_or_default();
    rundir::SampleState {
        cpu_ns: h.cpu_ns,
        nivcsw: h.nivcsw,
        steal: h.steal,
        sm_mhz: g.sm_mhz,
        gpu_util: g.util_pct,
        gpu_temp: g.temp_c,
        throttle: g.throttle,
        host_after_ns: None,
        slowest_ns: None,
        typical_ns: None,
        control_after_ns: None,
    }
}

impl Controls {
    /// The controls right before a sample: the torch control where there is one (planted
    /// with a `torch`-scope plant), and then the build-independent host control.
    pub(crate) fn before(
        control: Option<&mut (dyn Prepared + '_)>,
        device: Device,
        plant: Plant,
    ) -> Self {
        let has = control.is_some();
        Controls {
            torch: control.and_then(|c| control_ns(c, device, plant)),
            host: has.then(|| crate::hostspeed::HostControl::shared().time_ns()),
            state: rundir::SampleState::default(),
        }
    }
}

/// One sample of `iters` calls of `p` and the host's and GPU's state over it, its
/// stretches per call (a graph replay's stretch is many calls): what the criterion front
/// and the worker both record.
pub(crate) fn sample_in_state(
    p: &mut dyn Prepared,
    (device, mode, iters): (Device, Mode, u64),
    clock: Option<&mut DeviceClock>,
    plant: Plant,
    probe: Option<&machine::state::GpuProbe>,
) -> Result<(SampleTime, rundir::SampleState), TchError> {
    let calls = p.calls_per_run().max(1);
    let before = machine::state::HostCounters::read();
    let t = time_calls_planted(p, device, mode, iters, clock, plant)?;
    let mut state = sample_state(&before, probe);
    let stretches = t.stretches.map(|s| s.per(calls));
    state.slowest_ns = stretches.map(|s| s.slowest_ns);
    state.typical_ns = stretches.map(|s| s.typical_ns);
    Ok((t, state))
}

/// The host-speed control: the dispatch floor's per-call time over ~200 µs of back-to-back
/// calls, right before a sample. Its ratio to a case's time cancels the host's speed when
/// the host switches state between samples or processes (docs/method.md).
/// With a `torch`-scope plant ([`PlantScope::Torch`]) its calls are planted too.
pub(crate) fn control_ns(control: &mut dyn Prepared, device: Device, plant: Plant) -> Option<f64> {
    const CHUNK: u64 = 16;
    const SPAN: Duration = Duration::from_micros(200);
    let plant = plant.for_other_calls();
    // unplanted, the control's calls are timed bare: the wrapper reads the clock twice a call
    let mut planted;
    let control: &mut dyn Prepared = if plant.is_active() {
        planted = Planted {
            inner: control,
            plant,
        };
        &mut planted
    } else {
        control
    };
    device.sync();
    let t0 = Instant::now();
    let mut calls = 0u64;
    while t0.elapsed() < SPAN || calls == 0 {
        for _ in 0..CHUNK {
            control.run().ok()?;
        }
        calls += CHUNK;
    }
    device.sync();
    Some(t0.elapsed().as_nanos() as f64 / calls as f64)
}

/// Why the case timed beside `key`'s pipelined samples has no samples: `key` ended as
/// `status` for `reason` before any were taken.
fn not_timed_beside(key: &CaseKey, status: Status, reason: &str) -> Failure {
    Failure {
        status,
        reason: format!("timed beside {key}, which ended as {status}: {reason}"),
    }
}

/// The problem timed beside `problem`'s pipelined samples ([`Op::beside`]), where the
/// case has a pipelined key to time.
fn beside_problem(
    op: &dyn Op,
    variant: &str,
    problem: &Problem,
    keys: &[(Mode, CaseKey)],
) -> Option<Problem> {
    keys.iter()
        .any(|(m, _)| *m == Mode::Pipelined)
        .then(|| op.beside(variant, problem))
        .flatten()
}

/// What a criterion call does once the case has failed (nothing more is run): wait a
/// millisecond per iteration (at most a second) and report it. Criterion's warm-up doubles
/// the iterations until its wall-clock time passes: a call that returned at once would
/// double them past `u64::MAX` (an overflow panic in debug builds).
fn after_failure(iters: u64) -> Duration {
    let wait = Duration::from_millis(iters.min(1_000));
    std::thread::sleep(wait);
    wait
}

/// Time one case in one mode through criterion; returns its row and raw samples.
#[allow(clippy::too_many_arguments)]
fn time_case(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    prepared: &mut dyn Prepared,
    t: Timed<'_>,
    key: &CaseKey,
    run_id: &str,
    samples_per_case: usize,
    mut clock: Option<&mut DeviceClock>,
    mut control: Option<&mut dyn Prepared>,
    mut beside: Option<&mut dyn Prepared>,
) -> (ResultRow, Vec<Sample>, Vec<(u64, f64)>) {
    let Timed {
        problem,
        dt,
        device,
        mode,
        plant,
        execution,
        probe,
    } = t;
    let bytes = case_bytes(prepared, problem, dt);
    let host_control = crate::hostspeed::HostControl::shared();
    // calls per timed unit: a graph replay runs many
    let calls = prepared.calls_per_run().max(1);
    group.throughput(Throughput::ElementsAndBytes {
        elements: problem.flops(),
        bytes,
    });
    // (iters, total ns, (torch control ns, host control ns)) of every call criterion makes
    type Record = Vec<(u64, f64, Controls)>;
    let record: Rc<RefCell<Record>> = Rc::default();
    // (calls, total ns) of the case beside, one run before every call criterion makes
    let beside_record: Rc<RefCell<Vec<(u64, f64)>>> = Rc::default();
    let failed: Rc<RefCell<Option<TchError>>> = Rc::default();
    // the failure was the case timed beside this one's
    let beside_failed = std::cell::Cell::new(false);
    if let Some(c) = clock.as_deref_mut() {
        c.take_coverage();
    }
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        group.bench_function(id_in_group(key), |b| {
            b.iter_custom(|iters| {
                if failed.borrow().is_some() {
                    return after_failure(iters);
                }
                let mut host = Controls::before(control.as_deref_mut(), device, plant);
                if let Some(b) = beside.as_deref_mut() {
                    let other = plant.for_other_calls();
                    match time_calls_planted(b, device, Mode::Pipelined, 1, None, other) {
                        Ok(d) => beside_record
                            .borrow_mut()
                            .push((b.calls_per_run().max(1), d.total.as_nanos() as f64)),
                        Err(e) => {
                            *failed.borrow_mut() = Some(e);
                            beside_failed.set(true);
                            return after_failure(iters);
                        }
                    }
                }
                match sample_in_state(
                    prepared,
                    (device, mode, iters),
                    clock.as_deref_mut(),
                    plant,
                    probe,
                ) {
                    Ok((t, state)) => {
                        host.state = state;
                        // the controls again: a slow burst that began during the sample
                        host.state.host_after_ns = host.host.map(|_| host_control.time_ns());
                        host.state.control_after_ns = control
                            .as_deref_mut()
                            .and_then(|c| control_ns(c, device, plant));
                        record
                            .borrow_mut()
                            .push((iters * calls, t.total.as_nanos() as f64, host));
                        t.total
                    }
                    Err(e) => {
                        *failed.borrow_mut() = Some(e);
                        after_failure(iters)
                    }
                }
            })
        });
    }));

    let mut row = timed_row(run_id, key, problem, dt, prepared);
    // only the device modes use the clock, so only their rows get a coverage count
    if let Some(coverage) = clock
        .filter(|_| mode.is_device())
        .map(|c| c.take_coverage())
    {
        row.uncovered_chunks = Some(coverage.uncovered);
        if let Some(gaps) = coverage.note() {
            row.note = Some(match row.note.take() {
                Some(n) => format!("{n}; {gaps}"),
                None => gaps,
            });
        }
    }
    if let Err(panic) = outcome {
        row.status = Status::Error;
        row.note = Some(format!("panicked while timing: {}", panic_message(&panic)));
        return (row, Vec::new(), Vec::new());
    }
    if let Some(e) = failed.borrow_mut().take() {
        let f = Failure::from(e);
        row.status = f.status;
        row.note = Some(if beside_failed.get() {
            format!("the case timed beside it failed: {}", f.reason)
        } else {
            f.reason
        });
        return (row, Vec::new(), Vec::new());
    }
    // criterion calls us once per warm-up round, then once per sample: the samples are the
    // last `samples_per_case` calls (in test mode, the single call)
    let all = record.borrow();
    let tail = &all[all.len().saturating_sub(samples_per_case)..];
    let samples: Vec<Sample> = tail
        .iter()
        .map(|&(iters, total_ns, c)| Sample {
            key: key.clone(),
            execution,
            iters,
            total_ns,
            control_ns: c.torch,
            host_ns: c.host,
            state: c.state,
            pair: None,
        })
        .collect();
    row.flagged = rundir::flagged(&samples);
    let controls: Vec<f64> = tail.iter().filter_map(|s| s.2.torch).collect();
    if !controls.is_empty() {
        row.control_ns = Some(stats::median(&controls));
    }
    let pairs: Vec<(u64, f64)> = tail.iter().map(|&(i, t, _)| (i, t)).collect();
    row.summarize(&pairs);
    // the case beside: its runs before the same samples
    let beside = beside_record.borrow();
    let beside_tail = beside[beside.len().saturating_sub(samples_per_case)..].to_vec();
    (row, samples, beside_tail)
}

/// Bytes one call of a prepared case moves: its own count where the variant moves more
/// than the problem's minimum, else the problem's.
pub(crate) fn case_bytes(prepared: &dyn Prepared, problem: &Problem, dt: DType) -> u64 {
    prepared.bytes().unwrap_or_else(|| problem.bytes(dt.size()))
}

/// An ok row of a timed case before its timing: identity, work, the kernel and note.
fn timed_row(
    run_id: &str,
    key: &CaseKey,
    problem: &Problem,
    dt: DType,
    prepared: &dyn Prepared,
) -> ResultRow {
    let mut row = base_row(run_id, key, problem, dt, Status::Ok);
    row.bytes = case_bytes(prepared, problem, dt);
    row.kernel = prepared.kernel();
    row.note = prepared.note();
    row
}

/// The case timed beside another's pipelined samples ([`Op::beside`]), prepared and
/// checked once.
struct Beside {
    key: CaseKey,
    problem: Problem,
    prepared: Box<dyn Prepared>,
    rel_err: f64,
}

impl Beside {
    /// Its row and samples from its runs before the other case's samples.
    fn row(
        &self,
        run_id: &str,
        dt: DType,
        execution: u32,
        runs: &[(u64, f64)],
    ) -> (ResultRow, Vec<Sample>) {
        let mut row = timed_row(run_id, &self.key, &self.problem, dt, &*self.prepared);
        row.max_rel_err = Some(self.rel_err);
        row.summarize(runs);
        (row, Sample::bare(&self.key, execution, runs))
    }
}

pub(crate) fn panic_message(p: &Box<dyn std::any::Any + Send>) -> String {
    let msg = p
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "unknown panic".into());
    first_line(&msg)
}
