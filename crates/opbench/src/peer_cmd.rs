//! `opbench peer RUN`: the user's own stack (HF transformers from Python) measured into a
//! run directory. scripts/peer.py runs as a worker of the protocol (`duet::protocol`): it
//! builds the model's sites and times a sample when asked. This side decides the rest
//! (`duet::solo`): which cases, warm-up, calls a sample, rounds and their order, the
//! tolerance each error is judged by, the FLOP and byte counts, and the rows (RUN/peer.csv,
//! then `ingest`'s estimator).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use duet::driver::Factory;
use duet::protocol::{CaseName, Prepared, Sampled};
use duet::solo::{self, SoloCase, SoloSettings};
use duet::worker::{Spawn, Worker};
use rundir::{CaseKey, PeerCase, Run};
use shapes::{ModelConfig, Step, derive};

use crate::CliError;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The run directory (scripts/bench started it: its env.json gives the model, the grid
    /// profile and the budget).
    run: PathBuf,
    /// Decode batch sizes, comma-separated (default: the run's grid profile's).
    #[arg(long, value_delimiter = ',')]
    batches: Vec<usize>,
    /// Cache length L (default: the grid profile's first decode_ctx).
    #[arg(long)]
    ctx: Option<usize>,
    /// cuda or cpu (default: the GPU when torch sees one).
    #[arg(long, value_parser = ["cuda", "cpu"])]
    device: Option<String>,
    /// f32, f16 or bf16 (default: f16 on a GPU, f32 on the CPU).
    #[arg(long, value_parser = ["f32", "f16", "bf16"])]
    dtype: Option<String>,
    /// Only the op rows (`ops`) or only the step rows (`step`).
    #[arg(long, value_parser = ["ops", "step"])]
    only: Option<String>,
    /// Leave out generate() from a prompt (as it is, static cache, graphs) and the static
    /// cache's rows: the graphed one compiles for ~1 min per batch.
    #[arg(long)]
    no_user_generate: bool,
    /// Samples per case (default: the run's).
    #[arg(long)]
    samples: Option<usize>,
    /// Measurement per case in ms (default: the run's).
    #[arg(long)]
    measure_ms: Option<u64>,
    /// Warm-up per case in ms (default: the run's).
    #[arg(long)]
    warmup_ms: Option<u64>,
    /// The Python with torch (default: the one scripts/bench picks, passed as
    /// $OPBENCH_TORCH_PYTHON; else python3).
    #[arg(long)]
    python: Option<PathBuf>,
    /// A regular expression on the case keys.
    #[arg(long)]
    filter: Option<String>,
    /// Start no case (or group) after this many seconds, and make the rows of what was
    /// timed: under a hard limit, set it a few minutes short of it; a later `opbench peer`
    /// on the same run resumes with the cases left.
    #[arg(long)]
    deadline_s: Option<f64>,
}

/// What the run's env.json and the arguments settle.
struct Plan {
    model: String,
    batches: Vec<usize>,
    ctx: usize,
    execution: u32,
    settings: SoloSettings,
}

fn plan(args: &Args, env: &rundir::Env) -> Result<Plan, CliError> {
    let s = &env.settings;
    let num = |given: Option<u64>, name: &str, default: u64| -> Result<u64, CliError> {
        match (given, s.get(name)) {
            (Some(v), _) => Ok(v),
            (None, Some(v)) => v.parse().map_err(|_| {
                CliError::input(format!(
                    "env.json: settings.{name} = {v:?} is not a whole number"
                ))
            }),
            (None, None) => Ok(default),
        }
    };
    let samples = num(args.samples.map(|v| v as u64), "samples", 20)? as usize;
    if samples < 3 {
        return Err(CliError::input("--samples: at least 3"));
    }
    if let Some(d) = args.deadline_s.filter(|d| !(*d > 0.0 && d.is_finite())) {
        return Err(CliError::input(format!(
            "--deadline-s {d}: expected seconds > 0"
        )));
    }
    let (model, grid_batches, grid_ctx) = model_and_grid(
        s.get("models").map(String::as_str),
        s.get("profile").map(String::as_str),
    )?;
    let batches = if args.batches.is_empty() {
        grid_batches
    } else {
        args.batches.clone()
    };
    if batches.is_empty() || batches.contains(&0) {
        return Err(CliError::input("--batches: every batch must be at least 1"));
    }
    let ctx = args.ctx.unwrap_or(grid_ctx);
    Ok(Plan {
        model,
        batches,
        ctx,
        execution: s.get("execution").and_then(|e| e.parse().ok()).unwrap_or(1),
        settings: SoloSettings {
            samples,
            warmup: Duration::from_millis(num(args.warmup_ms, "warmup_ms", 100)?),
            measure: Duration::from_millis(num(args.measure_ms, "measure_ms", 400)?),
            seed: 1,
            deadline: args
                .deadline_s
                .map(|s| std::time::Instant::now() + Duration::from_secs_f64(s)),
        },
    })
}

/// The first of `models` (default qwen3-0.6b), and the batches and first cache length of
/// the grid `profile` (default `default`): what a peer worker is started with unless told.
pub fn model_and_grid(
    models: Option<&str>,
    profile: Option<&str>,
) -> Result<(String, Vec<usize>, usize), CliError> {
    let model = models
        .and_then(|m| m.split(',').next())
        .unwrap_or("qwen3-0.6b")
        .to_string();
    let grid = shapes::Grid::load_default().map_err(|e| CliError::input(e.to_string()))?;
    let profile = grid
        .profile(profile.unwrap_or("default"))
        .map_err(|e| CliError::input(e.to_string()))?;
    let ctx = profile.decode_ctx.first().copied().unwrap_or(1024);
    Ok((model, profile.batches.clone(), ctx))
}

/// scripts/`name` of this workspace ($OPBENCH_WS, else the current folder, else the
/// nearest folder above the executable that has it).
pub fn script(name: &str) -> Result<PathBuf, CliError> {
    let mut places: Vec<PathBuf> = settings::var_os("OPBENCH_WS")
        .map(PathBuf::from)
        .into_iter()
        .collect();
    places.push(PathBuf::from("."));
    if let Ok(exe) = std::env::current_exe() {
        places.extend(exe.ancestors().skip(1).map(Path::to_path_buf));
    }
    places
        .into_iter()
        .map(|d| d.join("scripts").join(name))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            CliError::input(format!(
                "scripts/{name} not found: set OPBENCH_WS to the workspace"
            ))
        })
}

/// What a peer worker is started with: its model, batches and cache length, and what it
/// leaves to its defaults where `None` (the GPU when torch sees one; f16 there, f32 on the
/// CPU; every site).
#[derive(Debug, Clone, Default)]
pub struct WorkerArgs {
    pub model: String,
    pub batches: Vec<usize>,
    pub ctx: usize,
    pub device: Option<String>,
    pub dtype: Option<String>,
    pub only: Option<String>,
    pub user_generate: bool,
}

/// The Python of `$OPBENCH_TORCH_PYTHON`, else python3.
pub fn default_python() -> PathBuf {
    settings::var_os("OPBENCH_TORCH_PYTHON").map_or_else(|| "python3".into(), PathBuf::from)
}

/// scripts/peer.py started as a worker in `python`, with the variables of `env` set.
pub fn worker_spawn(
    python: PathBuf,
    w: &WorkerArgs,
    mut env: Vec<(String, String)>,
    label: String,
) -> Result<Spawn, CliError> {
    let batches: Vec<String> = w.batches.iter().map(usize::to_string).collect();
    let mut a: Vec<String> = vec![
        script("peer.py")?.display().to_string(),
        duet::protocol::WORKER_FLAG.into(),
        "--model".into(),
        w.model.clone(),
        "--batches".into(),
        batches.join(","),
        "--ctx".into(),
        w.ctx.to_string(),
        "--stretches".into(),
        rundir::STRETCHES.to_string(),
        "--control-span-ns".into(),
        rundir::TORCH_CONTROL_SPAN.as_nanos().to_string(),
        "--control-chunk".into(),
        rundir::TORCH_CONTROL_CHUNK.to_string(),
        "--beside-layers".into(),
        shapes::LAYER_REPEATS.to_string(),
        "--state-keys".into(),
        rundir::WORKER_STATE_KEYS.join(","),
    ];
    for (flag, v) in [
        ("--device", &w.device),
        ("--dtype", &w.dtype),
        ("--only", &w.only),
    ] {
        if let Some(v) = v {
            a.extend([flag.to_string(), v.clone()]);
        }
    }
    if !w.user_generate {
        a.push("--no-user-generate".into());
    }
    env.push(("PYTHONUNBUFFERED".into(), "1".into()));
    Ok(Spawn {
        exe: python,
        args: a,
        env,
        label,
    })
}

fn spawn(args: &Args, plan: &Plan) -> Result<Spawn, CliError> {
    let w = WorkerArgs {
        model: plan.model.clone(),
        batches: plan.batches.clone(),
        ctx: plan.ctx,
        device: args.device.clone(),
        dtype: args.dtype.clone(),
        only: args.only.clone(),
        user_generate: !args.no_user_generate,
    };
    let python = args.python.clone().unwrap_or_else(default_python);
    worker_spawn(python, &w, Vec::new(), "scripts/peer.py".into())
}

/// The row's case: its key, counts (the model's FLOPs and bytes at its site where the
/// worker gives none), status and samples.
fn peer_case(
    c: &SoloCase,
    cfg: &ModelConfig,
    ctx: usize,
    execution: u32,
) -> Result<PeerCase, String> {
    let key = CaseKey::from_fields(&c.name.fields)?;
    let p = &c.prepared;
    let (mut dims, mut flops, mut bytes) = (p.dims.clone(), p.flops, p.bytes);
    if flops == 0 && bytes == 0 {
        let site = derive(cfg, Step::decode(key.batch, ctx))
            .into_iter()
            .find(|q| q.op == key.op && q.site == key.site);
        if let Some(q) = site {
            flops = q.checked_flops().unwrap_or(0);
            bytes = q.checked_bytes(key.dtype.size()).unwrap_or(0);
            dims = q.dims.to_string();
        }
    }
    let sample = |s: &Sampled| rundir::Sample {
        key: key.clone(),
        execution,
        iters: s.calls,
        total_ns: s.total_ns,
        control_ns: s.control_ns,
        host_ns: s.host_ns,
        state: s.state,
        pair: None,
    };
    let note = match (&p.reason, &p.note) {
        (Some(r), Some(n)) if p.status != rundir::Status::Ok => Some(format!("{r}; {n}")),
        (Some(r), _) if p.status != rundir::Status::Ok => Some(r.clone()),
        (_, n) => n.clone(),
    };
    Ok(PeerCase {
        dims,
        flops,
        bytes,
        check: p.check,
        rel_err: p.rel_err,
        status: p.status,
        note,
        execution,
        samples: c.samples.iter().map(sample).collect(),
        key,
    })
}

pub fn run(args: &Args) -> Result<u8, CliError> {
    let env = Run::env_of(&args.run)?.ok_or_else(|| {
        CliError::input(format!(
            "{}: not a run directory (no env.json); run scripts/bench first",
            args.run.display()
        ))
    })?;
    let plan = plan(args, &env)?;
    let cfg = ModelConfig::by_name(&plan.model).map_err(|e| CliError::input(e.to_string()))?;
    let spawn = spawn(args, &plan)?;
    let file = args.run.join(rundir::layout::PEER);
    let mut have: BTreeSet<CaseKey> = match Run::load(&args.run) {
        Ok(r) => r.results.iter().map(|r| r.key.clone()).collect(),
        Err(_) => BTreeSet::new(),
    };
    if file.is_file() {
        have.extend(rundir::read_peer(&file)?.into_iter().map(|c| c.key));
    }
    let skip = |c: &CaseName| CaseKey::from_fields(&c.fields).is_ok_and(|k| have.contains(&k));
    let judge = |c: &CaseName, p: &Prepared| match CaseKey::from_fields(&c.fields) {
        Ok(key) => p.over_tolerance(key.dtype).map_or(Ok(()), Err),
        Err(e) => Err(format!("its key: {e}")),
    };
    let mut factory: Factory<'_> =
        Box::new(|| spawn.start().map(|p| Box::new(p) as Box<dyn Worker>));
    let (mut n, mut failed, t0) = (0usize, None, std::time::Instant::now());
    let mut emit = |c: SoloCase| {
        n += 1;
        eprintln!(
            "opbench peer: [{:.0} s] {} {}{}",
            t0.elapsed().as_secs_f64(),
            c.name.key,
            c.prepared.status,
            if c.samples.is_empty() {
                String::new()
            } else {
                format!(", {} samples of {} calls", c.samples.len(), c.iters)
            }
        );
        let written = peer_case(&c, &cfg, plan.ctx, plan.execution)
            .map_err(|e| format!("{}: {e}", c.name.key))
            .and_then(|pc| rundir::append_peer(&file, &pc).map_err(|e| e.to_string()));
        if let Err(e) = written {
            failed.get_or_insert(e);
        }
    };
    let left = solo::run(
        &mut factory,
        args.filter.clone(),
        &skip,
        &judge,
        &plan.settings,
        &mut emit,
    )
    .map_err(|e| CliError {
        code: 1,
        message: e.to_string(),
    })?;
    if left > 0 {
        eprintln!(
            "opbench peer: the deadline passed: {left} cases not timed (run it again to resume)"
        );
    }
    if let Some(e) = failed {
        return Err(CliError {
            code: 1,
            message: e,
        });
    }
    if !file.is_file() {
        eprintln!("opbench peer: no case to time (all in the run already, or none listed)");
        return Ok(0);
    }
    let d = analysis::ingest::ingest(&args.run, &file)?;
    eprintln!(
        "opbench peer: {n} cases; ingested {} rows into {} ({} over their tolerance; {} already there, kept)",
        d.rows,
        args.run.display(),
        d.mismatches,
        d.kept
    );
    Ok(0)
}
