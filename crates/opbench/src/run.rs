//! Reading run directories: results, samples, env, fits.

use std::path::{Path, PathBuf};

use std::collections::BTreeMap;

use harness::record::{RESULTS_HEADER, SAMPLES_HEADER, read_csv};
use harness::{ResultRow, SampleRow};
use serde::{Deserialize, Serialize};

use crate::Failure;

/// A run directory on disk.
#[derive(Debug)]
pub struct Run {
    pub dir: PathBuf,
    pub results: Vec<ResultRow>,
}

impl Run {
    /// Read `dir/results.csv`; a missing folder, file or column is a bad-input failure.
    pub fn load(dir: &Path) -> Result<Self, Failure> {
        if !dir.is_dir() {
            return Err(Failure::input(format!(
                "{}: not a run directory",
                dir.display()
            )));
        }
        let path = dir.join("results.csv");
        if !path.is_file() {
            return Err(Failure::input(format!("{}: missing", path.display())));
        }
        let results = read_csv(&path, &RESULTS_HEADER).map_err(Failure::input)?;
        Ok(Run {
            dir: dir.to_path_buf(),
            results,
        })
    }

    /// `samples.csv`, grouped by case key.
    pub fn samples(&self) -> Result<BTreeMap<harness::CaseKey, Vec<SampleRow>>, Failure> {
        let path = self.dir.join("samples.csv");
        if !path.is_file() {
            return Err(Failure::input(format!("{}: missing", path.display())));
        }
        let rows: Vec<SampleRow> = read_csv(&path, &SAMPLES_HEADER).map_err(Failure::input)?;
        let mut out: BTreeMap<_, Vec<_>> = BTreeMap::new();
        for r in rows {
            out.entry(r.key()).or_default().push(r);
        }
        Ok(out)
    }

    /// `env.json` as loose JSON.
    pub fn env(&self) -> Result<serde_json::Value, Failure> {
        let path = self.dir.join("env.json");
        let text = std::fs::read_to_string(&path)
            .map_err(|e| Failure::input(format!("{}: {e}", path.display())))?;
        serde_json::from_str(&text).map_err(|e| Failure::input(format!("{}: {e}", path.display())))
    }

    pub fn ok_rows(&self) -> impl Iterator<Item = &ResultRow> {
        self.results
            .iter()
            .filter(|r| r.status == "ok" && r.median_ns.is_some_and(|m| m > 0.0))
    }
}

/// `fits.csv` columns, in order (DESIGN.md).
pub const FITS_HEADER: [&str; 22] = [
    "op",
    "variant",
    "site",
    "model",
    "phase",
    "q_len",
    "kv_len",
    "dtype",
    "device",
    "mode",
    "work",
    "n_points",
    "overhead_us",
    "overhead_ci_low_us",
    "overhead_ci_high_us",
    "rate",
    "rate_ci_low",
    "rate_ci_high",
    "rate_unit",
    "r2",
    "crossover_batch",
    "model_kind",
];

/// One row of `fits.csv`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FitRow {
    pub op: String,
    pub variant: String,
    pub site: String,
    pub model: String,
    pub phase: String,
    pub q_len: usize,
    pub kv_len: Option<usize>,
    pub dtype: String,
    pub device: String,
    pub mode: String,
    /// `bytes` or `flops`.
    pub work: String,
    pub n_points: usize,
    pub overhead_us: f64,
    pub overhead_ci_low_us: f64,
    pub overhead_ci_high_us: f64,
    pub rate: Option<f64>,
    pub rate_ci_low: Option<f64>,
    pub rate_ci_high: Option<f64>,
    /// `GB/s` or `TFLOP/s`.
    pub rate_unit: String,
    pub r2: f64,
    pub crossover_batch: Option<f64>,
    pub model_kind: String,
}

/// A series: the case key minus the batch.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SeriesKey {
    pub op: String,
    pub variant: String,
    pub site: String,
    pub model: String,
    pub phase: String,
    pub q_len: usize,
    pub kv_len: Option<usize>,
    pub dtype: String,
    pub device: String,
    pub mode: String,
}

impl SeriesKey {
    pub fn of(r: &ResultRow) -> Self {
        SeriesKey {
            op: r.op.clone(),
            variant: r.variant.clone(),
            site: r.site.clone(),
            model: r.model.clone(),
            phase: r.phase.clone(),
            q_len: r.q_len,
            kv_len: r.kv_len,
            dtype: r.dtype.clone(),
            device: r.device.clone(),
            mode: r.mode.clone(),
        }
    }
}
