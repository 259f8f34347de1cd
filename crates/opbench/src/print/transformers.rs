//! The transformers profile's printout: the predicted and measured splits of your HF
//! step (libtorch against Python + framework) and generate()'s token, priced and measured.

use super::*;

/// The transformers step split three ways: kernels, libtorch's dispatch (the same calls
/// made from tch) and Python + the framework (the rest of the host's time), predicted and,
/// where the run has both steps, measured.
pub fn python_split(
    q: &Query,
    pred: &Prediction,
    t: &analysis::explain::Transformers,
    s: &analysis::predict::Split,
) {
    let pct = |v: f64| 100.0 * v / pred.step_ns;
    let host = s.dispatch_ns + s.python_ns;
    let kernels = s.kernels_ns.map_or(String::new(), |k| {
        format!(
            "; kernels {:.3} ms ({:.0}% of the step) {}",
            k / 1e6,
            pct(k),
            if pred.host_bound() {
                "run under the host's time, hidden"
            } else {
                "set the step's pace"
            }
        )
    });
    say!(
        "split of the predicted step: {} {:.3} ms ({:.0}%) + Python + framework {:.3} ms ({:.0}%) = the host's {:.3} ms ({:.0}%){kernels}",
        if pred.gpu {
            "libtorch dispatch and launch"
        } else {
            "libtorch calls (dispatch and work)"
        },
        s.dispatch_ns / 1e6,
        pct(s.dispatch_ns),
        s.python_ns / 1e6,
        pct(s.python_ns),
        host / 1e6,
        pct(host)
    );
    measured_split(t);
    if let Some(analysis::explain::LayerReading {
        own,
        flat_ns: flat,
        calls_ns: calls,
    }) = t.layer
    {
        let whole = if own.whole == "layer" {
            "one layer called as the model calls it"
        } else {
            "every layer called in turn as the model calls them"
        };
        say!(
            "one decoder layer (scripts/peer.py, interleaved): {whole} {:.3} ms, its calls written out flat {:.3} ms: transformers' own code adds {:.3} ms per layer; one layer's calls flat {:.3} ms, each alone {:.3} ms: in sequence the calls cost {:.2}× what they cost alone",
            own.whole_ns / 1e6,
            own.parts_ns / 1e6,
            (own.whole_ns - own.parts_ns) / 1e6,
            flat / 1e6,
            calls / 1e6,
            flat / calls,
        );
    }
    if let Some(s) = &t.slope {
        let layers = q.model.num_hidden_layers;
        let head = format!(
            "by layer count (the HF step with {} and {} layers: {:.3} and {:.3} ms)",
            s.few.0,
            s.many.0,
            s.few.1 / 1e6,
            s.many.1 / 1e6
        );
        if s.resolved == Some(false) {
            say!("{head}: their intervals overlap, so no layer's cost is read from them");
        } else {
            // the line through two short steps, carried to the model's layers, against the
            // model's own step: a check of the layer reading, not a part of the prediction
            let measured = t.step_ns.map_or(String::new(), |hf| {
                format!(
                    " (measured {:.3} ms: the line through the short steps reads {:.2}× it; \
                     the prediction does not use it)",
                    hf / 1e6,
                    s.step_ns(layers) / hf
                )
            });
            let unsure = if s.resolved.is_none() {
                " (no intervals in this host state: whether the difference is noise is read in the typical state)"
            } else {
                ""
            };
            say!(
                "{head}: a layer inside the step {:.3} ms, of which its calls as priced {:.3} ms; the step's own work {:.3} ms; {layers} layers {:.3} ms{measured}{unsure}",
                s.per_layer_ns / 1e6,
                pred.per_layer_ns(layers) / 1e6,
                s.per_step_ns / 1e6,
                s.step_ns(layers) / 1e6,
            );
        }
    }
}

/// The transformers step against the same step in tch, measured: Python + framework as
/// their difference, in the predicted split's host state where both processes' host
/// speeds are known.
fn measured_split(t: &analysis::explain::Transformers) {
    if let (Some(hf), Some(tch)) = (t.step_ns, t.tch_step_ns) {
        // the measured split in the predicted one's host state, where the two processes'
        // host speeds are known; else as measured, each in its own process
        match t.tch_at_step_host {
            Some(shift) => say!(
                "measured, in the same host state: the transformers step {:.3} ms, the same step in tch \
                 (decode crate, hf-eager) {:.3} ms in its own process (host ×{:.2} the rows'), \
                 {:.3} ms at the transformers step's (×{:.2}): Python + framework {:.3} ms ({:.0}% of the step)",
                hf / 1e6,
                tch / 1e6,
                shift.tch_scale,
                shift.ns / 1e6,
                shift.step_scale,
                (hf - shift.ns) / 1e6,
                100.0 * (hf - shift.ns) / hf
            ),
            None => say!(
                "measured: the transformers step {:.3} ms, the same step in tch (decode crate, hf-eager) {:.3} ms: Python + framework {:.3} ms ({:.0}% of the step){}",
                hf / 1e6,
                tch / 1e6,
                (hf - tch) / 1e6,
                100.0 * (hf - tch) / hf,
                if hf < tch {
                    "; negative: two steps of two processes, inside their spread, not a saving"
                } else {
                    ""
                }
            ),
        }
    }
}

/// generate() per new token — the user's number — priced from the step, split four ways,
/// against the peer's generate() from the step's cache, and the peer's generate() rows as
/// the user calls it (from a prompt: as it is, static cache, graphs).
pub fn generate(
    q: &Query,
    pred: &Prediction,
    t: &analysis::explain::Transformers,
    g: &analysis::generate::Generate,
) {
    let split = t.split.as_ref();
    let extra = match g.extra {
        analysis::generate::Extra::Measured { sync_ns, inputs_ns } => format!(
            " + the per-token sync {:.3} ms + generate()'s inputs to the forward {:.3} ms (scripts/peer.py: step_synced − step, step_as_generate − step_synced{})",
            sync_ns / 1e6,
            inputs_ns / 1e6,
            if sync_ns < 0.0 || inputs_ns < 0.0 {
                "; a negative part is a difference of two measured rows inside their noise, not a saving"
            } else {
                ""
            }
        ),
        analysis::generate::Extra::Tail { ns } if ns > 0.0 => format!(
            " + the last kernel's time the per-token sync waits out {:.3} ms (the run lacks the peer's step_synced rows)",
            ns / 1e6
        ),
        analysis::generate::Extra::Tail { .. } => String::new(),
    };
    say!(
        "generate() per new token (the user's number): predicted {:.3} ms, {:.1} tokens/s = the step as generate() runs it {:.3} ms (host {:.3} ms, kernels {:.3} ms, less its argmax){extra} + generate()'s own loop {:.3} ms (scripts/peer.py's generate_loop: its Python, logits processing, stopping checks and the host's sync with the device every token)",
        g.token_ns / 1e6,
        g.tokens_per_s(),
        g.step_ns / 1e6,
        g.step_host_ns / 1e6,
        g.step_device_ns / 1e6,
        g.loop_ns / 1e6,
    );
    if let Some(split) = split {
        let [k, d, p, l] = g.parts(pred, split);
        say!(
            "  where a token's time goes: kernels beyond the host {:.3} ms, libtorch {} {:.3} ms, Python + transformers' step {:.3} ms, generate()'s own cost (loop, sync, inputs) {:.3} ms",
            k / 1e6,
            if pred.gpu {
                "dispatch and launch"
            } else {
                "calls (dispatch and work)"
            },
            d / 1e6,
            p / 1e6,
            l / 1e6
        );
    }
    if let Some((row, m)) = g.measured.as_ref().and_then(|r| Some((r, r.median_ns?))) {
        let ci = g
            .measured
            .as_ref()
            .and_then(|r| {
                Some(format!(
                    " [{:.3}, {:.3}]",
                    r.ci_low_ns? / 1e6,
                    r.ci_high_ns? / 1e6
                ))
            })
            .unwrap_or_default();
        say!(
            "  measured (scripts/peer.py, generate() from the step's cache of L, interleaved with the step): {:.3} ms{ci}, {:.1} tokens/s; predicted / measured = {}",
            m / 1e6,
            q.batch as f64 * 1e9 / m,
            agreement(g.token_ns, row)
        );
    }
    let user: Vec<String> = t
        .from_prompt
        .iter()
        .map(|(how, ns)| format!("{how} {:.1} tokens/s", q.batch as f64 * 1e9 / ns))
        .collect();
    if !user.is_empty() {
        say!(
            "  generate() from a prompt of 16, prefill included (scripts/peer.py): {}",
            user.join(", ")
        );
    }
}
