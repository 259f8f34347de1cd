//! `opbench predict`: its options and how they default to what the run measured.

use std::path::PathBuf;

use analysis::predict::{HostModel, HostState};
use clap::builder::{PossibleValuesParser, TypedValueParser};
use rundir::{DType, DeviceId, Mode, Phase, Run};
use shapes::{ModelConfig, StepProfile};

use crate::{CliError, print, run_defaults};

/// `opbench predict --help`: every line at most 100 characters (the verb's one-line
/// summary here, as the variant's about would print as one long line; the longer notes are
/// in docs/guide.md).
const HELP: &str = "\
Compose a decode step (or a prefill) from a run's measurements and fits: ms/step, tokens/s,
the breakdown, and what would help, each change priced and ranked; with --profile
transformers and the peer's rows, a token of the user's model.generate() first.

{usage-heading} {usage}

{all-args}";

#[derive(Debug, clap::Args)]
#[command(help_template = HELP)]
pub struct PredictArgs {
    /// The run directory (target/opbench/runs/RUN_ID).
    run: PathBuf,
    /// Model: a shapes/ name or a Hugging Face config.json (default: the run's one model).
    #[arg(long)]
    model: Option<String>,
    /// Batch size B.
    #[arg(long, allow_hyphen_values = true)]
    batch: String,
    /// Cache length L before a decode step (default: the longest the run timed).
    #[arg(long, conflicts_with = "prompt", allow_hyphen_values = true)]
    ctx: Option<String>,
    /// decode: one new token per sequence on a cache of --ctx;
    /// prefill: a prompt of --prompt tokens into an empty cache (time to first token).
    #[arg(long, verbatim_doc_comment, default_value = "decode", value_parser = PossibleValuesParser::new(["decode", "prefill"]).try_map(|s| s.parse::<Phase>()))]
    phase: Phase,
    /// The prompt's length S (with --phase prefill).
    #[arg(long, allow_hyphen_values = true)]
    prompt: Option<String>,
    /// How the step is written: hf-eager (transformers' ops, from tch), fused,
    /// or transformers (the user's stack from Python: scripts/peer.py's rows).
    #[arg(long, verbatim_doc_comment, default_value = "hf-eager", value_parser = PossibleValuesParser::new(StepProfile::EVERY.map(StepProfile::as_str)).try_map(|s| s.parse::<StepProfile>()))]
    profile: StepProfile,
    /// Device label in the run, e.g. cuda:0 (default: its GPU if it has one, else cpu).
    #[arg(long)]
    device: Option<DeviceId>,
    /// dtype (default: f16 on a GPU, f32 on the CPU).
    #[arg(long, value_parser = PossibleValuesParser::new(["f32", "f16", "bf16"]).try_map(|s| s.parse::<DType>()))]
    dtype: Option<DType>,
    /// Timing mode: pipelined (an eager decode loop), synced, device, or graph
    /// (the step captured once and replayed, from graph_cold rows, else graph rows; a GPU only).
    #[arg(long, verbatim_doc_comment, hide_possible_values = true, default_value = "pipelined", value_parser = choice!(Mode))]
    mode: Mode,
    /// How host costs measured alone are priced in a GPU eager step (the others print beside):
    ///
    /// as-measured: as each row measured them alone;
    /// context: times the context factor (the profile's layer in sequence over its calls
    ///   each alone, else the floor's mixed / blocked);
    /// controlled: scaled to the layer timed beside the step's samples (layer_beside), else
    ///   to the step's own process, else each row by its control; then the context factor.
    ///
    /// Default: controlled where the run has the profile's layer rows (the best-measured),
    /// else as-measured; the report uses the same. No host model applies on the CPU.
    #[arg(long, verbatim_doc_comment, value_parser = PossibleValuesParser::new(HostModel::ALL.map(HostModel::as_str)).try_map(|s| s.parse::<HostModel>()))]
    host_model: Option<HostModel>,
    /// Which samples price each host-timed row and the measured step: typical (the median)
    /// or fast (the samples whose recorded state was clean, else the 10th percentile).
    /// Rows sampled in rounds with another are read against it pair by pair.
    #[arg(long, verbatim_doc_comment, default_value = "typical", value_parser = PossibleValuesParser::new(HostState::ALL.map(HostState::as_str)).try_map(|s| s.parse::<HostState>()))]
    host_state: HostState,
    /// A runtime knob measured in pairs: an `opbench ab` table (runs/RUN-ab.csv, as
    /// `scripts/bench --knobs` writes) of this build against itself with the knob set.
    /// Each becomes a row of what would help. Repeatable.
    #[arg(long = "knob", value_name = "AB_CSV", verbatim_doc_comment)]
    knobs: Vec<PathBuf>,
}

pub fn run(args: &PredictArgs) -> Result<u8, CliError> {
    let loaded = Run::load(&args.run)?;
    // a machine busy with other work first: the figures below are not this machine's
    if let Some(line) = analysis::busy::line_for(&loaded) {
        println!("{line}");
    }
    if loaded.ok_rows().next().is_none() {
        return Err(CliError::input(format!(
            "{}: results.csv has no ok row to predict from (scripts/bench measures them)",
            args.run.display()
        )));
    }
    let name = run_defaults::model(args.model.as_deref(), &loaded).map_err(CliError::input)?;
    let model = ModelConfig::by_name(&name).map_err(|e| match e {
        shapes::ShapesError::UnknownModel { name, known } => unknown_model(&name, &known),
        e => CliError::input(e.to_string()),
    })?;
    let timed = run_defaults::models(&loaded);
    if !timed.is_empty() && !timed.contains(&model.name) {
        let timed: Vec<String> = timed.into_iter().collect();
        return Err(CliError::input(format!(
            "--model {name}: the run timed {} only: give --model {}, or measure it: OPBENCH_MODEL={name} scripts/bench",
            timed.join(", "),
            timed[0]
        )));
    }
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
    if let Some(why) = unmeasured_target(&loaded, device, dtype) {
        return Err(CliError::input(why));
    }
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
            (Some(note), analysis::AnalysisError::Input(m)) => CliError::input(with_note(&m, note)),
            (_, e) => e.into(),
        })?;
    print::explanation(&e);
    Ok(0)
}

/// A device or dtype the run has no ok row of (bad input, one line): the option, what the
/// run has, and how to measure what was asked; `None` where it has rows of both.
fn unmeasured_target(run: &Run, device: rundir::DeviceId, dtype: DType) -> Option<String> {
    let list = |it: &mut dyn Iterator<Item = String>| {
        it.collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect::<Vec<_>>()
            .join(", ")
    };
    if !run.ok_rows().any(|r| r.device == device) {
        let has = list(&mut run.ok_rows().map(|r| r.device.to_string()));
        return Some(format!(
            "--device {device}: the run has no rows on it (it has {has}): give --device of those"
        ));
    }
    let on: Vec<&rundir::ResultRow> = run.ok_rows().filter(|r| r.device == device).collect();
    if !on.iter().any(|r| r.dtype == dtype) {
        let has = list(&mut on.iter().map(|r| r.dtype.to_string()));
        return Some(format!(
            "--dtype {dtype}: the run has no {dtype} rows on {device} (it has {has}): give --dtype of \
             those, or measure it: OPBENCH_DTYPE={dtype} scripts/bench"
        ));
    }
    None
}

/// `--model NAME` that names no model: one line with a few of the names shapes/ has.
fn unknown_model(name: &str, known: &str) -> CliError {
    let names: Vec<&str> = known.split(", ").collect();
    CliError::input(format!(
        "--model {name}: not a model of shapes/ nor a config.json path; give one of {}, … ({} in all: shapes/*.toml)",
        names[..names.len().min(3)].join(", "),
        names.len()
    ))
}

/// A predict error with the note on where its L came from, said before the command that
/// follows it on lines of its own (where it has one).
fn with_note(message: &str, note: &str) -> String {
    const ADD: &str = "; add them into the same run";
    match message.split_once('\n') {
        Some((first, rest)) if first.contains(ADD) => {
            format!(
                "{}\n{rest}",
                first.replacen(ADD, &format!("; {note}{ADD}"), 1)
            )
        }
        _ => format!("{message}; {note}"),
    }
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
