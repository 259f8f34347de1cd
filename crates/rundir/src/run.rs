//! Reading and writing a run directory.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::csvio::Header;
use crate::key::CaseKey;
use crate::layout;
use crate::rows::{FitRow, ResultRow};
use crate::sample::Sample;
use crate::trace::{KernelRow, TraceRow};
use crate::{Env, OLDEST_READABLE, RunError, SCHEMA_VERSION};

/// A loaded, validated run directory.
#[derive(Debug, Clone)]
pub struct Run {
    pub dir: PathBuf,
    /// `env.json`; `None` when the run has none (a hand-made run, say).
    pub env: Option<Env>,
    /// The schema version the files were read as.
    pub schema: u32,
    pub results: Vec<ResultRow>,
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> RunError + '_ {
    move |source| RunError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// A csv error as a line error of `path`.
fn csv_err(path: &Path, e: &csv::Error) -> RunError {
    let line = e.position().map_or(0, csv::Position::line);
    let message = match e.kind() {
        csv::ErrorKind::UnequalLengths {
            expected_len, len, ..
        } => format!(
            "{len} fields where the header has {expected_len} (a truncated or malformed line)"
        ),
        csv::ErrorKind::Utf8 { .. } => "not valid UTF-8".to_string(),
        _ => e.to_string(),
    };
    RunError::Line {
        path: path.to_path_buf(),
        line,
        message,
    }
}

/// Read every record of `path` with `read`, after checking its header for `required`.
pub(crate) fn read_records<T>(
    path: &Path,
    required: &[&'static str],
    mut read: impl FnMut(&crate::csvio::Line<'_>) -> Result<T, RunError>,
) -> Result<Vec<T>, RunError> {
    let (path, input) = open_run_file(path)?;
    let mut rdr = csv::ReaderBuilder::new().from_reader(input);
    let header = rdr.headers().map_err(|e| csv_err(&path, &e))?.clone();
    let header = Header::new(&path, &header, required)?;
    let mut out = Vec::new();
    for rec in rdr.records() {
        let rec = rec.map_err(|e| csv_err(header.path(), &e))?;
        out.push(read(&header.line(&rec))?);
    }
    Ok(out)
}

/// A run's file for reading, plain or — where only a gzip'd copy beside the name exists, as
/// published and fixture runs keep large files (samples.csv.gz) — decompressed; with the
/// path actually opened, for errors.
fn open_run_file(path: &Path) -> Result<(PathBuf, Box<dyn std::io::Read>), RunError> {
    if path.is_file() {
        let file = File::open(path).map_err(io(path))?;
        return Ok((path.to_path_buf(), Box::new(file)));
    }
    let gz = gz_path(path);
    if gz.is_file() {
        let file = File::open(&gz).map_err(io(&gz))?;
        return Ok((gz, Box::new(flate2::read::GzDecoder::new(file))));
    }
    Err(RunError::Missing(path.to_path_buf()))
}

/// `path` with `.gz` appended: where a gzip'd copy of a run's file lives.
fn gz_path(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_os_string();
    s.push(".gz");
    PathBuf::from(s)
}

/// Whether the run's file `path` exists, plain or gzip'd.
pub fn has_file(path: &Path) -> bool {
    path.is_file() || gz_path(path).is_file()
}

/// results.csv columns that schema 1 lacks.
const V2_ONLY: [&str; 4] = ["uncovered_chunks", "control_ns", "executions", "exec_cv"];

/// The columns a reader of schema `v` requires.
fn results_columns(v: u32) -> Vec<&'static str> {
    ResultRow::columns()
        .into_iter()
        .filter(|c| v >= 2 || !V2_ONLY.contains(c))
        .filter(|c| !ResultRow::OPTIONAL.contains(c))
        .collect()
}

impl Run {
    /// Read `dir`: env.json (if present), then results.csv, validated. A missing folder,
    /// file or column, an unknown schema version, a value out of range, or a case that
    /// appears twice is a [`RunError`].
    pub fn load(dir: &Path) -> Result<Self, RunError> {
        if !dir.is_dir() {
            return Err(RunError::NotADirectory(dir.to_path_buf()));
        }
        let path = dir.join(layout::RESULTS);
        let env_path = dir.join(layout::ENV);
        let env = read_env(&env_path)?;
        let header = header_version(&path);
        if let Some(e) = &env {
            check_env(e, &env_path, header)?;
        }
        // a run without env.json (made by hand) is read as the version its header has
        let schema = env.as_ref().map_or(header, Env::schema);
        let columns = results_columns(schema);
        let mut first_line: BTreeMap<CaseKey, u64> = BTreeMap::new();
        let results = read_records(&path, &columns, |l| {
            let row = ResultRow::read(l, schema)?;
            if let Some(&first) = first_line.get(&row.key) {
                return Err(RunError::Duplicate {
                    path: path.clone(),
                    line: l.line,
                    first,
                    key: row.key.to_string(),
                });
            }
            first_line.insert(row.key.clone(), l.line);
            Ok(row)
        })?;
        Ok(Run {
            dir: dir.to_path_buf(),
            env,
            schema,
            results,
        })
    }

    /// A run directory's env.json alone, checked as a run of this schema must have it
    /// (for a run that has no results yet).
    pub fn env_of(dir: &Path) -> Result<Option<Env>, RunError> {
        let path = dir.join(layout::ENV);
        let env = read_env(&path)?;
        if let Some(e) = &env {
            check_env(e, &path, SCHEMA_VERSION)?;
        }
        Ok(env)
    }

    /// `ok` rows with a median.
    pub fn ok_rows(&self) -> impl Iterator<Item = &ResultRow> {
        self.results.iter().filter(|r| r.is_ok())
    }

    /// The row of a case.
    pub fn row(&self, key: &CaseKey) -> Option<&ResultRow> {
        self.results.iter().find(|r| &r.key == key)
    }

    /// `traces.csv` (empty when the run has no trace pass).
    pub fn traces(&self) -> Result<Vec<TraceRow>, RunError> {
        let path = self.dir.join(layout::TRACES);
        if !has_file(&path) {
            return Ok(Vec::new());
        }
        read_records(&path, &TraceRow::columns(), TraceRow::read)
    }

    /// `kernels.csv` (empty when the run has no trace pass).
    pub fn kernels(&self) -> Result<Vec<KernelRow>, RunError> {
        let path = self.dir.join(layout::KERNELS);
        if !has_file(&path) {
            return Ok(Vec::new());
        }
        read_records(&path, &KernelRow::columns(), KernelRow::read)
    }

    /// `samples.csv`, grouped by case, validated (every sample at least one call in a
    /// finite positive time).
    pub fn samples(&self) -> Result<BTreeMap<CaseKey, Vec<Sample>>, RunError> {
        let path = self.dir.join(layout::SAMPLES);
        let required = if self.schema >= 2 {
            Sample::v2_columns()
        } else {
            Sample::v1_columns()
        };
        let rows = read_records(&path, &required, Sample::read)?;
        let mut out: BTreeMap<CaseKey, Vec<Sample>> = BTreeMap::new();
        for s in rows {
            out.entry(s.key.clone()).or_default().push(s);
        }
        Ok(out)
    }

    /// `samples.csv` per case, grouped by execution (in execution order): what the
    /// between-process statistics (compare, history) work from. A paired run's side
    /// ([`crate::paired::PairRounds`]) is grouped by round instead: each round's pairs came
    /// from a fresh process, as each execution's samples do. The torch control only where
    /// it is the host-speed divisor ([`crate::Timer::divides_by_control`]).
    pub fn samples_by_execution(&self) -> Result<BTreeMap<CaseKey, Vec<ExecSamples>>, RunError> {
        let rounds = self.env.as_ref().and_then(crate::paired::PairRounds::of);
        Ok(self
            .samples()?
            .into_iter()
            .map(|(key, samples)| {
                let divides = crate::Timer::of(&key.variant).divides_by_control();
                let device = key.mode.is_device();
                let mut by_exec: BTreeMap<u32, ExecSamples> = BTreeMap::new();
                for s in samples {
                    let process = match (rounds, s.pair) {
                        (Some(r), Some(i)) => r.round_of(i, device),
                        _ => s.execution,
                    };
                    let e = by_exec.entry(process).or_default();
                    e.per_call_ns.push(s.per_call_ns());
                    e.control_ns.extend(s.control_ns.filter(|_| divides));
                    e.host_ns.extend(s.host_ns);
                }
                (key, by_exec.into_values().collect())
            })
            .collect())
    }
}

/// One execution's samples of a case.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ExecSamples {
    /// Per-call time of each sample.
    pub per_call_ns: Vec<f64>,
    /// The host-speed controls measured before the samples (none in runs without them, nor
    /// for the peer's rows: [`crate::Timer::divides_by_control`]).
    pub control_ns: Vec<f64>,
    /// The build-independent host controls measured before the samples (none in runs
    /// before they existed).
    pub host_ns: Vec<f64>,
}

impl ExecSamples {
    /// The execution's median control: one sample's control is itself noisy (a ~200 µs
    /// window), the median over the execution is not, and the host's speed is what differs
    /// between processes.
    pub fn median_control(&self) -> Option<f64> {
        (!self.control_ns.is_empty()).then(|| stats::median(&self.control_ns))
    }

    /// The execution's median build-independent host control (see [`Sample::host_ns`]).
    pub fn median_host(&self) -> Option<f64> {
        (!self.host_ns.is_empty()).then(|| stats::median(&self.host_ns))
    }

    /// The median per-call time.
    pub fn median_ns(&self) -> f64 {
        stats::median(&self.per_call_ns)
    }
}

/// The schema version a results.csv header implies: 2 with `uncovered_chunks`, else 1.
fn header_version(path: &Path) -> u32 {
    let has = open_run_file(path).ok().and_then(|(_, input)| {
        let mut r = csv::Reader::from_reader(input);
        r.headers()
            .ok()
            .map(|h| h.iter().any(|c| c == "uncovered_chunks"))
    });
    if has.unwrap_or(true) {
        SCHEMA_VERSION
    } else {
        1
    }
}

/// env.json, if the run has one; schema versions this crate cannot read are an error, and
/// so is anything but a JSON object (serde would read `[]` as an empty struct).
fn read_env(path: &Path) -> Result<Option<Env>, RunError> {
    if !path.exists() {
        return Ok(None);
    }
    let text = std::fs::read_to_string(path).map_err(io(path))?;
    let json = |e: serde_json::Error| RunError::Json {
        path: path.to_path_buf(),
        message: e.to_string(),
    };
    let value: serde_json::Value = serde_json::from_str(&text).map_err(json)?;
    if !value.is_object() {
        let found = match value {
            serde_json::Value::Array(_) => "an array",
            serde_json::Value::String(_) => "a string",
            serde_json::Value::Number(_) => "a number",
            serde_json::Value::Bool(_) => "a boolean",
            _ => "null",
        };
        return Err(RunError::Env {
            path: path.to_path_buf(),
            problem: format!("expected a JSON object, found {found}"),
        });
    }
    let env: Env = serde_json::from_value(value).map_err(json)?;
    let v = env.schema();
    if !(OLDEST_READABLE..=SCHEMA_VERSION).contains(&v) {
        return Err(RunError::Schema {
            path: path.to_path_buf(),
            found: v,
        });
    }
    Ok(Some(env))
}

/// The fields every run's env.json must have for its results to be placed (which build, on
/// which device, when): `schema_version` (from schema 2; `results_schema` is what the
/// results.csv header implies), `started_at` (a date), `backend` (`cpu`, `cuda`, `hip`),
/// `devices`, the device's name (`device_name` on a GPU, `cpu_model` on the CPU) and
/// `libtorch_version`. The first missing or malformed one is the error.
pub fn check_env(env: &Env, path: &Path, results_schema: u32) -> Result<(), RunError> {
    let missing = |field: &str| RunError::Env {
        path: path.to_path_buf(),
        problem: format!("missing field `{field}` (every run records it)"),
    };
    if env.schema_version == 0 && results_schema >= 2 {
        return Err(missing("schema_version"));
    }
    let date = env.started_at.get(..10).unwrap_or("");
    if env.started_at.is_empty() {
        return Err(missing("started_at"));
    }
    let is_date = date.len() == 10
        && date.bytes().enumerate().all(|(i, b)| match i {
            4 | 7 => b == b'-',
            _ => b.is_ascii_digit(),
        });
    if !is_date {
        return Err(RunError::Env {
            path: path.to_path_buf(),
            problem: format!(
                "field `started_at`: {:?} does not begin with a date (YYYY-MM-DD)",
                env.started_at
            ),
        });
    }
    match env.backend.as_str() {
        "" => return Err(missing("backend")),
        "cpu" | "cuda" | "hip" => {}
        other => {
            return Err(RunError::Env {
                path: path.to_path_buf(),
                problem: format!("field `backend`: {other:?} is not cpu, cuda or hip"),
            });
        }
    }
    if env.devices.is_empty() {
        return Err(missing("devices"));
    }
    if env.backend == "cpu" && env.cpu_model.is_empty() {
        return Err(missing("cpu_model"));
    }
    if env.backend != "cpu" && env.device_name.as_deref().unwrap_or("").is_empty() {
        return Err(missing("device_name"));
    }
    if env.libtorch_version.is_empty() {
        return Err(missing("libtorch_version"));
    }
    Ok(())
}

/// An open run directory that cases are appended to.
///
/// Rows are appended and flushed as each case finishes, so an interrupted run keeps what
/// it measured; a second process with the same run id (the next bench binary of one
/// `cargo bench --workspace`) appends to the same files.
#[derive(Debug)]
pub struct RunWriter {
    pub path: PathBuf,
    pub run_id: String,
    /// Cases the run already has (from earlier processes), and those written since.
    cases: std::collections::BTreeSet<CaseKey>,
    results: csv::Writer<File>,
    samples: csv::Writer<File>,
    /// traces.csv and kernels.csv, opened by the first trace written.
    traces: Option<(csv::Writer<File>, csv::Writer<File>)>,
    /// Cases the run has a trace of.
    traced: std::collections::BTreeSet<CaseKey>,
}

/// Open `path` for appending; a new or empty file gets `header` first.
fn appender(path: &Path, header: &[&str]) -> Result<csv::Writer<File>, RunError> {
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(io(path))?;
    let empty = file.metadata().map_err(io(path))?.len() == 0;
    if !empty {
        // a run resumed by another version of opbench would get rows of other columns
        let have = csv::Reader::from_path(path)
            .and_then(|mut r| r.headers().cloned())
            .map_err(|e| csv_err(path, &e))?;
        if have.iter().ne(header.iter().copied()) {
            return Err(RunError::Line {
                path: path.to_path_buf(),
                line: 1,
                message: "its columns are another version's; use a new OPBENCH_RUN".into(),
            });
        }
    }
    let mut w = csv::WriterBuilder::new()
        .has_headers(false)
        .from_writer(file);
    if empty {
        w.write_record(header).map_err(|e| csv_err(path, &e))?;
        w.flush().map_err(io(path))?;
    }
    Ok(w)
}

impl RunWriter {
    /// Open (or create) `out/runs/<run_id>/`, or with an execution number
    /// `out/runs/<run_id>/executions/<i>/`. `env` is written (with this crate's schema
    /// version) only if the folder has no env.json yet: the first process describes it.
    pub fn open(
        out: &Path,
        run_id: &str,
        execution: Option<u32>,
        env: &Env,
    ) -> Result<Self, RunError> {
        Self::at(&crate::layout::run_dir(out, run_id, execution), run_id, env)
    }

    /// Open (or create) the run directory `path` itself; see [`RunWriter::open`].
    pub fn at(path: &Path, run_id: &str, env: &Env) -> Result<Self, RunError> {
        let path = path.to_path_buf();
        std::fs::create_dir_all(&path).map_err(io(&path))?;
        let env_path = path.join(layout::ENV);
        if let Some(first) = read_env(&env_path)? {
            // a second process of the run must measure it the same way (its own seed aside)
            let differs: Vec<String> = env
                .settings
                .iter()
                .chain(first.settings.iter())
                .map(|(k, _)| k)
                // what differs between processes of one run by design: a merged run's
                // seeds and executions, each process's seed
                .filter(|k| !["seed", "seeds", "executions"].contains(&k.as_str()))
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .filter(|k| env.settings.get(*k) != first.settings.get(*k))
                .map(|k| {
                    let v = |m: &std::collections::BTreeMap<String, String>| {
                        m.get(k).cloned().unwrap_or_else(|| "-".into())
                    };
                    format!("{k}: {} -> {}", v(&first.settings), v(&env.settings))
                })
                .collect();
            if !differs.is_empty() {
                return Err(RunError::OtherSettings {
                    path: env_path,
                    diff: differs.join(", "),
                });
            }
        } else {
            let env = Env {
                schema_version: SCHEMA_VERSION,
                ..env.clone()
            };
            let mut f = File::create(&env_path).map_err(io(&env_path))?;
            writeln!(f, "{}", env.to_json()).map_err(io(&env_path))?;
        }
        // a run that already has cases is resumed: the caller skips what it holds
        let cases = if has_file(&path.join(layout::RESULTS)) {
            Run::load(&path)?
                .results
                .into_iter()
                .map(|r| r.key)
                .collect()
        } else {
            Default::default()
        };
        let traced = if path.join(layout::TRACES).is_file() {
            read_records(
                &path.join(layout::TRACES),
                &TraceRow::columns(),
                TraceRow::read,
            )?
            .into_iter()
            .map(|t| t.key)
            .collect()
        } else {
            Default::default()
        };
        Ok(RunWriter {
            traces: None,
            traced,
            cases,
            results: appender(&path.join(layout::RESULTS), &ResultRow::columns())?,
            samples: appender(&path.join(layout::SAMPLES), &Sample::columns())?,
            run_id: run_id.to_string(),
            path,
        })
    }

    /// Add `entries` to env.json's `host_state` (the state at a process's end: the last
    /// process of a run or execution leaves its own).
    pub fn note_state(&self, entries: &[(String, String)]) -> Result<(), RunError> {
        if entries.is_empty() {
            return Ok(());
        }
        let path = self.path.join(crate::layout::ENV);
        let Some(mut env) = read_env(&path)? else {
            return Ok(());
        };
        env.host_state.extend(entries.iter().cloned());
        std::fs::write(&path, format!("{}\n", env.to_json())).map_err(io(&path))
    }

    /// The cases the run holds (from every process so far).
    pub fn cases(&self) -> impl Iterator<Item = &CaseKey> {
        self.cases.iter()
    }

    /// The run already has this case.
    pub fn contains(&self, key: &CaseKey) -> bool {
        self.cases.contains(key)
    }

    /// The run already has a trace of this case.
    pub fn has_trace(&self, key: &CaseKey) -> bool {
        self.traced.contains(key)
    }

    /// Append one case's trace: its activities to kernels.csv, then its row to traces.csv.
    pub fn write_trace(&mut self, row: &TraceRow, kernels: &[KernelRow]) -> Result<(), RunError> {
        let (tp, kp) = (
            self.path.join(layout::TRACES),
            self.path.join(layout::KERNELS),
        );
        if self.traces.is_none() {
            self.traces = Some((
                appender(&tp, &TraceRow::columns())?,
                appender(&kp, &KernelRow::columns())?,
            ));
        }
        let Some((t, k)) = self.traces.as_mut() else {
            return Ok(());
        };
        for r in kernels {
            k.write_record(r.record()).map_err(|e| csv_err(&kp, &e))?;
        }
        k.flush().map_err(io(&kp))?;
        t.write_record(row.record(&self.run_id))
            .map_err(|e| csv_err(&tp, &e))?;
        t.flush().map_err(io(&tp))?;
        self.traced.insert(row.key.clone());
        Ok(())
    }

    /// Append one case: its samples, then its result row; both flushed before returning.
    /// A case the run already has is refused: a run holds each case once.
    pub fn write_case(&mut self, row: &ResultRow, samples: &[Sample]) -> Result<(), RunError> {
        if self.contains(&row.key) {
            return Err(RunError::AlreadyInRun {
                path: self.path.join(layout::RESULTS),
                key: row.key.to_string(),
            });
        }
        let sp = self.path.join(layout::SAMPLES);
        for s in samples {
            self.samples
                .write_record(s.record())
                .map_err(|e| csv_err(&sp, &e))?;
        }
        self.samples.flush().map_err(io(&sp))?;
        let rp = self.path.join(layout::RESULTS);
        self.results
            .write_record(row.record())
            .map_err(|e| csv_err(&rp, &e))?;
        self.results.flush().map_err(io(&rp))?;
        self.cases.insert(row.key.clone());
        Ok(())
    }
}

/// Write `fits.csv` at `path` (replacing it).
pub fn write_fits(path: &Path, rows: &[FitRow]) -> Result<(), RunError> {
    let mut w = csv::WriterBuilder::new()
        .has_headers(false)
        .from_path(path)
        .map_err(|e| csv_err(path, &e))?;
    w.write_record(FitRow::columns())
        .map_err(|e| csv_err(path, &e))?;
    for r in rows {
        w.write_record(r.record()).map_err(|e| csv_err(path, &e))?;
    }
    w.flush().map_err(io(path))
}
