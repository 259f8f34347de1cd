//! `opbench report RUN`: RUN/report.md with SVG plots.
//!
//! Per op, time per call against batch on log axes for each variant at a representative
//! site, with the fitted model and the dispatch floor drawn in; achieved GB/s against the
//! device's DRAM peak where known; host versus device time per call at B=1 where the run
//! has device-mode rows; GPU-over-CPU speedup per op and batch when the run holds both;
//! and the predicted decode step's breakdown.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::Path;

use harness::ResultRow;
use plotters::prelude::*;

use crate::Failure;
use crate::fit_cmd::{Work, fit_run};
use crate::predict_cmd::{Query, predict};
use crate::run::{Run, SeriesKey};

/// The variants drawn on the bandwidth plot: one per op, as the hf-eager profile runs it
/// (rmsnorm and rope: the single-kernel forms, whose GB/s mean something).
const BANDWIDTH_SERIES: &[(&str, &str)] = &[
    ("linear", "aten"),
    ("rmsnorm", "fused"),
    ("rope", "halves"),
    ("sdpa", "auto"),
    ("kvcache", "cat"),
];

/// The site each op is plotted at (the others behave alike or are in the CSV).
fn representative_site(op: &str) -> &'static str {
    match op {
        "linear" => "q_proj",
        "rmsnorm" => "input_norm",
        "rope" => "q",
        "sdpa" => "attn",
        "kvcache" => "k",
        "decode" => "step",
        _ => "",
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

fn draw_err(path: &Path, e: impl std::fmt::Display) -> Failure {
    Failure {
        code: 1,
        message: format!("{}: {e}", path.display()),
    }
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
) -> Result<(), Failure> {
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

/// The cache length to plot for sdpa / kvcache: the measured one closest to 1024.
fn plotted_kv(rows: &[&ResultRow], op: &str) -> Option<usize> {
    rows.iter()
        .filter(|r| r.op == op && r.phase == "decode")
        .filter_map(|r| r.kv_len)
        .min_by_key(|k| (*k as i64 - 1025).abs())
}

fn slug(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect()
}

pub fn run(dir: &Path) -> Result<u8, Failure> {
    let run = Run::load(dir)?;
    let env = run.env().unwrap_or(serde_json::Value::Null);
    let fits: BTreeMap<SeriesKey, (stats::Fit, Work)> = fit_run(&run)
        .into_iter()
        .map(|(k, _, f, w)| (k, (f, w)))
        .collect();
    let ok: Vec<&ResultRow> = run.ok_rows().collect();
    let devices: BTreeSet<&str> = ok.iter().map(|r| r.device.as_str()).collect();
    let mut md = String::new();
    let s = |v: &serde_json::Value| match v {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Null => "-".into(),
        v => v.to_string(),
    };
    let _ = writeln!(md, "# opbench report: {}\n", s(&env["run_id"]));
    let _ = writeln!(
        md,
        "Device **{}** ({}, {}), backend `{}`, runtime {}, driver {}; libtorch {}, tch {}, opbench {} (git {}); CPU {}, {} threads; {}.\n",
        s(&env["device_name"]),
        s(&env["arch"]),
        env["device_memory_bytes"]
            .as_f64()
            .map_or("-".into(), |b| format!("{:.0} GiB", b / 1073741824.0)),
        s(&env["backend"]),
        s(&env["runtime_version"]),
        s(&env["driver_version"]),
        s(&env["libtorch_version"]),
        s(&env["tch_version"]),
        s(&env["opbench_version"]),
        s(&env["git_revision"]),
        s(&env["cpu_model"]),
        s(&env["threads"]),
        s(&env["os"]),
    );
    let statuses: BTreeMap<&str, usize> = run.results.iter().fold(BTreeMap::new(), |mut m, r| {
        *m.entry(r.status.as_str()).or_default() += 1;
        m
    });
    let _ = writeln!(
        md,
        "{} rows: {}. Times are medians per call; `pipelined` = back to back with one synchronize, as an eager decode loop runs.\n",
        run.results.len(),
        statuses
            .iter()
            .map(|(k, v)| format!("{v} {k}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let peak = env["peak_dram_gbps"].as_f64();

    for &device in &devices {
        let dtype = ok
            .iter()
            .filter(|r| r.device == device && r.op != "floor")
            .map(|r| r.dtype.as_str())
            .next()
            .unwrap_or("f32");
        let floor = ok
            .iter()
            .find(|r| {
                r.op == "floor"
                    && r.variant == "add"
                    && r.device == device
                    && r.mode == "pipelined"
                    && r.dtype == dtype
            })
            .and_then(|r| r.median_ns)
            .map(|t| t / 1e3);
        let _ = writeln!(md, "## {device} ({dtype})\n");
        if let Some(f) = floor {
            let _ = writeln!(
                md,
                "Dispatch floor (one-element add, pipelined): {f:.2} µs per call.\n"
            );
        }
        let mut bw = Series::new();
        for op in ["linear", "rmsnorm", "rope", "sdpa", "kvcache", "decode"] {
            let site = representative_site(op);
            let kv = if matches!(op, "sdpa" | "kvcache" | "decode") {
                plotted_kv(&ok, op)
            } else {
                None
            };
            let rows: Vec<&&ResultRow> = ok
                .iter()
                .filter(|r| {
                    r.op == op
                        && r.site == site
                        && r.device == device
                        && r.dtype == dtype
                        && r.phase == "decode"
                        && (r.mode == "pipelined" || r.mode == "device")
                        && r.kv_len == kv
                })
                .collect();
            if rows.is_empty() {
                continue;
            }
            let (mut series, mut models) = (Series::new(), Series::new());
            for r in &rows {
                let name = if r.mode == "device" {
                    format!("{} (GPU events)", r.variant)
                } else {
                    r.variant.clone()
                };
                series
                    .entry(name)
                    .or_default()
                    .push((r.batch as f64, r.median_ns.unwrap_or(0.0) / 1e3));
                if r.mode != "pipelined" {
                    continue;
                }
                if BANDWIDTH_SERIES.contains(&(op, r.variant.as_str())) {
                    if let Some(g) = r.gbps {
                        bw.entry(format!("{op} {}", r.variant))
                            .or_default()
                            .push((r.batch as f64, g));
                    }
                }
            }
            for (variant, pts) in series.iter_mut() {
                pts.sort_by(|a, b| a.0.total_cmp(&b.0));
                let key = SeriesKey::of(
                    rows.iter()
                        .find(|r| &r.variant == variant)
                        .copied()
                        .copied()
                        .unwrap_or(rows[0]),
                );
                if let Some((fit, work)) = fits.get(&key) {
                    let mut line: Vec<(f64, f64)> = rows
                        .iter()
                        .filter(|r| &r.variant == variant && r.mode == "pipelined")
                        .map(|r| (r.batch as f64, fit.predict(work.of(r)) / 1e3))
                        .filter(|p| p.1 > 0.0)
                        .collect();
                    line.sort_by(|a, b| a.0.total_cmp(&b.0));
                    models.insert(variant.clone(), line);
                }
            }
            let file = format!("{}-{}.svg", slug(device), op);
            let title = match kv {
                Some(k) => format!("{op} ({site}, L+1 = {k}) on {device}, {dtype}: time per call"),
                None => format!("{op} ({site}) on {device}, {dtype}: time per call"),
            };
            plot(
                &dir.join(&file),
                &title,
                ("batch", "µs per call (pipelined)"),
                &series,
                &models,
                floor
                    .filter(|_| op != "decode")
                    .map(|f| (f, "dispatch floor")),
                SeriesLabelPosition::UpperLeft,
            )?;
            let _ = writeln!(
                md,
                "### {op}\n\n![{op}]({file})\n\nSolid: measured, pipelined (and, where the run has them, GPU events: device time, kernels and the gaps between them, no host time); dashed: the fitted model ({}).\n",
                series
                    .keys()
                    .filter_map(|v| {
                        let key = SeriesKey::of(
                            rows.iter()
                                .find(|r| &r.variant == v && r.mode == "pipelined")?,
                        );
                        fits.get(&key)
                            .map(|(f, _)| format!("{v}: {}", f.kind.as_str()))
                    })
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        let ceiling = |site: &str| {
            ok.iter()
                .filter(|r| {
                    r.op == "ceiling"
                        && r.site == site
                        && r.device == device
                        && r.dtype == dtype
                        && r.mode == "pipelined"
                })
                .find_map(|r| if site == "copy" { r.gbps } else { r.gflops })
        };
        let (copy_ceiling, gemm_ceiling) = (ceiling("copy"), ceiling("gemm"));
        if copy_ceiling.is_some() || gemm_ceiling.is_some() {
            let _ = writeln!(
                md,
                "Ceilings measured in this run: copy {} GB/s (bytes read + written){}; 4096³ GEMM {} TFLOP/s in {dtype}.\n",
                copy_ceiling.map_or("-".into(), |g| format!("{g:.0}")),
                match (copy_ceiling, peak.filter(|_| device != "cpu")) {
                    (Some(c), Some(p)) =>
                        format!(", {:.0}% of the {p:.0} GB/s DRAM peak", 100.0 * c / p),
                    _ => String::new(),
                },
                gemm_ceiling.map_or("-".into(), |g| format!("{:.1}", g / 1e3)),
            );
        }
        if !bw.is_empty() {
            for pts in bw.values_mut() {
                pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            }
            let file = format!("{}-bandwidth.svg", slug(device));
            let peak_line = match copy_ceiling {
                Some(c) => Some((c, "copy ceiling (measured)")),
                None => peak.filter(|_| device != "cpu").map(|p| (p, "DRAM peak")),
            };
            plot(
                &dir.join(&file),
                &format!("Achieved bandwidth on {device}, {dtype}"),
                ("batch", "GB/s"),
                &bw,
                &Series::new(),
                peak_line,
                SeriesLabelPosition::LowerRight,
            )?;
            let _ = writeln!(
                md,
                "### Achieved bandwidth\n\n![bandwidth]({file})\n\nBytes a call must move (DESIGN.md) over its median; {}.\n",
                match peak_line {
                    Some((p, label)) if label.starts_with("copy") =>
                        format!("the line is this run's measured copy ceiling, {p:.0} GB/s"),
                    Some((p, _)) => format!(
                        "the line is the DRAM peak from memory clock and bus width, {p:.0} GB/s"
                    ),
                    None => "no peak is known for this device".into(),
                }
            );
        }
        // host vs device at B=1
        let dev_rows: Vec<&&ResultRow> = ok
            .iter()
            .filter(|r| {
                r.device == device && r.mode == "device" && r.batch == 1 && r.phase == "decode"
            })
            .collect();
        if !dev_rows.is_empty() {
            let _ = writeln!(md, "### Host versus device per call, B=1\n");
            let _ = writeln!(
                md,
                "| op | variant | site | L+1 | pipelined µs | device µs | host share |"
            );
            let _ = writeln!(md, "|---|---|---|---|---|---|---|");
            for d in dev_rows {
                let p = ok.iter().find(|r| {
                    r.op == d.op
                        && r.variant == d.variant
                        && r.site == d.site
                        && r.batch == 1
                        && r.kv_len == d.kv_len
                        && r.dtype == d.dtype
                        && r.device == d.device
                        && r.mode == "pipelined"
                        && r.phase == "decode"
                });
                if let (Some(p), Some(dv)) = (p.and_then(|p| p.median_ns), d.median_ns) {
                    let _ = writeln!(
                        md,
                        "| {} | {} | {} | {} | {:.2} | {:.2} | {:.0}% |",
                        d.op,
                        d.variant,
                        d.site,
                        d.kv_len.map_or("-".into(), |k| k.to_string()),
                        p / 1e3,
                        dv / 1e3,
                        100.0 * (1.0 - dv / p).max(0.0)
                    );
                }
            }
            let _ = writeln!(
                md,
                "\nHost share = (pipelined − device) / pipelined: the part of a call the GPU spends waiting for the host.\n"
            );
        }
        // predicted step
        for model in ok
            .iter()
            .filter(|r| r.device == device && r.op == "sdpa")
            .map(|r| r.model.clone())
            .collect::<BTreeSet<_>>()
        {
            let Ok(cfg) = shapes::ModelConfig::by_name(&model) else {
                continue;
            };
            let ctx = plotted_kv(&ok, "sdpa").map_or(1024, |k| k - 1);
            let _ = writeln!(md, "### Predicted decode step: {model}, L = {ctx}\n");
            let _ = writeln!(
                md,
                "| profile | B | ms/step | tokens/s | host ms | kernels ms | bound | measured ms/step | measured device ms |"
            );
            let _ = writeln!(md, "|---|---|---|---|---|---|---|---|---|");
            for profile in ["hf-eager", "fused"] {
                for b in [1usize, 8, 64] {
                    let q = Query {
                        model: &cfg,
                        batch: b,
                        ctx,
                        profile,
                        device,
                        dtype,
                        mode: "pipelined",
                    };
                    match predict(&run, &q) {
                        Ok(p) => {
                            let measured = crate::predict_cmd::measured_step(&run, &q)
                                .map_or("-".into(), |(m, _, _)| format!("{:.2}", m / 1e6));
                            let dq = Query {
                                mode: "device",
                                ..q.clone()
                            };
                            let measured_device = crate::predict_cmd::step_row(&run, &dq)
                                .and_then(|r| {
                                    let m = r.median_ns? / 1e6;
                                    let bound = r
                                        .note
                                        .as_deref()
                                        .and_then(harness::devtime::upper_bound_in)
                                        .is_some();
                                    Some(format!("{}{m:.2}", if bound { "≤ " } else { "" }))
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
                                } else if p.host_ns >= p.device_ns {
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
                                e.message.replace('|', "/")
                            );
                        }
                    }
                }
            }
            let _ = writeln!(
                md,
                "\nKernels ms: the predicted device time of the step (Σ GPU-event times of its parts); measured device ms: the decode crate's own `device` row (≤: an upper bound, see its note).\n\n`opbench predict {} --model {model} --batch B --ctx {ctx}` prints the per-op breakdown.\n",
                dir.display()
            );
        }
    }
    // GPU over CPU
    if devices.contains("cpu") && devices.len() > 1 {
        let gpu = devices
            .iter()
            .find(|d| **d != "cpu")
            .copied()
            .unwrap_or("cpu");
        let _ = writeln!(
            md,
            "## {gpu} over cpu\n\nPipelined decode medians of the same case on both devices, each in the dtype the run \
             gave it (the CPU usually f32, the GPU f16 or bf16): the speed-up a user sees by moving the op.\n\n\
             | op | variant | site | batch | cpu µs | {gpu} µs | speedup |\n|---|---|---|---|---|---|---|"
        );
        for r in ok.iter().filter(|r| {
            r.device == gpu
                && r.mode == "pipelined"
                && r.phase == "decode"
                && r.site == representative_site(&r.op)
        }) {
            if let Some(c) = ok.iter().find(|c| {
                c.device == "cpu"
                    && c.op == r.op
                    && c.variant == r.variant
                    && c.site == r.site
                    && c.batch == r.batch
                    && c.kv_len == r.kv_len
                    && c.mode == "pipelined"
                    && c.phase == "decode"
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
    }
    let path = dir.join("report.md");
    std::fs::write(&path, md).map_err(|e| Failure {
        code: 1,
        message: format!("{}: {e}", path.display()),
    })?;
    println!("opbench: wrote {}", path.display());
    Ok(0)
}
