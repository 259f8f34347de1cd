//! Two-sample comparisons of per-call times: a rank test and a bootstrap ratio interval.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use statrs::distribution::{ContinuousCDF, Normal};

/// Two-sided Mann-Whitney U test (normal approximation with tie correction).
pub fn mann_whitney(a: &[f64], b: &[f64]) -> f64 {
    let (n1, n2) = (a.len() as f64, b.len() as f64);
    if a.is_empty() || b.is_empty() {
        return 1.0;
    }
    let mut all: Vec<(f64, usize)> = a
        .iter()
        .map(|&x| (x, 0))
        .chain(b.iter().map(|&x| (x, 1)))
        .collect();
    all.sort_by(|x, y| x.0.total_cmp(&y.0));
    let n = all.len();
    let mut ranks = vec![0.0; n];
    let mut tie_term = 0.0;
    let mut i = 0;
    while i < n {
        let mut j = i;
        while j + 1 < n && all[j + 1].0 == all[i].0 {
            j += 1;
        }
        let r = (i + j) as f64 / 2.0 + 1.0;
        for rank in ranks.iter_mut().take(j + 1).skip(i) {
            *rank = r;
        }
        let t = (j - i + 1) as f64;
        tie_term += t * t * t - t;
        i = j + 1;
    }
    let r1: f64 = all
        .iter()
        .zip(&ranks)
        .filter(|(x, _)| x.1 == 0)
        .map(|(_, r)| r)
        .sum();
    let u1 = r1 - n1 * (n1 + 1.0) / 2.0;
    let mu = n1 * n2 / 2.0;
    let nt = n1 + n2;
    let var = n1 * n2 / 12.0 * ((nt + 1.0) - tie_term / (nt * (nt - 1.0)));
    if var <= 0.0 {
        return 1.0;
    }
    // continuity correction
    let z = ((u1 - mu).abs() - 0.5).max(0.0) / var.sqrt();
    match Normal::new(0.0, 1.0) {
        Ok(norm) => (2.0 * (1.0 - norm.cdf(z))).min(1.0),
        Err(_) => 1.0,
    }
}

/// Percentile bootstrap interval of median(cand) / median(base) at `level`.
pub fn ratio_ci(base: &[f64], cand: &[f64], level: f64, resamples: usize) -> (f64, f64) {
    // a fixed seed: the same data give the same interval
    let mut rng = StdRng::seed_from_u64(7);
    let mut draw = |xs: &[f64], buf: &mut Vec<f64>| {
        buf.clear();
        for _ in 0..xs.len() {
            buf.push(xs[rng.random_range(0..xs.len())]);
        }
        crate::median(buf)
    };
    let (mut bb, mut cb) = (Vec::new(), Vec::new());
    let ratios: Vec<f64> = (0..resamples)
        .map(|_| {
            let b = draw(base, &mut bb);
            let c = draw(cand, &mut cb);
            c / b
        })
        .collect();
    percentile_interval(ratios, level)
}

/// Draw `groups.len()` groups with replacement, then that many values with replacement
/// within each drawn group, into `buf`; returns their median.
pub(crate) fn hier_draw(groups: &[Vec<f64>], rng: &mut StdRng, buf: &mut Vec<f64>) -> f64 {
    buf.clear();
    for _ in 0..groups.len() {
        let g = &groups[rng.random_range(0..groups.len())];
        for _ in 0..g.len() {
            buf.push(g[rng.random_range(0..g.len())]);
        }
    }
    crate::median(buf)
}

/// Hierarchical percentile-bootstrap interval of median(cand) / median(base) at `level`,
/// where each side is a list of executions (separate processes), each a list of per-call
/// times: executions are resampled, then samples within each (Kalibera & Jones, "Rigorous
/// Benchmarking in Reasonable Time", ISMM 2013). The spread between processes therefore
/// widens the interval, as it should; with one execution per side it cannot, and the
/// interval is only as wide as one process's samples. Empty groups are ignored.
pub fn hier_ratio_ci(
    base: &[Vec<f64>],
    cand: &[Vec<f64>],
    level: f64,
    resamples: usize,
) -> (f64, f64) {
    let keep =
        |g: &[Vec<f64>]| -> Vec<Vec<f64>> { g.iter().filter(|x| !x.is_empty()).cloned().collect() };
    let (base, cand) = (keep(base), keep(cand));
    if base.is_empty() || cand.is_empty() {
        return (0.0, f64::INFINITY);
    }
    let mut rng = StdRng::seed_from_u64(11);
    let (mut bb, mut cb) = (Vec::new(), Vec::new());
    let ratios: Vec<f64> = (0..resamples)
        .map(|_| {
            let b = hier_draw(&base, &mut rng, &mut bb);
            let c = hier_draw(&cand, &mut rng, &mut cb);
            c / b
        })
        .collect();
    percentile_interval(ratios, level)
}

/// Hierarchical bootstrap interval of the median of pooled executions (see
/// [`hier_ratio_ci`]).
pub fn hier_median_ci(groups: &[Vec<f64>], level: f64, resamples: usize) -> (f64, f64) {
    let groups: Vec<Vec<f64>> = groups.iter().filter(|x| !x.is_empty()).cloned().collect();
    if groups.is_empty() {
        return (0.0, f64::INFINITY);
    }
    let mut rng = StdRng::seed_from_u64(13);
    let mut buf = Vec::new();
    let meds: Vec<f64> = (0..resamples)
        .map(|_| hier_draw(&groups, &mut rng, &mut buf))
        .collect();
    percentile_interval(meds, level)
}

/// The central `level` interval of bootstrap replicates.
fn percentile_interval(mut xs: Vec<f64>, level: f64) -> (f64, f64) {
    xs.sort_by(f64::total_cmp);
    let a = (1.0 - level) / 2.0;
    (
        crate::estimate::quantile_sorted(&xs, a),
        crate::estimate::quantile_sorted(&xs, 1.0 - a),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identical_samples_are_not_different() {
        let a: Vec<f64> = (0..20).map(|i| 100.0 + f64::from(i)).collect();
        assert!(mann_whitney(&a, &a) > 0.9);
        let (lo, hi) = ratio_ci(&a, &a, 0.99, 2000);
        assert!(lo <= 1.0 && hi >= 1.0, "[{lo}, {hi}]");
    }

    #[test]
    fn a_shift_is_found_and_its_ratio_bracketed() {
        let a: Vec<f64> = (0..20).map(|i| 100.0 + f64::from(i % 5)).collect();
        let b: Vec<f64> = a.iter().map(|x| x * 1.2).collect();
        assert!(mann_whitney(&a, &b) < 1e-4);
        let (lo, hi) = ratio_ci(&a, &b, 0.99, 2000);
        assert!(
            lo > 1.1 && hi < 1.3 && lo <= 1.2 && hi >= 1.19,
            "[{lo}, {hi}]"
        );
        assert_eq!(mann_whitney(&[], &b), 1.0);
    }

    #[test]
    fn between_execution_spread_widens_the_hierarchical_interval() {
        // each execution tight, executions 10% apart: one process's samples would call
        // the 3% shift certain; the hierarchical interval must straddle it
        let exec =
            |level: f64| -> Vec<f64> { (0..20).map(|i| level + f64::from(i % 3) * 0.1).collect() };
        let base = vec![exec(100.0), exec(110.0), exec(95.0), exec(105.0)];
        let cand: Vec<Vec<f64>> = base
            .iter()
            .map(|e| e.iter().map(|x| x * 1.03).collect())
            .collect();
        let (lo, hi) = hier_ratio_ci(&base, &cand, 0.99, 2000);
        assert!(lo < 1.0 && hi > 1.03, "[{lo}, {hi}]");
        let flat = ratio_ci(&base[0], &cand[0], 0.99, 2000);
        assert!(flat.0 > 1.02, "one process alone: {flat:?}");
        let (mlo, mhi) = hier_median_ci(&base, 0.95, 2000);
        assert!(mlo < 100.0 && mhi > 105.0, "[{mlo}, {mhi}]");
    }
}
