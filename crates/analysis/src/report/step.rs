//! report.md's step sections: the batch curve and the time to first token, where a step's
//! time goes, and what graph replay gives.

use super::*;

/// The batch curve — decode tokens/s against batch, predicted and measured, per profile —
/// and the time to first token of every prefill the decode crate measured, predicted
/// (`predict --phase prefill`) beside it.
pub(super) fn batch_curve(ctx: &Ctx, on: On) -> Result<String, AnalysisError> {
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
        let file = chart_name(on, model, "batch-curve");
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
pub(super) fn ttft(ctx: &Ctx, on: On, cfg: &ModelConfig, steps: &[&ResultRow]) -> String {
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

/// Where each profile's step goes, at its measured batches: predicted stacked into kernels
/// not hidden by the host, libtorch's dispatch and Python + framework, beside the measured
/// step. Profiles: hf-eager and fused (tch), transformers (scripts/peer.py) where the run
/// has them, and the graphed fused step where it has graph rows.
/// A bar of the breakdown: its label, [kernels beyond the host, dispatch, Python +
/// framework, generate()'s loop] in ms, and the measured step in ms.
type Bar = (String, [f64; 4], Option<f64>);

pub(super) fn breakdown(ctx: &Ctx, on: On) -> Result<String, AnalysisError> {
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
        let mut bars: Vec<Bar> = Vec::new();
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
                let t = (profile == StepProfile::Transformers)
                    .then(|| crate::explain::transformers_of(ctx.run, &ctx.fits, &q, &p));
                let split = t.as_ref().and_then(|t| t.split);
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
                if let (Some(g), Some(s)) = (t.as_ref().and_then(|t| t.generate.as_ref()), &split) {
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
        let file = chart_name(on, &model, "breakdown");
        let path = ctx.dir.join(&file);
        draw_breakdown(
            &path,
            &format!(
                "{model} decode step, L = {ctx_len}, {} {}",
                on.device, on.dtype
            ),
            &bars,
        )?;
        breakdown_table(
            &mut md,
            (&model, ctx_len),
            &file,
            &bars,
            host_models(on, &chosen),
        );
    }
    Ok(md)
}

/// One step's bars as report.md's section: the chart, the table of parts with the
/// prediction against the measurement, and what the bars stack.
fn breakdown_table(
    md: &mut String,
    (model, ctx_len): (&str, usize),
    file: &str,
    bars: &[Bar],
    models: String,
) {
    let _ = writeln!(md, "### Where the step goes: {model}, L = {ctx_len}\n");
    let _ = writeln!(md, "![breakdown]({file})\n");
    let _ = writeln!(
        md,
        "| step | kernels beyond the host ms | libtorch dispatch ms | Python + framework ms | generate()'s own cost ms | predicted ms | measured ms | predicted / measured |"
    );
    let _ = writeln!(md, "|---|---|---|---|---|---|---|---|");
    for (label, [k, d, p, l], m) in bars {
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
        models
    );
}

/// Stacked bars (kernels beyond the host, dispatch, Python + framework) with the measured
/// step beside each.
pub(super) fn draw_breakdown(
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
pub(super) fn graph_replay(ctx: &Ctx, on: On) -> Result<String, AnalysisError> {
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
        let file = chart_name(on, model, "graphs");
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
