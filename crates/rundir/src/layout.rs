//! Where a run's files lie: the one description of the run directory's layout. The Rust
//! readers and writers use these names; scripts/run.py, scripts/peer.py and
//! scripts/calibrate read them from `opbench layout` rather than keep a copy.

use std::path::{Path, PathBuf};

/// `OUT/runs/<run id>/`: where the bench binaries put a run.
pub const RUNS: &str = "runs";
/// `RUN/executions/<i>/`: one execution (process) of a run of several, merged into RUN.
pub const EXECUTIONS: &str = "executions";
pub const ENV: &str = "env.json";
pub const RESULTS: &str = "results.csv";
pub const SAMPLES: &str = "samples.csv";
/// The HF peer's raw samples, for `opbench ingest`.
pub const PEER: &str = "peer.csv";
pub const TRACES: &str = "traces.csv";
pub const KERNELS: &str = "kernels.csv";
pub const FITS: &str = "fits.csv";
pub const REPORT: &str = "report.md";
/// A default run id: the UTC start time in this `strftime` format.
pub const RUN_ID_FORMAT: &str = "%Y%m%dT%H%M%SZ";

/// `out/runs/<run_id>/`, or with an execution number its `executions/<i>/`.
pub fn run_dir(out: &Path, run_id: &str, execution: Option<u32>) -> PathBuf {
    let path = out.join(RUNS).join(run_id);
    match execution {
        Some(i) => path.join(EXECUTIONS).join(i.to_string()),
        None => path,
    }
}

/// Every name above, as (key, value) pairs: what `opbench layout` prints.
pub const ALL: [(&str, &str); 11] = [
    ("runs", RUNS),
    ("executions", EXECUTIONS),
    ("env", ENV),
    ("results", RESULTS),
    ("samples", SAMPLES),
    ("peer", PEER),
    ("traces", TRACES),
    ("kernels", KERNELS),
    ("fits", FITS),
    ("report", REPORT),
    ("run_id_format", RUN_ID_FORMAT),
];
