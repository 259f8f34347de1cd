//! `opbench history --out DIR`: history.md with a trend SVG per series and op.
//!
//! Each case is one thin line of its points relative to its own median over the series (a
//! flat history is a bundle of lines at 1.0): grey for device time, orange for host time
//! (pipelined, at equal host speed). A case with a change point is drawn in red
//! (slower) or green (faster) with a ring at the change; a point where some case of the op
//! changed its dominant kernel gets a dashed vertical line.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use plotters::prelude::*;
use rundir::OpKind;

use crate::history::{ChangeKind, History, Series, kernel_changes};
use crate::{AnalysisError, slug};

fn draw_err(path: &Path, e: impl std::fmt::Display) -> AnalysisError {
    AnalysisError::output(path, e)
}

const SLOWER: RGBColor = RGBColor(214, 39, 40);
const FASTER: RGBColor = RGBColor(44, 160, 44);
const KERNEL: RGBColor = RGBColor(31, 119, 180);
/// Host-timed (pipelined, synced) lines; device-timed ones are grey.
const HOST: RGBColor = RGBColor(255, 127, 14);

/// One case's line: points relative to its median, and how it changed.
struct Line {
    pts: Vec<(f64, f64)>,
    /// Some(true): a change point made it slower; Some(false): faster.
    slower: Option<bool>,
    host: bool,
}

/// The trend of one op in one series.
fn trend(h: &History, si: usize, op: OpKind, path: &Path) -> Result<bool, AnalysisError> {
    let series = &h.series[si];
    let n = series.points.len();
    let changed: Vec<(&rundir::CaseKey, usize, bool)> = h
        .changes
        .iter()
        .filter(|c| c.series == si && c.key.op == op)
        .filter(|c| matches!(c.kind, ChangeKind::Step { .. }))
        .map(|c| (&c.key, c.point, c.is_regression()))
        .collect();
    let mut lines = trend_lines(series, op, &changed);
    if lines.is_empty() {
        return Ok(false);
    }
    let ys = lines.iter().flat_map(|l| l.pts.iter().map(|p| p.1));
    let (lo, hi) = ys.fold((1.0f64, 1.0f64), |(a, b), y| (a.min(y), b.max(y)));
    let pad = ((hi - lo) * 0.1).max(0.02);
    let root = SVGBackend::new(path, (760, 420)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| draw_err(path, e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(format!("{op}: {}", series.label()), ("sans-serif", 15))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(-0.5f64..(n as f64 - 0.5), (lo - pad)..(hi + pad))
        .map_err(|e| draw_err(path, e))?;
    chart
        .configure_mesh()
        .x_desc("point (build, oldest first; see the table)")
        .y_desc("time / the case's median")
        .x_labels(n.clamp(2, 20))
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| format!("{y:.2}"))
        .label_style(("sans-serif", 12))
        .draw()
        .map_err(|e| draw_err(path, e))?;
    for &(op_k, point) in &kernel_changes(series) {
        if op_k != op {
            continue;
        }
        let x = point as f64 - 0.5;
        chart
            .draw_series(DashedLineSeries::new(
                vec![(x, lo - pad), (x, hi + pad)],
                5,
                4,
                KERNEL.stroke_width(1),
            ))
            .map_err(|e| draw_err(path, e))?;
    }
    // unchanged cases first, so the changed ones are drawn on top
    lines.sort_by_key(|l| l.slower.is_some());
    for Line { pts, slower, host } in &lines {
        let color = match (slower, host) {
            (None, false) => BLACK.mix(0.3),
            (None, true) => HOST.mix(0.35),
            (Some(true), _) => SLOWER.mix(0.9),
            (Some(false), _) => FASTER.mix(0.9),
        };
        chart
            .draw_series(LineSeries::new(pts.clone(), color.stroke_width(1)))
            .map_err(|e| draw_err(path, e))?;
        chart
            .draw_series(pts.iter().map(|&p| Circle::new(p, 2, color.filled())))
            .map_err(|e| draw_err(path, e))?;
    }
    for (key, point, slower) in &changed {
        let Some(vals) = series.cases.get(*key) else {
            continue;
        };
        let all: Vec<f64> = vals.iter().flatten().filter_map(|v| v.ns).collect();
        let Some(v) = vals[*point].as_ref().and_then(|v| v.ns) else {
            continue;
        };
        let color = if *slower { SLOWER } else { FASTER };
        chart
            .draw_series(std::iter::once(Circle::new(
                (*point as f64, v / stats::median(&all)),
                6,
                color.stroke_width(2),
            )))
            .map_err(|e| draw_err(path, e))?;
    }
    root.present().map_err(|e| draw_err(path, e))?;
    Ok(true)
}

/// Each case of `op` in the series as a line of its values over its median, marked
/// slower or faster where a change point of `changed` is its.
fn trend_lines(
    series: &Series,
    op: OpKind,
    changed: &[(&rundir::CaseKey, usize, bool)],
) -> Vec<Line> {
    let mut lines: Vec<Line> = Vec::new();
    for (key, vals) in series.cases.iter().filter(|(k, _)| k.op == op) {
        let pts: Vec<(usize, f64)> = vals
            .iter()
            .enumerate()
            .filter_map(|(i, v)| v.as_ref().and_then(|v| v.ns).map(|ns| (i, ns)))
            .collect();
        if pts.is_empty() {
            continue;
        }
        let mid = stats::median(&pts.iter().map(|p| p.1).collect::<Vec<_>>());
        let rel: Vec<(f64, f64)> = pts.iter().map(|&(i, v)| (i as f64, v / mid)).collect();
        lines.push(Line {
            pts: rel,
            slower: changed.iter().find(|c| c.0 == key).map(|c| c.2),
            host: !key.mode.is_device(),
        });
    }
    lines
}

fn points_table(series: &Series) -> String {
    let mut md = String::from("| point | build | runs | started |\n|---|---|---|---|\n");
    for (i, p) in series.points.iter().enumerate() {
        let started = p
            .runs
            .iter()
            .map(|r| r.started_at.as_str())
            .min()
            .unwrap_or("");
        let _ = writeln!(
            md,
            "| {i} | {} | {} | {started} |",
            p.build.label(),
            p.names()
        );
    }
    md
}

/// The changes as a markdown table (every series), or a line saying there are none.
pub fn changes_md(h: &History) -> String {
    if h.changes.is_empty() {
        return "No change points and no status changes.\n".into();
    }
    let mut md = String::from(
        "| series | case | point | runs | before | after | change | p | kernel or status | build change |\n|---|---|---|---|---|---|---|---|---|---|\n",
    );
    let us = |v: Option<f64>| v.map_or("-".into(), |v| format!("{:.2} µs", v / 1e3));
    for c in &h.changes {
        let s = &h.series[c.series];
        let (p, what) = match &c.kind {
            ChangeKind::Step { p, .. } => (
                format!("{p:.1e}"),
                c.kernel
                    .as_ref()
                    .map(|(a, b)| format!("kernel {a} -> {b}"))
                    .unwrap_or_default(),
            ),
            ChangeKind::Status(a, b) => ("-".into(), format!("status {a} -> {b}")),
        };
        let mag = c
            .magnitude()
            .map_or("-".into(), |m| format!("{:+.1}%", m * 100.0));
        let newest = if c.newest { " (newest)" } else { "" };
        let _ = writeln!(
            md,
            "| {} | {} | {}{newest} | {} | {} | {} | {mag} | {p} | {what} | {} |",
            c.series,
            c.key,
            c.point,
            s.points[c.point].names(),
            us(c.before_ns),
            us(c.after_ns),
            c.build_change.join("; ")
        );
    }
    md
}

/// Write `out/history.md` and its trend SVGs; returns the markdown's path.
pub fn write_history_report(h: &History, out: &Path) -> Result<PathBuf, AnalysisError> {
    std::fs::create_dir_all(out).map_err(|e| AnalysisError::output(out, e))?;
    let mut md = String::from("# opbench history\n\n");
    let cp = &h.settings.cp;
    let _ = writeln!(
        md,
        "Change points by E-Divisive means with a t-test (window {}, p ≤ {}, magnitude ≥ {}%), \
         over the mean of each build's replicates; modes {}. `opbench history` made this \
         file; docs/method.md explains the method.\n",
        cp.window,
        cp.max_p,
        cp.min_magnitude * 100.0,
        h.settings
            .modes
            .iter()
            .map(|m| m.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
    for (path, why) in &h.skipped {
        let _ = writeln!(md, "- skipped {}: {why}", path.display());
    }
    if !h.skipped.is_empty() {
        md.push('\n');
    }
    for (si, s) in h.series.iter().enumerate() {
        let _ = writeln!(md, "## Series {si}: {}\n", s.label());
        md += &points_table(s);
        md.push('\n');
        let n_changes = h.changes.iter().filter(|c| c.series == si).count();
        let _ = writeln!(md, "{} cases, {n_changes} changes.\n", s.cases.len());
        let ops: BTreeSet<OpKind> = s.cases.keys().map(|k| k.op).collect();
        for op in ops {
            let file = format!("trend-{si}-{}-{}.svg", slug(&s.machine.device), op);
            if trend(h, si, op, &out.join(&file))? {
                let _ = writeln!(md, "![{op}]({file})\n");
            }
        }
    }
    md += "## Changes\n\n";
    md += &changes_md(h);
    let path = out.join("history.md");
    std::fs::write(&path, md).map_err(|e| AnalysisError::output(&path, e))?;
    Ok(path)
}
