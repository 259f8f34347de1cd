//! Paired (duet) comparisons: two builds measured in turns, sample by sample, judged by
//! the log ratios of their pairs.
//!
//! - [`PairedCase`]: one case's pairs — the median of their log ratios, a distribution-free
//!   interval for that median (order statistics of the binomial), and the one-sided sign
//!   tests a verdict needs.
//! - [`Looks`]: the sequential design. A case is judged after 10, 15, 22, … pairs, and each
//!   look's interval is a (1 − α/K) interval, K the most looks a case can take (Bonferroni
//!   over looks): stopping at the first decided look keeps the error at α.
//! - [`judge`]: `same`, `slower`, `faster` against a tolerance, as BenchmarkTools.jl's
//!   `judge`: `same` only where the whole interval lies inside ± the tolerance.
//! - [`pooled`]: a family's shift over its cases (cases as random effects, bootstrap over
//!   cases), its interval widened by the process term that pairing cannot cancel.

use rand::{Rng, SeedableRng};
use statrs::distribution::{Binomial, DiscreteCDF};

/// A verdict against a tolerance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Judgement {
    /// The whole interval lies inside ± the tolerance.
    Same,
    /// The whole interval lies above + the tolerance.
    Slower,
    /// The whole interval lies below − the tolerance.
    Faster,
    /// Neither: the interval straddles a bound of the tolerance.
    Ambiguous,
}

impl Judgement {
    pub fn as_str(self) -> &'static str {
        match self {
            Judgement::Same => "same",
            Judgement::Slower => "slower",
            Judgement::Faster => "faster",
            Judgement::Ambiguous => "ambiguous",
        }
    }

    /// Whether the judgement is final (the sequential design stops on it).
    pub fn is_decided(self) -> bool {
        self != Judgement::Ambiguous
    }
}

/// Judge the interval `(low, high)` of a log ratio against the tolerance `tol` (a
/// fraction: 0.03 for ±3%, taken as ln(1 + tol) above and −ln(1 + tol) below).
pub fn judge((low, high): (f64, f64), tol: f64) -> Judgement {
    let t = (1.0 + tol).ln();
    if low > t {
        Judgement::Slower
    } else if high < -t {
        Judgement::Faster
    } else if low >= -t && high <= t {
        Judgement::Same
    } else {
        Judgement::Ambiguous
    }
}

/// The looks of the sequential design: after `first` pairs, then each 1.5× the last, up
/// to `max` pairs.
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
            first: 10,
            max: 400,
            alpha: 0.05,
        }
    }
}

impl Looks {
    /// The pair counts at which a case is judged.
    pub fn schedule(&self) -> Vec<usize> {
        let mut out = Vec::new();
        let mut n = self.first.max(2);
        while n < self.max {
            out.push(n);
            n = ((n as f64) * 1.5).ceil() as usize;
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

    /// A distribution-free interval for the median log ratio at confidence `level`: the
    /// order statistics `[x(k), x(n+1-k)]` with k the largest such that
    /// P(Bin(n, ½) < k) ≤ (1 − level)/2. Unbounded (±∞) when n is too small for `level`.
    pub fn interval(&self, level: f64) -> (f64, f64) {
        let n = self.n();
        let k = order_rank(n, level);
        if k == 0 {
            return (f64::NEG_INFINITY, f64::INFINITY);
        }
        (self.sorted[k - 1], self.sorted[n - k])
    }

    /// Its judgement at `level` against `tol` ([`judge`]).
    pub fn judge(&self, level: f64, tol: f64) -> Judgement {
        judge(self.interval(level), tol)
    }

    /// The one-sided sign-test p-value that the median log ratio exceeds ln(1 + tol)
    /// (`slower`), and that it lies below −ln(1 + tol) (`faster`).
    pub fn p_beyond(&self, tol: f64) -> (f64, f64) {
        let t = (1.0 + tol).ln();
        let n = self.n() as u64;
        if n == 0 {
            return (1.0, 1.0);
        }
        let above = self.sorted.iter().filter(|&&x| x > t).count() as u64;
        let below = self.sorted.iter().filter(|&&x| x < -t).count() as u64;
        (upper_tail(n, above), upper_tail(n, below))
    }

    /// The interval's half-width as a fraction (`±X%` of an ambiguous case), from its log
    /// bounds: the larger distance of a bound from the median.
    pub fn resolution(&self, level: f64) -> f64 {
        let (lo, hi) = self.interval(level);
        let m = self.median();
        ((hi - m).max(m - lo)).exp_m1()
    }
}

/// P(Bin(n, ½) ≥ k).
fn upper_tail(n: u64, k: u64) -> f64 {
    if k == 0 {
        return 1.0;
    }
    match Binomial::new(0.5, n) {
        Ok(b) => 1.0 - b.cdf(k - 1),
        Err(_) => 1.0,
    }
}

/// The rank k of the lower bound of the median's order-statistic interval (0: none).
fn order_rank(n: usize, level: f64) -> usize {
    if n == 0 {
        return 0;
    }
    let Ok(b) = Binomial::new(0.5, n as u64) else {
        return 0;
    };
    let tail = (1.0 - level) / 2.0;
    let mut k = 0;
    // P(X ≤ k − 1) ≤ tail  ⇔  interval [x(k), x(n+1−k)] covers at ≥ level
    while k < n / 2 && b.cdf(k as u64) <= tail {
        k += 1;
    }
    k
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

/// The spread of the process term from replicate processes: `halves` holds, per group of
/// cases timed by two successive process pairs, the two processes' median log ratios and
/// the squared standard errors of those medians, `(m1, m2, se1², se2²)`. The difference
/// m1 − m2 has variance 2σ² + se1² + se2²; σ² is estimated by moments over the groups
/// (never below 0). `None` without a group.
pub fn process_sd(halves: &[(f64, f64, f64, f64)]) -> Option<f64> {
    if halves.is_empty() {
        return None;
    }
    let k = halves.len() as f64;
    let excess: f64 = halves
        .iter()
        .map(|(m1, m2, v1, v2)| (m1 - m2).powi(2) - v1 - v2)
        .sum::<f64>()
        / k;
    Some((excess / 2.0).max(0.0).sqrt())
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
    use super::*;

    fn case(ratios: &[f64]) -> PairedCase {
        PairedCase::from_pairs(&ratios.iter().map(|r| (1.0, *r)).collect::<Vec<_>>())
    }

    #[test]
    fn the_interval_covers_the_median_at_its_level() {
        // 20 pairs: k with P(Bin(20, .5) ≤ k−1) ≤ .025 is 6 (P(X ≤ 5) = .0207)
        let c = case(&(1..=20).map(|i| 1.0 + i as f64 / 100.0).collect::<Vec<_>>());
        let (lo, hi) = c.interval(0.95);
        assert!((lo.exp() - 1.06).abs() < 1e-12, "{lo}");
        assert!((hi.exp() - 1.15).abs() < 1e-12, "{hi}");
        // too few pairs for the level: unbounded
        let (lo, hi) = case(&[1.0, 1.1, 1.2]).interval(0.99);
        assert!(lo.is_infinite() && hi.is_infinite());
    }

    #[test]
    fn judge_says_same_only_inside_the_tolerance() {
        let t = 0.03;
        assert_eq!(judge((-0.01, 0.01), t), Judgement::Same);
        assert_eq!(judge((-0.01, 0.05), t), Judgement::Ambiguous);
        assert_eq!(judge((0.04, 0.06), t), Judgement::Slower);
        assert_eq!(judge((-0.08, -0.04), t), Judgement::Faster);
        assert_eq!(
            judge((f64::NEG_INFINITY, f64::INFINITY), t),
            Judgement::Ambiguous
        );
    }

    #[test]
    fn looks_grow_by_half_and_end_at_the_cap() {
        let l = Looks {
            first: 10,
            max: 60,
            alpha: 0.05,
        };
        assert_eq!(l.schedule(), vec![10, 15, 23, 35, 53, 60]);
        assert!((l.level() - (1.0 - 0.05 / 6.0)).abs() < 1e-12);
    }

    #[test]
    fn sign_tests_see_a_shift_beyond_the_tolerance() {
        let slow = case(&[1.10; 30]);
        let (p_slow, p_fast) = slow.p_beyond(0.03);
        assert!(p_slow < 1e-6 && p_fast == 1.0);
    }

    #[test]
    fn process_sd_subtracts_the_sampling_part() {
        // differences of exactly the sampling size: no process term
        let h = vec![(0.01, -0.01, 0.0002, 0.0002); 5];
        assert_eq!(process_sd(&h), Some(0.0));
        // differences of 0.04 with no sampling error: σ² = 0.0016 / 2
        let h = vec![(0.02, -0.02, 0.0, 0.0); 5];
        assert!((process_sd(&h).unwrap_or(0.0) - (0.0008f64).sqrt()).abs() < 1e-12);
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
