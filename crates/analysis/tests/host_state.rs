//! `--host-state fast` prices a host-timed row at its clean samples where they record their
//! state, and at the 10th percentile where they do not.
#![allow(clippy::unwrap_used)]

mod common;

use analysis::predict::{HostState, at_host_state};
use rundir::{CaseKey, ResultRow, Run, Sample, SampleState, Status};

fn key() -> CaseKey {
    common::op_key(rundir::OpKind::Linear, "q_proj")
}

fn run_with(dir: &std::path::Path, samples: &[Sample]) -> Run {
    let mut w = common::h200_writer(dir);
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

/// The peer's decode row `site` at B = 1 (the transformers profile's shape).
fn peer_key(site: &str) -> CaseKey {
    common::peer_key(site, 1)
}

/// A run of the peer's rows `(site, ns per sample)`, every sample one call in one
/// execution, in the order given (round i: the i-th of each).
fn peer_run(dir: &std::path::Path, rows: &[(&str, Vec<f64>)]) -> Run {
    rows_run(dir, rows, peer_key)
}

/// The same with each row's key from `key(site)`.
fn rows_run(dir: &std::path::Path, rows: &[(&str, Vec<f64>)], key: fn(&str) -> CaseKey) -> Run {
    let mut w = common::h200_writer(dir);
    for (site, ns) in rows {
        let calls: Vec<(u64, f64)> = ns.iter().map(|t| (1, *t)).collect();
        let samples = Sample::bare(&key(site), 1, &calls);
        let mut row = ResultRow::new("r", key(site), "batch=1 L=1024".into(), Status::Ok);
        row.summarize(&calls);
        w.write_case(&row, &samples).unwrap();
    }
    Run::load(dir).unwrap()
}

/// Ten rounds of a host in two states: `ns` a sample, 1.6× in the `rounds` that ran slow.
fn slow(rounds: std::ops::Range<usize>, ns: f64) -> Vec<f64> {
    (0..10)
        .map(|i| if rounds.contains(&i) { 1.6 * ns } else { ns })
        .collect()
}

#[test]
fn rows_sampled_in_rounds_are_read_against_their_base_pair_by_pair() {
    // a host in two states, the slow one 1.6×. The step (25 ms fast) is slow in rounds
    // 5-9; its layer beside (1/29.4 of the step in its round's state) is slow in rounds
    // 3-9 — its median a slow state's, the step's between the two: 23.9 from the medians,
    // 29.4 in eight of ten rounds. The stack (0.96 ms a layer fast) is slow in rounds 4-9,
    // its calls flat (0.9 ms) in 8-9 only: their medians differ by 636 µs, the rounds by
    // 60 µs (both fast), 96 µs (both slow) or 636 µs (four rounds)
    let step = slow(5..10, 25e6);
    let beside: Vec<f64> = slow(3..10, 25e6).iter().map(|t| t / 29.4).collect();
    let stack = slow(4..10, 0.96e6);
    let flat = slow(8..10, 0.9e6);
    let dir = tempfile::tempdir().unwrap();
    let run = peer_run(
        dir.path(),
        &[
            ("step", step.clone()),
            ("layer_beside", beside.clone()),
            ("stack", stack),
            ("stack_flat", flat),
        ],
    );
    let median = |r: &Run, site: &str| r.row(&peer_key(site)).unwrap().median_ns.unwrap();
    // as loaded: the medians, each in its own mix of states
    assert!(median(&run, "layer_beside") / median(&run, "step") > 1.0 / 25.0);
    assert!(median(&run, "stack") - median(&run, "stack_flat") > 0.4e6);
    for state in [HostState::Typical, HostState::Fast] {
        let read = at_host_state(&run, state).unwrap();
        let (b, s) = (median(&read, "layer_beside"), median(&read, "step"));
        assert!((s / b - 29.4).abs() < 0.5, "{state:?}: {}", s / b);
        let own = median(&read, "stack") - median(&read, "stack_flat");
        assert!((own - 96e3).abs() < 1e3, "{state:?}: {own}");
        let note = read
            .row(&peer_key("layer_beside"))
            .unwrap()
            .note
            .clone()
            .unwrap();
        assert!(note.contains("read against step in 10 rounds"), "{note}");
        // the base rows keep their own reading
        assert_eq!(s, median(&at_host_state(&run, state).unwrap(), "step"));
    }
    // rows whose samples do not pair (a round missing) keep their medians
    let dir = tempfile::tempdir().unwrap();
    let run = peer_run(
        dir.path(),
        &[("step", step), ("layer_beside", beside[..9].to_vec())],
    );
    let read = at_host_state(&run, HostState::Typical).unwrap();
    assert_eq!(median(&read, "layer_beside"), median(&run, "layer_beside"));
}

#[test]
fn generate_from_a_static_cache_is_read_against_generate_in_the_same_rounds() {
    // generate() per token: 30 ms fast, 1.6× in rounds 5-9 (its median between the two
    // states, 39 ms); from a static cache 1.3× generate() in its round's state, slow in
    // rounds 3-9: its median a slow state's (62.4 ms, 1.6× generate()'s), its ratio 1.3 in
    // eight rounds of ten
    let generate = slow(5..10, 30e6);
    let stat = slow(3..10, 1.3 * 30e6);
    let dir = tempfile::tempdir().unwrap();
    let run = peer_run(
        dir.path(),
        &[
            ("generate_from_l", generate),
            (shapes::STATIC_GENERATE, stat),
        ],
    );
    let median = |r: &Run, site: &str| r.row(&peer_key(site)).unwrap().median_ns.unwrap();
    let as_loaded = median(&run, shapes::STATIC_GENERATE) / median(&run, "generate_from_l");
    assert!((as_loaded - 1.6).abs() < 0.05, "{as_loaded}");
    let read = at_host_state(&run, HostState::Typical).unwrap();
    let ratio = median(&read, shapes::STATIC_GENERATE) / median(&read, "generate_from_l");
    assert!((ratio - 1.3).abs() < 0.01, "{ratio}");
    let note = read
        .row(&peer_key(shapes::STATIC_GENERATE))
        .unwrap()
        .note
        .clone()
        .unwrap();
    assert!(note.contains("read against generate_from_l"), "{note}");
}

/// The decode crate's fused-profile row `site` at B = 64.
fn fused_key(site: &str) -> CaseKey {
    let mut k = common::peer_key(site, 64);
    k.series.variant = "fused".into();
    k
}

#[test]
fn the_decode_crates_layer_beside_is_read_in_pairs_only_beside_a_short_step() {
    // the fused step's ten samples in a host of two states, the slow one 1.6×: the step
    // (9.3 ms fast) slow in rounds 5-9, its layer beside (1/28 of it in its round's state)
    // in rounds 4-9 — the beside's median a slow state's, the step's between the two
    let step = slow(5..10, 9.3e6);
    let beside: Vec<f64> = slow(4..10, 9.3e6).iter().map(|t| t / 28.0).collect();
    let dir = tempfile::tempdir().unwrap();
    let run = rows_run(
        dir.path(),
        &[("step", step), ("layer_beside", beside.clone())],
        fused_key,
    );
    let ratio = |r: &Run| {
        r.row(&fused_key("step")).unwrap().median_ns.unwrap()
            / r.row(&fused_key("layer_beside"))
                .unwrap()
                .median_ns
                .unwrap()
    };
    assert!(ratio(&run) < 25.0, "{}", ratio(&run));
    let read = at_host_state(&run, HostState::Typical).unwrap();
    assert!((ratio(&read) - 28.0).abs() < 0.1, "{}", ratio(&read));
    // beside a step sample of 0.7 s (a MoE step) one state no longer holds it: the medians
    let long = slow(5..10, 0.7e9);
    let beside: Vec<f64> = slow(4..10, 0.7e9).iter().map(|t| t / 28.0).collect();
    let dir = tempfile::tempdir().unwrap();
    let run = rows_run(
        dir.path(),
        &[("step", long), ("layer_beside", beside)],
        fused_key,
    );
    let read = at_host_state(&run, HostState::Typical).unwrap();
    assert_eq!(ratio(&read), ratio(&run));
    const { assert!(shapes::BESIDE_PAIRED_AT_MOST_NS < 0.7e9) };
}
