//! Overhead-versus-work models of one series (a case key minus the batch).
//!
//! Two models of per-call time `t` against the work of a call `w` (bytes or FLOPs):
//!
//! - `affine`: `t = overhead + w / rate` — a fixed cost per call (host dispatch + launch)
//!   paid in series with the work.
//! - `floor`: `t = max(overhead, w / rate)` — the fixed cost hidden behind the work once
//!   the work is large enough (a pipelined GPU: the host queues the next call while the
//!   device runs this one).
//!
//! Both are fitted by least squares weighted by each point's uncertainty (1/σ²), with
//! Student-t confidence intervals for both parameters (n − 2 degrees of freedom, the scale
//! taken from the residuals), R² and residuals. Both have two parameters, so the Akaike
//! criterion picks the one with the smaller weighted residual sum; a tie goes to `affine`.
//! A series whose time does not grow with work over the measured range is `flat`: its
//! overhead is the weighted mean time and it has no rate.

use crate::StatsError;

/// One measured point of a series.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point {
    /// Batch size (for the crossover and the overhead share per batch).
    pub batch: f64,
    /// Work of one call, in the series' unit (bytes or FLOPs).
    pub work: f64,
    /// Per-call time, ns (the median).
    pub time: f64,
    /// Its standard uncertainty, ns.
    pub sigma: f64,
}

/// Which model a fit is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelKind {
    Affine,
    Floor,
    /// Time does not grow with work in the measured range: overhead only.
    Flat,
}

impl ModelKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ModelKind::Affine => "affine",
            ModelKind::Floor => "floor",
            ModelKind::Flat => "flat",
        }
    }
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "affine" => Some(ModelKind::Affine),
            "floor" => Some(ModelKind::Floor),
            "flat" => Some(ModelKind::Flat),
            _ => None,
        }
    }
}

/// A fitted model. Times in ns, `cost` in ns per unit of work (`rate` = 1 / cost).
#[derive(Debug, Clone, PartialEq)]
pub struct Fit {
    pub kind: ModelKind,
    pub n: usize,
    pub overhead: f64,
    pub overhead_ci: (f64, f64),
    /// ns per unit of work; 0 for `flat`.
    pub cost: f64,
    pub cost_ci: (f64, f64),
    pub r2: f64,
    /// Observed minus fitted time, per point in input order.
    pub residuals: Vec<f64>,
    /// Weighted residual sum of squares.
    pub chi2: f64,
    /// Akaike information criterion (corrected for small n where n > k + 1).
    pub aic: f64,
}

impl Fit {
    /// Work per ns (bytes/ns = GB/s, FLOP/ns = GFLOP/s); `None` for `flat`.
    pub fn rate(&self) -> Option<f64> {
        (self.cost > 0.0).then(|| 1.0 / self.cost)
    }

    /// Confidence interval of the rate; the upper end is `None` when the cost's interval
    /// reaches zero (the data cannot bound the rate from above).
    pub fn rate_ci(&self) -> Option<(f64, Option<f64>)> {
        self.rate()?;
        let (lo, hi) = self.cost_ci;
        let low = if hi > 0.0 { 1.0 / hi } else { 0.0 };
        let high = (lo > 0.0).then(|| 1.0 / lo);
        Some((low, high))
    }

    /// Predicted per-call time at `work`.
    pub fn predict(&self, work: f64) -> f64 {
        match self.kind {
            ModelKind::Affine => self.overhead + self.cost * work,
            ModelKind::Floor => self.overhead.max(self.cost * work),
            ModelKind::Flat => self.overhead,
        }
    }

    /// Share of the predicted time at `work` that is fixed per-call cost: overhead / t for
    /// `affine`; for `floor` the overhead hides behind the work once the work is larger,
    /// so the share is overhead / t when overhead-bound and 0 otherwise.
    pub fn overhead_share(&self, work: f64) -> f64 {
        let t = self.predict(work);
        if t <= 0.0 {
            return 0.0;
        }
        match self.kind {
            ModelKind::Affine => self.overhead / t,
            ModelKind::Floor => {
                if self.overhead >= self.cost * work {
                    1.0
                } else {
                    0.0
                }
            }
            ModelKind::Flat => 1.0,
        }
    }

    /// The work at which work / rate equals the overhead.
    pub fn crossover_work(&self) -> Option<f64> {
        (self.cost > 0.0).then(|| self.overhead / self.cost)
    }
}

fn validate(points: &[Point]) -> Result<(), StatsError> {
    if points.len() < 3 {
        return Err(StatsError::TooFew {
            need: 3,
            got: points.len(),
        });
    }
    for (i, p) in points.iter().enumerate() {
        let finite =
            p.batch.is_finite() && p.work.is_finite() && p.time.is_finite() && p.sigma.is_finite();
        if !finite || p.time <= 0.0 || p.work < 0.0 || p.sigma < 0.0 {
            return Err(StatsError::BadSample(format!(
                "point {i}: work {} time {} sigma {}",
                p.work, p.time, p.sigma
            )));
        }
    }
    let w0 = points[0].work;
    if points.iter().all(|p| p.work == w0) {
        return Err(StatsError::Degenerate(
            "every point has the same work".into(),
        ));
    }
    Ok(())
}

/// Weights 1/σ², with σ floored at 0.5% of the time so one very tight point cannot take
/// the whole fit.
fn weights(points: &[Point]) -> Vec<f64> {
    points
        .iter()
        .map(|p| {
            let s = p.sigma.max(0.005 * p.time);
            1.0 / (s * s)
        })
        .collect()
}

/// The two-sided Student-t quantile at `level` with `dof` degrees of freedom.
fn t_two_sided(level: f64, dof: usize) -> f64 {
    crate::dist::t_quantile(1.0 - (1.0 - level) / 2.0, dof as f64)
}

fn aic(chi2: f64, n: usize, k: usize) -> f64 {
    let n_f = n as f64;
    let base = n_f * (chi2.max(1e-300) / n_f).ln() + 2.0 * k as f64;
    if n > k + 1 {
        base + (2.0 * (k * (k + 1)) as f64) / (n - k - 1) as f64
    } else {
        base
    }
}

fn weighted_r2(points: &[Point], w: &[f64], chi2: f64) -> f64 {
    let sw: f64 = w.iter().sum();
    let mean = points.iter().zip(w).map(|(p, wi)| wi * p.time).sum::<f64>() / sw;
    let tss: f64 = points
        .iter()
        .zip(w)
        .map(|(p, wi)| wi * (p.time - mean).powi(2))
        .sum();
    if tss > 0.0 { 1.0 - chi2 / tss } else { 1.0 }
}

/// Fit `t = overhead + cost · work` by weighted least squares.
pub fn fit_affine(points: &[Point], level: f64) -> Result<Fit, StatsError> {
    validate(points)?;
    let w = weights(points);
    let (mut s, mut sx, mut sy, mut sxx, mut sxy) = (0.0, 0.0, 0.0, 0.0, 0.0);
    for (p, wi) in points.iter().zip(&w) {
        s += wi;
        sx += wi * p.work;
        sy += wi * p.time;
        sxx += wi * p.work * p.work;
        sxy += wi * p.work * p.time;
    }
    let det = s * sxx - sx * sx;
    if det.abs() <= f64::EPSILON * s * sxx {
        return Err(StatsError::Degenerate(
            "work values too close to separate".into(),
        ));
    }
    let cost = (s * sxy - sx * sy) / det;
    let overhead = (sxx * sy - sx * sxy) / det;
    let residuals: Vec<f64> = points
        .iter()
        .map(|p| p.time - (overhead + cost * p.work))
        .collect();
    let chi2: f64 = residuals.iter().zip(&w).map(|(r, wi)| wi * r * r).sum();
    let n = points.len();
    let s2 = chi2 / (n - 2) as f64;
    let t = t_two_sided(level, n - 2);
    let se_a = (s2 * sxx / det).sqrt();
    let se_b = (s2 * s / det).sqrt();
    Ok(Fit {
        kind: ModelKind::Affine,
        n,
        overhead,
        overhead_ci: (overhead - t * se_a, overhead + t * se_a),
        cost,
        cost_ci: (cost - t * se_b, cost + t * se_b),
        r2: weighted_r2(points, &w, chi2),
        residuals,
        chi2,
        aic: aic(chi2, n, 2),
    })
}

/// Fit `t = max(overhead, cost · work)`: every split of the points (sorted by work) into an
/// overhead-bound head and a work-bound tail is tried, the head giving the overhead
/// (weighted mean) and the tail the cost (weighted fit through the origin); the split with
/// the smallest weighted residual sum of the whole model wins.
pub fn fit_floor(points: &[Point], level: f64) -> Result<Fit, StatsError> {
    validate(points)?;
    let w = weights(points);
    let mut order: Vec<usize> = (0..points.len()).collect();
    order.sort_by(|&a, &b| points[a].work.total_cmp(&points[b].work));
    let n = points.len();
    let mut best: Option<(f64, f64, f64, f64, f64)> = None; // chi2, a, c, sum_w_head, sum_wxx_tail
    for k in 1..n {
        let (head, tail) = order.split_at(k);
        let sw_head: f64 = head.iter().map(|&i| w[i]).sum();
        let a = head.iter().map(|&i| w[i] * points[i].time).sum::<f64>() / sw_head;
        let swxx: f64 = tail.iter().map(|&i| w[i] * points[i].work.powi(2)).sum();
        if swxx <= 0.0 {
            continue;
        }
        let c = tail
            .iter()
            .map(|&i| w[i] * points[i].work * points[i].time)
            .sum::<f64>()
            / swxx;
        let chi2: f64 = (0..n)
            .map(|i| w[i] * (points[i].time - a.max(c * points[i].work)).powi(2))
            .sum();
        if best.is_none_or(|b| chi2 < b.0) {
            best = Some((chi2, a, c, sw_head, swxx));
        }
    }
    let Some((chi2, a, c, sw_head, swxx)) = best else {
        return Err(StatsError::Degenerate(
            "no split separates overhead from work".into(),
        ));
    };
    let residuals: Vec<f64> = points.iter().map(|p| p.time - a.max(c * p.work)).collect();
    let s2 = chi2 / (n - 2) as f64;
    let t = t_two_sided(level, n - 2);
    let se_a = (s2 / sw_head).sqrt();
    let se_c = (s2 / swxx).sqrt();
    Ok(Fit {
        kind: ModelKind::Floor,
        n,
        overhead: a,
        overhead_ci: (a - t * se_a, a + t * se_a),
        cost: c,
        cost_ci: (c - t * se_c, c + t * se_c),
        r2: weighted_r2(points, &w, chi2),
        residuals,
        chi2,
        aic: aic(chi2, n, 2),
    })
}

/// Overhead only: the weighted mean time.
fn fit_flat(points: &[Point], level: f64) -> Fit {
    let w = weights(points);
    let sw: f64 = w.iter().sum();
    let a = points
        .iter()
        .zip(&w)
        .map(|(p, wi)| wi * p.time)
        .sum::<f64>()
        / sw;
    let residuals: Vec<f64> = points.iter().map(|p| p.time - a).collect();
    let chi2: f64 = residuals.iter().zip(&w).map(|(r, wi)| wi * r * r).sum();
    let n = points.len();
    let t = t_two_sided(level, n - 1);
    let se = (chi2 / (n - 1) as f64 / sw).sqrt();
    Fit {
        kind: ModelKind::Flat,
        n,
        overhead: a,
        overhead_ci: (a - t * se, a + t * se),
        cost: 0.0,
        cost_ci: (0.0, 0.0),
        r2: 0.0,
        residuals,
        chi2,
        aic: aic(chi2, n, 1),
    }
}

/// Fit both models and keep the better by AIC. A series whose fitted cost is not positive
/// under both (time does not grow with work) is `flat`.
pub fn fit_best(points: &[Point], level: f64) -> Result<Fit, StatsError> {
    let affine = fit_affine(points, level)?;
    // a floor fit none of whose points is work-bound is really flat
    let max_work = points.iter().map(|p| p.work).fold(0.0, f64::max);
    let floor = fit_floor(points, level)
        .ok()
        .filter(|f| f.cost > 0.0 && f.overhead > 0.0 && f.cost * max_work > f.overhead);
    let affine_ok = affine.cost > 0.0;
    Ok(match (affine_ok, floor) {
        (true, Some(f)) if f.aic < affine.aic => f,
        (true, _) => affine,
        (false, Some(f)) => f,
        (false, None) => fit_flat(points, level),
    })
}

/// The batch at which work / rate equals the overhead, interpolated linearly in work
/// between the series' measured batches; `None` when it lies outside them.
pub fn crossover_batch(points: &[Point], fit: &Fit) -> Option<f64> {
    let target = fit.crossover_work()?;
    let mut pts: Vec<&Point> = points.iter().collect();
    pts.sort_by(|a, b| a.batch.total_cmp(&b.batch));
    pts.windows(2).find_map(|win| {
        let (p, q) = (win[0], win[1]);
        let (lo, hi) = (p.work.min(q.work), p.work.max(q.work));
        if target < lo || target > hi || hi == lo {
            return None;
        }
        Some(p.batch + (q.batch - p.batch) * (target - p.work) / (q.work - p.work))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::StdRng;
    use rand_distr::{Distribution, Normal};

    /// A decode-like series: work grows with batch, time = truth + 2% noise.
    fn series(truth: impl Fn(f64) -> f64, seed: u64) -> Vec<Point> {
        let mut rng = StdRng::seed_from_u64(seed);
        let noise = Normal::new(0.0, 1.0).unwrap();
        [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0]
            .iter()
            .map(|&b| {
                let work = 1e5 * b;
                let t = truth(work);
                let sigma = 0.02 * t;
                Point {
                    batch: b,
                    work,
                    time: t + sigma * noise.sample(&mut rng),
                    sigma,
                }
            })
            .collect()
    }

    #[test]
    fn affine_parameters_are_covered_at_the_nominal_rate() {
        // overhead 20 µs, 10 bytes/ns: the CI must contain the truth ~95% of the time
        let (a, c) = (20_000.0, 0.1);
        let runs = 400;
        let (mut cover_a, mut cover_c) = (0, 0);
        for seed in 0..runs {
            let f = fit_affine(&series(|w| a + c * w, seed), 0.95).unwrap();
            cover_a += usize::from(f.overhead_ci.0 <= a && a <= f.overhead_ci.1);
            cover_c += usize::from(f.cost_ci.0 <= c && c <= f.cost_ci.1);
        }
        let (fa, fc) = (cover_a as f64 / runs as f64, cover_c as f64 / runs as f64);
        assert!((0.90..=0.99).contains(&fa), "overhead coverage {fa}");
        assert!((0.90..=0.99).contains(&fc), "cost coverage {fc}");
    }

    #[test]
    fn the_model_that_made_the_data_is_chosen() {
        let mut right = (0, 0);
        for seed in 0..100 {
            let floor = fit_best(&series(|w| f64::max(200_000.0, 0.1 * w), seed), 0.95).unwrap();
            right.0 += usize::from(floor.kind == ModelKind::Floor);
            let affine = fit_best(&series(|w| 200_000.0 + 0.1 * w, seed), 0.95).unwrap();
            right.1 += usize::from(affine.kind == ModelKind::Affine);
        }
        assert!(right.0 >= 95, "floor chosen {} / 100", right.0);
        assert!(right.1 >= 90, "affine chosen {} / 100", right.1);
    }

    #[test]
    fn floor_fit_recovers_its_parameters() {
        let f = fit_floor(&series(|w| f64::max(200_000.0, 0.1 * w), 7), 0.95).unwrap();
        assert!(
            (f.overhead - 200_000.0).abs() / 200_000.0 < 0.05,
            "{}",
            f.overhead
        );
        assert!((f.rate().unwrap() - 10.0).abs() / 10.0 < 0.05);
        assert!(f.overhead_share(1e5) == 1.0 && f.overhead_share(6.4e6) == 0.0);
    }

    #[test]
    fn crossover_is_interpolated_or_absent() {
        let pts = series(|w| 20_000.0 + 0.1 * w, 3);
        let exact = Fit {
            kind: ModelKind::Affine,
            n: 7,
            overhead: 20_000.0,
            overhead_ci: (0.0, 0.0),
            cost: 0.1,
            cost_ci: (0.0, 0.0),
            r2: 1.0,
            residuals: vec![],
            chi2: 0.0,
            aic: 0.0,
        };
        // work = 2e5 at the crossover, which is batch 2
        assert!((crossover_batch(&pts, &exact).unwrap() - 2.0).abs() < 1e-9);
        let late = Fit {
            overhead: 1e9,
            ..exact.clone()
        };
        assert_eq!(crossover_batch(&pts, &late), None);
        assert!((exact.overhead_share(2e5) - 0.5).abs() < 1e-12);
    }

    #[test]
    fn degenerate_input_is_an_error_not_a_nan() {
        let p = |work, time| Point {
            batch: 1.0,
            work,
            time,
            sigma: 1.0,
        };
        assert!(matches!(
            fit_best(&[p(1.0, 1.0)], 0.95),
            Err(StatsError::TooFew { .. })
        ));
        let same = [p(5.0, 1.0), p(5.0, 2.0), p(5.0, 3.0)];
        assert!(matches!(
            fit_best(&same, 0.95),
            Err(StatsError::Degenerate(_))
        ));
        let nan = [p(1.0, f64::NAN), p(2.0, 2.0), p(3.0, 3.0)];
        assert!(matches!(
            fit_best(&nan, 0.95),
            Err(StatsError::BadSample(_))
        ));
        let neg = [p(1.0, -1.0), p(2.0, 2.0), p(3.0, 3.0)];
        assert!(matches!(
            fit_best(&neg, 0.95),
            Err(StatsError::BadSample(_))
        ));
        // time that falls with work: flat, no rate, no NaN anywhere
        let falling = [p(1.0, 30.0), p(2.0, 20.0), p(3.0, 10.0)];
        let f = fit_best(&falling, 0.95).unwrap();
        assert_eq!(f.kind, ModelKind::Flat);
        assert_eq!(f.rate(), None);
        assert!(f.overhead.is_finite() && f.overhead_ci.0.is_finite());
    }
}
