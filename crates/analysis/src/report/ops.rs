//! report.md's evidence per op: time against batch with the fitted model, the bandwidth
//! plot, host against device time.

use super::*;

/// The points' extent (x0, x1, y0, y1), the reference line's height included; `None`
/// where there is nothing positive to plot on log axes.
fn extent(series: &Series, models: &Series, hline: Option<f64>) -> Option<(f64, f64, f64, f64)> {
    let pts = series.values().flatten().chain(models.values().flatten());
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for &(x, y) in pts {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y0 = y0.min(y);
        y1 = y1.max(y);
    }
    if let Some(h) = hline {
        y0 = y0.min(h);
        y1 = y1.max(h);
    }
    (x0.is_finite() && y0.is_finite() && x0 > 0.0 && y0 > 0.0).then_some((x0, x1, y0, y1))
}

/// A log-log plot of `series` (name -> points), with optional dashed model lines and a
/// horizontal reference line.
pub(super) fn plot(
    path: &Path,
    title: &str,
    (x_desc, y_desc): (&str, &str),
    series: &Series,
    models: &Series,
    hline: Option<(f64, &str)>,
    legend: SeriesLabelPosition,
) -> Result<(), AnalysisError> {
    let Some((x0, x1, y0, y1)) = extent(series, models, hline.map(|h| h.0)) else {
        return Ok(());
    };
    // a range under a decade keeps its intermediate tick labels; wider ones get headroom
    // above for the legend
    let y_range = if y1 / y0 < 5.0 {
        y0 / 1.1..y1 * 1.5
    } else {
        y0 / 1.5..y1 * 2.5
    };
    // ticks at the measured x values (the batches run: 1, 8, 64), not just at decades
    let mut xs: Vec<f64> = series.values().flatten().map(|p| p.0).collect();
    xs.sort_by(f64::total_cmp);
    xs.dedup();
    let root = SVGBackend::new(path, (760, 460)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| draw_err(path, e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(
            (x0 / 1.3..x1 * 1.3).log_scale().with_key_points(xs),
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
    let mut fit_labelled = false;
    for (name, points) in series {
        let base = name.split(" (").next().unwrap_or(name);
        let color = COLORS[bases.iter().position(|b| *b == base).unwrap_or(0) % COLORS.len()];
        let style = Style {
            color,
            fit: models.get(name),
        };
        draw_one(&mut chart, path, name, points, style, &mut fit_labelled)?;
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

/// How one series is drawn: its variant's color, and its fitted model's line.
struct Style<'a> {
    color: RGBColor,
    fit: Option<&'a Vec<(f64, f64)>>,
}

/// One named series on `chart`: a prediction dashed and paler, with crosses; GPU events
/// thin, with triangles; the rest solid, with circles; its fitted model dashed (one legend
/// entry for all of them, `fit_labelled`).
fn draw_one<DB: DrawingBackend, CT: plotters::coord::CoordTranslate<From = (f64, f64)>>(
    chart: &mut ChartContext<'_, DB, CT>,
    path: &Path,
    name: &str,
    points: &[(f64, f64)],
    style: Style<'_>,
    fit_labelled: &mut bool,
) -> Result<(), AnalysisError> {
    let color = style.color;
    let events = name.ends_with("(GPU events)");
    let width = if events { 1 } else { 2 };
    if name.ends_with("(predicted)") {
        // a prediction: dashed and paler, beside the measured line of its color
        let pale = color.mix(0.55);
        chart
            .draw_series(DashedLineSeries::new(
                points.to_vec(),
                6,
                4,
                pale.stroke_width(2),
            ))
            .map_err(|e| draw_err(path, e))?
            .label(name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 6, y)], pale.stroke_width(2)));
        chart
            .draw_series(
                points
                    .iter()
                    .map(|&p| Cross::new(p, 3, pale.stroke_width(1))),
            )
            .map_err(|e| draw_err(path, e))?;
        return Ok(());
    }
    chart
        .draw_series(LineSeries::new(points.to_vec(), color.stroke_width(width)))
        .map_err(|e| draw_err(path, e))?
        .label(name)
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
    if let Some(m) = style.fit {
        let fit = chart
            .draw_series(DashedLineSeries::new(
                m.clone(),
                4,
                4,
                color.mix(0.7).stroke_width(1),
            ))
            .map_err(|e| draw_err(path, e))?;
        if !*fit_labelled {
            // one legend entry for every fitted line
            *fit_labelled = true;
            fit.label("fitted model (dashed)").legend(|(x, y)| {
                PathElement::new(vec![(x, y), (x + 6, y)], BLACK.mix(0.6).stroke_width(1))
            });
        }
    }
    Ok(())
}

/// Per op: time per call against batch, measured and fitted, with the floor.
pub(super) fn op_plots(ctx: &Ctx, on: On, floor: Option<f64>) -> Result<String, AnalysisError> {
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
pub(super) fn ceilings(ctx: &Ctx, on: On) -> (Option<f64>, Option<f64>) {
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
            .find_map(|r| r.gflops)
    };
    let copy = crate::predict::copy_gbps(ctx.run, on.device, on.dtype, None);
    (copy, find("gemm"))
}

/// Ceilings and achieved bandwidth per op against batch.
pub(super) fn bandwidth(ctx: &Ctx, on: On) -> Result<String, AnalysisError> {
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
pub(super) fn host_vs_device(ctx: &Ctx, on: On) -> String {
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
