//! `opbench`: the command line over the run directories the op benches write.
//!
//! Verbs (DESIGN.md "CLI contract"): `shapes`, `env`, `fit`, `predict`, `compare`,
//! `report`, `publish`. Bad input (an unknown model, a missing file or column) is a
//! one-line error naming what is wrong and exit code 2; nothing panics.

mod compare_cmd;
mod fit_cmd;
mod predict_cmd;
mod publish_cmd;
mod report_cmd;
mod run;
mod shapes_cmd;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Where a Qwen3 decode step's time goes on this PyTorch build: shapes, environment,
/// fits and predictions from opbench runs.
#[derive(Debug, Parser)]
#[command(name = "opbench", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    verb: Verb,
}

#[derive(Debug, Subcommand)]
enum Verb {
    /// The per-op problems of a model's decoder step: dims, FLOPs, bytes, calls per step.
    Shapes(shapes_cmd::Args),
    /// This machine's environment fingerprint (libtorch, backend, device facts) as JSON.
    Env {
        /// Devices to describe: cpu, gpu or all visible.
        #[arg(long, default_value = "all")]
        device: String,
    },
    /// Fit overhead + work/rate per series of a run; writes RUN/fits.csv.
    Fit {
        /// The run directory (target/opbench/runs/RUN_ID).
        run: std::path::PathBuf,
    },
    /// Compose a decode step from a run's measurements and fits: ms/step, tokens/s, breakdown.
    Predict(predict_cmd::Args),
    /// Compare two runs case by case: faster, slower, same or ambiguous, and what changed
    /// kernel or status. Exit 1 on a regression.
    Compare(compare_cmd::Args),
    /// Write RUN/report.md with SVG plots: time vs batch with fits and the floor, bandwidth,
    /// host vs device, GPU over CPU, the predicted decode step.
    Report {
        /// The run directory.
        run: std::path::PathBuf,
    },
    /// Copy a run to results/DATE-DEVICE-BACKEND-torchVERSION/ with a README, fits and
    /// report. Never overwrites.
    Publish(publish_cmd::Args),
}

/// A failure of a verb: exit code and one line for stderr.
#[derive(Debug)]
pub struct Failure {
    pub code: u8,
    pub message: String,
}

impl Failure {
    /// Bad input: exit code 2.
    pub fn input(message: impl Into<String>) -> Self {
        Failure {
            code: 2,
            message: message.into(),
        }
    }
}

fn env_verb(device: &str) -> Result<u8, Failure> {
    let choice = harness::DeviceChoice::parse(device)
        .ok_or_else(|| Failure::input(format!("--device {device}: expected cpu, gpu or all")))?;
    let devices = harness::select_devices(choice, 0).map_err(Failure::input)?;
    let env = harness::EnvInfo::collect("none", &devices);
    println!("{}", env.to_json());
    Ok(0)
}

fn main() -> ExitCode {
    // `opbench fit RUN | head` should end quietly, as other command-line tools do
    #[cfg(unix)]
    // SAFETY: restoring the default disposition of SIGPIPE before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = Cli::parse();
    let result = match cli.verb {
        Verb::Shapes(args) => shapes_cmd::run(&args),
        Verb::Env { device } => env_verb(&device),
        Verb::Fit { run } => fit_cmd::run(&run),
        Verb::Predict(args) => predict_cmd::run(&args),
        Verb::Compare(args) => compare_cmd::run(&args),
        Verb::Report { run } => report_cmd::run(&run),
        Verb::Publish(args) => publish_cmd::run(&args),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(f) => {
            eprintln!("opbench: {}", f.message);
            ExitCode::from(f.code)
        }
    }
}
