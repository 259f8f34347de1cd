//! The run directory as types: what `env.json`, `results.csv`, `samples.csv` and
//! `fits.csv` hold, how they are written, and readers that refuse what they cannot trust.
//!
//! This crate knows no tch, criterion or C++: a laptop with no libtorch can read and
//! compare published runs. docs/schema.md is the human side of the same contract.
//!
//! - [`CaseKey`] / [`SeriesKey`]: the identity of a case and of a series (a case without its
//!   batch). Their columns are written and read in one place each ([`key`]).
//! - [`ResultRow`], [`Sample`], [`FitRow`]: one row of each CSV, with typed fields
//!   ([`Status`], [`Mode`], [`OpKind`], [`Phase`], [`DType`], [`DeviceId`]).
//! - [`Env`]: `env.json`, with its [`SCHEMA_VERSION`].
//! - [`Run::load`]: read and validate a run directory: every number finite and in range,
//!   no duplicate case, a known schema version; each failure is one [`RunError`] naming the
//!   file, line, column and value.
//! - [`RunWriter`]: append cases to a run directory as they finish.

mod csvio;
mod env;
pub mod key;
pub mod layout;
pub mod noise;
pub mod paired;
mod peer;
mod rows;
mod run;
mod sample;
mod trace;

pub use env::Env;
pub use key::{
    Activity, Backend, CaseKey, DeviceId, Mode, SeriesKey, Status, Timer, TraceSource, TraceStatus,
};
pub use peer::{PEER_TAIL, PeerCase, STATE_COLUMNS, append_peer, read_peer};
pub use rows::{CONTROL_SPAN, FitRow, ResultRow, Work, bound_by_host};
pub use run::{ExecSamples, Run, RunWriter, check_env, has_file, write_fits};
pub use sample::{
    CLOCK_DROP, CaseMedians, HOST_SLOW, SLOW, STALL, STRETCHES, Sample, SampleFlag, SampleState,
    TORCH_CONTROL_CHUNK, TORCH_CONTROL_SPAN, WORKER_STATE_KEYS, by_execution, case_medians,
    flag_each, flagged,
};
pub use shapes::{Check, DTypeName as DType, OpKind, Phase, UnknownValue};
pub use trace::{KernelRow, TraceRow};

use std::path::PathBuf;

/// The version of the run-directory schema this crate writes, recorded in `env.json`.
///
/// - 1: the first round (no `schema_version` in env.json); its upper-bound state was prose
///   in `note`, and is read into [`ResultRow::uncovered_chunks`] from there.
/// - 2: typed columns, `uncovered_chunks`, `schema_version` in env.json.
/// - 3: status `skipped` (a single call over the cap), env.json `torch_settings`.
/// - 4: mode `graph` (replays of a captured CUDA/HIP graph); `traces.csv` and
///   `kernels.csv` from the trace pass.
/// - 5: modes `graph_cold` and `pipelined_cold`, op `eltwise`.
/// - 6: `samples.csv` column `pair` (paired runs of `opbench ab`; optional to readers).
pub const SCHEMA_VERSION: u32 = 6;

/// The env.json setting naming the timing code a run was measured with (a hash of it, as
/// asv versions a benchmark by its code): runs whose methods differ are not compared for
/// speed (`opbench compare`) and are not one series (`opbench history`).
pub const TIMING_METHOD_SETTING: &str = "timing_method";

/// The env.json `settings` a calibration plant writes (harness's plant knobs, named in
/// the settings crate): a run carrying any of them is not a build's own time.
pub const PLANT_SETTINGS: &[&str] = &[
    "plant_ns",
    "plant_pct",
    "plant_scope",
    "plant_device_pct",
    "plant_launch_ns",
];

/// The oldest schema version the readers accept.
pub const OLDEST_READABLE: u32 = 1;

/// Why a run directory (or one of its files) cannot be used. Every variant names the file.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("{}: not a run directory", .0.display())]
    NotADirectory(PathBuf),
    #[error("{}: missing", .0.display())]
    Missing(PathBuf),
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: invalid JSON: {message}", path.display())]
    Json { path: PathBuf, message: String },
    #[error("{}: schema version {found}; this opbench reads versions {OLDEST_READABLE} to {SCHEMA_VERSION}", path.display())]
    Schema { path: PathBuf, found: u32 },
    /// env.json is not the object its schema describes, or lacks a field every run has.
    #[error("{}: {problem}", path.display())]
    Env { path: PathBuf, problem: String },
    #[error("{}: missing column `{column}`", path.display())]
    MissingColumn { path: PathBuf, column: &'static str },
    #[error("{}: line {line}: {message}", path.display())]
    Line {
        path: PathBuf,
        line: u64,
        message: String,
    },
    #[error("{}: line {line}: column `{column}`: {problem}", path.display())]
    Field {
        path: PathBuf,
        line: u64,
        column: &'static str,
        problem: String,
    },
    #[error("{}: this run was started with other settings ({diff}); use a new OPBENCH_RUN", path.display())]
    OtherSettings { path: PathBuf, diff: String },
    #[error("{}: case {key} is already in this run; a run holds each case once", path.display())]
    AlreadyInRun { path: PathBuf, key: String },
    #[error("{}: line {line}: duplicate case {key} (first on line {first})", path.display())]
    Duplicate {
        path: PathBuf,
        line: u64,
        first: u64,
        key: String,
    },
}
