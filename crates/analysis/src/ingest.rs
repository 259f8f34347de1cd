//! `opbench ingest RUN`: the rows scripts/peer.py measured from Python, made by the same
//! rules as every other row. The peer hands over raw samples and each case's error against
//! its float64 reference (`RUN/peer.csv`, [`rundir::read_peer`]); this judges each case by
//! the one tolerance table ([`shapes::DTypeName::tolerance`]), estimates its median and
//! interval with the one estimator ([`ResultRow::summarize`]) and appends the rows and
//! samples through the run's writer, which validates them.

use std::path::Path;

use rundir::{PeerCase, ResultRow, Run, RunWriter, Sample, Status};

use crate::AnalysisError;

/// What one ingest did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Ingested {
    /// Rows appended.
    pub rows: usize,
    /// Of them, cases over their tolerance (`mismatch`).
    pub mismatches: usize,
    /// Cases the run already held, left as they were.
    pub kept: usize,
}

/// The row and samples of one of the peer's cases.
pub fn row_of(run_id: &str, c: &PeerCase) -> (ResultRow, Vec<Sample>) {
    let mut row = ResultRow::new(run_id, c.key.clone(), c.dims.clone(), c.status);
    row.flops = c.flops;
    row.bytes = c.bytes;
    row.max_rel_err = c.rel_err;
    row.note = c.note.clone();
    if let (Some(check), Some(err)) = (c.check, c.rel_err) {
        let tol = c.key.dtype.tolerance(check);
        // rel_err is finite (the reader refuses NaN)
        if err > tol {
            row.status = Status::Mismatch;
            row.note = Some(format!(
                "relative error {err:.3e} against the float64 reference exceeds the {} {} tolerance {tol:e}",
                c.key.dtype,
                check.as_str()
            ));
            return (row, Vec::new());
        }
    }
    if row.status != Status::Ok {
        return (row, Vec::new());
    }
    if c.samples.is_empty() {
        row.status = Status::Error;
        row.note = Some(format!(
            "no samples{}",
            c.note.as_ref().map_or(String::new(), |n| format!(": {n}"))
        ));
        return (row, Vec::new());
    }
    row.summarize(&c.pairs());
    row.flagged = rundir::flagged(&c.samples);
    (row, c.samples.clone())
}

/// Append the cases of `file` to the run `dir` (cases it already holds are kept as they
/// are). The file is left in place; ingesting it again adds nothing.
pub fn ingest(dir: &Path, file: &Path) -> Result<Ingested, AnalysisError> {
    // a run the peer starts (no results yet) has its env.json only
    let env = match Run::load(dir) {
        Ok(run) => run.env,
        Err(rundir::RunError::Missing(p)) if p.ends_with(rundir::layout::RESULTS) => {
            Run::env_of(dir)?
        }
        Err(e) => return Err(e.into()),
    };
    let Some(env) = env else {
        return Err(AnalysisError::Input(format!(
            "{}: no env.json: ingest appends to a run that scripts/bench started",
            dir.display()
        )));
    };
    let cases = rundir::read_peer(file)?;
    let mut w = RunWriter::at(dir, &env.run_id, &env)?;
    let mut done = Ingested::default();
    for c in &cases {
        if w.contains(&c.key) {
            done.kept += 1;
            continue;
        }
        let (row, samples) = row_of(&env.run_id, c);
        done.mismatches += usize::from(row.status == Status::Mismatch);
        w.write_case(&row, &samples)?;
        done.rows += 1;
    }
    Ok(done)
}
