//! What timing a case leaves: its row, its samples and the case beside's runs, from
//! what criterion's calls recorded, or the row of a case that failed or panicked.

use super::*;

/// (iters, total ns, (torch control ns, host control ns)) of every call criterion makes.
pub(super) type Record = Vec<(u64, f64, Controls)>;

/// How timing a case ended: a panic, a torch error (raised by the case beside where
/// `beside_failed`), or neither.
pub(super) struct Ended {
    pub(super) outcome: Option<Box<dyn std::any::Any + Send>>,
    pub(super) failed: Option<TchError>,
    pub(super) beside_failed: bool,
}

/// The case's row, samples and the case beside's runs, from what criterion's calls
/// recorded: criterion calls once per warm-up round, then once per sample, so the
/// samples are the last `samples_per_case` calls (in test mode, the single call).
pub(super) fn case_result(
    mut row: ResultRow,
    ended: Ended,
    (record, beside): (&Record, &[(u64, f64)]),
    samples_per_case: usize,
    (key, execution): (&CaseKey, u32),
) -> (ResultRow, Vec<Sample>, Vec<(u64, f64)>) {
    if let Some(panic) = ended.outcome {
        row.status = Status::Error;
        row.note = Some(format!("panicked while timing: {}", panic_message(&panic)));
        return (row, Vec::new(), Vec::new());
    }
    if let Some(e) = ended.failed {
        end_as_failed(&mut row, e, ended.beside_failed);
        return (row, Vec::new(), Vec::new());
    }
    let tail = &record[record.len().saturating_sub(samples_per_case)..];
    let samples = summarize_samples(&mut row, tail, key, execution);
    // the case beside: its runs before the same samples
    let beside_tail = beside[beside.len().saturating_sub(samples_per_case)..].to_vec();
    (row, samples, beside_tail)
}

/// `row` ended by `e`, raised by the case timed beside it where `beside`.
fn end_as_failed(row: &mut ResultRow, e: TchError, beside: bool) {
    let f = Failure::from(e);
    row.status = f.status;
    row.note = Some(if beside {
        format!("the case timed beside it failed: {}", f.reason)
    } else {
        f.reason
    });
}

/// The device clock's coverage of a device-mode row's samples: its uncovered chunks, and
/// a note where there were gaps.
pub(super) fn note_coverage(row: &mut ResultRow, clock: &mut DeviceClock) {
    let coverage = clock.take_coverage();
    row.uncovered_chunks = Some(coverage.uncovered);
    if let Some(gaps) = coverage.note() {
        row.note = Some(match row.note.take() {
            Some(n) => format!("{n}; {gaps}"),
            None => gaps,
        });
    }
}

/// The samples of a case's row (its last calls of criterion's, with their controls and
/// state), and the row summarized from them: its flags, torch control and estimate.
fn summarize_samples(
    row: &mut ResultRow,
    tail: &[(u64, f64, Controls)],
    key: &CaseKey,
    execution: u32,
) -> Vec<Sample> {
    let samples: Vec<Sample> = tail
        .iter()
        .map(|&(iters, total_ns, c)| Sample {
            key: key.clone(),
            execution,
            iters,
            total_ns,
            control_ns: c.torch,
            host_ns: c.host,
            state: c.state,
            pair: None,
        })
        .collect();
    row.flagged = rundir::flagged(&samples);
    let controls: Vec<f64> = tail.iter().filter_map(|s| s.2.torch).collect();
    if !controls.is_empty() {
        row.control_ns = Some(stats::median(&controls));
    }
    let pairs: Vec<(u64, f64)> = tail.iter().map(|&(i, t, _)| (i, t)).collect();
    row.summarize(&pairs);
    samples
}

/// Bytes one call of a prepared case moves: its own count where the variant moves more
/// than the problem's minimum, else the problem's.
pub(crate) fn case_bytes(prepared: &dyn Prepared, problem: &Problem, dt: DType) -> u64 {
    prepared.bytes().unwrap_or_else(|| problem.bytes(dt.size()))
}

/// An ok row of a timed case before its timing: identity, work, the kernel and note.
pub(super) fn timed_row(
    run_id: &str,
    key: &CaseKey,
    problem: &Problem,
    dt: DType,
    prepared: &dyn Prepared,
) -> ResultRow {
    let mut row = base_row(run_id, key, problem, dt, Status::Ok);
    row.bytes = case_bytes(prepared, problem, dt);
    row.kernel = prepared.kernel();
    row.note = prepared.note();
    row
}
