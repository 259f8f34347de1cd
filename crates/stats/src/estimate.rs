//! Per-case estimates from raw samples: median, bootstrap CI of the median, MAD.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::StatsError;

/// Summary of one case's per-call times (nanoseconds).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Estimate {
    pub n: usize,
    pub median: f64,
    pub mean: f64,
    /// Percentile-bootstrap confidence interval of the median.
    pub ci_low: f64,
    pub ci_high: f64,
    /// Median absolute deviation from the median (unscaled).
    pub mad: f64,
}

/// Per-call times from `(iters, total_ns)` samples. Samples with zero iterations, or a
/// negative or non-finite total, are an error naming the sample.
pub fn per_call(samples: &[(u64, f64)]) -> Result<Vec<f64>, StatsError> {
    samples
        .iter()
        .enumerate()
        .map(|(i, &(iters, total))| {
            if iters == 0 {
                Err(StatsError::BadSample(format!(
                    "sample {i}: zero iterations"
                )))
            } else if !total.is_finite() || total < 0.0 {
                Err(StatsError::BadSample(format!(
                    "sample {i}: total_ns = {total}"
                )))
            } else {
                Ok(total / iters as f64)
            }
        })
        .collect()
}

/// Median of a slice (NaN-free; sorts a copy).
pub fn median(xs: &[f64]) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    median_sorted(&v)
}

fn median_sorted(v: &[f64]) -> f64 {
    let n = v.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        v[n / 2]
    } else {
        0.5 * (v[n / 2 - 1] + v[n / 2])
    }
}

/// Quantile with linear interpolation between order statistics (type 7), `q` in [0, 1].
pub fn quantile_sorted(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let pos = q.clamp(0.0, 1.0) * (v.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    v[lo] + (v[hi] - v[lo]) * (pos - lo as f64)
}

/// Median absolute deviation (unscaled).
pub fn mad(xs: &[f64]) -> f64 {
    let m = median(xs);
    let dev: Vec<f64> = xs.iter().map(|x| (x - m).abs()).collect();
    median(&dev)
}

/// The interval level of a row's median ([`estimate`]'s `level` where a row is made).
pub const ROW_LEVEL: f64 = 0.95;

/// The bootstrap resamples of a row's interval; criterion's own analysis of the same
/// samples is given the same count and level (harness's `criterion_config`).
pub const ROW_RESAMPLES: usize = 2000;

/// Estimate from per-call times with a `level` (e.g. 0.95) bootstrap interval of the median
/// over `resamples` resamples, seeded so the same data give the same interval.
pub fn estimate(times: &[f64], level: f64, resamples: usize) -> Result<Estimate, StatsError> {
    if times.is_empty() {
        return Err(StatsError::TooFew { need: 1, got: 0 });
    }
    if let Some(bad) = times.iter().find(|t| !t.is_finite() || **t < 0.0) {
        return Err(StatsError::BadSample(format!("per-call time {bad}")));
    }
    let mut sorted = times.to_vec();
    sorted.sort_by(f64::total_cmp);
    let med = median_sorted(&sorted);
    let mean = times.iter().sum::<f64>() / times.len() as f64;
    let (ci_low, ci_high) = bootstrap_ci(times, level, resamples, median);
    Ok(Estimate {
        n: times.len(),
        median: med,
        mean,
        ci_low,
        ci_high,
        mad: mad(times),
    })
}

/// Percentile bootstrap interval of `stat` over `xs`.
pub fn bootstrap_ci(
    xs: &[f64],
    level: f64,
    resamples: usize,
    stat: impl Fn(&[f64]) -> f64,
) -> (f64, f64) {
    let n = xs.len();
    if n < 2 || resamples == 0 {
        let s = stat(xs);
        return (s, s);
    }
    let mut rng = StdRng::seed_from_u64(0x006f_7062_656e_6368);
    let mut buf = vec![0.0; n];
    let mut stats: Vec<f64> = (0..resamples)
        .map(|_| {
            for b in buf.iter_mut() {
                *b = xs[rng.random_range(0..n)];
            }
            stat(&buf)
        })
        .collect();
    stats.sort_by(f64::total_cmp);
    let alpha = (1.0 - level) / 2.0;
    (
        quantile_sorted(&stats, alpha),
        quantile_sorted(&stats, 1.0 - alpha),
    )
}

/// The arithmetic mean of `xs` (0 for an empty slice).
pub(crate) fn mean(xs: &[f64]) -> f64 {
    xs.iter().sum::<f64>() / xs.len().max(1) as f64
}

/// The sum of squared deviations of `xs` from their mean, and its degrees of freedom
/// (n − 1; 0 for an empty slice).
pub fn sum_sq(xs: &[f64]) -> (f64, usize) {
    if xs.is_empty() {
        return (0.0, 0);
    }
    let m = mean(xs);
    (xs.iter().map(|x| (x - m).powi(2)).sum(), xs.len() - 1)
}

/// The coefficient of variation of `xs` (sample SD over the mean); `None` under two values
/// or where the mean is not positive.
pub fn cv(xs: &[f64]) -> Option<f64> {
    let (ss, df) = sum_sq(xs);
    let m = mean(xs);
    (df >= 1 && m > 0.0).then(|| (ss / df as f64).sqrt() / m)
}

/// The pooled SD of `groups` about their own means (a group of one adds nothing); `None`
/// where no group has two values.
pub fn pooled_sd<'a>(groups: impl IntoIterator<Item = &'a [f64]>) -> Option<f64> {
    let (ss, df) = groups
        .into_iter()
        .map(sum_sq)
        .fold((0.0, 0), |(a, b), (s, d)| (a + s, b + d));
    (df > 0).then(|| (ss / df as f64).sqrt())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_of_one_set_and_of_groups() {
        // 2, 4, 6: mean 4, squares 4 + 0 + 4
        assert_eq!(sum_sq(&[2.0, 4.0, 6.0]), (8.0, 2));
        assert_eq!(cv(&[2.0, 4.0, 6.0]), Some(0.5));
        assert_eq!(cv(&[3.0]), None);
        assert_eq!(cv(&[-1.0, 1.0]), None);
        // groups {1, 3} and {10, 14}: squares 2 + 8 over df 2; a lone value adds nothing
        let groups: [&[f64]; 3] = [&[1.0, 3.0], &[10.0, 14.0], &[99.0]];
        assert_eq!(pooled_sd(groups), Some(5.0f64.sqrt()));
        assert_eq!(pooled_sd([&[1.0][..]]), None);
    }

    #[test]
    fn median_mad_and_ci() {
        let xs = [5.0, 1.0, 3.0, 2.0, 4.0];
        assert_eq!(median(&xs), 3.0);
        assert_eq!(median(&[1.0, 2.0, 3.0, 10.0]), 2.5);
        assert_eq!(mad(&xs), 1.0);
        let e = estimate(&xs, 0.95, 2000).unwrap();
        assert_eq!(e.median, 3.0);
        assert_eq!(e.mean, 3.0);
        assert!(e.ci_low <= 3.0 && e.ci_high >= 3.0 && e.ci_low >= 1.0 && e.ci_high <= 5.0);
    }

    #[test]
    fn per_call_divides_and_rejects_bad_samples() {
        assert_eq!(
            per_call(&[(4, 400.0), (2, 100.0)]).unwrap(),
            vec![100.0, 50.0]
        );
        assert!(per_call(&[(0, 1.0)]).is_err());
        assert!(per_call(&[(1, -1.0)]).is_err());
        assert!(per_call(&[(1, f64::NAN)]).is_err());
        assert!(estimate(&[], 0.95, 10).is_err());
        assert!(estimate(&[1.0, f64::INFINITY], 0.95, 10).is_err());
    }
}
