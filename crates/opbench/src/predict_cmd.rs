//! `opbench predict`: its options and how they default to what the run measured.

use std::path::PathBuf;

use analysis::predict::{HostModel, HostState};
use clap::builder::{PossibleValuesParser, TypedValueParser};
use rundir::{DType, DeviceId, Mode, Phase, Run};
use shapes::{ModelConfig, StepProfile};

use crate::{CliError, print, run_defaults};

#[derive(Debug, clap::Args)]
pub struct PredictArgs {
    /// The run directory (target/opbench/runs/RUN_ID).
    run: PathBuf,
    /// Model: a shapes/ name or a path to a Hugging Face config.json (default: the one
    /// model the run timed).
    #[arg(long)]
    model: Option<String>,
    /// Batch size B.
    #[arg(long, allow_hyphen_values = true)]
    batch: String,
    /// Cache length L before a decode step (default: the one L the run's decode rows of
    /// the model timed); a prefill takes --prompt.
    #[arg(long, conflicts_with = "prompt", allow_hyphen_values = true)]
    ctx: Option<String>,
    /// decode: one new token per sequence on a cache of --ctx; prefill: a prompt of
    /// --prompt tokens into an empty cache (the time to first token), composed from the op
    /// crates' prefill rows (SDPA causal over S×S) and checked against the decode crate's
    /// prefill step.
    #[arg(long, default_value = "decode", value_parser = PossibleValuesParser::new(["decode", "prefill"]).try_map(|s| s.parse::<Phase>()))]
    phase: Phase,
    /// The prompt's length S (with --phase prefill).
    #[arg(long, allow_hyphen_values = true)]
    prompt: Option<String>,
    /// How the step is written: hf-eager (transformers' ops, from tch), fused, or
    /// transformers (the user's stack from Python: rows from scripts/peer.py).
    #[arg(long, default_value = "hf-eager", value_parser = PossibleValuesParser::new(StepProfile::EVERY.map(StepProfile::as_str)).try_map(|s| s.parse::<StepProfile>()))]
    profile: StepProfile,
    /// Device label in the run, e.g. cuda:0 (default: its GPU if it has one, else cpu).
    #[arg(long)]
    device: Option<DeviceId>,
    /// dtype (default: f16 on a GPU, f32 on the CPU).
    #[arg(long, value_parser = PossibleValuesParser::new(["f32", "f16", "bf16"]).try_map(|s| s.parse::<DType>()))]
    dtype: Option<DType>,
    /// Timing mode to compose: pipelined is what an eager decode loop sees; graph prices the
    /// step captured once and replayed (CUDA/HIP graphs) from the run's graph_cold rows
    /// where it has them, else its graph rows (graph_cold and pipelined_cold are refused:
    /// they are not a step of their own).
    #[arg(long, default_value = "pipelined", value_parser = choice!(Mode))]
    mode: Mode,
    /// How host costs measured alone are priced in a GPU eager step. Default: controlled
    /// where the run has the profile's layer rows (the best-measured: on the H200, the tch
    /// steps within ±2% in the host's fast state, 2026-12-01; the HF step within ±8% and
    /// generate() within ±15% at its layer beside, 2026-12-02), else as-measured; the
    /// report uses the same default. Measured accuracy of the others, H200, 2026-11-30: as-measured and
    /// context came −1 to −44% of the eager steps over three leases, low by the host's
    /// context and state. as-measured; context
    /// (times the context factor: the profile's own layer in sequence over its calls each
    /// alone where the run has those rows, else the floor's mixed / blocked); controlled
    /// (scaled so that one layer's calls cost what the profile's layer_beside row — the
    /// decode crate's, scripts/peer.py's for transformers — timed before every sample of
    /// the step, measured: the step's own host state and sequence; else scaled to the step's own process — its layer's calls
    /// each alone over what the rows price them at — or, without layer rows, each row by its
    /// control; then times the context factor). The others are printed beside it. On the
    /// CPU no host model applies; the transformers step there adds what its layer's calls
    /// cost more in sequence than each alone (in_sequence: layer_flat − layer_calls).
    #[arg(long, value_parser = PossibleValuesParser::new(HostModel::ALL.map(HostModel::as_str)).try_map(|s| s.parse::<HostModel>()))]
    host_model: Option<HostModel>,
    /// Which of each host-timed row's samples price it: typical (its median) or fast (the
    /// samples whose state was clean — no steal, no burst of involuntary switches, the
    /// host control around it within 1.2× its median, no stretch of its calls over 2× the
    /// median per call, no GPU throttled below the case's usual clock — where the samples record
    /// their state, at least three of them; else the 10th percentile of its samples over
    /// the run's executions), for the rows and the measured step alike. In either state the
    /// rows sampled in rounds with another are read against it pair by pair (the layer
    /// beside the step by their ratio, the decode crate's where a step sample is at most
    /// 100 ms; the peer's step variants, generate() per token and the framework parts by
    /// their differences). The other is printed beside it.
    #[arg(long, default_value = "typical", value_parser = PossibleValuesParser::new(HostState::ALL.map(HostState::as_str)).try_map(|s| s.parse::<HostState>()))]
    host_state: HostState,
    /// A runtime knob measured in pairs: an `opbench ab` table (runs/RUN-ab.csv) of this
    /// build against itself with the knob set on the candidate side (`scripts/bench
    /// --knobs` writes them). Each becomes a row of what would help: the step priced on
    /// this run's rows moved by the pair's ratios, the step measured with it, the
    /// verdict, and what to do. Repeatable.
    #[arg(long = "knob", value_name = "AB_CSV")]
    knobs: Vec<PathBuf>,
}

pub fn run(args: &PredictArgs) -> Result<u8, CliError> {
    let loaded = Run::load(&args.run)?;
    if loaded.ok_rows().next().is_none() {
        return Err(CliError::input(format!(
            "{}: results.csv has no ok row to predict from (scripts/bench measures them)",
            args.run.display()
        )));
    }
    let name = run_defaults::model(args.model.as_deref(), &loaded).map_err(CliError::input)?;
    let model = ModelConfig::by_name(&name).map_err(|e| CliError::input(e.to_string()))?;
    let batch = whole("--batch", &args.batch, "the batch size B", 1)?;
    // the cold modes' rows are read by the modes they refine, not composed on their own
    if matches!(args.mode, Mode::GraphCold | Mode::PipelinedCold) {
        return Err(CliError::input(format!(
            "--mode {}: not a step of its own; --mode graph uses the run's graph_cold rows where it has them",
            args.mode
        )));
    }
    let (device, dtype, ctx, unmeasured_l) = predict_target(args, &loaded, &model.name)?;
    let q = analysis::predict::Query {
        model: &model,
        batch,
        ctx,
        phase: args.phase,
        profile: args.profile,
        device,
        dtype,
        mode: args.mode,
        host: HostModel::AsMeasured,
    };
    if let Some(p) = args.knobs.iter().find(|p| !p.is_file()) {
        return Err(CliError::input(format!(
            "--knob {}: no such file (an `opbench ab` table, runs/RUN-ab.csv, as `scripts/bench --knobs` writes)",
            p.display()
        )));
    }
    let knobs = args
        .knobs
        .iter()
        .map(|p| analysis::knob::KnobPair::load(p))
        .collect::<Result<Vec<_>, _>>()?;
    let e = analysis::explain::explain(&loaded, q, args.host_model, args.host_state, &knobs)
        .map_err(|e| match (&unmeasured_l, e) {
            // the length was the grid's, not the run's: say so in the same line
            (Some(note), analysis::AnalysisError::Input(m)) => {
                CliError::input(format!("{m}; {note}"))
            }
            (_, e) => e.into(),
        })?;
    print::explanation(&e);
    Ok(0)
}

/// A whole number option's value, at least `min`: else a one-line error naming the value
/// and what is expected.
fn whole(option: &str, value: &str, what: &str, min: usize) -> Result<usize, CliError> {
    match value.trim().parse::<usize>() {
        Ok(n) if n >= min => Ok(n),
        _ => Err(CliError::input(format!(
            "{option} {value}: expected {what}, a whole number of at least {min}"
        ))),
    }
}

/// The device, dtype and cache (or prompt) length a prediction is for, and, where the run
/// timed no cache length and the length is its grid profile's, a note saying so.
fn predict_target(
    args: &PredictArgs,
    run: &Run,
    model: &str,
) -> Result<(rundir::DeviceId, DType, usize, Option<String>), CliError> {
    let device = args
        .device
        .unwrap_or_else(|| analysis::predict::default_device(run));
    let dtype = args.dtype.unwrap_or(if device.is_gpu() {
        DType::F16
    } else {
        DType::F32
    });
    let ctx = args
        .ctx
        .as_deref()
        .map(|l| whole("--ctx", l, "the cache length L", 0))
        .transpose()?;
    let prompt = args
        .prompt
        .as_deref()
        .map(|s| whole("--prompt", s, "the prompt's length S", 1))
        .transpose()?;
    let mut note = None;
    let ctx = match (args.phase, ctx, prompt) {
        (Phase::Decode, None, None)
            if analysis::predict::measured_lengths(run, model).is_empty() =>
        {
            // no attention or cache rows to take L from: the run's grid profile's longest,
            // so that what else the step lacks is said with it, in one line
            let profile = analysis::predict::run_profile(run);
            let l = shapes::Grid::load_default().ok().and_then(|g| {
                g.profiles
                    .get(&profile)
                    .and_then(|p| p.decode_ctx.iter().max().copied())
            });
            let Some(l) = l else {
                return Err(CliError::input(format!(
                    "--ctx: the run has no decode rows of {model} to take L from; give --ctx"
                )));
            };
            note = Some(format!(
                "L = {l} is the longest of its profile {profile} (the run timed no attention or cache rows; --ctx chooses)"
            ));
            l
        }
        (Phase::Decode, l, None) => {
            run_defaults::decode_ctx(l, run, model).map_err(CliError::input)?
        }
        (Phase::Prefill, None, Some(s)) => s,
        (Phase::Decode, _, _) => {
            return Err(CliError::input(
                "--phase decode: give the cache length with --ctx (not --prompt)",
            ));
        }
        (Phase::Prefill, _, _) => {
            return Err(CliError::input(
                "--phase prefill: give the prompt's length with --prompt (at least 1; not --ctx)",
            ));
        }
    };
    Ok((device, dtype, ctx, note))
}
