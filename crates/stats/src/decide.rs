//! Deciding whether a build changed a time: per-case tests with a minimum detectable effect
//! and the Benjamini–Hochberg procedure across the cases of a comparison (a family of
//! cases' shared shift is [`crate::family`]'s).
//!
//! Everything works on the log of a ratio of medians (candidate / base), from per-call times
//! grouped by execution (separate processes):
//!
//! - [`case_test`]: the ratio, its standard error from a hierarchical bootstrap
//!   (executions, then samples within them), widened by `n/(n−1)` for the few executions a
//!   side usually has and by any between-boot drift given, a Wald interval and p-value
//!   with Student-t quantiles (df = executions − 2), and the minimum detectable effect at
//!   80% power.
//! - [`moderated_test`]: the same question on the logs of the execution medians, with the
//!   case's variance shrunk towards the pooled variance of its kind of case ([`Prior`]):
//!   three executions a side then resolve what thirty would alone.
//! - [`benjamini_hochberg`]: which p-values are discoveries with the false-discovery rate
//!   held at `q`.
//!
//! No tch, no I/O; degenerate input gives an infinite standard error, never a NaN verdict.

use crate::dist::{digamma, t_cdf, t_quantile};
use crate::estimate::mean;
use rand::SeedableRng;
use rand::rngs::StdRng;

/// Power at which the minimum detectable effect is stated.
pub const MDE_POWER: f64 = 0.8;

/// The outcome of one case's test.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CaseTest {
    /// median(cand) / median(base), pooled over executions.
    pub ratio: f64,
    /// Standard error of ln(ratio).
    pub se: f64,
    /// Degrees of freedom of the t quantiles.
    pub df: f64,
    /// Two-sided p-value of "no change".
    pub p: f64,
}

impl CaseTest {
    /// The two-sided interval of the ratio at `level`.
    pub fn interval(&self, level: f64) -> (f64, f64) {
        let h = t_quantile(0.5 + level / 2.0, self.df) * self.se;
        let l = self.ratio.ln();
        ((l - h).exp(), (l + h).exp())
    }

    /// The product of two independent ratios (this case's, and a shift every case shares):
    /// standard errors added in quadrature, Welch–Satterthwaite degrees of freedom.
    pub fn plus(&self, other: &CaseTest) -> CaseTest {
        let (a, b) = (self.se.powi(2), other.se.powi(2));
        let se = (a + b).sqrt();
        let df = if a + b > 0.0 {
            (a + b).powi(2) / (a.powi(2) / self.df + b.powi(2) / other.df)
        } else {
            self.df + other.df
        };
        let ratio = self.ratio * other.ratio;
        CaseTest {
            ratio,
            se,
            df,
            p: p_value(ratio.ln(), se, df),
        }
    }

    /// The smallest change (as a fraction) found with [`MDE_POWER`] at level `alpha`.
    pub fn mde(&self, alpha: f64) -> f64 {
        mde(self.se, self.df, alpha)
    }

    /// The intervals its verdict is judged by ([`crate::verdict`]): the (1 − alpha) interval
    /// for a change, the (1 − 2·alpha) one for equivalence (two one-sided tests at alpha).
    pub fn intervals(&self, alpha: f64) -> crate::verdict::Intervals {
        crate::verdict::Intervals {
            change: self.interval(1.0 - alpha),
            equivalence: self.interval(1.0 - 2.0 * alpha),
        }
    }

    /// Equivalence within ±`margin` (TOST at `alpha`): the 1 − 2·alpha interval inside
    /// [1 − margin, 1 + margin].
    pub fn equivalent(&self, margin: f64, alpha: f64) -> bool {
        let (lo, hi) = self.interval(1.0 - 2.0 * alpha);
        lo >= 1.0 - margin && hi <= 1.0 + margin
    }
}

/// The minimum detectable effect (fraction) for a log-ratio standard error `se`.
pub fn mde(se: f64, df: f64, alpha: f64) -> f64 {
    let z = t_quantile(1.0 - alpha / 2.0, df) + t_quantile(MDE_POWER, df);
    (z * se).exp() - 1.0
}

/// Two-sided p-value of `estimate / se` against a t with `df`.
pub(crate) fn p_value(estimate: f64, se: f64, df: f64) -> f64 {
    if se.is_nan() || se <= 0.0 || !se.is_finite() {
        return if estimate == 0.0 || !se.is_finite() {
            1.0
        } else {
            0.0
        };
    }
    (2.0 * (1.0 - t_cdf((estimate / se).abs(), df))).clamp(0.0, 1.0)
}

fn nonempty(g: &[Vec<f64>]) -> Vec<&Vec<f64>> {
    g.iter().filter(|x| !x.is_empty()).collect()
}

/// The log of each non-empty execution's median: the unit the moderated test and the
/// families work on.
pub(crate) fn exec_logs(g: &[Vec<f64>]) -> Vec<f64> {
    g.iter()
        .filter(|x| !x.is_empty())
        .map(|x| crate::median(x).ln())
        .collect()
}

pub(crate) fn sd(xs: &[f64]) -> f64 {
    match crate::sum_sq(xs) {
        (ss, df) if df >= 1 => (ss / df as f64).sqrt(),
        _ => f64::INFINITY,
    }
}

/// The small-sample widening of a bootstrap standard error over `n` resampled groups: the
/// bootstrap's variance of a mean of n groups is (n − 1)/n of the unbiased one.
pub(crate) fn widen(n: usize) -> f64 {
    if n >= 2 {
        (n as f64 / (n as f64 - 1.0)).sqrt()
    } else {
        1.0
    }
}

/// One case's test from per-call times grouped by execution, with `drift` (a standard
/// deviation of the log ratio, 0 for none) added for what moves between boots.
///
/// With two or more executions a side, df = executions − 2 (at least 2); with one a side,
/// the samples are the groups (df = samples − 2): the caller knows that such an
/// interval misses the spread between processes.
pub fn case_test(base: &[Vec<f64>], cand: &[Vec<f64>], drift: f64, resamples: usize) -> CaseTest {
    let (b, c) = (nonempty(base), nonempty(cand));
    let pooled =
        |g: &[&Vec<f64>]| -> Vec<f64> { g.iter().flat_map(|x| x.iter()).copied().collect() };
    let (pb, pc) = (pooled(&b), pooled(&c));
    if pb.len() < 2 || pc.len() < 2 {
        return CaseTest {
            ratio: if pb.is_empty() || pc.is_empty() {
                1.0
            } else {
                crate::median(&pc) / crate::median(&pb)
            },
            se: f64::INFINITY,
            df: 1.0,
            p: 1.0,
        };
    }
    let ratio = crate::median(&pc) / crate::median(&pb);
    // one execution a side: its samples are the groups
    let split = |g: Vec<&Vec<f64>>, p: &[f64]| -> Vec<Vec<f64>> {
        if g.len() >= 2 {
            g.into_iter().cloned().collect()
        } else {
            p.iter().map(|x| vec![*x]).collect()
        }
    };
    let (gb, gc) = (split(b, &pb), split(c, &pc));
    let mut rng = StdRng::seed_from_u64(17);
    let (mut bb, mut cb) = (Vec::new(), Vec::new());
    let logs: Vec<f64> = (0..resamples.max(50))
        .map(|_| {
            let x = crate::twosample::hier_draw(&gb, &mut rng, &mut bb);
            let y = crate::twosample::hier_draw(&gc, &mut rng, &mut cb);
            (y / x).ln()
        })
        .collect();
    let boot = sd(&logs) * widen(gb.len().min(gc.len()));
    let se = (boot.powi(2) + drift.powi(2)).sqrt();
    let df = ((gb.len() + gc.len()) as f64 - 2.0).max(2.0);
    CaseTest {
        ratio,
        se,
        df,
        p: p_value(ratio.ln(), se, df),
    }
}

/// One case's per-execution medians, as logs: the unit the moderated test works on.
#[derive(Debug, Clone, PartialEq)]
pub struct ExecLogs {
    pub base: Vec<f64>,
    pub cand: Vec<f64>,
}

impl ExecLogs {
    /// The logs of each non-empty execution's median, `None` unless both sides have two.
    pub fn from_groups(base: &[Vec<f64>], cand: &[Vec<f64>]) -> Option<Self> {
        let (b, c) = (exec_logs(base), exec_logs(cand));
        (b.len() >= 2 && c.len() >= 2).then_some(ExecLogs { base: b, cand: c })
    }

    /// The pooled variance of the executions about their side's mean, and its df.
    pub fn variance(&self) -> (f64, f64) {
        let ss = |x: &[f64]| crate::sum_sq(x).0;
        let df = (self.base.len() + self.cand.len()) as f64 - 2.0;
        ((ss(&self.base) + ss(&self.cand)) / df, df)
    }
}

/// What the cases of one kind (mode, size) say of their between-execution variance: a
/// prior that each case's own few-execution estimate is shrunk towards (an empirical-Bayes
/// moderated t, as limma's): `s2` the typical variance, `df` the weight it gets.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Prior {
    pub s2: f64,
    pub df: f64,
}

/// The largest prior degrees of freedom (variances that agree perfectly).
pub const PRIOR_DF_MAX: f64 = 50.0;
/// Cases of a kind needed before their pooled variance is used as a prior.
pub const PRIOR_MIN_CASES: usize = 10;

impl Prior {
    /// The prior of a kind of case from its cases' variances and their df, by limma's
    /// moments of log variances (Smyth 2004): the spread of log s² beyond what each case's
    /// own df explains says how far the cases' true variances differ, hence how much weight
    /// (`df`) the pooled one may get — none when they differ wildly, up to
    /// [`PRIOR_DF_MAX`] when they agree. `None` with fewer than [`PRIOR_MIN_CASES`] cases.
    pub fn pooled(vars: &[(f64, f64)]) -> Option<Prior> {
        let ok: Vec<(f64, f64)> = vars
            .iter()
            .copied()
            .filter(|(s2, df)| s2.is_finite() && *s2 > 0.0 && *df >= 1.0)
            .collect();
        if ok.len() < PRIOR_MIN_CASES {
            return None;
        }
        let n = ok.len() as f64;
        // e_i = log s_i² − digamma(df_i/2) + log(df_i/2): unbiased for log σ_i²
        let e: Vec<f64> = ok
            .iter()
            .map(|(s2, df)| s2.ln() - digamma(df / 2.0) + (df / 2.0).ln())
            .collect();
        let mean_e = e.iter().sum::<f64>() / n;
        let var_e = e.iter().map(|x| (x - mean_e).powi(2)).sum::<f64>() / (n - 1.0);
        let own = ok.iter().map(|(_, df)| trigamma(df / 2.0)).sum::<f64>() / n;
        let excess = var_e - own;
        let df = if excess > 0.0 {
            (2.0 * trigamma_inverse(excess)).min(PRIOR_DF_MAX)
        } else {
            PRIOR_DF_MAX
        };
        let s2 = (mean_e + digamma(df / 2.0) - (df / 2.0).ln()).exp();
        Some(Prior { s2, df })
    }
}

/// ψ₁(x), the trigamma function (x > 0): recurrence up to 10, then the asymptotic series.
fn trigamma(mut x: f64) -> f64 {
    let mut out = 0.0;
    while x < 10.0 {
        out += 1.0 / (x * x);
        x += 1.0;
    }
    let x2 = 1.0 / (x * x);
    out + 1.0 / x + x2 / 2.0 + (x2 / x) * (1.0 / 6.0 - x2 * (1.0 / 30.0 - x2 / 42.0))
}

/// The x with ψ₁(x) = y (y > 0), by Newton's method as limma's `trigammaInverse`.
fn trigamma_inverse(y: f64) -> f64 {
    if y > 1e7 {
        return 1.0 / y.sqrt();
    }
    if y < 1e-6 {
        return 1.0 / y;
    }
    let mut x = 0.5 + 1.0 / y;
    for _ in 0..50 {
        let t = trigamma(x);
        // d/dx ψ₁ = ψ₂ ≈ −(ψ₁ − 1/(2x²))·... limma uses tri*(1 − tri/y)/ψ₂; ψ₂ by a step
        let h = 1e-5 * x;
        let d = (trigamma(x + h) - trigamma(x - h)) / (2.0 * h);
        let step = (t - y) / d;
        x -= step;
        if x <= 0.0 {
            x = 1e-8;
        }
        if (step / x).abs() < 1e-10 {
            break;
        }
    }
    x
}

/// A case's test on the logs of its execution medians: the difference of means, a
/// variance moderated by `prior` (its own pooled variance weighted by its df, the prior's
/// by the prior's), `drift` added in quadrature, Student t with the summed df.
pub fn moderated_test(x: &ExecLogs, prior: Option<Prior>, drift: f64) -> CaseTest {
    let (s2, df) = x.variance();
    let (s2, df) = match prior {
        Some(p) => ((p.df * p.s2 + df * s2) / (p.df + df), p.df + df),
        None => (s2, df),
    };
    let d = mean(&x.cand) - mean(&x.base);
    let se = (s2 * (1.0 / x.base.len() as f64 + 1.0 / x.cand.len() as f64) + drift.powi(2)).sqrt();
    CaseTest {
        ratio: d.exp(),
        se,
        df,
        p: p_value(d, se, df),
    }
}

/// The change between two sides of `y` at equal `x`, from one `(x, y)` point a process
/// (both logs: a process's median host control and its median torch control): the
/// analysis of covariance `y = a + d·cand + b·x`, one slope `b` for both sides fit to the
/// spread of the processes about their side's mean, so that whatever moves `x` and `y`
/// together between processes (the host's state) cancels even where it moves them unequally.
/// The test of `d` carries the slope's uncertainty; `drift` is added in quadrature.
/// `None` with fewer than 4 points, fewer than 2 a side, no spread of `x` within a side,
/// or a slope not shown to differ from 1 at 95%: then `y − x` moves with nothing, and
/// [`moderated_test`] on it is the test.
pub fn covariate_test(base: &[(f64, f64)], cand: &[(f64, f64)], drift: f64) -> Option<CaseTest> {
    if base.len() < 2 || cand.len() < 2 || base.len() + cand.len() < 4 {
        return None;
    }
    let means = |g: &[(f64, f64)]| {
        let n = g.len() as f64;
        (
            g.iter().map(|p| p.0).sum::<f64>() / n,
            g.iter().map(|p| p.1).sum::<f64>() / n,
        )
    };
    let (mb, mc) = (means(base), means(cand));
    let (mut sxx, mut sxy) = (0.0, 0.0);
    for (g, m) in [(base, mb), (cand, mc)] {
        for p in g {
            sxx += (p.0 - m.0).powi(2);
            sxy += (p.0 - m.0) * (p.1 - m.1);
        }
    }
    if sxx.is_nan() || sxx <= 1e-12 {
        return None;
    }
    let b = sxy / sxx;
    let mut rss = 0.0;
    for (g, m) in [(base, mb), (cand, mc)] {
        for p in g {
            rss += (p.1 - m.1 - b * (p.0 - m.0)).powi(2);
        }
    }
    let df = (base.len() + cand.len()) as f64 - 3.0;
    let s2 = rss / df;
    // a slope the processes do not show to differ from 1 is 1: the ratio's test, with
    // a df more and no slope to carry, is the test then
    if (b - 1.0).abs() <= t_quantile(0.975, df) * (s2 / sxx).sqrt() {
        return None;
    }
    let d = (mc.1 - mb.1) - b * (mc.0 - mb.0);
    let var =
        s2 * (1.0 / base.len() as f64 + 1.0 / cand.len() as f64 + (mc.0 - mb.0).powi(2) / sxx);
    let se = (var + drift.powi(2)).sqrt();
    Some(CaseTest {
        ratio: d.exp(),
        se,
        df,
        p: p_value(d, se, df),
    })
}

/// Which of `ps` are discoveries at false-discovery rate `q` (Benjamini–Hochberg step-up):
/// the k smallest p-values, for the largest k with p(k) ≤ k·q/m.
pub fn benjamini_hochberg(ps: &[f64], q: f64) -> Vec<bool> {
    let m = ps.len();
    let mut order: Vec<usize> = (0..m).collect();
    order.sort_by(|&a, &b| ps[a].total_cmp(&ps[b]));
    let mut k = 0;
    for (rank, &i) in order.iter().enumerate() {
        if ps[i] <= (rank + 1) as f64 * q / m as f64 {
            k = rank + 1;
        }
    }
    let mut out = vec![false; m];
    for &i in &order[..k] {
        out[i] = true;
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use rand_distr::{Distribution, Normal as N};

    /// `n` executions of 10 samples around `level`, each execution off by `between`
    /// (the family tests' too).
    pub(crate) fn execs(
        rng: &mut StdRng,
        level: f64,
        between: f64,
        within: f64,
        n: usize,
    ) -> Vec<Vec<f64>> {
        (0..n)
            .map(|_| {
                let l = level * (1.0 + N::new(0.0, between).unwrap().sample(rng));
                (0..10)
                    .map(|_| l * (1.0 + N::new(0.0, within).unwrap().sample(rng)))
                    .collect()
            })
            .collect()
    }

    #[test]
    fn a_shift_is_significant_and_its_interval_brackets_it() {
        let mut rng = StdRng::seed_from_u64(1);
        let b = execs(&mut rng, 100.0, 0.01, 0.02, 5);
        let c = execs(&mut rng, 110.0, 0.01, 0.02, 5);
        let t = case_test(&b, &c, 0.0, 2000);
        let (lo, hi) = t.interval(0.95);
        assert!(
            t.p < 1e-3 && lo > 1.05 && lo < 1.10 && hi > 1.10,
            "{t:?} [{lo}, {hi}]"
        );
        assert!(t.mde(0.05) < 0.05, "{}", t.mde(0.05));
        // drift widens it: a 10% day-to-day spread makes +10% unclear
        let d = case_test(&b, &c, 0.10, 2000);
        assert!(d.p > 0.05 && d.mde(0.05) > 0.25, "{d:?}");
    }

    #[test]
    fn no_change_is_equivalent_within_its_resolution() {
        let mut rng = StdRng::seed_from_u64(2);
        let b = execs(&mut rng, 100.0, 0.005, 0.01, 5);
        let c = execs(&mut rng, 100.0, 0.005, 0.01, 5);
        let t = case_test(&b, &c, 0.0, 2000);
        assert!(t.p > 0.01, "{t:?}");
        assert!(t.equivalent(0.03, 0.05), "{t:?}");
        assert!(!t.equivalent(0.0001, 0.05));
    }

    #[test]
    fn a_shared_shift_adds_its_ratio_and_its_uncertainty() {
        let a = CaseTest {
            ratio: 1.05,
            se: 0.03,
            df: 10.0,
            p: 0.1,
        };
        let b = CaseTest {
            ratio: 1.10,
            se: 0.04,
            df: 4.0,
            p: 0.05,
        };
        let c = a.plus(&b);
        assert!((c.ratio - 1.155).abs() < 1e-9);
        assert!((c.se - 0.05).abs() < 1e-9);
        assert!(c.df > 4.0 && c.df < 14.0, "{c:?}");
        assert!(c.p < a.p.min(b.p), "{c:?}");
    }

    #[test]
    fn degenerate_input_is_no_evidence() {
        let t = case_test(&[vec![1.0]], &[vec![]], 0.0, 100);
        assert_eq!(t.p, 1.0);
        assert!(t.se.is_infinite());
        assert!(!t.equivalent(0.5, 0.05));
    }

    #[test]
    fn the_pooled_variance_lends_few_executions_the_power_of_many() {
        // 3 executions a side, 1.5% between them, +5%: alone (df 4) mostly unclear;
        // with the variance of 100 such cases as a prior, clear
        let mut rng = StdRng::seed_from_u64(4);
        let mut vars = Vec::new();
        let mut cases = Vec::new();
        for _ in 0..100 {
            let b = execs(&mut rng, 1e4, 0.015, 0.005, 3);
            let c = execs(&mut rng, 1.05e4, 0.015, 0.005, 3);
            let x = ExecLogs::from_groups(&b, &c).unwrap();
            vars.push(x.variance());
            cases.push(x);
        }
        let prior = Prior::pooled(&vars).unwrap();
        assert!((prior.s2.sqrt() - 0.015).abs() < 0.004, "{prior:?}");
        assert!(prior.df > 10.0, "cases of one variance agree: {prior:?}");
        let found = |p: Option<Prior>| {
            cases
                .iter()
                .filter(|x| moderated_test(x, p, 0.0).p < 0.01)
                .count()
        };
        let (alone, pooled) = (found(None), found(Some(prior)));
        assert!(
            pooled > alone + 20 && pooled >= 70,
            "alone {alone}, pooled {pooled}"
        );
        // and under no change the pooled test keeps its level
        let null = (0..200)
            .filter(|_| {
                let b = execs(&mut rng, 1e4, 0.015, 0.005, 3);
                let c = execs(&mut rng, 1e4, 0.015, 0.005, 3);
                moderated_test(&ExecLogs::from_groups(&b, &c).unwrap(), Some(prior), 0.0).p < 0.01
            })
            .count();
        assert!(null <= 6, "{null} of 200 false at 1%");
        assert!(Prior::pooled(&vars[..5]).is_none());
    }

    #[test]
    fn cases_whose_variances_differ_lend_each_other_less() {
        // between-execution CVs log-normal over cases (median 3.8%, p90 7.8%): the prior's
        // weight must fall, and the false flags at 1% stay near 1%
        let mut rng = StdRng::seed_from_u64(6);
        let sigma = (0.078f64 / 0.038).ln() / 1.2816;
        let mut cases = Vec::new();
        for _ in 0..300 {
            let cv = 0.038 * (sigma * N::new(0.0, 1.0).unwrap().sample(&mut rng)).exp();
            let b = execs(&mut rng, 1e4, cv, 0.01, 5);
            let c = execs(&mut rng, 1e4, cv, 0.01, 5);
            cases.push(ExecLogs::from_groups(&b, &c).unwrap());
        }
        let vars: Vec<(f64, f64)> = cases.iter().map(ExecLogs::variance).collect();
        let prior = Prior::pooled(&vars).unwrap();
        assert!(prior.df < 15.0, "{prior:?}");
        let false_flags = cases
            .iter()
            .filter(|x| moderated_test(x, Some(prior), 0.0).p < 0.01)
            .count();
        assert!(false_flags <= 8, "{false_flags} of 300 at 1%");
    }

    #[test]
    fn the_gamma_functions_match_their_known_values() {
        // ψ(1) = −γ, ψ₁(1) = π²/6, ψ₁(1/2) = π²/2
        assert!((digamma(1.0) + 0.577_215_664_9).abs() < 1e-9);
        assert!((trigamma(1.0) - std::f64::consts::PI.powi(2) / 6.0).abs() < 1e-9);
        assert!((trigamma(0.5) - std::f64::consts::PI.powi(2) / 2.0).abs() < 1e-8);
        for x in [0.3, 1.0, 4.0, 25.0] {
            assert!((trigamma_inverse(trigamma(x)) - x).abs() < 1e-6 * x, "{x}");
        }
    }

    #[test]
    fn benjamini_hochberg_steps_up() {
        // m = 5, q = 0.05: thresholds 0.01, 0.02, 0.03, 0.04, 0.05
        let ps = [0.001, 0.5, 0.025, 0.011, 0.9];
        assert_eq!(
            benjamini_hochberg(&ps, 0.05),
            vec![true, false, true, true, false]
        );
        assert_eq!(benjamini_hochberg(&[0.2, 0.3], 0.05), vec![false, false]);
        assert!(benjamini_hochberg(&[], 0.05).is_empty());
    }

    #[test]
    fn the_covariance_test_cancels_a_host_state_the_controls_see_unequally() {
        // three processes a side on hosts up to 1.4x apart; the torch control moves with
        // the host's state s, the host control with s^0.5; the candidate's every call +5%
        let mut rng = StdRng::seed_from_u64(31);
        let noise = N::new(0.0, 0.003).unwrap();
        let (mut found, mut missed) = (0, 0);
        for _ in 0..20 {
            let mut side = |shift: f64| -> Vec<(f64, f64)> {
                (0..3)
                    .map(|i| {
                        let s = [0.0, 0.4f64.ln_1p(), 0.2f64.ln_1p()][i];
                        (
                            0.5 * s + noise.sample(&mut rng),
                            s + shift + noise.sample(&mut rng),
                        )
                    })
                    .collect()
            };
            let (b, c) = (side(0.0), side(0.05f64.ln_1p()));
            let t = covariate_test(&b, &c, 0.0).unwrap();
            let (lo, hi) = t.interval(0.95);
            missed += usize::from(lo > 1.05 || hi < 1.05);
            found += usize::from(lo > 1.015);
            // the ratio of the controls leaves the host's state in: far wider
            let ratio = |g: &[(f64, f64)]| g.iter().map(|p| p.1 - p.0).collect::<Vec<_>>();
            let x = ExecLogs {
                base: ratio(&b),
                cand: ratio(&c),
            };
            assert!(moderated_test(&x, None, 0.0).se > 3.0 * t.se);
        }
        assert!(found >= 18, "{found} of 20");
        assert!(missed <= 3, "{missed} of 20 intervals miss +5%");
        // controls that move alike (slope 1): the ratio's test is the test
        let alike: Vec<(f64, f64)> = (0..3).map(|i| (0.1 * i as f64, 0.1 * i as f64)).collect();
        assert!(covariate_test(&alike, &alike, 0.0).is_none());
        assert!(covariate_test(&alike[..1], &alike, 0.0).is_none());
    }
}
