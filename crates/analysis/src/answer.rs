//! The answer before the details: predict's first lines and report.md's opening, from the
//! step's prediction and the ranked levers of [`crate::help`].

use crate::help::{AS_IS, COMPILED, Lever, NO_COMPILE};
use crate::predict::{Prediction, Query};

/// The answer before the details, as lines: what the user's number is — where the run
/// prices generate() (the transformers profile, with the peer's rows), a token of
/// generate(), predicted and measured where the run has it, then the step's figure; else
/// the step's — and what bounds it, the best remedies for the query's own sequences with
/// what to do first, and one line on serving more sequences at once. `predict` prints them
/// first and report.md opens each device's section with them.
pub fn answer(
    q: &Query,
    pred: &Prediction,
    levers: &[Lever],
    generate: Option<&crate::generate::Generate>,
) -> Vec<String> {
    let rate = |t: f64| {
        if t >= 100.0 {
            format!("{t:.0}")
        } else {
            format!("{t:.1}")
        }
    };
    let as_is = levers.iter().find(|l| l.name == AS_IS);
    let measured = as_is
        .and_then(|l| l.measured_ns)
        .map_or(String::new(), |m| {
            format!(", {:.1} measured", q.batch as f64 * 1e9 / m)
        });
    let bound = if !pred.gpu {
        "on the CPU, its calls in turn".to_string()
    } else if pred.host_bound() {
        format!(
            "bound by the host (dispatch, launch, Python): the GPU is busy ~{:.0}% of the step",
            100.0 * pred.device_ns / pred.step_ns
        )
    } else {
        "bound by the kernels".to_string()
    };
    let step = format!(
        "{:.1} tokens/s predicted{measured}",
        q.batch as f64 * 1e9 / pred.step_ns
    );
    let mut out = match generate {
        Some(g) => {
            let m = g
                .measured
                .as_ref()
                .and_then(|r| r.median_ns)
                .map_or(String::new(), |m| {
                    format!(", {:.1} measured", g.batch as f64 * 1e9 / m)
                });
            vec![
                format!(
                    "answer: model.generate() gives {:.1} tokens/s predicted{m}; {bound}",
                    g.tokens_per_s()
                ),
                format!("  its forward step alone: {step} (the gains below are against it)"),
            ]
        }
        None => vec![format!("answer: {step}; {bound}")],
    };
    let base = as_is.and_then(Lever::tokens_per_s);
    let gain = |l: &Lever| Some(l.tokens_per_s()? / base?);
    let mine = top_levers(levers, q.batch, &gain);
    let who = match q.batch {
        1 => "your sequence".to_string(),
        b => format!("your {b} sequences"),
    };
    match mine.first() {
        Some(top) => {
            let ranked: Vec<String> = mine
                .iter()
                .map(|l| {
                    format!(
                        "{} {} tokens/s ({:.2}×)",
                        l.name,
                        rate(l.tokens_per_s().unwrap_or_default()),
                        gain(l).unwrap_or_default()
                    )
                })
                .collect();
            out.push(format!("  faster for {who}: {}", ranked.join("; ")));
            out.push(format!("  first: {}", top.action));
        }
        None => out.push(format!(
            "  nothing this run prices makes {who} faster (what would help, below)"
        )),
    }
    if let Some(more) = levers
        .iter()
        .find(|l| l.batch != q.batch && l.tokens_per_s().is_some())
    {
        out.push(format!(
            "  serving more sequences instead: {} gives {} tokens/s in all, {:.1} a sequence",
            more.name,
            rate(more.tokens_per_s().unwrap_or_default()),
            more.per_stream().unwrap_or_default()
        ));
    }
    out
}

/// At most this many remedies on the answer's line.
const TOP: usize = 3;

/// The remedies for `batch`'s own sequences that gain over 1%, best first, at most [`TOP`].
/// Graphs two ways (without compile, with torch.compile) share one price: the one that ranks
/// first is named (one that runs here ranks before one that cannot).
fn top_levers<'a>(
    levers: &'a [Lever],
    batch: usize,
    gain: &dyn Fn(&Lever) -> Option<f64>,
) -> Vec<&'a Lever> {
    let mut graphs_named = false;
    levers
        .iter()
        .filter(|l| l.batch == batch && l.name != AS_IS)
        .filter(|l| gain(l).is_some_and(|g| g > 1.01))
        .filter(|l| {
            let graphs = l.name == NO_COMPILE || l.name == COMPILED;
            let first = !(graphs && graphs_named);
            graphs_named |= graphs;
            first
        })
        .take(TOP)
        .collect()
}
