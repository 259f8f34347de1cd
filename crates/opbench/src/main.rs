//! `opbench`: the command line over the run directories the op benches write.
//!
//! Verbs: `shapes`, `settings`, `tolerances`, `layout`, `doctor`, `env`, `ingest`, `fit`,
//! `predict`, `merge`, `compare`, `ab`, `peer`, `state`, `report`, `publish`, `history`,
//! `export`. Everything but `env` and `doctor`'s library half is the `analysis` crate's and
//! needs no libtorch; those describe this machine through libtorch, in builds with the
//! `torch` feature (scripts/bench and scripts/doctor build it so). Bad input (an unknown model, a missing file or column, a value out of
//! range) is a one-line error naming what is wrong and exit code 2; nothing panics.

mod ab_cmd;
mod doctor_cmd;
mod peer_cmd;
mod print;
mod run_defaults;
mod shapes_cmd;

use std::path::PathBuf;
use std::process::ExitCode;

use analysis::AnalysisError;
use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::{Parser, Subcommand, ValueEnum};
use rundir::{DType, Mode, Run};

/// Where a Qwen3 decode step's time goes on this PyTorch build: shapes, environment,
/// fits and predictions from opbench runs.
#[derive(Debug, Parser)]
#[command(name = "opbench", version, about, long_about = None, max_term_width = 100)]
struct Cli {
    #[command(subcommand)]
    verb: Verb,
}

/// Output formats of the table verbs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Md,
    Csv,
}

/// A clap parser for a closed set that lists its values in `--help`.
macro_rules! choice {
    ($t:ty) => {
        PossibleValuesParser::new(<$t>::ALL.iter().map(|v| v.as_str())).try_map(|s| s.parse::<$t>())
    };
}

// after `choice!`, which its options use
mod predict_cmd;
use predict_cmd::PredictArgs;

#[derive(Debug, Subcommand)]
enum Verb {
    /// The per-op problems of a model's decoder step: dims, FLOPs, bytes, calls per step.
    Shapes(shapes_cmd::Args),
    /// Append the rows scripts/peer.py measured (RUN/peer.csv: raw samples and each case's
    /// error against float64) to RUN, judged by the one tolerance table and estimated by
    /// the one estimator.
    Ingest {
        /// The run directory.
        run: PathBuf,
        /// The peer's file (default RUN/peer.csv).
        #[arg(long)]
        file: Option<PathBuf>,
    },
    /// The run directory's layout (folder and file names, the run id's format) as JSON, or
    /// one name with --get: what the scripts read instead of keeping a copy.
    Layout {
        /// Print only this name's value (runs, executions, env, results, samples, peer,
        /// traces, kernels, fits, report, run_id_format).
        #[arg(long)]
        get: Option<String>,
    },
    /// The tolerance table every case is judged by: dtype, check (op or step), the largest
    /// relative error against the float64 reference (CSV).
    Tolerances,
    /// Every OPBENCH_* variable: default, who reads it (the bench binaries, scripts/bench,
    /// scripts/calibrate, the build), what it means, and its value where set.
    Settings {
        /// `text` (all, grouped by kind) or `md` (the README's table of users' settings).
        #[arg(long, default_value = "text", value_parser = ["text", "md"])]
        format: String,
    },
    /// What this machine's torch stack is and what opbench can measure on it: the torch
    /// build, every GPU library tried and why it failed, the HIP runtime, the GPU and its
    /// arch, SDPA backends, BLAS, graph capture, tracer, Triton, the knobs for this arch,
    /// and a decode step's ops on the device with their kernels and host syncs; then the
    /// next commands. Exit 0 when what scripts/bench is asked to measure works, else 1.
    Doctor(doctor_cmd::Args),
    /// This machine's environment fingerprint (libtorch, backend, device facts) as JSON.
    /// Needs a build with the `torch` feature.
    Env {
        /// Devices to describe: cpu, gpu or all visible.
        #[arg(long, default_value = "all", value_parser = ["cpu", "gpu", "all"])]
        device: String,
    },
    /// How far a run's state flags explain its slow samples: per timer (the bench binaries,
    /// the peer's HF rows, its Python op rows) and execution, the samples over 1.3× their
    /// case's median and how many carry a state flag, the other samples and how many do,
    /// and each flag's count (host-slow, host-level, stalled, steal, switched, gpu-throttled;
    /// rules in docs/schema.md, samples.csv), each sample judged within its case and
    /// execution. Samples that record no state are not judged. For a run of several
    /// executions, two more tables: the same across its executions (slow against the case's
    /// median in its fastest execution, judged by every flag, host-level too: a case's
    /// execution whose host control ran over 1.2× and time per call over 1.3× its fastest
    /// execution's), and per timer, batch and execution each case's host control and time
    /// per call (medians) against its fastest execution's, the median over cases.
    State {
        /// The run directory.
        run: PathBuf,
        /// The timing mode whose samples are judged.
        #[arg(long, default_value = "pipelined", value_parser = choice!(Mode))]
        mode: Mode,
        /// Only whether the machine was busy (most of an op's samples switched out or
        /// stolen): its line, recorded in RUN/env.json, or nothing (scripts/bench's end).
        #[arg(long)]
        busy: bool,
    },
    /// Fit overhead + work/rate per series of a run; writes RUN/fits.csv.
    Fit {
        /// The run directory (target/opbench/runs/RUN_ID).
        run: PathBuf,
    },
    /// Compose a decode step from a run's measurements and fits: ms/step, tokens/s, breakdown;
    /// with --profile transformers and the peer's generate() rows, one new token of the
    /// user's `model.generate()` too (tokens/s, split four ways, against the measured one).
    /// A decode step ends with what would help: each change priced, ranked by tokens/s.
    Predict(PredictArgs),
    /// Merge a run's executions (RUN/executions/N/, one per process) into RUN's
    /// results.csv and samples.csv: one row per case with the between-execution spread.
    Merge {
        /// The run directory.
        run: PathBuf,
    },
    /// Compare two stored runs: the verdict and its reasons first, then the families, then
    /// each case: slower or faster (a discovery beyond the threshold), same (inside ± the
    /// threshold) or ambiguous (±mde), and what changed kernel or status. A family (3 cases
    /// or more) carries each process's term and is slower only wholly beyond its threshold;
    /// the two sides of one paired run are matched round by round. Exit 0: no regression
    /// found; 1: a regression, with why; 2: bad input; 3: no speed verdict (one run on both
    /// sides, two kinds of machine or timing methods, or nothing judged), with why.
    Compare(CompareArgs),
    /// Compare two builds in pairs: both builds' bench binaries run at once as workers and
    /// take turns sample by sample, in rounds of fresh processes, until each case's verdict
    /// is sure (same within ±3%, slower or faster beyond it) or the budget is spent
    /// (ambiguous, ±X%).
    /// Writes runs/RUN-base, -cand, -ab.csv and -compare.md. Exit 1 on a regression,
    /// with its reasons; 2 on bad input.
    Ab(ab_cmd::Args),
    /// The user's own stack measured into RUN: HF transformers' step, generate(), decoder
    /// layer and op calls from Python (scripts/peer.py, run as a worker: it builds the sites
    /// and times a sample when asked; this decides the cases, warm-up, calls, rounds and
    /// tolerances, and writes RUN/peer.csv and the rows).
    Peer(peer_cmd::Args),
    /// Write RUN/report.md with SVG plots: time vs batch with fits and the floor, bandwidth,
    /// host vs device, GPU over CPU, the predicted decode step.
    Report {
        /// The run directory.
        run: PathBuf,
    },
    /// Copy a run to results/DATE-DEVICE-BACKEND-torchVERSION/ with a README, fits and
    /// report, and list it in results/README.md. Never overwrites; refuses incomplete runs;
    /// writes nothing on failure.
    Publish(PublishArgs),
    /// Track builds over many runs: series per machine, ordered by build, with change points
    /// per case (E-Divisive means with a t-test). Exit 1 when the newest build of a series
    /// begins a regression.
    History(HistoryArgs),
    /// Write runs in other tools' formats to stdout: `bmf` (Bencher Metric Format JSON of
    /// one run: per case its median latency in ns with the interval's bounds) or `otava`
    /// (an Apache Otava CSV of many runs: one row per run in start order, a column per case).
    Export(ExportArgs),
}

#[derive(Debug, clap::Args)]
pub struct ExportArgs {
    /// bmf (one run) or otava (any number of runs).
    #[arg(long, value_enum)]
    format: ExportFormat,
    /// Run directories, or folders of them (results/, an output folder's runs/), as
    /// history reads them.
    #[arg(required = true)]
    runs: Vec<PathBuf>,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum ExportFormat {
    Bmf,
    Otava,
}

fn export_verb(args: &ExportArgs) -> Result<u8, CliError> {
    let runs = analysis::history::find_runs(&args.runs)?
        .iter()
        .map(|d| Run::load(d))
        .collect::<Result<Vec<_>, _>>()?;
    match args.format {
        ExportFormat::Bmf => {
            let [run] = runs.as_slice() else {
                return Err(CliError::input(format!(
                    "export --format bmf takes one run, got {}",
                    runs.len()
                )));
            };
            let json = analysis::export::bmf(run);
            println!(
                "{}",
                serde_json::to_string_pretty(&json).unwrap_or_default()
            );
        }
        ExportFormat::Otava => print!("{}", analysis::export::otava_csv(&runs)?),
    }
    for run in &runs {
        if let Some(line) = analysis::export::left_out(run) {
            eprintln!("opbench export: {line}");
        }
    }
    Ok(0)
}

#[derive(Debug, clap::Args)]
pub struct HistoryArgs {
    /// Run directories, or folders of them (results/, an output folder's runs/).
    #[arg(default_value = "results")]
    dirs: Vec<PathBuf>,
    /// Points (builds) per search window; windows overlap by half.
    #[arg(long, default_value_t = 50)]
    window: usize,
    /// Largest p of the t-test for a change point to stand.
    #[arg(long, default_value_t = 0.001)]
    max_p: f64,
    /// Smallest step that counts, in percent of the time before it.
    #[arg(long, default_value_t = 5.0)]
    min_magnitude: f64,
    /// Timing modes to track, comma-separated. Host-timed modes use only runs with two or
    /// more executions (OPBENCH_EXECUTIONS), at equal host speed.
    #[arg(long, value_delimiter = ',', default_value = "device,pipelined", value_parser = choice!(Mode))]
    mode: Vec<Mode>,
    /// md: the series and their changes; csv: one line per change.
    #[arg(long, value_enum, default_value = "md")]
    format: Format,
    /// Also write DIR/history.md with a trend SVG per series and op.
    #[arg(long)]
    out: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
pub struct CompareArgs {
    /// The base run directory.
    base: PathBuf,
    /// The candidate run directory.
    cand: PathBuf,
    /// Smallest change of one case that counts, in percent.
    #[arg(long, default_value_t = 100.0 * analysis::compare::DEFAULT_THRESHOLD)]
    threshold: f64,
    /// Smallest shared shift of a family of cases (all host-bound, all device, one op in one
    /// mode, the dispatch floor) that counts, in percent.
    #[arg(long, default_value_t = 100.0 * analysis::compare::DEFAULT_FAMILY_THRESHOLD)]
    family_threshold: f64,
    /// False-discovery rate over the cases (Benjamini–Hochberg), and over the families; the
    /// intervals are at 1 − alpha.
    #[arg(long, default_value_t = analysis::compare::DEFAULT_ALPHA)]
    alpha: f64,
    /// md: a report that leads with the families, then the changed cases; csv: every case;
    /// families: the families as CSV.
    #[arg(long, value_enum, default_value = "md")]
    format: CompareFormat,
    /// What host-timed, host-bound cases are divided by: `host`, the build-independent host
    /// work timed before each sample (a build whose every torch call is dearer shows);
    /// `torch`, the dispatch floor's add (cancels the host's speed and the build's dispatch
    /// alike); `raw`, nothing.
    #[arg(long, value_enum, default_value = "host")]
    control: ControlArg,
    /// Compare host-timed cases raw (the same as `--control raw`; not with `--control`).
    #[arg(long, conflicts_with = "control")]
    raw: bool,
    /// The drift between boots added to the intervals: `auto` when the runs are of two
    /// boots (another boot id, or started over 3 hours apart), `off`, or a percentage
    /// (a case's and a family's standard deviation alike).
    #[arg(long, default_value = "auto")]
    drift: String,
    /// md: every family and case (the default screen shows the verdict and the few that
    /// matter).
    #[arg(long)]
    all: bool,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum CompareFormat {
    Md,
    Csv,
    Families,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum ControlArg {
    Host,
    Torch,
    Raw,
}

#[derive(Debug, clap::Args)]
pub struct PublishArgs {
    /// The run directory.
    run: PathBuf,
    /// Where published runs live.
    #[arg(long, default_value = "results")]
    results: PathBuf,
    /// The exact command(s) that made the run, for the README (default: rebuilt from env.json).
    #[arg(long)]
    command: Option<String>,
    /// What a user compares against this run for (one line, in the README and the index).
    #[arg(long)]
    purpose: String,
    /// Notes for the README (what a reader must know about this run).
    #[arg(long)]
    notes: Option<String>,
    /// Appended to the published name as `-<tag>`: tells apart two runs of one build, device
    /// and day (letters, digits, `.` and `-`).
    #[arg(long)]
    tag: Option<String>,
}

/// Why a verb failed: its exit code and one line for stderr.
#[derive(Debug)]
pub struct CliError {
    pub code: u8,
    pub message: String,
}

impl CliError {
    /// Bad input: exit code 2.
    pub fn input(message: impl Into<String>) -> Self {
        CliError {
            code: 2,
            message: message.into(),
        }
    }
}

impl From<AnalysisError> for CliError {
    fn from(e: AnalysisError) -> Self {
        CliError {
            code: if e.is_input() { 2 } else { 1 },
            message: e.to_string(),
        }
    }
}

impl From<rundir::RunError> for CliError {
    fn from(e: rundir::RunError) -> Self {
        AnalysisError::from(e).into()
    }
}

#[cfg(feature = "torch")]
fn env_verb(device: &str) -> Result<u8, CliError> {
    let choice = harness::DeviceChoice::parse(device)
        .ok_or_else(|| CliError::input(format!("--device {device}: expected cpu, gpu or all")))?;
    let devices = harness::select_devices(choice, 0).map_err(CliError::input)?;
    println!("{}", harness::collect_env("none", &devices).to_json());
    Ok(0)
}

#[cfg(not(feature = "torch"))]
fn env_verb(_device: &str) -> Result<u8, CliError> {
    Err(CliError::input(
        "env: this opbench was built without libtorch; build it with `--features torch` \
         (scripts/bench does) to describe this machine",
    ))
}

/// `state RUN --busy`: the busy-machine line, recorded in env.json, or nothing.
fn busy_verb(dir: &std::path::Path) -> Result<u8, CliError> {
    let run = Run::load(dir)?;
    let Some(busy) = analysis::busy::judge(&run)? else {
        return Ok(0);
    };
    let line = busy.line(dir);
    let mut env = run.env.clone().unwrap_or_default();
    env.busy = Some(line.clone());
    let path = dir.join(rundir::layout::ENV);
    std::fs::write(&path, env.to_json() + "\n").map_err(|e| CliError {
        code: 1,
        message: format!("{}: {e}", path.display()),
    })?;
    println!("{line}");
    Ok(0)
}

fn state_verb(dir: &std::path::Path, mode: Mode) -> Result<u8, CliError> {
    let run = Run::load(dir)?;
    use analysis::state::Scope;
    let table = analysis::state::tally(&run, mode, Scope::Execution)?;
    if table.is_empty() {
        return Err(CliError {
            code: 2,
            message: format!(
                "{}: no {} sample records the host's state (runs before 2026-12-01 have none)",
                dir.display(),
                mode.as_str()
            ),
        });
    }
    print::state(&table, mode, Scope::Execution);
    let levels = analysis::state::levels(&run, mode)?;
    if !levels.is_empty() {
        print::state(
            &analysis::state::tally(&run, mode, Scope::Run)?,
            mode,
            Scope::Run,
        );
    }
    print::levels(&levels);
    Ok(0)
}

fn fit_verb(dir: &std::path::Path) -> Result<u8, CliError> {
    let run = Run::load(dir)?;
    let fits = analysis::fit::fit_run(&run);
    for (k, e) in &fits.unfitted {
        eprintln!(
            "opbench: no fit for {}/{}/{} {} {}: {e}",
            k.op, k.variant, k.site, k.device, k.mode
        );
    }
    let rows: Vec<_> = fits.fitted.iter().map(|f| f.row()).collect();
    let path = dir.join(rundir::layout::FITS);
    rundir::write_fits(&path, &rows).map_err(|e| CliError {
        code: 1,
        message: e.to_string(),
    })?;
    print::fits(&rows);
    println!("opbench: {} fits written to {}", rows.len(), path.display());
    Ok(0)
}

fn merge_verb(dir: &std::path::Path) -> Result<u8, CliError> {
    let m = analysis::merge::merge(dir)?;
    for (path, why) in &m.skipped {
        eprintln!("opbench: execution {} skipped: {why}", path.display());
    }
    println!(
        "opbench: merged {} executions ({}) into {}: {} cases, {} not measured in every execution",
        m.executions.len(),
        m.executions
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(", "),
        m.dir.display(),
        m.cases,
        m.partial
    );
    Ok(0)
}

fn compare_verb(args: &CompareArgs) -> Result<u8, CliError> {
    use analysis::compare::{Control, Drift, DriftChoice};
    let mut settings = analysis::compare::Settings::new(args.threshold / 100.0, args.alpha)?
        .with_family_threshold(args.family_threshold / 100.0)?;
    settings.control = match (args.raw, args.control) {
        (true, _) | (_, ControlArg::Raw) => Control::Raw,
        (false, ControlArg::Host) => Control::Host,
        (false, ControlArg::Torch) => Control::Torch,
    };
    settings.drift = match args.drift.trim() {
        "auto" => DriftChoice::Auto,
        "off" => DriftChoice::Off,
        pct => match pct.parse::<f64>() {
            Ok(p) if (0.0..100.0).contains(&p) => DriftChoice::Given(Drift {
                case: (1.0 + p / 100.0).ln(),
                shared: (1.0 + p / 100.0).ln(),
            }),
            _ => {
                return Err(CliError {
                    code: 2,
                    message: format!(
                        "--drift {pct}: expected auto, off or a percentage in [0, 100)"
                    ),
                });
            }
        },
    };
    let base = Run::load(&args.base)?;
    let cand = Run::load(&args.cand)?;
    for (side, run) in [("base", &base), ("cand", &cand)] {
        if let Some(line) = analysis::busy::line_for(run) {
            println!("{side}: {line}");
        }
    }
    let cmp = analysis::compare::compare(&base, &cand, settings)?;
    let stdout = |e: csv::Error| CliError {
        code: 1,
        message: format!("stdout: {e}"),
    };
    match args.format {
        CompareFormat::Csv => print::comparison_csv(&cmp).map_err(stdout)?,
        CompareFormat::Families => print::families_csv(&cmp).map_err(stdout)?,
        CompareFormat::Md => print::comparison_md(&base, &cand, &cmp, args.all),
    }
    Ok(cmp.exit_code())
}

fn history_verb(args: &HistoryArgs) -> Result<u8, CliError> {
    let settings = analysis::history::Settings::new(
        args.window,
        args.max_p,
        args.min_magnitude / 100.0,
        args.mode.clone(),
    )?;
    let h = analysis::history::history(&args.dirs, &settings)?;
    for (path, why) in &h.skipped {
        eprintln!("opbench: skipped {}: {why}", path.display());
    }
    match args.format {
        Format::Csv => print::history_csv(&h).map_err(|e| CliError {
            code: 1,
            message: format!("stdout: {e}"),
        })?,
        Format::Md => print::history_md(&h),
    }
    if let Some(out) = &args.out {
        let path = analysis::history_report::write_history_report(&h, out)?;
        eprintln!("opbench: wrote {}", path.display());
    }
    Ok(u8::from(h.newest_regressions() > 0))
}

fn main() -> ExitCode {
    // `opbench fit RUN | head` should end quietly, as other command-line tools do
    #[cfg(unix)]
    // SAFETY: restoring the default disposition of SIGPIPE before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(&e),
    };
    match dispatch(cli.verb) {
        Ok(code) => ExitCode::from(code),
        Err(f) => {
            // one line; or, where a message ends in a command to run (a run that lacks
            // what was asked, [`analysis::predict::Lack`]), its text wrapped at 160 and the
            // command on lines of its own, each within the width, to run as printed
            if f.message.contains('\n') {
                for line in print::wrap(&format!("opbench: {}", f.message), print::WIDTH) {
                    eprintln!("{line}");
                }
            } else {
                eprintln!("opbench: {}", f.message);
            }
            ExitCode::from(f.code)
        }
    }
}

/// clap's answer to the command line: help and the version as clap prints them; an error
/// as one line (bad input, exit 2) naming what is wrong and where the options are listed.
fn usage_error(e: &clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(
        e.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        let _ = e.print();
        return ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2));
    }
    let text = e.render().to_string();
    let said: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("Usage:") && !l.starts_with("For more"))
        .collect();
    let said = said.join(" ");
    let verb = std::env::args()
        .nth(1)
        .filter(|v| {
            use clap::CommandFactory;
            Cli::command().find_subcommand(v).is_some()
        })
        .map_or("opbench --help".to_string(), |v| {
            format!("opbench {v} --help")
        });
    eprintln!(
        "opbench: {}; `{verb}` lists the options",
        said.strip_prefix("error: ").unwrap_or(&said)
    );
    ExitCode::from(2)
}

/// The verb run: its exit code, or what went wrong.
fn dispatch(verb: Verb) -> Result<u8, CliError> {
    match verb {
        Verb::Shapes(args) => shapes_cmd::run(&args),
        Verb::Ingest { run, file } => {
            let file = file.unwrap_or_else(|| run.join(rundir::layout::PEER));
            analysis::ingest::ingest(&run, &file)
                .map(|d| {
                    println!(
                        "opbench: ingested {} rows into {} ({} over their tolerance; {} already there, kept)",
                        d.rows,
                        run.display(),
                        d.mismatches,
                        d.kept
                    );
                    0
                })
                .map_err(CliError::from)
        }
        Verb::Layout { get } => match get {
            Some(k) => rundir::layout::ALL
                .iter()
                .find(|(name, _)| *name == k)
                .map(|(_, v)| {
                    println!("{v}");
                    0
                })
                .ok_or_else(|| {
                    let names: Vec<&str> = rundir::layout::ALL.iter().map(|(n, _)| *n).collect();
                    CliError::input(format!("--get {k}: expected one of {}", names.join(", ")))
                }),
            None => {
                let map: serde_json::Map<String, serde_json::Value> = rundir::layout::ALL
                    .iter()
                    .map(|(k, v)| ((*k).to_string(), serde_json::Value::from(*v)))
                    .collect();
                println!("{}", serde_json::Value::Object(map));
                Ok(0)
            }
        },
        Verb::Tolerances => {
            println!("dtype,check,tolerance");
            for dt in [DType::F32, DType::F16, DType::BF16] {
                for check in [shapes::Check::Op, shapes::Check::Step] {
                    println!("{dt},{},{:e}", check.as_str(), dt.tolerance(check));
                }
            }
            Ok(0)
        }
        Verb::Settings { format } => {
            if format == "md" {
                print!("{}", settings::markdown(settings::Kind::User));
            } else {
                print!("{}", settings::listing());
            }
            Ok(0)
        }
        Verb::Env { device } => env_verb(&device),
        Verb::Doctor(a) => doctor_cmd::doctor(&a),
        Verb::Fit { run } => fit_verb(&run),
        Verb::State {
            run, busy: true, ..
        } => busy_verb(&run),
        Verb::State { run, mode, .. } => state_verb(&run, mode),
        Verb::Predict(args) => predict_cmd::run(&args),
        Verb::Merge { run } => merge_verb(&run),
        Verb::Compare(args) => compare_verb(&args),
        Verb::Ab(args) => ab_cmd::run(&args),
        Verb::Peer(args) => peer_cmd::run(&args),
        Verb::Report { run } => analysis::report::write_report(&run)
            .map(|p| {
                println!("opbench: wrote {}", p.display());
                0
            })
            .map_err(CliError::from),
        Verb::History(args) => history_verb(&args),
        Verb::Export(args) => export_verb(&args),
        Verb::Publish(args) => analysis::publish::publish(&analysis::publish::Publication {
            run: args.run,
            results: args.results,
            command: args.command,
            purpose: args.purpose,
            notes: args.notes,
            tag: args.tag,
        })
        .map(|p| {
            println!("opbench: published {}", p.display());
            0
        })
        .map_err(CliError::from),
    }
}
