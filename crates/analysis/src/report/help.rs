//! report.md's **What would help** section: [`crate::help::levers`] for each measured
//! batch, as a table, and a chart of tokens/s per stream at the smallest batch (each
//! change predicted, beside its measured counterpart where the run has one).

use super::*;
use crate::help::{AS_IS, Lever};

/// The section for each model the run prices a step of on `on`, at the report's cache
/// length, one table per measured batch and a chart of the smallest batch priced, and the
/// answer's lines ([`crate::answer::answer`]) at that batch for the first model. Empty where
/// no batch is priced.
pub(super) fn what_would_help(ctx: &Ctx, on: On) -> Result<(String, Vec<String>), AnalysisError> {
    let mut md = String::new();
    let mut answer = Vec::new();
    let ctx_len = plotted_kv(&ctx.ok, OpKind::Sdpa).map_or(1024, |k| k - 1);
    let profile = if has_peer(ctx) {
        StepProfile::Transformers
    } else {
        StepProfile::HfEager
    };
    for model in models(ctx, on) {
        let Ok(cfg) = ModelConfig::by_name(model) else {
            continue;
        };
        let mut tables = String::new();
        let mut chart: Option<(usize, Vec<Lever>)> = None;
        for b in batches(ctx, on) {
            let q = report_query(ctx.run, &cfg, on, profile, b, ctx_len, Mode::Pipelined);
            let Ok(pred) = predict_with(ctx.run, &ctx.fits, &q) else {
                continue;
            };
            let (rows, _) = crate::explain::help_of(ctx.run, &ctx.fits, &q, &pred, &[]);
            tables += &table(b, &rows);
            if answer.is_empty() {
                let generate = crate::generate::price(ctx.run, &q, &pred);
                answer = crate::answer::answer(&q, &pred, &rows, generate.as_ref());
                if let Some(first) = answer.first_mut() {
                    *first = format!("{first} ({}, B = {b}, L = {ctx_len})", cfg.name);
                }
            }
            chart.get_or_insert((b, rows));
        }
        let Some((b, rows)) = chart else {
            continue;
        };
        let file = chart_name(on, model, "help");
        draw(
            &ctx.dir.join(&file),
            &format!("{} B={b}: tokens/s per stream", cfg.name),
            &rows,
        )?;
        let _ = write!(
            md,
            "### What would help: {}, L = {ctx_len}, {profile} profile\n\n\
             Each change priced by the same composition as the step, ranked by tokens/s; \
             `measured`: its counterpart in this run, `check`: predicted / measured. \
             `opbench predict` prints the same table with what to do.\n\n\
             ![what would help]({file})\n\n{tables}",
            cfg.name
        );
    }
    Ok((md, answer))
}

fn table(b: usize, rows: &[Lever]) -> String {
    let base = rows
        .iter()
        .find(|l| l.name == AS_IS)
        .and_then(Lever::tokens_per_s);
    let mut md = format!(
        "B = {b}:\n\n| change | ms/step | tokens/s | per stream | gain | measured ms | check | runs here |\n|---|---|---|---|---|---|---|---|\n"
    );
    let ms = |v: Option<f64>| v.map_or("-".into(), |ns| format!("{:.2}", ns / 1e6));
    for l in rows {
        let gain = match (l.tokens_per_s(), base) {
            (Some(t), Some(b)) => format!("{:.2}×", t / b),
            _ => "-".into(),
        };
        let how = l
            .unpriced
            .as_deref()
            .map_or(String::new(), |w| format!(" (not priced: {w})"));
        let here = match &l.here {
            crate::help::Here::Runs(_) => "yes".to_string(),
            other => format!("{}: {}", other.word(), other.why().replace('|', "/")),
        };
        let interval = l.interval.map_or(String::new(), |(lo, hi)| {
            format!(" [{:.2}, {:.2}]", lo / 1e6, hi / 1e6)
        });
        let _ = writeln!(
            md,
            "| {}{} | {}{interval} | {} | {} | {gain} | {} | {} | {here} |",
            l.name,
            how.replace('|', "/"),
            ms(l.predicted_ns),
            l.tokens_per_s().map_or("-".into(), |t| format!("{t:.0}")),
            l.per_stream().map_or("-".into(), |t| format!("{t:.1}")),
            ms(l.measured_ns)
                + &l.derived.as_ref().map_or(String::new(), |d| format!(
                    " (derived: {})",
                    d.replace('|', "/")
                )),
            l.check().map_or("-".into(), |c| format!("{c:.2}"))
        );
    }
    md.push('\n');
    md
}

/// Horizontal bars: each change's tokens/s per stream, predicted and measured.
fn draw(path: &Path, title: &str, rows: &[Lever]) -> Result<(), AnalysisError> {
    let err = |e: &dyn std::fmt::Display| draw_err(path, e);
    let rate = |ns: Option<f64>| ns.map(|ns| 1e9 / ns);
    let top = rows
        .iter()
        .flat_map(|l| [rate(l.predicted_ns), rate(l.measured_ns)])
        .flatten()
        .fold(1.0, f64::max)
        * 1.15;
    let n = rows.len();
    let root = SVGBackend::new(path, (860, 60 + 34 * n as u32)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 16))
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(250)
        .build_cartesian_2d(0.0..top, 0.0..n as f64)
        .map_err(|e| err(&e))?;
    let names: Vec<String> = rows.iter().map(|l| l.name.clone()).collect();
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(2 * n + 1)
        .y_label_formatter(&|y| {
            let i = y.floor() as usize;
            if (y - y.floor() - 0.5).abs() < 0.01 && i < n {
                names[n - 1 - i].clone()
            } else {
                String::new()
            }
        })
        .x_desc("tokens/s per stream")
        .label_style(("sans-serif", 11))
        .draw()
        .map_err(|e| err(&e))?;
    let bar = |i: usize, lo: f64, hi: f64, v: f64| {
        let y = (n - 1 - i) as f64;
        [(0.0, y + lo), (v, y + hi)]
    };
    for (label, color, lo, hi, pick) in [
        ("predicted", BLUE.mix(0.7), 0.5, 0.85, true),
        ("measured", BLACK.mix(0.35), 0.15, 0.5, false),
    ] {
        chart
            .draw_series(rows.iter().enumerate().filter_map(|(i, l)| {
                let v = rate(if pick { l.predicted_ns } else { l.measured_ns })?;
                Some(Rectangle::new(bar(i, lo, hi, v), color.filled()))
            }))
            .map_err(|e| err(&e))?
            .label(label)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled()));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.4))
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))
}
