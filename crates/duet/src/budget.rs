//! The budget kept: what the obligatory rounds cost before any is timed, the pairs and
//! cases that fit them inside `--budget`, or the least budget the grid needs; and the
//! cost of one visit as the run goes, so that no visit starts that would end past it.
//!
//! Why a budget was overrun before (issue 79): the first two rounds always ran, whatever
//! they cost, and a round's worker starts (a torch process and its device context a side
//! and a group) were priced by nothing before the first round. On an H100 two rounds of
//! the calibration grid took 150 s of a 110 s budget; on the CPU, 262 s of 60.

use std::time::Duration;

/// The fewest pairs a visit takes in the obligatory rounds: a round's median of fewer
/// has no spread of its own to be priced by (the plan of the later rounds).
pub const MIN_PAIRS: usize = 3;

/// The share of the budget the obligatory rounds are planned into: the rest is kept for
/// what a visit costs beyond its estimate and for the writing at the end.
const PLANNED_SHARE: f64 = 0.85;

/// What a visit costs, from the settings alone, before one is timed: its calibration
/// (warm-up calls until [`crate::Settings::warmup`] is spent, two samples of each side at
/// least), its pairs (two samples, each after one untimed call), and `prepare` (making the
/// case and checking it against float64 on both sides, and releasing it).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct VisitPrior {
    pub sample: Duration,
    pub warmup: Duration,
    pub prepare: Duration,
}

impl VisitPrior {
    /// A visit of `pairs` pairs.
    pub fn visit(&self, pairs: usize) -> Duration {
        let calibrate = self.warmup.max(self.sample * 4);
        calibrate + self.prepare + self.sample * (2 * pairs as u32)
    }
}

/// The plan of the obligatory rounds, printed before any timing.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BudgetPlan {
    /// Rounds every case must take before it can be judged.
    pub rounds: usize,
    /// Pairs a visit takes in them.
    pub pairs: usize,
    /// Cases run of those listed; the rest are listed as not run.
    pub cases: usize,
    pub listed: usize,
    /// What the obligatory rounds are estimated to take, starts included.
    pub estimate: Duration,
    /// What they take at [`MIN_PAIRS`] with every case: the least budget this grid needs.
    pub least: Duration,
    pub budget: Duration,
}

impl BudgetPlan {
    /// The line printed first.
    pub fn line(&self) -> String {
        let dropped = if self.cases < self.listed {
            format!(
                "; {} of {} cases fit (the rest are listed as not run; --budget {:.0} runs all)",
                self.cases,
                self.listed,
                self.least.as_secs_f64().ceil()
            )
        } else {
            String::new()
        };
        format!(
            "opbench ab: estimate {:.0} s for the {} obligatory rounds ({} cases, {} pairs a \
             visit, the workers' starts included) of a {:.0} s budget{dropped}",
            self.estimate.as_secs_f64(),
            self.rounds,
            self.cases,
            self.pairs,
            self.budget.as_secs_f64()
        )
    }
}

/// Why the budget cannot hold this grid.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error(
    "--budget {budget:.0}: too short for this grid ({listed} cases, {rounds} rounds): it needs \
     at least {least:.0} s ({half:.0} s for half of its cases); give more or select fewer cases"
)]
pub struct TooShort {
    pub budget: f64,
    pub listed: usize,
    pub rounds: usize,
    pub least: f64,
    pub half: f64,
}

/// The pairs and cases the obligatory `rounds` fit in `budget`: the settings' pairs where
/// they fit, else fewer (down to [`MIN_PAIRS`]), else fewer cases, as long as half of them
/// fit; else [`TooShort`]. `starts` is what starting one round's workers took (measured
/// when the cases were listed), `spent` what is gone already.
pub fn plan(
    listed: usize,
    rounds: usize,
    pairs: usize,
    prior: VisitPrior,
    (starts, spent): (Duration, Duration),
    budget: Duration,
) -> Result<BudgetPlan, TooShort> {
    let rounds = rounds.max(1);
    let cost =
        |cases: usize, p: usize| spent + (starts + prior.visit(p) * cases as u32) * rounds as u32;
    let room = budget.mul_f64(PLANNED_SHARE);
    let min_pairs = MIN_PAIRS.min(pairs.max(1));
    let least = cost(listed, min_pairs).mul_f64(1.0 / PLANNED_SHARE);
    let made = |cases: usize, p: usize| BudgetPlan {
        rounds,
        pairs: p,
        cases,
        listed,
        estimate: cost(cases, p),
        least,
        budget,
    };
    if let Some(p) = (min_pairs..=pairs.max(min_pairs))
        .rev()
        .find(|&p| cost(listed, p) <= room)
    {
        return Ok(made(listed, p));
    }
    let fit = (0..=listed)
        .rev()
        .find(|&k| cost(k, min_pairs) <= room)
        .unwrap_or(0);
    if listed == 0 || fit * 2 >= listed && fit > 0 {
        return Ok(made(fit, min_pairs));
    }
    Err(TooShort {
        budget: budget.as_secs_f64(),
        listed,
        rounds,
        least: least.as_secs_f64().ceil(),
        half: cost(listed.div_ceil(2), min_pairs)
            .mul_f64(1.0 / PLANNED_SHARE)
            .as_secs_f64()
            .ceil(),
    })
}

/// The pairs a visit of the second obligatory round can take so that the round fits
/// `left`: each visit costs `fixed` beyond its pairs and `pair` a pair (as the first round
/// showed), `starts` to start the round's workers; at most `max`, at least 2 (`None`:
/// not even 2 fit, and the round visits only as many cases as time allows).
pub fn pairs_that_fit(
    visits: usize,
    (fixed, pair): (Duration, Duration),
    starts: Duration,
    left: Duration,
    max: usize,
) -> Option<usize> {
    let room = left.mul_f64(PLANNED_SHARE);
    (2..=max.max(2))
        .rev()
        .find(|&p| starts + (fixed + pair * p as u32) * visits as u32 <= room)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prior() -> VisitPrior {
        VisitPrior {
            sample: Duration::from_millis(10),
            warmup: Duration::from_millis(50),
            prepare: Duration::from_millis(50),
        }
    }

    #[test]
    fn the_plan_takes_fewer_pairs_then_fewer_cases_then_refuses() {
        let s = Duration::from_secs;
        // a visit of 8 pairs: 50 + 50 + 160 ms = 0.26 s; 100 cases, 2 rounds, 2 s of starts
        let p = plan(100, 2, 8, prior(), (s(2), s(1)), s(80)).unwrap();
        assert_eq!((p.pairs, p.cases), (8, 100));
        assert!(p.estimate <= s(80).mul_f64(PLANNED_SHARE), "{p:?}");
        // 40 s (34 planned): 8 pairs do not fit (1 + 2 × (2 + 26) = 57 s), nor 3 (1 + 2 ×
        // (2 + 16) = 37 s): fewer cases
        let p = plan(100, 2, 8, prior(), (s(2), s(1)), s(40)).unwrap();
        assert_eq!(p.pairs, 3);
        assert!(p.cases < 100 && p.cases * 2 >= 100, "{p:?}");
        assert!(p.line().contains("listed as not run"), "{}", p.line());
        let p = plan(100, 2, 8, prior(), (s(2), s(1)), s(45)).unwrap();
        assert_eq!(p.cases, 100);
        assert!(p.pairs < 8, "{p:?}");
        // 15 s: not half of them
        let e = plan(100, 2, 8, prior(), (s(2), s(1)), s(15)).unwrap_err();
        assert!(e.least > 40.0 && e.half < e.least, "{e:?}");
        assert!(!e.to_string().contains('\n'));
    }

    #[test]
    fn the_second_round_takes_the_pairs_that_fit_what_is_left() {
        let ms = Duration::from_millis;
        // 10 visits of 100 ms + 20 ms a pair, 1 s of starts
        let fit = |left| pairs_that_fit(10, (ms(100), ms(20)), ms(1000), ms(left), 8);
        assert_eq!(fit(10_000), Some(8));
        // 0.85 × 4 s = 3.4 s: 1 + 10 × (0.1 + 0.02 p) ≤ 3.4 → p ≤ 7
        assert_eq!(fit(4000), Some(7));
        assert_eq!(fit(2000), None);
    }
}
