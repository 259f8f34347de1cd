//! RUN/report.md with SVG plots (`opbench report`).
//!
//! Per device: per op, time per call against batch on log axes for each variant at a
//! representative site, with the fitted model and the dispatch floor drawn in; achieved
//! GB/s against the measured copy ceiling (or the DRAM peak); host versus device time per
//! call at B=1 where the run has device-mode rows; the predicted decode step per profile
//! and batch next to the measured one. Then GPU-over-CPU speedup per op and batch when the
//! run holds both devices.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use plotters::prelude::*;
use rundir::{DType, DeviceId, Mode, OpKind, Phase, ResultRow, Run};
use shapes::{ModelConfig, StepProfile};

use crate::fit::{Fits, fit_run};
use crate::predict::{HostModel, Query, predict_with};
use crate::{AnalysisError, slug};

/// The variants drawn on the bandwidth plot: one per op, as the hf-eager profile runs it
/// (rmsnorm and rope: the single-kernel forms, whose GB/s mean something).
const BANDWIDTH_SERIES: &[(OpKind, &str)] = &[
    (OpKind::Linear, "aten"),
    (OpKind::RmsNorm, "fused"),
    (OpKind::Rope, "halves"),
    (OpKind::Sdpa, "auto"),
    (OpKind::KvCache, "cat"),
];

/// The ops plotted per device, in order.
const PLOTTED: [OpKind; 7] = [
    OpKind::Linear,
    OpKind::RmsNorm,
    OpKind::Rope,
    OpKind::Sdpa,
    OpKind::KvCache,
    OpKind::Eltwise,
    OpKind::Decode,
];

/// The site each op is plotted at (the others behave alike or are in the CSV).
fn representative_site(op: OpKind) -> &'static str {
    match op {
        OpKind::Linear => "q_proj",
        OpKind::RmsNorm => "input_norm",
        OpKind::Rope => "q",
        OpKind::Sdpa => "attn",
        OpKind::KvCache => "k",
        OpKind::Eltwise => "silu",
        OpKind::Decode => "step",
        OpKind::Moe => "experts",
        OpKind::Floor | OpKind::Ceiling => "",
    }
}

const COLORS: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

type Series = BTreeMap<String, Vec<(f64, f64)>>;

fn draw_err(path: &Path, e: impl std::fmt::Display) -> AnalysisError {
    AnalysisError::output(path, e)
}

/// Tick values 1, 2, 5 × 10^k inside `lo..hi`, so every log axis has several labels.
fn ticks(lo: f64, hi: f64) -> Vec<f64> {
    let mut out = Vec::new();
    let mut decade = 10f64.powf(lo.log10().floor());
    while decade <= hi {
        for m in [1.0, 2.0, 5.0] {
            let t = decade * m;
            if t >= lo && t <= hi {
                out.push(t);
            }
        }
        decade *= 10.0;
    }
    out
}

/// A log-log plot of `series` (name -> points), with optional dashed model lines and a
/// horizontal reference line.
fn plot(
    path: &Path,
    title: &str,
    (x_desc, y_desc): (&str, &str),
    series: &Series,
    models: &Series,
    hline: Option<(f64, &str)>,
    legend: SeriesLabelPosition,
) -> Result<(), AnalysisError> {
    let pts = series.values().flatten().chain(models.values().flatten());
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for &(x, y) in pts {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y0 = y0.min(y);
        y1 = y1.max(y);
    }
    if let Some((h, _)) = hline {
        y0 = y0.min(h);
        y1 = y1.max(h);
    }
    if !(x0.is_finite() && y0.is_finite() && x0 > 0.0 && y0 > 0.0) {
        return Ok(());
    }
    // a range under a decade keeps its intermediate tick labels; wider ones get headroom
    // above for the legend
    let y_range = if y1 / y0 < 5.0 {
        y0 / 1.1..y1 * 1.5
    } else {
        y0 / 1.5..y1 * 2.5
    };
    let root = SVGBackend::new(path, (760, 460)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| draw_err(path, e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(
            (x0 / 1.3..x1 * 1.3).log_scale(),
            y_range
                .clone()
                .log_scale()
                .with_key_points(ticks(y_range.start, y_range.end)),
        )
        .map_err(|e| draw_err(path, e))?;
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc(y_desc)
        .x_labels(8)
        .y_labels(8)
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| {
            if *y < 10.0 {
                format!("{y:.1}")
            } else {
                format!("{y:.0}")
            }
        })
        .label_style(("sans-serif", 13))
        .draw()
        .map_err(|e| draw_err(path, e))?;
    // one color per variant; its GPU-event series in the same color, thin, with triangles
    let mut bases: Vec<&str> = Vec::new();
    for name in series.keys() {
        let base = name.split(" (").next().unwrap_or(name);
        if !bases.contains(&base) {
            bases.push(base);
        }
    }
    for (name, points) in series {
        let base = name.split(" (").next().unwrap_or(name);
        let color = COLORS[bases.iter().position(|b| *b == base).unwrap_or(0) % COLORS.len()];
        let events = name.ends_with("(GPU events)");
        let width = if events { 1 } else { 2 };
        chart
            .draw_series(LineSeries::new(points.clone(), color.stroke_width(width)))
            .map_err(|e| draw_err(path, e))?
            .label(name.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(width))
            });
        if events {
            chart
                .draw_series(
                    points
                        .iter()
                        .map(|&p| TriangleMarker::new(p, 4, color.filled())),
                )
                .map_err(|e| draw_err(path, e))?;
        } else {
            chart
                .draw_series(points.iter().map(|&p| Circle::new(p, 3, color.filled())))
                .map_err(|e| draw_err(path, e))?;
        }
        if let Some(m) = models.get(name) {
            chart
                .draw_series(DashedLineSeries::new(
                    m.clone(),
                    4,
                    4,
                    color.mix(0.7).stroke_width(1),
                ))
                .map_err(|e| draw_err(path, e))?;
        }
    }
    if let Some((h, label)) = hline {
        let label = label.to_string();
        chart
            .draw_series(LineSeries::new(
                vec![(x0 / 1.3, h), (x1 * 1.3, h)],
                BLACK.mix(0.6).stroke_width(1),
            ))
            .map_err(|e| draw_err(path, e))?
            .label(label)
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], BLACK.mix(0.6)));
    }
    chart
        .configure_series_labels()
        .position(legend)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.4))
        .label_font(("sans-serif", 13))
        .draw()
        .map_err(|e| draw_err(path, e))?;
    root.present().map_err(|e| draw_err(path, e))
}

/// The cache length to plot for sdpa / kvcache / decode: the measured one closest to 1025.
fn plotted_kv(rows: &[&ResultRow], op: OpKind) -> Option<usize> {
    rows.iter()
        .filter(|r| r.op == op && r.phase == Phase::Decode)
        .filter_map(|r| r.kv_len)
        .min_by_key(|k| (*k as i64 - 1025).abs())
}

/// A run and what every section reads from it.
struct Ctx<'a> {
    run: &'a Run,
    dir: &'a Path,
    fits: Fits,
    ok: Vec<&'a ResultRow>,
    traces: crate::traced::Traces,
}

/// One device's rows in one dtype.
#[derive(Clone, Copy)]
struct On {
    device: DeviceId,
    dtype: DType,
}

fn text(v: Option<impl ToString>) -> String {
    v.map_or("-".into(), |x| x.to_string())
}

/// Write `dir`/report.md and its SVGs; returns the report's path.
pub fn write_report(dir: &Path) -> Result<PathBuf, AnalysisError> {
    // as predict reads it: rows sampled in rounds read pair by pair
    let run = crate::predict::at_host_state(&Run::load(dir)?, crate::predict::HostState::Typical)?;
    let ctx = Ctx {
        fits: fit_run(&run),
        ok: run.ok_rows().collect(),
        traces: crate::traced::Traces::load(&run)?,
        run: &run,
        dir,
    };
    let mut md = header(&ctx);
    let devices: BTreeSet<DeviceId> = ctx.ok.iter().map(|r| r.device).collect();
    for &device in &devices {
        let dtype = ctx
            .ok
            .iter()
            .filter(|r| r.device == device && r.op != OpKind::Floor)
            .map(|r| r.dtype)
            .next()
            .unwrap_or(DType::F32);
        let on = On { device, dtype };
        let _ = writeln!(md, "## {device} ({dtype})\n");
        let floor = ctx
            .ok
            .iter()
            .find(|r| {
                r.op == OpKind::Floor
                    && r.variant == "add"
                    && r.device == device
                    && r.mode == Mode::Pipelined
                    && r.dtype == dtype
            })
            .and_then(|r| r.median_ns)
            .map(|t| t / 1e3);
        if let Some(f) = floor {
            let _ = writeln!(
                md,
                "Dispatch floor (one-element add, pipelined): {f:.2} µs per call.\n"
            );
        }
        // the answer first (the step, where it goes, what graphs would give, the batch),
        // then the evidence (each op, the bandwidth, host against device, the kernels)
        md += &predicted_steps(&ctx, on);
        md += &what_would_help(&ctx, on)?;
        md += &breakdown(&ctx, on)?;
        md += &graph_replay(&ctx, on)?;
        md += &batch_curve(&ctx, on)?;
        let _ = writeln!(md, "### The evidence: each op\n");
        md += &op_plots(&ctx, on, floor)?;
        md += &bandwidth(&ctx, on)?;
        md += &host_vs_device(&ctx, on);
        md += &traced_kernels(&ctx, on);
    }
    md += &gpu_over_cpu(&ctx, &devices);
    let path = dir.join("report.md");
    std::fs::write(&path, md).map_err(|e| AnalysisError::output(&path, e))?;
    Ok(path)
}

fn header(ctx: &Ctx) -> String {
    let mut md = String::new();
    let env = ctx.run.env.clone().unwrap_or_default();
    let _ = writeln!(md, "# opbench report: {}\n", env.run_id);
    let _ = writeln!(
        md,
        "Device **{}** ({}, {}), backend `{}`, runtime {}, driver {}; libtorch {}, tch {}, opbench {} (git {}); CPU {}, {} threads; {}.\n",
        text(env.device_name.as_ref()),
        text(env.arch.as_ref()),
        env.device_memory_bytes.map_or("-".into(), |b| format!(
            "{:.0} GiB",
            b as f64 / 1073741824.0
        )),
        env.backend,
        text(env.runtime_version.as_ref()),
        text(env.driver_version.as_ref()),
        env.libtorch_version,
        env.tch_version,
        env.opbench_version,
        env.git_revision,
        env.cpu_model,
        env.threads,
        env.os,
    );
    let statuses: BTreeMap<&str, usize> =
        ctx.run.results.iter().fold(BTreeMap::new(), |mut m, r| {
            *m.entry(r.status.as_str()).or_default() += 1;
            m
        });
    let _ = writeln!(
        md,
        "{} rows: {}. Times are medians per call; `pipelined` = back to back with one synchronize, as an eager decode loop runs.\n",
        ctx.run.results.len(),
        statuses
            .iter()
            .map(|(k, v)| format!("{v} {k}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    md
}

/// Per op: time per call against batch, measured and fitted, with the floor.
fn op_plots(ctx: &Ctx, on: On, floor: Option<f64>) -> Result<String, AnalysisError> {
    let mut md = String::new();
    for op in PLOTTED {
        let site = representative_site(op);
        let kv = if matches!(op, OpKind::Sdpa | OpKind::KvCache | OpKind::Decode) {
            plotted_kv(&ctx.ok, op)
        } else {
            None
        };
        let rows: Vec<&ResultRow> = ctx
            .ok
            .iter()
            .copied()
            .filter(|r| {
                r.op == op
                    && r.site == site
                    && r.device == on.device
                    && r.dtype == on.dtype
                    && r.phase == Phase::Decode
                    && matches!(r.mode, Mode::Pipelined | Mode::Device)
                    && r.kv_len == kv
            })
            .collect();
        if rows.is_empty() {
            continue;
        }
        let (mut series, mut models) = (Series::new(), Series::new());
        let mut kinds = Vec::new();
        for r in &rows {
            let name = if r.mode == Mode::Device {
                format!("{} (GPU events)", r.variant)
            } else {
                r.variant.clone()
            };
            series
                .entry(name)
                .or_default()
                .push((r.batch as f64, r.median_ns.unwrap_or(0.0) / 1e3));
        }
        for (name, pts) in series.iter_mut() {
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            let Some(r) = rows
                .iter()
                .find(|r| &r.variant == name && r.mode == Mode::Pipelined)
            else {
                continue;
            };
            if let Some(f) = ctx.fits.get(&r.key.series) {
                let mut line: Vec<(f64, f64)> = rows
                    .iter()
                    .filter(|x| x.key.series == r.key.series)
                    .map(|x| (x.batch as f64, f.fit.predict(f.work.of(x)) / 1e3))
                    .filter(|p| p.1 > 0.0)
                    .collect();
                line.sort_by(|a, b| a.0.total_cmp(&b.0));
                models.insert(name.clone(), line);
                kinds.push(format!("{name}: {}", f.fit.kind.as_str()));
            }
        }
        let file = format!("{}-{}.svg", slug(&on.device.to_string()), op);
        let title = match kv {
            Some(k) => format!(
                "{op} ({site}, L+1 = {k}) on {}, {}: time per call",
                on.device, on.dtype
            ),
            None => format!(
                "{op} ({site}) on {}, {}: time per call",
                on.device, on.dtype
            ),
        };
        plot(
            &ctx.dir.join(&file),
            &title,
            ("batch", "µs per call (pipelined)"),
            &series,
            &models,
            floor
                .filter(|_| op != OpKind::Decode)
                .map(|f| (f, "dispatch floor")),
            SeriesLabelPosition::UpperLeft,
        )?;
        let fitted = if kinds.is_empty() {
            "no model was fitted (too few batches)".to_string()
        } else {
            format!("dashed: the fitted model ({})", kinds.join(", "))
        };
        let _ = writeln!(
            md,
            "### {op}\n\n![{op}]({file})\n\nSolid: measured, pipelined (and, where the run has them, GPU events: device time, kernels and the gaps between them, no host time); {fitted}.\n"
        );
    }
    Ok(md)
}

/// The run's measured copy (GB/s) and GEMM (GFLOP/s) ceilings on a device.
fn ceilings(ctx: &Ctx, on: On) -> (Option<f64>, Option<f64>) {
    let find = |site: &str| {
        ctx.ok
            .iter()
            .filter(|r| {
                r.op == OpKind::Ceiling
                    && r.site == site
                    && r.device == on.device
                    && r.dtype == on.dtype
                    && r.mode == Mode::Pipelined
            })
            .find_map(|r| if site == "copy" { r.gbps } else { r.gflops })
    };
    (find("copy"), find("gemm"))
}

/// Ceilings and achieved bandwidth per op against batch.
fn bandwidth(ctx: &Ctx, on: On) -> Result<String, AnalysisError> {
    let mut md = String::new();
    let peak = ctx
        .run
        .env
        .as_ref()
        .and_then(|e| e.peak_dram_gbps)
        .filter(|_| on.device.is_gpu());
    let (copy_ceiling, gemm_ceiling) = ceilings(ctx, on);
    if copy_ceiling.is_some() || gemm_ceiling.is_some() {
        let _ = writeln!(
            md,
            "Ceilings measured in this run: copy {} GB/s (bytes read + written){}; 4096³ GEMM {} TFLOP/s in {}.\n",
            copy_ceiling.map_or("-".into(), |g| format!("{g:.0}")),
            match (copy_ceiling, peak) {
                (Some(c), Some(p)) =>
                    format!(", {:.0}% of the {p:.0} GB/s DRAM peak", 100.0 * c / p),
                _ => String::new(),
            },
            gemm_ceiling.map_or("-".into(), |g| format!("{:.1}", g / 1e3)),
            on.dtype,
        );
    }
    let mut bw = Series::new();
    for r in ctx.ok.iter().filter(|r| {
        r.device == on.device
            && r.dtype == on.dtype
            && r.phase == Phase::Decode
            && r.mode == Mode::Pipelined
            && r.site == representative_site(r.op)
            && BANDWIDTH_SERIES.contains(&(r.op, r.variant.as_str()))
            && (!matches!(r.op, OpKind::Sdpa | OpKind::KvCache)
                || r.kv_len == plotted_kv(&ctx.ok, r.op))
    }) {
        if let Some(g) = r.gbps {
            bw.entry(format!("{} {}", r.op, r.variant))
                .or_default()
                .push((r.batch as f64, g));
        }
    }
    if bw.is_empty() {
        return Ok(md);
    }
    for pts in bw.values_mut() {
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    let file = format!("{}-bandwidth.svg", slug(&on.device.to_string()));
    let peak_line = match copy_ceiling {
        Some(c) => Some((c, "copy ceiling (measured)")),
        None => peak.map(|p| (p, "DRAM peak")),
    };
    plot(
        &ctx.dir.join(&file),
        &format!("Achieved bandwidth on {}, {}", on.device, on.dtype),
        ("batch", "GB/s"),
        &bw,
        &Series::new(),
        peak_line,
        SeriesLabelPosition::LowerRight,
    )?;
    let _ = writeln!(
        md,
        "### Achieved bandwidth\n\n![bandwidth]({file})\n\nBytes a call must move (docs/schema.md) over its median; {}.\n",
        match (copy_ceiling, peak_line) {
            (Some(c), _) => format!("the line is this run's measured copy ceiling, {c:.0} GB/s"),
            (None, Some((p, _))) =>
                format!("the line is the DRAM peak from memory clock and bus width, {p:.0} GB/s"),
            (None, None) => "no peak is known for this device".into(),
        }
    );
    Ok(md)
}

/// Pipelined against GPU-event time per call at B=1.
fn host_vs_device(ctx: &Ctx, on: On) -> String {
    let mut md = String::new();
    let dev_rows: Vec<&&ResultRow> = ctx
        .ok
        .iter()
        .filter(|r| {
            r.device == on.device
                && r.mode == Mode::Device
                && r.batch == 1
                && r.phase == Phase::Decode
        })
        .collect();
    if dev_rows.is_empty() {
        return md;
    }
    let _ = writeln!(md, "### Host versus device per call, B=1\n");
    let _ = writeln!(
        md,
        "| op | variant | site | L+1 | pipelined µs | device µs | host share |"
    );
    let _ = writeln!(md, "|---|---|---|---|---|---|---|");
    for d in dev_rows {
        let pipelined = d.key.in_mode(Mode::Pipelined);
        let p = ctx.run.row(&pipelined).filter(|r| r.is_ok());
        if let (Some(p), Some(dv)) = (p.and_then(|p| p.median_ns), d.median_ns) {
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {:.2} | {}{:.2} | {:.0}% |",
                d.op,
                d.variant,
                d.site,
                d.kv_len.map_or("-".into(), |k| k.to_string()),
                p / 1e3,
                if d.is_upper_bound() { "≤ " } else { "" },
                dv / 1e3,
                100.0 * (1.0 - dv / p).max(0.0)
            );
        }
    }
    let _ = writeln!(
        md,
        "\nHost share = (pipelined − device) / pipelined: the part of a call the GPU spends waiting for the host. ≤: an upper bound (the row's `uncovered_chunks`).\n"
    );
    md
}

/// The step a report prices: `profile` at batch `b` and context `ctx_len` on `on`, in
/// `mode`, with the default host model ([`HostModel::default_for`]).
fn report_query<'a>(
    run: &Run,
    cfg: &'a ModelConfig,
    on: On,
    profile: StepProfile,
    b: usize,
    ctx_len: usize,
    mode: Mode,
) -> Query<'a> {
    let q = Query {
        model: cfg,
        batch: b,
        ctx: ctx_len,
        phase: Phase::Decode,
        profile,
        device: on.device,
        dtype: on.dtype,
        mode,
        host: HostModel::AsMeasured,
    };
    Query {
        host: HostModel::default_for(run, &q),
        ..q
    }
}

/// Which host model priced each profile's eager step, in one sentence; empty on the CPU,
/// where none applies.
fn host_models(on: On, chosen: &BTreeMap<StepProfile, HostModel>) -> String {
    if !on.device.is_gpu() {
        return String::new();
    }
    let with = |m: HostModel| -> Vec<&str> {
        chosen
            .iter()
            .filter(|(_, h)| **h == m)
            .map(|(p, _)| p.as_str())
            .collect()
    };
    let (layered, alone) = (with(HostModel::Controlled), with(HostModel::AsMeasured));
    match (layered.is_empty(), alone.is_empty()) {
        (true, _) => "Host costs as each row measured them alone (`--host-model as-measured`): the run has no layer rows.".into(),
        (false, true) => "Host costs scaled to the step's own process and sequence by each profile's layer rows (`--host-model controlled`).".into(),
        (false, false) => format!(
            "Host costs scaled to the step's own process and sequence by the profile's layer rows for {} (`--host-model controlled`), as each row measured them alone for {} (`as-measured`: no layer rows).",
            layered.join(", "),
            alone.join(", ")
        ),
    }
}

/// The batches a device's decode ops were measured at.
fn batches(ctx: &Ctx, on: On) -> Vec<usize> {
    let set: BTreeSet<usize> = ctx
        .ok
        .iter()
        .filter(|r| {
            r.device == on.device
                && r.dtype == on.dtype
                && r.op == OpKind::Sdpa
                && r.phase == Phase::Decode
        })
        .map(|r| r.batch)
        .collect();
    set.into_iter().collect()
}

/// The predicted step per profile and measured batch, beside the decode crate's rows.
fn predicted_steps(ctx: &Ctx, on: On) -> String {
    let mut md = String::new();
    let models: BTreeSet<&str> = ctx
        .ok
        .iter()
        .filter(|r| r.device == on.device && r.op == OpKind::Sdpa)
        .map(|r| r.model.as_str())
        .collect();
    for model in models {
        let Ok(cfg) = ModelConfig::by_name(model) else {
            continue;
        };
        let ctx_len = plotted_kv(&ctx.ok, OpKind::Sdpa).map_or(1024, |k| k - 1);
        let _ = writeln!(md, "### Predicted decode step: {model}, L = {ctx_len}\n");
        let _ = writeln!(
            md,
            "| profile | B | ms/step | tokens/s | host ms | kernels ms | bound | measured ms/step | measured device ms |"
        );
        let _ = writeln!(md, "|---|---|---|---|---|---|---|---|---|");
        let peer = ctx
            .ok
            .iter()
            .any(|r| r.op == OpKind::Decode && r.variant == "transformers");
        let mut chosen = BTreeMap::new();
        for profile in StepProfile::EVERY {
            if profile == StepProfile::Transformers && !peer {
                continue;
            }
            for b in batches(ctx, on) {
                let q = report_query(ctx.run, &cfg, on, profile, b, ctx_len, Mode::Pipelined);
                chosen.insert(profile, q.host);
                match predict_with(ctx.run, &ctx.fits, &q) {
                    Ok(p) => {
                        let measured = p
                            .measured
                            .as_ref()
                            .and_then(|r| r.median_ns)
                            .map_or("-".into(), |m| format!("{:.2}", m / 1e6));
                        let measured_device = p
                            .measured_device
                            .as_ref()
                            .and_then(|r| {
                                let m = r.median_ns? / 1e6;
                                Some(format!(
                                    "{}{m:.2}",
                                    if r.is_upper_bound() { "≤ " } else { "" }
                                ))
                            })
                            .unwrap_or_else(|| "-".into());
                        let _ = writeln!(
                            md,
                            "| {profile} | {b} | {:.2} | {:.0} | {:.2} | {:.2} | {} | {measured} | {measured_device} |",
                            p.step_ns / 1e6,
                            p.tokens_per_s(),
                            p.host_ns / 1e6,
                            p.device_ns / 1e6,
                            if !p.gpu {
                                "cpu (serial)"
                            } else if p.host_bound() {
                                "host"
                            } else {
                                "device"
                            }
                        );
                    }
                    Err(e) => {
                        let _ = writeln!(
                            md,
                            "| {profile} | {b} | n/a: {} | | | | | | |",
                            e.to_string().replace('|', "/")
                        );
                    }
                }
            }
        }
        let _ = writeln!(
            md,
            "\nKernels ms: the predicted device time of the step (Σ GPU-event times of its parts); measured device ms: the decode crate's own `device` row (≤: an upper bound, see its `uncovered_chunks`). {}\n\n`opbench predict {} --model {model} --batch B --ctx {ctx_len}` prints the per-op breakdown and what would help; add `--profile transformers` for your HF transformers `generate()`.\n",
            host_models(on, &chosen),
            ctx.dir.display()
        );
    }
    md
}

/// What would help each measured batch ([`crate::help_report`]), for each model the run
/// prices a step of.
fn what_would_help(ctx: &Ctx, on: On) -> Result<String, AnalysisError> {
    let mut md = String::new();
    let models: BTreeSet<&str> = ctx
        .ok
        .iter()
        .filter(|r| r.device == on.device && r.op == OpKind::Sdpa && r.phase == Phase::Decode)
        .map(|r| r.model.as_str())
        .collect();
    let ctx_len = plotted_kv(&ctx.ok, OpKind::Sdpa).map_or(1024, |k| k - 1);
    for model in models {
        let Ok(cfg) = ModelConfig::by_name(model) else {
            continue;
        };
        let file = format!("{}-{}-help.svg", slug(&on.device.to_string()), slug(model));
        md += &crate::help_report::section(
            ctx.run,
            &ctx.fits,
            ctx.dir,
            &file,
            &cfg,
            (on.device, on.dtype),
            ctx_len,
            &batches(ctx, on),
        )?;
    }
    Ok(md)
}

/// The whole-step rows (the decode crate's and the peer's, site `step`) of a device and
/// dtype in `mode`, both phases.
fn step_rows<'a>(ctx: &'a Ctx, on: On, mode: Mode) -> impl Iterator<Item = &'a ResultRow> + 'a {
    ctx.ok.iter().copied().filter(move |r| {
        r.device == on.device
            && r.dtype == on.dtype
            && r.op == OpKind::Decode
            && r.site == "step"
            && r.mode == mode
    })
}

/// The batch curve — decode tokens/s against batch, predicted and measured, per profile —
/// and the time to first token of every prefill the decode crate measured, predicted
/// (`predict --phase prefill`) beside it.
fn batch_curve(ctx: &Ctx, on: On) -> Result<String, AnalysisError> {
    let mut md = String::new();
    let steps: Vec<&ResultRow> = step_rows(ctx, on, Mode::Pipelined).collect();
    let models: BTreeSet<&str> = steps.iter().map(|r| r.model.as_str()).collect();
    for model in models {
        let Ok(cfg) = ModelConfig::by_name(model) else {
            continue;
        };
        let ctx_len = plotted_kv(&ctx.ok, OpKind::Sdpa).map_or(1024, |k| k - 1);
        let mut series = Series::new();
        for profile in StepProfile::EVERY {
            for b in batches(ctx, on) {
                let q = report_query(ctx.run, &cfg, on, profile, b, ctx_len, Mode::Pipelined);
                let Ok(p) = predict_with(ctx.run, &ctx.fits, &q) else {
                    continue;
                };
                let x = b as f64;
                series
                    .entry(format!("{profile} (predicted)"))
                    .or_default()
                    .push((x, p.tokens_per_s()));
                if let Some(m) = p.measured.as_ref().and_then(|r| r.median_ns) {
                    series
                        .entry(format!("{profile} (measured)"))
                        .or_default()
                        .push((x, b as f64 / (m * 1e-9)));
                }
            }
        }
        if series.values().all(|v| v.len() < 2) {
            continue;
        }
        let file = format!(
            "{}-{}-batch-curve.svg",
            slug(&on.device.to_string()),
            slug(model)
        );
        plot(
            &ctx.dir.join(&file),
            &format!("{model} decode, L = {ctx_len}, {} {}", on.device, on.dtype),
            ("batch B", "tokens/s"),
            &series,
            &Series::new(),
            None,
            SeriesLabelPosition::UpperLeft,
        )?;
        let _ = writeln!(
            md,
            "### The batch curve: {model}, L = {ctx_len}
"
        );
        let _ = writeln!(
            md,
            "![batch curve]({file})
"
        );
        md += &ttft(ctx, on, &cfg, &steps);
    }
    Ok(md)
}

/// Time to first token: every prefill step the decode crate measured, predicted beside it.
fn ttft(ctx: &Ctx, on: On, cfg: &ModelConfig, steps: &[&ResultRow]) -> String {
    let mut md = String::new();
    let prefills: BTreeSet<(String, usize, usize)> = steps
        .iter()
        .filter(|r| r.model == cfg.name && r.phase == Phase::Prefill)
        .map(|r| (r.variant.clone(), r.batch, r.q_len))
        .collect();
    if prefills.is_empty() {
        return md;
    }
    let _ = writeln!(
        md,
        "| profile | B | prompt S | predicted TTFT ms | measured TTFT ms | predicted / measured |"
    );
    let _ = writeln!(md, "|---|---|---|---|---|---|");
    for (variant, b, s) in prefills {
        let Ok(profile) = variant.parse::<StepProfile>() else {
            continue;
        };
        let base = report_query(ctx.run, cfg, on, profile, b, s, Mode::Pipelined);
        let q = Query {
            phase: Phase::Prefill,
            host: HostModel::AsMeasured,
            ..base
        };
        let cell = match predict_with(ctx.run, &ctx.fits, &q) {
            Ok(p) => {
                let m = p.measured.as_ref().and_then(|r| r.median_ns);
                format!(
                    "{:.2} | {} | {}",
                    p.step_ns / 1e6,
                    m.map_or("-".into(), |m| format!("{:.2}", m / 1e6)),
                    m.map_or("-".into(), |m| format!(
                        "{:+.1}%",
                        100.0 * (p.step_ns / m - 1.0)
                    ))
                )
            }
            Err(e) => format!("n/a: {} | | ", e.to_string().replace('|', "/")),
        };
        let _ = writeln!(md, "| {profile} | {b} | {s} | {cell} |");
    }
    let _ = writeln!(
        md,
        "\nTime to first token: the prefill of a prompt of S tokens per sequence into an empty cache, composed from the op crates' prefill rows (`opbench predict {} --phase prefill --prompt S`), host costs as measured; measured: the decode crate's prefill step.\n",
        ctx.dir.display()
    );
    md
}

/// Pipelined decode medians of the same case on the CPU and the GPU.
fn gpu_over_cpu(ctx: &Ctx, devices: &BTreeSet<DeviceId>) -> String {
    let mut md = String::new();
    let Some(&gpu) = devices.iter().find(|d| d.is_gpu()) else {
        return md;
    };
    if !devices.contains(&DeviceId::CPU) {
        return md;
    }
    let _ = writeln!(
        md,
        "## {gpu} over cpu\n\nPipelined decode medians of the same case on both devices, each in the dtype the run \
         gave it (the CPU usually f32, the GPU f16 or bf16): the speed-up a user sees by moving the op.\n\n\
         | op | variant | site | batch | cpu µs | {gpu} µs | speedup |\n|---|---|---|---|---|---|---|"
    );
    for r in ctx.ok.iter().filter(|r| {
        r.device == gpu
            && r.mode == Mode::Pipelined
            && r.phase == Phase::Decode
            && r.site == representative_site(r.op)
    }) {
        if let Some(c) = ctx.ok.iter().find(|c| {
            c.device == DeviceId::CPU
                && c.op == r.op
                && c.variant == r.variant
                && c.site == r.site
                && c.batch == r.batch
                && c.kv_len == r.kv_len
                && c.mode == Mode::Pipelined
                && c.phase == Phase::Decode
        }) {
            if let (Some(ct), Some(gt)) = (c.median_ns, r.median_ns) {
                let _ = writeln!(
                    md,
                    "| {} | {} | {} | {} | {:.1} | {:.1} | {:.1}× |",
                    r.op,
                    r.variant,
                    r.site,
                    r.batch,
                    ct / 1e3,
                    gt / 1e3,
                    ct / gt
                );
            }
        }
    }
    md.push('\n');
    md
}

/// Where each profile's step goes, at its measured batches: predicted stacked into kernels
/// not hidden by the host, libtorch's dispatch and Python + framework, beside the measured
/// step. Profiles: hf-eager and fused (tch), transformers (scripts/peer.py) where the run
/// has them, and the graphed fused step where it has graph rows.
fn breakdown(ctx: &Ctx, on: On) -> Result<String, AnalysisError> {
    let mut md = String::new();
    let steps: BTreeSet<(String, usize, usize)> = step_rows(ctx, on, Mode::Pipelined)
        .filter(|r| r.phase == Phase::Decode)
        .map(|r| {
            (
                r.model.clone(),
                r.kv_len.unwrap_or(1).saturating_sub(1),
                r.batch,
            )
        })
        .collect();
    let models: BTreeSet<(String, usize)> = steps.iter().map(|(m, l, _)| (m.clone(), *l)).collect();
    for (model, ctx_len) in models {
        let Ok(cfg) = ModelConfig::by_name(&model) else {
            continue;
        };
        let batches: Vec<usize> = steps
            .iter()
            .filter(|(m, l, _)| *m == model && *l == ctx_len)
            .map(|(_, _, b)| *b)
            .collect();
        // (label, [kernels beyond the host, dispatch, python, generate()'s loop], measured)
        let mut bars: Vec<(String, [f64; 4], Option<f64>)> = Vec::new();
        let profiles: Vec<(StepProfile, Mode)> = StepProfile::EVERY
            .into_iter()
            .map(|p| (p, Mode::Pipelined))
            .chain([(StepProfile::Fused, Mode::Graph)])
            .collect();
        let mut chosen = BTreeMap::new();
        for (profile, mode) in profiles {
            for &b in &batches {
                let q = report_query(ctx.run, &cfg, on, profile, b, ctx_len, mode);
                if mode == Mode::Pipelined {
                    chosen.insert(profile, q.host);
                }
                let Ok(p) = predict_with(ctx.run, &ctx.fits, &q) else {
                    continue;
                };
                let host = if p.gpu { p.host_ns } else { p.serial_ns };
                let split = (profile == StepProfile::Transformers)
                    .then(|| crate::predict::Split::priced(ctx.run, &ctx.fits, &q, &p).ok())
                    .flatten();
                let (dispatch, python) = match (profile, &split) {
                    (StepProfile::Transformers, Some(s)) => (s.dispatch_ns.min(host), s.python_ns),
                    (StepProfile::Transformers, None) => (0.0, host),
                    _ => (host, 0.0),
                };
                let kernels = (p.step_ns - host).max(0.0);
                let measured = p.measured.as_ref().and_then(|r| r.median_ns);
                let label = format!(
                    "{}{} B={b}",
                    profile,
                    if mode == Mode::Graph { " graphs" } else { "" }
                );
                bars.push((
                    label,
                    [kernels / 1e6, dispatch / 1e6, python / 1e6, 0.0],
                    measured.map(|m| m / 1e6),
                ));
                // the user's number beside the step: generate() per new token
                if let (Some(g), Some(s)) = (crate::generate::price(ctx.run, &q, &p), &split) {
                    let parts = g.parts(&p, s).map(|v| v / 1e6);
                    let measured = g.measured.as_ref().and_then(|r| r.median_ns);
                    bars.push((
                        format!("generate() B={b}"),
                        parts,
                        measured.map(|m| m / 1e6),
                    ));
                }
            }
        }
        if bars.is_empty() {
            continue;
        }
        let file = format!(
            "{}-{}-breakdown.svg",
            slug(&on.device.to_string()),
            slug(&model)
        );
        let path = ctx.dir.join(&file);
        draw_breakdown(
            &path,
            &format!(
                "{model} decode step, L = {ctx_len}, {} {}",
                on.device, on.dtype
            ),
            &bars,
        )?;
        let _ = writeln!(md, "### Where the step goes: {model}, L = {ctx_len}\n");
        let _ = writeln!(md, "![breakdown]({file})\n");
        let _ = writeln!(
            md,
            "| step | kernels beyond the host ms | libtorch dispatch ms | Python + framework ms | generate()'s own cost ms | predicted ms | measured ms | predicted / measured |"
        );
        let _ = writeln!(md, "|---|---|---|---|---|---|---|---|");
        for (label, [k, d, p, l], m) in &bars {
            let total = k + d + p + l;
            let _ = writeln!(
                md,
                "| {label} | {k:.2} | {d:.2} | {p:.2} | {l:.2} | {total:.2} | {} | {} |",
                m.map_or("-".into(), |m| format!("{m:.2}")),
                m.map_or("-".into(), |m| format!(
                    "{:+.1}%",
                    100.0 * (total / m - 1.0)
                ))
            );
        }
        let _ = writeln!(
            md,
            "\nPredicted bars stack the host's time — libtorch's dispatch and launch (the calls as tch makes them) and, for transformers, Python and the framework (the same calls from Python, module calls, mask, cache bookkeeping: scripts/peer.py) — and the kernel time the host does not hide; a `generate()` bar is one new token as the user's `model.generate()` makes it: the step less its argmax, plus generate()'s own cost — its loop (Python, logits processing, stopping checks: scripts/peer.py's `generate_loop`), the host's sync with the device every token and its inputs to the forward (the peer's `step_synced`, `step_as_generate`) — against the peer's generate() from the step's cache; the grey bar beside each is the measured step (`opbench predict --profile P` prints the parts). On the CPU, \"dispatch\" is libtorch's whole call, work included. {}\n",
            host_models(on, &chosen)
        );
    }
    Ok(md)
}

/// Stacked bars (kernels beyond the host, dispatch, Python + framework) with the measured
/// step beside each.
fn draw_breakdown(
    path: &Path,
    title: &str,
    bars: &[(String, [f64; 4], Option<f64>)],
) -> Result<(), AnalysisError> {
    let top = bars
        .iter()
        .map(|(_, p, m)| (p.iter().sum::<f64>()).max(m.unwrap_or(0.0)))
        .fold(0.0, f64::max)
        * 1.25;
    let n = bars.len();
    let root = SVGBackend::new(path, (160 + 90 * n as u32, 480)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| draw_err(path, e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(70)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..n as f64, 0.0..top.max(1e-3))
        .map_err(|e| draw_err(path, e))?;
    let labels: Vec<String> = bars.iter().map(|b| b.0.clone()).collect();
    chart
        .configure_mesh()
        .disable_x_mesh()
        // ticks every half bar: a label under each pair's middle, none between
        .x_labels(2 * n + 1)
        .x_label_formatter(&|x| {
            let i = x.floor() as usize;
            if (x - x.floor() - 0.5).abs() < 0.01 {
                labels.get(i).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .y_desc("ms per step")
        .label_style(("sans-serif", 11))
        .draw()
        .map_err(|e| draw_err(path, e))?;
    let parts = [
        ("kernels beyond the host", COLORS[0]),
        ("libtorch dispatch", COLORS[1]),
        ("Python + framework", COLORS[2]),
        ("generate()'s own cost", COLORS[3]),
    ];
    for (j, (name, color)) in parts.iter().enumerate() {
        let color = *color;
        chart
            .draw_series(bars.iter().enumerate().map(|(i, (_, p, _))| {
                let below: f64 = p[..j].iter().sum();
                Rectangle::new(
                    [(i as f64 + 0.1, below), (i as f64 + 0.5, below + p[j])],
                    color.filled(),
                )
            }))
            .map_err(|e| draw_err(path, e))?
            .label(*name)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled()));
    }
    chart
        .draw_series(bars.iter().enumerate().filter_map(|(i, (_, _, m))| {
            m.map(|m| {
                Rectangle::new(
                    [(i as f64 + 0.5, 0.0), (i as f64 + 0.85, m)],
                    BLACK.mix(0.35).filled(),
                )
            })
        }))
        .map_err(|e| draw_err(path, e))?
        .label("measured")
        .legend(|(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], BLACK.mix(0.35).filled()));
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.4))
        .label_font(("sans-serif", 12))
        .draw()
        .map_err(|e| draw_err(path, e))?;
    root.present().map_err(|e| draw_err(path, e))
}

/// Eager beside graph replay per profile and batch: the decode crate's pipelined and
/// `graph` steps, the speed-up, and the step predict prices from `graph`-mode rows. Empty
/// when the run has no graph-mode step.
fn graph_replay(ctx: &Ctx, on: On) -> Result<String, AnalysisError> {
    let mut md = String::new();
    let steps: Vec<&ResultRow> = step_rows(ctx, on, Mode::Graph)
        .filter(|r| r.phase == Phase::Decode)
        .collect();
    let models: BTreeSet<&str> = steps.iter().map(|r| r.model.as_str()).collect();
    for model in models {
        let Ok(cfg) = ModelConfig::by_name(model) else {
            continue;
        };
        let mut series = Series::new();
        let _ = writeln!(md, "### Graph replay: {model}\n");
        let _ = writeln!(
            md,
            "| profile | B | L | eager ms/step | graph ms/step | speed-up | predicted graph ms/step | predicted / measured |"
        );
        let _ = writeln!(md, "|---|---|---|---|---|---|---|---|");
        let mut rows: Vec<&ResultRow> =
            steps.iter().copied().filter(|r| r.model == model).collect();
        rows.sort_by_key(|r| (r.variant.clone(), r.kv_len, r.batch));
        for r in rows {
            let Ok(profile) = r.variant.parse::<StepProfile>() else {
                continue;
            };
            let Some(graph) = r.median_ns else { continue };
            let ctx_len = r.kv_len.map_or(0, |k| k.saturating_sub(1));
            let eager = ctx
                .run
                .row(&r.key.in_mode(Mode::Pipelined))
                .filter(|e| e.is_ok())
                .and_then(|e| e.median_ns);
            let q = Query {
                model: &cfg,
                batch: r.batch,
                ctx: ctx_len,
                phase: Phase::Decode,
                profile,
                device: on.device,
                dtype: on.dtype,
                mode: Mode::Graph,
                host: HostModel::AsMeasured,
            };
            let predicted = predict_with(ctx.run, &ctx.fits, &q).ok().map(|p| p.step_ns);
            series
                .entry(format!("{profile} graph"))
                .or_default()
                .push((r.batch as f64, graph / 1e6));
            if let Some(e) = eager {
                series
                    .entry(format!("{profile} eager"))
                    .or_default()
                    .push((r.batch as f64, e / 1e6));
            }
            let ms = |v: Option<f64>| v.map_or("-".into(), |v| format!("{:.2}", v / 1e6));
            let _ = writeln!(
                md,
                "| {profile} | {} | {ctx_len} | {} | {:.2} | {} | {} | {} |",
                r.batch,
                ms(eager),
                graph / 1e6,
                eager.map_or("-".into(), |e| format!("{:.2}×", e / graph)),
                ms(predicted),
                predicted.map_or("-".into(), |p| format!(
                    "{:+.1}%",
                    100.0 * (p / graph - 1.0)
                ))
            );
        }
        let file = format!(
            "{}-{}-graphs.svg",
            slug(&on.device.to_string()),
            slug(model)
        );
        plot(
            &ctx.dir.join(&file),
            &format!(
                "{model} decode step on {}, {}: eager and graph replay",
                on.device, on.dtype
            ),
            ("batch", "ms per step"),
            &series,
            &Series::new(),
            None,
            SeriesLabelPosition::UpperLeft,
        )?;
        let _ = writeln!(
            md,
            "\n![eager and graphs]({file})\n\nEager: the decode crate's pipelined step (host dispatch and launch included). Graph: the same step captured once into a CUDA/HIP graph, replays timed by GPU events (docs/method.md, `graph`). Predicted: every call of the step at its `graph_cold`-mode time where the run has one (its weights or KV cache read from memory), else its `graph`-mode time, plus the device's switching cost per kernel (floor `mixed` − `blocked` in graph mode), summed (`opbench predict --mode graph`).\n"
        );
    }
    Ok(md)
}
/// The trace pass: kernels per op at the smallest and largest traced batch, fallback
/// evidence, and each traced decode step beside predict's plan. Empty without traces.
fn traced_kernels(ctx: &Ctx, on: On) -> String {
    use crate::traced::{op_rows, top_ops};
    let mut md = String::new();
    let batches: BTreeSet<usize> = ctx
        .traces
        .rows
        .keys()
        .filter(|k| k.series.device == on.device && k.series.op != OpKind::Decode)
        .map(|k| k.batch)
        .collect();
    let (Some(&lo), Some(&hi)) = (batches.first(), batches.last()) else {
        return md;
    };
    let _ = writeln!(md, "### Kernels per call (trace pass)\n");
    let _ = writeln!(
        md,
        "| op | variant | site | B | source | kernels | device µs | dominant kernel | top-level ATen ops | syncs | D→H | fallback |"
    );
    let _ = writeln!(md, "|---|---|---|---|---|---|---|---|---|---|---|---|");
    let mut seen = BTreeSet::new();
    for b in [lo, hi] {
        if !seen.insert(b) {
            continue;
        }
        for t in op_rows(&ctx.traces, on.device, b) {
            let s = &t.key.series;
            let what = match (&t.dominant_kernel, t.note.as_deref()) {
                (Some(k), _) => format!("`{k}`"),
                (None, Some(n)) if t.status != rundir::TraceStatus::Ok => n.replace('|', "/"),
                _ => "-".into(),
            };
            let _ = writeln!(
                md,
                "| {} | {} | {} | {b} | {} | {} | {} | {what} | {} | {} | {} | {} |",
                s.op,
                s.variant,
                s.site,
                t.source,
                t.kernels,
                t.device_ns
                    .map_or("-".into(), |d| format!("{:.2}", d / 1e3)),
                top_ops(&ctx.traces, &t.key).replace('|', "/"),
                t.syncs,
                t.d2h_copies,
                t.fallback.as_deref().unwrap_or("")
            );
        }
    }
    let flagged: Vec<&rundir::TraceRow> = ctx
        .traces
        .rows
        .values()
        .filter(|t| t.key.series.device == on.device && t.fallback.is_some())
        .collect();
    let _ = writeln!(
        md,
        "\nKernels, device µs, syncs and D→H copies are per call, from PyTorch's Kineto profiler (source `kineto`) in a pass after timing, or what the GPU libraries logged (`logs`). {} GPU case(s) show CPU-fallback evidence (no kernel launched, or a copy back to the host every call){}\n",
        flagged.len(),
        if flagged.is_empty() {
            ".".to_string()
        } else {
            format!(
                ": {}.",
                flagged
                    .iter()
                    .map(|t| format!(
                        "`{}/{}/{}` b{}",
                        t.key.series.op, t.key.series.variant, t.key.series.site, t.key.batch
                    ))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        }
    );
    md.push_str(&traced_steps(ctx, on));
    md
}

/// The traced decode steps beside predict's plan (empty when the trace has none).
fn traced_steps(ctx: &Ctx, on: On) -> String {
    use crate::traced::step_check;
    let mut md = String::new();
    let steps: Vec<&rundir::TraceRow> = ctx
        .traces
        .rows
        .values()
        .filter(|t| {
            t.key.series.device == on.device
                && t.key.series.op == OpKind::Decode
                && t.key.series.phase == Phase::Decode
        })
        .collect();
    if steps.is_empty() {
        return md;
    }
    let _ = writeln!(md, "### Traced decode steps against predict's plan\n");
    let _ = writeln!(
        md,
        "| model | profile | B | kernels (trace) | kernels (plan) | device ms (trace) | kernels ms (predict) | kernels per ATen op (trace, top 6) | ATen ops the plan lacks (per step: trace / plan) |"
    );
    let _ = writeln!(md, "|---|---|---|---|---|---|---|---|---|");
    for t in steps {
        let s = &t.key.series;
        let (Ok(cfg), Ok(profile)) = (
            ModelConfig::by_name(&s.model),
            s.variant.parse::<StepProfile>(),
        ) else {
            continue;
        };
        let q = Query {
            model: &cfg,
            batch: t.key.batch,
            ctx: s.kv_len.map_or(0, |k| k.saturating_sub(1)),
            phase: Phase::Decode,
            profile,
            device: on.device,
            dtype: s.dtype,
            mode: Mode::Pipelined,
            host: HostModel::AsMeasured,
        };
        let Some(c) = step_check(&ctx.traces, &q) else {
            continue;
        };
        let predicted = predict_with(ctx.run, &ctx.fits, &q)
            .ok()
            .map(|p| p.device_ns);
        let by_op = c
            .kernels_by_op
            .iter()
            .take(6)
            .map(|(o, n)| format!("{o} {n}"))
            .collect::<Vec<_>>()
            .join(", ");
        let unplanned = if c.unplanned.is_empty() {
            "none".to_string()
        } else {
            c.unplanned
                .iter()
                .map(|(o, a, b)| format!("{o} {a}/{b}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let _ = writeln!(
            md,
            "| {} | {profile} | {} | {} | {} | {} | {} | {by_op} | {unplanned} |",
            s.model,
            t.key.batch,
            c.traced_kernels,
            c.planned_kernels.map_or_else(
                || format!("- (untraced: {})", c.untraced.join(", ")),
                |k| k.to_string()
            ),
            c.traced_device_ns
                .map_or("-".into(), |d| format!("{:.3}", d / 1e6)),
            predicted.map_or("-".into(), |d| format!("{:.3}", d / 1e6)),
        );
    }
    let _ = writeln!(
        md,
        "\nPlan kernels: Σ calls per step × each planned op case's traced kernels, plus one per unmeasured call that launches one. Kernels ms (predict): the device time `opbench predict` composes for the step. The last column lists ATen ops the traced step dispatches more often than the plan's traced cases account for: calls the plan does not have, or prices only as unmeasured calls at the dispatch floor.\n"
    );
    md
}
