//! report.md's traced kernels and steps (the trace pass).

use super::*;

/// The trace pass: kernels per op at the smallest and largest traced batch, fallback
/// evidence, and each traced decode step beside predict's plan. Empty without traces.
pub(super) fn traced_kernels(ctx: &Ctx, on: On) -> String {
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
pub(super) fn traced_steps(ctx: &Ctx, on: On) -> String {
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
