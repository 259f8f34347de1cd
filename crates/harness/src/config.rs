//! Configuration from `OPBENCH_*` variables, so criterion's own arguments (filters,
//! `--save-baseline`, `--sample-size`) keep working on the command line.
//!
//! The variables, their defaults and meanings are listed once, in the `settings` crate
//! (`opbench settings`); this module parses and checks the values the bench binaries read.

use std::path::{Path, PathBuf};
use std::time::Duration;

use shapes::{Grid, ModelConfig, Profile};

use crate::DType;
use crate::device::DeviceChoice;
use crate::timing::Mode;

/// Everything a bench run is told from the environment.
#[derive(Debug, Clone)]
pub struct Config {
    pub models: Vec<ModelConfig>,
    pub device: DeviceChoice,
    pub gpu_index: usize,
    pub dtypes: Option<Vec<DType>>,
    pub profile_name: String,
    pub profile: Profile,
    /// `OPBENCH_MODES`, else `pipelined,synced`; see [`Config::modes_for`].
    pub modes: Vec<Mode>,
    /// `OPBENCH_MODES` is unset: the CPU also times `pipelined_cold`, the rows predict
    /// prices a CPU step's calls with (a step reads every layer's weights from memory).
    pub cold_on_cpu: bool,
    pub out: PathBuf,
    pub run_id: Option<String>,
    pub samples: usize,
    pub warmup: Duration,
    pub measure: Duration,
    pub threads: Option<usize>,
    /// `OPBENCH_CPUS`: the CPUs the process and its threads run on (unset: any).
    pub cpus: Option<Vec<usize>>,
    /// `OPBENCH_TIMING_CPU`: in a worker (`opbench ab`), the one CPU a GPU case's sample
    /// runs its thread on, the rest of the time on [`Self::cpus`] (unset: no change).
    pub timing_cpu: Option<usize>,
    /// `OPBENCH_EXECUTION`: which execution (process) of a run this is, from 1; rows go to
    /// `runs/<run_id>/executions/<i>/` and `opbench merge` combines them. `None`: the run
    /// is this one process, written to `runs/<run_id>/`.
    pub execution: Option<u32>,
    /// `OPBENCH_SEED`: the seed of this process's shuffled case order (recorded in
    /// env.json); from the clock when unset.
    pub seed: u64,
    /// `OPBENCH_PLANT_NS`, a test knob: spin this long on the host inside the timed region
    /// after every call (pipelined and synced modes), a known slowdown for calibrating
    /// `compare`. Never set it in a run that is published.
    pub plant_ns: u64,
    /// `OPBENCH_PLANT_PCT`, a test knob: after every call (pipelined and synced modes),
    /// spin for this percentage of the host time the call itself took: the host made that
    /// much slower. Never set it in a run that is published.
    pub plant_pct: f64,
    /// `OPBENCH_PLANT_SCOPE`, with a host plant: `op` (default) spins after the case's own
    /// calls only; `torch` after every torch call the process times — the case's, the
    /// dispatch floor's control's and the case timed beside it — as a build whose every
    /// call is dearer would (a slower HIP launch path, a dispatcher change). The
    /// build-independent host control is never planted. Never set it in a published run.
    pub plant_scope: crate::timing::PlantScope,
    /// `OPBENCH_PLANT_DEVICE_PCT`, a test knob: in the `device` mode, a spin kernel
    /// (`at::cuda::sleep`) of this percentage of the calls' own device time after every
    /// chunk of calls, inside the timed events: the device's kernels made that much slower.
    /// Never set it in a published run.
    pub plant_device_pct: f64,
    /// `OPBENCH_PLANT_LAUNCH_NS`, a test knob: in the `device` mode, this many device ns a
    /// stream-launched call (a spin after every chunk of calls, inside the timed events;
    /// graph replays are not planted): what a build that adds work to each launch's path
    /// costs the device. Never set it in a published run.
    pub plant_launch_ns: u64,
    /// `OPBENCH_L2_BYTES`: the last-level cache `device_cold` flushes, where the runtime
    /// reports none or the wrong one (AMD's Infinity Cache is not its L2).
    pub l2_bytes: Option<u64>,
    /// `OPBENCH_CALL_CAP_MS`: a case whose first two calls each take longer is not measured
    /// (a `skipped` row says how long they took; the first alone may be one-time setup): criterion would hold the run for samples ×
    /// that call. `None` (0): no cap.
    pub call_cap: Option<Duration>,
    /// `OPBENCH_CONTROL=0` turns off the host-speed control measured before every sample.
    pub control: bool,
    /// `OPBENCH_TRACE`: a trace pass (no timing) instead of a timed one.
    pub trace: Option<crate::trace::TraceMode>,
}

fn var(name: &str) -> Option<String> {
    settings::var(name).filter(|v| !v.trim().is_empty())
}

fn number<T: std::str::FromStr>(name: &str, default: T) -> Result<T, String> {
    match var(name) {
        None => Ok(default),
        Some(v) => v
            .trim()
            .parse()
            .map_err(|_| format!("{name}={v}: not a number")),
    }
}

impl Config {
    /// Put this process where the settings say, before torch starts its threads: on
    /// `OPBENCH_CPUS`, with `OPBENCH_THREADS` intra-op threads.
    pub fn settle_process(&self) -> Result<(), String> {
        if let Some(cpus) = &self.cpus {
            wire::cpus::pin(cpus).map_err(|e| format!("OPBENCH_CPUS: {e}"))?;
        }
        if let Some(t) = self.threads {
            tch::set_num_threads(t as i32);
        }
        Ok(())
    }

    /// Read the `OPBENCH_*` variables. Any bad value is a one-line error naming it.
    pub fn from_env() -> Result<Self, String> {
        let models =
            ModelConfig::resolve_list(&var("OPBENCH_MODEL").unwrap_or("qwen3-0.6b".into()))
                .map_err(|e| format!("OPBENCH_MODEL: {e}"))?;
        let device = match var("OPBENCH_DEVICE") {
            None => DeviceChoice::All,
            Some(v) => DeviceChoice::parse(v.trim())
                .ok_or_else(|| format!("OPBENCH_DEVICE={v}: expected cpu, gpu or all"))?,
        };
        let dtypes = dtypes_from_env()?;
        let profile_name = var("OPBENCH_PROFILE").unwrap_or("default".into());
        let grid = Grid::load_default().map_err(|e| e.to_string())?;
        let profile = grid
            .profile(&profile_name)
            .map_err(|e| e.to_string())?
            .clone();
        let modes = modes_from_env()?;
        let out = var("OPBENCH_OUT")
            .map(PathBuf::from)
            .unwrap_or_else(default_out);
        let samples: usize = number("OPBENCH_SAMPLES", 20)?;
        if samples < 10 {
            return Err(format!(
                "OPBENCH_SAMPLES={samples}: criterion needs at least 10"
            ));
        }
        let warmup_ms: u64 = number("OPBENCH_WARMUP_MS", 100)?;
        let measure_ms: u64 = number("OPBENCH_MEASURE_MS", 400)?;
        if measure_ms == 0 {
            return Err("OPBENCH_MEASURE_MS=0: criterion needs a positive measurement time".into());
        }
        let threads = threads_from_env()?;
        let cpus = cpus_from_env()?;
        let timing_cpu = timing_cpu_from_env(cpus.as_deref())?;
        Ok(Config {
            models,
            device,
            gpu_index: number("OPBENCH_GPU", 0)?,
            dtypes,
            profile_name,
            profile,
            cold_on_cpu: var("OPBENCH_MODES").is_none(),
            modes,
            out,
            run_id: var("OPBENCH_RUN"),
            samples,
            warmup: Duration::from_millis(warmup_ms),
            measure: Duration::from_millis(measure_ms),
            threads,
            cpus,
            timing_cpu,
            execution: match var("OPBENCH_EXECUTION") {
                None => None,
                Some(_) => match number("OPBENCH_EXECUTION", 0u32)? {
                    0 => return Err("OPBENCH_EXECUTION=0: executions count from 1".into()),
                    n => Some(n),
                },
            },
            seed: number("OPBENCH_SEED", clock_seed())?,
            plant_ns: number("OPBENCH_PLANT_NS", 0)?,
            plant_pct: percentage("OPBENCH_PLANT_PCT")?,
            plant_scope: crate::timing::PlantScope::parse(
                &var("OPBENCH_PLANT_SCOPE").unwrap_or_default(),
            )?,
            plant_device_pct: percentage("OPBENCH_PLANT_DEVICE_PCT")?,
            plant_launch_ns: number("OPBENCH_PLANT_LAUNCH_NS", 0)?,
            control: number("OPBENCH_CONTROL", 1u8)? != 0,
            call_cap: match number("OPBENCH_CALL_CAP_MS", 1000u64)? {
                0 => None,
                ms => Some(Duration::from_millis(ms)),
            },
            trace: crate::trace::TraceMode::parse(&var("OPBENCH_TRACE").unwrap_or_default())?,
            l2_bytes: match var("OPBENCH_L2_BYTES") {
                None => None,
                Some(_) => match number("OPBENCH_L2_BYTES", 0u64)? {
                    b if (1 << 20..=1 << 36).contains(&b) => Some(b),
                    b => {
                        return Err(format!(
                            "OPBENCH_L2_BYTES={b}: expected 1 MiB to 64 GiB in bytes"
                        ));
                    }
                },
            },
        })
    }

    /// The modes to time on a device: `OPBENCH_MODES` as given; unset, `pipelined` and
    /// `synced`, and on the CPU also `pipelined_cold`.
    pub fn modes_for(&self, gpu: bool) -> Vec<Mode> {
        let mut modes = self.modes.clone();
        if self.cold_on_cpu && !gpu && !modes.contains(&Mode::PipelinedCold) {
            modes.push(Mode::PipelinedCold);
        }
        modes
    }

    /// The dtypes to run on `device`: the grid's for that kind of device, narrowed by
    /// `OPBENCH_DTYPE` when set.
    pub fn dtypes_for(&self, gpu: bool) -> Vec<DType> {
        let grid = if gpu {
            &self.profile.dtypes_gpu
        } else {
            &self.profile.dtypes_cpu
        };
        match &self.dtypes {
            None => grid.clone(),
            Some(only) => only.clone(),
        }
    }
}

/// A seed from the clock, for a run that names none.
fn clock_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// `<workspace>/target/opbench`: cargo runs benches from the package folder, so walk up to
/// the workspace root (CARGO_TARGET_DIR wins when set).
fn default_out() -> PathBuf {
    if let Some(t) = std::env::var("CARGO_TARGET_DIR")
        .ok()
        .filter(|v| !v.trim().is_empty())
    {
        return PathBuf::from(t).join("opbench");
    }
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    workspace_root(&cwd)
        .unwrap_or(cwd)
        .join("target")
        .join("opbench")
}

/// The nearest folder at or above `start` whose Cargo.toml declares a `[workspace]`.
pub fn workspace_root(start: &Path) -> Option<PathBuf> {
    start
        .ancestors()
        .find(|d| {
            std::fs::read_to_string(d.join("Cargo.toml"))
                .map(|t| t.lines().any(|l| l.trim() == "[workspace]"))
                .unwrap_or(false)
        })
        .map(Path::to_path_buf)
}

/// The first value of `xs` given twice.
fn repeated<T: PartialEq>(xs: &[T]) -> Option<&T> {
    xs.iter()
        .enumerate()
        .find_map(|(i, x)| xs[..i].contains(x).then_some(x))
}

/// `OPBENCH_DTYPE`: the element types asked for, each once (unset: the device's default).
fn dtypes_from_env() -> Result<Option<Vec<DType>>, String> {
    let Some(v) = var("OPBENCH_DTYPE") else {
        return Ok(None);
    };
    let ds = v
        .split(',')
        .map(|d| {
            DType::parse(d.trim())
                .ok_or_else(|| format!("OPBENCH_DTYPE: unknown dtype `{d}` (f32, f16, bf16)"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    match repeated(&ds) {
        Some(d) => Err(format!("OPBENCH_DTYPE: `{d}` given twice")),
        None => Ok(Some(ds)),
    }
}

/// `OPBENCH_MODES`: the modes asked for, each once (unset: pipelined and synced).
fn modes_from_env() -> Result<Vec<Mode>, String> {
    let modes = match var("OPBENCH_MODES") {
        None => vec![Mode::Pipelined, Mode::Synced],
        Some(v) => v
            .split(',')
            .map(|m| {
                m.trim()
                    .parse::<Mode>()
                    .map_err(|e| format!("OPBENCH_MODES: {e}"))
            })
            .collect::<Result<Vec<_>, _>>()?,
    };
    match repeated(&modes) {
        Some(m) => Err(format!("OPBENCH_MODES: `{m}` given twice")),
        None => Ok(modes),
    }
}

/// `OPBENCH_THREADS`: 1 to 4 × the cores (unset: torch's default).
fn threads_from_env() -> Result<Option<usize>, String> {
    if var("OPBENCH_THREADS").is_none() {
        return Ok(None);
    }
    let t: usize = number("OPBENCH_THREADS", 0)?;
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    if t == 0 || t > 4 * cores {
        return Err(format!(
            "OPBENCH_THREADS={t}: expected 1 to {} (4 × the {cores} cores here)",
            4 * cores
        ));
    }
    Ok(Some(t))
}

/// `OPBENCH_CPUS`: a CPU list (`2`, `0-3,6`) of CPUs this process may use.
fn cpus_from_env() -> Result<Option<Vec<usize>>, String> {
    let Some(list) = var("OPBENCH_CPUS") else {
        return Ok(None);
    };
    let cpus = wire::cpus::parse(&list).map_err(|e| format!("OPBENCH_CPUS={list}: {e}"))?;
    wire::cpus::usable(&cpus).map_err(|e| format!("OPBENCH_CPUS={list}: {e}"))?;
    Ok(Some(cpus))
}

/// `OPBENCH_TIMING_CPU`: one CPU of `OPBENCH_CPUS` (or of those this process may use), or
/// `any` (as unset).
fn timing_cpu_from_env(cpus: Option<&[usize]>) -> Result<Option<usize>, String> {
    let Some(v) = var("OPBENCH_TIMING_CPU").filter(|v| v.trim() != "any") else {
        return Ok(None);
    };
    let c: usize = v
        .trim()
        .parse()
        .map_err(|_| format!("OPBENCH_TIMING_CPU={v}: not a CPU number"))?;
    let may = cpus.map_or_else(wire::cpus::allowed, <[usize]>::to_vec);
    if !may.contains(&c) {
        return Err(format!(
            "OPBENCH_TIMING_CPU={c}: not one of this process's CPUs ({})",
            wire::cpus::format(&may)
        ));
    }
    Ok(Some(c))
}

/// A percentage in [0, 1000] (unset: 0).
fn percentage(name: &str) -> Result<f64, String> {
    match number(name, 0.0f64)? {
        p if (0.0..=1000.0).contains(&p) => Ok(p),
        p => Err(format!("{name}={p}: expected a percentage in [0, 1000]")),
    }
}
