//! Executions into one run (`opbench merge`).
//!
//! A run of N executions (separate processes, `OPBENCH_EXECUTION=1..N`, scripts/bench with
//! `OPBENCH_EXECUTIONS=N`) keeps each execution's rows in `RUN/executions/<i>/`. Merging
//! writes `RUN/results.csv` with one row per case and `RUN/samples.csv` with every sample
//! and its execution:
//!
//! - a case ok in every execution that measured it: the median, mean and MAD of all its
//!   per-call times, a hierarchical-bootstrap 95% interval of that median (executions
//!   resampled, then samples), `executions` and `exec_cv` (the coefficient of variation of
//!   the executions' medians: the between-process spread), the control's median;
//! - a case not ok in some execution: that status, the executions it failed in, no timing;
//! - a case some executions lack (one died, or was filtered): kept, and its note says in how
//!   many of the N it was measured. It is never averaged in silence.
//!
//! An execution folder that cannot be read is named in [`Merged::skipped`]; the others are
//! merged.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use rundir::{CaseKey, Env, ResultRow, Run, RunWriter, Sample, Status};

use crate::AnalysisError;

/// What [`merge`] did.
#[derive(Debug, Clone)]
pub struct Merged {
    pub dir: PathBuf,
    /// The executions merged.
    pub executions: Vec<u32>,
    /// Execution folders that could not be read, and why.
    pub skipped: Vec<(PathBuf, String)>,
    pub cases: usize,
    /// Cases that some executions lack.
    pub partial: usize,
}

/// The executions of a run: (number, folder), in number order.
fn execution_dirs(dir: &Path) -> Result<Vec<(u32, PathBuf)>, AnalysisError> {
    let root = dir.join(rundir::layout::EXECUTIONS);
    let entries = std::fs::read_dir(&root).map_err(|e| {
        AnalysisError::Input(format!(
            "{}: {e}: a run of several executions has one folder per execution there",
            root.display()
        ))
    })?;
    let mut out: Vec<(u32, PathBuf)> = entries
        .flatten()
        .filter_map(|e| {
            let n = e.file_name().to_str()?.parse().ok()?;
            Some((n, e.path()))
        })
        .collect();
    out.sort();
    Ok(out)
}

/// Merge `dir`/executions/* into `dir`'s results.csv and samples.csv (replacing them).
pub fn merge(dir: &Path) -> Result<Merged, AnalysisError> {
    let mut runs: Vec<(u32, Run, BTreeMap<CaseKey, Vec<Sample>>)> = Vec::new();
    let mut skipped = Vec::new();
    for (n, path) in execution_dirs(dir)? {
        match Run::load(&path).and_then(|r| {
            let s = r.samples()?;
            Ok((r, s))
        }) {
            Ok((r, s)) => runs.push((n, r, s)),
            Err(e) => skipped.push((path, e.to_string())),
        }
    }
    if runs.is_empty() {
        return Err(AnalysisError::Input(format!(
            "{}: no readable execution to merge{}",
            dir.display(),
            skipped
                .first()
                .map_or(String::new(), |(_, e)| format!(" ({e})"))
        )));
    }
    let total = runs.len();
    let executions: Vec<u32> = runs.iter().map(|(n, ..)| *n).collect();
    let mut env: Env = runs[0].1.env.clone().unwrap_or_default();
    env.settings.remove("execution");
    env.settings.insert(
        "executions".into(),
        executions
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(","),
    );
    let seeds: Vec<String> = runs
        .iter()
        .filter_map(|(_, r, _)| r.env.as_ref()?.settings.get("seed").cloned())
        .collect();
    env.settings.insert("seeds".into(), seeds.join(","));
    env.settings.remove("seed");
    // the per-case view: rows and samples of every execution that measured it
    let mut by_case: BTreeMap<CaseKey, Vec<Measured>> = BTreeMap::new();
    let mut order: Vec<CaseKey> = Vec::new();
    for (n, run, samples) in &runs {
        for r in &run.results {
            let s = samples.get(&r.key).map_or(&[][..], Vec::as_slice);
            let entry = by_case.entry(r.key.clone()).or_default();
            if entry.is_empty() {
                order.push(r.key.clone());
            }
            entry.push((*n, r, s));
        }
    }
    for f in [rundir::layout::RESULTS, rundir::layout::SAMPLES] {
        let p = dir.join(f);
        if p.exists() {
            std::fs::remove_file(&p).map_err(|e| AnalysisError::output(&p, e))?;
        }
    }
    let run_id = env.run_id.clone();
    let mut w = RunWriter::at(dir, &run_id, &env)?;
    let mut partial = 0;
    for key in &order {
        let per = &by_case[key];
        partial += usize::from(per.len() < total);
        let (row, samples) = merge_case(per, total);
        w.write_case(&row, &samples)?;
    }
    Ok(Merged {
        dir: dir.to_path_buf(),
        executions,
        skipped,
        cases: order.len(),
        partial,
    })
}

/// One execution's measurement of a case: its number, row and samples.
type Measured<'a> = (u32, &'a ResultRow, &'a [Sample]);

/// One case from the executions that measured it (`total` executions in the run).
fn merge_case(per: &[Measured], total: usize) -> (ResultRow, Vec<Sample>) {
    let first = per[0].1;
    let mut row = ResultRow::new(
        &first.run_id,
        first.key.clone(),
        first.dims.clone(),
        Status::Ok,
    );
    row.flops = first.flops;
    row.bytes = first.bytes;
    row.kernel = first.kernel.clone();
    row.max_rel_err = per.iter().filter_map(|p| p.1.max_rel_err).reduce(f64::max);
    row.executions = Some(per.len() as u32);
    let mut notes: Vec<String> = first.note.iter().cloned().collect();
    if per.len() < total {
        notes.push(format!("measured in {} of {total} executions", per.len()));
    }
    let kernels: Vec<&str> = per.iter().filter_map(|p| p.1.kernel.as_deref()).collect();
    if kernels.iter().any(|k| Some(*k) != kernels.first().copied()) {
        notes.push(format!(
            "kernel differs between executions: {}",
            kernels.join(", ")
        ));
    }
    if let Some(bad) = per.iter().find(|p| p.1.status != Status::Ok) {
        row.status = bad.1.status;
        let failed: Vec<String> = per
            .iter()
            .filter(|p| p.1.status != Status::Ok)
            .map(|p| p.0.to_string())
            .collect();
        notes.push(format!(
            "{} in execution(s) {} of {}: {}",
            bad.1.status,
            failed.join(","),
            per.len(),
            bad.1.note.as_deref().unwrap_or("")
        ));
        row.note = Some(notes.join("; "));
        return (row, Vec::new());
    }
    let groups: Vec<Vec<f64>> = per
        .iter()
        .map(|p| p.2.iter().map(Sample::per_call_ns).collect())
        .collect();
    let pooled: Vec<f64> = groups.iter().flatten().copied().collect();
    let samples: Vec<Sample> = per.iter().flat_map(|p| p.2.iter().cloned()).collect();
    if pooled.is_empty() {
        row.status = Status::Error;
        notes.push("ok rows without samples in every execution".into());
        row.note = Some(notes.join("; "));
        return (row, Vec::new());
    }
    let median = stats::median(&pooled);
    let (lo, hi) = stats::hier_median_ci(&groups, 0.95, 2000);
    row.samples = Some(pooled.len());
    row.median_ns = Some(median);
    row.mean_ns = Some(pooled.iter().sum::<f64>() / pooled.len() as f64);
    row.ci_low_ns = Some(lo.min(median));
    row.ci_high_ns = Some(hi.max(median));
    row.mad_ns = Some(stats::mad(&pooled));
    if median > 0.0 {
        row.gflops = Some(row.flops as f64 / median);
        row.gbps = Some(row.bytes as f64 / median);
    }
    let meds: Vec<f64> = groups
        .iter()
        .filter(|g| !g.is_empty())
        .map(|g| stats::median(g))
        .collect();
    row.exec_cv = stats::cv(&meds);
    // the row's control is the host-speed divisor: the harness's only (the peer's rows
    // record Python's beside each sample for their flag)
    let controls: Vec<f64> = samples.iter().filter_map(|s| s.control_ns).collect();
    if !controls.is_empty() && rundir::Timer::of(&row.key.variant).divides_by_control() {
        row.control_ns = Some(stats::median(&controls));
    }
    row.flagged = rundir::flagged(&samples);
    if per.iter().any(|p| p.1.uncovered_chunks.is_some()) {
        row.uncovered_chunks = Some(per.iter().filter_map(|p| p.1.uncovered_chunks).sum());
    }
    row.note = (!notes.is_empty()).then(|| notes.join("; "));
    (row, samples)
}
