//! `opbench fit RUN`: overhead-versus-work models per series, written to RUN/fits.csv.
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
use std::path::Path;

use harness::ResultRow;
use stats::{Fit, Point};

use crate::Failure;
use crate::run::{FITS_HEADER, FitRow, Run, SeriesKey};

/// Which work a series is fitted against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Work {
    Bytes,
    Flops,
}

impl Work {
    pub fn for_case(op: &str, phase: &str) -> Self {
        match (op, phase) {
            ("linear", _) | ("sdpa", "prefill") => Work::Flops,
            _ => Work::Bytes,
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            Work::Bytes => "bytes",
            Work::Flops => "flops",
        }
    }
    pub fn of(self, r: &ResultRow) -> f64 {
        match self {
            Work::Bytes => r.bytes as f64,
            Work::Flops => r.flops as f64,
        }
    }
    /// Converts a rate in work per ns to the unit written in fits.csv.
    pub fn unit(self) -> (&'static str, f64) {
        match self {
            Work::Bytes => ("GB/s", 1.0),
            Work::Flops => ("TFLOP/s", 1e-3),
        }
    }
}

/// The standard uncertainty of a row's median from its 95% interval.
pub fn sigma(r: &ResultRow) -> f64 {
    match (r.ci_low_ns, r.ci_high_ns) {
        (Some(lo), Some(hi)) if hi >= lo => (hi - lo) / (2.0 * 1.96),
        _ => 0.0,
    }
}

/// Every series of a run with at least three ok batches, fitted.
pub fn fit_run(run: &Run) -> Vec<(SeriesKey, Vec<Point>, Fit, Work)> {
    let mut series: BTreeMap<SeriesKey, Vec<&ResultRow>> = BTreeMap::new();
    for r in run.ok_rows() {
        series.entry(SeriesKey::of(r)).or_default().push(r);
    }
    let mut out = Vec::new();
    for (key, rows) in series {
        if rows.len() < 3 {
            continue;
        }
        let work = Work::for_case(&key.op, &key.phase);
        let points: Vec<Point> = rows
            .iter()
            .map(|r| Point {
                batch: r.batch as f64,
                work: work.of(r),
                time: r.median_ns.unwrap_or(0.0),
                sigma: sigma(r),
            })
            .collect();
        match stats::fit_best(&points, 0.95) {
            Ok(fit) => out.push((key, points, fit, work)),
            Err(e) => eprintln!(
                "opbench: no fit for {}/{}/{} {} {}: {e}",
                key.op, key.variant, key.site, key.device, key.mode
            ),
        }
    }
    out
}

pub fn fit_row(key: &SeriesKey, points: &[Point], fit: &Fit, work: Work) -> FitRow {
    let (unit, scale) = work.unit();
    let rate_ci = fit.rate_ci();
    FitRow {
        op: key.op.clone(),
        variant: key.variant.clone(),
        site: key.site.clone(),
        model: key.model.clone(),
        phase: key.phase.clone(),
        q_len: key.q_len,
        kv_len: key.kv_len,
        dtype: key.dtype.clone(),
        device: key.device.clone(),
        mode: key.mode.clone(),
        work: work.as_str().into(),
        n_points: fit.n,
        overhead_us: fit.overhead / 1e3,
        overhead_ci_low_us: fit.overhead_ci.0 / 1e3,
        overhead_ci_high_us: fit.overhead_ci.1 / 1e3,
        rate: fit.rate().map(|r| r * scale),
        rate_ci_low: rate_ci.map(|(lo, _)| lo * scale),
        rate_ci_high: rate_ci.and_then(|(_, hi)| hi).map(|h| h * scale),
        rate_unit: unit.into(),
        r2: fit.r2,
        crossover_batch: stats::crossover_batch(points, fit),
        model_kind: fit.kind.as_str().into(),
    }
}

fn write_fits(path: &Path, rows: &[FitRow]) -> Result<(), Failure> {
    let io = |e: &dyn std::fmt::Display| Failure {
        code: 1,
        message: format!("{}: {e}", path.display()),
    };
    let mut w = csv::WriterBuilder::new()
        .has_headers(false)
        .from_path(path)
        .map_err(|e| io(&e))?;
    w.write_record(FITS_HEADER).map_err(|e| io(&e))?;
    for r in rows {
        w.serialize(r).map_err(|e| io(&e))?;
    }
    w.flush().map_err(|e| io(&e))
}

fn fmt_opt(v: Option<f64>, digits: usize) -> String {
    v.map_or("-".into(), |x| format!("{x:.digits$}"))
}

pub fn run(dir: &Path) -> Result<u8, Failure> {
    let run = Run::load(dir)?;
    let fits = fit_run(&run);
    let rows: Vec<FitRow> = fits
        .iter()
        .map(|(k, p, f, w)| fit_row(k, p, f, *w))
        .collect();
    let path = dir.join("fits.csv");
    write_fits(&path, &rows)?;
    println!(
        "{:<8} {:<13} {:<12} {:<8} {:<7} {:<5} {:<9} {:>6} {:>22} {:>26} {:>6} {:>6} {:<6}",
        "op",
        "variant",
        "site",
        "phase",
        "L+q",
        "dtype",
        "device",
        "mode",
        "overhead µs [95% CI]",
        "rate [95% CI]",
        "cross",
        "R²",
        "model"
    );
    for r in &rows {
        println!(
            "{:<8} {:<13} {:<12} {:<8} {:<7} {:<5} {:<9} {:>6} {:>22} {:>26} {:>6} {:>6.3} {:<6}",
            r.op,
            r.variant,
            r.site,
            r.phase,
            r.kv_len.map_or("-".into(), |k| k.to_string()),
            r.dtype,
            r.device,
            &r.mode[..r.mode.len().min(6)],
            format!(
                "{:.1} [{:.1}, {:.1}]",
                r.overhead_us, r.overhead_ci_low_us, r.overhead_ci_high_us
            ),
            match r.rate {
                Some(rate) => format!(
                    "{:.3} [{}, {}] {}",
                    rate,
                    fmt_opt(r.rate_ci_low, 3),
                    fmt_opt(r.rate_ci_high, 3),
                    r.rate_unit
                ),
                None => "-".into(),
            },
            fmt_opt(r.crossover_batch, 1),
            r.r2,
            r.model_kind
        );
    }
    println!("opbench: {} fits written to {}", rows.len(), path.display());
    Ok(0)
}
