//! Paired (duet) comparisons: two builds measured in turns, sample by sample, judged by
//! the log ratios of their pairs.
//!
//! - [`PairedCase`]: one round's pairs of a case, and the median of their log ratios.
//! - [`Rounds`]: a case's estimate from its rounds (each round a fresh pair of processes
//!   and a fresh preparation of the case: what a process or an allocation shares among its
//!   samples differs between rounds, and pairing cannot cancel it). The between-round
//!   spread is moderated by a [`Prior`] pooled over the cases, so 2 rounds can decide.
//! - [`Looks`]: the sequential design. A case is judged after 2, 4, 8 rounds, and each
//!   look's interval is a (1 − α/K) interval, K the looks (Bonferroni over looks):
//!   stopping at the first decided look keeps the error at α.
//! - Verdicts: [`crate::verdict`], the one rule every comparison of opbench judges by.
//! - [`pooled`]: a family's shift over its cases (cases as random effects, bootstrap over
//!   cases), its interval widened by the process term that pairing cannot cancel.

use rand::{Rng, SeedableRng};

use crate::dist::{t_cdf, t_quantile};

/// The looks of the sequential design: after `first` rounds, then each twice the last, up
/// to `max` rounds. Few looks keep each look's interval narrow (Bonferroni over K looks).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Looks {
    pub first: usize,
    pub max: usize,
    /// The error of the whole sequence of looks (two-sided).
    pub alpha: f64,
}

impl Default for Looks {
    fn default() -> Self {
        Looks {
            first: 2,
            max: 16,
            alpha: 0.05,
        }
    }
}

impl Looks {
    /// The round counts at which a case is judged.
    pub fn schedule(&self) -> Vec<usize> {
        let mut out = Vec::new();
        let mut n = self.first.max(1);
        while n < self.max {
            out.push(n);
            n *= 2;
        }
        out.push(self.max.max(2));
        out
    }

    /// Whether `n` pairs is a look.
    pub fn is_look(&self, n: usize) -> bool {
        self.schedule().contains(&n)
    }

    /// The confidence of each look's interval: 1 − α/K.
    pub fn level(&self) -> f64 {
        1.0 - self.alpha / self.schedule().len() as f64
    }

    /// As a run's settings record it: `first..max`.
    pub fn setting(&self) -> String {
        format!("{}..{}", self.first, self.max)
    }

    /// [`Looks::setting`] read back (α the default's); `None` unless `first..max` with
    /// 1 ≤ first ≤ max.
    pub fn from_setting(written: &str) -> Option<Looks> {
        let (first, max) = written.split_once("..")?;
        let (first, max) = (first.trim().parse().ok()?, max.trim().parse().ok()?);
        (first >= 1 && max >= first).then(|| Looks {
            first,
            max,
            ..Looks::default()
        })
    }
}

/// One case's pairs: the log ratios ln(cand / base) of its per-call times.
#[derive(Debug, Clone, PartialEq)]
pub struct PairedCase {
    /// Sorted log ratios.
    sorted: Vec<f64>,
}

impl PairedCase {
    /// From the per-call times of each pair, `(base, cand)`; pairs with a non-positive or
    /// non-finite time are left out.
    pub fn from_pairs(pairs: &[(f64, f64)]) -> Self {
        let mut sorted: Vec<f64> = pairs
            .iter()
            .filter(|(a, b)| *a > 0.0 && *b > 0.0 && a.is_finite() && b.is_finite())
            .map(|(a, b)| (b / a).ln())
            .collect();
        sorted.sort_by(f64::total_cmp);
        PairedCase { sorted }
    }

    pub fn n(&self) -> usize {
        self.sorted.len()
    }

    /// The median log ratio (0 without pairs).
    pub fn median(&self) -> f64 {
        if self.sorted.is_empty() {
            0.0
        } else {
            crate::quantile_sorted(&self.sorted, 0.5)
        }
    }
}

/// What a kind of case showed in its first rounds, for [`pairs_per_visit`]: each a median
/// over its cases.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    /// The variance of one pair's log ratio around its round's median (within a round).
    pub within_var: f64,
    /// The variance of the round medians (between rounds), each of `pairs` pairs.
    pub round_var: f64,
    pub pairs: usize,
    /// What one visit costs beyond its pairs (fresh processes, preparation, warm-up), and
    /// what one pair costs, in the same unit.
    pub visit_cost: f64,
    pub pair_cost: f64,
}

/// One case's spreads from its rounds of paired log ratios (two or more rounds of two or
/// more pairs each): (within, between). Within: the variance of a pair around its round's
/// median, from the MAD (1.4826 · MAD, a normal's σ); between: the sample variance of the
/// round medians. `None` with fewer rounds.
pub fn round_spreads(rounds: &[&[f64]]) -> Option<(f64, f64)> {
    if rounds.len() < 2 || rounds.iter().any(|r| r.len() < 2) {
        return None;
    }
    let medians: Vec<f64> = rounds.iter().map(|r| crate::median(r)).collect();
    let dev: Vec<f64> = rounds
        .iter()
        .zip(&medians)
        .flat_map(|(r, m)| r.iter().map(move |x| (x - m).abs()))
        .collect();
    let within = (1.4826 * crate::median(&dev)).powi(2);
    let mean = medians.iter().sum::<f64>() / medians.len() as f64;
    let between =
        medians.iter().map(|m| (m - mean).powi(2)).sum::<f64>() / (medians.len() - 1) as f64;
    Some((within, between))
}

/// The pairs a visit (one round's look at a case) should take so that a budget buys the
/// narrowest interval: Cochran's two-stage optimum, k = √(σ²_w / σ²_p · c₀ / c₁). σ²_w is
/// a pair's variance within its round (a median of k pairs has π/2 · σ²_w / k), σ²_p the
/// process term, what a round's fresh processes share (the round medians' variance less
/// the pairs' part), c₀ a visit's own cost and c₁ a pair's. Even (each visit balances A B
/// and B A), at least 2 and at most `max`; `max` where the process term is not seen.
pub fn pairs_per_visit(s: Spread, max: usize) -> usize {
    let within = std::f64::consts::FRAC_PI_2 * s.within_var;
    let process = s.round_var - within / s.pairs.max(1) as f64;
    let max = max.max(2);
    // NaN anywhere counts as unseen
    let seen = process > 0.0 && s.pair_cost > 0.0 && s.visit_cost >= 0.0;
    if !seen {
        return max;
    }
    let k = (within / process * s.visit_cost / s.pair_cost).sqrt();
    let even = 2 * ((k / 2.0).round() as usize).max(1);
    even.min(max - max % 2).max(2)
}

/// The spread that a case's rounds share across cases (their between-round variance),
/// the prior of each case's own: limma's moderated variance, on rounds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Prior {
    /// The typical between-round variance of the cases: limma's s₀², the mean of their
    /// log sample variances, corrected for the log's bias at each case's degrees of freedom.
    pub var: f64,
    /// How many rounds' worth of evidence the prior counts as.
    pub df: f64,
}

/// How much the prior counts, in rounds: a case's own spread outweighs it after 4 rounds.
pub const PRIOR_DF: f64 = 4.0;

/// The prior from every case's round estimates (cases with fewer than 2 rounds, or no
/// spread at all, add nothing); `None` where no case has one.
///
/// As limma estimates s₀² (Smyth 2004, eq. 16): the mean over cases of
/// ln s² − ψ(d/2) + ln(d/2), d = rounds − 1, exponentiated. A few cases whose rounds
/// spread widely (a process that ran slow throughout) move it little; the arithmetic mean of
/// the variances, which they dominate, widened every case's interval (H200, 2026-12-03: a
/// prior of ±4.5% where the median case spread ±1.8%).
pub fn prior(cases: &[&[f64]]) -> Option<Prior> {
    use crate::dist::digamma;
    let logs: Vec<f64> = cases
        .iter()
        .filter(|r| r.len() >= 2)
        .filter_map(|r| {
            let v = sample_var(r);
            let d = (r.len() - 1) as f64;
            (v > 0.0 && v.is_finite()).then(|| v.ln() - digamma(d / 2.0) + (d / 2.0).ln())
        })
        .collect();
    (!logs.is_empty()).then(|| Prior {
        var: (logs.iter().sum::<f64>() / logs.len() as f64).exp(),
        df: PRIOR_DF,
    })
}

fn sample_var(x: &[f64]) -> f64 {
    let n = x.len() as f64;
    let m = x.iter().sum::<f64>() / n;
    x.iter().map(|v| (v - m).powi(2)).sum::<f64>() / (n - 1.0)
}

/// A case's estimate from its rounds (each round a fresh pair of processes and a fresh
/// preparation, its estimate the median of its pairs' log ratios).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rounds {
    pub rounds: usize,
    /// The mean of the round estimates (log ratio).
    pub mean: f64,
    /// Its standard error: the moderated between-round spread over √rounds.
    pub se: f64,
    pub df: f64,
}

impl Rounds {
    /// From round estimates and the prior; `None` without a spread to judge by (one round
    /// and no prior).
    pub fn of(rounds: &[f64], prior: Option<Prior>) -> Option<Self> {
        let r = rounds.len();
        if r == 0 {
            return None;
        }
        let mean = rounds.iter().sum::<f64>() / r as f64;
        let (var, df) = match (prior, r) {
            (None, 1) => return None,
            (None, _) => (sample_var(rounds), (r - 1) as f64),
            (Some(p), 1) => (p.var, p.df),
            (Some(p), _) => {
                let own = (r - 1) as f64;
                (
                    (p.df * p.var + own * sample_var(rounds)) / (p.df + own),
                    p.df + own,
                )
            }
        };
        Some(Rounds {
            rounds: r,
            mean,
            se: (var / r as f64).sqrt(),
            df,
        })
    }

    /// The interval at `level` (Student's t on `df`).
    pub fn interval(&self, level: f64) -> (f64, f64) {
        let h = t_quantile(1.0 - (1.0 - level) / 2.0, self.df) * self.se;
        (self.mean - h, self.mean + h)
    }

    /// One-sided p-values that the change lies beyond +ln(1 + tol) (`slower`) and below
    /// −ln(1 + tol) (`faster`).
    pub fn p_beyond(&self, tol: f64) -> (f64, f64) {
        let t = (1.0 + tol).ln();
        if self.se <= 0.0 {
            let p = |beyond: bool| if beyond { 0.0 } else { 1.0 };
            return (p(self.mean > t), p(self.mean < -t));
        }
        let up = (self.mean - t) / self.se;
        let down = (-t - self.mean) / self.se;
        (1.0 - t_cdf(up, self.df), 1.0 - t_cdf(down, self.df))
    }
}

/// A family's (or the whole comparison's) shared shift, in log ratio.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pooled {
    pub cases: usize,
    /// The median over cases of their median log ratios.
    pub center: f64,
    pub low: f64,
    pub high: f64,
    /// The process term folded into the interval (log; 0 where none was estimated).
    pub process_sd: f64,
}

impl Pooled {
    /// As a ratio, with its interval.
    pub fn ratio(&self) -> (f64, f64, f64) {
        (self.center.exp(), self.low.exp(), self.high.exp())
    }
}

/// The shared shift of `cases` (each case's median log ratio): the median over cases,
/// with a percentile bootstrap interval over cases (cases as random effects) at `level`,
/// widened by `process_sd` (the spread of a process's shared effect, which pairing does
/// not cancel: each side's process holds every case of a crate): the half-widths add in
/// quadrature with z·`process_sd`. `None` without cases.
pub fn pooled(cases: &[f64], level: f64, process_sd: f64, resamples: usize) -> Option<Pooled> {
    if cases.is_empty() {
        return None;
    }
    let center = crate::median(cases);
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x0DE7);
    let n = cases.len();
    let mut meds: Vec<f64> = (0..resamples.max(100))
        .map(|_| {
            let draw: Vec<f64> = (0..n).map(|_| cases[rng.random_range(0..n)]).collect();
            crate::median(&draw)
        })
        .collect();
    meds.sort_by(f64::total_cmp);
    let a = (1.0 - level) / 2.0;
    let (lo, hi) = (
        crate::quantile_sorted(&meds, a),
        crate::quantile_sorted(&meds, 1.0 - a),
    );
    let z = normal_quantile(1.0 - a);
    let widen = |half: f64| (half * half + (z * process_sd).powi(2)).sqrt();
    Some(Pooled {
        cases: n,
        center,
        low: center - widen(center - lo),
        high: center + widen(hi - center),
        process_sd,
    })
}

/// The spread of the process term from rounds of fresh processes: `groups` holds, per group
/// of cases (a family), each round's estimate over the group and the squared standard error
/// of that estimate, `(estimates, se²)`. A group's estimates vary between rounds by σ² plus
/// their own sampling; σ² is estimated by moments, each group weighted by its rounds − 1
/// (never below 0). `None` without a group of 2 or more rounds.
pub fn process_sd(groups: &[(Vec<f64>, Vec<f64>)]) -> Option<f64> {
    let (mut num, mut den) = (0.0, 0.0);
    for (est, se2) in groups {
        let r = est.len();
        if r < 2 || se2.len() != r {
            continue;
        }
        let df = (r - 1) as f64;
        let excess = sample_var(est) - se2.iter().sum::<f64>() / r as f64;
        num += df * excess;
        den += df;
    }
    (den > 0.0).then(|| (num / den).max(0.0).sqrt())
}

/// The standard error of a median of `xs`, by bootstrap (0 for fewer than 2 values).
pub fn median_se(xs: &[f64], resamples: usize) -> f64 {
    let n = xs.len();
    if n < 2 {
        return 0.0;
    }
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x5E5E);
    let meds: Vec<f64> = (0..resamples.max(50))
        .map(|_| {
            let draw: Vec<f64> = (0..n).map(|_| xs[rng.random_range(0..n)]).collect();
            crate::median(&draw)
        })
        .collect();
    let mean = meds.iter().sum::<f64>() / meds.len() as f64;
    (meds.iter().map(|m| (m - mean).powi(2)).sum::<f64>() / (meds.len() - 1) as f64).sqrt()
}

/// The standard normal quantile.
fn normal_quantile(p: f64) -> f64 {
    use statrs::distribution::{ContinuousCDF, Normal};
    Normal::new(0.0, 1.0).map_or(1.96, |d| d.inverse_cdf(p))
}

#[cfg(test)]
mod tests {

    fn spread(within_sd: f64, process_sd: f64, visit: f64, pair: f64) -> Spread {
        let k = 8;
        Spread {
            within_var: within_sd * within_sd,
            round_var: process_sd * process_sd
                + std::f64::consts::FRAC_PI_2 * within_sd * within_sd / k as f64,
            pairs: k,
            visit_cost: visit,
            pair_cost: pair,
        }
    }

    #[test]
    fn a_visit_takes_few_pairs_where_rounds_differ_more_than_pairs() {
        // the H200's device cases (2026-12-03): pairs within a round agree to 0.07%, rounds
        // differ by 1–2%: more rounds, not more pairs
        assert_eq!(pairs_per_visit(spread(0.0007, 0.015, 100.0, 20.0), 8), 2);
        // pairs as noisy as rounds, a visit dear: more pairs a visit
        assert_eq!(pairs_per_visit(spread(0.024, 0.012, 100.0, 20.0), 8), 6);
        // a visit as cheap as a pair: fewer
        assert_eq!(pairs_per_visit(spread(0.024, 0.012, 20.0, 20.0), 8), 2);
        // no process term seen (rounds agree as their pairs predict): as many as allowed
        let none = Spread {
            round_var: 0.0,
            ..spread(0.02, 0.0, 100.0, 20.0)
        };
        assert_eq!(pairs_per_visit(none, 8), 8);
        // never odd, never under 2, never over the maximum
        assert_eq!(pairs_per_visit(spread(0.1, 0.001, 1e6, 1.0), 7), 6);
        assert_eq!(pairs_per_visit(spread(0.0, 0.01, 100.0, 20.0), 8), 2);
    }

    use super::*;
    use crate::verdict::{Intervals, Verdict, judge};

    #[test]
    fn round_spreads_read_the_pairs_and_the_rounds_apart() {
        // two rounds 0.02 apart, each pair ±0.01 around its round's median
        let (a, b) = ([0.09, 0.10, 0.11], [0.11, 0.12, 0.13]);
        let (within, between) = round_spreads(&[&a, &b]).expect("two rounds");
        assert!(
            (within - (1.4826 * 0.01f64).powi(2)).abs() < 1e-12,
            "{within}"
        );
        assert!((between - 0.0002).abs() < 1e-12, "{between}");
        assert_eq!(round_spreads(&[&a]), None);
        assert_eq!(round_spreads(&[&a, &[0.1]]), None);
    }

    #[test]
    fn a_log_interval_is_judged_as_its_ratios() {
        let t = 0.03;
        let j = |lo: f64, hi: f64| judge(Intervals::of_log((lo, hi)), t, true);
        assert_eq!(j(-0.01, 0.01), Verdict::Same);
        assert_eq!(j(-0.01, 0.05), Verdict::Ambiguous);
        assert_eq!(j(0.04, 0.06), Verdict::Slower);
        assert_eq!(j(-0.08, -0.04), Verdict::Faster);
        assert_eq!(j(f64::NEG_INFINITY, f64::INFINITY), Verdict::Ambiguous);
    }

    #[test]
    fn looks_grow_by_half_and_end_at_the_cap() {
        let l = Looks {
            first: 10,
            max: 60,
            alpha: 0.05,
        };
        assert_eq!(l.schedule(), vec![10, 20, 40, 60]);
        assert!((l.level() - (1.0 - 0.05 / 4.0)).abs() < 1e-12);
    }

    #[test]
    fn the_prior_is_the_typical_spread_not_the_tails() {
        use rand::SeedableRng;
        use rand_distr::{Distribution, Normal};
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        // 2,000 cases of 4 rounds with a true spread of 2%; then 5% of them 5× wider
        let draw = |sd: f64, rng: &mut rand::rngs::StdRng| -> Vec<f64> {
            let n = Normal::new(0.0, sd).unwrap();
            (0..4).map(|_| n.sample(rng)).collect()
        };
        let mut cases: Vec<Vec<f64>> = (0..2000).map(|_| draw(0.02, &mut rng)).collect();
        let p = prior(&cases.iter().map(Vec::as_slice).collect::<Vec<_>>()).unwrap();
        assert!((p.var.sqrt() / 0.02 - 1.0).abs() < 0.05, "{}", p.var.sqrt());
        for c in cases.iter_mut().step_by(20) {
            *c = draw(0.10, &mut rng);
        }
        let p = prior(&cases.iter().map(Vec::as_slice).collect::<Vec<_>>()).unwrap();
        let mean_var: f64 = cases.iter().map(|c| sample_var(c)).sum::<f64>() / 2000.0;
        // the arithmetic mean of the variances reads the spread ~1.5× (√0.95·4 + 0.05·100 = √8.8
        // in units of 1%²); the log-scale prior ~1.08× (exp(0.05·ln 25 / 2))
        assert!(mean_var.sqrt() > 1.4 * 0.02, "{}", mean_var.sqrt());
        assert!(p.var.sqrt() < 1.12 * 0.02, "{}", p.var.sqrt());
    }

    #[test]
    fn rounds_borrow_the_spread_the_cases_share() {
        let a = [0.01, -0.01, 0.02, 0.0];
        let b = [0.0, 0.02, -0.02, 0.01];
        let p = prior(&[&a, &b]).expect("a prior");
        // one round of a case: the prior alone, at its df
        let one = Rounds::of(&[0.05], Some(p)).expect("judged");
        assert_eq!(one.df, PRIOR_DF);
        assert!((one.se - p.var.sqrt()).abs() < 1e-12);
        // without a prior, one round says nothing
        assert_eq!(Rounds::of(&[0.05], None), None);
        // a large change with a tight prior is beyond 3% at 2 rounds
        let tight = Prior {
            var: 1e-5,
            df: PRIOR_DF,
        };
        let r = Rounds::of(&[0.095, 0.097], Some(tight)).expect("judged");
        assert_eq!(
            judge(Intervals::of_log(r.interval(0.983)), 0.03, true),
            Verdict::Slower
        );
        let (up, down) = r.p_beyond(0.03);
        assert!(up < 1e-3 && down > 0.99);
    }

    #[test]
    fn process_sd_subtracts_the_sampling_part() {
        // rounds that differ by exactly their sampling size: no process term
        let g = vec![(vec![0.01, -0.01], vec![0.0002, 0.0002]); 5];
        assert_eq!(process_sd(&g), Some(0.0));
        // rounds 0.04 apart with no sampling error: σ² = var = 0.0008
        let g = vec![(vec![0.02, -0.02], vec![0.0, 0.0]); 5];
        assert!((process_sd(&g).unwrap_or(0.0) - (0.0008f64).sqrt()).abs() < 1e-12);
        // more rounds weigh more; one round says nothing
        assert_eq!(process_sd(&[(vec![0.1], vec![0.0])]), None);
    }

    #[test]
    fn pooled_widens_by_the_process_term() {
        let cases: Vec<f64> = (0..40).map(|i| 0.05 + (i % 5) as f64 * 1e-4).collect();
        let bare = pooled(&cases, 0.95, 0.0, 500).expect("cases");
        let wide = pooled(&cases, 0.95, 0.01, 500).expect("cases");
        assert!((bare.center - 0.0502).abs() < 1e-3);
        assert!(wide.high - wide.low > bare.high - bare.low + 0.03);
    }
}
