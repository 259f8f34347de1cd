//! What the state columns showed on the H200 (tests/fixtures/state-2026-12-01): the flags
//! against the samples that ran slow, by the readers' own rule (rundir::flag_each).
#![allow(clippy::unwrap_used)]

mod common;

use rundir::{Mode, Run, Sample};

/// (slow samples, of them flagged, other samples, of them flagged).
type Counts = (usize, usize, usize, usize);

/// Add one case's samples (of one execution) to `c`: slow is over 1.3× their median; a case
/// whose samples record no state is not judged.
fn tally(samples: &[Sample], c: &mut Counts) {
    let Some(flags) = rundir::flag_each(samples) else {
        return;
    };
    let per: Vec<f64> = samples.iter().map(|s| s.per_call_ns()).collect();
    let median = stats::median(&per);
    for (p, f) in per.iter().zip(flags) {
        if *p > 1.3 * median {
            c.0 += 1;
            c.1 += usize::from(f);
        } else {
            c.2 += 1;
            c.3 += usize::from(f);
        }
    }
}

/// [`Counts`] in `mode`, each case judged within each of its executions.
fn flag_counts(run: &Run, mode: Mode) -> Counts {
    let mut c = (0, 0, 0, 0);
    for (key, samples) in run.samples().unwrap() {
        if key.mode != mode {
            continue;
        }
        for e in [1, 2] {
            let of: Vec<_> = samples
                .iter()
                .filter(|s| s.execution == e)
                .cloned()
                .collect();
            if !of.is_empty() {
                tally(&of, &mut c);
            }
        }
    }
    c
}

fn load(name: &str) -> Run {
    common::fixture(&format!("state-2026-12-01/{name}"))
}

#[test]
fn the_host_control_after_each_sample_too_does_not_reach_four_in_five() {
    // a second run (a2, the same command, with `host_after_ns`): 15 of 24 slow pipelined
    // samples flagged (62.5%), 445 of the other 3,876 (11.5%)
    let run = load("a2");
    assert!(
        run.samples()
            .unwrap()
            .values()
            .flatten()
            .all(|s| s.state.host_after_ns.is_some())
    );
    assert_eq!(flag_counts(&run, Mode::Pipelined), (24, 15, 3876, 445));
    assert_eq!(flag_counts(&run, Mode::Device).0, 0);
}

#[test]
fn on_the_h200_the_flags_catch_most_slow_pipelined_samples_and_a_tenth_of_the_rest() {
    let run = load("a1");
    // every sample carries the GPU's state from NVML; the SM clock sat at its maximum
    // (1980 MHz) but for the samples the power cap held down (throttle 0x4)
    let samples = run.samples().unwrap();
    let all: Vec<_> = samples.values().flatten().collect();
    assert!(
        all.iter()
            .all(|s| s.state.sm_mhz.is_some() && s.state.cpu_ns.is_some())
    );
    let capped = all.iter().filter(|s| s.state.throttle == Some(4)).count();
    assert_eq!((all.len(), capped), (7800, 155));
    // 30 of the 50 pipelined samples over 1.3× their median are flagged (60%; issue 31
    // asks 80%), and 425 of the other 3,850 (11.0%; it asks ≤ 10%); no device sample ran
    // over 1.3× its median
    assert_eq!(flag_counts(&run, Mode::Pipelined), (50, 30, 3850, 425));
    let (slow, _, others, flagged) = flag_counts(&run, Mode::Device);
    assert_eq!((slow, others), (0, 3900));
    assert!(flagged * 100 < 13 * others, "{flagged}");
}

/// (slow, of them flagged, others, of them flagged) per group of gen2's execution `e`
/// (`generate-2026-12-01/gen2`): op crates, the peer's HF rows (variant transformers) and
/// its Python op rows, over the pipelined samples that record a state.
fn gen2_counts(e: u32) -> [Counts; 3] {
    let run = common::fixture(&format!("generate-2026-12-01/gen2/{e}"));
    let mut out = [(0, 0, 0, 0); 3];
    for (key, samples) in run.samples().unwrap() {
        if key.mode != Mode::Pipelined || !samples.iter().any(|s| s.host_ns.is_some()) {
            continue;
        }
        let group = if key.variant == "transformers" {
            1
        } else if key.variant.starts_with("py-") {
            2
        } else {
            0
        };
        tally(&samples, &mut out[group]);
    }
    out
}

#[test]
fn with_the_decode_grid_and_the_peer_the_flags_catch_four_in_five_slow_samples() {
    // op crates, the HF rows, the Python op rows: every group ≥ 80% of its slow samples
    // flagged; of the others 4–14% (issue 31 asks ≤ 10%: three groups of six)
    assert_eq!(
        gen2_counts(1),
        [(6, 5, 1584, 134), (18, 16, 462, 52), (6, 5, 784, 55)]
    );
    assert_eq!(
        gen2_counts(2),
        [(25, 24, 1565, 220), (38, 37, 442, 54), (4, 4, 786, 32)]
    );
}

#[test]
fn on_later_runs_of_other_shapes_the_flags_catch_fewer_and_flag_more() {
    // the MoE run and the prefill run of the same day (moe-2026-12-01): 11 of 17 and 5 of 9
    // slow pipelined samples flagged (65%, 56%), 18.3% and 19.5% of the others — the rule
    // gen2 met four in five with does not carry over (issue 31 stays open on it)
    let moe = common::fixture("moe-2026-12-01/moe");
    let (slow, caught, others, flagged) = flag_counts(&moe, Mode::Pipelined);
    assert_eq!((slow, caught), (17, 11));
    assert!(
        (flagged as f64 / others as f64 - 0.183).abs() < 0.001,
        "{flagged}/{others}"
    );
    let prefill = common::fixture("moe-2026-12-01/prefill");
    let (slow, caught, others, flagged) = flag_counts(&prefill, Mode::Pipelined);
    assert_eq!((slow, caught), (9, 5));
    assert!(
        (flagged as f64 / others as f64 - 0.195).abs() < 0.001,
        "{flagged}/{others}"
    );
}
