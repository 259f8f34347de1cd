//! The worker mode of a bench binary (`bench-linear --opbench-worker`): it answers the
//! worker protocol (`wire::protocol`)'s requests on stdin and stdout, one JSON object a line, for
//! `opbench ab`, which drives two builds' workers in turns.
//!
//! The worker knows its cases (the grid under its `OPBENCH_*` settings), how to prepare
//! and check one against its float64 reference ([`crate::preflight`]), and how to time one
//! sample of N calls in the key's mode with the host controls before it — the same
//! [`crate::time_sample`] and controls the criterion front uses. Warm-up, calls per sample,
//! order, stopping, estimates and rows are the driver's.
//!
//! Served modes: `pipelined`, `synced`, `device` and `graph`. A `graph` case is captured
//! once it is prepared (16 calls a replay, checked against the float64 reference as
//! `scripts/bench` checks it) and its sample times replays behind the device clock's lead.
//! Its device time carries no per-process launch term: a stream-launched kernel's device
//! time moves by ~0.1 µs with the process (docs/method.md, "The process term"). The cold
//! modes are listed as not served, with the reason: they run through `scripts/bench`.
//!
//! Nothing else is written to stdout; a case that fails is a reply, never an exit.

use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::panic::{AssertUnwindSafe, catch_unwind};

use rundir::CaseKey;
use shapes::Problem;
use wire::protocol::{
    CaseName, NotServed, PROTOCOL, Prepared as PreparedReply, Reply, Request, Sampled,
};

use crate::devtime::DeviceClock;
use crate::op::{Op, Prepared, Status, first_line};
use crate::timing::{
    Controls, Mode, Plant, case_bytes, grid_cases, key_for, panic_message, preflight,
    sample_in_state,
};
use crate::{BenchError, Config, DType, Device, select_devices};

pub use wire::protocol::WORKER_FLAG;

/// The modes a worker times.
const SERVED: [Mode; 4] = [Mode::Pipelined, Mode::Synced, Mode::Device, Mode::Graph];

/// Serve the protocol on this process's stdin and stdout until `quit` or the end of
/// stdin. Bad settings or devices are an error before any request is read.
pub fn serve(ops: &[&dyn Op]) -> Result<(), BenchError> {
    let config = Config::from_env().map_err(BenchError::Config)?;
    config.settle_process().map_err(BenchError::Config)?;
    let devices = select_devices(config.device, config.gpu_index).map_err(BenchError::Device)?;
    let mut w = Worker::new(ops, config, devices);
    let stdin = std::io::stdin();
    let stdout = std::io::stdout();
    w.serve_io(stdin.lock(), stdout.lock())
        .map_err(|e| BenchError::Config(format!("worker i/o: {e}")))
}

/// One case of the grid, as the worker knows it.
struct Case {
    op: usize,
    device: usize,
    dt: DType,
    problem: Problem,
    variant: &'static str,
    key: CaseKey,
}

impl Case {
    /// The name of its prepared state: the key in `pipelined`, shared by every mode.
    fn identity(&self) -> String {
        self.key.in_mode(Mode::Pipelined).to_string()
    }
}

/// A prepared case, or why it was refused.
type Slot = Result<Made, PreparedReply>;

/// A prepared case: its error against float64, its graph once a `graph` key asked for
/// one, and what it holds beside it to sit where its placement put it
/// ([`crate::tensors::placement`]).
struct Made {
    /// Declared first, so dropped first: its replays read the case's tensors.
    graph: Option<Captured>,
    case: Box<dyn Prepared>,
    err: f64,
    _beside: Vec<tch::Tensor>,
}

/// A case's capture for `graph` mode, or why it could not be captured.
type Captured = Result<crate::graph::GraphCase, (crate::op::Failure, Option<f64>)>;

/// A worker: its cases, what is prepared, each device's clock, control and probe.
pub struct Worker<'a> {
    ops: Vec<&'a dyn Op>,
    config: Config,
    devices: Vec<Device>,
    cases: BTreeMap<String, Case>,
    not_served: Vec<NotServed>,
    prepared: BTreeMap<String, Slot>,
    clocks: Vec<Option<Result<DeviceClock, String>>>,
    controls: Vec<Option<Box<dyn Prepared>>>,
    probes: Vec<Option<machine::state::GpuProbe>>,
    /// The CPUs the process runs on, where a sample's thread returns after
    /// [`Config::timing_cpu`].
    home_cpus: Vec<usize>,
}

impl std::fmt::Debug for Worker<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("cases", &self.cases.len())
            .field("prepared", &self.prepared.len())
            .finish()
    }
}

impl<'a> Worker<'a> {
    /// A worker for `ops` under `config` on `devices`.
    pub fn new(ops: &[&'a dyn Op], config: Config, devices: Vec<Device>) -> Self {
        let mut cases = BTreeMap::new();
        let mut not_served = Vec::new();
        for (i, op) in ops.iter().enumerate() {
            let problems = op.problems(&config);
            for (d, dt, problem, variant) in grid_cases(*op, &config, false, &devices, &problems) {
                let device = devices[d];
                for mode in config.modes_for(device.is_gpu()) {
                    let key = key_for(*op, variant, problem, dt, device, mode);
                    let name = CaseName {
                        key: key.to_string(),
                        fields: key.fields(),
                        ..Default::default()
                    };
                    if !SERVED.contains(&mode) {
                        not_served.push(NotServed {
                            case: name,
                            reason: format!(
                                "opbench ab times pipelined, synced, device and graph; {mode} \
                                 runs through scripts/bench"
                            ),
                        });
                        continue;
                    }
                    let case = Case {
                        op: i,
                        device: d,
                        dt,
                        problem: problem.clone(),
                        variant,
                        key,
                    };
                    cases.insert(name.key, case);
                }
            }
        }
        let controls = devices
            .iter()
            .map(|&device| {
                config
                    .control
                    .then(|| {
                        let dt = config.dtypes_for(device.is_gpu()).first().copied()?;
                        crate::Floor
                            .prepare("add", &Problem::floor(), dt, device)
                            .ok()
                    })
                    .flatten()
            })
            .collect();
        let probes = devices
            .iter()
            .map(|&d| machine::state::probe_for(d))
            .collect();
        Worker {
            ops: ops.to_vec(),
            clocks: devices.iter().map(|_| None).collect(),
            home_cpus: config.cpus.clone().unwrap_or_else(wire::cpus::allowed),
            config,
            devices,
            cases,
            not_served,
            prepared: BTreeMap::new(),
            controls,
            probes,
        }
    }

    /// Answer requests from `input` on `output` until `quit` or the end of `input`.
    pub fn serve_io(&mut self, input: impl BufRead, mut output: impl Write) -> std::io::Result<()> {
        for line in input.lines() {
            let line = line?;
            if line.trim().is_empty() {
                continue;
            }
            let reply = match Request::parse(&line) {
                Ok(req) => {
                    catch_unwind(AssertUnwindSafe(|| self.handle(&req))).unwrap_or_else(|p| {
                        Reply::Error {
                            message: format!("panicked: {}", panic_message(&p)),
                        }
                    })
                }
                Err(message) => Reply::Error { message },
            };
            output.write_all(reply.line().as_bytes())?;
            output.flush()?;
            if reply == Reply::Bye {
                break;
            }
        }
        Ok(())
    }

    /// One request's reply.
    pub fn handle(&mut self, req: &Request) -> Reply {
        let out = match req {
            Request::Hello => Ok(self.hello()),
            Request::Cases { filter } => self.list(filter.as_deref()),
            Request::Prepare { key, place } => self.prepare(key, *place).map(Reply::Prepared),
            Request::Sample { key, iters } => self.sample(key, *iters).map(Reply::Sample),
            Request::Release { key } => {
                let id = self.case(key).map(Case::identity);
                if let Ok(id) = &id {
                    self.prepared.remove(id);
                }
                id.map(|_| Reply::Released { key: key.clone() })
            }
            Request::Quit => Ok(Reply::Bye),
        };
        out.unwrap_or_else(|message| Reply::Error { message })
    }

    fn hello(&self) -> Reply {
        let mut env = crate::env::collect("worker", &self.devices);
        crate::stamp_timing_method(&mut env);
        Reply::Hello {
            protocol: PROTOCOL,
            ops: self.ops.iter().map(|o| o.kind().to_string()).collect(),
            env: serde_json::to_value(&env).unwrap_or_default(),
        }
    }

    fn list(&self, filter: Option<&str>) -> Result<Reply, String> {
        let re = filter
            .map(regex::Regex::new)
            .transpose()
            .map_err(|e| format!("filter: {e}"))?;
        let keep = |k: &str| re.as_ref().is_none_or(|r| r.is_match(k));
        Ok(Reply::Cases {
            cases: self
                .cases
                .values()
                .filter(|c| keep(&c.key.to_string()))
                .map(|c| CaseName {
                    key: c.key.to_string(),
                    fields: c.key.fields(),
                    ..Default::default()
                })
                .collect(),
            unsupported: self
                .not_served
                .iter()
                .filter(|n| keep(&n.case.key))
                .cloned()
                .collect(),
        })
    }

    fn case(&self, key: &str) -> Result<&Case, String> {
        self.cases
            .get(key)
            .ok_or_else(|| format!("unknown case `{key}` (the cases request lists them)"))
    }

    /// Prepare (once for every mode of a case) and check; then what the key's mode needs.
    /// With `place`, the case is made in that placement, again if it was prepared (same
    /// seed, same values: its check stands).
    fn prepare(&mut self, key: &str, place: Option<u64>) -> Result<PreparedReply, String> {
        let case = self.case(key)?;
        let (op, d, dt) = (self.ops[case.op], case.device, case.dt);
        let (problem, variant, mode, id) = (
            case.problem.clone(),
            case.variant,
            case.key.mode,
            case.identity(),
        );
        let device = self.devices[d];
        let mut reply = PreparedReply {
            key: key.to_string(),
            status: Status::Ok,
            dims: problem.dims.to_string(),
            flops: problem.flops(),
            bytes: problem.bytes(dt.size()),
            ..PreparedReply::default()
        };
        let refusal = |status: Status, reason: String, rel_err: Option<f64>| PreparedReply {
            status,
            reason: Some(reason),
            rel_err,
            ..reply.clone()
        };
        let beside = |seed: Option<u64>| {
            seed.map_or(Ok(Vec::new()), |s| crate::tensors::placement(s, device))
                .map_err(crate::op::Failure::from)
        };
        match (self.prepared.get(&id), place) {
            (Some(Ok(made)), Some(_)) => {
                // made again elsewhere: the old one's memory is freed first
                let err = made.err;
                self.prepared.remove(&id);
                let entry = beside(place)
                    .and_then(|held| {
                        let case = op.prepare(variant, &problem, dt, device)?;
                        // its kernels end before the reply, as preflight's do: the other
                        // side's next sample must not share the device with them
                        device.sync();
                        Ok(Made {
                            graph: None,
                            case,
                            err,
                            _beside: held,
                        })
                    })
                    .map_err(|f| refusal(f.status, f.reason, Some(err)));
                self.prepared.insert(id.clone(), entry);
            }
            (None, _) => {
                let cap = crate::plan::cap_for(&self.config, &problem);
                let entry = match beside(place) {
                    Err(f) => Err(refusal(f.status, f.reason, None)),
                    Ok(held) => match preflight(op, variant, &problem, dt, device, cap) {
                        Ok((case, err)) => Ok(Made {
                            graph: None,
                            case,
                            err,
                            _beside: held,
                        }),
                        Err(r) => Err(refusal(r.failure.status, r.failure.reason, r.rel_err)),
                    },
                };
                self.prepared.insert(id.clone(), entry);
            }
            _ => {}
        }
        let waits = match self.prepared.get_mut(&id) {
            Some(Err(refused)) => {
                return Ok(PreparedReply {
                    key: key.to_string(),
                    ..refused.clone()
                });
            }
            Some(Ok(made)) => {
                let p = &made.case;
                reply.rel_err = Some(made.err);
                reply.bytes = case_bytes(p.as_ref(), &problem, dt);
                reply.kernel = p.kernel();
                reply.note = p.note();
                reply.state_bytes = p.state_bytes();
                let waits = p.waits_for_device();
                if mode.is_graph() && waits.is_none() {
                    captured_into(&mut reply, made, device, dt);
                }
                waits
            }
            None => return Err("internal: the case was not kept".into()),
        };
        if mode.is_device()
            && let Some(why) = self.clock(d).err().or(waits)
        {
            reply.status = Status::Unsupported;
            reply.reason = Some(why);
        }
        Ok(reply)
    }

    /// The device's clock, made on first use (with the device plant).
    fn clock(&mut self, d: usize) -> Result<(), String> {
        let (device, config) = (self.devices[d], &self.config);
        let slot = self.clocks[d].get_or_insert_with(|| {
            if !device.is_gpu() {
                return Err(
                    "device-side timing needs a GPU: CPU calls complete before they \
                            return (the pipelined time is the device time)"
                        .into(),
                );
            }
            DeviceClock::new(device, config.l2_bytes)
                .and_then(|mut c| {
                    c.set_plant(config.plant_device_pct, config.plant_launch_ns as f64)
                        .map(|()| c)
                })
                .map_err(|e| first_line(&e.to_string()))
        });
        slot.as_ref().map(|_| ()).map_err(Clone::clone)
    }

    /// One sample: the host controls, then `iters` calls in the key's mode.
    fn sample(&mut self, key: &str, iters: u64) -> Result<Sampled, String> {
        let case = self
            .cases
            .get(key)
            .ok_or_else(|| format!("unknown case `{key}`"))?;
        let (d, mode) = (case.device, case.key.mode);
        let device = self.devices[d];
        let Some(Ok(made)) = self.prepared.get_mut(&case.identity()) else {
            return Err(format!("`{key}` is not prepared (or was refused)"));
        };
        let p: &mut dyn Prepared = if mode.is_graph() {
            match made.graph.as_mut() {
                Some(Ok(g)) => g,
                _ => return Err(format!("`{key}` has no captured graph (prepare it first)")),
            }
        } else {
            made.case.as_mut()
        };
        // a GPU case's sample runs its thread on the one CPU both sides use: a CPU of the
        // set can be slow for a second while another is not (docs/method.md, "CPUs")
        let one_cpu = self.config.timing_cpu.filter(|_| device.is_gpu());
        if let Some(c) = one_cpu {
            wire::cpus::pin_thread(&[c]).map_err(|e| format!("OPBENCH_TIMING_CPU: {e}"))?;
        }
        let plant = Plant::from_config(&self.config);
        let controls = Controls::before(self.controls[d].as_deref_mut(), device, plant);
        let clock = device_clock(&mut self.clocks[d], mode);
        let calls = p.calls_per_run().max(1);
        let sampled = sample_in_state(
            p,
            (device, mode, iters.max(1)),
            clock,
            plant,
            self.probes[d].as_ref(),
        )
        .map_err(|e| crate::classify(&e).reason);
        if one_cpu.is_some() {
            wire::cpus::pin_thread(&self.home_cpus).map_err(|e| format!("OPBENCH_CPUS: {e}"))?;
        }
        let clock = device_clock(&mut self.clocks[d], mode);
        let (uncovered, planted_ns) = clock.map_or((None, None), |c| {
            (Some(c.take_uncovered()), c.take_planted())
        });
        let (t, state) = sampled?;
        Ok(Sampled {
            key: key.to_string(),
            calls: iters.max(1) * calls,
            total_ns: t.total.as_nanos() as f64,
            spent_ns: None,
            control_ns: controls.torch,
            host_ns: controls.host,
            state,
            uncovered,
            planted_ns,
        })
    }
}

/// Capture `made`'s graph if it has none (a fresh placement drops the old one with its
/// case), and say on `reply` what the capture gave: its note, or why it failed.
fn captured_into(reply: &mut PreparedReply, made: &mut Made, device: Device, dt: DType) {
    let graph = made.graph.get_or_insert_with(|| {
        let captured = crate::graph::capture(made.case.as_mut(), device, dt).map(|(g, _)| g);
        // the capture's kernels end before the reply: the other side's sample must not
        // share the device with them
        device.sync();
        captured
    });
    match graph {
        Ok(g) => reply.note = g.note(),
        Err((failure, rel_err)) => {
            reply.status = failure.status;
            reply.reason = Some(failure.reason.clone());
            if rel_err.is_some() {
                reply.rel_err = *rel_err;
            }
        }
    }
}

/// The device's clock where `mode` times on the device and the clock could be made.
fn device_clock(
    slot: &mut Option<Result<DeviceClock, String>>,
    mode: Mode,
) -> Option<&mut DeviceClock> {
    slot.as_mut()
        .and_then(|c| c.as_mut().ok())
        .filter(|_| mode.is_device())
}
