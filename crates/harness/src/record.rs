//! The run directory (DESIGN.md): `env.json`, `results.csv`, `samples.csv`.
//!
//! Rows are appended and flushed as each case finishes, so an interrupted run keeps what it
//! measured; a second process with the same run id (the next bench binary of one
//! `cargo bench --workspace`) appends to the same files.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// `results.csv` columns, in order.
pub const RESULTS_HEADER: [&str; 27] = [
    "run_id",
    "op",
    "variant",
    "site",
    "model",
    "phase",
    "batch",
    "q_len",
    "kv_len",
    "dtype",
    "dims",
    "device",
    "mode",
    "status",
    "samples",
    "median_ns",
    "mean_ns",
    "ci_low_ns",
    "ci_high_ns",
    "mad_ns",
    "flops",
    "bytes",
    "gflops",
    "gbps",
    "kernel",
    "max_rel_err",
    "note",
];

/// `samples.csv` columns, in order.
pub const SAMPLES_HEADER: [&str; 13] = [
    "op", "variant", "site", "model", "phase", "batch", "q_len", "kv_len", "dtype", "device",
    "mode", "iters", "total_ns",
];

/// One row of `results.csv`. Timing fields are `None` (empty) unless `status` is `ok`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResultRow {
    pub run_id: String,
    pub op: String,
    pub variant: String,
    pub site: String,
    pub model: String,
    pub phase: String,
    pub batch: usize,
    pub q_len: usize,
    pub kv_len: Option<usize>,
    pub dtype: String,
    pub dims: String,
    pub device: String,
    pub mode: String,
    pub status: String,
    pub samples: Option<usize>,
    pub median_ns: Option<f64>,
    pub mean_ns: Option<f64>,
    pub ci_low_ns: Option<f64>,
    pub ci_high_ns: Option<f64>,
    pub mad_ns: Option<f64>,
    pub flops: u64,
    pub bytes: u64,
    pub gflops: Option<f64>,
    pub gbps: Option<f64>,
    pub kernel: Option<String>,
    pub max_rel_err: Option<f64>,
    pub note: Option<String>,
}

/// The case key of DESIGN.md: (op, variant, site, model, phase, batch, q_len, kv_len,
/// dtype, device, mode).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct CaseKey {
    pub op: String,
    pub variant: String,
    pub site: String,
    pub model: String,
    pub phase: String,
    pub batch: usize,
    pub q_len: usize,
    pub kv_len: Option<usize>,
    pub dtype: String,
    pub device: String,
    pub mode: String,
}

impl std::fmt::Display for CaseKey {
    /// `op/variant/site/model/phase/b<batch>/q<q_len>[/kv<kv_len>]/dtype/device/mode`, the
    /// criterion id of the case too.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}/{}/{}/{}/{}/b{}/q{}",
            self.op, self.variant, self.site, self.model, self.phase, self.batch, self.q_len
        )?;
        if let Some(kv) = self.kv_len {
            write!(f, "/kv{kv}")?;
        }
        write!(f, "/{}/{}/{}", self.dtype, self.device, self.mode)
    }
}

/// The [`CaseKey`] of any row type that carries the key's fields under their names.
macro_rules! case_key {
    ($row:expr) => {
        CaseKey {
            op: $row.op.clone(),
            variant: $row.variant.clone(),
            site: $row.site.clone(),
            model: $row.model.clone(),
            phase: $row.phase.clone(),
            batch: $row.batch,
            q_len: $row.q_len,
            kv_len: $row.kv_len,
            dtype: $row.dtype.clone(),
            device: $row.device.clone(),
            mode: $row.mode.clone(),
        }
    };
}

impl ResultRow {
    pub fn key(&self) -> CaseKey {
        case_key!(self)
    }
}

/// One row of `samples.csv`: one criterion sample of a case.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SampleRow {
    pub op: String,
    pub variant: String,
    pub site: String,
    pub model: String,
    pub phase: String,
    pub batch: usize,
    pub q_len: usize,
    pub kv_len: Option<usize>,
    pub dtype: String,
    pub device: String,
    pub mode: String,
    pub iters: u64,
    pub total_ns: f64,
}

impl SampleRow {
    pub fn new(key: &CaseKey, iters: u64, total_ns: f64) -> Self {
        SampleRow {
            op: key.op.clone(),
            variant: key.variant.clone(),
            site: key.site.clone(),
            model: key.model.clone(),
            phase: key.phase.clone(),
            batch: key.batch,
            q_len: key.q_len,
            kv_len: key.kv_len,
            dtype: key.dtype.clone(),
            device: key.device.clone(),
            mode: key.mode.clone(),
            iters,
            total_ns,
        }
    }
    pub fn key(&self) -> CaseKey {
        case_key!(self)
    }
}

/// An open run directory.
#[derive(Debug)]
pub struct RunDir {
    pub path: PathBuf,
    pub run_id: String,
    results: csv::Writer<File>,
    samples: csv::Writer<File>,
}

/// Open `path` for appending; a new or empty file gets `header` first.
fn appender(path: &Path, header: &[&str]) -> io::Result<csv::Writer<File>> {
    let file = OpenOptions::new().create(true).append(true).open(path)?;
    let empty = file.metadata()?.len() == 0;
    let mut w = csv::WriterBuilder::new()
        .has_headers(false)
        .from_writer(file);
    if empty {
        w.write_record(header)?;
        w.flush()?;
    }
    Ok(w)
}

impl RunDir {
    /// Open (or create) `out/runs/<run_id>/`. `env_json` is written only if the run has no
    /// env.json yet: the first process of a run describes it.
    pub fn open(out: &Path, run_id: &str, env_json: &str) -> io::Result<Self> {
        let path = out.join("runs").join(run_id);
        std::fs::create_dir_all(&path)?;
        let env_path = path.join("env.json");
        if !env_path.exists() {
            let mut f = File::create(&env_path)?;
            f.write_all(env_json.as_bytes())?;
            f.write_all(b"\n")?;
        }
        Ok(RunDir {
            results: appender(&path.join("results.csv"), &RESULTS_HEADER)?,
            samples: appender(&path.join("samples.csv"), &SAMPLES_HEADER)?,
            run_id: run_id.to_string(),
            path,
        })
    }

    /// Append one case: its samples, then its result row; both flushed before returning.
    pub fn write_case(&mut self, row: &ResultRow, samples: &[SampleRow]) -> io::Result<()> {
        for s in samples {
            self.samples.serialize(s)?;
        }
        self.samples.flush()?;
        self.results.serialize(row)?;
        self.results.flush()?;
        Ok(())
    }
}

/// Read a CSV of rows `T`, naming the file and the missing column when the header is off.
pub fn read_csv<T: for<'de> Deserialize<'de>>(
    path: &Path,
    header: &[&str],
) -> Result<Vec<T>, String> {
    let mut rdr = csv::Reader::from_path(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let have = rdr
        .headers()
        .map_err(|e| format!("{}: {e}", path.display()))?
        .clone();
    for col in header {
        if !have.iter().any(|h| h == *col) {
            return Err(format!("{}: missing column `{col}`", path.display()));
        }
    }
    rdr.deserialize()
        .enumerate()
        .map(|(i, r)| r.map_err(|e| format!("{}: row {}: {e}", path.display(), i + 2)))
        .collect()
}

/// A run id from the current time, `YYYYMMDDTHHMMSSZ`.
pub fn timestamp_id(t: chrono::DateTime<chrono::Utc>) -> String {
    t.format("%Y%m%dT%H%M%SZ").to_string()
}

/// The default run id: the start time of the `cargo` process that launched us when there is
/// one (so every bench binary of one `cargo bench --workspace` lands in one run), else now.
pub fn default_run_id() -> String {
    launcher_start_time()
        .map(timestamp_id)
        .unwrap_or_else(|| timestamp_id(chrono::Utc::now()))
}

#[cfg(target_os = "linux")]
fn launcher_start_time() -> Option<chrono::DateTime<chrono::Utc>> {
    // Only under cargo (which sets CARGO for the programs it runs): the parent is then the
    // cargo process shared by all bench binaries of one invocation.
    std::env::var_os("CARGO")?;
    let ppid = std::os::unix::process::parent_id();
    let stat = std::fs::read_to_string(format!("/proc/{ppid}/stat")).ok()?;
    // field 22 (starttime, clock ticks since boot) counted after the ")" closing comm
    let after = stat.rsplit_once(')')?.1;
    let ticks: i64 = after.split_whitespace().nth(19)?.parse().ok()?;
    // boot time in whole seconds, so every process computes the same instant
    let btime: i64 = std::fs::read_to_string("/proc/stat")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()?;
    // USER_HZ is 100 on every Linux ABI Rust targets
    let started = chrono::DateTime::from_timestamp(btime + ticks / 100, 0)?;
    Some(started)
}

#[cfg(not(target_os = "linux"))]
fn launcher_start_time() -> Option<chrono::DateTime<chrono::Utc>> {
    // Elsewhere set OPBENCH_RUN (scripts/bench does) to group several bench binaries.
    None
}
