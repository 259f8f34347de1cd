//! A busy machine is named: a run most of whose samples of an op carry a host flag
//! (switched out, stolen, stalled: other work on the cores) is busy, by op; a quiet run, or
//! one where a few samples were taken, is not; a run that records no state says nothing.
#![allow(clippy::unwrap_used)]

mod common;

use rundir::{CaseKey, ResultRow, Run, Sample, SampleState, Status};

fn key(op: rundir::OpKind, site: &str) -> CaseKey {
    common::op_key(op, site)
}

/// Twenty samples of `key`, the first `taken` of them switched out 10 times in 1 ms.
fn samples(key: &CaseKey, taken: usize, counters: bool) -> Vec<Sample> {
    (0..20)
        .map(|i| {
            let mut s = Sample::bare(key, 1, &[(100, 1e6)]).remove(0);
            if counters {
                s.state = SampleState {
                    nivcsw: Some(if i < taken { 10 } else { 0 }),
                    steal: Some(0),
                    ..SampleState::default()
                };
            }
            s
        })
        .collect()
}

fn run_with(dir: &std::path::Path, cases: &[(CaseKey, Vec<Sample>)]) -> Run {
    let mut w = common::h200_writer(dir);
    for (key, samples) in cases {
        let mut row = ResultRow::new("r", key.clone(), "m=1".into(), Status::Ok);
        let pairs: Vec<(u64, f64)> = samples.iter().map(|s| (s.iters, s.total_ns)).collect();
        row.summarize(&pairs);
        w.write_case(&row, samples).unwrap();
    }
    Run::load(dir).unwrap()
}

#[test]
fn most_samples_taken_is_a_busy_machine_by_op() {
    let lin = key(rundir::OpKind::Linear, "q_proj");
    let norm = key(rundir::OpKind::RmsNorm, "input_norm");
    let dir = tempfile::tempdir().unwrap();
    // linear: 18 of 20 switched out; rmsnorm: 3 of 20
    let run = run_with(
        dir.path(),
        &[
            (lin.clone(), samples(&lin, 18, true)),
            (norm.clone(), samples(&norm, 3, true)),
        ],
    );
    let busy = analysis::busy::judge(&run).unwrap().expect("busy");
    assert_eq!(busy.ops.len(), 1, "{busy:?}");
    let (op, t) = busy.ops.iter().next().unwrap();
    assert_eq!((op.as_str(), t.taken, t.samples), ("linear", 18, 20));
    let line = busy.line(dir.path());
    assert!(
        line.starts_with("busy machine: 18 of 20 linear samples"),
        "{line}"
    );
    assert!(line.contains("OPBENCH_RUN="), "{line}");
    assert_eq!(
        analysis::busy::line_for(&run).as_deref(),
        Some(line.as_str())
    );
}

#[test]
fn a_quiet_run_or_one_without_counters_is_not_busy() {
    let lin = key(rundir::OpKind::Linear, "q_proj");
    for (taken, counters) in [(0, true), (10, true), (20, false)] {
        let dir = tempfile::tempdir().unwrap();
        let run = run_with(dir.path(), &[(lin.clone(), samples(&lin, taken, counters))]);
        assert_eq!(
            analysis::busy::judge(&run).unwrap(),
            None,
            "{taken} {counters}"
        );
        assert_eq!(analysis::busy::line_for(&run), None);
    }
}

/// Time slices: 15 of 20 samples with a stretch of their calls at 3× the case's pace.
#[test]
fn stalled_samples_are_a_busy_machine() {
    let lin = key(rundir::OpKind::Linear, "q_proj");
    let mut s = samples(&lin, 0, true);
    for x in s.iter_mut().take(15) {
        x.state.slowest_ns = Some(3.0 * x.per_call_ns());
    }
    for x in s.iter_mut().skip(15) {
        x.state.slowest_ns = Some(1.1 * x.per_call_ns());
    }
    let dir = tempfile::tempdir().unwrap();
    let run = run_with(dir.path(), &[(lin, s)]);
    let busy = analysis::busy::judge(&run).unwrap().expect("busy");
    assert_eq!(busy.ops["linear"].taken, 15);
}
