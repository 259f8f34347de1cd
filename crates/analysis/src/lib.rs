//! What opbench concludes from run directories: fits, predicted steps, build comparisons,
//! reports and published runs. No tch, no criterion, no C++: `opbench compare` of two
//! published ROCm runs works on a laptop with no libtorch.
//!
//! Each verb is a function from loaded runs ([`rundir::Run`]) to a struct; the `opbench`
//! binary parses arguments and prints. docs/method.md explains the models behind them.
//!
//! - [`fit::fit_run`]: overhead + work/rate per series.
//! - [`predict::predict`]: one decode step composed from a run, per [`shapes::StepPlan`].
//! - [`merge::merge`]: a run's executions (separate processes) into one run.
//! - [`compare::compare`]: a verdict per case and per family of cases between two runs.
//! - [`export`]: runs as Bencher Metric Format JSON and Apache Otava CSV.
//! - [`report::write_report`]: report.md and its SVG plots.
//! - [`publish::publish`]: a run copied into `results/`, with its fits and report, and
//!   listed in `results/README.md`.
//! - [`knob::KnobPair`]: a runtime knob's paired comparison, priced into a step by
//!   [`help::levers`].
//! - [`traced::step_check`]: the trace pass's decode step against predict's plan.
//! - [`history::history`]: many runs as series of builds per machine, with change points
//!   (E-Divisive with a t-test); [`history_report::write_history_report`] draws the trends.

pub mod answer;
pub mod build;
pub mod busy;
pub mod ceiling;
pub mod compare;
pub mod explain;
pub mod export;
pub mod fit;
pub mod generate;
pub mod help;
pub mod history;
pub mod history_report;
pub mod ingest;
pub mod knob;
pub mod merge;
pub mod predict;
pub mod publish;
pub mod report;
pub mod stack;
pub mod state;
pub mod traced;

use std::path::PathBuf;

/// Why an analysis could not be made.
#[derive(Debug, thiserror::Error)]
pub enum AnalysisError {
    /// A run directory that cannot be read or trusted.
    #[error(transparent)]
    Run(#[from] rundir::RunError),
    /// The question does not fit the data: a case the run lacks, an option out of range.
    #[error("{0}")]
    Input(String),
    /// Writing an output failed.
    #[error("{}: {message}", path.display())]
    Output { path: PathBuf, message: String },
}

impl AnalysisError {
    /// Bad input (exit code 2) rather than a failure to write (exit code 1).
    pub fn is_input(&self) -> bool {
        !matches!(self, AnalysisError::Output { .. })
    }

    pub(crate) fn output(path: &std::path::Path, e: impl std::fmt::Display) -> Self {
        AnalysisError::Output {
            path: path.to_path_buf(),
            message: e.to_string(),
        }
    }
}

/// A file-name-safe form of a label: lowercase ASCII letters, digits and `.`, every other
/// run of characters one `-`, none at either end.
pub fn slug(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        if c.is_ascii_alphanumeric() || c == '.' {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    out.trim_matches('-').to_string()
}
