//! Runs in the formats of the tools teams already run (`opbench export`).
//!
//! - [`bmf`]: Bencher Metric Format JSON of one run — per case (its key as the benchmark
//!   name) a `latency` measure in ns: the median as `value`, the bootstrap interval of the
//!   median as `lower_value` / `upper_value`. `bencher run --adapter json` reads it.
//! - [`otava_csv`]: an Apache Otava (formerly Hunter) CSV of many runs — one row per run,
//!   in start order: `time` (the run's start, ISO 8601), the attributes `run`, `torch`,
//!   `revision`, `device`, then one column per case and machine (`KEY @ DEVICE`) holding the
//!   median in ns.
//!   Otava's change-point analysis then runs on opbench's medians.
//!
//! Only ok rows are exported; a case a run lacks is an empty cell in the Otava CSV.

use std::collections::{BTreeMap, BTreeSet};

use rundir::Run;
use serde_json::{Map, Value, json};

use crate::AnalysisError;

/// Bencher Metric Format JSON of `run`.
pub fn bmf(run: &Run) -> Value {
    let mut out = Map::new();
    for r in run.ok_rows() {
        let Some(m) = r.median_ns else { continue };
        let mut latency = Map::new();
        latency.insert("value".into(), json!(m));
        if let (Some(lo), Some(hi)) = (r.ci_low_ns, r.ci_high_ns) {
            latency.insert("lower_value".into(), json!(lo));
            latency.insert("upper_value".into(), json!(hi));
        }
        out.insert(r.key.to_string(), json!({ "latency": latency }));
    }
    Value::Object(out)
}

/// What an export leaves out of `run`: the rows with no time (a status other than `ok`,
/// or no median), counted by status, as one line (`None` when it leaves out nothing).
pub fn left_out(run: &Run) -> Option<String> {
    let mut by: std::collections::BTreeMap<String, usize> = Default::default();
    for r in &run.results {
        if !r.is_ok() || r.median_ns.is_none() {
            *by.entry(r.status.to_string()).or_default() += 1;
        }
    }
    let n: usize = by.values().sum();
    (n > 0).then(|| {
        let parts: Vec<String> = by.iter().map(|(s, k)| format!("{k} {s}")).collect();
        format!(
            "{}: {} of {} cases left out, with no time to export ({}); `opbench compare` \
             and results.csv keep them with their reasons",
            run.dir.display(),
            n,
            run.results.len(),
            parts.join(", ")
        )
    })
}

/// A case's Otava column: its key and the machine it ran on (`cuda:0` is an H100 in one run
/// and an H200 in another: one column for both would show the card swap as a change).
fn column(run: &Run, key: &rundir::CaseKey) -> String {
    let machine = run.env.as_ref().map_or("unknown", |e| e.device_label());
    format!("{key} @ {machine}")
}

/// An Apache Otava CSV of `runs`, sorted by start time. Every run needs env.json with a
/// start time: Otava orders points by it.
pub fn otava_csv(runs: &[Run]) -> Result<String, AnalysisError> {
    let mut rows: Vec<(&str, &Run)> = Vec::new();
    for run in runs {
        let started = run
            .env
            .as_ref()
            .map(|e| e.started_at.as_str())
            .filter(|s| !s.is_empty())
            .ok_or_else(|| {
                AnalysisError::Input(format!(
                    "{}: env.json has no started_at: Otava orders runs by time",
                    run.dir.display()
                ))
            })?;
        rows.push((started, run));
    }
    rows.sort_by(|a, b| a.0.cmp(b.0));
    let keys: BTreeSet<String> = runs
        .iter()
        .flat_map(|r| r.ok_rows().map(|x| column(r, &x.key)))
        .collect();
    let mut w = csv::WriterBuilder::new().from_writer(Vec::new());
    let mut header = vec!["time", "run", "torch", "revision", "device"];
    header.extend(keys.iter().map(String::as_str));
    w.write_record(&header)
        .map_err(|e| AnalysisError::Input(e.to_string()))?;
    for (started, run) in rows {
        let env = run.env.clone().unwrap_or_default();
        let medians: BTreeMap<String, f64> = run
            .ok_rows()
            .filter_map(|r| r.median_ns.map(|m| (column(run, &r.key), m)))
            .collect();
        let name = run
            .dir
            .file_name()
            .map_or(String::new(), |n| n.to_string_lossy().into_owned());
        let mut rec = vec![
            started.to_string(),
            name,
            env.libtorch_version.clone(),
            env.git_revision.clone(),
            env.device_label().to_string(),
        ];
        rec.extend(
            keys.iter()
                .map(|k| medians.get(k).map_or(String::new(), |m| format!("{m:.1}"))),
        );
        w.write_record(&rec)
            .map_err(|e| AnalysisError::Input(e.to_string()))?;
    }
    let bytes = w
        .into_inner()
        .map_err(|e| AnalysisError::Input(e.to_string()))?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}
