//! The criterion front: a bench target's criterion, and [`run_op`], which walks an op's
//! grid, preflights each case and has criterion time it in every mode.

use super::*;

/// The criterions a bench target times with, one per kind of clock: `host` for the modes
/// the host's clock times, `device` for those GPU events time ([`DeviceEvents`]).
pub struct Fronts {
    /// Wall-clock time: pipelined, synced and their cold variants.
    pub host: Criterion,
    /// GPU-event time: device, device_cold, graph, graph_cold.
    pub device: Criterion<DeviceEvents>,
}

impl std::fmt::Debug for Fronts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Fronts { host, device }")
    }
}

impl Fronts {
    /// Both fronts with [`criterion_config`]'s settings, `configure` applied to each (the
    /// command line in a bench's `main`; a test's own settings).
    pub fn with(configure: impl Fn(Criterion) -> Criterion) -> Self {
        let gpu = Config::from_env().map(|c| c.gpu_index).unwrap_or(0);
        Fronts {
            host: configure(criterion_config()),
            device: configure(criterion_config()).with_measurement(DeviceEvents::new(gpu)),
        }
    }

    /// criterion's closing summary of each front.
    pub fn final_summary(&mut self) {
        self.host.final_summary();
        self.device.final_summary();
    }
}

/// The criterion baseline a plain bench run compares with where it exists: none unless a
/// user saved one (`cargo bench -p sdpa --bench sdpa -- --save-baseline opbench`).
pub const CRITERION_BASELINE: &str = "opbench";

/// The criterions of a bench target's `main` ([`opbench_bench!`](crate::opbench_bench)):
/// [`criterion_config`] with the command line applied.
///
/// One verdict voice: left to itself, criterion compares each case with its previous result
/// in target/criterion and prints "Performance has regressed" from one process's samples,
/// which on a noisy host contradicts `opbench ab`. So criterion compares with the baseline
/// named [`CRITERION_BASELINE`], and only where a user saved one by that name: criterion's
/// own comparison on request. A command line that names a baseline (`--save-baseline`,
/// `--baseline`, `--baseline-lenient`, `--discard-baseline`) is followed as it is.
pub fn criterion_for_main() -> Fronts {
    let named = crate::select::Selection::from_args().is_ok_and(|s| s.names_baseline);
    Fronts::with(|c| {
        let c = c.configure_from_args();
        if named {
            c
        } else {
            c.retain_baseline(CRITERION_BASELINE.into(), false)
        }
    })
}

/// Criterion settings for op benches: flat sampling and the per-case budget from the
/// `OPBENCH_*` variables (criterion's own 3 s + 5 s per case would make a full sweep take
/// hours). Command-line options such as `--sample-size` still override these.
///
/// Criterion analyses the samples it is given itself (its summary line on the console)
/// and keeps that analysis private; it is given the row's resample count and level
/// ([`stats::ROW_RESAMPLES`], [`stats::ROW_LEVEL`]) so that one set of samples is
/// bootstrapped one way. Its line gives the mean, results.csv the median.
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
        .nresamples(stats::ROW_RESAMPLES)
        .confidence_level(stats::ROW_LEVEL)
        .without_plots()
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
pub(super) struct Sink {
    mode: RunMode,
    config: Config,
    devices: Vec<Device>,
    pub(super) run: Option<RunWriter>,
    run_id: String,
    written: usize,
    /// Set by scripts/bench: print case i of N with an ETA after each case.
    progress: Option<crate::plan::Progress>,
    /// When the last progress line was printed: one every ~10 s at most.
    shown: Option<std::time::Instant>,
    /// The reasons of rows that were not ok already printed: each is printed once.
    reasons: std::collections::BTreeSet<String>,
}

impl Sink {
    /// Open the run directory (bench mode only), describing the run if it is new.
    pub(super) fn open(&mut self) -> Result<(), BenchError> {
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
        crate::stamp_timing_method(&mut env);
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
        if c.plant_launch_ns > 0 {
            env.settings
                .insert("plant_launch_ns".into(), c.plant_launch_ns.to_string());
        }
        self.run = Some(RunWriter::open(&c.out, &self.run_id, c.execution, &env)?);
        Ok(())
    }

    /// The run already holds this case (a resumed run): it is not measured again.
    pub(super) fn has(&self, key: &CaseKey) -> bool {
        self.run.as_ref().is_some_and(|r| r.contains(key))
    }

    pub(super) fn write(&mut self, row: &ResultRow, samples: &[Sample]) -> Result<(), BenchError> {
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
            // one line every ~10 s, and every row that is not ok (with why)
            let due = self
                .shown
                .is_none_or(|t| t.elapsed() >= std::time::Duration::from_secs(10));
            if let Some(p) = self
                .progress
                .as_ref()
                .filter(|_| due || row.status != Status::Ok)
            {
                self.shown = Some(std::time::Instant::now());
                let why = row.note.as_deref().filter(|_| row.status != Status::Ok);
                let why = match why {
                    Some(n) if self.reasons.insert(n.to_string()) => format!(": {n}"),
                    Some(_) => " (the reason above)".to_string(),
                    None => String::new(),
                };
                eprintln!(
                    "opbench: {} · {} {}{why}",
                    p.line(run.cases()),
                    row.key,
                    row.status,
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
pub fn bench_op(c: &mut Fronts, op: &dyn Op) -> Result<RunSummary, BenchError> {
    let selection = Selection::from_args().map_err(BenchError::Config)?;
    let config = Config::from_env().map_err(BenchError::Config)?;
    config.settle_process().map_err(BenchError::Config)?;
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
    c: &mut Fronts,
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
        shown: None,
        reasons: std::collections::BTreeSet::new(),
    };

    if let Some(mode) = config.trace.filter(|_| selection.mode == RunMode::Bench) {
        return trace_op(op, selection, config, devices, &mut sink, mode);
    }
    sink.open()?;
    let mut skipped = 0usize;
    let mut groups = Groups::of(c, op.kind().as_str());
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
        let (keys, had) = case_keys((op, variant, problem, dt, device), config, selection, &sink);
        skipped += had;
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
            plan_lines.extend(case.list(&mut groups.host, &keys, &mut rates));
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
                refuse(&case, &keys, &mut sink, selection.mode, &refused)?;
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
                &mut groups,
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
    groups.host.finish();
    groups.device.finish();
    crate::plan::write_plan(&plan_lines);
    finish(&sink, &per_device, (op, &run_id, skipped))?;
    summary(&sink)
}

/// The modes `selection` picks of one case, each with its key, less those the run
/// already has (counted: the second item).
fn case_keys(
    (op, variant, problem, dt, device): (&dyn Op, &str, &Problem, DType, Device),
    config: &Config,
    selection: &Selection,
    sink: &Sink,
) -> (Vec<(Mode, CaseKey)>, usize) {
    let mut skipped = 0;
    let keys = config
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
    (keys, skipped)
}

/// The process's end: the GPU's state beside its start in env.json, and the cases kept
/// from an earlier process.
fn finish(
    sink: &Sink,
    per_device: &PerDevice,
    (op, run_id, skipped): (&dyn Op, &str, usize),
) -> Result<(), BenchError> {
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
    Ok(())
}

/// What the run wrote: its rows and where.
fn summary(sink: &Sink) -> Result<RunSummary, BenchError> {
    Ok(RunSummary {
        rows: sink.written,
        path: sink.run.as_ref().map(|r| r.path.clone()),
    })
}

/// A case the preflight refused: a row of each of its modes saying why (and the layer
/// beside it, where the run takes one, not timed either).
fn refuse(
    case: &GridCase<'_>,
    keys: &[(Mode, CaseKey)],
    sink: &mut Sink,
    mode: RunMode,
    refused: &Refused,
) -> Result<(), BenchError> {
    for (_, key) in keys {
        let row = failure_row(
            case.run_id,
            key,
            case.problem,
            case.dt,
            refused.failure.clone(),
            refused.rel_err,
        );
        sink.write(&row, &[])?;
    }
    if mode == RunMode::Bench {
        case.beside_not_timed(keys, sink, &refused.failure)?;
    }
    Ok(())
}

/// What each device of a run needs once: its clock (where a device mode is asked for),
/// its host-speed control (the dispatch floor's add) and the last-level cache the cold
/// modes' copies of the state pass.
pub(super) struct PerDevice {
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
                    .and_then(|mut c| {
                        c.set_plant(config.plant_device_pct, config.plant_launch_ns as f64)
                            .map(|()| c)
                    })
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
