//! `--host-state fast` prices a host-timed row at its clean samples where they record their
//! state, and at the 10th percentile where they do not.
#![allow(clippy::unwrap_used)]

use analysis::predict::{HostState, at_host_state};
use rundir::{CaseKey, Env, ResultRow, Run, RunWriter, Sample, SampleState, SeriesKey, Status};

fn key() -> CaseKey {
    SeriesKey {
        op: rundir::OpKind::Linear,
        variant: "aten".into(),
        site: "q_proj".into(),
        model: "qwen3-0.6b".into(),
        phase: rundir::Phase::Decode,
        q_len: 1,
        kv_len: None,
        dtype: rundir::DType::F16,
        device: "cuda:0".parse().unwrap(),
        mode: rundir::Mode::Pipelined,
    }
    .at(1)
}

fn run_with(dir: &std::path::Path, samples: &[Sample]) -> Run {
    let env = Env {
        run_id: "r".into(),
        started_at: "2026-12-01T10:00:00Z".into(),
        backend: "cuda".into(),
        devices: vec!["cuda:0".into()],
        device_name: Some("NVIDIA H200".into()),
        libtorch_version: "2.11.0".into(),
        ..Env::default()
    };
    let mut w = RunWriter::at(dir, "r", &env).unwrap();
    let mut row = ResultRow::new("r", key(), "m=1 n=2048 k=1024".into(), Status::Ok);
    let pairs: Vec<(u64, f64)> = samples.iter().map(|s| (s.iters, s.total_ns)).collect();
    row.summarize(&pairs);
    row.flagged = rundir::flagged(samples);
    w.write_case(&row, samples).unwrap();
    Run::load(dir).unwrap()
}

#[test]
fn the_fast_state_is_the_clean_samples_where_they_are_recorded() {
    // ten samples of 10 µs a call; three taken while the host was slow (30 µs, host
    // control 1.5× its median) or the hypervisor stole time (20 µs)
    let mut samples = Vec::new();
    for ns in [10e3, 10e3, 30e3, 10e3, 20e3, 10e3, 30e3, 10e3, 10e3, 10e3] {
        let mut s = Sample::bare(&key(), 1, &[(1, ns)]).remove(0);
        s.host_ns = Some(if ns == 30e3 { 75_000.0 } else { 50_000.0 });
        s.state = SampleState {
            steal: Some(u64::from(ns == 20e3)),
            nivcsw: Some(0),
            ..SampleState::default()
        };
        samples.push(s);
    }
    let dir = tempfile::tempdir().unwrap();
    let run = run_with(dir.path(), &samples);
    assert_eq!(run.results[0].flagged, Some(3));
    let fast = at_host_state(&run, HostState::Fast).unwrap();
    let r = &fast.results[0];
    assert_eq!(r.median_ns, Some(10e3));
    assert!(
        r.note
            .as_deref()
            .unwrap()
            .contains("the median of its 7 clean samples of 10"),
        "{r:?}"
    );
    // without state columns: the 10th percentile of all ten
    let bare: Vec<Sample> = samples
        .iter()
        .map(|s| Sample::bare(&s.key, 1, &[(s.iters, s.total_ns)]).remove(0))
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let run = run_with(dir.path(), &bare);
    assert_eq!(run.results[0].flagged, None);
    let fast = at_host_state(&run, HostState::Fast).unwrap();
    assert!(
        fast.results[0]
            .note
            .as_deref()
            .unwrap()
            .contains("10th percentile"),
        "{:?}",
        fast.results[0]
    );
}
