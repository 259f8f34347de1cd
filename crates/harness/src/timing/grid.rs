//! The grid walk: each case's keys, rows and the samples criterion takes in each mode, with
//! the case timed beside it.

use super::*;

/// A row with the case's identity, work counts and status, timing left empty.
pub(super) fn base_row(
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
pub(super) fn failure_row(
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
pub(super) fn cold_copy(
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
pub(super) fn copies_state(mode: Mode, device: Device) -> bool {
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
pub(super) struct GridCase<'a> {
    pub(super) op: &'a dyn Op,
    pub(super) variant: &'static str,
    pub(super) problem: &'a Problem,
    pub(super) dt: DType,
    pub(super) device: Device,
    /// The device's last-level cache (for the cold modes).
    pub(super) cache: u64,
    /// Where the device's state is read after each sample.
    pub(super) probe: Option<&'a machine::state::GpuProbe>,
    pub(super) run_id: &'a str,
    pub(super) config: &'a Config,
}

impl GridCase<'_> {
    /// List mode: the case's keys for criterion's list, and the plan's lines (with the case
    /// timed beside the pipelined samples) where a plan file is asked for.
    pub(super) fn list(
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
    pub(super) fn beside_not_timed(
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
    pub(super) fn beside(
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

    /// Why this case cannot be timed in `mode` here, decided before any cold copy is made:
    /// a cold mode of a case whose prepared case holds no state (an error: its op says it
    /// has some), or a mode whose graph API, device clock or non-waiting call is missing.
    fn refusal(
        &self,
        mode: Mode,
        clock: &Result<DeviceClock, String>,
        prepared: &dyn Prepared,
    ) -> Option<Failure> {
        if copies_state(mode, self.device) && prepared.state_bytes() == 0 {
            return Some(Failure::error(format!(
                "{} says its {} cases hold model state, but the prepared case holds none: \
                 nothing to make cold",
                self.op.kind(),
                self.variant
            )));
        }
        let graph_api = if mode.is_graph() {
            crate::graph::available(self.device).err()
        } else {
            None
        };
        graph_api
            .or_else(|| match clock {
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
            })
            .map(Failure::unsupported)
    }

    /// Time the case in one mode and write its row (and, in `pipelined`, the row of the
    /// case timed beside it). A cold mode times a copy of its own, a graph mode replays a
    /// capture; what a mode cannot do here is an `unsupported` row.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn time_mode(
        &self,
        (mode, key): (Mode, &CaseKey),
        groups: &mut Groups<'_>,
        sink: &mut Sink,
        (prepared, err): (&mut Box<dyn Prepared>, f64),
        samples_per_case: usize,
        clock: &mut Result<DeviceClock, String>,
        control: Option<&mut dyn Prepared>,
        beside: Option<&mut Beside>,
    ) -> Result<(), BenchError> {
        let (problem, dt, device, run_id) = (self.problem, self.dt, self.device, self.run_id);
        let cold_copy = copies_state(mode, device);
        if let Some(failure) = self.refusal(mode, clock, prepared.as_ref()) {
            return sink.write(&failure_row(run_id, key, problem, dt, failure, None), &[]);
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
        let how = TimeCase {
            samples_per_case,
            clock: clock.as_mut().ok(),
            control,
            beside: beside
                .as_mut()
                .map(|b| &mut *b.prepared as &mut dyn Prepared),
        };
        let t = Timed {
            problem,
            dt,
            device,
            mode,
            plant: Plant::from_config(config),
            execution,
            probe: self.probe,
        };
        // each clock reports through its own criterion measurement
        let (mut row, samples, beside_samples) = if mode.is_device() {
            time_case(&mut groups.device, timed, t, key, run_id, how)
        } else {
            time_case(&mut groups.host, timed, t, key, run_id, how)
        };
        if let Some(what) = spread {
            row.note = Some(match row.note.take() {
                Some(n) => format!("{n}; {what}"),
                None => what,
            });
        }
        row.max_rel_err = Some(err);
        sink.write(&row, &samples)?;
        if let Some(b) = beside {
            write_beside(
                sink,
                b,
                (&row, key),
                (run_id, dt, execution),
                &beside_samples,
            )?;
        }
        Ok(())
    }
}

/// The case timed beside `row`'s: its row from its runs before the case's samples, or,
/// where the case failed, a row saying nothing was timed beside it.
fn write_beside(
    sink: &mut Sink,
    b: &Beside,
    (row, key): (&ResultRow, &CaseKey),
    (run_id, dt, execution): (&str, DType, u32),
    runs: &[(u64, f64)],
) -> Result<(), BenchError> {
    let (brow, bsamples) = if row.status == Status::Ok {
        b.row(run_id, dt, execution, runs)
    } else {
        // nothing was timed beside a case that failed
        let why = not_timed_beside(key, row.status, row.note.as_deref().unwrap_or("-"));
        (
            failure_row(run_id, &b.key, &b.problem, dt, why, None),
            Vec::new(),
        )
    };
    sink.write(&brow, &bsamples)
}

/// A bench group of each front ([`Fronts`]): the host modes' and the device modes'.
pub(super) struct Groups<'a> {
    pub(super) host: criterion::BenchmarkGroup<'a, criterion::measurement::WallTime>,
    pub(super) device: criterion::BenchmarkGroup<'a, DeviceEvents>,
}

impl<'a> Groups<'a> {
    /// The group `name` of each front, sampled flat.
    pub(super) fn of(c: &'a mut Fronts, name: &str) -> Self {
        let mut g = Groups {
            host: c.host.benchmark_group(name),
            device: c.device.benchmark_group(name),
        };
        g.host.sampling_mode(SamplingMode::Flat);
        g.device.sampling_mode(SamplingMode::Flat);
        g
    }
}

/// How [`time_case`] times a case: samples, the device clock, the torch control timed
/// around each sample and the case timed beside it.
pub(super) struct TimeCase<'c, 'p, 'b> {
    pub(super) samples_per_case: usize,
    pub(super) clock: Option<&'c mut DeviceClock>,
    pub(super) control: Option<&'p mut dyn Prepared>,
    pub(super) beside: Option<&'b mut dyn Prepared>,
}

/// What a case is timed as.
pub(super) struct Timed<'a> {
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

/// Why the case timed beside `key`'s pipelined samples has no samples: `key` ended as
/// `status` for `reason` before any were taken.
pub(super) fn not_timed_beside(key: &CaseKey, status: Status, reason: &str) -> Failure {
    Failure {
        status,
        reason: format!("timed beside {key}, which ended as {status}: {reason}"),
    }
}

/// The problem timed beside `problem`'s pipelined samples ([`Op::beside`]), where the
/// case has a pipelined key to time.
pub(super) fn beside_problem(
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
pub(super) fn after_failure(iters: u64) -> Duration {
    let wait = Duration::from_millis(iters.min(1_000));
    std::thread::sleep(wait);
    wait
}

/// One run of the case beside, before a sample: (its calls, ns), its other calls planted
/// as the plant's scope says.
fn run_beside(b: &mut dyn Prepared, device: Device, plant: Plant) -> Result<(u64, f64), TchError> {
    let d = time_calls_planted(b, device, Mode::Pipelined, 1, None, plant.for_other_calls())?;
    Ok((b.calls_per_run().max(1), d.total.as_nanos() as f64))
}

/// Time one case in one mode through criterion (the group of the clock that times the
/// mode); returns its row and raw samples.
pub(super) fn time_case<M>(
    group: &mut criterion::BenchmarkGroup<'_, M>,
    prepared: &mut dyn Prepared,
    t: Timed<'_>,
    key: &CaseKey,
    run_id: &str,
    how: TimeCase<'_, '_, '_>,
) -> (ResultRow, Vec<Sample>, Vec<(u64, f64)>)
where
    M: criterion::measurement::Measurement<Value = Duration>,
{
    let TimeCase {
        samples_per_case,
        mut clock,
        mut control,
        mut beside,
    } = how;
    let Timed {
        problem,
        dt,
        device,
        mode,
        plant,
        execution,
        probe,
    } = t;
    // calls per timed unit: a graph replay runs many
    let calls = prepared.calls_per_run().max(1);
    group.throughput(Throughput::ElementsAndBytes {
        elements: problem.flops(),
        bytes: case_bytes(prepared, problem, dt),
    });
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
                let host = Controls::before(control.as_deref_mut(), device, plant);
                if let Some(b) = beside.as_deref_mut() {
                    match run_beside(b, device, plant) {
                        Ok(run) => beside_record.borrow_mut().push(run),
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
                        let host = host.after(state, control.as_deref_mut(), device, plant);
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
    if let Some(c) = clock.filter(|_| mode.is_device()) {
        note_coverage(&mut row, c);
    }
    let ended = Ended {
        outcome: outcome.err(),
        failed: failed.borrow_mut().take(),
        beside_failed: beside_failed.get(),
    };
    let (record, beside) = (record.borrow(), beside_record.borrow());
    case_result(
        row,
        ended,
        (&record, &beside),
        samples_per_case,
        (key, execution),
    )
}

/// The case timed beside another's pipelined samples ([`Op::beside`]), prepared and
/// checked once.
pub(super) struct Beside {
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
