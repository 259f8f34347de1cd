//! Planted truth for change-point detection: synthetic histories of builds with the noise
//! measured on the H200 (docs/findings.md), steps planted at known runs.
//!
//! Noise model, per case: each run is 5 executions (processes); an execution's value is the
//! true time × exp(N(0, cv)), cv drawn per case log-normal with median 3.8% and p90 7.8%
//! (the between-execution CV of host-bound pipelined cases at equal host speed, the noisiest
//! rows compare uses); the run's value is the mean of its executions' medians. On top, a slow
//! drift: a random walk of 0.3% per run (an assumption: no drift across builds has been
//! measured yet). 30 runs per history.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, LogNormal, Normal};
use stats::{CpSettings, change_points};

const RUNS: usize = 30;
const EXECUTIONS: usize = 5;

/// One history: per-run values, with a step of `step` (0.1 = +10%) from run `at` on.
fn history(rng: &mut StdRng, step: f64, at: usize) -> Vec<f64> {
    // median 3.8%, p90 7.8%: sigma = ln(7.8 / 3.8) / z(0.9)
    let cv_dist = LogNormal::new(0.038f64.ln(), (7.8f64 / 3.8).ln() / 1.2816).expect("valid");
    let cv: f64 = cv_dist.sample(rng);
    let noise = Normal::new(0.0, cv).expect("valid");
    let drift_step = Normal::new(0.0, 0.003).expect("valid");
    let base = 10_000.0 * rng.random_range(0.5..2.0);
    let mut drift = 0.0;
    (0..RUNS)
        .map(|i| {
            drift += drift_step.sample(rng);
            let level = base * (1.0 + drift) * if i >= at { 1.0 + step } else { 1.0 };
            let execs: Vec<f64> = (0..EXECUTIONS)
                .map(|_| level * noise.sample(rng).exp())
                .collect();
            // the run's value: the mean of its executions' medians, as `opbench history`
            // takes it
            execs.iter().sum::<f64>() / execs.len() as f64
        })
        .collect()
}

struct Tally {
    histories: usize,
    found: usize,
    with_false: usize,
}

fn run(step: f64, n: usize, seed: u64) -> Tally {
    let mut rng = StdRng::seed_from_u64(seed);
    let s = CpSettings::default();
    let mut t = Tally {
        histories: n,
        found: 0,
        with_false: 0,
    };
    for _ in 0..n {
        let at = rng.random_range(5..RUNS - 5);
        let x = history(&mut rng, step, if step == 0.0 { RUNS } else { at });
        let cps = change_points(&x, &s);
        let near = |i: usize| i.abs_diff(at) <= 1;
        if step != 0.0 && cps.iter().any(|c| near(c.index)) {
            t.found += 1;
        }
        // a change point away from the planted step is false; one near it found the step
        let found = step != 0.0 && cps.iter().any(|c| near(c.index));
        let false_ones = cps.iter().filter(|c| step == 0.0 || !near(c.index)).count();
        if false_ones > usize::from(step != 0.0 && !found) {
            // a misplaced step (no change point near it) is a miss, counted above; any
            // change point beyond it is false
            t.with_false += 1;
        }
    }
    t
}

#[test]
fn planted_steps_are_found_at_the_right_run() {
    for (step, seed) in [(0.10, 11), (0.20, 12), (-0.10, 13)] {
        let t = run(step, 2000, seed);
        let found = t.found as f64 / t.histories as f64;
        let false_rate = t.with_false as f64 / t.histories as f64;
        eprintln!("step {step:+}: found {found:.3}, false {false_rate:.3}");
        assert!(found >= 0.95, "step {step:+}: found {found:.3} < 0.95");
        assert!(
            false_rate <= 0.01,
            "step {step:+}: false {false_rate:.3} > 0.01"
        );
    }
}

#[test]
fn flat_histories_rarely_get_a_change_point() {
    let t = run(0.0, 2000, 21);
    let false_rate = t.with_false as f64 / t.histories as f64;
    eprintln!("no step: false {false_rate:.4}");
    assert!(false_rate <= 0.01, "false change points in {false_rate:.4}");
}

#[test]
fn small_steps_below_the_minimum_magnitude_are_not_reported() {
    // a 2% step is real but under the 5% minimum: it must not be reported as a change
    let t = run(0.02, 500, 31);
    let any = t.with_false + t.found;
    eprintln!("2% step: reported in {any} of {}", t.histories);
    assert!(
        (any as f64) / (t.histories as f64) <= 0.02,
        "{any} of {}",
        t.histories
    );
}
