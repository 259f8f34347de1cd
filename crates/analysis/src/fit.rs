//! Overhead-versus-work models per series (`opbench fit`, fits.csv).
//!
//! Work per op (the `work` column) is what grows with the batch along a series:
//! - linear, decode and prefill: FLOPs (2·m·n·k, ∝ B). A decode projection's bytes are
//!   almost all weight, the same at every batch, so they cannot separate anything; against
//!   FLOPs the fixed part is everything a call costs at B → 0 — dispatch and launch, and for
//!   a weight-bandwidth-bound GEMV the weight read — and the crossover batch is where the
//!   GEMM's compute overtakes it.
//! - sdpa: bytes in decode (the KV read, ∝ B·L), FLOPs in prefill.
//! - rmsnorm, rope, kvcache: bytes (∝ B).
//!
//! The rate is GB/s for bytes (bytes/ns) and TFLOP/s for FLOPs.

use std::collections::BTreeMap;

use rundir::{FitRow, OpKind, Phase, ResultRow, Run, SeriesKey, Work};
use stats::{Fit, Point};

/// Which work a series is fitted against.
pub fn work_for(op: OpKind, phase: Phase) -> Work {
    match (op, phase) {
        (OpKind::Linear, _) | (OpKind::Sdpa, Phase::Prefill) => Work::Flops,
        _ => Work::Bytes,
    }
}

/// The standard uncertainty of a row's median from its 95% interval.
pub fn sigma(r: &ResultRow) -> f64 {
    match (r.ci_low_ns, r.ci_high_ns) {
        (Some(lo), Some(hi)) if hi >= lo => (hi - lo) / (2.0 * 1.96),
        _ => 0.0,
    }
}

/// One fitted series.
#[derive(Debug, Clone)]
pub struct SeriesFit {
    pub key: SeriesKey,
    pub points: Vec<Point>,
    pub fit: Fit,
    pub work: Work,
}

impl SeriesFit {
    /// Its fits.csv row.
    pub fn row(&self) -> FitRow {
        let (_, scale) = self.work.unit();
        let fit = &self.fit;
        let rate_ci = fit.rate_ci();
        FitRow {
            series: self.key.clone(),
            work: self.work,
            n_points: fit.n,
            overhead_us: fit.overhead / 1e3,
            overhead_ci_low_us: fit.overhead_ci.0 / 1e3,
            overhead_ci_high_us: fit.overhead_ci.1 / 1e3,
            rate: fit.rate().map(|r| r * scale),
            rate_ci_low: rate_ci.map(|(lo, _)| lo * scale),
            rate_ci_high: rate_ci.and_then(|(_, hi)| hi).map(|h| h * scale),
            r2: fit.r2,
            crossover_batch: stats::crossover_batch(&self.points, fit),
            model_kind: fit.kind,
        }
    }
}

/// Every series of a run with at least three ok batches: the fitted ones, and those that
/// could not be fitted with the reason.
#[derive(Debug, Clone, Default)]
pub struct Fits {
    pub fitted: Vec<SeriesFit>,
    pub unfitted: Vec<(SeriesKey, String)>,
}

impl Fits {
    /// The fit of a series, if it has one.
    pub fn get(&self, key: &SeriesKey) -> Option<&SeriesFit> {
        self.fitted.iter().find(|f| &f.key == key)
    }
}

/// Fit every series of a run that has at least three ok batches.
pub fn fit_run(run: &Run) -> Fits {
    let mut series: BTreeMap<&SeriesKey, Vec<&ResultRow>> = BTreeMap::new();
    for r in run.ok_rows() {
        series.entry(&r.key.series).or_default().push(r);
    }
    let mut out = Fits::default();
    for (key, rows) in series {
        if rows.len() < 3 {
            continue;
        }
        let work = work_for(key.op, key.phase);
        let points: Vec<Point> = rows
            .iter()
            .filter_map(|r| {
                Some(Point {
                    batch: r.batch as f64,
                    work: work.of(r),
                    time: r.median_ns?,
                    sigma: sigma(r),
                })
            })
            .collect();
        match stats::fit_best(&points, 0.95) {
            Ok(fit) => out.fitted.push(SeriesFit {
                key: key.clone(),
                points,
                fit,
                work,
            }),
            Err(e) => out.unfitted.push((key.clone(), e.to_string())),
        }
    }
    out
}
