//! Change points in a sequence of measurements: E-Divisive means with a Student t-test, the
//! way Apache Otava (formerly Hunter) runs it.
//!
//! - **Candidates** come from E-Divisive (Matteson & James 2014, α = 1): for each split of a
//!   segment, the energy distance between the two sides, scaled by m·k/(m+k); the split
//!   with the largest value is the candidate.
//! - **Significance** is a two-sided Student t-test (pooled variance) between the candidate's
//!   two sides, each side running to the neighbouring change point. Otava replaced
//!   E-Divisive's permutation test with it: deterministic, fast, and usable with a handful
//!   of points. The largest candidate is accepted while its p ≤ `max_p`; the first one that
//!   fails stops the splitting, as in MongoDB's and Otava's implementations.
//! - **Windows:** the series is searched in windows of `window` points that overlap by half,
//!   so the O(n²) search stays small and changes in the middle of a long history are not
//!   missed.
//! - **Segments of at least `min_size` points** (2 by default): a single outlying point in the
//!   middle or at the start of a history is not a change. The best split is the largest of
//!   ~n candidates, so its t-test is optimistic; on one-point sides that costs most (see the
//!   planted-truth test).
//! - **Pruning:** every change point is then re-tested against its neighbours; the weakest one
//!   with p > `max_p` or |magnitude| < `min_magnitude` is removed, and so on until none fails.
//! - **Refinement:** each change point may move by one place where that gives its t-test a
//!   larger |t| (E-Divisive's split is not always the sharpest for a mean shift; a step in
//!   the newest point alone must be placed there, not one earlier).
//! - **The newest point** is tested on its own, once: against the segment since the last
//!   change point, with the same t-test and limits. That single, pre-specified test is how a
//!   regression in the newest build is seen before a second build confirms it
//!   ([`ChangePoint::n_after`] is then 1).
//!
//! The magnitude of a change is median(after) / median(before) − 1 over the points between
//! the neighbouring change points, so one outlying point cannot make a step look larger.

use crate::dist::t_cdf;

use crate::median;

/// How change points are searched and which are kept.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CpSettings {
    /// Points per search window (≥ 4); windows overlap by half.
    pub window: usize,
    /// Largest two-sided p of the t-test for a change point to stand.
    pub max_p: f64,
    /// Smallest |median(after) / median(before) − 1| for a change point to stand.
    pub min_magnitude: f64,
    /// Fewest points on either side of a change (≥ 1), the newest point's own test aside.
    pub min_size: usize,
}

impl Default for CpSettings {
    /// Otava's window and p (50 points, 0.001), and a 5% minimum step, as asv's.
    fn default() -> Self {
        CpSettings {
            window: 50,
            max_p: 0.001,
            min_magnitude: 0.05,
            min_size: 2,
        }
    }
}

/// A change point: the series differs from `index` on.
#[derive(Debug, Clone, PartialEq)]
pub struct ChangePoint {
    /// The first point after the change.
    pub index: usize,
    /// Points of the segment before (from the previous change point) and after (to the next).
    pub n_before: usize,
    pub n_after: usize,
    pub median_before: f64,
    pub median_after: f64,
    /// Two-sided p of the Student t-test between the two segments.
    pub p: f64,
}

impl ChangePoint {
    /// median(after) / median(before) − 1: +0.1 is a 10% increase.
    pub fn magnitude(&self) -> f64 {
        self.median_after / self.median_before - 1.0
    }
}

/// Student's two-sample t statistic with pooled variance, |t|, and its degrees of freedom.
/// A side of one point adds nothing to the variance; with no degrees of freedom left |t| is
/// 0, and with zero variance it is infinite when the means differ and 0 when they do not.
fn t_stat(left: &[f64], right: &[f64]) -> (f64, f64) {
    let (m, k) = (left.len(), right.len());
    if m == 0 || k == 0 || m + k < 3 {
        return (0.0, 0.0);
    }
    let (ml, mr) = (crate::estimate::mean(left), crate::estimate::mean(right));
    let df = (m + k - 2) as f64;
    let pooled = (crate::sum_sq(left).0 + crate::sum_sq(right).0) / df;
    let se = (pooled * (1.0 / m as f64 + 1.0 / k as f64)).sqrt();
    if !se.is_finite() {
        return (0.0, df);
    }
    if se == 0.0 {
        return (if ml == mr { 0.0 } else { f64::INFINITY }, df);
    }
    ((ml - mr).abs() / se, df)
}

/// Two-sided p of Student's two-sample t-test with pooled variance. A side of one point adds
/// nothing to the variance; with no degrees of freedom left p is 1; with zero variance it is
/// 0 when the means differ and 1 when they do not.
pub fn t_test(left: &[f64], right: &[f64]) -> f64 {
    let (t, df) = t_stat(left, right);
    if t == 0.0 || df <= 0.0 {
        return 1.0;
    }
    if t.is_infinite() {
        return 0.0;
    }
    (2.0 * (1.0 - t_cdf(t, df))).clamp(0.0, 1.0)
}

/// The split of `x` with the largest E-Divisive statistic: (split index, statistic). The
/// left side is `x[..index]`; both sides have at least `min_size` (≥ 1) points.
pub fn best_split(x: &[f64], min_size: usize) -> Option<(usize, f64)> {
    let n = x.len();
    let min_size = min_size.max(1);
    if n < 2 * min_size {
        return None;
    }
    let d = |i: usize, j: usize| (x[i] - x[j]).abs();
    // running sums as the split moves right: within the left side, within the right side,
    // and across
    let mut within_l = 0.0;
    let mut within_r = 0.0;
    for i in 0..n {
        for j in i + 1..n {
            within_r += d(i, j);
        }
    }
    let mut across = 0.0;
    let mut best: Option<(usize, f64)> = None;
    for tau in 1..n {
        // point tau-1 moves from the right side to the left
        let p = tau - 1;
        let to_left: f64 = (0..p).map(|i| d(i, p)).sum();
        let to_right: f64 = (tau..n).map(|j| d(p, j)).sum();
        within_r -= to_right;
        // pairs (left, p) were across and become within; pairs (p, right) become across
        across += to_right - to_left;
        within_l += to_left;
        let (m, k) = (tau as f64, (n - tau) as f64);
        let pair_mean = |s: f64, c: f64| {
            if c < 2.0 {
                0.0
            } else {
                2.0 * s / (c * (c - 1.0))
            }
        };
        let e = 2.0 * across / (m * k) - pair_mean(within_l, m) - pair_mean(within_r, k);
        let q = m * k / (m + k) * e;
        let sizes_ok = tau >= min_size && n - tau >= min_size;
        if sizes_ok && best.is_none_or(|(_, b)| q > b) {
            best = Some((tau, q));
        }
    }
    best
}

/// E-Divisive with the t-test on one window: the accepted split indices, sorted.
fn e_divisive(x: &[f64], max_p: f64, min_size: usize) -> Vec<usize> {
    let mut cps: Vec<usize> = Vec::new();
    loop {
        let bounds: Vec<usize> = std::iter::once(0)
            .chain(cps.iter().copied())
            .chain(std::iter::once(x.len()))
            .collect();
        // the strongest candidate over all current segments
        let best = bounds
            .windows(2)
            .filter_map(|w| {
                best_split(&x[w[0]..w[1]], min_size).map(|(t, q)| (w[0], w[0] + t, w[1], q))
            })
            .max_by(|a, b| a.3.total_cmp(&b.3));
        let Some((a, at, b, _)) = best else { break };
        if t_test(&x[a..at], &x[at..b]) > max_p {
            break;
        }
        cps.push(at);
        cps.sort_unstable();
    }
    cps
}

/// The statistics of each change point in `indices` (sorted), against its neighbours.
fn describe(x: &[f64], indices: &[usize]) -> Vec<ChangePoint> {
    let bounds: Vec<usize> = std::iter::once(0)
        .chain(indices.iter().copied())
        .chain(std::iter::once(x.len()))
        .collect();
    bounds
        .windows(3)
        .map(|w| {
            let (before, after) = (&x[w[0]..w[1]], &x[w[1]..w[2]]);
            ChangePoint {
                index: w[1],
                n_before: before.len(),
                n_after: after.len(),
                median_before: median(before),
                median_after: median(after),
                p: t_test(before, after),
            }
        })
        .collect()
}

/// Change points of `x` (one value per point, in order): windows of E-Divisive with the
/// t-test, then pruning of those that fail `max_p` or `min_magnitude` against their
/// neighbours. Non-finite values are the caller's to remove; a series under 3 points has
/// none.
pub fn change_points(x: &[f64], s: &CpSettings) -> Vec<ChangePoint> {
    let n = x.len();
    if n < 3 || x.iter().any(|v| !v.is_finite()) {
        return Vec::new();
    }
    let window = s.window.max(4);
    let step = window / 2;
    let mut found: Vec<usize> = Vec::new();
    let mut start = 0;
    while start < n {
        let end = (start + window).min(n);
        let new: Vec<usize> = e_divisive(&x[start..end], s.max_p, s.min_size)
            .into_iter()
            .map(|i| i + start)
            .collect();
        // the next window starts at the last change found, or half a window on
        let last = new.last().copied().unwrap_or(0);
        found.extend(new);
        if end == n {
            break;
        }
        start = last.max(start + step);
    }
    found.sort_unstable();
    found.dedup();
    // the newest point, once, against the segment since the last change
    let since = found.last().copied().unwrap_or(0);
    if found.last() != Some(&(n - 1)) && n - 1 - since >= 2 {
        let newest = describe(&x[since..], &[n - 1 - since]);
        if newest
            .first()
            .is_some_and(|c| c.p <= s.max_p && c.magnitude().abs() >= s.min_magnitude)
        {
            found.push(n - 1);
        }
    }
    // refine: each change point moves by one where that splits its neighbours with a
    // smaller p (only the newest point may stand alone after a change)
    for i in 0..found.len() {
        let lo = if i == 0 { 0 } else { found[i - 1] };
        let hi = found.get(i + 1).copied().unwrap_or(n);
        // by |t|, not p: p underflows to 0 for sharp steps and could not tell them apart
        let t_at = |at: usize| t_stat(&x[lo..at], &x[at..hi]).0;
        let allowed = |at: usize| {
            at >= lo + s.min_size.max(1)
                && (hi - at >= s.min_size.max(1) || (at == n - 1 && hi == n))
        };
        // the current place first: on a tie it stays
        let best = [found[i], found[i].saturating_sub(1), found[i] + 1]
            .into_iter()
            .filter(|&at| at > lo && at < hi && allowed(at))
            .reduce(|a, b| if t_at(b) > t_at(a) { b } else { a });
        if let Some(at) = best {
            found[i] = at;
        }
    }
    // prune: drop the weakest failing change point until none fails
    loop {
        let cps = describe(x, &found);
        let weakest = cps
            .iter()
            .enumerate()
            .filter(|(_, c)| c.p > s.max_p || c.magnitude().abs() < s.min_magnitude)
            .max_by(|(_, a), (_, b)| {
                a.p.total_cmp(&b.p)
                    .then(b.magnitude().abs().total_cmp(&a.magnitude().abs()))
            })
            .map(|(i, _)| i);
        match weakest {
            Some(i) => {
                found.remove(i);
            }
            None => return cps,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn t_test_known_value() {
        // scipy.stats.ttest_ind([1,2,3,4],[3,4,5,6]) -> p = 0.0714 (t = -2.191, df 6)
        let p = t_test(&[1.0, 2.0, 3.0, 4.0], &[3.0, 4.0, 5.0, 6.0]);
        assert!((p - 0.0714).abs() < 5e-4, "{p}");
        assert_eq!(t_test(&[1.0, 1.0], &[1.0, 1.0]), 1.0);
        assert_eq!(t_test(&[1.0, 1.0], &[2.0, 2.0]), 0.0);
        assert_eq!(t_test(&[1.0], &[2.0]), 1.0);
    }

    #[test]
    fn best_split_finds_a_clean_step() {
        let x = [1.0, 1.1, 0.9, 1.0, 2.0, 2.1, 1.9];
        assert_eq!(best_split(&x, 1).map(|b| b.0), Some(4));
        assert_eq!(best_split(&x, 4), None);
        // and matches the direct formula at that split
        let (l, r) = x.split_at(4);
        let mean_abs = |a: &[f64], b: &[f64]| {
            let s: f64 = a
                .iter()
                .flat_map(|u| b.iter().map(move |v| (u - v).abs()))
                .sum();
            s / (a.len() * b.len()) as f64
        };
        let within = |a: &[f64]| {
            let n = a.len() as f64;
            mean_abs(a, a) * n / (n - 1.0)
        };
        let e = 2.0 * mean_abs(l, r) - within(l) - within(r);
        let q = 4.0 * 3.0 / 7.0 * e;
        let got = best_split(&x, 1).map_or(0.0, |b| b.1);
        assert!((got - q).abs() < 1e-9, "{got} vs {q}");
    }

    #[test]
    fn steps_found_and_flat_series_clean() {
        let s = CpSettings::default();
        let flat: Vec<f64> = (0..40).map(|i| 100.0 + (i % 3) as f64 * 0.5).collect();
        assert!(change_points(&flat, &s).is_empty());
        let mut step = flat.clone();
        for v in &mut step[25..] {
            *v *= 1.2;
        }
        let cps = change_points(&step, &s);
        assert_eq!(cps.len(), 1, "{cps:?}");
        assert_eq!(cps[0].index, 25);
        assert!((cps[0].magnitude() - 0.2).abs() < 0.01);
        // a step under the minimum magnitude is not reported
        let mut small = flat.clone();
        for v in &mut small[25..] {
            *v *= 1.03;
        }
        assert!(change_points(&small, &s).is_empty());
        // one outlying point is no change, unless it is the newest
        let mut outlier = flat.clone();
        outlier[10] *= 1.3;
        assert!(change_points(&outlier, &s).is_empty());
        let mut newest = flat.clone();
        newest[39] *= 1.3;
        let cps = change_points(&newest, &s);
        assert_eq!(
            cps.iter().map(|c| (c.index, c.n_after)).collect::<Vec<_>>(),
            [(39, 1)]
        );
        // degenerate input
        assert!(change_points(&[1.0, 2.0], &s).is_empty());
        assert!(change_points(&[1.0, f64::NAN, 2.0, 3.0], &s).is_empty());
    }

    #[test]
    fn windows_find_several_steps_in_a_long_series() {
        let s = CpSettings {
            window: 20,
            ..CpSettings::default()
        };
        let x: Vec<f64> = (0..90)
            .map(|i| {
                let level = match i {
                    0..30 => 100.0,
                    30..60 => 130.0,
                    _ => 110.0,
                };
                level + ((i * 7) % 5) as f64 * 0.4
            })
            .collect();
        let idx: Vec<usize> = change_points(&x, &s).iter().map(|c| c.index).collect();
        assert_eq!(idx, vec![30, 60]);
    }
}
