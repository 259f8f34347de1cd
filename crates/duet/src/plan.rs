//! The pairs a visit takes after two rounds, per kind of case, and what a round costs:
//! the driver's plan from what the first rounds showed.

use crate::state::{CaseRun, Pair};

/// A count for the (host-timed, device-timed) cases.
pub(crate) type Kinds = (usize, usize);

/// What a visit of a kind of case costs, and the pairs it takes from the third round on.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Visit {
    pub(crate) pairs: usize,
    /// A visit's time beyond its pairs, and a pair's (ns; medians over the kind's cases).
    pub(crate) visit_ns: f64,
    pub(crate) pair_ns: f64,
}

/// A round's cost of `(host-timed, device-timed)` visits at `pairs` each: by the plan's
/// times, or one unit a visit before there is a plan (every visit took the same pairs).
pub(crate) fn round_cost(plan: Option<(Visit, Visit)>, cases: Kinds, pairs: Kinds) -> f64 {
    match plan {
        None => (cases.0 + cases.1) as f64,
        Some((h, d)) => {
            let one = |v: Visit, k: usize| v.visit_ns + k as f64 * v.pair_ns;
            cases.0 as f64 * one(h, pairs.0) + cases.1 as f64 * one(d, pairs.1)
        }
    }
}

/// Pairs a visit of a device-timed (`device`) or host-timed case should take from now on:
/// [`stats::paired::pairs_per_visit`] on the medians over those cases that have two rounds
/// of pairs: a pair's variance around its round's median (by the MAD), the variance of
/// the round medians, a visit's time beyond its pairs and a pair's time (the driver's
/// clock around it). `max` where no such case has run.
pub(crate) fn planned_pairs(cases: &[&CaseRun], device: bool, max: usize) -> Visit {
    let mut within = Vec::new();
    let mut between = Vec::new();
    let mut per_round = Vec::new();
    let mut visit = Vec::new();
    let mut pair = Vec::new();
    for c in cases.iter().filter(|c| c.key.mode.is_device() == device) {
        let mut by: std::collections::BTreeMap<u32, Vec<f64>> = Default::default();
        for p in &c.pairs {
            let (b, a) = p.per_call();
            if a > 0.0 && b > 0.0 {
                by.entry(p.round).or_default().push((a / b).ln());
            }
        }
        let rounds: Vec<&[f64]> = by
            .values()
            .filter(|v| v.len() >= 2)
            .map(Vec::as_slice)
            .collect();
        let Some((w, b)) = stats::paired::round_spreads(&rounds).filter(|_| c.unpaired.is_none())
        else {
            continue;
        };
        within.push(w);
        between.push(b);
        per_round.push(c.pairs.len() as f64 / rounds.len() as f64);
        let pair_ns = c.pairs.iter().map(Pair::cost_ns).sum::<f64>() / c.pairs.len() as f64;
        let visit_ns = c.spent.as_nanos() as f64 / f64::from(c.visits.max(1));
        pair.push(pair_ns);
        visit.push((visit_ns - per_round.last().copied().unwrap_or(0.0) * pair_ns).max(0.0));
    }
    if within.is_empty() {
        return Visit {
            pairs: max.max(1),
            visit_ns: 1.0,
            pair_ns: 0.0,
        };
    }
    let (visit_ns, pair_ns) = (stats::median(&visit), stats::median(&pair));
    let pairs = stats::paired::pairs_per_visit(
        stats::paired::Spread {
            within_var: stats::median(&within),
            round_var: stats::median(&between),
            pairs: stats::median(&per_round).round() as usize,
            visit_cost: visit_ns,
            pair_cost: pair_ns,
        },
        max,
    );
    Visit {
        pairs,
        visit_ns,
        pair_ns,
    }
}

#[cfg(test)]
mod tests {
    use super::planned_pairs;
    use crate::protocol::{CaseName, Sampled};
    use crate::state::{CaseRun, Pair};
    use std::time::Duration;

    fn device_case(wall_ns: Option<f64>) -> Result<CaseRun, String> {
        let fields: Vec<String> =
            "rmsnorm aten final_norm qwen3-0.6b decode 1 1 1025 f16 cuda:0 device"
                .split(' ')
                .map(String::from)
                .collect();
        let name = CaseName {
            key: "rmsnorm/aten/final_norm".into(),
            fields,
            ..Default::default()
        };
        let mut case = CaseRun::new(&name, "rmsnorm")?;
        let sampled = |x: f64| Sampled {
            key: name.key.clone(),
            calls: 100,
            total_ns: 1e6 * x,
            spent_ns: None,
            control_ns: None,
            host_ns: None,
            state: Default::default(),
            uncovered: None,
            planted_ns: None,
        };
        // two rounds of four pairs; each sample says 1 ms of GPU time
        for (i, x) in [1.0, 1.01, 0.99, 1.0, 1.02, 1.0, 0.98, 1.01]
            .iter()
            .enumerate()
        {
            case.pairs.push(Pair {
                round: i as u32 / 4,
                index: i as u32,
                base: sampled(1.0),
                cand: sampled(*x),
                base_first: i % 2 == 0,
                wall_ns,
            });
        }
        case.visits = 2;
        case.spent = Duration::from_millis(2 * (50 + 4 * 10));
        Ok(case)
    }

    #[test]
    fn a_pair_is_priced_by_the_drivers_clock_not_by_the_time_its_samples_report()
    -> Result<(), String> {
        // pairs that took 10 ms by the driver's clock, of samples that report 1 ms each
        let timed = device_case(Some(10e6))?;
        let v = planned_pairs(&[&timed], true, 32);
        assert!((v.pair_ns - 10e6).abs() < 1.0, "{v:?}");
        // a visit: 90 ms, of which 4 pairs took 40
        assert!((v.visit_ns - 50e6).abs() < 1e3, "{v:?}");
        // a replayed run has no clock: the samples' own times
        let replayed = device_case(None)?;
        let v = planned_pairs(&[&replayed], true, 32);
        assert!((v.pair_ns - 2.00125e6).abs() < 1e3, "{v:?}");
        Ok(())
    }
}
