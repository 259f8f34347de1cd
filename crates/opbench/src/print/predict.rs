//! predict's printers: the step, its parts, the host models, graphs, the traced step and
//! what would help (the transformers split and generate(): `transformers.rs`).

use super::*;

/// Everything `opbench predict` says of one query, in order.
pub fn explanation(e: &Explanation) {
    let (q, pred) = (&e.query, &e.prediction);
    answer(e);
    prediction(e);
    if !e.host_models.is_empty() {
        host_model(q, pred, &e.host_models);
    }
    if let Some(o) = &e.other_state {
        host_state(o.state, &o.step.prediction, o.step.measured_ns);
    }
    // the user's stack: how much of it is Python and the framework
    if let Some(t) = &e.transformers {
        if let Some(split) = &t.split {
            python_split(q, pred, t, split);
        }
        if let Some(g) = &t.generate {
            generate(q, pred, t, g);
        }
    }
    // what graphs would give, where the run has graph-mode rows to price it from
    if let Some(g) = &e.graph {
        graph_outlook(q, pred, g);
    }
    // the trace pass's step beside the plan, where the run has one
    if let Some(check) = &e.step_check {
        step_check(pred, check);
    }
    // the user's answer: what would make it faster, ranked
    if let Some((levers, bound)) = &e.help {
        what_would_help(levers, bound);
    }
}

/// A predicted step: summary, breakdown, and the measured step where the run has it.
pub fn prediction(e: &Explanation) {
    let (q, pred) = (&e.query, &e.prediction);
    title(e);
    say!(
        "predicted: {:.3} ms/step, {}",
        pred.step_ns / 1e6,
        rate(q, pred.step_ns)
    );
    if pred.gpu {
        host_and_kernels(q, pred);
    }
    costliest(pred);
    components(pred);
    sources(q, pred);
    measured_step(q, pred);
}

/// The query's line: model, phase, batch, context, profile, device, dtype, mode, host
/// state and run.
fn title(e: &Explanation) {
    let (q, state) = (&e.query, e.state);
    say!(
        "{} {} B={} {}={}, profile {}, {} {} {}{} (run {})",
        q.model.name,
        q.phase,
        q.batch,
        if q.phase == rundir::Phase::Prefill {
            "S"
        } else {
            "L"
        },
        q.ctx,
        q.profile,
        q.device,
        q.dtype,
        q.mode,
        match state {
            HostState::Typical => String::new(),
            HostState::Fast => format!(
                ", host state fast (host-timed rows and the measured step at the median of their clean samples where the samples record their state, else at the {:.0}th percentile of their samples; each row's note says which)",
                100.0 * analysis::predict::FAST_QUANTILE
            ),
        },
        e.run_dir.display()
    );
}

/// A GPU step's host and kernel times, what bounds it, and the Python calls priced at
/// the interpreter's pace.
fn host_and_kernels(q: &analysis::predict::Query, pred: &Prediction) {
    let bound = if pred.host_bound() {
        "host-bound: launch overhead sets the pace"
    } else {
        "device-bound: the kernels set the pace"
    };
    let host = if q.profile == shapes::StepProfile::Transformers {
        "host (libtorch dispatch and launch, and Python + framework: split below)"
    } else {
        "host dispatch+launch"
    };
    say!(
        "  {host} {:.3} ms, kernels {:.3} ms per step ({bound}); the GPU is busy ~{:.0}% of the step",
        pred.host_ns / 1e6,
        pred.device_ns / 1e6,
        100.0 * pred.device_ns / pred.step_ns
    );
    say!(
        "  (each op alone, back to back, would add up to {:.3} ms)",
        pred.serial_ns / 1e6
    );
    let bounded: Vec<_> = pred.python_bounded().collect();
    if !bounded.is_empty() {
        let calls: usize = bounded.iter().map(|c| c.calls).sum();
        let upper: f64 = bounded.iter().map(|c| c.calls as f64 * c.per_call_ns).sum();
        let sites = match bounded.len() {
            1 => "1 site".to_string(),
            n => format!("{n} sites"),
        };
        say!(
            "  ({calls} Python calls a step at {sites} have no device time but their pipelined time, the interpreter's pace: their kernels are priced at the dispatch floor's where the run has it, and would add up to at most {:.3} ms)",
            upper / 1e6
        );
    }
}

/// Every priced call, costliest first: calls, per-call host and device times, its share.
fn components(pred: &Prediction) {
    say!(
        "{:<10} {:<13} {:<15} {:>6} {:>9} {:>9} {:>9} {:>8} {:>6}  {:<8} {:<9}",
        "op",
        "variant",
        "site",
        "calls",
        "µs/call",
        "host µs",
        "dev µs",
        "ms alone",
        "share",
        "source",
        "device"
    );
    // by cost: the question is where the time goes
    let mut by_cost: Vec<_> = pred.components.iter().collect();
    by_cost.sort_by(|a, b| {
        let t = |c: &&analysis::predict::Component| c.per_call_ns * c.calls as f64;
        t(b).total_cmp(&t(a))
    });
    for c in by_cost {
        let total = c.per_call_ns * c.calls as f64;
        say!(
            "{:<10} {:<13} {:<15} {:>6} {:>9.2} {:>9.2} {:>9.2} {:>8.3} {:>5.1}%  {:<8} {:<9}",
            c.op.map_or("unmeasured", |o| o.as_str()),
            c.variant,
            c.site,
            c.calls,
            c.per_call_ns / 1e3,
            c.host_ns / 1e3,
            c.device_ns / 1e3,
            total / 1e6,
            100.0 * total / pred.serial_ns,
            c.source.as_str(),
            c.device_source.as_str()
        );
    }
}

/// The three costliest ops, each op's sites together, against the calls' sum alone.
pub(super) fn costliest(pred: &Prediction) {
    let mut by: std::collections::BTreeMap<&str, f64> = Default::default();
    for c in &pred.components {
        *by.entry(c.op.map_or("unmeasured", |o| o.as_str()))
            .or_default() += c.per_call_ns * c.calls as f64;
    }
    let mut ops: Vec<(&str, f64)> = by.into_iter().collect();
    ops.sort_by(|a, b| b.1.total_cmp(&a.1));
    let top: Vec<String> = ops
        .iter()
        .take(3)
        .map(|(op, ns)| {
            format!(
                "{op} {:.3} ms ({:.0}%)",
                ns / 1e6,
                100.0 * ns / pred.serial_ns
            )
        })
        .collect();
    say!(
        "costliest ops (each op's sites together; `share`: of the calls' {:.3} ms alone): {}",
        pred.serial_ns / 1e6,
        top.join(", ")
    );
}

/// Where the components' prices came from, and what the unmeasured calls are.
pub(super) fn sources(q: &Query, pred: &Prediction) {
    let count = |s: Source| pred.components.iter().filter(|c| c.source == s).count();
    // eltwise sites of a run from before that crate: priced at the floors, as then
    let sites_at_floor = pred
        .components
        .iter()
        .filter(|c| c.op.is_some() && c.source == Source::Floor)
        .count();
    let memory = match count(Source::Cold) {
        0 => String::new(),
        cold => format!(", {cold} with their state read from memory (pipelined_cold)"),
    };
    say!(
        "sources: {} sites measured at this batch{memory}, {} from fits, {} kinds of call priced at the dispatch floors{}:",
        count(Source::Measured),
        count(Source::Fit),
        count(Source::Floor),
        if sites_at_floor > 0 {
            format!(" ({sites_at_floor} of them eltwise sites this run has no rows for)")
        } else {
            String::new()
        }
    );
    for u in &pred.plan.other {
        say!("  {:<16} {}", u.name, u.what);
    }
    if let Some(l) = pred.sequence {
        let (variant, in_sequence, alone) = q.profile.layer_context();
        say!(
            "  {:<16} what one decoder layer's calls cost more in their sequence than each repeated alone, as an op case repeats it, beyond what the rows price for reading their state from memory (decode/{variant} {in_sequence} − {alone} at B={} − memory: {:.3} − {:.3} − {:.3} ms per layer, floored at 0); on the CPU the calls' times add up, so the step is priced with it",
            analysis::predict::IN_SEQUENCE,
            l.batch,
            l.in_sequence_ns / 1e6,
            l.alone_ns / 1e6,
            l.memory_ns / 1e6
        );
    }
}

/// What a step of `ns` gives: decode tokens/s, or a prefill's time to first token and
/// prompt tokens/s.
pub(super) fn rate(q: &Query, ns: f64) -> String {
    let tokens = q.step().tokens() as f64;
    match q.phase {
        rundir::Phase::Decode => format!("{:.1} tokens/s", tokens / (ns * 1e-9)),
        rundir::Phase::Prefill => format!(
            "time to first token {:.3} ms, {:.0} prompt tokens/s",
            ns / 1e6,
            tokens / (ns * 1e-9)
        ),
    }
}

/// The measured step (and its device time) beside the prediction, where the run has it.
pub(super) fn measured_step(q: &Query, pred: &Prediction) {
    // the median's interval, where the row has one (the fast state's quantile has none)
    fn measured(row: Option<&rundir::ResultRow>) -> Option<(&rundir::ResultRow, f64, String)> {
        row.and_then(|r| {
            let ci = match (r.ci_low_ns, r.ci_high_ns) {
                (Some(lo), Some(hi)) => format!(" [{:.3}, {:.3}]", lo / 1e6, hi / 1e6),
                _ => String::new(),
            };
            Some((r, r.median_ns?, ci))
        })
    }
    if let Some((row, m, ci)) = measured(pred.measured.as_ref()) {
        say!(
            "measured ({}): {:.3} ms/step{ci}, {}; predicted / measured = {}",
            if q.profile == shapes::StepProfile::Transformers {
                "scripts/peer.py, HF transformers"
            } else {
                "decode crate"
            },
            m / 1e6,
            rate(q, m),
            agreement(pred.step_ns, row)
        );
        if let (Some(n), Some(cv)) = (row.executions.filter(|n| *n > 1), row.exec_cv) {
            say!(
                "  over {n} executions (processes): their medians' CV {:.1}%, the step's own drift between processes",
                100.0 * cv
            );
        }
    }
    if pred.gpu {
        if let Some((row, m, ci)) = measured(pred.measured_device.as_ref()) {
            say!(
                "measured device time of the step (GPU events, decode crate): {:.3} ms{ci}; predicted kernels / measured = {}",
                m / 1e6,
                ratio(pred.device_ns, m)
            );
            if let Some(n) = row.uncovered_chunks.filter(|n| *n > 0) {
                say!(
                    "  upper bound: in {n} chunks the host's enqueue outlasted the lead, so GPU idle time waiting for the host is included"
                );
            }
        }
    }
}

/// predicted / measured, with the measurement's interval beside it where the row has one
/// (a ±10% interval or wider, and an error inside it: not resolved).
pub(super) fn agreement(predicted: f64, row: &rundir::ResultRow) -> String {
    let Some(m) = row.median_ns.filter(|m| *m > 0.0) else {
        return "-".into();
    };
    let r = predicted / m;
    let err = 100.0 * (r - 1.0);
    match (row.ci_low_ns, row.ci_high_ns) {
        (Some(lo), Some(hi)) => {
            let half = 100.0 * (hi - lo) / 2.0 / m;
            let resolved = if err.abs() <= half && half > 10.0 {
                ": agreement not resolved"
            } else {
                ""
            };
            format!("{r:.3} ({err:+.1}%; the measured interval ±{half:.0}%{resolved})")
        }
        _ => format!("{r:.3} ({err:+.1}%)"),
    }
}

/// How the host costs were composed, and the step under the other host models beside it.
pub fn host_model(
    q: &Query,
    pred: &Prediction,
    others: &[(analysis::predict::HostModel, Prediction)],
) {
    let mut parts = Vec::new();
    match pred.host_speed {
        Some(analysis::predict::HostSpeed::Control { ns, from_step }) => parts.push(format!(
            "scaled to one host speed (control {:.2} µs per add: {})",
            ns / 1e3,
            if from_step {
                "the measured step's"
            } else {
                "the run's median"
            }
        )),
        Some(analysis::predict::HostSpeed::Layer { batch, scale }) => {
            let (_, _, alone) = q.profile.layer_context();
            parts.push(format!(
                "× {scale:.3} to the step's own process (its layer's calls each alone, {alone} at B={batch}, over what the rows price them at)"
            ))
        }
        Some(analysis::predict::HostSpeed::Beside {
            batch,
            scale,
            paired,
        }) => {
            let (_, site) = q.profile.layer_beside();
            let read = if paired {
                "read against the step sample after each"
            } else {
                "its median"
            };
            parts.push(format!(
                "× {scale:.3} to the step's own samples (one decoder layer timed before each of them, {site} at B={batch}, {read}, over what the rows price its calls at; in sequence, so no context factor on top)"
            ))
        }
        None => {}
    }
    if let Some(c) = pred.context {
        parts.push(match c.from {
            analysis::predict::ContextFrom::Floors => format!(
                "× {:.3}, the context factor (floor mixed / blocked: a call among other kinds of call over the same call repeated)",
                c.factor
            ),
            analysis::predict::ContextFrom::Layer { batch } => {
                let (_, sequence, alone) = q.profile.layer_context();
                format!(
                    "× {:.3}, the context factor (one decoder layer's calls in sequence over each repeated alone, {sequence} / {alone} at B={batch})",
                    c.factor
                )
            }
        });
    }
    say!(
        "  host model {}: host costs {}",
        q.host.as_str(),
        if parts.is_empty() {
            "as each row measured them alone".to_string()
        } else {
            parts.join(", ")
        }
    );
    let measured = pred.measured.as_ref().and_then(|r| r.median_ns);
    for (m, p) in others {
        say!(
            "  host model {} (--host-model {}): {:.3} ms/step{}",
            m.as_str(),
            m.as_str(),
            p.step_ns / 1e6,
            measured.map_or(String::new(), |s| format!(
                "; predicted / measured = {}",
                ratio(p.step_ns, s)
            ))
        );
    }
}

/// The step priced in the other host state, against the measured step in that state.
pub fn host_state(state: HostState, p: &Prediction, measured: Option<f64>) {
    say!(
        "  host state {} (--host-state {}): {:.3} ms/step{}",
        state.as_str(),
        state.as_str(),
        p.step_ns / 1e6,
        measured.map_or(String::new(), |s| format!(
            ", the measured step {:.3} ms; predicted / measured = {}",
            s / 1e6,
            ratio(p.step_ns, s)
        ))
    );
}

/// What CUDA/HIP graphs would give: the step priced from `graph`-mode rows beside the
/// eager prediction, and the graphed step the decode crate measured, where the run has it.
pub fn graph_outlook(q: &Query, eager: &Prediction, g: &analysis::explain::Measured) {
    let graph = &g.prediction;
    say!(
        "with graphs (the step captured once and replayed): predicted {:.3} ms/step, {:.1} tokens/s, {:.2}× the eager {} prediction",
        graph.step_ns / 1e6,
        graph.tokens_per_s(),
        eager.step_ns / graph.step_ns,
        q.mode
    );
    if let Some(m) = g.measured_ns {
        say!(
            "  measured graphed step (decode crate, graph mode): {:.3} ms; predicted / measured = {}",
            m / 1e6,
            ratio(graph.step_ns, m)
        );
    }
}

/// The traced step beside the plan: kernel counts, device time, calls the plan lacks.
pub fn step_check(pred: &Prediction, c: &analysis::traced::StepCheck) {
    say!(
        "traced step (trace pass): {} kernels, device {}; plan: {} kernels, predicted kernels {:.3} ms",
        c.traced_kernels,
        c.traced_device_ns
            .map_or("-".into(), |d| format!("{:.3} ms", d / 1e6)),
        c.planned_kernels.map_or_else(
            || format!("? (untraced cases: {})", c.untraced.join(", ")),
            |k| k.to_string()
        ),
        pred.device_ns / 1e6
    );
    for (op, traced, planned) in &c.unplanned {
        say!("  in the trace, not in the plan: {op} {traced} per step (plan: {planned})");
    }
}

/// The lines under a row of what would help: its priced interval, how a derived figure was
/// made, and why it cannot run here.
fn row_notes(l: &analysis::help::Lever, base: Option<&analysis::help::Lever>) {
    if let Some(b) = base.filter(|b| l.no_gain(b)) {
        say!(
            "    no gain here: {:.3}× the step as it is{}; ranked below every change that gains",
            l.gain(b).unwrap_or(1.0),
            if l.interval.is_some() {
                ", its priced interval holding it"
            } else {
                ""
            }
        );
    }
    if let Some((lo, hi)) = l.interval {
        say!(
            "    priced interval: {:.3} to {:.3} ms/step ({:.1} to {:.1} tokens/s)",
            lo / 1e6,
            hi / 1e6,
            l.batch as f64 * 1e9 / hi,
            l.batch as f64 * 1e9 / lo
        );
    }
    if let Some(how) = &l.derived {
        say!("    (d) derived, not measured with it: {how}");
    }
    if !matches!(l.here, analysis::help::Here::Runs(_)) {
        say!("    here {}: {}", l.here.word(), l.here.why());
    }
}

/// What would help, ranked: each change's predicted step and tokens/s, its gain over the
/// step as it is, and its measured counterpart; the unpriced ones say what to run.
pub fn what_would_help(levers: &[analysis::help::Lever], bound: &analysis::help::Lever) {
    let as_is = levers.iter().find(|l| l.name == analysis::help::AS_IS);
    let base = as_is.and_then(|l| l.tokens_per_s());
    let batch = levers
        .iter()
        .find(|l| l.name == analysis::help::AS_IS)
        .map_or(1, |l| l.batch);
    say!(
        "\nwhat would help your {batch} sequence{} (ranked by the gain over the step as it is; none ranks a change that gains nothing above one that gains):",
        if batch == 1 { "" } else { "s" }
    );
    say!(
        "  {:<42} {:>9} {:>12} {:>12} {:>7} {:>10} {:>4}  what to do",
        "change",
        "ms/step",
        "tok/s in all",
        "tok/s/stream",
        "gain",
        "measured",
        "here"
    );
    let mut more = false;
    for l in levers {
        if l.batch != batch && !more {
            more = true;
            say!(
                "  serving more sequences a step instead (gain: tokens/s in all; a stream's own tokens/s beside it):"
            );
        }
        let gain = match (l.tokens_per_s(), base) {
            (Some(t), Some(b)) => format!("{:.2}×", t / b),
            _ => "-".into(),
        };
        // a figure derived from others is marked so, and says how below the row
        let mark = if l.derived.is_some() { " (d)" } else { "" };
        let measured = l
            .measured_ns
            .map_or("-".into(), |m| format!("{:.3}{mark}", m / 1e6));
        // a change measured in pairs says what the pair found
        let name = match l.verdict {
            Some(v) => format!("{} ({})", l.name, v.as_str()),
            None => l.name.clone(),
        };
        match l.step_ns() {
            Some(ns) if l.predicted_ns.is_some() || l.unpriced.is_none() => say!(
                "  {:<42} {:>9.3} {:>12.1} {:>12.1} {:>7} {:>10} {:>4}  {}",
                name,
                ns / 1e6,
                l.tokens_per_s().unwrap_or_default(),
                l.per_stream().unwrap_or_default(),
                gain,
                measured,
                l.here.word(),
                l.action
            ),
            _ => {
                say!(
                    "  {:<42} {:>9} {:>12} {:>12} {:>7} {:>10} {:>4}  {}",
                    name,
                    "-",
                    l.measured_ns
                        .map_or("-".into(), |m| format!("{:.1}", l.batch as f64 * 1e9 / m)),
                    l.measured_ns
                        .map_or("-".into(), |m| format!("{:.1}", 1e9 / m)),
                    gain,
                    measured,
                    l.here.word(),
                    l.action,
                );
                say!("    not priced: {}", l.unpriced.as_deref().unwrap_or("-"));
            }
        }
        row_notes(l, as_is);
    }
    help_footer(levers, bound);
}

/// What would help's last lines: the `here` legend, predicted over measured where the run
/// measured a change, and the physical limit.
fn help_footer(levers: &[analysis::help::Lever], bound: &analysis::help::Lever) {
    say!(
        "  here: yes, the change can run on this stack; no, it cannot (why, below it); ?, nothing checked it (scripts/doctor)"
    );
    let checked: Vec<String> = levers
        .iter()
        .filter_map(|l| Some(format!("{} {:.2}", l.name, l.check()?)))
        .collect();
    if !checked.is_empty() {
        say!(
            "  predicted / measured where the run measured the change: {}",
            checked.join(", ")
        );
    }
    match (bound.step_ns(), bound.tokens_per_s()) {
        (Some(ns), Some(t)) => say!(
            "  the physical limit, estimated, {}: {:.3} ms/step, {:.0} tokens/s ({:.0} per stream): the step's bytes at the measured copy rate; a step near it has little left to gain",
            bound.name,
            ns / 1e6,
            t,
            1e9 / ns
        ),
        _ => say!(
            "  the physical limit is not priced: {}",
            bound.unpriced.as_deref().unwrap_or("-")
        ),
    }
}
